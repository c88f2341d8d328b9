//! Rebuilding a shard's window of accepted copies from S3, for a local
//! store that is missing or behind (a new host, a lease that moved, a lost
//! disk): the decisions objects of the shard's committed batches record
//! every accepted copy, with its key.
//!
//! A batch is committed when its main object is in S3 (it is written last);
//! a decisions object without its main object belongs to an uncommitted
//! attempt and is left out (that batch is rebuilt as decided when the shard
//! reaches it). Decisions objects made with other event settings hold keys
//! that cannot be compared and are left out too, with a warning.

use std::collections::HashSet;

use sequence_range::{SequenceNumber, SequenceRange};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::decisions::{self, parse_decisions_name};
use super::rule::{AcceptedCopy, EventKey};
use crate::aws::retry::{Retry, Stopped};
use crate::aws::{ObjectStore, S3Error};
use crate::commit::body::{DECISIONS_COMPRESSION, FORMAT_METADATA};
use crate::ops::metrics::Metrics;
use crate::output::Output;
use crate::output::bucket::Bucket;
use crate::shard::dedup::list_written;

/// What a rebuild read.
#[derive(Debug, Default)]
pub struct Rebuilt {
    /// The accepted copies found, with their keys.
    pub copies: Vec<(EventKey, AcceptedCopy)>,
    /// Decisions objects read.
    pub objects: usize,
    /// Decisions objects left out: uncommitted, other settings, unreadable.
    pub skipped: usize,
}

/// Reads the accepted copies of `shard_id` that arrived in
/// `[from_millis, to_millis)` (ms since the epoch) from its decisions
/// objects under `output`'s
/// layout, for settings `description`. Listings and reads are retried
/// until they succeed or `stop` is cancelled.
///
/// # Errors
/// [`Stopped`] when `stop` is cancelled (the lease was lost) or a call
/// fails for good.
pub async fn rebuild(
    store: &ObjectStore,
    output: &Output,
    shard_id: &str,
    (from_millis, to_millis): (i64, i64),
    description: &str,
    metrics: &Metrics,
    stop: &CancellationToken,
) -> Result<Rebuilt, Stopped<S3Error>> {
    let retry = |what| Retry::new(what).metrics(metrics).until(stop);
    let mut rebuilt = Rebuilt::default();
    let everything = SequenceNumber::from(0u64);
    let mut bucket = output.layout.bucket_of(from_millis);
    while bucket.start_millis() < to_millis {
        let main_prefix = output.layout.shard_bucket_prefix(bucket, shard_id);
        let committed: HashSet<SequenceRange> = retry("event window listing")
            .run(|| list_written(store, &main_prefix, &everything))
            .await?
            .ranges
            .into_iter()
            .map(|(_, range)| range)
            .collect();
        let prefix = output
            .decisions_layout
            .shard_bucket_prefix(bucket, shard_id);
        let keys = retry("event window listing")
            .run(|| list_all(store, &prefix))
            .await?;
        for key in keys {
            let name = key.strip_prefix(&prefix).unwrap_or(&key);
            let Ok(range) = parse_decisions_name(name) else {
                continue;
            };
            if !committed.contains(&range) {
                rebuilt.skipped += 1;
                continue;
            }
            let (body, metadata) = retry("GetObject")
                .run(|| store.get_with_metadata(&key))
                .await?;
            if metadata.get(FORMAT_METADATA).map(String::as_str) != Some(description) {
                warn!(key, written_with = ?metadata.get(FORMAT_METADATA), now = description, "decisions object made with other event settings; its copies are not known");
                rebuilt.skipped += 1;
                continue;
            }
            let recorded =
                crate::output::compression::decompress(DECISIONS_COMPRESSION.codec(), &body)
                    .map_err(|err| err.to_string())
                    .and_then(|plain| decisions::parse(shard_id, &plain));
            match recorded {
                Ok(recorded) => {
                    rebuilt.objects += 1;
                    rebuilt.copies.extend(recorded.iter().filter_map(|r| {
                        let copy = r.accepted()?;
                        (from_millis..to_millis)
                            .contains(&copy.arrival_millis)
                            .then_some((r.decision.key?, copy))
                    }));
                }
                Err(error) => {
                    warn!(
                        key,
                        error, "unreadable decisions object left out of the rebuild"
                    );
                    rebuilt.skipped += 1;
                }
            }
        }
        bucket = Bucket::of(bucket.size(), bucket.end_millis());
    }
    info!(
        shard_id,
        objects = rebuilt.objects,
        skipped = rebuilt.skipped,
        copies = rebuilt.copies.len(),
        "event window rebuilt from S3"
    );
    Ok(rebuilt)
}

/// Every key under `prefix`.
async fn list_all(store: &ObjectStore, prefix: &str) -> Result<Vec<String>, S3Error> {
    let mut keys = Vec::new();
    let mut continuation = None;
    loop {
        let page = store.list_page(prefix, continuation).await?;
        keys.extend(page.keys);
        match page.next_continuation_token {
            Some(token) => continuation = Some(token),
            None => return Ok(keys),
        }
    }
}
