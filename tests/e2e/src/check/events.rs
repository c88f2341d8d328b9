//! Each event once: with event deduplication on, statement E2 and the
//! decisions objects, checked record by record against what was produced.
//! (E1, every user record in exactly one place, is
//! [`each_record_in_one_place`](super::each_record_in_one_place).)
//!
//! The event id of each produced record is the test's to say (the
//! `--event-id` it configured, read independently of the daemon's code:
//! [`json_pointer_id`]); the archive's records are matched to the produced
//! ones by shard, sequence number and sub-sequence number.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::Value;

use super::{RecordId, SHOWN_PROBLEMS};
use crate::archive::{Archive, ArchivedRecord, CopyRef, DecisionLine, Outcome, parse_timestamp};
use crate::fixtures::ShardInfo;
use crate::producer::ProducedRecord;
use crate::seq::Seq;

/// Where the accepted copy of a duplicate may be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `--event-dedup-store local`: in the duplicate's own shard before
    /// it, or anywhere in one of the shard's ancestors (the [`Lineage`];
    /// empty for a stream never resharded).
    Shard(Lineage),
    /// `--event-dedup-store dynamodb`: anywhere in the stream.
    Stream,
}

/// The stream's shards and their parents: a shard's ancestors come before
/// all of its records (a parent is read to its end before its children),
/// so with the local store a copy in an ancestor precedes every copy in the
/// shard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lineage {
    parents: HashMap<String, Vec<String>>,
}

impl Lineage {
    /// The parents ListShards gave: `ParentShardId`, and a merge's
    /// `AdjacentParentShardId`.
    pub fn of(shards: &[ShardInfo]) -> Self {
        Self {
            parents: shards
                .iter()
                .map(|shard| {
                    let parents = [&shard.parent_shard_id, &shard.adjacent_parent_shard_id];
                    (
                        shard.shard_id.clone(),
                        parents.into_iter().flatten().cloned().collect(),
                    )
                })
                .collect(),
        }
    }

    /// Whether `ancestor` is a parent of `shard`, or a parent's ancestor.
    pub fn is_ancestor(&self, ancestor: &str, shard: &str) -> bool {
        let mut seen: HashSet<&str> = HashSet::new();
        let mut next: Vec<&str> = vec![shard];
        while let Some(shard) = next.pop() {
            for parent in self.parents.get(shard).into_iter().flatten() {
                if parent == ancestor {
                    return true;
                }
                if seen.insert(parent) {
                    next.push(parent);
                }
            }
        }
        false
    }

    /// Whether the copy `earlier` precedes `copy` in the order the local
    /// store decides them: before it in its shard, or in an ancestor.
    pub fn precedes(&self, earlier: &RecordId, copy: &RecordId) -> bool {
        if earlier.shard_id == copy.shard_id {
            let at = |id: &RecordId| {
                Seq::parse(&id.sequence_number)
                    .ok()
                    .map(|seq| (seq, id.sub_sequence_number))
            };
            let (earlier, copy) = (at(earlier), at(copy));
            earlier.is_some() && earlier < copy
        } else {
            self.is_ancestor(&earlier.shard_id, &copy.shard_id)
        }
    }
}

/// Whether a daemon's log (its JSON lines, [`Daemon::log_entries`]) says
/// it rebuilt `shard`'s event window from S3 out of at least one decisions
/// object (the `event window rebuilt from S3` line).
///
/// [`Daemon::log_entries`]: crate::Daemon::log_entries
pub fn rebuilt_window_from_s3(log: &[Value], shard: &str) -> bool {
    log.iter().any(|line| {
        line["message"] == "event window rebuilt from S3"
            && line["shard_id"] == shard
            && line["objects"].as_u64().is_some_and(|objects| objects > 0)
    })
}

/// The event settings of a run, as far as the check needs them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRules {
    /// `--event-dedup-window`.
    pub window: Duration,
    /// `--event-fingerprint payload` (a duplicate has its accepted copy's
    /// payload) rather than `none`.
    pub fingerprint: bool,
    /// Where accepted copies are looked for.
    pub scope: Scope,
}

/// The event id of a record whose payload is JSON: the value at the RFC
/// 6901 `pointer` — a string's text, any other value's JSON text; no id
/// for a payload that is not JSON, a missing member or `null` (as
/// `--event-id json-pointer:{pointer}` reads it).
pub fn json_pointer_id(pointer: &str) -> impl Fn(&ProducedRecord) -> Option<String> + use<> {
    let pointer = pointer.to_owned();
    move |record| {
        let value: Value = serde_json::from_slice(&record.data).ok()?;
        match value.pointer(&pointer)? {
            Value::Null => None,
            Value::String(text) => Some(text.clone()),
            other => Some(other.to_string()),
        }
    }
}

/// What [`each_event_once`] found.
#[derive(Clone, Debug, Default)]
pub struct EventReport {
    /// Distinct event ids among the produced records.
    pub events: usize,
    /// Produced records with an event id.
    pub records_with_id: usize,
    /// Produced records without one.
    pub records_without_id: usize,
    /// Kept records (main or error prefix) with an event id.
    pub kept_with_id: usize,
    /// Records under the duplicates prefix.
    pub duplicates: usize,
    /// Duplicates whose accepted copy is on another shard.
    pub cross_shard_duplicates: usize,
    /// Committed batches, and those with a decisions object.
    pub batches: usize,
    /// Committed batches with a decisions object.
    pub batches_with_decisions: usize,
    /// Records by the outcome their decisions object gives.
    pub outcomes: BTreeMap<Outcome, usize>,
    /// What does not hold, one line each.
    pub problems: Vec<String>,
}

impl EventReport {
    /// The counts, and the first [`SHOWN_PROBLEMS`] problems.
    pub fn summary(&self) -> String {
        let outcomes: Vec<String> = self
            .outcomes
            .iter()
            .map(|(outcome, n)| format!("{outcome} {n}"))
            .collect();
        let mut text = format!(
            "{} events in {} records with an id ({} without), {} kept, {} duplicates ({} of a copy \
             on another shard); {} of {} batches with decisions ({}); {} problems",
            self.events,
            self.records_with_id,
            self.records_without_id,
            self.kept_with_id,
            self.duplicates,
            self.cross_shard_duplicates,
            self.batches_with_decisions,
            self.batches,
            outcomes.join(", "),
            self.problems.len()
        );
        for problem in self.problems.iter().take(SHOWN_PROBLEMS) {
            let _ = write!(text, "\n  - {problem}");
        }
        if self.problems.len() > SHOWN_PROBLEMS {
            let _ = write!(
                text,
                "\n  … and {} more",
                self.problems.len() - SHOWN_PROBLEMS
            );
        }
        text
    }

    /// Panics with [`EventReport::summary`] unless there is no problem.
    ///
    /// # Panics
    /// When there is a problem.
    #[track_caller]
    pub fn assert_ok(&self) {
        assert!(
            self.problems.is_empty(),
            "events are not each once:\n{}",
            self.summary()
        );
        println!("each event once: {}", self.summary());
    }
}

/// What two copies share when they are one event: the id, and with
/// fingerprints the payload (else nothing).
type Event = (String, Vec<u8>);

/// A record's place in its shard: sequence number and sub-sequence number.
type Position = Option<(Seq, Option<u64>)>;

/// A record's arrival in ms since the Unix epoch, from its line.
fn arrival_millis(record: &ArchivedRecord) -> Option<i64> {
    parse_timestamp(&record.approximate_arrival_timestamp)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Checks the archive's event decisions against `produced`, whose event ids
/// `id_of` gives, for a run with `rules`:
/// - E2: no two kept copies (main or error prefix) of an event — same id,
///   and the same payload with fingerprints — arrived within the window of
///   each other; every event id has a kept copy;
/// - every duplicate has an id, and its `duplicateOf` names a kept record
///   of the same event (the same payload with fingerprints) that arrived
///   within the window of it; with [`Scope::Shard`] that record is in the
///   duplicate's shard before it or in an ancestor of the shard, and the
///   first copy of each event in a shard is kept unless an ancestor has a
///   copy;
/// - every committed batch has a decisions object, whose line for each
///   record gives its arrival time, `id_missing` exactly for records
///   without an id, one `eventIdHash` per event id (and one id per hash),
///   and one `payloadHash` per payload.
///
/// Archived records nobody produced are left to
/// [`each_record_in_one_place`](super::each_record_in_one_place).
pub fn each_event_once(
    produced: &[ProducedRecord],
    archive: &Archive,
    id_of: &dyn Fn(&ProducedRecord) -> Option<String>,
    rules: EventRules,
) -> EventReport {
    let window = i64::try_from(rules.window.as_millis()).unwrap_or(i64::MAX);
    let mut report = EventReport::default();
    let by_record: HashMap<RecordId, (&ProducedRecord, Option<String>)> = produced
        .iter()
        .map(|record| (RecordId::of_produced(record), (record, id_of(record))))
        .collect();
    let mut ids: HashSet<&str> = HashSet::new();
    for (_, id) in by_record.values() {
        match id {
            Some(id) => {
                report.records_with_id += 1;
                ids.insert(id);
            }
            None => report.records_without_id += 1,
        }
    }
    report.events = ids.len();
    let problems = &mut report.problems;
    let event_of = |record: &ArchivedRecord| by_record.get(&RecordId::of_archived(record));
    // The key two copies must share to be one event.
    let event_key = |produced: &ProducedRecord, id: &str| -> Event {
        let payload = if rules.fingerprint {
            produced.data.clone()
        } else {
            Vec::new()
        };
        (id.to_owned(), payload)
    };

    // E2 over the kept records.
    let mut kept: HashMap<CopyRef, (&ArchivedRecord, &ProducedRecord, &str)> = HashMap::new();
    let mut kept_by_event: HashMap<Event, Vec<(i64, &ArchivedRecord)>> = HashMap::new();
    let mut kept_ids: HashSet<&str> = HashSet::new();
    for record in archive.records() {
        let Some((source, Some(id))) = event_of(record) else {
            continue;
        };
        report.kept_with_id += 1;
        kept.insert(record.copy_ref(), (record, source, id));
        kept_ids.insert(id);
        let Some(arrival) = arrival_millis(record) else {
            continue;
        };
        kept_by_event
            .entry(event_key(source, id))
            .or_default()
            .push((arrival, record));
    }
    let mut twice: Vec<String> = kept_by_event
        .iter_mut()
        .flat_map(|((id, _), copies)| {
            copies.sort_by_key(|(arrival, _)| *arrival);
            copies
                .windows(2)
                .filter(|w| w[1].0 - w[0].0 <= window)
                .map(|w| {
                    format!(
                        "event {id:?} kept twice within the window: {} and {} ({} ms apart)",
                        w[0].1.location(),
                        w[1].1.location(),
                        w[1].0 - w[0].0
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    twice.sort();
    problems.extend(twice);
    let mut unkept: Vec<&&str> = ids.iter().filter(|id| !kept_ids.contains(**id)).collect();
    unkept.sort();
    problems.extend(
        unkept
            .into_iter()
            .map(|id| format!("event {id:?} has no kept copy")),
    );

    // Every duplicate against the copy it names.
    for record in archive.duplicates() {
        report.duplicates += 1;
        let Some(of) = &record.duplicate_of else {
            continue;
        };
        let Some((source, id)) = event_of(record) else {
            continue;
        };
        let Some(id) = id else {
            problems.push(format!(
                "{} is a duplicate, and its payload has no event id",
                record.location()
            ));
            continue;
        };
        let Some((accepted, accepted_source, accepted_id)) = kept.get(of) else {
            problems.push(format!(
                "{} (event {id:?}) is a duplicate of {of}, which is not a kept record with an \
                 event id",
                record.location()
            ));
            continue;
        };
        if of.shard_id != record.shard_id {
            report.cross_shard_duplicates += 1;
        }
        if accepted_id != id {
            problems.push(format!(
                "{} (event {id:?}) is a duplicate of {} (event {accepted_id:?})",
                record.location(),
                accepted.location()
            ));
        }
        if rules.fingerprint && accepted_source.data != source.data {
            problems.push(format!(
                "{} is a duplicate of {}, whose payload differs",
                record.location(),
                accepted.location()
            ));
        }
        if let (Some(t), Some(t_accepted)) = (arrival_millis(record), arrival_millis(accepted))
            && (t - t_accepted).abs() > window
        {
            problems.push(format!(
                "{} is a duplicate of {}, which arrived {} ms apart (window {} ms)",
                record.location(),
                accepted.location(),
                t - t_accepted,
                window
            ));
        }
        if let Scope::Shard(lineage) = &rules.scope
            && !lineage.precedes(&RecordId::from(of), &RecordId::of_archived(record))
        {
            problems.push(format!(
                "{} is a duplicate of {of}, which does not precede it in its shard or an \
                 ancestor",
                record.location()
            ));
        }
    }

    // In a shard's own scope, the first copy of each event in a shard's
    // lineage is kept: the first in the shard, unless an ancestor has one.
    if let Scope::Shard(lineage) = &rules.scope {
        let mut first: HashMap<(&str, Event), (Position, RecordId)> = HashMap::new();
        for (record, id) in by_record.values() {
            let Some(id) = id else { continue };
            let record_id = RecordId::of_produced(record);
            let at = Seq::parse(&record.sequence_number)
                .ok()
                .map(|seq| (seq, record.sub_sequence_number));
            let slot = first
                .entry((record.shard_id.as_str(), event_key(record, id)))
                .or_insert_with(|| (at.clone(), record_id.clone()));
            if at < slot.0 {
                *slot = (at, record_id);
            }
        }
        let shards_of: HashMap<&Event, Vec<&str>> =
            first
                .keys()
                .fold(HashMap::new(), |mut map, (shard, event)| {
                    map.entry(event).or_default().push(shard);
                    map
                });
        let in_an_ancestor = |shard: &str, event: &Event| {
            shards_of[event]
                .iter()
                .any(|other| lineage.is_ancestor(other, shard))
        };
        let kept_records: HashSet<RecordId> =
            archive.records().map(RecordId::of_archived).collect();
        let mut not_kept: Vec<String> = first
            .iter()
            .filter(|((shard, event), (_, record))| {
                !kept_records.contains(record) && !in_an_ancestor(shard, event)
            })
            .map(|((_, (id, _)), (_, record))| {
                format!("{record}, the first copy of event {id:?} in its shard, is not kept")
            })
            .collect();
        not_kept.sort();
        problems.extend(not_kept);
    }

    // The decisions objects.
    let with_decisions: HashSet<String> = archive
        .decisions_objects
        .iter()
        .map(|d| d.key.batch_path())
        .collect();
    report.batches = archive.objects.len();
    for main in &archive.objects {
        if with_decisions.contains(&main.key.batch_path()) {
            report.batches_with_decisions += 1;
        } else {
            problems.push(format!("{} has no decisions object", main.key.key));
        }
    }
    let mut lines: HashMap<CopyRef, &DecisionLine> = HashMap::new();
    for object in &archive.decisions_objects {
        for line in &object.lines {
            lines.insert(line.copy_ref(&object.key.shard_id), line);
        }
    }
    let mut id_hashes: HashMap<&str, &str> = HashMap::new();
    let mut hash_ids: HashMap<&str, &str> = HashMap::new();
    let mut payload_hashes: HashMap<&[u8], &str> = HashMap::new();
    for record in archive.placed_records() {
        let Some(line) = lines.get(&record.copy_ref()) else {
            continue;
        };
        *report.outcomes.entry(line.outcome).or_default() += 1;
        let arrival = arrival_millis(record);
        if arrival != Some(line.arrival_millis) {
            problems.push(format!(
                "{}: the decisions line says arrival {} ms, the record {}",
                record.location(),
                line.arrival_millis,
                record.approximate_arrival_timestamp
            ));
        }
        let Some((source, id)) = event_of(record) else {
            continue;
        };
        match (id, &line.event_id_hash, &line.payload_hash) {
            (None, _, _) if line.outcome != Outcome::IdMissing => problems.push(format!(
                "{}: decided {}, and its payload has no event id",
                record.location(),
                line.outcome
            )),
            (Some(id), Some(id_hash), Some(payload_hash)) => {
                let known = id_hashes.entry(id).or_insert(id_hash);
                if known != id_hash {
                    problems.push(format!(
                        "{}: event {id:?} has the eventIdHash {id_hash}, another copy {known}",
                        record.location()
                    ));
                }
                let named = hash_ids.entry(id_hash).or_insert(id);
                if named != id {
                    problems.push(format!(
                        "{}: events {id:?} and {named:?} share the eventIdHash {id_hash}",
                        record.location()
                    ));
                }
                let known = payload_hashes.entry(&source.data).or_insert(payload_hash);
                if known != payload_hash {
                    problems.push(format!(
                        "{}: one payload with the payloadHash {payload_hash} and {known}",
                        record.location()
                    ));
                }
            }
            (Some(id), _, _) => problems.push(format!(
                "{}: event {id:?} decided {} without hashes",
                record.location(),
                line.outcome
            )),
            (None, _, _) => {}
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::DateTime;

    use super::*;
    use crate::archive::{ArchivedObject, Compression, ObjectKey, PayloadForm};

    fn produced(data: &str) -> ProducedRecord {
        ProducedRecord {
            shard_id: "s".to_owned(),
            sequence_number: "1".to_owned(),
            sub_sequence_number: None,
            partition_key: "k".to_owned(),
            data: data.as_bytes().to_vec(),
        }
    }

    #[test]
    fn ids_at_a_json_pointer() {
        let id = json_pointer_id("/id");
        assert_eq!(id(&produced(r#"{"id":"a\"b"}"#)), Some("a\"b".to_owned()));
        assert_eq!(id(&produced(r#"{"n":1,"id":17}"#)), Some("17".to_owned()));
        assert_eq!(id(&produced(r#"{"id":null}"#)), None);
        assert_eq!(id(&produced(r#"{"ID":"x"}"#)), None);
        assert_eq!(id(&produced("not json")), None);
        assert_eq!(id(&produced(r#"["id"]"#)), None);
        let nested = json_pointer_id("/a~1b/0");
        assert_eq!(nested(&produced(r#"{"a/b":["x"]}"#)), Some("x".to_owned()));
    }

    /// A record `s/seq` arriving `second` seconds into a minute, with a
    /// `duplicateOf` `s/of` when given.
    fn archived(object: &str, seq: &str, second: u32, of: Option<&str>) -> ArchivedRecord {
        ArchivedRecord {
            object_key: Arc::from(object),
            line: 1,
            shard_id: "s".to_owned(),
            sequence_number: seq.to_owned(),
            sub_sequence_number: None,
            partition_key: "k".to_owned(),
            approximate_arrival_timestamp: format!("2026-11-21T05:27:{second:02}.000Z"),
            data: Vec::new(),
            payload: PayloadForm::Bytes,
            error_message: None,
            duplicate_of: of.map(|of| CopyRef {
                shard_id: "s".to_owned(),
                sequence_number: of.to_owned(),
                sub_sequence_number: None,
            }),
        }
    }

    fn object(
        prefix: &str,
        first: &str,
        last: &str,
        records: Vec<ArchivedRecord>,
    ) -> Arc<ArchivedObject> {
        let minute = DateTime::parse_from_rfc3339("2026-11-21T05:27:00Z")
            .unwrap()
            .to_utc();
        let text = ObjectKey::format(
            prefix,
            minute,
            "s",
            &Seq::parse(first).unwrap(),
            &Seq::parse(last).unwrap(),
            Compression::Zstd,
        );
        Arc::new(ArchivedObject {
            key: ObjectKey::parse(prefix, &text).unwrap(),
            e_tag: None,
            size: 0,
            format: Some("envelope".to_owned()),
            declared_records: None,
            records,
            problems: Vec::new(),
        })
    }

    #[test]
    fn finds_events_kept_twice_and_wrong_duplicates() {
        let mut records: Vec<ProducedRecord> = [
            (r#"{"id":"a"}"#, "1"),
            (r#"{"id":"a"}"#, "2"),
            (r#"{"id":"b"}"#, "3"),
            (r#"{"id":"b"}"#, "4"),
            (r#"{"id":"a"}"#, "5"),
            ("no id", "6"),
        ]
        .iter()
        .map(|(data, seq)| {
            let mut record = produced(data);
            record.sequence_number = (*seq).to_owned();
            record
        })
        .collect();
        let mut archive = Archive::of_objects(
            "b",
            "p",
            vec![object(
                "p",
                "1",
                "6",
                vec![
                    archived("m", "1", 1, None),
                    archived("m", "3", 3, None),
                    archived("m", "4", 4, None),
                    archived("m", "6", 6, None),
                ],
            )],
        );
        archive.duplicate_objects = vec![object(
            "p-duplicates",
            "1",
            "6",
            vec![
                archived("d", "2", 2, Some("1")),
                archived("d", "5", 5, Some("3")),
            ],
        )];
        let rules = EventRules {
            window: Duration::from_secs(3600),
            fingerprint: true,
            scope: Scope::Shard(Lineage::default()),
        };
        let report = each_event_once(&records, &archive, &json_pointer_id("/id"), rules.clone());
        let text = report.summary();
        assert_eq!(
            (
                report.events,
                report.records_with_id,
                report.records_without_id
            ),
            (2, 5, 1)
        );
        assert_eq!((report.kept_with_id, report.duplicates), (3, 2));
        for needle in [
            "event \"b\" kept twice within the window: m:1 and m:1 (1000 ms apart)",
            "d:1 (event \"a\") is a duplicate of m:1 (event \"b\")",
            "d:1 is a duplicate of m:1, whose payload differs",
            "has no decisions object",
        ] {
            assert!(text.contains(needle), "{needle}: {text}");
        }
        assert_eq!(report.problems.len(), 4, "{text}");

        // Out of the window, and after the record, in its shard.
        records[1].sequence_number = "7".to_owned();
        archive.objects = Vec::new();
        archive.duplicate_objects = Vec::new();
        archive.objects.push(object(
            "p",
            "1",
            "7",
            vec![archived("m", "1", 59, None), archived("m", "4", 4, None)],
        ));
        archive.duplicate_objects.push(object(
            "p-duplicates",
            "1",
            "7",
            vec![
                archived("d", "3", 3, Some("4")),
                archived("d", "7", 1, Some("1")),
            ],
        ));
        let rules = EventRules {
            window: Duration::from_secs(30),
            ..rules
        };
        let text =
            each_event_once(&records[..4], &archive, &json_pointer_id("/id"), rules).summary();
        for needle in [
            "d:1 is a duplicate of m:1, which arrived -58000 ms apart (window 30000 ms)",
            "d:1 is a duplicate of s/4, which does not precede it in its shard",
            "s/3, the first copy of event \"b\" in its shard, is not kept",
        ] {
            assert!(text.contains(needle), "{needle}: {text}");
        }
    }

    fn shard(id: &str, parents: &[&str]) -> ShardInfo {
        ShardInfo {
            shard_id: id.to_owned(),
            parent_shard_id: parents.first().map(|&parent| parent.to_owned()),
            adjacent_parent_shard_id: parents.get(1).map(|&parent| parent.to_owned()),
            starting_sequence_number: "0".to_owned(),
            ending_sequence_number: None,
            hash_key_range: (0, u128::MAX),
        }
    }

    #[test]
    fn an_ancestors_copies_precede_the_shards() {
        let lineage = Lineage::of(&[
            shard("p", &[]),
            shard("c1", &["p"]),
            shard("c2", &["p"]),
            shard("g", &["c1"]),
            shard("m", &["g", "c2"]),
        ]);
        assert!(lineage.is_ancestor("p", "g") && lineage.is_ancestor("c1", "g"));
        assert!(!lineage.is_ancestor("c2", "g") && !lineage.is_ancestor("g", "p"));
        // A merge has both parents, and their ancestors.
        assert!(lineage.is_ancestor("c2", "m") && lineage.is_ancestor("c1", "m"));
        assert!(lineage.is_ancestor("p", "m") && !lineage.is_ancestor("m", "c2"));
        let id = |shard: &str, seq: &str| RecordId {
            shard_id: shard.to_owned(),
            sequence_number: seq.to_owned(),
            sub_sequence_number: None,
        };
        assert!(lineage.precedes(&id("p", "9"), &id("c1", "1")));
        assert!(lineage.precedes(&id("c1", "1"), &id("c1", "2")));
        assert!(!lineage.precedes(&id("c1", "2"), &id("c1", "2")));
        assert!(!lineage.precedes(&id("c1", "2"), &id("c1", "1")));
        assert!(!lineage.precedes(&id("c2", "1"), &id("c1", "5")));

        // Event a kept in the parent, its retry in a child a duplicate of
        // it; event b's retry in the other child names a sibling's copy.
        let in_shard = |shard: &str, mut record: ArchivedRecord| {
            record.shard_id = shard.to_owned();
            if let Some(of) = &mut record.duplicate_of {
                of.shard_id = if shard == "c2" { "c1" } else { "p" }.to_owned();
            }
            record
        };
        let records: Vec<ProducedRecord> = [
            ("p", "1", r#"{"id":"a"}"#),
            ("c1", "2", r#"{"id":"a"}"#),
            ("c1", "3", r#"{"id":"b"}"#),
            ("c2", "4", r#"{"id":"b"}"#),
        ]
        .iter()
        .map(|(shard, seq, data)| ProducedRecord {
            shard_id: (*shard).to_owned(),
            sequence_number: (*seq).to_owned(),
            ..produced(data)
        })
        .collect();
        let mut archive = Archive::of_objects(
            "b",
            "p",
            vec![object(
                "p",
                "1",
                "3",
                vec![
                    in_shard("p", archived("m", "1", 1, None)),
                    in_shard("c1", archived("m", "3", 3, None)),
                ],
            )],
        );
        archive.duplicate_objects = vec![object(
            "p-duplicates",
            "2",
            "4",
            vec![
                in_shard("c1", archived("d", "2", 2, Some("1"))),
                in_shard("c2", archived("d", "4", 4, Some("3"))),
            ],
        )];
        let rules = EventRules {
            window: Duration::from_secs(3600),
            fingerprint: true,
            scope: Scope::Shard(lineage),
        };
        let report = each_event_once(&records, &archive, &json_pointer_id("/id"), rules);
        let text = report.summary();
        let lineage_problems: Vec<&String> = report
            .problems
            .iter()
            .filter(|problem| !problem.contains("decisions"))
            .collect();
        assert_eq!(
            lineage_problems,
            [
                "d:1 is a duplicate of c1/3, which does not precede it in its shard or an ancestor",
                "c2/4, the first copy of event \"b\" in its shard, is not kept",
            ],
            "{text}"
        );
    }
}
