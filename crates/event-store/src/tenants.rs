//! [`Tenants`]: the number that prefixes a shard's keys in the `copies`
//! keyspaces, and the shard's horizon.
//!
//! A shard's copies are keyed by a 4-byte *tenant* number rather than by
//! the shard id (20 bytes or more): with the 16-byte id, a key is 20 bytes,
//! which fjall keeps inline in its memtables and blocks (`byteview` stores
//! up to 20 bytes without a heap pointer), so the key comparisons of every
//! memtable lookup stay within the entry; a shard-id prefix made each
//! comparison follow a pointer and compare 21 equal bytes first. Tenants
//! are given out in order and recorded in the `shards` keyspace before the
//! first copy is written under them; they are never reused.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The horizon of a forgotten shard: every copy is older.
pub(crate) const FORGOTTEN: i64 = i64::MAX;

/// Tenant numbers and horizons, shared by the store and the compaction
/// filter.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tenants {
    map: Arc<RwLock<TenantMap>>,
}

/// What [`Tenants`] guards.
#[derive(Debug, Default)]
pub(crate) struct TenantMap {
    /// Each known shard's tenant.
    pub(crate) by_shard: HashMap<Box<str>, u32>,
    /// The horizon of each tenant that has one: its copies that arrived
    /// earlier (ms since the epoch) are no longer needed.
    pub(crate) horizons: HashMap<u32, i64>,
    /// The next tenant to give out.
    pub(crate) next: u32,
}

impl Tenants {
    /// The tenant of `shard_id`, if it has one.
    pub(crate) fn get(&self, shard_id: &str) -> Option<u32> {
        self.read().by_shard.get(shard_id).copied()
    }

    /// The horizon of `shard_id`, if it has one.
    #[cfg(test)]
    pub(crate) fn horizon(&self, shard_id: &str) -> Option<i64> {
        let map = self.read();
        map.by_shard
            .get(shard_id)
            .and_then(|tenant| map.horizons.get(tenant))
            .copied()
    }

    /// The horizons by tenant.
    pub(crate) fn horizons(&self) -> HashMap<u32, i64> {
        self.read().horizons.clone()
    }

    /// Shared access.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, TenantMap> {
        // Every update is a single insert or remove, so a panic while the
        // lock is held cannot leave the maps half-updated.
        self.map.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Exclusive access.
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, TenantMap> {
        self.map.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a copy that arrived at `arrival_millis` is kept under
    /// `horizon`.
    pub(crate) fn keeps(horizon: Option<i64>, arrival_millis: i64) -> bool {
        horizon.is_none_or(|horizon| arrival_millis >= horizon)
    }
}
