//! `--format iceberg` with the catalogs other than SQL, on moto: the Glue
//! Data Catalog, Amazon S3 Tables and an Iceberg REST catalog. Per catalog,
//! a 2-shard stream gets records in two rounds; the daemon runs, is killed
//! with SIGKILL while the first round is being staged and committed, runs
//! again and is stopped gracefully once the table holds every record. The
//! table is then read through the catalog, independently of the daemon, by
//! `tests/iceberg/read_table.py`: pyiceberg (its GlueCatalog; for S3
//! Tables, the metadata file GetTableMetadataLocation names; for REST, the
//! SQL catalog behind the server) and DuckDB's `iceberg` extension must
//! each hold every produced record exactly once — identified by shard,
//! sequence number and sub-sequence number — with its partition key and
//! payload, and no other row.
//!
//! The REST catalog is the test double `tests/iceberg/rest_catalog.py`,
//! which the test starts: the REST protocol in front of pyiceberg's
//! `SqlCatalog` on a SQLite file, its warehouse in the test's bucket. The
//! daemon reaches the table through REST only; the test stops the server
//! (SIGTERM, exit 0) before the last reading, which opens the SQLite file
//! as a SQL catalog of the same name.
//!
//! moto is the only local server with Glue and S3 Tables, and the REST
//! test is run with them; the SQL catalog and the failure scenarios are in
//! the `iceberg` family.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, Result};
use shardsink_e2e::daemon::log_dir;
use shardsink_e2e::env::endpoint_url;
use shardsink_e2e::iam::{self, TargetProxy};
use shardsink_e2e::rest_catalog::RestCatalogServer;
use shardsink_e2e::table::{IcebergTable, reader_python};
use shardsink_e2e::wait::wait_for;
use shardsink_e2e::{Daemon, RecordSpec, Scenario, Versioning, outcome, require_env, scaled};

/// Records per round.
const RECORDS: usize = 150;

/// Which catalog holds the table.
#[derive(Clone, Copy, Debug)]
enum Catalog {
    Glue,
    S3Tables,
    /// `tests/iceberg/rest_catalog.py`, started by the test.
    Rest,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn glue_table_holds_each_record_once_across_a_kill() {
    run(Catalog::Glue).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_tables_table_holds_each_record_once_across_a_kill() {
    run(Catalog::S3Tables).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_table_holds_each_record_once_across_a_kill() {
    run(Catalog::Rest).await;
}

async fn run(catalog: Catalog) {
    let env = require_env!();
    if std::env::var("SHARDSINK_TEST_PROFILE").as_deref() != Ok("moto") {
        outcome::skip_unless_profile(
            "moto",
            "Glue and S3 Tables are served by moto only; REST is run with them",
        );
        return;
    }
    let Some(python) = reader_python() else {
        return;
    };
    let name = match catalog {
        Catalog::Glue => "ice-glue",
        Catalog::S3Tables => "ice-s3t",
        Catalog::Rest => "ice-rest",
    };
    let scenario = Scenario::create(&env, name, 2, Versioning::Off)
        .await
        .unwrap();
    let endpoint = endpoint_url("S3").expect("moto's endpoint is set");
    let table_name = format!("{}.events", scenario.stream.replace('-', "_"));
    // Declared before the daemons, so dropped (killed) after them.
    let mut rest_server = None;
    let table = match catalog {
        Catalog::Glue => IcebergTable::glue(python, &endpoint, &scenario.bucket, &table_name),
        Catalog::S3Tables => {
            let arn = create_table_bucket(&endpoint, &scenario.bucket)
                .await
                .unwrap();
            IcebergTable::s3_tables(python, &endpoint, &arn, &table_name)
        }
        Catalog::Rest => {
            let warehouse = format!("s3://{}/wh", scenario.bucket);
            let server = RestCatalogServer::start(
                &python,
                &log_dir(&scenario.stream),
                &warehouse,
                &endpoint,
            )
            .unwrap_or_else(|err| panic!("{err:#}"));
            println!(
                "REST catalog at {}, log {}",
                server.uri(),
                server.log_path().display()
            );
            let table = IcebergTable::rest(
                python,
                server.uri(),
                server.catalog_file(),
                &warehouse,
                &table_name,
            );
            rest_server = Some(server);
            table
        }
    };
    // The calls made, for the IAM policy's check: the daemon records its
    // own clients' (S3 Tables' among them); Glue's are seen on the wire.
    let operations = log_dir(&scenario.stream).join("aws-operations.txt");
    let glue_proxy = match catalog {
        Catalog::Glue => Some(TargetProxy::start(&endpoint).await.unwrap()),
        Catalog::S3Tables | Catalog::Rest => None,
    };
    let mut settings = table
        .settings(scenario.settings.clone().set("buffer-max-records", "40"))
        .set("record-aws-operations", operations.display().to_string());
    if let Some(proxy) = &glue_proxy {
        settings = settings.set("iceberg-catalog-uri", &proxy.url);
    }
    let mut produced = scenario.put(&records(name, 0)).await.unwrap();

    // Killed once the first commit landed: the rest of the round is staged,
    // being written or still to read.
    let mut daemon = Daemon::spawn(&settings).unwrap();
    wait_for(
        scaled(Duration::from_secs(90)),
        "a first table commit",
        || async {
            Ok(table
                .read()
                .await
                .ok()
                .flatten()
                .filter(|t| !t.pyiceberg_rows.is_empty()))
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err:#}\nlog:\n{}", daemon.log_tail(40)));
    daemon.kill().unwrap();

    produced.extend(scenario.put(&records(name, 1)).await.unwrap());
    let mut daemon = Daemon::spawn(&settings).unwrap();
    let read = table
        .wait_for_records(
            &produced,
            &mut [&mut daemon],
            scaled(Duration::from_secs(120)),
        )
        .await;
    if let Err(err) = read {
        panic!("{err:#}");
    }
    shardsink_e2e::stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap();
    // The last reading needs no server: the REST catalog's table is read
    // from its SQLite file.
    if let Some(server) = rest_server.as_mut() {
        server
            .stop(scaled(Duration::from_secs(10)))
            .await
            .unwrap_or_else(|err| panic!("{err:#}"));
    }
    table
        .read_existing()
        .await
        .unwrap()
        .assert_once(&produced, true, &format!("{catalog:?}"));
    let recorded = std::fs::read_to_string(&operations).unwrap();
    let glue_targets = glue_proxy.map(|proxy| proxy.targets()).unwrap_or_default();
    assert_policy_grants_the_calls(catalog, &recorded, &glue_targets);
    outcome::ran();
}

/// `deploy/iam-policy-iceberg.json` grants exactly the catalog's calls the
/// run made (`recorded`: the daemon's record; `glue_targets`: the Glue
/// requests' `X-Amz-Target`; a REST catalog's are its server's to
/// authorize), and the table files' reads and writes (S3
/// object calls; for S3 Tables authorized as `s3tables:GetTableData` and
/// `PutTableData`, Service Authorization Reference); every other call
/// made is granted by `deploy/iam-policy.json`.
fn assert_policy_grants_the_calls(catalog: Catalog, recorded: &str, glue_targets: &[String]) {
    let mut used = iam::recorded_actions(recorded);
    used.extend(
        glue_targets
            .iter()
            .filter_map(|target| target.strip_prefix("AWSGlue."))
            .map(|operation| format!("glue:{operation}")),
    );
    // A REST catalog's calls are the server's to authorize: only the
    // table's files are the policy's.
    let (service, catalog_sid, files_sid) = match catalog {
        Catalog::Glue => ("glue:", Some("IcebergGlueCatalog"), "IcebergTableFiles"),
        Catalog::S3Tables => (
            "s3tables:",
            Some("IcebergS3TablesCatalog"),
            "IcebergS3TablesData",
        ),
        Catalog::Rest => ("rest:", None, "IcebergTableFiles"),
    };
    let granted = |sid: &str| iam::policy_actions("iam-policy-iceberg.json", |s| s == sid);
    let catalog_calls: BTreeSet<String> = used
        .iter()
        .filter(|action| action.starts_with(service))
        .cloned()
        .collect();
    println!("{catalog:?}: catalog calls {catalog_calls:?}; all {used:?}");
    if let Some(catalog_sid) = catalog_sid {
        assert_eq!(
            catalog_calls,
            granted(catalog_sid),
            "the {catalog_sid} statement against the calls made"
        );
    }
    let file_calls: BTreeSet<String> = used
        .iter()
        .filter(|action| action.starts_with("s3:") && action.ends_with("Object"))
        .map(|action| match catalog {
            Catalog::Glue | Catalog::Rest => action.clone(),
            Catalog::S3Tables => action
                .replace("s3:", "s3tables:")
                .replace("Object", "TableData"),
        })
        .collect();
    assert_eq!(
        file_calls,
        granted(files_sid),
        "the {files_sid} statement against the object calls made"
    );
    let main = iam::policy_actions("iam-policy.json", |_| true);
    let elsewhere: Vec<&String> = used
        .iter()
        .filter(|action| !action.starts_with(service) && !action.starts_with("s3:"))
        .filter(|action| !main.contains(*action))
        .collect();
    assert!(
        elsewhere.is_empty(),
        "deploy/iam-policy.json lacks {elsewhere:?}"
    );
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
