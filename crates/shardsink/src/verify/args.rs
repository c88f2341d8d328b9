//! The arguments of `shardsink verify` ([`VerifyArgs`]) and their
//! validation into a [`Plan`]: defaults resolved, names checked as the daemon
//! checks them.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use crate::config::{
    Archive, ArchiveArgs, ConfigError, EventArgs, EventSettings, EventStoreKind, IcebergTableArgs,
    IcebergTarget, InitialPosition, StreamRef, only_with_event_id, parse_timestamp,
};
use crate::output::key::KeyLayout;

/// Audits the archive of one stream: lists every object under the prefix,
/// checks that no two objects of a shard share a sequence number, optionally
/// reads every line (--deep), and, given the stream, that no record up to
/// the checkpoints is missing. With --deep, no user record is in two of its
/// batch's objects (main, error, duplicates) and each batch's decisions
/// object counts its records; given the daemon's event settings
/// (--event-id …) and the stream too, no event is kept twice within the
/// window. Given the daemon's Iceberg table (--iceberg-catalog … with
/// --deep), its live rows: no record twice, none after its shard's
/// committed end, and (with --stream, which names the lease table) no
/// checkpoint after it and no record of the stream up to it missing from
/// the rows and the error and duplicates objects.
///
/// AWS credentials, region and endpoints come from the standard sources, as
/// for the daemon. Progress goes to stderr, the summary to stdout. Exit
/// codes: 0 exact, 1 not exact (the summary lists the offending keys and
/// records), 2 when the audit cannot run (bad argument, bucket unreachable).
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "shardsink verify",
    bin_name = "shardsink verify",
    max_term_width = 100,
    args_override_self = true,
    // The daemon's descriptions speak of writing to the table.
    mut_arg("iceberg_catalog", |arg| arg.help(ICEBERG_CATALOG_HELP)),
    mut_arg("iceberg_table", |arg| arg.help(ICEBERG_TABLE_HELP)),
)]
pub struct VerifyArgs {
    /// Where the archive is, as for the daemon: the stream (optional here;
    /// it enables the gap check: every shard is read from its oldest
    /// retained record up to its checkpoint, and each record must be in some
    /// object's range), bucket, prefix (required without --stream), lease
    /// table (read only) and S3 path style.
    #[command(flatten)]
    pub archive: ArchiveArgs,

    /// Where the daemon starts a shard without a checkpoint, as its
    /// --initial-position: TRIM_HORIZON, LATEST or AT_TIMESTAMP
    /// (case-insensitive). With TRIM_HORIZON the gap check of each shard
    /// starts at its oldest retained record. With LATEST or AT_TIMESTAMP the
    /// records before a shard's first archived record were never meant to be
    /// archived, so the gap check of each shard starts at its first archived
    /// record (a lost first object then goes unnoticed); the daemon's
    /// timestamp is not needed.
    // The values are listed above, not by clap: the daemon's descriptions of
    // them are about where it starts reading (AT_TIMESTAMP names
    // --initial-timestamp, which verify does not have).
    #[arg(
        long,
        env = "SHARDSINK_INITIAL_POSITION",
        value_enum,
        ignore_case = true,
        hide_possible_values = true,
        default_value = "TRIM_HORIZON",
        value_name = "POSITION"
    )]
    pub initial_position: InitialPosition,

    /// Also fetch every object and check every line: decompresses, parses,
    /// belongs to the key's shard, range and minute, and no record twice.
    #[arg(long)]
    pub deep: bool,

    /// With --stream: start the gap check of every shard at this arrival
    /// time (RFC 3339, e.g. 2026-11-21T00:00:00Z; GetShardIterator
    /// AT_TIMESTAMP) instead of its oldest retained record, so that an audit
    /// of recent data does not read the whole retention period. Overlaps are
    /// still checked across the whole archive.
    #[arg(long, value_parser = parse_timestamp, value_name = "TIME")]
    pub since: Option<DateTime<Utc>>,

    /// The daemon's event deduplication settings. With --event-id, --deep
    /// and --stream, each user record read from the stream in a batch
    /// decided with these settings gets its event id, and no two kept
    /// copies of an event (in no duplicates object) may have arrived within
    /// --event-dedup-window of each other in one scope.
    #[command(flatten, next_help_heading = "Event deduplication")]
    pub events: EventArgs,

    /// With --event-id: the scope in which the daemon keeps each event once,
    /// as its --event-dedup-store: local (a shard and its ancestors) or
    /// dynamodb (the whole stream). Only the scope is read: the store itself
    /// is not opened. [default: local]
    #[arg(
        long,
        env = "SHARDSINK_EVENT_DEDUP_STORE",
        value_enum,
        ignore_case = true,
        value_name = "STORE",
        help_heading = "Event deduplication"
    )]
    pub event_dedup_store: Option<EventStoreKind>,

    /// The daemon's Iceberg table (`--format iceberg`), audited after the
    /// archive. The audit reads every row of the table's live data files,
    /// so it is part of `--deep` and needs it: without `--deep`, `verify`
    /// reads no record, and an audit of the table that read none could
    /// check nothing of T1 or T2 (docs/DESIGN.md, "Iceberg tables").
    #[command(flatten, next_help_heading = "Iceberg table")]
    pub iceberg: IcebergTableArgs,
}

/// `--iceberg-catalog`'s help in `verify`.
const ICEBERG_CATALOG_HELP: &str = "With --deep: audit the daemon's Iceberg table (--format \
     iceberg) in this catalog: sql, glue, s3tables or rest. Its live rows: no record twice, none \
     after its shard's committed end; with --stream, no lease's checkpoint after it and every \
     record of the stream up to it a row (or in an error or duplicates object). The other \
     --iceberg-* settings are the daemon's";

/// `--iceberg-table`'s help in `verify`.
const ICEBERG_TABLE_HELP: &str = "The table, NAMESPACE.TABLE (never created by verify)";

/// What `--event-id` asks `verify` to check: the daemon's settings and the
/// scope of its store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct EventCheck {
    pub(super) settings: EventSettings,
    /// `--event-dedup-store dynamodb`: one scope for the whole stream;
    /// else one per shard and its ancestors.
    pub(super) stream_scope: bool,
}

/// The arguments, validated, with defaults resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Plan {
    pub(super) bucket: String,
    /// The prefix as given (no trailing slash; may be empty).
    pub(super) prefix: String,
    /// What is listed: `{prefix}/`, or everything for an empty prefix.
    pub(super) list_prefix: String,
    /// Where the daemon writes the records its format rejects.
    pub(super) error_prefix: String,
    /// Where the daemon writes the duplicates of events.
    pub(super) duplicates_prefix: String,
    pub(super) stream: Option<StreamRef>,
    /// Set when `stream` is.
    pub(super) lease_table: Option<String>,
    pub(super) deep: bool,
    /// Where each shard's gap check starts reading: `None` for its oldest
    /// retained record (`TRIM_HORIZON`).
    pub(super) since: Option<DateTime<Utc>>,
    /// Whether each shard's gap check starts at its first archived record
    /// (initial position LATEST or AT_TIMESTAMP) instead of the oldest
    /// retained one.
    pub(super) from_first_archived: bool,
    /// The event settings, with `--event-id`.
    pub(super) events: Option<EventCheck>,
    /// The Iceberg table to audit, with `--iceberg-catalog` (and `--deep`).
    pub(super) iceberg: Option<IcebergTarget>,
}

impl Plan {
    pub(super) fn from_args(args: &VerifyArgs) -> Result<Self, ConfigError> {
        let Archive {
            stream,
            bucket,
            prefix,
            error_prefix,
            duplicates_prefix,
            lease_table,
        } = args.archive.validate()?;
        let events = args.events.validate()?.map(|settings| EventCheck {
            settings,
            stream_scope: args.event_dedup_store == Some(EventStoreKind::Dynamodb),
        });
        if events.is_none() && args.event_dedup_store.is_some() {
            return Err(only_with_event_id("event-dedup-store"));
        }
        if args.since.is_some() && stream.is_none() {
            return Err(ConfigError::new(
                "since",
                "only with --stream (it says where the gap check starts reading)",
            ));
        }
        let iceberg = args.iceberg.validate()?;
        if iceberg.is_some() && !args.deep {
            return Err(ConfigError::new(
                "iceberg-catalog",
                "needs --deep (the table audit reads every live row)",
            ));
        }
        let list_prefix = KeyLayout::plain(prefix.clone()).list_prefix();
        Ok(Self {
            bucket,
            prefix,
            list_prefix,
            error_prefix,
            duplicates_prefix,
            stream,
            lease_table,
            deep: args.deep,
            since: args.since,
            from_first_archived: args.initial_position != InitialPosition::TrimHorizon,
            events,
            iceberg,
        })
    }

    /// `s3://bucket/prefix/ (stream …, lease table …)`, for the summary.
    pub(super) fn target(&self) -> String {
        let mut target = format!("s3://{}/{}", self.bucket, self.list_prefix);
        if let (Some(stream), Some(table)) = (&self.stream, &self.lease_table) {
            let _ = write!(
                target,
                " (stream {}, lease table {table})",
                stream_label(stream)
            );
        }
        target
    }
}

fn stream_label(stream: &StreamRef) -> &str {
    match stream {
        StreamRef::Name(name) => name,
        StreamRef::Arn { arn, .. } => arn,
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, FromArgMatches as _};

    use super::*;
    use crate::table::catalog::{CatalogKind, table_ident};

    fn parse_args(args: &[&str]) -> Result<VerifyArgs, clap::Error> {
        let mut argv = vec!["shardsink verify"];
        argv.extend_from_slice(args);
        // No environment: a developer's SHARDSINK_* must not change the outcome.
        let command = VerifyArgs::command().mut_args(|arg| arg.env(None::<&str>));
        VerifyArgs::from_arg_matches(&command.try_get_matches_from(argv)?)
    }

    fn plan(args: &[&str]) -> Result<Plan, ConfigError> {
        Plan::from_args(&parse_args(args).unwrap())
    }

    #[test]
    fn since_is_a_time_and_needs_the_stream() {
        let p = plan(&[
            "--bucket",
            "archive",
            "--stream",
            "orders",
            "--since",
            "2026-11-21T01:00:00+01:00",
        ])
        .unwrap();
        assert_eq!(
            p.since.map(|since| since.to_rfc3339()),
            Some("2026-11-21T00:00:00+00:00".to_owned())
        );
        let err = plan(&[
            "--bucket",
            "archive",
            "--prefix",
            "p",
            "--since",
            "2026-11-21T00:00:00Z",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("--since"), "{err}");
        let err = parse_args(&[
            "--bucket",
            "archive",
            "--stream",
            "orders",
            "--since",
            "yesterday",
        ])
        .unwrap_err();
        assert!(
            err.to_string().contains("example: 2026-11-21T00:00:00Z"),
            "{err}"
        );
    }

    #[test]
    fn prefix_and_lease_table_default_as_in_the_daemon() {
        let p = plan(&["--bucket", "archive", "--stream", "orders"]).unwrap();
        assert_eq!(p.prefix, "orders");
        assert_eq!(p.list_prefix, "orders/");
        assert_eq!(p.lease_table.as_deref(), Some("shardsink-orders"));
        assert!(!p.deep && !p.from_first_archived);

        let p = plan(&[
            "--bucket",
            "archive",
            "--stream",
            "arn:aws:kinesis:eu-west-1:123456789012:stream/clicks",
            "--application-name",
            "audit",
            "--prefix",
            "raw/clicks/",
            "--deep",
            "--initial-position",
            "latest",
        ])
        .unwrap();
        assert_eq!(p.prefix, "raw/clicks");
        assert_eq!(p.lease_table.as_deref(), Some("audit-clicks"));
        assert!(p.deep && p.from_first_archived);

        let p = plan(&["--bucket", "archive", "--prefix", ""]).unwrap();
        assert_eq!(
            (p.list_prefix.as_str(), p.stream, p.lease_table),
            ("", None, None)
        );
    }

    #[test]
    fn bad_arguments_name_the_setting() {
        let err = plan(&["--bucket", "archive"]).unwrap_err();
        assert_eq!(err.flag, "--prefix");
        assert!(
            err.to_string()
                .starts_with("invalid setting --prefix (SHARDSINK_PREFIX)")
        );
        for (args, flag) in [
            (&["--bucket", "Bad_Bucket", "--prefix", "p"][..], "--bucket"),
            (&["--bucket", "archive", "--stream", "a b"][..], "--stream"),
            (&["--bucket", "archive", "--prefix", "/abs"][..], "--prefix"),
            (
                &["--bucket", "archive", "--stream", "s", "--lease-table", "x"][..],
                "--lease-table",
            ),
        ] {
            assert_eq!(plan(args).unwrap_err().flag, flag, "{args:?}");
        }
        assert_eq!(
            plan(&["--prefix", "p"]).unwrap_err().flag,
            "--bucket",
            "--bucket is required"
        );
    }

    #[test]
    fn initial_position_help_is_verify_s_own() {
        let mut command = VerifyArgs::command().mut_args(|arg| arg.env(None::<&str>));
        for help in [
            command.render_help().to_string(),
            command.render_long_help().to_string(),
        ] {
            let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(!help.contains("--initial-timestamp"), "{help}");
            assert!(
                help.contains("--initial-position: TRIM_HORIZON, LATEST or AT_TIMESTAMP"),
                "{help}"
            );
        }
        for value in ["TRIM_HORIZON", "latest", "at_timestamp"] {
            let p = plan(&[
                "--bucket",
                "archive",
                "--prefix",
                "p",
                "--initial-position",
                value,
            ])
            .unwrap();
            assert_eq!(p.from_first_archived, value != "TRIM_HORIZON", "{value}");
        }
    }

    #[test]
    fn event_settings_are_the_daemon_s_with_the_store_as_a_scope() {
        let base = ["--bucket", "archive", "--prefix", "p"];
        let with = |extra: &[&str]| {
            let mut args = base.to_vec();
            args.extend_from_slice(extra);
            plan(&args)
        };
        let p = with(&[]).unwrap();
        assert_eq!(
            (p.events, p.duplicates_prefix.as_str()),
            (None, "p-duplicates")
        );
        let p = with(&[
            "--event-id",
            "json-pointer:/id",
            "--event-fingerprint",
            "none",
            "--event-dedup-window",
            "10m",
            "--duplicates-prefix",
            "dups",
        ])
        .unwrap();
        let events = p.events.unwrap();
        assert_eq!(events.settings.source.as_setting(), "json-pointer:/id");
        assert!(!events.settings.fingerprint && !events.stream_scope);
        assert_eq!(events.settings.rule.window_millis, 600_000);
        assert_eq!(p.duplicates_prefix, "dups");
        let p = with(&["--event-id", "payload", "--event-dedup-store", "DynamoDB"]).unwrap();
        assert!(p.events.unwrap().stream_scope);
        for (extra, flag) in [
            (&["--event-dedup-store", "local"][..], "--event-dedup-store"),
            (&["--event-dedup-window", "1h"][..], "--event-dedup-window"),
            (
                &["--event-id", "payload", "--event-dedup-window", "0s"][..],
                "--event-dedup-window",
            ),
        ] {
            assert_eq!(with(extra).unwrap_err().flag, flag, "{extra:?}");
        }
        // The store's own settings are the daemon's alone.
        assert!(parse_args(&["--bucket", "b", "--event-dedup-dir", "d"]).is_err());
        let help = VerifyArgs::command()
            .mut_args(|arg| arg.env(None::<&str>))
            .render_help()
            .to_string();
        assert!(help.contains("Event deduplication:"), "{help}");
    }

    #[test]
    fn an_iceberg_table_is_audited_with_deep_and_the_daemon_s_settings() {
        let table = [
            "--bucket",
            "archive",
            "--prefix",
            "orders",
            "--iceberg-catalog",
            "SQL",
            "--iceberg-catalog-uri",
            "sqlite:///var/lib/shardsink/catalog.db",
            "--iceberg-warehouse",
            "s3://lake/warehouse/",
            "--iceberg-table",
            "archive.events",
        ];
        let err = plan(&table).unwrap_err();
        assert_eq!(err.flag, "--iceberg-catalog");
        assert!(err.to_string().contains("needs --deep"), "{err}");

        let mut deep = table.to_vec();
        deep.push("--deep");
        let target = plan(&deep).unwrap().iceberg.unwrap();
        assert_eq!(target.catalog.kind, CatalogKind::Sql);
        assert_eq!(
            target.catalog.warehouse.as_deref(),
            Some("s3://lake/warehouse")
        );
        assert_eq!(target.table, table_ident("archive.events").unwrap());
        assert_eq!(plan(&deep[..4]).unwrap().iceberg, None);

        // The daemon's validation: a setting without the catalog, a catalog
        // without what its kind needs.
        for (extra, flag) in [
            (&["--deep", "--iceberg-table", "a.b"][..], "--iceberg-table"),
            (
                &[
                    "--deep",
                    "--iceberg-catalog",
                    "glue",
                    "--iceberg-table",
                    "a.b",
                ][..],
                "--iceberg-warehouse",
            ),
            (
                &[
                    "--deep",
                    "--iceberg-catalog",
                    "rest",
                    "--iceberg-catalog-uri",
                    "http://c",
                ][..],
                "--iceberg-table",
            ),
        ] {
            let mut args = deep[..4].to_vec();
            args.extend_from_slice(extra);
            assert_eq!(plan(&args).unwrap_err().flag, flag, "{extra:?}");
        }

        let help = VerifyArgs::command()
            .mut_args(|arg| arg.env(None::<&str>))
            .render_help()
            .to_string();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(help.contains("Iceberg table:"), "{help}");
        assert!(
            help.contains("With --deep: audit the daemon's Iceberg table"),
            "{help}"
        );
        assert!(help.contains("(never created by verify)"), "{help}");
        assert!(!help.contains("created (with its namespace)"), "{help}");
    }

    #[test]
    fn the_verify_reference_names_every_setting() {
        let reference = include_str!("../../../../docs/VERIFY.md");
        for arg in VerifyArgs::command().get_arguments() {
            let Some(flag) = arg.get_long() else { continue };
            if flag == "help" {
                continue;
            }
            assert!(
                reference.contains(&format!("--{flag}")),
                "docs/VERIFY.md lacks --{flag}"
            );
        }
    }

    #[test]
    fn path_style_reads_a_bare_flag_or_a_value() {
        let base = ["--bucket", "b", "--prefix", "p"];
        assert!(!parse_args(&base).unwrap().archive.s3_force_path_style);
        let mut on = base.to_vec();
        on.push("--s3-force-path-style");
        assert!(parse_args(&on).unwrap().archive.s3_force_path_style);
        let mut off = base.to_vec();
        off.extend(["--s3-force-path-style", "false"]);
        assert!(!parse_args(&off).unwrap().archive.s3_force_path_style);
    }
}
