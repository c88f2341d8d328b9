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
    /// The number just below a pending batch's first record, when the task
    /// started by replaying one: every record before that batch was placed
    /// in S3 by an earlier owner, whatever the checkpoint says.
    placed_before_pending: Option<SequenceNumber>,
    checkpointed_at: Instant,
}

impl Frontier {
    /// The frontier of a shard whose lease row holds `checkpoint`.
    pub(crate) fn new(checkpoint: Checkpoint) -> Self {
        Self {
            checkpoint,
            in_s3_through: None,
            placed_before_pending: None,
            checkpointed_at: Instant::now(),
        }
    }

    /// The task starts by replaying the pending batch whose first record
    /// is `first`. The batch was recorded only once every record before it
    /// was placed in S3 (C4), but the checkpoint need not say so: after a
    /// lost lease table it is `TRIM_HORIZON` again, and records the resume
    /// skip found in S3 are checkpointed only when idle. Reading starts at
    /// `first`, so those records are never seen; [`placed_through`]
    /// accounts for them.
    ///
    /// [`placed_through`]: Self::placed_through
    pub(crate) fn replaying_from(&mut self, first: &SequenceNumber) {
        // Sequence numbers are integers: "every record before `first`" is
        // "every record up to `first` − 1", whether or not a record has
        // that number. Nothing precedes 0.
        self.placed_before_pending = first.predecessor();
    }

    /// With a table: the lease row's staged batches end at `last`. Their
    /// records are placed — written, their data files staged for the
    /// committer, which appends them in order (the checkpoint follows) —
    /// and reading goes on after them, so
    /// [`placed_through`](Self::placed_through) counts them.
    pub(crate) fn staged_through(&mut self, last: SequenceNumber) {
        self.in_s3_through = Some(last);
    }

    /// The checkpoint in the lease row.
    pub(crate) fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// How far the shard's records are known to be placed in S3: the newest
    /// of the checkpoint, the records written or found there since, and
    /// the number just below the pending batch the task started with
    /// ([`replaying_from`](Self::replaying_from)). Every record up to it is
    /// placed (or left the stream); it need not be a record's own number.
    pub(crate) fn placed_through(&self) -> Option<&SequenceNumber> {
        [
            self.in_s3_through.as_ref(),
            self.checkpoint.sequence_number(),
            self.placed_before_pending.as_ref(),
        ]
        .into_iter()
        .flatten()
        .max()
    }

    /// A batch ending at `last` was written and checkpointed.
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
    fn the_records_before_a_pending_batch_count_as_placed() {
        let mut frontier = Frontier::new(Checkpoint::TrimHorizon);
        assert_eq!(frontier.placed_through(), None);
        frontier.replaying_from(&n(100));
        assert_eq!(frontier.placed_through(), Some(&n(99)));
        assert_eq!(
            frontier.checkpoint(),
            &Checkpoint::TrimHorizon,
            "not a checkpoint"
        );
        assert!(frontier.is_current());
        assert_eq!(frontier.idle_checkpoint(true), None);
        frontier.written(n(120));
        assert_eq!(frontier.placed_through(), Some(&n(120)));

        let mut behind = Frontier::new(Checkpoint::SequenceNumber(n(150)));
        behind.replaying_from(&n(100));
        assert_eq!(behind.placed_through(), Some(&n(150)), "the newest");
        let mut first = Frontier::new(Checkpoint::TrimHorizon);
        first.replaying_from(&n(0));
        assert_eq!(first.placed_through(), None, "nothing precedes 0");
    }

    #[test]
    fn a_written_batch_moves_the_checkpoint() {
        let mut frontier = Frontier::new(Checkpoint::SequenceNumber(n(2)));
        frontier.written(n(9));
        assert_eq!(frontier.checkpoint(), &Checkpoint::SequenceNumber(n(9)));
        assert!(frontier.is_current());
    }
}
