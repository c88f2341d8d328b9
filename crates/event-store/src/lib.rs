//! The decision store of event deduplication: each shard's accepted copies
//! of events, its watermark and its ended mark, in an embedded LSM store
//! under one directory, built on `fjall` (pure Rust; Bloom filters, atomic
//! batches across keyspaces, compaction filters). The daemon uses it as its
//! local event store (`--event-dedup-store local`).
//!
//! What it offers, all on [`LocalStore`]:
//! - **open** ([`LocalStore::open`]) a directory with [`LocalOptions`];
//! - **decide** ([`LocalStore::decide`]) a run of one shard's user records
//!   ([`Candidate`]s of a [`Lineage`]) with the [`Rule`], storing the
//!   accepted copies and the shard's [`Watermark`] in one atomic batch;
//! - **insert** ([`LocalStore::insert`]) accepted copies decided elsewhere
//!   (read back from the archive);
//! - **maintain**: advance a shard's horizon
//!   ([`LocalStore::advance_horizon`]), below which copies leave, record
//!   watermarks and ended marks; epochs are started and deleted as the
//!   calls go;
//! - **budget**: its memory is bounded by [`LocalOptions`] (see there).
//!
//! The store is a cache: a shard it does not know, or knows only up to an
//! older watermark, is rebuilt by the caller from the archive.
//!
//! # Layout
//! - [`rule`]: the decision rule — [`Rule`], [`Decision`], [`Outcome`] —
//!   and what it decides on: [`EventKey`], [`CopyRef`], [`AcceptedCopy`];
//! - [`lineage`]: [`Lineage`] (a shard and its ancestors), [`Candidate`]
//!   (a record to decide) and what *precedes* a candidate;
//! - `store`: [`LocalStore`] — open, the state its clones share, the
//!   shards' locks;
//! - `decide`: decide a run ([`LocalStore::decide`]), record copies decided
//!   elsewhere ([`LocalStore::insert`]);
//! - `shards`: per-shard facts — [`Watermark`]s, ended marks, horizons —
//!   and forgetting shards not written for a long time;
//! - `options`: [`LocalOptions`] and the memory budget;
//! - `error`: [`LocalStoreError`];
//! - `codec`: the byte layout of keys and values;
//! - `epochs`: the `copies` keys split into one keyspace per epoch of
//!   writes, deleted whole when expired (`epochs::epoch`: one epoch, its
//!   runs while open and its loading when it closes);
//! - `runs`: the write epoch's keys as one fjall entry per call, with an
//!   in-memory index, loaded into the epoch's keyspace when it closes;
//! - `tenants`: the short numbers that prefix a shard's keys, and the
//!   shards' horizons;
//! - `expiry`: the compaction filter that drops copies below the horizons;
//! - `recent`: each shard's keys decided lately, so that retries are
//!   decided without a read of fjall;
//! - `filter`: the in-memory filters that answer for new ids without a
//!   read of fjall.
//!
//! A call flows: `decide` takes the shard's lock (`recent`), asks `filter`
//! which ids fjall may hold, reads those from `epochs` (the write epoch's
//! from its `runs` index), applies the [`Rule`], then writes the accepted
//! copies as one run and the watermark (`shards`) in one batch, encoded by
//! `codec`; `expiry` and the epochs' deletion drop what falls below the
//! horizons held in `tenants`.
//!
//! Benchmarks: `cargo bench -p event-store` (see `benches/README.md`).
#![deny(missing_docs)]

mod codec;
mod decide;
mod epochs;
mod error;
mod expiry;
mod filter;
pub mod lineage;
mod options;
mod recent;
pub mod rule;
mod runs;
mod shards;
mod store;
mod tenants;

pub use self::error::LocalStoreError;
pub use self::lineage::{Candidate, Lineage, precedes_in_shard};
pub use self::options::LocalOptions;
pub use self::rule::{AcceptedCopy, CopyRef, Decision, EventKey, Outcome, Rule};
pub use self::shards::Watermark;
pub use self::store::LocalStore;
