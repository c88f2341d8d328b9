//! Benchmarks for the targets in `benches/README.md`: parsing a 56-digit sequence number
//! (~0.1 µs), `contains` on a set of written ranges, and the resume skip of a
//! 10,000-record group against 1,000 written ranges (≤ 2 ms).
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use num_bigint::BigUint;
use sequence_range::{RangeSet, SequenceNumber, SequenceRange, key_encoding};

/// A real 56-digit Kinesis sequence number.
const REAL: &str = "49590338271490256608559692538361571095921575989136588898";

fn base() -> BigUint {
    SequenceNumber::parse(REAL).unwrap().to_biguint()
}

/// 56-digit sequence numbers spaced `step` apart, like one shard's records.
fn records(count: u64, step: u64) -> Vec<SequenceNumber> {
    let base = base();
    (0..count)
        .map(|i| SequenceNumber::from(&base + BigUint::from(i * step)))
        .collect()
}

/// 1,000 written ranges of 5 records each with gaps, covering about half of a
/// 10,000-record group.
fn written_ranges(records: &[SequenceNumber]) -> RangeSet {
    records
        .chunks(10)
        .map(|chunk| SequenceRange::new(chunk[0].clone(), chunk[4].clone()).unwrap())
        .collect()
}

fn bench(c: &mut Criterion) {
    c.bench_function("parse 56-digit sequence number", |b| {
        b.iter(|| SequenceNumber::parse(black_box(REAL)).unwrap())
    });
    // As the reader does: the text is the record's own `String`, kept.
    c.bench_function("parse 56-digit sequence number, owned text", |b| {
        b.iter_batched(
            || REAL.to_owned(),
            |text| SequenceNumber::try_from(text).unwrap(),
            BatchSize::SmallInput,
        )
    });

    let seqs = records(10_000, 1_000_003);
    let written = written_ranges(&seqs);
    assert_eq!(written.range_count(), 1_000);

    c.bench_function("contains on 1,000 ranges", |b| {
        let probe = &seqs[5_555];
        b.iter(|| black_box(&written).contains(black_box(probe)))
    });

    c.bench_function(
        "exclude 10,000-record group against 1,000 written ranges",
        |b| {
            b.iter(|| {
                black_box(&seqs)
                    .iter()
                    .filter(|seq| !written.contains(seq))
                    .count()
            })
        },
    );

    c.bench_function("build set from 1,000 listed ranges, newest first", |b| {
        let listed: Vec<SequenceRange> = written.iter().rev().cloned().collect();
        b.iter_batched(
            || listed.clone(),
            |ranges| ranges.into_iter().collect::<RangeSet>(),
            BatchSize::SmallInput,
        )
    });

    c.bench_function("group range minus 1,000 written ranges", |b| {
        let group = RangeSet::from(
            SequenceRange::new(seqs[0].clone(), seqs[seqs.len() - 1].clone()).unwrap(),
        );
        b.iter(|| black_box(&group).difference(black_box(&written)))
    });

    c.bench_function("encode descending key component", |b| {
        let n = SequenceNumber::parse(REAL).unwrap();
        b.iter(|| key_encoding::to_descending(black_box(&n)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
