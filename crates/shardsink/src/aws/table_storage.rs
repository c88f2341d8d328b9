//! [`S3TableStorage`]: Iceberg's file I/O (`iceberg::io::Storage`, the
//! trait behind `FileIO`) over shardsink's own S3 client.
//!
//! Why not the Iceberg crates' S3 backend: that one builds a second S3 client
//! from catalog properties, with its own endpoint, region, credentials,
//! addressing style and retries. Through this module the table's metadata
//! and manifest files are read and written by the client the rest of the
//! daemon uses (`clients.rs`), so one S3 configuration reaches both the
//! archive and the table, and a setting cannot be right for one and wrong
//! for the other.
//!
//! Writes are conditional (PutObject with `If-None-Match: *`): Iceberg gives
//! every metadata, manifest and manifest-list file a new, unique name and
//! never rewrites one, so an object already at the key is an error, never
//! something to overwrite.
//!
//! Locations are `s3://bucket/key`; `s3a://` and `s3n://`, which Hadoop-based
//! engines write into table metadata, name the same objects.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::operation::head_object::HeadObjectError;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use serde::de::Error as _;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::s3::{PutOutcome, http_status, is_retriable, put_object_if_absent};

/// The location schemes that name S3 objects.
const SCHEMES: &[&str] = &["s3://", "s3a://", "s3n://"];

/// The most keys one DeleteObjects request may name ([DeleteObjects]: "up
/// to 1,000 keys").
///
/// [DeleteObjects]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteObjects.html
const DELETE_BATCH: usize = 1000;

/// Why neither type can be deserialized.
const NOT_DESERIALIZABLE: &str = "S3TableStorage holds an AWS client and cannot be deserialized";

/// Splits an S3 location, `s3://bucket/key` (or `s3a://`, `s3n://`), into
/// its bucket and key. The key is everything after the first `/` that
/// follows the bucket, verbatim; it is empty for `s3://bucket` and
/// `s3://bucket/`.
///
/// # Errors
/// `FeatureUnsupported` for any other scheme, `DataInvalid` for an empty
/// bucket; both name the location.
pub fn parse_location(location: &str) -> Result<(&str, &str)> {
    let rest = SCHEMES
        .iter()
        .find_map(|scheme| location.strip_prefix(scheme))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::FeatureUnsupported,
                format!("{location} is not an S3 location (s3://bucket/key)"),
            )
        })?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!("{location} names no bucket"),
        ));
    }
    Ok((bucket, key))
}

/// The bucket and key of an object's location: [`parse_location`] with a
/// non-empty key.
fn object_location(location: &str) -> Result<(&str, &str)> {
    let (bucket, key) = parse_location(location)?;
    if key.is_empty() {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!("{location} names a bucket, not an object"),
        ));
    }
    Ok((bucket, key))
}

/// The error of a failed S3 call: `Unexpected`, naming the operation and
/// the location, with the SDK error as its source; retryable when S3's
/// classification (`s3::is_retriable`: timeouts, 5xx, throttling) says so.
fn sdk_error<E>(operation: &str, bucket: &str, key: &str, err: SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    Error::new(
        ErrorKind::Unexpected,
        format!("{operation} on s3://{bucket}/{key} failed"),
    )
    .with_retryable(is_retriable(&err))
    .with_source(err)
}

/// Iceberg file I/O on S3 through shardsink's S3 client: every call uses the
/// client's endpoint, region, credentials, path-style setting and SDK
/// retries. Cheap to clone (the client is reference-counted).
///
/// Serializing it writes an empty object (`{"type":"shardsink-s3"}` as a
/// `dyn Storage`); deserializing always fails: a client cannot be rebuilt
/// from text.
#[derive(Debug, Clone)]
pub struct S3TableStorage {
    client: Client,
}

impl S3TableStorage {
    /// Storage on `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// The object's size in bytes, or `None` when there is no object at
    /// the key ([HeadObject]: a 404 without a body, which the SDK models as
    /// `NotFound`).
    ///
    /// [HeadObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadObject.html
    async fn head_object(&self, bucket: &str, key: &str) -> Result<Option<u64>> {
        match self
            .client
            .head_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
        {
            Ok(output) => {
                let size = output
                    .content_length()
                    .and_then(|length| u64::try_from(length).ok())
                    .ok_or_else(|| {
                        Error::new(
                            ErrorKind::Unexpected,
                            format!("HeadObject on s3://{bucket}/{key} gave no Content-Length"),
                        )
                    })?;
                Ok(Some(size))
            }
            Err(err)
                if matches!(err.as_service_error(), Some(HeadObjectError::NotFound(_)))
                    || http_status(&err) == Some(404) =>
            {
                Ok(None)
            }
            Err(err) => Err(sdk_error("HeadObject", bucket, key, err)),
        }
    }

    /// The object's body, whole or the `Range` header's bytes ([GetObject];
    /// `range` is an HTTP byte range such as `bytes=0-99`, both ends
    /// included).
    ///
    /// [GetObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html
    async fn get_object(&self, bucket: &str, key: &str, range: Option<String>) -> Result<Bytes> {
        let output = self
            .client
            .get_object()
            .bucket(bucket)
            .key(key)
            .set_range(range)
            .send()
            .await
            .map_err(|err: SdkError<GetObjectError, HttpResponse>| {
                sdk_error("GetObject", bucket, key, err)
            })?;
        let body = output.body.collect().await.map_err(|err| {
            // The connection failed after the response began.
            Error::new(
                ErrorKind::Unexpected,
                format!("GetObject on s3://{bucket}/{key} failed while reading the body"),
            )
            .with_retryable(true)
            .with_source(err)
        })?;
        Ok(body.into_bytes())
    }

    /// Writes `body` to the key only if no object has it ([PutObject] with
    /// `If-None-Match: *`), with the timeouts of the daemon's own PUTs.
    ///
    /// [PutObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutObject.html
    ///
    /// # Errors
    /// `Unexpected` saying the object already exists on HTTP 412
    /// `PreconditionFailed`; `Unexpected` for other failures.
    async fn put_if_absent(&self, bucket: &str, key: &str, body: Bytes) -> Result<()> {
        match put_object_if_absent(&self.client, bucket, key, body, None, &[]).await {
            Ok(PutOutcome::Created) => Ok(()),
            Ok(PutOutcome::AlreadyExists) => Err(Error::new(
                ErrorKind::Unexpected,
                format!(
                    "s3://{bucket}/{key} already exists; Iceberg files are written once, never overwritten"
                ),
            )),
            Err(err) => Err(sdk_error("PutObject", bucket, key, err)),
        }
    }

    /// Deletes one object ([DeleteObject]); a missing object is not an
    /// error (S3 answers 204 either way).
    ///
    /// [DeleteObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteObject.html
    async fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        self.client
            .delete_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map(|_| ())
            .map_err(|err| sdk_error("DeleteObject", bucket, key, err))
    }

    /// One page (up to 1,000 keys) of the keys under `prefix`, and the token
    /// of the next page, `None` on the last ([ListObjectsV2]).
    ///
    /// [ListObjectsV2]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html
    async fn list_page(
        &self,
        bucket: &str,
        prefix: &str,
        continuation_token: Option<String>,
    ) -> Result<(Vec<String>, Option<String>)> {
        let output = self
            .client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(continuation_token)
            .send()
            .await
            .map_err(|err| sdk_error("ListObjectsV2", bucket, prefix, err))?;
        let keys = output
            .contents()
            .iter()
            .filter_map(|object| object.key().map(str::to_owned))
            .collect();
        let next = if output.is_truncated() == Some(true) {
            output.next_continuation_token().map(str::to_owned)
        } else {
            None
        };
        Ok((keys, next))
    }

    /// Deletes `keys` of `bucket`, [`DELETE_BATCH`] to a request
    /// ([DeleteObjects], quiet mode: the response lists only the keys that
    /// failed).
    ///
    /// [DeleteObjects]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteObjects.html
    ///
    /// # Errors
    /// `Unexpected` when a request fails or names a key it could not
    /// delete.
    async fn delete_objects(&self, bucket: &str, keys: &[String]) -> Result<()> {
        for chunk in keys.chunks(DELETE_BATCH) {
            let objects = chunk
                .iter()
                .map(|key| ObjectIdentifier::builder().key(key).build())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|err| build_error(bucket, err))?;
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|err| build_error(bucket, err))?;
            let output = self
                .client
                .delete_objects()
                .bucket(bucket)
                .delete(delete)
                .send()
                .await
                .map_err(|err| sdk_error("DeleteObjects", bucket, "", err))?;
            if let Some(failed) = output.errors().first() {
                return Err(Error::new(
                    ErrorKind::Unexpected,
                    format!(
                        "DeleteObjects on s3://{bucket}/ failed for {} of {} keys, first s3://{bucket}/{}: {}",
                        output.errors().len(),
                        chunk.len(),
                        failed.key().unwrap_or_default(),
                        failed.code().unwrap_or("no code"),
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A DeleteObjects request that could not be built (a required field left
/// out: a bug).
fn build_error(bucket: &str, err: aws_sdk_s3::error::BuildError) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("DeleteObjects on s3://{bucket}/ could not be built"),
    )
    .with_source(err)
}

/// Nothing to write: the client (and with it the credentials) stays in the
/// process.
impl Serialize for S3TableStorage {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_struct("S3TableStorage", 0)?.end()
    }
}

/// Always an error. Iceberg's traits require deserialization so that a
/// storage can be shipped to another process, but this one is nothing
/// without its AWS client, which holds credentials and connections and is
/// built from the process's own configuration; the daemon never ships
/// storage across processes, so failing loudly beats inventing a client.
impl<'de> Deserialize<'de> for S3TableStorage {
    fn deserialize<D: Deserializer<'de>>(_deserializer: D) -> std::result::Result<Self, D::Error> {
        Err(D::Error::custom(NOT_DESERIALIZABLE))
    }
}

#[async_trait]
#[typetag::serde(name = "shardsink-s3")]
impl Storage for S3TableStorage {
    /// HeadObject; a 404 is `false`.
    async fn exists(&self, path: &str) -> Result<bool> {
        let (bucket, key) = object_location(path)?;
        Ok(self.head_object(bucket, key).await?.is_some())
    }

    /// HeadObject's `Content-Length`; a missing object is `DataInvalid`.
    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        let (bucket, key) = object_location(path)?;
        match self.head_object(bucket, key).await? {
            Some(size) => Ok(FileMetadata { size }),
            None => Err(Error::new(
                ErrorKind::DataInvalid,
                format!("{path} does not exist"),
            )),
        }
    }

    /// GetObject of the whole object.
    async fn read(&self, path: &str) -> Result<Bytes> {
        let (bucket, key) = object_location(path)?;
        self.get_object(bucket, key, None).await
    }

    /// A reader that makes one ranged GetObject per read; creating it makes
    /// no call, so a missing object shows at the first read.
    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        let (bucket, key) = object_location(path)?;
        Ok(Box::new(S3FileRead {
            storage: self.clone(),
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        }))
    }

    /// Conditional PutObject: an object already at the key is an error.
    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        let (bucket, key) = object_location(path)?;
        self.put_if_absent(bucket, key, bs).await
    }

    /// A writer that buffers in memory and makes one conditional PutObject
    /// on `close`.
    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        let (bucket, key) = object_location(path)?;
        Ok(Box::new(S3FileWrite {
            storage: self.clone(),
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            buffer: Vec::new(),
            closed: false,
        }))
    }

    /// DeleteObject.
    async fn delete(&self, path: &str) -> Result<()> {
        let (bucket, key) = object_location(path)?;
        self.delete_object(bucket, key).await
    }

    /// Every object under `path/` (a `/` is added when missing, so that
    /// `s3://b/t` does not reach `s3://b/t2/…`): ListObjectsV2 pages, each
    /// deleted with DeleteObjects before the next is listed. A bare bucket
    /// is refused (`DataInvalid`): the table's bucket may hold the archive.
    async fn delete_prefix(&self, path: &str) -> Result<()> {
        let (bucket, key) = object_location(path)?;
        let prefix = if key.ends_with('/') {
            key.to_owned()
        } else {
            format!("{key}/")
        };
        let mut token = None;
        loop {
            let (keys, next) = self.list_page(bucket, &prefix, token).await?;
            self.delete_objects(bucket, &keys).await?;
            match next {
                Some(next) => token = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// DeleteObjects, the paths grouped by bucket, [`DELETE_BATCH`] keys to
    /// a request; a request is sent as soon as a bucket has that many.
    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> Result<()> {
        let mut pending: HashMap<String, Vec<String>> = HashMap::new();
        while let Some(path) = paths.next().await {
            let (bucket, key) = object_location(&path)?;
            let keys = pending.entry(bucket.to_owned()).or_default();
            keys.push(key.to_owned());
            if keys.len() == DELETE_BATCH {
                let full = std::mem::take(keys);
                self.delete_objects(bucket, &full).await?;
            }
        }
        for (bucket, keys) in pending {
            self.delete_objects(&bucket, &keys).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        object_location(path)?;
        Ok(InputFile::new(Arc::new(self.clone()), path.to_owned()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        object_location(path)?;
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_owned()))
    }
}

/// Builds [`S3TableStorage`] on one client, whatever the `FileIO`'s
/// properties say: S3 is configured once, for the whole daemon, in
/// `clients.rs` (the properties a catalog hands over, such as
/// `s3.endpoint`, are ignored).
///
/// Serializes and deserializes as [`S3TableStorage`] does.
#[derive(Debug, Clone)]
pub struct S3TableStorageFactory {
    client: Client,
}

impl S3TableStorageFactory {
    /// A factory of storage on `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

/// Nothing to write, as for [`S3TableStorage`].
impl Serialize for S3TableStorageFactory {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer
            .serialize_struct("S3TableStorageFactory", 0)?
            .end()
    }
}

/// Always an error, as for [`S3TableStorage`].
impl<'de> Deserialize<'de> for S3TableStorageFactory {
    fn deserialize<D: Deserializer<'de>>(_deserializer: D) -> std::result::Result<Self, D::Error> {
        Err(D::Error::custom(NOT_DESERIALIZABLE))
    }
}

#[typetag::serde(name = "shardsink-s3-factory")]
impl StorageFactory for S3TableStorageFactory {
    fn build(&self, _config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(S3TableStorage::new(self.client.clone())))
    }
}

/// Reads byte ranges of one object, one ranged GetObject each.
#[derive(Debug)]
struct S3FileRead {
    storage: S3TableStorage,
    bucket: String,
    key: String,
}

#[async_trait]
impl FileRead for S3FileRead {
    /// GetObject with `Range: bytes={start}-{end - 1}`; an empty range is
    /// empty bytes without a call.
    ///
    /// # Errors
    /// `DataInvalid` for a reversed range, or when S3 returns fewer bytes
    /// than asked for (the object ends before `range.end`).
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        if range.start > range.end {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "reversed range {}..{} of s3://{}/{}",
                    range.start, range.end, self.bucket, self.key
                ),
            ));
        }
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let header = format!("bytes={}-{}", range.start, range.end - 1);
        let body = self
            .storage
            .get_object(&self.bucket, &self.key, Some(header))
            .await?;
        let wanted = range.end - range.start;
        if u64::try_from(body.len()).ok() != Some(wanted) {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "asked for bytes {}..{} of s3://{}/{}, got {}",
                    range.start,
                    range.end,
                    self.bucket,
                    self.key,
                    body.len()
                ),
            ));
        }
        Ok(body)
    }
}

/// Writes one object: buffers everything written, then one conditional
/// PutObject on `close`.
#[derive(Debug)]
struct S3FileWrite {
    storage: S3TableStorage,
    bucket: String,
    key: String,
    buffer: Vec<u8>,
    closed: bool,
}

#[async_trait]
impl FileWrite for S3FileWrite {
    /// Appends to the buffer; `DataInvalid` once closed.
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        if self.closed {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!("s3://{}/{} is already closed", self.bucket, self.key),
            ));
        }
        self.buffer.extend_from_slice(&bs);
        Ok(())
    }

    /// PUTs the buffer if no object has the key. The writer is spent even
    /// when the PUT fails (Iceberg then writes a new file under a new
    /// name); a second close is `DataInvalid`.
    async fn close(&mut self) -> Result<()> {
        if self.closed {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!("s3://{}/{} is already closed", self.bucket, self.key),
            ));
        }
        self.closed = true;
        let body = Bytes::from(std::mem::take(&mut self.buffer));
        self.storage
            .put_if_absent(&self.bucket, &self.key, body)
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use aws_sdk_s3::operation::delete_objects::DeleteObjectsOutput;
    use aws_sdk_s3::operation::get_object::GetObjectOutput;
    use aws_sdk_s3::operation::head_object::HeadObjectOutput;
    use aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output;
    use aws_sdk_s3::operation::put_object::PutObjectOutput;
    use aws_sdk_s3::primitives::ByteStream;
    use aws_sdk_s3::types::Object;
    use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
    use iceberg::io::FileIOBuilder;

    use super::*;
    use crate::fake_aws::{self, FakeBucket, http, s3_error};
    use crate::lock::lock;

    fn client(rules: &[&Rule]) -> Client {
        mock_client!(aws_sdk_s3, RuleMode::MatchAny, rules, |c| c
            .retry_config(aws_smithy_types::retry::RetryConfig::disabled()))
    }

    fn storage(rules: &[&Rule]) -> S3TableStorage {
        S3TableStorage::new(client(rules))
    }

    #[test]
    fn locations_split_into_bucket_and_key() {
        assert_eq!(
            parse_location("s3://wh/db/t/metadata/v1.json").unwrap(),
            ("wh", "db/t/metadata/v1.json")
        );
        assert_eq!(parse_location("s3a://wh/a//b").unwrap(), ("wh", "a//b"));
        assert_eq!(parse_location("s3n://wh/k").unwrap(), ("wh", "k"));
        assert_eq!(parse_location("s3://wh").unwrap(), ("wh", ""));
        assert_eq!(parse_location("s3://wh/").unwrap(), ("wh", ""));
        assert_eq!(
            parse_location("s3:///k").unwrap_err().kind(),
            ErrorKind::DataInvalid
        );
        for other in ["gs://wh/k", "file:///tmp/k", "/tmp/k", "S3://wh/k", "wh/k"] {
            let err = parse_location(other).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::FeatureUnsupported, "{other}");
            assert!(err.message().contains(other), "{err}");
        }
        let err = object_location("s3://wh/").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DataInvalid);
    }

    #[tokio::test]
    async fn exists_is_head_object_and_a_404_is_false() {
        let present = mock!(Client::head_object)
            .match_requests(|input| input.bucket() == Some("wh") && input.key() == Some("here"))
            .then_output(|| HeadObjectOutput::builder().content_length(42).build());
        let absent = mock!(Client::head_object)
            .match_requests(|input| input.key() == Some("gone"))
            .then_http_response(|| http(404, ""));
        let denied = mock!(Client::head_object)
            .match_requests(|input| input.key() == Some("denied"))
            .then_http_response(|| http(403, ""));
        let storage = storage(&[&present, &absent, &denied]);
        assert!(storage.exists("s3://wh/here").await.unwrap());
        assert!(!storage.exists("s3://wh/gone").await.unwrap());
        assert_eq!(storage.metadata("s3://wh/here").await.unwrap().size, 42);
        let missing = storage.metadata("s3://wh/gone").await.err().unwrap();
        assert_eq!(missing.kind(), ErrorKind::DataInvalid);
        let err = storage.exists("s3://wh/denied").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unexpected);
        assert!(
            err.message().contains("HeadObject on s3://wh/denied"),
            "{err}"
        );
        assert!(!err.retryable());
    }

    #[tokio::test]
    async fn server_failures_are_retryable() {
        let slow = mock!(Client::get_object).then_http_response(|| s3_error(503, "SlowDown"));
        let err = storage(&[&slow]).read("s3://wh/k").await.unwrap_err();
        assert!(err.retryable(), "{err}");
        assert!(err.message().contains("GetObject on s3://wh/k"), "{err}");
    }

    #[tokio::test]
    async fn writes_are_conditional_and_an_existing_object_is_an_error() {
        let put = mock!(Client::put_object)
            .match_requests(|input| {
                input.bucket() == Some("wh")
                    && input.key() == Some("m/v1.json")
                    && input.if_none_match() == Some("*")
                    && input.body().bytes() == Some(b"{}".as_slice())
            })
            .then_output(|| PutObjectOutput::builder().build());
        let taken = mock!(Client::put_object)
            .match_requests(|input| input.key() == Some("m/v0.json"))
            .then_http_response(|| s3_error(412, "PreconditionFailed"));
        let storage = storage(&[&put, &taken]);
        storage
            .write("s3://wh/m/v1.json", Bytes::from_static(b"{}"))
            .await
            .unwrap();
        assert_eq!(put.num_calls(), 1);
        let err = storage
            .write("s3://wh/m/v0.json", Bytes::from_static(b"{}"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unexpected);
        assert!(err.message().contains("already exists"), "{err}");
        assert_eq!(taken.num_calls(), 1);
    }

    #[tokio::test]
    async fn a_reader_asks_for_its_range() {
        let get = mock!(Client::get_object)
            .match_requests(|input| {
                input.bucket() == Some("wh")
                    && input.key() == Some("d/f.parquet")
                    && input.range() == Some("bytes=4-8")
            })
            .then_output(|| {
                GetObjectOutput::builder()
                    .body(ByteStream::from_static(b"45678"))
                    .build()
            });
        let storage = storage(&[&get]);
        let reader = storage.reader("s3://wh/d/f.parquet").await.unwrap();
        assert_eq!(get.num_calls(), 0);
        assert_eq!(
            reader.read(4..9).await.unwrap(),
            Bytes::from_static(b"45678")
        );
        assert_eq!(get.num_calls(), 1);
        assert!(reader.read(7..7).await.unwrap().is_empty());
        assert_eq!(get.num_calls(), 1);
    }

    #[tokio::test]
    async fn a_short_ranged_body_is_an_error() {
        // The object ends before the range does.
        let get = mock!(Client::get_object).then_output(|| {
            GetObjectOutput::builder()
                .body(ByteStream::from_static(b"45"))
                .build()
        });
        let reader = storage(&[&get]).reader("s3://wh/k").await.unwrap();
        let err = reader.read(4..9).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::DataInvalid);
    }

    /// A ListObjectsV2 rule answering `prefix` after `token` with `keys`, and
    /// `next` as the next page's token.
    fn page(
        prefix: &'static str,
        token: Option<&'static str>,
        keys: &'static [&'static str],
        next: Option<&'static str>,
    ) -> Rule {
        mock!(Client::list_objects_v2)
            .match_requests(move |input| {
                input.bucket() == Some("wh")
                    && input.prefix() == Some(prefix)
                    && input.continuation_token() == token
            })
            .then_output(move || {
                let mut output = ListObjectsV2Output::builder()
                    .is_truncated(next.is_some())
                    .set_next_continuation_token(next.map(str::to_owned));
                for key in keys {
                    output = output.contents(Object::builder().key(*key).build());
                }
                output.build()
            })
    }

    /// Each DeleteObjects request's bucket and keys, in order.
    type Deleted = Arc<Mutex<Vec<(String, Vec<String>)>>>;

    /// A DeleteObjects rule that records each request into `deleted`.
    fn recording_delete(deleted: Deleted) -> Rule {
        mock!(Client::delete_objects).then_compute_output(move |input| {
            let keys = input
                .delete()
                .map(|delete| {
                    delete
                        .objects()
                        .iter()
                        .map(|object| object.key().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            lock(&deleted).push((input.bucket().unwrap_or_default().to_owned(), keys));
            DeleteObjectsOutput::builder().build()
        })
    }

    #[tokio::test]
    async fn delete_prefix_deletes_every_listed_page() {
        let first = page("db/t/", None, &["db/t/a", "db/t/b"], Some("tok"));
        let second = page("db/t/", Some("tok"), &["db/t/c"], None);
        let deleted = Arc::new(Mutex::new(Vec::new()));
        let delete = recording_delete(deleted.clone());
        let storage = storage(&[&first, &second, &delete]);
        // No trailing slash: `db/t2/…` must not be listed.
        storage.delete_prefix("s3://wh/db/t").await.unwrap();
        assert_eq!((first.num_calls(), second.num_calls()), (1, 1));
        let deleted = lock(&deleted).clone();
        assert_eq!(
            deleted,
            [
                (
                    "wh".to_owned(),
                    vec!["db/t/a".to_owned(), "db/t/b".to_owned()]
                ),
                ("wh".to_owned(), vec!["db/t/c".to_owned()]),
            ]
        );
        assert_eq!(
            storage.delete_prefix("s3://wh").await.unwrap_err().kind(),
            ErrorKind::DataInvalid
        );
    }

    #[tokio::test]
    async fn delete_stream_groups_by_bucket_a_thousand_keys_a_request() {
        let deleted = Arc::new(Mutex::new(Vec::new()));
        let delete = recording_delete(deleted.clone());
        let storage = storage(&[&delete]);
        let paths: Vec<String> = (0..1001)
            .map(|i| format!("s3://a/k{i}"))
            .chain(["s3a://b/x".to_owned()])
            .collect();
        storage
            .delete_stream(futures::stream::iter(paths).boxed())
            .await
            .unwrap();
        let mut requests: Vec<(String, usize)> = lock(&deleted)
            .iter()
            .map(|(bucket, keys)| (bucket.clone(), keys.len()))
            .collect();
        requests.sort();
        assert_eq!(
            requests,
            [
                ("a".to_owned(), 1),
                ("a".to_owned(), 1000),
                ("b".to_owned(), 1)
            ]
        );
    }

    #[tokio::test]
    async fn a_failed_key_in_delete_objects_is_an_error() {
        let delete = mock!(Client::delete_objects).then_output(|| {
            DeleteObjectsOutput::builder()
                .errors(
                    aws_sdk_s3::types::Error::builder()
                        .key("k")
                        .code("AccessDenied")
                        .build(),
                )
                .build()
        });
        let err = storage(&[&delete])
            .delete_stream(futures::stream::iter(["s3://wh/k".to_owned()]).boxed())
            .await
            .unwrap_err();
        assert!(err.message().contains("AccessDenied"), "{err}");
    }

    #[tokio::test]
    async fn a_writer_puts_once_on_close() {
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let seen = bodies.clone();
        let put = mock!(Client::put_object)
            .match_requests(|input| input.if_none_match() == Some("*"))
            .then_compute_output(move |input| {
                lock(&seen).push(Bytes::copy_from_slice(input.body().bytes().unwrap()));
                PutObjectOutput::builder().build()
            });
        let storage = storage(&[&put]);
        let mut writer = storage.writer("s3://wh/m/snap-1.avro").await.unwrap();
        writer.write(Bytes::from_static(b"ab")).await.unwrap();
        writer.write(Bytes::from_static(b"cd")).await.unwrap();
        assert_eq!(put.num_calls(), 0);
        writer.close().await.unwrap();
        assert_eq!(*lock(&bodies), [Bytes::from_static(b"abcd")]);
        assert_eq!(
            writer.close().await.unwrap_err().kind(),
            ErrorKind::DataInvalid
        );
        assert!(writer.write(Bytes::from_static(b"e")).await.is_err());
        assert_eq!(put.num_calls(), 1);
    }

    #[tokio::test]
    async fn file_io_writes_and_reads_through_the_client() {
        let bucket = Arc::new(FakeBucket::default());
        let s3 = fake_aws::clients(Arc::default(), bucket.clone(), Arc::default()).s3;
        let file_io = FileIOBuilder::new(Arc::new(S3TableStorageFactory::new(s3))).build();
        let location = "s3://wh/db/t/metadata/00001.metadata.json";
        let output = file_io.new_output(location).unwrap();
        output
            .write(Bytes::from_static(b"{\"v\":1}"))
            .await
            .unwrap();
        assert_eq!(
            lock(&bucket.objects).get("db/t/metadata/00001.metadata.json"),
            Some(&Bytes::from_static(b"{\"v\":1}"))
        );
        let input = file_io.new_input(location).unwrap();
        assert_eq!(
            input.read().await.unwrap(),
            Bytes::from_static(b"{\"v\":1}")
        );
        // Written once: a second write of the same file is refused.
        assert!(output.write(Bytes::from_static(b"{}")).await.is_err());
        assert_eq!(
            file_io.new_input("gs://wh/k").unwrap_err().kind(),
            ErrorKind::FeatureUnsupported
        );
    }

    #[test]
    fn serializes_empty_and_refuses_to_deserialize() {
        let storage: Box<dyn Storage> = Box::new(storage(&[]));
        let json = serde_json::to_string(&storage).unwrap();
        assert_eq!(json, r#"{"type":"shardsink-s3"}"#);
        let err = serde_json::from_str::<Box<dyn Storage>>(&json).unwrap_err();
        assert!(err.to_string().contains(NOT_DESERIALIZABLE), "{err}");
        let factory: Box<dyn StorageFactory> = Box::new(S3TableStorageFactory::new(client(&[])));
        let json = serde_json::to_string(&factory).unwrap();
        assert_eq!(json, r#"{"type":"shardsink-s3-factory"}"#);
        assert!(serde_json::from_str::<Box<dyn StorageFactory>>(&json).is_err());
    }
}
