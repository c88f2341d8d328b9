//! Tests of check 3: bodies read against their keys and stored counts.

use super::*;
use crate::config::CompressionCodec;
use crate::output::compression::Compression;
use crate::verify::test_support::{MINUTE_MILLIS, SHARD, object, object_in};

fn line(shard: &str, sequence_number: &str, sub: Option<u64>, timestamp: &str) -> String {
    let sub = sub
        .map(|s| format!(",\"subSequenceNumber\":{s}"))
        .unwrap_or_default();
    format!(
        "{{\"shardId\":\"{shard}\",\"sequenceNumber\":\"{sequence_number}\"{sub},\"partitionKey\":\"k\",\"approximateArrivalTimestamp\":\"{timestamp}\",\"data\":\"aGk=\"}}\n"
    )
}

const IN_MINUTE: &str = "2026-11-21T05:27:03.045Z";

fn body(lines: &[String]) -> Vec<u8> {
    lines.concat().into_bytes()
}

#[test]
fn a_batch_written_by_shardsink_reads_clean() {
    use crate::output::format::envelope::LineEncoder;
    use crate::read::record::ShardRecord;
    let mut encoder = LineEncoder::new(SHARD);
    let mut lines = Vec::new();
    for (i, sequence_number) in ["9", "10", "12"].into_iter().enumerate() {
        let record = ShardRecord {
            sequence_number: sequence_range::SequenceNumber::parse(sequence_number).unwrap(),
            arrival_millis: MINUTE_MILLIS + 1_000 * i as i64,
            partition_key: "pk \"quoted\"".to_owned(),
            data: bytes::Bytes::from_static(b"\x00\xffdata"),
            user_records: None,
        };
        encoder.encode(&record, &mut lines);
    }
    for compression in [
        Compression::None,
        Compression::Gzip(6),
        Compression::Zstd(3),
    ] {
        let object = object_in(SHARD, MINUTE_MILLIS, 9, 12, compression.codec());
        let check = check_body(Role::Main, &object, &compression.compress(&lines).unwrap());
        assert_eq!(
            (
                check.lines,
                check.kinesis_records,
                check.ends,
                check.problems
            ),
            (
                3,
                3,
                Some(Ends {
                    first: true,
                    last: true
                }),
                0
            ),
            "{compression:?}"
        );
        assert_eq!(check.positions.len(), 3);
    }
}

#[test]
fn kpl_user_records_share_a_sequence_number() {
    let object = object(7, 7);
    let check = check_body(
        Role::Main,
        &object,
        &body(&[
            line(SHARD, "7", Some(0), IN_MINUTE),
            line(SHARD, "7", Some(1), IN_MINUTE),
        ]),
    );
    assert_eq!(
        (check.lines, check.kinesis_records, check.problems),
        (2, 1, 0)
    );
}

fn stored(format: &str, records: u64) -> HashMap<String, String> {
    [
        (FORMAT_METADATA.to_owned(), format.to_owned()),
        (RECORDS_METADATA.to_owned(), records.to_string()),
    ]
    .into()
}

#[test]
fn the_stored_record_count_is_checked() {
    let lines = body(&[
        line(SHARD, "1", None, IN_MINUTE),
        line(SHARD, "2", None, IN_MINUTE),
    ]);
    let object = object(1, 2);
    assert_eq!(
        check_object(Role::Main, &object, &lines, &stored("envelope", 2)).problems,
        0
    );
    assert_eq!(
        check_object(Role::Main, &object, &lines, &stored("envelope", 3))
            .first_problem
            .as_deref(),
        Some("2 records, but x-amz-meta-shardsink-records says 3")
    );
    assert_eq!(
        check_object(Role::Main, &object, &lines, &HashMap::new()).problems,
        0
    );
}

#[test]
fn raw_objects_are_checked_against_their_stored_count() {
    let mut raw = object(1, 2);
    raw.body = crate::output::format::BodyKind::raw(CompressionCodec::None);
    let check = check_object(
        Role::Main,
        &raw,
        b"a\x1eb\x1e",
        &stored("raw;delimiter=1e", 2),
    );
    assert_eq!((check.lines, check.problems), (2, 0));
    for (body, records) in [(&b"a\x1eb"[..], 2), (b"a\x1e", 2), (b"", 1)] {
        assert_eq!(
            check_object(Role::Main, &raw, body, &stored("raw;delimiter=1e", records)).problems,
            1,
            "{body:?}"
        );
    }
    // Without a delimiter only an empty object can hold no record.
    assert_eq!(
        check_object(Role::Main, &raw, b"ab", &stored("raw;delimiter=", 2)).problems,
        0
    );
    assert_eq!(
        check_object(Role::Main, &raw, b"ab", &stored("raw;delimiter=", 0)).problems,
        1
    );
}

/// `--deep` on Parquet objects, fetched from S3 with their metadata:
/// the daemon's files (without and with a schema) read clean row by
/// row; a row outside the key's range, a stored count the rows do not
/// match, and a body that is not Parquet are each reported.
#[tokio::test]
async fn parquet_objects_are_read_row_by_row() {
    use std::sync::Arc;

    use crate::fake_aws::{self, FakeBucket};
    use crate::output::format::schema::ParquetSchema;
    use crate::output::format::{BodyEncoder, BodyKind, MainBody};
    use crate::output::key::KeyLayout;
    use crate::read::record::ShardRecord;
    use crate::verify::test_support::range;

    let file = |format: &Format, payloads: &[(&str, &[u8])]| -> Bytes {
        let mut encoder = BodyEncoder::new(SHARD, format);
        for (i, (sequence_number, data)) in payloads.iter().enumerate() {
            encoder.push(
                &ShardRecord {
                    sequence_number: SequenceNumber::parse(sequence_number).unwrap(),
                    arrival_millis: MINUTE_MILLIS + 1_000 * i as i64,
                    partition_key: "pk".to_owned(),
                    data: Bytes::copy_from_slice(data),
                    user_records: None,
                },
                None,
            );
        }
        let bodies = encoder.finish();
        assert!(bodies.errors.is_empty());
        let MainBody::Parquet(rows) = bodies.main else {
            panic!("parquet rows")
        };
        Bytes::from(rows.finish(Compression::Zstd(3)).unwrap())
    };
    let plain = Format::Parquet { schema: None };
    let schema = ParquetSchema::from_json(r#"[{"name": "n", "type": "int64"}]"#).unwrap();
    let typed = Format::Parquet {
        schema: Some(Arc::new(schema)),
    };
    let rows: [(&str, &[u8]); 3] = [("9", b"\x00"), ("10", b"\x01"), ("12", b"")];
    let typed_rows: [(&str, &[u8]); 2] = [("20", br#"{"n":1}"#), ("21", br#"{"n":2}"#)];
    let bucket = Arc::new(FakeBucket::default());
    let put = |first: u64, last: u64, body: &Bytes, format: &Format, records: &str| {
        let object_range = range(first, last);
        let minute = crate::output::bucket::Bucket::minute(MINUTE_MILLIS);
        let kind = BodyKind::PARQUET;
        let key = KeyLayout::plain("p").object_key(minute, SHARD, &object_range, kind);
        bucket
            .objects
            .lock()
            .unwrap()
            .insert(key.clone(), body.clone());
        bucket.metadata.lock().unwrap().insert(
            key.clone(),
            [
                (FORMAT_METADATA.to_owned(), format.description()),
                (RECORDS_METADATA.to_owned(), records.to_owned()),
            ]
            .into(),
        );
        ArchivedKey {
            key,
            bucket: minute,
            shard_id: SHARD.to_owned(),
            range: object_range,
            body: kind,
        }
    };
    let written = file(&plain, &rows);
    let objects = [
        put(9, 12, &written, &plain, "3"),
        put(20, 21, &file(&typed, &typed_rows), &typed, "2"),
        put(9, 11, &written, &plain, "3"),
        put(
            30,
            32,
            &file(&plain, &[("30", b"a"), ("32", b"b")]),
            &plain,
            "3",
        ),
        put(40, 42, &written.slice(..written.len() - 8), &plain, "3"),
    ];
    let clients = fake_aws::clients(Default::default(), bucket, Default::default());
    let store = ObjectStore::new(clients.s3, "bucket");

    let (summary, _) = read_objects(&store, &objects, Role::Main, &HashMap::new(), false).await;
    let found: Vec<(&str, &str)> = summary
        .unreadable
        .iter()
        .map(|unreadable| (unreadable.key.as_str(), unreadable.reason.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                objects[2].key.as_str(),
                "row 3: sequenceNumber 12 is outside the key's range 9-11"
            ),
            (
                objects[3].key.as_str(),
                "2 records, but x-amz-meta-shardsink-records says 3"
            ),
            (
                objects[4].key.as_str(),
                found.get(2).map_or("", |(_, reason)| reason)
            ),
        ]
    );
    assert!(
        found[2].1.starts_with("is not a readable Parquet file"),
        "{}",
        found[2].1
    );
    // Rows of the clean files, and of the two that read to their end.
    assert_eq!(summary.lines, 3 + 2 + 3 + 2);
    assert_eq!(summary.kinesis_records, 3 + 2 + 3 + 2);
}

/// A batch whose first and last records were rejected: its main
/// object holds neither, its error object both.
#[test]
fn end_records_may_be_in_the_error_object() {
    let object = object(1, 3);
    let middle = body(&[line(SHARD, "2", None, IN_MINUTE)]);
    let checked = |in_errors: Ends| {
        let mut check = check_body(Role::Main, &object, &middle);
        check_ends(&mut check, &object, in_errors);
        check
    };
    let both = Ends {
        first: true,
        last: true,
    };
    assert_eq!(checked(both).problems, 0);
    let first_only = Ends {
        first: true,
        last: false,
    };
    assert_eq!(
        checked(first_only).first_problem.as_deref(),
        Some("no record has the key's last sequence number 3")
    );
    assert_eq!(checked(Ends::default()).problems, 2);
    let errors = body(&[
        line(SHARD, "1", None, IN_MINUTE),
        line(SHARD, "3", None, IN_MINUTE),
    ]);
    assert_eq!(check_body(Role::Main, &object, &errors).ends, Some(both));
}

#[test]
fn an_empty_object_holds_no_record() {
    // Every record of its batch went to the error prefix.
    assert_eq!(
        check_body(Role::Main, &object(1, 2), b""),
        BodyCheck::default()
    );
}

#[test]
fn json_lines_are_checked_by_their_metadata_member() {
    let metadata = |seq: &str| {
        format!(
            "{{\"order\":1,\"m\":{{\"shardId\":\"{SHARD}\",\"sequenceNumber\":\"{seq}\",\"partitionKey\":\"k\",\"approximateArrivalTimestamp\":\"{IN_MINUTE}\"}}}}\n"
        )
    };
    let check = check_body(
        Role::Main,
        &object(1, 2),
        &body(&[metadata("1"), metadata("2")]),
    );
    assert_eq!(
        (check.lines, check.kinesis_records, check.problems),
        (2, 2, 0)
    );
    let check = check_body(
        Role::Main,
        &object(1, 2),
        &body(&[metadata("1"), metadata("3")]),
    );
    assert_eq!(
        check.first_problem.as_deref(),
        Some("line 2: sequenceNumber 3 is outside the key's range 1-2")
    );
    // Without metadata, lines are counted.
    let check = check_body(Role::Main, &object(1, 2), b"{\"a\":1}\n{\"a\":2}\n");
    assert_eq!(
        (check.lines, check.kinesis_records, check.problems),
        (2, 0, 0)
    );
}

#[test]
fn unreadable_bodies_say_why() {
    let ok = |seq: &str| line(SHARD, seq, None, IN_MINUTE);
    let cases: Vec<(ArchivedKey, Vec<u8>, &str)> = vec![
        (
            object_in(SHARD, MINUTE_MILLIS, 1, 2, CompressionCodec::Zstd),
            b"not zstd".to_vec(),
            "does not decompress as .jsonl.zst",
        ),
        (
            object(1, 2),
            body(&[ok("1"), "{}\n".to_owned(), ok("2")]),
            "line 2 is not a shardsink JSON line",
        ),
        (
            object(1, 2),
            body(&[ok("1"), "\n".to_owned(), ok("2")]),
            "line 2 is empty",
        ),
        (
            object(1, 2),
            body(&[ok("1"), ok("2").replace("\"data\"", "\"extra\":1,\"data\"")]),
            "line 2 is not a shardsink JSON line: unknown field `extra`",
        ),
        (
            object(1, 2),
            body(&[ok("1"), line("shardId-000000000002", "2", None, IN_MINUTE)]),
            "line 2: shardId \"shardId-000000000002\" is not the key's shard",
        ),
        (
            object(1, 2),
            body(&[ok("1"), ok("2"), ok("3")]),
            "line 3: sequenceNumber 3 is outside the key's range 1-2",
        ),
        (
            object(1, 2),
            body(&[ok("1"), ok("02")]),
            "line 2: sequenceNumber \"02\" is not one",
        ),
        (
            object(1, 2),
            body(&[ok("1"), line(SHARD, "2", None, "2026-11-21T05:28:00.000Z")]),
            "line 2: approximateArrivalTimestamp 2026-11-21T05:28:00.000Z is not in the key's minute 2026-11-21T05:27Z",
        ),
        (
            object(1, 2),
            body(&[ok("1"), line(SHARD, "2", None, "yesterday")]),
            "line 2: approximateArrivalTimestamp \"yesterday\"",
        ),
        (
            object(1, 2),
            body(&[ok("1"), ok("1"), ok("2")]),
            "line 2: record (1, None) appears twice",
        ),
        (
            object(1, 2),
            body(&[ok("1"), ok("2").replace("aGk=", "a!")]),
            "line 2: data is not base64",
        ),
        (
            object(1, 3),
            body(&[ok("1"), ok("2")]),
            "no record has the key's last sequence number 3",
        ),
        (
            object(1, 3),
            body(&[ok("2"), ok("3")]),
            "no record has the key's first sequence number 1",
        ),
    ];
    for (object, body, expected) in cases {
        let mut check = check_body(Role::Main, &object, &body);
        check_ends(&mut check, &object, Ends::default());
        let problem = check.first_problem.unwrap_or_default();
        assert!(
            problem.starts_with(expected),
            "{problem:?} must start with {expected:?}"
        );
    }
}
