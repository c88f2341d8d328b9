//! `--format iceberg` with the two AWS catalogs, on moto: the Glue Data
//! Catalog and Amazon S3 Tables. Per catalog, a 2-shard stream gets records
//! in two rounds; the daemon runs, is killed with SIGKILL while the first
//! round is being staged and committed, runs again and is stopped
//! gracefully once the table holds every record. The table is then read
//! through the catalog, independently of the daemon, by
//! `tests/iceberg/read_table.py`: pyiceberg (its GlueCatalog; for S3
//! Tables, the metadata file GetTableMetadataLocation names) and DuckDB's
//! `iceberg` extension must each hold every produced record exactly once —
//! identified by shard, sequence number and sub-sequence number — with its
//! partition key and payload, and no other row.
//!
//! moto is the only local server with Glue and S3 Tables; the SQL catalog
//! and the failure scenarios are in the `iceberg` family.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use serde::Deserialize;
use shardsink_e2e::env::{REQUIRED_VAR, e2e_required, endpoint_url};
use shardsink_e2e::wait::wait_for;
use shardsink_e2e::{
    ProducedRecord, RecordSpec, Scenario, Versioning, outcome, require_env, scaled, stop_gracefully,
};

/// The Python interpreter that has pyiceberg, DuckDB and boto3.
const PYTHON_VAR: &str = "SHARDSINK_E2E_DUCKDB_PYTHON";
/// The table reader, next to this crate.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../iceberg/read_table.py");
/// Records per round.
const RECORDS: usize = 150;

/// Which catalog holds the table.
#[derive(Clone, Copy, Debug)]
enum Catalog {
    Glue,
    S3Tables,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glue_table_holds_each_record_once_across_a_kill() {
    run(Catalog::Glue).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_tables_table_holds_each_record_once_across_a_kill() {
    run(Catalog::S3Tables).await;
}

async fn run(catalog: Catalog) {
    let env = require_env!();
    if std::env::var("SHARDSINK_TEST_PROFILE").as_deref() != Ok("moto") {
        outcome::skip_unless_profile("moto", "Glue and S3 Tables are served by moto only");
        return;
    }
    let Some(python) = reader_python() else {
        return;
    };
    let name = match catalog {
        Catalog::Glue => "ice-glue",
        Catalog::S3Tables => "ice-s3t",
    };
    let scenario = Scenario::create(&env, name, 2, Versioning::Off)
        .await
        .unwrap();
    let endpoint = endpoint_url("S3").expect("moto's endpoint is set");
    let namespace = scenario.stream.replace('-', "_");
    let table = format!("{namespace}.events");
    let mut reader = TableReader {
        python,
        table: table.clone(),
        catalog: Vec::new(),
    };
    let mut settings = scenario
        .settings
        .clone()
        .set("format", "iceberg")
        .set("iceberg-table", table.clone())
        .set("iceberg-catalog-uri", endpoint.clone())
        .set("iceberg-commit-interval", "2s")
        .set("buffer-max-age", "1s")
        .set("buffer-max-records", "40");
    match catalog {
        Catalog::Glue => {
            settings = settings.set("iceberg-catalog", "glue").set(
                "iceberg-warehouse",
                format!("s3://{}/warehouse", scenario.bucket),
            );
            reader.catalog = vec![
                "--catalog".into(),
                "glue".into(),
                "--catalog-endpoint".into(),
                endpoint,
            ];
        }
        Catalog::S3Tables => {
            let arn = create_table_bucket(&endpoint, &scenario.bucket)
                .await
                .unwrap();
            settings = settings
                .set("iceberg-catalog", "s3tables")
                .set("iceberg-warehouse", arn.clone());
            reader.catalog = vec![
                "--catalog".into(),
                "s3tables".into(),
                "--catalog-endpoint".into(),
                endpoint,
                "--table-bucket-arn".into(),
                arn,
            ];
        }
    }
    let mut produced = scenario.put(&records(name, 0)).await.unwrap();

    // Killed once the first commit landed: the rest of the round is staged,
    // being written or still to read.
    let mut daemon = shardsink_e2e::Daemon::spawn(&settings).unwrap();
    wait_for(
        scaled(Duration::from_secs(90)),
        "a first table commit",
        || async {
            Ok(reader
                .read()
                .await
                .ok()
                .filter(|t| !t.pyiceberg_rows.is_empty()))
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err:#}\nlog:\n{}", daemon.log_tail(40)));
    daemon.kill().unwrap();

    produced.extend(scenario.put(&records(name, 1)).await.unwrap());
    let mut daemon = shardsink_e2e::Daemon::spawn(&settings).unwrap();
    let complete = wait_for(
        scaled(Duration::from_secs(120)),
        "every record in the table",
        || async {
            let read = reader.read().await?;
            Ok((read.pyiceberg_rows.len() >= produced.len()).then_some(read))
        },
    )
    .await;
    if let Err(err) = complete {
        panic!("{err:#}\nlog:\n{}", daemon.log_tail(60));
    }
    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap();

    let read = reader.read().await.unwrap();
    let mut problems = exactly_once("pyiceberg", &read.pyiceberg_rows, &produced);
    problems.extend(exactly_once("DuckDB", &read.duckdb_rows, &produced));
    assert!(
        problems.is_empty(),
        "the table is not exact:\n{}",
        problems.join("\n")
    );
    println!(
        "{catalog:?}: {} records once each in {} data files, {} snapshots",
        produced.len(),
        read.data_files.len(),
        read.snapshots.len()
    );
    outcome::ran();
}

/// Two rounds of JSON payloads, told apart by `round`.
fn records(label: &str, round: usize) -> Vec<RecordSpec> {
    (0..RECORDS)
        .map(|i| {
            RecordSpec::new(
                format!("{label}-{round}-{}", i % 17),
                format!(r#"{{"id":"{label}-{round}-{i}","n":{i}}}"#),
            )
        })
        .collect()
}

/// Creates the S3 Tables table bucket `name` (CreateTableBucket) and
/// returns its ARN.
async fn create_table_bucket(endpoint: &str, name: &str) -> Result<String> {
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .load()
        .await;
    let client = aws_sdk_s3tables::Client::new(&shared);
    let created = client
        .create_table_bucket()
        .name(name)
        .send()
        .await
        .context("CreateTableBucket")?;
    Ok(created.arn)
}

/// Runs `read_table.py` on the table.
struct TableReader {
    python: PathBuf,
    table: String,
    /// The catalog's arguments.
    catalog: Vec<String>,
}

/// What `read_table.py` prints (the parts used here).
#[derive(Debug, Deserialize)]
struct TableRead {
    snapshots: Vec<serde_json::Value>,
    data_files: Vec<serde_json::Value>,
    pyiceberg_rows: Vec<Row>,
    duckdb_rows: Vec<Row>,
}

/// One row of the table.
#[derive(Debug, Deserialize)]
struct Row {
    shard_id: String,
    sequence_number: String,
    sub_sequence_number: Option<u64>,
    partition_key: String,
    /// The payload, base64 (the reader's encoding of binary).
    data: String,
}

impl TableReader {
    /// Reads the table once (on a blocking thread).
    ///
    /// # Errors
    /// The script fails (with its stderr; exit 3 while the table does not
    /// exist yet) or prints something else.
    async fn read(&self) -> Result<TableRead> {
        let mut command = Command::new(&self.python);
        command
            .arg(Path::new(SCRIPT))
            .args(&self.catalog)
            .args(["--table", &self.table]);
        let output = tokio::task::spawn_blocking(move || command.output())
            .await?
            .context("running read_table.py")?;
        if !output.status.success() {
            bail!(
                "read_table.py exited with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        serde_json::from_slice(&output.stdout).context("read_table.py's output")
    }
}

/// Every produced record once among `rows`, with its partition key and
/// payload, and no other row: what is wrong, one line each.
fn exactly_once(reader: &str, rows: &[Row], produced: &[ProducedRecord]) -> Vec<String> {
    let key = |shard: &str, sequence: &str, sub: Option<u64>| {
        (shard.to_owned(), sequence.to_owned(), sub)
    };
    let mut expected: BTreeMap<_, &ProducedRecord> = produced
        .iter()
        .map(|p| {
            (
                key(&p.shard_id, &p.sequence_number, p.sub_sequence_number),
                p,
            )
        })
        .collect();
    let mut problems = Vec::new();
    let mut seen = BTreeMap::new();
    for row in rows {
        let id = key(&row.shard_id, &row.sequence_number, row.sub_sequence_number);
        *seen.entry(id.clone()).or_insert(0) += 1;
        match expected.get(&id) {
            None => problems.push(format!("{reader}: a row no producer put: {id:?}")),
            Some(put) => {
                let data = base64::engine::general_purpose::STANDARD
                    .decode(&row.data)
                    .unwrap_or_default();
                if row.partition_key != put.partition_key || data != put.data {
                    problems.push(format!("{reader}: {id:?} holds other content"));
                }
            }
        }
    }
    for (id, count) in &seen {
        if *count > 1 {
            problems.push(format!("{reader}: {id:?} in {count} rows"));
        }
    }
    expected.retain(|id, _| !seen.contains_key(id));
    for id in expected.keys() {
        problems.push(format!("{reader}: {id:?} missing"));
    }
    problems
}

/// `SHARDSINK_E2E_DUCKDB_PYTHON`, or `None` after a skip message.
///
/// # Panics
/// Unset with `SHARDSINK_E2E_REQUIRED=1`.
fn reader_python() -> Option<PathBuf> {
    match std::env::var(PYTHON_VAR).ok().filter(|v| !v.is_empty()) {
        Some(path) => Some(PathBuf::from(path)),
        None if e2e_required() => panic!(
            "{REQUIRED_VAR}=1 but {PYTHON_VAR} is not set: scripts/test installs pyiceberg, \
             DuckDB and boto3 into .local/duckdb/ and sets it"
        ),
        None => {
            outcome::skip(&format!("no pyiceberg/DuckDB (set {PYTHON_VAR})"));
            None
        }
    }
}
