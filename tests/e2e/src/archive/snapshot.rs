//! What a read of the bucket gives: an [`Archive`] of [`ArchivedObject`]s,
//! each with its parsed [`ArchivedRecord`] lines and its
//! [`ArchiveProblem`]s.

use std::fmt;
use std::sync::Arc;

use super::ObjectKey;

/// One line of an object, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchivedRecord {
    /// The key of the object holding the line.
    pub object_key: Arc<str>,
    /// 1-based line number in the (decompressed) object.
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
    /// `data`, base64-decoded.
    pub data: Vec<u8>,
}

impl ArchivedRecord {
    /// `key:line`, for messages.
    pub fn location(&self) -> String {
        format!("{}:{}", self.object_key, self.line)
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

/// One object: its parsed key, its lines, and what is wrong with it.
#[derive(Clone, Debug)]
pub struct ArchivedObject {
    /// The parsed key.
    pub key: ObjectKey,
    /// The ETag from the listing.
    pub e_tag: Option<String>,
    /// Size in bytes as stored (compressed).
    pub size: usize,
    /// The lines that could be parsed far enough to identify a record
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
    /// Every object whose key parses, sorted by key.
    pub objects: Vec<Arc<ArchivedObject>>,
    /// Keys that do not parse or are outside the prefix.
    pub stray_keys: Vec<ArchiveProblem>,
    /// The body of `{prefix}/_shardsink.json`, the key layout the daemon
    /// records under its prefix, if present.
    pub layout_record: Option<String>,
}

impl Archive {
    /// Every record of every object, in key order then line order.
    pub fn records(&self) -> impl Iterator<Item = &ArchivedRecord> {
        self.objects.iter().flat_map(|o| o.records.iter())
    }

    /// How many records the objects hold.
    pub fn record_count(&self) -> usize {
        self.objects.iter().map(|o| o.records.len()).sum()
    }

    /// Every problem: stray keys, then each object's problems.
    pub fn problems(&self) -> Vec<ArchiveProblem> {
        self.stray_keys
            .iter()
            .cloned()
            .chain(self.objects.iter().flat_map(|o| o.problems.iter().cloned()))
            .collect()
    }

    /// The object with this key, if listed.
    pub fn object(&self, key: &str) -> Option<&ArchivedObject> {
        self.objects
            .binary_search_by(|o| o.key.key.as_str().cmp(key))
            .ok()
            .map(|i| self.objects[i].as_ref())
    }
}
