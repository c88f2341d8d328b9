//! What most tests do: a fresh stream and bucket with unique names, default
//! test settings, waiting until the archive holds every produced record, and
//! a graceful stop.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::archive::{Archive, ArchiveReader, list_object_versions, overwritten_keys};
use crate::check::RecordId;
use crate::daemon::{Daemon, Settings};
use crate::env::{TestEnv, unique_name};
use crate::fixtures::{
    LeaseRow, ShardInfo, Versioning, create_bucket, create_stream, delete_lease_table,
    delete_stream, read_lease_rows,
};
use crate::producer::{ProducedRecord, RecordSpec, put_records};

/// A stream, a bucket and the daemon settings for them.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The clients.
    pub env: TestEnv,
    /// The stream's (unique) name.
    pub stream: String,
    /// The bucket's (unique) name.
    pub bucket: String,
    /// The stream's shards.
    pub shards: Vec<ShardInfo>,
    /// [`Settings::for_tests`] for this stream and bucket; adjust with
    /// [`Settings::set`].
    pub settings: Settings,
}

impl Scenario {
    /// Creates a stream of `shard_count` shards and a bucket, both named
    /// `unique_name(name)` (`name`: short, lowercase, `[a-z0-9-]`).
    ///
    /// # Errors
    /// Any AWS error while creating them.
    pub async fn create(
        env: &TestEnv,
        name: &str,
        shard_count: i32,
        versioning: Versioning,
    ) -> Result<Self> {
        let stream = unique_name(name);
        let bucket = unique_name(name);
        let shards = create_stream(env, &stream, shard_count).await?;
        create_bucket(env, &bucket, versioning).await?;
        println!(
            "scenario: stream {stream} ({shard_count} shards), bucket {bucket} ({versioning:?})"
        );
        Ok(Self {
            env: env.clone(),
            settings: Settings::for_tests(&stream, &bucket),
            stream,
            bucket,
            shards,
        })
    }

    /// A reader for the daemon's output (prefix from the settings).
    pub fn archive_reader(&self) -> ArchiveReader {
        ArchiveReader::new(&self.env, &self.bucket, &self.settings.prefix())
    }

    /// The lease table's rows (table name from the settings).
    ///
    /// # Errors
    /// As [`read_lease_rows`].
    pub async fn lease_rows(&self) -> Result<Vec<LeaseRow>> {
        read_lease_rows(&self.env, &self.settings.lease_table()).await
    }

    /// Contract line 2 on a versioned bucket: asserts that every key in the
    /// bucket has exactly one version and no delete marker (nothing was ever
    /// overwritten or deleted); returns the number of keys.
    ///
    /// # Panics
    /// When a key was overwritten, naming the keys, or the listing fails.
    pub async fn assert_nothing_overwritten(&self) -> usize {
        let versions = list_object_versions(&self.env, &self.bucket, "")
            .await
            .expect("ListObjectVersions");
        let overwritten = overwritten_keys(&versions);
        assert!(
            overwritten.is_empty(),
            "objects overwritten or deleted: {overwritten:#?}"
        );
        versions.len()
    }

    /// [`put_records`] to this stream.
    ///
    /// # Errors
    /// As [`put_records`].
    pub async fn put(&self, specs: &[RecordSpec]) -> Result<Vec<ProducedRecord>> {
        put_records(&self.env, &self.stream, specs).await
    }

    /// Starts the daemon with [`Scenario::settings`].
    ///
    /// # Errors
    /// As [`Daemon::spawn`].
    pub fn spawn(&self) -> Result<Daemon> {
        Daemon::spawn(&self.settings)
    }

    /// Deletes the stream and the lease table (best effort; the bucket is
    /// kept for inspection).
    pub async fn cleanup(&self) {
        if let Err(error) = delete_stream(&self.env, &self.stream).await {
            println!("cleanup: {error:#}");
        }
        if let Err(error) = delete_lease_table(&self.env, &self.settings.lease_table()).await {
            println!("cleanup: {error:#}");
        }
    }
}

/// Polls the archive until every record of `produced` is in it, failing
/// early if the daemon exits. Returns the last snapshot. Prints progress
/// every 10 s.
///
/// # Errors
/// The daemon exited (with its status and log tail); `timeout` passed (with
/// how many records are still missing and a few of them); an AWS error.
pub async fn wait_for_archive(
    reader: &mut ArchiveReader,
    produced: &[ProducedRecord],
    daemon: &mut Daemon,
    timeout: Duration,
) -> Result<Archive> {
    let wanted: HashSet<RecordId> = produced.iter().map(RecordId::of_produced).collect();
    let start = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let archive = reader.read().await?;
        let present: HashSet<RecordId> = archive.records().map(RecordId::of_archived).collect();
        let mut missing: Vec<&RecordId> = wanted.difference(&present).collect();
        if missing.is_empty() {
            println!(
                "all {} records archived in {} objects after {:.1?}",
                wanted.len(),
                archive.objects.len(),
                start.elapsed()
            );
            return Ok(archive);
        }
        if let Some(status) = daemon.exit_status() {
            bail!(
                "shardsink exited ({status}) with {} of {} records still missing; log {}:\n{}",
                missing.len(),
                wanted.len(),
                daemon.log_path().display(),
                daemon.log_tail(60)
            );
        }
        if start.elapsed() >= timeout {
            missing.sort();
            let sample: Vec<String> = missing.iter().take(10).map(ToString::to_string).collect();
            bail!(
                "timed out after {timeout:?}: {} of {} records not archived (e.g. {}); {} objects so far",
                missing.len(),
                wanted.len(),
                sample.join(", "),
                archive.objects.len()
            );
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            println!(
                "waiting: {} of {} records archived in {} objects after {:.0?}",
                wanted.len() - missing.len(),
                wanted.len(),
                archive.objects.len(),
                start.elapsed()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// SIGTERM, then waits up to `timeout` for the exit, which must be code 0
/// (graceful shutdown: flush, checkpoint, exit 0).
///
/// # Errors
/// The signal failed, the daemon did not exit in time, or exited otherwise
/// than with code 0 (with the log tail).
pub async fn stop_gracefully(daemon: &mut Daemon, timeout: Duration) -> Result<()> {
    if let Some(status) = daemon.exit_status() {
        bail!(
            "shardsink had already exited ({status}) before SIGTERM; log:\n{}",
            daemon.log_tail(60)
        );
    }
    daemon.terminate()?;
    daemon.wait_exit_ok(timeout).await
}

/// The usual end of a run: [`wait_for_archive`], then [`stop_gracefully`]
/// (exit code 0 within 40 s, scaled), then a last read of the archive, which
/// is returned for the test's own checks.
///
/// # Errors
/// As the two functions, or an AWS error on the last read.
pub async fn archive_then_stop(
    reader: &mut ArchiveReader,
    produced: &[ProducedRecord],
    daemon: &mut Daemon,
    timeout: Duration,
) -> Result<Archive> {
    archive_then_stop_all(reader, produced, vec![daemon], timeout).await
}

/// [`archive_then_stop`] for several workers: waits for the archive while
/// watching the first (its log is shown if it exits), then stops each
/// gracefully, in order, then reads the archive once more.
///
/// # Errors
/// As [`archive_then_stop`]; also when `daemons` is empty.
pub async fn archive_then_stop_all(
    reader: &mut ArchiveReader,
    produced: &[ProducedRecord],
    mut daemons: Vec<&mut Daemon>,
    timeout: Duration,
) -> Result<Archive> {
    let Some(lead) = daemons.first_mut() else {
        bail!("no daemon to wait on");
    };
    wait_for_archive(reader, produced, lead, timeout).await?;
    for daemon in daemons {
        stop_gracefully(daemon, crate::scaled(Duration::from_secs(40))).await?;
    }
    reader.read().await
}
