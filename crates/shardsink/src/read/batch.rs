//! [`ReadBatch`]: the records of one read, and what it says of the shard.

use crate::aws::ShardInfo;
use crate::read::record::ShardRecord;
use crate::read::retention::RetentionGap;

/// What one read returned: a GetRecords response, or a
/// SubscribeToShardEvent (whose records and `MillisBehindLatest` mean the
/// same).
#[derive(Debug, Default)]
pub struct ReadBatch {
    /// Records in sequence order (KPL aggregates unpacked).
    pub records: Vec<ShardRecord>,
    /// `MillisBehindLatest`: how far the shard's newest record is ahead of
    /// the last one returned; 0 when caught up.
    pub millis_behind_latest: Option<i64>,
    /// No `NextShardIterator`: the shard is closed and fully read (`SHARD_END`).
    pub shard_end: bool,
    /// Data bytes in the response.
    pub bytes: u64,
    /// `ChildShards` of a shard at `SHARD_END` (after a split or merge).
    pub child_shards: Vec<ShardInfo>,
    /// Set on the read that found the position expired (see
    /// [`ResumeCheck`]): records between it and the first record of this
    /// read (or the shard's end) were trimmed unread.
    pub retention_gap: Option<RetentionGap>,
}

impl ReadBatch {
    /// Whether the shard is caught up: `MillisBehindLatest` is 0. An empty
    /// response alone is not: "it might take multiple calls to get to a
    /// portion of the shard that contains records" (GetRecords API
    /// reference), so a shard behind the tip is read on at the busy rate.
    /// Only a server that sends no `MillisBehindLatest` falls back to "no
    /// records returned".
    pub fn is_caught_up(&self) -> bool {
        match self.millis_behind_latest {
            Some(behind) => behind == 0,
            None => self.records.is_empty(),
        }
    }
}
