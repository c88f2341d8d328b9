//! In-memory fakes of the three services for shard-task tests, served through
//! `aws-smithy-mocks` rules so the code under test uses real SDK clients:
//! - [`FakeStream`] of [`FakeShard`]s: Kinesis shards with scripted records;
//! - [`FakeBucket`]: S3 objects with `If-None-Match: *` (412), listing with
//!   prefix and paging (1,000 keys a page; requests recorded), ranged GETs
//!   and HEAD's `Content-Length` (what Iceberg's file I/O reads), and
//!   injectable PUT failures; the bucket name is not looked at;
//! - [`FakeTable`]: the lease table's DynamoDB items, from
//!   `shard_lease::test_util`, which reads back and evaluates the update and
//!   condition expressions `shard-lease` writes;
//! - [`Link`]: the network in between, slowed down or cut by a test;
//! - [`event_stream`]: SubscribeToShard response bodies, framed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use aws_sdk_kinesis::types::{Record, ShardIteratorType};
use aws_smithy_mocks::{MockResponse, RuleMode, mock, mock_client};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use bytes::Bytes;
use sequence_range::SequenceNumber;
use shard_lease::test_util::fake_client;

use crate::aws::AwsClients;
use crate::lock::lock;

pub mod event_stream;
mod link;

pub use link::Link;

/// The lease table's items; see `shard_lease::test_util`.
pub use shard_lease::test_util::FakeTable;

/// One Kinesis shard.
#[derive(Debug, Default)]
pub struct FakeShard {
    records: Mutex<Vec<Record>>,
    closed: Mutex<bool>,
    /// GetRecords calls served.
    pub reads: AtomicUsize,
    /// The next this-many GetRecords calls fail with
    /// `ProvisionedThroughputExceededException`.
    pub failing_reads: AtomicUsize,
    /// Records before this index have been trimmed by retention:
    /// `TRIM_HORIZON` starts here, and a sequence number before it is
    /// rejected by GetShardIterator as expired.
    pub trimmed: AtomicUsize,
    /// The next this-many GetShardIterator calls at a sequence number are
    /// rejected as expired even though the number is still there.
    pub rejected_positions: AtomicUsize,
    /// GetShardIterator grants an iterator at a trimmed sequence number,
    /// starting at the trim horizon, instead of rejecting it — as
    /// kinesis-mock does, and Kinesis at times.
    pub grants_trimmed_positions: AtomicBool,
    /// The shard has left the stream: ListShards omits it, GetShardIterator
    /// and GetRecords answer `ResourceNotFoundException`.
    pub gone: std::sync::atomic::AtomicBool,
    /// `(index, n)`: the next `n` GetRecords calls at record `index` return
    /// no records, `MillisBehindLatest` above 0 and an iterator still at
    /// `index`, as Kinesis does over a stretch of a shard without records.
    pub empty_reads_at: Mutex<Option<(usize, usize)>>,
    /// Cancelled (and cleared) by the next GetRecords call, before it
    /// answers: a lease lost while a read is under way.
    pub cancel_on_read: Mutex<Option<tokio_util::sync::CancellationToken>>,
}

impl FakeShard {
    /// Appends a record; `seq` must grow.
    pub fn push(&self, seq: &str, arrival_millis: i64, data: &[u8]) {
        lock(&self.records).push(
            Record::builder()
                .sequence_number(seq)
                .approximate_arrival_timestamp(aws_smithy_types::DateTime::from_millis(
                    arrival_millis,
                ))
                .data(aws_smithy_types::Blob::new(data.to_vec()))
                .partition_key(format!("pk-{seq}"))
                .build()
                .unwrap(),
        );
    }

    /// Every record pushed, as GetRecords returns them.
    pub fn records(&self) -> Vec<Record> {
        lock(&self.records).clone()
    }

    /// Closes the shard: reading past the last record gives `SHARD_END`.
    pub fn close(&self) {
        *lock(&self.closed) = true;
    }

    /// Whether GetShardIterator rejects `seq` as expired: before the trim
    /// horizon, or rejected on purpose.
    fn rejects(&self, kind: &ShardIteratorType, seq: Option<&str>) -> bool {
        if !matches!(
            kind,
            ShardIteratorType::AtSequenceNumber | ShardIteratorType::AfterSequenceNumber
        ) {
            return false;
        }
        if take_one(&self.rejected_positions) {
            return true;
        }
        if self.grants_trimmed_positions.load(Ordering::SeqCst) {
            return false;
        }
        let trimmed = self.trimmed.load(Ordering::SeqCst);
        let records = lock(&self.records);
        let target = SequenceNumber::parse(seq.unwrap_or("0")).unwrap();
        trimmed > 0
            && records.get(trimmed).is_none_or(|first| {
                SequenceNumber::parse(first.sequence_number()).unwrap() > target
            })
    }

    fn start_index(
        &self,
        kind: &ShardIteratorType,
        seq: Option<&str>,
        timestamp: Option<&aws_smithy_types::DateTime>,
    ) -> usize {
        let trimmed = self.trimmed.load(Ordering::SeqCst);
        let records = lock(&self.records);
        let position = |after: bool| {
            let target = SequenceNumber::parse(seq.unwrap_or("0")).unwrap();
            records
                .iter()
                .position(|r| {
                    let n = SequenceNumber::parse(r.sequence_number()).unwrap();
                    if after { n > target } else { n >= target }
                })
                .unwrap_or(records.len())
        };
        let index = match kind {
            ShardIteratorType::TrimHorizon => 0,
            ShardIteratorType::Latest => records.len(),
            ShardIteratorType::AtSequenceNumber => position(false),
            ShardIteratorType::AfterSequenceNumber => position(true),
            // Resolved to the whole second, as kinesis-mock does: callers
            // must not rely on millisecond precision.
            ShardIteratorType::AtTimestamp => {
                let at = timestamp.map_or(0, |t| t.secs() * 1_000);
                records
                    .iter()
                    .position(|r| {
                        r.approximate_arrival_timestamp()
                            .and_then(|t| t.to_millis().ok())
                            .is_some_and(|millis| millis >= at)
                    })
                    .unwrap_or(records.len())
            }
            other => panic!("fake shard does not support {other:?}"),
        };
        index.max(trimmed)
    }
}

/// A Kinesis stream: shards by id.
#[derive(Debug, Default)]
pub struct FakeStream {
    shards: Mutex<BTreeMap<String, Arc<FakeShard>>>,
    /// The next this-many ListShards calls fail with a 500.
    pub failing_lists: AtomicUsize,
    /// The next this-many DescribeStreamSummary calls fail with
    /// `AccessDeniedException` (a permission not granted yet).
    pub failing_describes: AtomicUsize,
    /// The `RetentionPeriodHours` DescribeStreamSummary answers; 0 for
    /// Kinesis's default, 24.
    pub retention_hours: std::sync::atomic::AtomicI32,
}

impl FakeStream {
    /// The shard `id`, created empty on first use.
    pub fn shard(&self, id: &str) -> Arc<FakeShard> {
        lock(&self.shards).entry(id.to_owned()).or_default().clone()
    }

    fn get(&self, id: &str) -> Arc<FakeShard> {
        lock(&self.shards)
            .get(id)
            .cloned()
            .expect("unknown fake shard")
    }
}

/// S3 objects.
#[derive(Default)]
pub struct FakeBucket {
    /// Key → body.
    pub objects: Mutex<BTreeMap<String, Bytes>>,
    /// Key → user metadata, as PUT.
    pub metadata: Mutex<BTreeMap<String, std::collections::HashMap<String, String>>>,
    /// Keys of PUT attempts, in order (including failed ones).
    pub put_attempts: Mutex<Vec<String>>,
    /// The next this-many PUTs fail with 503 SlowDown.
    pub failing_puts: AtomicUsize,
    /// When set, this many more PUTs are answered as usual, and every PUT
    /// after them fails with 503 SlowDown until it is set to `None`: S3 out
    /// of reach from then on (a crash point for a test that then stops the
    /// task).
    pub puts_left: Mutex<Option<usize>>,
    /// The prefix of each ListObjectsV2 request, in order.
    pub lists: Mutex<Vec<String>>,
    /// Called before each PUT is applied, with the key and whether it would
    /// create the object (for invariants).
    #[allow(clippy::type_complexity)]
    pub on_put: Mutex<Option<Box<dyn Fn(&str, bool) + Send>>>,
    /// Called before each GetObject is answered, with the key.
    #[allow(clippy::type_complexity)]
    pub on_get: Mutex<Option<Box<dyn Fn(&str) + Send>>>,
}

impl FakeBucket {
    /// Every batch object's decompressed lines (retention gap markers
    /// left out).
    pub fn lines(&self) -> Vec<(String, serde_json::Value)> {
        lock(&self.objects)
            .iter()
            .filter(|(key, _)| key.contains(".jsonl"))
            .flat_map(|(key, body)| {
                let ext = &key[key.find(".jsonl").unwrap()..];
                let kind = crate::output::format::BodyKind::from_extension(ext).unwrap();
                let text = crate::output::compression::decompress(kind.codec, body).unwrap();
                String::from_utf8(text)
                    .unwrap()
                    .lines()
                    .map(|l| (key.clone(), serde_json::from_str(l).unwrap()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

impl std::fmt::Debug for FakeBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeBucket")
            .field("objects", &lock(&self.objects).len())
            .finish_non_exhaustive()
    }
}

/// Takes one from `counter` if it is above zero.
fn take_one(counter: &AtomicUsize) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// The bytes of `body` a GetObject `Range` header asks for: `bytes=a-b`
/// (both included, cut at the end of the body) or `bytes=a-`.
fn ranged(body: &Bytes, range: &str) -> Bytes {
    let (start, end) = range
        .strip_prefix("bytes=")
        .and_then(|range| range.split_once('-'))
        .expect("a byte range");
    let start: usize = start.parse().expect("a range start");
    let end = match end {
        "" => body.len(),
        end => (end.parse::<usize>().expect("a range end") + 1).min(body.len()),
    };
    body.slice(start.min(end)..end)
}

/// A raw response with `status` and `body`.
pub fn http(status: u16, body: &str) -> HttpResponse {
    HttpResponse::new(
        StatusCode::try_from(status).unwrap(),
        SdkBody::from(body.to_owned()),
    )
}

/// An S3 XML error response.
pub fn s3_error(status: u16, code: &str) -> HttpResponse {
    http(
        status,
        &format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>fake</Message></Error>"
        ),
    )
}

fn shard_not_found(shard_id: &str) -> HttpResponse {
    http(
        400,
        &format!(
            r#"{{"__type":"ResourceNotFoundException","message":"Shard {shard_id} in stream s under account 0 does not exist"}}"#
        ),
    )
}

/// Clients serving the three fakes.
pub fn clients(
    stream: Arc<FakeStream>,
    bucket: Arc<FakeBucket>,
    table: Arc<FakeTable>,
) -> AwsClients {
    AwsClients {
        kinesis: kinesis_client(stream),
        s3: s3_client(bucket),
        dynamodb: fake_client(table),
        shared: aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .build(),
    }
}

fn kinesis_client(stream: Arc<FakeStream>) -> aws_sdk_kinesis::Client {
    use aws_sdk_kinesis::Client;
    use aws_sdk_kinesis::operation::get_records::GetRecordsOutput;
    use aws_sdk_kinesis::operation::get_shard_iterator::GetShardIteratorOutput;

    // Iterators are `it|{shard id}|{index}`.
    let s1 = stream.clone();
    let iterator = mock!(Client::get_shard_iterator).then_compute_response(move |input| {
        let shard_id = input.shard_id().unwrap();
        let shard = s1.get(shard_id);
        let kind = input.shard_iterator_type().unwrap();
        if shard.gone.load(Ordering::SeqCst) {
            return MockResponse::Http(shard_not_found(shard_id));
        }
        if shard.rejects(kind, input.starting_sequence_number()) {
            return MockResponse::Http(http(
                400,
                &format!(
                    r#"{{"__type":"InvalidArgumentException","message":"StartingSequenceNumber {} used in GetShardIterator on shard {shard_id} in stream s under account 0 is invalid because it has expired."}}"#,
                    input.starting_sequence_number().unwrap_or_default()
                ),
            ));
        }
        let index = shard.start_index(kind, input.starting_sequence_number(), input.timestamp());
        MockResponse::Output(
            GetShardIteratorOutput::builder()
                .shard_iterator(format!("it|{shard_id}|{index}"))
                .build(),
        )
    });
    let s2 = stream.clone();
    let records = mock!(Client::get_records).then_compute_response(move |input| {
        let mut parts = input.shard_iterator().unwrap().split('|').skip(1);
        let (shard_id, index) = (parts.next().unwrap(), parts.next().unwrap());
        let s2 = s2.get(shard_id);
        if s2.gone.load(Ordering::SeqCst) {
            return MockResponse::Http(shard_not_found(shard_id));
        }
        s2.reads.fetch_add(1, Ordering::SeqCst);
        if let Some(token) = s2.cancel_on_read.lock().unwrap().take() {
            token.cancel();
        }
        if take_one(&s2.failing_reads) {
            return MockResponse::Http(http(
                400,
                r#"{"__type":"ProvisionedThroughputExceededException","message":"Rate exceeded for shard"}"#,
            ));
        }
        let index: usize = index.parse().unwrap();
        if let Some((at, n)) = lock(&s2.empty_reads_at).as_mut()
            && *at == index && *n > 0 {
                *n -= 1;
                return MockResponse::Output(
                    GetRecordsOutput::builder()
                        .set_records(Some(Vec::new()))
                        .millis_behind_latest(60_000)
                        .next_shard_iterator(format!("it|{shard_id}|{index}"))
                        .build()
                        .unwrap(),
                );
            }
        let all = lock(&s2.records);
        let limit = input.limit().unwrap_or(10_000) as usize;
        let end = (index + limit).min(all.len());
        let mut output = GetRecordsOutput::builder()
            .set_records(Some(all[index.min(end)..end].to_vec()))
            .millis_behind_latest(if end == all.len() { 0 } else { 1_000 });
        if !(*lock(&s2.closed) && end == all.len()) {
            output = output.next_shard_iterator(format!("it|{shard_id}|{end}"));
        }
        MockResponse::Output(output.build().unwrap())
    });
    // ListShards and DescribeStreamSummary answer in HTTP, as Kinesis does,
    // whatever the input: a `Link` that is cut then leaves their attempts
    // unanswered (a modeled output is handed over when an attempt ends,
    // even by its timeout), and the SDK's retries get answers too.
    let s3 = stream.clone();
    let list = mock!(Client::list_shards).then_http_response(move || {
        if take_one(&s3.failing_lists) {
            return http(500, r#"{"__type":"InternalFailure","message":"fake"}"#);
        }
        let shards: Vec<serde_json::Value> = lock(&s3.shards)
            .iter()
            .filter(|(_, shard)| !shard.gone.load(Ordering::SeqCst))
            .map(|(id, _)| {
                serde_json::json!({
                    "ShardId": id,
                    "HashKeyRange": { "StartingHashKey": "0", "EndingHashKey": "1" },
                    "SequenceNumberRange": { "StartingSequenceNumber": "0" },
                })
            })
            .collect();
        http(200, &serde_json::json!({ "Shards": shards }).to_string())
    });
    let s4 = stream.clone();
    let describe = mock!(Client::describe_stream_summary).then_http_response(move || {
        if take_one(&s4.failing_describes) {
            return http(
                400,
                r#"{"__type":"AccessDeniedException","message":"not authorized to perform kinesis:DescribeStreamSummary"}"#,
            );
        }
        let retention_hours = match s4.retention_hours.load(Ordering::SeqCst) {
            0 => 24,
            hours => hours,
        };
        let summary = serde_json::json!({ "StreamDescriptionSummary": {
            "StreamName": "s",
            "StreamARN": "arn:aws:kinesis:us-east-1:0:stream/s",
            "StreamStatus": "ACTIVE",
            "StreamModeDetails": { "StreamMode": "PROVISIONED" },
            "RetentionPeriodHours": retention_hours,
            "StreamCreationTimestamp": 0,
            "EnhancedMonitoring": [{ "ShardLevelMetrics": [] }],
            "OpenShardCount": 1,
        }});
        http(200, &summary.to_string())
    });
    mock_client!(
        aws_sdk_kinesis,
        RuleMode::MatchAny,
        [&iterator, &records, &list, &describe],
        |c| c.retry_config(aws_smithy_types::retry::RetryConfig::disabled())
    )
}

fn s3_client(bucket: Arc<FakeBucket>) -> aws_sdk_s3::Client {
    use aws_sdk_s3::Client;
    use aws_sdk_s3::operation::get_object::GetObjectOutput;
    use aws_sdk_s3::operation::head_bucket::HeadBucketOutput;
    use aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output;
    use aws_sdk_s3::primitives::ByteStream;
    use aws_sdk_s3::types::Object;

    let b1 = bucket.clone();
    let put = mock!(Client::put_object).then_compute_response(move |input| {
        let key = input.key().unwrap().to_owned();
        lock(&b1.put_attempts).push(key.clone());
        if take_one(&b1.failing_puts) {
            return MockResponse::Http(s3_error(503, "SlowDown"));
        }
        match lock(&b1.puts_left).as_mut() {
            Some(0) => return MockResponse::Http(s3_error(503, "SlowDown")),
            Some(left) => *left -= 1,
            None => {}
        }
        if let Some(hook) = lock(&b1.on_put).as_ref() {
            let creates = !lock(&b1.objects).contains_key(&key);
            hook(&key, creates);
        }
        let mut objects = lock(&b1.objects);
        if input.if_none_match() == Some("*") && objects.contains_key(&key) {
            return MockResponse::Http(s3_error(412, "PreconditionFailed"));
        }
        let body = Bytes::copy_from_slice(input.body().bytes().expect("in-memory body"));
        lock(&b1.metadata).insert(key.clone(), input.metadata().cloned().unwrap_or_default());
        objects.insert(key, body);
        // In HTTP, like ListShards above: a cut `Link` leaves it unanswered.
        MockResponse::Http(http(200, ""))
    });
    let b2 = bucket.clone();
    let get = mock!(Client::get_object).then_compute_response(move |input| {
        let key = input.key().unwrap();
        if let Some(hook) = lock(&b2.on_get).as_ref() {
            hook(key);
        }
        match lock(&b2.objects).get(key) {
            Some(body) => {
                let body = match input.range() {
                    Some(range) => ranged(body, range),
                    None => body.clone(),
                };
                MockResponse::Output(
                    GetObjectOutput::builder()
                        .content_length(i64::try_from(body.len()).unwrap())
                        .body(ByteStream::from(body))
                        .set_metadata(lock(&b2.metadata).get(key).cloned())
                        .build(),
                )
            }
            None => MockResponse::Http(s3_error(404, "NoSuchKey")),
        }
    });
    let b3 = bucket.clone();
    let list = mock!(Client::list_objects_v2).then_compute_output(move |input| {
        let prefix = input.prefix().unwrap_or("");
        lock(&b3.lists).push(prefix.to_owned());
        let after = input.continuation_token().unwrap_or("");
        let objects = lock(&b3.objects);
        let keys: Vec<&String> = objects
            .keys()
            .filter(|k| k.starts_with(prefix) && k.as_str() > after)
            .take(1000)
            .collect();
        let truncated = keys.len() == 1000;
        let mut output = ListObjectsV2Output::builder().is_truncated(truncated);
        if truncated {
            output = output.next_continuation_token(keys[keys.len() - 1].clone());
        }
        for key in keys {
            output = output.contents(Object::builder().key(key).build());
        }
        output.build()
    });
    let head = mock!(Client::head_bucket).then_output(|| HeadBucketOutput::builder().build());
    let b4 = bucket.clone();
    let head_object = mock!(Client::head_object).then_compute_response(move |input| {
        let key = input.key().unwrap();
        let Some(length) = lock(&b4.objects).get(key).map(Bytes::len) else {
            return MockResponse::Http(s3_error(404, "NotFound"));
        };
        let metadata = lock(&b4.metadata).get(key).cloned().unwrap_or_default();
        MockResponse::Output(
            aws_sdk_s3::operation::head_object::HeadObjectOutput::builder()
                .content_length(i64::try_from(length).unwrap())
                .set_metadata(Some(metadata))
                .build(),
        )
    });
    mock_client!(
        aws_sdk_s3,
        RuleMode::MatchAny,
        [&put, &get, &list, &head, &head_object],
        |c| c.retry_config(aws_smithy_types::retry::RetryConfig::disabled())
    )
}
