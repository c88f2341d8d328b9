//! [`ItemCache`]: the DynamoDB event table's items a worker read or wrote
//! recently, in front of DynamoDB, least recently used first out.
//!
//! A cached item may be stale — another worker may have added copies since
//! — but copies are only ever added to an item (and dropped only once no
//! decision is expected to consult them), so a copy seen in the cache was
//! accepted:
//! what the cache shows to be a duplicate, or a copy accepted before, is
//! one. Anything that would accept a copy is checked against the table by
//! the conditional write, whose condition is the cached version.
//!
//! The `lru` crate keeps the order (O(1) get and put; widely used and
//! maintained, and already built here as a dependency of the AWS SDK's S3
//! client, so it costs no build time).

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lru::LruCache;

use super::item::ItemState;
use crate::events::rule::EventKey;

/// Memory per cached item of one copy, in bytes, about: the LRU node and
/// its hash-table slot (~100), the shared state (~40), one copy (~100) and
/// its sequence number's text (~60); the shard id is shared with the
/// shard's other copies. Each further copy adds ~160. The table is sized
/// for all entries up front (~50 bytes each).
pub const APPROXIMATE_BYTES_PER_ENTRY: usize = 300;

/// Recently read or written items by their key ([`item_key`]), at most a
/// set number.
///
/// [`item_key`]: super::item::item_key
pub struct ItemCache {
    /// `None` when the cache holds nothing (0 entries).
    entries: Option<Mutex<LruCache<EventKey, Arc<ItemState>>>>,
}

impl std::fmt::Debug for ItemCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ItemCache")
            .field("len", &self.len())
            .finish()
    }
}

impl ItemCache {
    /// A cache of at most `entries` items (0: none are kept).
    pub fn new(entries: usize) -> Self {
        Self {
            entries: NonZeroUsize::new(entries).map(|cap| Mutex::new(LruCache::new(cap))),
        }
    }

    fn lock(
        entries: &Mutex<LruCache<EventKey, Arc<ItemState>>>,
    ) -> MutexGuard<'_, LruCache<EventKey, Arc<ItemState>>> {
        // A panic while holding the lock leaves a consistent LRU (its
        // operations do not panic midway); keep using it.
        entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The item of `key` as last read or written here, if still cached.
    pub fn get(&self, key: &EventKey) -> Option<Arc<ItemState>> {
        let entries = self.entries.as_ref()?;
        Self::lock(entries).get(key).cloned()
    }

    /// Remembers `state` as the item of `key`, unless a later version is
    /// cached already (writers of different shards finish in any order).
    /// States without an item are not cached.
    pub fn put(&self, key: EventKey, state: Arc<ItemState>) {
        let Some(entries) = self.entries.as_ref() else {
            return;
        };
        if state.version.is_none() {
            return;
        }
        let mut entries = Self::lock(entries);
        if entries
            .peek(&key)
            .is_some_and(|cached| cached.version > state.version)
        {
            return;
        }
        entries.put(key, state);
    }

    /// How many items are cached.
    pub fn len(&self) -> usize {
        self.entries
            .as_ref()
            .map_or(0, |entries| Self::lock(entries).len())
    }
}

#[cfg(test)]
mod tests {
    use sequence_range::SequenceNumber;

    use super::*;
    use crate::events::dynamodb::item::HeldCopy;
    use crate::events::rule::{AcceptedCopy, CopyRef};

    fn state(version: u64) -> Arc<ItemState> {
        Arc::new(ItemState {
            version: Some(version),
            copies: vec![HeldCopy {
                accepted: AcceptedCopy {
                    fingerprint: 1,
                    arrival_millis: 2,
                    copy: CopyRef {
                        shard_id: Arc::from("shardId-000000000000"),
                        sequence_number: SequenceNumber::parse(
                            "49590338271490256608559692538361571095921575989136588898",
                        )
                        .unwrap(),
                        sub_sequence_number: None,
                    },
                },
                written_millis: 3,
            }],
        })
    }

    fn key(id: u128) -> EventKey {
        EventKey { id, fingerprint: 7 }
    }

    #[test]
    fn keeps_the_latest_version_of_the_most_recent_items() {
        let cache = ItemCache::new(2);
        cache.put(key(1), state(2));
        cache.put(key(1), state(1));
        assert_eq!(
            cache.get(&key(1)).unwrap().version,
            Some(2),
            "never goes back"
        );
        cache.put(key(2), state(1));
        cache.get(&key(1));
        cache.put(key(3), state(1));
        assert!(cache.get(&key(2)).is_none(), "the least recently used goes");
        assert!(cache.get(&key(1)).is_some() && cache.get(&key(3)).is_some());
        assert!(
            cache
                .get(&EventKey {
                    id: 1,
                    fingerprint: 8
                })
                .is_none(),
            "another payload's item"
        );
        cache.put(key(4), Arc::new(ItemState::default()));
        assert!(cache.get(&key(4)).is_none(), "no item, nothing cached");
        let none = ItemCache::new(0);
        none.put(key(1), state(1));
        assert_eq!((none.len(), none.get(&key(1))), (0, None));
    }

    #[test]
    fn an_entry_fits_its_documented_size() {
        // The parts this crate allocates; the LRU node and slot are the
        // crate's (two pointers, key, value, and hash-table control bytes).
        let own = state(1).approximate_bytes() + 2 * std::mem::size_of::<usize>();
        let lru = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<EventKey>() + 8 + 32;
        assert!(
            own + lru <= APPROXIMATE_BYTES_PER_ENTRY,
            "{own} + {lru} bytes per entry"
        );
    }
}
