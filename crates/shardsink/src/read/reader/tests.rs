use std::sync::{Arc, Mutex};

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::operation::get_records::{GetRecordsError, GetRecordsOutput};
use aws_sdk_kinesis::operation::get_shard_iterator::{
    GetShardIteratorInput, GetShardIteratorOutput,
};
use aws_sdk_kinesis::types::Record;
use aws_sdk_kinesis::types::error::ExpiredIteratorException;
use aws_smithy_mocks::{MockResponse, Rule, RuleMode, mock, mock_client};
use aws_smithy_types::error::ErrorMetadata;
use aws_smithy_types::retry::RetryConfig;
use aws_smithy_types::{Blob, DateTime};

use chrono::Utc;
use sequence_range::SequenceNumber;

use super::*;
use crate::aws::kinesis::StreamRef;

const SHARD: &str = "shardId-000000000000";
const DAY: Duration = Duration::from_secs(24 * 3_600);

/// What GetShardIterator was asked, in order: the iterator type and
/// the sequence number, if any.
type Asked = Arc<Mutex<Vec<String>>>;

fn asked_as(input: &GetShardIteratorInput) -> String {
    let kind = input.shard_iterator_type().map_or("", |kind| kind.as_str());
    match input.starting_sequence_number() {
        Some(n) => format!("{kind} {n}"),
        None => kind.to_owned(),
    }
}

/// GetShardIterator granting an iterator for whatever it is asked.
fn grants(asked: &Asked) -> Rule {
    let asked = asked.clone();
    mock!(Client::get_shard_iterator).then_compute_output(move |input| {
        asked.lock().unwrap().push(asked_as(input));
        GetShardIteratorOutput::builder()
            .shard_iterator("it")
            .build()
    })
}

/// GetShardIterator rejecting the sequence number as Kinesis does once
/// retention trimmed it.
fn rejects_as_expired(asked: &Asked) -> Rule {
    let asked = asked.clone();
    mock!(Client::get_shard_iterator).then_compute_response(move |input| {
        asked.lock().unwrap().push(asked_as(input));
        MockResponse::Http(crate::fake_aws::http(
            400,
            r#"{"__type":"InvalidArgumentException","message":"StartingSequenceNumber 5 used in GetShardIterator on shard shardId-000000000000 in stream s under account 1 is invalid because it is past the trim horizon."}"#,
        ))
    })
}

fn record(sequence_number: u64, arrival_millis: i64) -> Record {
    Record::builder()
        .sequence_number(sequence_number.to_string())
        .approximate_arrival_timestamp(DateTime::from_millis(arrival_millis))
        .data(Blob::new(b"x".to_vec()))
        .partition_key("pk")
        .build()
        .unwrap()
}

/// GetRecords returning `records` (sequence number, arrival ms) with
/// `MillisBehindLatest` `behind`, the shard still open.
fn page(records: &[(u64, i64)], behind: i64) -> Rule {
    let records: Vec<Record> = records.iter().map(|&(n, at)| record(n, at)).collect();
    mock!(Client::get_records).then_output(move || {
        GetRecordsOutput::builder()
            .set_records(Some(records.clone()))
            .next_shard_iterator("it")
            .millis_behind_latest(behind)
            .build()
            .unwrap()
    })
}

fn expired_iterator() -> Rule {
    mock!(Client::get_records).then_error(|| {
        GetRecordsError::ExpiredIteratorException(
            ExpiredIteratorException::builder()
                .meta(
                    ErrorMetadata::builder()
                        .code("ExpiredIteratorException")
                        .build(),
                )
                .build(),
        )
    })
}

/// A reader of `start` over a Kinesis answering `rules` in order.
fn reader(rules: &[Rule], start: StartingPosition) -> ShardReader {
    let client = mock_client!(aws_sdk_kinesis, RuleMode::Sequential, rules, |c| c
        .retry_config(RetryConfig::disabled()));
    let kinesis = Kinesis::new(client, StreamRef::Name("s".to_owned()));
    ShardReader::new(kinesis, SHARD, start, 100)
}

fn after(n: u64) -> StartingPosition {
    StartingPosition::AfterSequenceNumber(SequenceNumber::from(n))
}

/// The sequence numbers a read returned.
fn numbers(batch: &ReadBatch) -> Vec<String> {
    batch
        .records
        .iter()
        .map(|record| record.sequence_number.to_string())
        .collect()
}

/// The gap a read carried: the expired position and the first record
/// left, if any.
fn gap(batch: &ReadBatch) -> Option<(StartingPosition, Option<(String, i64)>)> {
    batch.retention_gap.as_ref().map(|gap| {
        assert_eq!(gap.shard_id, SHARD);
        assert!(!gap.shard_left_stream);
        let first = gap
            .first_retained
            .as_ref()
            .map(|(n, arrival)| (n.to_string(), *arrival));
        (gap.expired.clone(), first)
    })
}

/// Reads 5 and 9, meets an expired iterator, and reads again from a
/// fresh iterator answering `renewed`: that read, and what
/// GetShardIterator was asked.
async fn renewed_after_an_expired_iterator(renewed: &[(u64, i64)]) -> (ReadBatch, Vec<String>) {
    let asked = Asked::default();
    let mut reader = reader(
        &[
            grants(&asked),
            page(&[(5, 1), (9, 2)], 1_000),
            expired_iterator(),
            grants(&asked),
            page(renewed, 0),
        ],
        StartingPosition::TrimHorizon,
    );
    let batch = reader.read().await.unwrap();
    assert_eq!(numbers(&batch), ["5", "9"]);
    assert!(matches!(
        reader.read().await,
        Err(KinesisError::ExpiredIterator)
    ));
    let batch = reader.read().await.unwrap();
    let asked = asked.lock().unwrap().clone();
    (batch, asked)
}

#[tokio::test]
async fn resumes_at_the_last_record_when_the_iterator_expires_and_skips_it() {
    let (batch, asked) = renewed_after_an_expired_iterator(&[(9, 2), (12, 3)]).await;
    assert_eq!(numbers(&batch), ["12"], "9 is not returned twice");
    assert_eq!(gap(&batch), None);
    assert_eq!(asked, ["TRIM_HORIZON", "AT_SEQUENCE_NUMBER 9"]);
}

#[tokio::test]
async fn a_last_record_trimmed_under_an_expired_iterator_is_a_gap() {
    let (batch, _) = renewed_after_an_expired_iterator(&[(12, 3)]).await;
    assert_eq!(numbers(&batch), ["12"]);
    assert_eq!(gap(&batch), Some((after(9), Some(("12".to_owned(), 3)))));
}

#[tokio::test]
async fn a_position_rejected_as_expired_is_a_gap_when_the_oldest_record_is_past_it() {
    let asked = Asked::default();
    let mut reader = reader(
        &[
            rejects_as_expired(&asked),
            grants(&asked),
            page(&[(9, 7), (12, 8)], 0),
        ],
        after(5),
    );
    let batch = reader.read().await.unwrap();
    assert_eq!(numbers(&batch), ["9", "12"]);
    assert_eq!(gap(&batch), Some((after(5), Some(("9".to_owned(), 7)))));
    assert_eq!(
        *asked.lock().unwrap(),
        ["AT_SEQUENCE_NUMBER 5", "TRIM_HORIZON"]
    );
}

#[tokio::test]
async fn a_position_rejected_but_still_there_loses_and_repeats_nothing() {
    let asked = Asked::default();
    let mut reader = reader(
        &[
            rejects_as_expired(&asked),
            grants(&asked),
            page(&[(3, 1), (5, 2), (9, 3)], 0),
        ],
        after(5),
    );
    let batch = reader.read().await.unwrap();
    assert_eq!(numbers(&batch), ["9"]);
    assert_eq!(gap(&batch), None);
}

#[tokio::test]
async fn an_iterator_granted_at_a_trimmed_position_is_a_gap_when_a_later_record_comes_first() {
    let asked = Asked::default();
    let mut reader = reader(&[grants(&asked), page(&[(9, 7), (12, 8)], 0)], after(5));
    let batch = reader.read().await.unwrap();
    assert_eq!(numbers(&batch), ["9", "12"]);
    assert_eq!(gap(&batch), Some((after(5), Some(("9".to_owned(), 7)))));
    assert_eq!(*asked.lock().unwrap(), ["AT_SEQUENCE_NUMBER 5"]);
}

#[tokio::test]
async fn empty_pages_then_a_later_record_is_a_gap_found_on_that_record() {
    let asked = Asked::default();
    let mut reader = reader(
        &[
            grants(&asked),
            page(&[], 60_000),
            page(&[], 60_000),
            page(&[(9, 7)], 0),
        ],
        after(5),
    );
    for _ in 0..2 {
        let batch = reader.read().await.unwrap();
        assert!(batch.records.is_empty());
        assert_eq!(
            gap(&batch),
            None,
            "an empty page behind the tip proves nothing"
        );
    }
    let batch = reader.read().await.unwrap();
    assert_eq!(numbers(&batch), ["9"]);
    assert_eq!(gap(&batch), Some((after(5), Some(("9".to_owned(), 7)))));
}

#[tokio::test]
async fn empty_pages_then_caught_up_with_nothing_is_a_gap_to_the_end() {
    let asked = Asked::default();
    let mut reader = reader(
        &[
            grants(&asked),
            page(&[], 60_000),
            page(&[], 0),
            page(&[(9, 7)], 0),
        ],
        after(5),
    );
    let batch = reader.read().await.unwrap();
    assert_eq!(gap(&batch), None);
    let batch = reader.read().await.unwrap();
    assert_eq!(gap(&batch), Some((after(5), None)));
    let batch = reader.read().await.unwrap();
    assert_eq!(numbers(&batch), ["9"]);
    assert_eq!(gap(&batch), None, "one gap, reported once");
}

#[tokio::test]
async fn the_position_s_own_record_first_is_no_gap_and_is_not_returned_again() {
    let asked = Asked::default();
    let mut reader = reader(&[grants(&asked), page(&[(5, 1), (9, 2)], 0)], after(5));
    let batch = reader.read().await.unwrap();
    assert_eq!(numbers(&batch), ["9"]);
    assert_eq!(gap(&batch), None);
    assert_eq!(*asked.lock().unwrap(), ["AT_SEQUENCE_NUMBER 5"]);
}

#[tokio::test]
async fn records_before_the_position_are_skipped_and_prove_nothing_was_trimmed() {
    // A server that starts at the trim horizon though the position is
    // still there.
    let asked = Asked::default();
    let mut reader = reader(
        &[
            grants(&asked),
            page(&[(2, 1), (3, 2)], 1_000),
            page(&[(5, 3), (9, 4)], 0),
        ],
        after(5),
    );
    let batch = reader.read().await.unwrap();
    assert!(batch.records.is_empty());
    assert_eq!(gap(&batch), None);
    let batch = reader.read().await.unwrap();
    assert_eq!(numbers(&batch), ["9"]);
    assert_eq!(gap(&batch), None);
}

#[tokio::test]
async fn a_pending_batch_is_read_from_its_first_record_and_its_absence_is_a_gap() {
    let first = StartingPosition::AtSequenceNumber(SequenceNumber::from(5u64));
    let asked = Asked::default();
    let mut present = reader(&[grants(&asked), page(&[(5, 1), (9, 2)], 0)], first.clone());
    let batch = present.read().await.unwrap();
    assert_eq!(
        numbers(&batch),
        ["5", "9"],
        "the batch's first record is returned"
    );
    assert_eq!(gap(&batch), None);

    let mut missing = reader(&[grants(&asked), page(&[(9, 2)], 0)], first.clone());
    let batch = missing.read().await.unwrap();
    assert_eq!(numbers(&batch), ["9"]);
    assert_eq!(gap(&batch), Some((first, Some(("9".to_owned(), 2)))));
    assert_eq!(
        *asked.lock().unwrap(),
        ["AT_SEQUENCE_NUMBER 5", "AT_SEQUENCE_NUMBER 5"]
    );
}

/// A start time `age` before now, as ms since the epoch and a position.
fn started_ago(age: Duration) -> (i64, StartingPosition) {
    let start = Utc::now() - age;
    (
        start.timestamp_millis(),
        StartingPosition::AtTimestamp(start),
    )
}

#[tokio::test]
async fn a_start_time_past_the_retention_with_older_records_left_is_no_gap() {
    let (start, position) = started_ago(2 * DAY);
    let asked = Asked::default();
    let mut reader = reader(
        &[grants(&asked), page(&[(1, start - 1), (2, start)], 0)],
        position,
    )
    .with_stream_retention(Some(DAY));
    let batch = reader.read().await.unwrap();
    assert_eq!(
        numbers(&batch),
        ["2"],
        "records before the start are skipped"
    );
    assert_eq!(gap(&batch), None);
    assert_eq!(*asked.lock().unwrap(), ["TRIM_HORIZON"]);
}

#[tokio::test]
async fn a_start_time_past_the_retention_whose_oldest_record_is_after_it_is_a_gap() {
    let (start, position) = started_ago(2 * DAY);
    let asked = Asked::default();
    let mut reader = reader(
        &[grants(&asked), page(&[(2, start + 1)], 0)],
        position.clone(),
    )
    .with_stream_retention(Some(DAY));
    let batch = reader.read().await.unwrap();
    assert_eq!(numbers(&batch), ["2"]);
    assert_eq!(
        gap(&batch),
        Some((position, Some(("2".to_owned(), start + 1))))
    );
    assert_eq!(*asked.lock().unwrap(), ["TRIM_HORIZON"]);
}

#[tokio::test]
async fn a_start_time_past_the_retention_with_nothing_left_is_a_gap_to_the_end() {
    let (_, position) = started_ago(2 * DAY);
    let asked = Asked::default();
    let mut reader =
        reader(&[grants(&asked), page(&[], 0)], position.clone()).with_stream_retention(Some(DAY));
    let batch = reader.read().await.unwrap();
    assert_eq!(gap(&batch), Some((position, None)));
}

#[tokio::test]
async fn a_start_time_within_the_retention_is_read_at_it_unchecked() {
    let (start, position) = started_ago(DAY / 2);
    let asked = Asked::default();
    let mut reader = reader(&[grants(&asked), page(&[(2, start + 1)], 0)], position)
        .with_stream_retention(Some(DAY));
    let batch = reader.read().await.unwrap();
    assert_eq!(numbers(&batch), ["2"]);
    assert_eq!(gap(&batch), None);
    assert_eq!(*asked.lock().unwrap(), ["AT_TIMESTAMP"]);
}
