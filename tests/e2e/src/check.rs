//! The exactly-once check: what was produced against what is in S3, record
//! by record, plus the arrival-time and checkpoint checks; with event
//! deduplication, [`events`] checks each event once.

pub mod events;

use std::collections::BTreeMap;
use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write as _};

use serde_json::Value;

use crate::archive::json::kept_text;
use crate::archive::{Archive, ArchiveProblem, ArchivedRecord, CopyRef, PayloadForm};
use crate::fixtures::LeaseRow;
use crate::producer::ProducedRecord;
use crate::seq::Seq;
use crate::stream::GroundTruth;

/// How many problems [`Report::assert_exact`] prints.
pub const SHOWN_PROBLEMS: usize = 20;

/// Identifies a user record: shard, sequence number, and sub-sequence
/// number for KPL user records. (Sequence numbers are unique only per shard:
/// moto numbers each shard 1, 2, 3, …)
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordId {
    /// Shard id.
    pub shard_id: String,
    /// Sequence number (decimal text).
    pub sequence_number: String,
    /// Sub-sequence number (KPL only).
    pub sub_sequence_number: Option<u64>,
}

impl RecordId {
    /// The id of a produced record.
    pub fn of_produced(record: &ProducedRecord) -> Self {
        Self {
            shard_id: record.shard_id.clone(),
            sequence_number: record.sequence_number.clone(),
            sub_sequence_number: record.sub_sequence_number,
        }
    }

    /// The id of an archived line.
    pub fn of_archived(record: &ArchivedRecord) -> Self {
        Self {
            shard_id: record.shard_id.clone(),
            sequence_number: record.sequence_number.clone(),
            sub_sequence_number: record.sub_sequence_number,
        }
    }
}

impl From<&CopyRef> for RecordId {
    fn from(copy: &CopyRef) -> Self {
        Self {
            shard_id: copy.shard_id.clone(),
            sequence_number: copy.sequence_number.clone(),
            sub_sequence_number: copy.sub_sequence_number,
        }
    }
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.shard_id, self.sequence_number)?;
        if let Some(sub) = self.sub_sequence_number {
            write!(f, "#{sub}")?;
        }
        Ok(())
    }
}

/// A produced record that is in no object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    /// The record.
    pub id: RecordId,
    /// Its partition key.
    pub partition_key: String,
    /// Its data, described ([`describe_bytes`]).
    pub data: String,
}

/// A record found more than once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    /// The record.
    pub id: RecordId,
    /// Every `key:line` it is at.
    pub locations: Vec<String>,
}

/// An archived record nobody produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unexpected {
    /// The record as archived.
    pub id: RecordId,
    /// Where: `key:line`.
    pub location: String,
    /// Its partition key.
    pub partition_key: String,
    /// Its data, described.
    pub data: String,
}

/// A field whose archived value differs from the expected one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The record.
    pub id: RecordId,
    /// Where: `key:line`.
    pub location: String,
    /// `data`, `partitionKey`, `shardId` or `approximateArrivalTimestamp`.
    pub field: &'static str,
    /// What it should be.
    pub expected: String,
    /// What it is.
    pub actual: String,
}

/// The outcome of [`exactly_once`]: empty problem lists mean every
/// produced record is in exactly one object, with the right fields, under
/// the right prefix (main, error, or with event deduplication duplicates),
/// and the output follows the format.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// How many user records were produced.
    pub expected_records: usize,
    /// How many lines the archive holds.
    pub archived_records: usize,
    /// How many objects the archive holds.
    pub objects: usize,
    /// Produced, not archived.
    pub missing: Vec<Missing>,
    /// Archived more than once.
    pub duplicated: Vec<Duplicate>,
    /// Archived, never produced.
    pub unexpected: Vec<Unexpected>,
    /// Archived with a wrong `data`, `partitionKey` or `shardId`.
    pub mismatched: Vec<Mismatch>,
    /// Archived under the error prefix although the format can represent
    /// it, in a main object although it cannot, or under the duplicates
    /// prefix when no duplicate is expected (field `prefix`).
    pub misplaced: Vec<Mismatch>,
    /// Archived with a wrong `approximateArrivalTimestamp` (filled by
    /// [`Report::check_arrival_times`]).
    pub arrival_mismatches: Vec<Mismatch>,
    /// Format and key problems found while reading the archive.
    pub archive_problems: Vec<ArchiveProblem>,
}

impl Report {
    /// Whether there is no problem of any kind.
    pub fn is_exact(&self) -> bool {
        self.problem_count() == 0
    }

    /// Total number of problems.
    pub fn problem_count(&self) -> usize {
        self.missing.len()
            + self.duplicated.len()
            + self.unexpected.len()
            + self.mismatched.len()
            + self.misplaced.len()
            + self.arrival_mismatches.len()
            + self.archive_problems.len()
    }

    /// Every problem as one line of text, grouped by kind.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.problem_count());
        out.extend(self.missing.iter().map(|m| {
            format!(
                "missing {} (partitionKey {:?}, data {})",
                m.id, m.partition_key, m.data
            )
        }));
        out.extend(
            self.duplicated
                .iter()
                .map(|d| format!("duplicated {} at {}", d.id, d.locations.join(" and "))),
        );
        out.extend(self.unexpected.iter().map(|u| {
            format!(
                "unexpected {} at {} (partitionKey {:?}, data {})",
                u.id, u.location, u.partition_key, u.data
            )
        }));
        out.extend(
            self.mismatched
                .iter()
                .chain(&self.misplaced)
                .chain(&self.arrival_mismatches)
                .map(|m| {
                    format!(
                        "{} of {} at {}: expected {}, found {}",
                        m.field, m.id, m.location, m.expected, m.actual
                    )
                }),
        );
        out.extend(self.archive_problems.iter().map(|p| format!("format: {p}")));
        out
    }

    /// Counts per kind and the first [`SHOWN_PROBLEMS`] problems.
    pub fn summary(&self) -> String {
        let mut text = format!(
            "{} records produced, {} lines in {} objects: {} missing, {} duplicated, {} unexpected, \
             {} field mismatches, {} arrival-time mismatches, {} format problems, {} misplaced",
            self.expected_records,
            self.archived_records,
            self.objects,
            self.missing.len(),
            self.duplicated.len(),
            self.unexpected.len(),
            self.mismatched.len(),
            self.arrival_mismatches.len(),
            self.archive_problems.len(),
            self.misplaced.len()
        );
        let problems = self.problems();
        for problem in problems.iter().take(SHOWN_PROBLEMS) {
            let _ = write!(text, "\n  - {problem}");
        }
        if problems.len() > SHOWN_PROBLEMS {
            let _ = write!(text, "\n  … and {} more", problems.len() - SHOWN_PROBLEMS);
        }
        text
    }

    /// Panics with [`Report::summary`] unless [`Report::is_exact`].
    ///
    /// # Panics
    /// When there is any problem.
    #[track_caller]
    pub fn assert_exact(&self) {
        assert!(
            self.is_exact(),
            "the archive is not exactly the produced records:\n{}",
            self.summary()
        );
        println!("exact: {}", self.summary());
    }

    /// Adds an arrival-time mismatch for every placed line (kept or
    /// duplicate) whose
    /// `approximateArrivalTimestamp` is not the ground truth's
    /// `ApproximateArrivalTimestamp` of its Kinesis record, truncated to
    /// milliseconds. Lines whose record is not in the stream are left to
    /// the other checks.
    pub fn check_arrival_times(&mut self, archive: &Archive, truth: &GroundTruth) {
        for record in archive.placed_records() {
            let Some(expected) = truth.get(&record.shard_id, &record.sequence_number) else {
                continue;
            };
            let expected = expected.arrival_text();
            if record.approximate_arrival_timestamp != expected {
                self.arrival_mismatches.push(Mismatch {
                    id: RecordId::of_archived(record),
                    location: record.location(),
                    field: "approximateArrivalTimestamp",
                    expected,
                    actual: record.approximate_arrival_timestamp.clone(),
                });
            }
        }
    }
}

/// Compares `produced` (every user record put into the stream) with the
/// archive: each must be in exactly one object, with the same data,
/// partition key and shard; nothing else may be there; nothing may be under
/// the error prefix or the duplicates prefix; and the archive's format
/// problems count too.
///
/// # Panics
/// When `produced` holds the same record twice (a harness bug).
pub fn exactly_once(produced: &[ProducedRecord], archive: &Archive) -> Report {
    exactly_once_with_rejected(produced, archive, &HashSet::new())
}

/// [`exactly_once`] over the main and the error prefix together: the
/// records of `rejected` (those the format cannot represent) must be in an
/// error object, every other one in a main object; none may be under the
/// duplicates prefix.
///
/// # Panics
/// As [`exactly_once`].
pub fn exactly_once_with_rejected(
    produced: &[ProducedRecord],
    archive: &Archive,
    rejected: &HashSet<RecordId>,
) -> Report {
    placement_report(produced, archive, rejected, Duplicates::NotExpected)
}

/// Statement E1 of event deduplication: every produced user record is in
/// exactly one place — a main object, an error object or a duplicates
/// object — with its fields, and nothing else is archived. A kept record
/// (main or error prefix) is under the error prefix exactly when it is in
/// `rejected` (the format cannot represent it); a duplicate's place is the
/// duplicates prefix whatever its payload (whether it is a duplicate of the
/// right copy is for [`events::each_event_once`]).
///
/// # Panics
/// As [`exactly_once`].
pub fn each_record_in_one_place(
    produced: &[ProducedRecord],
    archive: &Archive,
    rejected: &HashSet<RecordId>,
) -> Report {
    placement_report(produced, archive, rejected, Duplicates::Expected)
}

/// Whether records may be under the duplicates prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Duplicates {
    /// No event deduplication: none may.
    NotExpected,
    /// Event deduplication: duplicates are placed there.
    Expected,
}

/// [`exactly_once_with_rejected`] and [`each_record_in_one_place`]: every
/// placed record of the archive against `produced`.
fn placement_report(
    produced: &[ProducedRecord],
    archive: &Archive,
    rejected: &HashSet<RecordId>,
    duplicates: Duplicates,
) -> Report {
    let mut expected: HashMap<RecordId, &ProducedRecord> = HashMap::with_capacity(produced.len());
    for record in produced {
        let previous = expected.insert(RecordId::of_produced(record), record);
        assert!(
            previous.is_none(),
            "the producer reported {} twice",
            RecordId::of_produced(record)
        );
    }
    let mut found: HashMap<RecordId, Vec<&ArchivedRecord>> = HashMap::with_capacity(produced.len());
    for record in archive.placed_records() {
        found
            .entry(RecordId::of_archived(record))
            .or_default()
            .push(record);
    }

    let mut report = Report {
        expected_records: produced.len(),
        archived_records: archive.placed_count(),
        objects: archive.object_count(),
        archive_problems: archive.problems(),
        ..Report::default()
    };

    let mut missing: Vec<&ProducedRecord> = Vec::new();
    for record in produced {
        let id = RecordId::of_produced(record);
        let Some(copies) = found.get(&id) else {
            missing.push(record);
            continue;
        };
        if copies.len() > 1 {
            report.duplicated.push(Duplicate {
                id: id.clone(),
                locations: copies.iter().map(|c| c.location()).collect(),
            });
        }
        for copy in copies {
            compare_fields(&mut report, &id, record, copy);
            if let Some(of) = &copy.duplicate_of {
                if duplicates == Duplicates::NotExpected {
                    report.misplaced.push(Mismatch {
                        id: id.clone(),
                        location: copy.location(),
                        field: "prefix",
                        expected: "main or error prefix (no event deduplication)".to_owned(),
                        actual: format!("duplicates prefix (a duplicate of {of})"),
                    });
                }
                continue;
            }
            let expected_error = rejected.contains(&id);
            if expected_error != copy.error_message.is_some() {
                let name = |error: bool| if error { "error prefix" } else { "main prefix" };
                report.misplaced.push(Mismatch {
                    id: id.clone(),
                    location: copy.location(),
                    field: "prefix",
                    expected: name(expected_error).to_owned(),
                    actual: format!(
                        "{}{}",
                        name(!expected_error),
                        copy.error_message
                            .as_deref()
                            .map(|m| format!(" ({m})"))
                            .unwrap_or_default()
                    ),
                });
            }
        }
    }

    // An archived record in the wrong shard shows up as missing + unexpected;
    // pair such records up when sequence number, partition key and data agree.
    let mut missing_by_sequence: HashMap<(&str, Option<u64>), Vec<&ProducedRecord>> =
        HashMap::new();
    for record in &missing {
        missing_by_sequence
            .entry((&record.sequence_number, record.sub_sequence_number))
            .or_default()
            .push(record);
    }
    let mut paired: HashSet<RecordId> = HashSet::new();
    let mut unexpected: Vec<(RecordId, &ArchivedRecord)> = found
        .iter()
        .filter(|(id, _)| !expected.contains_key(*id))
        .flat_map(|(id, copies)| copies.iter().map(move |c| (id.clone(), *c)))
        .collect();
    unexpected.sort_by(|a, b| a.0.cmp(&b.0));
    for (id, record) in unexpected {
        let candidate = missing_by_sequence
            .get(&(record.sequence_number.as_str(), record.sub_sequence_number))
            .and_then(|candidates| {
                candidates.iter().find(|p| {
                    p.data == record.data
                        && p.partition_key == record.partition_key
                        && !paired.contains(&RecordId::of_produced(p))
                })
            });
        match candidate {
            Some(produced) => {
                let produced_id = RecordId::of_produced(produced);
                report.mismatched.push(Mismatch {
                    id: produced_id.clone(),
                    location: record.location(),
                    field: "shardId",
                    expected: produced.shard_id.clone(),
                    actual: record.shard_id.clone(),
                });
                paired.insert(produced_id);
            }
            None => report.unexpected.push(Unexpected {
                id,
                location: record.location(),
                partition_key: record.partition_key.clone(),
                data: describe_bytes(&record.data),
            }),
        }
    }
    report.missing = missing
        .into_iter()
        .filter(|p| !paired.contains(&RecordId::of_produced(p)))
        .map(|p| Missing {
            id: RecordId::of_produced(p),
            partition_key: p.partition_key.clone(),
            data: describe_bytes(&p.data),
        })
        .collect();
    report
}

fn compare_fields(
    report: &mut Report,
    id: &RecordId,
    expected: &ProducedRecord,
    actual: &ArchivedRecord,
) {
    let location = actual.location();
    let mut mismatch = |field: &'static str, want: String, found: String| {
        report.mismatched.push(Mismatch {
            id: id.clone(),
            location: location.clone(),
            field,
            expected: want,
            actual: found,
        });
    };
    match &actual.payload {
        PayloadForm::Bytes => {
            if actual.data != expected.data {
                mismatch(
                    "data",
                    describe_bytes(&expected.data),
                    describe_bytes(&actual.data),
                );
            }
        }
        PayloadForm::JsonText => {
            let value = |bytes: &[u8]| serde_json::from_slice::<Value>(bytes).ok();
            match (value(&expected.data), value(&actual.data)) {
                (Some(a), Some(b)) if a == b => {}
                _ => mismatch(
                    "data (as JSON)",
                    describe_bytes(&expected.data),
                    describe_bytes(&actual.data),
                ),
            }
            let kept = kept_text(&expected.data);
            if actual.data != kept {
                mismatch(
                    "data (as text)",
                    describe_bytes(&kept),
                    describe_bytes(&actual.data),
                );
            }
        }
        PayloadForm::Row(schema) => {
            let row = serde_json::from_slice::<Value>(&actual.data).ok();
            match schema.expected_row(&expected.data) {
                Ok(want) if Some(&want) == row.as_ref() => {}
                Ok(want) => mismatch(
                    "data (as columns)",
                    want.to_string(),
                    describe_bytes(&actual.data),
                ),
                Err(reason) => mismatch(
                    "data (as columns)",
                    format!("a rejection ({reason})"),
                    describe_bytes(&actual.data),
                ),
            }
        }
    }
    if actual.partition_key != expected.partition_key {
        mismatch(
            "partitionKey",
            format!("{:?}", expected.partition_key),
            format!("{:?}", actual.partition_key),
        );
    }
}

/// A short description of bytes: length, and the first 40 characters (if
/// UTF-8) or the first 20 bytes in hex.
pub fn describe_bytes(data: &[u8]) -> String {
    const SHOWN: usize = 40;
    let preview = match std::str::from_utf8(data) {
        Ok(text) => {
            let head: String = text.chars().take(SHOWN).collect();
            let more = if head.len() < text.len() { "…" } else { "" };
            format!("{head:?}{more}")
        }
        Err(_) => {
            let head: String = data
                .iter()
                .take(SHOWN / 2)
                .map(|b| format!("{b:02x}"))
                .collect();
            let more = if data.len() > SHOWN / 2 { "…" } else { "" };
            format!("0x{head}{more}")
        }
    };
    format!("{} bytes {preview}", data.len())
}

/// Contract line 3 at one instant: every produced record at or below its
/// shard's checkpoint must be in the archive (kept, or placed under the
/// duplicates prefix). Read the lease rows first,
/// then the archive and the produced list, so nothing checkpointed later is
/// held against an older archive. Returns problems as messages.
pub fn checkpoint_problems(
    rows: &[LeaseRow],
    produced: &[ProducedRecord],
    archive: &Archive,
) -> Vec<String> {
    let archived: HashSet<RecordId> = archive
        .placed_records()
        .map(RecordId::of_archived)
        .collect();
    let mut problems = Vec::new();
    for row in rows {
        let Some(checkpoint) = row.checkpoint_sequence_number() else {
            continue;
        };
        for record in produced.iter().filter(|r| r.shard_id == row.lease_key) {
            let Ok(seq) = Seq::parse(&record.sequence_number) else {
                continue;
            };
            let covered = seq < checkpoint
                || (seq == checkpoint
                    && match (
                        row.checkpoint_sub_sequence_number,
                        record.sub_sequence_number,
                    ) {
                        (Some(limit), Some(sub)) => sub <= limit,
                        _ => true,
                    });
            if covered && !archived.contains(&RecordId::of_produced(record)) {
                problems.push(format!(
                    "checkpoint {checkpoint} of {} passes {} which is not in S3",
                    row.lease_key,
                    RecordId::of_produced(record)
                ));
            }
        }
    }
    problems
}

/// Contract line 4 (batches of a shard written in sequence order, one after
/// the other), checked on a frozen archive — right after a SIGKILL, when
/// nothing more can land: for every shard, the archived records (kept or
/// duplicates) must be all of the shard's produced records up to the newest
/// archived one. A batch
/// written before an earlier one, or two written at once, leaves a gap.
///
/// Only records that `produced` knows are considered, so a producer still
/// running does not matter. Returns one line per gap.
pub fn prefix_problems(produced: &[ProducedRecord], archive: &Archive) -> Vec<String> {
    let archived: HashSet<RecordId> = archive
        .placed_records()
        .map(RecordId::of_archived)
        .collect();
    let mut by_shard: BTreeMap<&str, Vec<(Seq, &ProducedRecord)>> = BTreeMap::new();
    for record in produced {
        if let Ok(seq) = Seq::parse(&record.sequence_number) {
            by_shard
                .entry(record.shard_id.as_str())
                .or_default()
                .push((seq, record));
        }
    }
    let mut problems = Vec::new();
    for (shard, mut records) in by_shard {
        records.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then(a.1.sub_sequence_number.cmp(&b.1.sub_sequence_number))
        });
        let Some(newest) = records
            .iter()
            .rposition(|(_, record)| archived.contains(&RecordId::of_produced(record)))
        else {
            continue;
        };
        for (_, record) in &records[..newest] {
            let id = RecordId::of_produced(record);
            if !archived.contains(&id) {
                problems.push(format!(
                    "{shard}: {id} is missing below archived {}",
                    RecordId::of_produced(records[newest].1)
                ));
            }
        }
    }
    problems
}

/// After a graceful shutdown with everything archived: every shard that got
/// records has a lease row with no pending batch and a checkpoint at its
/// last record. Returns problems as messages.
pub fn clean_shutdown_problems(rows: &[LeaseRow], produced: &[ProducedRecord]) -> Vec<String> {
    let mut last: HashMap<&str, Seq> = HashMap::new();
    for record in produced {
        let Ok(seq) = Seq::parse(&record.sequence_number) else {
            continue;
        };
        let entry = last
            .entry(record.shard_id.as_str())
            .or_insert_with(|| seq.clone());
        if seq > *entry {
            *entry = seq;
        }
    }
    let mut problems = Vec::new();
    let mut shards: Vec<_> = last.into_iter().collect();
    shards.sort();
    for (shard_id, last) in shards {
        let Some(row) = rows.iter().find(|r| r.lease_key == shard_id) else {
            problems.push(format!("no lease row for {shard_id}"));
            continue;
        };
        if row.has_pending() {
            problems.push(format!(
                "{shard_id} still has a pending batch after shutdown: {:?}",
                row.pending_batch()
            ));
        }
        if row.checkpoint_sequence_number().as_ref() != Some(&last) {
            problems.push(format!(
                "{shard_id} checkpoint is {:?}, expected its last record {last}",
                row.checkpoint
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{DateTime, Utc};

    use super::*;
    use crate::archive::{ArchivedObject, Compression, ObjectKey};

    fn produced(shard: &str, seq: &str, pk: &str, data: &[u8]) -> ProducedRecord {
        ProducedRecord {
            shard_id: shard.to_owned(),
            sequence_number: seq.to_owned(),
            sub_sequence_number: None,
            partition_key: pk.to_owned(),
            data: data.to_vec(),
        }
    }

    fn object(
        name: &str,
        shard: &str,
        records: &[(&str, &str, &str, &[u8])],
    ) -> Arc<ArchivedObject> {
        let minute: DateTime<Utc> = DateTime::parse_from_rfc3339("2026-11-21T05:27:00Z")
            .unwrap()
            .to_utc();
        let seqs: Vec<Seq> = records.iter().map(|r| Seq::parse(r.1).unwrap()).collect();
        let key = ObjectKey::format(
            "p",
            minute,
            shard,
            seqs.iter().min().unwrap(),
            seqs.iter().max().unwrap(),
            Compression::None,
        );
        let key = ObjectKey::parse("p", &key).unwrap();
        let object_key: Arc<str> = Arc::from(format!("{}#{name}", key.key).as_str());
        Arc::new(ArchivedObject {
            records: records
                .iter()
                .enumerate()
                .map(|(i, (line_shard, seq, pk, data))| ArchivedRecord {
                    object_key: Arc::clone(&object_key),
                    line: i + 1,
                    shard_id: (*line_shard).to_owned(),
                    sequence_number: (*seq).to_owned(),
                    sub_sequence_number: None,
                    partition_key: (*pk).to_owned(),
                    approximate_arrival_timestamp: "2026-11-21T05:27:03.123Z".to_owned(),
                    data: data.to_vec(),
                    payload: PayloadForm::Bytes,
                    error_message: None,
                    duplicate_of: None,
                })
                .collect(),
            key,
            e_tag: None,
            size: 0,
            format: Some("envelope".to_owned()),
            declared_records: Some(records.len().to_string()),
            problems: Vec::new(),
        })
    }

    fn archive(objects: Vec<Arc<ArchivedObject>>) -> Archive {
        Archive::of_objects("b", "p", objects)
    }

    #[test]
    fn exact_archive_passes() {
        let produced = [
            produced("s0", "1", "a", b"x"),
            produced("s0", "2", "b", b""),
            produced("s1", "1", "c", b"y"),
        ];
        let archive = archive(vec![
            object("A", "s0", &[("s0", "1", "a", b"x"), ("s0", "2", "b", b"")]),
            object("B", "s1", &[("s1", "1", "c", b"y")]),
        ]);
        let report = exactly_once(&produced, &archive);
        report.assert_exact();
        assert_eq!(report.archived_records, 3);
    }

    #[test]
    fn finds_every_kind_of_problem() {
        let produced = [
            produced("s0", "1", "a", b"x"),
            produced("s0", "2", "b", b"y"),
            produced("s0", "3", "c", b"z"),
            produced("s0", "4", "d", b"w"),
            produced("s1", "1", "e", b"v"),
        ];
        let archive = archive(vec![
            // s0/1 twice; s0/2 with wrong data; s0/4 with a wrong key.
            object(
                "A",
                "s0",
                &[
                    ("s0", "1", "a", b"x"),
                    ("s0", "2", "b", b"Y"),
                    ("s0", "4", "D", b"w"),
                ],
            ),
            object("B", "s0", &[("s0", "1", "a", b"x"), ("s0", "9", "q", b"?")]),
            // s1/1 archived under shard s2.
            object("C", "s2", &[("s2", "1", "e", b"v")]),
        ]);
        let report = exactly_once(&produced, &archive);
        assert!(!report.is_exact());
        assert_eq!(report.missing.len(), 1, "{}", report.summary());
        assert_eq!(report.missing[0].id.sequence_number, "3");
        assert_eq!(report.duplicated.len(), 1);
        assert_eq!(report.duplicated[0].locations.len(), 2);
        assert_eq!(report.unexpected.len(), 1);
        assert_eq!(report.unexpected[0].id.sequence_number, "9");
        let fields: Vec<&str> = report.mismatched.iter().map(|m| m.field).collect();
        assert_eq!(fields.len(), 3, "{}", report.summary());
        assert!(
            fields.contains(&"data")
                && fields.contains(&"partitionKey")
                && fields.contains(&"shardId")
        );
        let summary = report.summary();
        assert!(
            summary.contains("1 missing, 1 duplicated, 1 unexpected, 3 field mismatches"),
            "{summary}"
        );
        let panic = std::panic::catch_unwind(|| report.assert_exact()).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(message.contains("missing s0/3"), "{message}");
    }

    #[test]
    fn summary_shows_at_most_twenty() {
        let produced: Vec<ProducedRecord> = (1..=30)
            .map(|i| produced("s0", &i.to_string(), "k", b""))
            .collect();
        let report = exactly_once(&produced, &archive(Vec::new()));
        assert_eq!(report.missing.len(), 30);
        let summary = report.summary();
        assert_eq!(
            summary.lines().filter(|l| l.starts_with("  - ")).count(),
            SHOWN_PROBLEMS
        );
        assert!(summary.contains("and 10 more"));
    }

    fn row(shard: &str, checkpoint: &str) -> LeaseRow {
        LeaseRow {
            lease_key: shard.to_owned(),
            lease_owner: None,
            lease_counter: Some(1),
            checkpoint: Some(checkpoint.to_owned()),
            checkpoint_sub_sequence_number: None,
            pending_checkpoint: None,
            pending_batch_key: None,
            pending_batch_first_sequence_number: None,
            item: HashMap::new(),
        }
    }

    #[test]
    fn checkpoints() {
        let produced = [
            produced("s0", "9", "a", b""),
            produced("s0", "10", "a", b""),
            produced("s0", "11", "a", b""),
        ];
        let archive = archive(vec![object(
            "A",
            "s0",
            &[("s0", "9", "a", b""), ("s0", "10", "a", b"")],
        )]);
        assert!(checkpoint_problems(&[row("s0", "10")], &produced, &archive).is_empty());
        assert!(checkpoint_problems(&[row("s0", "TRIM_HORIZON")], &produced, &archive).is_empty());
        // "11" > "10" numerically although "11" < "9" as text.
        assert_eq!(
            checkpoint_problems(&[row("s0", "11")], &produced, &archive).len(),
            1
        );
        assert!(clean_shutdown_problems(&[row("s0", "11")], &produced).is_empty());
        assert_eq!(
            clean_shutdown_problems(&[row("s0", "10")], &produced).len(),
            1
        );
        assert_eq!(clean_shutdown_problems(&[], &produced).len(), 1);
    }
}
