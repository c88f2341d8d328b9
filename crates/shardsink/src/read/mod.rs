//! Reading: a shard's records, in order, from Kinesis.
//!
//! - `reader`: [`ShardReader`](reader::ShardReader), GetShardIterator and GetRecords for one
//!   shard, with the fall back to `TRIM_HORIZON` when a position is rejected as expired;
//! - `resume_check`: [`ResumeCheck`](resume_check::ResumeCheck), whether a fresh iterator's
//!   position is still in the shard, decided by the records it returns;
//! - `record`: [`ShardRecord`](record::ShardRecord), one Kinesis record as shardsink handles it;
//! - `kpl`: KPL aggregated records unpacked into user records;
//! - `retention`: [`RetentionGap`](retention::RetentionGap), records that expired unread (the
//!   marker object that records them is written by `output::gap_marker`);
//! - `shard_graph`: parents and children after resharding — which shards get
//!   a lease, which may be worked on, which leases may go.

pub(crate) mod kpl;
pub(crate) mod reader;
pub(crate) mod record;
pub(crate) mod resume_check;
pub(crate) mod retention;
pub(crate) mod shard_graph;
