//! Committing a batch: record it in the lease row, PUT it with
//! `If-None-Match: *` (fenced by the lease), check an object already there,
//! then checkpoint.
//!
//! - `writer`: [`BatchWriter`](writer::BatchWriter), the only way shardsink
//!   writes a batch: pending → PUT → checkpoint, and the replay of a pending
//!   batch;
//! - `fence`: [`Fence`](fence::Fence), an S3 write runs only while the lease
//!   is confirmed;
//! - `existing`: whether an object already at a batch's key (412) holds the
//!   batch's records, streamed line by line.

pub(crate) mod existing;
pub(crate) mod fence;
pub(crate) mod writer;
