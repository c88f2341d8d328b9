//! Committing a batch: record it in the lease row, PUT it with
//! `If-None-Match: *` (fenced by the lease), check an object already there,
//! then checkpoint.
//!
//! - `writer`: [`BatchWriter`](writer::BatchWriter), the only way shardsink
//!   writes a batch: pending → PUT → checkpoint, and the replay of a pending
//!   batch;
//! - `body`: a batch's bodies as PUT — its decisions, error and
//!   duplicates objects (each when the batch has one), then the main
//!   object — with their user metadata;
//! - `replay_plan`: [`ReplayPlan`](replay_plan::ReplayPlan), how a pending
//!   or uncommitted batch is rebuilt, with the decisions it was written with;
//! - `fence`: [`Fence`](fence::Fence), an S3 write runs only while the lease
//!   is confirmed;
//! - `error`: [`CommitError`](error::CommitError), why writing a batch
//!   stopped;
//! - `existing`: whether an object already at a batch's key (412) holds the
//!   batch's records: lines streamed, Parquet rows compared.

pub(crate) mod body;
pub(crate) mod error;
pub(crate) mod existing;
pub(crate) mod fence;
pub(crate) mod replay_plan;
pub(crate) mod writer;
