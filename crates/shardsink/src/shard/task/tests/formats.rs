//! The shard task with each output format: what reaches S3, the error
//! prefix, and replays across a change of format.

use std::sync::Arc;

use bytes::Bytes;
use sequence_range::SequenceNumber;
use shard_lease::{Checkpoint, PendingBatch};

use super::{Harness, PAST, SHARD, clone_ctx, harness, seq};
use crate::config::CompressionCodec;
use crate::output::Output;
use crate::output::compression::{Compression, decompress};
use crate::output::format::parquet::row_identities;
use crate::output::format::{BodyKind, Format};
use crate::output::key::KeyLayout;
use crate::shard::context::ShardContext;
use crate::shard::error::ShardError;

/// A harness whose batches are written in `format`, uncompressed.
fn with_format(format: Format) -> Harness {
    let h = harness(1_000);
    let output = Output::new(KeyLayout::plain("p"), "p-errors", "p-duplicates", format)
        .with_compression(Compression::None);
    Harness {
        ctx: Arc::new(ShardContext {
            output,
            ..clone_ctx(&h.ctx)
        }),
        ..h
    }
}

fn json() -> Format {
    Format::Json {
        metadata_field: Some("_kinesis".to_owned()),
    }
}

/// The key of records `first..=last` arriving in the minute of `PAST`.
fn key(prefix: &str, first: u64, last: u64, body: BodyKind) -> String {
    let range = sequence_range::SequenceRange::new(
        SequenceNumber::parse(&seq(first)).unwrap(),
        SequenceNumber::parse(&seq(last)).unwrap(),
    )
    .unwrap();
    KeyLayout::plain(prefix).object_key(
        crate::output::bucket::Bucket::minute(PAST),
        SHARD,
        &range,
        body,
    )
}

fn object(h: &Harness, key: &str) -> Option<Bytes> {
    h.bucket.objects.lock().unwrap().get(key).cloned()
}

fn metadata(h: &Harness, key: &str, name: &str) -> Option<String> {
    h.bucket
        .metadata
        .lock()
        .unwrap()
        .get(key)
        .and_then(|metadata| metadata.get(name).cloned())
}

/// Puts an object at `key` as a writer with other settings left it.
fn plant(h: &Harness, key: &str, body: Bytes, format: &str, records: usize) {
    h.bucket
        .objects
        .lock()
        .unwrap()
        .insert(key.to_owned(), body);
    h.bucket.metadata.lock().unwrap().insert(
        key.to_owned(),
        [
            ("shardsink-format".to_owned(), format.to_owned()),
            ("shardsink-records".to_owned(), records.to_string()),
        ]
        .into(),
    );
}

/// Puts the error object of one rejected record of a `json()` batch at
/// `key`, as a `json()` writer left it before a crash.
fn plant_error_object(h: &Harness, key: &str, body: Bytes) {
    plant(h, key, body, "errors", 1);
    h.bucket
        .metadata
        .lock()
        .unwrap()
        .get_mut(key)
        .unwrap()
        .insert("shardsink-main-format".to_owned(), json().description());
}

/// The pending batch of records 1 to 3, recorded under `key`.
fn pending(key: &str) -> PendingBatch {
    PendingBatch {
        key: key.to_owned(),
        first: SequenceNumber::parse(&seq(1)).unwrap(),
        last: SequenceNumber::parse(&seq(3)).unwrap(),
    }
}

fn json_lines(body: &[u8]) -> Vec<serde_json::Value> {
    std::str::from_utf8(body)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn rejected_records_go_to_the_error_prefix_before_the_main_object() {
    let h = with_format(json());
    h.shard.push(&seq(1), PAST + 1_000, br#"{"order":1}"#);
    h.shard.push(&seq(2), PAST + 2_000, b"not json");
    h.shard.push(&seq(3), PAST + 3_000, br#"{"order":3}"#);
    let main = key("p", 1, 3, BodyKind::lines(CompressionCodec::None));
    let errors = key("p-errors", 1, 3, BodyKind::lines(CompressionCodec::None));
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, |h| object(h, &main).is_some())
        .await
        .unwrap();

    let lines = json_lines(&object(&h, &main).unwrap());
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["order"], 1);
    assert_eq!(lines[0]["_kinesis"]["sequenceNumber"], seq(1));
    assert_eq!(lines[1]["_kinesis"]["sequenceNumber"], seq(3));
    let rejected = json_lines(&object(&h, &errors).unwrap());
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0]["sequenceNumber"], seq(2));
    assert_eq!(rejected[0]["data"], "bm90IGpzb24=");
    assert!(
        rejected[0]["errorMessage"]
            .as_str()
            .unwrap()
            .contains("not a JSON object")
    );
    let attempts = h.bucket.put_attempts.lock().unwrap().clone();
    let position = |key: &str| attempts.iter().position(|k| k == key).unwrap();
    assert!(position(&errors) < position(&main), "{attempts:?}");
    assert_eq!(
        metadata(&h, &main, "shardsink-format").as_deref(),
        Some("json;metadata-field=_kinesis")
    );
    assert_eq!(
        metadata(&h, &main, "shardsink-records").as_deref(),
        Some("2")
    );
    assert_eq!(
        metadata(&h, &errors, "shardsink-records").as_deref(),
        Some("1")
    );
    assert!(
        h.ctx
            .metrics
            .encode()
            .contains(r#"shardsink_records_errored_total{reason="not_json_object"} 1"#)
    );
    assert_eq!(
        h.row().await.checkpoint,
        Checkpoint::SequenceNumber(SequenceNumber::parse(&seq(3)).unwrap())
    );
}

#[tokio::test(start_paused = true)]
async fn a_batch_whose_every_record_is_rejected_still_writes_its_main_object() {
    let h = with_format(json());
    h.shard.push(&seq(1), PAST + 1_000, b"[1]");
    h.shard.push(&seq(2), PAST + 2_000, b"\xff");
    let main = key("p", 1, 2, BodyKind::lines(CompressionCodec::None));
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, |h| object(h, &main).is_some())
        .await
        .unwrap();
    assert_eq!(
        object(&h, &main).unwrap().len(),
        0,
        "no line, but the range is committed"
    );
    let errors = key("p-errors", 1, 2, BodyKind::lines(CompressionCodec::None));
    assert_eq!(json_lines(&object(&h, &errors).unwrap()).len(), 2);
    let metrics = h.ctx.metrics.encode();
    assert!(metrics.contains(r#"shardsink_records_errored_total{reason="not_json_object"} 1"#));
    assert!(metrics.contains(r#"shardsink_records_errored_total{reason="not_utf8"} 1"#));
}

#[tokio::test(start_paused = true)]
async fn raw_objects_hold_the_payloads_and_their_delimiters() {
    let h = with_format(Format::Raw {
        delimiter: b"|".to_vec(),
    });
    for i in 1..=3 {
        h.shard
            .push(&seq(i), PAST + 1_000 * i as i64, format!("p{i}").as_bytes());
    }
    let main = key("p", 1, 3, BodyKind::raw(CompressionCodec::None));
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, |h| object(h, &main).is_some())
        .await
        .unwrap();
    assert_eq!(&object(&h, &main).unwrap()[..], b"p1|p2|p3|");
    assert_eq!(
        metadata(&h, &main, "shardsink-records").as_deref(),
        Some("3")
    );
}

#[tokio::test(start_paused = true)]
async fn parquet_objects_hold_one_row_per_record() {
    let h = with_format(Format::Parquet { schema: None });
    for i in 1..=4 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"\x00\x01");
    }
    let main = key("p", 1, 4, BodyKind::PARQUET);
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, |h| object(h, &main).is_some())
        .await
        .unwrap();
    let rows = row_identities(object(&h, &main).unwrap()).unwrap();
    assert_eq!(rows, (1..=4).map(|i| (seq(i), None)).collect::<Vec<_>>());
}

/// The pending batch was written as envelope lines before a crash; the
/// daemon now writes `json`. The replay writes the key's shape (JSON Lines)
/// in the current format, meets the envelope object (412), and takes it
/// for the batch: another format, as many records.
#[tokio::test(start_paused = true)]
async fn a_replay_accepts_the_batch_written_in_another_format() {
    let h = with_format(json());
    for i in 1..=3 {
        h.shard
            .push(&seq(i), PAST + 1_000 * i as i64, br#"{"n":1}"#);
    }
    let pending_key = key("p", 1, 3, BodyKind::lines(CompressionCodec::Zstd));
    let envelope = Bytes::from(Compression::Zstd(3).compress(b"envelope lines\n").unwrap());
    plant(&h, &pending_key, envelope.clone(), "envelope", 3);
    let lease = h
        .lease(Checkpoint::TrimHorizon, Some(pending(&pending_key)))
        .await;
    h.run_until(lease, |h| {
        h.shard.reads.load(std::sync::atomic::Ordering::SeqCst) >= 2
    })
    .await
    .unwrap();
    assert_eq!(
        object(&h, &pending_key),
        Some(envelope),
        "never overwritten"
    );
    assert_eq!(
        h.row().await.checkpoint,
        Checkpoint::SequenceNumber(SequenceNumber::parse(&seq(3)).unwrap())
    );
    assert_eq!(
        h.bucket.objects.lock().unwrap().len(),
        1,
        "nothing written twice"
    );
}

/// The same, but the object there holds another number of records: not
/// this batch, so the shard stops rather than take it for one.
#[tokio::test(start_paused = true)]
async fn a_replay_refuses_an_object_of_another_format_with_other_records() {
    let h = with_format(json());
    for i in 1..=3 {
        h.shard
            .push(&seq(i), PAST + 1_000 * i as i64, br#"{"n":1}"#);
    }
    let pending_key = key("p", 1, 3, BodyKind::lines(CompressionCodec::None));
    plant(&h, &pending_key, Bytes::from_static(b"{}\n"), "envelope", 1);
    let lease = h
        .lease(Checkpoint::TrimHorizon, Some(pending(&pending_key)))
        .await;
    let exit = h.run_until(lease, |_| false).await;
    assert!(
        matches!(exit, Err(ShardError::ObjectConflict { .. })),
        "{exit:?}"
    );
    assert_eq!(
        decompress(CompressionCodec::None, &object(&h, &pending_key).unwrap()).unwrap(),
        b"{}\n"
    );
}

/// A `json` run wrote a batch's error object and crashed before its main
/// object; the daemon now writes `envelope`. The replay writes the main
/// object in the format the error object was written for, so the rejected
/// record is in the error prefix only, and every record is in S3 once.
#[tokio::test(start_paused = true)]
async fn a_replay_after_a_change_of_format_leaves_rejected_records_where_they_are() {
    let h = with_format(Format::Envelope);
    h.shard.push(&seq(1), PAST + 1_000, br#"{"n":1}"#);
    h.shard.push(&seq(2), PAST + 2_000, b"not json");
    h.shard.push(&seq(3), PAST + 3_000, br#"{"n":3}"#);
    let main = key("p", 1, 3, BodyKind::lines(CompressionCodec::None));
    let errors = key("p-errors", 1, 3, BodyKind::lines(CompressionCodec::None));
    // What the json run wrote before the crash: the error object only.
    let error_line = error_lines(&[(2, b"not json")]);
    plant_error_object(&h, &errors, error_line.clone());
    let lease = h.lease(Checkpoint::TrimHorizon, Some(pending(&main))).await;
    h.run_until(lease, |h| object(h, &main).is_some())
        .await
        .unwrap();
    let lines = json_lines(&object(&h, &main).unwrap());
    let numbers: Vec<&str> = lines
        .iter()
        .map(|line| line["_kinesis"]["sequenceNumber"].as_str().unwrap())
        .collect();
    assert_eq!(
        numbers,
        [seq(1), seq(3)],
        "json lines, without the rejected record"
    );
    assert_eq!(
        &object(&h, &errors).unwrap()[..],
        error_line,
        "left as it was"
    );
}

/// The encoded error lines `json()` writes for `records` of the shard.
fn error_lines(records: &[(u64, &'static [u8])]) -> Bytes {
    let mut encoder = crate::output::format::BodyEncoder::new(SHARD, &json());
    for (i, data) in records {
        encoder.push(
            &crate::read::record::ShardRecord {
                sequence_number: SequenceNumber::parse(&seq(*i)).unwrap(),
                arrival_millis: PAST + 1_000 * *i as i64,
                partition_key: format!("pk-{}", seq(*i)),
                data: Bytes::from_static(data),
                user_records: None,
            },
            None,
        );
    }
    Bytes::from(encoder.finish().errors)
}

/// A batch's error object is in S3 but not its main object, and the lease
/// row that recorded the batch is gone (a lost lease table): the shard
/// starts over from the oldest record. Dedup finds the uncommitted batch
/// and the task rebuilds exactly it — not a longer batch whose error object
/// would hold the rejected record a second time.
#[tokio::test(start_paused = true)]
async fn an_uncommitted_batch_is_rebuilt_into_the_same_objects() {
    let h = with_format(json());
    let payloads: [(u64, &'static [u8]); 5] = [
        (1, br#"{"n":1}"#),
        (2, b"not json"),
        (3, br#"{"n":3}"#),
        (4, br#"{"n":4}"#),
        (5, b"[5]"),
    ];
    for (i, data) in payloads {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, data);
    }
    let lines = BodyKind::lines(CompressionCodec::None);
    let errors = key("p-errors", 1, 3, lines);
    plant_error_object(&h, &errors, error_lines(&[(2, b"not json")]));
    let main = key("p", 1, 3, lines);
    let next = key("p", 4, 5, lines);
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, |h| object(h, &next).is_some())
        .await
        .unwrap();
    let numbers = |key: &str| -> Vec<String> {
        json_lines(&object(&h, key).unwrap())
            .iter()
            .map(|line| {
                line["_kinesis"]["sequenceNumber"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(numbers(&main), [seq(1), seq(3)]);
    assert_eq!(numbers(&next), [seq(4)]);
    let mut keys: Vec<String> = h.bucket.objects.lock().unwrap().keys().cloned().collect();
    keys.sort();
    let mut expected = vec![main, next, errors, key("p-errors", 4, 5, lines)];
    expected.sort();
    assert_eq!(keys, expected, "one error object per batch, nothing else");
}
