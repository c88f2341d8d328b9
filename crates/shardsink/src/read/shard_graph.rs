//! [`ShardGraph`]: the stream's shards, their parent/child links and their
//! leases — and the resharding rules decided from them.
//!
//! - A child shard is worked on only after every parent was read to the end
//!   (its lease at `SHARD_END`), so that for every partition key the parent's
//!   records precede the child's.
//! - A child shard's lease starts at `TRIM_HORIZON`, whatever the initial
//!   position (its first record follows its parents' last).
//! - A lease at `SHARD_END` is deleted once the shard has left the stream, or
//!   once its retention has passed and every child has made progress — and a
//!   shard with a descendant that made progress never gets a lease again, so
//!   deleting it cannot make it be read twice.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use clap::ValueEnum;
use shard_lease::{Checkpoint, Lease};

use crate::aws::ShardInfo;

/// Where a shard without a checkpoint starts (GetShardIterator
/// `ShardIteratorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InitialPosition {
    /// The oldest record still in the shard.
    #[value(name = "TRIM_HORIZON")]
    TrimHorizon,
    /// Records added after the shard is first read.
    #[value(name = "LATEST")]
    Latest,
    /// The first record at or after --initial-timestamp.
    #[value(name = "AT_TIMESTAMP")]
    AtTimestamp,
}

/// How a new lease starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewLease {
    /// At the configured initial position: a shard without parents in the
    /// stream.
    InitialPosition,
    /// At `TRIM_HORIZON`: a child of a split or merge.
    Child,
}

/// Shards (from ListShards and `ChildShards`) and lease rows, indexed.
#[derive(Debug)]
pub struct ShardGraph<'a> {
    listed: HashMap<&'a str, &'a ShardInfo>,
    leases: HashMap<&'a str, &'a Lease>,
    children: HashMap<&'a str, Vec<&'a str>>,
}

impl<'a> ShardGraph<'a> {
    /// Indexes `shards` and `leases`; parent links come from both.
    pub fn new(shards: &'a [ShardInfo], leases: &'a [Lease]) -> Self {
        let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
        let links = shards
            .iter()
            .flat_map(|s| {
                s.parent_shard_ids
                    .iter()
                    .map(move |p| (p.as_str(), s.shard_id.as_str()))
            })
            .chain(leases.iter().flat_map(|l| {
                l.parent_shard_ids
                    .iter()
                    .map(move |p| (p.as_str(), l.lease_key.as_str()))
            }));
        for (parent, child) in links {
            let entry = children.entry(parent).or_default();
            if !entry.contains(&child) {
                entry.push(child);
            }
        }
        Self {
            listed: shards.iter().map(|s| (s.shard_id.as_str(), s)).collect(),
            leases: leases.iter().map(|l| (l.lease_key.as_str(), l)).collect(),
            children,
        }
    }

    /// Whether `shard_id` is in the stream's shard list.
    pub fn is_listed(&self, shard_id: &str) -> bool {
        self.listed.contains_key(shard_id)
    }

    /// Whether some descendant of `shard_id` (a child, or a child's child
    /// when the child's ended lease was deleted in turn) has a lease that
    /// moved past its start — proof that `shard_id` was read to its end,
    /// since a shard starts only after its parents ended.
    fn child_progressed(&self, shard_id: &str) -> bool {
        let mut seen: HashSet<&str> = HashSet::new();
        let mut next = vec![shard_id];
        while let Some(id) = next.pop() {
            for &child in self.children.get(id).into_iter().flatten() {
                if !seen.insert(child) {
                    continue;
                }
                if self.leases.get(child).is_some_and(|l| progressed(l)) {
                    return true;
                }
                next.push(child);
            }
        }
        false
    }

    /// Whether every parent of `lease`'s shard is done: it left the stream
    /// (nothing of it can be read any more, read to its end or not), its
    /// lease is at `SHARD_END`, or it has no lease and a child that made
    /// progress (its ended lease was already deleted).
    pub fn parents_done(&self, lease: &Lease) -> bool {
        lease.parent_shard_ids.iter().all(|parent| {
            !self.is_listed(parent)
                || match self.leases.get(parent.as_str()) {
                    Some(parent_lease) => parent_lease.checkpoint.is_shard_end(),
                    None => self.child_progressed(parent),
                }
        })
    }

    /// Whether a worker may work on `lease` now: not ended, still in the
    /// stream, parents done.
    pub fn is_workable(&self, lease: &Lease) -> bool {
        !lease.checkpoint.is_shard_end()
            && self.is_listed(&lease.lease_key)
            && self.parents_done(lease)
    }

    /// How a listed shard without a lease should get one; `None` when it has
    /// one, or when it was fully read before (a child made progress).
    pub fn new_lease(&self, shard: &ShardInfo) -> Option<NewLease> {
        if self.leases.contains_key(shard.shard_id.as_str())
            || self.child_progressed(&shard.shard_id)
        {
            return None;
        }
        let has_parent_in_stream = shard
            .parent_shard_ids
            .iter()
            .any(|p| self.is_listed(p) || self.leases.contains_key(p.as_str()));
        Some(if has_parent_in_stream {
            NewLease::Child
        } else {
            NewLease::InitialPosition
        })
    }

    /// Whether `lease` may be deleted at `now`: its shard left the stream
    /// (whatever its checkpoint: nothing of it can be read any more), or it
    /// is at `SHARD_END`, `retention` has passed since it ended and every
    /// child of it has made progress.
    pub fn is_removable(&self, lease: &Lease, now: SystemTime, retention: Duration) -> bool {
        if !self.is_listed(&lease.lease_key) {
            return true;
        }
        if !lease.checkpoint.is_shard_end() {
            return false;
        }
        let retained = lease
            .shard_ended_at
            .as_deref()
            .and_then(|text| humantime::parse_rfc3339_weak(text).ok())
            .is_none_or(|ended| now.duration_since(ended).unwrap_or_default() < retention);
        let children = self.children.get(lease.lease_key.as_str());
        let all_progressed = children.is_some_and(|children| {
            !children.is_empty()
                && children
                    .iter()
                    .all(|c| self.leases.get(c).is_some_and(|l| progressed(l)))
        });
        !retained && all_progressed
    }
}

/// A lease whose checkpoint moved past its initial position.
fn progressed(lease: &Lease) -> bool {
    matches!(
        lease.checkpoint,
        Checkpoint::SequenceNumber(_) | Checkpoint::ShardEnd
    )
}

#[cfg(test)]
mod tests {
    use sequence_range::SequenceNumber;

    use super::*;

    fn shard(id: &str, parents: &[&str]) -> ShardInfo {
        ShardInfo {
            shard_id: id.to_owned(),
            parent_shard_ids: parents.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    fn lease(id: &str, checkpoint: Checkpoint, parents: &[&str]) -> Lease {
        Lease::new(
            id,
            checkpoint,
            parents.iter().map(|p| (*p).to_owned()).collect(),
        )
    }

    fn at(n: u64) -> Checkpoint {
        Checkpoint::SequenceNumber(SequenceNumber::from(n))
    }

    #[test]
    fn children_wait_for_every_parent_of_a_merge() {
        let shards = [
            shard("p1", &[]),
            shard("p2", &[]),
            shard("c", &["p1", "p2"]),
        ];
        let leases = [
            lease("p1", Checkpoint::ShardEnd, &[]),
            lease("p2", at(5), &[]),
            lease("c", Checkpoint::TrimHorizon, &["p1", "p2"]),
        ];
        let graph = ShardGraph::new(&shards, &leases);
        assert!(!graph.is_workable(&leases[2]), "p2 is not done");
        let leases = [
            leases[0].clone(),
            lease("p2", Checkpoint::ShardEnd, &[]),
            leases[2].clone(),
        ];
        let graph = ShardGraph::new(&shards, &leases);
        assert!(graph.is_workable(&leases[2]));
        assert!(
            !graph.is_workable(&leases[0]),
            "an ended shard is not worked on"
        );
    }

    #[test]
    fn a_parent_that_left_the_stream_before_its_end_does_not_block_its_children() {
        // The consumer was down past retention: the parent's lease is not at
        // SHARD_END, and the parent is gone from the stream.
        let shards = [shard("c", &["gone"])];
        let leases = [
            lease("gone", at(5), &[]),
            lease("c", Checkpoint::TrimHorizon, &["gone"]),
        ];
        let graph = ShardGraph::new(&shards, &leases);
        assert!(graph.is_workable(&leases[1]), "the child starts");
        assert!(graph.is_removable(&leases[0], SystemTime::now(), Duration::from_secs(86_400)));
    }

    #[test]
    fn a_parent_that_left_the_stream_is_done() {
        let shards = [shard("c", &["gone"])];
        let leases = [lease("c", Checkpoint::TrimHorizon, &["gone"])];
        assert!(ShardGraph::new(&shards, &leases).parents_done(&leases[0]));
    }

    #[test]
    fn a_parent_without_a_lease_but_in_the_stream_is_not_done() {
        let shards = [shard("p", &[]), shard("c", &["p"])];
        let leases = [lease("c", Checkpoint::TrimHorizon, &["p"])];
        let graph = ShardGraph::new(&shards, &leases);
        assert!(!graph.parents_done(&leases[0]));
        assert_eq!(graph.new_lease(&shards[0]), Some(NewLease::InitialPosition));
        assert_eq!(graph.new_lease(&shards[1]), None, "has one");
    }

    #[test]
    fn a_grandparent_read_to_its_end_gets_no_lease_again() {
        // Two reshards: g split into c (and another), c split into d. The
        // ended leases of g and c were deleted; g and c are still listed.
        let shards = [shard("g", &[]), shard("c", &["g"]), shard("d", &["c"])];
        let leases = [lease("d", at(7), &["c"])];
        let graph = ShardGraph::new(&shards, &leases);
        assert_eq!(graph.new_lease(&shards[0]), None, "g was read to its end");
        assert_eq!(graph.new_lease(&shards[1]), None, "c was read to its end");

        // After a lost table nothing has progressed: each is read again, in
        // order (g at the initial position, its descendants from the start).
        let fresh = [lease("d", Checkpoint::TrimHorizon, &["c"])];
        let graph = ShardGraph::new(&shards, &fresh);
        assert_eq!(graph.new_lease(&shards[0]), Some(NewLease::InitialPosition));
        assert_eq!(graph.new_lease(&shards[1]), Some(NewLease::Child));
    }

    #[test]
    fn children_start_at_trim_horizon() {
        let shards = [shard("p", &[]), shard("c", &["p"])];
        let graph = ShardGraph::new(&shards, &[]);
        assert_eq!(graph.new_lease(&shards[1]), Some(NewLease::Child));
    }

    #[test]
    fn an_ended_lease_goes_after_retention_once_children_progressed() {
        let shards = [shard("p", &[]), shard("c1", &["p"]), shard("c2", &["p"])];
        let mut parent = lease("p", Checkpoint::ShardEnd, &[]);
        parent.shard_ended_at = Some("2026-11-21T05:00:00Z".to_owned());
        let now = humantime::parse_rfc3339("2026-11-21T07:00:00Z").unwrap();
        let hour = Duration::from_secs(3_600);
        let half = [
            parent.clone(),
            lease("c1", at(3), &["p"]),
            lease("c2", Checkpoint::TrimHorizon, &["p"]),
        ];
        assert!(
            !ShardGraph::new(&shards, &half).is_removable(&parent, now, hour),
            "c2 has not started"
        );
        let both = [
            parent.clone(),
            lease("c1", at(3), &["p"]),
            lease("c2", at(9), &["p"]),
        ];
        let graph = ShardGraph::new(&shards, &both);
        assert!(graph.is_removable(&parent, now, hour));
        assert!(
            !graph.is_removable(&parent, now, 3 * hour),
            "retention not over"
        );
        // Once deleted, the parent is not given a new lease.
        let after = [both[1].clone(), both[2].clone()];
        assert_eq!(ShardGraph::new(&shards, &after).new_lease(&shards[0]), None);
        assert!(ShardGraph::new(&shards, &after).parents_done(&after[0]));
    }

    #[test]
    fn an_ended_lease_of_a_shard_gone_from_the_stream_goes_at_once() {
        let parent = lease("p", Checkpoint::ShardEnd, &[]);
        let graph = ShardGraph::new(&[], std::slice::from_ref(&parent));
        assert!(graph.is_removable(&parent, SystemTime::now(), Duration::from_secs(86_400)));
    }
}
