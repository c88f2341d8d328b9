//! One leased shard's work: read, replay, deduplicate, batch, write.
//!
//! - `task`: [`ShardTask`](task::ShardTask), the loop from GetRecords to written batches for
//!   as long as the lease is held;
//! - `dedup`: [`Dedup`](dedup::Dedup), skipping records already in S3 after a start;
//! - `memory`: [`MemoryBudget`](memory::MemoryBudget), the records the whole process holds, against
//!   `--buffer-memory-limit`.

pub(crate) mod dedup;
pub(crate) mod memory;
pub(crate) mod task;
