//! The summary `verify` prints on stdout: counts, offending objects and
//! records (the event checks' too), foreign keys and uncommitted objects, the
//! verdict — [`Audit::render`].

use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};
use sequence_range::SequenceRange;

use super::body::Position;
use super::gap_markers::gap_marker_line;
use super::gaps::{Bound, Gap, ShardGapResult};
use super::report::{Audit, EventFindings, WindowOutcome};
use super::stream::GapOutcome;

/// Most offending items (overlaps, unreadable objects, gaps) the summary
/// lists; the same for foreign keys.
const MAX_LISTED: usize = 50;

impl Audit {
    /// One line per offending pair, object or run, in that order.
    fn problem_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .overlaps
            .iter()
            .map(|o| {
                format!(
                    "overlap in {}: {} ({}) and {} ({}) share sequence numbers",
                    o.shard_id, o.earlier.0, o.earlier.1, o.later.0, o.later.1
                )
            })
            .collect();
        if let Some(deep) = &self.deep {
            lines.extend(deep.unreadable.iter().map(|u| {
                let more = if u.more > 0 {
                    format!(" (and {} more problems)", u.more)
                } else {
                    String::new()
                };
                format!("unreadable {}: {}{more}", u.key, u.reason)
            }));
        }
        if let GapOutcome::Checked { shards, .. } = &self.gaps {
            lines.extend(shards.iter().flat_map(|s| &s.gaps).map(gap_line));
        }
        lines.extend(self.retention_gaps.iter().map(gap_marker_line));
        if let Some(events) = &self.events {
            lines.extend(events.problem_lines());
        }
        lines
    }

    /// Uncommitted objects, decisions made with other settings, foreign
    /// keys.
    fn warning_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .uncommitted
            .iter()
            .map(|uncommitted| {
                format!(
                    "{} {} has no main object yet: its batch is not committed (the daemon replays it)",
                    uncommitted.role.object_name(),
                    uncommitted.key
                )
            })
            .collect();
        if let Some(EventFindings {
            window: WindowOutcome::Checked { other_settings, .. },
            ..
        }) = &self.events
        {
            lines.extend(other_settings.iter().map(|key| {
                format!(
                    "decisions object {key} was made with other event settings: its batch is not \
                     checked for the window"
                )
            }));
        }
        lines.extend(
            self.foreign
                .iter()
                .map(|foreign| format!("foreign key {}: {}", foreign.key, foreign.reason)),
        );
        lines
    }

    /// The summary printed on stdout.
    pub(super) fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "verify {}", self.target);
        let _ = writeln!(out, "objects:      {}", self.objects);
        for (what, objects, records, note) in [
            (
                "error",
                self.error_objects,
                self.deep.as_ref().map(|deep| deep.error_records),
                "records the format could not represent",
            ),
            (
                "duplicates",
                self.duplicate_objects,
                self.deep.as_ref().map(|deep| deep.duplicate_records),
                "copies of events accepted earlier",
            ),
        ] {
            if objects > 0 {
                let records = records.map_or_else(String::new, |n| format!(", {n} records"));
                let _ = writeln!(out, "{what} objects: {objects}{records} ({note})");
            }
        }
        if self.decisions_objects > 0 {
            let _ = writeln!(
                out,
                "decisions objects: {} (the event decisions of each batch)",
                self.decisions_objects
            );
        }
        let _ = writeln!(
            out,
            "foreign keys: {}{}",
            self.foreign.len(),
            if self.foreign.is_empty() {
                ""
            } else {
                " (not shardsink objects: ignored, listed below)"
            }
        );
        let stream_shards = match &self.gaps {
            GapOutcome::Checked { shards, .. } => format!(", {} in the stream", shards.len()),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "shards:       {} in the archive{stream_shards}",
            self.shards_in_archive
        );
        match &self.deep {
            Some(deep) => {
                let _ = writeln!(
                    out,
                    "records:      {} lines, {} Kinesis records",
                    deep.lines, deep.kinesis_records
                );
            }
            None => {
                let _ = writeln!(out, "records:      not read (--deep reads every object)");
            }
        }
        let _ = writeln!(out, "overlaps:     {}", self.overlaps.len());
        match &self.deep {
            Some(deep) => {
                let _ = writeln!(out, "unreadable:   {}", deep.unreadable.len());
            }
            None => {
                let _ = writeln!(out, "unreadable:   not checked (--deep reads every object)");
            }
        }
        if self.has_events() {
            self.render_events(&mut out);
        }
        let gaps_line = match &self.gaps {
            GapOutcome::NotRequested => "not checked (--stream reads the stream; key ranges alone \
                 cannot show a missing record, Kinesis sequence numbers are not consecutive)"
                .to_owned(),
            GapOutcome::Skipped(reason) => format!("skipped: {reason}"),
            GapOutcome::InTable => "checked against the Iceberg table's live rows (the table's \
                 audit below: every record up to each shard's committed end)"
                .to_owned(),
            GapOutcome::Checked { shards, since, .. } => {
                let runs: usize = shards.iter().map(|s| s.gaps.len()).sum();
                let checked: u64 = shards.iter().map(|s| s.checked).sum();
                let from = match since {
                    Some(since) => format!("from {}", since_text(*since)),
                    None => "from each shard's oldest retained record".to_owned(),
                };
                format!(
                    "{} missing records in {runs} runs ({checked} records checked, {from})",
                    self.missing_records()
                )
            }
        };
        let _ = writeln!(out, "gaps:         {gaps_line}");
        let _ = writeln!(
            out,
            "retention:    {} recorded gaps{}",
            self.retention_gaps.len(),
            if self.retention_gaps.is_empty() {
                ""
            } else {
                " (records expired from the stream before they were read: listed below)"
            }
        );

        if let GapOutcome::Checked {
            shards,
            notes,
            since,
        } = &self.gaps
        {
            let _ = writeln!(out, "shards checked:");
            for note in notes {
                let _ = writeln!(out, "  {note}");
            }
            for shard in shards {
                let _ = writeln!(out, "  {}", shard_line(shard, *since));
                for note in &shard.notes {
                    let _ = writeln!(out, "    {note}");
                }
            }
        }

        let problems = self.problem_lines();
        if !problems.is_empty() {
            let _ = writeln!(
                out,
                "problems ({} shown of {}):",
                problems.len().min(MAX_LISTED),
                problems.len()
            );
            for line in problems.iter().take(MAX_LISTED) {
                let _ = writeln!(out, "  {line}");
            }
        }
        let warnings = self.warning_lines();
        if !warnings.is_empty() {
            let _ = writeln!(
                out,
                "warnings ({} shown of {}):",
                warnings.len().min(MAX_LISTED),
                warnings.len()
            );
            for line in warnings.iter().take(MAX_LISTED) {
                let _ = writeln!(out, "  {line}");
            }
        }
        if self.is_exact() {
            let mut caveats = Vec::new();
            if self.deep.is_none() {
                caveats.push("lines not read".to_owned());
            }
            match &self.gaps {
                GapOutcome::NotRequested => caveats.push("gaps not checked".to_owned()),
                GapOutcome::Skipped(_) => caveats.push("gap check skipped".to_owned()),
                GapOutcome::Checked { .. } | GapOutcome::InTable => {}
            }
            let window_checked = matches!(
                self.events.as_ref().map(|events| &events.window),
                Some(WindowOutcome::Checked { .. } | WindowOutcome::InTable)
            );
            if self.decisions_objects > 0 && !window_checked {
                caveats.push("events once per window not checked".to_owned());
            }
            if caveats.is_empty() {
                let _ = writeln!(out, "exact");
            } else {
                let _ = writeln!(out, "exact ({})", caveats.join(", "));
            }
        } else {
            let retention = if self.retention_gaps.is_empty() {
                String::new()
            } else {
                format!(", {} retention gaps", self.retention_gaps.len())
            };
            let events = self
                .events
                .as_ref()
                .map(EventFindings::violations)
                .unwrap_or_default()
                .into_iter()
                .fold(String::new(), |text, part| format!("{text}, {part}"));
            let _ = writeln!(
                out,
                "NOT exact: {} overlaps, {} unreadable objects, {} missing records{retention}{events}",
                self.overlaps.len(),
                self.unreadable(),
                self.missing_records()
            );
        }
        out
    }

    /// The event checks' lines of the counts: E1 with `--deep`, E2 with
    /// `--event-id` and `--stream` too.
    fn render_events(&self, out: &mut String) {
        let Some(events) = &self.events else {
            let _ = writeln!(out, "one place:    not checked (--deep reads every object)");
            return;
        };
        let placement = &events.placement;
        let _ = writeln!(
            out,
            "one place:    {} records twice, {} batches whose objects do not add up ({} batches \
             with decisions checked)",
            placement.twice.len(),
            placement.miscounted.len(),
            placement.decided_batches
        );
        let window = window_text(&events.window);
        let _ = writeln!(out, "once a window: {window}");
    }
}

/// `{sequenceNumber}` or `{sequenceNumber}/{subSequenceNumber}`.
fn position_text((sequence_number, sub): &Position) -> String {
    match sub {
        Some(sub) => format!("{sequence_number}/{sub}"),
        None => sequence_number.to_string(),
    }
}

/// A window in the units it was most likely given in: `1h`, `90s`,
/// `1500ms`.
fn duration_text(millis: i64) -> String {
    humantime::format_duration(std::time::Duration::from_millis(
        u64::try_from(millis).unwrap_or_default(),
    ))
    .to_string()
}

fn shard_line(shard: &ShardGapResult, since: Option<DateTime<Utc>>) -> String {
    let from = match (&shard.oldest, since) {
        (Some((sequence_number, arrival)), None) => format!(
            "from the oldest retained record {sequence_number} (arrived {})",
            millis_text(*arrival)
        ),
        (Some((sequence_number, arrival)), Some(since)) => format!(
            "from {sequence_number} (arrived {}, the first since {})",
            millis_text(*arrival),
            since_text(since)
        ),
        (None, None) => "no record retained".to_owned(),
        (None, Some(since)) => format!("no record since {}", since_text(since)),
    };
    let to = match &shard.bound {
        Bound::ShardEnd => "to SHARD_END".to_owned(),
        Bound::UpTo(bound) => format!("up to {bound}"),
    };
    let mut line = format!(
        "{}: {} records checked {from} {to}; {} missing",
        shard.shard_id,
        shard.checked,
        shard.gaps.iter().map(|g| g.records).sum::<u64>()
    );
    if shard.not_expected > 0 {
        let _ = write!(
            line,
            "; {} records before the first archived one not checked (--initial-position)",
            shard.not_expected
        );
    }
    line
}

fn gap_line(gap: &Gap) -> String {
    let span = if gap.first == gap.last {
        format!("record {}", gap.first)
    } else {
        format!("{} records {} .. {}", gap.records, gap.first, gap.last)
    };
    let arrival = if gap.first_arrival == gap.last_arrival {
        gap.first_arrival.iso_text()
    } else {
        format!(
            "{} .. {}",
            gap.first_arrival.iso_text(),
            gap.last_arrival.iso_text()
        )
    };
    let describe = |object: &Option<(String, SequenceRange)>, missing: &str| match object {
        Some((key, range)) => format!("{key} ({range})"),
        None => missing.to_owned(),
    };
    format!(
        "gap in {}: {span} (arrived {arrival}) in no object; between {} and {}",
        gap.shard_id,
        describe(&gap.before, "the start of the archive"),
        describe(&gap.after, "the end of the archive"),
    )
}

/// `--since` as given, in UTC.
pub(super) fn since_text(since: DateTime<Utc>) -> String {
    since.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// RFC 3339 with milliseconds.
fn millis_text(millis: i64) -> String {
    DateTime::from_timestamp_millis(millis).map_or_else(
        || format!("{millis} ms"),
        |t| t.to_rfc3339_opts(SecondsFormat::Millis, true),
    )
}

impl EventFindings {
    /// One line per record twice, batch that does not add up, event kept
    /// twice and wrong duplicate.
    fn problem_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .placement
            .twice
            .iter()
            .map(|twice| {
                format!(
                    "record twice in {}: {} is in {} and {}",
                    twice.shard_id,
                    position_text(&twice.position),
                    twice.keys[0],
                    twice.keys[1]
                )
            })
            .collect();
        lines.extend(
            self.placement
                .miscounted
                .iter()
                .map(|miscount| format!("does not add up: {}: {}", miscount.key, miscount.reason)),
        );
        lines.extend(window_problem_lines(&self.window));
        lines
    }
}

/// What became of the window check (E2), for the `once a window:` line.
pub(super) fn window_text(window: &WindowOutcome) -> String {
    match window {
        WindowOutcome::NotRequested => {
            "not checked (--event-id and the daemon's other event settings)".to_owned()
        }
        WindowOutcome::NotChecked(reason) => format!("not checked ({reason})"),
        WindowOutcome::InTable => "checked against the Iceberg table's rows (below)".to_owned(),
        WindowOutcome::Checked {
            result,
            scope,
            window_millis,
            other_settings,
        } => {
            let other = if other_settings.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} batches decided with other settings not checked",
                    other_settings.len()
                )
            };
            format!(
                "{} events kept twice, {} duplicates not naming a kept copy ({} user records \
                 checked, {} duplicates against their accepted copy; {scope}, window {}{other})",
                result.kept_twice.len(),
                result.bad_duplicates.len(),
                result.user_records,
                result.duplicates_checked,
                duration_text(*window_millis)
            )
        }
    }
}

/// One line per event kept twice within the window and per duplicate not
/// naming a kept copy.
pub(super) fn window_problem_lines(window: &WindowOutcome) -> Vec<String> {
    let WindowOutcome::Checked { result, .. } = window else {
        return Vec::new();
    };
    let twice = result.kept_twice.iter().map(|twice| {
        format!(
            "event {:032x} kept twice within the window: {} (arrived {}) and {} (arrived {}), \
             {} ms apart",
            twice.key.id,
            twice.earlier.0,
            millis_text(twice.earlier.1),
            twice.later.0,
            millis_text(twice.later.1),
            twice.later.1 - twice.earlier.1
        )
    });
    let bad = result.bad_duplicates.iter().map(|bad| {
        format!(
            "duplicate {} names {} as its accepted copy, but {}",
            bad.copy, bad.of, bad.reason
        )
    });
    twice.chain(bad).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::body::DeepSummary;
    use crate::verify::body::Unreadable;
    use crate::verify::gap_markers::RecordedGap;
    use crate::verify::gaps::gaps;
    use crate::verify::keys::ForeignKey;
    use crate::verify::overlaps::Overlap;
    use crate::verify::overlaps::overlaps;
    use crate::verify::test_support::{SHARD, n, object, stream};

    fn summary(overlaps: Vec<Overlap>, deep: Option<DeepSummary>, gaps: GapOutcome) -> Audit {
        Audit {
            target: "s3://archive/orders/".to_owned(),
            objects: 3,
            error_objects: 0,
            duplicate_objects: 0,
            decisions_objects: 0,
            uncommitted: vec![],
            shards_in_archive: 1,
            foreign: vec![ForeignKey {
                key: "orders/notes.txt".to_owned(),
                reason: "1 path segments".to_owned(),
            }],
            overlaps,
            deep,
            events_requested: false,
            events: None,
            gaps,
            retention_gaps: vec![],
            sides: Default::default(),
            table_events: None,
        }
    }

    #[test]
    fn the_summary_names_what_is_wrong() {
        let clean = summary(
            vec![],
            Some(DeepSummary::default()),
            GapOutcome::NotRequested,
        );
        assert!(clean.is_exact());
        let text = clean.render();
        assert!(text.ends_with("exact (gaps not checked)\n"), "{text}");
        assert!(
            text.contains("foreign key orders/notes.txt: 1 path segments"),
            "{text}"
        );

        let (a, b) = (object(1, 5), object(5, 9));
        let objects = [a.clone(), b.clone()];
        let overlapping = overlaps(&objects);
        let missing_run = gaps(
            SHARD,
            stream(3),
            &[&object(10, 10)],
            Bound::UpTo(n(30)),
            false,
        );
        let bad = summary(
            overlapping,
            Some(DeepSummary {
                lines: 4,
                error_records: 0,
                duplicate_records: 0,
                kinesis_records: 4,
                unreadable: vec![Unreadable {
                    key: a.key.clone(),
                    reason: "line 2 is empty".to_owned(),
                    more: 2,
                }],
            }),
            GapOutcome::Checked {
                shards: vec![missing_run],
                notes: vec![],
                since: None,
            },
        );
        assert!(!bad.is_exact());
        let text = bad.render();
        for expected in [
            format!("overlap in {SHARD}: {} (1-5) and {} (5-9)", a.key, b.key),
            format!(
                "unreadable {}: line 2 is empty (and 2 more problems)",
                a.key
            ),
            format!(
                "gap in {SHARD}: 2 records 20 .. 30 (arrived 2026-11-21T05:28Z .. 2026-11-21T05:29Z)"
            ),
            format!("{SHARD}: 3 records checked from the oldest retained record 10"),
            "NOT exact: 1 overlaps, 1 unreadable objects, 2 missing records\n".to_owned(),
        ] {
            assert!(text.contains(&expected), "{expected:?} not in:\n{text}");
        }

        let mut lost = summary(
            vec![],
            Some(DeepSummary::default()),
            GapOutcome::NotRequested,
        );
        lost.retention_gaps = vec![RecordedGap {
            key: "orders/_retention-gaps/shardId-000000000001/TRIM_HORIZON.json".to_owned(),
            marker: Err("not a gap marker: expected value".to_owned()),
        }];
        assert!(!lost.is_exact(), "records expired unread: not exact");
        let text = lost.render();
        assert!(
            text.contains("retention:    1 recorded gaps")
                && text.contains("retention gap marker orders/_retention-gaps/")
                && text.ends_with("0 missing records, 1 retention gaps\n"),
            "{text}"
        );

        let skipped = summary(vec![], None, GapOutcome::Skipped("no answer".to_owned()));
        assert!(skipped.is_exact());
        assert!(
            skipped
                .render()
                .ends_with("exact (lines not read, gap check skipped)\n")
        );
    }
}
