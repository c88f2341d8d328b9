//! Objects and records for the unit tests of `verify`.

use sequence_range::{SequenceNumber, SequenceRange};

use super::args::Plan;
use super::gaps::ShardGapResult;
use super::keys::ArchivedKey;
use crate::config::{CompressionCodec, StreamRef};
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

/// The audit of bucket `bucket`, prefix `p` (errors under `p-errors`,
/// duplicates under `p-duplicates`), stream `s` with lease table `leases`;
/// no `--deep`, `--since` or event settings.
pub(super) fn test_plan() -> Plan {
    Plan {
        bucket: "bucket".to_owned(),
        prefix: "p".to_owned(),
        list_prefix: "p/".to_owned(),
        error_prefix: "p-errors".to_owned(),
        duplicates_prefix: "p-duplicates".to_owned(),
        stream: Some(StreamRef::Name("s".to_owned())),
        lease_table: Some("leases".to_owned()),
        deep: false,
        since: None,
        from_first_archived: false,
        events: None,
        iceberg: None,
    }
}

/// The event settings of [`put_decided_batch`]: ids from the payload, a
/// minute's window.
pub(super) fn payload_settings() -> crate::config::EventSettings {
    crate::config::EventSettings {
        source: crate::events::id::EventIdSource::Payload,
        fingerprint: true,
        rule: crate::events::rule::Rule {
            window_millis: 60_000,
            match_fingerprint: true,
        },
    }
}

/// Writes one batch of [`SHARD`] to `bucket` as the daemon does with event
/// decisions ([`payload_settings`]): the daemon's encoder and object
/// bodies, keys and metadata under `p`, `p-errors`, `p-duplicates` and
/// `p/_events`, envelope lines uncompressed. `records`: sequence number
/// (the record arrives that many seconds after [`MINUTE_MILLIS`]), payload,
/// and the sequence number of the accepted copy it is a duplicate of.
pub(super) fn put_decided_batch(
    bucket: &crate::fake_aws::FakeBucket,
    records: &[(u64, &str, Option<u64>)],
) {
    use std::sync::Arc;

    use crate::commit::body::{ObjectRole, encode};
    use crate::events::id::settings_description;
    use crate::events::rule::{CopyRef, Decision, Outcome};
    use crate::output::Output;
    use crate::output::compression::Compression;
    use crate::output::decisions::{UserDecision, decisions_key};
    use crate::output::format::{BodyEncoder, Format};
    use crate::read::record::ShardRecord;

    let settings = payload_settings();
    let output = Output::new(
        KeyLayout::plain("p"),
        "p-errors",
        "p-duplicates",
        Format::Envelope,
    )
    .with_compression(Compression::None);
    let mut encoder = BodyEncoder::new(SHARD, &output.format);
    for (sequence_number, payload, of) in records {
        let record = ShardRecord {
            sequence_number: n(*sequence_number),
            arrival_millis: MINUTE_MILLIS + 1_000 * *sequence_number as i64,
            partition_key: format!("pk-{sequence_number}"),
            data: bytes::Bytes::copy_from_slice(payload.as_bytes()),
            user_records: None,
        };
        let user = record.views(SHARD).next().unwrap();
        let decision = UserDecision {
            key: settings.source.key(&user, settings.fingerprint),
            decision: match of {
                None => Decision::Keep(Outcome::Unique),
                Some(of) => Decision::Duplicate {
                    of: CopyRef {
                        shard_id: Arc::from(SHARD),
                        sequence_number: n(*of),
                        sub_sequence_number: None,
                    },
                },
            },
        };
        encoder.push(&record, Some(&[decision]));
    }
    let description = settings_description(&settings.source, settings.fingerprint);
    let encoded = encode(
        encoder.finish(),
        &output.format,
        output.body_kind(),
        output.compression,
        Some(&description),
    )
    .unwrap();
    let batch = range(records[0].0, records[records.len() - 1].0);
    let minute = Bucket::minute(MINUTE_MILLIS);
    for (role, body) in encoded.objects() {
        let key = match role {
            ObjectRole::Main => output.layout.object_key(minute, SHARD, &batch, body.kind),
            ObjectRole::Errors => output
                .error_layout
                .object_key(minute, SHARD, &batch, body.kind),
            ObjectRole::Duplicates => output
                .duplicates_layout
                .object_key(minute, SHARD, &batch, body.kind),
            ObjectRole::Decisions => decisions_key(&output.decisions_layout, minute, SHARD, &batch),
        };
        let metadata = body
            .metadata()
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect();
        bucket
            .metadata
            .lock()
            .unwrap()
            .insert(key.clone(), metadata);
        bucket
            .objects
            .lock()
            .unwrap()
            .insert(key, body.bytes.clone());
    }
}
