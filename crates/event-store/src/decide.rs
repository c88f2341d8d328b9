//! Deciding a run of a shard's records and inserting copies decided
//! elsewhere: the read, merge and write of a shard's keys under its lock,
//! one atomic batch per call.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use sequence_range::SequenceNumber;

use crate::codec::{self, Tag};
use crate::epochs::Epoch;
use crate::error::LocalStoreError;
use crate::lineage::{Candidate, Lineage, precedes_in_shard};
use crate::recent;
use crate::rule::{AcceptedCopy, CopyRef, Decision, EventKey, Rule};
use crate::runs::Run;
use crate::store::{Inner, LocalStore};
use crate::tenants::Tenants;

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
    /// The copies stored under `key` of `shard_id` in the epochs `holding`
    /// it (oldest first), but those below the horizon of the key's tenant
    /// (which no decision consults, wherever compaction and the epochs'
    /// deletion have got to), and how many of them (the last) are in
    /// `write_epoch`.
    pub(crate) fn read_copies(
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
}

/// The epochs of `epochs` that hold keys of `tenant` (none for no tenant).
pub(crate) fn holding(epochs: &[Arc<Epoch>], tenant: Option<u32>) -> Vec<&Epoch> {
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
pub(crate) fn write_epoch(epochs: &[Arc<Epoch>]) -> &Epoch {
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

/// Whether `copy` is the candidate's own record (a replay).
fn same_position(copy: &AcceptedCopy, candidate: &Candidate) -> bool {
    same_copy(&copy.copy, &candidate.copy)
}

/// Whether two references name the same user record.
fn same_copy(a: &CopyRef, b: &CopyRef) -> bool {
    a.position_cmp(b) == std::cmp::Ordering::Equal
}
