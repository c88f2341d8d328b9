//! Reading what shardsink wrote: list every object in the bucket, GET it,
//! decompress by extension, parse each JSON line strictly, and parse the key
//! — so tests can check every line against its key (shard, range, minute)
//! and every record against what was produced.
//!
//! Nothing here panics or stops on bad output: every deviation from the
//! contract's format becomes an [`ArchiveProblem`] that the checker reports.

use std::collections::HashMap;
use std::fmt;
use std::io::Read as _;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use aws_sdk_s3::primitives::ByteStream;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::{DateTime, NaiveDate, NaiveDateTime, Timelike as _, Utc};
use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, Visitor};

use crate::env::TestEnv;
use crate::seq::Seq;

/// Compression of an object, from its key's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    /// `.jsonl`
    None,
    /// `.jsonl.gz`
    Gzip,
    /// `.jsonl.zst`
    Zstd,
}

impl Compression {
    /// The key's file extension, with the leading dot.
    pub fn extension(self) -> &'static str {
        match self {
            Self::None => ".jsonl",
            Self::Gzip => ".jsonl.gz",
            Self::Zstd => ".jsonl.zst",
        }
    }

    /// The `--compression` value that produces this extension.
    pub fn setting(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
        }
    }

    /// Compresses `body` (for tests that write objects themselves).
    ///
    /// # Errors
    /// An encoder I/O error.
    pub fn compress(self, body: &[u8]) -> Result<Vec<u8>> {
        Ok(match self {
            Self::None => body.to_vec(),
            Self::Gzip => {
                let mut encoder =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                std::io::Write::write_all(&mut encoder, body)?;
                encoder.finish()?
            }
            Self::Zstd => zstd::encode_all(body, 3)?,
        })
    }

    /// Decompresses `body`, checking the format's magic bytes first.
    ///
    /// # Errors
    /// Wrong magic bytes, or a corrupt stream.
    pub fn decompress(self, body: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Self::None => Ok(body.to_vec()),
            Self::Gzip => {
                if !body.starts_with(&[0x1F, 0x8B]) {
                    return Err("a .gz object without the gzip magic bytes".to_owned());
                }
                let mut out = Vec::new();
                flate2::read::MultiGzDecoder::new(body)
                    .read_to_end(&mut out)
                    .map_err(|e| format!("gzip decode failed: {e}"))?;
                Ok(out)
            }
            Self::Zstd => {
                if !body.starts_with(&[0x28, 0xB5, 0x2F, 0xFD]) {
                    return Err("a .zst object without the zstd magic bytes".to_owned());
                }
                zstd::decode_all(body).map_err(|e| format!("zstd decode failed: {e}"))
            }
        }
    }
}

/// An object key, parsed:
/// `{prefix}/{yyyy}/{MM}/{dd}/{HH}/{mm}/{shardId}/{sorter}-{first}-{last}.jsonl[.gz|.zst]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectKey {
    /// The whole key.
    pub key: String,
    /// The UTC minute of the key's path.
    pub minute: DateTime<Utc>,
    /// The shard id of the key's path.
    pub shard_id: String,
    /// The sorter as written (descending form of `first`).
    pub sorter: String,
    /// The batch's first sequence number.
    pub first: Seq,
    /// The batch's last sequence number.
    pub last: Seq,
    /// From the extension.
    pub compression: Compression,
}

impl ObjectKey {
    /// Builds the key the contract prescribes (for tests that write or
    /// predict keys).
    pub fn format(
        prefix: &str,
        minute: DateTime<Utc>,
        shard_id: &str,
        first: &Seq,
        last: &Seq,
        compression: Compression,
    ) -> String {
        format!(
            "{prefix}/{}/{shard_id}/{}-{}-{}{}",
            minute.format("%Y/%m/%d/%H/%M"),
            first.encode_descending(),
            first.encode_ascending(),
            last.encode_ascending(),
            compression.extension()
        )
    }

    /// Parses `key`, which must start with `{prefix}/`.
    ///
    /// # Errors
    /// A description of the first deviation from the key format.
    pub fn parse(prefix: &str, key: &str) -> Result<Self, String> {
        let rest = key
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(|| format!("not under the prefix {prefix:?}/"))?;
        let parts: Vec<&str> = rest.split('/').collect();
        let [year, month, day, hour, minute, shard_id, file] = parts[..] else {
            return Err(format!(
                "expected yyyy/MM/dd/HH/mm/shardId/file after the prefix, found {} path segments",
                parts.len()
            ));
        };
        let number = |text: &str, width: usize, what: &str| -> Result<u32, String> {
            if text.len() != width || !text.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{what} {text:?} is not {width} digits"));
            }
            text.parse()
                .map_err(|_| format!("{what} {text:?} is not a number"))
        };
        let date = NaiveDate::from_ymd_opt(
            i32::try_from(number(year, 4, "year")?).map_err(|e| e.to_string())?,
            number(month, 2, "month")?,
            number(day, 2, "day")?,
        )
        .ok_or_else(|| format!("{year}/{month}/{day} is not a date"))?;
        let minute = date
            .and_hms_opt(number(hour, 2, "hour")?, number(minute, 2, "minute")?, 0)
            .ok_or_else(|| format!("{hour}:{minute} is not a time"))?
            .and_utc();
        if shard_id.is_empty() {
            return Err("empty shard id".to_owned());
        }
        let (stem, compression) = [Compression::Gzip, Compression::Zstd, Compression::None]
            .into_iter()
            .find_map(|c| file.strip_suffix(c.extension()).map(|stem| (stem, c)))
            .ok_or_else(|| {
                format!("file name {file:?} does not end in .jsonl, .jsonl.gz or .jsonl.zst")
            })?;
        let fields: Vec<&str> = stem.split('-').collect();
        let [sorter, first, last] = fields[..] else {
            return Err(format!("file name {file:?} is not sorter-first-last"));
        };
        let sorted = Seq::decode_descending(sorter).map_err(|e| format!("sorter: {e}"))?;
        let first = Seq::decode_ascending(first).map_err(|e| format!("first: {e}"))?;
        let last = Seq::decode_ascending(last).map_err(|e| format!("last: {e}"))?;
        if sorted != first {
            return Err(format!(
                "sorter {sorter:?} encodes {sorted}, not the first sequence number {first}"
            ));
        }
        if first > last {
            return Err(format!("first {first} is after last {last}"));
        }
        Ok(Self {
            key: key.to_owned(),
            minute,
            shard_id: shard_id.to_owned(),
            sorter: sorter.to_owned(),
            first,
            last,
            compression,
        })
    }
}

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

/// Reads the archive repeatedly, fetching each object once: objects are
/// immutable, so an object listed again with the same ETag and size is
/// taken from the cache. Objects that disappear from the listing disappear
/// from the next snapshot.
#[derive(Debug)]
pub struct ArchiveReader {
    env: TestEnv,
    bucket: String,
    prefix: String,
    cache: HashMap<String, Arc<ArchivedObject>>,
}

impl ArchiveReader {
    /// A reader for the objects the daemon writes under `{prefix}/` in
    /// `bucket`.
    pub fn new(env: &TestEnv, bucket: &str, prefix: &str) -> Self {
        Self {
            env: env.clone(),
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            cache: HashMap::new(),
        }
    }

    /// Lists the whole bucket and returns a snapshot.
    ///
    /// # Errors
    /// An AWS error while listing or getting.
    pub async fn read(&mut self) -> Result<Archive> {
        let listed = list_objects(&self.env, &self.bucket, "").await?;
        let mut objects = Vec::new();
        let mut stray_keys = Vec::new();
        let mut cache = HashMap::new();
        for entry in listed {
            let key = match ObjectKey::parse(&self.prefix, &entry.key) {
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
                    let Some(body) = get_object(&self.env, &self.bucket, &entry.key).await? else {
                        // Deleted between LIST and GET.
                        continue;
                    };
                    let (records, problems) = decode_object(&key, &body);
                    Arc::new(ArchivedObject {
                        key,
                        e_tag: entry.e_tag,
                        size: body.len(),
                        records,
                        problems,
                    })
                }
            };
            cache.insert(entry.key, Arc::clone(&object));
            objects.push(object);
        }
        self.cache = cache;
        objects.sort_by(|a, b| a.key.key.cmp(&b.key.key));
        Ok(Archive {
            bucket: self.bucket.clone(),
            prefix: self.prefix.clone(),
            objects,
            stray_keys,
        })
    }
}

/// A one-off [`ArchiveReader::read`].
///
/// # Errors
/// As [`ArchiveReader::read`].
pub async fn read_archive(env: &TestEnv, bucket: &str, prefix: &str) -> Result<Archive> {
    ArchiveReader::new(env, bucket, prefix).read().await
}

/// One entry of a bucket listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedObject {
    /// The key.
    pub key: String,
    /// The ETag.
    pub e_tag: Option<String>,
    /// Size in bytes.
    pub size: usize,
}

/// Every object under `prefix` (`ListObjectsV2`, all pages), in key order.
///
/// API: <https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html>
///
/// # Errors
/// Any AWS error.
pub async fn list_objects(env: &TestEnv, bucket: &str, prefix: &str) -> Result<Vec<ListedObject>> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = env
            .s3
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token.take())
            .send()
            .await
            .with_context(|| format!("failed to list s3://{bucket}/{prefix}"))?;
        for object in page.contents() {
            if let Some(key) = object.key() {
                out.push(ListedObject {
                    key: key.to_owned(),
                    e_tag: object.e_tag().map(str::to_owned),
                    size: object
                        .size()
                        .and_then(|s| usize::try_from(s).ok())
                        .unwrap_or_default(),
                });
            }
        }
        match (page.is_truncated(), page.next_continuation_token()) {
            (Some(true), Some(next)) => token = Some(next.to_owned()),
            _ => break,
        }
    }
    Ok(out)
}

/// An object's bytes, or `None` if there is no such key (`GetObject`).
///
/// API: <https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html>
///
/// # Errors
/// Any other AWS error.
pub async fn get_object(env: &TestEnv, bucket: &str, key: &str) -> Result<Option<Vec<u8>>> {
    match env.s3.get_object().bucket(bucket).key(key).send().await {
        Ok(output) => {
            let bytes = output
                .body
                .collect()
                .await
                .with_context(|| format!("failed to read s3://{bucket}/{key}"))?;
            Ok(Some(bytes.into_bytes().to_vec()))
        }
        Err(err) => {
            let err = err.into_service_error();
            if err.is_no_such_key() {
                Ok(None)
            } else {
                Err(err).with_context(|| format!("failed to get s3://{bucket}/{key}"))
            }
        }
    }
}

/// Writes an object (`PutObject`), for harness self-tests and for planting
/// foreign keys.
///
/// API: <https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutObject.html>
///
/// # Errors
/// Any AWS error.
pub async fn put_object(env: &TestEnv, bucket: &str, key: &str, body: Vec<u8>) -> Result<()> {
    env.s3
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body))
        .send()
        .await
        .with_context(|| format!("failed to put s3://{bucket}/{key}"))?;
    Ok(())
}

/// Deletes an object (`DeleteObject`).
///
/// API: <https://docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteObject.html>
///
/// # Errors
/// Any AWS error.
pub async fn delete_object(env: &TestEnv, bucket: &str, key: &str) -> Result<()> {
    env.s3
        .delete_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .with_context(|| format!("failed to delete s3://{bucket}/{key}"))?;
    Ok(())
}

/// One version (or delete marker) of an object in a versioned bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectVersion {
    /// The key.
    pub key: String,
    /// The version id.
    pub version_id: Option<String>,
    /// Whether this is the current version.
    pub is_latest: bool,
    /// Whether this is a delete marker rather than data.
    pub is_delete_marker: bool,
}

/// Every version and delete marker under `prefix` (`ListObjectVersions`,
/// all pages).
///
/// API: <https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectVersions.html>
///
/// # Errors
/// Any AWS error.
pub async fn list_object_versions(
    env: &TestEnv,
    bucket: &str,
    prefix: &str,
) -> Result<Vec<ObjectVersion>> {
    let mut out = Vec::new();
    let mut key_marker: Option<String> = None;
    let mut version_marker: Option<String> = None;
    loop {
        let page = env
            .s3
            .list_object_versions()
            .bucket(bucket)
            .prefix(prefix)
            .set_key_marker(key_marker.take())
            .set_version_id_marker(version_marker.take())
            .send()
            .await
            .with_context(|| format!("failed to list versions of s3://{bucket}/{prefix}"))?;
        for version in page.versions() {
            out.push(ObjectVersion {
                key: version.key().unwrap_or_default().to_owned(),
                version_id: version.version_id().map(str::to_owned),
                is_latest: version.is_latest().unwrap_or_default(),
                is_delete_marker: false,
            });
        }
        for marker in page.delete_markers() {
            out.push(ObjectVersion {
                key: marker.key().unwrap_or_default().to_owned(),
                version_id: marker.version_id().map(str::to_owned),
                is_latest: marker.is_latest().unwrap_or_default(),
                is_delete_marker: true,
            });
        }
        if page.is_truncated() != Some(true) {
            break;
        }
        key_marker = page.next_key_marker().map(str::to_owned);
        version_marker = page.next_version_id_marker().map(str::to_owned);
        if key_marker.is_none() {
            break;
        }
    }
    Ok(out)
}

/// Keys with more than one version, or with a delete marker, as messages
/// (empty when every key was written exactly once: contract line 2).
pub fn overwritten_keys(versions: &[ObjectVersion]) -> Vec<String> {
    let mut by_key: HashMap<&str, Vec<&ObjectVersion>> = HashMap::new();
    for version in versions {
        by_key.entry(&version.key).or_default().push(version);
    }
    let mut problems: Vec<String> = by_key
        .into_iter()
        .filter(|(_, versions)| versions.len() != 1 || versions[0].is_delete_marker)
        .map(|(key, versions)| {
            let markers = versions.iter().filter(|v| v.is_delete_marker).count();
            format!(
                "{key}: {} versions ({markers} delete markers)",
                versions.len()
            )
        })
        .collect();
    problems.sort();
    problems
}

/// Decodes one object's body against its key: decompression, JSON Lines,
/// field order and types, timestamp and base64 format, and every line's
/// shard, sequence number and arrival minute against the key; lines in
/// strictly increasing (sequence number, sub-sequence number) order; the
/// first and last lines carrying the key's first and last.
pub fn decode_object(key: &ObjectKey, body: &[u8]) -> (Vec<ArchivedRecord>, Vec<ArchiveProblem>) {
    let object_key: Arc<str> = Arc::from(key.key.as_str());
    let mut problems = Vec::new();
    let mut problem = |line: Option<usize>, message: String| {
        problems.push(ArchiveProblem {
            object_key: key.key.clone(),
            line,
            message,
        });
    };
    let text = match key.compression.decompress(body) {
        Ok(text) => text,
        Err(message) => {
            problem(None, message);
            return (Vec::new(), problems);
        }
    };
    let text = match String::from_utf8(text) {
        Ok(text) => text,
        Err(_) => {
            problem(None, "body is not UTF-8".to_owned());
            return (Vec::new(), problems);
        }
    };
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    if lines.is_empty() {
        problem(None, "object has no lines".to_owned());
    }

    let mut records: Vec<ArchivedRecord> = Vec::with_capacity(lines.len());
    let mut previous: Option<(Seq, Option<u64>)> = None;
    for (index, line_text) in lines.iter().enumerate() {
        let line = index + 1;
        if line_text.is_empty() {
            problem(Some(line), "empty line".to_owned());
            continue;
        }
        let raw: RawLine = match serde_json::from_str(line_text) {
            Ok(raw) => raw,
            Err(error) => {
                problem(
                    Some(line),
                    format!("not a JSON object of the expected shape: {error}"),
                );
                continue;
            }
        };
        let expected_order: &[&str] = if raw.sub_sequence_number.is_some() {
            &FIELDS_WITH_SUB_SEQUENCE
        } else {
            &FIELDS
        };
        if raw.order != expected_order {
            problem(
                Some(line),
                format!("fields are {:?}, expected {expected_order:?}", raw.order),
            );
        }
        let (Some(shard_id), Some(sequence_number)) = (raw.shard_id, raw.sequence_number) else {
            problem(Some(line), "shardId or sequenceNumber missing".to_owned());
            continue;
        };
        if shard_id != key.shard_id {
            problem(
                Some(line),
                format!(
                    "shardId {shard_id:?} but the key's shard is {:?}",
                    key.shard_id
                ),
            );
        }
        match Seq::parse(&sequence_number) {
            Ok(seq) => {
                if seq < key.first || seq > key.last {
                    problem(
                        Some(line),
                        format!(
                            "sequenceNumber {seq} outside the key's range [{}, {}]",
                            key.first, key.last
                        ),
                    );
                }
                if index == 0 && seq != key.first {
                    problem(
                        Some(line),
                        format!(
                            "first line has sequenceNumber {seq}, the key says first {}",
                            key.first
                        ),
                    );
                }
                if index + 1 == lines.len() && seq != key.last {
                    problem(
                        Some(line),
                        format!(
                            "last line has sequenceNumber {seq}, the key says last {}",
                            key.last
                        ),
                    );
                }
                let current = (seq, raw.sub_sequence_number);
                if let Some(prev) = &previous {
                    if !is_after(prev, &current) {
                        problem(
                            Some(line),
                            format!(
                                "({}, {:?}) does not follow ({}, {:?}): lines out of sequence order",
                                current.0, current.1, prev.0, prev.1
                            ),
                        );
                    }
                }
                previous = Some(current);
            }
            Err(message) => problem(Some(line), format!("sequenceNumber: {message}")),
        }
        let partition_key = raw.partition_key.unwrap_or_else(|| {
            problem(Some(line), "partitionKey missing".to_owned());
            String::new()
        });
        let approximate_arrival_timestamp =
            raw.approximate_arrival_timestamp.unwrap_or_else(|| {
                problem(Some(line), "approximateArrivalTimestamp missing".to_owned());
                String::new()
            });
        if !approximate_arrival_timestamp.is_empty() {
            match parse_timestamp(&approximate_arrival_timestamp) {
                Ok(arrival) => {
                    if truncate_to_minute(arrival) != key.minute {
                        problem(
                            Some(line),
                            format!(
                                "arrival {approximate_arrival_timestamp} is not in the key's minute {}",
                                key.minute.format("%Y-%m-%dT%H:%M")
                            ),
                        );
                    }
                }
                Err(message) => problem(Some(line), message),
            }
        }
        let data = match raw.data.as_deref().map(|d| BASE64.decode(d)) {
            Some(Ok(data)) => data,
            Some(Err(error)) => {
                problem(
                    Some(line),
                    format!("data is not standard padded base64: {error}"),
                );
                Vec::new()
            }
            None => {
                problem(Some(line), "data missing".to_owned());
                Vec::new()
            }
        };
        for unknown in &raw.unknown {
            problem(Some(line), format!("unexpected field {unknown:?}"));
        }
        records.push(ArchivedRecord {
            object_key: Arc::clone(&object_key),
            line,
            shard_id,
            sequence_number,
            sub_sequence_number: raw.sub_sequence_number,
            partition_key,
            approximate_arrival_timestamp,
            data,
        });
    }
    (records, problems)
}

fn is_after(previous: &(Seq, Option<u64>), current: &(Seq, Option<u64>)) -> bool {
    match current.0.cmp(&previous.0) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        // Same Kinesis record: only user records of one aggregate, in order.
        std::cmp::Ordering::Equal => matches!(
            (previous.1, current.1),
            (Some(a), Some(b)) if b > a
        ),
    }
}

/// One JSON line exactly as the contract prescribes it (fields in order,
/// `subSequenceNumber` only when given, data in standard padded base64),
/// with the trailing newline: a reference implementation of the output
/// format, for harness self-tests and for planting objects.
pub fn encode_line(
    shard_id: &str,
    sequence_number: &str,
    sub_sequence_number: Option<u64>,
    partition_key: &str,
    approximate_arrival_timestamp: &str,
    data: &[u8],
) -> String {
    let json = |s: &str| serde_json::to_string(s).expect("a string always serializes");
    let sub = sub_sequence_number
        .map(|n| format!(",\"subSequenceNumber\":{n}"))
        .unwrap_or_default();
    format!(
        "{{\"shardId\":{},\"sequenceNumber\":{}{sub},\"partitionKey\":{},\"approximateArrivalTimestamp\":{},\"data\":{}}}\n",
        json(shard_id),
        json(sequence_number),
        json(partition_key),
        json(approximate_arrival_timestamp),
        json(&BASE64.encode(data)),
    )
}

/// The UTC minute containing `t`.
pub fn truncate_to_minute(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_second(0)
        .and_then(|t| t.with_nanosecond(0))
        .expect("second 0 and nanosecond 0 always exist")
}

/// Parses `approximateArrivalTimestamp`, which must be exactly
/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (RFC 3339, UTC, milliseconds).
///
/// # Errors
/// Any other shape.
pub fn parse_timestamp(text: &str) -> Result<DateTime<Utc>, String> {
    let well_formed = text.len() == 24
        && text.ends_with('Z')
        && text.as_bytes().get(10) == Some(&b'T')
        && text.as_bytes().get(19) == Some(&b'.');
    if !well_formed {
        return Err(format!(
            "approximateArrivalTimestamp {text:?} is not YYYY-MM-DDTHH:MM:SS.mmmZ"
        ));
    }
    NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.3fZ")
        .map(|t| t.and_utc())
        .map_err(|e| format!("approximateArrivalTimestamp {text:?}: {e}"))
}

/// Formats a timestamp the way the contract wants it: RFC 3339, UTC,
/// milliseconds (truncated), `Z`.
pub fn format_timestamp(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

const FIELDS: [&str; 5] = [
    "shardId",
    "sequenceNumber",
    "partitionKey",
    "approximateArrivalTimestamp",
    "data",
];
const FIELDS_WITH_SUB_SEQUENCE: [&str; 6] = [
    "shardId",
    "sequenceNumber",
    "subSequenceNumber",
    "partitionKey",
    "approximateArrivalTimestamp",
    "data",
];

/// One JSON line with its field order kept (serde_json's map is sorted).
#[derive(Default)]
struct RawLine {
    order: Vec<String>,
    unknown: Vec<String>,
    shard_id: Option<String>,
    sequence_number: Option<String>,
    sub_sequence_number: Option<u64>,
    partition_key: Option<String>,
    approximate_arrival_timestamp: Option<String>,
    data: Option<String>,
}

impl<'de> Deserialize<'de> for RawLine {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RawLineVisitor)
    }
}

struct RawLineVisitor;

impl<'de> Visitor<'de> for RawLineVisitor {
    type Value = RawLine;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawLine, A::Error> {
        let mut line = RawLine::default();
        while let Some(name) = map.next_key::<String>()? {
            if line.order.contains(&name) {
                return Err(de::Error::custom(format!("duplicate field {name:?}")));
            }
            match name.as_str() {
                "shardId" => line.shard_id = Some(map.next_value()?),
                "sequenceNumber" => line.sequence_number = Some(map.next_value()?),
                "subSequenceNumber" => line.sub_sequence_number = Some(map.next_value()?),
                "partitionKey" => line.partition_key = Some(map.next_value()?),
                "approximateArrivalTimestamp" => {
                    line.approximate_arrival_timestamp = Some(map.next_value()?);
                }
                "data" => line.data = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    line.unknown.push(name.clone());
                }
            }
            line.order.push(name);
        }
        Ok(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(text: &str) -> Seq {
        Seq::parse(text).unwrap()
    }

    fn minute() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-21T05:27:00Z")
            .unwrap()
            .to_utc()
    }

    #[test]
    fn key_round_trip() {
        let key = ObjectKey::format(
            "p/q",
            minute(),
            "shardId-000000000001",
            &seq("9"),
            &seq("10"),
            Compression::Zstd,
        );
        assert_eq!(
            key,
            "p/q/2026/11/21/05/27/shardId-000000000001/9980-0019-00210.jsonl.zst"
        );
        let parsed = ObjectKey::parse("p/q", &key).unwrap();
        assert_eq!(parsed.minute, minute());
        assert_eq!(parsed.shard_id, "shardId-000000000001");
        assert_eq!((parsed.first, parsed.last), (seq("9"), seq("10")));
        assert_eq!(parsed.compression, Compression::Zstd);
    }

    #[test]
    fn bad_keys() {
        for bad in [
            "other/2026/11/21/05/27/s/9980-0019-00210.jsonl",
            "p/2026/11/21/05/27/s/9980-0019-00210.json",
            "p/2026/11/21/05/27/s/9979-0019-00210.jsonl",
            "p/2026/11/21/05/27/s/99789-00210-0019.jsonl",
            "p/2026/11/21/5/27/s/9980-0019-00210.jsonl",
            "p/2026/13/21/05/27/s/9980-0019-00210.jsonl",
            "p/2026/11/21/05/27/9980-0019-00210.jsonl",
            "p/2026/11/21/05/27/s/0019-00210.jsonl",
        ] {
            assert!(ObjectKey::parse("p", bad).is_err(), "{bad}");
        }
    }

    fn line(shard: &str, seq: &str, sub: Option<u64>, pk: &str, ts: &str, data: &[u8]) -> String {
        encode_line(shard, seq, sub, pk, ts, data)
    }

    #[test]
    fn decodes_a_good_object() {
        let key = ObjectKey::parse(
            "p",
            &ObjectKey::format(
                "p",
                minute(),
                "s-1",
                &seq("9"),
                &seq("10"),
                Compression::Gzip,
            ),
        )
        .unwrap();
        let body = [
            line(
                "s-1",
                "9",
                None,
                "a\n\"b\"",
                "2026-11-21T05:27:03.123Z",
                b"",
            ),
            line(
                "s-1",
                "10",
                Some(0),
                "k",
                "2026-11-21T05:27:59.999Z",
                &[0, 255],
            ),
            line("s-1", "10", Some(1), "k", "2026-11-21T05:27:59.999Z", b"x"),
        ]
        .concat();
        let (records, problems) =
            decode_object(&key, &Compression::Gzip.compress(body.as_bytes()).unwrap());
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].partition_key, "a\n\"b\"");
        assert_eq!(records[1].data, [0, 255]);
        assert_eq!(records[2].sub_sequence_number, Some(1));
    }

    #[test]
    fn reports_every_kind_of_problem() {
        let key = ObjectKey::parse(
            "p",
            &ObjectKey::format(
                "p",
                minute(),
                "s-1",
                &seq("9"),
                &seq("12"),
                Compression::None,
            ),
        )
        .unwrap();
        let body = [
            // Wrong shard, wrong minute.
            line("s-2", "9", None, "k", "2026-11-21T05:28:00.000Z", b"a"),
            // Field order.
            "{\"sequenceNumber\":\"10\",\"shardId\":\"s-1\",\"partitionKey\":\"k\",\"approximateArrivalTimestamp\":\"2026-11-21T05:27:00.000Z\",\"data\":\"YQ==\"}\n".to_owned(),
            // Timestamp without milliseconds, unpadded base64.
            "{\"shardId\":\"s-1\",\"sequenceNumber\":\"11\",\"partitionKey\":\"k\",\"approximateArrivalTimestamp\":\"2026-11-21T05:27:00Z\",\"data\":\"YQ\"}\n".to_owned(),
            // Out of order and outside the range (last must be 12).
            line("s-1", "13", None, "k", "2026-11-21T05:27:00.000Z", b"a"),
            "not json\n".to_owned(),
        ]
        .concat();
        let (records, problems) = decode_object(&key, body.as_bytes());
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        let has = |needle: &str| text.iter().any(|t| t.contains(needle));
        assert!(has("shardId \"s-2\""), "{text:#?}");
        assert!(has("not in the key's minute"), "{text:#?}");
        assert!(has("fields are"), "{text:#?}");
        assert!(has("YYYY-MM-DDTHH:MM:SS.mmmZ"), "{text:#?}");
        assert!(has("base64"), "{text:#?}");
        assert!(has("outside the key's range"), "{text:#?}");
        assert!(has("not a JSON object"), "{text:#?}");
        assert_eq!(records.len(), 4);
    }

    #[test]
    fn versions() {
        let v = |key: &str, marker: bool| ObjectVersion {
            key: key.to_owned(),
            version_id: None,
            is_latest: true,
            is_delete_marker: marker,
        };
        assert!(overwritten_keys(&[v("a", false), v("b", false)]).is_empty());
        assert_eq!(overwritten_keys(&[v("a", false), v("a", false)]).len(), 1);
        assert_eq!(overwritten_keys(&[v("a", true)]).len(), 1);
    }

    #[test]
    fn timestamps() {
        let t = parse_timestamp("2026-11-21T05:27:03.123Z").unwrap();
        assert_eq!(format_timestamp(t), "2026-11-21T05:27:03.123Z");
        assert!(parse_timestamp("2026-11-21T05:27:03.12Z").is_err());
        assert!(parse_timestamp("2026-11-21T05:27:03.123+00:00").is_err());
        assert!(parse_timestamp("2026-11-21 05:27:03.123Z").is_err());
    }
}
