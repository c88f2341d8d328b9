//! [`Replay`]: the pending batch recorded in the lease row (C6), rebuilt from
//! the shard's records before anything else is written, and written under its
//! recorded key — a small state machine fed one record at a time.

use std::sync::Arc;

use shard_lease::PendingBatch;
use tokio::sync::OwnedSemaphorePermit;

use crate::commit::replay_plan::ReplayDecisions;
use crate::events::decisions::UserDecision;
use crate::memory::{MemoryBudget, Reservation};
use crate::output::Output;
use crate::output::batch::Batch;
use crate::output::format::Format;
use crate::read::record::ShardRecord;

/// The pending batch being rebuilt.
#[derive(Debug)]
pub(crate) struct Replay {
    pending: PendingBatch,
    /// Whether the lease row records `pending` (a replay after a crash), or
    /// it was found in S3 (an uncommitted batch: recorded before its write).
    recorded: bool,
    /// The format the recorded key's extension names.
    format: Format,
    /// Where the records' event decisions come from.
    decisions: ReplayDecisions,
    batch: Option<Batch>,
    /// What it holds besides its batch, until it is written.
    holding: Holding,
}

/// What a replay holds against the memory budget besides its batch, until
/// the batch is written (then dropped).
#[derive(Debug, Default)]
pub(crate) struct Holding {
    _turn: Option<OwnedSemaphorePermit>,
    _decisions: Option<Reservation>,
}

impl Holding {
    /// The shard's `turn` to replay ([`MemoryBudget::replay_permit`]), and
    /// the bytes of the `decisions` read back from the batch's decisions
    /// object ([`decisions::held_bytes`](crate::events::decisions::held_bytes)).
    pub(crate) fn new(turn: Option<OwnedSemaphorePermit>, decisions: Option<Reservation>) -> Self {
        Self {
            _turn: turn,
            _decisions: decisions,
        }
    }
}

/// What one record did to a replay.
#[derive(Debug)]
pub(crate) enum Step {
    /// The record is part of the batch; more are needed.
    Continue(Replay),
    /// The record was the batch's last: write it under its recorded key.
    Complete(Complete),
    /// The pending batch can no longer be rebuilt exactly: its first record
    /// has left the stream (retention). It is dropped; the record is not part
    /// of it and is handled like any other (the resume skip finds what is in S3).
    Abandoned(PendingBatch),
    /// Records were consumed but the batch's last never came: Kinesis returns
    /// every record in order, so this is a bug — and dropping the consumed
    /// records would lose them. Also when the batch's decisions object does
    /// not match its records.
    Broken(PendingBatch),
}

/// A rebuilt pending batch, ready to write.
#[derive(Debug)]
pub(crate) struct Complete {
    /// Key, first and last, as recorded.
    pub(crate) pending: PendingBatch,
    /// Exactly the shard's records `first..=last`.
    pub(crate) batch: Batch,
    /// The format `batch` is encoded in.
    pub(crate) format: Format,
    /// Whether the lease row records `pending` already.
    pub(crate) recorded: bool,
    /// Hold until the batch is written.
    pub(crate) holding: Holding,
}

impl Replay {
    /// The replay of `pending`, encoded in `format` with `decisions`
    /// ([`BatchWriter::replay_plan`](crate::commit::writer::BatchWriter::replay_plan)),
    /// holding its turn and decisions.
    pub(crate) fn new(
        pending: PendingBatch,
        format: Format,
        decisions: ReplayDecisions,
        holding: Holding,
    ) -> Self {
        Self {
            format,
            decisions,
            pending,
            recorded: true,
            batch: None,
            holding,
        }
    }

    /// The rebuild of an uncommitted batch found in S3
    /// ([`ResumeSkip::uncommitted_at`](crate::shard::resume::ResumeSkip::uncommitted_at)),
    /// encoded in `format`; the lease row does not record it yet.
    pub(crate) fn uncommitted(
        pending: PendingBatch,
        format: Format,
        decisions: ReplayDecisions,
        holding: Holding,
    ) -> Self {
        Self {
            recorded: false,
            ..Self::new(pending, format, decisions, holding)
        }
    }

    /// The batch being rebuilt.
    pub(crate) fn pending(&self) -> &PendingBatch {
        &self.pending
    }

    /// Whether its records' decisions must be made now and supplied
    /// ([`supply`](Self::supply)) before they are fed.
    pub(crate) fn needs_decisions(&self) -> bool {
        matches!(&self.decisions, ReplayDecisions::Fresh(queue) if queue.is_empty())
    }

    /// Which of `records` (a GetRecords response) the replay will take:
    /// those from its first record (or, once started, from the start) to its
    /// last.
    pub(crate) fn wanted<'r>(&self, records: &'r [ShardRecord]) -> &'r [ShardRecord] {
        let from = match &self.batch {
            Some(_) => 0,
            None => match records
                .iter()
                .position(|r| r.sequence_number == self.pending.first)
            {
                Some(at) => at,
                None => return &[],
            },
        };
        let to = records[from..]
            .iter()
            .position(|r| r.sequence_number > self.pending.last)
            .map_or(records.len(), |n| from + n);
        &records[from..to]
    }

    /// Supplies fresh decisions for the next records, one list per record.
    pub(crate) fn supply(&mut self, decisions: Vec<Vec<UserDecision>>) {
        if let ReplayDecisions::Fresh(queue) = &mut self.decisions {
            queue.extend(decisions);
        }
    }

    /// The records rebuilt so far, if any.
    pub(crate) fn batch(&self) -> Option<&Batch> {
        self.batch.as_ref()
    }

    /// Feeds the shard's next record.
    pub(crate) fn feed(
        mut self,
        shard_id: &str,
        record: &ShardRecord,
        output: &Output,
        budget: &Arc<MemoryBudget>,
    ) -> Step {
        let n = &record.sequence_number;
        match &self.batch {
            None if *n != self.pending.first => return Step::Abandoned(self.pending),
            Some(_) if *n > self.pending.last => return Step::Broken(self.pending),
            _ => {}
        }
        let Ok(decisions) = self.decisions.next(record.user_record_count()) else {
            return Step::Broken(self.pending);
        };
        match &mut self.batch {
            None => {
                let bucket = output.layout.bucket_of(record.arrival_millis);
                self.batch = Some(Batch::start(
                    shard_id,
                    record,
                    decisions.as_deref(),
                    bucket,
                    &self.format,
                    budget.clone(),
                ));
            }
            Some(batch) => batch.push(record, decisions.as_deref()),
        }
        self.after(n)
    }

    fn after(self, n: &sequence_range::SequenceNumber) -> Step {
        match self.batch {
            Some(batch) if *n == self.pending.last => Step::Complete(Complete {
                pending: self.pending,
                batch,
                format: self.format,
                recorded: self.recorded,
                holding: self.holding,
            }),
            batch => Step::Continue(Self { batch, ..self }),
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use sequence_range::SequenceNumber;

    use super::*;

    fn record(n: u64) -> ShardRecord {
        ShardRecord {
            sequence_number: SequenceNumber::from(n),
            arrival_millis: 120_000,
            partition_key: "pk".to_owned(),
            data: Bytes::from_static(b"r"),
            user_records: None,
        }
    }

    fn replay(first: u64, last: u64) -> Replay {
        Replay::new(
            PendingBatch {
                key: "k".to_owned(),
                first: SequenceNumber::from(first),
                last: SequenceNumber::from(last),
            },
            Format::Envelope,
            ReplayDecisions::None,
            Holding::default(),
        )
    }

    fn feed(replay: Replay, n: u64) -> Step {
        replay.feed(
            "s",
            &record(n),
            &Output::for_tests("p"),
            &MemoryBudget::new(1 << 20, 1 << 20),
        )
    }

    #[test]
    fn rebuilds_first_to_last_then_completes() {
        let mut replay = replay(3, 7);
        for n in [3, 5] {
            replay = match feed(replay, n) {
                Step::Continue(replay) => replay,
                other => panic!("{n}: {other:?}"),
            };
        }
        match feed(replay, 7) {
            Step::Complete(done) => {
                assert_eq!(done.batch.range().to_string(), "3-7");
                assert_eq!(done.batch.kinesis_records(), 3);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_single_record_batch_completes_at_once() {
        assert!(matches!(feed(replay(4, 4), 4), Step::Complete(_)));
    }

    #[test]
    fn another_first_record_abandons_it() {
        // Its first records were trimmed: the shard now starts later.
        assert!(matches!(feed(replay(3, 7), 5), Step::Abandoned(_)));
        assert!(matches!(feed(replay(3, 7), 9), Step::Abandoned(_)));
    }

    #[test]
    fn a_missing_last_record_is_a_bug_not_a_loss() {
        let Step::Continue(replay) = feed(replay(3, 7), 3) else {
            panic!("first record")
        };
        assert!(matches!(feed(replay, 8), Step::Broken(_)));
    }
}
