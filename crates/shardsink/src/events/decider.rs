//! [`ShardEvents`]: a shard task's event decisions — keys computed from each
//! user record, decided by the process's store ([`EventRuntime`]) in runs,
//! and decisions read back from S3 adopted into the store.
//!
//! With the local store, before a task's first decision the store is checked
//! for the shard: its watermark must record the current settings and reach
//! the last record already placed in S3; else the shard's window is rebuilt
//! from S3 (`rebuild`) — and each ancestor's, unless that ancestor was read
//! to its end with this store.

use std::sync::Arc;

use sequence_range::SequenceNumber;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::dynamodb::{DynamoDbStore, DynamoDbStoreError};
use super::id::settings_description;
#[cfg(test)]
use super::memory::MemoryStore;
pub use super::rebuild::RebuildSource;
use super::rebuild::{Committed, RebuildError, rebuild};
use super::rule::{AcceptedCopy, CopyRef, Decision, EventKey, Outcome};
use super::store::{Candidate, Lineage};
use crate::aws::S3Error;
use crate::aws::retry::{Retry, Stopped};
use crate::events::EventSettings;
use crate::ops::metrics::Metrics;
use crate::output::decisions::{RecordedDecision, UserDecision};
use crate::read::record::ShardRecord;
use event_store::{LocalStore, LocalStoreError, Watermark};

/// Extra history a local store keeps beyond twice the window (ms): room
/// for arrival times that go back a little within a shard.
const HORIZON_SLACK_MILLIS: i64 = 3_600_000;

/// What every shard task shares for event deduplication.
#[derive(Debug)]
pub struct EventRuntime {
    /// Which records are the same event.
    pub settings: EventSettings,
    /// [`settings_description`] of `settings`: what decisions objects and
    /// store watermarks record.
    pub description: String,
    /// Where accepted copies are kept.
    pub store: EventStore,
}

impl EventRuntime {
    /// The runtime for `settings` over `store`.
    pub fn new(settings: EventSettings, store: EventStore) -> Self {
        Self {
            description: settings_description(&settings.source, settings.fingerprint),
            settings,
            store,
        }
    }
}

/// The store of accepted copies.
#[derive(Debug)]
pub enum EventStore {
    /// The local store (`--event-dedup-store local`).
    Local(LocalStore),
    /// The DynamoDB store (`--event-dedup-store dynamodb`).
    DynamoDb(DynamoDbStore),
    /// In memory (tests).
    #[cfg(test)]
    Memory(MemoryStore),
}

/// Why deciding failed; the shard task retries after a backoff (or stops,
/// when the lease was lost).
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The local store failed.
    #[error(transparent)]
    Local(#[from] LocalStoreError),
    /// Rebuilding the window from S3 stopped (the shard task turns this
    /// into its S3 error, or the lease's loss).
    #[error("rebuilding the event window from S3 stopped: {0:?}")]
    Rebuild(Stopped<S3Error>),
    /// The DynamoDB store's retries stopped (the shard task turns a cancelled
    /// retry into the lease's loss).
    #[error("DynamoDB store call stopped: {0:?}")]
    DynamoDb(Stopped<DynamoDbStoreError>),
    /// A blocking store call panicked or was cancelled.
    #[error("an event store call did not complete")]
    Join(#[source] tokio::task::JoinError),
}

impl From<RebuildError> for EventError {
    fn from(error: RebuildError) -> Self {
        match error {
            RebuildError::Stopped(stopped) => Self::Rebuild(stopped),
            RebuildError::Store(error) => Self::Local(error),
            RebuildError::Join(join) => Self::Join(join),
        }
    }
}

/// One shard's event decisions.
#[derive(Debug)]
pub struct ShardEvents {
    runtime: Arc<EventRuntime>,
    lineage: Lineage,
    source: RebuildSource,
    /// Whether the store was checked (and rebuilt if behind) for this task.
    checked: bool,
}

impl ShardEvents {
    /// Decisions for the shard and ancestors of `lineage`, rebuilding from
    /// `source` when the store is behind.
    pub fn new(runtime: Arc<EventRuntime>, lineage: Lineage, source: RebuildSource) -> Self {
        Self {
            runtime,
            lineage,
            source,
            checked: false,
        }
    }

    /// Sets the shard's ancestors, nearest first.
    pub fn set_ancestors(&mut self, ancestors: Vec<String>) {
        self.lineage.ancestors = ancestors.into_iter().map(Arc::from).collect();
    }

    /// Decides `records` (consecutive records of the shard, in order): one
    /// list per record, one [`UserDecision`] per user record. Accepted copies
    /// are in the store when this returns. `placed_through`: how far the
    /// records before them are known to be placed in S3 (the checkpoint,
    /// records written or found there, or every record before the pending
    /// batch being replayed) — every record up to it is, and it need not be
    /// a record's own number — for the check that the store is not behind;
    /// `None` when no record of the shard is known to be in S3. `stop`: the
    /// lease was lost (a rebuild stops).
    ///
    /// # Errors
    /// [`EventError`] when the store or a rebuild fails.
    pub async fn decide(
        &mut self,
        records: &[ShardRecord],
        placed_through: Option<&SequenceNumber>,
        stop: &CancellationToken,
    ) -> Result<Vec<Vec<UserDecision>>, EventError> {
        let (Some(first), Some(last)) = (records.first(), records.last()) else {
            return Ok(Vec::new());
        };
        if !self.checked {
            self.ensure_current(first.arrival_millis, placed_through, stop)
                .await?;
            self.checked = true;
        }
        let settings = &self.runtime.settings;
        let mut candidates = Vec::new();
        let mut keys = Vec::with_capacity(records.len());
        for record in records {
            let mut record_keys = Vec::with_capacity(record.user_record_count());
            for user in record.views(&self.lineage.shard_id) {
                let key = settings.source.key(&user, settings.fingerprint);
                if let Some(key) = key {
                    candidates.push(Candidate {
                        key,
                        copy: CopyRef {
                            shard_id: self.lineage.shard_id.clone(),
                            sequence_number: record.sequence_number.clone(),
                            sub_sequence_number: user.sub_sequence_number,
                        },
                        arrival_millis: user.arrival_millis,
                    });
                }
                record_keys.push(key);
            }
            keys.push(record_keys);
        }
        let decided = self
            .decide_candidates(candidates, last.sequence_number.clone(), stop)
            .await?;
        let mut decided = decided.into_iter();
        Ok(keys
            .into_iter()
            .map(|record_keys| {
                record_keys
                    .into_iter()
                    .map(|key| UserDecision {
                        key,
                        decision: match key {
                            // One decision per candidate, in order.
                            Some(_) => decided.next().unwrap_or(Decision::Keep(Outcome::Unique)),
                            None => Decision::Keep(Outcome::IdMissing),
                        },
                    })
                    .collect()
            })
            .collect())
    }

    async fn decide_candidates(
        &self,
        candidates: Vec<Candidate>,
        through: SequenceNumber,
        stop: &CancellationToken,
    ) -> Result<Vec<Decision>, EventError> {
        let runtime = self.runtime.clone();
        let lineage = self.lineage.clone();
        match &self.runtime.store {
            EventStore::DynamoDb(store) => {
                let rule = &self.runtime.settings.rule;
                with_dynamodb(store, &self.source.metrics, stop, || {
                    store.decide(&lineage, rule, &candidates)
                })
                .await
            }
            EventStore::Local(_) => {
                blocking(move || {
                    let EventStore::Local(store) = &runtime.store else {
                        return Ok(Vec::new());
                    };
                    store.decide(
                        &lineage,
                        &runtime.settings.rule,
                        &runtime.description,
                        &candidates,
                        &through,
                    )
                })
                .await
            }
            #[cfg(test)]
            EventStore::Memory(store) => {
                Ok(store.decide(&lineage, &runtime.settings.rule, &candidates))
            }
        }
    }

    /// A batch of the shard whose first record arrived at
    /// `first_arrival_millis` (ms since the epoch) is written and
    /// checkpointed: lets the store drop the copies no decision of this
    /// shard can consult any more.
    ///
    /// Only a written batch moves the horizon, never a decision: every
    /// record still to be decided — or decided again, after a crash, a lease
    /// move or a lost lease table — comes after the last written batch, so
    /// it arrived no earlier than that batch's first record less the slack
    /// for arrival times that go back a little. Records decided but not yet
    /// written may be decided again, and must see the same copies: the
    /// horizon never depends on them.
    ///
    /// # Errors
    /// [`EventError`] when the store fails.
    pub async fn written(&self, first_arrival_millis: i64) -> Result<(), EventError> {
        if let EventStore::Local(store) = &self.runtime.store {
            let horizon = first_arrival_millis
                .saturating_sub(self.runtime.settings.rule.horizon_millis())
                .saturating_sub(HORIZON_SLACK_MILLIS);
            let (store, shard) = (store.clone(), self.lineage.shard_id.clone());
            blocking(move || store.advance_horizon(&shard, horizon)).await?;
        }
        Ok(())
    }

    /// With the local store: rebuilds from S3 what the store lacks before
    /// deciding records from `first_arrival` on (see the module
    /// documentation).
    async fn ensure_current(
        &mut self,
        first_arrival: i64,
        placed_through: Option<&SequenceNumber>,
        stop: &CancellationToken,
    ) -> Result<(), EventError> {
        let EventStore::Local(store) = &self.runtime.store else {
            return Ok(());
        };
        let description = self.runtime.description.clone();
        let shard = self.lineage.shard_id.clone();
        let watermark = {
            let (store, shard) = (store.clone(), shard.clone());
            blocking(move || store.watermark(&shard)).await?
        };
        let current = placed_through.is_none_or(|placed| {
            watermark
                .as_ref()
                .is_some_and(|w| w.settings == description && w.through >= *placed)
        });
        // Every copy that can precede the first record: back to the
        // horizon, and forward past its arrival — records of one PutRecords
        // call share a millisecond, and arrival times within a shard may go
        // back a little. Copies that do not precede it are ignored by the
        // store's rule, so reading too far forward costs only the reading.
        let window = (
            first_arrival.saturating_sub(self.runtime.settings.rule.horizon_millis()),
            first_arrival
                .saturating_add(HORIZON_SLACK_MILLIS)
                .saturating_add(1),
        );
        // Each shard behind, with the batches of it that are committed: the
        // shard's placed records; an ancestor's every record (it ended).
        let mut behind: Vec<(Arc<str>, Committed)> = Vec::new();
        if !current {
            info!(shard_id = %shard, watermark = ?watermark.as_ref().map(|w| w.through.to_string()), placed_through = ?placed_through.map(ToString::to_string), "event store behind the archive; rebuilding the window from S3");
            behind.push((shard.clone(), self.source.committed(placed_through)));
        }
        for ancestor in &self.lineage.ancestors {
            let (store, id, description) = (store.clone(), ancestor.clone(), description.clone());
            if !blocking(move || store.is_ended(&id, &description)).await? {
                behind.push((ancestor.clone(), self.source.committed(None)));
            }
        }
        for (shard_id, committed) in behind {
            rebuild(
                &self.source,
                store,
                &shard_id,
                window,
                &committed,
                &description,
                stop,
            )
            .await?;
        }
        if let (false, Some(placed)) = (current, placed_through) {
            let watermark = Watermark {
                settings: description,
                through: placed.clone(),
            };
            let store = store.clone();
            blocking(move || store.set_watermark(&shard, &watermark)).await?;
        }
        Ok(())
    }

    /// Records in the store the copies `recorded` accepted (decisions read
    /// back from S3, so that later decisions see them).
    ///
    /// # Errors
    /// [`EventError`] when the store fails.
    pub async fn adopt(
        &mut self,
        recorded: &[RecordedDecision],
        stop: &CancellationToken,
    ) -> Result<(), EventError> {
        let copies: Vec<(EventKey, AcceptedCopy)> = recorded
            .iter()
            .filter_map(|r| Some((r.decision.key?, r.accepted()?)))
            .collect();
        match &self.runtime.store {
            EventStore::Local(store) => {
                let store = store.clone();
                blocking(move || store.insert(&copies)).await
            }
            EventStore::DynamoDb(store) => {
                let rule = &self.runtime.settings.rule;
                with_dynamodb(store, &self.source.metrics, stop, || {
                    store.insert(rule, &copies)
                })
                .await
            }
            #[cfg(test)]
            EventStore::Memory(store) => {
                store.insert(&copies);
                Ok(())
            }
        }
    }

    /// The shard was read to its end: with the local store, its copies are
    /// complete here for its children.
    ///
    /// # Errors
    /// [`EventError`] when the store fails.
    pub async fn shard_ended(&self) -> Result<(), EventError> {
        if let EventStore::Local(store) = &self.runtime.store {
            let (store, shard, description) = (
                store.clone(),
                self.lineage.shard_id.clone(),
                self.runtime.description.clone(),
            );
            blocking(move || store.mark_ended(&shard, &description)).await?;
        }
        Ok(())
    }
}

impl ShardEvents {
    /// What deciding `records` (one GetRecords response) holds in memory at
    /// most, bytes — an estimate from the types' sizes, counted against the
    /// memory budget with the response: per user record, its candidate
    /// (with a copy of its sequence number), its key, its decision and the
    /// decision handed back, and the store's working set for it
    /// ([`STORE_BYTES_PER_CANDIDATE`]).
    pub fn deciding_bytes(records: &[ShardRecord]) -> u64 {
        const EACH: u64 = (std::mem::size_of::<Candidate>()
            + std::mem::size_of::<Option<EventKey>>()
            + std::mem::size_of::<Decision>()
            + std::mem::size_of::<UserDecision>()) as u64
            + STORE_BYTES_PER_CANDIDATE;
        records
            .iter()
            .map(|record| {
                let users = record.user_record_count() as u64;
                users * (EACH + record.sequence_number.as_str().len() as u64)
            })
            .sum()
    }
}

/// What a store's decide call holds per candidate, bytes: the local
/// store's slot (its map entry and the copies read for the key, often a
/// few), the run's value of an accepted copy, and the recent keys' entry.
pub const STORE_BYTES_PER_CANDIDATE: u64 = 256;

/// Runs a DynamoDB store call, retrying it as its errors say until `stop` is
/// cancelled; a table found missing (deleted while running) is created
/// again — empty: the window starts over — and the call made again.
async fn with_dynamodb<T, F, Fut>(
    store: &DynamoDbStore,
    metrics: &Metrics,
    stop: &CancellationToken,
    call: F,
) -> Result<T, EventError>
where
    F: Fn() -> Fut + Send + Sync,
    Fut: std::future::Future<Output = Result<T, DynamoDbStoreError>> + Send,
    T: Send,
{
    loop {
        let result = Retry::new("DynamoDB store")
            .metrics(metrics)
            .until(stop)
            .run(&call)
            .await;
        match result {
            Ok(value) => return Ok(value),
            Err(Stopped::Final(DynamoDbStoreError::TableMissing { table })) => {
                warn!(
                    table,
                    "DynamoDB event table missing; creating it again (accepted copies recorded before are forgotten)"
                );
                Retry::new("create the DynamoDB event table")
                    .metrics(metrics)
                    .until(stop)
                    .retry_final()
                    .run(|| store.ensure_table())
                    .await
                    .map_err(EventError::DynamoDb)?;
            }
            Err(stopped) => return Err(EventError::DynamoDb(stopped)),
        }
    }
}

/// Runs a local store call off the async threads.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, LocalStoreError> + Send + 'static,
) -> Result<T, EventError> {
    match tokio::task::spawn_blocking(call).await {
        Ok(result) => result.map_err(EventError::Local),
        Err(join) => Err(EventError::Join(join)),
    }
}
