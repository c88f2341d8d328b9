//! Deleting what a [`Scenario`](crate::Scenario) created — its stream, its
//! bucket with every object, version and delete marker, its lease table and
//! the DynamoDB event table a daemon may have created — explicitly
//! ([`ResourceGuard::cleanup`]) or when the guard is dropped, which also
//! happens when a test panics. Daemon logs are files under
//! `<target>/e2e-logs` and are never touched.
//!
//! # Cleaning up in `Drop`
//! `Drop` is synchronous, and it runs wherever the scenario is dropped: at
//! the end of a test body inside `Runtime::block_on`, on a tokio worker
//! thread (a panicking spawned task), on a current-thread runtime, or while
//! a runtime is shutting down. So the guard does not reuse the test's
//! runtime or its clients: it starts a thread with its own current-thread
//! runtime and its own [`TestEnv`] (fresh clients from the same endpoint
//! variables), and waits for that thread, at most [`DROP_TIMEOUT`] (scaled).
//! The test's clients would not do: their pooled connections are driven by
//! tasks of the test's runtime, which cannot run while a current-thread
//! runtime is blocked in `Drop`. `tokio::task::block_in_place` with
//! `Handle::block_on` was not chosen for the same reason, and because it
//! panics on a current-thread runtime (a panic in `Drop` while unwinding
//! aborts the process).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_kinesis::operation::describe_stream_summary::DescribeStreamSummaryError;
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::operation::head_bucket::HeadBucketError;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};

use crate::archive::{list_object_versions, list_objects};
use crate::env::{TestEnv, env_nonempty};
use crate::fixtures::{delete_lease_table, delete_stream};
use crate::wait::scaled;

/// Set to `1` to keep every scenario's stream, bucket and tables (to
/// inspect them after a run); their names are printed instead.
pub const KEEP_VAR: &str = "SHARDSINK_E2E_KEEP_RESOURCES";

/// How long a dropped guard waits for its deletions (scaled by
/// `SHARDSINK_E2E_TIMEOUT_SCALE`) before it leaves them to finish in the
/// background.
pub const DROP_TIMEOUT: Duration = Duration::from_secs(120);

/// The AWS resources of one scenario, by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resources {
    /// The Kinesis stream.
    pub stream: String,
    /// The S3 bucket.
    pub bucket: String,
    /// The DynamoDB lease table.
    pub lease_table: String,
    /// The DynamoDB event table, which a daemon with
    /// `--event-dedup-store dynamodb` creates.
    pub event_table: String,
}

impl Resources {
    /// Deletes the stream, the bucket (every version first), the lease
    /// table and the DynamoDB event table; what does not exist is skipped.
    /// Every deletion is tried; returns what was deleted, as text.
    ///
    /// # Errors
    /// The failed deletions, all of them in one message.
    pub async fn delete(&self, env: &TestEnv) -> Result<String> {
        let mut deleted = Vec::new();
        let mut failed = Vec::new();
        match delete_stream(env, &self.stream).await {
            Ok(()) => deleted.push(format!("stream {}", self.stream)),
            Err(error) => failed.push(format!("{error:#}")),
        }
        match delete_bucket(env, &self.bucket).await {
            Ok(Some(versions)) => deleted.push(format!(
                "bucket {} ({versions} objects and versions)",
                self.bucket
            )),
            Ok(None) => {}
            Err(error) => failed.push(format!("{error:#}")),
        }
        for table in [&self.lease_table, &self.event_table] {
            match delete_lease_table(env, table).await {
                Ok(true) => deleted.push(format!("table {table}")),
                Ok(false) => {}
                Err(error) => failed.push(format!("{error:#}")),
            }
        }
        anyhow::ensure!(failed.is_empty(), "{}", failed.join("; "));
        Ok(deleted.join(", "))
    }

    /// Which of the four still exist (a stream being deleted counts), as
    /// text such as `stream s`.
    ///
    /// # Errors
    /// An AWS error other than "not found".
    pub async fn existing(&self, env: &TestEnv) -> Result<Vec<String>> {
        let stream = env
            .kinesis
            .describe_stream_summary()
            .stream_name(&self.stream)
            .send()
            .await;
        let bucket = env.s3.head_bucket().bucket(&self.bucket).send().await;
        let table = env
            .dynamodb
            .describe_table()
            .table_name(&self.lease_table)
            .send()
            .await;
        let event_table = env
            .dynamodb
            .describe_table()
            .table_name(&self.event_table)
            .send()
            .await;
        let found = [
            (
                exists(
                    stream,
                    DescribeStreamSummaryError::is_resource_not_found_exception,
                )?,
                format!("stream {}", self.stream),
            ),
            (
                exists(bucket, HeadBucketError::is_not_found)?,
                format!("bucket {}", self.bucket),
            ),
            (
                exists(table, DescribeTableError::is_resource_not_found_exception)?,
                format!("table {}", self.lease_table),
            ),
            (
                exists(
                    event_table,
                    DescribeTableError::is_resource_not_found_exception,
                )?,
                format!("table {}", self.event_table),
            ),
        ];
        Ok(found
            .into_iter()
            .filter_map(|(exists, what)| exists.then_some(what))
            .collect())
    }
}

/// Whether a describe or head call found its resource: `false` when the
/// service error is `not_found`.
///
/// # Errors
/// Any other error.
fn exists<O, E, R>(outcome: Result<O, SdkError<E, R>>, not_found: fn(&E) -> bool) -> Result<bool>
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match outcome {
        Ok(_) => Ok(true),
        Err(err) if err.as_service_error().is_some_and(not_found) => Ok(false),
        Err(err) => Err(err).context("failed to look a resource up"),
    }
}

/// Deletes a bucket with everything in it: every object version and delete
/// marker (`ListObjectVersions`, then `DeleteObjects` by version id), then
/// any object still listed, then the bucket. Returns how many versions and
/// objects were deleted, or `None` when there is no such bucket.
///
/// API: <https://docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteObjects.html>,
/// <https://docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteBucket.html>
///
/// # Errors
/// Any other AWS error, or a key `DeleteObjects` reports as not deleted.
pub async fn delete_bucket(env: &TestEnv, bucket: &str) -> Result<Option<usize>> {
    let head = env.s3.head_bucket().bucket(bucket).send().await;
    if !exists(head, HeadBucketError::is_not_found)
        .with_context(|| format!("failed to head bucket {bucket}"))?
    {
        return Ok(None);
    }
    let versions: Vec<ObjectIdentifier> = list_object_versions(env, bucket, "")
        .await?
        .into_iter()
        .map(|v| identifier(v.key, v.version_id))
        .collect::<Result<_>>()?;
    let count = versions.len();
    delete_objects(env, bucket, versions).await?;
    // Unversioned objects some servers leave out of the versions listing.
    let objects: Vec<ObjectIdentifier> = list_objects(env, bucket, "")
        .await?
        .into_iter()
        .map(|o| identifier(o.key, None))
        .collect::<Result<_>>()?;
    let count = count + objects.len();
    delete_objects(env, bucket, objects).await?;
    env.s3
        .delete_bucket()
        .bucket(bucket)
        .send()
        .await
        .with_context(|| format!("failed to delete bucket {bucket}"))?;
    Ok(Some(count))
}

fn identifier(key: String, version_id: Option<String>) -> Result<ObjectIdentifier> {
    ObjectIdentifier::builder()
        .key(key)
        .set_version_id(version_id)
        .build()
        .context("an object identifier without a key")
}

/// `DeleteObjects` in calls of at most 1,000 keys.
async fn delete_objects(env: &TestEnv, bucket: &str, objects: Vec<ObjectIdentifier>) -> Result<()> {
    for chunk in objects.chunks(1_000) {
        let delete = Delete::builder()
            .set_objects(Some(chunk.to_vec()))
            .quiet(true)
            .build()
            .context("a delete request without objects")?;
        let output = env
            .s3
            .delete_objects()
            .bucket(bucket)
            .delete(delete)
            .send()
            .await
            .with_context(|| format!("failed to delete objects of {bucket}"))?;
        if let Some(error) = output.errors().first() {
            anyhow::bail!(
                "failed to delete s3://{bucket}/{} ({} keys failed): {}",
                error.key().unwrap_or_default(),
                output.errors().len(),
                error.message().unwrap_or_default()
            );
        }
    }
    Ok(())
}

/// Deletes [`Resources`] once: by [`ResourceGuard::cleanup`], or else when
/// dropped (see the module docs). Share it with `Arc` so that clones of its
/// owner delete once, when the last one goes.
#[derive(Debug)]
pub struct ResourceGuard {
    resources: Resources,
    done: AtomicBool,
}

impl ResourceGuard {
    /// A guard for `resources`, which may not exist yet (deleting what does
    /// not exist is skipped).
    pub fn new(resources: Resources) -> Arc<Self> {
        Arc::new(Self {
            resources,
            done: AtomicBool::new(false),
        })
    }

    /// The resources guarded.
    pub fn resources(&self) -> &Resources {
        &self.resources
    }

    /// Deletes the resources now, on the caller's runtime (best effort:
    /// failures are printed). Later calls, and the drop, do nothing.
    pub async fn cleanup(&self, env: &TestEnv) {
        if self.take() {
            report("cleanup", self.resources.delete(env).await);
        }
    }

    /// Whether this call is the one that deletes: the first, and only when
    /// [`KEEP_VAR`] is not set.
    fn take(&self) -> bool {
        if self.done.swap(true, Ordering::SeqCst) {
            return false;
        }
        if env_nonempty(KEEP_VAR).is_some_and(|v| v != "0") {
            println!("{KEEP_VAR}: keeping {:?}", self.resources);
            return false;
        }
        true
    }
}

impl Drop for ResourceGuard {
    fn drop(&mut self) {
        if !self.take() {
            return;
        }
        let what = if std::thread::panicking() {
            "cleanup after a panic"
        } else {
            "cleanup"
        };
        let resources = self.resources.clone();
        let (sender, receiver) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("e2e-cleanup".to_owned())
            .spawn(move || {
                let _ = sender.send(delete_on_own_runtime(&resources));
            });
        if let Err(error) = spawned {
            eprintln!(
                "{what}: cannot start a thread: {error}; left {:?}",
                self.resources
            );
            return;
        }
        let timeout = scaled(DROP_TIMEOUT);
        match receiver.recv_timeout(timeout) {
            Ok(outcome) => report(what, outcome),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => eprintln!(
                "{what}: not done after {timeout:?}, left to finish in the background: {:?}",
                self.resources
            ),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => eprintln!(
                "{what}: the cleanup thread panicked; left {:?}",
                self.resources
            ),
        }
    }
}

/// [`Resources::delete`] on a new current-thread runtime with new clients.
fn delete_on_own_runtime(resources: &Resources) -> Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to build a runtime")?;
    runtime.block_on(async {
        let env = TestEnv::from_env()
            .await?
            .context("no endpoint variables any more")?;
        resources.delete(&env).await
    })
}

fn report(what: &str, outcome: Result<String>) {
    match outcome {
        Ok(deleted) if deleted.is_empty() => println!("{what}: nothing left to delete"),
        Ok(deleted) => println!("{what}: deleted {deleted}"),
        Err(error) => eprintln!("{what}: {error:#}"),
    }
}
