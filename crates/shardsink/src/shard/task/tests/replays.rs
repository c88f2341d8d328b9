//! E3 across interruptions: a shard whose records arrive minutes to days
//! apart is archived through crashes at any PUT, lease moves between two
//! hosts (each with its own local event store) and lost lease tables, and
//! ends up split into kept and duplicate records exactly as the rule splits
//! the whole stream read at once, with every record in one place.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use shard_lease::{Checkpoint, HeldLease};
use tokio_util::sync::CancellationToken;

use super::{Harness, PAST, SHARD, harness, seq};
use crate::events::EventSettings;
use crate::events::decider::{EventRuntime, EventStore};
use crate::events::id::EventIdSource;
use crate::events::rule::{AcceptedCopy, CopyRef, Decision, EventKey, Rule};
use crate::output::Output;
use crate::output::compression::Compression;
use crate::output::format::Format;
use crate::output::key::KeyLayout;
use crate::shard::context::ShardContext;
use crate::shard::task::ShardTask;
use event_store::{LocalOptions, LocalStore};

/// `--event-dedup-window`: an hour.
const WINDOW: i64 = 3_600_000;

/// One generated record: its event id, its payload and how long after the
/// previous record it arrived (ms).
#[derive(Debug, Clone, Copy)]
struct Generated {
    id: u8,
    payload: u8,
    gap: i64,
}

/// What happens to the shard's task after a crash point.
#[derive(Debug, Clone, Copy)]
enum Then {
    /// The same host takes the lease again.
    Restart,
    /// The other host takes the lease.
    Move,
    /// The lease table is lost: the next owner (this host) starts from
    /// `TRIM_HORIZON` with a lease created again.
    LoseTable,
}

/// A crash point — the task stops after this many more PUTs — and what
/// follows it.
#[derive(Debug, Clone, Copy)]
struct Interruption {
    puts: usize,
    then: Then,
}

fn stream() -> impl Strategy<Value = Vec<Generated>> {
    let gap = prop_oneof![
        Just(0i64),
        1i64..60_000,
        600_000i64..3_600_000,
        3_600_000i64..4 * WINDOW,
        86_400_000i64..3 * 86_400_000,
    ];
    prop::collection::vec(
        (0u8..3, 0u8..2, gap).prop_map(|(id, payload, gap)| Generated { id, payload, gap }),
        2..32,
    )
}

fn interruptions() -> impl Strategy<Value = Vec<Interruption>> {
    let then = prop_oneof![Just(Then::Restart), Just(Then::Move), Just(Then::LoseTable)];
    prop::collection::vec(
        (0usize..10, then).prop_map(|(puts, then)| Interruption { puts, then }),
        1..5,
    )
}

/// The records' (arrival, payload) in order, a payload being a JSON event.
fn records(stream: &[Generated]) -> Vec<(i64, String)> {
    let mut arrival = PAST;
    stream
        .iter()
        .map(|g| {
            arrival += g.gap;
            (
                arrival,
                format!(r#"{{"id":"e{}","v":{}}}"#, g.id, g.payload),
            )
        })
        .collect()
}

/// The rule applied to the whole stream in order, every accepted copy
/// remembered: for each record, `None` when kept, or the record it
/// duplicates (1-based, as [`seq`] numbers them).
fn model(stream: &[Generated], rule: &Rule) -> Vec<Option<u64>> {
    let mut accepted: Vec<(u8, AcceptedCopy)> = Vec::new();
    let mut arrival = PAST;
    stream
        .iter()
        .enumerate()
        .map(|(i, g)| {
            arrival += g.gap;
            let n = i as u64 + 1;
            let key = EventKey {
                id: u128::from(g.id),
                fingerprint: u64::from(g.payload),
            };
            let prior = accepted
                .iter()
                .filter(|(id, _)| *id == g.id)
                .map(|(_, c)| c);
            match rule.decide(&key, arrival, prior) {
                Decision::Duplicate { of } => Some(of.sequence_number.as_str().parse().unwrap()),
                decision => {
                    if decision.accepts() {
                        let copy = CopyRef {
                            shard_id: Arc::from(SHARD),
                            sequence_number: sequence_range::SequenceNumber::from(n),
                            sub_sequence_number: None,
                        };
                        let fingerprint = key.fingerprint;
                        accepted.push((
                            g.id,
                            AcceptedCopy {
                                fingerprint,
                                arrival_millis: arrival,
                                copy,
                            },
                        ));
                    }
                    None
                }
            }
        })
        .collect()
}

/// `h`'s context deciding events with `store`, reading `per_read` records
/// a GetRecords call.
fn context(h: &Harness, store: &LocalStore, rule: Rule, per_read: i32) -> Arc<ShardContext> {
    let settings = EventSettings {
        source: EventIdSource::parse("json-pointer:/id").unwrap(),
        fingerprint: rule.match_fingerprint,
        rule,
    };
    Arc::new(ShardContext {
        output: Output::new(
            KeyLayout::plain("p"),
            "p-errors",
            "p-duplicates",
            Format::Envelope,
        )
        .with_compression(Compression::None),
        events: Some(Arc::new(EventRuntime::new(
            settings,
            EventStore::Local(store.clone()),
        ))),
        max_records_per_read: per_read,
        ..(*h.ctx).clone()
    })
}

impl Harness {
    /// Takes the lease as its row is now.
    async fn take_again(&self) -> Arc<HeldLease> {
        let row = self.row().await;
        let taken = self.lease_table.take_lease(&row, "worker-1").await.unwrap();
        Arc::new(HeldLease::new(
            self.lease_table.clone(),
            taken,
            tokio::time::Instant::now(),
        ))
    }
}

/// Runs a task until S3 refuses a PUT past the crash point, then stops it
/// as a crash would (nothing written at shutdown); or, when the task gets
/// through every record first, shuts it down. Panics after ten minutes of
/// (paused) time: the task neither crashed nor finished.
async fn run_to_crash(h: &Harness, ctx: Arc<ShardContext>, lease: Arc<HeldLease>, last: u64) {
    let attempts = h.bucket.put_attempts.lock().unwrap().len();
    let puts = h.bucket.puts_left.lock().unwrap().unwrap_or(usize::MAX);
    let token = CancellationToken::new();
    let task = tokio::spawn(ShardTask::new(ctx, lease).run(token.clone()));
    for _ in 0..6_000 {
        let refused = h.bucket.put_attempts.lock().unwrap().len() > attempts.saturating_add(puts);
        if refused {
            task.abort();
            let _ = task.await;
            return;
        }
        if h.row_checkpoint_is(last) {
            token.cancel();
            task.await.unwrap().unwrap();
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the task neither reached its crash point nor archived every record");
}

/// Archives `stream` through `interruptions`, then to its end; returns, for
/// each record, `None` when it is in the main prefix or the record its
/// `duplicateOf` names.
async fn archive(
    stream: &[Generated],
    interruptions: &[Interruption],
    rule: Rule,
    per_read: i32,
    per_batch: usize,
) -> Vec<Option<u64>> {
    let h = harness(per_batch);
    let records = records(stream);
    for (i, (arrival, payload)) in records.iter().enumerate() {
        h.shard
            .push(&seq(i as u64 + 1), *arrival, payload.as_bytes());
    }
    let last = records.len() as u64;
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let options = LocalOptions {
        epoch_keys: 16,
        ..LocalOptions::default()
    };
    let hosts = dirs
        .each_ref()
        .map(|dir| LocalStore::open(dir.path(), options.clone()).unwrap());
    let mut host = 0;
    let mut lease = h.lease(Checkpoint::TrimHorizon, None).await;
    for interruption in interruptions {
        *h.bucket.puts_left.lock().unwrap() = Some(interruption.puts);
        let ctx = context(&h, &hosts[host], rule, per_read);
        run_to_crash(&h, ctx, lease, last).await;
        *h.bucket.puts_left.lock().unwrap() = None;
        lease = match interruption.then {
            Then::Restart => h.take_again().await,
            Then::Move => {
                host = 1 - host;
                h.take_again().await
            }
            Then::LoseTable => {
                h.table.items.lock().unwrap().clear();
                h.lease(Checkpoint::TrimHorizon, None).await
            }
        };
    }
    let ctx = context(&h, &hosts[host], rule, per_read);
    run_to_crash(&h, ctx, lease, last).await;

    let mut placed: Vec<Vec<Option<u64>>> = vec![Vec::new(); records.len()];
    let position = |n: &serde_json::Value| {
        let text = n.as_str().unwrap();
        (1..=last)
            .find(|i| seq(*i) == text)
            .expect("a record of the shard")
    };
    for (key, line) in h.bucket.lines() {
        let n = position(&line["sequenceNumber"]);
        let place = if key.starts_with("p/") {
            None
        } else {
            assert!(key.starts_with("p-duplicates/"), "{key}");
            Some(position(&line["duplicateOf"]["sequenceNumber"]))
        };
        placed[n as usize - 1].push(place);
    }
    placed
        .into_iter()
        .enumerate()
        .map(|(i, places)| {
            assert_eq!(places.len(), 1, "record {} in one place: {places:?}", i + 1);
            places[0]
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Decisions are a function of the stream: the split into kept and
    /// duplicate records (and which copy a duplicate repeats) is the rule's
    /// over the whole stream, whatever was decided before an interruption
    /// and not written.
    #[test]
    fn interrupted_runs_decide_as_one_uninterrupted_pass(
        stream in stream(),
        interruptions in interruptions(),
        match_fingerprint in any::<bool>(),
        per_read in 1i32..12,
        per_batch in 1usize..6,
    ) {
        let rule = Rule { window_millis: WINDOW, match_fingerprint };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let archived = runtime.block_on(archive(&stream, &interruptions, rule, per_read, per_batch));
        prop_assert_eq!(archived, model(&stream, &rule));
    }
}
