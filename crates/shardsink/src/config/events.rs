//! Event deduplication settings: [`EventArgs`] (which events are the same,
//! shared with `shardsink verify`) and [`EventStoreArgs`] (where the daemon
//! keeps accepted copies), validated into [`EventSettings`]. Off unless
//! `--event-id` is set.

use std::path::PathBuf;
use std::time::Duration;

use super::error::ConfigError;
use super::values::parse_duration;
use crate::events::EventSettings;
use crate::events::id::EventIdSource;
use crate::events::rule::Rule;

/// The default `--event-dedup-window`.
pub const DEFAULT_EVENT_DEDUP_WINDOW: Duration = Duration::from_secs(3_600);

/// The shortest `--event-dedup-window`: one second (arrival timestamps have
/// millisecond resolution; a shorter window would catch almost nothing).
pub const MIN_EVENT_DEDUP_WINDOW: Duration = Duration::from_secs(1);

/// The longest `--event-dedup-window`: 365 days (DynamoDB store). The
/// local store is further bounded by the stream's retention, checked at
/// start-up.
pub const MAX_EVENT_DEDUP_WINDOW: Duration = Duration::from_secs(365 * 24 * 3_600);

/// The flag `--event-dedup-table` had before, kept as an alias (without
/// its dashes).
const OLD_TABLE_FLAG: &str = "event-manifest-table";

/// Which records are the same event: shared by the daemon and
/// `shardsink verify --deep`.
#[derive(Debug, Clone, clap::Args)]
pub struct EventArgs {
    /// Turns event deduplication on: where each record's event id is read
    /// from. partition-key; json-pointer:/path (RFC 6901, into a JSON
    /// payload — for KPL records, each user record's payload); or payload (a
    /// hash of the payload bytes). A copy of an event accepted earlier
    /// within --event-dedup-window is written to --duplicates-prefix instead
    /// of the prefix. [default: off]
    #[arg(long, env = "SHARDSINK_EVENT_ID", value_parser = EventIdSource::parse, value_name = "SOURCE")]
    pub event_id: Option<EventIdSource>,

    /// What else a duplicate must share: payload (the same payload bytes as
    /// well as the same id; the same id with another payload is kept and
    /// counted as id_reused with the local store, as unique with the
    /// dynamodb store, which keeps each payload's copies apart) or none (the
    /// same id is enough). [default: payload]
    #[arg(
        long,
        env = "SHARDSINK_EVENT_FINGERPRINT",
        value_enum,
        ignore_case = true,
        value_name = "FINGERPRINT"
    )]
    pub event_fingerprint: Option<EventFingerprint>,

    /// How far apart, in ApproximateArrivalTimestamp (not the local clock),
    /// two copies of an event may arrive for the one decided second to be a
    /// duplicate, whichever arrived first. Copies further apart are both
    /// kept (counted as expired). With the
    /// local store at most the stream's retention, with dynamodb up to 365d.
    /// [default: 1h]
    #[arg(long, env = "SHARDSINK_EVENT_DEDUP_WINDOW", value_parser = parse_duration, value_name = "DURATION")]
    pub event_dedup_window: Option<Duration>,
}

/// `--event-fingerprint`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EventFingerprint {
    /// A duplicate has the same id and the same payload bytes.
    Payload,
    /// A duplicate has the same id.
    None,
}

/// Where the daemon keeps the accepted copies of events.
#[derive(Debug, Clone, clap::Args)]
pub struct EventStoreArgs {
    /// Where accepted copies are kept: local (an embedded store on this
    /// host's disk, per shard: a producer's retry has the same partition
    /// key, so it lands on the same shard; rebuilt from the archive when
    /// missing or behind) or dynamodb (a DynamoDB event table shared by all
    /// workers: also catches copies on different shards). [default: local]
    #[arg(
        long,
        env = "SHARDSINK_EVENT_DEDUP_STORE",
        value_enum,
        ignore_case = true,
        value_name = "STORE"
    )]
    pub event_dedup_store: Option<EventStoreKind>,

    /// With the local store: its directory (created if missing). One
    /// process per directory. [default: shardsink-events, in the working
    /// directory]
    #[arg(long, env = "SHARDSINK_EVENT_DEDUP_DIR", value_name = "DIR")]
    pub event_dedup_dir: Option<PathBuf>,

    /// With the dynamodb store: the DynamoDB event table, created if
    /// missing (on-demand billing, time to live on `ttl`).
    /// [default: {lease table}-events]
    #[arg(long, env = "SHARDSINK_EVENT_DEDUP_TABLE", value_name = "TABLE")]
    pub event_dedup_table: Option<String>,

    /// The older name of `--event-dedup-table` (and
    /// `SHARDSINK_EVENT_DEDUP_TABLE`), still accepted; hidden from `--help`.
    /// Set to another value than `--event-dedup-table`, it is refused.
    #[arg(
        long = OLD_TABLE_FLAG,
        env = "SHARDSINK_EVENT_MANIFEST_TABLE",
        value_name = "TABLE",
        hide = true
    )]
    pub event_manifest_table: Option<String>,
}

/// `--event-dedup-store`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EventStoreKind {
    /// An embedded store on local disk, per shard.
    Local,
    /// A DynamoDB event table, per stream.
    Dynamodb,
}

/// Where accepted copies are kept, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventStoreSetting {
    /// The local store in this directory.
    Local {
        /// `--event-dedup-dir`.
        dir: PathBuf,
    },
    /// The DynamoDB event table.
    DynamoDb {
        /// `--event-dedup-table`.
        table: String,
    },
}

impl EventArgs {
    /// The settings, or `None` when `--event-id` is not set.
    ///
    /// # Errors
    /// [`ConfigError`] for a window out of range, or a setting given without
    /// `--event-id`.
    pub fn validate(&self) -> Result<Option<EventSettings>, ConfigError> {
        let Some(source) = self.event_id.clone() else {
            if self.event_fingerprint.is_some() {
                return Err(only_with_event_id("event-fingerprint"));
            }
            if self.event_dedup_window.is_some() {
                return Err(only_with_event_id("event-dedup-window"));
            }
            return Ok(None);
        };
        let window = self
            .event_dedup_window
            .unwrap_or(DEFAULT_EVENT_DEDUP_WINDOW);
        if !(MIN_EVENT_DEDUP_WINDOW..=MAX_EVENT_DEDUP_WINDOW).contains(&window) {
            return Err(ConfigError::new(
                "event-dedup-window",
                format!("{window:?} is outside 1s..=365d"),
            ));
        }
        let fingerprint = self.event_fingerprint != Some(EventFingerprint::None);
        Ok(Some(EventSettings {
            source,
            fingerprint,
            rule: Rule {
                // At most 365 days: fits.
                window_millis: i64::try_from(window.as_millis()).unwrap_or(i64::MAX),
                match_fingerprint: fingerprint,
            },
        }))
    }
}

impl EventStoreArgs {
    /// The store, for event deduplication `on`; `lease_table` gives the
    /// default DynamoDB event table.
    ///
    /// # Errors
    /// [`ConfigError`] for a setting of the other store, a store setting
    /// without `--event-id`, a bad table name, or `--event-dedup-table` and
    /// its older name set to different tables.
    pub fn validate(
        &self,
        on: bool,
        lease_table: &str,
    ) -> Result<Option<EventStoreSetting>, ConfigError> {
        if !on {
            for (set, flag) in [
                (self.event_dedup_store.is_some(), "event-dedup-store"),
                (self.event_dedup_dir.is_some(), "event-dedup-dir"),
                (self.event_dedup_table.is_some(), "event-dedup-table"),
                (self.event_manifest_table.is_some(), OLD_TABLE_FLAG),
            ] {
                if set {
                    return Err(only_with_event_id(flag));
                }
            }
            return Ok(None);
        }
        let kind = self.event_dedup_store.unwrap_or(EventStoreKind::Local);
        let other = |flag: &str, store: &str| {
            ConfigError::new(flag, format!("only used with --event-dedup-store {store}"))
        };
        Ok(Some(match kind {
            EventStoreKind::Local => {
                if let Some((flag, _)) = self.dedup_table()? {
                    return Err(other(flag, "dynamodb"));
                }
                EventStoreSetting::Local {
                    dir: self
                        .event_dedup_dir
                        .clone()
                        .unwrap_or_else(|| PathBuf::from("shardsink-events")),
                }
            }
            EventStoreKind::Dynamodb => {
                if self.event_dedup_dir.is_some() {
                    return Err(other("event-dedup-dir", "local"));
                }
                let (flag, table) = match self.dedup_table()? {
                    Some((flag, table)) => (flag, table.to_owned()),
                    None => ("event-dedup-table", format!("{lease_table}-events")),
                };
                super::archive::validate_table_name(flag, &table)?;
                if table == lease_table {
                    return Err(ConfigError::new(
                        flag,
                        format!("{table:?} is the lease table; use a table of its own"),
                    ));
                }
                EventStoreSetting::DynamoDb { table }
            }
        }))
    }

    /// `--event-dedup-table`, or its older name: the flag that was set
    /// (without its dashes) and its table; `None` when neither is set.
    /// Both set to one table is that table.
    ///
    /// # Errors
    /// [`ConfigError`] naming both flags when they name different tables.
    fn dedup_table(&self) -> Result<Option<(&'static str, &str)>, ConfigError> {
        match (&self.event_dedup_table, &self.event_manifest_table) {
            (Some(new), Some(old)) if new != old => Err(ConfigError::new(
                "event-dedup-table",
                format!(
                    "{new:?} conflicts with --{OLD_TABLE_FLAG} (SHARDSINK_EVENT_MANIFEST_TABLE) \
                     {old:?}, its older name; set only --event-dedup-table"
                ),
            )),
            (Some(new), _) => Ok(Some(("event-dedup-table", new))),
            (None, Some(old)) => Ok(Some((OLD_TABLE_FLAG, old))),
            (None, None) => Ok(None),
        }
    }
}

/// Event deduplication as the daemon runs it: the rule and the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDedup {
    /// Which records are the same event.
    pub settings: EventSettings,
    /// Where accepted copies are kept.
    pub store: EventStoreSetting,
}

impl EventDedup {
    /// Both groups validated together: `None` when `--event-id` is not
    /// set.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first bad setting.
    pub fn resolve(
        events: &EventArgs,
        store: &EventStoreArgs,
        lease_table: &str,
    ) -> Result<Option<Self>, ConfigError> {
        let settings = events.validate()?;
        let store = store.validate(settings.is_some(), lease_table)?;
        Ok(settings
            .zip(store)
            .map(|(settings, store)| Self { settings, store }))
    }
}

/// The error of an event deduplication setting given without `--event-id`
/// (`flag` without its dashes).
pub(crate) fn only_with_event_id(flag: &str) -> ConfigError {
    ConfigError::new(flag, "only used with --event-id")
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, FromArgMatches as _};

    use super::*;
    use crate::config::tests::valid;
    use crate::config::{Config, Settings};

    /// The daemon's settings with the DynamoDB store and `args`.
    fn dynamodb(args: &[&str]) -> Result<Settings, ConfigError> {
        let mut all = vec![
            "--lease-table",
            "leases",
            "--event-id",
            "partition-key",
            "--event-dedup-store",
            "dynamodb",
        ];
        all.extend_from_slice(args);
        valid(&all)
    }

    fn table(settings: Settings) -> String {
        match settings.events.map(|events| events.store) {
            Some(EventStoreSetting::DynamoDb { table }) => table,
            other => panic!("expected the DynamoDB store, got {other:?}"),
        }
    }

    #[test]
    fn dedup_table_names_the_table_and_defaults_to_the_lease_tables() {
        assert_eq!(table(dynamodb(&[]).unwrap()), "leases-events");
        assert_eq!(
            table(dynamodb(&["--event-dedup-table", "seen"]).unwrap()),
            "seen"
        );
    }

    #[test]
    fn the_older_table_flag_still_works() {
        assert_eq!(
            table(dynamodb(&["--event-manifest-table", "seen"]).unwrap()),
            "seen"
        );
        // Its errors name it, as the flag the user set.
        let err = dynamodb(&["--event-manifest-table", "leases"]).unwrap_err();
        assert_eq!(err.flag, "--event-manifest-table");
        assert_eq!(err.env, "SHARDSINK_EVENT_MANIFEST_TABLE");
    }

    #[test]
    fn the_older_table_variable_still_works() {
        let command = Config::command();
        let old = command
            .get_arguments()
            .find(|arg| arg.get_long() == Some("event-manifest-table"))
            .expect("the older flag is an argument");
        assert_eq!(
            old.get_env().and_then(|env| env.to_str()),
            Some("SHARDSINK_EVENT_MANIFEST_TABLE")
        );
        assert!(old.is_hide_set(), "the older flag is hidden from --help");

        // The argument reads its variable: pointed at HOME (set in any test
        // environment), with every other variable switched off.
        let home = std::env::var("HOME").expect("HOME is set");
        let command = command
            .mut_args(|arg| arg.env(None::<&str>))
            .mut_arg("event_manifest_table", |arg| arg.env("HOME"));
        let matches = command.try_get_matches_from(["shardsink"]).unwrap();
        let config = Config::from_arg_matches(&matches).unwrap();
        assert_eq!(config.event_store.event_manifest_table, Some(home));
        assert_eq!(config.event_store.event_dedup_table, None);
    }

    #[test]
    fn the_new_table_flag_wins_and_conflicting_names_are_refused() {
        // Both names for one table: that table.
        let both = [
            "--event-dedup-table",
            "seen",
            "--event-manifest-table",
            "seen",
        ];
        assert_eq!(table(dynamodb(&both).unwrap()), "seen");
        // A bad table named by both: the new flag is the one named.
        let both = [
            "--event-dedup-table",
            "leases",
            "--event-manifest-table",
            "leases",
        ];
        assert_eq!(dynamodb(&both).unwrap_err().flag, "--event-dedup-table");

        let err = dynamodb(&[
            "--event-dedup-table",
            "a-new",
            "--event-manifest-table",
            "an-old",
        ])
        .unwrap_err();
        assert_eq!(err.flag, "--event-dedup-table");
        let message = err.to_string();
        for part in [
            "SHARDSINK_EVENT_DEDUP_TABLE",
            "--event-manifest-table",
            "SHARDSINK_EVENT_MANIFEST_TABLE",
            "\"a-new\"",
            "\"an-old\"",
        ] {
            assert!(message.contains(part), "{message} lacks {part}");
        }
    }

    #[test]
    fn table_flags_belong_to_the_dynamodb_store() {
        for flag in ["--event-dedup-table", "--event-manifest-table"] {
            let err = valid(&["--event-id", "partition-key", flag, "seen"]).unwrap_err();
            assert_eq!(err.flag, flag);
            assert!(
                err.to_string().contains("--event-dedup-store dynamodb"),
                "{err}"
            );

            let err = valid(&[flag, "seen"]).unwrap_err();
            assert_eq!(err.flag, flag);
            assert!(
                err.to_string().contains("only used with --event-id"),
                "{err}"
            );
        }
    }
}
