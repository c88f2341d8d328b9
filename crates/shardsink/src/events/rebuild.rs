//! Rebuilding a shard's window of accepted copies from S3, for a local
//! store that is missing or behind (a new host, a lease that moved, a lost
//! disk): the decisions objects of the shard's committed batches record
//! every accepted copy, with its key.
//!
//! In the archive a batch is committed when its main object is in S3 (it is
//! written last); a decisions object without its main object belongs to an
//! uncommitted attempt and is left out (that batch is rebuilt as decided
//! when the shard reaches it). A table batch writes no main object: its
//! records are placed once it is staged in the lease row or committed to
//! the table, and a shard reads on after them, so its decisions objects
//! that end at or before the shard's placed records are the committed ones
//! ([`Committed`]; docs/DESIGN.md, "Iceberg tables"). Decisions objects made
//! with other event settings hold keys
//! that cannot be compared and are left out too, with a warning, and so is
//! an object that does not decompress or parse (every copy of it: none is
//! inserted).
//!
//! # Memory
//! A window can hold millions of copies (three hours of a shard at 1,000
//! records a second: about 10 million), so nothing here grows with it. The
//! time buckets are read one at a time (one listing of main keys and one of
//! decisions keys per bucket), each decisions object is streamed —
//! downloaded, decompressed and parsed a line at a time on a blocking
//! thread — and its copies are inserted into the store in chunks of
//! [`CHUNK_COPIES`]. An object's copies go in only once every line of it
//! parsed, so an object with more copies in the window than a chunk is read
//! twice: once to check it, once to insert its copies a chunk at a time.
//!
//! A rebuild takes its turn from the process's [`MemoryBudget`] and holds
//! [`REBUILD_BYTES`] of it until it ended (see `crate::memory`, rule 4).

use std::collections::HashSet;
use std::io::BufRead;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use event_store::{LocalStore, LocalStoreError};
use sequence_range::{SequenceNumber, SequenceRange};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::io::SyncIoBridge;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::rule::{AcceptedCopy, EventKey};
use crate::aws::retry::{Retry, Stopped};
use crate::aws::tracked_read::TrackedRead;
use crate::aws::{ObjectStore, S3Error};
use crate::memory::{MemoryBudget, REBUILD_BYTES, Reservation};
use crate::ops::metrics::Metrics;
use crate::output::Output;
use crate::output::bucket::Bucket;
use crate::output::compression;
use crate::output::read_back::decisions::{parse_decisions_name, parse_line};
use crate::output::read_back::listing::{list_all, list_written};
use crate::output::read_back::metadata::{DECISIONS_COMPRESSION, FORMAT_METADATA};

/// Accepted copies read before they are inserted: at most this many are
/// held at once (about 5.5 MiB with 56-digit sequence numbers, 8.5 MiB
/// with the longest).
pub const CHUNK_COPIES: usize = 32_768;

/// Bytes one held copy takes at most: the pair, and the heap block of its
/// sequence number's text (up to 129 digits: "SequenceNumber", Kinesis API
/// reference, Record).
const COPY_BYTES: u64 = std::mem::size_of::<(EventKey, AcceptedCopy)>() as u64 + 160;

/// What the store holds while it inserts one of its batches (its slots,
/// each copy's clone and the run's values: about 300 bytes for each of the
/// 25,000 keys of the default epoch's eighth, `LocalStore::insert`).
const INSERT_BYTES: u64 = 8 << 20;

/// The zstd decoder's window (2 MiB: the level-3 frames decisions objects
/// are written in, `DECISIONS_COMPRESSION`) and block, and the buffers
/// between the download and the parser.
const DECODER_BYTES: u64 = 3 << 20;

// A rebuild's chunk, the store's insert and the decoder fit in what its
// turn holds.
const _: () =
    assert!(CHUNK_COPIES as u64 * COPY_BYTES + INSERT_BYTES + DECODER_BYTES <= REBUILD_BYTES);

/// Where a rebuild reads, and the budget its turn comes from.
#[derive(Debug, Clone)]
pub struct RebuildSource {
    /// The bucket.
    pub store: ObjectStore,
    /// The layouts of main and decisions objects.
    pub output: Output,
    /// Retry metrics.
    pub metrics: Arc<Metrics>,
    /// The process's memory budget (`--buffer-memory-limit`).
    pub budget: Arc<MemoryBudget>,
    /// Whether the batches go into an Iceberg table (no main objects).
    pub table: bool,
}

impl RebuildSource {
    /// How a rebuild of a shard whose records are placed through
    /// `placed_through` (`None`: every record, the shard having ended)
    /// tells committed batches: by their main objects, or for a table by
    /// that bound.
    pub fn committed(&self, placed_through: Option<&SequenceNumber>) -> Committed {
        if self.table {
            Committed::Through(placed_through.cloned())
        } else {
            Committed::ByMainObject
        }
    }
}

/// Which of a shard's decisions objects record committed batches, whose
/// accepted copies a rebuild inserts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// Those whose batch's main object is listed (the archive: the main
    /// object is written last, the batch's commit marker).
    ByMainObject,
    /// Those whose batch ends at or before this sequence number (`None`:
    /// every one), the shard's records being placed through it (a table:
    /// committed, or staged in the lease row and committed next). An
    /// attempt abandoned before its batch was staged lies after it: a
    /// shard reads on after its placed records, and the resume skip
    /// rebuilds such a batch from its decisions object as it was decided.
    Through(Option<SequenceNumber>),
}

/// What a rebuild read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// Accepted copies found in the window and inserted.
    pub copies: usize,
    /// Decisions objects read.
    pub objects: usize,
    /// Decisions objects left out: uncommitted, other settings, unreadable.
    pub skipped: usize,
}

/// Why a rebuild stopped.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    /// Listing or reading S3 stopped: the lease was lost, or a call failed
    /// for good.
    #[error("reading the decisions objects stopped: {0:?}")]
    Stopped(Stopped<S3Error>),
    /// Inserting into the local store failed.
    #[error(transparent)]
    Store(#[from] LocalStoreError),
    /// The blocking read of a decisions object panicked.
    #[error("reading a decisions object did not complete")]
    Join(#[source] tokio::task::JoinError),
}

/// Inserts into `store` the accepted copies of `shard_id` that arrived in
/// `[from_millis, to_millis)` (ms since the epoch), read from its decisions
/// objects under `source`'s layout of the batches `committed` names, made
/// with settings `description`.
/// Waits for a rebuild turn first. Listings and reads are retried until
/// they succeed or `stop` is cancelled; a copy already in the store is not
/// added again, so a rebuild that stopped can simply be run again.
///
/// # Errors
/// [`RebuildError::Stopped`] when `stop` is cancelled (the lease was lost)
/// or a call fails for good; [`RebuildError::Store`] when the store fails.
pub async fn rebuild(
    source: &RebuildSource,
    store: &LocalStore,
    shard_id: &str,
    (from_millis, to_millis): (i64, i64),
    committed: &Committed,
    description: &str,
    stop: &CancellationToken,
) -> Result<Rebuilt, RebuildError> {
    let turn = tokio::select! {
        biased;
        () = stop.cancelled() => return Err(RebuildError::Stopped(Stopped::Cancelled)),
        turn = source.budget.rebuild_permit() => turn,
    };
    let mut held = source.budget.reserve();
    held.grow(REBUILD_BYTES);
    let reader = ObjectReader {
        source,
        store,
        shard: Arc::from(shard_id),
        window: (from_millis, to_millis),
        description,
        stop,
        holding: Arc::new(Holding {
            _turn: turn,
            _held: held,
        }),
    };
    let retry = |what| Retry::new(what).metrics(&source.metrics).until(stop);
    let mut rebuilt = Rebuilt::default();
    let everything = SequenceNumber::from(0u64);
    let output = &source.output;
    let mut bucket = output.layout.bucket_of(from_millis);
    while bucket.start_millis() < to_millis {
        let listed: HashSet<SequenceRange> = match committed {
            Committed::ByMainObject => {
                let main_prefix = output.layout.shard_bucket_prefix(bucket, shard_id);
                retry("event window listing")
                    .run(|| list_written(&source.store, &main_prefix, &everything))
                    .await
                    .map_err(RebuildError::Stopped)?
                    .ranges
                    .into_iter()
                    .map(|(_, range)| range)
                    .collect()
            }
            Committed::Through(_) => HashSet::new(),
        };
        let is_committed = |range: &SequenceRange| match committed {
            Committed::ByMainObject => listed.contains(range),
            Committed::Through(through) => through.as_ref().is_none_or(|end| range.last() <= end),
        };
        let prefix = output
            .decisions_layout
            .shard_bucket_prefix(bucket, shard_id);
        let keys = retry("event window listing")
            .run(|| list_all(&source.store, &prefix))
            .await
            .map_err(RebuildError::Stopped)?;
        for key in keys {
            let name = key.strip_prefix(&prefix).unwrap_or(&key);
            let Ok(range) = parse_decisions_name(name) else {
                continue;
            };
            if !is_committed(&range) {
                rebuilt.skipped += 1;
                continue;
            }
            match reader.read(&key).await? {
                Some(copies) => {
                    rebuilt.objects += 1;
                    rebuilt.copies += copies;
                }
                None => rebuilt.skipped += 1,
            }
        }
        bucket = Bucket::of(bucket.size(), bucket.end_millis());
    }
    info!(
        shard_id,
        objects = rebuilt.objects,
        skipped = rebuilt.skipped,
        copies = rebuilt.copies,
        "event window rebuilt from S3"
    );
    Ok(rebuilt)
}

/// What a rebuild holds of the budget: its turn and its bytes. Shared with
/// each blocking read, so that both are given back only once the last read
/// ended, even when the rebuild stopped while one was under way.
struct Holding {
    _turn: Option<OwnedSemaphorePermit>,
    _held: Reservation,
}

/// Reads one rebuild's decisions objects into the store.
struct ObjectReader<'a> {
    source: &'a RebuildSource,
    store: &'a LocalStore,
    shard: Arc<str>,
    window: (i64, i64),
    description: &'a str,
    stop: &'a CancellationToken,
    holding: Arc<Holding>,
}

impl ObjectReader<'_> {
    /// Inserts the copies in the window of the decisions object `key`;
    /// the number inserted, or `None` when the object was left out.
    async fn read(&self, key: &str) -> Result<Option<usize>, RebuildError> {
        let mut outcome = self.pass(key, Pass::Whole).await?;
        if outcome == PassOutcome::TooLarge {
            outcome = self.pass(key, Pass::Chunked).await?;
        }
        match outcome {
            PassOutcome::Inserted(copies) => return Ok(Some(copies)),
            PassOutcome::OtherSettings(written_with) => {
                warn!(
                    key,
                    written_with,
                    now = self.description,
                    "decisions object made with other event settings; its copies are not known"
                );
            }
            PassOutcome::Unreadable(error) => {
                warn!(
                    key,
                    error, "unreadable decisions object left out of the rebuild"
                );
            }
            // A chunked pass inserts whatever the object holds.
            PassOutcome::TooLarge => {}
        }
        Ok(None)
    }

    /// One pass over the object, downloaded again until it completes.
    async fn pass(&self, key: &str, pass: Pass) -> Result<PassOutcome, RebuildError> {
        Retry::new("GetObject")
            .metrics(&self.source.metrics)
            .until(self.stop)
            .run(|| self.attempt(key, pass))
            .await
            .map_err(RebuildError::Stopped)?
    }

    /// One download of the object, read on a blocking thread: `Err` when
    /// the download failed (retried), `Ok(Err)` when the rebuild must stop.
    async fn attempt(
        &self,
        key: &str,
        pass: Pass,
    ) -> Result<Result<PassOutcome, RebuildError>, S3Error> {
        let (metadata, body) = self.source.store.get_stream_with_metadata(key).await?;
        let written_with = metadata.get(FORMAT_METADATA);
        if written_with.map(String::as_str) != Some(self.description) {
            return Ok(Ok(PassOutcome::OtherSettings(format!("{written_with:?}"))));
        }
        let (store, shard, window) = (self.store.clone(), self.shard.clone(), self.window);
        let holding = self.holding.clone();
        let body = body.into_async_read();
        let read = tokio::task::spawn_blocking(move || {
            let _holding = holding;
            let body = TrackedRead::new(SyncIoBridge::new(body));
            let download_failed = body.failed();
            let read = read_copies(
                std::io::BufReader::new(body),
                &shard,
                window,
                (pass, CHUNK_COPIES),
                |copies| store.insert(copies),
            );
            (read, download_failed.load(Ordering::Relaxed))
        })
        .await;
        match read {
            Ok((Ok(outcome), _)) => Ok(Ok(outcome)),
            Ok((Err(ReadError::Io(error)), true)) => {
                Err(self.source.store.download_failed(key, Box::new(error)))
            }
            Ok((Err(ReadError::Io(error)), false)) => {
                Ok(Ok(PassOutcome::Unreadable(error.to_string())))
            }
            Ok((Err(ReadError::Store(error)), _)) => Ok(Err(RebuildError::Store(error))),
            Err(join) => Ok(Err(RebuildError::Join(join))),
        }
    }
}

/// How a pass reads a decisions object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Holds the object's copies, up to a chunk, and inserts them once every
    /// line parsed; an object with more is only checked
    /// ([`PassOutcome::TooLarge`]).
    Whole,
    /// The object parsed whole before: inserts its copies a chunk at a time.
    Chunked,
}

/// What a pass over a decisions object did.
#[derive(Debug, PartialEq, Eq)]
enum PassOutcome {
    /// Every line parsed; this many copies were in the window and inserted.
    Inserted(usize),
    /// Every line parsed, but more copies were in the window than a chunk:
    /// none was inserted.
    TooLarge,
    /// The object does not decompress or a line does not parse: nothing was
    /// inserted (by a whole pass).
    Unreadable(String),
    /// The object records other event settings (its metadata, as text).
    OtherSettings(String),
}

/// Why reading a decisions object's body stopped.
#[derive(Debug)]
enum ReadError {
    /// Reading or decompressing the body failed.
    Io(std::io::Error),
    /// Inserting copies failed.
    Store(LocalStoreError),
}

/// Reads a decisions object's `body` (compressed) of `shard`'s batch, line
/// by line, and passes its accepted copies that arrived in `window` to
/// `insert`, `chunk` at most at a time, as `pass` says.
///
/// # Errors
/// [`ReadError`] when the body cannot be read or `insert` fails; a line
/// that does not parse is [`PassOutcome::Unreadable`].
fn read_copies(
    body: impl BufRead,
    shard: &Arc<str>,
    (from_millis, to_millis): (i64, i64),
    (pass, chunk): (Pass, usize),
    mut insert: impl FnMut(&[(EventKey, AcceptedCopy)]) -> Result<(), LocalStoreError>,
) -> Result<PassOutcome, ReadError> {
    let mut lines = std::io::BufReader::new(
        compression::decoder(DECISIONS_COMPRESSION.codec(), body).map_err(ReadError::Io)?,
    );
    let mut held: Vec<(EventKey, AcceptedCopy)> = Vec::new();
    let (mut line, mut number, mut copies) = (Vec::new(), 0, 0);
    loop {
        line.clear();
        if lines.read_until(b'\n', &mut line).map_err(ReadError::Io)? == 0 {
            break;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if text.is_empty() {
            continue;
        }
        number += 1;
        let recorded = match parse_line(shard, number, text) {
            Ok(recorded) => recorded,
            Err(error) => return Ok(PassOutcome::Unreadable(error)),
        };
        let Some((key, copy)) = recorded.decision.key.zip(recorded.accepted()) else {
            continue;
        };
        if !(from_millis..to_millis).contains(&copy.arrival_millis) {
            continue;
        }
        copies += 1;
        match pass {
            // Past a chunk, the rest is only checked.
            Pass::Whole if copies > chunk => held = Vec::new(),
            Pass::Whole => held.push((key, copy)),
            Pass::Chunked => {
                held.push((key, copy));
                if held.len() >= chunk {
                    insert(&held).map_err(ReadError::Store)?;
                    held.clear();
                }
            }
        }
    }
    if pass == Pass::Whole && copies > chunk {
        return Ok(PassOutcome::TooLarge);
    }
    if !held.is_empty() {
        insert(&held).map_err(ReadError::Store)?;
    }
    Ok(PassOutcome::Inserted(copies))
}

#[cfg(test)]
mod tests;
