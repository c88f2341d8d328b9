//! In-process pipeline benchmarks (figures in docs/DESIGN.md, "Performance"), 1 KiB
//! records with 56-digit sequence numbers, single thread:
//! - `serde_json baseline`: plain `serde_json` + base64 encoding of the same
//!   records — the bar the pipeline must not fall below;
//! - `pipeline`: group by minute and encode into a batch, dedup off (the
//!   steady state) and on (after a restart: range-set lookup);
//! - `reader's sequence number check`: what reading adds per record before
//!   the pipeline (the text checked and kept as a `SequenceNumber`);
//! - compression of a whole batch with zstd level 3 and gzip level 6.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use base64::Engine as _;
use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use sequence_range::{RangeSet, SequenceNumber, SequenceRange};
use serde::Serialize;
use shardsink::bench::{Batch, Compression, MemoryBudget, ShardRecord};

const RECORDS: usize = 10_000;
const SHARD: &str = "shardId-000000000007";
/// 2026-11-21T05:27:00Z.
const MINUTE_START: i64 = 1_795_238_820_000;

fn records() -> Vec<ShardRecord> {
    let base =
        SequenceNumber::parse("49590338271490256608559692538361571095921575989136588898").unwrap();
    // Deterministic pseudo-random 1 KiB payloads (xorshift), half of them
    // printable JSON-ish text, half binary.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    (0..RECORDS)
        .map(|i| {
            let data: Vec<u8> = (0..1024)
                .map(|j| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    if i % 2 == 0 {
                        b"{\"user\":42,\"event\":\"click\"}"[j % 27]
                    } else {
                        state as u8
                    }
                })
                .collect();
            ShardRecord {
                sequence_number: SequenceNumber::from(base.to_biguint() + (i as u64) * 1_000_003),
                arrival_millis: MINUTE_START + (i as i64 * 5) % 60_000,
                partition_key: format!("customer-{:06}", i % 5000),
                data: Bytes::from(data),
                user_records: None,
            }
        })
        .collect()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PlainLine<'a> {
    shard_id: &'a str,
    sequence_number: &'a str,
    partition_key: &'a str,
    approximate_arrival_timestamp: String,
    data: String,
}

fn plain_serde_json(records: &[ShardRecord], out: &mut Vec<u8>) {
    for record in records {
        let line = PlainLine {
            shard_id: SHARD,
            sequence_number: record.sequence_number.as_str(),
            partition_key: &record.partition_key,
            approximate_arrival_timestamp: chrono::DateTime::from_timestamp_millis(
                record.arrival_millis,
            )
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            data: base64::engine::general_purpose::STANDARD.encode(&record.data),
        };
        serde_json::to_writer(&mut *out, &line).unwrap();
        out.push(b'\n');
    }
}

/// What a shard task does per record with dedup off: group by minute, append.
fn pipeline(records: &[ShardRecord], written: Option<&RangeSet>) -> usize {
    let budget = MemoryBudget::new(u64::MAX, 64 << 20);
    let mut batch: Option<Batch> = None;
    let mut excluded = 0;
    for record in records {
        if let Some(written) = written {
            if written.contains(&record.sequence_number) {
                excluded += 1;
                continue;
            }
        }
        let minute = record.minute();
        if batch.as_ref().is_some_and(|b| b.minute() != minute) {
            black_box(batch.take());
        }
        match &mut batch {
            Some(batch) => batch.push(record),
            None => batch = Some(Batch::start(SHARD, record, budget.clone())),
        }
    }
    black_box(batch.map_or(0, |b| b.len_bytes())) + excluded
}

fn bench(c: &mut Criterion) {
    let records = records();
    let mut group = c.benchmark_group("10k records of 1 KiB");
    group.throughput(Throughput::Elements(RECORDS as u64));
    group.sample_size(20);

    group.bench_function("serde_json baseline", |b| {
        b.iter_batched(
            || Vec::with_capacity(RECORDS * 1500),
            |mut out| {
                plain_serde_json(black_box(&records), &mut out);
                out
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("pipeline, dedup off", |b| {
        b.iter(|| pipeline(black_box(&records), None))
    });
    // What the reader adds per record before the pipeline: the sequence
    // number's check, on the `String` GetRecords returned.
    let texts: Vec<String> = records
        .iter()
        .map(|record| record.sequence_number.as_str().to_owned())
        .collect();
    group.bench_function("reader's sequence number check", |b| {
        b.iter_batched(
            || texts.clone(),
            |texts| {
                texts
                    .into_iter()
                    .map(|text| SequenceNumber::try_from(text).unwrap())
                    .collect::<Vec<_>>()
            },
            BatchSize::LargeInput,
        )
    });

    // After a restart: half the records are in 1,000 written ranges.
    let written: RangeSet = records
        .chunks(10)
        .map(|chunk| {
            let first = chunk[0].sequence_number.clone();
            let last = chunk[4].sequence_number.clone();
            SequenceRange::new(first, last).unwrap()
        })
        .collect();
    group.bench_function("pipeline, dedup on against 1,000 ranges", |b| {
        b.iter(|| pipeline(black_box(&records), Some(&written)))
    });

    let budget = MemoryBudget::new(u64::MAX, 64 << 20);
    let mut batch = Batch::start(SHARD, &records[0], budget);
    for record in &records[1..] {
        batch.push(record);
    }
    group.bench_function("zstd level 3, whole batch", |b| {
        b.iter(|| {
            Compression::Zstd(3)
                .compress(black_box(batch.lines()))
                .unwrap()
        })
    });
    group.bench_function("gzip level 6, whole batch", |b| {
        b.iter(|| {
            Compression::Gzip(6)
                .compress(black_box(batch.lines()))
                .unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
