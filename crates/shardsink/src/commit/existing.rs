//! Whether an object already at a batch's key holds the batch's records —
//! the check after a PUT with `If-None-Match: *` answered 412.
//!
//! - JSON Lines and raw bodies are streamed, decompressed and compared line
//!   by line, so neither the object nor its decompressed copy is ever held
//!   whole. Envelope lines (and error objects' lines) that differ in bytes
//!   may still hold the same records (an older shardsink may have encoded
//!   them differently); `json` lines and raw payloads are compared byte for
//!   byte.
//! - Parquet files are compared row by row, whatever their row groups, page
//!   compression or writer. A Parquet file is read from its footer, so the
//!   object is held whole while it is compared: it is counted against the
//!   batch's memory budget for its length, from before its body is read
//!   until the comparison ended.
//! - An object written with other format settings (its
//!   `x-amz-meta-shardsink-format` differs: the settings changed between a
//!   crash and the replay of its pending batch) holds the same records when
//!   it holds as many (`x-amz-meta-shardsink-records`): its key is a
//!   function of the batch's first and last sequence numbers, under a prefix
//!   only this stream writes.
//!
//! The comparisons are `output::read_back`'s (`compare::compare_lines`,
//! `parquet::same_rows`); this module fetches the object, counts what it
//! holds against the budget, and decides.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use tokio_util::io::SyncIoBridge;
use tracing::warn;

use super::body::ObjectBody;
use crate::aws::tracked_read::TrackedRead;
use crate::aws::{BoxError, ObjectStore, S3Error};
use crate::memory::{MemoryBudget, Reservation};
use crate::output::format::{BodyShape, Format};
use crate::output::read_back::compare::{Comparison, compare_lines};
use crate::output::read_back::metadata::{ERRORS_FORMAT, FORMAT_METADATA, RECORDS_METADATA};
use crate::output::read_back::parquet::same_rows;

/// Whether the existing object `key` holds the same records as `body`.
///
/// # Errors
/// [`S3Error`] when the object cannot be read (retried by the caller).
pub(crate) async fn same_records(
    store: &ObjectStore,
    key: &str,
    body: &ObjectBody,
) -> Result<bool, S3Error> {
    let comparison = match body.kind.shape {
        BodyShape::Parquet => compare_parquet(store, key, body).await?,
        BodyShape::JsonLines | BodyShape::Raw => compare_streamed(store, key, body).await?,
    };
    match comparison {
        Comparison::SameBytes => Ok(true),
        Comparison::SameRecords => {
            warn!(
                key,
                "existing object holds the same records in another encoding"
            );
            Ok(true)
        }
        Comparison::Different => written_with_other_settings(store, key, body).await,
    }
}

/// Whether the object was written with other format settings and holds as
/// many records as `body`.
async fn written_with_other_settings(
    store: &ObjectStore,
    key: &str,
    body: &ObjectBody,
) -> Result<bool, S3Error> {
    let metadata = store.user_metadata(key).await?.unwrap_or_default();
    let format = metadata.get(FORMAT_METADATA);
    let records = metadata
        .get(RECORDS_METADATA)
        .and_then(|n| n.parse::<usize>().ok());
    let same = format.is_some_and(|format| *format != body.format) && records == Some(body.records);
    if same {
        warn!(
            key,
            written_as = format.map(String::as_str).unwrap_or_default(),
            now = body.format,
            records = body.records,
            "existing object holds the batch's records in another format"
        );
    }
    Ok(same)
}

/// Reads the whole Parquet object, counted against `body`'s budget while
/// it is held, and compares its rows with `body`'s.
async fn compare_parquet(
    store: &ObjectStore,
    key: &str,
    body: &ObjectBody,
) -> Result<Comparison, S3Error> {
    // Released when the comparison ended (or failed).
    let (existing, _held) = read_counted(store, key, body.budget.as_ref()).await?;
    if existing == body.plain {
        return Ok(Comparison::SameBytes);
    }
    let ours = body.plain.clone();
    let compared = tokio::task::spawn_blocking(move || same_rows(existing, ours)).await;
    Ok(match compared {
        Ok(Ok(true)) => Comparison::SameRecords,
        Ok(Ok(false)) => Comparison::Different,
        Ok(Err(err)) => {
            warn!(key, error = %err, "existing object is not a readable Parquet file");
            Comparison::Different
        }
        Err(join_error) => return Err(store.download_failed(key, Box::new(join_error))),
    })
}

/// The whole object `key`, and the reservation that counts it against
/// `budget` (when there is one): taken for the object's `Content-Length`
/// before its body is read, then set to the bytes read. Drop the
/// reservation when done with the bytes.
///
/// # Errors
/// [`S3Error`] when the object cannot be read; retriable once its body
/// began.
async fn read_counted(
    store: &ObjectStore,
    key: &str,
    budget: Option<&Arc<MemoryBudget>>,
) -> Result<(Bytes, Option<Reservation>), S3Error> {
    let (length, stream) = store.get_stream_with_length(key).await?;
    let mut held = budget.map(MemoryBudget::reserve);
    if let Some(held) = held.as_mut() {
        held.grow(length.unwrap_or(0));
    }
    let existing = stream
        .collect()
        .await
        .map_err(|err| store.download_failed(key, Box::new(err)))?
        .into_bytes();
    if let Some(held) = held.as_mut() {
        held.resize(existing.len() as u64);
    }
    Ok((existing, held))
}

/// Streams the object, decompressed, and compares it line by line with
/// `body`'s plain bytes.
async fn compare_streamed(
    store: &ObjectStore,
    key: &str,
    body: &ObjectBody,
) -> Result<Comparison, S3Error> {
    let stream = store.get_stream(key).await?.into_async_read();
    let expected = body.plain.clone();
    let (codec, records_in_lines) = (body.kind.codec, is_envelope_lines(body));
    let compared = tokio::task::spawn_blocking(move || {
        let source = TrackedRead::new(SyncIoBridge::new(stream));
        let read_failed = source.failed();
        let result = compare_lines(
            codec,
            std::io::BufReader::new(source),
            &expected,
            records_in_lines,
        );
        (result, read_failed.load(Ordering::Relaxed))
    })
    .await;
    let retriable = |source: BoxError| store.download_failed(key, source);
    match compared {
        Ok((Ok(comparison), _)) => Ok(comparison),
        // Reading the object failed (a dropped connection): try again.
        Ok((Err(err), true)) => Err(retriable(Box::new(err))),
        // The bytes arrived but do not decode: not these records.
        Ok((Err(err), false)) => {
            warn!(key, error = %err, "existing object does not decompress");
            Ok(Comparison::Different)
        }
        Err(join_error) => Err(retriable(Box::new(join_error))),
    }
}

/// Whether `body` is envelope lines (the `envelope` format, or an error
/// object), whose records may be encoded in other bytes (an older
/// shardsink's). A `json` line is the payload itself, compared as it is:
/// its members may well be named `sequenceNumber` and `data`.
fn is_envelope_lines(body: &ObjectBody) -> bool {
    body.kind.shape == BodyShape::JsonLines
        && (body.format == ERRORS_FORMAT || body.format == Format::Envelope.description())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_aws::{self, FakeBucket};
    use crate::output::compression::Compression;
    use crate::output::format::BodyKind;
    use crate::output::format::parquet::ParquetBatch;
    use crate::read::record::UserRecordView;

    /// A Parquet file of `n` rows.
    fn parquet_file(n: u64) -> Bytes {
        let mut rows = ParquetBatch::new(None);
        for i in 0..n {
            let sequence_number = (i + 1).to_string();
            rows.push(&UserRecordView {
                shard_id: "shardId-000000000000",
                sequence_number: &sequence_number,
                sub_sequence_number: None,
                partition_key: "pk",
                arrival_millis: 1_795_238_823_045,
                data: &[7; 100],
            })
            .unwrap();
        }
        Bytes::from(rows.finish(Compression::None).unwrap())
    }

    #[tokio::test]
    async fn an_existing_parquet_object_is_counted_against_the_budget_while_held() {
        let bucket = Arc::new(FakeBucket::default());
        let clients = fake_aws::clients(Default::default(), bucket.clone(), Default::default());
        let store = ObjectStore::new(clients.s3, "archive");
        let existing = parquet_file(50);
        bucket
            .objects
            .lock()
            .unwrap()
            .insert("k.parquet".to_owned(), existing.clone());
        let budget = MemoryBudget::new(1 << 20, 1 << 20);

        let (read, held) = read_counted(&store, "k.parquet", Some(&budget))
            .await
            .unwrap();
        assert_eq!(read, existing);
        let held = held.expect("a budget was given");
        assert_eq!(held.bytes(), existing.len() as u64);
        assert_eq!(budget.used(), existing.len() as u64);
        drop(held);
        assert_eq!(budget.used(), 0);

        // The whole check: the object is held against the budget, and
        // released once compared.
        let ours = parquet_file(51);
        let body = ObjectBody {
            kind: BodyKind::from_extension(".parquet").unwrap(),
            bytes: ours.clone(),
            plain: ours,
            records: 51,
            format: "parquet".to_owned(),
            main_format: None,
            main_extension: None,
            budget: None,
        }
        .with_budget(&budget);
        let released = budget.released();
        tokio::pin!(released);
        released.as_mut().enable();
        assert_eq!(
            compare_parquet(&store, "k.parquet", &body).await.unwrap(),
            Comparison::Different
        );
        assert!(
            futures::poll!(released.as_mut()).is_ready(),
            "the object was counted, then released"
        );
        assert_eq!(budget.used(), 0);
    }
}
