//! Objects and records for the unit tests of `verify`.

use sequence_range::{SequenceNumber, SequenceRange};

use super::gaps::ShardGapResult;
use super::keys::ArchivedKey;
use crate::config::CompressionCodec;
use crate::output::bucket::Bucket;
use crate::output::format::BodyKind;
use crate::output::key::KeyLayout;

pub(super) const SHARD: &str = "shardId-000000000001";
/// 2026-11-21T05:27:00Z.
pub(super) const MINUTE_MILLIS: i64 = 1_795_238_820_000;

pub(super) fn n(value: u64) -> SequenceNumber {
    SequenceNumber::from(value)
}

pub(super) fn range(first: u64, last: u64) -> SequenceRange {
    SequenceRange::new(n(first), n(last)).unwrap()
}

pub(super) fn object_in(
    shard_id: &str,
    minute_millis: i64,
    first: u64,
    last: u64,
    codec: CompressionCodec,
) -> ArchivedKey {
    let bucket = Bucket::minute(minute_millis);
    let range = range(first, last);
    let body = BodyKind::lines(codec);
    ArchivedKey {
        key: KeyLayout::plain("p").object_key(bucket, shard_id, &range, body),
        bucket,
        shard_id: shard_id.to_owned(),
        range,
        body,
    }
}

pub(super) fn object(first: u64, last: u64) -> ArchivedKey {
    object_in(SHARD, MINUTE_MILLIS, first, last, CompressionCodec::None)
}

/// Records 10, 20, …, 10·count, one a minute apart starting at the test minute.
pub(super) fn stream(count: u64) -> Vec<(SequenceNumber, i64)> {
    (1..=count)
        .map(|i| (n(10 * i), MINUTE_MILLIS + 60_000 * (i as i64 - 1)))
        .collect()
}

pub(super) fn missing(result: &ShardGapResult) -> Vec<(u64, u64, u64)> {
    result
        .gaps
        .iter()
        .map(|g| {
            let value = |s: &SequenceNumber| s.to_string().parse::<u64>().unwrap();
            (value(&g.first), value(&g.last), g.records)
        })
        .collect()
}
