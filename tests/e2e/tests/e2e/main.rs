//! The end-to-end suite: one test binary, one module per scenario family.
//!
//! Every module links the same heavy dependencies (the AWS SDK, arrow and
//! Parquet, the daemon's library), so the suite is one binary rather than
//! one per file: one link step and one executable on disk. Tests are named
//! `module::test` (`formats::parquet_with_hour_keys`); run a family with
//! `cargo test -p shardsink-e2e -- formats::`, one test with
//! `cargo test -p shardsink-e2e -- --exact kill_restart::survives_repeated_sigkill`.
//! A new family is a new module here; `Cargo.toml` sets `autotests = false`,
//! so a file dropped into `tests/` does not become a binary of its own.
//! How to run the suite against local servers: the harness's crate docs
//! (`tests/e2e/src/lib.rs`).
//!
//! - [`bad_config`]: invalid settings exit with code 2 and one line.
//! - [`chaos`]: kills, freezes, lost tables and resharding at random moments.
//! - [`event_table`]: the DynamoDB store and its event table, its
//!   throughput and capacity units.
//! - [`events`]: each event once, through retries, kills and lease moves.
//! - [`failpoints`]: a crash at each step of a batch's life.
//! - [`fan_out`]: enhanced fan-out — switching the read mode between runs
//!   (on the fanout profile every family reads by fan-out).
//! - [`foreign_keys`]: keys the daemon did not write are ignored.
//! - [`formats`]: every output format and key layout, table-driven.
//! - [`harness`]: self-tests of the harness, without the daemon.
//! - [`iam_policy`]: `deploy/iam-policy.json` grants exactly what is used.
//! - [`iceberg`]: `--format iceberg`: each record in one live row of the
//!   table, through kills at every step, lease moves, two committers, a
//!   lost lease table and a split.
//! - [`iceberg_catalogs`]: `--format iceberg` with the Glue Data Catalog,
//!   S3 Tables (moto) and a REST catalog (the test double
//!   `tests/iceberg/rest_catalog.py`), read back through the catalog.
//! - [`kill_restart`]: contract lines 1–4 under repeated SIGKILL.
//! - [`kpl`]: KPL aggregates are unpacked.
//! - [`lost_table`], [`lost_table_running`]: the lease table lost between
//!   runs, and under a running daemon.
//! - [`memory`]: peak memory within the budget across a crash.
//! - [`metrics`]: `/metrics`, `/healthz` and `/readyz` on a real run.
//! - [`query_engine`]: DuckDB reads the archive where it lies.
//! - [`reshard`]: splits and merges, parents before children.
//! - [`run_to_end`]: the happy path with hostile input.
//! - [`verify`]: `shardsink verify` against real archives.
//! - [`watchdog`]: the systemd watchdog through a Kinesis outage.
//! - [`workers`]: many workers on one stream.

// Test code: `unwrap` and `expect` are the assertions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bad_config;
mod chaos;
mod event_table;
mod events;
mod failpoints;
mod fan_out;
mod foreign_keys;
mod formats;
mod harness;
mod iam_policy;
mod iceberg;
mod iceberg_catalogs;
mod kill_restart;
mod kpl;
mod lost_table;
mod lost_table_running;
mod memory;
mod metrics;
mod query_engine;
mod reshard;
mod run_to_end;
mod verify;
mod watchdog;
mod workers;
