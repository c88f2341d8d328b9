//! Plain S3 object calls: listing, getting, putting and deleting objects.

use std::collections::HashMap;

use anyhow::{Context as _, Result};
use aws_sdk_s3::primitives::ByteStream;

use crate::env::TestEnv;

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

/// An object's user metadata (the `x-amz-meta-*` headers, names without
/// that prefix), or `None` if there is no such key (`HeadObject`).
///
/// API: <https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadObject.html>
///
/// # Errors
/// Any other AWS error.
pub async fn head_object_metadata(
    env: &TestEnv,
    bucket: &str,
    key: &str,
) -> Result<Option<HashMap<String, String>>> {
    match env.s3.head_object().bucket(bucket).key(key).send().await {
        Ok(output) => Ok(Some(output.metadata().cloned().unwrap_or_default())),
        Err(err) => {
            let err = err.into_service_error();
            if err.is_not_found() {
                Ok(None)
            } else {
                Err(err).with_context(|| format!("failed to head s3://{bucket}/{key}"))
            }
        }
    }
}

/// Writes an object with user metadata (`PutObject` with `x-amz-meta-*`
/// headers), for harness self-tests that write what the daemon writes.
///
/// # Errors
/// Any AWS error.
pub async fn put_object_with_metadata(
    env: &TestEnv,
    bucket: &str,
    key: &str,
    body: Vec<u8>,
    metadata: &[(&str, &str)],
) -> Result<()> {
    let mut request = env
        .s3
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body));
    for (name, value) in metadata {
        request = request.metadata(*name, *value);
    }
    request
        .send()
        .await
        .with_context(|| format!("failed to put s3://{bucket}/{key}"))?;
    Ok(())
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
