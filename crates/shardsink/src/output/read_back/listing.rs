//! Listing the archive: the one paginated ListObjectsV2 walk of a prefix
//! ([`Pages`]) that every reader of the archive lists with — the shard's
//! skip of records already in S3, a rebuild of the event window, and
//! `verify` — and the reading of a shard's time bucket into the batch
//! ranges its keys name ([`list_written`], [`list_ranges`]).
//!
//! Each caller retries as it must: a page that failed is fetched again
//! with [`Pages::fetch`] until [`Pages::advance`] takes it.

use sequence_range::{RangeSet, SequenceNumber, SequenceRange};
use tracing::warn;

use crate::aws::s3::ListPage;
use crate::aws::{ObjectStore, S3Error};
use crate::output::key::{KeyParseError, parse_object_name};

/// A walk of every key under one prefix, a page (up to 1,000 keys) at a
/// time, in the order S3 lists them (ascending bytes)
/// ([ListObjectsV2](https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html)).
#[derive(Debug, Clone)]
pub struct Pages {
    prefix: String,
    /// The token of the next page; `None` before the first.
    continuation: Option<String>,
    /// Whether the last page was taken.
    done: bool,
    /// Pages taken.
    requests: u64,
}

impl Pages {
    /// A walk of the keys under `prefix` (`""`: the whole bucket).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            continuation: None,
            done: false,
            requests: 0,
        }
    }

    /// Pages taken so far (each one ListObjectsV2 request that succeeded).
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// Whether the last page was taken.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Fetches the next page without taking it: call it again when it
    /// failed, then [`advance`](Self::advance) with what it returned.
    ///
    /// # Errors
    /// [`S3Error`] from ListObjectsV2.
    pub async fn fetch(&self, store: &ObjectStore) -> Result<ListPage, S3Error> {
        store
            .list_page(&self.prefix, self.continuation.clone())
            .await
    }

    /// Takes a page [`fetch`](Self::fetch) returned: the walk moves past
    /// it. Returns its keys.
    pub fn advance(&mut self, page: ListPage) -> Vec<String> {
        self.requests += 1;
        self.done = page.next_continuation_token.is_none();
        self.continuation = page.next_continuation_token;
        page.keys
    }

    /// The next page's keys; `None` once the last page was taken.
    ///
    /// # Errors
    /// [`S3Error`] from ListObjectsV2; the walk stays where it was.
    pub async fn next_page(&mut self, store: &ObjectStore) -> Result<Option<Vec<String>>, S3Error> {
        if self.done {
            return Ok(None);
        }
        let page = self.fetch(store).await?;
        Ok(Some(self.advance(page)))
    }
}

/// Every key under `prefix`, in the order S3 lists them.
///
/// # Errors
/// [`S3Error`] from ListObjectsV2.
pub async fn list_all(store: &ObjectStore, prefix: &str) -> Result<Vec<String>, S3Error> {
    let mut pages = Pages::new(prefix);
    let mut keys = Vec::new();
    while let Some(page) = pages.next_page(store).await? {
        keys.extend(page);
    }
    Ok(keys)
}

/// What a listing of batch ranges found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Listing {
    /// Ranges of the objects under the prefix (that matter, see [`list_written`]).
    pub written: RangeSet,
    /// LIST requests made.
    pub requests: u64,
    /// Keys that did not parse (logged, ignored).
    pub foreign_keys: u64,
    /// Each listed object's key and range.
    pub ranges: Vec<(String, SequenceRange)>,
}

/// Lists the ranges written under `prefix` (one shard, one bucket) that can
/// hold `from` or later sequence numbers.
///
/// Keys that do not parse are logged and ignored, never read as ranges. S3
/// lists keys in ascending byte order and names sort newest batch first, so
/// once a listed range ends before `from`, every later key is older still and
/// the listing stops — but only while the keys seen so far did come in
/// ascending order and no two listed ranges overlap; otherwise the prefix is
/// read to the end.
///
/// # Errors
/// [`S3Error`] from ListObjectsV2.
pub async fn list_written(
    store: &ObjectStore,
    prefix: &str,
    from: &SequenceNumber,
) -> Result<Listing, S3Error> {
    list_ranges(store, prefix, from, batch_range).await
}

/// The range a batch object's name (its last key segment) says.
///
/// # Errors
/// [`KeyParseError`] for a name shardsink does not write.
pub fn batch_range(name: &str) -> Result<SequenceRange, KeyParseError> {
    parse_object_name(name).map(|object| object.range)
}

/// [`list_written`] for objects whose names `parse` reads.
///
/// # Errors
/// [`S3Error`] from ListObjectsV2.
pub async fn list_ranges(
    store: &ObjectStore,
    prefix: &str,
    from: &SequenceNumber,
    parse: fn(&str) -> Result<SequenceRange, KeyParseError>,
) -> Result<Listing, S3Error> {
    let mut listing = Listing::default();
    let mut pages = Pages::new(prefix);
    let mut previous_key: Option<String> = None;
    let mut ordered = true;
    while let Some(keys) = pages.next_page(store).await? {
        listing.requests = pages.requests();
        let mut below_from = false;
        for key in keys {
            if let Some(previous) = &previous_key {
                ordered &= *previous < key;
            }
            let name = key.strip_prefix(prefix).unwrap_or(&key);
            match parse(name) {
                Ok(range) => {
                    below_from |= range.last() < from;
                    // Overlapping ranges (which shardsink never writes) break
                    // the "older keys end earlier" reasoning: read them all.
                    ordered &= !listing.written.overlaps(&range);
                    listing.written.insert(range.clone());
                    listing.ranges.push((key.clone(), range));
                }
                Err(error) => {
                    listing.foreign_keys += 1;
                    warn!(key = %key, error = %error, "ignoring key that is not a shardsink batch");
                }
            }
            previous_key = Some(key);
        }
        if ordered && below_from {
            break;
        }
    }
    Ok(listing)
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Mocked listings of one shard's minute, for the tests of the
    //! listing and of what the shard makes of it.

    use aws_sdk_s3::Client;
    use aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output;
    use aws_sdk_s3::types::Object;
    use sequence_range::SequenceRange;

    use crate::aws::ObjectStore;
    use crate::output::compression::CompressionCodec;
    use crate::output::format::BodyKind;
    use crate::output::key::object_name;

    pub(crate) const PREFIX: &str = "p/2026/11/21/05/27/shardId-000000000000/";

    pub(crate) fn range(first: u64, last: u64) -> SequenceRange {
        SequenceRange::new(first.into(), last.into()).unwrap()
    }

    pub(crate) fn key(first: u64, last: u64) -> String {
        format!(
            "{PREFIX}{}",
            object_name(&range(first, last), BodyKind::lines(CompressionCodec::Zstd))
        )
    }

    pub(crate) fn page(keys: &[String], next: Option<&str>) -> ListObjectsV2Output {
        let mut builder = ListObjectsV2Output::builder().is_truncated(next.is_some());
        for k in keys {
            builder = builder.contents(Object::builder().key(k).build());
        }
        if let Some(token) = next {
            builder = builder.next_continuation_token(token);
        }
        builder.build()
    }

    pub(crate) fn store(client: Client) -> ObjectStore {
        ObjectStore::new(client, "bucket")
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_s3::Client;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    use super::test_support::{PREFIX, key, page, range, store};
    use super::*;

    #[tokio::test]
    async fn collects_ranges_and_ignores_foreign_keys() {
        // Newest first, as S3 lists them, plus junk.
        let keys = vec![
            key(300, 400),
            key(100, 200),
            format!("{PREFIX}_SUCCESS"),
            format!("{PREFIX}9-1-2.jsonl"),
        ];
        let list = mock!(Client::list_objects_v2)
            .match_requests(|input| input.prefix() == Some(PREFIX))
            .then_output(move || page(&keys, None));
        let client = mock_client!(aws_sdk_s3, RuleMode::Sequential, [&list]);
        let listing = list_written(&store(client), PREFIX, &SequenceNumber::from(1u64))
            .await
            .unwrap();
        assert_eq!(
            listing.written,
            [range(100, 200), range(300, 400)].into_iter().collect()
        );
        assert_eq!(listing.foreign_keys, 2);
        assert_eq!(listing.requests, 1);
    }

    #[tokio::test]
    async fn stops_after_the_page_that_reaches_older_ranges() {
        let first_page = vec![key(900, 999), key(500, 599)];
        let second_page = vec![key(100, 199)];
        let list1 =
            mock!(Client::list_objects_v2).then_output(move || page(&first_page, Some("t1")));
        let list2 = mock!(Client::list_objects_v2).then_output(move || page(&second_page, None));
        let client = mock_client!(aws_sdk_s3, RuleMode::Sequential, [&list1, &list2]);
        // Everything from 600 on matters; the first page already reached 500-599.
        let listing = list_written(&store(client), PREFIX, &SequenceNumber::from(600u64))
            .await
            .unwrap();
        assert_eq!(listing.requests, 1, "second page is older, never fetched");
        assert_eq!(list2.num_calls(), 0);
    }

    #[tokio::test]
    async fn reads_every_page_when_listed_ranges_overlap() {
        // 500-950 overlaps 900-999: something else wrote here, so a wider
        // older range may hide on the next page.
        let first_page = vec![key(900, 999), key(500, 950)];
        let second_page = vec![key(100, 700)];
        let list1 =
            mock!(Client::list_objects_v2).then_output(move || page(&first_page, Some("t1")));
        let list2 = mock!(Client::list_objects_v2).then_output(move || page(&second_page, None));
        let client = mock_client!(aws_sdk_s3, RuleMode::Sequential, [&list1, &list2]);
        let listing = list_written(&store(client), PREFIX, &SequenceNumber::from(960u64))
            .await
            .unwrap();
        assert_eq!(listing.requests, 2);
    }

    #[tokio::test]
    async fn reads_every_page_when_the_server_does_not_sort() {
        // Oldest first: not S3's order, so no early stop.
        let first_page = vec![key(100, 199), key(900, 999)];
        let second_page = vec![key(500, 599)];
        let list1 =
            mock!(Client::list_objects_v2).then_output(move || page(&first_page, Some("t1")));
        let list2 = mock!(Client::list_objects_v2)
            .match_requests(|input| input.continuation_token() == Some("t1"))
            .then_output(move || page(&second_page, None));
        let client = mock_client!(aws_sdk_s3, RuleMode::Sequential, [&list1, &list2]);
        let listing = list_written(&store(client), PREFIX, &SequenceNumber::from(600u64))
            .await
            .unwrap();
        assert_eq!(listing.requests, 2);
        assert!(listing.written.contains(&SequenceNumber::from(550u64)));
    }
}
