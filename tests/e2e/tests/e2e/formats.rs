//! Output formats and key layouts end to end: in every format and layout
//! each record lands in S3 exactly once — in its batch's main object, or
//! under the error prefix when the format cannot represent it — across
//! SIGKILL restarts and lease moves between two workers, and across a
//! change of `--format` and `--compression` on one prefix; a restart with
//! another `--key-layout` on a prefix is refused. Each run ends with
//! `shardsink verify --deep`, which must find the archive exact.
//!
//! Every format runs in both key layouts: `scripts/test` runs these tests
//! on moto and on LocalStack, and each format's test takes the plain
//! layout on one profile and the Hive layout on the other
//! ([`per_profile`]). `envelope`, which every other end-to-end test
//! writes in the plain layout, runs here in the Hive layout.
//!
//! Each run: records are put in three phases; worker A takes both shards
//! and is killed (SIGKILL) and restarted twice, each time after the archive
//! grew, with contract lines 3 and 4 checked on the frozen archive; worker
//! B joins and takes one lease from A; A is killed and B takes its shard
//! over after the failover time; B is stopped gracefully. S3 is then read
//! record by record in the run's layout and format ([`Scenario::finish`]).
//!
//! The formats are one table, [`format_cases!`], a row per format: its
//! settings, payloads, key extensions, rejections and objects. One body,
//! [`run_case`], runs each row as a test of its own. The change of format
//! and compression, and the refused change of layout, are tests of their
//! own below it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use shardsink_e2e::archive::{ObjectFormat, Shape};
use shardsink_e2e::check::RecordId;
use shardsink_e2e::env::per_profile;
use shardsink_e2e::fixtures::clear_lease_table;
use shardsink_e2e::payloads::{
    Payloads, SCHEMA_FILE, json_payloads, raw_payloads, schema_payloads,
};
use shardsink_e2e::{
    Archive, ArchiveReader, Daemon, Finish, ProducedRecord, Scenario, Settings, Versioning,
    require_env, scaled, wait_until,
};

/// Shards of every stream here.
const SHARDS: usize = 2;

/// The settings of every run: small batches written quickly, so that each
/// run writes many objects.
fn base(scenario: &Scenario) -> Settings {
    scenario
        .settings
        .clone()
        .set("buffer-max-records", "25")
        .set("buffer-max-age", "1s")
}

fn worker(settings: &Settings, id: &str) -> Settings {
    settings.clone().set("worker-id", id)
}

/// Lease owner of each shard (`-` for none).
async fn owners(scenario: &Scenario) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(scenario
        .lease_rows()
        .await?
        .into_iter()
        .map(|row| {
            (
                row.lease_key,
                row.lease_owner.unwrap_or_else(|| "-".to_owned()),
            )
        })
        .collect())
}

/// Waits until each of the [`SHARDS`] shards is owned, by the workers of
/// `counts` in those numbers.
async fn wait_for_owners(scenario: &Scenario, counts: &[(&str, usize)]) {
    let wanted: BTreeMap<String, usize> = counts
        .iter()
        .map(|(id, n)| ((*id).to_owned(), *n))
        .collect();
    wait_until(
        scaled(Duration::from_secs(60)),
        &format!("leases owned {wanted:?}"),
        || async {
            let owners = owners(scenario).await?;
            let mut found: BTreeMap<String, usize> = BTreeMap::new();
            for owner in owners.values() {
                *found.entry(owner.clone()).or_default() += 1;
            }
            Ok::<_, anyhow::Error>(owners.len() == SHARDS && found == wanted)
        },
    )
    .await
    .unwrap();
}

/// Polls the archive until it holds more than `archived` records (of
/// committed batches), failing if `daemon` exits or nothing comes.
async fn wait_for_growth(reader: &mut ArchiveReader, daemon: &mut Daemon, archived: usize) {
    let timeout = scaled(Duration::from_secs(60));
    let start = Instant::now();
    loop {
        let count = reader.read().await.unwrap().record_count();
        if count > archived {
            return;
        }
        assert!(
            daemon.is_running(),
            "shardsink exited ({:?}) with {count} records archived:\n{}",
            daemon.exit_status(),
            daemon.log_tail(60)
        );
        assert!(
            start.elapsed() < timeout,
            "the archive stayed at {count} records for {timeout:?}"
        );
        tokio::time::sleep(shardsink_e2e::wait::POLL_INTERVAL).await;
    }
}

/// Puts `payloads`; returns what was produced and the ids of the records
/// the format must reject.
async fn put(scenario: &Scenario, payloads: &Payloads) -> (Vec<ProducedRecord>, Vec<RecordId>) {
    let produced = scenario.put(&payloads.specs).await.unwrap();
    let rejected = payloads.rejected_ids(&produced);
    (produced, rejected)
}

/// Contract lines 3 and 4 right after a SIGKILL of the only worker: every
/// record at or below a checkpoint is in S3, and each shard's archive is a
/// gap-free prefix of what was produced. Returns the number of records
/// archived.
async fn check_frozen(
    scenario: &Scenario,
    reader: &mut ArchiveReader,
    produced: &[ProducedRecord],
    what: &str,
) -> usize {
    let (_, archive) = scenario.assert_frozen(reader, produced, what).await;
    println!(
        "{what}: {} records archived in {} objects",
        archive.record_count(),
        archive.object_count()
    );
    archive.record_count()
}

/// What a run produced.
struct Run {
    produced: Vec<ProducedRecord>,
    rejected: Vec<RecordId>,
    /// Worker B, the one still running.
    survivor: Daemon,
}

/// One run with [`Scenario::settings`] (see the module documentation):
/// `phases[0]` before A starts, `phases[1]` after A's first restart,
/// `phases[2]` once B holds a lease.
async fn run_with_kills_and_lease_moves(
    scenario: &Scenario,
    reader: &mut ArchiveReader,
    phases: [&Payloads; 3],
) -> Run {
    let settings_a = worker(&scenario.settings, "fmt-a");
    let settings_b = worker(&scenario.settings, "fmt-b");
    let (mut produced, mut rejected) = put(scenario, phases[0]).await;

    let mut a = Daemon::spawn(&settings_a).unwrap();
    // A new deployment waits one failover time before taking its leases.
    wait_for_owners(scenario, &[("fmt-a", SHARDS)]).await;
    let mut archived = 0;
    for kill in 1..=2 {
        wait_for_growth(reader, &mut a, archived).await;
        a.kill().unwrap();
        archived = check_frozen(scenario, reader, &produced, &format!("kill {kill} of A")).await;
        // A restarted with its worker id takes its leases back at once.
        a = Daemon::spawn(&settings_a).unwrap();
        if kill == 1 {
            let (more, more_rejected) = put(scenario, phases[1]).await;
            produced.extend(more);
            rejected.extend(more_rejected);
        }
    }

    // Lease move 1: B joins and takes one of A's two leases.
    let mut b = Daemon::spawn(&settings_b).unwrap();
    wait_for_owners(scenario, &[("fmt-a", 1), ("fmt-b", 1)]).await;
    println!("B took a lease: {:?}", owners(scenario).await.unwrap());
    let archived = reader.read().await.unwrap().record_count();
    let (more, more_rejected) = put(scenario, phases[2]).await;
    produced.extend(more);
    rejected.extend(more_rejected);
    // Both workers write the third phase; A dies while they do.
    wait_for_growth(reader, &mut b, archived).await;

    // Lease move 2: A dies; B takes its shard once the lease expired.
    a.kill().unwrap();
    wait_for_owners(scenario, &[("fmt-b", SHARDS)]).await;
    println!("B took A's shard over after A was killed");
    Run {
        produced,
        rejected,
        survivor: b,
    }
}

/// The end of a run: B stopped gracefully, then everything checked
/// ([`Scenario::finish`] with the ground truth, a clean shutdown and the
/// rejected records). Returns the archive.
async fn finish(scenario: &Scenario, reader: &mut ArchiveReader, mut run: Run) -> Archive {
    let how = Finish::stopping(&mut run.survivor, 120)
        .ground_truth()
        .clean_shutdown()
        .verify_deep()
        .rejected(run.rejected.clone());
    let archive = scenario.finish(reader, &run.produced, how).await.archive;
    let error_records: usize = archive.error_objects.iter().map(|o| o.records.len()).sum();
    assert_eq!(
        error_records,
        run.rejected.len(),
        "error objects hold exactly the records the format cannot represent"
    );
    archive
}

/// Every main object's key ends in `main_extension`, every error object's
/// in `error_extension`, and every key is in the layout of `settings`:
/// `{prefix}/{time path}/{shard}/{name}` under the prefix or the error
/// prefix, the time path `yyyy/MM/dd/HH[/mm]` (plain) or
/// `year=yyyy/month=MM/day=dd/hour=HH[/minute=mm]` (hive), per minute or
/// hour.
fn assert_keys(
    archive: &Archive,
    settings: &Settings,
    main_extension: &str,
    error_extension: &str,
) {
    let hive = settings.get("key-layout") == Some("hive");
    let mut time_path = vec![("year=", 4), ("month=", 2), ("day=", 2), ("hour=", 2)];
    if settings.get("time-bucket") != Some("hour") {
        time_path.push(("minute=", 2));
    }
    let prefix = settings.prefix();
    let error_prefix = format!("{prefix}-errors");
    let objects = archive.objects.iter().map(|o| (o, &prefix, main_extension));
    let errors = archive
        .error_objects
        .iter()
        .map(|o| (o, &error_prefix, error_extension));
    for (object, prefix, extension) in objects.chain(errors) {
        let key = &object.key.key;
        assert!(
            key.ends_with(extension),
            "{key} is not a {extension} object"
        );
        let segments: Vec<&str> = key
            .strip_prefix(&format!("{prefix}/"))
            .unwrap_or_else(|| panic!("{key} is not under {prefix}/"))
            .split('/')
            .collect();
        assert_eq!(
            segments.len(),
            time_path.len() + 2,
            "{key}: time path, shard, name"
        );
        for ((name, width), segment) in time_path.iter().zip(&segments) {
            let value = if hive {
                segment
                    .strip_prefix(name)
                    .unwrap_or_else(|| panic!("{key}: {segment} is not {name}…"))
            } else {
                segment
            };
            assert!(
                value.len() == *width && value.bytes().all(|b| b.is_ascii_digit()),
                "{key}: {segment}"
            );
        }
        assert!(segments[time_path.len()].starts_with("shardId-"), "{key}");
    }
}

/// Records put in each of a run's three phases.
const PHASE_RECORDS: [usize; 3] = [150, 100, 100];

/// The fewest records a case that rejects payloads rejects.
const REJECTED_AT_LEAST: usize = 40;

/// One output format case: its settings, its payloads and what its archive
/// must show. [`run_case`] runs every case the same way.
struct Case {
    /// Names the stream and bucket (`fmt-{name}`), the payload labels
    /// (`{name}-1`…`{name}-3`), the printed seed and the printed key
    /// layout.
    name: &'static str,
    /// Settings on top of [`base`], `--format` first.
    settings: &'static [(&'static str, &'static str)],
    /// `--parquet-schema` naming a file with [`SCHEMA_FILE`].
    schema_file: bool,
    /// `--key-layout` on moto (and without a profile), and on LocalStack
    /// ([`per_profile`]).
    key_layout: (&'static str, &'static str),
    /// The payloads of the three phases.
    payloads: PayloadKind,
    /// The key extension of main objects, and of error objects.
    extensions: (&'static str, &'static str),
    /// Empty: the format represents every payload and the error prefix
    /// stays empty. Otherwise at least [`REJECTED_AT_LEAST`] records are
    /// rejected, and their `errorMessage`s mention each of these (each kind
    /// of rejection, with its reason).
    rejections: &'static [&'static str],
    /// What every main object is.
    objects: Objects,
}

/// The payloads a case puts.
#[derive(Clone, Copy)]
enum PayloadKind {
    /// [`json_payloads`]: JSON objects, and payloads the `json` format
    /// rejects.
    Json,
    /// [`raw_payloads`] ending in this delimiter.
    Raw(u8),
    /// [`schema_payloads`]: rows of [`SCHEMA_FILE`], and rows it rejects.
    Schema,
    /// JSON objects, then any bytes, then JSON objects, all accepted: any
    /// bytes fit Parquet's data column, so payloads the `json` format
    /// would reject are plain rows.
    AnyBytes,
}

impl PayloadKind {
    /// Phase `phase` (0, 1 or 2) of a case named `name`.
    fn phase(self, name: &str, seed: u64, phase: usize) -> Payloads {
        let (count, seed) = (PHASE_RECORDS[phase], seed + phase as u64);
        let label = format!("{name}-{}", phase + 1);
        match self {
            Self::Json => json_payloads(count, seed, &label),
            Self::Raw(delimiter) => raw_payloads(count, seed, &label, delimiter),
            Self::Schema => schema_payloads(count, seed, &label),
            Self::AnyBytes => {
                let payloads = if phase == 1 {
                    raw_payloads(count, seed, &label, 0)
                } else {
                    json_payloads(count, seed, &label)
                };
                Payloads {
                    rejected: vec![false; payloads.specs.len()],
                    specs: payloads.specs,
                }
            }
        }
    }
}

/// What every main object of a case is.
enum Objects {
    /// Checked by [`assert_keys`] only.
    Any,
    /// Of this shape.
    Shaped(Shape),
    /// With an `x-amz-meta-shardsink-format` starting with this.
    FormatStartingWith(&'static str),
}

/// The table of cases: one test per row, named by it, each running
/// [`run_case`].
macro_rules! format_cases {
    ($($(#[$doc:meta])* $test:ident: $case:expr,)+) => {
        $(
            $(#[$doc])*
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $test() {
                run_case(&$case).await;
            }
        )+
    };
}

format_cases! {
    json_with_minute_keys_and_rejected_payloads: Case {
        name: "json",
        settings: &[("format", "json"), ("time-bucket", "minute")],
        schema_file: false,
        key_layout: ("hive", "plain"),
        payloads: PayloadKind::Json,
        extensions: (".jsonl.zst", ".jsonl.zst"),
        rejections: &["not UTF-8", "not a JSON object", "metadata field"],
        objects: Objects::Any,
    },
    raw_with_a_record_separator_and_hour_keys: Case {
        name: "raw",
        settings: &[
            ("format", "raw"),
            ("record-delimiter", "\\x1e"),
            ("compression", "gzip"),
            ("time-bucket", "hour"),
        ],
        schema_file: false,
        key_layout: ("plain", "hive"),
        payloads: PayloadKind::Raw(0x1e),
        extensions: (".raw.gz", ".jsonl.gz"),
        rejections: &[],
        objects: Objects::Shaped(Shape::Raw),
    },
    parquet_with_hour_keys: Case {
        name: "parquet",
        settings: &[("format", "parquet"), ("time-bucket", "hour")],
        schema_file: false,
        key_layout: ("hive", "plain"),
        payloads: PayloadKind::AnyBytes,
        extensions: (".parquet", ".jsonl.zst"),
        rejections: &[],
        objects: Objects::Any,
    },
    // Parquet keys name no codec; their error objects are zstd.
    parquet_with_a_schema_and_minute_keys: Case {
        name: "schema",
        settings: &[("format", "parquet"), ("compression", "gzip")],
        schema_file: true,
        key_layout: ("plain", "hive"),
        payloads: PayloadKind::Schema,
        extensions: (".parquet", ".jsonl.zst"),
        rejections: &["user_id", "event", "ok", "at"],
        objects: Objects::FormatStartingWith("parquet;schema="),
    },
}

/// One case: its three phases of payloads through
/// [`run_with_kills_and_lease_moves`], then [`finish`] and the checks of
/// its keys, error objects and main objects.
async fn run_case(case: &Case) {
    let env = require_env!();
    let name = case.name;
    let mut scenario = Scenario::create(&env, &format!("fmt-{name}"), 2, Versioning::Enabled)
        .await
        .unwrap();
    let mut settings = base(&scenario);
    if case.schema_file {
        let schema_path = shardsink_e2e::daemon::log_dir(&scenario.stream).join("schema.json");
        std::fs::create_dir_all(schema_path.parent().unwrap()).unwrap();
        std::fs::write(&schema_path, SCHEMA_FILE).unwrap();
        settings = settings.set("parquet-schema", schema_path.to_str().unwrap());
    }
    for &(flag, value) in case.settings {
        settings = settings.set(flag, value);
    }
    let (otherwise, on_localstack) = case.key_layout;
    let key_layout = per_profile(&format!("{name} key layout"), otherwise, on_localstack);
    scenario.settings = settings.set("key-layout", key_layout);
    let seed = shardsink_e2e::env::seed(&format!("formats {name} payloads"), None);
    let phases = [0, 1, 2].map(|phase| case.payloads.phase(name, seed, phase));
    let mut reader = scenario.archive_reader();
    let run = run_with_kills_and_lease_moves(
        &scenario,
        &mut reader,
        [&phases[0], &phases[1], &phases[2]],
    )
    .await;
    if !case.rejections.is_empty() {
        assert!(
            run.rejected.len() >= REJECTED_AT_LEAST,
            "{} rejected",
            run.rejected.len()
        );
    }
    let archive = finish(&scenario, &mut reader, run).await;

    let (main_extension, error_extension) = case.extensions;
    assert_keys(
        &archive,
        &scenario.settings,
        main_extension,
        error_extension,
    );
    assert_eq!(
        archive.error_objects.is_empty(),
        case.rejections.is_empty(),
        "error objects exactly when the format rejects payloads"
    );
    let messages: BTreeSet<&str> = archive
        .records()
        .filter_map(|r| r.error_message.as_deref())
        .collect();
    for reason in case.rejections {
        assert!(
            messages.iter().any(|m| m.contains(reason)),
            "no errorMessage mentions {reason:?}: {messages:#?}"
        );
    }
    for object in &archive.objects {
        match case.objects {
            Objects::Any => {}
            Objects::Shaped(shape) => assert_eq!(object.key.shape, shape),
            Objects::FormatStartingWith(start) => assert!(
                object
                    .format
                    .as_deref()
                    .is_some_and(|f| f.starts_with(start)),
                "{}: {:?}",
                object.key.key,
                object.format
            ),
        }
    }
}

/// `--format` and `--compression` change between two runs on one prefix;
/// the lease table is emptied in between, so the second run reads the whole
/// stream again and only the resume skip — which must read keys of every extension —
/// keeps the first run's records from being written twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn format_and_compression_change_between_runs() {
    let env = require_env!();
    let mut scenario = Scenario::create(&env, "fmt-change", 2, Versioning::Enabled)
        .await
        .unwrap();
    let first = base(&scenario)
        .set("format", "json")
        .set("compression", "gzip");
    scenario.settings = first.clone();
    let seed = shardsink_e2e::env::seed("formats change payloads", None);
    let payloads = json_payloads(200, seed, "change-1");
    let (mut produced, rejected) = put(&scenario, &payloads).await;
    let mut reader = scenario.archive_reader();
    let mut daemon = Daemon::spawn(&worker(&first, "fmt-a")).unwrap();
    let how = Finish::stopping(&mut daemon, 90).rejected(rejected.clone());
    let before = scenario.finish(&mut reader, &produced, how).await.archive;
    assert!(
        before
            .objects
            .iter()
            .all(|o| o.key.key.ends_with(".jsonl.gz"))
    );

    let emptied = clear_lease_table(&env, &first.lease_table()).await.unwrap();
    assert_eq!(emptied, SHARDS, "one lease row per shard");
    scenario.settings = base(&scenario)
        .set("format", "parquet")
        .set("compression", "zstd")
        // Other batch boundaries than the first run's.
        .set("buffer-max-records", "40");
    let more = json_payloads(150, seed + 1, "change-2");
    produced.extend(scenario.put(&more.specs).await.unwrap());
    let mut daemon = Daemon::spawn(&worker(&scenario.settings, "fmt-a")).unwrap();
    // A SIGKILL while the second run writes.
    let archived = before.record_count();
    wait_for_growth(&mut reader, &mut daemon, archived).await;
    daemon.kill().unwrap();
    check_frozen(&scenario, &mut reader, &produced, "kill of the second run").await;
    let mut daemon = Daemon::spawn(&worker(&scenario.settings, "fmt-a")).unwrap();
    let how = Finish::stopping(&mut daemon, 90)
        .ground_truth()
        .clean_shutdown()
        .verify_deep()
        .rejected(rejected)
        .formats(vec![
            ObjectFormat::of_settings(&first),
            ObjectFormat::of_settings(&scenario.settings),
        ]);
    let after = scenario.finish(&mut reader, &produced, how).await.archive;
    // The first run's objects are untouched; the second run wrote Parquet
    // only, and only the records the first run had not archived.
    for object in &before.objects {
        let now = after
            .object(&object.key.key)
            .unwrap_or_else(|| panic!("{} disappeared", object.key.key));
        assert_eq!(now.e_tag, object.e_tag, "{} changed", object.key.key);
    }
    let new: Vec<_> = after
        .objects
        .iter()
        .filter(|o| before.object(&o.key.key).is_none())
        .collect();
    assert!(!new.is_empty());
    assert!(
        new.iter().all(|o| o.key.key.ends_with(".parquet")),
        "the second run writes Parquet"
    );
    let new_records: usize = new.iter().map(|o| o.records.len()).sum();
    assert_eq!(new_records, more.specs.len());
    assert_eq!(after.error_objects.len(), before.error_objects.len());
}

/// `envelope` in the Hive layout, per hour, across a SIGKILL restart; then
/// the prefix keeps that layout: a restart with another `--key-layout` (or
/// `--time-bucket`) exits with code 2 and one line naming the setting, and
/// writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn envelope_with_hive_hour_keys_then_another_layout_is_refused() {
    let env = require_env!();
    let mut scenario = Scenario::create(&env, "fmt-layout", 2, Versioning::Enabled)
        .await
        .unwrap();
    scenario.settings = base(&scenario)
        .set("key-layout", "hive")
        .set("time-bucket", "hour");
    let mut produced = scenario
        .put(&raw_payloads(100, 1, "layout", b'\n').specs)
        .await
        .unwrap();
    let mut reader = scenario.archive_reader();
    let mut daemon = Daemon::spawn(&scenario.settings).unwrap();
    wait_for_growth(&mut reader, &mut daemon, 0).await;
    daemon.kill().unwrap();
    check_frozen(&scenario, &mut reader, &produced, "the kill").await;
    produced.extend(
        scenario
            .put(&raw_payloads(60, 2, "layout-2", b'\n').specs)
            .await
            .unwrap(),
    );
    let mut daemon = Daemon::spawn(&scenario.settings).unwrap();
    let how = Finish::stopping(&mut daemon, 90)
        .clean_shutdown()
        .verify_deep();
    let before = scenario.finish(&mut reader, &produced, how).await.archive;
    assert_keys(&before, &scenario.settings, ".jsonl.zst", ".jsonl.zst");

    for (flag, settings) in [
        (
            "--key-layout",
            scenario.settings.clone().set("key-layout", "plain"),
        ),
        (
            "--time-bucket",
            scenario.settings.clone().set("time-bucket", "minute"),
        ),
    ] {
        let mut refused = Daemon::spawn(&settings).unwrap();
        let status = refused
            .wait_exit(scaled(Duration::from_secs(60)))
            .await
            .unwrap();
        let log = refused.log();
        assert_eq!(status.code(), Some(2), "{flag}: {status}\n{log}");
        let errors: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("invalid setting"))
            .collect();
        assert_eq!(errors.len(), 1, "{flag}: one error line:\n{log}");
        assert!(
            errors[0].starts_with(&format!("shardsink: invalid setting {flag} ")),
            "{}",
            errors[0]
        );
        assert!(
            errors[0].contains("--key-layout hive --time-bucket hour"),
            "the line names the recorded layout: {}",
            errors[0]
        );
    }
    let after = reader.read().await.unwrap();
    let keys =
        |a: &Archive| -> Vec<String> { a.objects.iter().map(|o| o.key.key.clone()).collect() };
    assert_eq!(
        keys(&after),
        keys(&before),
        "a refused start writes nothing"
    );
    assert!(after.stray_keys.is_empty(), "{:#?}", after.stray_keys);
    assert_eq!(
        after.layout_record.as_deref(),
        Some(r#"{"keyLayout":"hive","timeBucket":"hour"}"#)
    );
}
