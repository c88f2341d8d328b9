use shard_lease::{Checkpoint, LeaseTable};

use std::sync::Arc;

use super::*;
use crate::config::CompressionCodec;
use crate::fake_aws::{FakeBucket, FakeStream, FakeTable};
use crate::output::compression::Compression;
use crate::verify::test_support::{
    MINUTE_MILLIS, SHARD, missing, n, object_in, put_decided_batch, test_plan,
};

/// In-memory Kinesis, S3 and DynamoDB; [`SHARD`] holds records 1 to 9,
/// one a second after [`MINUTE_MILLIS`].
fn fakes_with_nine_records() -> (Arc<FakeStream>, Arc<FakeBucket>, Arc<FakeTable>) {
    let stream = Arc::new(FakeStream::default());
    let shard = stream.shard(SHARD);
    for i in 1..=9 {
        shard.push(&i.to_string(), MINUTE_MILLIS + i * 1_000, b"x");
    }
    (stream, Default::default(), Default::default())
}

/// The whole audit against in-memory S3, DynamoDB and Kinesis: a gap, an
/// overlap, an unreadable object, a foreign key, a shard with nothing
/// archived, a recorded retention gap, and GetRecords throttled twice on
/// the way.
#[tokio::test(start_paused = true)]
async fn audits_an_archive_through_the_sdk() {
    use std::sync::atomic::Ordering;

    use shard_lease::Lease;

    use crate::fake_aws;
    use crate::output::format::envelope::LineEncoder;
    use crate::read::record::ShardRecord;

    let (stream, bucket, table) = fakes_with_nine_records();
    let shard = stream.shard(SHARD);
    shard.failing_reads.store(2, Ordering::SeqCst);
    stream
        .shard("shardId-000000000002")
        .push("1", MINUTE_MILLIS, b"y");
    let batch = |shard_id: &str, first: u64, last: u64, codec| {
        let mut lines = Vec::new();
        for i in first..=last {
            let record = ShardRecord {
                sequence_number: sequence_range::SequenceNumber::from(i),
                arrival_millis: MINUTE_MILLIS + i as i64 * 1_000,
                partition_key: format!("pk-{i}"),
                data: bytes::Bytes::from_static(b"x"),
                user_records: None,
            };
            LineEncoder::new(shard_id).encode(&record, &mut lines);
        }
        let object = object_in(SHARD, MINUTE_MILLIS, first, last, codec);
        let body = Compression::new(codec, None).compress(&lines).unwrap();
        (object.key, bytes::Bytes::from(body))
    };
    let (first, first_body) = batch(SHARD, 1, 3, CompressionCodec::Zstd);
    let (newest, newest_body) = batch(SHARD, 6, 9, CompressionCodec::Gzip);
    // Lines of another shard under this shard's key, overlapping `newest`.
    let (stray, stray_body) = batch("shardId-000000000002", 8, 8, CompressionCodec::None);
    {
        let mut objects = bucket.objects.lock().unwrap();
        objects.insert(first.clone(), first_body);
        objects.insert(newest.clone(), newest_body);
        objects.insert(stray.clone(), stray_body);
        objects.insert("p/README".to_owned(), bytes::Bytes::from_static(b"hi"));
    }
    // Error objects: one beside its batch's main object (1-3), holding
    // record 2 although the main object holds it too (a record twice);
    // one whose main object is not written (4-5).
    let error_object = |first: u64, last: u64, rejected: u64| {
        let record = ShardRecord {
            sequence_number: sequence_range::SequenceNumber::from(rejected),
            arrival_millis: MINUTE_MILLIS + rejected as i64 * 1_000,
            partition_key: "pk".to_owned(),
            data: bytes::Bytes::from_static(b"x"),
            user_records: None,
        };
        let mut line = Vec::new();
        LineEncoder::new(SHARD).encode_error(
            &record.views(SHARD).next().unwrap(),
            "payload is not a JSON object",
            &mut line,
        );
        let key = object_in(SHARD, MINUTE_MILLIS, first, last, CompressionCodec::None)
            .key
            .replacen("p/", "p-errors/", 1);
        bucket
            .objects
            .lock()
            .unwrap()
            .insert(key.clone(), bytes::Bytes::from(line));
        key
    };
    error_object(1, 3, 2);
    let uncommitted = error_object(4, 5, 4);
    // A gap the daemon recorded: records after 0 expired unread.
    let recorded_gap = crate::read::retention::RetentionGap {
        shard_id: SHARD.to_owned(),
        expired: crate::aws::StartingPosition::AfterSequenceNumber(n(0)),
        first_retained: Some((n(1), MINUTE_MILLIS + 1_000)),
        shard_left_stream: false,
    };
    let clients = fake_aws::clients(stream, bucket, table);
    crate::output::gap_marker::report(
        &recorded_gap,
        &Checkpoint::SequenceNumber(n(0)),
        &ObjectStore::new(clients.s3.clone(), "bucket"),
        "p",
        &crate::ops::metrics::Metrics::new(),
    )
    .await
    .unwrap();
    LeaseTable::new(clients.dynamodb.clone(), "leases")
        .create_lease(&Lease::new(SHARD, Checkpoint::SequenceNumber(n(9)), vec![]))
        .await
        .unwrap();
    let plan = Plan {
        deep: true,
        ..test_plan()
    };

    let audit = audit(&plan, &clients, false).await.unwrap();
    let text = audit.render();
    assert!(!audit.is_exact(), "{text}");
    assert_eq!((audit.objects, audit.foreign.len()), (3, 1), "{text}");
    assert_eq!(
        overlap_keys_of(&audit),
        vec![(newest.clone(), stray.clone())]
    );
    let deep = audit.deep.clone().unwrap();
    assert_eq!((deep.lines, deep.unreadable.len()), (8, 1), "{text}");
    assert_eq!((audit.error_objects, deep.error_records), (2, 2), "{text}");
    assert_eq!(
        audit.uncommitted,
        vec![Uncommitted {
            role: Role::Errors,
            key: uncommitted.clone()
        }],
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "error object {uncommitted} has no main object yet"
        )),
        "{text}"
    );
    let twice = &audit.events.as_ref().unwrap().placement.twice;
    assert_eq!(twice.len(), 1, "{text}");
    assert_eq!(twice[0].keys[0], first, "{text}");
    assert!(
        text.contains(&format!(
            "record twice in {SHARD}: 2 is in {first} and p-errors/"
        )),
        "{text}"
    );
    assert_eq!(deep.unreadable[0].key, stray);
    assert!(
        deep.unreadable[0].reason.contains("is not the key's shard"),
        "{text}"
    );
    let GapOutcome::Checked { shards, notes, .. } = &audit.gaps else {
        panic!("gaps not checked:\n{text}");
    };
    assert_eq!(shards.len(), 1, "{text}");
    assert_eq!(missing(&shards[0]), vec![(4, 5, 2)], "{text}");
    assert_eq!(shards[0].checked, 9, "{text}");
    assert!(shards[0].notes.is_empty(), "{text}");
    assert_eq!(shards[0].gaps[0].before.as_ref().unwrap().0, first);
    assert_eq!(shards[0].gaps[0].after.as_ref().unwrap().0, newest);
    assert_eq!(
        notes,
        &vec!["shardId-000000000002: nothing archived or checkpointed yet: not checked".to_owned()]
    );
    assert!(
        shard.reads.load(Ordering::SeqCst) >= 3,
        "throttled reads are retried"
    );
    assert_eq!(audit.retention_gaps.len(), 1, "{text}");
    assert!(
        text.contains(&format!(
            "retention gap in {SHARD}: records after 0 before 1 (the oldest record left"
        )),
        "{text}"
    );
}

/// `--since` reads each shard from that arrival time: a gap before it is
/// not reported, one after it is.
#[tokio::test(start_paused = true)]
async fn since_starts_the_gap_check_at_a_time() {
    use chrono::DateTime;
    use shard_lease::Lease;

    use crate::fake_aws;

    let (stream, bucket, table) = fakes_with_nine_records();
    // Records 1-5 are in no object; 6-9 are.
    let archived = object_in(SHARD, MINUTE_MILLIS, 6, 9, CompressionCodec::None);
    bucket
        .objects
        .lock()
        .unwrap()
        .insert(archived.key, bytes::Bytes::from_static(b""));
    let clients = fake_aws::clients(stream, bucket, table);
    LeaseTable::new(clients.dynamodb.clone(), "leases")
        .create_lease(&Lease::new(SHARD, Checkpoint::SequenceNumber(n(9)), vec![]))
        .await
        .unwrap();
    let plan = |since_millis: Option<i64>| Plan {
        since: since_millis.map(|millis| DateTime::from_timestamp_millis(millis).unwrap()),
        ..test_plan()
    };
    let checked = |audit: &Audit| {
        let GapOutcome::Checked { shards, .. } = &audit.gaps else {
            panic!("gaps not checked:\n{}", audit.render());
        };
        (shards[0].checked, missing(&shards[0]))
    };

    let whole = audit(&plan(None), &clients, false).await.unwrap();
    assert_eq!(checked(&whole), (9, vec![(1, 5, 5)]), "{}", whole.render());

    let recent = audit(&plan(Some(MINUTE_MILLIS + 6_000)), &clients, false)
        .await
        .unwrap();
    let text = recent.render();
    assert_eq!(checked(&recent), (4, vec![]), "{text}");
    assert!(recent.is_exact(), "{text}");
    assert!(
        text.contains(&format!("{SHARD}: 4 records checked from 6 (arrived ")),
        "{text}"
    );

    // The server starts at the whole second (record 6); records that
    // arrived before `since` are still not checked.
    let between = audit(&plan(Some(MINUTE_MILLIS + 6_500)), &clients, false)
        .await
        .unwrap();
    assert_eq!(checked(&between), (3, vec![]), "{}", between.render());

    let earlier = audit(&plan(Some(MINUTE_MILLIS + 4_000)), &clients, false)
        .await
        .unwrap();
    assert_eq!(
        checked(&earlier),
        (6, vec![(4, 5, 2)]),
        "{}",
        earlier.render()
    );
}

/// An archive of six records written with event decisions by payload
/// (records 2 and 5 repeat 1 and 4 a second later), and the stream
/// they came from; `decide` gives each record's decision (the accepted
/// copy a duplicate repeats), and `change` alters the bucket after.
async fn audit_event_archive(
    decide: &[Option<u64>; 6],
    change: impl FnOnce(&FakeBucket),
    stream_scope: bool,
) -> Audit {
    use shard_lease::Lease;

    use crate::fake_aws;
    use crate::verify::args::EventCheck;
    use crate::verify::test_support::payload_settings;

    let payloads = ["a", "a", "b", "c", "c", "d"];
    let (stream, bucket, table) = (
        Arc::new(FakeStream::default()),
        Arc::new(FakeBucket::default()),
        Arc::new(FakeTable::default()),
    );
    let shard = stream.shard(SHARD);
    let records: Vec<(u64, &str, Option<u64>)> = (1..=6)
        .zip(payloads)
        .zip(decide)
        .map(|((sequence_number, payload), of)| (sequence_number, payload, *of))
        .collect();
    for (sequence_number, payload, _) in &records {
        shard.push(
            &sequence_number.to_string(),
            MINUTE_MILLIS + 1_000 * *sequence_number as i64,
            payload.as_bytes(),
        );
    }
    put_decided_batch(&bucket, &records[..3]);
    put_decided_batch(&bucket, &records[3..]);
    change(&bucket);
    let clients = fake_aws::clients(stream, bucket, table);
    LeaseTable::new(clients.dynamodb.clone(), "leases")
        .create_lease(&Lease::new(SHARD, Checkpoint::SequenceNumber(n(6)), vec![]))
        .await
        .unwrap();
    let plan = Plan {
        deep: true,
        events: Some(EventCheck {
            settings: payload_settings(),
            stream_scope,
        }),
        ..test_plan()
    };
    audit(&plan, &clients, false).await.unwrap()
}

const DECIDED: [Option<u64>; 6] = [None, Some(1), None, None, Some(4), None];

/// The key of the first batch's object under `prefix`.
fn first_batch_key(bucket: &FakeBucket, prefix: &str) -> String {
    let name = crate::output::key::named(&crate::verify::test_support::range(1, 3), ".");
    let objects = bucket.objects.lock().unwrap();
    objects
        .keys()
        .find(|key| key.starts_with(prefix) && key.contains(&format!("{SHARD}/{name}")))
        .unwrap()
        .clone()
}

#[tokio::test(start_paused = true)]
async fn an_event_archive_as_the_daemon_writes_it_is_exact() {
    for stream_scope in [false, true] {
        let audit = audit_event_archive(&DECIDED, |_| {}, stream_scope).await;
        let text = audit.render();
        assert!(audit.is_exact(), "{text}");
        assert!(text.ends_with("\nexact\n"), "{text}");
        assert_eq!(
            (
                audit.objects,
                audit.duplicate_objects,
                audit.decisions_objects
            ),
            (2, 2, 2),
            "{text}"
        );
        assert!(audit.foreign.is_empty(), "{text}");
        let deep = audit.deep.as_ref().unwrap();
        assert_eq!((deep.lines, deep.duplicate_records), (4, 2), "{text}");
        for line in [
            "duplicates objects: 2, 2 records",
            "decisions objects: 2",
            "one place:    0 records twice, 0 batches whose objects do not add up (2 batches with decisions checked)",
            "once a window: 0 events kept twice, 0 duplicates not naming a kept copy (6 user records checked, 2 duplicates against their accepted copy",
        ] {
            assert!(text.contains(line), "{line:?} not in:\n{text}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn two_kept_copies_within_the_window_are_not_exact() {
    // Record 2 kept although record 1, a second earlier, has its payload.
    let kept = [None, None, None, None, Some(4), None];
    let audit = audit_event_archive(&kept, |_| {}, false).await;
    let text = audit.render();
    assert!(!audit.is_exact(), "{text}");
    assert!(
        text.contains(&format!(
            "kept twice within the window: {SHARD}/1 (arrived 2026-11-21T05:27:01.000Z) and {SHARD}/2 (arrived 2026-11-21T05:27:02.000Z), 1000 ms apart"
        )),
        "{text}"
    );
    assert!(
        text.ends_with(", 1 events kept twice in a window\n"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_record_in_the_main_and_the_duplicates_object_is_not_exact() {
    // The first batch's main object as if record 2 had been kept.
    let audit = audit_event_archive(
        &DECIDED,
        |bucket| {
            let copy = Arc::new(FakeBucket::default());
            put_decided_batch(&copy, &[(1, "a", None), (2, "a", None), (3, "b", None)]);
            let key = first_batch_key(bucket, "p/2026");
            let objects = copy.objects.lock().unwrap();
            let kept = objects.get(&key).unwrap().clone();
            let metadata = copy.metadata.lock().unwrap().get(&key).unwrap().clone();
            bucket.objects.lock().unwrap().insert(key.clone(), kept);
            bucket.metadata.lock().unwrap().insert(key, metadata);
        },
        false,
    )
    .await;
    let text = audit.render();
    assert!(!audit.is_exact(), "{text}");
    let twice = &audit.events.as_ref().unwrap().placement.twice;
    assert_eq!(twice.len(), 1, "{text}");
    assert!(
        text.contains(&format!("record twice in {SHARD}: 2 is in p/2026/")),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn decisions_that_do_not_add_up_are_not_exact() {
    // The first batch's duplicates object lost: its decisions count a
    // record no object holds.
    let audit = audit_event_archive(
        &DECIDED,
        |bucket| {
            let key = first_batch_key(bucket, "p-duplicates/");
            bucket.objects.lock().unwrap().remove(&key);
        },
        false,
    )
    .await;
    let text = audit.render();
    assert!(!audit.is_exact(), "{text}");
    assert!(
        text.contains(
            "3 user records decided, but the batch's objects hold 2 (2 main, 0 error, 0 duplicates)"
        ),
        "{text}"
    );
    assert_eq!(audit.events.as_ref().unwrap().placement.miscounted.len(), 1);
}

fn overlap_keys_of(audit: &Audit) -> Vec<(String, String)> {
    audit
        .overlaps
        .iter()
        .map(|o| (o.earlier.0.clone(), o.later.0.clone()))
        .collect()
}

/// With an Iceberg table the prefix holds no main object: the error
/// objects are still listed and read, but neither warned about as
/// uncommitted nor taken for gaps, and the stream is not read here; their
/// records are kept for the table's gap check.
#[tokio::test(start_paused = true)]
async fn with_an_iceberg_table_the_prefix_s_gap_check_is_left_to_the_table() {
    use std::sync::atomic::Ordering;

    use shard_lease::Lease;

    use crate::config::IcebergTarget;
    use crate::fake_aws;
    use crate::output::format::envelope::LineEncoder;
    use crate::read::record::ShardRecord;
    use crate::table::catalog::{CatalogKind, CatalogSettings, table_ident};

    let (stream, bucket, table) = fakes_with_nine_records();
    let shard = stream.shard(SHARD);
    let record = ShardRecord {
        sequence_number: sequence_range::SequenceNumber::from(4u64),
        arrival_millis: MINUTE_MILLIS + 4_000,
        partition_key: "pk".to_owned(),
        data: bytes::Bytes::from_static(b"x"),
        user_records: None,
    };
    let mut line = Vec::new();
    LineEncoder::new(SHARD).encode_error(
        &record.views(SHARD).next().unwrap(),
        "payload is not a JSON object",
        &mut line,
    );
    let key = object_in(SHARD, MINUTE_MILLIS, 4, 4, CompressionCodec::None)
        .key
        .replacen("p/", "p-errors/", 1);
    bucket
        .objects
        .lock()
        .unwrap()
        .insert(key, bytes::Bytes::from(line));
    let clients = fake_aws::clients(stream, bucket, table);
    LeaseTable::new(clients.dynamodb.clone(), "leases")
        .create_lease(&Lease::new(SHARD, Checkpoint::SequenceNumber(n(9)), vec![]))
        .await
        .unwrap();
    let plan = Plan {
        deep: true,
        iceberg: Some(IcebergTarget {
            catalog: CatalogSettings {
                kind: CatalogKind::Glue,
                name: "shardsink".to_owned(),
                uri: None,
                warehouse: Some("s3://lake/warehouse".to_owned()),
            },
            table: table_ident("archive.events").unwrap(),
        }),
        ..test_plan()
    };

    let audit = audit(&plan, &clients, false).await.unwrap();
    let text = audit.render();
    assert_eq!(audit.gaps, GapOutcome::InTable, "{text}");
    assert_eq!(
        audit.sides,
        SideRecords::from([(SHARD.to_owned(), [(n(4), None)].into())]),
        "{text}"
    );
    assert_eq!(shard.reads.load(Ordering::SeqCst), 0, "{text}");
    assert_eq!(audit.uncommitted, [], "{text}");
    assert_eq!(
        (
            audit.objects,
            audit.error_objects,
            audit.deep.as_ref().unwrap().error_records
        ),
        (0, 1, 1),
        "{text}"
    );
    assert!(audit.is_exact(), "{text}");
    assert!(
        text.contains("gaps:         checked against the Iceberg table's live rows"),
        "{text}"
    );
    assert!(text.ends_with("\nexact\n"), "{text}");
}
