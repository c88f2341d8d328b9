//! `--format iceberg`: records become rows of an Apache Iceberg table, each
//! in exactly one live row (docs/DESIGN.md, "Iceberg tables", T1), across
//! crashes at every step of a batch's and a commit's life, lease moves,
//! two committers at once, a lost lease table, the table dropped from its
//! catalog and registered again, snapshot expiry, and resharding; with typed
//! columns (`--parquet-schema`), the records the table cannot take each
//! once under the error prefix, through a crash after their error object,
//! and no record rejected that the `parquet` format takes. With
//! `--event-id` and the local store, a producer's retries across a SIGKILL
//! and a lost store directory, then a batch staged and not committed lost
//! with the lease table and the store; and across a split with the store
//! lost once the parent ended: each produced record in exactly one place
//! (a live row, an error or a duplicates object), each event kept once,
//! each duplicate naming a kept copy of its event before it in its shard or
//! in an ancestor.
//!
//! The table is read back independently of the daemon by
//! `tests/iceberg/read_table.py`, with pyiceberg and with DuckDB; every
//! check holds in both readings ([`shardsink_e2e::table`]). The catalog is
//! a SQL catalog on a SQLite file beside the daemon logs, the warehouse in
//! the test's bucket (versioned: nothing the daemon writes may be
//! overwritten). Records are identified by (shard, sequence number,
//! sub-sequence number) and compared with what the producers put, payload
//! and partition key included.
//!
//! The readers need the local S3 server they can reach by path (moto's):
//! these tests run on the moto profile; [`reshard`] and
//! [`each_event_once_across_a_split_and_a_lost_event_store`] need a Kinesis
//! that reshards, and run on the fanout profile (kinesis-mock for Kinesis, moto
//! for S3 and DynamoDB). Elsewhere they skip for that profile. The Python
//! with pyiceberg and DuckDB is `SHARDSINK_E2E_DUCKDB_PYTHON`
//! (`scripts/test` installs it into `.local/duckdb/`).
//!
//! Daemons commit every 2 s (`--iceberg-commit-interval`) with a 1 s buffer
//! age, on a few hundred records, so the module takes a few minutes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use shardsink_e2e::check::RecordId;
use shardsink_e2e::check::events::{Lineage, json_pointer_id, rebuilt_window_from_s3};
use shardsink_e2e::daemon::{CapturedRun, log_dir, run_verify};
use shardsink_e2e::env::profile;
use shardsink_e2e::fixtures::{delete_lease_table, list_shards, split_shard_in_half};
use shardsink_e2e::payloads::{SCHEMA_FILE, event_payloads, schema_payloads};
use shardsink_e2e::producer::{
    BackgroundOptions, BackgroundProducer, RetryOptions, RetryingProducer, small_record_specs,
};
use shardsink_e2e::table::{
    IcebergTable, TableRead, TableRow, checkpoint_problems, read_committer, reader_python,
    shard_rows, staged_batch_count,
};
use shardsink_e2e::{
    Daemon, ProducedRecord, Scenario, Settings, TestEnv, Versioning, outcome, require_env, scaled,
    stop_gracefully, wait_until,
};

/// The profile whose S3 the readers reach (moto).
const MOTO: &str = "moto";
/// The profile with moto's S3 and a Kinesis that reshards (kinesis-mock).
const FANOUT: &str = "fanout";
/// Why a test runs on [`MOTO`] only.
const READERS: &str = "the table readers need moto's S3";
/// Why a test that reshards runs on [`FANOUT`] only.
const RESHARDING: &str =
    "needs moto's S3 with a Kinesis that reshards (moto routes records to a closed parent)";

/// The failpoints of a batch's and a commit's life on the Iceberg path, in
/// order, each with the `fail` spec that fires it: the batch steps on the
/// third batch of the run, the commit steps on the run's first commit
/// (which has batches to append: the points are passed only then).
const STEPS: [(&str, &str); 7] = [
    ("before-pending", "2*off->return"),
    ("after-pending", "2*off->return"),
    ("after-data-files-put", "2*off->return"),
    ("after-stage", "2*off->return"),
    ("before-table-commit", "return"),
    ("after-table-commit", "return"),
    ("after-publish", "return"),
];

/// The daemon's log line (JSON) for a table commit that landed.
const TABLE_COMMIT: &str = r#""message":"table commit""#;

/// A scenario writing into an Iceberg table.
struct TableScenario {
    scenario: Scenario,
    table: IcebergTable,
    /// The scenario's settings with the table's ([`IcebergTable::settings`]).
    settings: Settings,
}

impl TableScenario {
    /// A stream of `shards` shards, a versioned bucket, and a table whose
    /// catalog file is beside the daemon logs.
    async fn create(env: &TestEnv, python: PathBuf, name: &str, shards: i32) -> Self {
        let scenario = Scenario::create(env, name, shards, Versioning::Enabled)
            .await
            .unwrap();
        let table = IcebergTable::new(python, &log_dir(&scenario.stream), &scenario.bucket);
        let settings = table
            .settings(scenario.settings.clone())
            .set("buffer-max-records", "40");
        println!("table catalog: {}", table.catalog_uri());
        Self {
            scenario,
            table,
            settings,
        }
    }

    /// Runs `shardsink verify --deep` on the table with the archive
    /// settings of `settings` (event settings included), asserts that it
    /// finds the table exact (exit 0), and returns the run.
    async fn assert_verify_deep(&self, settings: &Settings) -> CapturedRun {
        let mut args = vec!["--deep".to_owned()];
        args.extend(self.table.verify_args());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let envs = settings.archive_env_vars();
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let run = run_verify(&args, &envs).await.unwrap();
        assert_eq!(
            run.status.code(),
            Some(0),
            "verify --deep must find the table exact:\n{}\n{}",
            run.stdout,
            run.stderr
        );
        run
    }

    /// Waits up to `secs` seconds (scaled) until the table holds every
    /// record of `expected`, watching `daemons`.
    async fn wait_for(
        &self,
        expected: &[ProducedRecord],
        daemons: &mut [&mut Daemon],
        secs: u64,
    ) -> TableRead {
        self.table
            .wait_for_records(expected, daemons, scaled(Duration::from_secs(secs)))
            .await
            .unwrap_or_else(|error| panic!("{error:#}"))
    }

    /// The table read now; it must exist.
    async fn read(&self) -> TableRead {
        self.table
            .read_existing()
            .await
            .unwrap_or_else(|error| panic!("{error:#}"))
    }

    /// Right after a crash (`what`): no shard's checkpoint passes a record
    /// that is not in the table. Returns the shard rows.
    async fn assert_checkpoints_committed(
        &self,
        produced: &[ProducedRecord],
        what: &str,
    ) -> Vec<shardsink_e2e::LeaseRow> {
        let rows = shard_rows(self.scenario.lease_rows().await.unwrap());
        match self.table.read().await.unwrap_or_else(|e| panic!("{e:#}")) {
            Some(read) => {
                let problems = checkpoint_problems(&rows, produced, &read);
                assert!(problems.is_empty(), "after {what}: {problems:#?}");
            }
            None => {
                let moved: Vec<_> = rows
                    .iter()
                    .filter(|row| row.checkpoint_sequence_number().is_some())
                    .map(|row| (&row.lease_key, &row.checkpoint))
                    .collect();
                assert!(
                    moved.is_empty(),
                    "after {what}: checkpoints moved before the table existed: {moved:?}"
                );
            }
        }
        rows
    }
}

/// The reader's Python when the servers are those of `wanted`; otherwise
/// `None` after recording the skip for that profile.
fn on_profile(wanted: &str, reason: &str) -> Option<PathBuf> {
    if profile().as_deref() != Some(wanted) {
        outcome::skip_unless_profile(wanted, reason);
        return None;
    }
    reader_python()
}

/// Waits for a daemon started with a failpoint that aborts to reach it.
async fn wait_for_abort(daemon: &mut Daemon, point: &str) {
    let status = daemon
        .wait_exit(scaled(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|error| {
            panic!(
                "the failpoint {point} was not reached: {error:#}\n{}",
                daemon.log_tail(60)
            )
        });
    let log = daemon.log();
    assert!(
        !status.success()
            && log.contains("failpoint reached: aborting")
            && log.contains(&format!(r#""failpoint":"{point}""#)),
        "expected an abort at {point}, got {status}:\n{}",
        daemon.log_tail(60)
    );
    println!("aborted at {point} ({status})");
}

/// How many lines of `daemon`'s log contain `text`.
fn log_count(daemon: &Daemon, text: &str) -> usize {
    daemon.log().lines().filter(|l| l.contains(text)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_land_in_the_table_once() {
    let env = require_env!();
    let Some(python) = on_profile(MOTO, READERS) else {
        return;
    };
    let t = TableScenario::create(&env, python, "ice-once", 2).await;
    let produced = t
        .scenario
        .put(&small_record_specs(400, 1, "once"))
        .await
        .unwrap();

    let start = Instant::now();
    let mut daemon = Daemon::spawn(&t.settings).unwrap();
    t.wait_for(&produced, &mut [&mut daemon], 120).await;
    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    let ran = start.elapsed();

    let read = t.read().await;
    read.assert_once(&produced, true, "after SIGTERM");
    // At most one commit per interval (2 s): a commit per batch would
    // exceed this on any machine.
    let commits = read.shardsink_commits();
    let bound = ran.as_secs_f64() / 2.0 + 1.0;
    println!(
        "{commits} shardsink commits ({} snapshots) in a run of {ran:.1?}: at most {bound:.1} allowed",
        read.snapshots.len()
    );
    assert!(
        commits >= 1 && commits as f64 <= bound,
        "{commits} commits in {ran:.1?}"
    );
    let rows = shard_rows(t.scenario.lease_rows().await.unwrap());
    let problems = checkpoint_problems(&rows, &produced, &read);
    assert!(problems.is_empty(), "after SIGTERM: {problems:#?}");
    println!(
        "checkpoints after SIGTERM: {:?}; staged batches left: {}",
        rows.iter()
            .map(|r| (&r.lease_key, &r.checkpoint))
            .collect::<Vec<_>>(),
        staged_batch_count(&rows)
    );
    t.scenario.assert_nothing_overwritten().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_at_every_step_lose_and_double_nothing() {
    let env = require_env!();
    let Some(python) = on_profile(MOTO, READERS) else {
        return;
    };
    let t = TableScenario::create(&env, python, "ice-kills", 2).await;
    let mut produced = Vec::new();
    let started = Instant::now();

    for (index, (point, spec)) in STEPS.iter().enumerate() {
        produced.extend(
            t.scenario
                .put(&small_record_specs(160, 10 + index as u64, point))
                .await
                .unwrap(),
        );
        let mut daemon =
            Daemon::spawn(&t.settings.clone().failpoints(format!("{point}={spec}"))).unwrap();
        wait_for_abort(&mut daemon, point).await;
        let rows = t
            .assert_checkpoints_committed(&produced, &format!("the abort at {point}"))
            .await;
        println!(
            "after the abort at {point}: {} staged batches in the lease rows",
            staged_batch_count(&rows)
        );

        // Restart without the failpoint: everything so far, once.
        let mut daemon = Daemon::spawn(&t.settings).unwrap();
        let read = t.wait_for(&produced, &mut [&mut daemon], 120).await;
        read.assert_once(&produced, true, &format!("after recovering from {point}"));
        daemon.kill().unwrap();
    }

    // SIGKILLs at random moments.
    let mut rng = StdRng::seed_from_u64(shardsink_e2e::env::seed("iceberg kills", None));
    for kill in 0..3u64 {
        produced.extend(
            t.scenario
                .put(&small_record_specs(150, 50 + kill, "random kill"))
                .await
                .unwrap(),
        );
        let mut daemon = Daemon::spawn(&t.settings).unwrap();
        let delay = Duration::from_millis(rng.random_range(1_500..=5_000));
        // Sleeping is the point here: the kill lands at a random moment.
        tokio::time::sleep(delay).await;
        assert!(
            daemon.is_running(),
            "shardsink exited on its own: {}",
            daemon.log_tail(60)
        );
        daemon.kill().unwrap();
        t.assert_checkpoints_committed(&produced, &format!("a SIGKILL after {delay:?}"))
            .await;
    }

    // A last clean run.
    let mut daemon = Daemon::spawn(&t.settings).unwrap();
    t.wait_for(&produced, &mut [&mut daemon], 120).await;
    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    let read = t.read().await;
    read.assert_once(&produced, true, "at the end");
    println!(
        "{} runs in {:.1?}: {} shardsink commits",
        STEPS.len() * 2 + 4,
        started.elapsed(),
        read.shardsink_commits()
    );
    t.scenario.assert_nothing_overwritten().await;

    t.assert_verify_deep(&t.settings).await;
}

/// A typed table (`--parquet-schema`): `settings` with the schema file
/// `schema` written beside the logs.
fn with_schema(t: &TableScenario, schema: &str) -> Settings {
    let path = log_dir(&t.scenario.stream).join("schema.json");
    std::fs::write(&path, schema).unwrap();
    t.settings
        .clone()
        .set("parquet-schema", path.to_str().unwrap())
}

/// Each record under the error prefix and how often it is there (committed
/// error objects or not: a table batch has no main object).
async fn error_prefix_counts(t: &TableScenario) -> BTreeMap<RecordId, (usize, String)> {
    let archive = t.scenario.archive_reader().read().await.unwrap();
    let mut counts: BTreeMap<RecordId, (usize, String)> = BTreeMap::new();
    for object in archive
        .error_objects
        .iter()
        .chain(&archive.uncommitted_error_objects)
    {
        for record in &object.records {
            let entry = counts
                .entry(RecordId::of_archived(record))
                .or_insert_with(|| (0, record.error_message.clone().unwrap_or_default()));
            entry.0 += 1;
        }
    }
    counts
}

/// The records `rejected` each once under the error prefix, and no other.
fn error_prefix_problems(
    counts: &BTreeMap<RecordId, (usize, String)>,
    rejected: &HashSet<RecordId>,
) -> Vec<String> {
    counts
        .iter()
        .filter(|(id, (count, _))| *count != 1 || !rejected.contains(*id))
        .map(|(id, (count, message))| {
            format!("{id} {count} times under the error prefix: {message}")
        })
        .chain(
            rejected
                .iter()
                .filter(|id| !counts.contains_key(*id))
                .map(|id| format!("{id} rejected but not under the error prefix")),
        )
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_error_put_with_a_typed_table() {
    let env = require_env!();
    let Some(python) = on_profile(MOTO, READERS) else {
        return;
    };
    let t = TableScenario::create(&env, python, "ice-typed", 2).await;
    let settings = with_schema(&t, SCHEMA_FILE);
    let payloads = schema_payloads(320, 5, "typed");
    let produced = t.scenario.put(&payloads.specs).await.unwrap();
    let rejected: HashSet<RecordId> = payloads.rejected_ids(&produced).into_iter().collect();
    assert!(!rejected.is_empty());

    // The second batch's error object written, its data files not.
    let mut daemon =
        Daemon::spawn(&settings.clone().failpoints("after-error-put=1*off->return")).unwrap();
    wait_for_abort(&mut daemon, "after-error-put").await;

    let kept: Vec<ProducedRecord> = produced
        .iter()
        .filter(|r| !rejected.contains(&RecordId::of_produced(r)))
        .cloned()
        .collect();
    let mut daemon = Daemon::spawn(&settings).unwrap();
    t.wait_for(&kept, &mut [&mut daemon], 120).await;
    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    // Typed columns: the payload is compared through the ids only.
    t.read().await.assert_once(&kept, false, "typed table");
    let problems = error_prefix_problems(&error_prefix_counts(&t).await, &rejected);
    assert!(problems.is_empty(), "error prefix: {problems:#?}");
    t.scenario.assert_nothing_overwritten().await;
}

/// A `json` column of `--parquet-schema` holds any JSON value as its text
/// in the `parquet` format (docs/CONFIGURATION.md, "Parquet schema"); the
/// table created from the same schema must take the same records, so that
/// switching the format to `iceberg` rejects nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_column_takes_any_json_value() {
    let env = require_env!();
    let Some(python) = on_profile(MOTO, READERS) else {
        return;
    };
    let t = TableScenario::create(&env, python, "ice-json", 2).await;
    let settings = with_schema(&t, SCHEMA_FILE);
    let payloads = schema_payloads(120, 6, "json column");
    let produced = t.scenario.put(&payloads.specs).await.unwrap();
    let rejected: HashSet<RecordId> = payloads.rejected_ids(&produced).into_iter().collect();
    let all: HashSet<RecordId> = produced.iter().map(RecordId::of_produced).collect();

    // Wait until every record is placed: in the table or under the error
    // prefix.
    let mut daemon = Daemon::spawn(&settings).unwrap();
    let start = Instant::now();
    let mut placed;
    loop {
        let in_table: HashSet<RecordId> = match t.table.read().await {
            Ok(Some(read)) => read.pyiceberg_rows.iter().map(TableRow::id).collect(),
            _ => HashSet::new(),
        };
        let errors = error_prefix_counts(&t).await;
        placed = in_table.len() + errors.len();
        if all
            .iter()
            .all(|id| in_table.contains(id) || errors.contains_key(id))
        {
            break;
        }
        assert!(
            daemon.is_running(),
            "shardsink exited:\n{}",
            daemon.log_tail(60)
        );
        assert!(
            start.elapsed() < scaled(Duration::from_secs(90)),
            "{placed} of {} records placed after 90 s",
            all.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    let problems = error_prefix_problems(&error_prefix_counts(&t).await, &rejected);
    assert!(
        problems.is_empty(),
        "{} records under the error prefix that the parquet format takes, or missing there \
         (of {} produced, {} to reject): {:#?}",
        problems.len(),
        produced.len(),
        rejected.len(),
        problems.iter().take(10).collect::<Vec<_>>()
    );
    let kept: Vec<ProducedRecord> = produced
        .iter()
        .filter(|r| !rejected.contains(&RecordId::of_produced(r)))
        .cloned()
        .collect();
    t.read().await.assert_once(&kept, false, "json column");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_and_a_lease_move() {
    let env = require_env!();
    let Some(python) = on_profile(MOTO, READERS) else {
        return;
    };
    let t = TableScenario::create(&env, python, "ice-workers", 4).await;
    let lease_table = t.settings.lease_table();
    let committer = |owner: &'static str| {
        let env = env.clone();
        let lease_table = lease_table.clone();
        move || {
            let env = env.clone();
            let lease_table = lease_table.clone();
            async move {
                let row = read_committer(&env, &lease_table).await?;
                Ok::<_, anyhow::Error>(row.and_then(|r| r.owner).as_deref() == Some(owner))
            }
        }
    };
    let mut produced = t
        .scenario
        .put(&small_record_specs(200, 21, "two workers 1"))
        .await
        .unwrap();

    // w1 commits first; its commits after the first stop, once planned and
    // with their state written, for 8 s before the catalog commit.
    let mut w1 = Daemon::spawn(
        &t.settings
            .clone()
            .set("worker-id", "w1")
            .failpoints("before-table-commit=1*off->return(delay:8000)"),
    )
    .unwrap();
    wait_until(
        scaled(Duration::from_secs(60)),
        "w1 is the committer",
        committer("w1"),
    )
    .await
    .unwrap();
    let mut w2 = Daemon::spawn(&t.settings.clone().set("worker-id", "w2")).unwrap();
    wait_until(scaled(Duration::from_secs(60)), "w1 commits", || async {
        log_count(&w1, TABLE_COMMIT) >= 1
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", w1.log_tail(60)));
    produced.extend(
        t.scenario
            .put(&small_record_specs(200, 22, "two workers 2"))
            .await
            .unwrap(),
    );

    // Freeze w1 inside its next commit, past the failover time: w2 takes
    // the committer row and commits; then w1 goes on with its stale plan.
    wait_until(
        scaled(Duration::from_secs(60)),
        "w1 waits before a table commit",
        || async { log_count(&w1, "failpoint reached: waiting") >= 1 },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", w1.log_tail(60)));
    w1.pause().unwrap();
    println!("w1 frozen before its table commit");
    wait_until(
        scaled(Duration::from_secs(60)),
        "w2 is the committer and commits",
        || {
            let row = committer("w2")();
            let commits = log_count(&w2, TABLE_COMMIT);
            async move { Ok::<_, anyhow::Error>(row.await? && commits >= 1) }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", w2.log_tail(60)));
    let before = t.read().await;
    let lines = w1.log().lines().count();
    w1.resume().unwrap();
    println!(
        "w1 resumed; the table had {} snapshots",
        before.snapshots.len()
    );
    // The stale commit is refused or finds its batches committed; either
    // way w1 logs on.
    wait_until(
        scaled(Duration::from_secs(30)),
        "w1 logs after its resume",
        || async { w1.log().lines().count() > lines },
    )
    .await
    .unwrap();
    let read = t.wait_for(&produced, &mut [&mut w2, &mut w1], 120).await;
    read.assert_once(&produced, true, "after two committers at once");
    let after: Vec<String> = w1.log().lines().skip(lines).map(str::to_owned).collect();
    println!(
        "w1 after its resume:\n{}",
        after
            .iter()
            .filter(|l| l.contains("commit"))
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );

    // A lease move: kill w1 mid-run; w2 takes its shards.
    produced.extend(
        t.scenario
            .put(&small_record_specs(200, 23, "two workers 3"))
            .await
            .unwrap(),
    );
    w1.kill().unwrap();
    t.wait_for(&produced, &mut [&mut w2], 120).await;
    stop_gracefully(&mut w2, scaled(Duration::from_secs(40)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    let read = t.read().await;
    read.assert_once(&produced, true, "at the end");
    assert!(
        log_count(&w1, TABLE_COMMIT) >= 1 && log_count(&w2, TABLE_COMMIT) >= 1,
        "both workers commit"
    );
    println!(
        "table commits: w1 {}, w2 {}; {} snapshots",
        log_count(&w1, TABLE_COMMIT),
        log_count(&w2, TABLE_COMMIT),
        read.snapshots.len()
    );
    t.scenario.assert_nothing_overwritten().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lease_table() {
    let env = require_env!();
    let Some(python) = on_profile(MOTO, READERS) else {
        return;
    };
    let t = TableScenario::create(&env, python, "ice-lost", 2).await;
    let mut produced = t
        .scenario
        .put(&small_record_specs(200, 31, "lost table 1"))
        .await
        .unwrap();
    let mut daemon = Daemon::spawn(&t.settings).unwrap();
    t.wait_for(&produced, &mut [&mut daemon], 120).await;
    daemon.kill().unwrap();

    // Stage a batch and stop before it is committed.
    produced.extend(
        t.scenario
            .put(&small_record_specs(200, 32, "lost table 2"))
            .await
            .unwrap(),
    );
    let mut daemon =
        Daemon::spawn(&t.settings.clone().failpoints("after-stage=1*off->return")).unwrap();
    wait_for_abort(&mut daemon, "after-stage").await;
    let rows = shard_rows(t.scenario.lease_rows().await.unwrap());
    let staged = staged_batch_count(&rows);
    assert!(staged > 0, "no staged batch at the abort: {rows:#?}");
    let read = t.read().await;
    assert!(
        !read
            .missing_from_either(&produced.iter().map(RecordId::of_produced).collect())
            .is_empty(),
        "every record is committed already: nothing staged would be lost"
    );
    let lease_table = t.settings.lease_table();
    assert!(delete_lease_table(&env, &lease_table).await.unwrap());
    println!("deleted {lease_table} with {staged} staged batches");

    // Restart with other batch boundaries: the batches read again do not
    // line up with the staged ones.
    produced.extend(
        t.scenario
            .put(&small_record_specs(200, 33, "lost table 3"))
            .await
            .unwrap(),
    );
    let mut daemon = Daemon::spawn(&t.settings.clone().set("buffer-max-records", "27")).unwrap();
    t.wait_for(&produced, &mut [&mut daemon], 120).await;
    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    let read = t.read().await;
    read.assert_once(&produced, true, "after the lost lease table");
    let listed =
        shardsink_e2e::archive::list_object_versions(&env, &t.scenario.bucket, "warehouse/")
            .await
            .unwrap();
    let data_files = listed
        .iter()
        .filter(|v| v.key.ends_with(".parquet"))
        .count();
    println!(
        "{} live data files, {data_files} data files in S3 (the rest are orphans)",
        read.data_files.len()
    );
    t.scenario.assert_nothing_overwritten().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reshard() {
    let env = require_env!();
    let Some(python) = on_profile(FANOUT, RESHARDING) else {
        return;
    };
    let t = TableScenario::create(&env, python, "ice-reshard", 2).await;
    let settings = t.settings.clone().set("shard-sync-interval", "2s");
    let producer = BackgroundProducer::start(
        &env,
        &t.scenario.stream,
        BackgroundOptions {
            records_per_second: 60,
            seed: shardsink_e2e::env::seed("iceberg reshard", None),
            label: "iceberg reshard".to_owned(),
            ..BackgroundOptions::default()
        },
    );
    let mut daemon = Daemon::spawn(&settings).unwrap();
    wait_for_rows(&t, &daemon).await;

    let parent = "shardId-000000000000";
    let children = split_shard_in_half(&env, &t.scenario.stream, parent)
        .await
        .unwrap();
    println!("split {parent} into {children:?}");

    // When a child's rows first show, every record of the parent is there.
    let first_child = wait_until_child_rows(&t, &children, &mut daemon).await;
    let parent_records: Vec<ProducedRecord> = producer
        .produced()
        .into_iter()
        .filter(|r| r.shard_id == parent)
        .collect();
    let present: HashSet<RecordId> = first_child
        .pyiceberg_rows
        .iter()
        .map(TableRow::id)
        .collect();
    let missing: Vec<String> = parent_records
        .iter()
        .map(RecordId::of_produced)
        .filter(|id| !present.contains(id))
        .map(|id| id.to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "a child's rows are in the table before the parent's: {missing:?}"
    );

    let produced = producer.stop().await.unwrap();
    let by_shard: HashMap<&str, usize> = produced.iter().fold(HashMap::new(), |mut m, r| {
        *m.entry(r.shard_id.as_str()).or_default() += 1;
        m
    });
    println!("produced per shard: {by_shard:?}");
    assert!(
        children.iter().any(|c| by_shard.contains_key(c.as_str())),
        "records went to the children"
    );
    t.wait_for(&produced, &mut [&mut daemon], 120).await;
    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    t.read()
        .await
        .assert_once(&produced, true, "after the split");
    let rows = shard_rows(t.scenario.lease_rows().await.unwrap());
    let row = rows.iter().find(|r| r.lease_key == parent);
    assert_eq!(
        row.and_then(|r| r.checkpoint.as_deref()),
        Some("SHARD_END"),
        "the parent is checkpointed at SHARD_END once its last batch is committed: {rows:#?}"
    );
}

/// Waits until the table has rows.
async fn wait_for_rows(t: &TableScenario, daemon: &Daemon) {
    wait_until(
        scaled(Duration::from_secs(90)),
        "rows in the table",
        || async {
            Ok::<_, anyhow::Error>(
                t.table
                    .read()
                    .await?
                    .is_some_and(|r| !r.pyiceberg_rows.is_empty()),
            )
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", daemon.log_tail(60)));
}

/// Polls the table until it has a row of one of `children`; returns that
/// reading.
async fn wait_until_child_rows(
    t: &TableScenario,
    children: &[String],
    daemon: &mut Daemon,
) -> TableRead {
    let start = Instant::now();
    loop {
        if let Ok(Some(read)) = t.table.read().await
            && read
                .pyiceberg_rows
                .iter()
                .any(|row| children.contains(&row.shard_id))
        {
            return read;
        }
        assert!(
            daemon.is_running(),
            "shardsink exited: {}",
            daemon.log_tail(60)
        );
        assert!(
            start.elapsed() < scaled(Duration::from_secs(90)),
            "no row of {children:?} in the table after 90 s:\n{}",
            daemon.log_tail(60)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Where each produced record is with `--event-id`: live rows of the table
/// (in both readings) and records of the error and duplicates objects.
struct EventPlaces {
    /// Every live row's record, per reading.
    readings: Vec<(&'static str, Vec<RecordId>)>,
    /// Records under the error prefix (kept, but not rows).
    errors: Vec<RecordId>,
    /// Records under the duplicates prefix, each with the copy it names.
    duplicates: Vec<(RecordId, Option<RecordId>)>,
}

impl EventPlaces {
    /// The table (empty before its first commit) and the error and
    /// duplicates objects, read now. A table batch writes no main object,
    /// so the archive reader lists its side objects as uncommitted.
    async fn read(t: &TableScenario) -> Self {
        let read = t.table.read().await.unwrap_or_else(|e| panic!("{e:#}"));
        let readings = match &read {
            Some(read) => read
                .readings()
                .into_iter()
                .map(|(reader, rows)| (reader, rows.iter().map(TableRow::id).collect()))
                .collect(),
            None => vec![("pyiceberg", Vec::new()), ("DuckDB", Vec::new())],
        };
        let archive = t.scenario.archive_reader().read().await.unwrap();
        let records = |objects: &[std::sync::Arc<shardsink_e2e::archive::ArchivedObject>]| {
            objects
                .iter()
                .flat_map(|o| o.records.clone())
                .collect::<Vec<_>>()
        };
        let mut errors = records(&archive.error_objects);
        errors.extend(records(&archive.uncommitted_error_objects));
        let mut duplicates = records(&archive.duplicate_objects);
        duplicates.extend(records(&archive.uncommitted_duplicate_objects));
        Self {
            readings,
            errors: errors.iter().map(RecordId::of_archived).collect(),
            duplicates: duplicates
                .iter()
                .map(|record| {
                    let of = record.duplicate_of.as_ref().map(|copy| RecordId {
                        shard_id: copy.shard_id.clone(),
                        sequence_number: copy.sequence_number.clone(),
                        sub_sequence_number: copy.sub_sequence_number,
                    });
                    (RecordId::of_archived(record), of)
                })
                .collect(),
        }
    }

    /// How many places each record has in `reading`'s rows and the
    /// objects.
    fn counts(&self, reading: &[RecordId]) -> HashMap<RecordId, usize> {
        let mut counts: HashMap<RecordId, usize> = HashMap::new();
        for id in reading
            .iter()
            .chain(&self.errors)
            .chain(self.duplicates.iter().map(|(id, _)| id))
        {
            *counts.entry(id.clone()).or_default() += 1;
        }
        counts
    }

    /// Whether every record of `produced` has a place in both readings.
    fn holds(&self, produced: &[ProducedRecord]) -> bool {
        self.readings.iter().all(|(_, rows)| {
            let counts = self.counts(rows);
            produced
                .iter()
                .all(|record| counts.contains_key(&RecordId::of_produced(record)))
        })
    }

    /// Every way the places differ from "each produced record in exactly
    /// one place, each event (id and payload) kept once, every duplicate
    /// naming a kept copy of its event before it in its shard or in an
    /// ancestor of the shard (`lineage`)", in each reading.
    fn problems(&self, produced: &[ProducedRecord], lineage: &Lineage) -> Vec<String> {
        let id_of = json_pointer_id("/id");
        let by_id: HashMap<RecordId, &ProducedRecord> = produced
            .iter()
            .map(|record| (RecordId::of_produced(record), record))
            .collect();
        let event = |id: &RecordId| {
            let record = by_id.get(id)?;
            Some((id_of(record)?, record.data.clone()))
        };
        let mut problems = Vec::new();
        for (reader, rows) in &self.readings {
            let counts = self.counts(rows);
            for record in produced {
                let id = RecordId::of_produced(record);
                match counts.get(&id).copied().unwrap_or(0) {
                    1 => {}
                    n => problems.push(format!("{reader}: {id:?} in {n} places")),
                }
            }
            problems.extend(
                counts
                    .keys()
                    .filter(|id| !by_id.contains_key(id))
                    .map(|id| format!("{reader}: {id:?} was not produced")),
            );
            let kept: HashSet<&RecordId> = rows.iter().chain(&self.errors).collect();
            let mut kept_events: HashMap<(String, Vec<u8>), usize> = HashMap::new();
            for id in &kept {
                if let Some(event) = event(id) {
                    *kept_events.entry(event).or_default() += 1;
                }
            }
            let mut produced_events: HashSet<(String, Vec<u8>)> = HashSet::new();
            produced_events.extend(by_id.keys().filter_map(&event));
            for produced_event in &produced_events {
                match kept_events.get(produced_event).copied().unwrap_or(0) {
                    1 => {}
                    n => problems.push(format!(
                        "{reader}: event {:?} kept {n} times",
                        produced_event.0
                    )),
                }
            }
            for (id, of) in &self.duplicates {
                let named = of.as_ref().filter(|of| {
                    kept.contains(of)
                        && lineage.precedes(of, id)
                        && event(of).is_some()
                        && event(of) == event(id)
                });
                if named.is_none() {
                    problems.push(format!(
                        "{reader}: duplicate {id:?} names {of:?}, not a kept copy of its event before it"
                    ));
                }
            }
        }
        problems
    }
}

/// `t`'s settings with `--event-id json-pointer:/id` and the local store
/// in `store`.
fn event_settings(t: &TableScenario, store: &Path) -> Settings {
    t.settings
        .clone()
        .set("event-id", "json-pointer:/id")
        .set("event-dedup-store", "local")
        .set("event-dedup-dir", store.to_str().unwrap())
}

/// A producer that retries on purpose, over `rounds` rounds of `events`
/// events (one in six without an id), with `seed`.
fn retrying_producer(
    t: &TableScenario,
    events: usize,
    rounds: usize,
    seed: u64,
) -> RetryingProducer {
    let payloads = event_payloads(events, seed, "ice-ev", 6);
    let options = RetryOptions {
        rounds,
        kpl_share: 0.3,
        other_shard_share: 0.0,
        shards: t.scenario.shards.clone(),
    };
    RetryingProducer::plan(&payloads.specs, &options, seed)
}

/// Waits until every record of `produced` is in the table or an object,
/// watching `daemon`.
async fn wait_placed(t: &TableScenario, produced: &[ProducedRecord], daemon: &mut Daemon) {
    wait_until(
        scaled(Duration::from_secs(120)),
        "every record in the table or an object",
        || async { EventPlaces::read(t).await.holds(produced) },
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}\n{}", daemon.log_tail(60)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_event_once_across_a_kill_and_a_lost_event_store() {
    let env = require_env!();
    let Some(python) = on_profile(MOTO, READERS) else {
        return;
    };
    let seed = shardsink_e2e::env::seed("iceberg events", None);
    let t = TableScenario::create(&env, python, "ice-events", 2).await;
    let stores = tempfile::tempdir().unwrap();
    let store = stores.path().join("store");
    let settings = event_settings(&t, &store);
    let mut producer = retrying_producer(&t, 240, 3, seed);
    let mut produced = Vec::new();

    // A first run, killed once it staged a batch.
    t.scenario.put_round(&mut producer, &mut produced).await;
    let mut daemon = Daemon::spawn(&settings).unwrap();
    wait_until(scaled(Duration::from_secs(60)), "a batch staged", || {
        let log = daemon.log();
        async move { log.contains(r#""message":"batch written""#) }
    })
    .await
    .unwrap();
    daemon.kill().unwrap();
    t.assert_checkpoints_committed(&produced, "the kill").await;

    // The host's store is lost: the next run rebuilds the window from the
    // decisions objects of the staged and committed batches, and late
    // retries of the first round's events are duplicates.
    assert!(store.is_dir(), "the store was in {}", store.display());
    std::fs::remove_dir_all(&store).unwrap();
    t.scenario.put_round(&mut producer, &mut produced).await;
    let mut daemon = Daemon::spawn(&settings).unwrap();
    wait_placed(&t, &produced, &mut daemon).await;
    daemon.kill().unwrap();
    let log = daemon.log();
    assert!(
        log.contains("event store behind the archive") && log.contains("event window rebuilt"),
        "the window was not rebuilt: {}",
        daemon.log_path().display()
    );

    // A batch of the last round staged and not committed (the daemon
    // aborts right after staging it), then everything lost but S3 and the
    // table: the lease table with that batch, and the store. The rows
    // start at the table's committed ends; the lost batch is found by its
    // decisions object and rebuilt as decided.
    t.scenario.put_round(&mut producer, &mut produced).await;
    assert_eq!(producer.rounds_left(), 0);
    let mut daemon = Daemon::spawn(&settings.clone().failpoints("after-stage=return")).unwrap();
    wait_for_abort(&mut daemon, "after-stage").await;
    let rows = shard_rows(t.scenario.lease_rows().await.unwrap());
    assert!(
        staged_batch_count(&rows) > 0,
        "a batch staged, not committed"
    );
    let lease_table = t.settings.lease_table();
    assert!(delete_lease_table(&env, &lease_table).await.unwrap());
    std::fs::remove_dir_all(&store).unwrap();
    let mut daemon = Daemon::spawn(&settings).unwrap();
    wait_placed(&t, &produced, &mut daemon).await;
    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));

    let places = EventPlaces::read(&t).await;
    let problems = places.problems(&produced, &Lineage::default());
    assert!(problems.is_empty(), "{problems:#?}");
    let rows = places.readings[0].1.len();
    println!(
        "{} records: {rows} rows, {} error records, {} duplicates",
        produced.len(),
        places.errors.len(),
        places.duplicates.len()
    );
    assert!(
        !places.duplicates.is_empty() && rows > 0,
        "the producer's retries made duplicates"
    );
    let read = t.read().await;
    read.assert_once(
        &produced
            .iter()
            .filter(|record| {
                places.readings[0]
                    .1
                    .contains(&RecordId::of_produced(record))
            })
            .cloned()
            .collect::<Vec<_>>(),
        true,
        "the kept records",
    );
    t.scenario.assert_nothing_overwritten().await;

    let run = t.assert_verify_deep(&settings).await;
    // The window check ran on the table's rows, and found nothing.
    let checked = run
        .stdout
        .split_once("once a window: 0 events kept twice, 0 duplicates not naming a kept copy (")
        .and_then(|(_, rest)| rest.split_once(" user records checked"))
        .and_then(|(count, _)| count.parse::<usize>().ok());
    assert!(
        checked.is_some_and(|count| count > 0),
        "no user record checked for the window:\n{}",
        run.stdout
    );
}

/// With `--event-id` and the local store, across a split: the first
/// round's events are decided in the parent; once the parent is read to
/// its end (its row at `SHARD_END`) the daemon is killed and its store
/// lost. Late retries of those events go to the children (the same
/// partition keys), whose next owner rebuilds the ended parent's window
/// from every decisions object of it, and decides them duplicates of the
/// parent's copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_event_once_across_a_split_and_a_lost_event_store() {
    let env = require_env!();
    let Some(python) = on_profile(FANOUT, RESHARDING) else {
        return;
    };
    let seed = shardsink_e2e::env::seed("iceberg events across a split", None);
    let t = TableScenario::create(&env, python, "ice-ev-split", 1).await;
    let stores = tempfile::tempdir().unwrap();
    let store = stores.path().join("store");
    let settings = event_settings(&t, &store).set("shard-sync-interval", "2s");
    let mut producer = retrying_producer(&t, 180, 3, seed);
    let mut produced = Vec::new();

    t.scenario.put_round(&mut producer, &mut produced).await;
    let mut daemon = Daemon::spawn(&settings).unwrap();
    wait_placed(&t, &produced, &mut daemon).await;

    let parent = "shardId-000000000000";
    let children = t
        .scenario
        .split_then_lose_the_host(parent, &mut daemon, &store)
        .await;

    t.scenario.put_round(&mut producer, &mut produced).await;
    t.scenario.put_round(&mut producer, &mut produced).await;
    assert_eq!(producer.rounds_left(), 0);
    let mut daemon = Daemon::spawn(&settings).unwrap();
    wait_placed(&t, &produced, &mut daemon).await;
    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));

    // The children's owner rebuilt the ended parent's window from S3.
    assert!(
        rebuilt_window_from_s3(&daemon.log_entries(), parent),
        "no rebuild of {parent}'s window: {}",
        daemon.log_path().display()
    );

    let places = EventPlaces::read(&t).await;
    let lineage = Lineage::of(&list_shards(&env, &t.scenario.stream).await.unwrap());
    let problems = places.problems(&produced, &lineage);
    assert!(problems.is_empty(), "{problems:#?}");
    let of_the_parent = places
        .duplicates
        .iter()
        .filter(|(id, of)| {
            children.contains(&id.shard_id) && of.as_ref().is_some_and(|of| of.shard_id == parent)
        })
        .count();
    println!(
        "{} records: {} duplicates, {of_the_parent} of them in a child naming the parent's copy",
        produced.len(),
        places.duplicates.len()
    );
    assert!(
        of_the_parent > 0,
        "no retry in a child was decided a duplicate of the parent's copy"
    );
}

/// The daemon's log line when the table is gone from the catalog.
const TABLE_MISSING: &str = "the Iceberg table is not in the catalog";

/// The table dropped from its catalog while the daemon runs, its files left
/// in S3 (`DROP TABLE` without purge): commits fail, batches go on being
/// staged, and the daemon says once how to restore the table. Its newest
/// metadata file registered again under its name (as the daemon's message
/// says), commits go on: every record once, those committed before the
/// drop and those staged while the table was gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_dropped_and_registered_again_holds_each_record_once() {
    let env = require_env!();
    let Some(python) = on_profile(MOTO, READERS) else {
        return;
    };
    let t = TableScenario::create(&env, python, "ice-dropped", 2).await;
    let producer = BackgroundProducer::start(
        &env,
        &t.scenario.stream,
        BackgroundOptions {
            records_per_second: 40,
            seed: shardsink_e2e::env::seed("iceberg dropped table", None),
            label: "iceberg dropped table".to_owned(),
            ..BackgroundOptions::default()
        },
    );
    let mut daemon = Daemon::spawn(&t.settings).unwrap();
    wait_for_rows(&t, &daemon).await;

    t.table.drop_from_catalog().await.unwrap();
    println!("table dropped from the catalog");
    wait_until(
        scaled(Duration::from_secs(60)),
        "the daemon saying the table is gone, and batches staged since",
        || async {
            let log = daemon.log();
            let Some((_, after)) = log.split_once(TABLE_MISSING) else {
                return Ok::<_, anyhow::Error>(false);
            };
            let staged = staged_batch_count(&shard_rows(t.scenario.lease_rows().await?));
            Ok(after.contains(r#""message":"batch written""#) && staged > 0)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", daemon.log_tail(60)));
    assert!(daemon.is_running(), "{}", daemon.log_tail(60));

    let newest = t.table.newest_metadata_file(&env).await.unwrap();
    t.table.register(&newest).await.unwrap();
    println!("registered {newest} again");
    let produced = producer.stop().await.unwrap();
    t.wait_for(&produced, &mut [&mut daemon], 120).await;
    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    t.read()
        .await
        .assert_once(&produced, true, "after the table was registered again");
    assert_eq!(
        log_count(&daemon, TABLE_MISSING),
        1,
        "said once per outage: {}",
        daemon.log_path().display()
    );
    assert!(
        log_count(&daemon, "the Iceberg table is in the catalog again") > 0,
        "{}",
        daemon.log_path().display()
    );
    t.scenario.assert_nothing_overwritten().await;
}

/// Snapshot expiry (`--iceberg-snapshot-retention`): a first run makes a
/// commit for each of three rounds of records. A second run, with a
/// retention of one commit interval, expires in its first commit round
/// every snapshot but the current one (commits come at least an interval
/// apart, so the older ones are past the retention), then commits more
/// records on the expired table. pyiceberg, DuckDB and `verify --deep`
/// read every record once: the current snapshot and the commit state
/// survived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_snapshots_leave_every_record_once() {
    let env = require_env!();
    let Some(python) = on_profile(MOTO, READERS) else {
        return;
    };
    let t = TableScenario::create(&env, python, "ice-expiry", 2).await;
    let mut produced = Vec::new();
    let mut daemon = Daemon::spawn(&t.settings).unwrap();
    for round in 0..3 {
        let specs = small_record_specs(60, 40 + round, "expiry");
        produced.extend(t.scenario.put(&specs).await.unwrap());
        t.wait_for(&produced, &mut [&mut daemon], 120).await;
    }
    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    let before = t.read().await.snapshots.len();
    assert!(before >= 3, "a commit a round: {before} snapshots");

    let settings = t.settings.clone().set("iceberg-snapshot-retention", "2s");
    produced.extend(
        t.scenario
            .put(&small_record_specs(60, 43, "expiry"))
            .await
            .unwrap(),
    );
    let mut daemon = Daemon::spawn(&settings).unwrap();
    let dropped = shardsink_e2e::wait::wait_for(
        scaled(Duration::from_secs(60)),
        "the first commit round's expiry",
        || async {
            let expired = daemon
                .log_entries()
                .iter()
                .find(|line| line["message"] == "snapshots expired")
                .and_then(|line| line["dropped"].as_u64());
            Ok::<_, anyhow::Error>(expired)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", daemon.log_tail(60)));
    println!("{dropped} of {before} snapshots expired");
    assert!(
        dropped + 1 >= before as u64,
        "{dropped} of {before} snapshots expired, expected all but the current one"
    );
    produced.extend(
        t.scenario
            .put(&small_record_specs(60, 44, "expiry"))
            .await
            .unwrap(),
    );
    t.wait_for(&produced, &mut [&mut daemon], 120).await;
    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));

    let read = t.read().await;
    read.assert_once(&produced, true, "after the expiry");
    let rows = shard_rows(t.scenario.lease_rows().await.unwrap());
    let problems = checkpoint_problems(&rows, &produced, &read);
    assert!(problems.is_empty(), "after the expiry: {problems:#?}");
    t.assert_verify_deep(&settings).await;
    t.scenario.assert_nothing_overwritten().await;
}
