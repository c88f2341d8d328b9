//! The audit of an Iceberg table (`--format iceberg`): the live rows of the
//! table's current snapshot against the commit state it records, and the
//! data files no snapshot names.
//!
//! - *duplicate*: one record (shard, sequence number, sub-sequence number)
//!   in two live rows — T1 broken;
//! - *beyond*: a live row after its shard's committed end, or of a shard the
//!   state does not name — a record the state does not account for, so a
//!   later commit would append it again;
//! - *checkpoint beyond*: a lease row whose checkpoint (a sequence
//!   number) is after its shard's committed end, or of a shard the state
//!   does not name. An owner moves its checkpoint only to its shard's
//!   committed end, and resumes after the later of the two: the records
//!   between are in no live row and will never be read again — a gap (T2
//!   broken). Lease rows with staged batches (written, not yet committed)
//!   are counted, not judged;
//! - *missing* (with `--stream`, `table_gaps.rs`): a record of the stream
//!   at or below its shard's committed end that is in no live row, nor in
//!   an error or duplicates object — a gap (T2 broken);
//! - *empty*: a shard the state names with no live row (a warning: all its
//!   records may have gone to the error or duplicates prefix);
//! - each shard's live rows: how many, the lowest and highest sequence
//!   number, the committed end;
//! - *orphans*: data files under `<table location>/data/` that no snapshot's
//!   manifests name: a crash between a file's write and its commit left
//!   them; harmless (docs/DESIGN.md, "Iceberg tables").
//!
//! The rows are read with iceberg's own reader (which applies delete
//! files), one data file at a time, so that each row is known with its
//! file. Sequence numbers compare as numbers ([`SequenceNumber`]), never as
//! text. The files a snapshot names are those of the manifests its manifest
//! list names, whatever an entry's status ([table spec, "Snapshots" and
//! "Manifests"][spec]); a file of an older snapshot that the current one
//! no longer names is not an orphan.
//!
//! [spec]: https://iceberg.apache.org/spec/#snapshots

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::error::Error as StdError;
use std::fmt::Write as _;
use std::future::Future;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::DataType;
use futures::{StreamExt, TryStreamExt};
use iceberg::scan::FileScanTask;
use iceberg::spec::{PrimitiveType, Type};
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent};
use sequence_range::SequenceNumber;
use shard_lease::{Checkpoint, Lease};

use super::body::Position;
use super::render::{since_text, window_problem_lines, window_text};
use super::report::WindowOutcome;
use super::table_gaps::{LiveRecords, MAX_NAMED, SideRecords, TableGaps};
use crate::output::format::schema::{SEQUENCE_NUMBER, SHARD_ID, SUB_SEQUENCE_NUMBER};
use crate::table::catalog::load_table;
use crate::table::commit::read_state;
use crate::table::state::CommitState;

/// The columns the audit reads, with the Iceberg type each must have
/// (`table::create::default_schema`).
const COLUMNS: [(&str, PrimitiveType); 3] = [
    (SHARD_ID, PrimitiveType::String),
    (SEQUENCE_NUMBER, PrimitiveType::String),
    (SUB_SEQUENCE_NUMBER, PrimitiveType::Long),
];

/// Most findings and orphan paths the summary lists (all are counted).
const MAX_LISTED: usize = 20;

/// One live row's record: its shard, sequence number and sub-sequence
/// number (none for a record that was not aggregated).
type RecordKey = (String, SequenceNumber, Option<i64>);

/// What the audit of a table found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TableAudit {
    /// The table, `namespace.name`.
    pub(super) table: String,
    /// The current snapshot read; none for a table without one.
    pub(super) snapshot_id: Option<i64>,
    /// The number of the shardsink commit whose state the table names (0:
    /// none yet).
    pub(super) commit: u64,
    /// Every shard with live rows or a committed end, by shard id.
    pub(super) shards: Vec<ShardRows>,
    /// Live data files read.
    pub(super) files: usize,
    /// Duplicates first, then rows beyond the committed end, then
    /// checkpoints beyond it, then missing records, then empty shards.
    pub(super) findings: Vec<TableFinding>,
    /// Data files no snapshot names.
    pub(super) orphans: Orphans,
    /// What became of the comparison with the lease rows.
    pub(super) leases: LeaseCheck,
    /// What became of the gap check (the stream against the live rows).
    pub(super) gaps: TableGaps,
    /// What became of the window check (E2 over the kept records: live
    /// rows and error objects), with `--event-id`.
    pub(super) window: WindowOutcome,
    /// Every live row's record, by shard, for the gap check (which takes
    /// them); not part of the summary.
    pub(super) live: LiveRecords,
}

/// What became of the comparison of the lease rows' checkpoints with the
/// committed ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum LeaseCheck {
    /// No lease table named (no `--stream`).
    NotRequested,
    /// The lease table could not be read: why.
    NotRead(String),
    /// Every lease row compared.
    Checked {
        /// Lease rows read.
        leases: usize,
        /// Shards whose row holds staged batches (written, not yet
        /// committed), with how many, by shard id.
        staged: Vec<(String, usize)>,
    },
}

/// A shard's live rows in the current snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ShardRows {
    pub(super) shard_id: String,
    /// Live rows (a duplicated record counts each time).
    pub(super) rows: u64,
    /// The lowest and highest sequence number of the rows; none without
    /// rows.
    pub(super) min: Option<SequenceNumber>,
    pub(super) max: Option<SequenceNumber>,
    /// The shard's committed end in the commit state; none when the state
    /// does not name the shard.
    pub(super) committed_end: Option<SequenceNumber>,
}

/// One thing the audit found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TableFinding {
    /// One record in several live rows (T1 broken).
    Duplicate {
        shard_id: String,
        sequence_number: SequenceNumber,
        sub_sequence_number: Option<i64>,
        /// The data file of each row holding it, in reading order (a file
        /// appended twice is named twice).
        files: Vec<String>,
    },
    /// Live rows of a shard after its committed end, or of a shard the
    /// state does not name (`committed_end` none): records the state does
    /// not account for.
    Beyond {
        shard_id: String,
        committed_end: Option<SequenceNumber>,
        /// How many such rows, and the highest sequence number among them.
        rows: u64,
        highest: SequenceNumber,
        /// The data files holding them, sorted.
        files: Vec<String>,
    },
    /// A lease row whose checkpoint is after its shard's committed end, or
    /// of a shard the state does not name (`committed_end` none): the
    /// records between are in no live row, and the daemon resumes after
    /// the checkpoint (a gap, T2 broken).
    CheckpointBeyond {
        shard_id: String,
        checkpoint: SequenceNumber,
        committed_end: Option<SequenceNumber>,
    },
    /// User records of the stream at or below their shard's committed end
    /// that are in no live row, nor in an error or duplicates object: a
    /// gap (T2 broken).
    Missing {
        shard_id: String,
        committed_end: SequenceNumber,
        /// How many user records.
        records: u64,
        /// The first few ([`MAX_NAMED`](super::table_gaps::MAX_NAMED)), in
        /// stream order.
        first: Vec<Position>,
    },
    /// Live rows whose record is also in an error or duplicates object:
    /// in two places (E1 broken).
    AlsoInObjects {
        shard_id: String,
        /// How many records.
        records: u64,
        /// The first few ([`MAX_NAMED`](super::table_gaps::MAX_NAMED)), in
        /// sequence order.
        first: Vec<Position>,
    },
    /// A shard the state names without a live row (a warning).
    Empty {
        shard_id: String,
        committed_end: SequenceNumber,
    },
}

impl TableFinding {
    /// Whether the finding makes the table not exact (an empty shard does
    /// not).
    pub(super) fn breaks_exactness(&self) -> bool {
        !matches!(self, Self::Empty { .. })
    }
}

/// Data files under the table's data directory that no snapshot names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Orphans {
    /// All of them.
    pub(super) count: usize,
    /// The first [`MAX_LISTED`] paths, sorted.
    pub(super) paths: Vec<String>,
}

/// Why a table cannot be audited.
#[derive(Debug, thiserror::Error)]
pub(super) enum TableAuditError {
    /// The catalog or the table's files failed.
    #[error("table {table}: {source}")]
    Iceberg {
        table: String,
        #[source]
        source: Box<iceberg::Error>,
    },
    /// The table lacks a column shardsink writes, or has it with another
    /// type: not a table shardsink writes.
    #[error("table {table} is not a shardsink table: column `{column}` {reason}")]
    NotAShardsinkTable {
        table: String,
        column: &'static str,
        reason: String,
    },
    /// A live row or the commit state holds what is not a sequence number
    /// or a shard id.
    #[error("table {table}: {what}")]
    Malformed { table: String, what: String },
    /// Listing the data directory failed.
    #[error("table {table}: listing {prefix}: {source}")]
    List {
        table: String,
        prefix: String,
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
}

impl TableAudit {
    /// Compares each lease row of `leases` (read *before* the table was
    /// loaded, so that a commit and checkpoint landing in between cannot
    /// put a checkpoint past the ends read) with the committed ends: a
    /// checkpoint that is a sequence number after its shard's end, or of a
    /// shard without one, is a [`TableFinding::CheckpointBeyond`].
    /// Sentinels (`TRIM_HORIZON`, …) claim nothing; `SHARD_END` is written
    /// only once the shard's last staged batch is committed, and says
    /// nothing a sequence number could be compared with. `None`: no lease
    /// table named; `Some(Err(why))`: it could not be read.
    pub(super) fn check_leases(&mut self, leases: Option<Result<Vec<Lease>, String>>) {
        let leases = match leases {
            None => {
                self.leases = LeaseCheck::NotRequested;
                return;
            }
            Some(Err(reason)) => {
                self.leases = LeaseCheck::NotRead(reason);
                return;
            }
            Some(Ok(leases)) => leases,
        };
        let ends: HashMap<&str, &SequenceNumber> = self
            .shards
            .iter()
            .filter_map(|shard| Some((shard.shard_id.as_str(), shard.committed_end.as_ref()?)))
            .collect();
        let mut beyond = Vec::new();
        let mut staged = Vec::new();
        for lease in &leases {
            if !lease.staged_batches.is_empty() {
                staged.push((lease.lease_key.clone(), lease.staged_batches.len()));
            }
            let Checkpoint::SequenceNumber(checkpoint) = &lease.checkpoint else {
                continue;
            };
            let end = ends.get(lease.lease_key.as_str()).copied();
            if end.is_none_or(|end| checkpoint > end) {
                beyond.push(TableFinding::CheckpointBeyond {
                    shard_id: lease.lease_key.clone(),
                    checkpoint: checkpoint.clone(),
                    committed_end: end.cloned(),
                });
            }
        }
        staged.sort();
        self.insert_findings(beyond);
        self.leases = LeaseCheck::Checked {
            leases: leases.len(),
            staged,
        };
    }

    /// With `--deep`: no live row's record is also in one of its shard's
    /// error or duplicates objects (`sides`, read by the archive's audit);
    /// each shard where some are is a finding.
    pub(super) fn check_sides(&mut self, sides: &SideRecords) {
        let mut findings = Vec::new();
        let mut shards: Vec<&String> = sides.keys().collect();
        shards.sort();
        for shard_id in shards {
            let Some(live) = self.live.get(shard_id.as_str()) else {
                continue;
            };
            let mut both: Vec<Position> = sides[shard_id]
                .iter()
                .filter(|(sequence_number, sub)| {
                    let sub = sub.and_then(|sub| i64::try_from(sub).ok());
                    live.contains(&(sequence_number.clone(), sub))
                })
                .cloned()
                .collect();
            if both.is_empty() {
                continue;
            }
            both.sort();
            findings.push(TableFinding::AlsoInObjects {
                shard_id: shard_id.clone(),
                records: both.len() as u64,
                first: both.into_iter().take(MAX_NAMED).collect(),
            });
        }
        self.insert_findings(findings);
    }

    /// Adds `findings` after the others and before the empty shards,
    /// which are warnings.
    fn insert_findings(&mut self, findings: Vec<TableFinding>) {
        let at = self
            .findings
            .iter()
            .position(|finding| matches!(finding, TableFinding::Empty { .. }))
            .unwrap_or(self.findings.len());
        self.findings.splice(at..at, findings);
    }

    /// Records the gap check's outcome: each shard with missing records
    /// is a [`TableFinding::Missing`].
    pub(super) fn record_gaps(&mut self, gaps: TableGaps) {
        if let TableGaps::Checked { shards, .. } = &gaps {
            let missing = shards
                .iter()
                .filter(|shard| shard.missing > 0)
                .map(|shard| TableFinding::Missing {
                    shard_id: shard.shard_id.clone(),
                    committed_end: shard.committed_end.clone(),
                    records: shard.missing,
                    first: shard.first_missing.clone(),
                })
                .collect();
            self.insert_findings(missing);
        }
        self.gaps = gaps;
    }

    /// No record twice, every live record within its shard's committed
    /// end, no checkpoint after it, and (with `--stream`) every record of
    /// the stream up to it in the table (empty shards and orphans are
    /// harmless).
    pub(super) fn is_exact(&self) -> bool {
        !self.findings.iter().any(TableFinding::breaks_exactness)
            && window_problem_lines(&self.window).is_empty()
    }

    /// The summary: the snapshot and commit, one line per shard, the lease
    /// rows compared, one line per finding (at most [`MAX_LISTED`]), the
    /// gap check (the records checked per shard), the orphans, and `exact`
    /// (with `(checkpoints not checked)` when they were not, `(gap check
    /// skipped)` when Kinesis did not answer) or `NOT exact` last.
    pub(super) fn render(&self) -> String {
        let mut out = String::new();
        let snapshot = self
            .snapshot_id
            .map_or_else(|| "no snapshot".to_owned(), |id| format!("snapshot {id}"));
        let _ = writeln!(
            out,
            "table {}: {snapshot}, commit {}, {} live data files",
            self.table, self.commit, self.files
        );
        for shard in &self.shards {
            let rows = match (&shard.min, &shard.max) {
                (Some(min), Some(max)) => format!("{} rows, {min}..{max}", shard.rows),
                _ => "0 rows".to_owned(),
            };
            let end = shard
                .committed_end
                .as_ref()
                .map_or_else(|| "none".to_owned(), ToString::to_string);
            let _ = writeln!(
                out,
                "  shard {}: {rows}, committed end {end}",
                shard.shard_id
            );
        }
        match &self.leases {
            LeaseCheck::NotRequested => {
                let _ = writeln!(
                    out,
                    "checkpoints: not checked (--stream names the lease table)"
                );
            }
            LeaseCheck::NotRead(reason) => {
                let _ = writeln!(
                    out,
                    "checkpoints: not checked (lease table not read: {reason})"
                );
            }
            LeaseCheck::Checked { leases, staged } => {
                let _ = writeln!(
                    out,
                    "checkpoints: {leases} lease rows compared with the committed ends"
                );
                for (shard_id, batches) in staged {
                    let _ = writeln!(
                        out,
                        "  shard {shard_id}: {batches} staged batches, written and not yet \
                         committed (the next commit takes them)"
                    );
                }
            }
        }
        for finding in self.findings.iter().take(MAX_LISTED) {
            let _ = writeln!(out, "  {}", finding_line(finding));
        }
        if self.findings.len() > MAX_LISTED {
            let _ = writeln!(
                out,
                "  ... {} more findings",
                self.findings.len() - MAX_LISTED
            );
        }
        self.render_gaps(&mut out);
        if self.window != WindowOutcome::NotRequested {
            let _ = writeln!(out, "once a window: {}", window_text(&self.window));
            let problems = window_problem_lines(&self.window);
            for line in problems.iter().take(MAX_LISTED) {
                let _ = writeln!(out, "  {line}");
            }
            if problems.len() > MAX_LISTED {
                let _ = writeln!(out, "  ... {} more", problems.len() - MAX_LISTED);
            }
        }
        let _ = writeln!(
            out,
            "orphans: {} data files no snapshot names (written, then not committed: harmless)",
            self.orphans.count
        );
        for path in &self.orphans.paths {
            let _ = writeln!(out, "  {path}");
        }
        if self.orphans.count > self.orphans.paths.len() {
            let _ = writeln!(
                out,
                "  ... {} more",
                self.orphans.count - self.orphans.paths.len()
            );
        }
        let mut caveats = Vec::new();
        if !matches!(self.leases, LeaseCheck::Checked { .. }) {
            caveats.push("checkpoints not checked");
        }
        if matches!(self.gaps, TableGaps::Skipped(_)) {
            caveats.push("gap check skipped");
        }
        if matches!(self.window, WindowOutcome::NotChecked(_)) {
            caveats.push("events once per window not checked");
        }
        let verdict = match (self.is_exact(), caveats.is_empty()) {
            (false, _) => "NOT exact".to_owned(),
            (true, true) => "exact".to_owned(),
            (true, false) => format!("exact ({})", caveats.join(", ")),
        };
        let _ = writeln!(out, "{verdict}");
        out
    }

    /// The gap check's lines: how far each shard was checked, and how many
    /// records.
    fn render_gaps(&self, out: &mut String) {
        match &self.gaps {
            TableGaps::NotRequested => {
                let _ = writeln!(out, "gaps: not checked (--stream reads the stream)");
            }
            TableGaps::Skipped(reason) => {
                let _ = writeln!(out, "gaps: skipped: {reason}");
            }
            TableGaps::Checked {
                shards,
                notes,
                since,
            } => {
                let from = match since {
                    Some(since) => format!("from {}", since_text(*since)),
                    None => "from its oldest retained record".to_owned(),
                };
                let _ = writeln!(
                    out,
                    "gaps: each shard read {from} up to its committed end; every user record \
                     must be a live row or in an error or duplicates object"
                );
                for note in notes {
                    let _ = writeln!(out, "  {note}");
                }
                for shard in shards {
                    let mut line = format!(
                        "  shard {}: {} records checked ({} user records, {} in error or \
                         duplicates objects) up to {}, {} missing",
                        shard.shard_id,
                        shard.checked,
                        shard.user_records,
                        shard.in_sides,
                        shard.committed_end,
                        shard.missing
                    );
                    if shard.not_expected > 0 {
                        let _ = write!(
                            line,
                            "; {} before its lowest kept record not checked",
                            shard.not_expected
                        );
                    }
                    let _ = writeln!(out, "{line}");
                    for note in &shard.notes {
                        let _ = writeln!(out, "    {note}");
                    }
                }
            }
        }
    }
}

/// The records `first` of a finding's `records`, named, and how many more.
fn positions_text(first: &[Position], records: u64) -> String {
    let mut named = first
        .iter()
        .map(|(sequence_number, sub)| match sub {
            Some(sub) => format!("{sequence_number} (sub {sub})"),
            None => sequence_number.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ");
    if records > first.len() as u64 {
        let _ = write!(named, " and {} more", records - first.len() as u64);
    }
    named
}

/// Most files a finding's line names.
const MAX_FILES_IN_LINE: usize = 5;

/// `files` joined with commas, at most [`MAX_FILES_IN_LINE`] of them.
fn files_text(files: &[String]) -> String {
    let mut text = files
        .iter()
        .take(MAX_FILES_IN_LINE)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if files.len() > MAX_FILES_IN_LINE {
        let _ = write!(text, " and {} more", files.len() - MAX_FILES_IN_LINE);
    }
    text
}

fn finding_line(finding: &TableFinding) -> String {
    match finding {
        TableFinding::Duplicate {
            shard_id,
            sequence_number,
            sub_sequence_number,
            files,
        } => {
            let sub = sub_sequence_number.map_or_else(String::new, |n| format!(" (sub {n})"));
            format!(
                "duplicate in {shard_id}: {sequence_number}{sub} in {} rows, files {}",
                files.len(),
                files_text(files)
            )
        }
        TableFinding::Beyond {
            shard_id,
            committed_end,
            rows,
            highest,
            files,
        } => {
            let end = committed_end.as_ref().map_or_else(
                || "the commit state does not name the shard".to_owned(),
                |end| format!("after the committed end {end}"),
            );
            format!(
                "beyond in {shard_id}: {rows} rows {end}, up to {highest}, files {}",
                files_text(files)
            )
        }
        TableFinding::CheckpointBeyond {
            shard_id,
            checkpoint,
            committed_end,
        } => {
            let end = committed_end.as_ref().map_or_else(
                || "the commit state does not name the shard".to_owned(),
                |end| format!("after the committed end {end}"),
            );
            format!(
                "checkpoint beyond in {shard_id}: checkpoint {checkpoint} {end} (a gap: the \
                 daemon resumes after the checkpoint)"
            )
        }
        TableFinding::Missing {
            shard_id,
            committed_end,
            records,
            first,
        } => {
            format!(
                "missing in {shard_id}: {records} records up to the committed end \
                 {committed_end} in no live row nor error or duplicates object: {}",
                positions_text(first, *records)
            )
        }
        TableFinding::AlsoInObjects {
            shard_id,
            records,
            first,
        } => format!(
            "in two places in {shard_id}: {records} records in a live row and in an error or \
             duplicates object: {}",
            positions_text(first, *records)
        ),
        TableFinding::Empty {
            shard_id,
            committed_end,
        } => format!(
            "empty {shard_id}: committed end {committed_end} but no live row (its records may \
             all be under the error or duplicates prefix)"
        ),
    }
}

/// Audits table `ident` of `catalog`: its current snapshot's live rows
/// against the commit state the table names, and its orphan data files.
///
/// `list_files` lists the files under a prefix (the table's
/// `<location>/data/`): full locations, as the manifests name them
/// (`s3://bucket/key`; the scheme is ignored in the comparison). iceberg's
/// `FileIO` has no listing, so the caller passes one (an S3 listing; the
/// tests an in-memory one).
///
/// # Errors
/// [`TableAuditError`]: the table lacks one of the columns `shard_id`,
/// `sequence_number`, `sub_sequence_number` (`NotAShardsinkTable`); the
/// catalog, a manifest, a data file or the listing cannot be read; a row or
/// the state holds a malformed sequence number.
pub(super) async fn audit_table<L, F, E>(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    list_files: L,
) -> Result<TableAudit, TableAuditError>
where
    L: FnOnce(String) -> F,
    F: Future<Output = Result<Vec<String>, E>>,
    E: Into<Box<dyn StdError + Send + Sync>>,
{
    let name = ident.to_string();
    let iceberg = |source| TableAuditError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    let table = load_table(catalog, ident).await.map_err(iceberg)?;
    audit_loaded(&table, list_files).await
}

/// [`audit_table`] of a loaded table.
async fn audit_loaded<L, F, E>(table: &Table, list_files: L) -> Result<TableAudit, TableAuditError>
where
    L: FnOnce(String) -> F,
    F: Future<Output = Result<Vec<String>, E>>,
    E: Into<Box<dyn StdError + Send + Sync>>,
{
    let name = table.identifier().to_string();
    let iceberg = |source| TableAuditError::Iceberg {
        table: name.clone(),
        source: Box::new(source),
    };
    check_columns(table, &name)?;
    let state = read_state(table).await.map_err(iceberg)?;
    let committed = committed_ends(&state, &name)?;

    let mut rows = LiveRows {
        committed,
        ..LiveRows::default()
    };
    let tasks: Vec<FileScanTask> = if table.metadata().current_snapshot().is_some() {
        table
            .scan()
            .select(COLUMNS.map(|(column, _)| column))
            .build()
            .map_err(iceberg)?
            .plan_files()
            .await
            .map_err(iceberg)?
            .try_collect()
            .await
            .map_err(iceberg)?
    } else {
        Vec::new()
    };
    let files = tasks.len();
    for task in tasks {
        let file = rows.file_index(&task.data_file_path);
        let mut batches = table
            .reader_builder()
            .build()
            .read(futures::stream::iter([Ok(task)]).boxed())
            .map_err(iceberg)?
            .stream();
        while let Some(batch) = batches.try_next().await.map_err(iceberg)? {
            rows.add(&batch, file)
                .map_err(|what| TableAuditError::Malformed {
                    table: name.clone(),
                    what: format!("{}: {what}", rows.files[file]),
                })?;
        }
    }

    let prefix = format!(
        "{}/data/",
        table.metadata().location().trim_end_matches('/')
    );
    let listed = list_files(prefix.clone())
        .await
        .map_err(|source| TableAuditError::List {
            table: name.clone(),
            prefix,
            source: source.into(),
        })?;
    let referenced = referenced_files(table).await.map_err(iceberg)?;
    let orphans = orphans(listed, &referenced);

    let (shards, findings, live) = rows.judge();
    Ok(TableAudit {
        table: name,
        snapshot_id: table.metadata().current_snapshot_id(),
        commit: state.commit,
        shards,
        files,
        findings,
        orphans,
        leases: LeaseCheck::NotRequested,
        gaps: TableGaps::NotRequested,
        window: WindowOutcome::NotRequested,
        live,
    })
}

/// Each of [`COLUMNS`] is in the table's current schema, with its type.
fn check_columns(table: &Table, name: &str) -> Result<(), TableAuditError> {
    let schema = table.metadata().current_schema();
    for (column, expected) in COLUMNS {
        let reason = match schema.field_by_name(column) {
            None => "is missing".to_owned(),
            Some(field) if *field.field_type == Type::Primitive(expected.clone()) => continue,
            Some(field) => format!("is {}, not {expected}", field.field_type),
        };
        return Err(TableAuditError::NotAShardsinkTable {
            table: name.to_owned(),
            column,
            reason,
        });
    }
    Ok(())
}

/// The state's committed ends, parsed.
fn committed_ends(
    state: &CommitState,
    name: &str,
) -> Result<BTreeMap<String, SequenceNumber>, TableAuditError> {
    state
        .shards
        .keys()
        .filter_map(|shard_id| match state.committed_end(shard_id) {
            Ok(end) => end.map(|end| Ok((shard_id.clone(), end))),
            Err(err) => Some(Err(TableAuditError::Malformed {
                table: name.to_owned(),
                what: err.to_string(),
            })),
        })
        .collect()
}

/// The live rows read so far: each record with the files holding it.
#[derive(Debug, Default)]
struct LiveRows {
    /// Each shard's committed end in the state.
    committed: BTreeMap<String, SequenceNumber>,
    /// Data file paths, in reading order (one entry per scan task).
    files: Vec<String>,
    /// Each record, with the index of the first file holding it.
    seen: HashMap<RecordKey, usize>,
    /// Records in more than one row: each row's file index.
    duplicates: BTreeMap<RecordKey, Vec<usize>>,
    /// Per shard: its rows' count and range, and its rows beyond the
    /// committed end.
    shards: BTreeMap<String, ShardTally>,
}

#[derive(Debug, Default)]
struct ShardTally {
    rows: u64,
    min: Option<SequenceNumber>,
    max: Option<SequenceNumber>,
    /// Rows after the committed end (all rows when the state does not
    /// name the shard): how many, the highest, their files' indices.
    beyond: u64,
    beyond_highest: Option<SequenceNumber>,
    beyond_files: BTreeSet<usize>,
}

impl LiveRows {
    fn file_index(&mut self, path: &str) -> usize {
        self.files.push(path.to_owned());
        self.files.len() - 1
    }

    /// Adds a batch of rows of file `file`.
    ///
    /// # Errors
    /// What is malformed: a null shard id or sequence number, a sequence
    /// number that does not parse, a column of an unexpected type.
    fn add(&mut self, batch: &RecordBatch, file: usize) -> Result<(), String> {
        let shard_ids = Strings::column(batch, SHARD_ID)?;
        let sequence_numbers = Strings::column(batch, SEQUENCE_NUMBER)?;
        let subs: &Int64Array = batch
            .column_by_name(SUB_SEQUENCE_NUMBER)
            .and_then(|column| column.as_primitive_opt::<Int64Type>())
            .ok_or_else(|| format!("no 64-bit integer column `{SUB_SEQUENCE_NUMBER}`"))?;
        for row in 0..batch.num_rows() {
            let shard_id = shard_ids
                .value(row)
                .ok_or_else(|| format!("row {row}: a null {SHARD_ID}"))?;
            let text = sequence_numbers
                .value(row)
                .ok_or_else(|| format!("row {row}: a null {SEQUENCE_NUMBER}"))?;
            let sequence_number: SequenceNumber = text
                .parse()
                .map_err(|_| format!("row {row}: sequence number `{text}` does not parse"))?;
            let sub = subs.is_valid(row).then(|| subs.value(row));

            let tally = self.shards.entry(shard_id.to_owned()).or_default();
            tally.rows += 1;
            if tally.min.as_ref().is_none_or(|min| sequence_number < *min) {
                tally.min = Some(sequence_number.clone());
            }
            if tally.max.as_ref().is_none_or(|max| sequence_number > *max) {
                tally.max = Some(sequence_number.clone());
            }
            let end = self.committed.get(shard_id);
            if end.is_none_or(|end| sequence_number > *end) {
                tally.beyond += 1;
                tally.beyond_files.insert(file);
                if tally
                    .beyond_highest
                    .as_ref()
                    .is_none_or(|highest| sequence_number > *highest)
                {
                    tally.beyond_highest = Some(sequence_number.clone());
                }
            }

            let key = (shard_id.to_owned(), sequence_number, sub);
            if let Some(&first) = self.seen.get(&key) {
                self.duplicates
                    .entry(key)
                    .or_insert_with(|| vec![first])
                    .push(file);
            } else {
                self.seen.insert(key, file);
            }
        }
        Ok(())
    }

    /// The per-shard summary, the findings, and each shard's records.
    fn judge(self) -> (Vec<ShardRows>, Vec<TableFinding>, LiveRecords) {
        let mut live = LiveRecords::new();
        for (shard_id, sequence_number, sub) in self.seen.into_keys() {
            live.entry(shard_id)
                .or_default()
                .insert((sequence_number, sub));
        }
        let files = &self.files;
        let mut findings: Vec<TableFinding> = self
            .duplicates
            .into_iter()
            .map(
                |((shard_id, sequence_number, sub_sequence_number), in_files)| {
                    TableFinding::Duplicate {
                        shard_id,
                        sequence_number,
                        sub_sequence_number,
                        files: in_files.iter().map(|&i| files[i].clone()).collect(),
                    }
                },
            )
            .collect();
        let mut empty = Vec::new();
        let shard_ids: BTreeSet<&String> =
            self.shards.keys().chain(self.committed.keys()).collect();
        let mut shards = Vec::with_capacity(shard_ids.len());
        for shard_id in shard_ids {
            let committed_end = self.committed.get(shard_id).cloned();
            let Some(tally) = self.shards.get(shard_id) else {
                if let Some(end) = &committed_end {
                    empty.push(TableFinding::Empty {
                        shard_id: shard_id.clone(),
                        committed_end: end.clone(),
                    });
                }
                shards.push(ShardRows {
                    shard_id: shard_id.clone(),
                    rows: 0,
                    min: None,
                    max: None,
                    committed_end,
                });
                continue;
            };
            if let Some(highest) = &tally.beyond_highest {
                findings.push(TableFinding::Beyond {
                    shard_id: shard_id.clone(),
                    committed_end: committed_end.clone(),
                    rows: tally.beyond,
                    highest: highest.clone(),
                    files: tally
                        .beyond_files
                        .iter()
                        .map(|&i| files[i].clone())
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect(),
                });
            }
            shards.push(ShardRows {
                shard_id: shard_id.clone(),
                rows: tally.rows,
                min: tally.min.clone(),
                max: tally.max.clone(),
                committed_end,
            });
        }
        findings.extend(empty);
        (shards, findings, live)
    }
}

/// A string column of any of arrow's string layouts.
enum Strings<'a> {
    Utf8(&'a arrow_array::StringArray),
    Large(&'a arrow_array::LargeStringArray),
    View(&'a arrow_array::StringViewArray),
}

impl<'a> Strings<'a> {
    fn column(batch: &'a RecordBatch, name: &str) -> Result<Self, String> {
        let column = batch
            .column_by_name(name)
            .ok_or_else(|| format!("no column `{name}`"))?;
        match column.data_type() {
            DataType::Utf8 => Ok(Self::Utf8(column.as_string::<i32>())),
            DataType::LargeUtf8 => Ok(Self::Large(column.as_string::<i64>())),
            DataType::Utf8View => Ok(Self::View(column.as_string_view())),
            other => Err(format!("column `{name}` is {other}, not a string")),
        }
    }

    fn value(&self, row: usize) -> Option<&'a str> {
        match self {
            Self::Utf8(array) => array.is_valid(row).then(|| array.value(row)),
            Self::Large(array) => array.is_valid(row).then(|| array.value(row)),
            Self::View(array) => array.is_valid(row).then(|| array.value(row)),
        }
    }
}

/// Every file that a manifest of any snapshot of the table names (data and
/// delete files, whatever their status), without its scheme.
async fn referenced_files(table: &Table) -> iceberg::Result<HashSet<String>> {
    // Manifests are shared between snapshots: each is read once.
    let mut manifests = HashSet::new();
    let mut referenced = HashSet::new();
    for snapshot in table.metadata().snapshots() {
        let list = table.manifest_list_reader(snapshot).load().await?;
        for manifest in list.entries() {
            if !manifests.insert(manifest.manifest_path.clone()) {
                continue;
            }
            let manifest = manifest.load_manifest(table.file_io()).await?;
            // A deleted entry's file is still named by the snapshots before
            // the deletion.
            for entry in manifest.entries() {
                referenced.insert(without_scheme(entry.file_path()).to_owned());
            }
        }
    }
    Ok(referenced)
}

/// The listed files that are not referenced, counted, the first
/// [`MAX_LISTED`] (sorted) named.
fn orphans(mut listed: Vec<String>, referenced: &HashSet<String>) -> Orphans {
    listed.retain(|path| !referenced.contains(without_scheme(path)));
    listed.sort();
    listed.dedup();
    let count = listed.len();
    listed.truncate(MAX_LISTED);
    Orphans {
        count,
        paths: listed,
    }
}

/// A location without its scheme (`s3://b/k` and `s3a://b/k` are one file).
fn without_scheme(location: &str) -> &str {
    location
        .split_once("://")
        .map_or(location, |(_, rest)| rest)
}

#[cfg(test)]
mod tests;
