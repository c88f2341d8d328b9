//! [`plan_takes`]: which leases one worker takes or steals in one round, so
//! that leases spread evenly over live workers.
//!
//! The rule is the KCL's (`DynamoDBLeaseTaker.computeLeasesToTake` and
//! `chooseLeasesToSteal` in amazon-kinesis-client):
//! - target = ⌈leases / workers⌉, workers being every owner of a live lease,
//!   every worker with a live heartbeat, and this one;
//! - take available leases (free or expired) up to the target;
//! - only when none is available, steal one lease from the most loaded
//!   worker, if it holds more than the target, or exactly the target while
//!   this worker needs more than one. At most one steal per round.
//!
//! Every worker following this converges to counts that differ by at most
//! one (e.g. 3/3/2 for 8 shards over 3 workers), and a steal never moves a
//! lease back and forth.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::Lease;

/// What to do this round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TakePlan {
    /// Available leases to take (free or expired), at most what the target
    /// allows.
    pub take: Vec<Lease>,
    /// A lease to steal from the most loaded worker.
    pub steal: Option<Lease>,
    /// The per-worker target used.
    pub target: usize,
    /// Workers counted.
    pub workers: usize,
}

/// Plans one round for `worker_id`.
///
/// - `leases`: the leases that may be worked on now (not ended, parents
///   done), whoever holds them;
/// - `live_workers`: workers known alive besides lease owners (heartbeats);
/// - `available`: whether a lease may be taken without stealing (no owner,
///   expired, or this worker's own lease from before a restart).
///
/// Available leases are tried in an order that differs per worker (a hash of
/// worker id and lease key), so workers starting together do not all race for
/// the same lease.
pub fn plan_takes(
    worker_id: &str,
    leases: &[Lease],
    live_workers: &BTreeSet<String>,
    available: impl Fn(&Lease) -> bool,
) -> TakePlan {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut free = Vec::new();
    for lease in leases {
        if available(lease) {
            free.push(lease);
        } else if let Some(owner) = lease.lease_owner.as_deref() {
            *counts.entry(owner).or_default() += 1;
        }
    }
    for worker in live_workers {
        counts.entry(worker.as_str()).or_default();
    }
    counts.entry(worker_id).or_default();
    let workers = counts.len();
    let mut plan = TakePlan {
        workers,
        target: leases.len().div_ceil(workers),
        ..TakePlan::default()
    };
    let mine = counts.get(worker_id).copied().unwrap_or(0);
    let needed = plan.target.saturating_sub(mine);
    if needed == 0 {
        return plan;
    }
    if !free.is_empty() {
        free.sort_by_key(|lease| spread(worker_id, &lease.lease_key));
        plan.take = free.into_iter().take(needed).cloned().collect();
        return plan;
    }
    // Most loaded worker (ties: smallest id, so every worker agrees).
    let Some((victim, most)) = counts
        .iter()
        .filter(|(worker, _)| **worker != worker_id)
        .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
    else {
        return plan;
    };
    let steal = *most > plan.target || (*most == plan.target && needed > 1);
    if steal {
        plan.steal = leases
            .iter()
            .filter(|lease| lease.lease_owner.as_deref() == Some(*victim))
            .min_by_key(|lease| spread(worker_id, &lease.lease_key))
            .cloned();
    }
    plan
}

fn spread(worker_id: &str, lease_key: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    (worker_id, lease_key).hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::Checkpoint;

    fn lease(i: usize, owner: Option<&str>) -> Lease {
        let mut lease = Lease::new(format!("shardId-{i:012}"), Checkpoint::TrimHorizon, vec![]);
        lease.lease_owner = owner.map(str::to_owned);
        lease
    }

    fn no_heartbeats() -> BTreeSet<String> {
        BTreeSet::new()
    }

    #[test]
    fn a_lone_worker_takes_everything_free() {
        let leases: Vec<Lease> = (0..8).map(|i| lease(i, None)).collect();
        let plan = plan_takes("a", &leases, &no_heartbeats(), |l| l.lease_owner.is_none());
        assert_eq!(plan.take.len(), 8);
        assert_eq!(plan.steal, None);
    }

    #[test]
    fn a_new_worker_steals_one_at_a_time_from_the_most_loaded() {
        let leases: Vec<Lease> = (0..8)
            .map(|i| lease(i, Some(if i < 5 { "a" } else { "b" })))
            .collect();
        let plan = plan_takes("c", &leases, &no_heartbeats(), |_| false);
        assert_eq!(plan.target, 3);
        assert!(plan.take.is_empty());
        assert_eq!(
            plan.steal.as_ref().and_then(|l| l.lease_owner.as_deref()),
            Some("a")
        );
    }

    #[test]
    fn balanced_counts_are_stable() {
        // 3/3/2: nobody steals.
        let owners = ["a", "a", "a", "b", "b", "b", "c", "c"];
        let leases: Vec<Lease> = owners
            .iter()
            .enumerate()
            .map(|(i, o)| lease(i, Some(o)))
            .collect();
        for worker in ["a", "b", "c"] {
            let plan = plan_takes(worker, &leases, &no_heartbeats(), |_| false);
            assert_eq!(
                (plan.take.len(), plan.steal.is_some()),
                (0, false),
                "{worker}"
            );
        }
    }

    #[test]
    fn a_heartbeat_makes_an_idle_worker_count() {
        let leases: Vec<Lease> = (0..4).map(|i| lease(i, Some("a"))).collect();
        let live: BTreeSet<String> = ["b".to_owned()].into();
        let plan = plan_takes("a", &leases, &live, |_| false);
        assert_eq!(
            (plan.workers, plan.target),
            (2, 2),
            "b is counted although it holds nothing"
        );
    }

    #[test]
    fn expired_leases_are_taken_before_stealing() {
        let mut leases: Vec<Lease> = (0..6).map(|i| lease(i, Some("a"))).collect();
        leases[5].lease_owner = Some("dead".to_owned());
        let plan = plan_takes("b", &leases, &no_heartbeats(), |l| {
            l.lease_owner.as_deref() == Some("dead")
        });
        assert_eq!(plan.take.len(), 1);
        assert_eq!(plan.steal, None);
    }

    /// Simulates workers taking turns until nothing changes.
    fn settle(shards: usize, workers: &[&str]) -> BTreeMap<String, usize> {
        let mut leases: Vec<Lease> = (0..shards).map(|i| lease(i, None)).collect();
        for _round in 0..(4 * shards + 10) {
            let mut changed = false;
            for worker in workers {
                let plan = plan_takes(worker, &leases, &no_heartbeats(), |l| {
                    l.lease_owner.is_none()
                });
                for taken in plan.take.iter().chain(plan.steal.iter()) {
                    let target = leases
                        .iter_mut()
                        .find(|l| l.lease_key == taken.lease_key)
                        .unwrap();
                    target.lease_owner = Some((*worker).to_owned());
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let mut counts = BTreeMap::new();
        for lease in &leases {
            *counts
                .entry(lease.lease_owner.clone().unwrap())
                .or_default() += 1;
        }
        counts
    }

    #[test]
    fn eight_shards_over_three_workers_settle_at_3_3_2() {
        let mut counts: Vec<usize> = settle(8, &["a", "b", "c"]).into_values().collect();
        counts.sort_unstable();
        assert_eq!(counts, vec![2, 3, 3]);
    }

    proptest! {
        #[test]
        fn any_start_settles_within_one(shards in 1usize..40, workers in 1usize..7) {
            let names: Vec<String> = (0..workers).map(|w| format!("w{w}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let counts = settle(shards, &refs);
            prop_assert_eq!(counts.values().sum::<usize>(), shards, "every lease owned");
            let max = counts.values().max().copied().unwrap_or(0);
            let min = if counts.len() < workers { 0 } else { counts.values().min().copied().unwrap_or(0) };
            prop_assert!(max - min <= 1, "counts {:?}", counts);
        }
    }
}
