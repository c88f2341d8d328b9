//! shardsink: copies every record of an Amazon Kinesis data stream to Amazon
//! S3 exactly once, across crashes, restarts, lost checkpoints and lease
//! moves. See `docs/DESIGN.md` for why the output is exact.
//!
//! # Layout
//! - [`config`]: settings (flags and `SHARDSINK_*` variables) and validation.
//! - [`worker`]: [`run`] — start-up checks, shard discovery, the lease loop
//!   (create, take, renew, release) and one [`shard::ShardTask`] per leased
//!   shard; graceful shutdown.
//! - [`shard`]: a shard task — reads records ([`reader`]), replays the pending
//!   batch, excludes records already in S3 ([`dedup`]), groups records by
//!   arrival [`minute`] into a [`batch`], and writes batches in order
//!   ([`writer`]).
//! - [`writer`]: record the batch in the lease row → PUT with
//!   `If-None-Match: *` → checkpoint.
//! - [`retention`]: records that expired from the stream unread — the error
//!   log, the counter and the marker object `verify` reports.
//! - [`record`] and [`kpl`]: Kinesis records, KPL aggregates unpacked;
//!   [`encode`]: JSON Lines; [`compression`]; [`key`]: the object key layout.
//! - [`aws`]: one thin function per Kinesis and S3 call; leases live in the
//!   `shard-lease` crate, sequence arithmetic in `sequence-range`.
//! - [`metrics`]: Prometheus metrics; [`health`] and [`http`]: `/metrics`,
//!   `/healthz`, `/readyz`; [`systemd`]: sd_notify readiness and watchdog.
//! - [`memory`]: the budget every held record counts against (batches,
//!   writes, responses, replays).
//! - [`backoff`], [`shutdown`], [`failpoint`]: plumbing.
//!
//! Data flows: GetRecords → [`record::ShardRecord`] → dedup → [`batch::Batch`]
//! (encoded lines) → compressed body → pending batch in the lease row → PUT →
//! checkpoint.
#![deny(missing_docs)]

pub mod aws;
pub mod backoff;
pub mod batch;
pub mod compression;
pub mod config;
pub mod dedup;
pub mod encode;
pub mod failpoint;
#[cfg(test)]
mod fake_aws;
pub mod health;
pub mod http;
pub mod key;
pub mod kpl;
pub mod memory;
pub mod metrics;
pub mod minute;
pub mod reader;
pub mod record;
pub mod renewer;
pub mod retention;
pub mod shard;
pub mod shard_graph;
pub mod shutdown;
pub mod systemd;
pub mod verify;
pub mod worker;
pub mod writer;

pub use config::{Config, ConfigError, Settings};
pub use worker::{Summary, run};
