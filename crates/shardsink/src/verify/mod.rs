//! `shardsink verify`: audits what shardsink wrote for one stream under a
//! bucket prefix and says whether it is exact — every record once, nothing
//! missing up to the checkpoints.
//!
//! It lists every object under the prefix and parses its key; finds
//! overlapping ranges (a record archived twice); with `--deep`, reads every
//! object line by line and checks that each user record is in one place;
//! with `--stream`, reads the stream up to the checkpoints and finds gaps;
//! reports the retention gaps the daemon recorded; and, given the daemon's
//! event settings, checks each event once per window. The lease table is
//! read before the listing, so the audit holds while the daemon runs.
//! [`run`] returns `Ok(true)` when exact; the binary exits 0, 1 when not
//! exact, 2 when the audit cannot run.
//!
//! `docs/VERIFY.md` is the user's reference: each check numbered 1–7 (the
//! numbers below), how to run it, its output and exit codes.
//!
//! # Layout
//! - `args.rs`: [`VerifyArgs`], the flags (the daemon's event settings
//!   among them), and their validation into a `Plan` (defaults resolved).
//! - `audit.rs`: the checks in order, from a `Plan` to an `Audit`; the one
//!   test of the whole audit through the SDK against in-memory fakes.
//! - `keys.rs`: check 1 — the listings and each key parsed into an
//!   `ArchivedKey` (main, error, duplicates or decisions object) or a
//!   `ForeignKey`.
//! - `overlaps.rs`: check 2 — objects of one shard sharing a sequence number.
//! - `body.rs`: check 3 (`--deep`) — fetching each object and checking its
//!   lines against its key; what each holds for checks 6 and 7.
//! - `gap_markers.rs`: check 5 — the retention gap markers, read and
//!   described.
//! - `gaps.rs`: check 4 without I/O — a shard's bound and its records, in
//!   order, against its objects (`ShardGapCheck`).
//! - `stream.rs`: the I/O of check 4 — checkpoints from the lease table,
//!   ListShards, each shard read from `TRIM_HORIZON`, paced and backing off.
//! - `placement.rs`: check 6 without I/O — a batch's objects against each
//!   other and its decisions object.
//! - `window.rs`: check 7 without I/O — each shard's records keyed as they
//!   are read (`ShardEvents`), then the kept copies and the duplicates.
//! - `table.rs`: the audit of an Iceberg table (`--format iceberg`): its
//!   live rows against the commit state the table records (a record twice,
//!   a record after its shard's committed end), the lease rows'
//!   checkpoints against it, and data files no snapshot names.
//! - `table_gaps.rs`: the gap check of a table without I/O — a shard's
//!   records, in order, up to its committed end, against the live rows and
//!   the error and duplicates objects' records (`TableShardCheck`).
//! - `table_io.rs`: the I/O of the table audit (`--iceberg-catalog` with
//!   `--deep`): the lease rows read first, the catalog opened with
//!   `verify`'s clients, the data directory listed; with `--stream`, each
//!   shard read up to its committed end for the table's gap check.
//! - `report.rs`: `Audit`, everything found, and the summary on stdout.
//! - `progress.rs`: progress on stderr, a bar or plain lines.
//! - `test_support.rs`: objects and records for the unit tests.
//!
//! Data flows: [`VerifyArgs`] → `Plan` → checkpoints (lease table) →
//! listings → `ArchivedKey`s and `ForeignKey`s → overlaps, body checks
//! (`--deep`: error and duplicates objects, main objects, decisions
//! objects) → batches checked across their objects → one `ShardGapCheck`
//! (and `ShardEvents`) per shard fed by GetRecords → window check → `Audit`
//! → summary and verdict ([`run`]). With `--iceberg-catalog`, the archive
//! under the prefix holds only the error and duplicates objects (and their
//! decisions), so its gap check and its uncommitted-object warnings are
//! left out and the error and duplicates objects' records are kept; then
//! lease rows → table (`table_io.rs`) → `TableAudit` (with each live
//! row's record) → with `--stream`, one `TableShardCheck` per shard fed by
//! GetRecords → its summary and verdict.

mod args;
mod audit;
mod body;
mod gap_markers;
mod gaps;
mod keys;
mod overlaps;
mod placement;
mod progress;
mod render;
mod report;
mod stream;
mod table;
mod table_gaps;
mod table_io;
#[cfg(test)]
mod test_support;
mod window;

use std::io::IsTerminal as _;

use self::args::Plan;
pub use self::args::VerifyArgs;
use self::audit::audit;
use self::table_io::audit_iceberg;
use crate::aws::retry::{Retry, Stopped};
use crate::aws::{AwsClients, S3Error};

/// Consecutive failed calls (after the SDK's own retries) before a shard's
/// gap check, an object's GET or the listing gives up.
const MAX_FAILURES: u32 = 10;

/// How `verify` retries an S3 call: transient failures up to
/// [`MAX_FAILURES`] times; anything else ends the call at once (an audit
/// reports, it does not wait for an operator).
fn s3_retry(what: &'static str) -> Retry<'static, S3Error> {
    Retry::new(what)
        .give_up_after(MAX_FAILURES + 1)
        .final_when(|err: &S3Error| !err.is_retriable())
}

/// The error a [`Retry`] of S3 calls stopped with (it is never cancelled).
fn s3_stopped(stopped: Stopped<S3Error>) -> S3Error {
    match stopped {
        Stopped::Final(err) | Stopped::GaveUp(err) => err,
        Stopped::Cancelled => S3Error::Other {
            operation: "verify",
            bucket: String::new(),
            key: String::new(),
            retriable: false,
            throttled: false,
            source: "cancelled".into(),
        },
    }
}

/// Runs the audit and prints its summary; `Ok(true)` when the archive is
/// exact: no overlap, no unreadable object (with `--deep`), no gap (with
/// `--stream`, when Kinesis answers), no recorded retention gap, every user
/// record in one place (with `--deep`) and each event kept once per window
/// (with `--event-id`, `--deep` and `--stream`); and, with
/// `--iceberg-catalog`, the table's audit is exact too: no record twice in
/// its live rows, none after its shard's committed end, no checkpoint after
/// it, and (with `--stream`) every record of the stream up to it a live row
/// or in an error or duplicates object. The archive's summary is printed
/// first, then the table's.
///
/// # Errors
/// A bad argument (a [`ConfigError`](crate::config::ConfigError) naming it);
/// the bucket cannot be listed; the table cannot be audited (its catalog,
/// files or data directory cannot be read).
pub async fn run(args: VerifyArgs) -> anyhow::Result<bool> {
    let plan = Plan::from_args(&args)?;
    let clients = AwsClients::from_env(args.archive.s3_force_path_style).await;
    let tty = std::io::stderr().is_terminal();
    let audit = audit(&plan, &clients, tty).await?;
    // Not `print!`: a closed stdout must not turn the verdict into a panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), audit.render().as_bytes());
    let mut exact = audit.is_exact();
    if let Some(target) = &plan.iceberg {
        let inputs = (&audit.sides, audit.table_events.as_ref());
        let table = audit_iceberg(target, &plan, &clients, inputs, tty).await?;
        let _ = std::io::Write::write_all(&mut std::io::stdout(), table.render().as_bytes());
        exact &= table.is_exact();
    }
    Ok(exact)
}
