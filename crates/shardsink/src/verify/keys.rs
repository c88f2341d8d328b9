//! Check 1, keys: every key under the prefix, the error prefix and the
//! duplicates prefix (ListObjectsV2, all pages), parsed into an
//! [`ArchivedKey`] (a shardsink object: time bucket, shard, sequence range,
//! body kind) or a [`ForeignKey`] (anything else: a warning), in the
//! archive's recorded key layout; decisions objects (`{prefix}/_events/`)
//! are parsed under the decisions layout.

use anyhow::Context as _;
use sequence_range::SequenceRange;

use super::args::Plan;
use super::gap_markers::is_marker_key;
use super::progress::Phase;
use super::{s3_retry, s3_stopped};
use crate::aws::ObjectStore;
use crate::aws::retry::{Retry, Stopped};
use crate::config::{KeyStyle, TimeBucket};
use crate::output::bucket::Bucket;
use crate::output::decisions::decisions_layout;
use crate::output::format::BodyKind;
use crate::output::key::KeyLayout;
use crate::output::marker::{self, marker_key};
use crate::output::read_back::decisions::parse_decisions_name;
use crate::output::read_back::listing::Pages;
use crate::output::read_back::metadata::DECISIONS_COMPRESSION;

/// A key that is a shardsink object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ArchivedKey {
    pub(super) key: String,
    pub(super) bucket: Bucket,
    pub(super) shard_id: String,
    pub(super) range: SequenceRange,
    pub(super) body: BodyKind,
}

/// A key under the prefix that is not one shardsink writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ForeignKey {
    pub(super) key: String,
    pub(super) reason: String,
}

/// Parses a key with the daemon's own key layout
/// ([`KeyLayout::parse_key`]).
///
/// # Errors
/// Why the key is foreign.
fn parse_archived_key(layout: &KeyLayout, key: &str) -> Result<ArchivedKey, String> {
    let parsed = layout.parse_key(key)?;
    Ok(ArchivedKey {
        key: key.to_owned(),
        bucket: parsed.bucket,
        shard_id: parsed.shard_id,
        range: parsed.range,
        body: parsed.body,
    })
}

/// Parses a decisions object's key
/// (`{prefix}/_events/{time path}/{shardId}/{name}.events.zst`) with the
/// decisions layout; its body is zstd-compressed lines.
///
/// # Errors
/// Why the key is foreign.
fn parse_decisions_key(layout: &KeyLayout, key: &str) -> Result<ArchivedKey, String> {
    let (bucket, shard_id, range) = layout.parse_key_named(key, parse_decisions_name)?;
    Ok(ArchivedKey {
        key: key.to_owned(),
        bucket,
        shard_id,
        range,
        body: BodyKind::lines(DECISIONS_COMPRESSION.codec()),
    })
}

/// The archive's keys, split by what they are.
#[derive(Debug, Default)]
pub(super) struct Listing {
    /// Main objects, under the prefix.
    pub(super) objects: Vec<ArchivedKey>,
    /// Error objects, under the error prefix.
    pub(super) error_objects: Vec<ArchivedKey>,
    /// Duplicates objects, under the duplicates prefix.
    pub(super) duplicate_objects: Vec<ArchivedKey>,
    /// Decisions objects, under `{prefix}/_events/`.
    pub(super) decisions: Vec<ArchivedKey>,
    /// Retention gap markers (`{prefix}/_retention-gaps/…`).
    pub(super) gap_markers: Vec<String>,
    pub(super) foreign: Vec<ForeignKey>,
}

/// Lists the prefix, and the error and duplicates prefixes beside it (under
/// an empty prefix, the one listing holds them all), and splits the keys.
pub(super) async fn list_archive(
    store: &ObjectStore,
    layout: &KeyLayout,
    plan: &Plan,
    tty: bool,
) -> anyhow::Result<Listing> {
    let keys = list_keys(store, &plan.list_prefix, tty).await?;
    let error_layout = layout.with_prefix(plan.error_prefix.clone());
    let duplicates_layout = layout.with_prefix(plan.duplicates_prefix.clone());
    let decisions_layout = decisions_layout(layout);
    let (error_prefix, duplicates_prefix, decisions_prefix) = (
        error_layout.list_prefix(),
        duplicates_layout.list_prefix(),
        decisions_layout.list_prefix(),
    );
    let (mut error_keys, mut duplicate_keys, mut decision_keys, mut main_keys) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for key in keys {
        if key.starts_with(&error_prefix) {
            error_keys.push(key);
        } else if key.starts_with(&duplicates_prefix) {
            duplicate_keys.push(key);
        } else if key.starts_with(&decisions_prefix) {
            decision_keys.push(key);
        } else {
            main_keys.push(key);
        }
    }
    // Under an empty prefix the other prefixes were listed with the rest.
    if !plan.list_prefix.is_empty() {
        error_keys = list_keys(store, &error_prefix, tty).await?;
        duplicate_keys = list_keys(store, &duplicates_prefix, tty).await?;
    }
    let Classified {
        objects,
        gap_markers,
        mut foreign,
    } = classify(layout, main_keys);
    let errors = classify(&error_layout, error_keys);
    let duplicates = classify(&duplicates_layout, duplicate_keys);
    foreign.extend(errors.foreign);
    foreign.extend(duplicates.foreign);
    let mut decisions = Vec::with_capacity(decision_keys.len());
    for key in decision_keys {
        match parse_decisions_key(&decisions_layout, &key) {
            Ok(object) => decisions.push(object),
            Err(reason) => foreign.push(ForeignKey { key, reason }),
        }
    }
    Ok(Listing {
        objects,
        error_objects: errors.objects,
        duplicate_objects: duplicates.objects,
        decisions,
        gap_markers,
        foreign,
    })
}

/// A listing under one prefix, split.
#[derive(Debug, Default)]
struct Classified {
    objects: Vec<ArchivedKey>,
    /// Retention gap markers (`{prefix}/_retention-gaps/…`).
    gap_markers: Vec<String>,
    foreign: Vec<ForeignKey>,
}

/// Splits a listing under `layout`'s prefix into objects, retention gap
/// markers and foreign keys (the key layout record is none of them).
fn classify(layout: &KeyLayout, keys: Vec<String>) -> Classified {
    let mut classified = Classified {
        objects: Vec::with_capacity(keys.len()),
        ..Classified::default()
    };
    let list_prefix = layout.list_prefix();
    let layout_record = marker_key(layout);
    for key in keys {
        if key == layout_record {
            continue;
        }
        if is_marker_key(&list_prefix, &key) {
            classified.gap_markers.push(key);
            continue;
        }
        match parse_archived_key(layout, &key) {
            Ok(object) => classified.objects.push(object),
            Err(reason) => classified.foreign.push(ForeignKey { key, reason }),
        }
    }
    classified
}

/// The archive's key layout under `prefix`: recorded, inferred from its
/// keys, or — when nothing is written yet — the plain, per-minute layout.
pub(super) async fn read_layout(store: &ObjectStore, prefix: &str) -> anyhow::Result<KeyLayout> {
    let recorded = Retry::new("key layout")
        .give_up_after(super::MAX_FAILURES + 1)
        .run(|| marker::read_layout(store, prefix))
        .await
        .map_err(|stopped| match stopped {
            Stopped::Final(err) | Stopped::GaveUp(err) => anyhow::Error::new(err),
            Stopped::Cancelled => anyhow::anyhow!("cancelled"),
        })
        .with_context(|| {
            format!(
                "failed to read the key layout of s3://{}/{prefix}",
                store.bucket()
            )
        })?;
    Ok(recorded.map_or_else(
        || KeyLayout::new(prefix, KeyStyle::Plain, TimeBucket::Minute),
        |recorded| recorded.under(prefix),
    ))
}

/// Every key under `list_prefix` (ListObjectsV2, all pages).
pub(super) async fn list_keys(
    store: &ObjectStore,
    list_prefix: &str,
    tty: bool,
) -> anyhow::Result<Vec<String>> {
    let phase = Phase::start(tty, None, "listing keys");
    let mut keys = Vec::new();
    let mut pages = Pages::new(list_prefix);
    while !pages.is_done() {
        let page = s3_retry("ListObjectsV2").run(|| pages.fetch(store)).await;
        match page {
            Ok(page) => {
                keys.extend(pages.advance(page));
                phase.update(keys.len() as u64, || format!("listed {} keys", keys.len()));
            }
            Err(stopped) => {
                phase.finish(None);
                return Err(s3_stopped(stopped)).with_context(|| {
                    format!("failed to list s3://{}/{list_prefix}", store.bucket())
                });
            }
        }
    }
    phase.finish(Some(format!("listed {} objects", keys.len())));
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::test_support::{MINUTE_MILLIS, SHARD, object};

    #[test]
    fn parses_the_keys_shardsink_writes() {
        let written = object(9, 10);
        assert_eq!(
            written.key,
            "p/2026/11/21/05/27/shardId-000000000001/9980-0019-00210.jsonl"
        );
        assert_eq!(
            parse_archived_key(&KeyLayout::plain("p"), &written.key),
            Ok(written)
        );
        // An empty prefix lists from the bucket's root.
        let bare = "2026/11/21/05/27/shardId-000000000001/9980-0019-00210.jsonl.zst";
        let parsed = parse_archived_key(&KeyLayout::plain(""), bare).unwrap();
        assert_eq!(
            parsed.body,
            BodyKind::lines(crate::config::CompressionCodec::Zstd)
        );
        assert_eq!(parsed.bucket, Bucket::minute(MINUTE_MILLIS));
    }

    #[test]
    fn decisions_keys_parse_under_the_decisions_layout() {
        let main = object(9, 10);
        let layout = decisions_layout(&KeyLayout::plain("p"));
        let key = crate::output::decisions::decisions_key(&layout, main.bucket, SHARD, &main.range);
        assert!(key.starts_with("p/_events/2026/11/21/05/27/"), "{key}");
        let parsed = parse_decisions_key(&layout, &key).unwrap();
        assert_eq!(
            (parsed.bucket, parsed.shard_id.as_str(), &parsed.range),
            (main.bucket, SHARD, &main.range)
        );
        // A batch's other names, or a main key, are not decisions keys.
        for other in [key.replace(".events.zst", ".jsonl"), main.key] {
            assert!(parse_decisions_key(&layout, &other).is_err(), "{other}");
        }
    }

    #[test]
    fn other_keys_are_foreign() {
        let name = "9980-0019-00210.jsonl";
        for key in [
            format!("p/2026/11/21/05/27/{SHARD}/notes.txt"),
            format!("p/2026/11/21/05/27/{SHARD}/sub/{name}"),
            format!("p/2026/11/21/05/{SHARD}/{name}"),
            format!("p/2026/13/21/05/27/{SHARD}/{name}"),
            format!("p/2026/11/21/24/27/{SHARD}/{name}"),
            format!("p/2026/11/21/5/27/{SHARD}/{name}"),
            format!("p/2026/11/21/05/27/shard id/{name}"),
            format!("p/2026/11/21/05/27//{name}"),
            format!("p/2026/11/21/05/27/{SHARD}/99789-0019-00210.jsonl"),
            format!("p/2026/11/21/05/27/{SHARD}/9-1-99999999.jsonl"),
            format!("q/2026/11/21/05/27/{SHARD}/{name}"),
        ] {
            assert!(
                parse_archived_key(&KeyLayout::plain("p"), &key).is_err(),
                "{key} must be foreign"
            );
        }
        let marker = "p/_retention-gaps/shardId-000000000001/4959.json".to_owned();
        let classified = classify(
            &KeyLayout::plain("p"),
            vec![
                object(1, 2).key,
                "p/README".to_owned(),
                marker.clone(),
                "p/_shardsink.json".to_owned(),
            ],
        );
        assert_eq!(classified.objects.len(), 1);
        assert_eq!(
            classified.foreign.len(),
            1,
            "the layout record is not foreign"
        );
        assert_eq!(classified.foreign[0].key, "p/README");
        assert_eq!(classified.gap_markers, vec![marker]);
    }
}
