//! The audit: the checks in order, from a [`Plan`] to an [`Audit`].

use std::collections::{HashMap, HashSet};

use super::args::Plan;
use super::body::{EndsInErrors, Role, read_objects};
use super::gap_markers::read_markers;
use super::keys::{Classified, classify, list_keys, read_layout};
use super::overlaps::overlaps;
use super::report::Audit;
use super::stream::{GapOutcome, check_gaps, read_checkpoints};
use crate::aws::{AwsClients, Kinesis, ObjectStore};
use sequence_range::SequenceRange;

/// The checks, in order; progress on stderr (a bar when `tty`).
pub(super) async fn audit(plan: &Plan, clients: &AwsClients, tty: bool) -> anyhow::Result<Audit> {
    let store = ObjectStore::new(clients.s3.clone(), &plan.bucket);

    // Checkpoints first, then the listing (see the `verify` module documentation).
    let checkpoints = match (&plan.stream, &plan.lease_table) {
        (Some(_), Some(table)) => Some(read_checkpoints(clients, table).await),
        _ => None,
    };

    let layout = read_layout(&store, &plan.prefix).await?;
    let keys = list_keys(&store, &plan.list_prefix, tty).await?;
    let error_layout = layout.with_prefix(plan.error_prefix.clone());
    let (error_keys, keys): (Vec<String>, Vec<String>) = keys
        .into_iter()
        .partition(|key| key.starts_with(&error_layout.list_prefix()));
    let Classified {
        objects,
        gap_markers,
        mut foreign,
    } = classify(&layout, keys);
    // Under an empty prefix the error prefix was listed with the rest.
    let error_keys = if plan.list_prefix.is_empty() {
        error_keys
    } else {
        list_keys(&store, &error_layout.list_prefix(), tty).await?
    };
    let errors = classify(&error_layout, error_keys);
    foreign.extend(errors.foreign);
    let error_objects = errors.objects;
    let main_batches: HashSet<(&str, &SequenceRange)> = objects
        .iter()
        .map(|object| (object.shard_id.as_str(), &object.range))
        .collect();
    let uncommitted_errors: Vec<String> = error_objects
        .iter()
        .filter(|error| !main_batches.contains(&(error.shard_id.as_str(), &error.range)))
        .map(|error| error.key.clone())
        .collect();
    let overlaps = overlaps(&objects);
    let retention_gaps = read_markers(&store, gap_markers).await;

    let deep = if plan.deep {
        // Error objects first: a main object's end records may be rejected
        // records, in its batch's error object.
        let (errors, ends) =
            read_objects(&store, &error_objects, Role::Errors, &HashMap::new(), tty).await;
        let mut in_errors: EndsInErrors<'_> = HashMap::new();
        for (error, ends) in error_objects.iter().zip(ends) {
            let held = in_errors
                .entry((error.shard_id.as_str(), &error.range))
                .or_default();
            *held = *held | ends;
        }
        let (mut deep, _) = read_objects(&store, &objects, Role::Main, &in_errors, tty).await;
        deep.error_records = errors.lines;
        deep.unreadable.extend(errors.unreadable);
        Some(deep)
    } else {
        None
    };

    let gaps = match &plan.stream {
        None => GapOutcome::NotRequested,
        Some(stream) => {
            let kinesis = Kinesis::new(clients.kinesis.clone(), stream.clone());
            check_gaps(&kinesis, &objects, checkpoints, plan, tty).await
        }
    };

    Ok(Audit {
        target: plan.target(),
        objects: objects.len(),
        error_objects: error_objects.len(),
        uncommitted_errors,
        shards_in_archive: objects
            .iter()
            .map(|o| o.shard_id.as_str())
            .collect::<HashSet<_>>()
            .len(),
        foreign,
        overlaps,
        deep,
        gaps,
        retention_gaps,
    })
}

#[cfg(test)]
mod tests {
    use shard_lease::{Checkpoint, LeaseTable};

    use std::sync::Arc;

    use super::*;
    use crate::config::{CompressionCodec, StreamRef};
    use crate::fake_aws::{FakeBucket, FakeStream, FakeTable};
    use crate::output::compression::Compression;
    use crate::verify::test_support::{MINUTE_MILLIS, SHARD, missing, n, object_in};

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
        // Error objects: one beside its batch's main object (1-3), one whose
        // main object is not written (4-5).
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
        recorded_gap
            .report(
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
            bucket: "bucket".to_owned(),
            prefix: "p".to_owned(),
            list_prefix: "p/".to_owned(),
            error_prefix: "p-errors".to_owned(),
            stream: Some(StreamRef::Name("s".to_owned())),
            lease_table: Some("leases".to_owned()),
            deep: true,
            since: None,
            from_first_archived: false,
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
            audit.uncommitted_errors,
            vec![uncommitted.clone()],
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "error object {uncommitted} has no main object yet"
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
            &vec![
                "shardId-000000000002: nothing archived or checkpointed yet: not checked"
                    .to_owned()
            ]
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
            bucket: "bucket".to_owned(),
            prefix: "p".to_owned(),
            list_prefix: "p/".to_owned(),
            error_prefix: "p-errors".to_owned(),
            stream: Some(StreamRef::Name("s".to_owned())),
            lease_table: Some("leases".to_owned()),
            deep: false,
            since: since_millis.map(|millis| DateTime::from_timestamp_millis(millis).unwrap()),
            from_first_archived: false,
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

    fn overlap_keys_of(audit: &Audit) -> Vec<(String, String)> {
        audit
            .overlaps
            .iter()
            .map(|o| (o.earlier.0.clone(), o.later.0.clone()))
            .collect()
    }
}
