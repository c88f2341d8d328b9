//! Event deduplication (`--event-id`): each *event* once, when producers put
//! a record into the stream more than once. Between reading and batching,
//! every user record is decided: kept (the main prefix) or a duplicate of an
//! earlier accepted copy of its event (the duplicates prefix).
//!
//! - `id`: where an event's id comes from, the [`EventKey`](rule::EventKey)
//!   hash of id and payload, and the settings description decisions objects
//!   carry;
//! - `rule`: the decision rule, a pure function of a record and the accepted
//!   copies before it (from the `event-store` crate);
//! - `store`: what the two stores share — the lineage of a shard and the
//!   candidates of a run — and a shard's ancestors;
//! - the local store, an embedded LSM database on disk, is the
//!   `event-store` crate ([`event_store::LocalStore`]);
//! - `decider`: [`ShardEvents`](decider::ShardEvents), a shard task's
//!   decisions, and the store the process shares;
//! - `dynamodb`: [`DynamoDbStore`](dynamodb::DynamoDbStore), the DynamoDB store
//!   (stream scope);
//! - `memory`: a store in memory, for tests;
//! - `rebuild`: a shard's window of accepted copies read back from the
//!   decisions objects in S3, streamed into a local store that is missing
//!   or behind, within the memory budget.
//!
//! A batch's decisions, and the decisions object that records them in S3
//! before the batch's other objects, are part of the archive's format:
//! `output::decisions` writes them, `output::read_back::decisions` reads
//! them back.

pub(crate) mod decider;
pub(crate) mod dynamodb;
pub(crate) mod id;
#[cfg(test)]
pub(crate) mod memory;
pub(crate) mod rebuild;
pub(crate) mod rule;
pub(crate) mod store;

use self::id::EventIdSource;
use self::rule::Rule;

/// Event deduplication as the daemon and `verify` run it: `--event-id`,
/// `--event-fingerprint` and `--event-dedup-window`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSettings {
    /// Where ids come from.
    pub source: EventIdSource,
    /// Whether a duplicate needs the same payload.
    pub fingerprint: bool,
    /// The window and the fingerprint rule.
    pub rule: Rule,
}
