//! shardsink: copies every record of an Amazon Kinesis data stream to Amazon
//! S3 exactly once, across crashes, restarts, lost checkpoints and lease
//! moves. See `docs/DESIGN.md` for why the output is exact.
//!
//! # Layout
//! The folders follow a record from Kinesis to S3:
//! - [`config`]: settings (flags and `SHARDSINK_*` variables) and their
//!   validation.
//! - `worker`: [`run`] — start-up checks, shard discovery, the lease loop
//!   (create, take, renew, release) and one shard task per leased shard;
//!   graceful shutdown.
//! - `read`: a shard's records from GetShardIterator and GetRecords, KPL
//!   aggregates unpacked, retention gaps, and the shard graph of parents and
//!   children.
//! - `shard`: the shard task — replays the pending batch, skips records
//!   already in S3 (dedup), groups records by arrival minute into batches,
//!   within the process's memory budget.
//! - `output`: what a batch becomes: JSON Lines, compression, the object key
//!   and its minute.
//! - `commit`: record the batch in the lease row → PUT with
//!   `If-None-Match: *` → checkpoint.
//! - `aws`: one thin function per Kinesis and S3 call, each service's error
//!   classification, the one retry loop (`retry::Retry`) and backoff;
//!   leases live in the `shard-lease` crate, sequence arithmetic in
//!   `sequence-range`.
//! - `ops`: metrics, health, the HTTP endpoints, systemd, signals,
//!   failpoints.
//! - [`verify`]: `shardsink verify`, the audit of an archive.
//! - [`cli`]: the command line — the daemon, `verify` and `health`.
//!
//! Data flows: GetRecords (`read`) → records → replay / dedup / minute
//! batches (`shard`) → encoded lines and compressed body (`output`) →
//! pending batch in the lease row → PUT → checkpoint (`commit`).
#![deny(missing_docs)]

mod aws;
pub mod cli;
mod commit;
pub mod config;
mod events;
#[cfg(test)]
mod fake_aws;
mod ops;
mod output;
mod read;
mod shard;
pub mod verify;
mod worker;

pub use config::{Config, ConfigError, Settings};
pub use worker::{Summary, run};

/// What the benchmarks in `benches/` measure; not an API.
#[doc(hidden)]
pub mod bench {
    pub use crate::events::id::EventIdSource;
    pub use crate::events::local::{LocalOptions, LocalStore};
    pub use crate::events::rule::{CopyRef, Decision, Rule};
    pub use crate::events::store::{Candidate, Lineage};
    pub use crate::output::batch::Batch;
    pub use crate::output::bucket::Bucket;
    pub use crate::output::compression::Compression;
    pub use crate::output::format::{Format, MainBody};
    pub use crate::output::view::UserRecordView;
    pub use crate::read::record::ShardRecord;
    pub use crate::shard::memory::MemoryBudget;
}
