//! What a decision is made on: a shard and the shards whose accepted
//! copies it inherits ([`Lineage`]), a user record to decide
//! ([`Candidate`]), and what *precedes* a candidate.
//!
//! *Precede*: a copy of the same shard with a smaller (sequence number,
//! sub-sequence number) — so a replay of a batch sees exactly what the
//! first attempt saw, whatever that attempt stored about later records —
//! or a copy of an ancestor shard (a parent is read to its end before its
//! children).

use std::sync::Arc;

use crate::rule::{AcceptedCopy, CopyRef, EventKey};

/// A shard and the shards whose accepted copies it inherits: its parents
/// and, as far as known, their parents (nearest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lineage {
    /// The shard being read (Kinesis `ShardId`).
    pub shard_id: Arc<str>,
    /// Its ancestors, nearest first.
    pub ancestors: Vec<Arc<str>>,
}

impl Lineage {
    /// A shard with no known ancestors.
    pub fn root(shard_id: &str) -> Self {
        Self {
            shard_id: Arc::from(shard_id),
            ancestors: Vec::new(),
        }
    }
}

/// One user record to decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Its event key.
    pub key: EventKey,
    /// The copy it is.
    pub copy: CopyRef,
    /// Its `ApproximateArrivalTimestamp`, ms since the Unix epoch.
    pub arrival_millis: i64,
}

impl Candidate {
    /// The accepted copy it becomes when accepted.
    pub fn accepted(&self) -> AcceptedCopy {
        AcceptedCopy {
            fingerprint: self.key.fingerprint,
            arrival_millis: self.arrival_millis,
            copy: self.copy.clone(),
        }
    }
}

/// Whether `copy` precedes `candidate` of the same shard: a smaller
/// (sequence number, sub-sequence number).
pub fn precedes_in_shard(copy: &CopyRef, candidate: &CopyRef) -> bool {
    debug_assert_eq!(copy.shard_id, candidate.shard_id);
    copy.position_cmp(candidate) == std::cmp::Ordering::Less
}
