//! [`Epoch`]: one epoch of the `copies` keys — its keyspace, its runs and
//! their index while it is open, and what was written to it; loading its
//! keys into its keyspace when it closes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use fjall::{Database, Keyspace, OwnedWriteBatch};

use super::{Limits, OpenError, create_options, name, runs_name, runs_options};
use crate::runs::{self, Index, Run};
use crate::tenants::Tenants;

/// An epoch not yet loaded into its keyspace: its runs and their index.
pub(super) struct Open {
    runs: Keyspace,
    next_run: AtomicU64,
    index: RwLock<Index>,
}

impl Open {
    pub(super) fn new(runs: Keyspace, next_run: u64, index: Index) -> Self {
        Self {
            runs,
            next_run: AtomicU64::new(next_run),
            index: RwLock::new(index),
        }
    }
}

/// One epoch: its keyspace, its runs while open, and what was written to
/// it.
pub(crate) struct Epoch {
    /// The epoch's number; later epochs have larger ones.
    pub(crate) number: u32,
    /// Its keyspace, which holds its keys once it is closed.
    pub(crate) keyspace: Keyspace,
    /// Its runs and their index while it is open.
    open: RwLock<Option<Arc<Open>>>,
    /// Keys written to it (counted at open by the scan, then per write; a
    /// key written twice counts twice).
    pub(super) keys: AtomicU64,
    /// Bytes of values written to it while open (counted at open from its
    /// index, then per run applied).
    pub(super) value_bytes: AtomicU64,
    /// The newest arrival (ms since the epoch) written to it per tenant:
    /// the tenants with keys in it, and when it can go.
    newest: Mutex<HashMap<u32, i64>>,
}

impl Epoch {
    pub(super) fn new(number: u32, keyspace: Keyspace, open: Option<Open>) -> Self {
        Self {
            number,
            keyspace,
            value_bytes: AtomicU64::new(open.as_ref().map_or(0, |open| {
                open.index.read().map_or(0, |index| index.value_bytes())
            })),
            open: RwLock::new(open.map(Arc::new)),
            keys: AtomicU64::new(0),
            newest: Mutex::new(HashMap::new()),
        }
    }

    /// Creates epoch `number`, open, in `db`: its keyspace, then its runs
    /// keyspace (a crash between the two leaves an empty closed epoch).
    pub(super) fn create(db: &Database, number: u32, limits: Limits) -> fjall::Result<Self> {
        let memtable_bytes = limits.memtable_bytes;
        let keyspace = db.keyspace(&name(number), || create_options(memtable_bytes))?;
        let runs = db.keyspace(&runs_name(number), || runs_options(memtable_bytes))?;
        let index = Index::with_capacity(limits.epoch_keys);
        Ok(Self::new(number, keyspace, Some(Open::new(runs, 0, index))))
    }

    /// Opens epoch `number` found in `db`, its runs read into its index
    /// when it is open.
    pub(super) fn reopen(db: &Database, number: u32, limits: Limits) -> Result<Self, OpenError> {
        let memtable_bytes = limits.memtable_bytes;
        let keyspace = db.keyspace(&name(number), || create_options(memtable_bytes))?;
        if !db.keyspace_exists(&runs_name(number)) {
            return Ok(Self::new(number, keyspace, None));
        }
        let runs = db.keyspace(&runs_name(number), || runs_options(memtable_bytes))?;
        if !keyspace.is_empty()? {
            // Loaded before a crash kept its runs from being deleted.
            db.delete_keyspace(runs)?;
            return Ok(Self::new(number, keyspace, None));
        }
        let mut index = Index::with_capacity(limits.epoch_keys);
        let mut next_run = 0;
        for item in runs.iter() {
            let (key, value) = item.into_inner()?;
            let run = runs::run_number(&key)
                .ok_or_else(|| OpenError::CorruptRun(runs_name(number), u64::MAX))?;
            let entries = runs::entries(&value)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| OpenError::CorruptRun(runs_name(number), run))?;
            index.apply(entries);
            next_run = run + 1;
        }
        Ok(Self::new(
            number,
            keyspace,
            Some(Open::new(runs, next_run, index)),
        ))
    }

    pub(super) fn open(&self) -> Option<Arc<Open>> {
        // Replaced whole: a panic cannot leave it half-updated.
        self.open
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether the epoch is open: its keys in its runs and index, not yet
    /// in its keyspace.
    pub(crate) fn is_open(&self) -> bool {
        self.open().is_some()
    }

    /// Calls `f` with the value of `key` in this epoch, if any.
    ///
    /// # Errors
    /// fjall's, when reading a closed epoch's keyspace fails.
    pub(crate) fn with_value<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> fjall::Result<R> {
        if let Some(open) = self.open() {
            let index = open.index.read().unwrap_or_else(PoisonError::into_inner);
            return Ok(f(index.get(key)));
        }
        let value = self.keyspace.get(key)?;
        Ok(f(value.as_deref()))
    }

    /// Calls `f` with each key starting with `prefix` and its value, in
    /// key order when the epoch is closed, in no order when it is open.
    ///
    /// # Errors
    /// fjall's, when reading a closed epoch's keyspace fails.
    pub(crate) fn for_each_with_prefix(
        &self,
        prefix: &[u8],
        mut f: impl FnMut(&[u8], &[u8]),
    ) -> fjall::Result<()> {
        if let Some(open) = self.open() {
            let index = open.index.read().unwrap_or_else(PoisonError::into_inner);
            for (key, value) in index.iter() {
                if key.starts_with(prefix) {
                    f(&key, value);
                }
            }
            return Ok(());
        }
        for item in self.keyspace.prefix(prefix) {
            let (key, value) = item.into_inner()?;
            f(&key, &value);
        }
        Ok(())
    }

    /// About how many keys it holds (fjall's estimate once closed).
    pub(crate) fn approximate_len(&self) -> usize {
        match self.open() {
            Some(open) => open
                .index
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .len(),
            None => self.keyspace.approximate_len(),
        }
    }

    /// Adds the writes of `run` to `batch`: one entry of the runs keyspace
    /// while the epoch is open, else a write per key of its keyspace.
    /// Once the batch has committed, [`applied`](Self::applied) must be
    /// called with the same run, before the caller's read guard of the
    /// epochs is dropped.
    pub(crate) fn stage(&self, batch: &mut OwnedWriteBatch, run: &Run) {
        if run.is_empty() {
            return;
        }
        match self.open() {
            Some(open) => {
                let number = open.next_run.fetch_add(1, Ordering::Relaxed);
                batch.insert(&open.runs, runs::run_key(number), run.as_bytes());
            }
            None => {
                for (key, value) in run.entries() {
                    match value {
                        Some(value) => batch.insert(&self.keyspace, key.as_slice(), value),
                        None => batch.remove(&self.keyspace, key.as_slice()),
                    }
                }
            }
        }
    }

    /// Records in the index that `run`, [`stage`](Self::stage)d, has
    /// committed.
    pub(crate) fn applied(&self, run: &Run) {
        if let Some(open) = self.open() {
            open.index
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .apply(run.entries());
            self.value_bytes
                .fetch_add(run.value_bytes(), Ordering::Relaxed);
        }
    }

    /// Closes the epoch if it is open: loads its keys, sorted, into its
    /// keyspace (one bulk ingestion), then drops its index and deletes its
    /// runs keyspace. Call only once it is no longer the write epoch.
    ///
    /// # Errors
    /// fjall's: when the ingestion fails the epoch stays open (its keyspace
    /// gets none of it); when only the deletion fails, the next open
    /// deletes the runs keyspace.
    pub(super) fn close(&self, db: &Database) -> fjall::Result<()> {
        let Some(open) = self.open() else {
            return Ok(());
        };
        self.load(&open)?;
        *self.open.write().unwrap_or_else(PoisonError::into_inner) = None;
        // Readers may hold `open` a little longer; the keyspace handle
        // outlives the deletion of its files.
        db.delete_keyspace(open.runs.clone())
    }

    /// Loads the keys of `open`'s index, sorted, into the keyspace: one
    /// bulk ingestion, whose tables fjall registers at once when it
    /// finishes (nothing of it is visible before).
    pub(super) fn load(&self, open: &Open) -> fjall::Result<()> {
        let index = open.index.read().unwrap_or_else(PoisonError::into_inner);
        let mut ingestion = self.keyspace.start_ingestion()?;
        for (key, value) in index.sorted() {
            ingestion.write(key.as_slice(), value)?;
        }
        ingestion.finish()
    }

    /// Loads the open epoch's keys into its keyspace and stops there, as
    /// a crash before its runs keyspace is deleted would.
    #[cfg(test)]
    #[allow(clippy::unwrap_used)]
    pub(crate) fn load_without_closing(&self) {
        self.load(&self.open().unwrap()).unwrap();
    }

    /// Records that `keys` keys were written, the newest copy of `tenant`
    /// among them arriving at `newest` (ms since the epoch).
    pub(crate) fn note_written(&self, tenant: u32, keys: u64, newest: i64) {
        self.keys.fetch_add(keys, Ordering::Relaxed);
        let mut map = self.newest.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = map.entry(tenant).or_insert(newest);
        *entry = (*entry).max(newest);
    }

    /// Whether the epoch holds keys of `tenant`.
    pub(crate) fn holds(&self, tenant: u32) -> bool {
        self.newest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&tenant)
    }

    /// Whether no copy in it can be consulted any more: each tenant with
    /// keys here has a horizon past its newest copy here (a forgotten
    /// shard's horizon is past every copy).
    pub(super) fn expired(&self, horizons: &HashMap<u32, i64>) -> bool {
        self.newest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .all(|(tenant, newest)| !Tenants::keeps(horizons.get(tenant).copied(), *newest))
    }

    /// Deletes its keyspaces.
    pub(super) fn delete(&self, db: &Database) -> fjall::Result<()> {
        if let Some(open) = self.open() {
            db.delete_keyspace(open.runs.clone())?;
        }
        db.delete_keyspace(self.keyspace.clone())
    }
}
