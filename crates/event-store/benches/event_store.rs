//! The local event store deciding runs of 500 user records against 10
//! million keys already stored: event ids are 36-byte UUID texts (the
//! partition key, hashed with XXH3 as the daemon's `--event-id
//! partition-key` does), one
//! record in ten repeats an event of the last thousand (a producer's retry:
//! a duplicate), the rest are new; one shard, 1 ms between arrivals, a 1 h
//! window.
//!
//! The 10-million-key store is built once (by deciding the same stream) in
//! `target/bench-data/` and copied to a scratch directory for each run, so
//! every run starts from the same state. Two figures:
//! - criterion's `decide 500`: the calling thread, wall time, fjall's
//!   flushes and compactions running on other cores;
//! - `decisions per CPU-second`: the whole process's CPU time (calling
//!   thread and fjall's background threads) over one million decisions
//!   (`BENCH_DECISIONS` sets another number: a level-0 merge comes every
//!   million or so, so one million may catch none or one; 5 million give
//!   a steadier figure) — the per-core throughput.
//!
//! It also prints the time to open the store (its in-memory filters are
//! built by a scan of the keys), the process's resident memory with the
//! store open (to compare with `LocalOptions`' budget) and the store's size
//! on disk. `BENCH_FILTER_BYTES=0` runs without the filters.
//!
//! The figures and how they got there: `benches/README.md`.
//! `BENCH_EPOCH_KEYS` and `BENCH_MEMTABLE_BYTES` set those options (the
//! memtable size applies to epochs started during the run).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use event_store::{Candidate, Lineage, LocalOptions, LocalStore, Rule};

use self::common::{RUN, Stream, disk_bytes, process_cpu, resident_mib, target_dir, wait_idle};

/// The daemon's allocator (see the daemon's `main.rs`), so that the
/// figures are the daemon's.
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const SETTINGS: &str = "events;id=partition-key;fingerprint=payload";
/// Distinct events in the prepared store.
const KEYS: u64 = 10_000_000;
/// Bump when the store's layout or options change: the prepared store is
/// rebuilt under a new name.
const PREPARED: &str = "event-store-10m-v8";

/// Decides one run of `lineage`'s records.
fn decide(store: &LocalStore, lineage: &Lineage, run: &[Candidate]) {
    let rule = Rule {
        window_millis: 3_600_000,
        match_fingerprint: true,
    };
    let through = &run.last().unwrap().copy.sequence_number;
    black_box(
        store
            .decide(lineage, &rule, SETTINGS, run, through)
            .unwrap(),
    );
}

/// The prepared store's directory and the stream's position after it,
/// building it when missing.
fn prepared() -> (PathBuf, Stream) {
    let dir = target_dir().join(PREPARED);
    let done = target_dir().join(format!("{PREPARED}.done"));
    let mut stream = Stream::new();
    if let Ok(text) = std::fs::read_to_string(&done) {
        let numbers: Vec<u64> = text
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        (stream.records, stream.events, stream.rng) = (numbers[0], numbers[1], numbers[2]);
        return (dir, stream);
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("building {} ({KEYS} keys), once", dir.display());
    let started = Instant::now();
    let store = LocalStore::open(&dir, LocalOptions::default()).unwrap();
    while stream.events < KEYS {
        let run = stream.run(5_000);
        decide(&store, &stream.lineage, &run);
        if stream.records % 1_000_000 < 5_000 {
            eprintln!(
                "  {} records, {} keys, {:.0?}",
                stream.records,
                stream.events,
                started.elapsed()
            );
        }
    }
    drop(store);
    std::fs::write(
        &done,
        format!("{} {} {}", stream.records, stream.events, stream.rng),
    )
    .unwrap();
    eprintln!(
        "built in {:.0?}, {} MiB on disk",
        started.elapsed(),
        disk_bytes(&dir) >> 20
    );
    (dir, stream)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Decides `runs` and returns (wall time, process CPU time), waiting for
/// the background work they caused to settle.
fn timed(store: &LocalStore, lineage: &Lineage, runs: &[Vec<Candidate>]) -> (Duration, Duration) {
    let cpu = process_cpu();
    let started = Instant::now();
    for run in runs {
        decide(store, lineage, run);
    }
    let wall = started.elapsed();
    (wall, wait_idle() - cpu)
}

fn bench(c: &mut Criterion) {
    let (prepared, mut stream) = prepared();
    let scratch = target_dir().join("event-store-scratch");
    let _ = std::fs::remove_dir_all(&scratch);
    copy_dir(&prepared, &scratch);
    eprintln!(
        "prepared store: {} MiB on disk, {} records, {} keys",
        disk_bytes(&prepared) >> 20,
        stream.records,
        stream.events
    );
    let (opened, open_cpu) = (Instant::now(), process_cpu());
    let options = LocalOptions {
        filter_bytes: std::env::var("BENCH_FILTER_BYTES")
            .map_or(LocalOptions::default().filter_bytes, |n| n.parse().unwrap()),
        memtable_bytes: std::env::var("BENCH_MEMTABLE_BYTES")
            .map_or(LocalOptions::default().memtable_bytes, |n| {
                n.parse().unwrap()
            }),
        epoch_keys: std::env::var("BENCH_EPOCH_KEYS")
            .map_or(LocalOptions::default().epoch_keys, |n| n.parse().unwrap()),
        ..LocalOptions::default()
    };
    let store = LocalStore::open(&scratch, options).unwrap();
    eprintln!(
        "opened in {:.2?} ({:.2?} of CPU)",
        opened.elapsed(),
        process_cpu() - open_cpu
    );

    let mut group = c.benchmark_group("local event store, 10M keys");
    group.throughput(Throughput::Elements(RUN as u64));
    group.sample_size(20);
    let lineage = stream.lineage.clone();
    group.bench_function("decide 500", |b| {
        b.iter_batched(
            || stream.run(RUN),
            |run| decide(&store, &lineage, &run),
            BatchSize::SmallInput,
        )
    });
    group.finish();
    // Before the runs below are generated: the store's memory, the
    // benchmark's own being small.
    eprintln!("resident memory: {} MiB", resident_mib());

    let decisions: usize =
        std::env::var("BENCH_DECISIONS").map_or(1_000_000, |n| n.parse().unwrap());
    let runs: Vec<Vec<Candidate>> = (0..decisions / RUN).map(|_| stream.run(RUN)).collect();
    let (wall, cpu) = timed(&store, &lineage, &runs);
    let decisions = (runs.len() * RUN) as f64;
    eprintln!(
        "{} decisions: {:.0}/s on the calling thread, {:.0} per CPU-second of the process",
        runs.len() * RUN,
        decisions / wall.as_secs_f64(),
        decisions / cpu.as_secs_f64(),
    );
    eprintln!(
        "store after the benchmark: {} MiB on disk",
        disk_bytes(&scratch) >> 20
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&scratch);
}

criterion_group!(benches, bench);
criterion_main!(benches);
