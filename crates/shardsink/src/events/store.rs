//! What both event stores offer the shard task: decide a run of a shard's
//! user records against the accepted copies that precede them, and record
//! accepted copies decided elsewhere; and a shard's ancestors, whose
//! accepted copies it inherits.
//!
//! *Precede*: a copy of the same shard with a smaller (sequence number,
//! sub-sequence number) — so a replay of a batch sees exactly what the
//! first attempt saw, whatever that attempt stored about later records —
//! or a copy of an ancestor shard (a parent is read to its end before its
//! children); with the DynamoDB store also any copy of another shard
//! already recorded.

pub use event_store::lineage::{Candidate, Lineage, precedes_in_shard};

use crate::aws::ShardInfo;

/// How many generations of ancestors a shard inherits accepted copies from.
pub const ANCESTOR_GENERATIONS: usize = 3;

/// A shard's ancestors, nearest first: its `parents` and, as far as the
/// shard list knows them, their parents, up to [`ANCESTOR_GENERATIONS`].
pub fn ancestors(parents: &[String], shards: &[ShardInfo]) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut generation: Vec<String> = parents.to_vec();
    for _ in 0..ANCESTOR_GENERATIONS {
        let mut next = Vec::new();
        for id in generation {
            if found.contains(&id) {
                continue;
            }
            if let Some(shard) = shards.iter().find(|shard| shard.shard_id == id) {
                next.extend(shard.parent_shard_ids.iter().cloned());
            }
            found.push(id);
        }
        generation = next;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: &str, parents: &[&str]) -> ShardInfo {
        ShardInfo {
            shard_id: id.to_owned(),
            parent_shard_ids: parents.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    #[test]
    fn ancestors_are_found_nearest_first_and_bounded() {
        let shards = [
            shard("c", &["b1", "b2"]),
            shard("b1", &["a"]),
            shard("b2", &["a"]),
            shard("a", &["z"]),
            shard("z", &["y"]),
        ];
        assert_eq!(
            ancestors(&["b1".to_owned(), "b2".to_owned()], &shards),
            ["b1", "b2", "a", "z"]
        );
        assert!(ancestors(&[], &shards).is_empty());
        assert_eq!(ancestors(&["gone".to_owned()], &shards), ["gone"]);
    }
}
