//! S3 calls: HeadBucket, PutObject with `If-None-Match: *`, GetObject,
//! ListObjectsV2.

use std::collections::HashMap;

use aws_sdk_s3::Client;
use aws_sdk_s3::operation::get_object::{GetObjectError, GetObjectOutput};
use aws_sdk_s3::operation::head_bucket::HeadBucketError;
use aws_sdk_s3::operation::head_object::HeadObjectError;
use aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Error;
use aws_sdk_s3::operation::put_object::PutObjectError;
use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use bytes::Bytes;
use shard_lease::retry::is_transport_or_server_failure;

use super::BoxError;
use super::clients::s3_put_timeouts;

/// S3 error codes that mean "slow down": `SlowDown` (S3 API reference, "List
/// of error codes"), the read/write forms S3-compatible stores such as MinIO
/// send, and the generic AWS throttling codes. The SDK models none of them
/// for any operation, so they are matched by code.
const THROTTLING_CODES: &[&str] = &[
    "SlowDown",
    "SlowDownRead",
    "SlowDownWrite",
    "Throttling",
    "ThrottlingException",
];

/// Other S3 error codes that mean "try again later" (S3 API reference, "List
/// of error codes": `InternalError`, `ServiceUnavailable`, `RequestTimeout`,
/// …; 409 `ConditionalRequestConflict` for concurrent conditional writes to
/// one key), whatever HTTP status they come with. The SDK models none of
/// them for any operation, so they are matched by code.
const RETRIABLE_CODES: &[&str] = &[
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "ConditionalRequestConflict",
    "OperationAborted",
];

/// The error code of a missing bucket, for the operations whose errors do
/// not model it (PutObject, GetObject, HeadObject); see [`Modeled`].
const NO_SUCH_BUCKET: &str = "NoSuchBucket";

/// What each S3 operation's modeled errors say (S3 API reference, each
/// operation's "Errors"), matched as typed variants.
trait Modeled: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static {
    /// Whether the error says the bucket does not exist: HeadBucket's
    /// `NotFound` (a 404 without a body), ListObjectsV2's `NoSuchBucket`;
    /// for the operations that do not model it, the [`NO_SUCH_BUCKET`]
    /// code.
    fn is_missing_bucket(&self) -> bool;
}

impl Modeled for HeadBucketError {
    fn is_missing_bucket(&self) -> bool {
        matches!(self, Self::NotFound(_))
    }
}

impl Modeled for ListObjectsV2Error {
    fn is_missing_bucket(&self) -> bool {
        matches!(self, Self::NoSuchBucket(_))
    }
}

/// Implements [`Modeled`] for the errors of operations that do not model a
/// missing bucket: it comes as an unmodeled error with its code.
macro_rules! unmodeled_missing_bucket {
    ($($error:ty),+) => {$(
        impl Modeled for $error {
            fn is_missing_bucket(&self) -> bool {
                self.code() == Some(NO_SUCH_BUCKET)
            }
        }
    )+};
}

unmodeled_missing_bucket!(PutObjectError, GetObjectError, HeadObjectError);

/// An S3 call that failed.
#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    /// The bucket does not exist (`NoSuchBucket`, or 404 on HeadBucket).
    #[error("bucket {bucket} does not exist")]
    NoSuchBucket {
        /// The bucket.
        bucket: String,
    },
    /// Any other failure; `retriable` for [`RETRIABLE_CODES`],
    /// [`THROTTLING_CODES`] and transport or server failures, `throttled` for
    /// [`THROTTLING_CODES`], 429 and 503.
    #[error("s3 {operation} failed for s3://{bucket}/{key}")]
    Other {
        /// The API operation.
        operation: &'static str,
        /// The bucket.
        bucket: String,
        /// The key or prefix.
        key: String,
        /// Whether a retry after a backoff may succeed.
        retriable: bool,
        /// Whether S3 throttled the call (`SlowDown`).
        throttled: bool,
        /// The SDK error.
        #[source]
        source: BoxError,
    },
}

impl S3Error {
    /// Whether a retry after a backoff may succeed.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            Self::Other {
                retriable: true,
                ..
            }
        )
    }
}

/// What a conditional PUT did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The object was written.
    Created,
    /// An object with this key already existed (HTTP 412
    /// `PreconditionFailed`); nothing was written.
    AlreadyExists,
}

/// Writes `body` to `bucket`/`key` only if no object has that key
/// ([PutObject] with `If-None-Match: *`), with `content_type` and user
/// `metadata` (`x-amz-meta-*`) when given, and the timeouts of the daemon's
/// PUTs for its size (`s3_put_timeouts`). The one conditional PUT of the
/// archive's objects and of Iceberg's files.
///
/// [PutObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutObject.html
///
/// # Errors
/// The SDK's error for anything but HTTP 412 `PreconditionFailed`, which
/// is [`PutOutcome::AlreadyExists`].
pub(crate) async fn put_object_if_absent(
    client: &Client,
    bucket: &str,
    key: &str,
    body: Bytes,
    content_type: Option<&str>,
    metadata: &[(&str, String)],
) -> Result<PutOutcome, SdkError<PutObjectError, HttpResponse>> {
    let timeouts = s3_put_timeouts(body.len());
    let result = client
        .put_object()
        .bucket(bucket)
        .key(key)
        .if_none_match("*")
        .set_content_type(content_type.map(str::to_owned))
        .set_metadata((!metadata.is_empty()).then(|| {
            metadata
                .iter()
                .map(|(name, value)| ((*name).to_owned(), value.clone()))
                .collect()
        }))
        .content_length(i64::try_from(body.len()).unwrap_or(i64::MAX))
        .body(ByteStream::from(body))
        .customize()
        .config_override(aws_sdk_s3::config::Builder::default().timeout_config(timeouts))
        .send()
        .await;
    match result {
        Ok(_) => Ok(PutOutcome::Created),
        Err(err) if http_status(&err) == Some(412) => Ok(PutOutcome::AlreadyExists),
        Err(err) => Err(err),
    }
}

/// One page of a listing.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    /// The keys, in the order S3 returned them.
    pub keys: Vec<String>,
    /// Token for the next page, `None` on the last.
    pub next_continuation_token: Option<String>,
}

/// The bucket shardsink writes to.
#[derive(Debug, Clone)]
pub struct ObjectStore {
    client: Client,
    bucket: String,
}

impl ObjectStore {
    /// A handle on `bucket`.
    pub fn new(client: Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
        }
    }

    /// The bucket name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Checks that the bucket exists and is reachable ([HeadBucket]).
    ///
    /// [HeadBucket]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadBucket.html
    ///
    /// # Errors
    /// [`S3Error::NoSuchBucket`] on 404; others.
    pub async fn head_bucket(&self) -> Result<(), S3Error> {
        self.client
            .head_bucket()
            .bucket(&self.bucket)
            .send()
            .await
            .map(|_| ())
            .map_err(|err| self.error("HeadBucket", "", err))
    }

    /// Writes `body` to `key` only if no object has that key ([PutObject] with
    /// `If-None-Match: *`): objects are never overwritten (C2 in
    /// docs/DESIGN.md). A 409 `ConditionalRequestConflict` (a concurrent conditional
    /// write to the same key) is a retriable error.
    ///
    /// [PutObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutObject.html
    ///
    /// # Errors
    /// [`S3Error`].
    pub async fn put_if_absent(
        &self,
        key: &str,
        body: Bytes,
        content_type: &str,
        metadata: &[(&str, String)],
    ) -> Result<PutOutcome, S3Error> {
        put_object_if_absent(
            &self.client,
            &self.bucket,
            key,
            body,
            Some(content_type),
            metadata,
        )
        .await
        .map_err(|err| self.error("PutObject", key, err))
    }

    /// The whole body of `key` ([GetObject]).
    ///
    /// [GetObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html
    ///
    /// # Errors
    /// [`S3Error`].
    pub async fn get(&self, key: &str) -> Result<Bytes, S3Error> {
        let stream = self.get_stream(key).await?;
        self.collect(key, stream).await
    }

    /// The whole body of `key` and its user metadata (`x-amz-meta-*`, names
    /// without the prefix) ([GetObject]).
    ///
    /// [GetObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html
    ///
    /// # Errors
    /// [`S3Error`].
    pub async fn get_with_metadata(
        &self,
        key: &str,
    ) -> Result<(Bytes, HashMap<String, String>), S3Error> {
        let output = self
            .get_object(key)
            .await
            .map_err(|err| self.error("GetObject", key, err))?;
        let metadata = output.metadata.clone().unwrap_or_default();
        Ok((self.collect(key, output.body).await?, metadata))
    }

    /// The whole body of `key`, or `None` when there is no such object
    /// ([GetObject] answering 404 `NoSuchKey`).
    ///
    /// [GetObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html
    ///
    /// # Errors
    /// [`S3Error`] for any other failure.
    pub async fn get_if_exists(&self, key: &str) -> Result<Option<Bytes>, S3Error> {
        match self.get_object(key).await {
            Ok(output) => self.collect(key, output.body).await.map(Some),
            Err(err) if is_missing_object(&err) => Ok(None),
            Err(err) => Err(self.error("GetObject", key, err)),
        }
    }

    /// The body of `key` as a stream, with its length in bytes when the
    /// response says it (`Content-Length`) ([GetObject]): the length is
    /// known before the body is read.
    ///
    /// [GetObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html
    ///
    /// # Errors
    /// [`S3Error`] up to the response headers; errors while reading the body
    /// come from the stream.
    pub async fn get_stream_with_length(
        &self,
        key: &str,
    ) -> Result<(Option<u64>, ByteStream), S3Error> {
        let output = self
            .get_object(key)
            .await
            .map_err(|err| self.error("GetObject", key, err))?;
        let length = output
            .content_length
            .and_then(|length| u64::try_from(length).ok());
        Ok((length, output.body))
    }

    /// The body of `key` as a stream, with its user metadata (`x-amz-meta-*`,
    /// names without the prefix) ([GetObject]): the metadata is known before
    /// the body is read.
    ///
    /// [GetObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html
    ///
    /// # Errors
    /// [`S3Error`] up to the response headers; errors while reading the body
    /// come from the stream.
    pub async fn get_stream_with_metadata(
        &self,
        key: &str,
    ) -> Result<(HashMap<String, String>, ByteStream), S3Error> {
        let output = self
            .get_object(key)
            .await
            .map_err(|err| self.error("GetObject", key, err))?;
        Ok((output.metadata.clone().unwrap_or_default(), output.body))
    }

    /// The whole body of `key` and its user metadata, or `None` when there
    /// is no such object ([GetObject] answering 404 `NoSuchKey`).
    ///
    /// [GetObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html
    ///
    /// # Errors
    /// [`S3Error`] for any other failure.
    pub async fn get_if_exists_with_metadata(
        &self,
        key: &str,
    ) -> Result<Option<(Bytes, HashMap<String, String>)>, S3Error> {
        match self.get_object(key).await {
            Ok(output) => {
                let metadata = output.metadata.clone().unwrap_or_default();
                Ok(Some((self.collect(key, output.body).await?, metadata)))
            }
            Err(err) if is_missing_object(&err) => Ok(None),
            Err(err) => Err(self.error("GetObject", key, err)),
        }
    }

    /// The body of `key` as a stream ([GetObject]): read it a buffer at a
    /// time instead of holding the whole object.
    ///
    /// [GetObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html
    ///
    /// # Errors
    /// [`S3Error`] up to the response headers; errors while reading the body
    /// come from the stream.
    pub async fn get_stream(&self, key: &str) -> Result<ByteStream, S3Error> {
        let output = self
            .get_object(key)
            .await
            .map_err(|err| self.error("GetObject", key, err))?;
        Ok(output.body)
    }

    async fn get_object(
        &self,
        key: &str,
    ) -> Result<GetObjectOutput, SdkError<GetObjectError, HttpResponse>> {
        self.client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
    }

    /// Reads a GetObject body to its end; a failure while reading is
    /// retriable.
    async fn collect(&self, key: &str, stream: ByteStream) -> Result<Bytes, S3Error> {
        let body = stream
            .collect()
            .await
            .map_err(|err| self.download_failed(key, Box::new(err)))?;
        Ok(body.into_bytes())
    }

    /// The error of a GetObject of `key` whose body failed to download
    /// after the response began (a dropped connection): retriable.
    pub fn download_failed(&self, key: &str, source: BoxError) -> S3Error {
        S3Error::Other {
            operation: "GetObject",
            bucket: self.bucket.clone(),
            key: key.to_owned(),
            retriable: true,
            throttled: false,
            source,
        }
    }

    /// The user metadata of `key` ([HeadObject]): the `x-amz-meta-*`
    /// headers, names without the prefix, lowercase; `None` when there is no
    /// such object (404).
    ///
    /// [HeadObject]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadObject.html
    ///
    /// # Errors
    /// [`S3Error`] for any other failure.
    pub async fn user_metadata(
        &self,
        key: &str,
    ) -> Result<Option<HashMap<String, String>>, S3Error> {
        let result = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await;
        match result {
            Ok(output) => Ok(Some(output.metadata.unwrap_or_default())),
            // HeadObject has no body: the SDK models its 404 as `NotFound`.
            Err(err) if matches!(err.as_service_error(), Some(HeadObjectError::NotFound(_))) => {
                Ok(None)
            }
            Err(err) => Err(self.error("HeadObject", key, err)),
        }
    }

    /// One page (up to 1,000 keys) of the keys under `prefix`
    /// ([ListObjectsV2]), in ascending UTF-8 binary order on S3 general
    /// purpose buckets.
    ///
    /// [ListObjectsV2]: https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html
    ///
    /// # Errors
    /// [`S3Error`].
    pub async fn list_page(
        &self,
        prefix: &str,
        continuation_token: Option<String>,
    ) -> Result<ListPage, S3Error> {
        let output = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_continuation_token(continuation_token)
            .send()
            .await
            .map_err(|err| self.error("ListObjectsV2", prefix, err))?;
        Ok(ListPage {
            keys: output
                .contents()
                .iter()
                .filter_map(|object| object.key().map(str::to_owned))
                .collect(),
            next_continuation_token: if output.is_truncated() == Some(true) {
                output.next_continuation_token().map(str::to_owned)
            } else {
                None
            },
        })
    }

    fn error<E>(
        &self,
        operation: &'static str,
        key: &str,
        err: SdkError<E, HttpResponse>,
    ) -> S3Error
    where
        E: Modeled,
    {
        if err
            .as_service_error()
            .is_some_and(Modeled::is_missing_bucket)
        {
            return S3Error::NoSuchBucket {
                bucket: self.bucket.clone(),
            };
        }
        let code = err.code();
        S3Error::Other {
            operation,
            bucket: self.bucket.clone(),
            key: key.to_owned(),
            retriable: is_retriable(&err),
            throttled: code.is_some_and(|code| THROTTLING_CODES.contains(&code))
                || matches!(http_status(&err), Some(429 | 503)),
            source: Box::new(err),
        }
    }
}

/// Whether a failed GetObject says there is no object under the key: the
/// modeled `NoSuchKey`, or a 404 that does not name a missing bucket (an
/// S3-compatible store's 404 with another code, or without a body).
fn is_missing_object(err: &SdkError<GetObjectError, HttpResponse>) -> bool {
    match err.as_service_error() {
        Some(GetObjectError::NoSuchKey(_)) => true,
        Some(other) => http_status(err) == Some(404) && !other.is_missing_bucket(),
        None => false,
    }
}

/// Whether a failed S3 call may succeed if retried after a backoff: a
/// transport or server failure (timeouts, 5xx, 429), or a response with one
/// of [`RETRIABLE_CODES`] or [`THROTTLING_CODES`] whatever its status.
pub(super) fn is_retriable<E>(err: &SdkError<E, HttpResponse>) -> bool
where
    E: ProvideErrorMetadata,
{
    is_transport_or_server_failure(err)
        || err
            .code()
            .is_some_and(|code| RETRIABLE_CODES.contains(&code) || THROTTLING_CODES.contains(&code))
}

/// The HTTP status of a service error response.
pub(super) fn http_status<E>(err: &SdkError<E, HttpResponse>) -> Option<u16> {
    match err {
        SdkError::ServiceError(context) => Some(context.raw().status().as_u16()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    use super::*;
    use crate::fake_aws::{http, s3_error};

    fn store_answering(status: u16, code: &'static str) -> ObjectStore {
        let put = mock!(Client::put_object).then_http_response(move || s3_error(status, code));
        let client = mock_client!(aws_sdk_s3, RuleMode::MatchAny, [&put], |c| c
            .retry_config(aws_smithy_types::retry::RetryConfig::disabled()));
        ObjectStore::new(client, "archive")
    }

    async fn put_error(status: u16, code: &'static str) -> S3Error {
        store_answering(status, code)
            .put_if_absent("k", Bytes::from_static(b"x"), "text/plain", &[])
            .await
            .unwrap_err()
    }

    #[tokio::test]
    async fn transient_s3_codes_are_retriable_whatever_their_status() {
        // Client-side statuses with codes that mean "try again".
        for (status, code) in [
            (400, "RequestTimeout"),
            (403, "RequestTimeTooSkewed"),
            (409, "ConditionalRequestConflict"),
            (409, "OperationAborted"),
            (400, "ServiceUnavailable"),
        ] {
            let err = put_error(status, code).await;
            assert!(err.is_retriable(), "{code}: {err:?}");
            assert!(
                matches!(
                    err,
                    S3Error::Other {
                        throttled: false,
                        ..
                    }
                ),
                "{code}: {err:?}"
            );
        }
        let slow_down = put_error(503, "SlowDown").await;
        assert!(slow_down.is_retriable());
        assert!(matches!(
            slow_down,
            S3Error::Other {
                throttled: true,
                ..
            }
        ));
    }

    #[tokio::test]
    async fn refusals_are_not_retriable_and_a_missing_bucket_is_named() {
        for (status, code) in [(403, "AccessDenied"), (400, "InvalidArgument")] {
            let err = put_error(status, code).await;
            assert!(!err.is_retriable(), "{code}: {err:?}");
        }
        let missing = put_error(404, "NoSuchBucket").await;
        assert!(matches!(missing, S3Error::NoSuchBucket { ref bucket } if bucket == "archive"));
    }

    #[tokio::test]
    async fn an_existing_key_is_an_outcome_not_an_error() {
        let outcome = store_answering(412, "PreconditionFailed")
            .put_if_absent("k", Bytes::from_static(b"x"), "text/plain", &[])
            .await
            .unwrap();
        assert_eq!(outcome, PutOutcome::AlreadyExists);
    }

    /// A store whose every call is answered with `response`.
    fn store_always(response: fn() -> HttpResponse) -> ObjectStore {
        let rules = [
            mock!(Client::get_object).then_http_response(response),
            mock!(Client::head_object).then_http_response(response),
            mock!(Client::head_bucket).then_http_response(response),
            mock!(Client::list_objects_v2).then_http_response(response),
        ];
        let client = mock_client!(
            aws_sdk_s3,
            RuleMode::MatchAny,
            [&rules[0], &rules[1], &rules[2], &rules[3]],
            |c| c.retry_config(aws_smithy_types::retry::RetryConfig::disabled())
        );
        ObjectStore::new(client, "archive")
    }

    #[tokio::test]
    async fn a_missing_object_is_none_and_a_missing_bucket_is_named() {
        let no_key = store_always(|| s3_error(404, "NoSuchKey"));
        assert!(no_key.get_if_exists("k").await.unwrap().is_none());
        let no_bucket = store_always(|| s3_error(404, "NoSuchBucket"));
        for err in [
            no_bucket.get_if_exists("k").await.unwrap_err(),
            no_bucket.list_page("p/", None).await.unwrap_err(),
        ] {
            assert!(matches!(err, S3Error::NoSuchBucket { .. }), "{err:?}");
        }
        // HEAD responses have no body: a bare 404.
        let not_found = store_always(|| http(404, ""));
        assert!(not_found.user_metadata("k").await.unwrap().is_none());
        let err = not_found.head_bucket().await.unwrap_err();
        assert!(matches!(err, S3Error::NoSuchBucket { .. }), "{err:?}");
        let denied = store_always(|| http(403, ""));
        for err in [
            denied.head_bucket().await.unwrap_err(),
            denied.user_metadata("k").await.unwrap_err(),
        ] {
            assert!(matches!(err, S3Error::Other { .. }), "{err:?}");
        }
    }
}
