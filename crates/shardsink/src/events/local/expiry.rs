//! How old copies leave the local store without scans: each shard has a
//! *horizon* (an arrival time, ms since the epoch) below which its copies
//! are no longer needed, and a fjall compaction filter removes every value
//! whose newest copy arrived before its shard's horizon as the LSM tree
//! compacts (`fjall::compaction::filter`; fjall runs the filter on every
//! item a compaction rewrites). A rewritten value also drops its copies
//! below the horizon ([`Horizons::keeps`]).
//!
//! Horizons live in memory (read on every compaction and every rewrite)
//! and in the `shards` keyspace (loaded at open).

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use fjall::compaction::filter::{
    CompactionFilter, CompactionFilterResult, Context, Factory, ItemAccessor, Verdict,
};

use super::codec;

/// The horizon of a forgotten shard: every copy is older.
pub const FORGOTTEN: i64 = i64::MAX;

/// The horizons of all shards that have one, shared with the compaction
/// filter.
#[derive(Debug, Clone, Default)]
pub struct Horizons {
    by_shard: Arc<RwLock<HashMap<Box<str>, i64>>>,
}

impl Horizons {
    /// The horizon of `shard_id`, if set.
    pub fn get(&self, shard_id: &str) -> Option<i64> {
        self.read().get(shard_id).copied()
    }

    /// Sets the horizon of `shard_id`.
    pub fn set(&self, shard_id: &str, horizon: i64) {
        self.write().insert(Box::from(shard_id), horizon);
    }

    /// Removes the horizon of `shard_id`: its copies are all kept.
    pub fn remove(&self, shard_id: &str) {
        self.write().remove(shard_id);
    }

    /// Whether a copy of a shard with `horizon` that arrived at
    /// `arrival_millis` is kept.
    pub fn keeps(horizon: Option<i64>, arrival_millis: i64) -> bool {
        horizon.is_none_or(|horizon| arrival_millis >= horizon)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Box<str>, i64>> {
        // A panic while holding the lock cannot leave the map half-updated
        // (single insert or remove), so a poisoned lock is still good.
        self.by_shard.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<Box<str>, i64>> {
        self.by_shard
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The filter factory to install on the `copies` keyspace.
    pub fn factory(&self) -> Arc<dyn Factory> {
        Arc::new(ExpiryFactory {
            horizons: self.clone(),
        })
    }
}

/// Makes one [`ExpiryFilter`] per compaction.
struct ExpiryFactory {
    horizons: Horizons,
}

impl Factory for ExpiryFactory {
    fn name(&self) -> &str {
        "shardsink-event-expiry"
    }

    fn make_filter(&self, _: &Context) -> Box<dyn CompactionFilter> {
        // A copy of the horizons taken when the compaction starts: a horizon
        // set later applies to the next compaction.
        let horizons = self
            .horizons
            .read()
            .iter()
            .map(|(shard, horizon)| (Box::<[u8]>::from(shard.as_bytes()), *horizon))
            .collect();
        Box::new(ExpiryFilter { horizons })
    }
}

/// Removes `copies` values whose newest copy is older than the horizon of
/// the key's shard.
struct ExpiryFilter {
    horizons: HashMap<Box<[u8]>, i64>,
}

impl CompactionFilter for ExpiryFilter {
    fn filter_item(&mut self, item: ItemAccessor<'_>, _: &Context) -> CompactionFilterResult {
        let Some(horizon) = codec::key_shard(item.key()).and_then(|shard| self.horizons.get(shard))
        else {
            return Ok(Verdict::Keep);
        };
        // A value that does not decode is kept: reads report it.
        Ok(match codec::newest_arrival(&item.value()?) {
            Some(newest) if !Horizons::keeps(Some(*horizon), newest) => Verdict::Remove,
            _ => Verdict::Keep,
        })
    }
}
