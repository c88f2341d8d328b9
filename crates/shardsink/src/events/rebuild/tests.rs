use std::collections::HashMap;

use bytes::Bytes;

use super::*;
use crate::events::id::{EventIdSource, settings_description};
use crate::events::rule::{CopyRef, Decision, Outcome, Rule};
use crate::events::store::{Candidate, Lineage};
use crate::fake_aws::{self, FakeBucket, FakeStream, FakeTable};
use crate::lock::lock;
use crate::output::decisions::{UserDecision, decisions_key, encode_line};
use crate::read::record::UserRecordView;

const SHARD: &str = "shardId-000000000000";
/// 2026-11-21T05:27:00Z, a minute's start.
const T0: i64 = 1_795_238_820_000;
/// The window read: an hour before `T0` to an hour after.
const WINDOW: (i64, i64) = (T0 - 3_600_000, T0 + 3_600_000);

fn description() -> String {
    settings_description(&EventIdSource::PartitionKey, true)
}

/// The 56-digit sequence number of record `n`.
fn seq(n: u64) -> String {
    format!("4959033827149025660855969253836157109592157598{n:010}")
}

/// The key of event `id`.
fn event(id: u64) -> EventKey {
    EventKey {
        id: u128::from(id) << 64 | 0xfeed,
        fingerprint: id,
    }
}

/// A decisions line of record `n` (event `n`) arriving at `arrival`.
fn line(n: u64, arrival: i64, decision: Decision, out: &mut Vec<u8>) {
    let sequence_number = seq(n);
    let user = UserRecordView {
        shard_id: SHARD,
        sequence_number: &sequence_number,
        sub_sequence_number: None,
        partition_key: "pk",
        arrival_millis: arrival,
        data: b"",
    };
    let decision = UserDecision {
        key: Some(event(n)),
        decision,
    };
    encode_line(&user, &decision, out);
}

const UNIQUE: Decision = Decision::Keep(Outcome::Unique);

/// Records `first..=last`, each its own event, unique, a millisecond
/// apart from `T0`.
fn unique(first: u64, last: u64) -> Vec<u8> {
    let mut body = Vec::new();
    for n in first..=last {
        line(n, T0 + i64::try_from(n).unwrap(), UNIQUE, &mut body);
    }
    body
}

fn zstd(plain: &[u8]) -> Vec<u8> {
    DECISIONS_COMPRESSION.compress(plain).unwrap()
}

/// `read_copies` over `plain`, recording each insert's size.
fn read(plain: &[u8], pass: Pass, chunk: usize) -> (PassOutcome, Vec<usize>) {
    let mut inserts = Vec::new();
    let outcome = read_copies(
        &zstd(plain)[..],
        &Arc::from(SHARD),
        WINDOW,
        (pass, chunk),
        |copies| {
            inserts.push(copies.len());
            Ok(())
        },
    )
    .unwrap();
    (outcome, inserts)
}

#[test]
fn an_object_within_a_chunk_is_inserted_at_once() {
    let mut body = unique(1, 3);
    // Not accepted, or outside the window: left out.
    let of = CopyRef {
        shard_id: Arc::from(SHARD),
        sequence_number: SequenceNumber::parse(&seq(1)).unwrap(),
        sub_sequence_number: None,
    };
    line(4, T0 + 4, Decision::Duplicate { of }, &mut body);
    line(5, WINDOW.1, UNIQUE, &mut body);
    line(6, WINDOW.0 - 1, UNIQUE, &mut body);
    line(7, WINDOW.0, Decision::Keep(Outcome::Expired), &mut body);
    assert_eq!(
        read(&body, Pass::Whole, 4),
        (PassOutcome::Inserted(4), vec![4])
    );
}

#[test]
fn an_object_larger_than_a_chunk_is_checked_then_inserted_a_chunk_at_a_time() {
    let body = unique(1, 5);
    assert_eq!(
        read(&body, Pass::Whole, 2),
        (PassOutcome::TooLarge, vec![]),
        "nothing is inserted before every line parsed"
    );
    assert_eq!(
        read(&body, Pass::Chunked, 2),
        (PassOutcome::Inserted(5), vec![2, 2, 1])
    );
}

#[test]
fn an_object_with_a_line_that_does_not_parse_is_left_out_whole() {
    let mut body = unique(1, 5);
    body.extend_from_slice(b"{\"outcome\":\"duplicate\"}\n");
    for pass in [(Pass::Whole, 2), (Pass::Whole, 10)] {
        let (outcome, inserts) = read(&body, pass.0, pass.1);
        assert!(
            matches!(outcome, PassOutcome::Unreadable(ref error) if error.contains("line 6")),
            "{outcome:?}"
        );
        assert_eq!(inserts, Vec::<usize>::new(), "none of its copies");
    }
    let not_zstd = read_copies(
        &b"not zstd"[..],
        &Arc::from(SHARD),
        WINDOW,
        (Pass::Whole, 2),
        |_| Ok(()),
    );
    assert!(matches!(not_zstd, Err(ReadError::Io(_))));
}

struct Fixture {
    bucket: Arc<FakeBucket>,
    source: RebuildSource,
    store: LocalStore,
    _dir: tempfile::TempDir,
}

fn fixture(budget: Arc<MemoryBudget>) -> Fixture {
    let bucket = Arc::new(FakeBucket::default());
    let clients = fake_aws::clients(
        Arc::new(FakeStream::default()),
        bucket.clone(),
        Arc::new(FakeTable::default()),
    );
    let dir = tempfile::tempdir().unwrap();
    Fixture {
        source: RebuildSource {
            store: ObjectStore::new(clients.s3, "bucket"),
            output: Output::for_tests("p"),
            metrics: Arc::new(Metrics::new()),
            budget,
            table: false,
        },
        store: LocalStore::open(dir.path(), event_store::LocalOptions::default()).unwrap(),
        bucket,
        _dir: dir,
    }
}

impl Fixture {
    /// Puts the decisions object of the batch `first..=last` (in the
    /// minute record `first` arrives in, by [`unique`]) with `plain` as
    /// its lines, made with `settings`; and its main object when
    /// `committed`.
    fn put(&self, (first, last): (u64, u64), plain: &[u8], settings: &str, committed: bool) {
        let output = &self.source.output;
        let bucket = output.layout.bucket_of(T0 + i64::try_from(first).unwrap());
        let range = SequenceRange::new(
            SequenceNumber::parse(&seq(first)).unwrap(),
            SequenceNumber::parse(&seq(last)).unwrap(),
        )
        .unwrap();
        let key = decisions_key(&output.decisions_layout, bucket, SHARD, &range);
        lock(&self.bucket.objects).insert(key.clone(), Bytes::from(zstd(plain)));
        let metadata = HashMap::from([(FORMAT_METADATA.to_owned(), settings.to_owned())]);
        lock(&self.bucket.metadata).insert(key, metadata);
        if committed {
            let main = output
                .layout
                .object_key(bucket, SHARD, &range, output.body_kind());
            lock(&self.bucket.objects).insert(main, Bytes::new());
        }
    }

    async fn rebuild(&self) -> Result<Rebuilt, RebuildError> {
        self.rebuild_committed(&Committed::ByMainObject).await
    }

    async fn rebuild_committed(&self, committed: &Committed) -> Result<Rebuilt, RebuildError> {
        rebuild(
            &self.source,
            &self.store,
            SHARD,
            WINDOW,
            committed,
            &description(),
            &CancellationToken::new(),
        )
        .await
    }

    /// Which of `events` the store holds a copy of: a later copy of
    /// each (after every record put), within the window, is decided a
    /// duplicate.
    fn known(&self, events: impl IntoIterator<Item = u64>) -> Vec<u64> {
        let events: Vec<u64> = events.into_iter().collect();
        let candidates: Vec<Candidate> = events
            .iter()
            .enumerate()
            .map(|(i, id)| Candidate {
                key: event(*id),
                copy: CopyRef {
                    shard_id: Arc::from(SHARD),
                    sequence_number: SequenceNumber::parse(&seq(9_000_000_000 + i as u64)).unwrap(),
                    sub_sequence_number: None,
                },
                arrival_millis: T0 + 60_000,
            })
            .collect();
        let rule = Rule {
            window_millis: 3_600_000,
            match_fingerprint: true,
        };
        let through = candidates[candidates.len() - 1]
            .copy
            .sequence_number
            .clone();
        let decided = self
            .store
            .decide(
                &Lineage::root(SHARD),
                &rule,
                &description(),
                &candidates,
                &through,
            )
            .unwrap();
        events
            .into_iter()
            .zip(decided)
            .filter(|(_, decision)| !decision.accepts())
            .map(|(id, _)| id)
            .collect()
    }
}

#[tokio::test]
async fn only_the_copies_of_committed_objects_with_these_settings_go_in() {
    let f = fixture(MemoryBudget::new(1 << 30, 1 << 30));
    let settings = description();
    f.put((1, 3), &unique(1, 3), &settings, true);
    // Uncommitted: its main object is not there.
    f.put((4, 5), &unique(4, 5), &settings, false);
    f.put(
        (6, 6),
        &unique(6, 6),
        "events;id=payload;fingerprint=none",
        true,
    );
    let mut unreadable = unique(7, 8);
    unreadable.extend_from_slice(b"not json\n");
    f.put((7, 8), &unreadable, &settings, true);
    let mut late = Vec::new();
    line(9, WINDOW.1 + 1, UNIQUE, &mut late);
    f.put((9, 9), &late, &settings, true);
    let rebuilt = f.rebuild().await.unwrap();
    assert_eq!(
        rebuilt,
        Rebuilt {
            copies: 3,
            objects: 2,
            skipped: 3
        }
    );
    assert_eq!(f.known(1..=9), [1, 2, 3]);
    assert_eq!(f.source.budget.used(), 0, "released when it ended");
}

/// A table batch writes no main object: its batches are committed up to
/// the shard's placed records, and an ended shard's all are.
#[tokio::test]
async fn for_a_table_the_objects_up_to_the_placed_records_go_in() {
    let f = fixture(MemoryBudget::new(1 << 30, 1 << 30));
    let settings = description();
    f.put((1, 3), &unique(1, 3), &settings, false);
    f.put((4, 5), &unique(4, 5), &settings, false);
    // An attempt past the placed records, which the resume skip rebuilds.
    f.put((6, 7), &unique(6, 7), &settings, false);
    let placed = SequenceNumber::parse(&seq(5)).unwrap();
    let rebuilt = f
        .rebuild_committed(&Committed::Through(Some(placed)))
        .await
        .unwrap();
    assert_eq!(
        (rebuilt.objects, rebuilt.copies, rebuilt.skipped),
        (2, 5, 1)
    );
    assert_eq!(f.known(1..=7), [1, 2, 3, 4, 5]);

    let f = fixture(MemoryBudget::new(1 << 30, 1 << 30));
    f.put((1, 3), &unique(1, 3), &settings, false);
    f.put((4, 5), &unique(4, 5), &settings, false);
    let rebuilt = f
        .rebuild_committed(&Committed::Through(None))
        .await
        .unwrap();
    assert_eq!((rebuilt.objects, rebuilt.copies), (2, 5), "an ended shard");
}

#[test]
fn a_table_source_counts_placed_records_an_archive_main_objects() {
    let f = fixture(MemoryBudget::new(1 << 30, 1 << 30));
    let placed = SequenceNumber::parse(&seq(5)).unwrap();
    assert_eq!(f.source.committed(Some(&placed)), Committed::ByMainObject);
    let table = RebuildSource {
        table: true,
        ..f.source.clone()
    };
    assert_eq!(
        table.committed(Some(&placed)),
        Committed::Through(Some(placed.clone()))
    );
    assert_eq!(table.committed(None), Committed::Through(None));
}

#[tokio::test]
async fn an_object_larger_than_a_chunk_goes_in_whole() {
    let f = fixture(MemoryBudget::new(1 << 30, 1 << 30));
    let last = CHUNK_COPIES as u64 + 1;
    f.put((1, last), &unique(1, last), &description(), true);
    let gets = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = gets.clone();
    *lock(&f.bucket.on_get) = Some(Box::new(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
    }));
    assert_eq!(f.rebuild().await.unwrap().copies, CHUNK_COPIES + 1);
    assert_eq!(gets.load(Ordering::SeqCst), 2, "checked, then inserted");
    assert_eq!(f.known([1, last, last + 1]), [1, last]);
}

#[tokio::test]
async fn a_rebuild_waits_for_its_turn_and_holds_its_bytes_until_it_ended() {
    // 64 MiB: one rebuild at a time.
    let f = fixture(MemoryBudget::new(64 << 20, 64 << 20));
    f.put((1, 2), &unique(1, 2), &description(), true);
    let budget = f.source.budget.clone();
    let held_while_reading = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = held_while_reading.clone();
    let watched = budget.clone();
    *lock(&f.bucket.on_get) = Some(Box::new(move |_| {
        seen.store(watched.used(), Ordering::SeqCst);
    }));

    let other = budget.rebuild_permit().await;
    let rebuilding = f.rebuild();
    tokio::pin!(rebuilding);
    assert!(futures::poll!(rebuilding.as_mut()).is_pending());
    assert_eq!(budget.used(), 0, "nothing held before its turn");
    drop(other);
    assert_eq!(rebuilding.await.unwrap().copies, 2);
    assert_eq!(held_while_reading.load(Ordering::SeqCst), REBUILD_BYTES);
    assert_eq!(budget.used(), 0);

    // A rebuild waiting for its turn stops with the lease.
    let _other = budget.rebuild_permit().await;
    let stop = CancellationToken::new();
    stop.cancel();
    let stopped = rebuild(
        &f.source,
        &f.store,
        SHARD,
        WINDOW,
        &Committed::ByMainObject,
        &description(),
        &stop,
    )
    .await;
    assert!(matches!(
        stopped,
        Err(RebuildError::Stopped(Stopped::Cancelled))
    ));
}

/// This process's peak resident memory since the last reset
/// (`VmHWM`) and its resident memory now (`VmRSS`), bytes (proc(5)).
fn resident() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap();
        let kib: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap();
        kib * 1024
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Rebuilds two million copies from 40 decisions objects of 50,000
/// records each (a busy shard's batches: each object above a chunk, so
/// read twice), into a local store with the default options, and
/// reports how much the process's peak resident memory grew over what
/// it held before (the objects in the fake bucket) next to the budget:
/// the rebuild's [`REBUILD_BYTES`] and the store's documented 225 MiB
/// (`LocalOptions`). Collecting the window's copies in one list before
/// inserting them, as a rebuild once did, grew it by about 430 MiB
/// here; streaming them, by 100 to 150 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes in a debug build: cargo test -p shardsink --lib millions -- --ignored --nocapture"]
async fn a_rebuild_of_millions_of_copies_stays_within_its_budget() {
    const COPIES: u64 = 2_000_000;
    const PER_OBJECT: u64 = 50_000;
    const STORE_BUDGET: u64 = 225 << 20;
    let f = fixture(MemoryBudget::new(256 << 20, 64 << 20));
    let settings = description();
    for first in (1..=COPIES).step_by(usize::try_from(PER_OBJECT).unwrap()) {
        let last = first + PER_OBJECT - 1;
        f.put((first, last), &unique(first, last), &settings, true);
    }
    // Resets VmHWM to VmRSS (proc(5), /proc/pid/clear_refs).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let (_, before) = resident();
    let started = std::time::Instant::now();
    let rebuilt = f.rebuild().await.unwrap();
    let elapsed = started.elapsed();
    let (peak, _) = resident();
    let growth = peak.saturating_sub(before);
    let mib = |bytes: u64| bytes >> 20;
    println!(
        "rebuilt {} copies from {} objects in {elapsed:.1?}: resident {} MiB before, \
         peak {} MiB, grew {} MiB (budget: rebuild {} MiB + store {} MiB)",
        rebuilt.copies,
        rebuilt.objects,
        mib(before),
        mib(peak),
        mib(growth),
        mib(REBUILD_BYTES),
        mib(STORE_BUDGET),
    );
    assert_eq!(rebuilt.copies, usize::try_from(COPIES).unwrap());
    assert_eq!(f.known([1, COPIES / 2, COPIES]), [1, COPIES / 2, COPIES]);
    assert!(
        growth <= REBUILD_BYTES + STORE_BUDGET,
        "grew {} MiB",
        mib(growth)
    );
}
