//! [`Frontier`]: how far a shard's records are in S3 and checkpointed, kept
//! in one place. The checkpoint only passes records durably in S3 (C3): it
//! moves with each written batch, and past records the resume skip found in S3 only
//! once nothing is buffered before them.

use std::time::Duration;

use sequence_range::SequenceNumber;
use shard_lease::Checkpoint;
use tokio::time::Instant;

/// How often a shard whose last records were all found already in S3
/// checkpoints past them while idle.
const IDLE_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10);

/// The checkpoint as this task last wrote it, and the last record it knows to
/// be in S3 with nothing unwritten before it.
#[derive(Debug)]
pub(crate) struct Frontier {
    checkpoint: Checkpoint,
    in_s3_through: Option<SequenceNumber>,
    checkpointed_at: Instant,
}

impl Frontier {
    /// The frontier of a shard whose lease row holds `checkpoint`.
    pub(crate) fn new(checkpoint: Checkpoint) -> Self {
        Self {
            checkpoint,
            in_s3_through: None,
            checkpointed_at: Instant::now(),
        }
    }

    /// The checkpoint in the lease row.
    pub(crate) fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// A batch ending at `last` was written and checkpointed.
    /// The last record known to be placed in S3: the newest of the
    /// checkpoint and the records written or found there since.
    pub(crate) fn placed_through(&self) -> Option<&SequenceNumber> {
        self.in_s3_through
            .as_ref()
            .or_else(|| self.checkpoint.sequence_number())
    }

    pub(crate) fn written(&mut self, last: SequenceNumber) {
        self.checkpoint = Checkpoint::SequenceNumber(last.clone());
        self.in_s3_through = Some(last);
        self.checkpointed_at = Instant::now();
    }

    /// ResumeSkip found the record `n` in S3 and skipped it; nothing is buffered
    /// before it (a skipped record ends the batch being built).
    pub(crate) fn skipped(&mut self, n: SequenceNumber) {
        self.in_s3_through = Some(n);
    }

    /// The checkpoint to write past skipped records, when the checkpoint is
    /// behind them and `force` (shutdown) or it has not moved for a while.
    /// Only when nothing is buffered: the caller says.
    pub(crate) fn idle_checkpoint(&self, force: bool) -> Option<Checkpoint> {
        let in_s3 = self.in_s3_through.as_ref()?;
        let behind = self
            .checkpoint
            .sequence_number()
            .is_none_or(|checkpoint| checkpoint < in_s3);
        (behind && (force || self.checkpointed_at.elapsed() >= IDLE_CHECKPOINT_INTERVAL))
            .then(|| Checkpoint::SequenceNumber(in_s3.clone()))
    }

    /// `checkpoint` was written (an idle checkpoint).
    pub(crate) fn checkpointed(&mut self, checkpoint: Checkpoint) {
        self.checkpoint = checkpoint;
        self.checkpointed_at = Instant::now();
    }

    /// Whether the checkpoint covers every record known to be in S3.
    pub(crate) fn is_current(&self) -> bool {
        self.in_s3_through.as_ref().is_none_or(|in_s3| {
            self.checkpoint
                .sequence_number()
                .is_some_and(|checkpoint| checkpoint >= in_s3)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(value: u64) -> SequenceNumber {
        SequenceNumber::from(value)
    }

    #[tokio::test(start_paused = true)]
    async fn skipped_records_are_checkpointed_when_idle_or_forced() {
        let mut frontier = Frontier::new(Checkpoint::TrimHorizon);
        assert!(frontier.is_current());
        assert_eq!(frontier.idle_checkpoint(true), None, "nothing handled");
        frontier.skipped(n(5));
        assert!(!frontier.is_current());
        assert_eq!(
            frontier.idle_checkpoint(false),
            None,
            "not idle long enough"
        );
        assert_eq!(
            frontier.idle_checkpoint(true),
            Some(Checkpoint::SequenceNumber(n(5)))
        );
        tokio::time::advance(IDLE_CHECKPOINT_INTERVAL).await;
        let checkpoint = frontier.idle_checkpoint(false).expect("idle");
        frontier.checkpointed(checkpoint);
        assert!(frontier.is_current());
        assert_eq!(frontier.idle_checkpoint(true), None, "caught up");
    }

    #[test]
    fn a_written_batch_moves_the_checkpoint() {
        let mut frontier = Frontier::new(Checkpoint::SequenceNumber(n(2)));
        frontier.written(n(9));
        assert_eq!(frontier.checkpoint(), &Checkpoint::SequenceNumber(n(9)));
        assert!(frontier.is_current());
    }
}
