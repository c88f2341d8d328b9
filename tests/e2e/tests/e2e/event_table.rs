//! The DynamoDB store against the local DynamoDB server:
//! - two workers decide 5,000 user records (or more, see [`thousands`]) of
//!   two shards concurrently — 4,500 events, 10% of the records duplicates
//!   (400 producer retries later in the same shard, 100 copies on the other
//!   shard) — then rerun some of their runs. Exactly one copy of each event
//!   is accepted, every other copy is a duplicate of it, reruns decide as
//!   before and write nothing, and the table holds each event's accepted
//!   copy once. Prints events per second (no timing is asserted: the local
//!   server's speed is not the test's);
//! - the capacity units the server reports per unique event (36-byte ids,
//!   1 KiB payloads): at most one write and one read unit, the same for an
//!   id with 10,000 earlier copies of other payloads as for a new id;
//! - the daemon (`--event-id partition-key --event-dedup-store dynamodb`)
//!   archives 10,000 copies of one partition key with distinct payloads,
//!   then 10,000 with one payload, without stalling: each decided as the
//!   rule says, every item of the DynamoDB event table within one write unit.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use shardsink::bench::{
    Candidate, CopyRef, Decision, DynamoDbStore, EventIdSource, EventKey, Lineage, Metrics,
    Outcome, Rule, SequenceNumber, UserRecordView,
};
use shardsink_e2e::archive::{CopyRef as ArchivedCopy, Outcome as ArchivedOutcome};
use shardsink_e2e::check::RecordId;
use shardsink_e2e::check::events::{EventRules, Scope, each_event_once};
use shardsink_e2e::fixtures::delete_lease_table;
use shardsink_e2e::producer::RecordSpec;
use shardsink_e2e::{
    Finish, Scenario, Versioning, env, require_env, scaled, unique_name, wait_for_archive,
};

const SHARD_A: &str = "shardId-000000000000";
const SHARD_B: &str = "shardId-000000000001";
/// Records per `decide` call, as one GetRecords response might bring.
const RUN: usize = 500;
/// User records decided, in thousands: 5 by default (what CI runs), more
/// with `SHARDSINK_E2E_EVENT_TABLE_THOUSANDS` (50 for the figure in
/// docs/OPERATIONS.md). Of each thousand: 800 events on shard A, 100 on
/// shard B, 80 producer retries in the same shard, 20 copies on the other
/// shard.
fn thousands() -> usize {
    std::env::var("SHARDSINK_E2E_EVENT_TABLE_THOUSANDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5)
}

/// How many of each kind of record a run decides.
struct Sizes {
    events_a: usize,
    events_b: usize,
    retries_same_shard: usize,
    copies_other_shard: usize,
}

fn sizes() -> Sizes {
    let k = thousands();
    Sizes {
        events_a: 800 * k,
        events_b: 100 * k,
        retries_same_shard: 80 * k,
        copies_other_shard: 20 * k,
    }
}
const RULE: Rule = Rule {
    window_millis: 3_600_000,
    match_fingerprint: true,
};

/// One user record: which event it is a copy of, and its place.
#[derive(Debug, Clone)]
struct Record {
    event: usize,
    candidate: Candidate,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_decide_every_copy_exactly() {
    let env = require_env!();
    let sizes = sizes();
    let seed = env::seed("DynamoDB event table", None);
    let mut rng = StdRng::seed_from_u64(seed);
    let table = unique_name("events");
    let metrics = Arc::new(Metrics::new());
    let worker_a = DynamoDbStore::new(env.dynamodb.clone(), &table, metrics.clone(), 100_000);
    let worker_b = DynamoDbStore::new(env.dynamodb.clone(), &table, metrics.clone(), 100_000);
    let (a, b) = tokio::join!(worker_a.ensure_table(), worker_b.ensure_table());
    a.unwrap();
    b.unwrap();
    worker_a.ensure_table().await.unwrap();

    let events: Vec<EventKey> = (0..sizes.events_a + sizes.events_b)
        .map(|_| EventKey {
            id: rng.random(),
            fingerprint: rng.random(),
        })
        .collect();
    let (shard_a, shard_b) = records(&events, &mut rng);
    assert_eq!(shard_a.len() + shard_b.len(), 1_000 * thousands());

    let started = Instant::now();
    let (decided_a, decided_b) = tokio::join!(
        decide_shard(&worker_a, SHARD_A, &shard_a),
        decide_shard(&worker_b, SHARD_B, &shard_b),
    );
    let elapsed = started.elapsed();
    let ((decisions_a, busy_a), (decisions_b, busy_b)) = (decided_a, decided_b);
    let puts = metrics.event_table_requests("PutItem");

    // Exactly one accepted copy per event; every other copy its duplicate.
    let mut by_event: HashMap<usize, Vec<(&CopyRef, &Decision)>> = HashMap::new();
    for (record, decision) in shard_a
        .iter()
        .zip(&decisions_a)
        .chain(shard_b.iter().zip(&decisions_b))
    {
        by_event
            .entry(record.event)
            .or_default()
            .push((&record.candidate.copy, decision));
    }
    assert_eq!(by_event.len(), events.len());
    let mut accepted: HashMap<usize, CopyRef> = HashMap::new();
    let mut duplicates = 0;
    for (event, copies) in &by_event {
        let kept: Vec<&CopyRef> = copies
            .iter()
            .filter(|(_, decision)| **decision == Decision::Keep(Outcome::Unique))
            .map(|(copy, _)| *copy)
            .collect();
        assert_eq!(kept.len(), 1, "event {event}: {copies:?}");
        for (copy, decision) in copies {
            if *copy != kept[0] {
                duplicates += 1;
                assert_eq!(
                    **decision,
                    Decision::Duplicate {
                        of: kept[0].clone()
                    },
                    "event {event}"
                );
            }
        }
        accepted.insert(*event, kept[0].clone());
    }
    assert_eq!(
        duplicates,
        sizes.retries_same_shard + sizes.copies_other_shard
    );

    // Reruns (a crash before the batches were written) decide as before
    // and write nothing, with and without a cache.
    let cold = DynamoDbStore::new(env.dynamodb.clone(), &table, metrics.clone(), 0);
    for (worker, shard, records, decisions) in [
        (&worker_a, SHARD_A, &shard_a[..], &decisions_a[..]),
        (&cold, SHARD_A, &shard_a[..], &decisions_a[..]),
        (&cold, SHARD_B, &shard_b[..], &decisions_b[..]),
    ] {
        let take = records.len().min(10 * RUN);
        let (again, _) = decide_shard(worker, shard, &records[..take]).await;
        assert_eq!(again, decisions[..take], "rerun of {shard}");
    }
    assert_eq!(metrics.event_table_requests("PutItem"), puts);

    // The table holds each event's accepted copy, once.
    let items = scan(&env.dynamodb, &table).await;
    assert_eq!(items.len(), events.len());
    let id_of: HashMap<String, usize> = events
        .iter()
        .enumerate()
        .map(|(n, key)| (event_id(key), n))
        .collect();
    for item in &items {
        let event = id_of[item["eventId"].as_s().unwrap()];
        let copies = item["copies"].as_l().unwrap();
        assert_eq!(copies.len(), 1, "event {event}");
        let copy = copies[0].as_m().unwrap();
        let expected = &accepted[&event];
        assert_eq!(copy["s"].as_s().unwrap(), &*expected.shard_id);
        assert_eq!(copy["n"].as_s().unwrap(), expected.sequence_number.as_str());
    }

    let total = shard_a.len() + shard_b.len();
    println!(
        "DynamoDB event table: {total} records ({} duplicates) by 2 workers in {:.2} s: {:.0} events/s \
         together; worker A {:.0} events/s ({} records), worker B {:.0} events/s ({} records)",
        duplicates,
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        shard_a.len() as f64 / busy_a.as_secs_f64(),
        shard_a.len(),
        shard_b.len() as f64 / busy_b.as_secs_f64(),
        shard_b.len(),
    );
    // GetItem: reads again after a lost race.
    for operation in ["BatchGetItem", "PutItem", "GetItem"] {
        println!(
            "DynamoDB event table: {operation} requests: {}",
            metrics.event_table_requests(operation)
        );
    }
    for line in metrics.encode().lines() {
        if line.starts_with("shardsink_retries_total{") {
            println!("DynamoDB event table: {line}");
        }
    }
    delete_lease_table(&env, &table).await.unwrap();
}

/// The two shards' records in order. Each event's first copy is on its
/// shard at its place; a retry comes up to 2,000 records later on the same
/// shard; a copy on the other shard comes at about the same place in that
/// shard's share of the stream. Arrival times grow 10 ms a record from ten
/// minutes ago: all copies are within the window of each other.
fn records(events: &[EventKey], rng: &mut StdRng) -> (Vec<Record>, Vec<Record>) {
    let sizes = sizes();
    // (shard is A, place, event), sorted by place within each shard.
    let mut placed: Vec<(bool, f64, usize)> = Vec::new();
    for event in 0..events.len() {
        let on_a = event < sizes.events_a;
        let place = if on_a {
            event as f64
        } else {
            (event - sizes.events_a) as f64 * (sizes.events_a as f64 / sizes.events_b as f64)
        };
        placed.push((on_a, place, event));
    }
    for _ in 0..sizes.retries_same_shard {
        let (on_a, place, event) = placed[rng.random_range(0..events.len())];
        placed.push((on_a, place + rng.random_range(0.5..2_000.0), event));
    }
    for _ in 0..sizes.copies_other_shard {
        let (on_a, place, event) = placed[rng.random_range(0..events.len())];
        placed.push((!on_a, place + rng.random_range(-50.0..50.0), event));
    }
    placed.sort_by(|x, y| x.1.total_cmp(&y.1));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let shard = |on_a: bool, shard_id: &str| -> Vec<Record> {
        let shard_id: Arc<str> = Arc::from(shard_id);
        placed
            .iter()
            .filter(|(a, _, _)| *a == on_a)
            .enumerate()
            .map(|(n, &(_, _, event))| Record {
                event,
                candidate: Candidate {
                    key: events[event],
                    copy: CopyRef {
                        shard_id: shard_id.clone(),
                        sequence_number: SequenceNumber::parse(&format!("4959{n:052}")).unwrap(),
                        sub_sequence_number: None,
                    },
                    arrival_millis: now - 600_000 + n as i64 * 10,
                },
            })
            .collect()
    };
    (shard(true, SHARD_A), shard(false, SHARD_B))
}

/// Decides a shard's records in runs of [`RUN`]: the decisions, and the
/// time spent deciding.
async fn decide_shard(
    worker: &DynamoDbStore,
    shard_id: &str,
    records: &[Record],
) -> (Vec<Decision>, Duration) {
    let lineage = Lineage::root(shard_id);
    let started = Instant::now();
    let mut decisions = Vec::with_capacity(records.len());
    for run in records.chunks(RUN) {
        let candidates: Vec<Candidate> = run.iter().map(|r| r.candidate.clone()).collect();
        decisions.extend(worker.decide(&lineage, &RULE, &candidates).await.unwrap());
    }
    (decisions, started.elapsed())
}

/// Every item of the table (all Scan pages).
async fn scan(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Vec<HashMap<String, AttributeValue>> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        items.extend(page.items().iter().cloned());
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return items;
        }
    }
}

/// An item's `eventId`: the hashes of id and payload, 48 hex digits.
fn event_id(key: &EventKey) -> String {
    format!("{:032x}{:016x}", key.id, key.fingerprint)
}

/// Capacity units per unique event, as the server reported them.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Units {
    write: f64,
    read: f64,
}

/// The units the DynamoDB store's requests consumed so far.
fn units(metrics: &Metrics) -> Units {
    Units {
        write: metrics.event_table_capacity_units("PutItem"),
        read: metrics.event_table_capacity_units("BatchGetItem")
            + metrics.event_table_capacity_units("GetItem"),
    }
}

/// Per event, between `before` and `after`.
fn per_event(before: Units, after: Units, events: usize) -> Units {
    let events = events as f64;
    Units {
        write: (after.write - before.write) / events,
        read: (after.read - before.read) / events,
    }
}

/// A 1 KiB payload, distinct for each `n`.
fn kib_payload(n: usize) -> Vec<u8> {
    let mut data = format!("{{\"n\":{n},\"pad\":\"").into_bytes();
    data.resize(1_022, b'x');
    data.extend_from_slice(b"\"}");
    data
}

/// One user record of the capacity test: its id (a 36-byte partition
/// key), which 1 KiB payload it carries ([`kib_payload`]), and its place in
/// shard A (sequence number and arrival, 1 ms a place, from an hour ago).
struct Copy {
    id: String,
    payload: usize,
    place: usize,
}

/// Decides `copies` with `store`, in runs of [`RUN`], keyed as
/// `--event-id partition-key` keys them.
async fn decide_copies(store: &DynamoDbStore, copies: &[Copy]) -> Vec<Decision> {
    let source = EventIdSource::parse("partition-key").unwrap();
    let hour_ago = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 3_600_000;
    let shard_id: Arc<str> = Arc::from(SHARD_A);
    let candidates: Vec<Candidate> = copies
        .iter()
        .map(|copy| {
            assert_eq!(copy.id.len(), 36);
            let data = kib_payload(copy.payload);
            let sequence = format!("4959{:052}", copy.place);
            let arrival_millis = hour_ago + copy.place as i64;
            let view = UserRecordView {
                shard_id: SHARD_A,
                sequence_number: &sequence,
                sub_sequence_number: None,
                partition_key: &copy.id,
                arrival_millis,
                data: &data,
            };
            Candidate {
                key: source.key(&view, true).unwrap(),
                copy: CopyRef {
                    shard_id: shard_id.clone(),
                    sequence_number: SequenceNumber::parse(&sequence).unwrap(),
                    sub_sequence_number: None,
                },
                arrival_millis,
            }
        })
        .collect();
    let mut decisions = Vec::with_capacity(candidates.len());
    let lineage = Lineage::root(SHARD_A);
    for run in candidates.chunks(RUN) {
        decisions.extend(store.decide(&lineage, &CAPACITY_RULE, run).await.unwrap());
    }
    decisions
}

/// A window of a day: every copy of the capacity test is within it.
const CAPACITY_RULE: Rule = Rule {
    window_millis: 86_400_000,
    match_fingerprint: true,
};

/// The capacity units DynamoDB reports (`ReturnConsumedCapacity`) per
/// unique event stay within one write unit and one read unit, and are the
/// same for an id with 10,000 earlier copies (other payloads) as for new
/// ids; a duplicate decided from the table (no cache) costs no write.
/// Against DynamoDB Local these are DynamoDB's rules (1 KB a write unit,
/// 4 KB an eventually consistent half read unit; it reports nothing for a
/// key without an item, where DynamoDB charges half a unit); moto reports
/// fixed figures (1 a PutItem, 1 a key of a BatchGetItem). Prints the
/// figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_per_unique_event_is_constant() {
    const PRIOR: usize = 10_000;
    const MEASURED: usize = 1_000;
    let env = require_env!();
    let table = unique_name("events-cu");
    let metrics = Arc::new(Metrics::new());
    let store = DynamoDbStore::new(env.dynamodb.clone(), &table, metrics.clone(), 100_000);
    store.ensure_table().await.unwrap();
    let hot = "6f1c2a9e-0b7d-4c5e-9a13-2f4b8d7e1c30";
    let copies = |ids: &dyn Fn(usize) -> String, payloads: std::ops::Range<usize>, from: usize| {
        payloads
            .enumerate()
            .map(|(n, payload)| Copy {
                id: ids(payload),
                payload,
                place: from + n,
            })
            .collect::<Vec<Copy>>()
    };
    let hot_id = |_: usize| hot.to_owned();
    let fresh_id = |n: usize| format!("00000000-0000-4000-8000-{n:012}");
    let unique = vec![Decision::Keep(Outcome::Unique); MEASURED];

    let start = units(&metrics);
    decide_copies(&store, &copies(&hot_id, 0..PRIOR, 0)).await;
    let prior = per_event(start, units(&metrics), PRIOR);
    let start = units(&metrics);
    let fresh = copies(&fresh_id, PRIOR..PRIOR + MEASURED, PRIOR);
    assert_eq!(decide_copies(&store, &fresh).await, unique);
    let new_ids = per_event(start, units(&metrics), MEASURED);
    let start = units(&metrics);
    let more = copies(&hot_id, 2 * PRIOR..2 * PRIOR + MEASURED, PRIOR + MEASURED);
    assert_eq!(decide_copies(&store, &more).await, unique);
    let old_id = per_event(start, units(&metrics), MEASURED);
    // Copies of the hot id's first payloads again, decided by a worker
    // with no cache: duplicates, read from the table.
    let cold = DynamoDbStore::new(env.dynamodb.clone(), &table, metrics.clone(), 0);
    let start = units(&metrics);
    let again = copies(&hot_id, 0..MEASURED, PRIOR + 2 * MEASURED);
    let decided = decide_copies(&cold, &again).await;
    assert!(decided.iter().all(|d| d.outcome() == Outcome::Duplicate));
    let duplicates = per_event(start, units(&metrics), MEASURED);
    println!(
        "DynamoDB event table capacity units per event: unique, new ids {new_ids:?}; unique, an id \
         with {PRIOR} earlier copies {old_id:?}; its earlier copies {prior:?}; duplicates read \
         from the table {duplicates:?}"
    );
    for figure in [prior, new_ids, old_id] {
        assert!(figure.write > 0.0 && figure.write <= 1.0, "{figure:?}");
        assert!(figure.read <= 1.0, "{figure:?}");
    }
    assert_eq!(old_id, new_ids, "the id's history costs nothing");
    assert!(duplicates.write == 0.0 && duplicates.read > 0.0 && duplicates.read <= 1.0);
    delete_lease_table(&env, &table).await.unwrap();
}

/// The size DynamoDB counts for an item of strings, numbers, lists and maps
/// ("DynamoDB item sizes and formats", Amazon DynamoDB Developer Guide),
/// written here independently of the daemon's tests: names and string
/// bytes; a number 1 byte per two significant digits plus 1; a list or map
/// 3 bytes plus 1 per element.
fn item_bytes(item: &HashMap<String, AttributeValue>) -> usize {
    fn value(v: &AttributeValue) -> usize {
        match v {
            AttributeValue::S(s) => s.len(),
            AttributeValue::N(n) => {
                let digits = n.trim_start_matches('-').trim_start_matches('0');
                digits.trim_end_matches('0').len().max(1).div_ceil(2) + 1
            }
            AttributeValue::L(l) => 3 + l.iter().map(|e| 1 + value(e)).sum::<usize>(),
            AttributeValue::M(m) => {
                3 + m.iter().map(|(k, e)| 1 + k.len() + value(e)).sum::<usize>()
            }
            other => panic!("the DynamoDB store writes no {other:?}"),
        }
    }
    item.iter().map(|(name, v)| name.len() + value(v)).sum()
}

/// The daemon with `--event-id partition-key --event-dedup-store dynamodb`
/// on one shard: 10,000 records under one partition key, each with its own
/// payload, then 10,000 under it with one payload (another). Waiting for
/// the archive is bounded: a stalled shard fails the test. Each record is
/// decided as the rule says — computed here from the records: a payload
/// not seen before is kept (`unique`), a repeated one (all within the
/// window) is a duplicate of its first copy — and every item of the DynamoDB event table is
/// within one write unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_partition_key_with_twenty_thousand_copies_does_not_stall() {
    const COPIES: usize = 10_000;
    let env = require_env!();
    let mut scenario = Scenario::create(&env, "ev-one-key", 1, Versioning::Off)
        .await
        .unwrap();
    scenario.settings = scenario
        .settings
        .clone()
        .set("event-id", "partition-key")
        .set("event-dedup-store", "dynamodb");
    let specs: Vec<RecordSpec> = (0..2 * COPIES)
        .map(|n| {
            let payload = if n < COPIES {
                format!("{{\"copy\":{n}}}")
            } else {
                "{\"copy\":\"same\"}".to_owned()
            };
            RecordSpec::new("one-key", payload)
        })
        .collect();
    let produced = scenario.put(&specs).await.unwrap();
    let mut reader = scenario.archive_reader();
    let mut daemon = scenario.spawn().unwrap();
    wait_for_archive(
        &mut reader,
        &produced,
        &mut daemon,
        scaled(Duration::from_secs(600)),
    )
    .await
    .unwrap();
    let how = Finish::stopping(&mut daemon, 120)
        .events()
        .ground_truth()
        .clean_shutdown();
    let archive = scenario.finish(&mut reader, &produced, how).await.archive;

    // The rule, by hand, in the shard's order.
    let mut first: HashMap<&[u8], RecordId> = HashMap::new();
    let mut expected: HashMap<RecordId, Option<RecordId>> = HashMap::new();
    for record in &produced {
        let id = RecordId::of_produced(record);
        let of = first.get(record.data.as_slice()).cloned();
        if of.is_none() {
            first.insert(&record.data, id.clone());
        }
        expected.insert(id, of);
    }
    let mut kept = 0;
    for record in archive.records() {
        kept += 1;
        let id = RecordId::of_archived(record);
        assert_eq!(
            expected[&id], None,
            "{id} is kept; the rule makes it a duplicate"
        );
    }
    let mut duplicates = 0;
    for record in archive.duplicates() {
        duplicates += 1;
        let id = RecordId::of_archived(record);
        let named = record
            .duplicate_of
            .as_ref()
            .map(|of: &ArchivedCopy| RecordId {
                shard_id: of.shard_id.clone(),
                sequence_number: of.sequence_number.clone(),
                sub_sequence_number: of.sub_sequence_number,
            });
        let wanted = expected[&id].clone();
        assert!(wanted.is_some(), "{id} is a duplicate; the rule keeps it");
        assert_eq!(named, wanted, "{id} names the wrong copy");
    }
    assert_eq!((kept, duplicates), (COPIES + 1, COPIES - 1));
    let report = each_event_once(
        &produced,
        &archive,
        &|record| Some(record.partition_key.clone()),
        EventRules {
            window: Duration::from_secs(3600),
            fingerprint: true,
            scope: Scope::Stream,
        },
    );
    report.assert_ok();
    // Under the DynamoDB store the same id with another payload is `unique`.
    assert_eq!(
        report.outcomes.get(&ArchivedOutcome::Unique),
        Some(&(COPIES + 1))
    );
    assert_eq!(
        report.outcomes.get(&ArchivedOutcome::Duplicate),
        Some(&(COPIES - 1))
    );

    let items = scan(&env.dynamodb, &scenario.settings.event_table()).await;
    assert_eq!(items.len(), COPIES + 1, "one item per payload");
    for item in &items {
        let copies = item["copies"].as_l().unwrap().len();
        let bytes = item_bytes(item);
        assert!(
            copies == 1 && bytes <= 1_024,
            "{copies} copies, {bytes} bytes: {item:?}"
        );
    }
}
