//! Check 3, unreadable objects (`--deep`): every object fetched (GetObject),
//! decompressed and read line by line (or row by row) against its key —
//! main, error and duplicates objects, and decisions objects — with what
//! the event checks need of each: its records' positions, the copies its
//! duplicates name, the decisions it records.
//!
//! The bodies are read with `output::read_back` (lines, Parquet identities,
//! decisions); this module checks what they hold against their keys.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use bytes::Bytes;
use chrono::DateTime;
use futures::StreamExt as _;
use sequence_range::{SequenceNumber, SequenceRange};

use super::keys::ArchivedKey;
use super::progress::Phase;
use super::{s3_retry, s3_stopped};
use crate::aws::{ObjectStore, S3Error};
use crate::events::rule::{CopyRef, Outcome};
use crate::ops::log::error_chain;
use crate::output::bucket::Bucket;
use crate::output::compression::decompress;
use crate::output::format::{BodyShape, Format};
use crate::output::read_back::decisions;
use crate::output::read_back::envelope::copy_ref;
use crate::output::read_back::lines::read_lines;
use crate::output::read_back::metadata::{FORMAT_METADATA, RECORDS_METADATA};
use crate::output::read_back::parquet::identity_rows;

/// Objects fetched and checked at once with `--deep`.
const DEEP_CONCURRENCY: usize = 8;

/// A user record's place in its shard: sequence number and sub-sequence
/// number (`None` outside KPL aggregates).
pub(super) type Position = (SequenceNumber, Option<u64>);

/// What reading one object found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct BodyCheck {
    /// Lines that parsed (user records).
    lines: u64,
    /// Distinct sequence numbers among them (Kinesis records).
    kinesis_records: u64,
    /// Which of its key's end records it holds, when its records have
    /// identities (`None`: an empty object, raw payloads, `json` lines
    /// without metadata).
    ends: Option<Ends>,
    /// The first problem found.
    first_problem: Option<String>,
    /// How many problems were found.
    problems: u64,
    /// The positions of its user records, when asked for (a batch with
    /// more than one object compares them).
    positions: Vec<Position>,
    /// Duplicates objects: each user record and the accepted copy its
    /// `duplicateOf` names.
    duplicates: Vec<(Position, CopyRef)>,
    /// Decisions objects: how many of the decisions are duplicates.
    decided_duplicates: u64,
}

/// Which of its key's end records — the records of the key's first and
/// last sequence numbers — an object holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Ends {
    pub(super) first: bool,
    pub(super) last: bool,
}

impl std::ops::BitOr for Ends {
    type Output = Self;

    fn bitor(self, other: Self) -> Self {
        Self {
            first: self.first || other.first,
            last: self.last || other.last,
        }
    }
}

impl BodyCheck {
    fn failed(reason: String) -> Self {
        Self {
            first_problem: Some(reason),
            problems: 1,
            ..Self::default()
        }
    }

    fn problem(&mut self, reason: impl FnOnce() -> String) {
        if self.first_problem.is_none() {
            self.first_problem = Some(reason());
        }
        self.problems += 1;
    }
}

/// Checks an object's body against its key ([`check_body`]) and against the
/// record count stored with it (`x-amz-meta-shardsink-records`, when
/// present): the lines or rows counted, or for raw payloads the delimiters
/// found (at least one a record: a payload may hold the delimiter itself).
fn check_object(
    role: Role,
    object: &ArchivedKey,
    body: &[u8],
    metadata: &HashMap<String, String>,
) -> BodyCheck {
    let mut check = match role {
        Role::Decisions => check_decisions(object, body),
        Role::Main | Role::Errors | Role::Duplicates => check_body(role, object, body),
    };
    let Some(stored) = metadata.get(RECORDS_METADATA) else {
        return check;
    };
    let Ok(records) = stored.parse::<u64>() else {
        check.problem(|| format!("x-amz-meta-{RECORDS_METADATA} {stored:?} is not a count"));
        return check;
    };
    match object.body.shape {
        BodyShape::JsonLines | BodyShape::Parquet => {
            let counted = check.lines;
            if counted != records && check.first_problem.is_none() {
                check.problem(|| {
                    format!("{counted} records, but x-amz-meta-{RECORDS_METADATA} says {records}")
                });
            }
        }
        BodyShape::Raw => {
            let delimiter = metadata
                .get(FORMAT_METADATA)
                .and_then(|format| Format::from_description(format))
                .and_then(|format| match format {
                    Format::Raw { delimiter } => Some(delimiter),
                    _ => None,
                });
            let text = decompress(object.body.codec, body).unwrap_or_default();
            check.lines = records;
            match delimiter {
                Some(delimiter) if !delimiter.is_empty() => {
                    let found = text
                        .windows(delimiter.len())
                        .filter(|window| *window == delimiter.as_slice())
                        .count() as u64;
                    if found < records || (records > 0 && !text.ends_with(&delimiter)) {
                        check.problem(|| {
                            format!(
                                "x-amz-meta-{RECORDS_METADATA} says {records} records, but the body holds {found} delimiters{}",
                                if text.ends_with(&delimiter) { "" } else { " and does not end with one" }
                            )
                        });
                    }
                }
                _ => {
                    if records == 0 && !text.is_empty() {
                        check.problem(|| "holds bytes but no record".to_owned());
                    }
                }
            }
        }
    }
    check
}

/// Which objects are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// A batch's main objects: every record of the range but those its
    /// error and duplicates objects hold.
    Main,
    /// Error objects: some records of the range.
    Errors,
    /// Duplicates objects: some records of the range, each line with
    /// `duplicateOf`.
    Duplicates,
    /// Decisions objects: one decision per user record of the batch.
    Decisions,
}

impl Role {
    /// How the summary names an object of this role.
    pub(super) fn object_name(self) -> &'static str {
        match self {
            Self::Main => "main object",
            Self::Errors => "error object",
            Self::Duplicates => "duplicates object",
            Self::Decisions => "decisions object",
        }
    }
}

/// Checks an object's body against its key (check 3 of the `verify` module
/// documentation): JSON Lines (envelope lines, or `json` lines with their
/// metadata member), Parquet rows; raw payloads are only decompressed. A
/// duplicates object's lines must each name an accepted copy
/// (`duplicateOf`); no other object's may.
fn check_body(role: Role, object: &ArchivedKey, body: &[u8]) -> BodyCheck {
    let mut check = BodyCheck::default();
    let rows = match object.body.shape {
        BodyShape::Parquet => match identity_rows(Bytes::copy_from_slice(body)) {
            Ok(rows) => rows,
            Err(err) => return BodyCheck::failed(format!("is not a readable Parquet file: {err}")),
        },
        BodyShape::JsonLines | BodyShape::Raw => {
            let text = match decompress(object.body.codec, body) {
                Ok(text) => text,
                Err(err) => {
                    return BodyCheck::failed(format!(
                        "does not decompress as {}: {err}",
                        object.body.extension()
                    ));
                }
            };
            if object.body.shape == BodyShape::Raw {
                return check;
            }
            let read = read_lines(&text);
            check.lines = read.lines;
            for problem in read.problems {
                check.problem(|| problem.to_string());
            }
            read.rows
        }
    };
    let first = object.range.first().to_string();
    let last = object.range.last().to_string();
    let mut seen: HashSet<(String, Option<u64>)> = HashSet::new();
    let mut records: HashSet<String> = HashSet::new();
    let with_identity = !rows.is_empty();
    for row in rows {
        let at = &row.at;
        if let Some(shard_id) = &row.shard_id
            && *shard_id != object.shard_id
        {
            check.problem(|| {
                format!(
                    "{at}: shardId {shard_id:?} is not the key's shard {:?}",
                    object.shard_id
                )
            });
        }
        let sequence_number = row.sequence_number.as_str();
        if SequenceNumber::validate_text(sequence_number).is_err() {
            check.problem(|| format!("{at}: sequenceNumber {sequence_number:?} is not one"));
        } else {
            if SequenceNumber::cmp_text(sequence_number, &first) == Ordering::Less
                || SequenceNumber::cmp_text(sequence_number, &last) == Ordering::Greater
            {
                check.problem(|| {
                    format!(
                        "{at}: sequenceNumber {sequence_number} is outside the key's range {first}-{last}"
                    )
                });
            }
            if !seen.insert((sequence_number.to_owned(), row.sub_sequence_number)) {
                check.problem(|| {
                    format!(
                        "{at}: record ({sequence_number}, {:?}) appears twice",
                        row.sub_sequence_number
                    )
                });
            }
            if !records.contains(sequence_number) {
                records.insert(sequence_number.to_owned());
            }
            if let Ok(parsed) = SequenceNumber::parse(sequence_number) {
                let position = (parsed, row.sub_sequence_number);
                match (&row.duplicate_of, role) {
                    (Some(of), Role::Duplicates) => match copy_ref(of) {
                        Ok(of) => check.duplicates.push((position.clone(), of)),
                        Err(reason) => check.problem(|| format!("{at}: duplicateOf {reason}")),
                    },
                    (None, Role::Duplicates) => {
                        check.problem(|| format!("{at}: a duplicate without duplicateOf"));
                    }
                    (Some(_), _) => {
                        check.problem(|| format!("{at}: duplicateOf outside a duplicates object"))
                    }
                    (None, _) => {}
                }
                check.positions.push(position);
            }
        }
        if let Some(timestamp) = &row.arrival {
            match DateTime::parse_from_rfc3339(timestamp) {
                Ok(time)
                    if Bucket::of(object.bucket.size(), time.timestamp_millis())
                        == object.bucket => {}
                Ok(_) => check.problem(|| {
                    format!(
                        "{at}: approximateArrivalTimestamp {timestamp} is not in the key's {} {}",
                        object.bucket.size().as_str(),
                        object.bucket.iso_text()
                    )
                }),
                Err(err) => check
                    .problem(|| format!("{at}: approximateArrivalTimestamp {timestamp:?}: {err}")),
            }
        }
    }
    if object.body.shape == BodyShape::Parquet {
        check.lines = seen.len() as u64;
    }
    check.kinesis_records = records.len() as u64;
    if with_identity {
        check.ends = Some(Ends {
            first: records.contains(first.as_str()),
            last: records.contains(last.as_str()),
        });
    }
    check
}

/// A main object whose records have identities must hold its key's first
/// and last records, unless the batch's error or duplicates object holds
/// them (`in_sides`: the format rejected them, or they were duplicates). A
/// batch whose every record was rejected has an empty main object, with no
/// identities to check; an error object holds only its batch's rejected
/// records.
fn check_ends(check: &mut BodyCheck, object: &ArchivedKey, in_sides: Ends) {
    let Some(ends) = check.ends else {
        return;
    };
    let held = ends | in_sides;
    for (held, end, name) in [
        (held.first, object.range.first(), "first"),
        (held.last, object.range.last(), "last"),
    ] {
        if !held {
            check.problem(|| format!("no record has the key's {name} sequence number {end}"));
        }
    }
}

/// Checks a decisions object against its key: it decompresses, every line
/// reads as the daemon writes it ([`decisions::parse`]), and each decision's
/// record is in the key's range, once.
fn check_decisions(object: &ArchivedKey, body: &[u8]) -> BodyCheck {
    let text = match decompress(object.body.codec, body) {
        Ok(text) => text,
        Err(err) => {
            return BodyCheck::failed(format!(
                "does not decompress as {}: {err}",
                object.body.extension()
            ));
        }
    };
    let recorded = match decisions::parse(&object.shard_id, &text) {
        Ok(recorded) => recorded,
        Err(reason) => return BodyCheck::failed(format!("is not a decisions object: {reason}")),
    };
    let mut check = BodyCheck::default();
    let mut seen: HashSet<Position> = HashSet::with_capacity(recorded.len());
    for (index, recorded) in recorded.iter().enumerate() {
        let n = index + 1;
        let copy = &recorded.copy;
        if !object.range.contains(&copy.sequence_number) {
            check.problem(|| {
                format!(
                    "line {n}: sequenceNumber {} is outside the key's range {}-{}",
                    copy.sequence_number,
                    object.range.first(),
                    object.range.last()
                )
            });
        }
        if !seen.insert((copy.sequence_number.clone(), copy.sub_sequence_number)) {
            check.problem(|| {
                format!(
                    "line {n}: record ({}, {:?}) appears twice",
                    copy.sequence_number, copy.sub_sequence_number
                )
            });
        }
        if recorded.decision.decision.outcome() == Outcome::Duplicate {
            check.decided_duplicates += 1;
        }
    }
    check.lines = recorded.len() as u64;
    check
}

/// An object `--deep` could not read as a batch of its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unreadable {
    pub(super) key: String,
    pub(super) reason: String,
    /// Problems found besides `reason`.
    pub(super) more: u64,
}

/// What `--deep` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct DeepSummary {
    /// User records in the main objects.
    pub(super) lines: u64,
    /// Records in the error prefix's objects.
    pub(super) error_records: u64,
    /// Records in the duplicates prefix's objects.
    pub(super) duplicate_records: u64,
    pub(super) kinesis_records: u64,
    pub(super) unreadable: Vec<Unreadable>,
}

/// The end records a batch's error and duplicates objects hold, by batch
/// (shard and range).
pub(super) type EndsInSides<'a> = HashMap<(&'a str, &'a SequenceRange), Ends>;

/// What one object read holds, for the checks across a batch's objects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Found {
    /// Which of its key's end records it holds.
    pub(super) ends: Ends,
    /// User records found: lines, rows or decisions (raw payloads: the
    /// stored count).
    pub(super) records: u64,
    /// `x-amz-meta-shardsink-records`, when it is a count.
    pub(super) stored_records: Option<u64>,
    /// `x-amz-meta-shardsink-format`.
    pub(super) format: Option<String>,
    /// Its user records' positions: error and duplicates objects, and main
    /// objects whose batch has one of those.
    pub(super) positions: Vec<Position>,
    /// Duplicates objects: each user record and the accepted copy it names.
    pub(super) duplicates: Vec<(Position, CopyRef)>,
    /// Decisions objects: the decisions that are duplicates.
    pub(super) decided_duplicates: u64,
}

/// `--deep`: fetches and checks every object, a few at a time. Main
/// objects' end records may be in their batch's error or duplicates object
/// (`in_sides`, from those objects, read first). Returns the summary and,
/// per object, what it holds.
pub(super) async fn read_objects(
    store: &ObjectStore,
    objects: &[ArchivedKey],
    role: Role,
    in_sides: &EndsInSides<'_>,
    tty: bool,
) -> (DeepSummary, Vec<Found>) {
    let total = objects.len() as u64;
    let phase = Phase::start(tty, Some(total), "reading objects");
    let done = AtomicU64::new(0);
    let mut checks: Vec<(usize, BodyCheck, Found)> =
        futures::stream::iter(objects.iter().enumerate())
            .map(|(index, object)| {
                let (phase, done) = (&phase, &done);
                async move {
                    let sides = in_sides.get(&(object.shard_id.as_str(), &object.range));
                    let keep_positions = match role {
                        Role::Main => sides.is_some(),
                        Role::Errors | Role::Duplicates => true,
                        Role::Decisions => false,
                    };
                    let ends_in_sides = sides.copied().unwrap_or_default();
                    let (mut check, mut found) = match get_object(store, &object.key).await {
                        Ok((body, metadata)) => {
                            let found = Found {
                                stored_records: metadata
                                    .get(RECORDS_METADATA)
                                    .and_then(|stored| stored.parse().ok()),
                                format: metadata.get(FORMAT_METADATA).cloned(),
                                ..Found::default()
                            };
                            let object = object.clone();
                            let check = tokio::task::spawn_blocking(move || {
                                let mut check = check_object(role, &object, &body, &metadata);
                                if role == Role::Main {
                                    check_ends(&mut check, &object, ends_in_sides);
                                }
                                check
                            })
                            .await
                            .unwrap_or_else(|err| {
                                BodyCheck::failed(format!("the check did not finish: {err}"))
                            });
                            (check, found)
                        }
                        Err(err) => (
                            BodyCheck::failed(format!("GET failed: {}", error_chain(&err))),
                            Found::default(),
                        ),
                    };
                    found.ends = check.ends.unwrap_or_default();
                    found.records = check.lines;
                    found.decided_duplicates = check.decided_duplicates;
                    found.duplicates = std::mem::take(&mut check.duplicates);
                    if keep_positions {
                        found.positions = std::mem::take(&mut check.positions);
                    }
                    let n = done.fetch_add(1, AtomicOrdering::Relaxed) + 1;
                    phase.update(n, || format!("read {n} of {total} objects"));
                    (index, check, found)
                }
            })
            .buffer_unordered(DEEP_CONCURRENCY)
            .collect()
            .await;
    checks.sort_by_key(|(index, _, _)| *index);
    let mut summary = DeepSummary::default();
    let mut founds = Vec::with_capacity(checks.len());
    for (index, check, found) in checks {
        founds.push(found);
        summary.lines += check.lines;
        summary.kinesis_records += check.kinesis_records;
        if let Some(reason) = check.first_problem {
            summary.unreadable.push(Unreadable {
                key: objects[index].key.clone(),
                reason,
                more: check.problems.saturating_sub(1),
            });
        }
    }
    phase.finish(Some(format!(
        "read {total} objects: {} lines, {} unreadable",
        summary.lines,
        summary.unreadable.len()
    )));
    (summary, founds)
}

/// GetObject with retries of transient failures.
async fn get_object(
    store: &ObjectStore,
    key: &str,
) -> Result<(Bytes, HashMap<String, String>), S3Error> {
    s3_retry("GetObject")
        .run(|| store.get_with_metadata(key))
        .await
        .map_err(s3_stopped)
}

#[cfg(test)]
mod tests;
