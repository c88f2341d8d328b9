//! What the table holds, shard by shard, and which staged batches a commit
//! may append to it.
//!
//! - [`CommitState`]: after table commit `n`, each shard's last sequence
//!   number whose record is in a live data file. It is a small JSON object
//!   in the table's metadata directory, named by the table property
//!   [`STATE_PROPERTY`] that the same commit sets, so that it survives
//!   snapshot expiry and compaction.
//! - [`StagedBatch`]: a batch whose data files are written but not yet
//!   committed, as its shard's owner records it in the lease row: the
//!   position it continues from, its last sequence number and its files.
//! - [`plan`]: the batches a commit on top of a state appends. A shard's
//!   batch is appended only if it starts exactly where the shard's
//!   committed records end; a batch at or below that end is already in the
//!   table. So each shard's records in the table are a gap-free prefix of
//!   the shard, each record once (docs/DESIGN.md, "Iceberg tables").

use std::collections::BTreeMap;

use sequence_range::SequenceNumber;
use serde::{Deserialize, Serialize};
use shard_lease::Checkpoint;

/// Table property: the location of the [`CommitState`] of the table's
/// latest shardsink commit (an `s3://` URI).
pub const STATE_PROPERTY: &str = "shardsink.commit-state";
/// Table property and snapshot summary property: the number of the
/// shardsink commit, 1 for the first (decimal text).
pub const COMMIT_PROPERTY: &str = "shardsink.commit";
/// Snapshot summary property: the location of the [`CommitState`] the
/// snapshot's commit wrote, unique to one commit attempt; it tells after a
/// commit whose outcome is unknown whether that attempt landed.
pub const ATTEMPT_PROPERTY: &str = "shardsink.commit-attempt";

/// Each shard's committed end after one table commit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitState {
    /// The commit's number: 0 before the first.
    pub commit: u64,
    /// Shard id → the last sequence number of the shard whose record is in
    /// the table (decimal text).
    pub shards: BTreeMap<String, String>,
}

impl CommitState {
    /// The shard's committed end, if any record of it is committed.
    ///
    /// # Errors
    /// The stored text is not a sequence number (a state written by hand).
    pub fn committed_end(&self, shard_id: &str) -> Result<Option<SequenceNumber>, StateError> {
        self.shards
            .get(shard_id)
            .map(|text| {
                text.parse().map_err(|_| StateError::Malformed {
                    what: format!("shard {shard_id}'s committed end `{text}`"),
                })
            })
            .transpose()
    }

    /// The state as stored: one JSON object.
    pub fn to_json(&self) -> String {
        // A map of strings and a number always serialize.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses a stored state.
    ///
    /// # Errors
    /// [`StateError::Malformed`].
    pub fn from_json(text: &[u8]) -> Result<Self, StateError> {
        serde_json::from_slice(text).map_err(|err| StateError::Malformed {
            what: format!("commit state: {err}"),
        })
    }
}

/// A batch's data files, written and not yet committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedBatch {
    /// The shard the batch's records are from.
    pub shard_id: String,
    /// The position the batch continues from: the lease's checkpoint (or
    /// the previous staged batch's last) when the batch was read, as the
    /// lease row stores it (`TRIM_HORIZON`, a sequence number, ...).
    pub after: String,
    /// The sequence number of the batch's last Kinesis record.
    pub last: String,
    /// One data file per partition value; may be empty when every record
    /// of the batch went to the error or duplicates prefix.
    pub files: Vec<StagedFile>,
}

impl StagedBatch {
    /// The last sequence number of the staged batch stored as `entry` (its
    /// JSON in the lease row); `None` when it does not parse.
    pub fn last_of(entry: &str) -> Option<SequenceNumber> {
        serde_json::from_str::<Self>(entry)
            .ok()
            .and_then(|batch| batch.last.parse().ok())
    }
}

/// One data file of a staged batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedFile {
    /// The partition spec the file was written for.
    pub spec_id: i32,
    /// The file's manifest entry, as iceberg's
    /// `serialize_data_file_to_json` gives it (path, partition value,
    /// record count, size, column statistics).
    pub data_file: String,
}

/// Why a state or a staged batch cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Stored text that does not parse.
    #[error("malformed {what}")]
    Malformed {
        /// What was being read.
        what: String,
    },
}

/// What a commit on top of a [`CommitState`] does with the staged batches.
#[derive(Debug)]
pub struct Plan<'a> {
    /// The batches to append, each shard's in sequence order.
    pub append: Vec<&'a StagedBatch>,
    /// The state after the commit (its number one more), if anything is
    /// appended.
    pub next: CommitState,
    /// Batches already in the table (their last at or below the shard's
    /// committed end): their owners will drop them.
    pub committed: usize,
    /// Shards whose next staged batch does not start at the committed end:
    /// shard id and that batch's start. Nothing of such a shard past the
    /// gap is appended; it shows a batch lost before it was staged, which
    /// the owner's replay re-stages.
    pub gaps: Vec<(String, String)>,
}

/// The batches that a commit on top of `state` appends: for each shard, in
/// sequence order, those that start exactly at the shard's committed end
/// (any start when nothing of the shard is committed yet), one after the
/// other.
///
/// # Errors
/// A sequence number that does not parse.
pub fn plan<'a>(state: &CommitState, staged: &'a [StagedBatch]) -> Result<Plan<'a>, StateError> {
    let mut by_shard: BTreeMap<&str, Vec<(SequenceNumber, &StagedBatch)>> = BTreeMap::new();
    for batch in staged {
        let last = parse_sequence(&batch.last, &batch.shard_id)?;
        by_shard
            .entry(batch.shard_id.as_str())
            .or_default()
            .push((last, batch));
    }
    let mut plan = Plan {
        append: Vec::new(),
        next: CommitState {
            commit: state.commit + 1,
            shards: state.shards.clone(),
        },
        committed: 0,
        gaps: Vec::new(),
    };
    for (shard_id, mut batches) in by_shard {
        batches.sort_by(|a, b| a.0.cmp(&b.0));
        batches.dedup_by(|a, b| a.0 == b.0);
        let mut end = state.committed_end(shard_id)?;
        for (last, batch) in batches {
            if end.as_ref().is_some_and(|end| last <= *end) {
                plan.committed += 1;
                continue;
            }
            if !continues(end.as_ref(), &batch.after, shard_id)? {
                plan.gaps.push((shard_id.to_owned(), batch.after.clone()));
                break;
            }
            plan.append.push(batch);
            plan.next
                .shards
                .insert(shard_id.to_owned(), batch.last.clone());
            end = Some(last);
        }
    }
    Ok(plan)
}

/// Whether a batch starting after `after` continues a shard whose
/// committed records end at `end`.
fn continues(
    end: Option<&SequenceNumber>,
    after: &str,
    shard_id: &str,
) -> Result<bool, StateError> {
    let after = Checkpoint::from_attribute(after).map_err(|_| StateError::Malformed {
        what: format!("shard {shard_id}'s staged start `{after}`"),
    })?;
    Ok(match (end, after.sequence_number()) {
        // Nothing of the shard is committed: its first batch starts
        // wherever the lease started it.
        (None, _) => true,
        (Some(end), Some(after)) => after == end,
        // Something is committed, yet the batch starts at the shard's
        // beginning: it was read again after its progress was lost, and
        // what it holds up to `end` is in the table already.
        (Some(_), None) => false,
    })
}

fn parse_sequence(text: &str, shard_id: &str) -> Result<SequenceNumber, StateError> {
    text.parse().map_err(|_| StateError::Malformed {
        what: format!("shard {shard_id}'s staged last `{text}`"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(shard: &str, after: &str, last: &str) -> StagedBatch {
        StagedBatch {
            shard_id: shard.to_owned(),
            after: after.to_owned(),
            last: last.to_owned(),
            files: vec![StagedFile {
                spec_id: 0,
                data_file: format!("{shard}-{last}"),
            }],
        }
    }

    fn state(commit: u64, shards: &[(&str, &str)]) -> CommitState {
        CommitState {
            commit,
            shards: shards
                .iter()
                .map(|(s, e)| ((*s).to_owned(), (*e).to_owned()))
                .collect(),
        }
    }

    fn lasts<'a>(plan: &Plan<'a>) -> Vec<(&'a str, &'a str)> {
        plan.append
            .iter()
            .map(|b| (b.shard_id.as_str(), b.last.as_str()))
            .collect()
    }

    #[test]
    fn a_chain_from_the_committed_end_is_appended_in_sequence_order() {
        let staged = [
            batch("s0", "200", "300"),
            batch("s0", "100", "200"),
            batch("s1", "TRIM_HORIZON", "50"),
        ];
        let plan = plan(&state(4, &[("s0", "100")]), &staged).unwrap();
        assert_eq!(lasts(&plan), [("s0", "200"), ("s0", "300"), ("s1", "50")]);
        assert_eq!(plan.next, state(5, &[("s0", "300"), ("s1", "50")]));
        assert_eq!((plan.committed, plan.gaps.len()), (0, 0));
    }

    #[test]
    fn batches_at_or_below_the_committed_end_are_not_appended_again() {
        // A second committer's view: another commit already took these.
        let staged = [
            batch("s0", "100", "200"),
            batch("s0", "200", "300"),
            batch("s0", "300", "400"),
        ];
        let plan = plan(&state(7, &[("s0", "300")]), &staged).unwrap();
        assert_eq!(lasts(&plan), [("s0", "400")]);
        assert_eq!(plan.committed, 2);
        assert_eq!(plan.next.shards["s0"], "400");
    }

    #[test]
    fn a_batch_that_does_not_start_at_the_committed_end_stops_its_shard() {
        let staged = [
            batch("s0", "250", "300"),
            batch("s0", "300", "400"),
            batch("s1", "10", "20"),
        ];
        let plan = plan(&state(2, &[("s0", "200"), ("s1", "10")]), &staged).unwrap();
        assert_eq!(lasts(&plan), [("s1", "20")]);
        assert_eq!(plan.gaps, [("s0".to_owned(), "250".to_owned())]);
        assert_eq!(plan.next.shards["s0"], "200");
    }

    #[test]
    fn a_shard_read_again_from_its_start_after_a_commit_is_not_appended() {
        let staged = [batch("s0", "TRIM_HORIZON", "300")];
        let plan = plan(&state(1, &[("s0", "200")]), &staged).unwrap();
        assert!(plan.append.is_empty());
        assert_eq!(plan.gaps.len(), 1);
    }

    #[test]
    fn the_same_batch_staged_twice_is_appended_once() {
        let staged = [batch("s0", "100", "200"), batch("s0", "100", "200")];
        let plan = plan(&state(1, &[("s0", "100")]), &staged).unwrap();
        assert_eq!(lasts(&plan), [("s0", "200")]);
    }

    #[test]
    fn sequence_numbers_compare_as_numbers_not_text() {
        let staged = [batch("s0", "99", "1000")];
        let plan = plan(&state(1, &[("s0", "99")]), &staged).unwrap();
        assert_eq!(lasts(&plan), [("s0", "1000")]);
        let staged = [batch("s0", "99", "999")];
        let plan2 = super::plan(&state(1, &[("s0", "1000")]), &staged).unwrap();
        assert!(plan2.append.is_empty());
        assert_eq!(plan2.committed, 1);
    }

    #[test]
    fn the_state_round_trips_and_malformed_text_is_an_error() {
        let s = state(3, &[("s0", "12"), ("s1", "99")]);
        assert_eq!(CommitState::from_json(s.to_json().as_bytes()).unwrap(), s);
        assert!(CommitState::from_json(b"{").is_err());
        assert!(state(1, &[("s0", "x")]).committed_end("s0").is_err());
        assert!(plan(&state(1, &[]), &[batch("s0", "bogus", "5")]).is_err());
        assert!(plan(&state(1, &[("s0", "1")]), &[batch("s0", "bogus", "5")]).is_err());
    }
}
