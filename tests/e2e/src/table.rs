//! Iceberg tables the daemon writes with `--format iceberg`, read back
//! independently of it: `tests/iceberg/read_table.py` reads the table with
//! pyiceberg and with DuckDB's iceberg extension, and this module compares
//! both readings with what the producers put.
//!
//! The catalog is a SQL catalog on a SQLite file beside the test's daemon
//! logs (or moto's Glue Data Catalog or S3 Tables, or the REST catalog test
//! double of [`crate::rest_catalog`] in front of a SQL catalog), the
//! warehouse under the test's bucket (or the S3 Tables table bucket);
//! [`IcebergTable::settings`] gives a daemon the flags for them. A record is identified by its
//! [`RecordId`] (shard, sequence number, sub-sequence number): each
//! produced record must be in exactly one live row, in both readings
//! ([`TableRead::once_problems`]).
//!
//! The commit state the daemon keeps in the lease table, read here for the
//! tests' own checks: the committer row ([`read_committer`]) and each
//! shard's staged batches ([`staged_batch_count`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use aws_sdk_dynamodb::types::AttributeValue;
use base64::Engine as _;
use serde::Deserialize;

use crate::archive::list_objects;
use crate::check::RecordId;
use crate::daemon::{Daemon, Settings};
use crate::env::{REQUIRED_VAR, TestEnv, e2e_required, env_nonempty};
use crate::fixtures::LeaseRow;
use crate::outcome;
use crate::producer::ProducedRecord;
use crate::seq::Seq;

/// The variable naming the Python with pyiceberg, DuckDB and DuckDB's
/// extension packages (`scripts/test` installs them into `.local/duckdb/`).
pub const PYTHON_VAR: &str = "SHARDSINK_E2E_DUCKDB_PYTHON";

/// The independent reader of Iceberg tables.
pub const READ_TABLE_SCRIPT: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../iceberg/read_table.py");

/// Drops a table from a SQL catalog, or registers a metadata file under its
/// name, through pyiceberg.
pub const SQL_CATALOG_SCRIPT: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../iceberg/sql_catalog.py");

/// The catalog name the daemon uses by default (`--iceberg-catalog-name`);
/// a SQL catalog stores it in its rows, so the reader must use it too.
pub const CATALOG_NAME: &str = "shardsink";

/// The table the tests write: `NAMESPACE.TABLE`. Each test has its own
/// catalog file, so one name serves every test.
pub const TABLE_NAME: &str = "e2e.records";

/// `leaseKey` of the committer row in the lease table.
pub const COMMITTER_KEY: &str = "iceberg#committer";

/// The snapshot summary property carrying shardsink's commit number.
pub const COMMIT_PROPERTY: &str = "shardsink.commit";

/// `$SHARDSINK_E2E_DUCKDB_PYTHON`, or `None` after [`outcome::skip`].
///
/// # Panics
/// Unset with `SHARDSINK_E2E_REQUIRED=1`; set to a file that does not
/// exist.
pub fn reader_python() -> Option<PathBuf> {
    match env_nonempty(PYTHON_VAR) {
        Some(path) => {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "{PYTHON_VAR}={} does not exist (scripts/test installs pyiceberg and DuckDB \
                 into .local/duckdb/)",
                path.display()
            );
            Some(path)
        }
        None if e2e_required() => panic!(
            "{REQUIRED_VAR}=1 but {PYTHON_VAR} is not set: scripts/test installs pyiceberg and \
             DuckDB into .local/duckdb/ and sets it"
        ),
        None => {
            outcome::skip(&format!("no pyiceberg and DuckDB (set {PYTHON_VAR})"));
            None
        }
    }
}

/// One test's Iceberg table: its catalog, the table's name, and how to
/// read it.
#[derive(Clone, Debug)]
pub struct IcebergTable {
    python: PathBuf,
    catalog: Catalog,
    /// `--iceberg-warehouse`.
    warehouse: String,
    table: String,
}

/// Which catalog holds a test's table.
#[derive(Clone, Debug)]
enum Catalog {
    /// A SQL catalog on a SQLite file.
    Sql(PathBuf),
    /// The Glue Data Catalog at this endpoint (moto's).
    Glue(String),
    /// S3 Tables at this endpoint (moto's); the table bucket is the
    /// warehouse.
    S3Tables(String),
    /// An Iceberg REST catalog at `uri` that keeps its tables in the SQL
    /// catalog on the SQLite file `file` (the test double's).
    Rest { uri: String, file: PathBuf },
}

impl IcebergTable {
    /// The table of a test whose files go under `dir` (created; an absolute
    /// path: the daemon's log directory), with its warehouse at
    /// `s3://{bucket}/warehouse`. The catalog file is `dir/catalog.db`; a
    /// leftover one from an earlier run is removed.
    ///
    /// # Panics
    /// When `dir` cannot be created or is not absolute.
    pub fn new(python: PathBuf, dir: &Path, bucket: &str) -> Self {
        assert!(dir.is_absolute(), "{} is not absolute", dir.display());
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let catalog = dir.join("catalog.db");
        let _ = std::fs::remove_file(&catalog);
        Self {
            python,
            catalog: Catalog::Sql(catalog),
            warehouse: format!("s3://{bucket}/warehouse"),
            table: TABLE_NAME.to_owned(),
        }
    }

    /// The table `table` (`NAMESPACE.TABLE`) of the Glue Data Catalog at
    /// `endpoint`, its warehouse at `s3://{bucket}/warehouse`.
    pub fn glue(python: PathBuf, endpoint: &str, bucket: &str, table: &str) -> Self {
        Self {
            python,
            catalog: Catalog::Glue(endpoint.to_owned()),
            warehouse: format!("s3://{bucket}/warehouse"),
            table: table.to_owned(),
        }
    }

    /// The table `table` (`NAMESPACE.TABLE`) in the S3 Tables table bucket
    /// `table_bucket_arn`, S3 Tables at `endpoint`.
    pub fn s3_tables(python: PathBuf, endpoint: &str, table_bucket_arn: &str, table: &str) -> Self {
        Self {
            python,
            catalog: Catalog::S3Tables(endpoint.to_owned()),
            warehouse: table_bucket_arn.to_owned(),
            table: table.to_owned(),
        }
    }

    /// The table `table` (`NAMESPACE.TABLE`) of the REST catalog at `uri`
    /// (`http://127.0.0.1:PORT`), its warehouse `warehouse`
    /// (`s3://BUCKET/PATH`, as the server was given it). The server keeps
    /// its tables in the SQL catalog on the SQLite file `catalog_file`
    /// under the name [`CATALOG_NAME`], as the test double of
    /// [`crate::rest_catalog::RestCatalogServer`] does: the table is read
    /// back from that file, without the server.
    pub fn rest(
        python: PathBuf,
        uri: &str,
        catalog_file: &Path,
        warehouse: &str,
        table: &str,
    ) -> Self {
        Self {
            python,
            catalog: Catalog::Rest {
                uri: uri.to_owned(),
                file: catalog_file.to_owned(),
            },
            warehouse: warehouse.to_owned(),
            table: table.to_owned(),
        }
    }

    /// The catalog's URI as the daemon takes it (`--iceberg-catalog-uri`):
    /// for the SQL catalog, as both the daemon and pyiceberg (SQLAlchemy)
    /// read it, `sqlite:////absolute/path/catalog.db`; for REST, the
    /// server's base URL; for Glue and S3 Tables, their endpoint.
    pub fn catalog_uri(&self) -> String {
        match &self.catalog {
            Catalog::Sql(file) => sqlite_uri(file),
            Catalog::Glue(endpoint) | Catalog::S3Tables(endpoint) => endpoint.clone(),
            Catalog::Rest { uri, .. } => uri.clone(),
        }
    }

    /// The SQLite file `read_table.py` opens as a SQL catalog: the SQL
    /// catalog's, or the one behind the REST server.
    fn sql_file(&self) -> Option<&Path> {
        match &self.catalog {
            Catalog::Sql(file) | Catalog::Rest { file, .. } => Some(file),
            Catalog::Glue(_) | Catalog::S3Tables(_) => None,
        }
    }

    /// `--iceberg-catalog`.
    fn kind(&self) -> &'static str {
        match self.catalog {
            Catalog::Sql(_) => "sql",
            Catalog::Glue(_) => "glue",
            Catalog::S3Tables(_) => "s3tables",
            Catalog::Rest { .. } => "rest",
        }
    }

    /// `settings` writing into this table: `--format iceberg`, the
    /// catalog, the table, the warehouse, a 2 s commit interval and a 1 s
    /// buffer age (so that a run of a few hundred records takes seconds).
    pub fn settings(&self, settings: Settings) -> Settings {
        settings
            .set("format", "iceberg")
            .set("iceberg-catalog", self.kind())
            .set("iceberg-catalog-uri", self.catalog_uri())
            .set("iceberg-table", &self.table)
            .set("iceberg-warehouse", &self.warehouse)
            .set("iceberg-commit-interval", "2s")
            .set("buffer-max-age", "1s")
    }

    /// The flags `shardsink verify` needs to find this table.
    pub fn verify_args(&self) -> Vec<String> {
        [
            ("--iceberg-catalog", self.kind().to_owned()),
            ("--iceberg-catalog-uri", self.catalog_uri()),
            ("--iceberg-table", self.table.clone()),
            ("--iceberg-warehouse", self.warehouse.clone()),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_owned(), value])
        .collect()
    }

    /// `read_table.py`'s arguments naming the table.
    fn reader_args(&self) -> Vec<String> {
        let mut args: Vec<String> = match &self.catalog {
            Catalog::Sql(file) | Catalog::Rest { file, .. } => vec![
                "--catalog-uri".into(),
                sqlite_uri(file),
                "--catalog-name".into(),
                CATALOG_NAME.into(),
            ],
            Catalog::Glue(endpoint) => vec![
                "--catalog".into(),
                "glue".into(),
                "--catalog-endpoint".into(),
                endpoint.clone(),
            ],
            Catalog::S3Tables(endpoint) => vec![
                "--catalog".into(),
                "s3tables".into(),
                "--catalog-endpoint".into(),
                endpoint.clone(),
                "--table-bucket-arn".into(),
                self.warehouse.clone(),
            ],
        };
        args.extend(["--table".into(), self.table.clone()]);
        args
    }

    /// Reads the table once with `read_table.py` (on a blocking thread);
    /// a REST catalog's table from the server's SQLite file.
    /// `Ok(None)` while the catalog file or the table does not exist (the
    /// script's exit 3).
    ///
    /// # Errors
    /// The script fails otherwise (with its stderr), or prints something
    /// other than its JSON document.
    pub async fn read(&self) -> Result<Option<TableRead>> {
        // pyiceberg's SqlCatalog creates a missing catalog file: leave that
        // to the daemon.
        if let Some(file) = self.sql_file()
            && !file.is_file()
        {
            return Ok(None);
        }
        let mut command = Command::new(&self.python);
        command.arg(READ_TABLE_SCRIPT).args(self.reader_args());
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .context("the reader thread panicked")?
            .with_context(|| {
                format!(
                    "failed to run {} {READ_TABLE_SCRIPT}",
                    self.python.display()
                )
            })?;
        match output.status.code() {
            Some(0) => {}
            Some(3) => return Ok(None),
            _ => bail!(
                "read_table.py {} failed ({}):\n{}",
                self.catalog_uri(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ),
        }
        let read: TableRead = serde_json::from_slice(&output.stdout).with_context(|| {
            format!(
                "read_table.py printed no table reading: {}",
                String::from_utf8_lossy(&output.stdout)
                    .chars()
                    .take(2_000)
                    .collect::<String>()
            )
        })?;
        Ok(Some(read))
    }

    /// Runs `sql_catalog.py action` on this table's SQL catalog with
    /// `extra` arguments (on a blocking thread).
    ///
    /// # Errors
    /// Not a SQL catalog; the script fails (with its stderr).
    async fn sql_catalog(&self, action: &str, extra: &[&str]) -> Result<()> {
        let Catalog::Sql(file) = &self.catalog else {
            bail!("{action}: {} is not a SQL catalog", self.catalog_uri());
        };
        let mut command = Command::new(&self.python);
        command
            .arg(SQL_CATALOG_SCRIPT)
            .arg(action)
            .args(["--catalog-uri", &sqlite_uri(file)])
            .args(["--catalog-name", CATALOG_NAME, "--table", &self.table])
            .args(extra);
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .context("the catalog thread panicked")??;
        if !output.status.success() {
            bail!(
                "sql_catalog.py {action} failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }

    /// Drops the table from its SQL catalog, its files left in S3 (pyiceberg's
    /// `drop_table`, no purge).
    ///
    /// # Errors
    /// As `sql_catalog.py`.
    pub async fn drop_from_catalog(&self) -> Result<()> {
        self.sql_catalog("drop", &[]).await
    }

    /// Registers `metadata_location` under the table's name in its SQL
    /// catalog (pyiceberg's `register_table`).
    ///
    /// # Errors
    /// As `sql_catalog.py`.
    pub async fn register(&self, metadata_location: &str) -> Result<()> {
        self.sql_catalog("register", &["--metadata-location", metadata_location])
            .await
    }

    /// The newest metadata file of the table in the SQL catalog's warehouse
    /// (`<warehouse>/<namespace>/<table>/metadata/`): the highest-numbered
    /// `NNNNN-<uuid>.metadata.json`, what an operator restoring a dropped
    /// table registers.
    ///
    /// # Errors
    /// The listing fails, or finds no metadata file.
    pub async fn newest_metadata_file(&self, env: &TestEnv) -> Result<String> {
        let location = format!(
            "{}/{}/metadata/",
            self.warehouse,
            self.table.replace('.', "/")
        );
        let (bucket, prefix) = location
            .strip_prefix("s3://")
            .and_then(|rest| rest.split_once('/'))
            .with_context(|| format!("{location} is not an S3 location"))?;
        let version = |key: &str| {
            let name = key.rsplit('/').next().unwrap_or(key);
            name.strip_suffix(".metadata.json")
                .and_then(|stem| stem.split_once('-'))
                .and_then(|(number, _)| number.parse::<u64>().ok())
        };
        let newest = list_objects(env, bucket, prefix)
            .await?
            .into_iter()
            .filter_map(|object| Some((version(&object.key)?, object.key)))
            .max_by_key(|(version, _)| *version)
            .map(|(_, key)| format!("s3://{bucket}/{key}"));
        newest.with_context(|| format!("no metadata file under {location}"))
    }

    /// [`IcebergTable::read`], with a missing table an error.
    ///
    /// # Errors
    /// As [`IcebergTable::read`]; no table.
    pub async fn read_existing(&self) -> Result<TableRead> {
        self.read()
            .await?
            .with_context(|| format!("no table {} in {}", self.table, self.catalog_uri()))
    }

    /// Polls the table until both readings hold every record of `expected`
    /// (each at least once), failing early when one of `daemons` exits.
    /// A failing read counts as "not yet" (the daemon may be writing the
    /// catalog); the last error is reported on a timeout. Prints progress
    /// every 10 s. Returns the last reading.
    ///
    /// # Errors
    /// A daemon exited (with its status and log tail), or `timeout` passed
    /// (with how many records are missing and a few of them).
    pub async fn wait_for_records(
        &self,
        expected: &[ProducedRecord],
        daemons: &mut [&mut Daemon],
        timeout: Duration,
    ) -> Result<TableRead> {
        let wanted: HashSet<RecordId> = expected.iter().map(RecordId::of_produced).collect();
        let start = Instant::now();
        let mut last_report = Instant::now();
        loop {
            let last = match self.read().await {
                Ok(Some(read)) => {
                    let missing = read.missing_from_either(&wanted);
                    if missing.is_empty() {
                        println!(
                            "table holds all {} records ({} rows, {} snapshots) after {:.1?}",
                            wanted.len(),
                            read.pyiceberg_rows.len(),
                            read.snapshots.len(),
                            start.elapsed()
                        );
                        return Ok(read);
                    }
                    let mut sample: Vec<String> =
                        missing.iter().take(5).map(ToString::to_string).collect();
                    sample.sort();
                    format!(
                        "{} of {} records missing (e.g. {}); {} rows, {} snapshots",
                        missing.len(),
                        wanted.len(),
                        sample.join(", "),
                        read.pyiceberg_rows.len(),
                        read.snapshots.len()
                    )
                }
                Ok(None) => "no table yet".to_owned(),
                Err(error) => format!("read failed: {error:#}"),
            };
            for daemon in daemons.iter_mut() {
                if let Some(status) = daemon.exit_status() {
                    bail!(
                        "shardsink exited ({status}) while waiting for the table: {last}; log {}:\n{}",
                        daemon.log_path().display(),
                        daemon.log_tail(60)
                    );
                }
            }
            if start.elapsed() >= timeout {
                bail!("timed out after {timeout:?} waiting for the table: {last}");
            }
            if last_report.elapsed() >= Duration::from_secs(10) {
                println!("waiting for the table: {last}");
                last_report = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// `sqlite:///` and the absolute `file`: SQLAlchemy's
/// `sqlite:////absolute/path.db`, which the daemon also takes.
fn sqlite_uri(file: &Path) -> String {
    format!("sqlite:///{}", file.display())
}

/// One snapshot of the table, oldest first in [`TableRead::snapshots`].
#[derive(Clone, Debug, Deserialize)]
pub struct SnapshotInfo {
    /// The snapshot's id.
    pub snapshot_id: i64,
    /// Its parent's id.
    pub parent_id: Option<i64>,
    /// When it was committed (Unix milliseconds).
    pub timestamp_ms: i64,
    /// `append`, `overwrite`, ...
    pub operation: Option<String>,
    /// Every summary property (values as the reader gave them).
    pub summary: BTreeMap<String, serde_json::Value>,
}

impl SnapshotInfo {
    /// The shardsink commit number in the summary, if shardsink made it.
    pub fn shardsink_commit(&self) -> Option<String> {
        self.summary.get(COMMIT_PROPERTY).map(|value| match value {
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        })
    }
}

/// One live data file of the current snapshot.
#[derive(Clone, Debug, Deserialize)]
pub struct DataFileInfo {
    /// Its location (`s3://…`).
    pub path: String,
    /// Its rows.
    pub record_count: i64,
}

/// One row of the table, the columns that identify and carry a record (the
/// rest are ignored).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct TableRow {
    /// `shard_id`.
    pub shard_id: String,
    /// `sequence_number` (decimal text).
    pub sequence_number: String,
    /// `sub_sequence_number`: null outside KPL aggregates.
    pub sub_sequence_number: Option<u64>,
    /// `partition_key`.
    pub partition_key: String,
    /// `data`, base64 (absent when the table has typed payload columns).
    #[serde(default)]
    pub data: Option<String>,
}

impl TableRow {
    /// The record this row holds.
    pub fn id(&self) -> RecordId {
        RecordId {
            shard_id: self.shard_id.clone(),
            sequence_number: self.sequence_number.clone(),
            sub_sequence_number: self.sub_sequence_number,
        }
    }
}

/// What `read_table.py` printed (the fields the tests use).
#[derive(Clone, Debug, Deserialize)]
pub struct TableRead {
    /// The table's current metadata file.
    pub metadata_location: String,
    /// `None` for a table never written.
    pub current_snapshot_id: Option<i64>,
    /// Every snapshot, oldest first.
    pub snapshots: Vec<SnapshotInfo>,
    /// The live data files.
    pub data_files: Vec<DataFileInfo>,
    /// Every live row as pyiceberg reads it.
    pub pyiceberg_rows: Vec<TableRow>,
    /// Every live row as DuckDB reads it.
    pub duckdb_rows: Vec<TableRow>,
}

impl TableRead {
    /// The snapshots shardsink committed (those with [`COMMIT_PROPERTY`]).
    pub fn shardsink_commits(&self) -> usize {
        self.snapshots
            .iter()
            .filter(|s| s.shardsink_commit().is_some())
            .count()
    }

    /// Both readings as (reader name, rows).
    pub fn readings(&self) -> [(&'static str, &[TableRow]); 2] {
        [
            ("pyiceberg", &self.pyiceberg_rows),
            ("DuckDB", &self.duckdb_rows),
        ]
    }

    /// The records of `wanted` missing from either reading.
    pub fn missing_from_either(&self, wanted: &HashSet<RecordId>) -> Vec<RecordId> {
        let mut missing = HashSet::new();
        for (_, rows) in self.readings() {
            let present: HashSet<RecordId> = rows.iter().map(TableRow::id).collect();
            missing.extend(wanted.difference(&present).cloned());
        }
        let mut missing: Vec<RecordId> = missing.into_iter().collect();
        missing.sort();
        missing
    }

    /// Every way the table differs from "each record of `expected` in
    /// exactly one live row, and nothing else", in each reading: records
    /// missing, doubled, rows of no expected record, and — with
    /// `compare_data` (a table with the `data` column) — a row whose
    /// partition key or payload is not its record's. Also a data file that
    /// is live twice, and readings that disagree on the row count.
    pub fn once_problems(&self, expected: &[ProducedRecord], compare_data: bool) -> Vec<String> {
        let by_id: HashMap<RecordId, &ProducedRecord> = expected
            .iter()
            .map(|record| (RecordId::of_produced(record), record))
            .collect();
        let mut problems = Vec::new();
        for (reader, rows) in self.readings() {
            let mut counts: BTreeMap<RecordId, usize> = BTreeMap::new();
            for row in rows {
                let id = row.id();
                *counts.entry(id.clone()).or_default() += 1;
                let Some(record) = by_id.get(&id) else {
                    problems.push(format!("{reader}: a row of no produced record: {row:?}"));
                    continue;
                };
                if row.partition_key != record.partition_key {
                    problems.push(format!(
                        "{reader}: {id} has partition key {:?}, produced {:?}",
                        row.partition_key, record.partition_key
                    ));
                }
                if compare_data {
                    let want = base64::engine::general_purpose::STANDARD.encode(&record.data);
                    if row.data.as_deref() != Some(want.as_str()) {
                        problems.push(format!(
                            "{reader}: {id} has data {:?}, produced {want:?}",
                            row.data
                        ));
                    }
                }
            }
            for (id, count) in &counts {
                if *count > 1 && by_id.contains_key(id) {
                    problems.push(format!("{reader}: {id} is in {count} live rows"));
                }
            }
            let mut missing: Vec<&RecordId> = by_id
                .keys()
                .filter(|id| !counts.contains_key(*id))
                .collect();
            missing.sort();
            for id in missing {
                problems.push(format!("{reader}: {id} is in no live row"));
            }
        }
        if self.pyiceberg_rows.len() != self.duckdb_rows.len() {
            problems.push(format!(
                "pyiceberg reads {} rows, DuckDB {}",
                self.pyiceberg_rows.len(),
                self.duckdb_rows.len()
            ));
        }
        let mut paths: BTreeMap<&str, usize> = BTreeMap::new();
        for file in &self.data_files {
            *paths.entry(file.path.as_str()).or_default() += 1;
        }
        for (path, count) in paths {
            if count > 1 {
                problems.push(format!("data file {path} is live {count} times"));
            }
        }
        problems
    }

    /// Asserts [`TableRead::once_problems`] finds nothing; `what` names the
    /// moment. Prints a summary either way.
    ///
    /// # Panics
    /// With the first 40 problems and the snapshots.
    pub fn assert_once(&self, expected: &[ProducedRecord], compare_data: bool, what: &str) {
        let problems = self.once_problems(expected, compare_data);
        println!(
            "{what}: {} records expected; pyiceberg {} rows, DuckDB {} rows, {} live data files, \
             {} snapshots ({} by shardsink): {} problems",
            expected.len(),
            self.pyiceberg_rows.len(),
            self.duckdb_rows.len(),
            self.data_files.len(),
            self.snapshots.len(),
            self.shardsink_commits(),
            problems.len()
        );
        assert!(
            problems.is_empty(),
            "{what}: the table does not hold each record once ({} problems):\n{}\nsnapshots: {:#?}",
            problems.len(),
            problems
                .iter()
                .take(40)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n"),
            self.snapshots
        );
    }
}

/// Every record of `produced` at or below its shard's checkpoint in
/// `rows` must be in the table (`read`, pyiceberg's reading): a
/// checkpoint moves only past committed records. Returns the records that
/// are not.
pub fn checkpoint_problems(
    rows: &[LeaseRow],
    produced: &[ProducedRecord],
    read: &TableRead,
) -> Vec<String> {
    let present: HashSet<RecordId> = read.pyiceberg_rows.iter().map(TableRow::id).collect();
    let mut problems = Vec::new();
    for row in rows {
        let Some(checkpoint) = row.checkpoint_sequence_number() else {
            continue;
        };
        for record in produced.iter().filter(|r| r.shard_id == row.lease_key) {
            let Ok(seq) = Seq::parse(&record.sequence_number) else {
                continue;
            };
            let id = RecordId::of_produced(record);
            if seq <= checkpoint && !present.contains(&id) {
                problems.push(format!(
                    "{id} is at or below {}'s checkpoint {checkpoint} but not in the table",
                    row.lease_key
                ));
            }
        }
    }
    problems
}

/// The committer row: who commits, and its counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitterRow {
    /// `leaseOwner`.
    pub owner: Option<String>,
    /// `leaseCounter`.
    pub counter: Option<u64>,
    /// Whether it carries a published commit state (`committed`).
    pub published: bool,
}

/// The committer row of `table` (consistent GetItem), `None` when there is
/// none (or no table).
///
/// API: <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_GetItem.html>
///
/// # Errors
/// Any AWS error other than a missing table.
pub async fn read_committer(env: &TestEnv, table: &str) -> Result<Option<CommitterRow>> {
    let output = match env
        .dynamodb
        .get_item()
        .table_name(table)
        .key("leaseKey", AttributeValue::S(COMMITTER_KEY.to_owned()))
        .consistent_read(true)
        .send()
        .await
    {
        Ok(output) => output,
        Err(err) => {
            let err = err.into_service_error();
            if err.is_resource_not_found_exception() {
                return Ok(None);
            }
            return Err(err)
                .with_context(|| format!("failed to read the committer row of {table}"));
        }
    };
    Ok(output.item().map(|item| CommitterRow {
        owner: item.get("leaseOwner").and_then(|v| v.as_s().ok()).cloned(),
        counter: item
            .get("leaseCounter")
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok()),
        published: item.contains_key("committed"),
    }))
}

/// How many staged batches (`stagedBatches`) the lease rows hold.
pub fn staged_batch_count(rows: &[LeaseRow]) -> usize {
    rows.iter()
        .filter_map(|row| row.item.get("stagedBatches"))
        .filter_map(|value| value.as_l().ok())
        .map(Vec::len)
        .sum()
}

/// Shard lease rows only: the committer row (`iceberg#…`) left out.
pub fn shard_rows(rows: Vec<LeaseRow>) -> Vec<LeaseRow> {
    rows.into_iter()
        .filter(|row| !row.lease_key.starts_with("iceberg#"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn produced(shard: &str, seq: &str, data: &[u8]) -> ProducedRecord {
        ProducedRecord {
            shard_id: shard.to_owned(),
            sequence_number: seq.to_owned(),
            sub_sequence_number: None,
            partition_key: "pk".to_owned(),
            data: data.to_vec(),
        }
    }

    fn row(shard: &str, seq: &str, data: &[u8]) -> TableRow {
        TableRow {
            shard_id: shard.to_owned(),
            sequence_number: seq.to_owned(),
            sub_sequence_number: None,
            partition_key: "pk".to_owned(),
            data: Some(base64::engine::general_purpose::STANDARD.encode(data)),
        }
    }

    fn read(rows: Vec<TableRow>) -> TableRead {
        TableRead {
            metadata_location: "s3://b/m.json".to_owned(),
            current_snapshot_id: Some(1),
            snapshots: Vec::new(),
            data_files: Vec::new(),
            duckdb_rows: rows.clone(),
            pyiceberg_rows: rows,
        }
    }

    #[test]
    fn finds_missing_doubled_foreign_and_changed_rows() {
        let expected = [produced("s0", "1", b"a"), produced("s0", "2", b"b")];
        assert!(
            read(vec![row("s0", "2", b"b"), row("s0", "1", b"a")])
                .once_problems(&expected, true)
                .is_empty()
        );
        let problems = read(vec![
            row("s0", "1", b"a"),
            row("s0", "1", b"a"),
            row("s1", "1", b"a"),
        ])
        .once_problems(&expected, true);
        let text = problems.join("\n");
        for (reader, _) in read(Vec::new()).readings() {
            assert!(
                text.contains(&format!("{reader}: s0/1 is in 2 live rows")),
                "{text}"
            );
            assert!(
                text.contains(&format!("{reader}: s0/2 is in no live row")),
                "{text}"
            );
            assert!(
                text.contains(&format!("{reader}: a row of no produced record")),
                "{text}"
            );
        }
        let changed = read(vec![row("s0", "1", b"a"), row("s0", "2", b"x")]);
        assert_eq!(changed.once_problems(&expected, true).len(), 2);
        assert!(changed.once_problems(&expected, false).is_empty());
    }

    #[test]
    fn the_readings_must_agree() {
        let expected = [produced("s0", "1", b"a")];
        let mut one_short = read(vec![row("s0", "1", b"a")]);
        one_short.duckdb_rows.clear();
        let text = one_short.once_problems(&expected, true).join("\n");
        assert!(text.contains("DuckDB: s0/1 is in no live row"), "{text}");
        assert!(text.contains("pyiceberg reads 1 rows, DuckDB 0"), "{text}");
    }

    #[test]
    fn parses_what_the_reader_prints() {
        let text = r#"{"metadata_location": "s3://b/w/m.json", "current_snapshot_id": 7,
            "snapshots": [{"snapshot_id": 7, "parent_id": null, "sequence_number": 1,
              "timestamp_ms": 1, "operation": "append",
              "summary": {"operation": "append", "shardsink.commit": "1"}}],
            "data_files": [{"path": "s3://b/w/d.parquet", "record_count": 1, "partition": {}}],
            "partition_spec": [], "schema": [],
            "pyiceberg_rows": [{"shard_id": "s", "sequence_number": "1",
              "sub_sequence_number": null, "partition_key": "k", "data": "YQ==",
              "approximate_arrival_timestamp": "2026-11-28T10:00:00.123000Z"}],
            "duckdb_rows": []}"#;
        let read: TableRead = serde_json::from_str(text).unwrap();
        assert_eq!(read.shardsink_commits(), 1);
        assert_eq!(read.pyiceberg_rows[0].data.as_deref(), Some("YQ=="));
        assert_eq!(read.snapshots[0].shardsink_commit().as_deref(), Some("1"));
    }
}
