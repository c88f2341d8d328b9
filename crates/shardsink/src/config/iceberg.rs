//! Iceberg settings: [`IcebergTableArgs`], which catalog and table hold the
//! records (shared by the daemon and `shardsink verify`), and
//! [`IcebergArgs`], the daemon's commit settings; validated into
//! [`IcebergTarget`] and [`IcebergSettings`].

use std::time::Duration;

use iceberg::TableIdent;

use super::error::ConfigError;
use super::values::parse_duration;
use crate::table::catalog::{
    CatalogKind, CatalogSettings, s3_warehouse, sqlite_path, table_bucket_arn, table_ident,
};

/// Default `--iceberg-catalog-name`.
pub const DEFAULT_CATALOG_NAME: &str = "shardsink";
/// Default `--iceberg-commit-interval`.
pub const DEFAULT_COMMIT_INTERVAL: Duration = Duration::from_secs(60);
/// Default `--iceberg-snapshot-retention`.
pub const DEFAULT_SNAPSHOT_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// The shortest `--iceberg-commit-interval`: each commit adds a snapshot
/// and a manifest to the table's metadata.
pub const MIN_COMMIT_INTERVAL: Duration = Duration::from_secs(1);

/// Which Iceberg table the records go into (with `--format iceberg`), and
/// which table `verify` audits.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct IcebergTableArgs {
    /// With --format iceberg: the catalog that holds the table: sql (a
    /// SQLite file), glue (the AWS Glue Data Catalog), s3tables (Amazon S3
    /// Tables) or rest (an Iceberg REST catalog).
    #[arg(
        long,
        env = "SHARDSINK_ICEBERG_CATALOG",
        value_enum,
        ignore_case = true,
        value_name = "CATALOG"
    )]
    pub iceberg_catalog: Option<CatalogKind>,

    /// The catalog's name; for sql, the catalog_name of its rows, as
    /// pyiceberg's SqlCatalog(name) reads them. [default: shardsink]
    #[arg(long, env = "SHARDSINK_ICEBERG_CATALOG_NAME", value_name = "NAME")]
    pub iceberg_catalog_name: Option<String>,

    /// For sql, the catalog file: sqlite:///absolute/path.db (created if
    /// missing); for rest, the server's base URL; for glue and s3tables, an
    /// endpoint override (else AWS_ENDPOINT_URL_GLUE /
    /// AWS_ENDPOINT_URL_S3TABLES or AWS's).
    #[arg(long, env = "SHARDSINK_ICEBERG_CATALOG_URI", value_name = "URI")]
    pub iceberg_catalog_uri: Option<String>,

    /// The table, NAMESPACE.TABLE; created (with its namespace) if missing.
    #[arg(long, env = "SHARDSINK_ICEBERG_TABLE", value_name = "NAMESPACE.TABLE")]
    pub iceberg_table: Option<String>,

    /// Where tables' files go: an s3:// URI (sql, glue; optional for rest),
    /// or the S3 Tables table-bucket ARN (s3tables). Reached with the same
    /// S3 endpoint, credentials and path style as the bucket.
    #[arg(long, env = "SHARDSINK_ICEBERG_WAREHOUSE", value_name = "URI|ARN")]
    pub iceberg_warehouse: Option<String>,
}

/// The daemon's Iceberg settings beyond the table.
#[derive(Debug, Clone, clap::Args)]
pub struct IcebergArgs {
    /// The table.
    #[command(flatten)]
    pub table: IcebergTableArgs,

    /// With --format iceberg: at most one table commit this often, whatever
    /// the number of shards and workers; a shard's checkpoint moves when its
    /// records are committed. [default: 60s]
    #[arg(long, env = "SHARDSINK_ICEBERG_COMMIT_INTERVAL", value_parser = parse_duration, value_name = "DURATION")]
    pub iceberg_commit_interval: Option<Duration>,

    /// With --format iceberg: snapshots older than this are expired (once
    /// an hour, after a commit); the current one is always kept.
    /// [default: 1d]
    #[arg(long, env = "SHARDSINK_ICEBERG_SNAPSHOT_RETENTION", value_parser = parse_duration, value_name = "DURATION")]
    pub iceberg_snapshot_retention: Option<Duration>,
}

/// The table, validated: the catalog to open and the table in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcebergTarget {
    /// The catalog.
    pub catalog: CatalogSettings,
    /// `--iceberg-table`.
    pub table: TableIdent,
}

/// The daemon's Iceberg settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcebergSettings {
    /// The catalog and table.
    pub target: IcebergTarget,
    /// `--iceberg-commit-interval`.
    pub commit_interval: Duration,
    /// `--iceberg-snapshot-retention`.
    pub snapshot_retention: Duration,
}

/// `--X` is only used with `--format iceberg`.
fn only_with_iceberg(flag: &'static str) -> ConfigError {
    ConfigError::new(flag, "only used with --format iceberg")
}

impl IcebergTableArgs {
    /// The flags set, by name.
    fn set_flags(&self) -> Vec<&'static str> {
        [
            (self.iceberg_catalog.is_some(), "iceberg-catalog"),
            (self.iceberg_catalog_name.is_some(), "iceberg-catalog-name"),
            (self.iceberg_catalog_uri.is_some(), "iceberg-catalog-uri"),
            (self.iceberg_table.is_some(), "iceberg-table"),
            (self.iceberg_warehouse.is_some(), "iceberg-warehouse"),
        ]
        .into_iter()
        .filter_map(|(set, flag)| set.then_some(flag))
        .collect()
    }

    /// The table, when `--iceberg-catalog` is set; `None` when no flag is.
    ///
    /// # Errors
    /// [`ConfigError`] naming the flag: another flag without
    /// `--iceberg-catalog`; no `--iceberg-table`; a URI or warehouse the
    /// catalog kind does not take.
    pub fn validate(&self) -> Result<Option<IcebergTarget>, ConfigError> {
        let Some(kind) = self.iceberg_catalog else {
            return match self.set_flags().first() {
                Some(flag) => Err(ConfigError::new(flag, "needs --iceberg-catalog")),
                None => Ok(None),
            };
        };
        let table = self
            .iceberg_table
            .as_deref()
            .ok_or_else(|| ConfigError::missing("iceberg-table"))
            .and_then(|text| {
                table_ident(text).map_err(|message| ConfigError::new("iceberg-table", message))
            })?;
        let name = self
            .iceberg_catalog_name
            .clone()
            .unwrap_or_else(|| DEFAULT_CATALOG_NAME.to_owned());
        if name.trim().is_empty() {
            return Err(ConfigError::new(
                "iceberg-catalog-name",
                "must not be empty",
            ));
        }
        let uri = self
            .iceberg_catalog_uri
            .clone()
            .filter(|uri| !uri.is_empty());
        let warehouse = self.iceberg_warehouse.clone().filter(|w| !w.is_empty());
        let s3 = |warehouse: Option<String>| -> Result<Option<String>, ConfigError> {
            warehouse
                .map(|text| {
                    s3_warehouse(&text)
                        .map_err(|message| ConfigError::new("iceberg-warehouse", message))
                })
                .transpose()
        };
        let required = |value: Option<String>, flag: &'static str, what: &str| {
            value.ok_or_else(|| {
                ConfigError::new(flag, format!("required with --iceberg-catalog {what}"))
            })
        };
        let (uri, warehouse) = match kind {
            CatalogKind::Sql => {
                let uri = required(uri, "iceberg-catalog-uri", "sql")?;
                sqlite_path(&uri)
                    .map_err(|message| ConfigError::new("iceberg-catalog-uri", message))?;
                let warehouse = required(warehouse, "iceberg-warehouse", "sql")?;
                (Some(uri), s3(Some(warehouse))?)
            }
            CatalogKind::Glue => {
                let warehouse = required(warehouse, "iceberg-warehouse", "glue")?;
                (uri, s3(Some(warehouse))?)
            }
            CatalogKind::S3Tables => {
                let arn = required(warehouse, "iceberg-warehouse", "s3tables")?;
                table_bucket_arn(&arn)
                    .map_err(|message| ConfigError::new("iceberg-warehouse", message))?;
                (uri, Some(arn))
            }
            CatalogKind::Rest => (
                Some(required(uri, "iceberg-catalog-uri", "rest")?),
                s3(warehouse)?,
            ),
        };
        Ok(Some(IcebergTarget {
            catalog: CatalogSettings {
                kind,
                name,
                uri,
                warehouse,
            },
            table,
        }))
    }
}

impl IcebergArgs {
    /// The settings with `--format iceberg` (`iceberg`), or `None` after
    /// checking that no Iceberg flag is set.
    ///
    /// # Errors
    /// [`ConfigError`] naming the flag: an Iceberg flag without `--format
    /// iceberg`; no `--iceberg-catalog` with it; those of
    /// [`IcebergTableArgs::validate`]; an interval below 1s; a retention
    /// shorter than the interval.
    pub fn validate(&self, iceberg: bool) -> Result<Option<IcebergSettings>, ConfigError> {
        if !iceberg {
            let daemon_flags = [
                (
                    self.iceberg_commit_interval.is_some(),
                    "iceberg-commit-interval",
                ),
                (
                    self.iceberg_snapshot_retention.is_some(),
                    "iceberg-snapshot-retention",
                ),
            ];
            if let Some(flag) = self.table.set_flags().first() {
                return Err(only_with_iceberg(flag));
            }
            if let Some((_, flag)) = daemon_flags.iter().find(|(set, _)| *set) {
                return Err(only_with_iceberg(flag));
            }
            return Ok(None);
        }
        let target = self
            .table
            .validate()?
            .ok_or_else(|| ConfigError::new("iceberg-catalog", "required with --format iceberg"))?;
        let commit_interval = self
            .iceberg_commit_interval
            .unwrap_or(DEFAULT_COMMIT_INTERVAL);
        if commit_interval < MIN_COMMIT_INTERVAL {
            return Err(ConfigError::new(
                "iceberg-commit-interval",
                "must be at least 1s",
            ));
        }
        let snapshot_retention = self
            .iceberg_snapshot_retention
            .unwrap_or(DEFAULT_SNAPSHOT_RETENTION);
        if snapshot_retention < commit_interval {
            return Err(ConfigError::new(
                "iceberg-snapshot-retention",
                format!("must be at least --iceberg-commit-interval ({commit_interval:?})"),
            ));
        }
        Ok(Some(IcebergSettings {
            target,
            commit_interval,
            snapshot_retention,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(catalog: Option<CatalogKind>) -> IcebergArgs {
        IcebergArgs {
            table: IcebergTableArgs {
                iceberg_catalog: catalog,
                iceberg_table: Some("analytics.clicks".to_owned()),
                ..IcebergTableArgs::default()
            },
            iceberg_commit_interval: None,
            iceberg_snapshot_retention: None,
        }
    }

    #[test]
    fn a_sql_catalog_needs_a_sqlite_uri_and_an_s3_warehouse() {
        let mut sql = args(Some(CatalogKind::Sql));
        assert_eq!(
            sql.validate(true).unwrap_err().flag,
            "--iceberg-catalog-uri"
        );
        sql.table.iceberg_catalog_uri = Some("postgres://x".to_owned());
        sql.table.iceberg_warehouse = Some("s3://wh/tables".to_owned());
        assert_eq!(
            sql.validate(true).unwrap_err().flag,
            "--iceberg-catalog-uri"
        );
        sql.table.iceberg_catalog_uri = Some("sqlite:///tmp/c.db".to_owned());
        sql.table.iceberg_warehouse = Some("/local/path".to_owned());
        assert_eq!(sql.validate(true).unwrap_err().flag, "--iceberg-warehouse");
        sql.table.iceberg_warehouse = Some("s3://wh/tables/".to_owned());
        let settings = sql.validate(true).unwrap().unwrap();
        assert_eq!(settings.target.catalog.name, DEFAULT_CATALOG_NAME);
        assert_eq!(
            settings.target.catalog.warehouse.as_deref(),
            Some("s3://wh/tables")
        );
        assert_eq!(settings.target.table.name(), "clicks");
        assert_eq!(settings.commit_interval, DEFAULT_COMMIT_INTERVAL);
        assert_eq!(settings.snapshot_retention, DEFAULT_SNAPSHOT_RETENTION);
    }

    #[test]
    fn s3_tables_take_a_table_bucket_arn_and_rest_an_endpoint() {
        let mut s3tables = args(Some(CatalogKind::S3Tables));
        s3tables.table.iceberg_warehouse = Some("s3://not-an-arn".to_owned());
        assert_eq!(
            s3tables.validate(true).unwrap_err().flag,
            "--iceberg-warehouse"
        );
        s3tables.table.iceberg_warehouse =
            Some("arn:aws:s3tables:us-east-1:111122223333:bucket/analytics".to_owned());
        assert!(s3tables.validate(true).unwrap().is_some());
        let mut rest = args(Some(CatalogKind::Rest));
        assert_eq!(
            rest.validate(true).unwrap_err().flag,
            "--iceberg-catalog-uri"
        );
        rest.table.iceberg_catalog_uri = Some("http://127.0.0.1:8181".to_owned());
        assert_eq!(
            rest.validate(true)
                .unwrap()
                .unwrap()
                .target
                .catalog
                .warehouse,
            None
        );
    }

    #[test]
    fn iceberg_flags_need_the_format_and_the_format_needs_a_catalog_and_table() {
        let glue = args(Some(CatalogKind::Glue));
        assert_eq!(glue.validate(false).unwrap_err().flag, "--iceberg-catalog");
        let mut none = args(None);
        none.table.iceberg_table = None;
        assert_eq!(none.validate(false).unwrap(), None);
        assert_eq!(none.validate(true).unwrap_err().flag, "--iceberg-catalog");
        none.iceberg_commit_interval = Some(Duration::from_secs(5));
        assert_eq!(
            none.validate(false).unwrap_err().flag,
            "--iceberg-commit-interval"
        );
        let mut no_table = args(Some(CatalogKind::Glue));
        no_table.table.iceberg_table = None;
        no_table.table.iceberg_warehouse = Some("s3://wh".to_owned());
        assert_eq!(no_table.validate(true).unwrap_err().flag, "--iceberg-table");
        no_table.table.iceberg_table = Some("clicks".to_owned());
        assert_eq!(no_table.validate(true).unwrap_err().flag, "--iceberg-table");
    }

    #[test]
    fn the_retention_is_at_least_the_interval() {
        let mut glue = args(Some(CatalogKind::Glue));
        glue.table.iceberg_warehouse = Some("s3://wh".to_owned());
        glue.iceberg_commit_interval = Some(Duration::from_millis(500));
        assert_eq!(
            glue.validate(true).unwrap_err().flag,
            "--iceberg-commit-interval"
        );
        glue.iceberg_commit_interval = Some(Duration::from_secs(120));
        glue.iceberg_snapshot_retention = Some(Duration::from_secs(60));
        assert_eq!(
            glue.validate(true).unwrap_err().flag,
            "--iceberg-snapshot-retention"
        );
    }
}
