//! Apache Iceberg tables: the table shardsink writes into with
//! `--format iceberg`, and committing staged data files to it exactly once.
//!
//! - `catalog`: the catalog kinds and their settings (SQLite URIs, table
//!   names, warehouses), and opening a catalog;
//! - `create`: the table shardsink creates (the `parquet` format's columns,
//!   partitioned by arrival day or hour), and finding or creating it;
//! - `state`: [`CommitState`](state::CommitState), each shard's committed
//!   end, which every commit writes beside its snapshot; the staged batches;
//!   the plan of which staged batches continue the table;
//! - `staging`: a batch's data file paths and the staged batch recorded
//!   in the lease row;
//! - `commit`: one table commit of staged batches, pinned to the table it
//!   was planned on, with the check of a commit whose outcome is unknown.
//! - `expiry`: dropping snapshots older than the retention from the
//!   table's metadata;
//! - `sink`: what a shard's writer needs of the table (data file keys,
//!   staged entries, committed ends, published states);
//!
//! Why each record ends up in exactly one live data file: docs/DESIGN.md,
//! "Iceberg tables".

pub(crate) mod catalog;
pub(crate) mod commit;
pub(crate) mod committer;
pub(crate) mod create;
pub(crate) mod expiry;
pub(crate) mod sink;
pub(crate) mod staging;
pub(crate) mod state;

#[cfg(test)]
pub(crate) mod test_support;
