//! shardsink: copies every record of an Amazon Kinesis data stream to Amazon
//! S3 exactly once, across crashes, restarts, lost checkpoints and lease
//! moves. See `docs/DESIGN.md` for why the output is exact.
//!
//! The public surface is the daemon ([`run`], with the [`Config`] it is
//! started from, validated into [`Settings`]), the audit ([`verify::run`])
//! and the command line the binary runs ([`cli::main`]).
//!
//! # Layers
//! The modules form layers, lowest first; a module imports only from the
//! layers below it (`scripts/check-layers` checks it in `scripts/test`):
//! - `lock`: the one way a mutex is locked, whatever a panicked holder left.
//! - `ops`: metrics, health, logs, failpoints, signals, systemd and the HTTP
//!   endpoints; labels are plain text, so it knows no domain type.
//! - `memory`: the process's memory budget (`--buffer-memory-limit`), which
//!   every stage that holds records reserves from.
//! - `aws`: one thin function per Kinesis and S3 call, each service's error
//!   classification, the one retry path (`retry::Retry`, whose step the
//!   loops of a shard's and `verify`'s reads take too) and backoff, and the
//!   interceptor that reports attempts to liveness;
//!   leases live in the `shard-lease` crate, sequence arithmetic in
//!   `sequence-range`.
//! - `read`: a shard's records from GetShardIterator and GetRecords, the
//!   user record view every format takes, KPL aggregates unpacked,
//!   retention gaps, and the shard graph of parents and children.
//! - `output`: what a batch becomes: its body in the configured format
//!   (envelope, json, raw or Parquet) and the records a format rejects, the
//!   compression, the object key and its inverse, the time bucket, the key
//!   layout recorded under the prefix, the retention-gap marker, a batch's
//!   event decisions and the decisions object that records them first, and
//!   reading the archive back (`output::read_back`: listings, each format's
//!   decoder, decisions objects) for every part that looks at what is
//!   already in S3.
//! - `events`: with `--event-id`, each user record decided — kept, or a
//!   duplicate of an earlier accepted copy of its event — by the rule, in
//!   the local store (the `event-store` crate, which also holds the rule) or
//!   the DynamoDB store; rebuilding a local store from the archive.
//! - `table`: Apache Iceberg tables — the table shardsink creates, each
//!   shard's committed end written beside every snapshot, and a table
//!   commit of staged data files pinned to the table it was planned on.
//! - `commit`: record the batch in the lease row → PUT with
//!   `If-None-Match: *` (decisions, error and duplicates objects, each when
//!   the batch has one, then the main object) → checkpoint; the check of an
//!   object already at the key; how a pending or uncommitted batch is
//!   rebuilt; its own error type.
//! - `shard`: the shard task — replays the pending batch, skips records
//!   already in S3 (the resume skip), groups records by arrival minute or hour into
//!   batches.
//! - `config`: settings (flags and `SHARDSINK_*` variables) and their
//!   validation; it assembles the value types the stages define.
//! - `worker`: [`run`] — start-up checks, shard discovery, the lease loop
//!   (observe, plan, take; renew, release) and one shard task per leased
//!   shard; graceful shutdown.
//! - [`verify`]: `shardsink verify`, the audit of an archive.
//! - [`cli`]: the command line — the daemon, `verify` and `health`.
//!
//! Beside the layers: `bench` (feature `bench`), the parts the pipeline
//! benchmark in `benches/` drives; `fake_aws` (tests only), in-memory
//! Kinesis, S3 and DynamoDB behind mocked SDK clients; `test_wait` (tests
//! only), waiting in paused time, where a wait that runs out fails the test;
//! `docs_tests` (tests only), `docs/ATHENA.md`'s tables and key patterns
//! checked against the code.
//!
//! Data flows: GetRecords (`read`) → records → replay / the resume skip (`shard`) →
//! event decisions (`events`) → minute or hour batches (`shard`) → encoded
//! bodies and compression (`output`) → pending batch in the lease row →
//! PUT → checkpoint (`commit`).
#![deny(missing_docs)]

mod aws;
pub mod cli;
mod commit;
mod config;
#[cfg(test)]
mod docs_tests;
mod events;
#[cfg(test)]
mod fake_aws;
mod lock;
mod memory;
mod ops;
mod output;
mod read;
mod shard;
mod table;
#[cfg(test)]
mod test_wait;
pub mod verify;
mod worker;

pub use config::{Config, ConfigError, Settings};
pub use worker::{Summary, run};

/// What the benchmarks in `benches/` and the end-to-end DynamoDB store test
/// drive: the batch, its time bucket, format and compression, the record,
/// the memory budget, the `parquet` format's rows and the Iceberg data files
/// of the table shardsink creates, and the DynamoDB event store with its
/// rule (the local store's benchmarks are in the `event-store` crate).
/// Built only with the `bench` feature; not a stable API.
#[cfg(feature = "bench")]
pub mod bench {
    pub use sequence_range::SequenceNumber;

    pub use crate::events::dynamodb::{DynamoDbStore, DynamoDbStoreError};
    pub use crate::events::id::EventIdSource;
    pub use crate::events::rule::{AcceptedCopy, CopyRef, Decision, EventKey, Outcome, Rule};
    pub use crate::events::store::{Candidate, Lineage};
    pub use crate::memory::MemoryBudget;
    pub use crate::ops::metrics::Metrics;
    pub use crate::output::batch::Batch;
    pub use crate::output::bucket::{Bucket, TimeBucket};
    pub use crate::output::compression::Compression;
    pub use crate::output::format::iceberg::{IcebergBatch, IcebergLayout};
    pub use crate::output::format::parquet::ParquetBatch;
    pub use crate::output::format::{Format, MainBody};
    pub use crate::read::record::ShardRecord;
    pub use crate::read::record::UserRecordView;
    pub use crate::table::create::{Instants, default_partition_spec, default_schema};
}
