//! [`LocalStore`]: the accepted copies of events per shard, the shards'
//! watermarks and ended marks, in a `fjall` database (an LSM tree: see the
//! `fjall` crate docs, <https://docs.rs/fjall/3>) under one directory.
//!
//! Keyspaces (fjall's column families), laid out in `codec`: the `copies`
//! keys, one per shard's tenant and event id, split into one keyspace per
//! epoch of writes (`epochs`; point reads, skipped when the in-memory
//! filters (`filter`) know the id is new, else sent to the epochs from the
//! one the filters name, and answered by fjall's Bloom filters when the
//! key is not there); the write epoch's keys as runs, one entry per call,
//! with their index in memory (`runs`), until the epoch closes and its
//! keys are loaded into its keyspace; and `shards` (a few keys per shard). Reads leave out
//! copies below their shard's horizon, so when compaction or an epoch's
//! deletion drops them changes no decision.
//! The store is a cache: a shard it does not know, or knows only up to an
//! older watermark, is rebuilt by the caller from the archive with
//! [`LocalStore::insert`]. Opening, the shared state and its locks are
//! here; deciding and inserting are in `decide`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode};
use xxhash_rust::xxh3::xxh3_64;

use crate::codec::{self, Tag};
use crate::epochs::{self, Epochs, Limits, OpenError};
use crate::error::LocalStoreError;
use crate::expiry;
use crate::filter::{Builder, Filters, MIN_GENERATION_KEYS};
use crate::options::LocalOptions;
use crate::recent::Recent;
use crate::tenants::{FORGOTTEN, Tenants};

/// The journal's bound (fjall's minimum), 64 MiB: past it, fjall flushes
/// the memtables holding its oldest part.
const JOURNAL_BYTES: u64 = 64 * 1024 * 1024;

/// Memtable size of the small `shards` keyspace.
const SHARDS_MEMTABLE_BYTES: u64 = 1024 * 1024;

/// Locks that serialize the writers of one shard's keys (read, merge,
/// write back); shards share them by hash.
const LOCK_STRIPES: usize = 64;

/// The keyspace of per-shard facts.
const SHARDS: &str = "shards";

/// The local event store. Cheap to clone (one `Arc`); `Send + Sync`: shard
/// tasks share it, writes to one shard are serialized.
#[derive(Clone)]
pub struct LocalStore {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalStore")
            .field("path", &self.path())
            .finish_non_exhaustive()
    }
}

/// The store's state, shared by its clones.
pub(crate) struct Inner {
    /// The directory.
    pub(crate) path: PathBuf,
    pub(crate) db: Database,
    /// The `copies` keyspaces, one per epoch.
    pub(crate) epochs: Epochs,
    /// The `shards` keyspace.
    pub(crate) shards: Keyspace,
    /// The shards' tenants and horizons, shared with the compaction filter.
    pub(crate) tenants: Tenants,
    /// The in-memory filters of the `copies` keys, by tenant.
    pub(crate) filters: Filters,
    /// Locks that serialize the writers of a shard's keys, each guarding
    /// the recent keys of the shards that share it.
    pub(crate) stripes: Vec<Mutex<Recent>>,
}

impl LocalStore {
    /// Opens or creates the store in `dir` (created if missing), then
    /// forgets the shards not written for [`LocalOptions::forget_after`].
    ///
    /// # Errors
    /// [`LocalStoreError::CreateDir`], [`LocalStoreError::Locked`] when
    /// another store has it open, [`LocalStoreError::Open`] when fjall
    /// cannot recover it, [`LocalStoreError::Storage`] and
    /// [`LocalStoreError::Corrupt`] while reading the shards' facts.
    pub fn open(dir: &Path, options: LocalOptions) -> Result<Self, LocalStoreError> {
        let path = dir.to_path_buf();
        std::fs::create_dir_all(dir).map_err(|source| LocalStoreError::CreateDir {
            path: path.clone(),
            source,
        })?;
        let open_error = |source| match source {
            fjall::Error::Locked => LocalStoreError::Locked { path: path.clone() },
            source => LocalStoreError::Open {
                path: path.clone(),
                source,
            },
        };
        let tenants = Tenants::default();
        let factory = expiry::factory(&tenants);
        let db = Database::builder(dir)
            .cache_size(options.cache_bytes)
            .worker_threads(options.worker_threads.max(1))
            // Bounds the memtables not yet flushed, those of past epochs
            // among them: fjall flushes the oldest when its journal would
            // exceed this.
            .max_journaling_size(JOURNAL_BYTES)
            // The write epoch's runs are large values of ids and packed
            // digits, which barely compress.
            .journal_compression(fjall::CompressionType::None)
            .with_compaction_filter_factories(Arc::new(move |keyspace: &str| {
                epochs::number(keyspace).map(|_| Arc::clone(&factory))
            }))
            .open()
            .map_err(open_error)?;
        let epochs = Epochs::open(
            &db,
            Limits {
                memtable_bytes: options.memtable_bytes,
                epoch_keys: options.epoch_keys,
                epoch_value_bytes: options.epoch_value_bytes,
            },
        )
        .map_err(|error| match error {
            OpenError::Fjall(source) => open_error(source),
            OpenError::CorruptRun(keyspace, run) => LocalStoreError::Corrupt {
                path: path.clone(),
                key: format!("{keyspace}/run {run}"),
            },
        })?;
        let shards = db
            .keyspace(SHARDS, || {
                KeyspaceCreateOptions::default().max_memtable_size(SHARDS_MEMTABLE_BYTES)
            })
            .map_err(open_error)?;
        let inner = Inner {
            path,
            db,
            epochs,
            shards,
            tenants,
            filters: Filters::new(options.filter_bytes),
            stripes: (0..LOCK_STRIPES)
                .map(|_| Mutex::new(Recent::default()))
                .collect(),
        };
        inner.load_shards(options.forget_after)?;
        inner.build_filters()?;
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

impl Inner {
    /// The lock of `shard_id`'s writers.
    pub(crate) fn lock(&self, shard_id: &str) -> MutexGuard<'_, Recent> {
        // Each update of the recent keys is one whole insert or removal,
        // each true of the store, so a poisoned lock is as good.
        self.stripes[stripe(shard_id)]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The locks of several shards, taken in one order (no deadlock).
    pub(crate) fn lock_all<'a>(
        &self,
        shards: impl Iterator<Item = &'a str>,
    ) -> Vec<MutexGuard<'_, Recent>> {
        let mut stripes: Vec<usize> = shards.map(stripe).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes
            .into_iter()
            .map(|index| {
                self.stripes[index]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
            })
            .collect()
    }

    /// A batch flushed to the OS on commit.
    pub(crate) fn batch(&self) -> OwnedWriteBatch {
        self.db.batch().durability(Some(PersistMode::Buffer))
    }

    pub(crate) fn storage(&self, source: fjall::Error) -> LocalStoreError {
        LocalStoreError::Storage {
            path: self.path.clone(),
            source,
        }
    }

    pub(crate) fn corrupt_shard_key(&self, key: &[u8]) -> LocalStoreError {
        LocalStoreError::Corrupt {
            path: self.path.clone(),
            key: format!("{:?}", String::from_utf8_lossy(key)),
        }
    }

    /// The tenant of `shard_id`, given out (and recorded) when it has none
    /// yet.
    ///
    /// # Errors
    /// [`LocalStoreError::Storage`] when recording a new tenant fails.
    pub(crate) fn tenant(&self, shard_id: &str) -> Result<u32, LocalStoreError> {
        if let Some(tenant) = self.tenants.get(shard_id) {
            return Ok(tenant);
        }
        let mut map = self.tenants.write();
        if let Some(tenant) = map.by_shard.get(shard_id) {
            return Ok(*tenant);
        }
        let tenant = map.next;
        // Recorded before any copy is written under it (the journal keeps
        // the order), and before it is used.
        self.shards
            .insert(
                codec::shard_key(Tag::Tenant, shard_id),
                codec::encode_tenant(tenant),
            )
            .map_err(|source| self.storage(source))?;
        map.by_shard.insert(Box::from(shard_id), tenant);
        // Four billion shards are out of reach; should it happen, the last
        // tenant would be shared, mixing those shards' copies.
        map.next = tenant.saturating_add(1);
        Ok(tenant)
    }

    /// The horizon that applies to a write under `tenant`: none for a
    /// forgotten shard, which the write brings back
    /// ([`touch`](Self::touch)).
    pub(crate) fn live_horizon(&self, tenant: u32) -> Option<i64> {
        self.tenants
            .read()
            .horizons
            .get(&tenant)
            .copied()
            .filter(|horizon| *horizon != FORGOTTEN)
    }

    /// Builds the filters from the epochs' `copies` keyspaces: one generation per
    /// tenant holding its keys whose newest copy is not below its horizon
    /// (a value that does not decode is kept, so that reads report it).
    /// One scan; each generation is sized for the keys not yet scanned
    /// (fjall's estimate), then folded to fit its tenant's.
    fn build_filters(&self) -> Result<(), LocalStoreError> {
        let horizons = self.tenants.horizons();
        let mut tenants: Vec<u32> = self.tenants.read().by_shard.values().copied().collect();
        tenants.sort_unstable();
        let epochs = self.epochs.read();
        let mut left: u64 = epochs
            .iter()
            .map(|epoch| epoch.approximate_len() as u64)
            .sum();
        let first_epoch = epochs.first().map_or(0, |epoch| epoch.number);
        // One generation per tenant, from its keys in every epoch.
        for tenant in tenants {
            let keys = left.min(self.filters.room()).max(MIN_GENERATION_KEYS);
            let mut builder = Builder::new(keys, first_epoch);
            for epoch in epochs.iter() {
                let (mut count, mut newest_here) = (0, i64::MIN);
                epoch
                    .for_each_with_prefix(&tenant.to_be_bytes(), |key, value| {
                        let Some(id) = codec::key_id(key) else {
                            return;
                        };
                        count += 1;
                        let newest = codec::newest_arrival(value).unwrap_or(i64::MAX);
                        newest_here = newest_here.max(newest);
                        if Tenants::keeps(horizons.get(&tenant).copied(), newest) {
                            builder.insert(id, newest);
                        }
                    })
                    .map_err(|source| self.storage(source))?;
                if count > 0 {
                    epoch.note_written(tenant, count, newest_here);
                }
                left = left.saturating_sub(count);
            }
            self.filters.add_built(tenant, builder);
        }
        Ok(())
    }

    /// Starts the next epoch when the write epoch is full and deletes the
    /// expired ones ([`Epochs::maintain`]). A failure is logged, not
    /// returned: the call's batch has committed, the store stays usable
    /// (the full epoch goes on taking writes) and the next call tries again.
    pub(crate) fn maintain_epochs(&self) {
        match self.epochs.maintain(&self.db, || self.tenants.horizons()) {
            Ok(0) => {}
            Ok(deleted) => tracing::debug!(
                path = %self.path.display(),
                deleted,
                "event store deleted expired epochs"
            ),
            Err(error) => tracing::warn!(
                path = %self.path.display(),
                %error,
                "event store could not start its next epoch, load a past one into its keyspace or delete an expired one; trying again later"
            ),
        }
    }
}

/// The lock stripe of `shard_id`.
fn stripe(shard_id: &str) -> usize {
    // The remainder is below LOCK_STRIPES, so it fits.
    (xxh3_64(shard_id.as_bytes()) % LOCK_STRIPES as u64) as usize
}

#[cfg(test)]
mod tests;
