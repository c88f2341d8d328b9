//! Check 1, keys: every key under the prefix (ListObjectsV2, all pages),
//! parsed into an [`ArchivedKey`] (a shardsink object: time bucket, shard,
//! sequence range, body kind) or a [`ForeignKey`] (anything else: a
//! warning), in the archive's recorded key layout.

use anyhow::Context as _;
use sequence_range::SequenceRange;

use super::gap_markers::is_marker_key;
use super::progress::Phase;
use super::{s3_retry, s3_stopped};
use crate::aws::ObjectStore;
use crate::aws::retry::{Retry, Stopped};
use crate::config::{KeyStyle, TimeBucket};
use crate::output::bucket::Bucket;
use crate::output::format::BodyKind;
use crate::output::key::KeyLayout;
use crate::output::marker::{self, marker_key};

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

/// A listing, split.
#[derive(Debug, Default)]
pub(super) struct Classified {
    pub(super) objects: Vec<ArchivedKey>,
    /// Retention gap markers (`{prefix}/_retention-gaps/…`).
    pub(super) gap_markers: Vec<String>,
    pub(super) foreign: Vec<ForeignKey>,
}

/// Splits a listing under `layout`'s prefix into objects, retention gap
/// markers and foreign keys (the key layout record is none of them).
pub(super) fn classify(layout: &KeyLayout, keys: Vec<String>) -> Classified {
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
    let mut token = None;
    loop {
        let page = s3_retry("ListObjectsV2")
            .run(|| store.list_page(list_prefix, token.clone()))
            .await;
        match page {
            Ok(page) => {
                keys.extend(page.keys);
                phase.update(keys.len() as u64, || format!("listed {} keys", keys.len()));
                match page.next_continuation_token {
                    Some(next) => token = Some(next),
                    None => break,
                }
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
