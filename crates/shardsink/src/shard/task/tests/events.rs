//! The shard task with event decisions: duplicates to their prefix, the
//! decisions object first, and replays that decide as the first attempt did.

use std::sync::Arc;

use bytes::Bytes;
use sequence_range::{SequenceNumber, SequenceRange};
use shard_lease::{Checkpoint, PendingBatch};

use super::{Harness, PAST, SHARD, harness, seq};
use crate::events::EventSettings;
use crate::events::decider::{EventRuntime, EventStore};
use crate::events::id::EventIdSource;
use crate::events::memory::MemoryStore;
use crate::events::rule::{Outcome, Rule};
use crate::memory::MemoryBudget;
use crate::output::Output;
use crate::output::bucket::Bucket;
use crate::output::compression::CompressionCodec;
use crate::output::compression::{Compression, decompress};
use crate::output::decisions::{self, decisions_key};
use crate::output::format::{BodyKind, Format};
use crate::output::key::KeyLayout;
use crate::shard::context::ShardContext;
use crate::shard::task::ShardTask;

const LINES: BodyKind = BodyKind::lines(CompressionCodec::None);

/// A harness writing envelope lines uncompressed, deciding events by
/// payload within an hour, in a store in memory.
fn with_events() -> Harness {
    with_store(EventStore::Memory(MemoryStore::default()))
}

/// The same with the local store in `dir`.
fn with_local_store(dir: &std::path::Path) -> Harness {
    let store = event_store::LocalStore::open(dir, Default::default()).unwrap();
    with_store(EventStore::Local(store))
}

fn with_store(store: EventStore) -> Harness {
    let h = harness(1_000);
    let output = Output::new(
        KeyLayout::plain("p"),
        "p-errors",
        "p-duplicates",
        Format::Envelope,
    )
    .with_compression(Compression::None);
    let h = Harness {
        ctx: Arc::new(ShardContext {
            output,
            ..(*h.ctx).clone()
        }),
        ..h
    };
    deciding(&h, store)
}

/// `h`'s shard, bucket and tables, its task deciding events by payload
/// within an hour in `store`.
pub(super) fn deciding(h: &Harness, store: EventStore) -> Harness {
    let settings = EventSettings {
        source: EventIdSource::Payload,
        fingerprint: true,
        rule: Rule {
            window_millis: 3_600_000,
            match_fingerprint: true,
        },
    };
    let runtime = EventRuntime::new(settings, store);
    Harness {
        ctx: Arc::new(ShardContext {
            events: Some(Arc::new(runtime)),
            ..(*h.ctx).clone()
        }),
        shard: h.shard.clone(),
        bucket: h.bucket.clone(),
        table: h.table.clone(),
        lease_table: h.lease_table.clone(),
    }
}

fn range(first: u64, last: u64) -> SequenceRange {
    SequenceRange::new(
        SequenceNumber::parse(&seq(first)).unwrap(),
        SequenceNumber::parse(&seq(last)).unwrap(),
    )
    .unwrap()
}

/// The keys of the batch `first..=last` in the minute of `PAST`: main,
/// duplicates, decisions.
fn keys(h: &Harness, first: u64, last: u64) -> (String, String, String) {
    let bucket = Bucket::minute(PAST);
    let output = &h.ctx.output;
    (
        output
            .layout
            .object_key(bucket, SHARD, &range(first, last), LINES),
        output
            .duplicates_layout
            .object_key(bucket, SHARD, &range(first, last), LINES),
        decisions_key(&output.decisions_layout, bucket, SHARD, &range(first, last)),
    )
}

fn object(h: &Harness, key: &str) -> Option<Bytes> {
    h.bucket.objects.lock().unwrap().get(key).cloned()
}

fn lines(body: &[u8]) -> Vec<serde_json::Value> {
    std::str::from_utf8(body)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn sequence_numbers(body: &[u8]) -> Vec<String> {
    lines(body)
        .iter()
        .map(|line| line["sequenceNumber"].as_str().unwrap().to_owned())
        .collect()
}

/// Pushes records `1..=payloads.len()` with these payloads, a second apart.
fn push(h: &Harness, payloads: &[&str]) {
    for (i, payload) in payloads.iter().enumerate() {
        let n = i as u64 + 1;
        h.shard
            .push(&seq(n), PAST + 1_000 * n as i64, payload.as_bytes());
    }
}

impl Harness {
    /// The shard's records, as the reader hands them on.
    fn shard_records(&self) -> Vec<crate::read::record::ShardRecord> {
        self.shard
            .records()
            .into_iter()
            .map(|record| crate::read::record::ShardRecord::from_kinesis(SHARD, record).unwrap())
            .collect()
    }

    /// Takes the lease again, as it is in the table now.
    async fn lease_again(&self) -> Arc<shard_lease::HeldLease> {
        let row = self.row().await;
        let taken = self.lease_table.take_lease(&row, "worker-1").await.unwrap();
        Arc::new(shard_lease::HeldLease::new(
            self.lease_table.clone(),
            taken,
            tokio::time::Instant::now(),
        ))
    }

    fn checkpointed(&self, n: u64) -> bool {
        self.row_checkpoint_is(n)
    }
}

fn decisions_in(h: &Harness, key: &str) -> Vec<decisions::RecordedDecision> {
    let body = object(h, key).expect("decisions object");
    crate::output::read_back::decisions::parse(
        SHARD,
        &decompress(CompressionCodec::Zstd, &body).unwrap(),
    )
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn duplicates_go_to_their_prefix_after_the_decisions_object() {
    let h = with_events();
    push(&h, &["a", "b", "a", "c", "b", "a"]);
    let (main, duplicates, decisions) = keys(&h, 1, 6);
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, "the main object", |h| object(h, &main).is_some())
        .await
        .unwrap();

    assert_eq!(
        sequence_numbers(&object(&h, &main).unwrap()),
        [1, 2, 4].map(seq)
    );
    let dups = lines(&object(&h, &duplicates).unwrap());
    let of: Vec<(String, String)> = dups
        .iter()
        .map(|d| {
            (
                d["sequenceNumber"].as_str().unwrap().to_owned(),
                d["duplicateOf"]["sequenceNumber"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        of,
        [(seq(3), seq(1)), (seq(5), seq(2)), (seq(6), seq(1))],
        "each duplicate names the accepted copy"
    );
    assert!(dups.iter().all(|d| d["duplicateOf"]["shardId"] == SHARD));
    let recorded = decisions_in(&h, &decisions);
    assert_eq!(
        recorded
            .iter()
            .map(|r| r.decision.decision.outcome())
            .collect::<Vec<_>>(),
        [
            Outcome::Unique,
            Outcome::Unique,
            Outcome::Duplicate,
            Outcome::Unique,
            Outcome::Duplicate,
            Outcome::Duplicate
        ]
    );
    let attempts = h.bucket.put_attempts.lock().unwrap().clone();
    let position = |key: &str| attempts.iter().position(|k| k == key).unwrap();
    assert!(position(&decisions) < position(&duplicates), "{attempts:?}");
    assert!(position(&duplicates) < position(&main), "{attempts:?}");
    let metrics = h.ctx.metrics.encode();
    assert!(
        metrics.contains(r#"shardsink_events_total{outcome="unique"} 3"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"shardsink_events_total{outcome="duplicate"} 3"#),
        "{metrics}"
    );
}

/// The pending batch of records `1..=last`, recorded under its main key.
fn pending(h: &Harness, last: u64) -> PendingBatch {
    PendingBatch {
        key: keys(h, 1, last).0,
        first: SequenceNumber::parse(&seq(1)).unwrap(),
        last: SequenceNumber::parse(&seq(last)).unwrap(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_replay_adopts_the_decisions_object_it_finds() {
    let h = with_events();
    push(&h, &["a", "b", "c"]);
    // A first attempt decided record 2 a duplicate of record 1 (with other
    // settings, say), wrote its decisions object, and crashed.
    let (main, duplicates, decisions) = keys(&h, 1, 3);
    let mut body = Vec::new();
    let first = {
        let records = h.shard_records();
        let views: Vec<_> = records.iter().flat_map(|r| r.views(SHARD)).collect();
        let of = crate::events::rule::CopyRef {
            shard_id: Arc::from(SHARD),
            sequence_number: SequenceNumber::parse(&seq(1)).unwrap(),
            sub_sequence_number: None,
        };
        for (n, user) in views.iter().enumerate() {
            let decision = if n == 1 {
                crate::events::rule::Decision::Duplicate { of: of.clone() }
            } else {
                crate::events::rule::Decision::Keep(Outcome::Unique)
            };
            let key = EventIdSource::Payload.key(user, true);
            decisions::encode_line(user, &decisions::UserDecision { key, decision }, &mut body);
        }
        body.clone()
    };
    h.bucket.objects.lock().unwrap().insert(
        decisions.clone(),
        Bytes::from(Compression::Zstd(3).compress(&first).unwrap()),
    );
    let lease = h.lease(Checkpoint::TrimHorizon, Some(pending(&h, 3))).await;
    h.run_until(lease, "the main object", |h| object(h, &main).is_some())
        .await
        .unwrap();
    assert_eq!(
        sequence_numbers(&object(&h, &main).unwrap()),
        [1, 3].map(seq)
    );
    assert_eq!(
        sequence_numbers(&object(&h, &duplicates).unwrap()),
        [seq(2)],
        "the recorded decision stands"
    );
    assert_eq!(
        decompress(CompressionCodec::Zstd, &object(&h, &decisions).unwrap()).unwrap(),
        first,
        "the decisions object is not rewritten"
    );
    // The accepted copies went into the store: a later copy of "c" is a
    // duplicate of record 3.
    h.shard.push(&seq(4), PAST + 4_000, b"c");
    let (main_4, duplicates_4, _) = keys(&h, 4, 4);
    let lease = h.lease_again().await;
    h.run_until(lease, "the main object of record 4", |h| {
        object(h, &main_4).is_some()
    })
    .await
    .unwrap();
    let dup = lines(&object(&h, &duplicates_4).unwrap());
    assert_eq!(dup[0]["duplicateOf"]["sequenceNumber"], seq(3));
}

#[tokio::test(start_paused = true)]
async fn a_replay_without_its_decisions_object_decides_as_the_first_attempt() {
    let h = with_events();
    push(&h, &["a", "a", "b"]);
    let (main, duplicates, decisions) = keys(&h, 1, 3);
    // A first attempt decided the batch (its accepted copies are in the
    // store) and crashed before any PUT.
    let lease = h.lease(Checkpoint::TrimHorizon, Some(pending(&h, 3))).await;
    {
        let runtime = h.ctx.events.clone().unwrap();
        let mut events = crate::events::decider::ShardEvents::new(
            runtime,
            crate::events::store::Lineage::root(SHARD),
            crate::events::decider::RebuildSource {
                store: h.ctx.store.clone(),
                output: h.ctx.output.clone(),
                metrics: h.ctx.metrics.clone(),
                budget: h.ctx.budget.clone(),
                table: h.ctx.table.is_some(),
            },
        );
        events
            .decide(
                &h.shard_records(),
                None,
                &tokio_util::sync::CancellationToken::new(),
            )
            .await
            .unwrap();
    }
    h.run_until(lease, "the main object", |h| object(h, &main).is_some())
        .await
        .unwrap();
    assert_eq!(
        sequence_numbers(&object(&h, &main).unwrap()),
        [1, 3].map(seq),
        "record 1 is not a duplicate of its own earlier decision"
    );
    assert_eq!(
        sequence_numbers(&object(&h, &duplicates).unwrap()),
        [seq(2)]
    );
    assert_eq!(decisions_in(&h, &decisions).len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_batch_written_before_decisions_were_on_is_replayed_without_them() {
    let h = with_events();
    push(&h, &["a", "a"]);
    let (main, duplicates, decisions) = keys(&h, 1, 2);
    // Written without event decisions (both records in the main object),
    // then a crash before the checkpoint.
    let mut lines = Vec::new();
    let mut encoder = crate::output::format::envelope::LineEncoder::new(SHARD);
    for record in h.shard_records() {
        for user in record.views(SHARD) {
            encoder.encode_line(&user, &mut lines);
        }
    }
    h.bucket
        .objects
        .lock()
        .unwrap()
        .insert(main.clone(), Bytes::from(lines));
    let lease = h.lease(Checkpoint::TrimHorizon, Some(pending(&h, 2))).await;
    h.run_until(lease, "the checkpoint at record 2", |h| h.checkpointed(2))
        .await
        .unwrap();
    assert_eq!(sequence_numbers(&object(&h, &main).unwrap()).len(), 2);
    assert_eq!(object(&h, &duplicates), None, "no record in two places");
    assert_eq!(object(&h, &decisions), None);
}

/// `h` on a host whose local event store, on `disk`, is empty: the same
/// event settings, shard, bucket and lease table.
fn on_a_new_host(h: Harness, disk: &std::path::Path) -> Harness {
    let store = event_store::LocalStore::open(disk, Default::default()).unwrap();
    let runtime = EventRuntime::new(
        h.ctx.events.as_ref().unwrap().settings.clone(),
        EventStore::Local(store),
    );
    Harness {
        ctx: Arc::new(ShardContext {
            events: Some(Arc::new(runtime)),
            ..(*h.ctx).clone()
        }),
        ..h
    }
}

#[tokio::test(start_paused = true)]
async fn a_lost_local_store_is_rebuilt_from_the_archive() {
    let first_disk = tempfile::tempdir().unwrap();
    let h = with_local_store(first_disk.path());
    push(&h, &["a", "b", "c"]);
    let (main, _, _) = keys(&h, 1, 3);
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, "the checkpoint at record 3", |h| h.checkpointed(3))
        .await
        .unwrap();
    assert_eq!(sequence_numbers(&object(&h, &main).unwrap()).len(), 3);

    // The disk is lost: a new host takes the shard with an empty store.
    let second_disk = tempfile::tempdir().unwrap();
    let h = on_a_new_host(h, second_disk.path());
    // Record 4 arrived in the same millisecond as record 3 (one PutRecords
    // call), record 5 a second after record 1.
    h.shard.push(&seq(4), PAST + 3_000, b"c");
    h.shard.push(&seq(5), PAST + 4_000, b"a");
    h.shard.push(&seq(6), PAST + 5_000, b"d");
    let (main, duplicates, _) = keys(&h, 4, 6);
    let lease = h.lease_again().await;
    h.run_until(lease, "the main object", |h| object(h, &main).is_some())
        .await
        .unwrap();
    assert_eq!(sequence_numbers(&object(&h, &main).unwrap()), [seq(6)]);
    let dups = lines(&object(&h, &duplicates).unwrap());
    let of: Vec<&str> = dups
        .iter()
        .map(|d| d["duplicateOf"]["sequenceNumber"].as_str().unwrap())
        .collect();
    assert_eq!(
        of,
        [seq(3), seq(1)],
        "the copies accepted before the disk was lost are known again, also one of the same millisecond"
    );
}

#[tokio::test(start_paused = true)]
async fn a_pending_batch_behind_a_lost_checkpoint_is_decided_against_the_rebuilt_window() {
    let first_disk = tempfile::tempdir().unwrap();
    let h = with_local_store(first_disk.path());
    push(&h, &["a", "b", "c"]);
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, "the checkpoint at record 3", |h| h.checkpointed(3))
        .await
        .unwrap();

    // The lease table was lost; the next owner found records 1 to 3 in S3
    // (not checkpointed yet: the row still says TRIM_HORIZON), decided
    // record 4 — a copy of record 1 — recorded its batch and crashed
    // before any PUT. The lease then moved to a host with an empty store.
    h.shard.push(&seq(4), PAST + 4_000, b"a");
    let (main, duplicates, _) = keys(&h, 4, 4);
    h.table.items.lock().unwrap().clear();
    let pending = PendingBatch {
        key: main.clone(),
        first: SequenceNumber::parse(&seq(4)).unwrap(),
        last: SequenceNumber::parse(&seq(4)).unwrap(),
    };
    let second_disk = tempfile::tempdir().unwrap();
    let h = on_a_new_host(h, second_disk.path());
    let lease = h.lease(Checkpoint::TrimHorizon, Some(pending)).await;
    h.run_until(lease, "the checkpoint at record 4", |h| h.checkpointed(4))
        .await
        .unwrap();
    assert_eq!(
        sequence_numbers(&object(&h, &main).expect("the main object")),
        Vec::<String>::new(),
        "record 4 is not kept"
    );
    let dups = lines(&object(&h, &duplicates).expect("duplicates object"));
    assert_eq!(
        dups[0]["duplicateOf"]["sequenceNumber"],
        seq(1),
        "the records before the pending batch are in S3: the store is rebuilt before it is decided"
    );
}

/// Records 1 to 3 ("a", "b", "a") and the objects of a first attempt at
/// their batch that decided record 2 a duplicate of record 1 (with other
/// settings), wrote the decisions and duplicates objects, and crashed
/// before the main object; then the lease table was lost. The keys of the
/// batch's main and duplicates objects, and the duplicates object's lines.
fn uncommitted_batch(h: &Harness) -> (String, String, Vec<u8>) {
    push(h, &["a", "b", "a"]);
    let (main, duplicates, decisions) = keys(h, 1, 3);
    let records = h.shard_records();
    let of = crate::events::rule::CopyRef {
        shard_id: Arc::from(SHARD),
        sequence_number: SequenceNumber::parse(&seq(1)).unwrap(),
        sub_sequence_number: None,
    };
    let (mut lines, mut dup_lines) = (Vec::new(), Vec::new());
    let mut encoder = crate::output::format::envelope::LineEncoder::new(SHARD);
    for (n, user) in records.iter().flat_map(|r| r.views(SHARD)).enumerate() {
        let decision = if n == 1 {
            encoder.encode_duplicate(&user, &of, &mut dup_lines);
            crate::events::rule::Decision::Duplicate { of: of.clone() }
        } else {
            crate::events::rule::Decision::Keep(Outcome::Unique)
        };
        let key = EventIdSource::Payload.key(&user, true);
        decisions::encode_line(
            &user,
            &decisions::UserDecision { key, decision },
            &mut lines,
        );
    }
    let extension = LINES.extension();
    let mut objects = h.bucket.objects.lock().unwrap();
    objects.insert(
        decisions.clone(),
        Bytes::from(Compression::Zstd(3).compress(&lines).unwrap()),
    );
    objects.insert(duplicates.clone(), Bytes::from(dup_lines.clone()));
    h.bucket.metadata.lock().unwrap().insert(
        decisions,
        [
            ("shardsink-main-format".to_owned(), "envelope".to_owned()),
            ("shardsink-main-extension".to_owned(), extension.to_owned()),
        ]
        .into(),
    );
    (main, duplicates, dup_lines)
}

#[tokio::test(start_paused = true)]
async fn a_batch_whose_decisions_object_lost_its_lease_row_is_rebuilt_as_decided() {
    let h = with_events();
    let (main, duplicates, dup_lines) = uncommitted_batch(&h);
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(lease, "the main object", |h| object(h, &main).is_some())
        .await
        .unwrap();
    assert_eq!(
        sequence_numbers(&object(&h, &main).unwrap()),
        [1, 3].map(seq),
        "the batch is rebuilt as its decisions object says"
    );
    assert_eq!(object(&h, &duplicates).unwrap(), Bytes::from(dup_lines));
    let objects = h.bucket.objects.lock().unwrap().len();
    assert_eq!(objects, 3, "no other object");
}

#[tokio::test(start_paused = true)]
async fn an_uncommitted_batch_waits_for_its_turn_to_replay() {
    let h = with_events();
    // One replay at a time (limit / max bytes = 1), and another shard's
    // replay is under way.
    let h = Harness {
        ctx: Arc::new(ShardContext {
            budget: MemoryBudget::new(1 << 20, 1 << 20),
            ..(*h.ctx).clone()
        }),
        ..h
    };
    let (main, _, _) = uncommitted_batch(&h);
    let other = h.ctx.budget.replay_permit().await;
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    let token = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(ShardTask::new(h.ctx.clone(), lease).run(token.clone()));
    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    assert!(h.shard.reads.load(std::sync::atomic::Ordering::SeqCst) > 0);
    assert_eq!(object(&h, &main), None, "not rebuilt before its turn");
    drop(other);
    while object(&h, &main).is_none() && !task.is_finished() {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    token.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(
        sequence_numbers(&object(&h, &main).unwrap()),
        [1, 3].map(seq)
    );
    assert_eq!(h.ctx.budget.used(), 0, "its turn and bytes given back");
}

#[tokio::test(start_paused = true)]
async fn the_decisions_a_replay_adopts_are_counted_until_it_is_written() {
    let h = with_events();
    push(&h, &["a", "b", "c"]);
    let (_, _, decisions) = keys(&h, 1, 3);
    let mut lines = Vec::new();
    for record in h.shard_records() {
        for user in record.views(SHARD) {
            let key = EventIdSource::Payload.key(&user, true);
            let decision = crate::events::rule::Decision::Keep(Outcome::Unique);
            decisions::encode_line(
                &user,
                &decisions::UserDecision { key, decision },
                &mut lines,
            );
        }
    }
    h.bucket.objects.lock().unwrap().insert(
        decisions,
        Bytes::from(Compression::Zstd(3).compress(&lines).unwrap()),
    );
    let lease = h.lease(Checkpoint::TrimHorizon, Some(pending(&h, 3))).await;
    let writer = crate::commit::writer::BatchWriter::new(
        h.ctx.store.clone(),
        h.ctx.output.clone(),
        lease,
        h.ctx.metrics.clone(),
        std::time::Duration::from_secs(10),
    );
    let budget = &h.ctx.budget;
    let plan = writer
        .replay_plan(&pending(&h, 3), true, budget)
        .await
        .unwrap();
    assert_eq!(plan.recorded.len(), 3);
    assert_eq!(budget.used(), decisions::held_bytes(&plan.recorded));
    assert!(budget.used() > 3 * 56, "{}", budget.used());
    drop(plan);
    assert_eq!(budget.used(), 0);
}

#[tokio::test(start_paused = true)]
async fn what_deciding_a_response_holds_counts_against_the_memory_budget() {
    let h = with_events();
    // Arrival in an hour: the minute is not over while the test runs.
    let future = chrono::Utc::now().timestamp_millis() + 3_600_000;
    for i in 1..=100 {
        h.shard.push(&seq(i), future, format!("{i}").as_bytes());
    }
    // The records and their batch fit; with what deciding them holds, the
    // budget is exceeded, so the batch is written early, a record at a time.
    let deciding = crate::events::decider::ShardEvents::deciding_bytes(&h.shard_records());
    let h = Harness {
        ctx: Arc::new(ShardContext {
            budget: MemoryBudget::new(deciding - 1, deciding - 1),
            ..(*h.ctx).clone()
        }),
        ..h
    };
    let lease = h.lease(Checkpoint::TrimHorizon, None).await;
    h.run_until(
        lease,
        "a second read, after the records were batched",
        |h| h.shard.reads.load(std::sync::atomic::Ordering::SeqCst) >= 2,
    )
    .await
    .unwrap();
    let main_objects = h
        .bucket
        .objects
        .lock()
        .unwrap()
        .keys()
        .filter(|key| key.starts_with("p/") && !key.starts_with("p/_events/"))
        .count();
    assert!(main_objects > 1, "{main_objects} main objects");
    assert_eq!(h.written().len(), 100);
}
