use std::sync::Mutex;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::operation::get_records::GetRecordsOutput;
use aws_sdk_kinesis::operation::get_shard_iterator::GetShardIteratorOutput;
use aws_sdk_kinesis::operation::list_shards::ListShardsOutput;
use aws_sdk_kinesis::operation::subscribe_to_shard::{
    SubscribeToShardError, SubscribeToShardInput, SubscribeToShardOutput,
};
use aws_sdk_kinesis::types::{HashKeyRange, Record, SequenceNumberRange, Shard};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use aws_smithy_types::Blob;

use super::*;
use crate::aws::ShardInfo;
use crate::aws::kinesis::StreamRef;
use crate::fake_aws::event_stream::{FakeRecord, body, cut_off, event, exception, response};
use crate::fake_aws::http;

const SHARD: &str = "shardId-000000000000";
const CONSUMER_ARN: &str =
    "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/shardsink:1700000000";

/// What each SubscribeToShard asked for: the type and the sequence number.
type Asked = Arc<Mutex<Vec<String>>>;

fn asked_as(input: &SubscribeToShardInput) -> String {
    let position = input.starting_position().expect("a starting position");
    match position.sequence_number() {
        Some(n) => format!("{} {n}", position.r#type().as_str()),
        None => position.r#type().as_str().to_owned(),
    }
}

/// A SubscribeToShard rule that records what it was asked in `asked`.
fn recording(
    asked: &Asked,
) -> aws_smithy_mocks::RuleBuilder<
    SubscribeToShardInput,
    SubscribeToShardOutput,
    SubscribeToShardError,
> {
    let asked = asked.clone();
    mock!(Client::subscribe_to_shard).match_requests(move |input| {
        asked.lock().unwrap().push(asked_as(input));
        true
    })
}

/// A subscription whose body is `messages`, recording what it was asked.
fn subscription(asked: &Asked, messages: Vec<Vec<u8>>) -> Rule {
    let body = messages.concat();
    recording(asked).then_http_response(move || response(body.clone()))
}

/// A SubscribeToShard refused with `error_type`, recording what it was
/// asked.
fn refused(asked: &Asked, error_type: &str) -> Rule {
    refused_with(asked, error_type, "fake")
}

/// A SubscribeToShard refused with `error_type` and `message`, recording
/// what it was asked.
fn refused_with(asked: &Asked, error_type: &str, message: &str) -> Rule {
    let body = serde_json::json!({ "__type": error_type, "message": message }).to_string();
    recording(asked).then_http_response(move || http(400, &body))
}

/// GetShardIterator granting an iterator, recording the type and sequence
/// number asked for in `asked`.
fn iterators(asked: &Asked) -> Rule {
    let asked = asked.clone();
    mock!(Client::get_shard_iterator).then_compute_output(move |input| {
        asked.lock().unwrap().push(format!(
            "{} {}",
            input.shard_iterator_type().unwrap().as_str(),
            input.starting_sequence_number().unwrap_or_default()
        ));
        GetShardIteratorOutput::builder()
            .shard_iterator("it")
            .build()
    })
}

/// GetRecords answering the records `numbers`, caught up; with a next
/// iterator, or without one (`SHARD_END`).
fn page(numbers: &'static [&'static str], next_iterator: bool) -> Rule {
    mock!(Client::get_records).then_output(move || {
        let records = numbers.iter().map(|n| {
            Record::builder()
                .sequence_number(*n)
                .data(Blob::new(b"b".to_vec()))
                .partition_key("key")
                .build()
                .unwrap()
        });
        GetRecordsOutput::builder()
            .set_records(Some(records.collect()))
            .set_next_shard_iterator(next_iterator.then(|| "it".to_owned()))
            .millis_behind_latest(0)
            .build()
            .unwrap()
    })
}

/// One framed event.
fn framed(
    records: &[FakeRecord<'_>],
    continuation: Option<&str>,
    millis_behind: i64,
    child_shards: &[(&str, &[&str])],
) -> Vec<u8> {
    body(&[event(records, continuation, millis_behind, child_shards)])
}

fn reader(rules: &[&Rule], start: StartingPosition) -> (FanOutReader, Arc<Metrics>) {
    let client = mock_client!(aws_sdk_kinesis, RuleMode::Sequential, rules, |c| c
        .retry_config(aws_smithy_types::retry::RetryConfig::disabled()));
    let kinesis = Kinesis::new(client, StreamRef::Name("orders".to_owned()));
    let metrics = Arc::new(Metrics::new());
    let reader = FanOutReader::new(
        kinesis,
        CONSUMER_ARN,
        ReadPosition::new(SHARD, start),
        100,
        metrics.clone(),
    );
    (reader, metrics)
}

fn numbers(batch: &ReadBatch) -> Vec<&str> {
    batch
        .records
        .iter()
        .map(|record| record.sequence_number.as_str())
        .collect()
}

fn after(n: &str) -> StartingPosition {
    StartingPosition::AfterSequenceNumber(SequenceNumber::try_from(n.to_owned()).unwrap())
}

/// A metric's sample from the text exposition, 0 when absent.
fn sample(metrics: &Metrics, series: &str) -> f64 {
    metrics
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{series} ")))
        .map_or(0.0, |value| value.parse().unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_renewal_goes_on_after_the_last_continuation_and_reads_nothing_twice() {
    let asked = Asked::default();
    // From the checkpoint 1: asked AT 1 (the check), record 1 skipped. The
    // subscription ends after the event continuing at 3; the renewal asks
    // AFTER 3, unchecked.
    let first = subscription(
        &asked,
        vec![
            framed(&[("1", b"a"), ("2", b"b")], Some("2"), 1_000, &[]),
            framed(&[("3", b"c")], Some("3"), 0, &[]),
        ],
    );
    let second = subscription(&asked, vec![framed(&[("4", b"d")], Some("4"), 0, &[])]);
    let (mut reader, metrics) = reader(&[&first, &second], after("1"));

    let mut read = Vec::new();
    for _ in 0..3 {
        let batch = reader.read().await.unwrap();
        assert!(batch.retention_gap.is_none());
        read.extend(numbers(&batch).into_iter().map(str::to_owned));
    }
    assert_eq!(read, ["2", "3", "4"]);
    assert_eq!(
        *asked.lock().unwrap(),
        ["AT_SEQUENCE_NUMBER 1", "AFTER_SEQUENCE_NUMBER 3"]
    );
    assert_eq!(reader.position(), after("4"));
    let subscriptions = "shardsink_fan_out_subscriptions_total";
    assert_eq!(
        sample(&metrics, &format!("{subscriptions}{{kind=\"opened\"}}")),
        1.0
    );
    assert_eq!(
        sample(&metrics, &format!("{subscriptions}{{kind=\"renewed\"}}")),
        1.0
    );
    assert_eq!(sample(&metrics, "shardsink_fan_out_events_total"), 3.0);
}

#[tokio::test(start_paused = true)]
async fn a_failed_subscription_is_the_caller_s_to_retry_and_goes_on_after_the_continuation() {
    let asked = Asked::default();
    let cut = subscription(
        &asked,
        vec![
            framed(&[("5", b"a")], Some("5"), 0, &[]),
            cut_off(framed(&[("6", b"b")], Some("6"), 0, &[])),
        ],
    );
    let in_use_event = subscription(
        &asked,
        vec![body(&[exception(
            "ResourceInUseException",
            "another subscription",
        )])],
    );
    let in_use = refused(&asked, "ResourceInUseException");
    let limited = refused(&asked, "LimitExceededException");
    let last = subscription(&asked, vec![framed(&[("6", b"b")], Some("6"), 0, &[])]);
    let (mut reader, metrics) = reader(
        &[&cut, &in_use_event, &in_use, &limited, &last],
        StartingPosition::TrimHorizon,
    );

    assert_eq!(numbers(&reader.read().await.unwrap()), ["5"]);
    let err = reader.read().await.unwrap_err();
    assert!(err.is_retriable(), "a cut-off body: {err:?}");
    for _ in 0..2 {
        let err = reader.read().await.unwrap_err();
        assert!(matches!(err, KinesisError::ResourceInUse(_)), "{err:?}");
    }
    let err = reader.read().await.unwrap_err();
    assert!(matches!(err, KinesisError::Throttled(_)), "{err:?}");
    assert_eq!(numbers(&reader.read().await.unwrap()), ["6"]);
    assert_eq!(
        *asked.lock().unwrap(),
        [
            "TRIM_HORIZON",
            "AFTER_SEQUENCE_NUMBER 5",
            "AFTER_SEQUENCE_NUMBER 5",
            "AFTER_SEQUENCE_NUMBER 5",
            "AFTER_SEQUENCE_NUMBER 5",
        ]
    );
    let errors = "shardsink_fan_out_subscription_errors_total";
    assert_eq!(
        sample(&metrics, &format!("{errors}{{cause=\"cut_off\"}}")),
        1.0
    );
    assert_eq!(
        sample(&metrics, &format!("{errors}{{cause=\"resource_in_use\"}}")),
        2.0
    );
    assert_eq!(
        sample(&metrics, &format!("{errors}{{cause=\"throttled\"}}")),
        1.0
    );
    assert_eq!(
        sample(
            &metrics,
            "shardsink_fan_out_subscriptions_total{kind=\"opened\"}"
        ),
        3.0
    );
}

#[tokio::test(start_paused = true)]
async fn the_event_with_child_shards_and_no_continuation_ends_the_shard() {
    let asked = Asked::default();
    let only = subscription(
        &asked,
        vec![
            framed(&[("7", b"a")], Some("7"), 0, &[]),
            framed(
                &[("8", b"b")],
                None,
                0,
                &[("shardId-000000000002", &[SHARD, "shardId-000000000001"])],
            ),
        ],
    );
    let (mut reader, _) = reader(&[&only], StartingPosition::TrimHorizon);
    let batch = reader.read().await.unwrap();
    assert!(!batch.shard_end);
    let last = reader.read().await.unwrap();
    assert_eq!(numbers(&last), ["8"]);
    assert!(last.shard_end);
    assert_eq!(
        last.child_shards,
        [ShardInfo {
            shard_id: "shardId-000000000002".to_owned(),
            parent_shard_ids: vec![SHARD.to_owned(), "shardId-000000000001".to_owned()],
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn an_event_with_no_continuation_and_no_children_does_not_end_the_shard() {
    let asked = Asked::default();
    let only = subscription(&asked, vec![framed(&[("7", b"a")], None, 0, &[])]);
    let (mut reader, _) = reader(&[&only], StartingPosition::TrimHorizon);
    let batch = reader.read().await.unwrap();
    assert!(!batch.shard_end);
    assert_eq!(numbers(&batch), ["7"]);
}

fn listed(closed: bool) -> Rule {
    mock!(Client::list_shards).then_output(move || {
        let range = SequenceNumberRange::builder().starting_sequence_number("1");
        let range = if closed {
            range.ending_sequence_number("9")
        } else {
            range
        };
        ListShardsOutput::builder()
            .shards(
                Shard::builder()
                    .shard_id(SHARD)
                    .hash_key_range(
                        HashKeyRange::builder()
                            .starting_hash_key("0")
                            .ending_hash_key("1")
                            .build()
                            .unwrap(),
                    )
                    .sequence_number_range(range.build().unwrap())
                    .build()
                    .unwrap(),
            )
            .build()
    })
}

#[tokio::test(start_paused = true)]
async fn a_closed_shard_without_child_shards_is_read_to_its_end_by_get_records() {
    let asked = Asked::default();
    // Caught up with no records: ListShards says open at the first look
    // and at the next, 10 s later; the look after waits 20 s and finds the
    // shard closed. The rest is read by GetRecords after the last record
    // delivered, to SHARD_END.
    let mut messages = vec![framed(&[("7", b"a")], Some("7"), 0, &[])];
    messages.extend((0..6).map(|_| framed(&[], Some("7"), 0, &[])));
    let events = subscription(&asked, messages);
    // One rule per answer: a rule serves its answers once, wherever listed.
    let (open, open_again) = (listed(false), listed(false));
    let closed = listed(true);
    let iterators = Asked::default();
    let iterator = self::iterators(&iterators);
    let end = page(&["7"], false);
    let (mut reader, _) = reader(
        &[&events, &open, &open_again, &closed, &iterator, &end],
        StartingPosition::TrimHorizon,
    );
    assert_eq!(numbers(&reader.read().await.unwrap()), ["7"]);
    // First look: open.
    assert!(!reader.read().await.unwrap().shard_end);
    // Within 10 s: no look (a fourth ListShards rule would be asked for).
    assert!(!reader.read().await.unwrap().shard_end);
    tokio::time::advance(CLOSED_SHARD_CHECK_INTERVAL).await;
    // Second look: open; the next waits twice as long.
    assert!(!reader.read().await.unwrap().shard_end);
    tokio::time::advance(CLOSED_SHARD_CHECK_INTERVAL).await;
    assert!(!reader.read().await.unwrap().shard_end);
    assert!(!reader.is_polling(), "not looked again after 10 s");
    tokio::time::advance(CLOSED_SHARD_CHECK_INTERVAL).await;
    assert!(!reader.read().await.unwrap().shard_end);
    assert!(reader.is_polling(), "ListShards said closed");
    let last = reader.read().await.unwrap();
    assert!(last.shard_end, "no NextShardIterator");
    assert!(numbers(&last).is_empty(), "record 7 is not read twice");
    assert_eq!(*iterators.lock().unwrap(), ["AT_SEQUENCE_NUMBER 7"]);
}

#[tokio::test(start_paused = true)]
async fn an_expired_position_is_read_from_trim_horizon_and_the_gap_reported() {
    let asked = Asked::default();
    let expired = refused_with(
        &asked,
        "InvalidArgumentException",
        "StartingSequenceNumber 5 used in SubscribeToShard on shard shardId-000000000000 in stream orders under account 1 is invalid because it is past the trim horizon.",
    );
    let oldest = subscription(&asked, vec![framed(&[("9", b"a")], Some("9"), 0, &[])]);
    let (mut reader, _) = reader(&[&expired, &oldest], after("5"));
    let batch = reader.read().await.unwrap();
    assert_eq!(numbers(&batch), ["9"]);
    assert!(batch.retention_gap.is_some(), "records 6 to 8 were trimmed");
    assert_eq!(
        *asked.lock().unwrap(),
        ["AT_SEQUENCE_NUMBER 5", "TRIM_HORIZON"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_shard_refused_as_in_use_for_a_while_is_polled_then_subscribed_again() {
    let asked = Asked::default();
    let first = subscription(&asked, vec![framed(&[("3", b"a")], Some("3"), 0, &[])]);
    // Refused twice within 30 s: the holder does not let go.
    let (in_use, in_use_again) = (
        refused(&asked, "ResourceInUseException"),
        refused(&asked, "ResourceInUseException"),
    );
    let iterators = Asked::default();
    let iterator = self::iterators(&iterators);
    let page = page(&["3", "4"], true);
    let again = subscription(
        &asked,
        vec![framed(&[("4", b"b"), ("5", b"c")], Some("5"), 0, &[])],
    );
    let (mut reader, metrics) = reader(
        &[&first, &in_use, &in_use_again, &iterator, &page, &again],
        StartingPosition::TrimHorizon,
    );

    assert_eq!(numbers(&reader.read().await.unwrap()), ["3"]);
    let err = reader.read().await.unwrap_err();
    assert!(matches!(err, KinesisError::ResourceInUse(_)), "{err:?}");
    tokio::time::advance(IN_USE_FALLBACK_AFTER - Duration::from_secs(10)).await;
    let err = reader.read().await.unwrap_err();
    assert!(matches!(err, KinesisError::ResourceInUse(_)), "{err:?}");
    assert!(!reader.is_polling(), "refused for 20 s only");
    tokio::time::advance(Duration::from_secs(10)).await;
    // Refused for 30 s: GetRecords after the last record delivered.
    assert_eq!(numbers(&reader.read().await.unwrap()), ["4"]);
    assert!(reader.is_polling());
    assert_eq!(
        sample(&metrics, "shardsink_fan_out_polling_fallbacks_total"),
        1.0
    );
    // Five minutes on: subscribed again after the last record, checked.
    tokio::time::advance(POLLING_FALLBACK_FOR).await;
    assert_eq!(numbers(&reader.read().await.unwrap()), ["5"]);
    assert!(!reader.is_polling());
    assert_eq!(*iterators.lock().unwrap(), ["AT_SEQUENCE_NUMBER 3"]);
    assert_eq!(
        *asked.lock().unwrap(),
        [
            "TRIM_HORIZON",
            "AFTER_SEQUENCE_NUMBER 3",
            "AFTER_SEQUENCE_NUMBER 3",
            "AT_SEQUENCE_NUMBER 4",
        ]
    );
}
