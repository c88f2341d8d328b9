//! Planning a replay: how a pending batch, or an uncommitted batch found in
//! S3, is rebuilt ([`ReplayPlan`]) — the format its main object is written
//! in, and the event decisions it was written with, read back from its
//! decisions object and adopted as they are ([`ReplayDecisions`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use sequence_range::SequenceRange;
use shard_lease::PendingBatch;
use tracing::{error, info, warn};

use super::body;
use super::error::CommitError;
use super::writer::BatchWriter;
use crate::aws::retry::Retry;
use crate::memory::{MemoryBudget, Reservation};
use crate::output::bucket::Bucket;
use crate::output::decisions::{self, RecordedDecision, UserDecision, decisions_key};
use crate::output::format::{BodyKind, Format};
use crate::output::key::{body_kind_of_key, parse_object_name};
use crate::output::read_back::decisions::parse as parse_decisions;
use crate::output::read_back::metadata::{
    DECISIONS_COMPRESSION, MAIN_EXTENSION_METADATA, MAIN_FORMAT_METADATA,
};

/// A batch whose error object or decisions object is in S3 and whose main
/// object is not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uncommitted {
    /// Which of the batch's objects was found.
    pub side: Side,
    /// That object's key.
    pub key: String,
    /// The batch's time bucket.
    pub bucket: Bucket,
    /// The batch's range.
    pub range: SequenceRange,
}

/// An object a batch writes before its main object, which marks the batch
/// uncommitted when the main object is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Side {
    /// Its decisions object (event deduplication), written first: it says
    /// where each record goes.
    Decisions,
    /// Its error object.
    Errors,
}

/// How a pending batch is rebuilt ([`BatchWriter::replay_plan`]).
#[derive(Debug)]
pub struct ReplayPlan {
    /// The format to encode it in.
    pub format: Format,
    /// Where its event decisions come from.
    pub decisions: ReplayDecisions,
    /// The decisions read back from its decisions object (empty when there
    /// is none): their accepted copies go into the store.
    pub recorded: Vec<RecordedDecision>,
    /// The bytes of `recorded` and `decisions`, held against the memory
    /// budget until the replay is written (`None` when nothing was read).
    pub held: Option<Reservation>,
}

impl ReplayPlan {
    /// A plan without event decisions.
    fn without_decisions(format: Format) -> Self {
        Self {
            format,
            decisions: ReplayDecisions::None,
            recorded: Vec::new(),
            held: None,
        }
    }

    /// A plan adopting the decisions `read` back.
    fn adopting(format: Format, read: ReadBack) -> Self {
        Self {
            format,
            decisions: ReplayDecisions::adopted(&read.recorded),
            recorded: read.recorded,
            held: Some(read.held),
        }
    }
}

/// A decisions object read back.
#[derive(Debug)]
struct ReadBack {
    recorded: Vec<RecordedDecision>,
    /// Its user metadata.
    metadata: HashMap<String, String>,
    /// [`decisions::held_bytes`] of `recorded`, against the memory budget.
    held: Reservation,
}

/// Where a replayed batch's event decisions come from.
#[derive(Debug)]
pub(crate) enum ReplayDecisions {
    /// The batch was written without event decisions: every record is
    /// kept.
    None,
    /// Read back from the batch's decisions object, in batch order: the
    /// batch is rebuilt as it was decided.
    Adopted(VecDeque<UserDecision>),
    /// Decided now (nothing of the batch is in S3): supplied ahead of the
    /// records, one list per record ([`Replay::supply`]).
    Fresh(VecDeque<Vec<UserDecision>>),
}

impl ReplayDecisions {
    /// The decisions of a decisions object.
    pub(crate) fn adopted(recorded: &[RecordedDecision]) -> Self {
        Self::Adopted(recorded.iter().map(|r| r.decision.clone()).collect())
    }

    /// The next record's decisions; `Err` when the source has none left for
    /// it (a decisions object that does not match the records, or decisions
    /// not supplied).
    pub(crate) fn next(&mut self, user_records: usize) -> Result<Option<Vec<UserDecision>>, ()> {
        match self {
            Self::None => Ok(None),
            Self::Adopted(queue) if queue.len() >= user_records => {
                Ok(Some(queue.drain(..user_records).collect()))
            }
            Self::Fresh(queue) => match queue.pop_front() {
                Some(decisions) if decisions.len() == user_records => Ok(Some(decisions)),
                _ => Err(()),
            },
            Self::Adopted(_) => Err(()),
        }
    }
}

impl BatchWriter {
    /// How to rebuild the pending batch: in the format its recorded key
    /// names ([`Format::for_shape`]) — or, when the batch's error object is
    /// already in S3, the main format that error object was written for
    /// (`x-amz-meta-shardsink-main-format`), so that the records it holds are
    /// left out of the main object whatever the settings are now — and with
    /// the event decisions of its decisions object when that is in S3
    /// (adopted, whatever the settings are now). Without one, with event
    /// deduplication on (`events_on`), the records are decided afresh —
    /// unless the error or main object is there: then the batch was written
    /// without event decisions and is rebuilt without them.
    ///
    /// The decisions read back are counted against `budget` until the plan's
    /// [`held`](ReplayPlan::held) is dropped.
    ///
    /// # Errors
    /// [`CommitError`] when the lease is lost while S3 is retried, or when the
    /// decisions object does not parse.
    pub async fn replay_plan(
        &self,
        pending: &PendingBatch,
        events_on: bool,
        budget: &Arc<MemoryBudget>,
    ) -> Result<ReplayPlan, CommitError> {
        let kind = body_kind_of_key(&pending.key).unwrap_or_else(|| self.output.body_kind());
        let format = self.output.format.for_shape(kind.shape);
        let Ok(parsed) = self.output.layout.parse_key(&pending.key) else {
            return Ok(ReplayPlan::without_decisions(format));
        };
        let (bucket, range) = (parsed.bucket, &parsed.range);
        let error_key = self.output.error_layout.object_key(
            bucket,
            self.shard_id(),
            range,
            BodyKind::lines(body::error_codec(kind)),
        );
        let error_metadata = self.head_metadata(&error_key).await?;
        let format = match error_metadata
            .as_ref()
            .and_then(|metadata| metadata.get(MAIN_FORMAT_METADATA))
        {
            Some(written_for) => self.format_written_for(pending, &error_key, written_for, format),
            None => format,
        };
        let decisions_key = decisions_key(
            &self.output.decisions_layout,
            bucket,
            self.shard_id(),
            range,
        );
        if let Some(read) = self.read_decisions(&decisions_key, budget).await? {
            info!(key = %pending.key, decisions_key, "the pending batch's decisions object is in S3; rebuilding the batch as decided");
            return Ok(ReplayPlan::adopting(format, read));
        }
        let written_without_decisions =
            error_metadata.is_some() || self.head_metadata(&pending.key).await?.is_some();
        Ok(ReplayPlan {
            decisions: if events_on && !written_without_decisions {
                ReplayDecisions::Fresh(std::collections::VecDeque::new())
            } else {
                ReplayDecisions::None
            },
            ..ReplayPlan::without_decisions(format)
        })
    }

    /// `format`, or the one an existing error object says the batch's main
    /// object was written in (`written_for`), when it can be rebuilt.
    fn format_written_for(
        &self,
        pending: &PendingBatch,
        error_key: &str,
        written_for: &str,
        format: Format,
    ) -> Format {
        if *written_for == format.description() {
            return format;
        }
        match Format::from_description(written_for) {
            Some(original) if original.shape() == format.shape() => {
                warn!(
                    key = %pending.key,
                    error_key,
                    written_for = %written_for,
                    "the pending batch's error object was written for another format; replaying in that format"
                );
                original
            }
            _ => {
                warn!(
                    key = %pending.key,
                    error_key,
                    written_for = %written_for,
                    "the pending batch's error object was written for a format that cannot be rebuilt; replaying in the current one"
                );
                format
            }
        }
    }

    /// The decisions a decisions object records, with its user metadata,
    /// if it is in S3. What is read is counted against `budget` — the body,
    /// then its decompressed lines, then the decisions parsed from them —
    /// without waiting: only a replay, which has its turn, reads one.
    ///
    /// # Errors
    /// [`CommitError`] when the lease is lost while S3 is retried, or when
    /// the object does not decompress or parse.
    async fn read_decisions(
        &self,
        key: &str,
        budget: &Arc<MemoryBudget>,
    ) -> Result<Option<ReadBack>, CommitError> {
        let found = Retry::new("GetObject")
            .metrics(&self.metrics)
            .until(self.lease.lost())
            .run(|| self.store.get_if_exists_with_metadata(key))
            .await
            .map_err(|stopped| CommitError::from_s3_stop(self.shard_id(), stopped))?;
        let Some((body, metadata)) = found else {
            return Ok(None);
        };
        let corrupt = |message: String| {
            error!(key, message, "cannot read a decisions object");
            CommitError::Internal {
                shard_id: self.shard_id().to_owned(),
                message: "a decisions object does not parse",
            }
        };
        let mut held = budget.reserve();
        held.grow(body.len() as u64);
        let plain = crate::output::compression::decompress(DECISIONS_COMPRESSION.codec(), &body)
            .map_err(|err| corrupt(err.to_string()))?;
        held.grow(plain.len() as u64);
        drop(body);
        let recorded = parse_decisions(self.shard_id(), &plain).map_err(corrupt)?;
        drop(plain);
        held.resize(decisions::held_bytes(&recorded));
        Ok(Some(ReadBack {
            recorded,
            metadata,
            held,
        }))
    }

    /// The pending batch and plan of an uncommitted batch found in S3: its
    /// main key is the one its error or decisions object was written beside
    /// (same time path, shard and range; the body kind of the main format
    /// that object records — for an error object at its own codec, for a
    /// decisions object the main extension it records). A decisions object's
    /// decisions are adopted, counted against `budget` as by
    /// [`replay_plan`](Self::replay_plan).
    ///
    /// # Errors
    /// [`CommitError`] when the lease is lost while S3 is retried, or when a
    /// decisions object does not parse.
    pub async fn uncommitted_batch(
        &self,
        batch: &Uncommitted,
        budget: &Arc<MemoryBudget>,
    ) -> Result<(PendingBatch, ReplayPlan), CommitError> {
        let (metadata, read) = match batch.side {
            Side::Errors => (self.head_metadata(&batch.key).await?, None),
            Side::Decisions => match self.read_decisions(&batch.key, budget).await? {
                Some(mut read) => (Some(std::mem::take(&mut read.metadata)), Some(read)),
                None => (None, None),
            },
        };
        let metadata = metadata.unwrap_or_default();
        let written_for = metadata.get(MAIN_FORMAT_METADATA);
        let shape = written_for
            .and_then(|text| Format::shape_of_description(text))
            .unwrap_or_else(|| self.output.format.shape());
        // A Parquet schema is recorded by its fingerprint only: the current
        // one is used.
        let format = written_for
            .and_then(|text| Format::from_description(text))
            .unwrap_or_else(|| self.output.format.for_shape(shape));
        let kind = match batch.side {
            Side::Errors => {
                let codec = parse_object_name(batch.key.rsplit('/').next().unwrap_or_default())
                    .map_or(self.output.compression.codec(), |name| name.body.codec);
                format.body_kind(codec)
            }
            Side::Decisions => metadata
                .get(MAIN_EXTENSION_METADATA)
                .and_then(|extension| BodyKind::from_extension(extension))
                .filter(|kind| kind.shape == format.shape())
                .unwrap_or_else(|| format.body_kind(self.output.compression.codec())),
        };
        let pending = PendingBatch {
            key: self
                .output
                .layout
                .object_key(batch.bucket, self.shard_id(), &batch.range, kind),
            first: batch.range.first().clone(),
            last: batch.range.last().clone(),
        };
        let plan = match read {
            Some(read) if !read.recorded.is_empty() => ReplayPlan::adopting(format, read),
            _ => ReplayPlan::without_decisions(format),
        };
        Ok((pending, plan))
    }

    async fn head_metadata(
        &self,
        key: &str,
    ) -> Result<Option<std::collections::HashMap<String, String>>, CommitError> {
        Retry::new("HeadObject")
            .metrics(&self.metrics)
            .until(self.lease.lost())
            .run(|| self.store.user_metadata(key))
            .await
            .map_err(|stopped| CommitError::from_s3_stop(self.shard_id(), stopped))
    }
}
