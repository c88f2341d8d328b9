//! In-process pipeline benchmarks (figures in `benches/README.md`), 1 KiB
//! records with 56-digit sequence numbers, single thread:
//! - `serde_json baseline`: plain `serde_json` + base64 encoding of the same
//!   records — the bar the pipeline must not fall below;
//! - `pipeline`: group by minute and encode into a batch, resume skip off (the
//!   steady state) and on (after a restart: range-set lookup), in the
//!   `envelope` format;
//! - `pipeline, json`: the same with 1 KiB JSON object payloads in the
//!   `json` format (each payload checked, the metadata appended);
//! - `pipeline, raw`: the payloads and a newline;
//! - `pipeline, parquet`: rows appended, then the Parquet file written
//!   (pages uncompressed, to compare encoding with encoding);
//! - `parquet rows only`: the same user records appended to the `parquet`
//!   format's rows directly (no batch, no grouping by minute), then the
//!   file written — the bar for the Iceberg data files;
//! - `pipeline, iceberg`: the same user records appended to the Iceberg
//!   rows of the table shardsink creates (`data` binary, partitioned by
//!   arrival day: one minute's rows make one data file), then the file
//!   written with its partition value and column metrics;
//! - `reader's sequence number check`: what reading adds per record before
//!   the pipeline (the text checked and kept as a `SequenceNumber`);
//! - compression of a whole batch with zstd level 3 and gzip level 6.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use sequence_range::{RangeSet, SequenceNumber, SequenceRange};
use serde::Serialize;
use shardsink::bench::{
    Batch, Bucket, Compression, Format, IcebergBatch, IcebergLayout, Instants, MainBody,
    MemoryBudget, ParquetBatch, ShardRecord, TimeBucket, default_partition_spec, default_schema,
};

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

/// The same records with a 1 KiB JSON object each.
fn json_records(records: &[ShardRecord]) -> Vec<ShardRecord> {
    records
        .iter()
        .enumerate()
        .map(|(i, record)| {
            let mut payload = format!(
                "{{\"user\":{},\"event\":\"click\",\"price\":{}.25,\"tags\":[\"a\",\"b\"],\"note\":\"",
                i % 5000,
                i % 100
            );
            while payload.len() < 1021 {
                payload.push_str("lorem ipsum ");
            }
            payload.truncate(1021);
            payload.push_str("\"}");
            ShardRecord {
                data: Bytes::from(payload),
                ..record.clone()
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

/// What a shard task does per record: skip what the resume skip finds written, group
/// by minute, append in `format`.
fn pipeline(records: &[ShardRecord], written: Option<&RangeSet>, format: &Format) -> Option<Batch> {
    let budget = MemoryBudget::new(u64::MAX, 64 << 20);
    let mut batch: Option<Batch> = None;
    let mut excluded = 0;
    for record in records {
        if let Some(written) = written
            && written.contains(&record.sequence_number)
        {
            excluded += 1;
            continue;
        }
        let minute = Bucket::minute(record.arrival_millis);
        if batch.as_ref().is_some_and(|b| b.bucket() != minute) {
            black_box(batch.take());
        }
        match &mut batch {
            Some(batch) => batch.push(record, None),
            None => {
                batch = Some(Batch::start(
                    SHARD,
                    record,
                    None,
                    minute,
                    format,
                    budget.clone(),
                ))
            }
        }
    }
    black_box(excluded);
    batch
}

/// The layout of the table shardsink creates by default: the `data`
/// column, partitioned by arrival day.
fn default_table_layout() -> Arc<IcebergLayout> {
    let schema = Arc::new(default_schema(None, Instants::WithZone).unwrap());
    let spec = default_partition_spec(TimeBucket::Minute)
        .unwrap()
        .bind(schema.clone())
        .unwrap();
    Arc::new(IcebergLayout::new(schema, Arc::new(spec)).unwrap())
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
    group.bench_function("pipeline, resume skip off", |b| {
        b.iter(|| pipeline(black_box(&records), None, &Format::Envelope))
    });
    let json = json_records(&records);
    group.bench_function("pipeline, json", |b| {
        let format = Format::Json {
            metadata_field: Some("_kinesis".to_owned()),
        };
        b.iter(|| pipeline(black_box(&json), None, &format))
    });
    group.bench_function("pipeline, raw", |b| {
        let format = Format::Raw {
            delimiter: b"\n".to_vec(),
        };
        b.iter(|| pipeline(black_box(&records), None, &format))
    });
    group.bench_function("pipeline, parquet, written uncompressed", |b| {
        let format = Format::Parquet { schema: None };
        b.iter(|| {
            let batch = pipeline(black_box(&records), None, &format).unwrap();
            match batch.into_bodies().0.main {
                MainBody::Parquet(rows) => rows.finish(Compression::None).unwrap().len(),
                MainBody::Bytes(_) | MainBody::Iceberg(_) => unreachable!("parquet rows"),
            }
        })
    });
    // The two encoders alone, on the same user records: the Iceberg rows
    // are not behind `Format` (the batch) yet, so the fair comparison is
    // this one against `pipeline, iceberg`.
    group.bench_function("parquet rows only, written uncompressed", |b| {
        b.iter(|| {
            let mut rows = ParquetBatch::new(None);
            for record in black_box(&records) {
                for view in record.views(SHARD) {
                    rows.push(&view).unwrap();
                }
            }
            rows.finish(Compression::None).unwrap().len()
        })
    });
    let layout = default_table_layout();
    let iceberg_rows = |records: &[ShardRecord]| {
        let mut rows = IcebergBatch::new(layout.clone(), SHARD);
        for record in records {
            for view in record.views(SHARD) {
                rows.push(&view).unwrap();
            }
        }
        rows.finish(Compression::None).unwrap()
    };
    let files = iceberg_rows(&records);
    assert_eq!(files.len(), 1, "one arrival minute: one partition");
    assert_eq!(files[0].record_count, RECORDS as u64);
    group.bench_function("pipeline, iceberg, written uncompressed", |b| {
        b.iter(|| iceberg_rows(black_box(&records)).len())
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
    group.bench_function("pipeline, resume skip on against 1,000 ranges", |b| {
        b.iter(|| pipeline(black_box(&records), Some(&written), &Format::Envelope))
    });

    let budget = MemoryBudget::new(u64::MAX, 64 << 20);
    let minute = Bucket::minute(records[0].arrival_millis);
    let mut batch = Batch::start(SHARD, &records[0], None, minute, &Format::Envelope, budget);
    for record in &records[1..] {
        batch.push(record, None);
    }
    let MainBody::Bytes(lines) = batch.into_bodies().0.main else {
        unreachable!("envelope lines")
    };
    group.bench_function("zstd level 3, whole batch", |b| {
        b.iter(|| Compression::Zstd(3).compress(black_box(&lines)).unwrap())
    });
    group.bench_function("gzip level 6, whole batch", |b| {
        b.iter(|| Compression::Gzip(6).compress(black_box(&lines)).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
