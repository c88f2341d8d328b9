//! The shard task with each output format: what reaches S3, the error
//! prefix, and replays across a change of format.

use bytes::Bytes;
use sequence_range::SequenceNumber;
use shard_lease::{Checkpoint, PendingBatch};

use super::{Harness, PAST, SHARD, harness, seq, writing};
use crate::commit::error::CommitError;
use crate::output::compression::CompressionCodec;
use crate::output::compression::{Compression, decompress};
use crate::output::format::{Bodies, BodyEncoder, BodyKind, Format, MainBody};
use crate::output::key::KeyLayout;
use crate::output::read_back::parquet::row_identities;
use crate::read::record::ShardRecord;
use crate::shard::context::ShardExit;
use crate::shard::error::ShardError;

/// A harness whose batches are written in `format`, uncompressed.
fn with_format(format: Format) -> Harness {
    with_output(format, Compression::None)
}

/// A harness whose batches are written in `format` with `compression`,
/// under plain keys per minute.
fn with_output(format: Format, compression: Compression) -> Harness {
    writing(harness(1_000), format, compression, KeyLayout::plain("p"))
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
    h.run_until(lease, "the main object", |h| object(h, &main).is_some())
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
    h.run_until(lease, "the main object", |h| object(h, &main).is_some())
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
    h.run_until(lease, "the main object", |h| object(h, &main).is_some())
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
    h.run_until(lease, "the main object", |h| object(h, &main).is_some())
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
    h.run_until(lease, "the replayed batch checkpointed", |h| {
        h.row_checkpoint_is(3)
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
    let exit = h
        .run_to_exit(lease, "the task to stop on the other object")
        .await;
    assert!(
        matches!(
            exit,
            Err(ShardError::Commit(CommitError::ObjectConflict { .. }))
        ),
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
    h.run_until(lease, "the main object", |h| object(h, &main).is_some())
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

/// The shard's record `i` with payload `data`, as the fake shard serves
/// it.
fn record(i: u64, data: &[u8]) -> ShardRecord {
    ShardRecord {
        sequence_number: SequenceNumber::parse(&seq(i)).unwrap(),
        arrival_millis: PAST + 1_000 * i as i64,
        partition_key: format!("pk-{}", seq(i)),
        data: Bytes::copy_from_slice(data),
        user_records: None,
    }
}

/// The bodies `format` encodes `records` (number, payload) into.
fn encode(format: &Format, records: &[(u64, &[u8])]) -> Bodies {
    let mut encoder = BodyEncoder::new(SHARD, format);
    for (i, data) in records {
        encoder.push(&record(*i, data), None);
    }
    encoder.finish()
}

/// The encoded error lines `json()` writes for `records` of the shard.
fn error_lines(records: &[(u64, &[u8])]) -> Bytes {
    Bytes::from(encode(&json(), records).errors)
}

/// A batch's error object is in S3 but not its main object, and the lease
/// row that recorded the batch is gone (a lost lease table): the shard
/// starts over from the oldest record. ResumeSkip finds the uncommitted batch
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
    h.run_until(lease, "the next batch's main object", |h| {
        object(h, &next).is_some()
    })
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

/// What became of a batch whose key was already taken.
struct Met {
    h: Harness,
    /// The batch's key.
    key: String,
    /// What was at the key before the task wrote.
    existing: Bytes,
    exit: Result<ShardExit, ShardError>,
}

impl Met {
    /// The task took the object for its batch: left it as it was,
    /// counted the batch as already present, and checkpointed it.
    async fn assert_accepted(&self) {
        assert!(
            matches!(self.exit, Ok(ShardExit::Shutdown)),
            "{:?}",
            self.exit
        );
        self.assert_untouched();
        assert_eq!(
            self.h
                .ctx
                .metrics
                .batches(crate::ops::metrics::Outcome::already_present),
            1
        );
        assert_eq!(
            self.h.row().await.checkpoint,
            Checkpoint::SequenceNumber(SequenceNumber::parse(&seq(3)).unwrap())
        );
    }

    /// The task stopped on the object: left it as it was, and neither
    /// checkpointed the batch nor dropped it from the lease row.
    async fn assert_conflict(&self) {
        assert!(
            matches!(&self.exit, Err(ShardError::Commit(CommitError::ObjectConflict { key, .. })) if *key == self.key),
            "{:?}",
            self.exit
        );
        self.assert_untouched();
        let row = self.h.row().await;
        assert_eq!(row.checkpoint, Checkpoint::TrimHorizon);
        assert_eq!(
            row.pending_batch.map(|pending| pending.key),
            Some(self.key.clone())
        );
    }

    fn assert_untouched(&self) {
        assert_eq!(
            object(&self.h, &self.key),
            Some(self.existing.clone()),
            "never overwritten"
        );
        let attempts = self.h.bucket.put_attempts.lock().unwrap().clone();
        assert_eq!(
            attempts,
            std::slice::from_ref(&self.key),
            "one PUT, answered 412"
        );
    }
}

/// Runs the shard task in `format` with `compression` over records 1 to 3
/// (`payloads`), one batch. `existing` lands at the batch's key, with the
/// metadata the task writes (this format, three records), just before the
/// task's PUT — after the resume skip listed the bucket — so the PUT meets 412 and
/// only the comparison of `existing` with the batch decides.
async fn meet_existing(
    format: Format,
    compression: Compression,
    payloads: [&[u8]; 3],
    existing: Bytes,
) -> Met {
    let h = with_output(format.clone(), compression);
    for (i, data) in (1..).zip(payloads) {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, data);
    }
    let key = key("p", 1, 3, format.body_kind(compression.codec()));
    let metadata: std::collections::HashMap<String, String> = [
        ("shardsink-format".to_owned(), format.description()),
        ("shardsink-records".to_owned(), "3".to_owned()),
    ]
    .into();
    let (bucket, at, body) = (h.bucket.clone(), key.clone(), existing.clone());
    *h.bucket.on_put.lock().unwrap() = Some(Box::new(move |put: &str, creates: bool| {
        if put == at && creates {
            bucket
                .objects
                .lock()
                .unwrap()
                .insert(at.clone(), body.clone());
            bucket
                .metadata
                .lock()
                .unwrap()
                .insert(at.clone(), metadata.clone());
        }
    }));
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let exit = h
        .run_until_or_exit(lease, "the batch checkpointed, or the task stopped", |h| {
            h.row_checkpoint_is(3)
        })
        .await;
    Met {
        h,
        key,
        existing,
        exit,
    }
}

/// `payloads` as records 1 to 3, with their numbers.
fn numbered(payloads: [&[u8]; 3]) -> [(u64, &[u8]); 3] {
    [(1, payloads[0]), (2, payloads[1]), (3, payloads[2])]
}

/// The main body `format` writes for records 1 to 3 (`payloads`),
/// compressed with `compression` — for Parquet, pages compressed with it.
fn main_body(format: &Format, payloads: [&[u8]; 3], compression: Compression) -> Bytes {
    let bodies = encode(format, &numbered(payloads));
    assert!(bodies.errors.is_empty(), "every record fits the format");
    Bytes::from(match bodies.main {
        MainBody::Bytes(plain) => compression.compress(&plain).unwrap(),
        MainBody::Parquet(rows) => rows.finish(compression).unwrap(),
        MainBody::Iceberg(_) => unreachable!("no table format here"),
    })
}

/// Payloads of a few hundred bytes, so that compression levels differ.
fn long_payload(n: u32, text: &str) -> Vec<u8> {
    format!(
        r#"{{"sequenceNumber":"{n}","data":"{text}","note":"{}"}}"#,
        "all work and no play ".repeat(12)
    )
    .into_bytes()
}

fn long_payloads() -> [Vec<u8>; 3] {
    [
        long_payload(1, "a"),
        long_payload(2, "b"),
        long_payload(3, "c"),
    ]
}

/// The batch's lines or payloads, compressed at another level than the
/// task's (`ours`): other bytes, the same records — taken for the batch.
async fn assert_recompressed_is_the_batch(format: Format, ours: Compression, theirs: Compression) {
    let [a, b, c] = long_payloads();
    let payloads: [&[u8]; 3] = [&a, &b, &c];
    let existing = main_body(&format, payloads, theirs);
    assert_ne!(existing, main_body(&format, payloads, ours), "other bytes");
    meet_existing(format, ours, payloads, existing)
        .await
        .assert_accepted()
        .await;
}

#[tokio::test(start_paused = true)]
async fn json_the_same_lines_compressed_otherwise_are_the_batch() {
    assert_recompressed_is_the_batch(json(), Compression::Zstd(3), Compression::Zstd(19)).await;
}

/// The payloads hold members named `sequenceNumber` and `data`, as
/// envelope lines do: a `json` line is compared as it is, never taken for
/// an envelope record with those members.
#[tokio::test(start_paused = true)]
async fn json_other_payloads_are_a_conflict() {
    let [a, b, c] = long_payloads();
    let payloads: [&[u8]; 3] = [&a, &b, &c];
    let other = String::from_utf8(b.clone())
        .unwrap()
        .replace("all work", "some work");
    let existing = main_body(&json(), [&a, other.as_bytes(), &c], Compression::Zstd(3));
    meet_existing(json(), Compression::Zstd(3), payloads, existing)
        .await
        .assert_conflict()
        .await;
}

fn raw() -> Format {
    Format::Raw {
        delimiter: b"\x1e".to_vec(),
    }
}

#[tokio::test(start_paused = true)]
async fn raw_the_same_payloads_compressed_otherwise_are_the_batch() {
    assert_recompressed_is_the_batch(raw(), Compression::Gzip(6), Compression::Gzip(1)).await;
}

#[tokio::test(start_paused = true)]
async fn raw_other_payloads_are_a_conflict() {
    let payloads: [&[u8]; 3] = [b"p1", b"p2", b"p3"];
    let existing = main_body(&raw(), [b"p1", b"p2", b"p4"], Compression::Gzip(6));
    meet_existing(raw(), Compression::Gzip(6), payloads, existing)
        .await
        .assert_conflict()
        .await;
}

/// `file`'s rows written again with gzip pages and one row per row group.
fn rewritten(file: Bytes) -> Bytes {
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::basic::{Compression as PageCompression, GzipLevel};
    use parquet::file::properties::WriterProperties;

    let reader = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    let properties = WriterProperties::builder()
        .set_compression(PageCompression::GZIP(GzipLevel::default()))
        .set_max_row_group_row_count(Some(1))
        .build();
    let mut writer =
        ArrowWriter::try_new(Vec::new(), reader.schema().clone(), Some(properties)).unwrap();
    for batch in reader.build().unwrap() {
        writer.write(&batch.unwrap()).unwrap();
    }
    Bytes::from(writer.into_inner().unwrap())
}

fn parquet() -> Format {
    Format::Parquet { schema: None }
}

#[tokio::test(start_paused = true)]
async fn parquet_the_same_rows_in_other_row_groups_and_pages_are_the_batch() {
    let payloads: [&[u8]; 3] = [b"\x00one", b"\x01two", b"\x02three"];
    let ours = main_body(&parquet(), payloads, Compression::Zstd(3));
    let existing = rewritten(ours.clone());
    assert_ne!(existing, ours, "other bytes");
    meet_existing(parquet(), Compression::Zstd(3), payloads, existing)
        .await
        .assert_accepted()
        .await;
}

#[tokio::test(start_paused = true)]
async fn parquet_other_rows_are_a_conflict() {
    let payloads: [&[u8]; 3] = [b"\x00one", b"\x01two", b"\x02three"];
    let existing = main_body(
        &parquet(),
        [b"\x00one", b"\x01TWO", b"\x02three"],
        Compression::Zstd(3),
    );
    meet_existing(parquet(), Compression::Zstd(3), payloads, existing)
        .await
        .assert_conflict()
        .await;
}
