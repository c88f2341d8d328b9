//! [`Filters`]: an in-memory filter of the `copies` keys of each tenant, in
//! front of fjall's point reads, so that a new id (most ids) costs no
//! memtable search and no Bloom probe of fjall's tables.
//!
//! A filter may answer "maybe" for an id that is not stored (about 0.5 %
//! of new ids per generation, below), but never "absent" for a key that
//! fjall holds and whose newest copy arrived at or after its tenant's
//! horizon: every write adds the key first (before its batch commits), and
//! the store builds the filters at open by scanning the epochs' `copies`
//! keyspaces.
//! Keys older than the horizon may be forgotten by the filter as by
//! compaction (`expiry`): nothing consults them.
//!
//! Each tenant's filter is a list of *generations*, blocked Bloom filters
//! (one 64-byte block per key, 12 bits per key, 7 bits set) filled in turn;
//! each remembers the newest arrival it was given, and is dropped when the
//! tenant's horizon passes it. A new generation holds half the keys of the
//! live ones (at least [`MIN_GENERATION_KEYS`]), so a lookup probes a few
//! generations, one cache line each, and memory stays within about twice
//! 1.5 bytes per live key. When a new generation would exceed the budget
//! ([`LocalOptions::filter_bytes`](crate::LocalOptions::filter_bytes)), the
//! tenant's keys written meanwhile go into no generation and its filter
//! answers "maybe" until the horizon passes them.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

/// Bits of filter per key: 1.5 bytes.
const BITS_PER_KEY: u64 = 12;

/// Bits set per key, within one block.
const BITS_SET: u32 = 7;

/// The smallest generation, keys (96 KiB).
pub(crate) const MIN_GENERATION_KEYS: u64 = 64 * 1024;

/// The largest generation started while deciding, keys (12 MiB); one built
/// at open holds all the keys found.
const MAX_GENERATION_KEYS: u64 = 8 * 1024 * 1024;

/// One cache line of bits.
type Block = [u64; 8];

/// Bytes of one block.
const BLOCK_BYTES: u64 = 64;

/// The filters of all tenants, and the bytes they use. `Send + Sync`.
#[derive(Debug)]
pub(crate) struct Filters {
    state: RwLock<State>,
}

#[derive(Debug)]
struct State {
    tenants: HashMap<u32, TenantFilter>,
    /// Bytes of all generations.
    bytes: u64,
    /// At most this many bytes.
    budget: u64,
}

/// One tenant's generations, oldest first.
#[derive(Debug, Default)]
struct TenantFilter {
    generations: Vec<Generation>,
    /// The newest arrival of a key written when no generation could take
    /// it: until the horizon passes it, every lookup answers "maybe".
    untracked_through: Option<i64>,
}

#[derive(Debug)]
struct Generation {
    blocks: Vec<Block>,
    len: u64,
    capacity: u64,
    /// The newest arrival (ms since the epoch) of the values added.
    newest_arrival: i64,
    /// The store's write epoch when the generation started: its keys are
    /// in this epoch or later ones (`epochs`; generations are filled in
    /// turn, epochs written in turn).
    first_epoch: u32,
}

impl Generation {
    /// A generation of at least `capacity` keys: a power of two of blocks
    /// (so that it can be folded in half).
    fn with_capacity(capacity: u64, first_epoch: u32) -> Self {
        let blocks = (capacity * BITS_PER_KEY)
            .div_ceil(512)
            .max(1)
            .next_power_of_two();
        Self {
            blocks: vec![[0; 8]; usize::try_from(blocks).unwrap_or(usize::MAX)],
            len: 0,
            capacity: blocks * 512 / BITS_PER_KEY,
            newest_arrival: i64::MIN,
            first_epoch,
        }
    }

    /// Halves the blocks while the keys fit in half: block `i` of the half
    /// is the union of blocks `i` and `i + half`, as the block of a hash is
    /// its high half modulo the number of blocks.
    fn shrink_to_fit(&mut self) {
        while self.blocks.len() > 1 && self.len <= self.capacity / 2 {
            let half = self.blocks.len() / 2;
            let (low, high) = self.blocks.split_at_mut(half);
            for (block, upper) in low.iter_mut().zip(high.iter()) {
                for (word, bits) in block.iter_mut().zip(upper) {
                    *word |= bits;
                }
            }
            self.blocks.truncate(half);
            self.blocks.shrink_to_fit();
            self.capacity /= 2;
        }
    }

    fn bytes(&self) -> u64 {
        self.blocks.len() as u64 * BLOCK_BYTES
    }

    /// The block of `hash` and the bits to set or test in it.
    fn position(&self, hash: u64) -> (usize, Block) {
        // The high half modulo the number of blocks, a power of two.
        let block = (hash >> 32) & (self.blocks.len() as u64 - 1);
        let mut bits = [0_u64; 8];
        let mut rest = mix(hash);
        for _ in 0..BITS_SET {
            let bit = rest & 511;
            bits[(bit >> 6) as usize] |= 1 << (bit & 63);
            rest >>= 9;
        }
        // The block index is below the number of blocks, so it fits.
        (block as usize, bits)
    }

    fn insert(&mut self, hash: u64, arrival_millis: i64) {
        let (index, bits) = self.position(hash);
        if let Some(block) = self.blocks.get_mut(index) {
            for (word, bit) in block.iter_mut().zip(bits) {
                *word |= bit;
            }
        }
        self.len += 1;
        self.newest_arrival = self.newest_arrival.max(arrival_millis);
    }

    fn may_contain(&self, hash: u64) -> bool {
        let (index, bits) = self.position(hash);
        self.blocks
            .get(index)
            .is_none_or(|block| block.iter().zip(bits).all(|(word, bit)| word & bit == bit))
    }
}

/// The 64-bit hash of an id: ids are hashes already, but tests and other
/// sources may vary only some bits.
fn hash_id(id: u128) -> u64 {
    // The two halves of the id.
    let (high, low) = ((id >> 64) as u64, id as u64);
    mix(low.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ high)
}

/// SplitMix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl TenantFilter {
    /// Charges a generation of `cost` bytes to the filters' `bytes`, if it
    /// fits within `budget`; if not, the tenant answers "maybe" until its
    /// horizon passes `newest_arrival`, the generation's newest key.
    /// Returns whether it was charged.
    fn charge(&mut self, bytes: &mut u64, budget: u64, cost: u64, newest_arrival: i64) -> bool {
        if *bytes + cost > budget {
            self.untracked_through = self.untracked_through.max(Some(newest_arrival));
            return false;
        }
        *bytes += cost;
        true
    }

    /// `None` when the tenant holds no key of `hash`, else the first epoch
    /// that may hold one: that of the oldest generation answering "maybe"
    /// (0 while keys are untracked).
    fn first_epoch(&self, hash: u64) -> Option<u32> {
        if self.untracked_through.is_some() {
            return Some(0);
        }
        self.generations
            .iter()
            .find(|generation| generation.may_contain(hash))
            .map(|generation| generation.first_epoch)
    }
}

impl Filters {
    /// Empty filters using at most `budget` bytes.
    pub(crate) fn new(budget: u64) -> Self {
        Self {
            state: RwLock::new(State {
                tenants: HashMap::new(),
                bytes: 0,
                budget,
            }),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        // Every update leaves the state consistent between statements that
        // can panic (allocation only), so a poisoned lock is as good.
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `tenant` may hold `id` ("maybe"); `false` only when it holds
    /// no key of `id` newer than its horizon.
    #[cfg(test)]
    pub(crate) fn may_contain(&self, tenant: u32, id: u128) -> bool {
        let state = self.read();
        state
            .tenants
            .get(&tenant)
            .is_some_and(|filter| filter.first_epoch(hash_id(id)).is_some())
    }

    /// For each id of `ids` under each tenant of `tenants` (`None`: a shard
    /// without a tenant, no keys), in one lock, `result[i * tenants.len() +
    /// t]`: `None` when the tenant holds no key of the id newer than its
    /// horizon, else the first epoch that may hold one (the generations
    /// are oldest first, so the first answering "maybe" is the oldest).
    pub(crate) fn probe(
        &self,
        tenants: &[Option<u32>],
        ids: impl Iterator<Item = u128>,
    ) -> Vec<Option<u32>> {
        let state = self.read();
        let filters: Vec<Option<&TenantFilter>> = tenants
            .iter()
            .map(|tenant| tenant.and_then(|tenant| state.tenants.get(&tenant)))
            .collect();
        let mut result = Vec::with_capacity(ids.size_hint().0 * tenants.len());
        for id in ids {
            let hash = hash_id(id);
            result.extend(
                filters
                    .iter()
                    .map(|filter| filter.and_then(|filter| filter.first_epoch(hash))),
            );
        }
        result
    }

    /// Adds keys of `tenant` written to epoch `epoch`: each id with the
    /// newest arrival of the value written under it (ms since the epoch).
    /// Epochs are written in turn: `epoch` is never below an earlier
    /// call's.
    pub(crate) fn insert(&self, tenant: u32, keys: &[(u128, i64)], epoch: u32) {
        if keys.is_empty() {
            return;
        }
        let mut state = self.write();
        let State {
            tenants,
            bytes,
            budget,
        } = &mut *state;
        let filter = tenants.entry(tenant).or_default();
        for &(id, arrival_millis) in keys {
            let room = filter
                .generations
                .last()
                .is_some_and(|last| last.len < last.capacity);
            if !room {
                let live: u64 = filter.generations.iter().map(|g| g.len).sum();
                let capacity = (live / 2).clamp(MIN_GENERATION_KEYS, MAX_GENERATION_KEYS);
                let generation = Generation::with_capacity(capacity, epoch);
                if !filter.charge(bytes, *budget, generation.bytes(), arrival_millis) {
                    continue;
                }
                filter.generations.push(generation);
            }
            if let Some(last) = filter.generations.last_mut() {
                last.insert(hash_id(id), arrival_millis);
            }
        }
    }

    /// Adds one generation of `tenant` holding `ids` (each with the newest
    /// arrival of its value), sized for them: the keys found at open.
    /// Beyond the budget, the tenant answers "maybe" until its horizon
    /// passes the newest of them.
    #[cfg(test)]
    pub(crate) fn insert_generation(&self, tenant: u32, ids: &[(u128, i64)]) {
        let mut builder = Builder::new(ids.len() as u64, 0);
        for &(id, arrival_millis) in ids {
            builder.insert(id, arrival_millis);
        }
        self.add_built(tenant, builder);
    }

    /// Adds the generation `builder` made as the oldest of `tenant`'s,
    /// shrunk to fit its keys; beyond the budget, the tenant answers
    /// "maybe" until its horizon passes the newest of them.
    pub(crate) fn add_built(&self, tenant: u32, builder: Builder) {
        let mut generation = builder.generation;
        if generation.len == 0 {
            return;
        }
        generation.shrink_to_fit();
        // Closed: keys written later go into generations of their own,
        // whose first epoch bounds the epochs a probe sends reads to.
        generation.capacity = generation.len;
        let mut state = self.write();
        let State {
            tenants,
            bytes,
            budget,
        } = &mut *state;
        let filter = tenants.entry(tenant).or_default();
        if !filter.charge(
            bytes,
            *budget,
            generation.bytes(),
            generation.newest_arrival,
        ) {
            return;
        }
        // Older than any written since: kept first, it is dropped first.
        filter.generations.insert(0, generation);
    }

    /// Forgets what `tenant` holds below `horizon` (ms since the epoch):
    /// the generations whose newest arrival is older.
    pub(crate) fn expire(&self, tenant: u32, horizon: i64) {
        let mut state = self.write();
        let State { tenants, bytes, .. } = &mut *state;
        let Some(filter) = tenants.get_mut(&tenant) else {
            return;
        };
        filter.generations.retain(|generation| {
            let keep = generation.newest_arrival >= horizon;
            if !keep {
                *bytes -= generation.bytes();
            }
            keep
        });
        if filter
            .untracked_through
            .is_some_and(|through| through < horizon)
        {
            filter.untracked_through = None;
        }
        if filter.generations.is_empty() && filter.untracked_through.is_none() {
            tenants.remove(&tenant);
        }
    }

    /// The largest generation the budget leaves room for, keys.
    pub(crate) fn room(&self) -> u64 {
        let state = self.read();
        state.budget.saturating_sub(state.bytes) / BLOCK_BYTES * 512 / BITS_PER_KEY
    }

    /// Bytes the filters use.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> u64 {
        self.read().bytes
    }
}

/// A generation being filled by a scan, before it is added.
#[derive(Debug)]
pub(crate) struct Builder {
    generation: Generation,
}

impl Builder {
    /// A generation for about `keys` keys (more still fit, with more false
    /// "maybe"s) of epochs `first_epoch` and later.
    pub(crate) fn new(keys: u64, first_epoch: u32) -> Self {
        Self {
            generation: Generation::with_capacity(keys.max(1), first_epoch),
        }
    }

    /// Adds `id`, whose value's newest copy arrived at `arrival_millis`.
    pub(crate) fn insert(&mut self, id: u128, arrival_millis: i64) {
        self.generation.insert(hash_id(id), arrival_millis);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> u128 {
        u128::from(n) << 100 | 0xfeed
    }

    #[test]
    fn never_absent_for_an_added_key_and_rarely_maybe_for_others() {
        let filters = Filters::new(u64::MAX);
        let keys: Vec<(u128, i64)> = (0..300_000).map(|n| (id(n), 5)).collect();
        for chunk in keys.chunks(500) {
            filters.insert(7, chunk, 0);
        }
        assert!(keys.iter().all(|(id, _)| filters.may_contain(7, *id)));
        assert!(!filters.may_contain(8, id(1)), "another tenant");
        let false_positives = (300_000..400_000)
            .filter(|n| filters.may_contain(7, id(*n)))
            .count();
        // A few generations of 0.5 % each.
        assert!(false_positives < 3_000, "{false_positives}");
    }

    #[test]
    fn expiry_drops_only_generations_wholly_below_the_horizon() {
        let filters = Filters::new(u64::MAX);
        filters.insert_generation(1, &[(id(1), 100), (id(2), 200)]);
        let later: Vec<(u128, i64)> = (10..MIN_GENERATION_KEYS + 10)
            .map(|n| (id(n), 300))
            .collect();
        filters.insert(1, &later, 0);
        filters.insert(1, &[(id(3), 400)], 0);
        filters.expire(1, 200);
        assert!(filters.may_contain(1, id(1)) && filters.may_contain(1, id(2)));
        filters.expire(1, 201);
        assert!(filters.may_contain(1, id(10)) && filters.may_contain(1, id(3)));
        filters.expire(1, 301);
        assert!(filters.may_contain(1, id(3)));
        filters.expire(1, i64::MAX);
        assert!(!filters.may_contain(1, id(3)));
        assert_eq!(filters.bytes(), 0);
    }

    #[test]
    fn beyond_the_budget_a_tenant_answers_maybe_until_the_horizon_passes() {
        let generation = Generation::with_capacity(MIN_GENERATION_KEYS, 0);
        let one = generation.bytes();
        let filters = Filters::new(one);
        let first: Vec<(u128, i64)> = (0..generation.capacity).map(|n| (id(n), 10)).collect();
        filters.insert(1, &first, 0);
        filters.insert(1, &[(id(u64::MAX >> 8), 20)], 0);
        assert!(filters.may_contain(1, id(123_456_789)), "untracked keys");
        assert_eq!(filters.bytes(), one);
        filters.insert_generation(2, &[(id(1), 15)]);
        assert!(filters.may_contain(2, id(99)), "over budget at open");
        let mut big = Builder::new(1 << 20, 0);
        for n in 0..1_000 {
            big.insert(id(n), 1);
        }
        let unbounded = Filters::new(u64::MAX);
        unbounded.add_built(3, big);
        assert!(
            (0..1_000).all(|n| unbounded.may_contain(3, id(n))),
            "folded"
        );
        assert!(unbounded.bytes() <= 4 * 1024, "{}", unbounded.bytes());
        filters.expire(1, 11);
        assert!(filters.may_contain(1, id(123_456_789)), "still untracked");
        filters.expire(1, 21);
        assert!(!filters.may_contain(1, id(0)));
        filters.insert(1, &[(id(5), 30)], 0);
        assert!(filters.may_contain(1, id(5)));
    }

    #[test]
    fn a_probe_names_the_first_epoch_of_the_oldest_generation_that_may_hold_the_id() {
        let filters = Filters::new(u64::MAX);
        let mut built = Builder::new(1_000, 2);
        built.insert(id(1), 1);
        filters.add_built(1, built);
        // Fills a generation started in epoch 5, then one started in 9.
        let capacity = Generation::with_capacity(MIN_GENERATION_KEYS, 0).capacity;
        let fill: Vec<(u128, i64)> = (100..capacity + 100).map(|n| (id(n), 2)).collect();
        filters.insert(1, &fill, 5);
        filters.insert(1, &[(id(7), 3)], 9);
        filters.insert(1, &[(id(1), 4)], 9);
        let probe = |n: u64| filters.probe(&[Some(1), Some(2), None], [id(n)].into_iter());
        assert_eq!(probe(7), vec![Some(9), None, None]);
        assert_eq!(probe(100), vec![Some(5), None, None]);
        assert_eq!(probe(1), vec![Some(2), None, None], "the oldest");
        let absent = (1_000_000..1_010_000)
            .filter(|n| probe(*n)[0].is_some())
            .count();
        assert!(absent < 200, "{absent}");
    }
}
