//! [`Recent`]: each shard's keys decided lately, with all their stored
//! copies, so that a producer's retry — which comes seconds after the
//! first copy, a few thousand records later at most — is decided without a
//! read of fjall (memtable searches and a Bloom probe per table of each
//! epoch since the filter generation that answered "maybe").
//!
//! An entry is what the store holds for the key, as its last `decide` left
//! it under the shard's lock: the copies of past epochs and those of the
//! epoch it was written in. Only the store's own calls write a shard's keys,
//! each under that lock, and each updates (`decide`) or removes (`insert`)
//! the entries of the keys it writes, so an entry is never stale. Copies
//! below the shard's horizon are left out when an entry is used, as reads
//! leave them out.
//!
//! Each shard keeps two generations of at most [`RECENT_KEYS`] entries: when
//! the newer is full, the older is dropped and the newer takes its place. A
//! shard's entries are dropped once no call has decided its keys for
//! [`IDLE`] (its lease moved, it ended, its stream went quiet), at the next
//! call of a shard sharing its lock.
//! Memory: about 250 bytes per entry (a copy with its 56-digit sequence
//! number, the maps' own share), so at most about 2 MiB per shard.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::rule::AcceptedCopy;

use crate::tenants::Tenants;

/// Entries of one generation of one shard: 4,096.
pub(crate) const RECENT_KEYS: usize = 4096;

/// A shard whose keys no call decided for this long loses its entries: a
/// minute.
pub(crate) const IDLE: Duration = Duration::from_secs(60);

/// What the store holds for one key.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// Copies stored in epochs before `epoch`, oldest first.
    pub(crate) older: Vec<AcceptedCopy>,
    /// Copies stored in epoch `epoch`.
    pub(crate) in_epoch: Vec<AcceptedCopy>,
    /// The epoch the key was last written in (or read while it was the
    /// write epoch).
    pub(crate) epoch: u32,
}

impl Entry {
    /// The copies not below `horizon`, oldest first, and how many of them
    /// (the last) are in `write_epoch` — the shape of a read.
    pub(crate) fn read(
        &self,
        write_epoch: u32,
        horizon: Option<i64>,
    ) -> (Vec<AcceptedCopy>, usize) {
        let kept = |copies: &[AcceptedCopy]| -> Vec<AcceptedCopy> {
            copies
                .iter()
                .filter(|copy| Tenants::keeps(horizon, copy.arrival_millis))
                .cloned()
                .collect()
        };
        let mut copies = kept(&self.older);
        let in_epoch = kept(&self.in_epoch);
        let in_write_epoch = if self.epoch == write_epoch {
            in_epoch.len()
        } else {
            0
        };
        copies.extend(in_epoch);
        (copies, in_write_epoch)
    }
}

/// The recent keys of every shard, by tenant.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    tenants: HashMap<u32, Generations>,
}

#[derive(Debug)]
struct Generations {
    newer: foldhash::HashMap<u128, Entry>,
    older: foldhash::HashMap<u128, Entry>,
    /// When a call last decided the shard's keys.
    used: Instant,
}

impl Recent {
    /// Starts a call deciding keys of `tenant` at `now`: the tenant is in
    /// use, and the others not in use for [`IDLE`] lose their entries.
    pub(crate) fn start(&mut self, tenant: u32, now: Instant) {
        self.tenants.retain(|other, generations| {
            *other == tenant || now.saturating_duration_since(generations.used) < IDLE
        });
        self.tenants
            .entry(tenant)
            .or_insert_with(|| Generations {
                newer: foldhash::HashMap::default(),
                older: foldhash::HashMap::default(),
                used: now,
            })
            .used = now;
    }

    /// The entry of `id` under `tenant`, if recent.
    pub(crate) fn get(&self, tenant: u32, id: u128) -> Option<&Entry> {
        let generations = self.tenants.get(&tenant)?;
        generations
            .newer
            .get(&id)
            .or_else(|| generations.older.get(&id))
    }

    /// Records what the store now holds for `id` under `tenant`, a tenant
    /// [`start`](Self::start)ed (else nothing is recorded).
    pub(crate) fn put(&mut self, tenant: u32, id: u128, entry: Entry) {
        let Some(generations) = self.tenants.get_mut(&tenant) else {
            return;
        };
        if generations.newer.len() >= RECENT_KEYS && !generations.newer.contains_key(&id) {
            generations.older = std::mem::take(&mut generations.newer);
            generations.newer.reserve(RECENT_KEYS);
        }
        generations.older.remove(&id);
        generations.newer.insert(id, entry);
    }

    /// Forgets `id` under `tenant` (written by other means).
    pub(crate) fn remove(&mut self, tenant: u32, id: u128) {
        if let Some(generations) = self.tenants.get_mut(&tenant) {
            generations.newer.remove(&id);
            generations.older.remove(&id);
        }
    }

    /// Entries held, all shards.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tenants
            .values()
            .map(|g| g.newer.len() + g.older.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sequence_range::SequenceNumber;

    use super::*;
    use crate::rule::CopyRef;

    fn copy(sequence: u64, arrival_millis: i64) -> AcceptedCopy {
        AcceptedCopy {
            copy: CopyRef {
                shard_id: Arc::from("shardId-000000000000"),
                sequence_number: SequenceNumber::from(sequence),
                sub_sequence_number: None,
            },
            fingerprint: 7,
            arrival_millis,
        }
    }

    #[test]
    fn an_entry_reads_as_the_store_would() {
        let entry = Entry {
            older: vec![copy(1, 100), copy(2, 5_000)],
            in_epoch: vec![copy(3, 6_000), copy(4, 7_000)],
            epoch: 4,
        };
        let arrivals = |(copies, n): (Vec<AcceptedCopy>, usize)| {
            (
                copies.iter().map(|c| c.arrival_millis).collect::<Vec<_>>(),
                n,
            )
        };
        assert_eq!(
            arrivals(entry.read(4, None)),
            (vec![100, 5_000, 6_000, 7_000], 2)
        );
        assert_eq!(
            arrivals(entry.read(5, Some(1_000))),
            (vec![5_000, 6_000, 7_000], 0),
            "a later write epoch holds none of them"
        );
        assert_eq!(arrivals(entry.read(4, Some(6_500))), (vec![7_000], 1));
    }

    #[test]
    fn two_generations_per_shard_at_most() {
        let mut recent = Recent::default();
        let entry = Entry {
            older: Vec::new(),
            in_epoch: vec![copy(1, 1)],
            epoch: 0,
        };
        let now = Instant::now();
        recent.start(1, now);
        for id in 0..(3 * RECENT_KEYS as u128) {
            recent.put(1, id, entry.clone());
        }
        recent.put(2, 0, entry.clone());
        assert_eq!(recent.len(), 2 * RECENT_KEYS, "tenant 2 was not started");
        recent.start(2, now);
        recent.put(2, 0, entry.clone());
        assert_eq!(recent.len(), 2 * RECENT_KEYS + 1);
        assert!(recent.get(1, 0).is_none(), "dropped with its generation");
        assert!(recent.get(1, RECENT_KEYS as u128 + 1).is_some());
        assert!(recent.get(1, 3 * RECENT_KEYS as u128 - 1).is_some());
        assert!(recent.get(2, 0).is_some() && recent.get(3, 0).is_none());
        recent.remove(1, 3 * RECENT_KEYS as u128 - 1);
        assert!(recent.get(1, 3 * RECENT_KEYS as u128 - 1).is_none());

        // Tenant 1 idle for a minute: the next start of another drops it.
        recent.start(2, now + IDLE / 2);
        assert!(recent.get(1, RECENT_KEYS as u128 + 1).is_some());
        recent.start(2, now + IDLE);
        assert!(recent.get(1, RECENT_KEYS as u128 + 1).is_none());
        assert!(recent.get(2, 0).is_some());
        assert_eq!(recent.len(), 1);
    }
}
