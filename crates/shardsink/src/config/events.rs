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

/// The longest `--event-dedup-window`: 365 days (DynamoDB manifest). The
/// local store is further bounded by the stream's retention, checked at
/// start-up.
pub const MAX_EVENT_DEDUP_WINDOW: Duration = Duration::from_secs(365 * 24 * 3_600);

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
    /// missing or behind) or dynamodb (a manifest table shared by all
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

    /// With the dynamodb store: the manifest table, created if missing
    /// (on-demand billing, time to live on `ttl`).
    /// [default: {lease table}-events]
    #[arg(long, env = "SHARDSINK_EVENT_MANIFEST_TABLE", value_name = "TABLE")]
    pub event_manifest_table: Option<String>,
}

/// `--event-dedup-store`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EventStoreKind {
    /// An embedded store on local disk, per shard.
    Local,
    /// A DynamoDB manifest table, per stream.
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
    /// The DynamoDB manifest table.
    Manifest {
        /// `--event-manifest-table`.
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
    /// default manifest table.
    ///
    /// # Errors
    /// [`ConfigError`] for a setting of the other store, a store setting
    /// without `--event-id`, or a bad table name.
    pub fn validate(
        &self,
        on: bool,
        lease_table: &str,
    ) -> Result<Option<EventStoreSetting>, ConfigError> {
        if !on {
            for (set, flag) in [
                (self.event_dedup_store.is_some(), "event-dedup-store"),
                (self.event_dedup_dir.is_some(), "event-dedup-dir"),
                (self.event_manifest_table.is_some(), "event-manifest-table"),
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
                if self.event_manifest_table.is_some() {
                    return Err(other("event-manifest-table", "dynamodb"));
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
                let table = self
                    .event_manifest_table
                    .clone()
                    .unwrap_or_else(|| format!("{lease_table}-events"));
                super::archive::validate_table_name("event-manifest-table", &table)?;
                if table == lease_table {
                    return Err(ConfigError::new(
                        "event-manifest-table",
                        format!("{table:?} is the lease table; use a table of its own"),
                    ));
                }
                EventStoreSetting::Manifest { table }
            }
        }))
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
