//! End-to-end test harness for shardsink: the real `shardsink` process
//! against real local S3, DynamoDB and Kinesis servers (moto, or LocalStack
//! plus DynamoDB Local; see `scripts/local-servers`).
//!
//! # Layout
//! - [`env`](mod@env): [`TestEnv`] (clients from the `AWS_ENDPOINT_URL_*` variables),
//!   [`unique_name`], the skip rule ([`require_env!`]), repeatable random
//!   choices ([`env::seed`]) and choices per server profile
//!   ([`env::per_profile`]).
//! - [`outcome`]: what each test did — ran, or skipped and why — recorded
//!   for `scripts/test`'s table; every skip goes through
//!   [`outcome::skip`] or [`outcome::skip_unless_profile`].
//! - [`fixtures`]: streams, buckets (optionally versioned), the lease table
//!   (read rows, delete, empty).
//! - [`producer`]: `PutRecords` with per-entry retries, the record
//!   generators, the [`BackgroundProducer`], KPL-aggregated records, and
//!   the [`RetryingProducer`](producer::RetryingProducer), which puts
//!   events more than once;
//!   [`kpl`] builds aggregates independently of the daemon's code;
//!   [`payloads`]: payloads for the output formats (JSON objects, raw
//!   bytes, Parquet schema rows), and which of them a format must reject.
//! - [`daemon`]: starting the binary with [`Settings`], signals, logs;
//!   `shardsink verify` runs ([`daemon::run_verify`]); [`http`]: its
//!   `/metrics`, `/healthz` and `/readyz`; [`notify`]: the systemd notify
//!   socket it reports `READY=1` and `WATCHDOG=1` to; [`blackhole`]: an
//!   endpoint that forwards to a local server or takes connections and
//!   never answers.
//! - [`archive`]: what the daemon wrote, one concept per module: plain S3
//!   object calls ([`objects`](archive::objects)), object versions and
//!   overwritten keys ([`versions`](archive::versions)), key layouts
//!   ([`layout`](archive::layout)) and keys ([`key`](archive::key)),
//!   [`compression`](archive::compression), the format an object's
//!   metadata names ([`format`](archive::format)), arrival timestamps
//!   ([`timestamp`](archive::timestamp)), JSON lines
//!   ([`line`](archive::line)), one object checked against its key in each
//!   format ([`decode`](archive::decode) for envelope and error lines,
//!   [`json`](archive::json), [`raw`](archive::raw),
//!   [`parquet`](archive::parquet) with [`schema`](archive::schema)), the
//!   [`Archive`] snapshot ([`snapshot`](archive::snapshot)) and the caching
//!   [`ArchiveReader`] ([`reader`](archive::reader)), which puts each
//!   batch's main, error and duplicates objects and its event decisions
//!   ([`decisions`](archive::decisions)) together.
//! - [`seq`]: sequence numbers and key encodings, written independently of
//!   the `sequence-range` crate.
//! - [`stream`]: the ground truth, every record read back from the stream.
//! - [`check`]: the exactly-once [`Report`], arrival times, checkpoints;
//!   with event deduplication, every record in one place
//!   ([`check::each_record_in_one_place`]) and each event once
//!   ([`check::events`]).
//! - [`table`]: Iceberg tables (`--format iceberg`) read back with
//!   pyiceberg and DuckDB (`tests/iceberg/read_table.py`), each record in
//!   exactly one live row in both readings; the committer row and the
//!   staged batches of the lease table. [`rest_catalog`]: the Iceberg REST
//!   catalog test double (`tests/iceberg/rest_catalog.py`) a test starts
//!   and stops.
//! - [`wait`]: polling ([`wait_until`], [`wait_for`](wait::wait_for)).
//! - [`scenario`]: the common test flow: [`Scenario::create`], then
//!   [`Scenario::finish`] (wait for the archive, stop the daemons, check
//!   exactly once and nothing overwritten, and optionally what
//!   `shardsink verify --deep` says); its resources go when it is dropped.
//! - [`cleanup`]: deleting a scenario's stream, bucket (every version) and
//!   lease table, explicitly or on `Drop` (also on panic) from a thread with
//!   its own runtime.
//!
//! Data flows: generators → [`producer`] → Kinesis and
//! `Vec<ProducedRecord>` (expected); Kinesis → daemon → S3 and the lease
//! table; S3 → [`archive`] (list → head and get → decompress → decode by
//! format; `raw` pieces take their identities from the stream read back)
//! → [`Archive`] (actual); [`check::exactly_once`] compares the two over
//! the main and error prefixes,
//! [`stream::read_stream`] adds the arrival times, the lease rows
//! ([`fixtures::read_lease_rows`]) the checkpoints; [`Scenario::finish`]
//! runs these checks at the end of a run, and [`cleanup`] removes the
//! resources.
//!
//! # Running
//! ```text
//! scripts/local-servers start moto
//! source "$(scripts/local-servers env moto)"
//! cargo build -p shardsink --features failpoints
//! SHARDSINK_E2E_REQUIRED=1 cargo test -p shardsink-e2e
//! SHARDSINK_E2E_REQUIRED=1 cargo test -p shardsink-e2e -- formats::   # one family
//! ```
//! The tests are one binary, `tests/e2e/main.rs` in this crate, with one
//! module per scenario family beside it; a test's name is `family::test`.
//! Without endpoint variables every test prints
//! `skipping: no local servers (set AWS_ENDPOINT_URL_*)` and passes, so a
//! plain `cargo test --workspace` needs no servers; `scripts/test` shows
//! which tests ran on which profile, and fails when one ran on none.
//!
//! The tests do not build the daemon: rebuild it (with the `failpoints`
//! feature) after changing it. Knobs:
//! - `SHARDSINK_BIN`: the binary to test (default `<target>/debug/shardsink`);
//! - `SHARDSINK_E2E_REQUIRED=1`: no servers is a failure, not a skip;
//! - `SHARDSINK_E2E_SEED`: repeat a run's random choices (printed by each test);
//! - `SHARDSINK_E2E_TIMEOUT_SCALE`: multiply every timeout (slow machines);
//! - `SHARDSINK_E2E_KEEP_RESOURCES=1`: keep each test's stream, bucket and
//!   lease table instead of deleting them (to inspect them);
//! - `SHARDSINK_E2E_OUTCOMES`: a file each test appends what it did to
//!   ([`outcome`]);
//! - `SHARDSINK_E2E_DUCKDB_PYTHON`: the Python with DuckDB and its extension
//!   packages that the query-engine test runs (`scripts/test` installs it
//!   into `.local/duckdb/`), also with pyiceberg for the Iceberg tests;
//! - `SHARDSINK_LOG` / `RUST_LOG`: the daemon's log filter.
//!
//! Daemon logs go to `<target>/e2e-logs/<stream>/daemon-NN.log`; a failing
//! test prints the tail of the running daemon's log and every log's path.
#![deny(missing_docs)]
// Test code: `expect` states harness invariants.
#![allow(clippy::expect_used, clippy::unwrap_used)]

pub mod archive;
pub mod blackhole;
pub mod check;
pub mod cleanup;
pub mod daemon;
pub mod env;
pub mod fixtures;
pub mod http;
pub mod iam;
pub mod kpl;
pub mod notify;
pub mod outcome;
pub mod payloads;
pub mod producer;
pub mod rest_catalog;
pub mod scenario;
pub mod seq;
pub mod stream;
pub mod table;
pub mod wait;

pub use archive::{Archive, ArchiveReader, ArchivedRecord, Compression, ObjectKey};
pub use check::{Report, exactly_once};
pub use daemon::{Daemon, Settings};
pub use env::{TestEnv, unique_name};
pub use fixtures::{LeaseRow, Versioning};
pub use producer::{BackgroundProducer, ProducedRecord, RecordSpec};
pub use scenario::{
    Finish, Finished, Scenario, stop_gracefully, wait_for_archive, wait_for_growth,
};
pub use wait::{scaled, wait_until};
