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
//! [`LocalStore::insert`].

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode};
use sequence_range::SequenceNumber;
use xxhash_rust::xxh3::xxh3_64;

use super::codec::{self, Tag};
use super::epochs::{self, Epoch, Epochs, Limits, OpenError};
use super::error::LocalStoreError;
use super::expiry;
use super::filter::{Builder, Filters, MIN_GENERATION_KEYS};
use super::options::LocalOptions;
use super::recent::{self, Recent};
use super::runs::Run;
use super::tenants::{FORGOTTEN, Tenants};
use crate::events::rule::{AcceptedCopy, CopyRef, Decision, EventKey, Rule};
use crate::events::store::{Candidate, Lineage, precedes_in_shard};

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
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalStore")
            .field("path", &self.path())
            .finish_non_exhaustive()
    }
}

/// The store's state, shared by its clones.
pub(super) struct Inner {
    /// The directory.
    pub(super) path: PathBuf,
    db: Database,
    /// The `copies` keyspaces, one per epoch.
    epochs: Epochs,
    /// The `shards` keyspace.
    pub(super) shards: Keyspace,
    /// The shards' tenants and horizons, shared with the compaction filter.
    pub(super) tenants: Tenants,
    /// The in-memory filters of the `copies` keys, by tenant.
    pub(super) filters: Filters,
    /// Locks that serialize the writers of a shard's keys, each guarding
    /// the recent keys of the shards that share it.
    stripes: Vec<Mutex<Recent>>,
}

/// What one `decide` call knows of one key: the copies read from the store
/// (`copies[..stored]`, those of the write epoch last:
/// `copies[stored - in_write_epoch..stored]`) and those it accepted since.
struct Slot {
    copies: Vec<AcceptedCopy>,
    stored: usize,
    in_write_epoch: usize,
    dirty: bool,
}

impl Slot {
    /// A slot of the copies read, `in_write_epoch` of them (the last) from
    /// the write epoch.
    fn read((copies, in_write_epoch): (Vec<AcceptedCopy>, usize)) -> Self {
        Self {
            stored: copies.len(),
            in_write_epoch,
            copies,
            dirty: false,
        }
    }

    /// The copies the write epoch is to hold for the key: those it held
    /// and those accepted since.
    fn for_write_epoch(&self) -> &[AcceptedCopy] {
        &self.copies[self.stored - self.in_write_epoch..]
    }

    /// What the store holds for the key once the call's batch committed,
    /// `write_epoch` being the epoch it wrote to.
    fn into_recent(self, write_epoch: u32) -> recent::Entry {
        let mut older = self.copies;
        let at = self.stored - self.in_write_epoch;
        // Most keys have all their copies in the write epoch: no copy.
        let in_epoch = if at == 0 {
            std::mem::take(&mut older)
        } else {
            older.split_off(at)
        };
        recent::Entry {
            older,
            in_epoch,
            epoch: write_epoch,
        }
    }
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

    /// Decides `candidates` of `lineage.shard_id`, in order, with `rule`.
    ///
    /// The prior accepted copies of a candidate's id are those stored under
    /// the shard that precede it ([`precedes_in_shard`]), all those stored
    /// under its ancestors, and those accepted earlier in this call. Each
    /// key is read from fjall at most once per call. Then, in one atomic
    /// batch, the accepted copies are stored (a copy already stored is not
    /// added again: a replay changes nothing) and the shard's watermark is
    /// set to `(settings, through)`; the journal is flushed to the OS, not
    /// synced — the batch survives the process being killed, and a tail
    /// lost with the machine only makes the store look behind.
    ///
    /// Returns one decision per candidate. Each candidate must be a copy of
    /// `lineage.shard_id`.
    ///
    /// # Errors
    /// [`LocalStoreError::Storage`] when a read or the batch fails (nothing
    /// is stored), [`LocalStoreError::Corrupt`] for a value that does not
    /// decode.
    pub fn decide(
        &self,
        lineage: &Lineage,
        rule: &Rule,
        settings: &str,
        candidates: &[Candidate],
        through: &SequenceNumber,
    ) -> Result<Vec<Decision>, LocalStoreError> {
        let inner = &*self.inner;
        let own = &lineage.shard_id;
        let mut recent = inner.lock(own);
        let own_tenant = inner.tenant(own)?;
        recent.start(own_tenant, std::time::Instant::now());
        let epochs = inner.epochs.read();
        let write_epoch = write_epoch(&epochs);
        let horizon = inner.live_horizon(own_tenant);
        // The shards whose copies count, and their tenants (an ancestor
        // without one has no copies here).
        let shards: Vec<(&Arc<str>, Option<u32>)> = std::iter::once((own, Some(own_tenant)))
            .chain(
                lineage
                    .ancestors
                    .iter()
                    .map(|ancestor| (ancestor, inner.tenants.get(ancestor))),
            )
            .collect();
        let mut slots: foldhash::HashMap<(u128, usize), Slot> =
            HashMap::with_capacity_and_hasher(candidates.len() * shards.len(), Default::default());
        let mut decisions = Vec::with_capacity(candidates.len());
        // Which keys fjall may hold: the others are not read.
        let tenants: Vec<Option<u32>> = shards.iter().map(|(_, tenant)| *tenant).collect();
        // The epochs holding keys of each shard.
        let holding: Vec<Vec<&Epoch>> = tenants
            .iter()
            .map(|tenant| holding(&epochs, *tenant))
            .collect();
        let maybe = inner.filters.probe(
            &tenants,
            candidates.iter().map(|candidate| candidate.key.id),
        );
        for (position, candidate) in candidates.iter().enumerate() {
            debug_assert_eq!(candidate.copy.shard_id, *own, "a copy of another shard");
            let id = candidate.key.id;
            for (index, (shard, tenant)) in shards.iter().enumerate() {
                if let Entry::Vacant(vacant) = slots.entry((id, index)) {
                    let read = match (tenant, maybe[position * shards.len() + index]) {
                        (Some(tenant), Some(first_epoch)) => {
                            match (index == 0).then(|| recent.get(own_tenant, id)).flatten() {
                                Some(known) => known.read(write_epoch.number, horizon),
                                None => inner.read_copies(
                                    from(&holding[index], first_epoch),
                                    write_epoch,
                                    &codec::copies_key(*tenant, id),
                                    shard,
                                )?,
                            }
                        }
                        _ => (Vec::new(), 0),
                    };
                    vacant.insert(Slot::read(read));
                }
            }
            // Invariant: the loop above filled every slot of this id.
            let slot = |index: usize| &slots[&(id, index)];
            let own_slot = slot(0);
            let (stored, this_call) = own_slot.copies.split_at(own_slot.stored);
            let prior = stored
                .iter()
                .filter(|copy| precedes_in_shard(&copy.copy, &candidate.copy))
                .chain(this_call)
                .chain((1..shards.len()).flat_map(|index| &slot(index).copies));
            let decision = rule.decide(&candidate.key, candidate.arrival_millis, prior);
            if decision.accepts()
                && let Some(own_slot) = slots.get_mut(&(id, 0))
            {
                let already = own_slot.copies[..own_slot.stored]
                    .iter()
                    .any(|copy| same_position(copy, candidate));
                if !already {
                    // Most keys get one copy.
                    own_slot.copies.reserve_exact(1);
                    own_slot.copies.push(candidate.accepted());
                    own_slot.dirty = true;
                }
            }
            decisions.push(decision);
        }

        let mut batch = inner.batch();
        let mut run = Run::with_capacity(candidates.len());
        let mut value = Vec::new();
        let mut written = Vec::new();
        for ((id, index), slot) in &slots {
            if !slot.dirty {
                continue;
            }
            debug_assert_eq!(*index, 0, "only the shard's own keys are written");
            let key = codec::copies_key(own_tenant, *id);
            if let Some(newest) =
                put_copies(&mut run, &key, slot.for_write_epoch(), horizon, &mut value)
            {
                written.push((*id, newest));
            }
        }
        write_epoch.stage(&mut batch, &run);
        // Before the batch commits: a filter never misses a stored key, an
        // epoch never forgets a tenant it holds.
        inner
            .filters
            .insert(own_tenant, &written, write_epoch.number);
        note_written(write_epoch, own_tenant, &written);
        batch.insert(
            &inner.shards,
            codec::shard_key(Tag::Watermark, own),
            codec::encode_watermark(settings, through),
        );
        inner.touch(&mut batch, own);
        batch.commit().map_err(|source| inner.storage(source))?;
        write_epoch.applied(&run);
        // What the store now holds for the shard's keys read or written.
        for ((id, index), slot) in slots {
            if index == 0 && (slot.dirty || slot.stored > 0) {
                recent.put(own_tenant, id, slot.into_recent(write_epoch.number));
            }
        }
        drop(epochs);
        drop(recent);
        inner.maintain_epochs();
        Ok(decisions)
    }

    /// Adds accepted copies decided elsewhere (rebuilt from the archive, or
    /// adopted from a decisions object), each under its copy's shard. A copy
    /// already stored (same shard, sequence number and sub-sequence number)
    /// is not added again. Atomic batches of at most an eighth of an epoch
    /// each (so that a rebuilt window fills epochs in turn), flushed to the
    /// OS as in [`decide`](Self::decide); after a failure, those before it
    /// are stored, and calling again with the same copies is safe.
    ///
    /// # Errors
    /// As [`decide`](Self::decide).
    pub fn insert(&self, copies: &[(EventKey, AcceptedCopy)]) -> Result<(), LocalStoreError> {
        for chunk in copies.chunks(self.inner.epochs.insert_chunk_keys()) {
            self.insert_batch(chunk)?;
        }
        Ok(())
    }

    /// One atomic batch of [`insert`](Self::insert).
    fn insert_batch(&self, copies: &[(EventKey, AcceptedCopy)]) -> Result<(), LocalStoreError> {
        let inner = &*self.inner;
        let mut shards: Vec<&Arc<str>> =
            copies.iter().map(|(_, copy)| &copy.copy.shard_id).collect();
        shards.sort();
        shards.dedup();
        let mut locks = inner.lock_all(shards.iter().map(|shard| &***shard));
        let mut tenants: HashMap<&str, u32> = HashMap::with_capacity(shards.len());
        for shard in &shards {
            tenants.insert(shard, inner.tenant(shard)?);
        }
        let epochs = inner.epochs.read();
        let write_epoch = write_epoch(&epochs);
        let holding: HashMap<u32, Vec<&Epoch>> = tenants
            .values()
            .map(|tenant| (*tenant, holding(&epochs, Some(*tenant))))
            .collect();
        let mut slots: HashMap<(u32, u128), (&Arc<str>, Slot)> =
            HashMap::with_capacity(copies.len());
        for (event, copy) in copies {
            let shard = &copy.copy.shard_id;
            // Invariant: every copy's shard got its tenant above.
            let tenant = tenants[&**shard];
            let (_, slot) = match slots.entry((tenant, event.id)) {
                Entry::Occupied(occupied) => occupied.into_mut(),
                Entry::Vacant(vacant) => {
                    let maybe = inner.filters.probe(&[Some(tenant)], [event.id].into_iter());
                    let read = match maybe.first().copied().flatten() {
                        Some(first_epoch) => inner.read_copies(
                            from(&holding[&tenant], first_epoch),
                            write_epoch,
                            &codec::copies_key(tenant, event.id),
                            shard,
                        )?,
                        None => (Vec::new(), 0),
                    };
                    vacant.insert((shard, Slot::read(read)))
                }
            };
            if !slot
                .copies
                .iter()
                .any(|other| same_copy(&other.copy, &copy.copy))
            {
                slot.copies.push(copy.clone());
                slot.dirty = true;
            }
        }
        let mut batch = inner.batch();
        let mut run = Run::default();
        let mut value = Vec::new();
        let mut written: HashMap<u32, Vec<(u128, i64)>> = HashMap::new();
        for ((tenant, id), (_, slot)) in &slots {
            if slot.dirty {
                let key = codec::copies_key(*tenant, *id);
                let horizon = inner.live_horizon(*tenant);
                if let Some(newest) =
                    put_copies(&mut run, &key, slot.for_write_epoch(), horizon, &mut value)
                {
                    written.entry(*tenant).or_default().push((*id, newest));
                }
            }
        }
        write_epoch.stage(&mut batch, &run);
        // Before the batch commits, as in `decide`; and whatever the batch
        // does, no recent entry is left to differ from the store.
        for (tenant, keys) in &written {
            inner.filters.insert(*tenant, keys, write_epoch.number);
            note_written(write_epoch, *tenant, keys);
        }
        for ((tenant, id), (_, slot)) in &slots {
            if slot.dirty {
                for recent in &mut locks {
                    recent.remove(*tenant, *id);
                }
            }
        }
        for shard in shards {
            inner.touch(&mut batch, shard);
        }
        batch.commit().map_err(|source| inner.storage(source))?;
        write_epoch.applied(&run);
        drop(epochs);
        drop(locks);
        inner.maintain_epochs();
        Ok(())
    }
}

impl Inner {
    /// The lock of `shard_id`'s writers.
    pub(super) fn lock(&self, shard_id: &str) -> MutexGuard<'_, Recent> {
        // Each update of the recent keys is one whole insert or removal,
        // each true of the store, so a poisoned lock is as good.
        self.stripes[stripe(shard_id)]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The locks of several shards, taken in one order (no deadlock).
    fn lock_all<'a>(&self, shards: impl Iterator<Item = &'a str>) -> Vec<MutexGuard<'_, Recent>> {
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
    pub(super) fn batch(&self) -> OwnedWriteBatch {
        self.db.batch().durability(Some(PersistMode::Buffer))
    }

    pub(super) fn storage(&self, source: fjall::Error) -> LocalStoreError {
        LocalStoreError::Storage {
            path: self.path.clone(),
            source,
        }
    }

    pub(super) fn corrupt_shard_key(&self, key: &[u8]) -> LocalStoreError {
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
    pub(super) fn tenant(&self, shard_id: &str) -> Result<u32, LocalStoreError> {
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
    pub(super) fn live_horizon(&self, tenant: u32) -> Option<i64> {
        self.tenants
            .read()
            .horizons
            .get(&tenant)
            .copied()
            .filter(|horizon| *horizon != FORGOTTEN)
    }

    /// The copies stored under `key` of `shard_id` in the epochs `holding`
    /// it (oldest first), but those below the horizon of the key's tenant
    /// (which no decision consults, wherever compaction and the epochs'
    /// deletion have got to), and how many of them (the last) are in
    /// `write_epoch`.
    fn read_copies(
        &self,
        holding: &[&Epoch],
        write_epoch: &Epoch,
        key: &[u8],
        shard_id: &Arc<str>,
    ) -> Result<(Vec<AcceptedCopy>, usize), LocalStoreError> {
        let horizon = codec::key_tenant(key).and_then(|tenant| self.live_horizon(tenant));
        let mut copies = Vec::new();
        let mut in_write_epoch = 0;
        for epoch in holding {
            let Some(found) = epoch
                .with_value(key, |value| {
                    value.map(|value| codec::decode_copies(value, shard_id))
                })
                .map_err(|source| self.storage(source))?
            else {
                continue;
            };
            let found = found.map_err(|_| LocalStoreError::Corrupt {
                path: self.path.clone(),
                key: codec::describe_copies_key(key, shard_id),
            })?;
            let before = copies.len();
            copies.extend(
                found
                    .into_iter()
                    .filter(|copy| Tenants::keeps(horizon, copy.arrival_millis)),
            );
            if std::ptr::eq(*epoch, write_epoch) {
                in_write_epoch = copies.len() - before;
            }
        }
        Ok((copies, in_write_epoch))
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
    fn maintain_epochs(&self) {
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

/// The epochs of `epochs` that hold keys of `tenant` (none for no tenant).
fn holding(epochs: &[Arc<Epoch>], tenant: Option<u32>) -> Vec<&Epoch> {
    tenant.map_or_else(Vec::new, |tenant| {
        epochs
            .iter()
            .map(|epoch| &**epoch)
            .filter(|epoch| epoch.holds(tenant))
            .collect()
    })
}

/// Adds the write of `copies` under `key` to `run`, without those below
/// `horizon` (the key is removed when none is left). Returns the newest
/// arrival written (ms since the epoch), `None` for a removal.
fn put_copies(
    run: &mut Run,
    key: &[u8; codec::COPIES_KEY_LEN],
    copies: &[AcceptedCopy],
    horizon: Option<i64>,
    value: &mut Vec<u8>,
) -> Option<i64> {
    let kept = || {
        copies
            .iter()
            .filter(|copy| Tenants::keeps(horizon, copy.arrival_millis))
    };
    let Some(newest) = kept().map(|copy| copy.arrival_millis).max() else {
        run.remove(key);
        return None;
    };
    codec::encode_copies(kept(), value);
    run.put(key, value);
    Some(newest)
}

/// The epochs of `holding` numbered `first_epoch` or later.
fn from<'a>(holding: &'a [&'a Epoch], first_epoch: u32) -> &'a [&'a Epoch] {
    // `holding` is in epoch order.
    let start = holding.partition_point(|epoch| epoch.number < first_epoch);
    &holding[start..]
}

/// The write epoch: the last.
fn write_epoch(epochs: &[Arc<Epoch>]) -> &Epoch {
    // `Epochs` always holds at least one epoch.
    epochs
        .last()
        .map(|epoch| &**epoch)
        .unwrap_or_else(|| unreachable!("no epoch"))
}

/// Records in `epoch` the keys of `tenant` written: `(id, newest arrival)`.
fn note_written(epoch: &Epoch, tenant: u32, written: &[(u128, i64)]) {
    if let Some(newest) = written.iter().map(|(_, newest)| *newest).max() {
        epoch.note_written(tenant, written.len() as u64, newest);
    }
}

/// The lock stripe of `shard_id`.
fn stripe(shard_id: &str) -> usize {
    // The remainder is below LOCK_STRIPES, so it fits.
    (xxh3_64(shard_id.as_bytes()) % LOCK_STRIPES as u64) as usize
}

/// Whether `copy` is the candidate's own record (a replay).
fn same_position(copy: &AcceptedCopy, candidate: &Candidate) -> bool {
    same_copy(&copy.copy, &candidate.copy)
}

/// Whether two references name the same user record.
fn same_copy(a: &CopyRef, b: &CopyRef) -> bool {
    a.position_cmp(b) == std::cmp::Ordering::Equal
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use std::time::Duration;

    use super::*;
    use crate::events::local::Watermark;
    use crate::events::rule::Outcome;

    const W: i64 = 1_000;
    const SETTINGS: &str = "events;id=partition-key;fingerprint=payload";

    fn rule(match_fingerprint: bool) -> Rule {
        Rule {
            window_millis: W,
            match_fingerprint,
        }
    }

    /// Epochs of 16 keys: most tests read keys across several epochs.
    fn options() -> LocalOptions {
        LocalOptions {
            epoch_keys: 16,
            ..LocalOptions::default()
        }
    }

    fn open(dir: &tempfile::TempDir) -> LocalStore {
        LocalStore::open(dir.path(), options()).unwrap()
    }

    /// A candidate of `shard`: (id, fingerprint, arrival) at `(sequence, sub)`.
    fn candidate(
        shard: &Arc<str>,
        (id, fingerprint, arrival): (u8, u8, i64),
        sequence: u64,
        sub: Option<u64>,
    ) -> Candidate {
        Candidate {
            key: EventKey {
                id: u128::from(id) << 100 | 0xfeed,
                fingerprint: u64::from(fingerprint),
            },
            copy: CopyRef {
                shard_id: Arc::clone(shard),
                sequence_number: SequenceNumber::from(sequence),
                sub_sequence_number: sub,
            },
            arrival_millis: arrival,
        }
    }

    fn through(run: &[Candidate]) -> SequenceNumber {
        run.last().map_or_else(SequenceNumber::zero, |last| {
            last.copy.sequence_number.clone()
        })
    }

    /// The naive model: every accepted copy in a list; the prior copies of a
    /// candidate are the preceding ones of its shard and all of its
    /// ancestors'.
    #[derive(Default)]
    struct Model {
        accepted: Vec<(u128, AcceptedCopy)>,
    }

    impl Model {
        fn decide(&mut self, lineage: &Lineage, rule: &Rule, run: &[Candidate]) -> Vec<Decision> {
            run.iter()
                .map(|candidate| {
                    let prior: Vec<&AcceptedCopy> = self
                        .accepted
                        .iter()
                        .filter(|(id, copy)| {
                            *id == candidate.key.id
                                && if copy.copy.shard_id == lineage.shard_id {
                                    precedes_in_shard(&copy.copy, &candidate.copy)
                                } else {
                                    lineage.ancestors.contains(&copy.copy.shard_id)
                                }
                        })
                        .map(|(_, copy)| copy)
                        .collect();
                    let decision = rule.decide(&candidate.key, candidate.arrival_millis, prior);
                    if decision.accepts() {
                        self.accepted.push((candidate.key.id, candidate.accepted()));
                    }
                    decision
                })
                .collect()
        }
    }

    /// One generated run: its records `(id, fingerprint, arrival, same
    /// aggregate as the previous record)`, whether the store is reopened
    /// before it, and which earlier run of the same shard to replay after
    /// it (an index, reduced modulo the runs so far).
    type RunSpec = (Vec<(u8, u8, i64, bool)>, bool, Option<usize>);

    fn runs() -> impl Strategy<Value = Vec<RunSpec>> {
        prop::collection::vec(
            (
                prop::collection::vec(
                    (0u8..6, 0u8..3, 0i64..4_000, prop::bool::weighted(0.2)),
                    0..25,
                ),
                prop::bool::weighted(0.3),
                prop::option::weighted(0.3, 0usize..8),
            ),
            1..6,
        )
    }

    /// Turns specs into candidates of `shard`, sequence numbers increasing
    /// (KPL aggregates share one and count sub-sequence numbers).
    fn build(shard: &Arc<str>, specs: &[RunSpec], next: &mut u64) -> Vec<Vec<Candidate>> {
        let mut previous: Option<(u64, Option<u64>)> = None;
        specs
            .iter()
            .map(|(records, _, _)| {
                records
                    .iter()
                    .map(|&(id, fingerprint, arrival, aggregate)| {
                        let (sequence, sub) = match previous {
                            Some((sequence, sub)) if aggregate => {
                                (sequence, Some(sub.map_or(1, |sub| sub + 1)))
                            }
                            _ => {
                                *next += 1 + u64::from(id);
                                (*next, None)
                            }
                        };
                        previous = Some((sequence, sub));
                        candidate(shard, (id, fingerprint, arrival), sequence, sub)
                    })
                    .collect()
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]

        /// Runs on a parent shard, then on its child, decided through the
        /// store (reopened between some runs, some earlier runs replayed)
        /// decide as the naive model does, and replays decide as the first
        /// time.
        #[test]
        fn agrees_with_the_naive_model(
            parent_specs in runs(),
            child_specs in runs(),
            match_fingerprint in any::<bool>(),
        ) {
            let rule = rule(match_fingerprint);
            let dir = tempfile::tempdir().unwrap();
            let mut store = Some(open(&dir));
            let mut model = Model::default();
            let parent = Lineage::root("shardId-000000000000");
            let child = Lineage {
                shard_id: Arc::from("shardId-000000000001"),
                ancestors: vec![Arc::clone(&parent.shard_id)],
            };
            let mut next = 0;
            for (lineage, specs) in [(&parent, &parent_specs), (&child, &child_specs)] {
                let runs = build(&lineage.shard_id, specs, &mut next);
                let mut decided: Vec<Vec<Decision>> = Vec::new();
                for (run, (_, reopen, replay)) in runs.iter().zip(specs) {
                    if *reopen {
                        drop(store.take());
                        store = Some(open(&dir));
                    }
                    let local = store.as_ref().unwrap();
                    let decisions = local
                        .decide(lineage, &rule, SETTINGS, run, &through(run))
                        .unwrap();
                    prop_assert_eq!(&decisions, &model.decide(lineage, &rule, run));
                    decided.push(decisions);
                    if let Some(replay) = replay {
                        let index = replay % decided.len();
                        let again = local
                            .decide(lineage, &rule, SETTINGS, &runs[index], &through(&runs[index]))
                            .unwrap();
                        prop_assert_eq!(&again, &decided[index], "replay of run {}", index);
                    }
                }
            }
        }
    }

    #[test]
    fn a_preceding_copy_that_arrived_later_counts_by_its_distance() {
        // A parent's last copies arrived after its child's first records
        // (a lagging clock, or arrival times that went back): the window is
        // the distance either way, as `verify` measures it.
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let rule = rule(true);
        let parent = Lineage::root("shardId-000000000000");
        let child = Lineage {
            shard_id: Arc::from("shardId-000000000001"),
            ancestors: vec![Arc::clone(&parent.shard_id)],
        };
        let parent_run = vec![
            candidate(&parent.shard_id, (1, 0, 10 * W), 1, None),
            candidate(&parent.shard_id, (2, 0, 10 * W), 2, None),
        ];
        store
            .decide(&parent, &rule, SETTINGS, &parent_run, &through(&parent_run))
            .unwrap();
        let child_run = vec![
            // Two windows and a bit before the parent's copy: forgotten.
            candidate(&child.shard_id, (1, 0, 8 * W - 1), 10, None),
            // A window and a bit before it: outside the window.
            candidate(&child.shard_id, (2, 0, 9 * W - 1), 11, None),
            // A window before it: within, and the parent's is the latest
            // copy within the window.
            candidate(&child.shard_id, (2, 0, 9 * W), 12, None),
        ];
        assert_eq!(
            store
                .decide(&child, &rule, SETTINGS, &child_run, &through(&child_run))
                .unwrap(),
            vec![
                Decision::Keep(Outcome::Unique),
                Decision::Keep(Outcome::Expired),
                Decision::Duplicate {
                    of: parent_run[1].copy.clone()
                },
            ]
        );
    }

    #[test]
    fn a_replay_decides_as_the_first_attempt_after_later_runs() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let rule = rule(true);
        let lineage = Lineage::root("shardId-000000000000");
        let shard = &lineage.shard_id;
        // Run A: event 1 twice, event 2 with two payloads.
        let a = vec![
            candidate(shard, (1, 0, 100), 10, None),
            candidate(shard, (1, 0, 150), 11, None),
            candidate(shard, (2, 0, 200), 12, None),
            candidate(shard, (2, 1, 210), 13, None),
        ];
        // Run B: event 3, and event 1 again past the window.
        let b = vec![
            candidate(shard, (3, 0, 300), 20, Some(0)),
            candidate(shard, (3, 0, 300), 20, Some(1)),
            candidate(shard, (1, 0, 100 + W + 1), 21, None),
        ];
        let first = store
            .decide(&lineage, &rule, SETTINGS, &a, &through(&a))
            .unwrap();
        assert_eq!(
            first,
            vec![
                Decision::Keep(Outcome::Unique),
                Decision::Duplicate {
                    of: a[0].copy.clone()
                },
                Decision::Keep(Outcome::Unique),
                Decision::Keep(Outcome::IdReused),
            ]
        );
        assert_eq!(
            store
                .decide(&lineage, &rule, SETTINGS, &a, &through(&a))
                .unwrap(),
            first,
            "replayed at once"
        );
        let second = store
            .decide(&lineage, &rule, SETTINGS, &b, &through(&b))
            .unwrap();
        assert_eq!(
            second,
            vec![
                Decision::Keep(Outcome::Unique),
                Decision::Duplicate {
                    of: b[0].copy.clone()
                },
                Decision::Keep(Outcome::Expired),
            ]
        );
        drop(store);
        let store = open(&dir);
        assert_eq!(
            store
                .decide(&lineage, &rule, SETTINGS, &a, &through(&a))
                .unwrap(),
            first,
            "replayed after run B and a reopen"
        );
        assert_eq!(
            store
                .decide(&lineage, &rule, SETTINGS, &b, &through(&b))
                .unwrap(),
            second
        );
        // Nothing was stored twice: event 1 has its two accepted copies.
        assert_eq!(store.stored(shard, a[0].key.id).len(), 2);
    }

    #[test]
    fn watermarks_and_ended_marks_persist_and_insert_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let shard: Arc<str> = Arc::from("shardId-000000000003");
        assert_eq!(store.watermark(&shard).unwrap(), None);
        let watermark = Watermark {
            settings: SETTINGS.to_owned(),
            through: SequenceNumber::from(42_u64),
        };
        store.set_watermark(&shard, &watermark).unwrap();
        store.mark_ended(&shard, SETTINGS).unwrap();
        let copies: Vec<(EventKey, AcceptedCopy)> = (0..3)
            .map(|n| {
                let candidate = candidate(&shard, (n, 0, 5), u64::from(n) + 1, None);
                (candidate.key, candidate.accepted())
            })
            .collect();
        store.insert(&copies).unwrap();
        store.insert(&copies).unwrap();
        store.insert(&copies[..1]).unwrap();

        let second = LocalStore::open(dir.path(), LocalOptions::default());
        assert!(
            matches!(&second, Err(LocalStoreError::Locked { path }) if path == dir.path()),
            "{:?}",
            second.err()
        );
        let clone = store.clone();
        drop(store);
        assert_eq!(clone.watermark(&shard).unwrap(), Some(watermark.clone()));
        drop(clone);

        let store = open(&dir);
        assert_eq!(store.watermark(&shard).unwrap(), Some(watermark));
        assert!(store.is_ended(&shard, SETTINGS).unwrap());
        assert!(
            !store
                .is_ended(&shard, "events;id=payload;fingerprint=none")
                .unwrap()
        );
        assert!(!store.is_ended("shardId-000000000004", SETTINGS).unwrap());
        for (event, copy) in &copies {
            assert_eq!(store.stored(&shard, event.id), vec![copy.clone()]);
        }
        // A record of a child finds the inserted copy of its parent.
        let child = Lineage {
            shard_id: Arc::from("shardId-000000000005"),
            ancestors: vec![Arc::clone(&shard)],
        };
        let run = [candidate(&child.shard_id, (1, 0, 6), 100, None)];
        assert_eq!(
            store
                .decide(&child, &rule(true), SETTINGS, &run, &through(&run))
                .unwrap(),
            vec![Decision::Duplicate {
                of: copies[1].1.copy.clone()
            }]
        );
    }

    #[test]
    fn a_corrupt_value_is_reported_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let lineage = Lineage::root("shardId-000000000000");
        let run = [candidate(&lineage.shard_id, (1, 0, 0), 1, None)];
        let tenant = store.inner.tenant(&lineage.shard_id).unwrap();
        let key = codec::copies_key(tenant, run[0].key.id);
        {
            let epochs = store.inner.epochs.read();
            let mut corrupt = Run::default();
            corrupt.put(&key, &[9_u8]);
            let mut batch = store.inner.batch();
            write_epoch(&epochs).stage(&mut batch, &corrupt);
            batch.commit().unwrap();
            write_epoch(&epochs).applied(&corrupt);
            write_epoch(&epochs).note_written(tenant, 1, 0);
        }
        // Written behind the store's back: its filter learns of it.
        store.inner.filters.insert(tenant, &[(run[0].key.id, 0)], 0);
        let error = store
            .decide(&lineage, &rule(true), SETTINGS, &run, &through(&run))
            .unwrap_err();
        assert!(
            matches!(&error, LocalStoreError::Corrupt { key, .. } if key.starts_with("shardId-000000000000/")),
            "{error:?}"
        );
    }

    impl LocalStore {
        /// Closes every epoch (their keys loaded into their keyspaces),
        /// flushes the memtables and compacts everything into the last
        /// level.
        fn compact(&self) {
            self.inner.epochs.close_all(&self.inner.db);
            for epoch in self.inner.epochs.read().iter() {
                epoch.keyspace.rotate_memtable_and_wait().unwrap();
                epoch.keyspace.major_compact().unwrap();
            }
        }

        fn stored(&self, shard: &Arc<str>, id: u128) -> Vec<AcceptedCopy> {
            let Some(tenant) = self.inner.tenants.get(shard) else {
                return Vec::new();
            };
            let epochs = self.inner.epochs.read();
            self.inner
                .read_copies(
                    &holding(&epochs, Some(tenant)),
                    write_epoch(&epochs),
                    &codec::copies_key(tenant, id),
                    shard,
                )
                .unwrap()
                .0
        }
    }

    #[test]
    fn compaction_drops_values_below_the_horizon() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let lineage = Lineage::root("shardId-000000000000");
        let other = Lineage::root("shardId-000000000009");
        let shard = &lineage.shard_id;
        // Ids 0..50 arrive at 1_000, ids 50..100 at 10_000; id 0 arrives
        // again at 10_000 (its value keeps both until it is rewritten).
        let mut run: Vec<Candidate> = (0..100)
            .map(|n| {
                let arrival = if n < 50 { 1_000 } else { 10_000 };
                candidate(shard, (n, 0, arrival), u64::from(n) + 1, None)
            })
            .collect();
        run.push(candidate(shard, (0, 1, 10_000), 200, None));
        let rule = Rule {
            window_millis: 100,
            match_fingerprint: true,
        };
        store
            .decide(&lineage, &rule, SETTINGS, &run, &through(&run))
            .unwrap();
        let others: Vec<Candidate> = (0..10)
            .map(|n| candidate(&other.shard_id, (n, 0, 1_000), u64::from(n) + 1, None))
            .collect();
        store
            .decide(&other, &rule, SETTINGS, &others, &through(&others))
            .unwrap();

        store.advance_horizon(shard, 5_000).unwrap();
        store.advance_horizon(shard, 4_000).unwrap();
        assert_eq!(store.horizon(shard), Some(5_000), "never moves back");
        store.compact();
        assert_eq!(
            stored_keys(&store),
            1 + 50 + 10,
            "ids 1..50 of the shard are gone, id 0 and 50..100 and the other shard's stay"
        );
        for n in 1_u8..50 {
            assert!(
                store.stored(shard, run[usize::from(n)].key.id).is_empty(),
                "id {n}"
            );
        }
        for n in 50_u8..100 {
            assert_eq!(
                store.stored(shard, run[usize::from(n)].key.id).len(),
                1,
                "id {n}"
            );
        }
        assert_eq!(
            store.stored(shard, run[0].key.id).len(),
            1,
            "its value stays (its newest copy is recent); reads leave out its old copy"
        );
        for candidate in &others {
            assert_eq!(
                store.stored(&other.shard_id, candidate.key.id).len(),
                1,
                "no horizon"
            );
        }

        // Reads leave out the copies below the horizon; the horizon persists.
        let again = [candidate(shard, (0, 2, 10_050), 300, None)];
        store
            .decide(&lineage, &rule, SETTINGS, &again, &through(&again))
            .unwrap();
        drop(store);
        let store = open(&dir);
        assert_eq!(store.horizon(shard), Some(5_000));
        let kept = store.stored(shard, run[0].key.id);
        assert_eq!(
            kept.iter()
                .map(|copy| copy.arrival_millis)
                .collect::<Vec<_>>(),
            vec![10_000, 10_050]
        );
    }

    #[test]
    fn shards_not_written_for_long_are_forgotten_and_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let lineage = Lineage::root("shardId-000000000000");
        let shard = &lineage.shard_id;
        let run = [candidate(shard, (1, 0, 1_000), 1, None)];
        store
            .decide(&lineage, &rule(true), SETTINGS, &run, &through(&run))
            .unwrap();
        store.mark_ended(shard, SETTINGS).unwrap();
        drop(store);

        let store = open(&dir);
        assert!(
            store.watermark(shard).unwrap().is_some(),
            "written just now"
        );
        drop(store);
        let forgetful = LocalOptions {
            forget_after: Duration::ZERO,
            ..options()
        };
        let store = LocalStore::open(dir.path(), forgetful).unwrap();
        assert_eq!(store.watermark(shard).unwrap(), None);
        assert!(!store.is_ended(shard, SETTINGS).unwrap());
        assert_eq!(store.horizon(shard), Some(FORGOTTEN));
        store.compact();
        assert!(store.stored(shard, run[0].key.id).is_empty());
        drop(store);

        // Written again, the shard is back: its new copies stay.
        let store = open(&dir);
        assert_eq!(store.horizon(shard), Some(FORGOTTEN), "persisted");
        let later = [candidate(shard, (2, 0, 2_000), 2, None)];
        store
            .decide(&lineage, &rule(true), SETTINGS, &later, &through(&later))
            .unwrap();
        assert_eq!(store.horizon(shard), None);
        store.compact();
        assert_eq!(store.stored(shard, later[0].key.id).len(), 1);
        drop(store);
        let store = open(&dir);
        assert_eq!(store.horizon(shard), None, "persisted");
        assert!(store.watermark(shard).unwrap().is_some());
    }

    /// The keys and values of `epoch`, open or closed.
    fn entries(epoch: &Epoch) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut entries = Vec::new();
        epoch
            .for_each_with_prefix(&[], |key, value| {
                entries.push((key.to_vec(), value.to_vec()));
            })
            .unwrap();
        entries
    }

    /// The keys in all epochs, a key of several epochs once per epoch.
    fn stored_keys(store: &LocalStore) -> usize {
        store
            .inner
            .epochs
            .read()
            .iter()
            .map(|epoch| entries(epoch).len())
            .sum()
    }

    /// Every key of `copies` whose newest copy is not below its tenant's
    /// horizon, by tenant.
    fn live_keys(store: &LocalStore) -> Vec<(u32, u128)> {
        let horizons = store.inner.tenants.horizons();
        let mut keys: Vec<(u32, u128)> = store
            .inner
            .epochs
            .read()
            .iter()
            .flat_map(|epoch| entries(epoch))
            .filter_map(|(key, value)| {
                let tenant = codec::key_tenant(&key).unwrap();
                let newest = codec::newest_arrival(&value).unwrap();
                Tenants::keeps(horizons.get(&tenant).copied(), newest)
                    .then(|| (tenant, codec::key_id(&key).unwrap()))
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    #[test]
    fn the_filters_never_miss_a_live_key_after_writes_inserts_reopens_and_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let lineage = Lineage::root("shardId-000000000000");
        let shard = &lineage.shard_id;
        let run: Vec<Candidate> = (0..200_u8)
            .map(|n| candidate(shard, (n, 0, i64::from(n) * 10), u64::from(n) + 1, None))
            .collect();
        store
            .decide(&lineage, &rule(true), SETTINGS, &run, &through(&run))
            .unwrap();
        let other: Arc<str> = Arc::from("shardId-000000000007");
        let copies: Vec<(EventKey, AcceptedCopy)> = (0..50_u8)
            .map(|n| {
                let candidate = candidate(&other, (n, 1, 5_000), u64::from(n) + 1, None);
                (candidate.key, candidate.accepted())
            })
            .collect();
        store.insert(&copies).unwrap();
        let check = |store: &LocalStore, expected: usize| {
            let keys = live_keys(store);
            assert_eq!(keys.len(), expected);
            for (tenant, id) in keys {
                assert!(
                    store.inner.filters.may_contain(tenant, id),
                    "{tenant} {id:x}"
                );
            }
        };
        check(&store, 250);
        drop(store);
        let store = open(&dir);
        check(&store, 250);
        // New ids of an unknown shard: the filter answers "absent".
        let fresh = (0..200_u8)
            .filter(|n| {
                let id = candidate(shard, (*n, 0, 0), 1, None).key.id;
                store.inner.filters.may_contain(99, id)
            })
            .count();
        assert_eq!(fresh, 0);

        store.advance_horizon(shard, 1_000).unwrap();
        check(&store, 150);
        store.compact();
        check(&store, 150);
        drop(store);
        let store = open(&dir);
        check(&store, 150);
        // Below the horizon, ids are new again to the filter and to fjall.
        let again = [candidate(shard, (1, 0, 2_100), 1_000, None)];
        assert_eq!(
            store
                .decide(&lineage, &rule(true), SETTINGS, &again, &through(&again))
                .unwrap(),
            vec![Decision::Keep(Outcome::Unique)]
        );
        check(&store, 151);
    }

    /// The numbers of the store's epochs, oldest first.
    fn epoch_numbers(store: &LocalStore) -> Vec<u32> {
        store
            .inner
            .epochs
            .read()
            .iter()
            .map(|epoch| epoch.number)
            .collect()
    }

    /// Decides ids `ids` of `lineage` arriving at `arrival`, sequence
    /// numbers from `first_sequence` on.
    fn decide_ids(
        store: &LocalStore,
        lineage: &Lineage,
        ids: std::ops::Range<u8>,
        arrival: i64,
        first_sequence: u64,
    ) -> Vec<Decision> {
        let run: Vec<Candidate> = ids
            .enumerate()
            .map(|(n, id)| {
                candidate(
                    &lineage.shard_id,
                    (id, 0, arrival),
                    first_sequence + n as u64,
                    None,
                )
            })
            .collect();
        store
            .decide(lineage, &rule(true), SETTINGS, &run, &through(&run))
            .unwrap()
    }

    /// Decides copies of ids `ids` of `lineage` arriving later (at 1,100,
    /// sequence numbers from 100 on) and checks each is a duplicate.
    fn assert_known(store: &LocalStore, lineage: &Lineage, ids: std::ops::Range<u8>) {
        let decisions = decide_ids(store, lineage, ids, 1_100, 100);
        assert!(
            decisions
                .iter()
                .all(|decision| matches!(decision, Decision::Duplicate { .. })),
            "{decisions:?}"
        );
    }

    fn has_keyspace(store: &LocalStore, name: &str) -> bool {
        store.inner.db.keyspace_exists(name)
    }

    #[test]
    fn the_write_epoch_is_read_back_from_its_runs_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let lineage = Lineage::root("shardId-000000000000");
        let store = open(&dir);
        // Five keys: the epoch (of 16) stays open.
        decide_ids(&store, &lineage, 0..5, 1_000, 1);
        let epochs = store.inner.epochs.read();
        assert!(epochs[0].is_open());
        assert!(epochs[0].keyspace.is_empty().unwrap(), "keys are in runs");
        assert!(has_keyspace(&store, "copies.0.runs"));
        drop(epochs);
        drop(store);

        let store = open(&dir);
        assert_eq!(epoch_numbers(&store), vec![0]);
        assert!(store.inner.epochs.read()[0].is_open());
        // Not from the recent keys (a new process has none): from the
        // index, read again from the runs.
        assert_known(&store, &lineage, 0..5);
    }

    #[test]
    fn a_closed_epoch_is_loaded_into_its_keyspace_and_its_runs_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let lineage = Lineage::root("shardId-000000000000");
        let store = open(&dir);
        // Twenty keys fill the epoch of 16: the next starts, this one
        // closes.
        decide_ids(&store, &lineage, 0..20, 1_000, 1);
        assert_eq!(epoch_numbers(&store), vec![0, 1]);
        let epochs = store.inner.epochs.read();
        assert!(!epochs[0].is_open());
        assert!(epochs[1].is_open());
        assert_eq!(epochs[0].keyspace.len().unwrap(), 20);
        assert!(!has_keyspace(&store, "copies.0.runs"));
        assert!(has_keyspace(&store, "copies.1.runs"));
        drop(epochs);
        drop(store);
        let store = open(&dir);
        assert_known(&store, &lineage, 0..20);
    }

    #[test]
    fn a_crash_after_loading_an_epoch_deletes_its_runs_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let lineage = Lineage::root("shardId-000000000000");
        let store = open(&dir);
        decide_ids(&store, &lineage, 0..5, 1_000, 1);
        store.inner.epochs.read()[0].load_without_closing();
        drop(store);

        let store = open(&dir);
        // Epoch 0 was loaded: closed, its runs deleted; a new write epoch.
        assert_eq!(epoch_numbers(&store), vec![0, 1]);
        assert!(!store.inner.epochs.read()[0].is_open());
        assert!(!has_keyspace(&store, "copies.0.runs"));
        assert_known(&store, &lineage, 0..5);
        let id = candidate(&lineage.shard_id, (0, 0, 0), 1, None).key.id;
        assert_eq!(store.stored(&lineage.shard_id, id).len(), 1, "held once");
    }

    #[test]
    fn an_epoch_left_open_before_the_last_is_closed_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let lineage = Lineage::root("shardId-000000000000");
        let store = open(&dir);
        decide_ids(&store, &lineage, 0..5, 1_000, 1);
        // As a crash leaves it: a later epoch was started, epoch 0 not yet
        // loaded; and the runs keyspace of an epoch that is gone.
        store
            .inner
            .db
            .keyspace("copies.1", || epochs::create_options(1 << 20))
            .unwrap();
        store
            .inner
            .db
            .keyspace("copies.7.runs", KeyspaceCreateOptions::default)
            .unwrap();
        drop(store);

        let store = open(&dir);
        // Epoch 1 has no runs: closed; epoch 2 takes the writes.
        assert_eq!(epoch_numbers(&store), vec![0, 1, 2]);
        let epochs = store.inner.epochs.read();
        assert!(!epochs[0].is_open());
        assert_eq!(epochs[0].keyspace.len().unwrap(), 5);
        assert!(epochs[2].is_open());
        drop(epochs);
        assert!(!has_keyspace(&store, "copies.0.runs"));
        assert!(!has_keyspace(&store, "copies.7.runs"));
        assert_known(&store, &lineage, 0..5);
    }

    #[test]
    fn an_epoch_also_ends_after_its_value_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let lineage = Lineage::root("shardId-000000000000");
        let store = LocalStore::open(
            dir.path(),
            LocalOptions {
                epoch_keys: 1_000_000,
                epoch_value_bytes: 300,
                ..LocalOptions::default()
            },
        )
        .unwrap();
        // Ten keys of one copy each (20 bytes a value with these short
        // sequence numbers) stay below; twenty do not.
        decide_ids(&store, &lineage, 0..10, 1_000, 1);
        assert_eq!(epoch_numbers(&store), vec![0]);
        decide_ids(&store, &lineage, 10..20, 1_000, 11);
        assert_eq!(epoch_numbers(&store), vec![0, 1]);
        assert!(!store.inner.epochs.read()[0].is_open());
        assert_known(&store, &lineage, 0..20);
    }

    #[test]
    fn a_large_insert_fills_epochs_in_turn() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let shard: Arc<str> = Arc::from("shardId-000000000000");
        let copies: Vec<(EventKey, AcceptedCopy)> = (0..40)
            .map(|n| {
                let candidate = candidate(&shard, (n, 0, 1_000), u64::from(n) + 1, None);
                (candidate.key, candidate.accepted())
            })
            .collect();
        store.insert(&copies).unwrap();
        // Batches of two keys (an eighth of 16): the epochs end as they
        // fill, not once after all 40 keys.
        assert!(
            epoch_numbers(&store).len() >= 3,
            "{:?}",
            epoch_numbers(&store)
        );
        for (key, copy) in &copies {
            assert_eq!(store.stored(&shard, key.id), vec![copy.clone()]);
        }
        store.insert(&copies).unwrap();
        for (key, _) in &copies {
            assert_eq!(store.stored(&shard, key.id).len(), 1, "idempotent");
        }
    }

    #[test]
    fn epochs_are_closed_after_a_panic_while_closing() {
        let dir = tempfile::tempdir().unwrap();
        let lineage = Lineage::root("shardId-000000000000");
        let store = open(&dir);
        store.inner.epochs.poison_closing();
        decide_ids(&store, &lineage, 0..20, 1_000, 1);
        assert_eq!(epoch_numbers(&store), vec![0, 1]);
        assert!(!store.inner.epochs.read()[0].is_open());
    }

    #[test]
    fn expired_epochs_are_deleted_whole_and_the_others_stay() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let a = Lineage::root("shardId-000000000000");
        let b = Lineage::root("shardId-000000000001");
        let run_of =
            |lineage: &Lineage, ids: std::ops::Range<u8>, arrival: i64| -> Vec<Candidate> {
                ids.map(|n| candidate(&lineage.shard_id, (n, 0, arrival), u64::from(n) + 1, None))
                    .collect()
            };
        let decide = |store: &LocalStore, lineage: &Lineage, run: &[Candidate]| {
            store
                .decide(lineage, &rule(true), SETTINGS, run, &through(run))
                .unwrap()
        };
        // 20 keys of each shard fill an epoch of 16 each.
        decide(&store, &a, &run_of(&a, 0..20, 1_000));
        decide(&store, &b, &run_of(&b, 0..20, 1_000));
        assert_eq!(epoch_numbers(&store), vec![0, 1, 2]);

        // Epoch 0 holds only shard a's copies, all below its horizon: the
        // next epoch's start deletes it. Epoch 1 holds shard b's, which has
        // no horizon: it stays.
        store.advance_horizon(&a.shard_id, 5_000).unwrap();
        decide(&store, &a, &run_of(&a, 20..40, 10_000));
        assert_eq!(epoch_numbers(&store), vec![1, 2, 3]);
        let names = store.inner.db.list_keyspace_names();
        assert!(!names.iter().any(|name| &**name == "copies"), "{names:?}");
        let again = [candidate(&b.shard_id, (0, 0, 1_050), 100, None)];
        assert!(
            matches!(decide(&store, &b, &again)[..], [Decision::Duplicate { .. }]),
            "shard b's copies stay"
        );

        // After a reopen, the epochs and what they hold are found again.
        drop(store);
        let store = open(&dir);
        assert_eq!(epoch_numbers(&store), vec![1, 2, 3]);
        store.advance_horizon(&b.shard_id, 5_000).unwrap();
        decide(&store, &b, &run_of(&b, 40..60, 10_000));
        assert_eq!(epoch_numbers(&store), vec![2, 3, 4]);
        let late = [candidate(&a.shard_id, (25, 0, 10_010), 500, None)];
        assert!(
            matches!(decide(&store, &a, &late)[..], [Decision::Duplicate { .. }]),
            "shard a's recent copies stay"
        );
    }

    #[test]
    fn a_key_written_in_several_epochs_keeps_all_its_copies_recent_or_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        let lineage = Lineage::root("shardId-000000000000");
        let shard = &lineage.shard_id;
        let rule = Rule {
            window_millis: 10_000,
            match_fingerprint: true,
        };
        let decide = |store: &LocalStore, run: &[Candidate]| {
            store
                .decide(&lineage, &rule, SETTINGS, run, &through(run))
                .unwrap()
        };
        // Id 0 with fingerprint 1 in epoch 0, then enough other ids to end
        // two epochs of 16, then id 0 with fingerprint 2 (another payload:
        // kept) in the write epoch.
        decide(&store, &[candidate(shard, (0, 1, 1_000), 1, None)]);
        let others: Vec<Candidate> = (1..40)
            .map(|n| candidate(shard, (n, 0, 1_100), u64::from(n) + 1, None))
            .collect();
        decide(&store, &others[..20]);
        decide(&store, &others[20..]);
        assert!(epoch_numbers(&store).len() >= 3);
        assert_eq!(
            decide(&store, &[candidate(shard, (0, 2, 1_200), 100, None)]),
            vec![Decision::Keep(Outcome::IdReused)]
        );
        let first = |store: &LocalStore, sequence: u64| {
            decide(store, &[candidate(shard, (0, 1, 1_300), sequence, None)])
        };
        let duplicate_of_the_first = vec![Decision::Duplicate {
            of: candidate(shard, (0, 1, 1_000), 1, None).copy,
        }];
        assert_eq!(
            first(&store, 101),
            duplicate_of_the_first,
            "from the recent keys"
        );
        drop(store);
        let store = open(&dir);
        assert_eq!(
            first(&store, 102),
            duplicate_of_the_first,
            "read from both epochs"
        );
        assert_eq!(
            store
                .stored(shard, candidate(shard, (0, 0, 0), 1, None).key.id)
                .len(),
            2
        );
    }

    #[test]
    fn the_store_is_send_sync_and_clone() {
        fn check<T: Send + Sync + Clone>() {}
        check::<LocalStore>();
    }
}
