//! The local event store (`--event-dedup-store local`): an embedded LSM
//! store under `--event-dedup-dir`, built on `fjall` (pure Rust; Bloom
//! filters, atomic batches across keyspaces, compaction filters).
//!
//! - `store`: [`LocalStore`] — open, decide a run, record copies decided
//!   elsewhere;
//! - `shards`: per-shard facts — watermarks, ended marks, horizons — and
//!   forgetting shards not written for a long time;
//! - `options`: [`LocalOptions`] and the memory budget;
//! - `error`: [`LocalStoreError`];
//! - `codec`: the byte layout of keys and values;
//! - `epochs`: the `copies` keys split into one keyspace per epoch of
//!   writes, deleted whole when expired;
//! - `runs`: the write epoch's keys as one fjall entry per call, with an
//!   in-memory index, loaded into the epoch's keyspace when it closes;
//! - `tenants`: the short numbers that prefix a shard's keys, and the
//!   shards' horizons;
//! - `expiry`: the compaction filter that drops copies below the horizons;
//! - `recent`: each shard's keys decided lately, so that retries are
//!   decided without a read of fjall;
//! - `filter`: the in-memory filters that answer for new ids without a
//!   read of fjall.

mod codec;
mod epochs;
mod error;
mod expiry;
mod filter;
mod options;
mod recent;
mod runs;
mod shards;
mod store;
mod tenants;

pub use self::{
    error::LocalStoreError, options::LocalOptions, shards::Watermark, store::LocalStore,
};
