//! One leased shard's work: read, replay, deduplicate, batch, write.
//!
//! - `task`: [`ShardTask`](task::ShardTask), the loop from GetRecords to written batches for
//!   as long as the lease is held;
//! - `context`: [`ShardContext`](context::ShardContext), what every task shares, and
//!   [`ShardExit`](context::ShardExit), how a task ends;
//! - `error`: [`ShardError`](error::ShardError), how a shard task stops;
//! - `resume`: [`ResumeSkip`](resume::ResumeSkip), the resume skip: records already in S3
//!   skipped after a start;
//! - `replay`: [`Replay`](replay::Replay), the pending batch rebuilt record
//!   by record and written first;
//! - `frontier`: [`Frontier`](frontier::Frontier), how far the shard is in S3
//!   and checkpointed;
//! - `progress`: the shard's counters, progress log and retention gauge.
//!
//! The records the whole process holds are counted by the memory budget
//! ([`MemoryBudget`](crate::memory::MemoryBudget)), a module below the
//! stages that every one of them reserves from.

pub(crate) mod context;
pub(crate) mod error;
pub(crate) mod frontier;
pub(crate) mod progress;
pub(crate) mod replay;
pub(crate) mod resume;
pub(crate) mod task;
