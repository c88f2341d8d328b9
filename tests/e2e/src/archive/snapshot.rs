//! What a read of the bucket gives: an [`Archive`] of [`ArchivedObject`]s
//! (the batches' main objects and their error and duplicates objects), each
//! with its decoded [`ArchivedRecord`]s and its [`ArchiveProblem`]s, and the
//! batches' [`DecisionsObject`]s.

use std::fmt;
use std::sync::Arc;

use super::ObjectKey;
use super::decisions::DecisionsObject;
use super::schema::ParquetSchema;

/// What [`ArchivedRecord::data`] holds, and so how it is compared with the
/// payload produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PayloadForm {
    /// The payload's bytes (envelope and error lines, raw pieces, Parquet's
    /// `data` column): compared byte for byte.
    #[default]
    Bytes,
    /// The payload's JSON text as a `json` line holds it (the line without
    /// its metadata member): compared as a JSON value, and as text with the
    /// payload trimmed and its raw line breaks made spaces.
    JsonText,
    /// A JSON object of the schema's typed columns of a Parquet row:
    /// compared with the row the schema makes of the payload
    /// ([`ParquetSchema::expected_row`]).
    Row(Arc<ParquetSchema>),
}

/// One user record of an object, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchivedRecord {
    /// The key of the object holding the record.
    pub object_key: Arc<str>,
    /// 1-based line, piece or row number in the (decompressed) object.
    pub line: usize,
    /// `shardId`.
    pub shard_id: String,
    /// `sequenceNumber`.
    pub sequence_number: String,
    /// `subSequenceNumber` (KPL user records only).
    pub sub_sequence_number: Option<u64>,
    /// `partitionKey`.
    pub partition_key: String,
    /// `approximateArrivalTimestamp` as written.
    pub approximate_arrival_timestamp: String,
    /// The payload, as [`ArchivedRecord::payload`] says (for envelope
    /// lines: `data`, base64-decoded).
    pub data: Vec<u8>,
    /// What `data` holds.
    pub payload: PayloadForm,
    /// The `errorMessage` of a record in an error object; `None` in a main
    /// object.
    pub error_message: Option<String>,
    /// The `duplicateOf` of a record in a duplicates object: the accepted
    /// copy it repeats; `None` elsewhere.
    pub duplicate_of: Option<CopyRef>,
}

/// A user record named by its place in the stream, as `duplicateOf` and
/// decisions objects name the accepted copy.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CopyRef {
    /// `shardId`.
    pub shard_id: String,
    /// `sequenceNumber` (decimal text).
    pub sequence_number: String,
    /// `subSequenceNumber` (KPL user records only).
    pub sub_sequence_number: Option<u64>,
}

impl fmt::Display for CopyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.shard_id, self.sequence_number)?;
        if let Some(sub) = self.sub_sequence_number {
            write!(f, "#{sub}")?;
        }
        Ok(())
    }
}

impl ArchivedRecord {
    /// `key:line`, for messages.
    pub fn location(&self) -> String {
        format!("{}:{}", self.object_key, self.line)
    }

    /// Where the record is in the stream.
    pub fn copy_ref(&self) -> CopyRef {
        CopyRef {
            shard_id: self.shard_id.clone(),
            sequence_number: self.sequence_number.clone(),
            sub_sequence_number: self.sub_sequence_number,
        }
    }
}

/// A deviation from the output format or the key contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveProblem {
    /// The object concerned.
    pub object_key: String,
    /// The 1-based line, when the problem is in one line.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ArchiveProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.object_key, self.message),
            None => write!(f, "{}: {}", self.object_key, self.message),
        }
    }
}

/// One object: its parsed key, its records, and what is wrong with it.
#[derive(Clone, Debug)]
pub struct ArchivedObject {
    /// The parsed key.
    pub key: ObjectKey,
    /// The ETag from the listing.
    pub e_tag: Option<String>,
    /// Size in bytes as stored (compressed).
    pub size: usize,
    /// `x-amz-meta-shardsink-format`, if the object has it.
    pub format: Option<String>,
    /// `x-amz-meta-shardsink-records`, if the object has it.
    pub declared_records: Option<String>,
    /// The records that could be decoded far enough to identify them
    /// (shard id and sequence number).
    pub records: Vec<ArchivedRecord>,
    /// Format and consistency problems found in this object.
    pub problems: Vec<ArchiveProblem>,
}

/// A snapshot of everything in the bucket.
#[derive(Clone, Debug)]
pub struct Archive {
    /// The bucket read.
    pub bucket: String,
    /// The prefix the objects must be under.
    pub prefix: String,
    /// Every main object (one per batch) whose key parses, sorted by key.
    pub objects: Vec<Arc<ArchivedObject>>,
    /// Every error object under the error prefix whose key parses and
    /// whose batch's main object is listed, sorted by key.
    pub error_objects: Vec<Arc<ArchivedObject>>,
    /// Error objects whose batch has no main object (yet): the batch is not
    /// committed, so their records do not count as archived.
    pub uncommitted_error_objects: Vec<Arc<ArchivedObject>>,
    /// Every duplicates object under the duplicates prefix whose key parses
    /// and whose batch's main object is listed, sorted by key.
    pub duplicate_objects: Vec<Arc<ArchivedObject>>,
    /// Duplicates objects whose batch has no main object (yet).
    pub uncommitted_duplicate_objects: Vec<Arc<ArchivedObject>>,
    /// Every decisions object under `{prefix}/_events` whose key parses and
    /// whose batch's main object is listed, sorted by key.
    pub decisions_objects: Vec<Arc<DecisionsObject>>,
    /// Decisions objects whose batch has no main object (yet).
    pub uncommitted_decisions_objects: Vec<Arc<DecisionsObject>>,
    /// Problems of a batch as a whole: its main, error and duplicates
    /// objects together must hold records from exactly the key's first to
    /// its last sequence number, none twice; its decisions object, if any,
    /// must decide exactly those records, each as the object holding it
    /// says; an error, duplicates or decisions object needs its batch's
    /// main object.
    pub batch_problems: Vec<ArchiveProblem>,
    /// Keys that do not parse or are outside the prefix, the error prefix
    /// and the duplicates prefix.
    pub stray_keys: Vec<ArchiveProblem>,
    /// The body of `{prefix}/_shardsink.json`, the key layout the daemon
    /// records under its prefix, if present.
    pub layout_record: Option<String>,
}

impl Archive {
    /// An archive of `objects` (main objects) only, for checker self-tests.
    pub fn of_objects(bucket: &str, prefix: &str, objects: Vec<Arc<ArchivedObject>>) -> Self {
        Self {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            objects,
            error_objects: Vec::new(),
            uncommitted_error_objects: Vec::new(),
            duplicate_objects: Vec::new(),
            uncommitted_duplicate_objects: Vec::new(),
            decisions_objects: Vec::new(),
            uncommitted_decisions_objects: Vec::new(),
            batch_problems: Vec::new(),
            stray_keys: Vec::new(),
            layout_record: None,
        }
    }

    /// Every kept record of a committed batch: those of every main object,
    /// in key order then line order, then those of every error object.
    pub fn records(&self) -> impl Iterator<Item = &ArchivedRecord> {
        self.objects
            .iter()
            .chain(&self.error_objects)
            .flat_map(|o| o.records.iter())
    }

    /// How many records [`Archive::records`] gives.
    pub fn record_count(&self) -> usize {
        self.objects
            .iter()
            .chain(&self.error_objects)
            .map(|o| o.records.len())
            .sum()
    }

    /// Every duplicate of a committed batch (the lines of its duplicates
    /// object, each with its `duplicateOf`), in key order then line order.
    pub fn duplicates(&self) -> impl Iterator<Item = &ArchivedRecord> {
        self.duplicate_objects.iter().flat_map(|o| o.records.iter())
    }

    /// Every record of a committed batch, wherever its batch placed it:
    /// [`Archive::records`], then [`Archive::duplicates`].
    pub fn placed_records(&self) -> impl Iterator<Item = &ArchivedRecord> {
        self.records().chain(self.duplicates())
    }

    /// How many records [`Archive::placed_records`] gives.
    pub fn placed_count(&self) -> usize {
        self.record_count()
            + self
                .duplicate_objects
                .iter()
                .map(|o| o.records.len())
                .sum::<usize>()
    }

    /// How many objects hold records, decisions or commit batches: main,
    /// error, duplicates and decisions objects, committed or not.
    pub fn object_count(&self) -> usize {
        self.objects.len()
            + self.error_objects.len()
            + self.uncommitted_error_objects.len()
            + self.duplicate_objects.len()
            + self.uncommitted_duplicate_objects.len()
            + self.decisions_objects.len()
            + self.uncommitted_decisions_objects.len()
    }

    /// Every problem: stray keys, each object's problems (main, error,
    /// duplicates, then decisions objects), then the batches' problems.
    pub fn problems(&self) -> Vec<ArchiveProblem> {
        self.stray_keys
            .iter()
            .cloned()
            .chain(
                self.objects
                    .iter()
                    .chain(&self.error_objects)
                    .chain(&self.uncommitted_error_objects)
                    .chain(&self.duplicate_objects)
                    .chain(&self.uncommitted_duplicate_objects)
                    .flat_map(|o| o.problems.iter().cloned()),
            )
            .chain(
                self.decisions_objects
                    .iter()
                    .chain(&self.uncommitted_decisions_objects)
                    .flat_map(|o| o.problems.iter().cloned()),
            )
            .chain(self.batch_problems.iter().cloned())
            .collect()
    }

    /// The decisions object of the batch whose main object is `main`, if
    /// listed.
    pub fn decisions_of(&self, main: &ObjectKey) -> Option<&DecisionsObject> {
        let path = main.batch_path();
        self.decisions_objects
            .iter()
            .find(|d| d.key.batch_path() == path)
            .map(AsRef::as_ref)
    }

    /// The object with this key, if listed.
    pub fn object(&self, key: &str) -> Option<&ArchivedObject> {
        self.objects
            .binary_search_by(|o| o.key.key.as_str().cmp(key))
            .ok()
            .map(|i| self.objects[i].as_ref())
    }
}
