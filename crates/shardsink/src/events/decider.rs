//! [`ShardEvents`]: a shard task's event decisions — keys computed from each
//! user record, decided by the process's store ([`EventRuntime`]) in runs,
//! and decisions read back from S3 adopted into the store.

use std::sync::Arc;

use sequence_range::SequenceNumber;

use super::decisions::{RecordedDecision, UserDecision, settings_description};
#[cfg(test)]
use super::memory::MemoryStore;
use super::rule::{Decision, Outcome};
use super::store::{Candidate, Lineage};
use crate::config::EventSettings;
use crate::read::record::ShardRecord;

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
    /// In memory (tests).
    #[cfg(test)]
    Memory(MemoryStore),
}

/// Why a store call failed; the shard task retries with backoff.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The store failed.
    #[error("event store failed: {0}")]
    Store(String),
}

/// One shard's event decisions.
#[derive(Debug)]
pub struct ShardEvents {
    runtime: Arc<EventRuntime>,
    lineage: Lineage,
}

impl ShardEvents {
    /// Decisions for the shard and ancestors of `lineage`.
    pub fn new(runtime: Arc<EventRuntime>, lineage: Lineage) -> Self {
        Self { runtime, lineage }
    }

    /// Sets the shard's ancestors, nearest first.
    pub fn set_ancestors(&mut self, ancestors: Vec<String>) {
        self.lineage.ancestors = ancestors.into_iter().map(Arc::from).collect();
    }

    /// The shared runtime.
    pub fn runtime(&self) -> &Arc<EventRuntime> {
        &self.runtime
    }

    /// Decides `records` (consecutive records of the shard, in order): one
    /// list per record, one [`UserDecision`] per user record. Accepted copies
    /// are in the store when this returns. `placed_through`: the last
    /// record before them known to be placed in S3 (checkpoint or records
    /// found there), for the store's check that it is not behind.
    ///
    /// # Errors
    /// [`EventError`] when the store fails.
    // Until the stores are wired in, only the test store exists.
    #[cfg_attr(not(test), allow(unreachable_code, unused_variables))]
    pub async fn decide(
        &mut self,
        records: &[ShardRecord],
        placed_through: Option<&SequenceNumber>,
    ) -> Result<Vec<Vec<UserDecision>>, EventError> {
        let _ = placed_through;
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
                        copy: super::rule::CopyRef {
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
        let decided: Vec<Decision> = match self.runtime.store {
            #[cfg(test)]
            EventStore::Memory(ref store) => {
                store.decide(&self.lineage, &settings.rule, &candidates)
            }
        };
        let mut decided = decided.into_iter();
        Ok(keys
            .into_iter()
            .map(|record_keys| {
                record_keys
                    .into_iter()
                    .map(|key| UserDecision {
                        key,
                        decision: match key {
                            Some(_) => decided.next().unwrap_or(Decision::Keep(Outcome::Unique)),
                            None => Decision::Keep(Outcome::IdMissing),
                        },
                    })
                    .collect()
            })
            .collect())
    }

    /// Records in the store the copies `recorded` accepted (decisions read
    /// back from S3, so that later decisions see them).
    ///
    /// # Errors
    /// [`EventError`] when the store fails.
    #[cfg_attr(not(test), allow(unreachable_code, unused_variables))]
    pub async fn adopt(&mut self, recorded: &[RecordedDecision]) -> Result<(), EventError> {
        let copies: Vec<_> = recorded
            .iter()
            .filter_map(|r| Some((r.decision.key?, r.accepted()?)))
            .collect();
        match self.runtime.store {
            #[cfg(test)]
            EventStore::Memory(ref store) => store.insert(&copies),
        }
        Ok(())
    }
}
