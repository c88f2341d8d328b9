//! A real query engine reads the archive where it lies: DuckDB queries the
//! local S3 server for each format and key layout the daemon writes, through
//! `tests/duckdb/query_archive.py` (the query a user would run, per format).
//!
//! Per combination of `--format`, `--key-layout`, `--time-bucket` and
//! `--compression`: a 2-shard stream gets a few hundred JSON-object records,
//! the daemon archives them (polled with DuckDB's own count until every
//! record is there, then SIGTERM and a clean shutdown), and DuckDB must
//! return every record once: its row count, its distinct (shard, sequence
//! number) pairs and each shard's sorted sequence numbers match what was
//! produced, and so do the payloads it decodes (their `id` and `n`
//! members). With `--key-layout hive`, DuckDB's `hive_partitioning` must add
//! exactly the partition columns (year, month, day, hour, and minute with
//! `--time-bucket minute`), with the values of each object's key and of its
//! records' arrival times. Raw objects carry no metadata: there DuckDB
//! reads the payload lines (by shard, from the keys) and, uncompressed, the
//! object bytes must be the payloads plus their delimiters. Parquet written
//! with a schema file has the payload's members as typed columns, and
//! DuckDB must read them with those types.
//!
//! Every format runs in both key layouts at no extra cost: `scripts/test`
//! runs these tests on moto and on LocalStack, and each case takes the
//! plain layout on one profile and the Hive layout on the other.
//!
//! DuckDB is the Python of a venv with the pinned packages, named by
//! `SHARDSINK_E2E_DUCKDB_PYTHON` (`scripts/test` installs it into
//! `.local/duckdb/`). Unset, the tests skip, or fail with
//! `SHARDSINK_E2E_REQUIRED=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use shardsink_e2e::check::clean_shutdown_problems;
use shardsink_e2e::env::per_profile;
use shardsink_e2e::env::{REQUIRED_VAR, e2e_required};
use shardsink_e2e::outcome;
use shardsink_e2e::{
    Daemon, ProducedRecord, RecordSpec, Scenario, TestEnv, Versioning, require_env, scaled,
    stop_gracefully,
};

/// The Python interpreter that has DuckDB and its extensions.
const PYTHON_VAR: &str = "SHARDSINK_E2E_DUCKDB_PYTHON";
/// The query script, next to this crate.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../duckdb/query_archive.py");
/// Records per combination.
const RECORDS: usize = 300;
const SHARDS: i32 = 2;
/// The payload member that tells records apart.
const PAYLOAD_KEY: &str = "id";
/// The payload member whose value DuckDB reports per record: the record's
/// index.
const VALUE_MEMBER: &str = "n";

/// One combination of the daemon's output settings.
#[derive(Clone, Copy, Debug)]
struct Case {
    /// Stream and bucket name prefix.
    name: &'static str,
    format: &'static str,
    key_layout: &'static str,
    time_bucket: &'static str,
    /// `None`: the daemon's default (zstd).
    compression: Option<&'static str>,
    /// `parquet` with [`SCHEMA`]: the payload's members as typed columns.
    schema: bool,
}

/// The Parquet schema of the payloads [`json_records`] writes.
const SCHEMA: &str = r#"[
  {"name": "id", "type": "string"},
  {"name": "n", "type": "int64"},
  {"name": "text", "type": "string"},
  {"name": "nested", "type": "json"}
]"#;

// Each format in both key layouts: `scripts/test` runs these on moto and on
// LocalStack, and each case takes one layout on each profile.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelope_minute_zstd() {
    run_case(Case {
        name: "qe-envelope",
        format: "envelope",
        key_layout: per_profile("envelope key layout", "plain", "hive"),
        time_bucket: "minute",
        compression: Some("zstd"),
        schema: false,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_minute_gzip() {
    run_case(Case {
        name: "qe-json",
        format: "json",
        key_layout: per_profile("json key layout", "hive", "plain"),
        time_bucket: "minute",
        compression: Some("gzip"),
        schema: false,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_hour_zstd() {
    run_case(Case {
        name: "qe-parquet",
        format: "parquet",
        key_layout: per_profile("parquet key layout", "hive", "plain"),
        time_bucket: "hour",
        compression: None,
        schema: false,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_with_a_schema_minute_gzip() {
    run_case(Case {
        name: "qe-schema",
        format: "parquet",
        key_layout: per_profile("schema key layout", "plain", "hive"),
        time_bucket: "minute",
        compression: Some("gzip"),
        schema: true,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_minute_uncompressed() {
    run_case(Case {
        name: "qe-raw",
        format: "raw",
        key_layout: per_profile("raw key layout", "hive", "plain"),
        time_bucket: "minute",
        compression: Some("none"),
        schema: false,
    })
    .await;
}

/// Produce, archive with `case`'s settings, stop cleanly, query with DuckDB
/// and compare.
async fn run_case(case: Case) {
    let env = require_env!();
    let Some(python) = duckdb_python() else {
        return;
    };
    let scenario = Scenario::create(&env, case.name, SHARDS, Versioning::Off)
        .await
        .unwrap();
    let produced = scenario.put(&json_records(case.name)).await.unwrap();
    println!("{case:?}: produced {} records", produced.len());

    let mut settings = scenario
        .settings
        .clone()
        .set("format", case.format)
        .set("key-layout", case.key_layout)
        .set("time-bucket", case.time_bucket)
        .set("buffer-max-age", "1s");
    if let Some(compression) = case.compression {
        settings = settings.set("compression", compression);
    }
    if case.schema {
        let path = shardsink_e2e::daemon::log_dir(&scenario.stream).join("schema.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, SCHEMA).unwrap();
        settings = settings.set("parquet-schema", path.to_str().unwrap());
    }
    let duckdb = DuckDb {
        python,
        endpoint: s3_endpoint(),
        bucket: scenario.bucket.clone(),
        prefix: settings.prefix(),
        format: case.format,
        key_layout: case.key_layout,
    };

    let start = Instant::now();
    let mut daemon = Daemon::spawn(&settings).unwrap();
    duckdb
        .wait_for_rows(&mut daemon, produced.len(), scaled(Duration::from_secs(90)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    let rows = scenario.lease_rows().await.unwrap();
    let problems = clean_shutdown_problems(&rows, &produced);
    assert!(problems.is_empty(), "after SIGTERM: {problems:#?}");
    println!(
        "{case:?}: archived and stopped after {:.1?}",
        start.elapsed()
    );

    let queried = Instant::now();
    let result = duckdb
        .query()
        .await
        .unwrap_or_else(|error| panic!("{error:#}"));
    println!(
        "{case:?}: DuckDB read {} rows from {} objects ({} bytes) in {:.1?}; queries: {:#?}",
        result.rows,
        result.objects,
        result.bytes,
        queried.elapsed(),
        result.queries
    );
    check_result(&case, &produced, &result);
    check_layout_record(&env, &scenario.bucket, &settings.prefix(), &case).await;
}

/// [`RECORDS`] records whose payloads are single-line JSON objects with a
/// unique [`PAYLOAD_KEY`], text that JSON must escape, non-ASCII text and a
/// nested object; 17 partition keys spread them over the shards.
fn json_records(label: &str) -> Vec<RecordSpec> {
    const TEXTS: [&str; 4] = [
        "plain",
        "quote \" backslash \\ tab \t newline \n end",
        "non-ASCII: Grüße, 東京, 🚀",
        "",
    ];
    (0..RECORDS)
        .map(|i| {
            let payload = serde_json::json!({
                PAYLOAD_KEY: payload_id(label, i),
                "n": i,
                "text": TEXTS[i % TEXTS.len()],
                "nested": {"even": i % 2 == 0, "tags": ["a", "b"]},
            });
            RecordSpec::new(
                format!("pk-{}", i % 17),
                serde_json::to_vec(&payload).unwrap(),
            )
        })
        .collect()
}

fn payload_id(label: &str, index: usize) -> String {
    format!("{label}-{index:04}")
}

/// `SHARDSINK_E2E_DUCKDB_PYTHON`, or `None` after a skip message.
///
/// # Panics
/// Unset with `SHARDSINK_E2E_REQUIRED=1`; set to a file that does not exist.
fn duckdb_python() -> Option<PathBuf> {
    match std::env::var(PYTHON_VAR).ok().filter(|v| !v.is_empty()) {
        Some(path) => {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "{PYTHON_VAR}={} does not exist (scripts/test installs DuckDB into .local/duckdb/)",
                path.display()
            );
            Some(path)
        }
        None if e2e_required() => panic!(
            "{REQUIRED_VAR}=1 but {PYTHON_VAR} is not set: scripts/test installs DuckDB into \
             .local/duckdb/ and sets it (or pip-install duckdb==1.4.4 and the matching \
             duckdb-ext-httpfs, -json and -parquet 1.4.4.20260205 into a venv and name its python)"
        ),
        None => {
            outcome::skip(&format!("no DuckDB (set {PYTHON_VAR})"));
            None
        }
    }
}

/// The S3 endpoint the daemon and the harness use.
fn s3_endpoint() -> String {
    ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
        .expect("an S3 endpoint is set (require_env! checked)")
}

/// `tests/duckdb/query_archive.py` for one archive.
struct DuckDb {
    python: PathBuf,
    endpoint: String,
    bucket: String,
    prefix: String,
    format: &'static str,
    key_layout: &'static str,
}

impl DuckDb {
    /// Runs the script once (on a blocking thread) and parses what it prints.
    ///
    /// # Errors
    /// The script fails (with its stderr) or prints something else than its
    /// JSON object.
    async fn query(&self) -> Result<QueryResult> {
        let mut command = Command::new(&self.python);
        command.arg(Path::new(SCRIPT)).args([
            "--endpoint",
            &self.endpoint,
            "--bucket",
            &self.bucket,
            "--prefix",
            &self.prefix,
            "--format",
            self.format,
            "--key-layout",
            self.key_layout,
            "--payload-key",
            PAYLOAD_KEY,
            "--value-member",
            VALUE_MEMBER,
        ]);
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .context("the query thread panicked")?
            .with_context(|| format!("failed to run {} {SCRIPT}", self.python.display()))?;
        if !output.status.success() {
            bail!(
                "DuckDB query of s3://{}/{} ({} {}) failed ({}):\n{}",
                self.bucket,
                self.prefix,
                self.format,
                self.key_layout,
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        serde_json::from_slice(&output.stdout).with_context(|| {
            format!(
                "unexpected output of {SCRIPT}: {}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
    }

    /// Polls DuckDB's row count until it reaches `expected`, failing early if
    /// the daemon exits, and at once on a query error.
    ///
    /// # Errors
    /// A query error; the daemon exited; `timeout` passed.
    async fn wait_for_rows(
        &self,
        daemon: &mut Daemon,
        expected: usize,
        timeout: Duration,
    ) -> Result<()> {
        let start = Instant::now();
        loop {
            let result = self.query().await?;
            if result.rows >= expected as u64 {
                println!(
                    "DuckDB sees {} rows in {} objects after {:.1?}",
                    result.rows,
                    result.objects,
                    start.elapsed()
                );
                return Ok(());
            }
            if let Some(status) = daemon.exit_status() {
                bail!(
                    "shardsink exited ({status}) with {} of {expected} records visible to DuckDB; log {}:\n{}",
                    result.rows,
                    daemon.log_path().display(),
                    daemon.log_tail(60)
                );
            }
            if start.elapsed() >= timeout {
                bail!(
                    "timed out after {timeout:?}: DuckDB sees {} of {expected} records in {} objects",
                    result.rows,
                    result.objects
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// What `query_archive.py` prints (see its docstring).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueryResult {
    objects: u64,
    bytes: u64,
    rows: u64,
    distinct_records: Option<u64>,
    shards: BTreeMap<String, ShardRows>,
    #[serde(default)]
    partition_columns: Option<Vec<String>>,
    #[serde(default)]
    partition_types: Option<BTreeMap<String, String>>,
    #[serde(default)]
    partitions: Option<Vec<Partition>>,
    payload_keys: Vec<String>,
    /// [`VALUE_MEMBER`] of each payload, by [`PAYLOAD_KEY`], as text.
    values: BTreeMap<String, Option<String>>,
    /// The read's columns and their DuckDB types.
    columns: BTreeMap<String, String>,
    extensions: BTreeMap<String, String>,
    queries: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ShardRows {
    rows: u64,
    sequence_numbers: Vec<String>,
}

/// One object of a hive-partitioned archive as DuckDB saw it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Partition {
    key: String,
    values: BTreeMap<String, serde_json::Value>,
    rows: u64,
    first_arrival: Option<String>,
    last_arrival: Option<String>,
}

/// Sorted as numbers: shorter decimal text first, then by digits.
fn numeric_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// Everything DuckDB returned against what was produced.
fn check_result(case: &Case, produced: &[ProducedRecord], result: &QueryResult) {
    for name in ["httpfs", "json", "parquet"] {
        let state = result.extensions.get(name).map(String::as_str);
        assert!(
            state.is_some_and(|s| s.starts_with("loaded")),
            "extension {name}: {state:?}"
        );
    }
    assert_eq!(
        result.rows,
        produced.len() as u64,
        "{case:?}: rows DuckDB read"
    );

    let mut expected: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for record in produced {
        expected
            .entry(&record.shard_id)
            .or_default()
            .push(record.sequence_number.clone());
    }
    for sequence_numbers in expected.values_mut() {
        sequence_numbers.sort_by(|a, b| numeric_order(a, b));
    }
    let shards: Vec<&str> = result.shards.keys().map(String::as_str).collect();
    assert_eq!(
        shards,
        expected.keys().copied().collect::<Vec<_>>(),
        "{case:?}: shards"
    );
    assert!(
        result.objects >= expected.len() as u64,
        "{case:?}: {} objects for {} shards",
        result.objects,
        expected.len()
    );
    for (shard, sequence_numbers) in &expected {
        let seen = &result.shards[*shard];
        assert_eq!(
            seen.rows,
            sequence_numbers.len() as u64,
            "{case:?}: rows of {shard}"
        );
        if case.format != "raw" {
            assert!(
                seen.sequence_numbers == *sequence_numbers,
                "{case:?}: {shard}: DuckDB's distinct sequence numbers {:?} differ from the \
                 produced {:?}",
                seen.sequence_numbers,
                sequence_numbers
            );
        }
    }
    if case.format == "raw" {
        assert_eq!(result.distinct_records, None);
        if case.compression == Some("none") {
            // Each payload followed by the default delimiter `\n`.
            let bytes: usize = produced.iter().map(|r| r.data.len() + 1).sum();
            assert_eq!(result.bytes, bytes as u64, "{case:?}: raw object bytes");
        }
    } else {
        assert_eq!(
            result.distinct_records,
            Some(produced.len() as u64),
            "{case:?}: distinct (shard, sequence number, subsequence number)"
        );
    }

    let ids: BTreeSet<String> = (0..produced.len())
        .map(|i| payload_id(case.name, i))
        .collect();
    let seen: BTreeSet<String> = result.payload_keys.iter().cloned().collect();
    assert_eq!(
        result.payload_keys.len(),
        seen.len(),
        "distinct payload ids"
    );
    assert!(
        seen == ids,
        "{case:?}: payload ids DuckDB decoded: missing {:?}, unexpected {:?}",
        ids.difference(&seen).take(10).collect::<Vec<_>>(),
        seen.difference(&ids).take(10).collect::<Vec<_>>()
    );
    let wrong: Vec<(String, &Option<String>)> = (0..produced.len())
        .map(|i| (payload_id(case.name, i), i))
        .filter_map(|(id, i)| {
            let value = result.values.get(&id).unwrap_or(&None);
            (value.as_deref() != Some(i.to_string().as_str())).then_some((id, value))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{case:?}: member {VALUE_MEMBER} of the payloads DuckDB read: {:?}",
        &wrong[..wrong.len().min(10)]
    );
    if case.schema {
        check_typed_columns(case, result);
    }

    if case.key_layout == "hive" {
        check_partitions(case, produced.len() as u64, result);
    } else {
        assert!(
            result.partition_columns.is_none() && result.partitions.is_none(),
            "{case:?}: plain keys have no partitions"
        );
    }
}

/// Parquet with [`SCHEMA`]: DuckDB reads the payload's members as columns
/// of the schema's types (`json` as text), beside the metadata columns,
/// and no `data` column.
fn check_typed_columns(case: &Case, result: &QueryResult) {
    let types: BTreeMap<&str, &str> = result
        .columns
        .iter()
        .map(|(name, data_type)| (name.as_str(), data_type.as_str()))
        .filter(|(name, _)| !HIVE_COLUMNS.contains(name))
        .collect();
    let expected: BTreeMap<&str, &str> = [
        ("shard_id", "VARCHAR"),
        ("sequence_number", "VARCHAR"),
        ("sub_sequence_number", "BIGINT"),
        ("partition_key", "VARCHAR"),
        ("approximate_arrival_timestamp", "TIMESTAMP WITH TIME ZONE"),
        ("id", "VARCHAR"),
        ("n", "BIGINT"),
        ("text", "VARCHAR"),
        ("nested", "VARCHAR"),
        ("filename", "VARCHAR"),
    ]
    .into();
    assert_eq!(types, expected, "{case:?}: the columns DuckDB read");
}

/// Partition columns a hive read adds.
const HIVE_COLUMNS: [&str; 5] = ["year", "month", "day", "hour", "minute"];

/// Hive layout: exactly the expected partition columns, and per object the
/// values of its key and of its records' arrival times.
fn check_partitions(case: &Case, produced: u64, result: &QueryResult) {
    let names: &[&str] = if case.time_bucket == "minute" {
        &["year", "month", "day", "hour", "minute"]
    } else {
        &["year", "month", "day", "hour"]
    };
    let columns: BTreeSet<&str> = result
        .partition_columns
        .as_ref()
        .expect("hive: partition columns reported")
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(
        columns,
        names.iter().copied().collect::<BTreeSet<_>>(),
        "{case:?}: partition columns DuckDB added"
    );
    let partitions = result
        .partitions
        .as_ref()
        .expect("hive: partitions reported");
    assert_eq!(
        partitions.iter().map(|p| p.rows).sum::<u64>(),
        produced,
        "{case:?}: rows over all partitions"
    );
    println!(
        "{case:?}: partition column types {:?}",
        result.partition_types
    );
    for partition in partitions {
        let key_values = hive_key_values(&partition.key, names);
        for (name, from_key) in names.iter().zip(&key_values) {
            // DuckDB types a column BIGINT only when every value reads back
            // the same as a number (`11`), else VARCHAR with the key's text
            // (`03`).
            let matches = match partition.values.get(*name) {
                Some(serde_json::Value::Number(n)) => n.as_u64() == from_key.parse().ok(),
                Some(serde_json::Value::String(text)) => text == from_key,
                _ => false,
            };
            assert!(
                matches,
                "{case:?}: {name} of {}: DuckDB {:?}",
                partition.key, partition.values
            );
        }
        if case.format == "raw" {
            continue;
        }
        for arrival in [&partition.first_arrival, &partition.last_arrival] {
            let arrival = arrival.as_deref().expect("arrival times of data rows");
            assert_eq!(
                arrival_fields(arrival, names.len()),
                key_values,
                "{case:?}: arrival {arrival} outside the partition of {}",
                partition.key
            );
        }
    }
}

/// The partition values of a hive key
/// `{prefix}/year=YYYY/month=MM/day=DD/hour=HH[/minute=mm]/{shardId}/{name}`,
/// checked for their names, order and widths.
fn hive_key_values<'k>(key: &'k str, names: &[&str]) -> Vec<&'k str> {
    let segments: Vec<&str> = key.split('/').collect();
    let start = segments
        .iter()
        .position(|s| s.starts_with("year="))
        .unwrap_or_else(|| panic!("no year= in {key}"));
    assert_eq!(
        segments.len(),
        start + names.len() + 2,
        "{key}: time path, shard and name"
    );
    assert!(
        segments[start + names.len()].starts_with("shardId-"),
        "{key}"
    );
    names
        .iter()
        .zip(&segments[start..])
        .map(|(name, segment)| {
            let value = segment
                .strip_prefix(&format!("{name}="))
                .unwrap_or_else(|| panic!("{key}: expected {name}=… in {segment}"));
            let width = if *name == "year" { 4 } else { 2 };
            assert!(
                value.len() == width && value.bytes().all(|b| b.is_ascii_digit()),
                "{key}: {segment}"
            );
            value
        })
        .collect()
}

/// The first `count` of year, month, day, hour, minute of
/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, as text.
fn arrival_fields(arrival: &str, count: usize) -> Vec<&str> {
    [(0, 4), (5, 7), (8, 10), (11, 13), (14, 16)]
        .iter()
        .take(count)
        .map(|&(from, to)| {
            arrival
                .get(from..to)
                .unwrap_or_else(|| panic!("arrival time {arrival}"))
        })
        .collect()
}

/// `{prefix}/_shardsink.json` records the layout (and is not data: the
/// counts above show no glob read it).
async fn check_layout_record(env: &TestEnv, bucket: &str, prefix: &str, case: &Case) {
    let key = format!("{prefix}/_shardsink.json");
    let object = env
        .s3
        .get_object()
        .bucket(bucket)
        .key(&key)
        .send()
        .await
        .unwrap_or_else(|error| panic!("GET {key}: {error:?}"));
    let body = object.body.collect().await.unwrap().into_bytes();
    let record: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        record,
        serde_json::json!({"keyLayout": case.key_layout, "timeBucket": case.time_bucket}),
        "{key}"
    );
}
