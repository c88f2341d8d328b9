//! fjall's own FIFO compaction with a TTL (`fjall::compaction::Fifo`)
//! against the store's hand-made epochs, on one workload: one shard's
//! stream as in `event_store` (36-byte ids, one record in ten a retry of an
//! event of the last thousand, 1 ms between arrivals), decided in runs of
//! 500 with a window of `WINDOW_MILLIS`, copies kept for twice the window
//! (the horizon follows the last decided arrival), and the oldest copies
//! leaving as the stream goes on.
//!
//! - `epochs`: a [`LocalStore`] with the default options (epochs, runs,
//!   in-memory filters, recent keys), its horizon advanced after each run
//!   as the daemon does after a written batch.
//! - `fifo+ttl`: one fjall keyspace whose compaction is FIFO with a size
//!   limit (`FIFO_LIMIT`) and a TTL of twice the window. fjall's FIFO
//!   (lsm-tree 3.1, `compaction/fifo.rs`) only drops whole tables and
//!   requires level 0 to be one run of disjoint tables ("the key order of
//!   inserts is strictly monotonically increasing"): keyed by the event
//!   id's hash, its first compaction panics on "L0 needs to be disjoint"
//!   and the database is poisoned. So its keys are `(bucket, id)`, the
//!   bucket numbered up every `BUCKET_KEYS` keys written (the memtable
//!   rotated then, so that each table holds one bucket), and a lookup
//!   reads the id in every bucket whose newest copy is within the horizon,
//!   newest first, each answered by fjall's Bloom filters. Its TTL counts
//!   from a table's creation on the wall clock, not from the copies'
//!   arrival times: within the benchmark's seconds only the size limit
//!   drops tables, and reads leave out copies below the horizon, as the
//!   store's do.
//!
//! Both start from a prepared stream of `PREPARED_RECORDS` records (built
//! again for every run, in a scratch directory under `target/bench-data`)
//! and print, besides criterion's `decide 500`, the decisions per
//! CPU-second of the whole process over `BENCH_DECISIONS` decisions
//! (default 200,000; fjall's flushes and compactions included) and the
//! size on disk. Figures: `benches/README.md`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, VecDeque};
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use event_store::{
    AcceptedCopy, Candidate, CopyRef, Decision, Lineage, LocalOptions, LocalStore, Rule,
};
use fjall::compaction::Fifo;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use sequence_range::SequenceNumber;

use self::common::{RUN, Stream, disk_bytes, process_cpu, target_dir, wait_idle};

/// The daemon's allocator (see the daemon's `main.rs`), so that the
/// figures are the daemon's.
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const SETTINGS: &str = "events;id=partition-key;fingerprint=payload";
/// The window: 100,000 records' arrivals; copies are kept for twice that.
const WINDOW_MILLIS: i64 = 100_000;
/// Records decided before the measurements: three horizons.
const PREPARED_RECORDS: u64 = 600_000;
/// Keys written to one FIFO bucket before the next starts.
const BUCKET_KEYS: u64 = 50_000;
/// FIFO's size limit: about twice the horizon's keys.
const FIFO_LIMIT: u64 = 48 * 1024 * 1024;
/// Memtable size of the FIFO keyspace: above a bucket's keys, so that only
/// the rotation at a bucket's end flushes it.
const FIFO_MEMTABLE_BYTES: u64 = 64 * 1024 * 1024;

fn rule() -> Rule {
    Rule {
        window_millis: WINDOW_MILLIS,
        match_fingerprint: true,
    }
}

/// The horizon after deciding `run`: its last arrival less two windows.
fn horizon_after(run: &[Candidate]) -> i64 {
    run.last().unwrap().arrival_millis - rule().horizon_millis()
}

/// A store the workload drives.
trait Store {
    /// Decides `run` and moves the horizon past it.
    fn decide(&mut self, lineage: &Lineage, run: &[Candidate]) -> Vec<Decision>;
}

/// The hand-made epochs: the store as the daemon uses it.
struct Epochs(LocalStore);

impl Store for Epochs {
    fn decide(&mut self, lineage: &Lineage, run: &[Candidate]) -> Vec<Decision> {
        let through = &run.last().unwrap().copy.sequence_number;
        let decisions = self
            .0
            .decide(lineage, &rule(), SETTINGS, run, through)
            .unwrap();
        self.0
            .advance_horizon(&lineage.shard_id, horizon_after(run))
            .unwrap();
        decisions
    }
}

/// One fjall keyspace with FIFO compaction and a TTL, keys `(bucket, id)`.
struct FifoTtl {
    db: Database,
    copies: Keyspace,
    /// The buckets that may hold copies within the horizon, oldest first:
    /// (number, newest arrival written to it).
    buckets: VecDeque<(u32, i64)>,
    /// Keys written to the last bucket.
    in_bucket: u64,
    horizon: i64,
}

impl FifoTtl {
    fn open(dir: &Path) -> Self {
        let db = Database::builder(dir)
            .cache_size(LocalOptions::default().cache_bytes)
            .worker_threads(LocalOptions::default().worker_threads)
            .open()
            .unwrap();
        let ttl_seconds = (rule().horizon_millis() / 1_000) as u64;
        let copies = db
            .keyspace("copies", || {
                KeyspaceCreateOptions::default()
                    .max_memtable_size(FIFO_MEMTABLE_BYTES)
                    .compaction_strategy(Arc::new(Fifo::new(FIFO_LIMIT, Some(ttl_seconds))))
            })
            .unwrap();
        Self {
            db,
            copies,
            buckets: VecDeque::from([(0, i64::MIN)]),
            in_bucket: 0,
            horizon: i64::MIN,
        }
    }

    fn key(bucket: u32, id: u128) -> [u8; 20] {
        let mut key = [0; 20];
        key[..4].copy_from_slice(&bucket.to_be_bytes());
        key[4..].copy_from_slice(&id.to_be_bytes());
        key
    }

    fn current(&self) -> u32 {
        self.buckets.back().unwrap().0
    }

    /// The copies of `id` within the horizon: those of older buckets, and
    /// those of the current one (rewritten with the copies it accepts).
    fn read(&self, id: u128, shard: &Arc<str>) -> (Vec<AcceptedCopy>, Vec<AcceptedCopy>) {
        let (mut older, mut current) = (Vec::new(), Vec::new());
        for &(bucket, _) in self.buckets.iter().rev() {
            if let Some(value) = self.copies.get(Self::key(bucket, id)).unwrap() {
                let found = decode(&value, shard)
                    .into_iter()
                    .filter(|copy| copy.arrival_millis >= self.horizon);
                if bucket == self.current() {
                    current.extend(found);
                } else {
                    older.extend(found);
                }
            }
        }
        (older, current)
    }
}

impl Store for FifoTtl {
    fn decide(&mut self, lineage: &Lineage, run: &[Candidate]) -> Vec<Decision> {
        let rule = rule();
        // Per id: (older copies, the current bucket's, written).
        let mut slots: HashMap<u128, (Vec<AcceptedCopy>, Vec<AcceptedCopy>, bool)> =
            HashMap::with_capacity(run.len());
        let mut decisions = Vec::with_capacity(run.len());
        for candidate in run {
            let (older, current, dirty) = slots.entry(candidate.key.id).or_insert_with(|| {
                let (older, current) = self.read(candidate.key.id, &lineage.shard_id);
                (older, current, false)
            });
            let decision = rule.decide(
                &candidate.key,
                candidate.arrival_millis,
                older.iter().chain(current.iter()),
            );
            if decision.accepts() {
                current.push(candidate.accepted());
                *dirty = true;
            }
            decisions.push(decision);
        }
        let bucket = self.current();
        let mut batch = self.db.batch().durability(Some(PersistMode::Buffer));
        let mut written = 0;
        for (id, (_, current, dirty)) in &slots {
            if *dirty {
                batch.insert(&self.copies, Self::key(bucket, *id), encode(current));
                written += 1;
            }
        }
        batch.commit().unwrap();
        let newest = run.iter().map(|c| c.arrival_millis).max().unwrap();
        let last = self.buckets.back_mut().unwrap();
        last.1 = last.1.max(newest);
        self.in_bucket += written;
        if self.in_bucket >= BUCKET_KEYS {
            // One table per bucket: FIFO needs level 0 disjoint.
            self.copies.rotate_memtable().unwrap();
            self.buckets.push_back((bucket + 1, i64::MIN));
            self.in_bucket = 0;
        }
        self.horizon = horizon_after(run);
        while self
            .buckets
            .front()
            .is_some_and(|&(_, newest)| newest < self.horizon)
        {
            self.buckets.pop_front();
        }
        decisions
    }
}

/// `(fingerprint, arrival, sequence number text)` per copy.
fn encode(copies: &[AcceptedCopy]) -> Vec<u8> {
    let mut out = Vec::with_capacity(copies.len() * 80);
    for copy in copies {
        out.extend_from_slice(&copy.fingerprint.to_le_bytes());
        out.extend_from_slice(&copy.arrival_millis.to_le_bytes());
        let text = copy.copy.sequence_number.to_string();
        out.push(text.len() as u8);
        out.extend_from_slice(text.as_bytes());
    }
    out
}

fn decode(mut value: &[u8], shard: &Arc<str>) -> Vec<AcceptedCopy> {
    let mut copies = Vec::new();
    while !value.is_empty() {
        let fingerprint = u64::from_le_bytes(value[..8].try_into().unwrap());
        let arrival_millis = i64::from_le_bytes(value[8..16].try_into().unwrap());
        let len = usize::from(value[16]);
        let text = std::str::from_utf8(&value[17..17 + len]).unwrap();
        copies.push(AcceptedCopy {
            fingerprint,
            arrival_millis,
            copy: CopyRef {
                shard_id: Arc::clone(shard),
                sequence_number: SequenceNumber::parse(text).unwrap(),
                sub_sequence_number: None,
            },
        });
        value = &value[17 + len..];
    }
    copies
}

/// Decides `PREPARED_RECORDS` records, measures `decide 500` with
/// criterion, then the CPU per decision over `BENCH_DECISIONS`.
fn measure(c: &mut Criterion, name: &str, store: &mut dyn Store, dir: &Path) {
    let mut stream = Stream::new();
    let lineage = stream.lineage.clone();
    let started = Instant::now();
    while stream.records < PREPARED_RECORDS {
        let run = stream.run(RUN);
        store.decide(&lineage, &run);
    }
    eprintln!(
        "{name}: {PREPARED_RECORDS} records prepared in {:.1?}",
        started.elapsed()
    );
    let mut group = c.benchmark_group("retention window, 600,000 records before");
    group.throughput(Throughput::Elements(RUN as u64));
    group.sample_size(20);
    group.bench_function(format!("{name}: decide 500"), |b| {
        b.iter_batched(
            || stream.run(RUN),
            |run| black_box(store.decide(&lineage, &run)),
            BatchSize::SmallInput,
        )
    });
    group.finish();
    let decisions: usize = std::env::var("BENCH_DECISIONS").map_or(200_000, |n| n.parse().unwrap());
    let runs: Vec<Vec<Candidate>> = (0..decisions / RUN).map(|_| stream.run(RUN)).collect();
    let cpu = wait_idle();
    let started = Instant::now();
    for run in &runs {
        store.decide(&lineage, run);
    }
    let wall = started.elapsed();
    let cpu = wait_idle() - cpu;
    let decided = (runs.len() * RUN) as f64;
    eprintln!(
        "{name}: {} decisions: {:.0}/s on the calling thread, {:.0} per CPU-second of the process; {} MiB on disk",
        runs.len() * RUN,
        decided / wall.as_secs_f64(),
        decided / cpu.as_secs_f64(),
        disk_bytes(dir) >> 20,
    );
}

fn bench(c: &mut Criterion) {
    let scratch = target_dir().join("event-store-fifo-scratch");
    for (name, open) in [
        (
            "epochs",
            (|dir: &Path| {
                Box::new(Epochs(
                    LocalStore::open(dir, LocalOptions::default()).unwrap(),
                )) as Box<dyn Store>
            }) as fn(&Path) -> Box<dyn Store>,
        ),
        ("fifo+ttl", |dir: &Path| {
            Box::new(FifoTtl::open(dir)) as Box<dyn Store>
        }),
    ] {
        let dir = scratch.join(name.replace('+', "-"));
        let _ = std::fs::remove_dir_all(&dir);
        let cpu = process_cpu();
        let mut store = open(&dir);
        measure(c, name, &mut *store, &dir);
        drop(store);
        eprintln!("{name}: {:.1?} of CPU in all", process_cpu() - cpu);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
