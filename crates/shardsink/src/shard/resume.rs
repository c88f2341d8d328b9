//! [`ResumeSkip`]: per-shard exclusion of records already in S3.
//!
//! When a shard starts — process start or lease taken — the resume skip is on. For each
//! arrival minute or hour (the time bucket) the shard reaches, it lists the
//! shard's prefix of that bucket once, whatever the objects' formats,
//! parses the ranges in the keys into a [`RangeSet`], and excludes every record
//! whose sequence number is in it. The set is right for any listing order;
//! the newest-first key order only lets the listing stop early.
//!
//! When the format can reject records, the shard's prefix of the same
//! bucket under the error prefix is listed too, and with event
//! deduplication its decisions objects' prefix: an error or decisions
//! object whose batch's first record is not in the main listing is
//! *uncommitted* — its main object (the batch's commit marker) was never
//! written, and the lease row that recorded the batch is gone (a lost lease
//! table). The shard task rebuilds exactly that batch when it reaches its
//! first record — from its decisions object when there is one — so its
//! records land once, in the same objects ([`ResumeSkip::uncommitted_at`]).
//! Only batches from the first record asked about on are ever reached, so
//! that listing stops early as the main one does: a re-read bucket costs
//! one LIST request a prefix when its newest page reaches that record.
//!
//! Once a batch is written with nothing excluded since the previous one, the resume skip
//! turns off for the shard: a shard's batches are written in sequence order,
//! so the records in S3 are a prefix of the shard's records from where this
//! shard was first read; past the first clean batch, nothing can be in S3
//! yet. It is turned on again the next time the lease is taken.
//!
//! The listings are `output::read_back::listing`'s; this module decides
//! what they mean for the shard.

use std::sync::Arc;

use sequence_range::{RangeSet, SequenceNumber, SequenceRange};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::aws::retry::{Retry, Stopped};
use crate::aws::{ObjectStore, S3Error};
use crate::commit::replay_plan::{Side, Uncommitted};
use crate::ops::metrics::Metrics;
use crate::output::bucket::Bucket;
use crate::output::key::{KeyLayout, KeyParseError};
use crate::output::read_back::decisions::parse_decisions_name;
use crate::output::read_back::listing::{Listing, batch_range, list_ranges, list_written};

/// ResumeSkip state of one shard, with what it needs to list the shard's objects.
#[derive(Debug)]
pub struct ResumeSkip {
    store: ObjectStore,
    layout: KeyLayout,
    /// The layouts of the objects a batch writes before its main object
    /// that are listed for uncommitted batches: the error prefix's, when the
    /// format can reject records, and the decisions objects', with event
    /// deduplication.
    side_layouts: Vec<(Side, KeyLayout)>,
    shard_id: String,
    metrics: Arc<Metrics>,
    enabled: bool,
    /// Whether the prefix holds main objects to list (not for a table).
    main_objects: bool,
    /// The bucket whose written ranges are loaded, those ranges, and the
    /// bucket's uncommitted batches.
    loaded: Option<(Bucket, RangeSet, Vec<Uncommitted>)>,
    /// Whether a record was excluded since the last written batch.
    excluded_since_write: bool,
}

impl ResumeSkip {
    /// ResumeSkip for `shard_id`'s objects in `store` under `layout`; on, as at
    /// shard start.
    pub fn new(
        store: ObjectStore,
        layout: KeyLayout,
        shard_id: impl Into<String>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            store,
            layout,
            side_layouts: Vec::new(),
            shard_id: shard_id.into(),
            metrics,
            enabled: true,
            main_objects: true,
            loaded: None,
            excluded_since_write: false,
        }
    }

    /// No main objects are listed (batches go into a table): only the
    /// side objects' uncommitted batches are found.
    pub fn without_main_objects(mut self) -> Self {
        self.main_objects = false;
        self
    }

    /// Also lists the shard's error objects under `error_layout`, to find
    /// uncommitted batches.
    pub fn with_error_layout(mut self, error_layout: KeyLayout) -> Self {
        self.side_layouts.push((Side::Errors, error_layout));
        self
    }

    /// Also lists the shard's decisions objects under `decisions_layout`,
    /// to find uncommitted batches (with event deduplication).
    pub fn with_decisions_layout(mut self, decisions_layout: KeyLayout) -> Self {
        self.side_layouts.push((Side::Decisions, decisions_layout));
        self
    }

    /// Turns the resume skip on again: records from here on may already be in S3 (a
    /// retention gap skipped to records a previous owner may have written).
    pub fn enable(&mut self) {
        self.enabled = true;
        self.loaded = None;
        self.excluded_since_write = false;
    }

    /// Whether the resume skip is on.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Whether the record with `sequence_number`, arriving in `bucket`, is
    /// already in S3. Lists the shard's prefix of the bucket the first time
    /// the bucket is asked about, retrying failed listings (with backoff, counted in the
    /// retry metrics) until they succeed or `stop` is cancelled. Always
    /// `false` once the resume skip is off.
    ///
    /// # Errors
    /// When `stop` is cancelled (the lease was lost) before a listing
    /// succeeded.
    pub async fn is_written(
        &mut self,
        bucket: Bucket,
        sequence_number: &SequenceNumber,
        stop: &CancellationToken,
    ) -> Result<bool, Stopped<S3Error>> {
        if !self.enabled {
            return Ok(false);
        }
        let stale = self
            .loaded
            .as_ref()
            .is_none_or(|(loaded, _, _)| *loaded != bucket);
        if stale {
            let prefix = self.layout.shard_bucket_prefix(bucket, &self.shard_id);
            let listing = if self.main_objects {
                Retry::new("resume skip listing")
                    .metrics(&self.metrics)
                    .until(stop)
                    .run(|| list_written(&self.store, &prefix, sequence_number))
                    .await?
            } else {
                Listing::default()
            };
            self.metrics.dedup_list_requests.inc_by(listing.requests);
            debug!(
                shard_id = self.shard_id,
                prefix,
                ranges = listing.written.range_count(),
                requests = listing.requests,
                "resume skip listed bucket"
            );
            let mut uncommitted: Vec<Uncommitted> = Vec::new();
            for (side, layout) in &self.side_layouts {
                let prefix = layout.shard_bucket_prefix(bucket, &self.shard_id);
                // Only objects whose batch's first record is
                // `sequence_number` or later can mark an uncommitted batch
                // (below): they all end there or later, so the listing stops
                // early as the main one does.
                let parse = side.name_parser();
                let found = Retry::new("resume skip listing")
                    .metrics(&self.metrics)
                    .until(stop)
                    .run(|| list_ranges(&self.store, &prefix, sequence_number, parse))
                    .await?;
                self.metrics.dedup_list_requests.inc_by(found.requests);
                uncommitted.extend(
                    found
                        .ranges
                        .into_iter()
                        // The main listing may stop before ranges below
                        // `sequence_number`, which are never asked about; so
                        // may this one.
                        .filter(|(_, range)| {
                            range.first() >= sequence_number
                                && !listing.written.contains(range.first())
                        })
                        .map(|(key, range)| Uncommitted {
                            side: *side,
                            key,
                            bucket,
                            range,
                        }),
                );
            }
            // A batch with both: its decisions object says where every
            // record goes.
            uncommitted.sort_by(|a, b| {
                (a.range.first(), a.range.last(), a.side).cmp(&(
                    b.range.first(),
                    b.range.last(),
                    b.side,
                ))
            });
            uncommitted.dedup_by(|later, earlier| later.range == earlier.range);
            for batch in &uncommitted {
                warn!(
                    shard_id = self.shard_id,
                    key = batch.key,
                    "object of a batch without its main object: the batch is rebuilt when its first record is read"
                );
            }
            self.loaded = Some((bucket, listing.written, uncommitted));
        }
        let written = self
            .loaded
            .as_ref()
            .is_some_and(|(_, written, _)| written.contains(sequence_number));
        if written {
            self.excluded_since_write = true;
        }
        Ok(written)
    }

    /// The uncommitted batch that starts at `sequence_number`, if the
    /// bucket [`is_written`](Self::is_written) last listed has one.
    pub fn uncommitted_at(&self, sequence_number: &SequenceNumber) -> Option<Uncommitted> {
        let (_, _, uncommitted) = self.loaded.as_ref()?;
        uncommitted
            .iter()
            .find(|batch| batch.range.first() == sequence_number)
            .cloned()
    }

    /// Called after a batch was written in normal flow (not a replay): turns
    /// the resume skip off when nothing was excluded since the previous batch.
    pub fn on_batch_written(&mut self) {
        if self.enabled && !self.excluded_since_write {
            self.enabled = false;
            self.loaded = None;
            debug!(
                shard_id = self.shard_id,
                "resume skip off: a batch found nothing already written"
            );
        }
        self.excluded_since_write = false;
    }
}

impl Side {
    /// How the names of these objects are parsed.
    fn name_parser(self) -> fn(&str) -> Result<SequenceRange, KeyParseError> {
        match self {
            Self::Errors => batch_range,
            Self::Decisions => parse_decisions_name,
        }
    }
}

/// The pieces of `group` not in `written`: what is left to write of a group
/// of one shard's records after the resume skip — the set-level statement of what
/// [`ResumeSkip::is_written`] does record by record, for the tests.
#[cfg(test)]
fn remaining(group: &SequenceRange, written: &RangeSet) -> RangeSet {
    RangeSet::from(group.clone()).difference(written)
}

#[cfg(test)]
mod tests {
    use aws_sdk_s3::Client;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    use super::*;
    use crate::output::compression::CompressionCodec;
    use crate::output::format::BodyKind;
    use crate::output::read_back::listing::test_support::{key, page, range, store};

    #[tokio::test]
    async fn turns_off_after_a_clean_batch_only() {
        let keys = vec![key(10, 20)];
        let list = mock!(Client::list_objects_v2).then_output(move || page(&keys, None));
        let client = mock_client!(aws_sdk_s3, RuleMode::MatchAny, [&list]);
        let metrics = Arc::new(Metrics::new());
        let shard = "shardId-000000000000";
        let mut resume = ResumeSkip::new(store(client), KeyLayout::plain("p"), shard, metrics);
        let minute = Bucket::minute(1_795_238_823_045);
        let running = CancellationToken::new();
        let is_written = async |resume: &mut ResumeSkip, sequence_number: u64| {
            resume
                .is_written(minute, &sequence_number.into(), &running)
                .await
                .unwrap()
        };
        assert!(is_written(&mut resume, 15).await);
        assert!(!is_written(&mut resume, 21).await);
        assert_eq!(list.num_calls(), 1, "one listing per minute");
        resume.on_batch_written();
        assert!(resume.is_enabled(), "the group had an exclusion");
        resume.on_batch_written();
        assert!(!resume.is_enabled(), "a clean batch turns it off");
        assert!(!is_written(&mut resume, 15).await);
        assert_eq!(list.num_calls(), 1, "no listing once off");
    }

    /// After a restart the shard re-reads from its checkpoint, just past
    /// the newest batches of an hour that holds 1,500 (two pages of keys
    /// under the main prefix and two under the error prefix, every batch
    /// with an error object). ResumeSkip lists each prefix once and stops after
    /// the newest page: two LIST requests for the bucket — and still finds
    /// the uncommitted batch at the top. Asked about an older record, it
    /// reads the second pages too.
    #[tokio::test]
    async fn an_hour_is_listed_in_two_requests_with_its_error_objects() {
        use crate::fake_aws::{self, FakeBucket};
        use crate::output::bucket::TimeBucket;
        use crate::output::key::KeyStyle;

        const BATCHES: u64 = 1_500;
        let shard = "shardId-000000000000";
        let layout = KeyLayout::new("p", KeyStyle::Plain, TimeBucket::Hour);
        let error_layout = layout.with_prefix("p-errors");
        let hour = layout.bucket_of(1_795_238_823_045);
        let bucket = Arc::new(FakeBucket::default());
        let batch = |i: u64| range(10 * i, 10 * i + 9);
        {
            let mut objects = bucket.objects.lock().unwrap();
            let kind = BodyKind::lines(CompressionCodec::Zstd);
            for i in 1..=BATCHES {
                // The newest batch's main object was never written.
                if i < BATCHES {
                    objects.insert(
                        layout.object_key(hour, shard, &batch(i), kind),
                        Default::default(),
                    );
                }
                objects.insert(
                    error_layout.object_key(hour, shard, &batch(i), kind),
                    Default::default(),
                );
            }
        }
        let clients = fake_aws::clients(Default::default(), bucket.clone(), Default::default());
        let metrics = Arc::new(Metrics::new());
        let mut resume = ResumeSkip::new(store(clients.s3), layout.clone(), shard, metrics.clone())
            .with_error_layout(error_layout.clone());
        let running = CancellationToken::new();
        let main_prefix = layout.shard_bucket_prefix(hour, shard);
        let error_prefix = error_layout.shard_bucket_prefix(hour, shard);

        let restart_at = batch(BATCHES - 5).first().clone();
        assert!(
            resume
                .is_written(hour, &restart_at, &running)
                .await
                .unwrap()
        );
        assert_eq!(
            *bucket.lists.lock().unwrap(),
            [main_prefix.clone(), error_prefix.clone()],
            "one page of each prefix"
        );
        assert_eq!(metrics.dedup_list_requests.get(), 2);
        assert!(
            metrics
                .encode()
                .contains("shardsink_dedup_list_requests_total 2\n"),
            "{}",
            metrics.encode()
        );
        let newest = batch(BATCHES);
        assert!(
            !resume
                .is_written(hour, newest.first(), &running)
                .await
                .unwrap()
        );
        assert_eq!(
            resume
                .uncommitted_at(newest.first())
                .map(|batch| batch.range),
            Some(newest.clone())
        );
        assert_eq!(resume.uncommitted_at(&restart_at), None, "committed");
        assert_eq!(bucket.lists.lock().unwrap().len(), 2, "listed once");

        // From an older record, on the second pages.
        resume.enable();
        bucket.lists.lock().unwrap().clear();
        let older = batch(100).first().clone();
        assert!(resume.is_written(hour, &older, &running).await.unwrap());
        assert_eq!(
            *bucket.lists.lock().unwrap(),
            [
                main_prefix.clone(),
                main_prefix,
                error_prefix.clone(),
                error_prefix
            ]
        );
        assert_eq!(metrics.dedup_list_requests.get(), 6);
        assert_eq!(
            resume
                .uncommitted_at(newest.first())
                .map(|batch| batch.range),
            Some(newest)
        );
    }

    /// With a table, the prefix holds no main objects: it is not listed,
    /// nothing found there counts as written, and the error objects still
    /// name the uncommitted batches.
    #[tokio::test]
    async fn without_main_objects_only_the_side_objects_are_listed() {
        use crate::fake_aws::{self, FakeBucket};

        let shard = "shardId-000000000000";
        let layout = KeyLayout::plain("p");
        let error_layout = layout.with_prefix("p-errors");
        let minute = Bucket::minute(1_795_238_823_045);
        let bucket = Arc::new(FakeBucket::default());
        let kind = BodyKind::lines(CompressionCodec::Zstd);
        {
            let mut objects = bucket.objects.lock().unwrap();
            // An object that would count as written if the prefix were
            // listed, and an error object of a later batch.
            objects.insert(
                layout.object_key(minute, shard, &range(10, 20), kind),
                Default::default(),
            );
            objects.insert(
                error_layout.object_key(minute, shard, &range(30, 40), kind),
                Default::default(),
            );
        }
        let clients = fake_aws::clients(Default::default(), bucket.clone(), Default::default());
        let metrics = Arc::new(Metrics::new());
        let mut resume = ResumeSkip::new(store(clients.s3), layout.clone(), shard, metrics)
            .with_error_layout(error_layout.clone())
            .without_main_objects();
        let running = CancellationToken::new();
        assert!(
            !resume
                .is_written(minute, &15_u64.into(), &running)
                .await
                .unwrap()
        );
        assert_eq!(
            *bucket.lists.lock().unwrap(),
            [error_layout.shard_bucket_prefix(minute, shard)],
            "only the error prefix is listed"
        );
        assert_eq!(
            resume
                .uncommitted_at(&30_u64.into())
                .map(|batch| batch.range),
            Some(range(30, 40))
        );
    }

    #[test]
    fn remaining_is_the_group_minus_written() {
        let written: RangeSet = [range(5, 7), range(20, 30)].into_iter().collect();
        let left = remaining(&range(1, 25), &written);
        assert_eq!(left, [range(1, 4), range(8, 19)].into_iter().collect());
    }
}
