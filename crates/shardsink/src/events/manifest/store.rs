//! [`Manifest`]: the DynamoDB event store's calls — make sure of the
//! table, decide a run, adopt copies — over the [`cache`](super::cache),
//! the [`item`](super::item) decisions and the [`table`](super::table)
//! requests. The module above says why the result is exact.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::{StreamExt as _, TryStreamExt as _, stream};
use tracing::{info, warn};

use super::cache::ItemCache;
use super::item::{self, ItemState, decide_in_order, event_id, verdict};
use super::table::{BATCH_GET_KEYS, ManifestError, ManifestTable, Written, parse_event_id};
use crate::aws::retry::{Classify, Failure, Retry, Stopped};
use crate::events::rule::{AcceptedCopy, Decision, EventKey, Rule};
use crate::events::store::{Candidate, Lineage};
use crate::ops::metrics::Metrics;

/// Conditional writes of distinct ids in flight at once, per call.
pub const WRITES_IN_FLIGHT: usize = 64;

/// BatchGetItem requests in flight at once, per call.
pub const READS_IN_FLIGHT: usize = 8;

/// Failures in a row of one request that are retried with backoff before
/// the call fails (throttling, 5xx; see [`ManifestError`]'s
/// [`Classify`]); other failures fail the call at once.
pub const TRANSIENT_ATTEMPTS: u32 = 10;

/// Conditional writes of one item that may fail in a row before the call
/// fails with [`ManifestError::Contended`].
pub const CONFLICT_ATTEMPTS: u32 = 64;

/// How often [`Manifest::ensure_table`] looks at a table being created.
const TABLE_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The DynamoDB event manifest of a stream. Cheap to clone; clones share
/// the client, the cache and the metrics.
#[derive(Debug, Clone)]
pub struct Manifest {
    table: ManifestTable,
    cache: Arc<ItemCache>,
}

impl Manifest {
    /// The manifest in table `table` through `client`, counting requests in
    /// `metrics`, with a cache of at most `cache_entries` items (0 for
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
            table: ManifestTable::new(client, table, metrics),
            cache: Arc::new(ItemCache::new(cache_entries)),
        }
    }

    /// Creates the table if it is missing — partition key `eventId` (S),
    /// on-demand billing ([CreateTable]) —, waits until it is `ACTIVE`
    /// ([DescribeTable], every second, up to
    /// [`shard_lease::TABLE_ACTIVE_TIMEOUT`]), then turns Time to Live on
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
    /// [`ManifestError::NotActive`] after the timeout;
    /// [`ManifestError::TtlOnOtherAttribute`]; [`ManifestError::Dynamo`].
    pub async fn ensure_table(&self) -> Result<(), ManifestError> {
        let deadline = tokio::time::Instant::now() + shard_lease::TABLE_ACTIVE_TIMEOUT;
        loop {
            match self.table.describe_table().await? {
                Some(aws_sdk_dynamodb::types::TableStatus::Active) => break,
                Some(_) => {}
                None => {
                    if self.table.create_table().await? {
                        info!(table = %self.table.name(), "event manifest table created");
                        continue;
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ManifestError::NotActive {
                    table: self.table.name().to_owned(),
                    waited: shard_lease::TABLE_ACTIVE_TIMEOUT,
                });
            }
            tokio::time::sleep(TABLE_POLL_INTERVAL).await;
        }
        let ttl = match self.table.describe_time_to_live().await {
            Err(ManifestError::TtlUnsupported { table }) => {
                warn!(
                    table,
                    "this DynamoDB server has no Time to Live: manifest items never expire"
                );
                return Ok(());
            }
            ttl => ttl?,
        };
        match ttl {
            Some(attribute) if attribute == item::attr::TTL => Ok(()),
            Some(attribute) => Err(ManifestError::TtlOnOtherAttribute {
                table: self.table.name().to_owned(),
                attribute,
            }),
            None => match self.table.update_time_to_live().await {
                Err(ManifestError::TtlUnsupported { table }) => {
                    warn!(
                        table,
                        "this DynamoDB server has no Time to Live: manifest items never expire"
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
    /// [`manifest`](super)).
    ///
    /// Requests: [BatchGetItem] for ids not cached, [PutItem] per id with
    /// accepted copies, [GetItem] after a failed condition.
    ///
    /// [BatchGetItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html
    /// [PutItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html
    /// [GetItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_GetItem.html
    ///
    /// # Errors
    /// [`ManifestError`] after [`TRANSIENT_ATTEMPTS`] throttled or failed
    /// requests in a row, or at once for other failures; copies written
    /// before it stay (a rerun finds them).
    pub async fn decide(
        &self,
        lineage: &Lineage,
        rule: &Rule,
        candidates: &[Candidate],
    ) -> Result<Vec<Decision>, ManifestError> {
        let shard_id = &*lineage.shard_id;
        let mut decisions: Vec<Option<Decision>> = vec![None; candidates.len()];
        let mut pending = Vec::new();
        for (id, members) in by_event_id(candidates.iter().map(|c| c.key.id)) {
            let cached = self.cache.get(id);
            let mut rest = Vec::new();
            for index in members {
                // Once a candidate goes to the table, the later ones of its
                // id are decided after it, in order.
                let cached = cached.as_deref().filter(|_| rest.is_empty());
                let settled = cached.and_then(|state| {
                    let verdict = verdict(shard_id, rule, &candidates[index], &state.copies);
                    (verdict.accepted_before || !verdict.decision.accepts())
                        .then_some(verdict.decision)
                });
                match settled {
                    Some(decision) => decisions[index] = Some(decision),
                    None => rest.push(index),
                }
            }
            if !rest.is_empty() {
                pending.push((id, rest, cached));
            }
        }
        let unread: Vec<u128> = pending
            .iter()
            .filter(|(_, _, cached)| cached.is_none())
            .map(|(id, _, _)| *id)
            .collect();
        let mut read = self.read_items(&unread, &[&lineage.shard_id]).await?;
        let settled: Vec<(Vec<usize>, Vec<Decision>)> = stream::iter(pending)
            .map(|(id, members, cached)| {
                let state = cached
                    .or_else(|| read.remove(&id).map(Arc::new))
                    .unwrap_or_default();
                async move {
                    let run: Vec<&Candidate> = members.iter().map(|&i| &candidates[i]).collect();
                    let decided = self
                        .settle(id, state, rule, &[&lineage.shard_id], |state| {
                            decide_in_order(shard_id, rule, &run, &state.copies)
                        })
                        .await?;
                    Ok::<_, ManifestError>((members, decided))
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
    /// S3) — each in its id's item, unless it is there already: the same
    /// reads and conditional writes as [`decide`](Self::decide). `rule`
    /// sets the items' TTL and which old copies a rewrite drops.
    ///
    /// # Errors
    /// As [`decide`](Self::decide).
    pub async fn insert(
        &self,
        rule: &Rule,
        copies: &[(EventKey, AcceptedCopy)],
    ) -> Result<(), ManifestError> {
        let groups = by_event_id(copies.iter().map(|(key, _)| key.id));
        let unread: Vec<u128> = groups
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| self.cache.get(*id).is_none())
            .collect();
        let mut read = self.read_items(&unread, &[]).await?;
        stream::iter(groups)
            .map(|(id, members)| {
                let state = self
                    .cache
                    .get(id)
                    .or_else(|| read.remove(&id).map(Arc::new))
                    .unwrap_or_default();
                async move {
                    self.settle(id, state, rule, &[], |state| {
                        let new = members
                            .iter()
                            .map(|&i| &copies[i].1)
                            .filter(|copy| !state.copies.iter().any(|held| held.copy == copy.copy))
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

    /// Adds to `id`'s item the copies `decide` finds for its state, with a
    /// conditional write; on a failed condition reads the item again and
    /// decides again. Returns what `decide` returned for the state written
    /// (or for the last state read, when nothing was left to add).
    async fn settle<T>(
        &self,
        id: u128,
        mut state: Arc<ItemState>,
        rule: &Rule,
        shard_ids: &[&Arc<str>],
        decide: impl Fn(&ItemState) -> (T, Vec<AcceptedCopy>),
    ) -> Result<T, ManifestError> {
        for _ in 0..CONFLICT_ATTEMPTS {
            let (outcome, added) = decide(&state);
            if added.is_empty() {
                self.cache.put(id, state);
                return Ok(outcome);
            }
            let now = now_millis();
            let next = Arc::new(state.with_copies(added, rule, now));
            let item = next.to_item(id, rule, now);
            let read_version = state.version;
            let written = self
                .retried("PutItem", || {
                    self.table.put_item(item.clone(), read_version)
                })
                .await?;
            match written {
                Written::Yes => {
                    self.cache.put(id, next);
                    return Ok(outcome);
                }
                Written::ConditionFailed => {
                    let fresh = self.retried("GetItem", || self.table.get_item(id)).await?;
                    state = Arc::new(self.state_of(id, fresh.as_ref(), shard_ids)?);
                }
            }
        }
        Err(ManifestError::Contended {
            table: self.table.name().to_owned(),
            event_id: event_id(id),
            attempts: CONFLICT_ATTEMPTS,
        })
    }

    /// The items of `ids`, read with BatchGetItem ([`BATCH_GET_KEYS`] a
    /// request, [`READS_IN_FLIGHT`] at once); ids without an item are
    /// absent from the map. Unprocessed keys are asked again after a
    /// backoff, counted as throttling.
    async fn read_items(
        &self,
        ids: &[u128],
        shard_ids: &[&Arc<str>],
    ) -> Result<HashMap<u128, ItemState>, ManifestError> {
        let found: Mutex<HashMap<u128, ItemState>> = Mutex::new(HashMap::with_capacity(ids.len()));
        // Owned chunks: a closure over borrowed ones would make the future
        // not provably `Send` (rustc's higher-ranked closure lifetimes).
        let chunks: Vec<Vec<u128>> = ids.chunks(BATCH_GET_KEYS).map(<[u128]>::to_vec).collect();
        let found_ref = &found;
        stream::iter(chunks)
            .map(|chunk| async move { self.read_chunk(&chunk, shard_ids, found_ref).await })
            .buffer_unordered(READS_IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(found.into_inner().unwrap_or_else(PoisonError::into_inner))
    }

    /// One BatchGetItem's worth of [`read_items`](Self::read_items).
    async fn read_chunk(
        &self,
        ids: &[u128],
        shard_ids: &[&Arc<str>],
        found: &Mutex<HashMap<u128, ItemState>>,
    ) -> Result<(), ManifestError> {
        let remaining = &Mutex::new(ids.to_vec());
        self.retried("BatchGetItem", move || async move {
            let keys = lock(remaining).clone();
            let (items, unprocessed) = self.table.batch_get_item(&keys).await?;
            for item in &items {
                let id = item
                    .get(item::attr::EVENT_ID)
                    .and_then(|value| value.as_s().ok())
                    .and_then(|text| parse_event_id(text))
                    .ok_or_else(|| self.malformed("?", "no eventId of 32 hex digits"))?;
                let state = self.state_of(id, Some(item), shard_ids)?;
                lock(found).insert(id, state);
            }
            let left = unprocessed.len();
            *lock(remaining) = unprocessed;
            match left {
                0 => Ok(()),
                keys => Err(ManifestError::Unprocessed {
                    table: self.table.name().to_owned(),
                    keys,
                }),
            }
        })
        .await
    }

    /// The state of `id`'s item as read (`None`: no item).
    fn state_of(
        &self,
        id: u128,
        item: Option<&item::Item>,
        shard_ids: &[&Arc<str>],
    ) -> Result<ItemState, ManifestError> {
        match item {
            None => Ok(ItemState::default()),
            Some(item) => ItemState::from_item(item, shard_ids)
                .map_err(|reason| self.malformed(&event_id(id), &reason)),
        }
    }

    fn malformed(&self, event_id: &str, reason: &str) -> ManifestError {
        ManifestError::Malformed {
            table: self.table.name().to_owned(),
            event_id: event_id.to_owned(),
            reason: reason.to_owned(),
        }
    }

    /// Runs one request, retried with backoff while it fails transiently
    /// (at most [`TRANSIENT_ATTEMPTS`] times in a row), each retry counted
    /// in `shardsink_retries_total{cause}`.
    async fn retried<T, F, Fut>(&self, what: &'static str, op: F) -> Result<T, ManifestError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ManifestError>>,
    {
        Retry::new(what)
            .metrics(self.table.metrics())
            .final_when(|err: &ManifestError| !matches!(err.classify(), Failure::Transient(_)))
            .give_up_after(TRANSIENT_ATTEMPTS)
            .run(op)
            .await
            .map_err(|stopped| match stopped {
                Stopped::Final(err) | Stopped::GaveUp(err) => err,
                // No stop token is given to this loop.
                Stopped::Cancelled => ManifestError::Dynamo {
                    operation: what,
                    table: self.table.name().to_owned(),
                    retriable: true,
                    throttled: false,
                    source: "cancelled".into(),
                },
            })
    }
}

/// The indexes of `ids` grouped by id, groups in order of first
/// appearance, indexes in order.
fn by_event_id(ids: impl Iterator<Item = u128>) -> Vec<(u128, Vec<usize>)> {
    let mut groups: Vec<(u128, Vec<usize>)> = Vec::new();
    let mut at: HashMap<u128, usize> = HashMap::new();
    for (index, id) in ids.enumerate() {
        let group = *at.entry(id).or_insert_with(|| {
            groups.push((id, Vec::new()));
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
