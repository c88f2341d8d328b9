//! The shard task when records expired from the stream unread: the gap is
//! recorded (marker, counter) and reading goes on with nothing lost or
//! repeated that the stream still holds.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use sequence_range::SequenceNumber;
use shard_lease::{Checkpoint, PendingBatch};

use super::{Harness, PAST, SHARD, clone_ctx, harness, key_for, lock_len, seq, sorted};
use crate::output::batch::BufferLimits;
use crate::shard::context::{ShardContext, ShardExit};

/// The gap marker of `position` (a sequence number or sentinel), parsed.
fn gap_marker(h: &Harness, position: &str) -> Option<serde_json::Value> {
    let key = format!("p/_retention-gaps/{SHARD}/{position}.json");
    let body = h.bucket.objects.lock().unwrap().get(&key).cloned()?;
    Some(serde_json::from_slice(&body).unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_checkpoint_past_retention_reads_on_from_the_trim_horizon() {
    // Checkpointed at 3, then down past the retention: 1..=6 trimmed.
    let h = harness(1_000);
    for i in 1..=10 {
        h.shard.push(&seq(i), PAST + 1_000 * i as i64, b"r");
    }
    h.shard.trimmed.store(6, Ordering::SeqCst);
    let checkpoint = Checkpoint::SequenceNumber(SequenceNumber::parse(&seq(3)).unwrap());
    let lease = h.lease(checkpoint, None).await;
    h.run_until(lease, |h| h.row_checkpoint_is(10))
        .await
        .unwrap();
    assert_eq!(h.written(), (7..=10).map(seq).collect::<Vec<_>>());
    assert_eq!(h.ctx.metrics.retention_gaps.get(), 1);
    let marker = gap_marker(&h, &seq(3)).expect("the gap is recorded in S3");
    assert_eq!(marker["position"], "AFTER_SEQUENCE_NUMBER");
    assert_eq!(marker["firstRetainedSequenceNumber"], seq(7));
    assert_eq!(marker["shardLeftStream"], false);
}

#[tokio::test(start_paused = true)]
async fn a_pending_batch_whose_first_records_expired_is_deduplicated() {
    // Batches 1..=4, 5..=8 and 9..=10 were PUT, the checkpoint after
    // 5..=8 was lost, then 1..=6 expired: the replay cannot start at 5;
    // what is left (7..=10) is found in S3 by dedup.
    let h = harness(1_000);
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
            ..clone_ctx(&h.ctx)
        }),
        ..h
    };
    h.run_until(lease, |h| lock_len(&h.bucket) == 3)
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
    h.run_until(lease, |h| h.row_checkpoint_is(10))
        .await
        .unwrap();
    assert_eq!(sorted(h.written()), (1..=10).map(seq).collect::<Vec<_>>());
    assert_eq!(h.ctx.metrics.retention_gaps.get(), 1);
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
    h.run_until(lease, |h| h.row_checkpoint_is(8))
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
    let exit = h.run_until(lease, |_| false).await.unwrap();
    assert_eq!(exit, ShardExit::ShardEnd(Vec::new()));
    assert_eq!(h.row().await.checkpoint, Checkpoint::ShardEnd);
    assert_eq!(h.ctx.metrics.retention_gaps.get(), 1);
    let marker = gap_marker(&h, &seq(2)).expect("the gap is recorded");
    assert_eq!(marker["shardLeftStream"], true);
}
