//! What most tests do: a fresh stream and bucket with unique names, default
//! test settings, waiting until the archive holds every produced record, a
//! graceful stop and the exactly-once checks ([`Scenario::finish`]), and
//! deleting the stream, bucket and tables when the scenario goes
//! ([`crate::cleanup`]).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::archive::{
    Archive, ArchiveReader, KeyLayout, ObjectFormat, ReaderOptions, list_object_versions,
    overwritten_keys,
};
use crate::check::{
    RecordId, checkpoint_problems, clean_shutdown_problems, each_record_in_one_place,
    exactly_once_with_rejected, prefix_problems,
};
use crate::cleanup::{ResourceGuard, Resources};
use crate::daemon::{Daemon, Settings, run_verify};
use crate::env::{TestEnv, unique_name};
use crate::fixtures::{
    LeaseRow, ShardInfo, Versioning, create_bucket, create_stream, read_lease_rows,
    split_shard_in_half,
};
use crate::producer::{ProducedRecord, RecordSpec, RetryingProducer, put_records};
use crate::stream::{GroundTruth, read_stream};
use crate::wait::{scaled, wait_for};

/// A stream, a bucket and the daemon settings for them.
///
/// The stream, the bucket (with every object and version), the lease
/// table and the DynamoDB event table are deleted when the scenario is
/// dropped — also when the test panics — or earlier by
/// [`Scenario::cleanup`]; daemon logs stay. The tables deleted are those
/// [`Scenario::settings`] names at creation (`shardsink-{stream}` and
/// `shardsink-{stream}-events`). Declare daemons after the scenario, so that they
/// are dropped (killed) before it and cannot recreate its tables.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The clients.
    pub env: TestEnv,
    /// The stream's (unique) name.
    pub stream: String,
    /// The bucket's (unique) name.
    pub bucket: String,
    /// Whether the bucket keeps every version ([`Scenario::finish`] then
    /// checks that nothing was overwritten).
    pub versioning: Versioning,
    /// The stream's shards.
    pub shards: Vec<ShardInfo>,
    /// [`Settings::for_tests`] for this stream and bucket; adjust with
    /// [`Settings::set`].
    pub settings: Settings,
    /// Deletes the resources once, when the last clone goes.
    resources: Arc<ResourceGuard>,
}

impl Scenario {
    /// Creates a stream of `shard_count` shards and a bucket, both named
    /// `unique_name(name)` (`name`: short, lowercase, `[a-z0-9-]`). Whatever
    /// was created is deleted again if the other creation fails.
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
        let settings = Settings::for_tests(&stream, &bucket);
        let resources = ResourceGuard::new(Resources {
            stream: stream.clone(),
            bucket: bucket.clone(),
            lease_table: settings.lease_table(),
            event_table: settings.event_table(),
        });
        let shards = create_stream(env, &stream, shard_count).await?;
        create_bucket(env, &bucket, versioning).await?;
        println!(
            "scenario: stream {stream} ({shard_count} shards), bucket {bucket} ({versioning:?})"
        );
        Ok(Self {
            env: env.clone(),
            settings,
            stream,
            bucket,
            versioning,
            shards,
            resources,
        })
    }

    /// A reader for the daemon's output: prefix, error prefix, key layout,
    /// Parquet schema and stream from [`Scenario::settings`]
    /// ([`ReaderOptions::of_settings`]).
    pub fn archive_reader(&self) -> ArchiveReader {
        ArchiveReader::with_options(
            &self.env,
            &self.bucket,
            ReaderOptions::of_settings(&self.settings),
        )
    }

    /// The lease table's rows (table name from the settings).
    ///
    /// # Errors
    /// As [`read_lease_rows`].
    pub async fn lease_rows(&self) -> Result<Vec<LeaseRow>> {
        read_lease_rows(&self.env, &self.settings.lease_table()).await
    }

    /// Splits `parent` in half ([`split_shard_in_half`]), waits until
    /// `daemon` has read it to its end and committed its last batch (its
    /// row at `SHARD_END`), then SIGKILLs `daemon` and deletes `store`, its
    /// event store directory: a host lost with its disk right after a
    /// shard ended. Returns the children, lower hash keys first.
    ///
    /// # Panics
    /// A step fails or times out (with the daemon's log tail).
    pub async fn split_then_lose_the_host(
        &self,
        parent: &str,
        daemon: &mut Daemon,
        store: &Path,
    ) -> Vec<String> {
        let children = split_shard_in_half(&self.env, &self.stream, parent)
            .await
            .unwrap_or_else(|error| panic!("{error:#}"));
        println!("split {parent} into {children:?}");
        self.wait_for_shard_end(parent, scaled(Duration::from_secs(60)))
            .await
            .unwrap_or_else(|error| panic!("{error:#}\n{}", daemon.log_tail(60)));
        daemon.kill().unwrap();
        std::fs::remove_dir_all(store)
            .unwrap_or_else(|error| panic!("failed to delete {}: {error}", store.display()));
        children
    }

    /// Waits until `shard`'s lease row is checkpointed at `SHARD_END` (the
    /// closed shard read to its end and its last batch committed).
    ///
    /// # Errors
    /// Not so within `timeout` (with the row last seen, or the last error
    /// reading the table).
    pub async fn wait_for_shard_end(&self, shard: &str, timeout: Duration) -> Result<()> {
        wait_for(timeout, &format!("{shard} at SHARD_END"), || async move {
            let rows = self.lease_rows().await?;
            let row = rows.iter().find(|row| row.lease_key == shard);
            // Not yet: an error, so that a timeout names the checkpoint.
            anyhow::ensure!(
                row.is_some_and(|row| row.checkpoint.as_deref() == Some("SHARD_END")),
                "checkpoint {:?}",
                row.map(|row| &row.checkpoint)
            );
            Ok(Some(()))
        })
        .await
    }

    /// Waits until every lease row is owned, by the workers of `owners` in
    /// those numbers (`[("a", 1), ("b", 1)]`: one lease each, and no
    /// other row), and returns the owner of each shard.
    ///
    /// # Errors
    /// Not so within `timeout` (with the last owners seen, or the last
    /// error reading the table).
    pub async fn wait_for_lease_owners(
        &self,
        owners: &[(&str, usize)],
        timeout: Duration,
    ) -> Result<BTreeMap<String, String>> {
        let wanted: BTreeMap<&str, usize> = owners.iter().copied().collect();
        wait_for(timeout, &format!("leases owned {wanted:?}"), || {
            let wanted = &wanted;
            async move {
                let rows = self.lease_rows().await?;
                let by_shard: BTreeMap<String, String> = rows
                    .into_iter()
                    .map(|row| {
                        (
                            row.lease_key,
                            row.lease_owner.unwrap_or_else(|| "-".to_owned()),
                        )
                    })
                    .collect();
                let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
                for owner in by_shard.values() {
                    *counts.entry(owner.as_str()).or_default() += 1;
                }
                // Not yet: an error, so that a timeout names the owners.
                anyhow::ensure!(counts == *wanted, "owners {by_shard:?}");
                Ok(Some(by_shard))
            }
        })
        .await
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

    /// Puts `producer`'s next round into this stream and adds what it put
    /// to `produced`.
    ///
    /// # Panics
    /// No round is left, or a put fails.
    pub async fn put_round(
        &self,
        producer: &mut RetryingProducer,
        produced: &mut Vec<ProducedRecord>,
    ) {
        let round = producer.rounds() - producer.rounds_left();
        let records = producer
            .put_next_round(&self.env, &self.stream)
            .await
            .unwrap_or_else(|error| panic!("round {round}: {error:#}"));
        println!("round {round}: {} user records put", records.len());
        produced.extend(records);
    }

    /// Starts the daemon with [`Scenario::settings`].
    ///
    /// # Errors
    /// As [`Daemon::spawn`].
    pub fn spawn(&self) -> Result<Daemon> {
        Daemon::spawn(&self.settings)
    }

    /// The usual end of a daemon run, as [`Finish`] says:
    /// 1. wait until the archive holds every record of `produced` (failing
    ///    early if the first daemon exits), then stop each daemon gracefully
    ///    ([`stop_gracefully`], exit code 0 within 40 s, scaled), in order;
    /// 2. read the archive once more;
    /// 3. with [`Finish::ground_truth`], read the stream back: it must hold
    ///    what was produced, and every line's arrival time must be its
    ///    record's;
    /// 4. every produced record in exactly one object, nothing else, in the
    ///    contract's format, the records of [`Finish::rejected`] (and only
    ///    they) under the error prefix ([`exactly_once_with_rejected`],
    ///    [`crate::Report::assert_exact`]); with [`Finish::events`], a
    ///    record may be under the duplicates prefix instead, and only kept
    ///    records are held to [`Finish::rejected`]
    ///    ([`each_record_in_one_place`]);
    /// 5. the layout record under the prefix is the settings' key layout and
    ///    time bucket, and every main object is in the settings' format (or
    ///    one of [`Finish::formats`]);
    /// 6. on a versioned bucket, nothing overwritten or deleted
    ///    ([`Scenario::assert_nothing_overwritten`]) and one version per
    ///    listed key;
    /// 7. with [`Finish::clean_shutdown`], every checkpoint at its shard's
    ///    last record and no pending batch;
    /// 8. with [`Finish::verify_deep`], `shardsink verify --deep` finds the
    ///    archive exact ([`Scenario::assert_verify_deep_exact`]).
    ///
    /// The stream, bucket and table stay until the scenario is dropped, so
    /// the test can go on checking.
    ///
    /// # Panics
    /// When any step fails, with what failed.
    pub async fn finish(
        &self,
        reader: &mut ArchiveReader,
        produced: &[ProducedRecord],
        how: Finish<'_>,
    ) -> Finished {
        let archive = if how.daemons.is_empty() {
            reader.read().await
        } else {
            archive_then_stop_all(reader, produced, how.daemons, how.timeout).await
        }
        .unwrap_or_else(|error| panic!("{error:#}"));
        let truth = if how.ground_truth {
            Some(self.read_truth(produced).await)
        } else {
            None
        };
        let mut report = if how.events {
            each_record_in_one_place(produced, &archive, &how.rejected)
        } else {
            exactly_once_with_rejected(produced, &archive, &how.rejected)
        };
        if let Some(truth) = &truth {
            report.check_arrival_times(&archive, truth);
        }
        report
            .archive_problems
            .retain(|problem| !how.planted.contains(&problem.object_key));
        report.assert_exact();
        assert_eq!(
            archive.layout_record.as_deref(),
            Some(KeyLayout::of_settings(&self.settings).record().as_str()),
            "the daemon records its key layout under the prefix"
        );
        let formats = if how.formats.is_empty() {
            vec![ObjectFormat::of_settings(&self.settings)]
        } else {
            how.formats.clone()
        };
        for object in &archive.objects {
            let format = object.format.as_deref().map(ObjectFormat::parse);
            assert!(
                matches!(&format, Some(Ok(f)) if formats.iter().any(|want| f.conforms_to(want))),
                "{} has the format {:?}, expected one of {:?}",
                object.key.key,
                object.format,
                formats.iter().map(ToString::to_string).collect::<Vec<_>>()
            );
        }
        if self.versioning == Versioning::Enabled {
            let versions = self.assert_nothing_overwritten().await;
            assert_eq!(
                versions,
                archive.object_count() + archive.stray_keys.len() + 1,
                "versions vs objects and the layout record"
            );
        }
        let rows = if how.clean_shutdown {
            Some(self.assert_clean_shutdown(produced).await)
        } else {
            None
        };
        if how.verify_deep {
            self.assert_verify_deep_exact(&archive).await;
        }
        Finished {
            archive,
            truth,
            rows,
        }
    }

    /// The stream read back, asserted to hold what was produced.
    async fn read_truth(&self, produced: &[ProducedRecord]) -> GroundTruth {
        let truth = read_stream(&self.env, &self.stream)
            .await
            .unwrap_or_else(|error| panic!("{error:#}"));
        let harness = truth.check_produced(produced);
        assert!(
            harness.is_empty(),
            "the stream does not hold what the producers reported: {harness:#?}"
        );
        truth
    }

    /// The lease rows after a graceful stop, asserted to be clean.
    async fn assert_clean_shutdown(&self, produced: &[ProducedRecord]) -> Vec<LeaseRow> {
        let rows = self
            .lease_rows()
            .await
            .unwrap_or_else(|error| panic!("{error:#}"));
        let problems = clean_shutdown_problems(&rows, produced);
        assert!(
            problems.is_empty(),
            "after SIGTERM: {problems:#?}\nrows: {rows:#?}"
        );
        rows
    }

    /// `shardsink verify --deep` on this scenario's archive, with the
    /// stream (so the gap check runs) and the prefixes and lease table of
    /// [`Scenario::settings`]: it must exit 0, end with `exact`, and count
    /// the main objects, error objects and records of `archive` (read
    /// after the daemons stopped) — every object read in its format and
    /// key layout, none unreadable, no error object without its main
    /// object. With event deduplication, also its duplicates and decisions
    /// objects, no record in two places (E1) and, with `--event-id`, no
    /// event kept twice within the window (E2).
    ///
    /// # Panics
    /// When verify cannot run or finds anything else, with what it printed.
    pub async fn assert_verify_deep_exact(&self, archive: &Archive) {
        let envs = self.settings.archive_env_vars();
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let run = run_verify(&["--deep"], &envs)
            .await
            .unwrap_or_else(|error| panic!("{error:#}"));
        assert_eq!(
            run.status.code(),
            Some(0),
            "verify --deep must find the archive exact:\n{}",
            run.stdout
        );
        assert_eq!(run.stdout.lines().last(), Some("exact"), "{}", run.stdout);
        let records = |objects: &[Arc<crate::archive::ArchivedObject>]| -> usize {
            objects.iter().map(|o| o.records.len()).sum()
        };
        let mut expected = vec![
            format!("objects:      {}\n", archive.objects.len()),
            format!("records:      {} lines,", records(&archive.objects)),
            "unreadable:   0\n".to_owned(),
        ];
        if !archive.error_objects.is_empty() {
            expected.push(format!(
                "error objects: {}, {} records ",
                archive.error_objects.len(),
                records(&archive.error_objects)
            ));
        }
        if !archive.duplicate_objects.is_empty() {
            expected.push(format!(
                "duplicates objects: {}, {} records ",
                archive.duplicate_objects.len(),
                records(&archive.duplicate_objects)
            ));
        }
        if !archive.decisions_objects.is_empty() {
            expected.push(format!(
                "decisions objects: {} ",
                archive.decisions_objects.len()
            ));
            expected.push(
                "one place:    0 records twice, 0 batches whose objects do not add up (".to_owned(),
            );
        }
        if self.settings.get("event-id").is_some() {
            // Each event once a window (E2), checked by verify itself
            // against the stream's records.
            expected.push(
                "once a window: 0 events kept twice, 0 duplicates not naming a kept copy ("
                    .to_owned(),
            );
        }
        for line in expected {
            assert!(
                run.stdout.contains(&line),
                "{line:?} not in verify's summary:\n{}",
                run.stdout
            );
        }
        assert!(!run.stdout.contains("has no main object"), "{}", run.stdout);
    }

    /// Contract lines 3 and 4 right after a crash (`what` names it): every
    /// record at or below a checkpoint is placed, and each shard's placed
    /// records are a gap-free prefix of `produced`. Returns the lease rows
    /// and the archive it read.
    ///
    /// # Panics
    /// When the lease table or the archive cannot be read, or with the
    /// problems found.
    pub async fn assert_frozen(
        &self,
        reader: &mut ArchiveReader,
        produced: &[ProducedRecord],
        what: &str,
    ) -> (Vec<LeaseRow>, Archive) {
        let rows = self.lease_rows().await.unwrap_or_else(|e| panic!("{e:#}"));
        let archive = reader.read().await.unwrap_or_else(|e| panic!("{e:#}"));
        let problems = checkpoint_problems(&rows, produced, &archive);
        assert!(problems.is_empty(), "line 3 after {what}: {problems:#?}");
        let gaps = prefix_problems(produced, &archive);
        assert!(gaps.is_empty(), "line 4 after {what}: {gaps:#?}");
        (rows, archive)
    }

    /// Deletes the stream, the bucket (every object and version) and the
    /// lease table now (best effort: failures are printed). Dropping the
    /// scenario does the same; after this call it does nothing.
    pub async fn cleanup(&self) {
        self.resources.cleanup(&self.env).await;
    }

    /// The names of the resources the scenario deletes.
    pub fn resources(&self) -> &Resources {
        self.resources.resources()
    }
}

/// How [`Scenario::finish`] ends a run: which daemons to stop, and which
/// checks to add.
#[derive(Debug)]
pub struct Finish<'d> {
    daemons: Vec<&'d mut Daemon>,
    timeout: Duration,
    ground_truth: bool,
    clean_shutdown: bool,
    planted: Vec<String>,
    rejected: HashSet<RecordId>,
    formats: Vec<ObjectFormat>,
    verify_deep: bool,
    events: bool,
}

impl<'d> Finish<'d> {
    /// Waits up to `timeout_secs` seconds (scaled by
    /// `SHARDSINK_E2E_TIMEOUT_SCALE`) for the archive while watching
    /// `daemon`, then stops it gracefully.
    pub fn stopping(daemon: &'d mut Daemon, timeout_secs: u64) -> Self {
        Self::stopping_all(vec![daemon], timeout_secs)
    }

    /// Several workers: waits up to `timeout_secs` seconds (scaled) while
    /// watching the first (its log is shown if it exits), then stops each
    /// gracefully, in order.
    pub fn stopping_all(daemons: Vec<&'d mut Daemon>, timeout_secs: u64) -> Self {
        Self {
            daemons,
            timeout: crate::scaled(Duration::from_secs(timeout_secs)),
            ground_truth: false,
            clean_shutdown: false,
            planted: Vec::new(),
            rejected: HashSet::new(),
            formats: Vec::new(),
            verify_deep: false,
            events: false,
        }
    }

    /// The test stopped its daemons itself: no waiting, only the last read
    /// and the checks.
    pub fn stopped() -> Self {
        Self::stopping_all(Vec::new(), 0)
    }

    /// Also reads the stream back ([`read_stream`]): it must hold what the
    /// producers reported, and every line's `approximateArrivalTimestamp`
    /// must be its record's ([`crate::Report::check_arrival_times`]).
    pub fn ground_truth(mut self) -> Self {
        self.ground_truth = true;
        self
    }

    /// Also asserts a clean shutdown ([`clean_shutdown_problems`]): every
    /// shard that got records checkpointed at its last record, no pending
    /// batch.
    pub fn clean_shutdown(mut self) -> Self {
        self.clean_shutdown = true;
        self
    }

    /// Objects the test wrote itself: their format problems are not the
    /// daemon's and are left out of the exactly-once report.
    pub fn planted(mut self, keys: &[String]) -> Self {
        self.planted = keys.to_vec();
        self
    }

    /// The records the format cannot represent: they, and only they, must
    /// be under the error prefix (without this, nothing may be).
    pub fn rejected(mut self, ids: impl IntoIterator<Item = RecordId>) -> Self {
        self.rejected = ids.into_iter().collect();
        self
    }

    /// Also runs `shardsink verify --deep` on the archive at the end
    /// ([`Scenario::assert_verify_deep_exact`]).
    pub fn verify_deep(mut self) -> Self {
        self.verify_deep = true;
        self
    }

    /// Event deduplication is on (`--event-id`): a record is in exactly one
    /// of the main, error and duplicates prefixes (statement E1,
    /// [`each_record_in_one_place`]); which records are duplicates is for
    /// [`crate::check::events::each_event_once`].
    pub fn events(mut self) -> Self {
        self.events = true;
        self
    }

    /// The formats main objects may have (several when a test changes
    /// `--format` between runs); without this, the settings' format
    /// ([`ObjectFormat::of_settings`]).
    pub fn formats(mut self, formats: Vec<ObjectFormat>) -> Self {
        self.formats = formats;
        self
    }
}

/// What [`Scenario::finish`] read, for the test's own checks.
#[derive(Debug)]
pub struct Finished {
    /// The archive after the daemons stopped.
    pub archive: Archive,
    /// The stream read back, with [`Finish::ground_truth`].
    pub truth: Option<GroundTruth>,
    /// The lease rows after the stop, with [`Finish::clean_shutdown`].
    pub rows: Option<Vec<LeaseRow>>,
}

/// Polls the archive until every record of `produced` is in it (in a
/// committed batch: kept, or under the duplicates prefix), failing early if
/// the daemon exits. Returns the last snapshot. Prints progress
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
        let present: HashSet<RecordId> = archive
            .placed_records()
            .map(RecordId::of_archived)
            .collect();
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

/// Polls the archive until it places more than `placed` records (in
/// committed batches: kept, or under the duplicates prefix), failing early
/// if the daemon exits. Returns the snapshot.
///
/// # Errors
/// The daemon exited (with its log tail); `timeout` passed; an AWS error.
pub async fn wait_for_growth(
    reader: &mut ArchiveReader,
    daemon: &mut Daemon,
    placed: usize,
    timeout: Duration,
) -> Result<Archive> {
    let start = Instant::now();
    loop {
        let archive = reader.read().await?;
        let count = archive.placed_count();
        if count > placed {
            return Ok(archive);
        }
        if let Some(status) = daemon.exit_status() {
            bail!(
                "shardsink exited ({status}) with {count} records placed; log {}:\n{}",
                daemon.log_path().display(),
                daemon.log_tail(60)
            );
        }
        if start.elapsed() >= timeout {
            bail!("the archive stayed at {count} records placed for {timeout:?}");
        }
        tokio::time::sleep(crate::wait::POLL_INTERVAL).await;
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

/// Waits for the archive while watching the first daemon (its log is shown
/// if it exits), then stops each gracefully, in order, then reads the
/// archive once more.
///
/// # Errors
/// As [`wait_for_archive`] and [`stop_gracefully`]; an AWS error on the last
/// read; `daemons` is empty.
async fn archive_then_stop_all(
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
