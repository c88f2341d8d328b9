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

use clap::ValueEnum;
use iceberg::TableIdent;

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

/// The properties iceberg's catalogs take, from the settings.
pub fn catalog_properties(uri: Option<&str>, warehouse: Option<&str>) -> HashMap<String, String> {
    let mut props = HashMap::new();
    if let Some(uri) = uri {
        props.insert("uri".to_owned(), uri.to_owned());
    }
    if let Some(warehouse) = warehouse {
        props.insert("warehouse".to_owned(), warehouse.to_owned());
    }
    props
}

#[cfg(test)]
mod tests {
    use super::*;

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
