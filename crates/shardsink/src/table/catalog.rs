//! Which Iceberg catalog holds the table, and opening it.
//!
//! Every catalog reads and writes the table's files through the daemon's
//! own S3 client (`aws::table_storage`), so that the warehouse honours the
//! same endpoint, region, credentials and path style as the archive.
//!
//! | `--iceberg-catalog` | catalog | `--iceberg-catalog-uri` | `--iceberg-warehouse` |
//! |---|---|---|---|
//! | `sql` | a SQLite file (iceberg's SQL catalog, as pyiceberg's `SqlCatalog` reads it) | `sqlite:///absolute/path.db`, created if missing | `s3://bucket/prefix` |
//! | `glue` | the AWS Glue Data Catalog | an endpoint override (else `AWS_ENDPOINT_URL_GLUE` or AWS's) | `s3://bucket/prefix` |
//! | `s3tables` | Amazon S3 Tables | an endpoint override (else `AWS_ENDPOINT_URL_S3TABLES` or AWS's) | the table bucket's ARN |
//! | `rest` | an Iceberg REST catalog | its base URL | as the server expects |

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aws_config::SdkConfig;
use clap::ValueEnum;
use iceberg::io::StorageFactory;
use iceberg::table::Table;
use iceberg::{Catalog, CatalogBuilder, Error as IcebergError, ErrorKind, TableIdent};
use iceberg_catalog_glue::GlueCatalogBuilder;
use iceberg_catalog_rest::RestCatalogBuilder;
use iceberg_catalog_s3tables::S3TablesCatalogBuilder;
use iceberg_catalog_sql::{SqlBindStyle, SqlCatalogBuilder};

use super::create::Instants;

/// The catalog kinds `--iceberg-catalog` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CatalogKind {
    /// iceberg's SQL catalog on a SQLite file.
    Sql,
    /// The AWS Glue Data Catalog.
    Glue,
    /// Amazon S3 Tables.
    #[value(name = "s3tables")]
    S3Tables,
    /// An Iceberg REST catalog.
    Rest,
}

impl CatalogKind {
    /// How a table this catalog creates types its instants.
    pub fn instants(self) -> Instants {
        match self {
            Self::Glue => Instants::Utc,
            Self::Sql | Self::S3Tables | Self::Rest => Instants::WithZone,
        }
    }

    /// The setting's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sql => "sql",
            Self::Glue => "glue",
            Self::S3Tables => "s3tables",
            Self::Rest => "rest",
        }
    }
}

/// The file a `sqlite://` catalog URI names: `sqlite:///abs/path.db` (the
/// form sqlx and most tools take) or `sqlite:////abs/path.db` (SQLAlchemy's
/// and so pyiceberg's form of the same absolute path); a relative path
/// (`sqlite://catalog.db`) is relative to the working directory.
///
/// # Errors
/// Not a `sqlite://` URI, or no path.
pub fn sqlite_path(uri: &str) -> Result<PathBuf, String> {
    let rest = uri.strip_prefix("sqlite://").ok_or_else(|| {
        format!("`{uri}` is not a sqlite:// URI (example: sqlite:///var/lib/shardsink/catalog.db)")
    })?;
    let rest = rest.split('?').next().unwrap_or_default();
    let path = match rest.strip_prefix("//") {
        Some(absolute) => format!("/{}", absolute.trim_start_matches('/')),
        None => rest.to_owned(),
    };
    if path.is_empty() || path == "/" {
        return Err(format!("`{uri}` names no file"));
    }
    Ok(PathBuf::from(path))
}

/// The URI sqlx opens for the catalog file at `path`: read-write, created
/// if missing (`mode=rwc`).
pub fn sqlx_uri(path: &Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

/// `NAMESPACE.TABLE` as a table identifier: the namespace is everything
/// before the last dot (a nested namespace is `a.b.table`).
///
/// # Errors
/// No dot, or an empty part.
pub fn table_ident(text: &str) -> Result<TableIdent, String> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.len() < 2 || parts.iter().any(|part| part.is_empty()) {
        return Err(format!(
            "`{text}` is not NAMESPACE.TABLE (example: analytics.clicks)"
        ));
    }
    TableIdent::from_strs(parts).map_err(|err| err.to_string())
}

/// A table bucket's ARN: `arn:aws:s3tables:REGION:ACCOUNT:bucket/NAME`
/// ([S3 Tables ARNs]).
///
/// [S3 Tables ARNs]: https://docs.aws.amazon.com/AmazonS3/latest/userguide/s3-tables-buckets-naming.html
///
/// # Errors
/// Not such an ARN.
pub fn table_bucket_arn(text: &str) -> Result<&str, String> {
    let fields: Vec<&str> = text.splitn(6, ':').collect();
    let valid = fields.len() == 6
        && fields[0] == "arn"
        && fields[2] == "s3tables"
        && fields[5]
            .strip_prefix("bucket/")
            .is_some_and(|name| !name.is_empty());
    if valid {
        Ok(text)
    } else {
        Err(format!(
            "`{text}` is not a table bucket ARN (example: arn:aws:s3tables:us-east-1:111122223333:bucket/analytics)"
        ))
    }
}

/// An `s3://bucket/prefix` warehouse, without a trailing slash.
///
/// # Errors
/// Not an `s3://` URI with a bucket.
pub fn s3_warehouse(text: &str) -> Result<String, String> {
    let rest = text.strip_prefix("s3://").ok_or_else(|| {
        format!("`{text}` is not an s3:// URI (example: s3://analytics/warehouse)")
    })?;
    if rest.split('/').next().is_none_or(str::is_empty) {
        return Err(format!("`{text}` names no bucket"));
    }
    Ok(text.trim_end_matches('/').to_owned())
}

/// The catalog settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogSettings {
    /// Which catalog.
    pub kind: CatalogKind,
    /// The catalog's name (`--iceberg-catalog-name`): for `sql`, the
    /// `catalog_name` of its rows, as pyiceberg's `SqlCatalog(name)` reads
    /// them.
    pub name: String,
    /// `--iceberg-catalog-uri`: the SQLite URI (`sql`), the endpoint
    /// (`rest`), or an endpoint override (`glue`, `s3tables`).
    pub uri: Option<String>,
    /// `--iceberg-warehouse`: an `s3://` URI, or the table bucket's ARN.
    pub warehouse: Option<String>,
}

/// Opens the catalog. Its table files are read and written through
/// `storage` (the daemon's S3 client; tests pass a local one); Glue and S3
/// Tables calls use `sdk` (the daemon's AWS configuration: region,
/// credentials).
///
/// # Errors
/// A setting the catalog rejects; for `sql`, a catalog file that cannot be
/// created or opened.
pub async fn open(
    settings: &CatalogSettings,
    storage: Arc<dyn StorageFactory>,
    sdk: &SdkConfig,
) -> Result<Arc<dyn Catalog>, IcebergError> {
    let name = settings.name.clone();
    let mut props = HashMap::new();
    if let Some(warehouse) = &settings.warehouse {
        props.insert("warehouse".to_owned(), warehouse.clone());
    }
    Ok(match settings.kind {
        CatalogKind::Sql => {
            let uri = settings.uri.as_deref().unwrap_or_default();
            let path =
                sqlite_path(uri).map_err(|err| IcebergError::new(ErrorKind::DataInvalid, err))?;
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|err| {
                    IcebergError::new(
                        ErrorKind::Unexpected,
                        format!("creating the catalog's directory {}", parent.display()),
                    )
                    .with_source(err)
                })?;
            }
            let catalog = SqlCatalogBuilder::default()
                .uri(sqlx_uri(&path))
                .warehouse_location(settings.warehouse.clone().unwrap_or_default())
                .sql_bind_style(SqlBindStyle::QMark)
                .with_storage_factory(storage)
                .load(name, HashMap::new())
                .await?;
            Arc::new(catalog)
        }
        CatalogKind::Glue => {
            if let Some(uri) = &settings.uri {
                props.insert("uri".to_owned(), uri.clone());
            }
            if let Some(region) = sdk.region() {
                props.insert("region_name".to_owned(), region.to_string());
            }
            let catalog = GlueCatalogBuilder::default()
                .with_storage_factory(storage)
                .load(name, props)
                .await?;
            Arc::new(catalog)
        }
        CatalogKind::S3Tables => {
            let arn = settings.warehouse.clone().unwrap_or_default();
            let mut config = aws_sdk_s3tables::config::Builder::from(sdk);
            if let Some(uri) = &settings.uri {
                config = config.endpoint_url(uri);
            }
            // Test builds can record every call (see `aws::recorder`).
            #[cfg(feature = "failpoints")]
            if let Some(recorder) = crate::aws::recorder::OperationRecorder::from_env() {
                config = config.interceptor(recorder);
            }
            let catalog = S3TablesCatalogBuilder::default()
                .with_client(aws_sdk_s3tables::Client::from_conf(config.build()))
                .with_table_bucket_arn(arn)
                .with_storage_factory(storage)
                .load(name, HashMap::new())
                .await?;
            Arc::new(catalog)
        }
        CatalogKind::Rest => {
            if let Some(uri) = &settings.uri {
                props.insert("uri".to_owned(), uri.clone());
            }
            let catalog = RestCatalogBuilder::default()
                .with_storage_factory(storage)
                .load(name, props)
                .await?;
            Arc::new(catalog)
        }
    })
}

/// Loads `table` from `catalog`, a missing table `TableNotFound` whatever
/// the catalog: the Glue catalog reports it (Glue's
/// `EntityNotFoundException`) as `Unexpected` from `load_table`, and only
/// its `table_exists` tells the two apart. So a load that fails otherwise
/// while the catalog says the table does not exist is `TableNotFound`.
/// Every load of the daemon's and `verify`'s goes through here.
///
/// # Errors
/// iceberg's error from `load_table`, its kind `TableNotFound` when the
/// table is gone.
pub async fn load_table(catalog: &dyn Catalog, table: &TableIdent) -> Result<Table, IcebergError> {
    match catalog.load_table(table).await {
        Err(err)
            if err.kind() != ErrorKind::TableNotFound
                && matches!(catalog.table_exists(table).await, Ok(false)) =>
        {
            Err(IcebergError::new(
                ErrorKind::TableNotFound,
                format!("the catalog has no table {table}"),
            )
            .with_source(err))
        }
        loaded => loaded,
    }
}

#[cfg(test)]
mod tests {
    use iceberg::io::LocalFsStorageFactory;

    use super::*;
    use crate::table::commit::{CommitOutcome, commit_staged, read_state};
    use crate::table::create::find_or_create;
    use crate::table::test_support::{default_new_table, live_files, staged};

    fn sql_settings(dir: &Path, name: &str) -> CatalogSettings {
        CatalogSettings {
            kind: CatalogKind::Sql,
            name: name.to_owned(),
            uri: Some(format!("sqlite:///{}/catalog/c.db", dir.display())),
            warehouse: Some(format!("file://{}/warehouse", dir.display())),
        }
    }

    #[tokio::test]
    async fn a_sql_catalog_file_is_created_and_keeps_the_commits_across_openings() {
        let dir = tempfile::tempdir().unwrap();
        let sdk = SdkConfig::builder().build();
        let settings = sql_settings(dir.path(), "shardsink");
        let ident = table_ident("archive.events").unwrap();
        let catalog = open(&settings, Arc::new(LocalFsStorageFactory), &sdk)
            .await
            .unwrap();
        let table = find_or_create(catalog.as_ref(), &ident, default_new_table())
            .await
            .unwrap();
        assert!(dir.path().join("catalog/c.db").is_file());
        let batches = [staged(&table, "s0", "TRIM_HORIZON", "10", 20000)];
        let outcome = commit_staged(catalog.as_ref(), &ident, &batches)
            .await
            .unwrap();
        assert!(
            matches!(outcome, CommitOutcome::Committed { .. }),
            "{outcome:?}"
        );
        drop(catalog);

        // Another process opening the same file sees the table and its state.
        let again = open(&settings, Arc::new(LocalFsStorageFactory), &sdk)
            .await
            .unwrap();
        let table = again.load_table(&ident).await.unwrap();
        assert_eq!(read_state(&table).await.unwrap().shards["s0"], "10");
        assert_eq!(live_files(&table).await.len(), 1);
        // Under another catalog name the table is not there.
        let other = open(
            &sql_settings(dir.path(), "other"),
            Arc::new(LocalFsStorageFactory),
            &sdk,
        )
        .await
        .unwrap();
        assert!(!other.namespace_exists(ident.namespace()).await.unwrap());
    }

    #[tokio::test]
    async fn two_workers_committing_through_one_sql_catalog_append_each_batch_once() {
        let dir = tempfile::tempdir().unwrap();
        let sdk = SdkConfig::builder().build();
        let settings = sql_settings(dir.path(), "shardsink");
        let ident = table_ident("archive.events").unwrap();
        let a = open(&settings, Arc::new(LocalFsStorageFactory), &sdk)
            .await
            .unwrap();
        let b = open(&settings, Arc::new(LocalFsStorageFactory), &sdk)
            .await
            .unwrap();
        let table = find_or_create(a.as_ref(), &ident, default_new_table())
            .await
            .unwrap();
        // Overlapping views of the staged batches, committed at once by two
        // catalog connections: the SQL catalog's compare-and-swap orders
        // them, and the loser plans again.
        let mut staged_a = Vec::new();
        let mut staged_b = Vec::new();
        for shard in 0..4 {
            let shard = format!("s{shard}");
            let first = staged(&table, &shard, "TRIM_HORIZON", "10", 20000);
            let second = staged(&table, &shard, "10", "20", 20000);
            staged_a.push(first.clone());
            staged_b.push(first);
            staged_b.push(second);
        }
        let (ra, rb) = tokio::join!(
            commit_staged(a.as_ref(), &ident, &staged_a),
            commit_staged(b.as_ref(), &ident, &staged_b)
        );
        let conflicts = |outcome: CommitOutcome| match outcome {
            CommitOutcome::Committed { conflicts, .. }
            | CommitOutcome::NothingToCommit { conflicts, .. } => conflicts,
        };
        let met = conflicts(ra.unwrap()) + conflicts(rb.unwrap());
        println!("conflicts met: {met}");
        let table = a.load_table(&ident).await.unwrap();
        let live = live_files(&table).await;
        assert_eq!(live.len(), 8, "{live:#?}");
        let mut unique = live.clone();
        unique.dedup();
        assert_eq!(unique, live, "a data file appended twice");
        let state = read_state(&table).await.unwrap();
        assert!(state.shards.values().all(|end| end == "20"), "{state:?}");
    }

    #[test]
    fn sqlite_uris_in_either_tool_s_form_name_the_same_file() {
        assert_eq!(
            sqlite_path("sqlite:///var/lib/c.db").unwrap(),
            PathBuf::from("/var/lib/c.db")
        );
        assert_eq!(
            sqlite_path("sqlite:////var/lib/c.db").unwrap(),
            PathBuf::from("/var/lib/c.db")
        );
        assert_eq!(
            sqlite_path("sqlite://c.db?mode=rwc").unwrap(),
            PathBuf::from("c.db")
        );
        assert!(sqlite_path("postgres://x").is_err());
        assert!(sqlite_path("sqlite://").is_err());
        assert_eq!(
            sqlx_uri(Path::new("/var/lib/c.db")),
            "sqlite:///var/lib/c.db?mode=rwc"
        );
    }

    #[test]
    fn a_table_is_namespace_dot_name() {
        let ident = table_ident("analytics.clicks").unwrap();
        assert_eq!(ident.name(), "clicks");
        assert_eq!(ident.namespace().clone().inner(), ["analytics"]);
        let nested = table_ident("a.b.clicks").unwrap();
        assert_eq!(nested.namespace().clone().inner(), ["a", "b"]);
        for bad in ["clicks", ".clicks", "analytics.", "a..b"] {
            assert!(table_ident(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn warehouses_are_checked_for_their_catalog() {
        assert!(
            table_bucket_arn("arn:aws:s3tables:us-east-1:111122223333:bucket/analytics").is_ok()
        );
        assert!(table_bucket_arn("arn:aws:s3:::analytics").is_err());
        assert!(table_bucket_arn("arn:aws:s3tables:us-east-1:111122223333:bucket/").is_err());
        assert_eq!(s3_warehouse("s3://b/wh/").unwrap(), "s3://b/wh");
        assert!(s3_warehouse("s3:///wh").is_err());
        assert!(s3_warehouse("b/wh").is_err());
    }
}
