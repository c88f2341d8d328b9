//! Reading: a shard's records, in order, from Kinesis.
//!
//! - `mode`: [`ReadMode`](mode::ReadMode), polling or enhanced fan-out,
//!   [`ReadSource`](mode::ReadSource), the mode with the stream consumer's ARN, and
//!   [`Reader`](mode::Reader), a shard's reader in either mode;
//! - `fan_out`: [`FanOutReader`](fan_out::FanOutReader), SubscribeToShard for one shard:
//!   renewals after the last continuation, the shard's end by child shards or ListShards;
//! - `reader`: [`ShardReader`](reader::ShardReader), GetShardIterator and GetRecords for one
//!   shard, with the fall back to `TRIM_HORIZON` when a position is rejected as expired;
//! - `batch`: [`ReadBatch`](batch::ReadBatch), the records of one read (a GetRecords
//!   response or a SubscribeToShardEvent);
//! - `position`: [`ReadPosition`](position::ReadPosition), where a shard's reading stands —
//!   the last record delivered and the check of a fresh position — shared by both readers;
//! - `resume_check`: [`ResumeCheck`](resume_check::ResumeCheck), whether a fresh iterator's
//!   position is still in the shard, decided by the records it returns;
//! - `record`: [`ShardRecord`](record::ShardRecord), one Kinesis record as shardsink handles it;
//! - `kpl`: KPL aggregated records unpacked into user records;
//! - `retention`: [`RetentionGap`](retention::RetentionGap), records that expired unread (the
//!   marker object that records them is written by `output::gap_marker`);
//! - `shard_graph`: parents and children after resharding — which shards get
//!   a lease, which may be worked on, which leases may go.

pub(crate) mod batch;
pub(crate) mod fan_out;
pub(crate) mod kpl;
pub(crate) mod mode;
pub(crate) mod position;
pub(crate) mod reader;
pub(crate) mod record;
pub(crate) mod resume_check;
pub(crate) mod retention;
pub(crate) mod shard_graph;
