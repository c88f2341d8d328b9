//! [`Epochs`]: the `copies` keys split by when they were written, one
//! fjall keyspace per *epoch* of [`EPOCH_KEYS`] writes, so that old keys
//! leave by whole keyspaces and new ones are never merged with old ones.
//!
//! Event ids are hashes: in one keyspace, each table flushed from the
//! memtable spans the whole key range, so every merge of level 0 rewrites
//! the level below, and each key is rewritten about ten times on its way
//! down a tree of 10 million keys (about two thirds of the store's CPU).
//! Split by epochs, a keyspace holds a few memtables' worth of keys and is
//! never written again once the next epoch starts: a key is written to
//! disk once, and an epoch is deleted whole
//! ([`fjall::Database::delete_keyspace`]) when every shard with keys in it
//! has its horizon past the newest copy it wrote there — looked at each
//! time an epoch starts. A shard that stops deciding here (its lease moved,
//! it ended, its stream went quiet) keeps the epochs holding its last
//! copies until it is forgotten (`LocalOptions::forget_after` without a
//! write, at the store's next open).
//!
//! A key may be in several epochs: each holds the copies accepted while it
//! was the write epoch. A read gathers the copies of all the epochs that
//! hold keys of the key's tenant (a few; most reads are skipped by the
//! in-memory filters, `filter`), oldest first, the write epoch last.
//!
//! Names: epoch 0 is the keyspace `copies` (a store written before epochs
//! holds all its keys there), epoch `n` the keyspace `copies.{n}`.
//!
//! Concurrency: a `decide` or `insert` holds the epochs' read lock
//! ([`Epochs::read`]) from its reads to its commit, so an epoch is neither
//! replaced as the write epoch nor deleted while a call uses it; starting
//! an epoch and deleting old ones take the write lock between calls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};

use fjall::compaction::Leveled;
use fjall::config::CompressionPolicy;
use fjall::{Database, Keyspace, KeyspaceCreateOptions};

use super::tenants::Tenants;

/// The name prefix of the epochs' keyspaces (epoch 0's whole name).
pub const PREFIX: &str = "copies";

/// The keyspace name of epoch `number`.
pub fn name(number: u32) -> String {
    if number == 0 {
        PREFIX.to_owned()
    } else {
        format!("{PREFIX}.{number}")
    }
}

/// The epoch number of keyspace `name`; `None` when it is not an epoch's.
pub fn number(name: &str) -> Option<u32> {
    match name.strip_prefix(PREFIX)? {
        "" => Some(0),
        rest => rest.strip_prefix('.')?.parse().ok(),
    }
}

/// The options of a new epoch's keyspace (fjall keeps a keyspace's
/// options; these apply when it is created).
pub fn create_options(memtable_bytes: u64) -> KeyspaceCreateOptions {
    // Most reads look for new ids: keep Bloom filters on the last level
    // too (fjall's default filter policy: 0.01 % false positives on level
    // 0, 10 bits per key below).
    KeyspaceCreateOptions::default()
        .expect_point_read_hits(false)
        .max_memtable_size(memtable_bytes)
        // Ids are hashes: blocks barely compress.
        .data_block_compression_policy(CompressionPolicy::disabled())
        // An epoch's flushed tables all overlap (random ids). An epoch
        // ends after about eight flushes of the default memtable, so with
        // merges at 16 level-0 tables (fjall slows writes from 20) its keys
        // are written to disk once and never merged; reads, rare behind
        // the filters and the recent keys, probe each table's Bloom filter.
        .compaction_strategy(Arc::new(
            Leveled::default()
                .with_l0_threshold(16)
                .with_table_target_size(32 * 1024 * 1024),
        ))
}

/// One epoch: its keyspace and what was written to it.
pub struct Epoch {
    /// The epoch's number; later epochs have larger ones.
    pub number: u32,
    /// Its keyspace.
    pub keyspace: Keyspace,
    /// Keys written to it (counted at open by the scan, then per write; a
    /// key written twice counts twice).
    keys: AtomicU64,
    /// The newest arrival (ms since the epoch) written to it per tenant:
    /// the tenants with keys in it, and when it can go.
    newest: Mutex<HashMap<u32, i64>>,
}

impl Epoch {
    fn new(number: u32, keyspace: Keyspace) -> Self {
        Self {
            number,
            keyspace,
            keys: AtomicU64::new(0),
            newest: Mutex::new(HashMap::new()),
        }
    }

    /// Records that `keys` keys were written, the newest copy of `tenant`
    /// among them arriving at `newest` (ms since the epoch).
    pub fn note_written(&self, tenant: u32, keys: u64, newest: i64) {
        self.keys.fetch_add(keys, Ordering::Relaxed);
        let mut map = self.newest.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = map.entry(tenant).or_insert(newest);
        *entry = (*entry).max(newest);
    }

    /// Whether the epoch holds keys of `tenant`.
    pub fn holds(&self, tenant: u32) -> bool {
        self.newest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&tenant)
    }

    /// Whether no copy in it can be consulted any more: each tenant with
    /// keys here has a horizon past its newest copy here (a forgotten
    /// shard's horizon is past every copy).
    fn expired(&self, horizons: &HashMap<u32, i64>) -> bool {
        self.newest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .all(|(tenant, newest)| !Tenants::keeps(horizons.get(tenant).copied(), *newest))
    }
}

/// The epochs of a store, oldest first; the last takes the writes.
pub struct Epochs {
    list: RwLock<Vec<Arc<Epoch>>>,
    memtable_bytes: u64,
    epoch_keys: u64,
}

impl Epochs {
    /// Opens the epochs' keyspaces found in `db`, or creates epoch 0; new
    /// epochs get memtables of `memtable_bytes`, and the next epoch starts
    /// after `epoch_keys` writes.
    ///
    /// # Errors
    /// fjall's, when a keyspace cannot be opened or created.
    pub fn open(db: &Database, memtable_bytes: u64, epoch_keys: u64) -> fjall::Result<Self> {
        let mut numbers: Vec<u32> = db
            .list_keyspace_names()
            .iter()
            .filter_map(|name| number(name))
            .collect();
        numbers.sort_unstable();
        if numbers.is_empty() {
            numbers.push(0);
        }
        let list = numbers
            .into_iter()
            .map(|number| {
                let keyspace = db.keyspace(&name(number), || create_options(memtable_bytes))?;
                Ok(Arc::new(Epoch::new(number, keyspace)))
            })
            .collect::<fjall::Result<_>>()?;
        Ok(Self {
            list: RwLock::new(list),
            memtable_bytes,
            epoch_keys: epoch_keys.max(1),
        })
    }

    /// The epochs, oldest first, the write epoch last; held by a call from
    /// its reads to its commit.
    pub fn read(&self) -> RwLockReadGuard<'_, Vec<Arc<Epoch>>> {
        // Updates replace or remove whole entries: a panic cannot leave the
        // list half-updated.
        self.list.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the next epoch when the write epoch is full, then deletes the
    /// older epochs that have expired under `horizons` (so deletions are
    /// looked at once per epoch written). Call with no read guard held.
    /// Returns how many epochs were deleted.
    ///
    /// # Errors
    /// fjall's, when the new keyspace cannot be created (the write epoch
    /// goes on taking writes; the next call tries again) or an old one
    /// deleted (it stays in the list and is tried again at the next
    /// epoch's start).
    pub fn maintain(
        &self,
        db: &Database,
        horizons: impl FnOnce() -> HashMap<u32, i64>,
    ) -> fjall::Result<usize> {
        let full = |list: &[Arc<Epoch>]| {
            list.last()
                .is_some_and(|last| last.keys.load(Ordering::Relaxed) >= self.epoch_keys)
        };
        if !full(&self.read()) {
            return Ok(0);
        }
        let mut list = self.list.write().unwrap_or_else(PoisonError::into_inner);
        if !full(&list) {
            return Ok(0);
        }
        let next = list.last().map_or(0, |last| last.number.saturating_add(1));
        let keyspace = db.keyspace(&name(next), || create_options(self.memtable_bytes))?;
        list.push(Arc::new(Epoch::new(next, keyspace)));
        let horizons = horizons();
        let write_epoch = list.len() - 1;
        let mut deleted = 0;
        let mut failed = None;
        let mut index = 0;
        while index < write_epoch - deleted {
            if failed.is_none() && list[index].expired(&horizons) {
                match db.delete_keyspace(list[index].keyspace.clone()) {
                    Ok(()) => {
                        list.remove(index);
                        deleted += 1;
                        continue;
                    }
                    Err(error) => failed = Some(error),
                }
            }
            index += 1;
        }
        failed.map_or(Ok(deleted), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_round_trip() {
        for n in [0, 1, 7, 123_456, u32::MAX] {
            assert_eq!(number(&name(n)), Some(n));
        }
        assert_eq!(name(0), "copies");
        assert_eq!(name(3), "copies.3");
        for other in [
            "shards",
            "copies.",
            "copies.x",
            "copiesX",
            "copies3",
            "copies.-1",
        ] {
            assert_eq!(number(other), None, "{other}");
        }
    }
}
