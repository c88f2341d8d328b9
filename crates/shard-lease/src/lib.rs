//! Kinesis shard leases and checkpoints in a DynamoDB table.
//!
//! One row per shard, with the KCL's attribute names (`leaseKey`,
//! `leaseOwner`, `leaseCounter`, `checkpoint`, …) so operators who know the
//! KCL can read the table. Every write is conditional on the lease counter the
//! writer last saw, and every write increments it: a worker that has lost a
//! lease fails its next write, and so writes nothing more for the shard.
//!
//! # Layout
//! - [`checkpoint`]: [`Checkpoint`], a sequence number or a KCL sentinel.
//! - [`lease`]: [`Lease`] (one row) and [`PendingBatch`] (the batch recorded
//!   before its PUT), with the attribute mapping; `stagedBatches`, the
//!   batches an owner has staged for an Iceberg table (data files written,
//!   not yet committed), opaque entries to this crate.
//! - [`table`]: [`LeaseTable`], the handle, one function per DynamoDB call:
//!   create the table, scan, get, create and delete a lease row.
//! - [`provision`]: [`create_table_if_missing`], a table with a string
//!   partition key, on-demand, created if missing and waited for until
//!   `ACTIVE` — the lease table's, and the daemon's other tables'.
//! - [`owner_writes`]: the [`LeaseTable`] writes that take, renew, record a
//!   pending batch, checkpoint, stage a batch, checkpoint what a table
//!   commit took, and release a lease, and what a failed condition means.
//! - [`update`]: [`Update`] and [`Condition`], the typed update and condition
//!   expressions every write is built from, rendered by [`Expressions`].
//! - [`write_token`]: [`WriteToken`], stamped into the row by every owner
//!   write.
//! - [`held`]: [`HeldLease`], a lease this worker holds; serializes writes
//!   from the renewer and the shard task and remembers a loss.
//! - [`expiry`]: [`LeaseExpiry`], when another worker's lease may be taken.
//! - [`balance`]: [`plan_takes`], which leases to take or steal so they
//!   spread evenly (the KCL's rule).
//! - [`heartbeat`]: [`WorkerHeartbeat`], one row per live worker, and the
//!   [`LeaseTable`] calls that write and delete it.
//! - [`committer`]: [`CommitterLease`], the row (`iceberg#committer`) that
//!   elects the one worker committing every owner's staged batches to an
//!   Iceberg table and carries what it last published, and the
//!   [`LeaseTable`] calls that read, take, renew and publish through it.
//! - [`error`]: [`LeaseError`]; [`retry`]: which DynamoDB errors to retry
//!   ([`retry::classify`]: throttling, transient, persistent, or final),
//!   matched as each operation's typed variants, and what every AWS
//!   service's errors share: the transport and 5xx rule and
//!   [`modeled_kinds!`], which maps an operation's variants to kinds.
//! - `test_util` (feature `test-util`): `FakeTable`, the lease table in
//!   memory behind a mocked DynamoDB client, for tests of this crate and its
//!   users.
//!
//! A worker scans the table ([`LeaseTable::list_leases`]), creates rows for new
//! shards, takes free or expired leases into [`HeldLease`]s, renews them, and
//! for each batch calls [`HeldLease::record_pending_batch`], PUTs the object,
//! then [`HeldLease::checkpoint`]. For an Iceberg table it records the
//! pending batch, writes the batch's data files, then
//! [`HeldLease::stage_batch`]; the committer appends every owner's staged
//! files to the table in one commit and publishes how far each shard got
//! ([`LeaseTable::publish_committed`]); each owner then moves its
//! checkpoint there and drops the committed entries
//! ([`HeldLease::checkpoint_committed`]).
#![deny(missing_docs)]

pub mod balance;
pub mod checkpoint;
pub mod committer;
pub mod error;
pub mod expiry;
pub mod heartbeat;
pub mod held;
pub mod lease;
pub mod owner_writes;
pub mod provision;
pub mod retry;
pub mod table;
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;
pub mod update;
pub mod write_token;

pub use balance::{TakePlan, plan_takes};
pub use checkpoint::Checkpoint;
pub use committer::{COMMITTER_KEY, CommitterLease};
pub use error::LeaseError;
pub use expiry::LeaseExpiry;
pub use heartbeat::WorkerHeartbeat;
pub use held::HeldLease;
pub use lease::{Lease, MalformedLease, PendingBatch};
pub use owner_writes::MAX_STAGED_BYTES;
pub use provision::{
    TABLE_ACTIVE_TIMEOUT, TableCreation, TableSetupError, create_table_if_missing,
};
pub use table::{CreateOutcome, LeaseTable, TableScan};
pub use update::{Clause, Condition, Expressions, SetValue, Update};
pub use write_token::WriteToken;
