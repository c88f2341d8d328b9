//! What the audit found ([`Audit`]) and the summary printed on stdout:
//! counts, offending objects and records, foreign keys, the verdict.

use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};
use sequence_range::SequenceRange;

use super::body::DeepSummary;
use super::gap_markers::{RecordedGap, gap_marker_line};
use super::gaps::{Bound, Gap, ShardGapResult};
use super::keys::ForeignKey;
use super::overlaps::Overlap;
use super::stream::GapOutcome;
use crate::output::bucket::Bucket;

/// Most offending items (overlaps, unreadable objects, gaps) the summary
/// lists; the same for foreign keys.
const MAX_LISTED: usize = 50;

/// Everything the audit found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Audit {
    pub(super) target: String,
    pub(super) objects: usize,
    /// Objects under the error prefix.
    pub(super) error_objects: usize,
    /// Error objects whose batch has no main object (yet): written just
    /// before a crash, replayed by the daemon with the main object.
    pub(super) uncommitted_errors: Vec<String>,
    pub(super) shards_in_archive: usize,
    pub(super) foreign: Vec<ForeignKey>,
    pub(super) overlaps: Vec<Overlap>,
    pub(super) deep: Option<DeepSummary>,
    pub(super) gaps: GapOutcome,
    /// Gaps the daemon recorded: records expired from the stream unread.
    pub(super) retention_gaps: Vec<RecordedGap>,
}

impl Audit {
    fn missing_records(&self) -> u64 {
        match &self.gaps {
            GapOutcome::Checked { shards, .. } => {
                shards.iter().flat_map(|s| &s.gaps).map(|g| g.records).sum()
            }
            _ => 0,
        }
    }

    fn unreadable(&self) -> usize {
        self.deep.as_ref().map_or(0, |d| d.unreadable.len())
    }

    pub(super) fn is_exact(&self) -> bool {
        self.overlaps.is_empty()
            && self.unreadable() == 0
            && self.missing_records() == 0
            && self.retention_gaps.is_empty()
    }

    /// The summary printed on stdout.
    pub(super) fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "verify {}", self.target);
        let _ = writeln!(out, "objects:      {}", self.objects);
        if self.error_objects > 0 {
            let records = match &self.deep {
                Some(deep) => format!(", {} records", deep.error_records),
                None => String::new(),
            };
            let _ = writeln!(
                out,
                "error objects: {}{records} (records the format could not represent)",
                self.error_objects
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
        let gaps_line = match &self.gaps {
            GapOutcome::NotRequested => "not checked (--stream reads the stream; key ranges alone \
                 cannot show a missing record, Kinesis sequence numbers are not consecutive)"
                .to_owned(),
            GapOutcome::Skipped(reason) => format!("skipped: {reason}"),
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
        let warnings = self.foreign.len() + self.uncommitted_errors.len();
        if warnings > 0 {
            let _ = writeln!(
                out,
                "warnings ({} shown of {warnings}):",
                warnings.min(MAX_LISTED),
            );
            for key in self.uncommitted_errors.iter().take(MAX_LISTED) {
                let _ = writeln!(
                    out,
                    "  error object {key} has no main object yet: its batch is not committed (the daemon replays it)"
                );
            }
            for foreign in self
                .foreign
                .iter()
                .take(MAX_LISTED.saturating_sub(self.uncommitted_errors.len()))
            {
                let _ = writeln!(out, "  foreign key {}: {}", foreign.key, foreign.reason);
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
                GapOutcome::Checked { .. } => {}
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
            let _ = writeln!(
                out,
                "NOT exact: {} overlaps, {} unreadable objects, {} missing records{retention}",
                self.overlaps.len(),
                self.unreadable(),
                self.missing_records()
            );
        }
        out
    }

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
        lines
    }
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
        minute_text(gap.first_arrival)
    } else {
        format!(
            "{} .. {}",
            minute_text(gap.first_arrival),
            minute_text(gap.last_arrival)
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

/// `yyyy-MM-ddTHH:mmZ`.
pub(super) fn minute_text(bucket: Bucket) -> String {
    chrono::DateTime::from_timestamp_millis(bucket.start_millis())
        .unwrap_or_default()
        .format(match bucket.size() {
            crate::config::TimeBucket::Minute => "%Y-%m-%dT%H:%MZ",
            crate::config::TimeBucket::Hour => "%Y-%m-%dT%HZ",
        })
        .to_string()
}

/// `--since` as given, in UTC.
fn since_text(since: DateTime<Utc>) -> String {
    since.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// RFC 3339 with milliseconds.
fn millis_text(millis: i64) -> String {
    DateTime::from_timestamp_millis(millis).map_or_else(
        || format!("{millis} ms"),
        |t| t.to_rfc3339_opts(SecondsFormat::Millis, true),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::body::Unreadable;
    use crate::verify::gaps::gaps;
    use crate::verify::overlaps::overlaps;
    use crate::verify::test_support::{SHARD, n, object, stream};

    fn summary(overlaps: Vec<Overlap>, deep: Option<DeepSummary>, gaps: GapOutcome) -> Audit {
        Audit {
            target: "s3://archive/orders/".to_owned(),
            objects: 3,
            error_objects: 0,
            uncommitted_errors: vec![],
            shards_in_archive: 1,
            foreign: vec![ForeignKey {
                key: "orders/notes.txt".to_owned(),
                reason: "1 path segments".to_owned(),
            }],
            overlaps,
            deep,
            gaps,
            retention_gaps: vec![],
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
