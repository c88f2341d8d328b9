//! The archive's key layout, recorded under its prefix:
//! `{prefix}/_shardsink.json`, e.g. `{"keyLayout":"hive","timeBucket":"hour"}`.
//!
//! ResumeSkip finds what is already in S3 by listing one shard's prefix of one
//! time bucket, in the layout of the settings. An archive written in another
//! key layout or time bucket has its objects under paths that listing never
//! reads, so its records would be written again. The first start records
//! the layout; every later start (and `verify`) reads it, and the daemon
//! refuses to start with another one.
//!
//! An archive written before the record existed holds keys of the plain,
//! per-minute layout (then the only one): when there is no record, the
//! layout is inferred from the keys already under the prefix.

use serde::{Deserialize, Serialize};

use crate::aws::retry::{Classify, Failure};
use crate::aws::{ObjectStore, PutOutcome, S3Error};
use crate::output::bucket::TimeBucket;
use crate::output::key::KeyLayout;
use crate::output::key::KeyStyle;

/// The name of the record under the prefix.
pub const MARKER_NAME: &str = "_shardsink.json";

/// A recorded key layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedLayout {
    /// `--key-layout`.
    pub key_layout: KeyStyle,
    /// `--time-bucket`.
    pub time_bucket: TimeBucket,
}

impl RecordedLayout {
    /// The layout of `layout`.
    pub fn of(layout: &KeyLayout) -> Self {
        Self {
            key_layout: layout.style(),
            time_bucket: layout.time_bucket(),
        }
    }

    /// The key layout under `prefix`.
    pub fn under(self, prefix: impl Into<String>) -> KeyLayout {
        KeyLayout::new(prefix, self.key_layout, self.time_bucket)
    }

    /// `--key-layout hive --time-bucket hour`, for messages.
    pub fn flags(self) -> String {
        format!(
            "--key-layout {} --time-bucket {}",
            self.key_layout.as_str(),
            self.time_bucket.as_str()
        )
    }
}

/// How a recorded layout compares with the settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutCheck {
    /// The same (or now recorded).
    Matches,
    /// The prefix holds an archive of another layout.
    Differs(RecordedLayout),
}

/// Reading or writing the record failed.
#[derive(Debug, thiserror::Error)]
pub enum MarkerError {
    /// The S3 call failed.
    #[error(transparent)]
    S3(#[from] S3Error),
    /// The record is not JSON of a known layout (it was changed by hand).
    #[error("s3://{bucket}/{key} is not a key layout record; delete it or restore it")]
    Unreadable {
        /// The bucket.
        bucket: String,
        /// The record's key.
        key: String,
        /// Why it does not parse.
        #[source]
        source: serde_json::Error,
    },
}

impl Classify for MarkerError {
    fn classify(&self) -> Failure {
        match self {
            Self::S3(err) => err.classify(),
            Self::Unreadable { .. } => Failure::Final,
        }
    }
}

/// The key of the record under `layout`'s prefix.
pub fn marker_key(layout: &KeyLayout) -> String {
    format!("{}{MARKER_NAME}", layout.list_prefix())
}

/// The layout of the archive under `prefix`: the record, else the layout of
/// the first keys that parse under one of the four layouts, else `None`
/// (nothing written yet).
///
/// # Errors
/// [`MarkerError`]: GetObject or ListObjectsV2 failed, or the record does
/// not parse.
pub async fn read_layout(
    store: &ObjectStore,
    prefix: &str,
) -> Result<Option<RecordedLayout>, MarkerError> {
    let probe = KeyLayout::new(prefix, KeyStyle::Plain, TimeBucket::Minute);
    let key = marker_key(&probe);
    if let Some(body) = store.get_if_exists(&key).await? {
        return serde_json::from_slice(&body)
            .map(Some)
            .map_err(|source| MarkerError::Unreadable {
                bucket: store.bucket().to_owned(),
                key,
                source,
            });
    }
    let page = store.list_page(&probe.list_prefix(), None).await?;
    Ok(infer(prefix, &page.keys))
}

/// The layout the first parsing key was written in.
fn infer(prefix: &str, keys: &[String]) -> Option<RecordedLayout> {
    let candidates = [KeyStyle::Plain, KeyStyle::Hive]
        .into_iter()
        .flat_map(|style| {
            [TimeBucket::Minute, TimeBucket::Hour].map(|bucket| RecordedLayout {
                key_layout: style,
                time_bucket: bucket,
            })
        });
    let layouts: Vec<(RecordedLayout, KeyLayout)> = candidates
        .map(|recorded| (recorded, recorded.under(prefix)))
        .collect();
    keys.iter().find_map(|key| {
        layouts
            .iter()
            .find(|(_, layout)| layout.parse_key(key).is_ok())
            .map(|(recorded, _)| *recorded)
    })
}

/// Compares the archive's layout with `layout`, recording it when the
/// prefix has none (PUT `If-None-Match: *`, so that two workers starting
/// together record one).
///
/// # Errors
/// [`MarkerError`].
pub async fn check_or_record(
    store: &ObjectStore,
    layout: &KeyLayout,
) -> Result<LayoutCheck, MarkerError> {
    let wanted = RecordedLayout::of(layout);
    loop {
        match read_layout(store, layout.prefix()).await? {
            Some(recorded) if recorded == wanted => {
                // Inferred from keys, or read: record it if it was inferred.
                put_record(store, layout, recorded).await?;
                return Ok(LayoutCheck::Matches);
            }
            Some(recorded) => return Ok(LayoutCheck::Differs(recorded)),
            None => {
                if put_record(store, layout, wanted).await? == PutOutcome::Created {
                    return Ok(LayoutCheck::Matches);
                }
                // Another worker recorded one first: read it.
            }
        }
    }
}

async fn put_record(
    store: &ObjectStore,
    layout: &KeyLayout,
    recorded: RecordedLayout,
) -> Result<PutOutcome, S3Error> {
    // Serializing two enums cannot fail.
    let body = serde_json::to_vec(&recorded).unwrap_or_default();
    store
        .put_if_absent(&marker_key(layout), body.into(), "application/json", &[])
        .await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::fake_aws::{self, FakeBucket};
    use crate::output::compression::CompressionCodec;
    use crate::output::format::BodyKind;

    #[test]
    fn the_record_is_small_json() {
        let recorded = RecordedLayout {
            key_layout: KeyStyle::Hive,
            time_bucket: TimeBucket::Hour,
        };
        let text = serde_json::to_string(&recorded).unwrap();
        assert_eq!(text, r#"{"keyLayout":"hive","timeBucket":"hour"}"#);
        assert_eq!(
            serde_json::from_str::<RecordedLayout>(&text).unwrap(),
            recorded
        );
        assert!(
            serde_json::from_str::<RecordedLayout>(r#"{"keyLayout":"flat","timeBucket":"hour"}"#)
                .is_err()
        );
    }

    #[test]
    fn a_layout_is_inferred_from_the_keys_under_the_prefix() {
        let range = sequence_range::SequenceRange::single(9u64.into());
        for style in [KeyStyle::Plain, KeyStyle::Hive] {
            for bucket in [TimeBucket::Minute, TimeBucket::Hour] {
                let layout = KeyLayout::new("p", style, bucket);
                let key = layout.object_key(
                    layout.bucket_of(1_795_238_823_045),
                    "shardId-000000000000",
                    &range,
                    BodyKind::lines(CompressionCodec::Zstd),
                );
                let keys = vec!["p/_retention-gaps/s/1.json".to_owned(), key];
                assert_eq!(infer("p", &keys), Some(RecordedLayout::of(&layout)));
            }
        }
        assert_eq!(infer("p", &["p/README".to_owned()]), None);
    }

    fn store() -> (Arc<FakeBucket>, ObjectStore) {
        let bucket = Arc::new(FakeBucket::default());
        let clients = fake_aws::clients(Default::default(), bucket.clone(), Default::default());
        (bucket, ObjectStore::new(clients.s3, "bucket"))
    }

    fn hive_hour() -> KeyLayout {
        KeyLayout::new("p", KeyStyle::Hive, TimeBucket::Hour)
    }

    #[tokio::test]
    async fn the_first_start_records_the_layout_and_later_ones_hold_to_it() {
        let (bucket, store) = store();
        assert_eq!(
            check_or_record(&store, &hive_hour()).await.unwrap(),
            LayoutCheck::Matches
        );
        let body = bucket
            .objects
            .lock()
            .unwrap()
            .get("p/_shardsink.json")
            .cloned();
        assert_eq!(
            body.as_deref(),
            Some(&br#"{"keyLayout":"hive","timeBucket":"hour"}"#[..])
        );
        assert_eq!(
            check_or_record(&store, &hive_hour()).await.unwrap(),
            LayoutCheck::Matches
        );
        assert_eq!(
            check_or_record(&store, &KeyLayout::plain("p"))
                .await
                .unwrap(),
            LayoutCheck::Differs(RecordedLayout::of(&hive_hour()))
        );
        // Another prefix is another archive.
        assert_eq!(
            check_or_record(&store, &KeyLayout::plain("q"))
                .await
                .unwrap(),
            LayoutCheck::Matches
        );
    }

    #[tokio::test]
    async fn an_archive_from_before_the_record_keeps_its_plain_minute_layout() {
        let (bucket, store) = store();
        let plain = KeyLayout::plain("p");
        let key = plain.object_key(
            plain.bucket_of(1_795_238_823_045),
            "shardId-000000000000",
            &sequence_range::SequenceRange::single(9u64.into()),
            BodyKind::lines(CompressionCodec::Zstd),
        );
        bucket.objects.lock().unwrap().insert(key, Bytes::new());
        assert_eq!(
            check_or_record(&store, &hive_hour()).await.unwrap(),
            LayoutCheck::Differs(RecordedLayout::of(&plain))
        );
        assert_eq!(
            check_or_record(&store, &plain).await.unwrap(),
            LayoutCheck::Matches
        );
        assert!(
            bucket
                .objects
                .lock()
                .unwrap()
                .contains_key("p/_shardsink.json"),
            "recorded once inferred"
        );
    }

    #[tokio::test]
    async fn a_record_changed_by_hand_is_an_error_not_a_layout() {
        let (bucket, store) = store();
        bucket
            .objects
            .lock()
            .unwrap()
            .insert("p/_shardsink.json".to_owned(), Bytes::from_static(b"{}"));
        let err = check_or_record(&store, &hive_hour()).await.unwrap_err();
        assert!(matches!(err, MarkerError::Unreadable { .. }), "{err}");
        assert!(matches!(err.classify(), Failure::Final));
    }
}
