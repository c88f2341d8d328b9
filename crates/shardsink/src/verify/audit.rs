//! The audit: the checks in order, from a [`Plan`] to an [`Audit`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sequence_range::SequenceRange;

use super::args::Plan;
use super::body::{DeepSummary, EndsInSides, Found, Role, read_objects};
use super::gap_markers::read_markers;
use super::keys::{ArchivedKey, Listing, list_archive, read_layout};
use super::overlaps::overlaps;
use super::placement::check_batches;
use super::report::{
    Audit, DecisionsObject, EventFindings, TableEventInputs, Uncommitted, WindowOutcome,
};
use super::stream::{GapOutcome, check_gaps, read_checkpoints};
use super::table_gaps::SideRecords;
use super::window::{Scope, check_window, decided_batches};
use crate::aws::{AwsClients, Kinesis, ObjectStore};
use crate::events::id::settings_description;
use crate::events::rule::CopyRef;

/// The checks, in order; progress on stderr (a bar when `tty`).
pub(super) async fn audit(plan: &Plan, clients: &AwsClients, tty: bool) -> anyhow::Result<Audit> {
    let store = ObjectStore::new(clients.s3.clone(), &plan.bucket);

    // With an Iceberg table the kept records are its rows, not objects
    // under the prefix: the table audit (`table_io.rs`) compares them with
    // the checkpoints and the stream, and the gap check of the objects is
    // left out; it needs the records of the error and duplicates objects.
    let iceberg = plan.iceberg.is_some();

    // Checkpoints first, then the listing (see docs/VERIFY.md, "What it checks").
    let checkpoints = match (&plan.stream, &plan.lease_table) {
        (Some(_), Some(table)) if !iceberg => Some(read_checkpoints(clients, table).await),
        _ => None,
    };

    let layout = read_layout(&store, &plan.prefix).await?;
    let Listing {
        objects,
        error_objects,
        duplicate_objects,
        decisions,
        gap_markers,
        foreign,
    } = list_archive(&store, &layout, plan, tty).await?;
    let committed: HashSet<(&str, &SequenceRange)> = objects
        .iter()
        .map(|object| (object.shard_id.as_str(), &object.range))
        .collect();
    // A table's batch has no main object: its kept records are rows.
    let sides = if iceberg {
        Vec::new()
    } else {
        vec![
            (Role::Errors, &error_objects),
            (Role::Duplicates, &duplicate_objects),
            (Role::Decisions, &decisions),
        ]
    };
    let uncommitted: Vec<Uncommitted> = sides
        .into_iter()
        .flat_map(|(role, side)| {
            side.iter()
                .filter(|object| !committed.contains(&(object.shard_id.as_str(), &object.range)))
                .map(move |object| Uncommitted {
                    role,
                    key: object.key.clone(),
                })
        })
        .collect();
    let overlaps = overlaps(&objects);
    let retention_gaps = read_markers(&store, gap_markers).await;

    let read = if plan.deep {
        Some(
            read_deep(
                &store,
                &objects,
                &error_objects,
                &duplicate_objects,
                &decisions,
                tty,
            )
            .await,
        )
    } else {
        None
    };

    // With --event-id and --deep: the batches decided with the settings,
    // whose records the gap check keys.
    let (decided, other_settings) = match (&read, &plan.events) {
        (Some(read), Some(events)) => {
            let description =
                settings_description(&events.settings.source, events.settings.fingerprint);
            let (decided, other) = decided_batches(
                decisions
                    .iter()
                    .zip(&read.decisions)
                    .map(|(object, found)| (object, found.format.as_deref())),
                |object| committed.contains(&(object.shard_id.as_str(), &object.range)),
                &description,
            );
            (Some(decided), other)
        }
        _ => (None, Vec::new()),
    };

    let (gaps, streamed) = match &plan.stream {
        None => (GapOutcome::NotRequested, None),
        Some(_) if iceberg => (GapOutcome::InTable, None),
        Some(stream) => {
            let kinesis = Kinesis::new(clients.kinesis.clone(), stream.clone());
            let events = plan
                .events
                .as_ref()
                .zip(decided)
                .map(|(events, decided)| (&events.settings, decided));
            let keyed = events.is_some();
            let (gaps, streamed) =
                check_gaps(&kinesis, &objects, checkpoints, plan, events, tty).await;
            (gaps, keyed.then_some(streamed))
        }
    };

    let events = read.as_ref().map(|read| {
        let placement = check_batches(
            [
                (Role::Main, &objects, &read.main),
                (Role::Errors, &error_objects, &read.errors),
                (Role::Duplicates, &duplicate_objects, &read.duplicates),
                (Role::Decisions, &decisions, &read.decisions),
            ]
            .into_iter()
            .flat_map(|(role, keys, found)| {
                keys.iter()
                    .zip(found)
                    .map(move |(key, found)| (role, key, found))
            }),
        );
        let window = match (&plan.events, &plan.stream, &gaps, streamed.as_ref()) {
            (None, ..) => WindowOutcome::NotRequested,
            (Some(_), None, ..) => WindowOutcome::NotChecked("--stream reads the records"),
            (Some(_), Some(_), ..) if iceberg => WindowOutcome::InTable,
            (Some(_), Some(_), GapOutcome::Skipped(_), _) => {
                WindowOutcome::NotChecked("the stream could not be read")
            }
            (Some(events), Some(_), _, Some(streamed)) => {
                let scope = if events.stream_scope {
                    Scope::Stream
                } else {
                    Scope::lineage(&streamed.shards)
                };
                let duplicates = duplicates_named(&duplicate_objects, &read.duplicates);
                let result =
                    check_window(&streamed.copies, &duplicates, &events.settings.rule, &scope);
                WindowOutcome::Checked {
                    result,
                    scope: scope.describe(),
                    window_millis: events.settings.rule.window_millis,
                    other_settings: other_settings.clone(),
                }
            }
            (Some(_), Some(_), _, None) => WindowOutcome::NotChecked("the stream was not read"),
        };
        EventFindings { placement, window }
    });

    // The records kept out of the table on purpose, for its gap check.
    let sides: SideRecords = match &read {
        Some(read) if iceberg => error_objects
            .iter()
            .zip(&read.errors)
            .chain(duplicate_objects.iter().zip(&read.duplicates))
            .fold(SideRecords::new(), |mut sides, (object, found)| {
                sides
                    .entry(object.shard_id.clone())
                    .or_default()
                    .extend(found.positions.iter().cloned());
                sides
            }),
        _ => SideRecords::new(),
    };

    let table_events = match &read {
        Some(read) if iceberg && plan.events.is_some() => {
            Some(table_event_inputs(&decisions, &duplicate_objects, read))
        }
        _ => None,
    };

    Ok(Audit {
        target: plan.target(),
        objects: objects.len(),
        error_objects: error_objects.len(),
        duplicate_objects: duplicate_objects.len(),
        decisions_objects: decisions.len(),
        uncommitted,
        shards_in_archive: objects
            .iter()
            .map(|o| o.shard_id.as_str())
            .collect::<HashSet<_>>()
            .len(),
        foreign,
        overlaps,
        deep: read.map(|read| read.summary),
        events_requested: plan.events.is_some(),
        events,
        gaps,
        retention_gaps,
        sides,
        table_events,
    })
}

/// What the table's window check needs of the objects `read`: every
/// decisions object (committed by the table's ends rather than by main
/// objects, which a table's batches do not have) and the duplicates.
fn table_event_inputs(
    decisions: &[ArchivedKey],
    duplicate_objects: &[ArchivedKey],
    read: &DeepRead,
) -> TableEventInputs {
    let with_duplicates: HashSet<(&str, &SequenceRange)> = duplicate_objects
        .iter()
        .map(|object| (object.shard_id.as_str(), &object.range))
        .collect();
    TableEventInputs {
        decisions: decisions
            .iter()
            .zip(&read.decisions)
            .map(|(object, found)| DecisionsObject {
                key: object.clone(),
                format: found.format.clone(),
                duplicates_listed: found.decided_duplicates == 0
                    || with_duplicates.contains(&(object.shard_id.as_str(), &object.range)),
            })
            .collect(),
        duplicates: duplicates_named(duplicate_objects, &read.duplicates),
    }
}

/// What `--deep` read: the summary, and what each object holds, in the
/// order of the listing.
struct DeepRead {
    summary: DeepSummary,
    main: Vec<Found>,
    errors: Vec<Found>,
    duplicates: Vec<Found>,
    decisions: Vec<Found>,
}

/// `--deep`: error and duplicates objects first (a main object's end
/// records may be in them), then main objects, then decisions objects.
async fn read_deep(
    store: &ObjectStore,
    objects: &[ArchivedKey],
    error_objects: &[ArchivedKey],
    duplicate_objects: &[ArchivedKey],
    decisions: &[ArchivedKey],
    tty: bool,
) -> DeepRead {
    let none = HashMap::new();
    let (errors_read, errors) = read_objects(store, error_objects, Role::Errors, &none, tty).await;
    let (duplicates_read, duplicates) =
        read_objects(store, duplicate_objects, Role::Duplicates, &none, tty).await;
    let mut in_sides: EndsInSides<'_> = HashMap::new();
    for (side, found) in error_objects
        .iter()
        .zip(&errors)
        .chain(duplicate_objects.iter().zip(&duplicates))
    {
        let held = in_sides
            .entry((side.shard_id.as_str(), &side.range))
            .or_default();
        *held = *held | found.ends;
    }
    let (mut summary, main) = read_objects(store, objects, Role::Main, &in_sides, tty).await;
    let (decisions_read, decided) =
        read_objects(store, decisions, Role::Decisions, &none, tty).await;
    summary.error_records = errors_read.lines;
    summary.duplicate_records = duplicates_read.lines;
    for side in [errors_read, duplicates_read, decisions_read] {
        summary.unreadable.extend(side.unreadable);
    }
    DeepRead {
        summary,
        main,
        errors,
        duplicates,
        decisions: decided,
    }
}

/// The duplicates objects' records and the accepted copies they name.
fn duplicates_named(objects: &[ArchivedKey], found: &[Found]) -> HashMap<CopyRef, CopyRef> {
    objects
        .iter()
        .zip(found)
        .flat_map(|(object, found)| {
            let shard_id: Arc<str> = Arc::from(object.shard_id.as_str());
            found
                .duplicates
                .iter()
                .map(move |((sequence_number, sub), of)| {
                    (
                        CopyRef {
                            shard_id: shard_id.clone(),
                            sequence_number: sequence_number.clone(),
                            sub_sequence_number: *sub,
                        },
                        of.clone(),
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests;
