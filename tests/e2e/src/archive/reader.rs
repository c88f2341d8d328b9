//! Reading the whole archive: list, HEAD and GET each new object once,
//! decode it by the format its metadata names, and put each batch's main,
//! error, duplicates and decisions objects together.
//!
//! This reader is independent of the daemon's own (`output::read_back` in
//! the shardsink crate) on purpose: it shares no code with the daemon, so
//! that it checks the archive as a user's query engine would read it.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;

use super::decisions::{DECISIONS_FOLDER, DecisionsObject, Outcome, decode_decisions};
use super::decode::{LineKind, decode_lines};
use super::format::{FORMAT_METADATA, MAIN_FORMAT_METADATA, ObjectFormat, RECORDS_METADATA};
use super::json::decode_json;
use super::key::Shape;
use super::layout::KeyLayout;
use super::parquet::decode_parquet;
use super::raw::decode_raw;
use super::schema::ParquetSchema;
use super::{
    Archive, ArchiveProblem, ArchivedObject, ArchivedRecord, ObjectKey, get_object,
    head_object_metadata, list_objects,
};
use crate::daemon::Settings;
use crate::env::TestEnv;
use crate::seq::Seq;
use crate::stream::{GroundTruth, StreamRecord, read_stream};

/// Where and how to read an archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReaderOptions {
    /// `--prefix`: the batches' main objects.
    pub prefix: String,
    /// `--error-prefix`: their error objects.
    pub error_prefix: String,
    /// `--duplicates-prefix`: their duplicates objects.
    pub duplicates_prefix: String,
    /// `--key-layout` and `--time-bucket`.
    pub layout: KeyLayout,
    /// `--parquet-schema`, read: the typed columns of `parquet;schema=…`
    /// objects.
    pub schema: Option<Arc<ParquetSchema>>,
    /// The stream archived, read back to give `raw` payloads their
    /// identities; `None`: `raw` objects cannot be decoded.
    pub stream: Option<String>,
}

impl ReaderOptions {
    /// The daemon's defaults under `prefix`: error prefix
    /// `{prefix}-errors`, duplicates prefix `{prefix}-duplicates`, plain
    /// per-minute keys, no schema, no stream.
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            error_prefix: format!("{prefix}-errors"),
            duplicates_prefix: format!("{prefix}-duplicates"),
            layout: KeyLayout::default(),
            schema: None,
            stream: None,
        }
    }

    /// What `settings` make the daemon write: `--prefix`, `--error-prefix`,
    /// `--duplicates-prefix`, `--key-layout`, `--time-bucket`,
    /// `--parquet-schema` (the file is read now) and `--stream`.
    ///
    /// # Panics
    /// When the schema file cannot be read or parsed, or a layout setting
    /// is unknown.
    pub fn of_settings(settings: &Settings) -> Self {
        let prefix = settings.prefix();
        let schema = settings.get("parquet-schema").map(|path| {
            Arc::new(ParquetSchema::read(Path::new(path)).unwrap_or_else(|e| panic!("{e:#}")))
        });
        Self {
            error_prefix: settings
                .get("error-prefix")
                .map_or_else(|| format!("{prefix}-errors"), str::to_owned),
            duplicates_prefix: settings
                .get("duplicates-prefix")
                .map_or_else(|| format!("{prefix}-duplicates"), str::to_owned),
            layout: KeyLayout::of_settings(settings),
            schema,
            stream: Some(settings.stream().to_owned()),
            prefix,
        }
    }
}

/// Reads the archive repeatedly, fetching each object once: objects are
/// immutable, so an object listed again with the same ETag and size is
/// taken from the cache. Objects that disappear from the listing disappear
/// from the next snapshot.
#[derive(Debug)]
pub struct ArchiveReader {
    env: TestEnv,
    bucket: String,
    options: ReaderOptions,
    cache: HashMap<String, Arc<ArchivedObject>>,
    decisions_cache: HashMap<String, Arc<DecisionsObject>>,
    truth: Option<GroundTruth>,
}

/// Whether an object is a batch's main object, its error object or its
/// duplicates object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Main,
    Errors,
    Duplicates,
}

impl ArchiveReader {
    /// A reader for the objects the daemon writes under `{prefix}/` in
    /// `bucket` with its default settings ([`ReaderOptions::new`]).
    pub fn new(env: &TestEnv, bucket: &str, prefix: &str) -> Self {
        Self::with_options(env, bucket, ReaderOptions::new(prefix))
    }

    /// A reader for an archive written with `options`.
    pub fn with_options(env: &TestEnv, bucket: &str, options: ReaderOptions) -> Self {
        Self {
            env: env.clone(),
            bucket: bucket.to_owned(),
            options,
            cache: HashMap::new(),
            decisions_cache: HashMap::new(),
            truth: None,
        }
    }

    /// The options read with.
    pub fn options(&self) -> &ReaderOptions {
        &self.options
    }

    /// Lists the whole bucket and returns a snapshot.
    ///
    /// # Errors
    /// An AWS error while listing, heading or getting, or while reading the
    /// stream back for `raw` objects.
    pub async fn read(&mut self) -> Result<Archive> {
        let listed = list_objects(&self.env, &self.bucket, "").await?;
        let main_prefix = format!("{}/", self.options.prefix);
        let error_prefix = format!("{}/", self.options.error_prefix);
        let duplicates_prefix = format!("{}/", self.options.duplicates_prefix);
        let decisions_prefix = format!("{main_prefix}{DECISIONS_FOLDER}");
        let layout_key = format!("{main_prefix}_shardsink.json");
        let mut found = Listed::default();
        let mut cache = HashMap::new();
        let mut decisions_cache = HashMap::new();
        let mut refreshed = false;
        for entry in listed {
            if entry.key == layout_key {
                let body = get_object(&self.env, &self.bucket, &entry.key).await?;
                found.layout_record = body.map(|body| String::from_utf8_lossy(&body).into_owned());
                continue;
            }
            if entry.key.starts_with(&format!("{decisions_prefix}/")) {
                let key =
                    match ObjectKey::parse_in(self.options.layout, &decisions_prefix, &entry.key) {
                        Ok(key) => key,
                        Err(message) => {
                            found.stray_keys.push(stray_key(entry.key, &message));
                            continue;
                        }
                    };
                let object = match self.decisions_cache.get(&entry.key) {
                    Some(cached) if cached.e_tag == entry.e_tag && cached.size == entry.size => {
                        Arc::clone(cached)
                    }
                    _ => {
                        let Some((metadata, body)) = self.fetch(&entry.key).await? else {
                            continue;
                        };
                        Arc::new(decisions_object(key, &metadata, &body, entry.e_tag))
                    }
                };
                decisions_cache.insert(entry.key, Arc::clone(&object));
                found.decisions.push(object);
                continue;
            }
            let (role, prefix) = if entry.key.starts_with(&main_prefix) {
                (Role::Main, &self.options.prefix)
            } else if entry.key.starts_with(&error_prefix) {
                (Role::Errors, &self.options.error_prefix)
            } else if entry.key.starts_with(&duplicates_prefix) {
                (Role::Duplicates, &self.options.duplicates_prefix)
            } else {
                (Role::Main, &self.options.prefix)
            };
            let key = match ObjectKey::parse_in(self.options.layout, prefix, &entry.key) {
                Ok(key) if key.shape != Shape::Decisions => key,
                Ok(_) => {
                    found.stray_keys.push(ArchiveProblem {
                        object_key: entry.key,
                        line: None,
                        message: format!(
                            "a decisions object outside {decisions_prefix}/ does not follow the contract"
                        ),
                    });
                    continue;
                }
                Err(message) => {
                    found.stray_keys.push(stray_key(entry.key, &message));
                    continue;
                }
            };
            let object = match self.cache.get(&entry.key) {
                Some(cached) if cached.e_tag == entry.e_tag && cached.size == entry.size => {
                    Arc::clone(cached)
                }
                _ => {
                    let Some((metadata, body)) = self.fetch(&entry.key).await? else {
                        continue;
                    };
                    let object = self
                        .decode(key, role, &metadata, body, entry.e_tag, &mut refreshed)
                        .await?;
                    Arc::new(object)
                }
            };
            cache.insert(entry.key, Arc::clone(&object));
            match role {
                Role::Main => found.mains.push(object),
                Role::Errors => found.errors.push(object),
                Role::Duplicates => found.duplicates.push(object),
            }
        }
        self.cache = cache;
        self.decisions_cache = decisions_cache;
        Ok(assemble(&self.bucket, &self.options.prefix, found))
    }

    /// The user metadata and body of `key`; `None` when it was deleted
    /// between the LIST and the HEAD or GET (it is then not listed).
    async fn fetch(&self, key: &str) -> Result<Option<(HashMap<String, String>, Vec<u8>)>> {
        let Some(metadata) = head_object_metadata(&self.env, &self.bucket, key).await? else {
            return Ok(None);
        };
        Ok(get_object(&self.env, &self.bucket, key)
            .await?
            .map(|body| (metadata, body)))
    }

    /// Decodes one object by the format its metadata names (by its
    /// extension when the metadata is missing, which is a problem), and
    /// checks its record count against `x-amz-meta-shardsink-records`.
    async fn decode(
        &mut self,
        key: ObjectKey,
        role: Role,
        metadata: &HashMap<String, String>,
        body: Vec<u8>,
        e_tag: Option<String>,
        refreshed: &mut bool,
    ) -> Result<ArchivedObject> {
        let mut problems = Vec::new();
        let mut problem = |message: String| {
            problems.push(ArchiveProblem {
                object_key: key.key.clone(),
                line: None,
                message,
            });
        };
        let format_text = metadata.get(FORMAT_METADATA).cloned();
        let declared_records = metadata.get(RECORDS_METADATA).cloned();
        let by_extension = match (role, key.shape) {
            (Role::Errors, _) => ObjectFormat::Errors,
            (Role::Duplicates, _) => ObjectFormat::Duplicates,
            (Role::Main, Shape::Lines) => ObjectFormat::Envelope,
            (Role::Main, Shape::Raw) => ObjectFormat::Raw {
                delimiter: b"\n".to_vec(),
            },
            (Role::Main, Shape::Parquet | Shape::Decisions) => {
                ObjectFormat::Parquet { schema: None }
            }
        };
        let format = match format_text.as_deref().map(ObjectFormat::parse) {
            Some(Ok(format)) => format,
            Some(Err(message)) => {
                problem(format!("x-amz-meta-{FORMAT_METADATA}: {message}"));
                by_extension
            }
            None => {
                problem(format!("no x-amz-meta-{FORMAT_METADATA}"));
                by_extension
            }
        };
        let shape_of_format = match &format {
            ObjectFormat::Envelope
            | ObjectFormat::Json { .. }
            | ObjectFormat::Errors
            | ObjectFormat::Duplicates => Shape::Lines,
            ObjectFormat::Raw { .. } => Shape::Raw,
            ObjectFormat::Parquet { .. } => Shape::Parquet,
        };
        if shape_of_format != key.shape {
            problem(format!(
                "format {format} under the extension {}",
                key.extension()
            ));
        }
        for (side, side_format, place) in [
            (Role::Errors, ObjectFormat::Errors, "the error prefix"),
            (
                Role::Duplicates,
                ObjectFormat::Duplicates,
                "the duplicates prefix",
            ),
        ] {
            if (role == side) != (format == side_format) {
                problem(format!(
                    "format {format} {} {place}",
                    if role == side { "under" } else { "outside" }
                ));
            }
        }
        let (records, decode_problems): (Vec<ArchivedRecord>, Vec<ArchiveProblem>) = match &format {
            ObjectFormat::Envelope => decode_lines(&key, &body, LineKind::Envelope),
            ObjectFormat::Errors => decode_lines(&key, &body, LineKind::Errors),
            ObjectFormat::Duplicates => decode_lines(&key, &body, LineKind::Duplicates),
            ObjectFormat::Json {
                metadata_field: Some(field),
            } => decode_json(&key, &body, field),
            ObjectFormat::Json {
                metadata_field: None,
            } => {
                problem("json without a metadata field: no identities to read".to_owned());
                (Vec::new(), Vec::new())
            }
            ObjectFormat::Raw { delimiter } => match &self.options.stream {
                Some(_) => {
                    let in_range = self.stream_records_in_range(&key, refreshed).await?;
                    let in_range: Vec<&StreamRecord> = in_range.iter().collect();
                    decode_raw(&key, &body, delimiter, &in_range)
                }
                None => {
                    problem("raw, and no stream to read identities from".to_owned());
                    (Vec::new(), Vec::new())
                }
            },
            ObjectFormat::Parquet { schema } => {
                let typed = match (schema, &self.options.schema) {
                    (None, _) => None,
                    (Some(_), Some(schema)) => Some(schema),
                    (Some(_), None) => {
                        problem("parquet with a schema, and the reader was given none".to_owned());
                        None
                    }
                };
                decode_parquet(&key, &body, typed)
            }
        };
        problems.extend(decode_problems);
        match declared_records.as_deref().map(str::parse::<usize>) {
            Some(Ok(declared)) if declared == records.len() => {}
            Some(Ok(declared)) => problems.push(ArchiveProblem {
                object_key: key.key.clone(),
                line: None,
                message: format!(
                    "x-amz-meta-{RECORDS_METADATA} says {declared} records, the body holds {}",
                    records.len()
                ),
            }),
            Some(Err(_)) | None => problems.push(ArchiveProblem {
                object_key: key.key.clone(),
                line: None,
                message: format!(
                    "x-amz-meta-{RECORDS_METADATA} is {declared_records:?}, not a record count"
                ),
            }),
        }
        Ok(ArchivedObject {
            key,
            e_tag,
            size: body.len(),
            format: format_text,
            declared_records,
            records,
            problems,
        })
    }

    /// The stream's records of `key`'s shard from its first to its last
    /// sequence number, in order. The stream is read again (once per
    /// [`ArchiveReader::read`]) when the record at the key's last sequence
    /// number is not known yet.
    async fn stream_records_in_range(
        &mut self,
        key: &ObjectKey,
        refreshed: &mut bool,
    ) -> Result<Vec<StreamRecord>> {
        let known = |truth: &Option<GroundTruth>| {
            truth
                .as_ref()
                .is_some_and(|t| t.get(&key.shard_id, &key.last.to_string()).is_some())
        };
        if !known(&self.truth)
            && !*refreshed
            && let Some(stream) = &self.options.stream
        {
            self.truth = Some(read_stream(&self.env, stream).await?);
            *refreshed = true;
        }
        Ok(self
            .truth
            .iter()
            .flat_map(|truth| &truth.records)
            .filter(|record| record.shard_id == key.shard_id)
            .filter(|record| {
                Seq::parse(&record.sequence_number)
                    .is_ok_and(|seq| seq >= key.first && seq <= key.last)
            })
            .cloned()
            .collect())
    }
}

/// A decisions object read from S3: its lines decoded, its record count
/// and settings checked against its metadata.
fn decisions_object(
    key: ObjectKey,
    metadata: &HashMap<String, String>,
    body: &[u8],
    e_tag: Option<String>,
) -> DecisionsObject {
    let (lines, mut problems) = decode_decisions(&key, body);
    let mut problem = |message: String| {
        problems.push(ArchiveProblem {
            object_key: key.key.clone(),
            line: None,
            message,
        });
    };
    let settings = metadata.get(FORMAT_METADATA).cloned();
    if !settings
        .as_deref()
        .is_some_and(|s| s.starts_with("events;id="))
    {
        problem(format!(
            "x-amz-meta-{FORMAT_METADATA} is {settings:?}, not events;id=…"
        ));
    }
    let declared_records = metadata.get(RECORDS_METADATA).cloned();
    if declared_records.as_deref() != Some(lines.len().to_string().as_str()) {
        problem(format!(
            "x-amz-meta-{RECORDS_METADATA} is {declared_records:?}, the body holds {} lines",
            lines.len()
        ));
    }
    DecisionsObject {
        e_tag,
        size: body.len(),
        settings,
        main_format: metadata.get(MAIN_FORMAT_METADATA).cloned(),
        declared_records,
        lines,
        problems,
        key,
    }
}

/// What one listing found, by role.
#[derive(Debug, Default)]
struct Listed {
    mains: Vec<Arc<ArchivedObject>>,
    errors: Vec<Arc<ArchivedObject>>,
    duplicates: Vec<Arc<ArchivedObject>>,
    decisions: Vec<Arc<DecisionsObject>>,
    stray_keys: Vec<ArchiveProblem>,
    layout_record: Option<String>,
}

/// A problem of the object `key` as a whole.
fn object_problem(key: &str, message: String) -> ArchiveProblem {
    ArchiveProblem {
        object_key: key.to_owned(),
        line: None,
        message,
    }
}

/// Puts each side object (`what`: error or duplicates object) with its
/// batch's main object: same time path, shard and name, and the extension
/// `extension` gives for the main key. Side objects without their main
/// object are uncommitted.
fn attach(
    mains: &[Arc<ArchivedObject>],
    by_batch: &BTreeMap<String, Vec<usize>>,
    sides: Vec<Arc<ArchivedObject>>,
    extension: fn(&ObjectKey) -> &'static str,
    what: &str,
    problems: &mut Vec<ArchiveProblem>,
) -> Attached {
    let mut attached = Attached::default();
    let Attached {
        of_main,
        committed,
        uncommitted,
    } = &mut attached;
    for side in sides {
        let candidates = by_batch
            .get(&side.key.batch_path())
            .map(Vec::as_slice)
            .unwrap_or_default();
        match candidates
            .iter()
            .find(|&&i| extension(&mains[i].key) == side.key.extension())
        {
            Some(&index) => {
                if of_main.insert(index, Arc::clone(&side)).is_some() {
                    problems.push(object_problem(
                        &side.key.key,
                        format!("a second {what} of one batch"),
                    ));
                }
                committed.push(side);
            }
            None => {
                let message = match candidates.first() {
                    Some(&i) => format!(
                        "its batch's main object {} asks for the extension {}",
                        mains[i].key.key,
                        extension(&mains[i].key)
                    ),
                    None => format!("{what} without its batch's main object"),
                };
                problems.push(object_problem(&side.key.key, message));
                uncommitted.push(side);
            }
        }
    }
    attached
}

/// Side objects put with their batches' main objects by [`attach`].
#[derive(Debug, Default)]
struct Attached {
    /// The side object of each main object, by the main object's index.
    of_main: HashMap<usize, Arc<ArchivedObject>>,
    /// Side objects whose main object is listed.
    committed: Vec<Arc<ArchivedObject>>,
    /// Side objects without their main object.
    uncommitted: Vec<Arc<ArchivedObject>>,
}

/// Puts each error, duplicates and decisions object with its batch's main
/// object (same time path, shard and name; the extension the main key's
/// says), and checks every batch as a whole.
fn assemble(bucket: &str, prefix: &str, listed: Listed) -> Archive {
    let Listed {
        mut mains,
        mut errors,
        mut duplicates,
        mut decisions,
        stray_keys,
        layout_record,
    } = listed;
    mains.sort_by(|a, b| a.key.key.cmp(&b.key.key));
    errors.sort_by(|a, b| a.key.key.cmp(&b.key.key));
    duplicates.sort_by(|a, b| a.key.key.cmp(&b.key.key));
    decisions.sort_by(|a, b| a.key.key.cmp(&b.key.key));
    let mut by_batch: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (index, main) in mains.iter().enumerate() {
        by_batch
            .entry(main.key.batch_path())
            .or_default()
            .push(index);
    }
    let mut archive = Archive::of_objects(bucket, prefix, Vec::new());
    let errors = attach(
        &mains,
        &by_batch,
        errors,
        ObjectKey::error_extension,
        "error object",
        &mut archive.batch_problems,
    );
    archive.error_objects = errors.committed;
    archive.uncommitted_error_objects = errors.uncommitted;
    let duplicates = attach(
        &mains,
        &by_batch,
        duplicates,
        ObjectKey::duplicates_extension,
        "duplicates object",
        &mut archive.batch_problems,
    );
    archive.duplicate_objects = duplicates.committed;
    archive.uncommitted_duplicate_objects = duplicates.uncommitted;
    let (errors_of, duplicates_of) = (errors.of_main, duplicates.of_main);
    let mut decisions_of: HashMap<usize, Arc<DecisionsObject>> = HashMap::new();
    for object in decisions {
        match by_batch
            .get(&object.key.batch_path())
            .and_then(|c| c.first())
        {
            Some(&index) => {
                decisions_of.insert(index, Arc::clone(&object));
                archive.decisions_objects.push(object);
            }
            None => {
                archive.batch_problems.push(object_problem(
                    &object.key.key,
                    "a decisions object without its batch's main object".to_owned(),
                ));
                archive.uncommitted_decisions_objects.push(object);
            }
        }
    }
    for (index, main) in mains.iter().enumerate() {
        let error = errors_of.get(&index);
        let duplicates = duplicates_of.get(&index);
        let mut placed: Vec<(Seq, Option<u64>, &ArchivedRecord)> = main
            .records
            .iter()
            .chain(error.iter().flat_map(|e| e.records.iter()))
            .chain(duplicates.iter().flat_map(|d| d.records.iter()))
            .filter_map(|r| {
                Seq::parse(&r.sequence_number)
                    .ok()
                    .map(|seq| (seq, r.sub_sequence_number, r))
            })
            .collect();
        placed.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        let mut problem = |message: String| {
            archive
                .batch_problems
                .push(object_problem(&main.key.key, message));
        };
        if let Some(decisions) = decisions_of.get(&index) {
            for message in decisions_disagree(main, decisions, &placed) {
                problem(message);
            }
        }
        let (Some(first), Some(last)) = (placed.first(), placed.last()) else {
            problem("the batch holds no record (main, error and duplicates objects)".to_owned());
            continue;
        };
        if first.0 != main.key.first {
            problem(format!(
                "the batch's first record is {}, the key says first {}",
                first.0, main.key.first
            ));
        }
        if last.0 != main.key.last {
            problem(format!(
                "the batch's last record is {}, the key says last {}",
                last.0, main.key.last
            ));
        }
        if let Some(twice) = placed
            .windows(2)
            .find(|w| (&w[0].0, w[0].1) == (&w[1].0, w[1].1))
        {
            problem(format!(
                "record ({}, {:?}) is in the batch twice",
                twice[0].0, twice[0].1
            ));
        }
    }
    archive.objects = mains;
    archive.stray_keys = stray_keys;
    archive.layout_record = layout_record;
    archive
}

/// How many disagreements of one batch with its decisions object are
/// reported.
const SHOWN_DISAGREEMENTS: usize = 5;

/// Where a batch's decisions object and its objects disagree: the object
/// must decide exactly the batch's records, in order, a duplicate exactly
/// when the record is in the duplicates object with the same
/// `duplicateOf`, and record the main object's format.
fn decisions_disagree(
    main: &ArchivedObject,
    decisions: &DecisionsObject,
    placed: &[(Seq, Option<u64>, &ArchivedRecord)],
) -> Vec<String> {
    let mut messages = Vec::new();
    if decisions.main_format != main.format {
        messages.push(format!(
            "its decisions object {} was made for the main format {:?}, the main object is {:?}",
            decisions.key.key, decisions.main_format, main.format
        ));
    }
    if decisions.lines.len() != placed.len() {
        messages.push(format!(
            "its decisions object {} decides {} records, the batch holds {}",
            decisions.key.key,
            decisions.lines.len(),
            placed.len()
        ));
    }
    for (line, (seq, sub, record)) in decisions.lines.iter().zip(placed) {
        let place = if record.duplicate_of.is_some() {
            "the duplicates object"
        } else {
            "a kept record"
        };
        let message = if Seq::parse(&line.sequence_number).ok().as_ref() != Some(seq)
            || line.sub_sequence_number != *sub
        {
            Some(format!(
                "decides ({}, {:?}) where the batch holds ({seq}, {sub:?})",
                line.sequence_number, line.sub_sequence_number
            ))
        } else if (line.outcome == Outcome::Duplicate) != record.duplicate_of.is_some()
            || line.duplicate_of != record.duplicate_of
        {
            Some(format!(
                "decides ({seq}, {sub:?}) {} (duplicateOf {:?}), and it is {place} at {} (duplicateOf {:?})",
                line.outcome,
                line.duplicate_of.as_ref().map(ToString::to_string),
                record.location(),
                record.duplicate_of.as_ref().map(ToString::to_string),
            ))
        } else {
            None
        };
        if let Some(message) = message {
            messages.push(format!("{}:{}: {message}", decisions.key.key, line.line));
            if messages.len() >= SHOWN_DISAGREEMENTS {
                break;
            }
        }
    }
    messages
}

/// A one-off [`ArchiveReader::read`].
///
/// # Errors
/// As [`ArchiveReader::read`].
pub async fn read_archive(env: &TestEnv, bucket: &str, prefix: &str) -> Result<Archive> {
    ArchiveReader::new(env, bucket, prefix).read().await
}

/// A listed key that no parser accepts.
fn stray_key(object_key: String, message: &str) -> ArchiveProblem {
    ArchiveProblem {
        object_key,
        line: None,
        message: format!("key does not follow the contract: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::test_support::{minute, seq};
    use crate::archive::{Compression, CopyRef, DecisionLine, PayloadForm};

    /// An object of shard `s-1` for `first..=last` holding `records`
    /// (sequence numbers), under `prefix` with `extension`.
    fn object(
        prefix: &str,
        first: &str,
        last: &str,
        extension: &str,
        records: &[&str],
    ) -> Arc<ArchivedObject> {
        let text = ObjectKey::format_in(
            KeyLayout::default(),
            prefix,
            minute(),
            "s-1",
            &seq(first),
            &seq(last),
            extension,
        );
        let key = ObjectKey::parse(prefix, &text).unwrap();
        let object_key: Arc<str> = Arc::from(text.as_str());
        Arc::new(ArchivedObject {
            records: records
                .iter()
                .enumerate()
                .map(|(i, seq)| ArchivedRecord {
                    object_key: Arc::clone(&object_key),
                    line: i + 1,
                    shard_id: "s-1".to_owned(),
                    sequence_number: (*seq).to_owned(),
                    sub_sequence_number: None,
                    partition_key: "k".to_owned(),
                    approximate_arrival_timestamp: "2026-11-21T05:27:03.123Z".to_owned(),
                    data: Vec::new(),
                    payload: PayloadForm::Bytes,
                    error_message: (prefix != "p").then(|| "rejected".to_owned()),
                    duplicate_of: None,
                })
                .collect(),
            key,
            e_tag: None,
            size: 0,
            format: None,
            declared_records: None,
            problems: Vec::new(),
        })
    }

    fn problems(archive: &Archive) -> Vec<String> {
        archive
            .batch_problems
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn batches_are_their_main_and_error_objects() {
        let parquet = Shape::Parquet.extension(Compression::None);
        let zstd_lines = Shape::Lines.extension(Compression::Zstd);
        let mains = vec![
            object("p", "1", "4", parquet, &["2", "3"]),
            object("p", "5", "6", parquet, &[]),
            object("p", "7", "8", parquet, &["7", "8"]),
        ];
        let errors = vec![
            object("e", "1", "4", zstd_lines, &["1", "4"]),
            object("e", "5", "6", zstd_lines, &["5", "6"]),
        ];
        let archive = assemble(
            "b",
            "p",
            Listed {
                mains,
                errors,
                ..Listed::default()
            },
        );
        assert!(
            archive.batch_problems.is_empty(),
            "{:#?}",
            problems(&archive)
        );
        assert_eq!(archive.error_objects.len(), 2);
        assert_eq!(archive.record_count(), 8);
        assert_eq!(archive.object_count(), 5);
    }

    #[test]
    fn finds_what_does_not_make_a_batch() {
        let raw = Shape::Raw.extension(Compression::Gzip);
        let mains = vec![
            // Misses its first and last records.
            object("p", "1", "4", raw, &["2", "3"]),
            // Empty, with no error object.
            object("p", "5", "6", raw, &[]),
            // Its error object has the wrong extension.
            object("p", "7", "8", raw, &["7"]),
            // A record in both objects.
            object("p", "9", "10", raw, &["9", "10"]),
        ];
        let errors = vec![
            object(
                "e",
                "7",
                "8",
                Shape::Lines.extension(Compression::Zstd),
                &["8"],
            ),
            object(
                "e",
                "9",
                "10",
                Shape::Lines.extension(Compression::Gzip),
                &["10"],
            ),
            // No main object: not committed.
            object(
                "e",
                "11",
                "11",
                Shape::Lines.extension(Compression::Gzip),
                &["11"],
            ),
        ];
        let archive = assemble(
            "b",
            "p",
            Listed {
                mains,
                errors,
                ..Listed::default()
            },
        );
        let text = problems(&archive);
        for needle in [
            "first record is 2",
            "last record is 3",
            "holds no record",
            "asks for the extension .jsonl.gz",
            "the key says last 8",
            "in the batch twice",
            "without its batch's main object",
        ] {
            assert!(
                text.iter().any(|t| t.contains(needle)),
                "{needle}: {text:#?}"
            );
        }
        assert_eq!(archive.uncommitted_error_objects.len(), 2);
        assert!(archive.records().all(|r| r.sequence_number != "11"));
    }

    /// The duplicates object of shard `s-1`'s batch `first..=last` under
    /// `d`: `(record, duplicateOf)` sequence numbers.
    fn duplicates(first: &str, last: &str, records: &[(&str, &str)]) -> Arc<ArchivedObject> {
        let lines = Shape::Lines.extension(Compression::Zstd);
        let sequence_numbers: Vec<&str> = records.iter().map(|r| r.0).collect();
        let mut object = Arc::unwrap_or_clone(object("d", first, last, lines, &sequence_numbers));
        for (record, (_, of)) in object.records.iter_mut().zip(records) {
            record.error_message = None;
            record.duplicate_of = Some(CopyRef {
                shard_id: "s-1".to_owned(),
                sequence_number: (*of).to_owned(),
                sub_sequence_number: None,
            });
        }
        Arc::new(object)
    }

    /// The decisions object of shard `s-1`'s batch `first..=last`:
    /// `(record, outcome, duplicateOf)`.
    fn decisions(
        first: &str,
        last: &str,
        lines: &[(&str, Outcome, Option<&str>)],
    ) -> Arc<DecisionsObject> {
        let text = ObjectKey::format_in(
            KeyLayout::default(),
            "p/_events",
            minute(),
            "s-1",
            &seq(first),
            &seq(last),
            Shape::Decisions.extension(Compression::Zstd),
        );
        Arc::new(DecisionsObject {
            key: ObjectKey::parse("p/_events", &text).unwrap(),
            e_tag: None,
            size: 0,
            settings: Some("events;id=json-pointer:/id;fingerprint=payload".to_owned()),
            main_format: None,
            declared_records: Some(lines.len().to_string()),
            lines: lines
                .iter()
                .enumerate()
                .map(|(i, (record, outcome, of))| DecisionLine {
                    line: i + 1,
                    sequence_number: (*record).to_owned(),
                    sub_sequence_number: None,
                    arrival_millis: 0,
                    event_id_hash: None,
                    payload_hash: None,
                    outcome: *outcome,
                    duplicate_of: of.map(|of| CopyRef {
                        shard_id: "s-1".to_owned(),
                        sequence_number: of.to_owned(),
                        sub_sequence_number: None,
                    }),
                })
                .collect(),
            problems: Vec::new(),
        })
    }

    #[test]
    fn batches_with_duplicates_and_decisions() {
        let lines = Shape::Lines.extension(Compression::Zstd);
        let mains = vec![
            object("p", "1", "4", lines, &["1", "3"]),
            // Every record a duplicate: an empty main object commits it.
            object("p", "5", "6", lines, &[]),
            object("p", "7", "9", lines, &["7"]),
        ];
        let duplicates_found = vec![
            duplicates("1", "4", &[("2", "1"), ("4", "3")]),
            duplicates("5", "6", &[("5", "1"), ("6", "3")]),
            duplicates("7", "9", &[("8", "7"), ("9", "7")]),
            // Its batch is not committed (yet).
            duplicates("10", "10", &[("10", "1")]),
        ];
        let decisions_found = vec![
            decisions(
                "1",
                "4",
                &[
                    ("1", Outcome::Unique, None),
                    ("2", Outcome::Duplicate, Some("1")),
                    ("3", Outcome::IdMissing, None),
                    ("4", Outcome::Duplicate, Some("3")),
                ],
            ),
            decisions(
                "5",
                "6",
                &[
                    ("5", Outcome::Duplicate, Some("1")),
                    ("6", Outcome::Duplicate, Some("3")),
                ],
            ),
            // 8 is not decided a duplicate; 9 is a duplicate of another copy.
            decisions(
                "7",
                "9",
                &[
                    ("7", Outcome::Unique, None),
                    ("8", Outcome::Unique, None),
                    ("9", Outcome::Duplicate, Some("1")),
                ],
            ),
            decisions("10", "10", &[("10", Outcome::Duplicate, Some("1"))]),
        ];
        let archive = assemble(
            "b",
            "p",
            Listed {
                mains,
                duplicates: duplicates_found,
                decisions: decisions_found,
                ..Listed::default()
            },
        );
        let text = problems(&archive);
        assert_eq!(text.len(), 4, "{text:#?}");
        assert!(text[0].contains("duplicates object without its batch's main object"));
        assert!(text[1].contains("decisions object without its batch's main object"));
        assert!(
            text[2].contains(":2: decides (8, None) unique"),
            "{text:#?}"
        );
        assert!(
            text[3].contains(":3: decides (9, None) duplicate"),
            "{text:#?}"
        );
        assert_eq!(archive.duplicate_objects.len(), 3);
        assert_eq!(archive.uncommitted_duplicate_objects.len(), 1);
        assert_eq!(archive.decisions_objects.len(), 3);
        assert_eq!(archive.uncommitted_decisions_objects.len(), 1);
        assert_eq!(archive.record_count(), 3);
        assert_eq!(archive.placed_count(), 9);
        assert_eq!(archive.object_count(), 11);
        assert!(archive.decisions_of(&archive.objects[1].key).is_some());
    }
}
