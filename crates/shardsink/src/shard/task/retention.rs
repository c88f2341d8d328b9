//! A shard whose records expired unread: the gap is reported before
//! anything is written past it (see [`RetentionGap`]).

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{ShardTask, s3_retry};
use crate::aws::StartingPosition;
use crate::ops::log::error_chain;
use crate::output::gap_marker;
use crate::read::retention::RetentionGap;
use crate::shard::context::ShardExit;
use crate::shard::error::ShardError;

impl ShardTask {
    /// Records of this shard expired unread ([`RetentionGap`]): the gap is
    /// reported (marker, error log, counter) before anything is written past
    /// it, and the resume skip goes on — records after the gap may be in S3 already
    /// (a pending batch whose first records expired, say).
    pub(super) async fn on_retention_gap(&mut self, gap: RetentionGap) -> Result<(), ShardError> {
        let (checkpoint, ctx) = (self.frontier.checkpoint(), &self.ctx);
        s3_retry(ctx, &self.lease, "write the retention gap marker")
            .run(|| {
                gap_marker::report(
                    &gap,
                    checkpoint,
                    &ctx.store,
                    ctx.output.layout.prefix(),
                    &ctx.metrics,
                )
            })
            .await
            .map_err(|stopped| ShardError::from_s3_stop(&self.shard_id, stopped))?;
        self.resume.enable();
        Ok(())
    }

    /// Whether the stream exists and no longer lists this shard: it was
    /// closed and then trimmed past the stream's retention. `false` when
    /// ListShards fails (the stream is gone, or unreachable): the caller
    /// retries.
    pub(super) async fn has_left_the_stream(&self) -> bool {
        match self.ctx.kinesis.list_shards().await {
            Ok(shards) => !shards.iter().any(|shard| shard.shard_id == self.shard_id),
            Err(err) => {
                warn!(error = %error_chain(&err), "cannot list the stream's shards");
                false
            }
        }
    }

    /// The shard has left the stream while leased: every record after
    /// `position` is gone. Reports the gap, writes what is buffered and
    /// ends the shard as at `SHARD_END`, so its lease is released and
    /// deleted and its children can start.
    pub(super) async fn finish_shard_gone(
        mut self,
        position: StartingPosition,
        shutdown: &CancellationToken,
    ) -> Result<ShardExit, ShardError> {
        let gap = RetentionGap::shard_gone(&self.shard_id, position);
        self.on_retention_gap(gap).await?;
        self.finish_shard_end(Vec::new(), shutdown).await
    }
}
