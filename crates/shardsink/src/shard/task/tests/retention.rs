//! The shard task when records expired from the stream unread: whichever
//! way the trim shows itself — GetShardIterator rejects the position, grants
//! an iterator that starts past it, or a start time is past the retention —
//! the same marker is written and the same counter counted, and reading goes
//! on with nothing lost or repeated that the stream still holds.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sequence_range::SequenceNumber;
use shard_lease::{Checkpoint, HeldLease, Lease, PendingBatch};
use tokio::time::Instant;

use super::{Harness, PAST, SHARD, harness, key_for, lock_len, seq, sorted};
use crate::output::batch::BufferLimits;
use crate::shard::context::{ShardContext, ShardExit};

/// How GetShardIterator answers a trimmed sequence number.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// `InvalidArgumentException`.
    Rejects,
    /// An iterator at the trim horizon (kinesis-mock; Kinesis at times).
    Grants,
}

/// A harness whose shard answers a trimmed sequence number with `answer`.
fn trimming(answer: Answer) -> Harness {
    let h = harness(1_000);
    let grants = matches!(answer, Answer::Grants);
    h.shard
        .grants_trimmed_positions
        .store(grants, Ordering::SeqCst);
    h
}

/// The gap marker of `position` (a sequence number or sentinel), parsed.
fn gap_marker(h: &Harness, position: &str) -> Option<serde_json::Value> {
    let key = format!("p/_retention-gaps/{SHARD}/{position}.json");
    let body = h.bucket.objects.lock().unwrap().get(&key).cloned()?;
    Some(serde_json::from_slice(&body).unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_checkpoint_past_retention_reads_on_from_the_oldest_record_and_says_so() {
    for answer in [Answer::Rejects, Answer::Grants] {
        // Checkpointed at 3, then down past the retention: 1..=6 trimmed.
        let h = trimming(answer);
        for i in 1..=10 {
            h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"r");
        }
        h.shard.trimmed.store(6, Ordering::SeqCst);
        let checkpoint = Checkpoint::SequenceNumber(SequenceNumber::parse(&seq(3)).unwrap());
        let lease = h.lease(checkpoint, None).await;
        h.run_until(lease, "the checkpoint at record 10", |h| {
            h.row_checkpoint_is(10)
        })
        .await
        .unwrap();
        assert_eq!(
            h.written(),
            (7..=10).map(seq).collect::<Vec<_>>(),
            "{answer:?}"
        );
        assert_eq!(h.ctx.metrics.retention_gaps.get(), 1, "{answer:?}");
        let marker = gap_marker(&h, &seq(3)).expect("the gap is recorded in S3");
        assert_eq!(marker["position"], "AFTER_SEQUENCE_NUMBER");
        assert_eq!(marker["firstRetainedSequenceNumber"], seq(7));
        assert_eq!(marker["shardLeftStream"], false);
    }
}

#[tokio::test(start_paused = true)]
async fn a_pending_batch_whose_first_records_expired_is_deduplicated() {
    for answer in [Answer::Rejects, Answer::Grants] {
        pending_batch_whose_first_records_expired(answer).await;
    }
}

async fn pending_batch_whose_first_records_expired(answer: Answer) {
    // Batches 1..=4, 5..=8 and 9..=10 were PUT, the checkpoint after
    // 5..=8 was lost, then 1..=6 expired: the replay cannot start at 5;
    // what is left (7..=10) is found in S3 by the resume skip.
    let h = trimming(answer);
    for i in 1..=10 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"p");
    }
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let h = Harness {
        ctx: Arc::new(ShardContext {
            limits: BufferLimits {
                max_records: 4,
                ..h.ctx.limits
            },
            ..(*h.ctx).clone()
        }),
        ..h
    };
    h.run_until(lease, "three batches in S3", |h| lock_len(&h.bucket) == 3)
        .await
        .unwrap();
    let pending = PendingBatch {
        key: key_for(5, 8, PAST),
        first: SequenceNumber::parse(&seq(5)).unwrap(),
        last: SequenceNumber::parse(&seq(8)).unwrap(),
    };
    h.table.items.lock().unwrap().clear();
    h.shard.trimmed.store(6, Ordering::SeqCst);
    let checkpoint = Checkpoint::SequenceNumber(SequenceNumber::parse(&seq(4)).unwrap());
    let lease = h.lease(checkpoint, Some(pending)).await;
    h.run_until(lease, "the checkpoint at record 10", |h| {
        h.row_checkpoint_is(10)
    })
    .await
    .unwrap();
    assert_eq!(
        sorted(h.written()),
        (1..=10).map(seq).collect::<Vec<_>>(),
        "{answer:?}"
    );
    assert_eq!(h.ctx.metrics.retention_gaps.get(), 1, "{answer:?}");
    let marker = gap_marker(&h, &seq(5)).expect("the gap is recorded");
    assert_eq!(marker["position"], "AT_SEQUENCE_NUMBER");
    assert_eq!(marker["firstRetainedSequenceNumber"], seq(7));
}

#[tokio::test(start_paused = true)]
async fn a_position_rejected_but_still_there_loses_and_repeats_nothing() {
    let h = harness(1_000);
    for i in 1..=8 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"s");
    }
    h.shard.rejected_positions.store(1, Ordering::SeqCst);
    let checkpoint = Checkpoint::SequenceNumber(SequenceNumber::parse(&seq(3)).unwrap());
    let lease = h.lease(checkpoint, None).await;
    h.run_until(lease, "the checkpoint at record 8", |h| {
        h.row_checkpoint_is(8)
    })
    .await
    .unwrap();
    assert_eq!(h.written(), (4..=8).map(seq).collect::<Vec<_>>());
    assert_eq!(h.ctx.metrics.retention_gaps.get(), 0, "nothing expired");
    assert!(gap_marker(&h, &seq(3)).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_shard_that_left_the_stream_ends_and_says_so() {
    let h = harness(1_000);
    for i in 1..=4 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"g");
    }
    h.shard.gone.store(true, Ordering::SeqCst);
    let checkpoint = Checkpoint::SequenceNumber(SequenceNumber::parse(&seq(2)).unwrap());
    let lease = h.lease(checkpoint, None).await;
    let exit = h
        .run_to_exit(lease, "the end of the shard that left")
        .await
        .unwrap();
    assert_eq!(exit, ShardExit::ShardEnd(Vec::new()));
    assert_eq!(h.row().await.checkpoint, Checkpoint::ShardEnd);
    assert_eq!(h.ctx.metrics.retention_gaps.get(), 1);
    let marker = gap_marker(&h, &seq(2)).expect("the gap is recorded");
    assert_eq!(marker["shardLeftStream"], true);
}

/// Takes a lease that starts at `start_millis` (`AT_TIMESTAMP`, as a LATEST
/// or AT_TIMESTAMP lease is created).
async fn at_timestamp_lease(h: &Harness, start_millis: i64) -> Arc<HeldLease> {
    let mut lease = Lease::new(SHARD, Checkpoint::AtTimestamp, vec![]);
    lease.initial_timestamp = Some(
        chrono::DateTime::from_timestamp_millis(start_millis)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    );
    h.lease_table.create_lease(&lease).await.unwrap();
    let taken = h.lease_table.take_lease(&lease, "worker-1").await.unwrap();
    Arc::new(HeldLease::new(h.lease_table.clone(), taken, Instant::now()))
}

/// Runs a shard of records 1..=10 (a second apart, in 2020: long past a
/// day's retention), the first `trimmed` of them trimmed, from a lease
/// that starts at record 4's arrival, until 10 is checkpointed.
async fn from_record_4s_time_with(trimmed: usize) -> Harness {
    let h = harness(1_000);
    h.ctx
        .metrics
        .set_stream_retention(Duration::from_secs(24 * 3_600));
    for i in 1..=10 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"t");
    }
    h.shard.trimmed.store(trimmed, Ordering::SeqCst);
    let lease = at_timestamp_lease(&h, PAST + 4_000).await;
    h.run_until(lease, "the checkpoint at record 10", |h| {
        h.row_checkpoint_is(10)
    })
    .await
    .unwrap();
    h
}

#[tokio::test(start_paused = true)]
async fn a_start_time_past_retention_whose_records_were_trimmed_says_so() {
    // 1..=6 trimmed: Kinesis would start silently at 7.
    let h = from_record_4s_time_with(6).await;
    assert_eq!(h.written(), (7..=10).map(seq).collect::<Vec<_>>());
    assert_eq!(h.ctx.metrics.retention_gaps.get(), 1);
    let marker = gap_marker(&h, "AT_TIMESTAMP").expect("the gap is recorded in S3");
    assert_eq!(marker["timestamp"], "2020-01-01T00:00:04.000Z");
    assert_eq!(marker["firstRetainedSequenceNumber"], seq(7));
}

#[tokio::test(start_paused = true)]
async fn a_start_time_past_retention_with_older_records_left_loses_nothing() {
    // Only 1..=2 trimmed: 3, from before the start, is still there.
    let h = from_record_4s_time_with(2).await;
    assert_eq!(h.written(), (4..=10).map(seq).collect::<Vec<_>>());
    assert_eq!(h.ctx.metrics.retention_gaps.get(), 0);
    assert!(gap_marker(&h, "AT_TIMESTAMP").is_none());
}
