//! `shardsink verify`: audits what shardsink wrote for one stream under a
//! bucket prefix and says whether it is exact — every record once, nothing
//! missing up to the checkpoints.
//!
//! # Checks
//! 1. **Keys.** Every key under `{prefix}/` is listed (all pages) and parsed
//!    in the archive's key layout — the one recorded in
//!    `{prefix}/_shardsink.json`, or inferred from the keys, or plain
//!    per-minute — as `{prefix}/{time path}/{shardId}/{name}`, `name` by
//!    `output::key::parse_object_name`. Retention gap markers (check 5) and
//!    the layout record are set apart. A key that does not parse is
//!    *foreign*: listed as a warning and otherwise ignored, as dedup ignores
//!    it. Foreign keys do not make the archive inexact. The error prefix's
//!    keys (`--error-prefix`, the records the format could not represent)
//!    and the duplicates prefix's (`--duplicates-prefix`, copies of events
//!    accepted earlier) are listed and parsed the same way, and decisions
//!    objects (`{prefix}/_events/…/{name}.events.zst`) under the decisions
//!    layout; an error, duplicates or decisions object whose batch has no
//!    main object is *uncommitted* (written just before a crash; the
//!    daemon's replay of the batch writes the main object): a warning.
//! 2. **Overlaps.** Two objects of one shard whose sequence ranges share a
//!    number. An object holds every record of its shard in its range
//!    (`docs/DESIGN.md`, I1) and a range's ends are records, so the larger of
//!    two overlapping ranges' `first`s is a record in both objects: an
//!    overlap is a record archived twice. Ranges of different shards never
//!    overlap, whatever their numbers.
//! 3. **Unreadable objects** (`--deep`). Each object is fetched,
//!    decompressed by its extension and read line by line (Parquet: row by
//!    row). It is unreadable when it does not decompress or parse, a line is
//!    empty, an envelope line is not a JSON object with exactly the fields
//!    shardsink writes (`shardId`, `sequenceNumber`, optional
//!    `subSequenceNumber`, `partitionKey`, `approximateArrivalTimestamp`,
//!    `data` in base64) or a `json` line not a JSON object, a record's
//!    `shardId` is not the key's, its `sequenceNumber` is outside the key's
//!    range, its arrival time is outside the key's minute or hour, a
//!    (`sequenceNumber`, `subSequenceNumber`) pair repeats, neither the
//!    object nor its batch's error or duplicates object holds the key's
//!    `first` or `last` record (a rejected record is in the error object, a
//!    duplicate in the duplicates object; an object that holds no record —
//!    every record of its batch rejected — is not checked for them), or the
//!    count stored
//!    with the object (`x-amz-meta-shardsink-records`) differs from the
//!    records found (raw payloads: from the delimiters found). `json` lines
//!    without a metadata member and raw payloads are counted, with no
//!    identity to check. Error and duplicates objects are read the same
//!    way; a duplicates object's lines must each carry `duplicateOf`, and
//!    no other object's may. A decisions object must read as the daemon
//!    writes it (`output::read_back::decisions::parse`), one decision per user record
//!    of its key's range, as many as its stored count.
//! 4. **Gaps** (`--stream`, when Kinesis answers). For every shard of the
//!    stream (ListShards) the *bound* is the larger of the lease row's
//!    checkpoint and the highest archived sequence number; a `SHARD_END`
//!    checkpoint makes it the whole shard, and a sentinel (`TRIM_HORIZON`, …)
//!    contributes nothing. The shard is read from `TRIM_HORIZON` — the
//!    oldest retained record — up to the bound. Every record read at or below
//!    the bound whose sequence number is in no object range of its shard is
//!    a gap. Records already trimmed by retention cannot be checked; the
//!    report says where each shard's check started. Key ranges alone cannot
//!    show a gap: Kinesis does not hand out consecutive sequence numbers, so
//!    a hole between two ranges may hold no record at all.
//! 5. **Retention gaps.** Records that expired from the stream before the
//!    daemon read them (it was down longer than the stream's retention) can
//!    no longer be seen in the stream; the daemon records each such gap in a
//!    marker under `{prefix}/_retention-gaps/` (`read::retention`). Every
//!    marker is fetched and reported; any marker makes the archive not exact.
//! 6. **One place** (`--deep`; E1 in `docs/DESIGN.md`). A user record
//!    (sequence number, sub-sequence number) found in two objects of its
//!    batch — main, error, duplicates — is a record twice. A committed
//!    batch with a decisions object must hold, in its main, error and
//!    duplicates objects together, the user records the decisions object
//!    counts (`x-amz-meta-shardsink-records`), and its duplicates object
//!    the duplicates it decided; a duplicates object of a committed batch
//!    needs a decisions object.
//! 7. **Once per window** (`--event-id` with `--deep` and `--stream`; E2).
//!    Every user record the gap check reads in a committed batch whose
//!    decisions object was made with the settings given (its
//!    `x-amz-meta-shardsink-format`) gets its event key from the daemon's
//!    own `EventIdSource::key`; it is *kept* when it is in no duplicates
//!    object. No two kept records with the same key (id, and payload with
//!    `--event-fingerprint payload`) may have arrived within
//!    `--event-dedup-window` of each other in one scope: a shard and its
//!    ancestors (`--event-dedup-store local`) or the stream (`dynamodb`).
//!    Every duplicate read must have an id, and its `duplicateOf` must name
//!    a kept record of its key that arrived within the window, in its scope
//!    (when that record was read). Batches decided with other settings, or
//!    before decisions were on, are not compared (their window started
//!    empty); the first are listed as warnings. The check holds every
//!    decided user record's key in memory (about 100 bytes each).
//!
//! The lease table is read *before* the listing: a checkpoint is written
//! only after its objects (I3), so every object a checkpoint read first
//! vouches for is in the listing that follows, even while the daemon runs.
//!
//! # Output and exit
//! Progress goes to stderr: an `indicatif` bar on a terminal, plain lines
//! otherwise. The summary goes to stdout: counts, then up to 50 offending
//! objects or records, up to 50 warnings (uncommitted objects, decisions
//! made with other settings, foreign keys), and `exact` or `NOT exact`.
//! [`run`] returns `Ok(true)` when there is no overlap, no unreadable object,
//! no gap, no recorded retention gap, no record twice or batch that does not
//! add up, and no event kept twice or wrong duplicate; the binary exits 0,
//! 1, or 2 when the audit cannot run.
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
//! - `report.rs`: `Audit`, everything found, and the summary on stdout.
//! - `progress.rs`: progress on stderr, a bar or plain lines.
//! - `test_support.rs`: objects and records for the unit tests.
//!
//! Data flows: [`VerifyArgs`] → `Plan` → checkpoints (lease table) →
//! listings → `ArchivedKey`s and `ForeignKey`s → overlaps, body checks
//! (`--deep`: error and duplicates objects, main objects, decisions
//! objects) → batches checked across their objects → one `ShardGapCheck`
//! (and `ShardEvents`) per shard fed by GetRecords → window check → `Audit`
//! → summary and verdict ([`run`]).

mod args;
mod audit;
mod body;
mod gap_markers;
mod gaps;
mod keys;
mod overlaps;
mod placement;
mod progress;
mod report;
mod stream;
#[cfg(test)]
mod test_support;
mod window;

use std::io::IsTerminal as _;

use self::args::Plan;
pub use self::args::VerifyArgs;
use self::audit::audit;
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
/// (with `--event-id`, `--deep` and `--stream`).
///
/// # Errors
/// A bad argument (a [`ConfigError`](crate::config::ConfigError) naming it);
/// the bucket cannot be listed.
pub async fn run(args: VerifyArgs) -> anyhow::Result<bool> {
    let plan = Plan::from_args(&args)?;
    let clients = AwsClients::from_env(args.archive.s3_force_path_style).await;
    let audit = audit(&plan, &clients, std::io::stderr().is_terminal()).await?;
    // Not `print!`: a closed stdout must not turn the verdict into a panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), audit.render().as_bytes());
    Ok(audit.is_exact())
}
