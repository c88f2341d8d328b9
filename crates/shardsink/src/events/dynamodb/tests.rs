//! The DynamoDB store against a DynamoDB table in memory (`shard_lease`'s
//! `FakeTable`, keyed by `eventId`, which evaluates the conditions the
//! DynamoDB store writes) and against scripted responses.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::batch_get_item::{BatchGetItemError, BatchGetItemOutput};
use aws_sdk_dynamodb::operation::create_table::{CreateTableError, CreateTableOutput};
use aws_sdk_dynamodb::operation::describe_table::{DescribeTableError, DescribeTableOutput};
use aws_sdk_dynamodb::operation::describe_time_to_live::DescribeTimeToLiveOutput;
use aws_sdk_dynamodb::operation::get_item::{GetItemError, GetItemOutput};
use aws_sdk_dynamodb::operation::put_item::{PutItemError, PutItemOutput};
use aws_sdk_dynamodb::operation::update_time_to_live::{
    UpdateTimeToLiveError, UpdateTimeToLiveOutput,
};
use aws_sdk_dynamodb::types::error::{ResourceInUseException, ResourceNotFoundException};
use aws_sdk_dynamodb::types::{
    AttributeValue, BillingMode, TableDescription, TableStatus, TimeToLiveDescription,
    TimeToLiveStatus,
};
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use aws_smithy_types::error::ErrorMetadata;
use proptest::prelude::*;
use sequence_range::SequenceNumber;
use shard_lease::test_util::{FakeTable, fake_client, item_size};

use super::item::{Item, ItemState, attr, event_id, parse_event_id};
use super::retention::MAX_COPIES;
use super::store::now_millis;
use super::{DynamoDbStore, DynamoDbStoreError};
use crate::aws::retry::{Classify, Failure};
use crate::events::memory::MemoryStore;
use crate::events::rule::{AcceptedCopy, CopyRef, Decision, EventKey, Outcome, Rule};
use crate::events::store::{Candidate, Lineage};
use crate::ops::metrics::{Metrics, RetryCause};

const W: i64 = 1_000;
const A: &str = "shardId-000000000000";
const B: &str = "shardId-000000000001";

fn rule(match_fingerprint: bool) -> Rule {
    Rule {
        window_millis: W,
        match_fingerprint,
    }
}

/// Arrivals near the wall clock, so that no rewrite drops a copy.
fn base() -> i64 {
    now_millis() - 60_000
}

struct Harness {
    fake: Arc<FakeTable>,
    metrics: Arc<Metrics>,
}

impl Harness {
    fn new() -> Self {
        Self {
            fake: Arc::new(FakeTable::keyed_by(attr::EVENT_ID)),
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// A worker: its own client and cache, the shared table and metrics.
    fn worker(&self, cache_entries: usize) -> DynamoDbStore {
        DynamoDbStore::new(
            fake_client(self.fake.clone()),
            "events",
            self.metrics.clone(),
            cache_entries,
        )
    }

    fn requests(&self, operation: &'static str) -> u64 {
        self.metrics.event_table_requests(operation)
    }

    /// The copies held for the event `(id, fingerprint)`.
    fn copies(&self, id: u128, fingerprint: u64) -> Vec<AcceptedCopy> {
        let key = EventKey { id, fingerprint };
        let items = self.fake.items.lock().unwrap();
        items
            .get(&event_id(&key))
            .map(|item| {
                let state = ItemState::from_item(item, &key, &[]).unwrap();
                state.accepted().cloned().collect()
            })
            .unwrap_or_default()
    }

    /// Every item: its key, its state and its size by DynamoDB's rules.
    fn items(&self) -> Vec<(EventKey, ItemState, usize)> {
        let items = self.fake.items.lock().unwrap();
        items
            .iter()
            .map(|(text, item)| {
                let key = parse_event_id(text).unwrap();
                let state = ItemState::from_item(item, &key, &[]).unwrap();
                (key, state, item_size(item))
            })
            .collect()
    }

    /// Asserts that no item holds more than [`MAX_COPIES`] copies nor is
    /// larger than one write unit (1 KB).
    fn assert_items_bounded(&self) {
        for (key, state, size) in self.items() {
            assert!(state.copies.len() <= MAX_COPIES, "{key:?}: {state:?}");
            assert!(size <= 1_024, "{key:?}: {size} bytes");
        }
    }
}

fn candidate(shard: &str, n: u64, id: u128, fingerprint: u64, arrival: i64) -> Candidate {
    Candidate {
        key: EventKey { id, fingerprint },
        copy: CopyRef {
            shard_id: Arc::from(shard),
            sequence_number: SequenceNumber::from(n),
            sub_sequence_number: None,
        },
        arrival_millis: arrival,
    }
}

fn duplicate_of(candidate: &Candidate) -> Decision {
    Decision::Duplicate {
        of: candidate.copy.clone(),
    }
}

#[tokio::test]
async fn a_rerun_decides_as_before_and_writes_nothing() {
    let h = Harness::new();
    let t = base();
    let run = vec![
        candidate(A, 1, 1, 5, t),
        candidate(A, 2, 2, 5, t),
        candidate(A, 3, 1, 5, t + 10),
        candidate(A, 4, 1, 6, t + 20),
        candidate(A, 5, 3, 5, t + 30),
    ];
    let lineage = Lineage::root(A);
    let first = h
        .worker(100)
        .decide(&lineage, &rule(true), &run)
        .await
        .unwrap();
    // The same id with another payload is another item: the DynamoDB store
    // never sees it beside the first, so it is unique (not id_reused).
    assert_eq!(
        first,
        vec![
            Decision::Keep(Outcome::Unique),
            Decision::Keep(Outcome::Unique),
            duplicate_of(&run[0]),
            Decision::Keep(Outcome::Unique),
            Decision::Keep(Outcome::Unique),
        ]
    );
    assert_eq!(h.requests("BatchGetItem"), 1, "one read for four items");
    assert_eq!(h.requests("PutItem"), 4, "one write per item");
    let held = (h.copies(1, 5), h.copies(1, 6));
    assert_eq!(held.0, vec![run[0].accepted()]);
    // A rerun after a crash, by this worker (cached), by another one (cold),
    // and one that stops halfway: its own copies are never its duplicates.
    for worker in [h.worker(100), h.worker(0)] {
        assert_eq!(
            worker.decide(&lineage, &rule(true), &run).await.unwrap(),
            first
        );
        assert_eq!(
            worker
                .decide(&lineage, &rule(true), &run[2..])
                .await
                .unwrap(),
            first[2..]
        );
    }
    assert_eq!(h.requests("PutItem"), 4, "nothing written again");
    assert_eq!((h.copies(1, 5), h.copies(1, 6)), held);
}

#[tokio::test]
async fn the_cache_decides_known_duplicates_without_a_request() {
    let h = Harness::new();
    let t = base();
    let worker = h.worker(100);
    let lineage = Lineage::root(A);
    let original = candidate(A, 1, 7, 5, t);
    worker
        .decide(&lineage, &rule(true), std::slice::from_ref(&original))
        .await
        .unwrap();
    let before = (h.requests("BatchGetItem"), h.requests("PutItem"));
    let retry = candidate(A, 2, 7, 5, t + 100);
    assert_eq!(
        worker
            .decide(&lineage, &rule(true), &[retry])
            .await
            .unwrap(),
        vec![duplicate_of(&original)]
    );
    assert_eq!((h.requests("BatchGetItem"), h.requests("PutItem")), before);
    // What would accept goes to the table: the cached version is the
    // condition, so no read is needed while it is current.
    let expired = candidate(A, 3, 7, 5, t + 2 * W);
    assert_eq!(
        worker
            .decide(&lineage, &rule(true), &[expired])
            .await
            .unwrap(),
        vec![Decision::Keep(Outcome::Expired)]
    );
    assert_eq!(h.requests("BatchGetItem"), before.0);
    assert_eq!(h.requests("PutItem"), before.1 + 1);
}

#[tokio::test]
async fn copies_on_other_shards_are_found() {
    let h = Harness::new();
    let t = base();
    let on_b = candidate(B, 900, 4, 5, t);
    h.worker(0)
        .decide(&Lineage::root(B), &rule(true), std::slice::from_ref(&on_b))
        .await
        .unwrap();
    // Its sequence number is larger, on another shard: it precedes anyway.
    let on_a = candidate(A, 1, 4, 5, t + 500);
    assert_eq!(
        h.worker(0)
            .decide(&Lineage::root(A), &rule(true), &[on_a])
            .await
            .unwrap(),
        vec![duplicate_of(&on_b)]
    );
}

#[tokio::test]
async fn a_lost_race_for_a_new_item_makes_a_duplicate_of_the_winner() {
    let h = Harness::new();
    let t = base();
    let winner = candidate(B, 1, 8, 5, t);
    h.worker(0)
        .decide(
            &Lineage::root(B),
            &rule(true),
            std::slice::from_ref(&winner),
        )
        .await
        .unwrap();
    // This worker's read came before the winner's write: it finds no item,
    // its `attribute_not_exists` write fails, it reads again and decides
    // again.
    h.fake.missed_reads.store(1, Ordering::SeqCst);
    let late = candidate(A, 1, 8, 5, t + 1);
    let puts = h.requests("PutItem");
    assert_eq!(
        h.worker(0)
            .decide(&Lineage::root(A), &rule(true), &[late])
            .await
            .unwrap(),
        vec![duplicate_of(&winner)]
    );
    assert_eq!(h.requests("PutItem"), puts + 1, "one failed write");
    assert_eq!(h.requests("GetItem"), 1, "one read again");
    assert_eq!(h.copies(8, 5), vec![winner.accepted()]);
}

#[tokio::test]
async fn a_lost_race_on_a_cached_version_reads_again() {
    let h = Harness::new();
    let t = base();
    let (mine, theirs) = (h.worker(100), h.worker(100));
    let first = candidate(A, 1, 9, 1, t);
    mine.decide(&Lineage::root(A), &rule(true), std::slice::from_ref(&first))
        .await
        .unwrap();
    // Another worker accepts the event again, past the window: version 2.
    let again = candidate(B, 1, 9, 1, t + W + 10);
    assert_eq!(
        theirs
            .decide(&Lineage::root(B), &rule(true), std::slice::from_ref(&again))
            .await
            .unwrap(),
        vec![Decision::Keep(Outcome::Expired)]
    );
    // Against its cached version 1 this would be accepted (expired); the
    // write on version 1 fails and the item read again makes it a
    // duplicate of the other worker's copy.
    let late = candidate(A, 2, 9, 1, t + W + 20);
    assert_eq!(
        mine.decide(&Lineage::root(A), &rule(true), &[late])
            .await
            .unwrap(),
        vec![duplicate_of(&again)]
    );
    assert_eq!(h.requests("GetItem"), 1);
    assert_eq!(h.copies(9, 1).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn throttling_is_retried_with_backoff_and_counted() {
    let h = Harness::new();
    let t = base();
    h.fake.failing_batch_gets.store(2, Ordering::SeqCst);
    h.fake.partial_batch_gets.store(1, Ordering::SeqCst);
    h.fake.failing_puts.store(3, Ordering::SeqCst);
    let run: Vec<Candidate> = (0..5)
        .map(|n| candidate(A, n, u128::from(n), 1, t))
        .collect();
    let decided = h
        .worker(0)
        .decide(&Lineage::root(A), &rule(true), &run)
        .await
        .unwrap();
    assert_eq!(decided, vec![Decision::Keep(Outcome::Unique); 5]);
    assert!(
        h.metrics
            .encode()
            .contains("shardsink_retries_total{cause=\"event_manifest_throttled\"} 6"),
        "{}",
        h.metrics.encode()
    );
    // 2 throttled, 1 partial, 1 for the unprocessed keys.
    assert_eq!(h.requests("BatchGetItem"), 4);
    assert_eq!(h.requests("PutItem"), 5 + 3);
    // Throttled without end: the call fails, as a transient failure the
    // caller retries whole.
    h.fake.failing_puts.store(usize::MAX, Ordering::SeqCst);
    let err = h
        .worker(0)
        .decide(&Lineage::root(A), &rule(true), &[candidate(A, 9, 99, 1, t)])
        .await
        .unwrap_err();
    assert_eq!(
        err.classify(),
        Failure::Transient(RetryCause::event_manifest_throttled)
    );
}

#[tokio::test]
async fn adopted_copies_are_recorded_once() {
    let h = Harness::new();
    let t = base();
    let worker = h.worker(0);
    let (x, y) = (candidate(B, 1, 3, 5, t), candidate(B, 2, 3, 6, t + 1));
    let copies = [(x.key, x.accepted()), (y.key, y.accepted())];
    worker.insert(&rule(true), &copies).await.unwrap();
    worker.insert(&rule(true), &copies).await.unwrap();
    assert_eq!(
        (h.copies(3, 5), h.copies(3, 6)),
        (vec![x.accepted()], vec![y.accepted()])
    );
    assert_eq!(h.requests("PutItem"), 2, "one write per item, none again");
    assert_eq!(
        worker
            .decide(
                &Lineage::root(A),
                &rule(true),
                &[candidate(A, 1, 3, 5, t + 2)]
            )
            .await
            .unwrap(),
        vec![duplicate_of(&x)]
    );
}

#[tokio::test]
async fn malformed_items_are_reported() {
    let h = Harness::new();
    let key = EventKey {
        id: 5,
        fingerprint: 1,
    };
    h.fake.items.lock().unwrap().insert(
        event_id(&key),
        std::collections::HashMap::from([(
            attr::EVENT_ID.to_owned(),
            AttributeValue::S(event_id(&key)),
        )]),
    );
    let err = h
        .worker(0)
        .decide(
            &Lineage::root(A),
            &rule(true),
            &[candidate(A, 1, 5, 1, base())],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, DynamoDbStoreError::Malformed { .. }),
        "{err:?}"
    );
    assert_eq!(
        err.classify(),
        Failure::Persistent(RetryCause::event_manifest_error)
    );
}

/// 10,000 copies of one id with distinct payloads within one window, then
/// 10,000 with one payload (another), in runs of 500: the first are all
/// kept, the others the first of them and duplicates of it. Every item
/// stays within one write unit, and each unique event costs at most one
/// write unit and one read unit, however many copies its id has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_copies_of_one_id_stay_small() {
    const COPIES: u64 = 10_000;
    // An hour: every copy (one a millisecond) is within the window.
    let rule = Rule {
        window_millis: 3_600_000,
        match_fingerprint: true,
    };
    let h = Harness::new();
    let t = base();
    let worker = h.worker(100_000);
    let lineage = Lineage::root(A);
    let id = 0x5eed;
    let records: Vec<Candidate> = (0..2 * COPIES)
        .map(|n| {
            let fingerprint = if n < COPIES { n + 1 } else { 0 };
            candidate(A, n, id, fingerprint, t + i64::try_from(n).unwrap())
        })
        .collect();
    let mut decided = Vec::new();
    for run in records.chunks(500) {
        decided.extend(worker.decide(&lineage, &rule, run).await.unwrap());
    }
    // The rule, by hand: a payload seen for the first time is kept; a
    // payload seen before within the window repeats its first copy.
    let first_of_last = &records[usize::try_from(COPIES).unwrap()];
    let expected: Vec<Decision> = records
        .iter()
        .map(|record| match record.key.fingerprint {
            0 if record != first_of_last => duplicate_of(first_of_last),
            _ => Decision::Keep(Outcome::Unique),
        })
        .collect();
    let differ = decided.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(decided.len(), expected.len());
    assert!(
        differ.is_none(),
        "record {differ:?}: {:?}, the rule says {:?}",
        differ.map(|i| &decided[i]),
        differ.map(|i| &expected[i])
    );
    h.assert_items_bounded();
    assert_eq!(h.items().len(), 10_001);
    let unique = 10_001.0;
    let writes = h.metrics.event_table_capacity_units("PutItem");
    let reads = h.metrics.event_table_capacity_units("BatchGetItem")
        + h.metrics.event_table_capacity_units("GetItem");
    assert!(writes > 0.0 && writes <= unique, "{writes} write units");
    assert!(reads > 0.0 && reads <= unique, "{reads} read units");
}

/// The same event accepted again and again, each copy more than a window
/// after the one before: its item keeps the newest [`MAX_COPIES`], and
/// each copy evicted (written within the day, so the time rule alone
/// would have kept it) is counted.
#[tokio::test]
async fn an_event_accepted_again_and_again_evicts_its_oldest_copies() {
    let h = Harness::new();
    let t = base() - 60 * W;
    let worker = h.worker(0);
    let lineage = Lineage::root(A);
    let copies: Vec<Candidate> = (0..6)
        .map(|n| candidate(A, n, 4, 5, t + i64::try_from(n).unwrap() * (W + 1)))
        .collect();
    for copy in &copies {
        assert!(
            worker
                .decide(&lineage, &rule(true), std::slice::from_ref(copy))
                .await
                .unwrap()[0]
                .accepts()
        );
    }
    let kept: Vec<AcceptedCopy> = copies[3..].iter().map(Candidate::accepted).collect();
    assert_eq!(h.copies(4, 5), kept);
    assert_eq!(h.metrics.event_table_evictions.get(), 3);
    h.assert_items_bounded();
}

fn meta(code: &str, message: &str) -> ErrorMetadata {
    ErrorMetadata::builder().code(code).message(message).build()
}

fn table_status(status: TableStatus) -> impl Fn() -> DescribeTableOutput {
    move || {
        DescribeTableOutput::builder()
            .table(
                TableDescription::builder()
                    .table_status(status.clone())
                    .build(),
            )
            .build()
    }
}

fn ttl(status: TimeToLiveStatus, attribute: &'static str) -> impl Fn() -> DescribeTimeToLiveOutput {
    move || {
        DescribeTimeToLiveOutput::builder()
            .time_to_live_description(
                TimeToLiveDescription::builder()
                    .time_to_live_status(status.clone())
                    .attribute_name(attribute)
                    .build(),
            )
            .build()
    }
}

fn store(client: Client) -> DynamoDbStore {
    DynamoDbStore::new(client, "events", Arc::new(Metrics::new()), 0)
}

fn refused<E>(generic: fn(ErrorMetadata) -> E) -> impl Fn() -> E {
    move || {
        generic(meta(
            "ValidationException",
            "Item size has exceeded the maximum allowed size",
        ))
    }
}

fn rejected(metrics: &Metrics, operation: &'static str) -> u64 {
    metrics
        .event_table_rejected
        .get_or_create(&crate::ops::metrics::OperationLabel { operation })
        .get()
}

/// DynamoDB refuses an item for good (a `ValidationException`): the write
/// is not retried, the records are decided as they are — kept, a copy
/// within the run a duplicate of the kept one — the copy is not recorded,
/// and a rerun decides alike (the same write is refused again).
#[tokio::test(start_paused = true)]
async fn a_refused_write_keeps_the_records_without_retrying() {
    let read = mock!(Client::batch_get_item).then_output(|| BatchGetItemOutput::builder().build());
    let put = mock!(Client::put_item).then_error(refused(PutItemError::generic));
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&read, &put]);
    let metrics = Arc::new(Metrics::new());
    let worker = DynamoDbStore::new(client, "events", metrics.clone(), 100);
    let t = base();
    let run = [candidate(A, 1, 3, 5, t), candidate(A, 2, 3, 5, t + 10)];
    let expected = vec![Decision::Keep(Outcome::Unique), duplicate_of(&run[0])];
    let lineage = Lineage::root(A);
    assert_eq!(
        worker.decide(&lineage, &rule(true), &run).await.unwrap(),
        expected
    );
    assert_eq!((put.num_calls(), rejected(&metrics, "PutItem")), (1, 1));
    assert_eq!(
        worker.decide(&lineage, &rule(true), &run).await.unwrap(),
        expected
    );
    assert_eq!(
        (read.num_calls(), put.num_calls()),
        (2, 2),
        "nothing cached"
    );
    assert!(!metrics.encode().contains("shardsink_retries_total{"));
}

/// A refused BatchGetItem is asked again key by key (GetItem), so that a
/// refusal concerns one item; a refused read, then a refused write, leave
/// the records kept.
#[tokio::test(start_paused = true)]
async fn a_refused_read_is_asked_again_per_item() {
    let batch = mock!(Client::batch_get_item).then_error(refused(BatchGetItemError::generic));
    // DynamoDB refuses the item of event (1, 5), not that of (2, 5).
    let refused_id = AttributeValue::S(event_id(&EventKey {
        id: 1,
        fingerprint: 5,
    }));
    let is_refused = move |item: Option<&Item>| {
        item.and_then(|item| item.get(attr::EVENT_ID)) == Some(&refused_id)
    };
    let get = mock!(Client::get_item)
        .match_requests({
            let is_refused = is_refused.clone();
            move |input| is_refused(input.key())
        })
        .then_error(refused(GetItemError::generic));
    let found = mock!(Client::get_item).then_output(|| GetItemOutput::builder().build());
    let put = mock!(Client::put_item)
        .match_requests(move |input| is_refused(input.item()))
        .then_error(refused(PutItemError::generic));
    let written = mock!(Client::put_item).then_output(|| PutItemOutput::builder().build());
    let client = mock_client!(
        aws_sdk_dynamodb,
        RuleMode::MatchAny,
        [&batch, &get, &found, &put, &written]
    );
    let metrics = Arc::new(Metrics::new());
    let worker = DynamoDbStore::new(client, "events", metrics.clone(), 0);
    let t = base();
    let run = [candidate(A, 1, 1, 5, t), candidate(A, 2, 2, 5, t)];
    assert_eq!(
        worker
            .decide(&Lineage::root(A), &rule(true), &run)
            .await
            .unwrap(),
        vec![Decision::Keep(Outcome::Unique); 2]
    );
    assert_eq!(batch.num_calls(), 1);
    assert_eq!((get.num_calls(), found.num_calls()), (1, 1));
    assert_eq!((put.num_calls(), written.num_calls()), (1, 1));
    for (operation, count) in [("BatchGetItem", 1), ("GetItem", 1), ("PutItem", 1)] {
        assert_eq!(rejected(&metrics, operation), count, "{operation}");
    }
}

#[tokio::test(start_paused = true)]
async fn ensure_table_creates_waits_and_turns_ttl_on() {
    let missing = mock!(Client::describe_table).then_error(|| {
        DescribeTableError::ResourceNotFoundException(
            ResourceNotFoundException::builder()
                .meta(meta("ResourceNotFoundException", "no table"))
                .build(),
        )
    });
    let create = mock!(Client::create_table)
        .match_requests(|input| {
            input.billing_mode() == Some(&BillingMode::PayPerRequest)
                && input.key_schema().first().map(|k| k.attribute_name()) == Some(attr::EVENT_ID)
        })
        .then_output(|| CreateTableOutput::builder().build());
    let creating = mock!(Client::describe_table).then_output(table_status(TableStatus::Creating));
    let active = mock!(Client::describe_table).then_output(table_status(TableStatus::Active));
    let ttl_off =
        mock!(Client::describe_time_to_live).then_output(ttl(TimeToLiveStatus::Disabled, ""));
    let ttl_on = mock!(Client::update_time_to_live)
        .match_requests(|input| {
            input
                .time_to_live_specification()
                .is_some_and(|s| s.enabled() && s.attribute_name() == attr::TTL)
        })
        .then_output(|| UpdateTimeToLiveOutput::builder().build());
    let client = mock_client!(
        aws_sdk_dynamodb,
        RuleMode::Sequential,
        [&missing, &create, &creating, &active, &ttl_off, &ttl_on]
    );
    let metrics = Arc::new(Metrics::new());
    DynamoDbStore::new(client, "events", metrics.clone(), 0)
        .ensure_table()
        .await
        .unwrap();
    assert_eq!((create.num_calls(), ttl_on.num_calls()), (1, 1));
    // Every request counted, the waiter's polls included.
    for (operation, count) in [
        ("DescribeTable", 3),
        ("CreateTable", 1),
        ("DescribeTimeToLive", 1),
        ("UpdateTimeToLive", 1),
    ] {
        assert_eq!(
            metrics.event_table_requests(operation),
            count,
            "{operation}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn ensure_table_lets_racing_workers_all_succeed() {
    // Another worker creates the table and turns TTL on between this
    // worker's look and its requests.
    let missing = mock!(Client::describe_table).then_error(|| {
        DescribeTableError::ResourceNotFoundException(
            ResourceNotFoundException::builder()
                .meta(meta("ResourceNotFoundException", "no table"))
                .build(),
        )
    });
    let in_use = mock!(Client::create_table).then_error(|| {
        CreateTableError::ResourceInUseException(
            ResourceInUseException::builder()
                .meta(meta("ResourceInUseException", "being created"))
                .build(),
        )
    });
    let active = mock!(Client::describe_table).then_output(table_status(TableStatus::Active));
    let ttl_off =
        mock!(Client::describe_time_to_live).then_output(ttl(TimeToLiveStatus::Disabled, ""));
    let already = mock!(Client::update_time_to_live).then_error(|| {
        UpdateTimeToLiveError::generic(meta("ValidationException", "TimeToLive is already enabled"))
    });
    let client = mock_client!(
        aws_sdk_dynamodb,
        RuleMode::Sequential,
        [&missing, &in_use, &active, &ttl_off, &already]
    );
    store(client).ensure_table().await.unwrap();
    assert_eq!(already.num_calls(), 1);

    // TTL already on for `ttl`: nothing to do. On another attribute: an
    // operator must look.
    let active = mock!(Client::describe_table).then_output(table_status(TableStatus::Active));
    let ttl_ours =
        mock!(Client::describe_time_to_live).then_output(ttl(TimeToLiveStatus::Enabled, attr::TTL));
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&active, &ttl_ours]);
    store(client).ensure_table().await.unwrap();
    let active = mock!(Client::describe_table).then_output(table_status(TableStatus::Active));
    let ttl_other = mock!(Client::describe_time_to_live)
        .then_output(ttl(TimeToLiveStatus::Enabled, "expiresAt"));
    let client = mock_client!(
        aws_sdk_dynamodb,
        RuleMode::Sequential,
        [&active, &ttl_other]
    );
    let err = store(client).ensure_table().await.unwrap_err();
    assert!(
        matches!(err, DynamoDbStoreError::TtlOnOtherAttribute { .. }),
        "{err:?}"
    );
}

/// A generated stream: (shard 0..shards, id, payload, arrival offset).
/// Arrivals span less than three windows: accepted copies of one event are
/// more than a window apart, so none is accepted more than three times and
/// no item reaches its cap (evictions have tests of their own).
fn events() -> impl Strategy<Value = (usize, Vec<(usize, u8, u8, i64)>)> {
    (1usize..=3).prop_flat_map(|shards| {
        (
            Just(shards),
            prop::collection::vec((0..shards, 0u8..6, 0u8..3, 0i64..3 * W), 0..60),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The DynamoDB store decides as the store in memory does (every other
    /// shard in the lineage: the DynamoDB store's stream scope) — but for
    /// `id_reused`, which it cannot tell from `unique`: an item holds the copies of one
    /// payload — in runs of up to `run` records of one shard, whatever its
    /// cache; reruns decide as before; the accepted copies in the table
    /// never have a matching copy within the window of each other, and no
    /// item is larger than one write unit.
    #[test]
    fn agrees_with_the_memory_store(
        (shards, events) in events(),
        run in 1usize..8,
        cache_entries in prop::sample::select(vec![0usize, 2, 100]),
        match_fingerprint in any::<bool>(),
        reruns in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let h = Harness::new();
            let warm = h.worker(cache_entries);
            let memory = MemoryStore::default();
            let rule = rule(match_fingerprint);
            let names: Vec<String> = (0..shards).map(|s| format!("shardId-{s:012}")).collect();
            let lineages: Vec<Lineage> = names
                .iter()
                .map(|name| Lineage {
                    shard_id: Arc::from(name.as_str()),
                    ancestors: names.iter().filter(|n| *n != name).map(|n| Arc::from(n.as_str())).collect(),
                })
                .collect();
            let t = base();
            // Consecutive records of one shard, up to `run`, are one call.
            let mut runs: Vec<(usize, Vec<Candidate>)> = Vec::new();
            for (n, &(shard, id, payload, arrival)) in events.iter().enumerate() {
                let record = Candidate {
                    key: EventKey {
                        id: u128::from(id),
                        fingerprint: if match_fingerprint { u64::from(payload) } else { 0 },
                    },
                    copy: CopyRef {
                        shard_id: lineages[shard].shard_id.clone(),
                        sequence_number: SequenceNumber::from(n as u64),
                        sub_sequence_number: None,
                    },
                    arrival_millis: t + arrival,
                };
                match runs.last_mut() {
                    Some((s, records)) if *s == shard && records.len() < run => records.push(record),
                    _ => runs.push((shard, vec![record])),
                }
            }
            let mut decided = Vec::new();
            for (shard, records) in &runs {
                let expected: Vec<Decision> = memory
                    .decide(&lineages[*shard], &rule, records)
                    .into_iter()
                    .map(|decision| match decision {
                        Decision::Keep(Outcome::IdReused) => Decision::Keep(Outcome::Unique),
                        decision => decision,
                    })
                    .collect();
                let actual = warm.decide(&lineages[*shard], &rule, records).await.unwrap();
                prop_assert_eq!(&actual, &expected);
                decided.push(actual);
            }
            let puts = h.requests("PutItem");
            let cold = h.worker(0);
            for index in reruns {
                if runs.is_empty() {
                    break;
                }
                let at = index.index(runs.len());
                let (shard, records) = &runs[at];
                for worker in [&warm, &cold] {
                    let again = worker.decide(&lineages[*shard], &rule, records).await.unwrap();
                    if shards == 1 {
                        prop_assert_eq!(&again, &decided[at]);
                    }
                    let accepts = |d: &[Decision]| d.iter().map(Decision::accepts).collect::<Vec<_>>();
                    prop_assert_eq!(accepts(&again), accepts(&decided[at]));
                }
            }
            prop_assert_eq!(h.requests("PutItem"), puts, "reruns write nothing");
            prop_assert_eq!(h.metrics.event_table_evictions.get(), 0, "no item reached its cap");
            for (_, state, _) in h.items() {
                let copies: Vec<&AcceptedCopy> = state.accepted().collect();
                for (i, a) in copies.iter().enumerate() {
                    for b in &copies[i + 1..] {
                        prop_assert!(
                            (a.arrival_millis - b.arrival_millis).abs() > W,
                            "two accepted copies of one event within the window: {:?} {:?}", a, b
                        );
                    }
                }
            }
            h.assert_items_bounded();
            Ok(())
        })?;
    }
}

#[tokio::test]
async fn a_lagging_shard_measures_the_window_both_ways() {
    // Shard B lags: its copy arrived before shard A's kept copy, and is
    // decided after it. More than a window apart, it is kept too.
    let h = Harness::new();
    let t = base();
    let (a, b) = (Lineage::root(A), Lineage::root(B));
    let worker = h.worker(100);
    let kept = candidate(A, 1, 1, 5, t + W + 1);
    assert_eq!(
        worker
            .decide(&a, &rule(true), std::slice::from_ref(&kept))
            .await
            .unwrap(),
        vec![Decision::Keep(Outcome::Unique)]
    );
    let lagging = [candidate(B, 1, 1, 5, t), candidate(B, 2, 1, 5, t + 1)];
    assert_eq!(
        worker.decide(&b, &rule(true), &lagging).await.unwrap(),
        vec![
            Decision::Keep(Outcome::Expired),
            Decision::Duplicate {
                of: kept.copy.clone()
            },
        ],
        "a window and a bit before the kept copy: outside; a window before it: within"
    );
}
