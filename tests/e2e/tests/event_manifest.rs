//! The DynamoDB event manifest against the local DynamoDB server: two
//! workers decide 5,000 user records (or more, see [`thousands`]) of two
//! shards concurrently — 4,500 events, 10% of the records duplicates (400
//! producer retries later in the same shard, 100 copies on the other
//! shard) — then rerun some of
//! their runs. Exactly one copy of each event is accepted, every other copy
//! is a duplicate of it, reruns decide as before and write nothing, and the
//! table holds each event's accepted copy once. Prints events per second
//! (no timing is asserted: the local server's speed is not the test's).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use shardsink::bench::{
    Candidate, CopyRef, Decision, EventKey, Lineage, Manifest, Metrics, Outcome, Rule,
    SequenceNumber,
};
use shardsink_e2e::fixtures::delete_lease_table;
use shardsink_e2e::{env, require_env, unique_name};

const SHARD_A: &str = "shardId-000000000000";
const SHARD_B: &str = "shardId-000000000001";
/// Records per `decide` call, as one GetRecords response might bring.
const RUN: usize = 500;
/// User records decided, in thousands: 5 by default (what CI runs), more
/// with `SHARDSINK_E2E_MANIFEST_THOUSANDS` (50 for the figure in
/// docs/OPERATIONS.md). Of each thousand: 800 events on shard A, 100 on
/// shard B, 80 producer retries in the same shard, 20 copies on the other
/// shard.
fn thousands() -> usize {
    std::env::var("SHARDSINK_E2E_MANIFEST_THOUSANDS")
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
    let seed = env::seed("event manifest", None);
    let mut rng = StdRng::seed_from_u64(seed);
    let table = unique_name("manifest");
    let metrics = Arc::new(Metrics::new());
    let worker_a = Manifest::new(env.dynamodb.clone(), &table, metrics.clone(), 100_000);
    let worker_b = Manifest::new(env.dynamodb.clone(), &table, metrics.clone(), 100_000);
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
    let puts = metrics.event_manifest_requests("PutItem");

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
    let cold = Manifest::new(env.dynamodb.clone(), &table, metrics.clone(), 0);
    for (worker, shard, records, decisions) in [
        (&worker_a, SHARD_A, &shard_a[..], &decisions_a[..]),
        (&cold, SHARD_A, &shard_a[..], &decisions_a[..]),
        (&cold, SHARD_B, &shard_b[..], &decisions_b[..]),
    ] {
        let take = records.len().min(10 * RUN);
        let (again, _) = decide_shard(worker, shard, &records[..take]).await;
        assert_eq!(again, decisions[..take], "rerun of {shard}");
    }
    assert_eq!(metrics.event_manifest_requests("PutItem"), puts);

    // The table holds each event's accepted copy, once.
    let items = scan(&env.dynamodb, &table).await;
    assert_eq!(items.len(), events.len());
    let id_of: HashMap<String, usize> = events
        .iter()
        .enumerate()
        .map(|(n, key)| (format!("{:032x}{:016x}", key.id, key.fingerprint), n))
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
        "event manifest: {total} records ({} duplicates) by 2 workers in {:.2} s: {:.0} events/s \
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
            "event manifest: {operation} requests: {}",
            metrics.event_manifest_requests(operation)
        );
    }
    for line in metrics.encode().lines() {
        if line.starts_with("shardsink_retries_total{") {
            println!("event manifest: {line}");
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
    worker: &Manifest,
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
