//! What the audit found ([`Audit`]): counts, offending objects and records
//! (the event checks' too), foreign keys and uncommitted objects, and the
//! verdict. The summary printed from it is `render`'s.

use std::collections::HashMap;

use super::body::{DeepSummary, Role};
use super::gap_markers::RecordedGap;
use super::keys::ArchivedKey;
use super::keys::ForeignKey;
use super::overlaps::Overlap;
use super::placement::Placement;
use super::stream::GapOutcome;
use super::table_gaps::SideRecords;
use super::window::WindowResult;
use crate::events::rule::CopyRef;

/// A batch's error, duplicates or decisions object whose main object is not
/// there (yet): written just before a crash, replayed by the daemon with
/// the main object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Uncommitted {
    pub(super) role: Role,
    pub(super) key: String,
}

/// What became of the window check (E2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum WindowOutcome {
    /// No `--event-id`.
    NotRequested,
    /// Asked for, but not possible: why.
    NotChecked(&'static str),
    /// The kept records are rows of an Iceberg table: the table's audit
    /// checks them.
    InTable,
    Checked {
        result: WindowResult,
        /// How the scope is described.
        scope: &'static str,
        window_millis: i64,
        /// Decisions objects of committed batches made with other event
        /// settings: their batches are not checked.
        other_settings: Vec<String>,
    },
}

/// What the table's window check (E2 over an Iceberg table's rows) takes
/// from the archive's audit, with `--event-id` and `--deep`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct TableEventInputs {
    /// Every decisions object.
    pub(super) decisions: Vec<DecisionsObject>,
    /// Each record of a duplicates object, with the accepted copy it names.
    pub(super) duplicates: HashMap<CopyRef, CopyRef>,
}

/// A decisions object, as the table's window check takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DecisionsObject {
    pub(super) key: ArchivedKey,
    /// The settings it was made with (`x-amz-meta-shardsink-format`).
    pub(super) format: Option<String>,
    /// Its batch's duplicates, if it decided any, were listed: a batch
    /// whose duplicates object was written after the listing (a daemon
    /// running beside the audit) is not checked, or its duplicates would
    /// count as kept.
    pub(super) duplicates_listed: bool,
}

/// What the event checks found (`--deep`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct EventFindings {
    /// E1: every user record in one of its batch's objects.
    pub(super) placement: Placement,
    /// E2: each event once per window.
    pub(super) window: WindowOutcome,
}

impl EventFindings {
    pub(super) fn is_clean(&self) -> bool {
        self.placement.is_clean()
            && match &self.window {
                WindowOutcome::Checked { result, .. } => result.is_clean(),
                WindowOutcome::NotRequested
                | WindowOutcome::NotChecked(_)
                | WindowOutcome::InTable => true,
            }
    }

    /// `N records twice, …` for the verdict: the nonzero counts.
    pub(super) fn violations(&self) -> Vec<String> {
        let mut counts = vec![
            (self.placement.twice.len(), "records twice"),
            (
                self.placement.miscounted.len(),
                "batches whose objects do not add up",
            ),
        ];
        if let WindowOutcome::Checked { result, .. } = &self.window {
            counts.push((result.kept_twice.len(), "events kept twice in a window"));
            counts.push((
                result.bad_duplicates.len(),
                "duplicates not naming a kept copy",
            ));
        }
        counts
            .into_iter()
            .filter(|(count, _)| *count > 0)
            .map(|(count, what)| format!("{count} {what}"))
            .collect()
    }
}

/// Everything the audit found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Audit {
    pub(super) target: String,
    pub(super) objects: usize,
    /// Objects under the error prefix.
    pub(super) error_objects: usize,
    /// Objects under the duplicates prefix.
    pub(super) duplicate_objects: usize,
    /// Decisions objects (`{prefix}/_events/`).
    pub(super) decisions_objects: usize,
    /// Error, duplicates and decisions objects whose batch has no main
    /// object (yet).
    pub(super) uncommitted: Vec<Uncommitted>,
    pub(super) shards_in_archive: usize,
    pub(super) foreign: Vec<ForeignKey>,
    pub(super) overlaps: Vec<Overlap>,
    pub(super) deep: Option<DeepSummary>,
    /// Whether `--event-id` was given.
    pub(super) events_requested: bool,
    /// The event checks, with `--deep`.
    pub(super) events: Option<EventFindings>,
    pub(super) gaps: GapOutcome,
    /// Gaps the daemon recorded: records expired from the stream unread.
    pub(super) retention_gaps: Vec<RecordedGap>,
    /// With an Iceberg table and `--deep`: the user records of the error and
    /// duplicates objects, by shard, for the table's gap check.
    pub(super) sides: SideRecords,
    /// With an Iceberg table, `--event-id` and `--deep`: what the table's
    /// window check needs of the objects.
    pub(super) table_events: Option<TableEventInputs>,
}

impl Audit {
    pub(super) fn missing_records(&self) -> u64 {
        match &self.gaps {
            GapOutcome::Checked { shards, .. } => {
                shards.iter().flat_map(|s| &s.gaps).map(|g| g.records).sum()
            }
            _ => 0,
        }
    }

    pub(super) fn unreadable(&self) -> usize {
        self.deep.as_ref().map_or(0, |d| d.unreadable.len())
    }

    pub(super) fn is_exact(&self) -> bool {
        self.overlaps.is_empty()
            && self.unreadable() == 0
            && self.missing_records() == 0
            && self.retention_gaps.is_empty()
            && self.events.as_ref().is_none_or(EventFindings::is_clean)
    }

    /// Whether the archive holds anything of event deduplication, or the
    /// event checks were asked for.
    pub(super) fn has_events(&self) -> bool {
        self.events_requested || self.duplicate_objects > 0 || self.decisions_objects > 0
    }
}
