//! [`DynamoDbStore`]: the DynamoDB event store's calls — make sure of the
//! table, decide a run, adopt copies — over the [`cache`](super::cache),
//! the [`verdict`](super::verdict)s against an [`item`](super::item), its
//! [`retention`](super::retention) and the [`table`](super::table)
//! requests. The module above says why the result is exact.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use futures::{StreamExt as _, TryStreamExt as _, stream};
use shard_lease::TableCreation;
use tracing::{error, info, warn};

use super::cache::ItemCache;
use super::item::{self, HeldCopy, ItemState, event_id, item_key, parse_event_id};
use super::retention::{MAX_COPIES, Rewrite};
use super::table::{BATCH_GET_KEYS, DynamoDbStoreError, EventTable, Written};
use super::verdict::{decide_in_order, verdict};
use crate::aws::retry::{Classify, Failure, Retry, Stopped};
use crate::events::rule::{AcceptedCopy, Decision, EventKey, Rule};
use crate::events::store::{Candidate, Lineage};
use crate::ops::log::error_chain;
use crate::ops::metrics::Metrics;

/// Conditional writes of distinct items in flight at once, per call.
pub const WRITES_IN_FLIGHT: usize = 64;

/// BatchGetItem requests in flight at once, per call.
pub const READS_IN_FLIGHT: usize = 8;

/// Failures in a row of one request that are retried with backoff before
/// the call fails (throttling, 5xx; see [`DynamoDbStoreError`]'s
/// [`Classify`]); other failures fail the call at once.
pub const TRANSIENT_ATTEMPTS: u32 = 10;

/// Conditional writes of one item that may fail in a row before the call
/// fails with [`DynamoDbStoreError::Contended`].
pub const CONFLICT_ATTEMPTS: u32 = 64;

/// The DynamoDB store of a stream. Cheap to clone; clones share
/// the client, the cache and the metrics.
#[derive(Debug, Clone)]
pub struct DynamoDbStore {
    table: EventTable,
    cache: Arc<ItemCache>,
}

impl DynamoDbStore {
    /// The DynamoDB store in table `table` through `client`, counting
    /// requests in `metrics`, with a cache of at most `cache_entries` items (0 for
    /// none), each about [`APPROXIMATE_BYTES_PER_ENTRY`] bytes.
    ///
    /// [`APPROXIMATE_BYTES_PER_ENTRY`]: super::cache::APPROXIMATE_BYTES_PER_ENTRY
    pub fn new(
        client: aws_sdk_dynamodb::Client,
        table: impl Into<String>,
        metrics: Arc<Metrics>,
        cache_entries: usize,
    ) -> Self {
        Self {
            table: EventTable::new(client, table, metrics),
            cache: Arc::new(ItemCache::new(cache_entries)),
        }
    }

    /// Creates the table if it is missing — partition key `eventId` (S),
    /// on-demand billing ([CreateTable]) —, waits until it is `ACTIVE`
    /// ([DescribeTable], every second, up to
    /// [`shard_lease::TABLE_ACTIVE_TIMEOUT`]; see
    /// [`EventTable::create_if_missing`]), then turns Time to Live on
    /// for attribute `ttl` unless it is ([DescribeTimeToLive],
    /// [UpdateTimeToLive]). Idempotent; workers racing each other all
    /// succeed.
    ///
    /// [CreateTable]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CreateTable.html
    /// [DescribeTable]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DescribeTable.html
    /// [DescribeTimeToLive]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DescribeTimeToLive.html
    /// [UpdateTimeToLive]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateTimeToLive.html
    ///
    /// # Errors
    /// [`DynamoDbStoreError::NotActive`] after the timeout;
    /// [`DynamoDbStoreError::TtlOnOtherAttribute`];
    /// [`DynamoDbStoreError::Dynamo`].
    pub async fn ensure_table(&self) -> Result<(), DynamoDbStoreError> {
        if self.table.create_if_missing().await? == TableCreation::Created {
            info!(table = %self.table.name(), "DynamoDB event table created");
        }
        let ttl = match self.table.describe_time_to_live().await {
            Err(DynamoDbStoreError::TtlUnsupported { table }) => {
                warn!(
                    table,
                    "this DynamoDB server has no Time to Live: its items never expire"
                );
                return Ok(());
            }
            ttl => ttl?,
        };
        match ttl {
            Some(attribute) if attribute == item::attr::TTL => Ok(()),
            Some(attribute) => Err(DynamoDbStoreError::TtlOnOtherAttribute {
                table: self.table.name().to_owned(),
                attribute,
            }),
            None => match self.table.update_time_to_live().await {
                Err(DynamoDbStoreError::TtlUnsupported { table }) => {
                    warn!(
                        table,
                        "this DynamoDB server has no Time to Live: its items never expire"
                    );
                    Ok(())
                }
                updated => updated,
            },
        }
    }

    /// Decides `candidates` — consecutive user records of the shard
    /// `lineage.shard_id`, in order — and records the accepted ones before
    /// returning: one [`Decision`] per candidate, in order. Safe to call
    /// again with the same candidates (see "Why it is exact" in
    /// [`dynamodb`](super)). A candidate whose item DynamoDB refuses
    /// ([`DynamoDbStoreError::Rejected`]) is decided against what was read of
    /// it, its copy not recorded (logged with its `eventId`, counted in
    /// `shardsink_event_manifest_rejected_total`).
    ///
    /// Requests: [BatchGetItem] for items not cached, [PutItem] per item
    /// with accepted copies, [GetItem] after a failed condition (or for each
    /// key of a refused BatchGetItem).
    ///
    /// [BatchGetItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html
    /// [PutItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html
    /// [GetItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_GetItem.html
    ///
    /// # Errors
    /// [`DynamoDbStoreError`] after [`TRANSIENT_ATTEMPTS`] throttled or failed
    /// requests in a row, or at once for other failures; copies written
    /// before it stay (a rerun finds them).
    pub async fn decide(
        &self,
        lineage: &Lineage,
        rule: &Rule,
        candidates: &[Candidate],
    ) -> Result<Vec<Decision>, DynamoDbStoreError> {
        let shard_id = &*lineage.shard_id;
        let shard_ids = [&lineage.shard_id];
        let mut decisions: Vec<Option<Decision>> = vec![None; candidates.len()];
        let mut pending = Vec::new();
        for (key, members) in by_item(candidates.iter().map(|c| item_key(&c.key, rule))) {
            let cached = self.cache.get(&key);
            let mut rest = Vec::new();
            for index in members {
                // Once a candidate goes to the table, the later ones of its
                // item are decided after it, in order.
                let cached = cached.as_deref().filter(|_| rest.is_empty());
                let settled = cached.and_then(|state| {
                    let verdict = verdict(shard_id, rule, &candidates[index], state.accepted());
                    (verdict.accepted_before || !verdict.decision.accepts())
                        .then_some(verdict.decision)
                });
                match settled {
                    Some(decision) => decisions[index] = Some(decision),
                    None => rest.push(index),
                }
            }
            if !rest.is_empty() {
                pending.push((key, rest, cached));
            }
        }
        let unread: Vec<EventKey> = pending
            .iter()
            .filter(|(_, _, cached)| cached.is_none())
            .map(|(key, _, _)| *key)
            .collect();
        let mut read = self.read_items(&unread, &shard_ids).await?;
        let settled: Vec<(Vec<usize>, Vec<Decision>)> = stream::iter(pending)
            .map(|(key, members, cached)| {
                let state = cached
                    .or_else(|| read.remove(&key).map(Arc::new))
                    .unwrap_or_default();
                async move {
                    let run: Vec<&Candidate> = members.iter().map(|&i| &candidates[i]).collect();
                    let decided = self
                        .settle(key, state, rule, &shard_ids, |state| {
                            decide_in_order(shard_id, rule, &run, state)
                        })
                        .await?;
                    Ok::<_, DynamoDbStoreError>((members, decided))
                }
            })
            .buffer_unordered(WRITES_IN_FLIGHT)
            .try_collect()
            .await?;
        for (members, decided) in settled {
            for (index, decision) in members.into_iter().zip(decided) {
                decisions[index] = Some(decision);
            }
        }
        // Every candidate is in exactly one group, and every group settled.
        debug_assert!(decisions.iter().all(Option::is_some));
        Ok(decisions.into_iter().flatten().collect())
    }

    /// Records `copies` — accepted copies decided elsewhere (read back from
    /// S3) — each in its item, unless it is there already: the same reads
    /// and conditional writes as [`decide`](Self::decide). `rule` says
    /// which item holds a copy, sets the items' TTL and which old copies a
    /// rewrite drops.
    ///
    /// # Errors
    /// As [`decide`](Self::decide).
    pub async fn insert(
        &self,
        rule: &Rule,
        copies: &[(EventKey, AcceptedCopy)],
    ) -> Result<(), DynamoDbStoreError> {
        let groups = by_item(copies.iter().map(|(key, _)| item_key(key, rule)));
        let unread: Vec<EventKey> = groups
            .iter()
            .map(|(key, _)| *key)
            .filter(|key| self.cache.get(key).is_none())
            .collect();
        let mut read = self.read_items(&unread, &[]).await?;
        stream::iter(groups)
            .map(|(key, members)| {
                let state = self
                    .cache
                    .get(&key)
                    .or_else(|| read.remove(&key).map(Arc::new))
                    .unwrap_or_default();
                async move {
                    self.settle(key, state, rule, &[], |state| {
                        let new = members
                            .iter()
                            .map(|&i| &copies[i].1)
                            .filter(|copy| !state.holds(&copy.copy))
                            .cloned()
                            .collect();
                        ((), new)
                    })
                    .await
                }
            })
            .buffer_unordered(WRITES_IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// Adds to `key`'s item the copies `decide` finds for its state, with a
    /// conditional write; on a failed condition reads the item again and
    /// decides again. Returns what `decide` returned for the state written
    /// (or for the last state read, when nothing was left to add, or when
    /// DynamoDB refused the item: then nothing is recorded).
    async fn settle<T>(
        &self,
        key: EventKey,
        mut state: Arc<ItemState>,
        rule: &Rule,
        shard_ids: &[&Arc<str>],
        decide: impl Fn(&ItemState) -> (T, Vec<AcceptedCopy>),
    ) -> Result<T, DynamoDbStoreError> {
        for _ in 0..CONFLICT_ATTEMPTS {
            let (outcome, added) = decide(&state);
            if added.is_empty() {
                self.cache.put(key, state);
                return Ok(outcome);
            }
            let now = now_millis();
            let Rewrite {
                state: next,
                evicted,
            } = state.with_copies(added, rule, now);
            let item = next.to_item(&key, rule, now);
            let read_version = state.version;
            let written = self
                .retried("PutItem", || {
                    self.table.put_item(item.clone(), read_version)
                })
                .await;
            match written {
                Ok(Written::Yes) => {
                    self.evicted(&key, &evicted);
                    self.cache.put(key, Arc::new(next));
                    return Ok(outcome);
                }
                Ok(Written::ConditionFailed) => match self.read_item(&key, shard_ids).await? {
                    Some(fresh) => state = Arc::new(fresh),
                    None => return Ok(outcome),
                },
                Err(err @ DynamoDbStoreError::Rejected { .. }) => {
                    self.rejected(&key, &err);
                    return Ok(outcome);
                }
                Err(err) => return Err(err),
            }
        }
        Err(DynamoDbStoreError::Contended {
            table: self.table.name().to_owned(),
            event_id: event_id(&key),
            attempts: CONFLICT_ATTEMPTS,
        })
    }

    /// The item of `key`, read consistently (GetItem); `None` when DynamoDB
    /// refused the read ([`rejected`](Self::rejected)).
    async fn read_item(
        &self,
        key: &EventKey,
        shard_ids: &[&Arc<str>],
    ) -> Result<Option<ItemState>, DynamoDbStoreError> {
        match self.retried("GetItem", || self.table.get_item(key)).await {
            Ok(item) => Ok(Some(self.state_of(key, item.as_ref(), shard_ids)?)),
            Err(err @ DynamoDbStoreError::Rejected { .. }) => {
                self.rejected(key, &err);
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// The items of `keys`, read with BatchGetItem ([`BATCH_GET_KEYS`] a
    /// request, [`READS_IN_FLIGHT`] at once); keys without an item (or
    /// whose read DynamoDB refused) are absent from the map. Unprocessed
    /// keys are asked again after a backoff, counted as throttling.
    async fn read_items(
        &self,
        keys: &[EventKey],
        shard_ids: &[&Arc<str>],
    ) -> Result<HashMap<EventKey, ItemState>, DynamoDbStoreError> {
        let found: Mutex<HashMap<EventKey, ItemState>> =
            Mutex::new(HashMap::with_capacity(keys.len()));
        // Owned chunks: a closure over borrowed ones would make the future
        // not provably `Send` (rustc's higher-ranked closure lifetimes).
        let chunks: Vec<Vec<EventKey>> = keys
            .chunks(BATCH_GET_KEYS)
            .map(<[EventKey]>::to_vec)
            .collect();
        let found_ref = &found;
        stream::iter(chunks)
            .map(|chunk| async move { self.read_chunk(&chunk, shard_ids, found_ref).await })
            .buffer_unordered(READS_IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(found.into_inner().unwrap_or_else(PoisonError::into_inner))
    }

    /// One BatchGetItem's worth of [`read_items`](Self::read_items); when
    /// DynamoDB refuses it, each key is read on its own, so that a refusal
    /// concerns one item.
    async fn read_chunk(
        &self,
        keys: &[EventKey],
        shard_ids: &[&Arc<str>],
        found: &Mutex<HashMap<EventKey, ItemState>>,
    ) -> Result<(), DynamoDbStoreError> {
        let remaining = &Mutex::new(keys.to_vec());
        let batch = self
            .retried("BatchGetItem", move || async move {
                let keys = lock(remaining).clone();
                let (items, unprocessed) = self.table.batch_get_item(&keys).await?;
                for item in &items {
                    let key = item
                        .get(item::attr::EVENT_ID)
                        .and_then(|value| value.as_s().ok())
                        .and_then(|text| parse_event_id(text))
                        .ok_or_else(|| self.malformed("?", "no eventId of 48 hex digits"))?;
                    let state = self.state_of(&key, Some(item), shard_ids)?;
                    lock(found).insert(key, state);
                }
                let left = unprocessed.len();
                *lock(remaining) = unprocessed;
                match left {
                    0 => Ok(()),
                    keys => Err(DynamoDbStoreError::Unprocessed {
                        table: self.table.name().to_owned(),
                        keys,
                    }),
                }
            })
            .await;
        match batch {
            Err(err @ DynamoDbStoreError::Rejected { .. }) => {
                let refused = lock(remaining).clone();
                self.table.metrics().event_table_rejected("BatchGetItem");
                warn!(
                    table = %self.table.name(),
                    keys = refused.len(),
                    error = %error_chain(&err),
                    "dynamodb refused a BatchGetItem of the DynamoDB event table; reading its items one by one"
                );
                for key in refused {
                    if let Some(state) = self.read_item(&key, shard_ids).await? {
                        lock(found).insert(key, state);
                    }
                }
                Ok(())
            }
            batch => batch,
        }
    }

    /// The state of `key`'s item as read (`None`: no item).
    fn state_of(
        &self,
        key: &EventKey,
        item: Option<&item::Item>,
        shard_ids: &[&Arc<str>],
    ) -> Result<ItemState, DynamoDbStoreError> {
        match item {
            None => Ok(ItemState::default()),
            Some(item) => ItemState::from_item(item, key, shard_ids)
                .map_err(|reason| self.malformed(&event_id(key), &reason)),
        }
    }

    fn malformed(&self, event_id: &str, reason: &str) -> DynamoDbStoreError {
        DynamoDbStoreError::Malformed {
            table: self.table.name().to_owned(),
            event_id: event_id.to_owned(),
            reason: reason.to_owned(),
        }
    }

    /// A request for `key`'s item that DynamoDB refused for good: logged
    /// as an error naming the item, counted; its records go on as decided.
    fn rejected(&self, key: &EventKey, err: &DynamoDbStoreError) {
        if let DynamoDbStoreError::Rejected { operation, .. } = err {
            self.table.metrics().event_table_rejected(operation);
        }
        error!(
            table = %self.table.name(),
            event_id = %event_id(key),
            error = %error_chain(err),
            "dynamodb refused a request for an item of the DynamoDB event table; the event's records are kept as decided, their copies not recorded"
        );
    }

    /// Copies the cap on an item's copies evicted though a late decision
    /// might still have consulted them: each logged and counted.
    fn evicted(&self, key: &EventKey, evicted: &[HeldCopy]) {
        for held in evicted {
            self.table.metrics().event_table_evictions.inc();
            warn!(
                table = %self.table.name(),
                event_id = %event_id(key),
                copy = %held.accepted.copy,
                arrival_millis = held.accepted.arrival_millis,
                written_millis = held.written_millis,
                max_copies = MAX_COPIES,
                "DynamoDB event table item full: the oldest accepted copy of an event accepted again and again was evicted; a shard read far behind, or a replay, may keep a copy of it once more"
            );
        }
    }

    /// Runs one request, retried with backoff while it fails transiently
    /// (at most [`TRANSIENT_ATTEMPTS`] times in a row), each retry counted
    /// in `shardsink_retries_total{cause}`.
    async fn retried<T, F, Fut>(&self, what: &'static str, op: F) -> Result<T, DynamoDbStoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, DynamoDbStoreError>>,
    {
        Retry::new(what)
            .metrics(self.table.metrics())
            .final_when(|err: &DynamoDbStoreError| !matches!(err.classify(), Failure::Transient(_)))
            .give_up_after(TRANSIENT_ATTEMPTS)
            .run(op)
            .await
            .map_err(|stopped| match stopped {
                Stopped::Final(err) | Stopped::GaveUp(err) => err,
                // No stop token is given to this loop.
                Stopped::Cancelled => DynamoDbStoreError::Dynamo {
                    operation: what,
                    table: self.table.name().to_owned(),
                    retriable: true,
                    throttled: false,
                    source: "cancelled".into(),
                },
            })
    }
}

/// The indexes of `keys` grouped by item key, groups in order of first
/// appearance, indexes in order.
fn by_item(keys: impl Iterator<Item = EventKey>) -> Vec<(EventKey, Vec<usize>)> {
    let mut groups: Vec<(EventKey, Vec<usize>)> = Vec::new();
    let mut at: HashMap<EventKey, usize> = HashMap::new();
    for (index, key) in keys.enumerate() {
        let group = *at.entry(key).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        groups[group].1.push(index);
    }
    groups
}

/// The wall clock, ms since the Unix epoch.
pub(super) fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
