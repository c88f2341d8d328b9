//! [`Epochs`]: the `copies` keys split by when they were written, one
//! fjall keyspace per *epoch* of writes (`Limits`), so that old keys
//! leave by whole keyspaces and new ones are never merged with old ones.
//!
//! Event ids are hashes: in one keyspace, each table flushed from the
//! memtable spans the whole key range, so every merge of level 0 rewrites
//! the level below, and each key is rewritten about ten times on its way
//! down a tree of 10 million keys (about two thirds of the store's CPU).
//! Split by epochs, a keyspace holds one epoch's keys, loaded once, sorted,
//! when the epoch closes, and never written again: a key reaches a table
//! once (besides the journal and, when its memtable fills, a table of its
//! run, deleted with the runs keyspace), and an epoch is deleted whole
//! ([`fjall::Database::delete_keyspace`]) when every shard with keys in it
//! has its horizon past the newest copy it wrote there — looked at each
//! time an epoch starts. A shard that stops deciding here (its lease moved,
//! it ended, its stream went quiet) keeps the epochs holding its last
//! copies until it is forgotten (`LocalOptions::forget_after` without a
//! write, at the store's next open).
//!
//! fjall's own FIFO compaction, which also drops whole tables (by size or
//! by a TTL on their age), needs keys written in increasing order and
//! panics on hashed ones; with time-bucketed keys it decided at a quarter
//! to two fifths of the speed (`benches/fifo.rs`, `benches/README.md`).
//!
//! This module keeps the list of epochs, starts and deletes them; `epoch`
//! is one epoch.
//!
//! While an epoch takes writes it is *open*: its keys are written as runs,
//! one fjall entry per call in the epoch's runs keyspace, and read from an
//! in-memory index (`runs`). Once the next epoch has started, the open
//! epoch is *closed*: its keys, sorted, are loaded into its `copies`
//! keyspace by fjall's bulk ingestion, then its index is dropped and its
//! runs keyspace deleted (by whichever call finds it open; one that fails
//! to load stays open, read from its index, and the next call tries
//! again). A crash before the ingestion finished leaves the
//! runs keyspace and an empty `copies` keyspace: the next open reads the
//! runs again and closes the epoch; a crash after it leaves a `copies`
//! keyspace that is not empty: the runs keyspace is deleted.
//!
//! A key may be in several epochs: each holds the copies accepted while it
//! was the write epoch. A read gathers the copies of all the epochs that
//! hold keys of the key's tenant (a few; most reads are skipped by the
//! in-memory filters, `filter`), oldest first, the write epoch last.
//!
//! Names: epoch 0 is the keyspace `copies` (a store written before epochs
//! holds all its keys there), epoch `n` the keyspace `copies.{n}`; the runs
//! keyspace of epoch `n` is `copies.{n}.runs`. An epoch without a runs
//! keyspace is closed (so are the epochs of a store written before runs).
//!
//! Concurrency: a `decide` or `insert` holds the epochs' read lock
//! ([`Epochs::read`]) from its reads to its commit and the index update
//! after it, so an epoch is neither replaced as the write epoch nor
//! deleted while a call uses it; starting an epoch and deleting old ones
//! take the write lock between calls. Closing an epoch needs no lock: no
//! call writes to it any more, and a read finds its keys in the index
//! until the ingestion has finished, in the keyspace after.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, TryLockError};

use fjall::compaction::Leveled;
use fjall::config::CompressionPolicy;
use fjall::{Database, KeyspaceCreateOptions};

mod epoch;

pub(crate) use self::epoch::Epoch;

/// The name prefix of the epochs' keyspaces (epoch 0's whole name).
pub(crate) const PREFIX: &str = "copies";

/// The name suffix of a runs keyspace.
const RUNS_SUFFIX: &str = ".runs";

/// The keyspace name of epoch `number`.
pub(crate) fn name(number: u32) -> String {
    if number == 0 {
        PREFIX.to_owned()
    } else {
        format!("{PREFIX}.{number}")
    }
}

/// The epoch number of keyspace `name`; `None` when it is not an epoch's.
pub(crate) fn number(name: &str) -> Option<u32> {
    match name.strip_prefix(PREFIX)? {
        "" => Some(0),
        rest => rest.strip_prefix('.')?.parse().ok(),
    }
}

/// The name of epoch `number`'s runs keyspace.
pub(crate) fn runs_name(number: u32) -> String {
    format!("{PREFIX}.{number}{RUNS_SUFFIX}")
}

/// The epoch number of runs keyspace `name`; `None` when it is not a runs
/// keyspace.
pub(crate) fn runs_number(name: &str) -> Option<u32> {
    name.strip_prefix(PREFIX)?
        .strip_prefix('.')?
        .strip_suffix(RUNS_SUFFIX)?
        .parse()
        .ok()
}

/// The options of a new epoch's keyspace (fjall keeps a keyspace's
/// options; these apply when it is created).
pub(crate) fn create_options(memtable_bytes: u64) -> KeyspaceCreateOptions {
    // Most reads look for new ids: keep Bloom filters on the last level
    // too (fjall's default filter policy: 0.01 % false positives on level
    // 0, 10 bits per key below; an epoch's keys, loaded by bulk ingestion,
    // get the level-1 policy, about 1 %, and are not pinned: reads that get
    // past the in-memory filters are rare).
    KeyspaceCreateOptions::default()
        .expect_point_read_hits(false)
        .max_memtable_size(memtable_bytes)
        // Ids are hashes: blocks barely compress.
        .data_block_compression_policy(CompressionPolicy::disabled())
        // An epoch's keys are loaded once, sorted, when it closes (and a
        // store written before runs has epochs of flushed memtables, which
        // all overlap): merges at 16 level-0 tables (fjall slows writes
        // from 20) keep them from being rewritten; reads, rare behind the
        // filters and the recent keys, probe each table's Bloom filter.
        .compaction_strategy(Arc::new(
            Leveled::default()
                .with_l0_threshold(16)
                .with_table_target_size(32 * 1024 * 1024),
        ))
}

/// The options of a new runs keyspace: a few large values, read back only
/// when the store opens.
fn runs_options(memtable_bytes: u64) -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default()
        .max_memtable_size(memtable_bytes)
        // Mostly ids and packed digits: they barely compress.
        .data_block_compression_policy(CompressionPolicy::disabled())
}

/// When an epoch is full, and the memtable size of new ones.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Memtable size of a new epoch's keyspaces, bytes.
    pub(crate) memtable_bytes: u64,
    /// Key writes to an epoch before the next starts (at least 1).
    pub(crate) epoch_keys: u64,
    /// Bytes of values written to an epoch before the next starts: bounds
    /// its index when keys are written again and again (each write of a
    /// key holds all its copies of the epoch, and the index keeps replaced
    /// values until the epoch closes).
    pub(crate) epoch_value_bytes: u64,
}

/// How opening the epochs fails.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// fjall's error.
    Fjall(fjall::Error),
    /// A run that does not decode: the keyspace's name and the run's
    /// number.
    CorruptRun(String, u64),
}

impl From<fjall::Error> for OpenError {
    fn from(error: fjall::Error) -> Self {
        Self::Fjall(error)
    }
}

/// The number of the epoch after the last of `list` (0 for none).
fn next_number(list: &[Arc<Epoch>]) -> u32 {
    list.last().map_or(0, |last| last.number.saturating_add(1))
}

/// The epochs of a store, oldest first; the last takes the writes.
pub(crate) struct Epochs {
    list: RwLock<Vec<Arc<Epoch>>>,
    /// Held by the call closing epochs, so that one call does.
    closing: Mutex<()>,
    limits: Limits,
}

impl Epochs {
    /// Opens the epochs' keyspaces found in `db` (the open ones' runs read
    /// into their indexes, runs keyspaces of no epoch deleted), starts a
    /// new write epoch when the last is closed or there is none, and
    /// closes the epochs left open before the last (one that fails to
    /// close is logged and stays open, its keys read from its index, and
    /// is tried again by [`maintain`](Self::maintain)). New epochs and
    /// their fullness follow `limits`.
    ///
    /// # Errors
    /// [`OpenError::Fjall`] when a keyspace cannot be opened, created or
    /// deleted; [`OpenError::CorruptRun`] for a run that does not decode.
    pub(crate) fn open(db: &Database, limits: Limits) -> Result<Self, OpenError> {
        let limits = Limits {
            epoch_keys: limits.epoch_keys.max(1),
            ..limits
        };
        let names = db.list_keyspace_names();
        let mut numbers: Vec<u32> = names.iter().filter_map(|name| number(name)).collect();
        numbers.sort_unstable();
        for orphan in names
            .iter()
            .filter_map(|name| runs_number(name))
            .filter(|number| !numbers.contains(number))
        {
            let runs = db.keyspace(&runs_name(orphan), || runs_options(limits.memtable_bytes))?;
            db.delete_keyspace(runs)?;
        }
        let mut list = numbers
            .into_iter()
            .map(|number| Epoch::reopen(db, number, limits).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        if !list.last().is_some_and(|last| last.is_open()) {
            let epoch = Epoch::create(db, next_number(&list), limits)?;
            list.push(Arc::new(epoch));
        }
        let epochs = Self {
            list: RwLock::new(list),
            closing: Mutex::new(()),
            limits,
        };
        if let Err(error) = epochs.close_past(db) {
            tracing::warn!(
                %error,
                "event store could not load a past epoch into its keyspace; its keys stay in memory until it can"
            );
        }
        Ok(epochs)
    }

    /// The epochs, oldest first, the write epoch last; held by a call from
    /// its reads to its commit.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Vec<Arc<Epoch>>> {
        // Updates replace or remove whole entries: a panic cannot leave the
        // list half-updated.
        self.list.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the next epoch when the write epoch is full, closes the
    /// epochs before it that are still open (whichever call finds them),
    /// and when an epoch started, deletes the older epochs that have
    /// expired under `horizons` (so deletions are looked at once per epoch
    /// written). Call with no read guard held. Returns how many epochs
    /// were deleted.
    ///
    /// # Errors
    /// fjall's, when the new keyspaces cannot be created (the write epoch
    /// goes on taking writes; the next call tries again), an epoch cannot
    /// be closed (it stays open, read from its index, and the next call
    /// tries again) or an old one deleted (it stays in the list and is
    /// tried again at the next epoch's start); the first such error, after
    /// doing the rest.
    pub(crate) fn maintain(
        &self,
        db: &Database,
        horizons: impl FnOnce() -> HashMap<u32, i64>,
    ) -> fjall::Result<usize> {
        let limits = self.limits;
        let full = |list: &[Arc<Epoch>]| {
            list.last().is_some_and(|last| {
                last.keys.load(Ordering::Relaxed) >= limits.epoch_keys
                    || last.value_bytes.load(Ordering::Relaxed) >= limits.epoch_value_bytes
            })
        };
        let started = full(&self.read()) && {
            let mut list = self.list.write().unwrap_or_else(PoisonError::into_inner);
            full(&list) && {
                let epoch = Epoch::create(db, next_number(&list), limits)?;
                list.push(Arc::new(epoch));
                true
            }
        };
        let closed = self.close_past(db);
        if !started {
            return closed.map(|()| 0);
        }
        let horizons = horizons();
        let mut list = self.list.write().unwrap_or_else(PoisonError::into_inner);
        let write_epoch = list.len() - 1;
        let mut deleted = 0;
        let mut failed = closed.err();
        let mut index = 0;
        while index < write_epoch - deleted {
            if list[index].expired(&horizons) {
                match list[index].delete(db) {
                    Ok(()) => {
                        list.remove(index);
                        deleted += 1;
                        continue;
                    }
                    Err(error) => {
                        failed.get_or_insert(error);
                    }
                }
            }
            index += 1;
        }
        failed.map_or(Ok(deleted), Err)
    }

    /// Keys an `insert` writes in one batch: an eighth of an epoch, so
    /// that a large insert (a rebuilt window) fills epochs in turn instead
    /// of one index of unbounded size.
    pub(crate) fn insert_chunk_keys(&self) -> usize {
        usize::try_from(self.limits.epoch_keys / 8)
            .unwrap_or(usize::MAX)
            .max(1)
    }

    /// Closes the epochs before the write epoch that are still open, unless
    /// another call is at it (that call closes them, or the next does).
    ///
    /// # Errors
    /// fjall's, from [`Epoch::close`], after trying every such epoch.
    fn close_past(&self, db: &Database) -> fjall::Result<()> {
        let past_open = || -> Vec<Arc<Epoch>> {
            let list = self.read();
            let before_write = list.len().saturating_sub(1);
            list[..before_write]
                .iter()
                .filter(|epoch| epoch.is_open())
                .cloned()
                .collect()
        };
        if past_open().is_empty() {
            return Ok(());
        }
        // A panic while closing leaves nothing half-done that matters: an
        // epoch is open until its load finished.
        let _closing = match self.closing.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(()),
        };
        let mut failed = None;
        for epoch in past_open() {
            if let Err(error) = epoch.close(db) {
                failed.get_or_insert(error);
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Poisons the lock of the call closing epochs, as a panic while
    /// closing would.
    #[cfg(test)]
    #[allow(clippy::unwrap_used)]
    pub(crate) fn poison_closing(&self) {
        std::thread::scope(|scope| {
            let _ = scope
                .spawn(|| {
                    let _guard = self.closing.lock().unwrap();
                    panic!("poisoning the closing lock");
                })
                .join();
        });
    }

    /// Closes every epoch, the write epoch too (its later writes then go
    /// to its keyspace key by key): the tests' way to have keys in
    /// keyspaces.
    #[cfg(test)]
    #[allow(clippy::unwrap_used)]
    pub(crate) fn close_all(&self, db: &Database) {
        for epoch in self.read().iter() {
            epoch.close(db).unwrap();
        }
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
        for n in [0, 1, 7, u32::MAX] {
            assert_eq!(runs_number(&runs_name(n)), Some(n));
            assert_eq!(number(&runs_name(n)), None, "a runs keyspace is no epoch");
        }
        assert_eq!(runs_name(3), "copies.3.runs");
        for other in ["copies.runs", "copies.3", "copies.x.runs", "shards"] {
            assert_eq!(runs_number(other), None, "{other}");
        }
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
