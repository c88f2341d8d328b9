//! [`ArchiveArgs`]: the settings the daemon and `shardsink verify` share —
//! which stream, which bucket and prefix, which lease table, how to reach S3
//! — with their one validation into an [`Archive`].

use super::error::ConfigError;
use crate::aws::kinesis::StreamRef;

/// Where an archive is: flattened into the daemon's settings and into
/// `shardsink verify`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ArchiveArgs {
    /// Kinesis data stream: a stream name or a stream ARN
    /// (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME). The daemon reads it
    /// (required); verify checks the archive against it.
    #[arg(long, env = "SHARDSINK_STREAM", value_name = "NAME|ARN")]
    pub stream: Option<String>,

    /// S3 bucket the objects are written to (required).
    #[arg(long, env = "SHARDSINK_BUCKET", value_name = "BUCKET")]
    pub bucket: Option<String>,

    /// Key prefix of every object, without a trailing slash. Must be used by
    /// this stream only: the resume skip reads the ranges of every key under it.
    /// [default: the stream name]
    #[arg(long, env = "SHARDSINK_PREFIX", value_name = "PREFIX")]
    pub prefix: Option<String>,

    /// Key prefix of error objects: the records the output format cannot
    /// represent, as envelope lines with an errorMessage, under the same key
    /// scheme. Must not be the prefix or under it.
    /// [default: {prefix}-errors]
    #[arg(long, env = "SHARDSINK_ERROR_PREFIX", value_name = "PREFIX")]
    pub error_prefix: Option<String>,

    /// Key prefix of duplicates (with --event-id): copies of events already
    /// accepted, as envelope lines with duplicateOf (the accepted copy),
    /// under the same key scheme. Never dropped. Must be outside the prefix
    /// and the error prefix. [default: {prefix}-duplicates]
    #[arg(long, env = "SHARDSINK_DUPLICATES_PREFIX", value_name = "PREFIX")]
    pub duplicates_prefix: Option<String>,

    /// Name of this shardsink application, as the KCL's applicationName: the
    /// default lease table is {application name}-{stream name}. Two
    /// applications archiving one stream (to different prefixes) keep
    /// separate leases.
    #[arg(
        long,
        env = "SHARDSINK_APPLICATION_NAME",
        default_value = "shardsink",
        value_name = "NAME"
    )]
    pub application_name: String,

    /// DynamoDB table holding the leases and checkpoints, one row per shard;
    /// created (on-demand billing) if missing. One table serves one stream.
    /// [default: {application name}-{stream name}]
    #[arg(long, env = "SHARDSINK_LEASE_TABLE", value_name = "TABLE")]
    pub lease_table: Option<String>,

    /// Address S3 buckets by path (http://host/bucket/key) instead of by
    /// virtual host; needed by most local S3 servers.
    #[arg(long, env = "SHARDSINK_S3_FORCE_PATH_STYLE", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub s3_force_path_style: bool,
}

/// [`ArchiveArgs`], validated, with defaults resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    /// The stream, when given.
    pub stream: Option<StreamRef>,
    /// The bucket.
    pub bucket: String,
    /// The key prefix: no leading or trailing slash; may be empty.
    pub prefix: String,
    /// The error prefix: no leading or trailing slash; not empty, not the
    /// prefix nor under it.
    pub error_prefix: String,
    /// The duplicates prefix: no leading or trailing slash; not empty,
    /// outside the prefix and the error prefix (and they outside it).
    pub duplicates_prefix: String,
    /// The lease table; resolved when the stream is given.
    pub lease_table: Option<String>,
}

impl ArchiveArgs {
    /// Checks every name and resolves the defaults: the prefix is the stream
    /// name, the error prefix `{prefix}-errors`, the lease table
    /// `{application name}-{stream name}`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first bad setting: `--bucket` when it is not
    /// set, `--prefix` when neither it nor `--stream` is.
    pub fn validate(&self) -> Result<Archive, ConfigError> {
        let bucket = self
            .bucket
            .clone()
            .ok_or_else(|| ConfigError::missing("bucket"))?;
        let stream = self.stream.as_deref().map(parse_stream).transpose()?;
        validate_bucket(&bucket)?;
        let prefix = match (&self.prefix, &stream) {
            (Some(prefix), _) => validate_prefix("prefix", prefix)?,
            (None, Some(stream)) => stream.name().to_owned(),
            (None, None) => {
                return Err(ConfigError::new(
                    "prefix",
                    "required when --stream is not given (the default prefix is the stream name)",
                ));
            }
        };
        let error_prefix = match &self.error_prefix {
            Some(error_prefix) => validate_prefix("error-prefix", error_prefix)?,
            None => format!("{prefix}-errors"),
        };
        if error_prefix.is_empty() || is_under(&error_prefix, &prefix) {
            return Err(ConfigError::new(
                "error-prefix",
                format!(
                    "{error_prefix:?} must be outside the prefix {prefix:?} (its keys are all read as batches)"
                ),
            ));
        }
        let duplicates_prefix = match &self.duplicates_prefix {
            Some(duplicates_prefix) => validate_prefix("duplicates-prefix", duplicates_prefix)?,
            None => format!("{prefix}-duplicates"),
        };
        for (other, name) in [(&prefix, "prefix"), (&error_prefix, "error prefix")] {
            if duplicates_prefix.is_empty() || overlaps(&duplicates_prefix, other) {
                return Err(ConfigError::new(
                    "duplicates-prefix",
                    format!(
                        "{duplicates_prefix:?} must be outside the {name} {other:?}, and it outside the duplicates prefix"
                    ),
                ));
            }
        }
        if !is_stream_name(&self.application_name) {
            return Err(ConfigError::new(
                "application-name",
                format!(
                    "{:?} is not a name (1-128 of a-z A-Z 0-9 _ . -)",
                    self.application_name
                ),
            ));
        }
        let lease_table = match &stream {
            None => None,
            Some(stream) => {
                let table = self
                    .lease_table
                    .clone()
                    .unwrap_or_else(|| format!("{}-{}", self.application_name, stream.name()));
                validate_table_name("lease-table", &table)?;
                Some(table)
            }
        };
        Ok(Archive {
            stream,
            bucket,
            prefix,
            error_prefix,
            duplicates_prefix,
            lease_table,
        })
    }
}

pub(crate) fn parse_stream(stream: &str) -> Result<StreamRef, ConfigError> {
    if stream.is_empty() {
        return Err(ConfigError::new("stream", "must not be empty"));
    }
    if let Some(rest) = stream.strip_prefix("arn:") {
        // arn:PARTITION:kinesis:REGION:ACCOUNT:stream/NAME
        let parts: Vec<&str> = rest.splitn(5, ':').collect();
        let name = match parts.as_slice() {
            [_, "kinesis", _, _, resource] => resource.strip_prefix("stream/"),
            _ => None,
        };
        return match name {
            Some(name) if is_stream_name(name) => Ok(StreamRef::Arn {
                arn: stream.to_owned(),
                name: name.to_owned(),
            }),
            _ => Err(ConfigError::new(
                "stream",
                format!(
                    "{stream:?} is not a Kinesis stream ARN (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME)"
                ),
            )),
        };
    }
    if !is_stream_name(stream) {
        return Err(ConfigError::new(
            "stream",
            format!("{stream:?} is not a stream name (1-128 of a-z A-Z 0-9 _ . -)"),
        ));
    }
    Ok(StreamRef::Name(stream.to_owned()))
}

/// Kinesis API reference, `StreamName`: pattern `[a-zA-Z0-9_.-]+`, 1 to 128.
pub(crate) fn is_stream_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// S3 bucket naming rules (general purpose buckets): 3-63 characters of
/// lowercase letters, digits, dots and hyphens.
fn validate_bucket(bucket: &str) -> Result<(), ConfigError> {
    let ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(
            "bucket",
            format!("{bucket:?} is not a bucket name (3-63 of a-z 0-9 . -)"),
        ))
    }
}

/// Whether prefix `a` is `b` or under a non-empty `b`.
fn is_under(a: &str, b: &str) -> bool {
    a == b || (!b.is_empty() && a.starts_with(&format!("{b}/")))
}

/// Whether objects under one of the prefixes would be listed with the
/// other's: one is the other or under it.
fn overlaps(a: &str, b: &str) -> bool {
    is_under(a, b) || is_under(b, a)
}

/// A prefix has no leading slash, no empty segments, and at most 512 bytes so
/// that full keys stay well under S3's 1,024-byte limit.
fn validate_prefix(setting: &'static str, prefix: &str) -> Result<String, ConfigError> {
    let trimmed = prefix.trim_end_matches('/');
    if trimmed.starts_with('/') || trimmed.contains("//") {
        return Err(ConfigError::new(
            setting,
            format!("{prefix:?} must not start with / or contain //"),
        ));
    }
    if trimmed.len() > 512 {
        return Err(ConfigError::new(setting, "longer than 512 bytes"));
    }
    Ok(trimmed.to_owned())
}

/// DynamoDB table names: 3-255 of `a-z A-Z 0-9 _ . -`.
pub(super) fn validate_table_name(setting: &str, table: &str) -> Result<(), ConfigError> {
    let ok = (3..=255).contains(&table.len())
        && table
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(
            setting,
            format!("{table:?} is not a DynamoDB table name (3-255 of a-z A-Z 0-9 _ . -)"),
        ))
    }
}
