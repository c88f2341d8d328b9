//! The shard task with hour time buckets: one object per shard-hour, and
//! the batch of an hour written once that hour is over while the shard is
//! caught up.

use std::sync::atomic::Ordering;

use chrono::Utc;
use shard_lease::Checkpoint;
use tokio_util::sync::CancellationToken;

use super::{Harness, PAST, SHARD, harness, seq, writing};
use crate::output::bucket::TimeBucket;
use crate::output::compression::Compression;
use crate::output::compression::CompressionCodec;
use crate::output::format::{BodyKind, Format};
use crate::output::key::KeyLayout;
use crate::output::key::KeyStyle;
use crate::shard::context::ShardExit;
use crate::shard::task::ShardTask;
use crate::test_wait;

/// A harness whose keys are per hour.
fn per_hour() -> Harness {
    let layout = KeyLayout::new("p", KeyStyle::Plain, TimeBucket::Hour);
    writing(
        harness(1_000),
        Format::Envelope,
        Compression::Zstd(3),
        layout,
    )
}

fn keys(h: &Harness) -> Vec<String> {
    h.bucket.objects.lock().unwrap().keys().cloned().collect()
}

/// Waits (in paused time) until the task made `reads` more GetRecords
/// calls than `after`; fails the test if it does not.
async fn reads_past(h: &Harness, after: usize, reads: usize) {
    test_wait::wait_until(&format!("{reads} more reads"), || {
        h.shard.reads.load(Ordering::SeqCst) >= after + reads
    })
    .await;
}

/// Records of three minutes of one long-past hour are one batch, written
/// as soon as the caught-up shard sees that its hour is over — no buffering
/// limit reached, no shutdown. Records of an hour still under way stay
/// buffered while the shard is caught up, and are written at shutdown.
#[tokio::test(start_paused = true)]
async fn a_batch_is_written_when_its_hour_is_over() {
    let h = per_hour();
    for (i, minute) in [(1, 10), (2, 30), (3, 59)] {
        h.shard.push(&seq(i), PAST + minute * 60_000, b"h");
    }
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let token = CancellationToken::new();
    let task = tokio::spawn(ShardTask::new(h.ctx.clone(), lease).run(token.clone()));

    let hour = h.ctx.output.layout.bucket_of(PAST);
    let past_hour = format!(
        "{}{}",
        h.ctx.output.layout.shard_bucket_prefix(hour, SHARD),
        crate::output::key::object_name(
            &sequence_range::SequenceRange::new(
                sequence_range::SequenceNumber::parse(&seq(1)).unwrap(),
                sequence_range::SequenceNumber::parse(&seq(3)).unwrap(),
            )
            .unwrap(),
            BodyKind::lines(CompressionCodec::Zstd),
        )
    );
    assert!(past_hour.starts_with("p/2020/01/01/00/"), "{past_hour}");
    test_wait::wait_until("the past hour's object", || !keys(&h).is_empty()).await;
    assert_eq!(
        keys(&h),
        std::slice::from_ref(&past_hour),
        "one object for the hour"
    );
    assert!(
        !task.is_finished(),
        "written while running, not at shutdown"
    );
    assert_eq!(
        h.written(),
        (1..=3).map(seq).collect::<Vec<_>>(),
        "the three minutes in it"
    );

    // Two records of the next hour (by the local clock): not over, so
    // nothing is written while the shard reads on, caught up.
    let next_hour = Utc::now().timestamp_millis() + 3_600_000;
    h.shard.push(&seq(4), next_hour, b"n");
    h.shard.push(&seq(5), next_hour, b"n");
    let reads = h.shard.reads.load(Ordering::SeqCst);
    reads_past(&h, reads, 5).await;
    assert_eq!(
        keys(&h),
        std::slice::from_ref(&past_hour),
        "the hour is not over"
    );

    token.cancel();
    assert_eq!(task.await.unwrap().unwrap(), ShardExit::Shutdown);
    assert_eq!(keys(&h).len(), 2, "written at shutdown");
    assert_eq!(h.written().len(), 5);
}
