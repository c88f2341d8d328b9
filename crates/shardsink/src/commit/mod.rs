//! Committing a batch: record it in the lease row, PUT it with
//! `If-None-Match: *` (fenced by the lease), check an object already there,
//! then checkpoint.
//!
//! - `writer`: [`BatchWriter`](writer::BatchWriter), the only way shardsink writes a batch, and
//!   [`ShardError`](writer::ShardError), how a shard task stops.

pub(crate) mod writer;
