//! [`LocalOptions`]: the local store's settings, and its memory budget.

use std::time::Duration;

/// Default size of the block cache: 40 MiB.
pub(crate) const DEFAULT_CACHE_BYTES: u64 = 40 * 1024 * 1024;

/// Default memtable size of the epochs' keyspaces: 8 MiB.
pub(crate) const DEFAULT_MEMTABLE_BYTES: u64 = 8 * 1024 * 1024;

/// Default bound of the in-memory filters of the `copies` keys: 48 MiB
/// (1.5 bytes per key, up to about twice the live keys while generations
/// wait for the horizon: 16 to 32 million keys).
pub(crate) const DEFAULT_FILTER_BYTES: u64 = 48 * 1024 * 1024;

/// Default number of key writes to one epoch of the `copies` keys before
/// the next starts: 200,000 (its index's map then never outgrows the
/// 262,144 slots it is made with; about 20 MiB in memory while the epoch
/// is open, about 14 MB on disk once closed).
pub(crate) const DEFAULT_EPOCH_KEYS: u64 = 200_000;

/// Default bytes of values written to one epoch before the next starts:
/// 16 MiB (200,000 keys of one copy are about 9.4 MB; keys written again
/// and again, as when one id keeps being accepted with new payloads, end
/// the epoch sooner).
pub(crate) const DEFAULT_EPOCH_VALUE_BYTES: u64 = 16 * 1024 * 1024;

/// A shard not written for this long, by the wall clock, is forgotten when
/// the store opens: 7 days.
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Default number of fjall's background threads: 3. fjall keeps its first
/// worker for flushes and has it hand compaction requests back to the queue
/// while another worker compacts, which turns it into a busy loop when
/// there is no third worker to take them (fjall 3.1, `worker_pool.rs`); a
/// single worker can block on its own full queue. Three avoid both.
pub(crate) const DEFAULT_WORKER_THREADS: usize = 3;

/// Settings of a [`LocalStore`](crate::LocalStore).
///
/// # Memory
/// The store's memory is bounded by
/// - the block cache, `cache_bytes` (data, index and filter blocks; about
///   20 MiB of index and filter blocks per 10 million keys compete for it);
/// - the memtables of the runs keyspaces (`runs`): the write epoch's
///   active one and at most 4 sealed ones waiting for their flush (fjall
///   halts writes at 4), 5 × `memtable_bytes`, and those of an epoch being
///   loaded until its runs keyspace is deleted; all bounded by the 64 MiB
///   journal (fjall flushes the oldest beyond it). The `copies` keyspaces
///   take no memtable writes: their keys are loaded by bulk ingestion;
/// - the write epoch's index (`runs`): a map of 262,144 slots of 41 bytes
///   (about 11 MiB for up to about 229,000 keys) and its values, at most
///   `epoch_value_bytes` and one call's more; and while the epoch before
///   it is loaded into its keyspace, that epoch's index too and its keys
///   sorted (40 bytes a key, about 8 MiB);
/// - the `shards` memtables, 5 × 1 MiB;
/// - the index and filter blocks fjall pins outside the cache (by its
///   default pinning policies, the filters of level 0 and the indexes of
///   levels 0 and 1: the newest tables only, a few MiB);
/// - the in-memory filters of the `copies` keys, at most `filter_bytes`:
///   1.5 bytes per key whose newest copy is within the horizon, up to
///   twice that while a generation waits for the horizon to pass it
///   (about 15 to 25 MiB for 10 million keys);
/// - the recent keys (`recent`): about 2 MiB per shard.
///
/// With the defaults: 40 MiB, at most 64 MiB, 2 × (11 + 16) MiB, 8 MiB,
/// 5 MiB, a few MiB, at most 48 MiB and 2 MiB per shard: at most about
/// **225 MiB** (the benchmark's process, one shard and 10 million keys, is
/// 140 to 175 MiB resident).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalOptions {
    /// Block cache size, bytes. Default 40 MiB (`DEFAULT_CACHE_BYTES`).
    pub cache_bytes: u64,
    /// Memtable size of the epochs' keyspaces (the runs keyspace takes the
    /// writes), bytes; applies to each epoch's keyspaces when they are
    /// created (fjall keeps a keyspace's options). Default 8 MiB
    /// (`DEFAULT_MEMTABLE_BYTES`).
    pub memtable_bytes: u64,
    /// Shards not written for this long (wall clock) are forgotten at open:
    /// watermark and ended mark removed, copies dropped by compaction.
    /// Default 7 days (`FORGET_AFTER`).
    pub forget_after: Duration,
    /// fjall's background threads (flushes and compactions), at least 1.
    /// Default 3 (`DEFAULT_WORKER_THREADS`).
    pub worker_threads: usize,
    /// Bound of the in-memory filters of the `copies` keys, bytes. Beyond
    /// it, a shard's new keys go into no filter and its lookups read fjall
    /// until they pass its horizon: slower, never wrong. Default 48 MiB
    /// (`DEFAULT_FILTER_BYTES`).
    pub filter_bytes: u64,
    /// Key writes to one epoch of the `copies` keys (one fjall keyspace)
    /// before the next starts, which also bounds the write epoch's index
    /// in memory; old epochs are deleted whole. Default
    /// 200,000 (`DEFAULT_EPOCH_KEYS`).
    pub epoch_keys: u64,
    /// Bytes of values written to one epoch before the next starts, which
    /// bounds the write epoch's index when keys are written many times.
    /// Default 16 MiB (`DEFAULT_EPOCH_VALUE_BYTES`).
    pub epoch_value_bytes: u64,
}

impl Default for LocalOptions {
    fn default() -> Self {
        Self {
            cache_bytes: DEFAULT_CACHE_BYTES,
            memtable_bytes: DEFAULT_MEMTABLE_BYTES,
            forget_after: FORGET_AFTER,
            worker_threads: DEFAULT_WORKER_THREADS,
            filter_bytes: DEFAULT_FILTER_BYTES,
            epoch_keys: DEFAULT_EPOCH_KEYS,
            epoch_value_bytes: DEFAULT_EPOCH_VALUE_BYTES,
        }
    }
}
