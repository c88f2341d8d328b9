//! Reading the whole archive: list, HEAD and GET each new object once,
//! decode it by the format its metadata names, and put each batch's main
//! and error objects together.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;

use super::decode::{LineKind, decode_lines};
use super::format::{FORMAT_METADATA, ObjectFormat, RECORDS_METADATA};
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
    /// `{prefix}-errors`, plain per-minute keys, no schema, no stream.
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            error_prefix: format!("{prefix}-errors"),
            layout: KeyLayout::default(),
            schema: None,
            stream: None,
        }
    }

    /// What `settings` make the daemon write: `--prefix`, `--error-prefix`,
    /// `--key-layout`, `--time-bucket`, `--parquet-schema` (the file is
    /// read now) and `--stream`.
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
    truth: Option<GroundTruth>,
}

/// Whether an object is a batch's main object or its error object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Main,
    Errors,
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
        let layout_key = format!("{main_prefix}_shardsink.json");
        // Decisions objects of event deduplication: not batches.
        let decisions_prefix = format!("{main_prefix}_events/");
        let mut mains = Vec::new();
        let mut errors = Vec::new();
        let mut stray_keys = Vec::new();
        let mut layout_record = None;
        let mut cache = HashMap::new();
        let mut refreshed = false;
        for entry in listed {
            if entry.key == layout_key {
                let body = get_object(&self.env, &self.bucket, &entry.key).await?;
                layout_record = body.map(|body| String::from_utf8_lossy(&body).into_owned());
                continue;
            }
            if entry.key.starts_with(&decisions_prefix) {
                continue;
            }
            let (role, prefix) = if entry.key.starts_with(&main_prefix) {
                (Role::Main, &self.options.prefix)
            } else if entry.key.starts_with(&error_prefix) {
                (Role::Errors, &self.options.error_prefix)
            } else {
                (Role::Main, &self.options.prefix)
            };
            let key = match ObjectKey::parse_in(self.options.layout, prefix, &entry.key) {
                Ok(key) => key,
                Err(message) => {
                    stray_keys.push(ArchiveProblem {
                        object_key: entry.key,
                        line: None,
                        message: format!("key does not follow the contract: {message}"),
                    });
                    continue;
                }
            };
            let object = match self.cache.get(&entry.key) {
                Some(cached) if cached.e_tag == entry.e_tag && cached.size == entry.size => {
                    Arc::clone(cached)
                }
                _ => {
                    // Deleted between LIST and HEAD or GET: not listed.
                    let Some(metadata) =
                        head_object_metadata(&self.env, &self.bucket, &entry.key).await?
                    else {
                        continue;
                    };
                    let Some(body) = get_object(&self.env, &self.bucket, &entry.key).await? else {
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
                Role::Main => mains.push(object),
                Role::Errors => errors.push(object),
            }
        }
        self.cache = cache;
        Ok(assemble(
            &self.bucket,
            &self.options.prefix,
            mains,
            errors,
            stray_keys,
            layout_record,
        ))
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
            (Role::Main, Shape::Lines) => ObjectFormat::Envelope,
            (Role::Main, Shape::Raw) => ObjectFormat::Raw {
                delimiter: b"\n".to_vec(),
            },
            (Role::Main, Shape::Parquet) => ObjectFormat::Parquet { schema: None },
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
            ObjectFormat::Envelope | ObjectFormat::Json { .. } | ObjectFormat::Errors => {
                Shape::Lines
            }
            ObjectFormat::Raw { .. } => Shape::Raw,
            ObjectFormat::Parquet { .. } => Shape::Parquet,
        };
        if shape_of_format != key.shape {
            problem(format!(
                "format {format} under the extension {}",
                key.extension()
            ));
        }
        if (role == Role::Errors) != (format == ObjectFormat::Errors) {
            problem(format!(
                "format {format} {} the error prefix",
                if role == Role::Errors {
                    "under"
                } else {
                    "outside"
                }
            ));
        }
        let (records, decode_problems): (Vec<ArchivedRecord>, Vec<ArchiveProblem>) = match &format {
            ObjectFormat::Envelope => decode_lines(&key, &body, LineKind::Envelope),
            ObjectFormat::Errors => decode_lines(&key, &body, LineKind::Errors),
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

/// Puts each error object with its batch's main object (same time path,
/// shard and name; the extension the main key's says), and checks every
/// batch as a whole.
fn assemble(
    bucket: &str,
    prefix: &str,
    mut mains: Vec<Arc<ArchivedObject>>,
    mut errors: Vec<Arc<ArchivedObject>>,
    stray_keys: Vec<ArchiveProblem>,
    layout_record: Option<String>,
) -> Archive {
    mains.sort_by(|a, b| a.key.key.cmp(&b.key.key));
    errors.sort_by(|a, b| a.key.key.cmp(&b.key.key));
    let mut by_batch: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (index, main) in mains.iter().enumerate() {
        by_batch
            .entry(main.key.batch_path())
            .or_default()
            .push(index);
    }
    let mut archive = Archive::of_objects(bucket, prefix, Vec::new());
    let mut errors_of: HashMap<usize, Arc<ArchivedObject>> = HashMap::new();
    for error in errors {
        let candidates = by_batch
            .get(&error.key.batch_path())
            .map(Vec::as_slice)
            .unwrap_or_default();
        let problem = |message: String| ArchiveProblem {
            object_key: error.key.key.clone(),
            line: None,
            message,
        };
        match candidates
            .iter()
            .find(|&&i| mains[i].key.error_extension() == error.key.extension())
        {
            Some(&index) => {
                if errors_of.insert(index, Arc::clone(&error)).is_some() {
                    archive
                        .batch_problems
                        .push(problem("a second error object of one batch".to_owned()));
                }
                archive.error_objects.push(error);
            }
            None => {
                let message = match candidates.first() {
                    Some(&i) => format!(
                        "its batch's main object {} asks for the extension {}",
                        mains[i].key.key,
                        mains[i].key.error_extension()
                    ),
                    None => "an error object without its batch's main object".to_owned(),
                };
                archive.batch_problems.push(problem(message));
                archive.uncommitted_error_objects.push(error);
            }
        }
    }
    for (index, main) in mains.iter().enumerate() {
        let error = errors_of.get(&index);
        let mut ids: Vec<(Seq, Option<u64>)> = main
            .records
            .iter()
            .chain(error.iter().flat_map(|e| e.records.iter()))
            .filter_map(|r| {
                Seq::parse(&r.sequence_number)
                    .ok()
                    .map(|seq| (seq, r.sub_sequence_number))
            })
            .collect();
        ids.sort();
        let mut problem = |message: String| {
            archive.batch_problems.push(ArchiveProblem {
                object_key: main.key.key.clone(),
                line: None,
                message,
            });
        };
        let (Some(first), Some(last)) = (ids.first(), ids.last()) else {
            problem("the batch holds no record (main and error objects)".to_owned());
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
        if let Some(twice) = ids.windows(2).find(|w| w[0] == w[1]) {
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

/// A one-off [`ArchiveReader::read`].
///
/// # Errors
/// As [`ArchiveReader::read`].
pub async fn read_archive(env: &TestEnv, bucket: &str, prefix: &str) -> Result<Archive> {
    ArchiveReader::new(env, bucket, prefix).read().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::test_support::{minute, seq};
    use crate::archive::{Compression, PayloadForm};

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
        let archive = assemble("b", "p", mains, errors, Vec::new(), None);
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
        let archive = assemble("b", "p", mains, errors, Vec::new(), None);
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
}
