use aws_sdk_kinesis::operation::describe_stream_consumer::DescribeStreamConsumerOutput;
use aws_sdk_kinesis::operation::register_stream_consumer::RegisterStreamConsumerOutput;
use aws_sdk_kinesis::types::ConsumerDescription;
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_types::event_stream::Message;
use sequence_range::SequenceNumber;

use super::*;
use crate::fake_aws::event_stream::{body, cut_off, event, exception, initial_response, response};
use crate::fake_aws::http;

const STREAM_ARN: &str = "arn:aws:kinesis:us-east-1:123456789012:stream/orders";
const CONSUMER_ARN: &str =
    "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/shardsink:1700000000";
const WAIT: ConsumerWait = ConsumerWait {
    interval: Duration::from_secs(1),
    attempts: 3,
};

fn described(status: ConsumerStatus) -> Rule {
    mock!(Client::describe_stream_consumer)
        .match_requests(|input| {
            input.stream_arn() == Some(STREAM_ARN) && input.consumer_name() == Some("shardsink")
        })
        .then_output(move || {
            DescribeStreamConsumerOutput::builder()
                .consumer_description(
                    ConsumerDescription::builder()
                        .consumer_name("shardsink")
                        .consumer_arn(CONSUMER_ARN)
                        .consumer_status(status.clone())
                        .consumer_creation_timestamp(aws_smithy_types::DateTime::from_secs(0))
                        .stream_arn(STREAM_ARN)
                        .build()
                        .unwrap(),
                )
                .build()
        })
}

/// A Kinesis error response of `error_type`.
fn error(error_type: &'static str) -> impl Fn() -> HttpResponse + Send + Sync + 'static {
    move || {
        http(
            400,
            &format!(r#"{{"__type":"{error_type}","message":"fake"}}"#),
        )
    }
}

fn client(rules: &[&Rule]) -> Client {
    mock_client!(aws_sdk_kinesis, RuleMode::Sequential, rules, |c| c
        .retry_config(aws_smithy_types::retry::RetryConfig::disabled()))
}

#[tokio::test(start_paused = true)]
async fn an_active_consumer_is_only_described() {
    let active = described(ConsumerStatus::Active);
    let client = client(&[&active]);
    let arn = ensure_consumer(&client, STREAM_ARN, "shardsink", WAIT)
        .await
        .unwrap();
    assert_eq!(arn, CONSUMER_ARN);
    assert_eq!(active.num_calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_missing_consumer_is_registered_and_waited_for() {
    let missing = mock!(Client::describe_stream_consumer)
        .then_http_response(error("ResourceNotFoundException"));
    let register = mock!(Client::register_stream_consumer)
        .match_requests(|input| {
            input.stream_arn() == Some(STREAM_ARN) && input.consumer_name() == Some("shardsink")
        })
        .then_output(|| RegisterStreamConsumerOutput::builder().build());
    let creating = described(ConsumerStatus::Creating);
    let active = described(ConsumerStatus::Active);
    let client = client(&[&missing, &register, &creating, &active]);
    let arn = ensure_consumer(&client, STREAM_ARN, "shardsink", WAIT)
        .await
        .unwrap();
    assert_eq!(arn, CONSUMER_ARN);
    let calls = [&missing, &register, &creating, &active].map(Rule::num_calls);
    assert_eq!(calls, [1, 1, 1, 1]);
}

#[tokio::test(start_paused = true)]
async fn a_consumer_registered_by_another_worker_at_the_same_moment_is_fine() {
    let missing = mock!(Client::describe_stream_consumer)
        .then_http_response(error("ResourceNotFoundException"));
    let raced =
        mock!(Client::register_stream_consumer).then_http_response(error("ResourceInUseException"));
    let active = described(ConsumerStatus::Active);
    let client = client(&[&missing, &raced, &active]);
    let arn = ensure_consumer(&client, STREAM_ARN, "shardsink", WAIT)
        .await
        .unwrap();
    assert_eq!(arn, CONSUMER_ARN);
    assert_eq!([&missing, &raced, &active].map(Rule::num_calls), [1, 1, 1]);
}

#[tokio::test(start_paused = true)]
async fn a_consumer_never_active_ends_the_wait_with_an_error() {
    let creating: Vec<Rule> = (0..4)
        .map(|_| described(ConsumerStatus::Creating))
        .collect();
    let client = client(&creating.iter().collect::<Vec<_>>());
    let err = ensure_consumer(&client, STREAM_ARN, "shardsink", WAIT)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            KinesisError::ConsumerNotActive { consumer_name, status, waited }
                if consumer_name == "shardsink" && status == "CREATING"
                    && *waited == Duration::from_secs(3)
        ),
        "{err:?}"
    );
    assert!(err.is_retriable());
    assert!(creating.iter().all(|rule| rule.num_calls() == 1));
}

#[tokio::test(start_paused = true)]
async fn other_register_errors_are_kinesis_errors() {
    let missing = mock!(Client::describe_stream_consumer)
        .then_http_response(error("ResourceNotFoundException"));
    let limited =
        mock!(Client::register_stream_consumer).then_http_response(error("LimitExceededException"));
    let client = client(&[&missing, &limited]);
    let err = ensure_consumer(&client, STREAM_ARN, "shardsink", WAIT)
        .await
        .unwrap_err();
    assert!(matches!(err, KinesisError::Throttled(_)), "{err:?}");
}

/// A subscription whose response body is `body`, opened at
/// `AFTER_SEQUENCE_NUMBER 1`.
async fn subscription(body: Vec<u8>) -> (Subscription, Rule) {
    let rule = mock!(Client::subscribe_to_shard)
        .match_requests(|input| {
            let position = input.starting_position().unwrap();
            input.consumer_arn() == Some(CONSUMER_ARN)
                && input.shard_id() == Some("shardId-000000000000")
                && *position.r#type() == ShardIteratorType::AfterSequenceNumber
                && position.sequence_number() == Some("1")
        })
        .then_http_response(move || response(body.clone()));
    let client = client(&[&rule]);
    let position = StartingPosition::AfterSequenceNumber(SequenceNumber::parse("1").unwrap());
    let subscription = subscribe_to_shard(&client, CONSUMER_ARN, "shardId-000000000000", &position)
        .await
        .unwrap();
    (subscription, rule)
}

/// Every event of `subscription` up to and including the first `End` or
/// `Error`.
async fn drain(subscription: &mut Subscription) -> Vec<FanOutEvent> {
    let mut events = Vec::new();
    loop {
        let event = subscription.next().await;
        let last = !matches!(event, FanOutEvent::Event { .. });
        events.push(event);
        if last {
            return events;
        }
    }
}

/// (sequence numbers, continuation, millis behind, child shards) of an event.
fn summary(event: &FanOutEvent) -> (Vec<String>, Option<String>, i64, Vec<ShardInfo>) {
    match event {
        FanOutEvent::Event {
            records,
            continuation,
            millis_behind,
            child_shards,
        } => (
            records
                .iter()
                .map(|record| record.sequence_number().to_owned())
                .collect(),
            continuation.clone(),
            *millis_behind,
            child_shards.clone(),
        ),
        other => panic!("not an event: {other:?}"),
    }
}

fn three_events() -> Vec<Message> {
    vec![
        event(&[("2", b"a"), ("3", b"b")], Some("3"), 1_000, &[]),
        event(&[], Some("3"), 0, &[]),
        event(&[("4", b"c")], Some("4"), 0, &[]),
    ]
}

#[tokio::test]
async fn events_come_one_at_a_time_with_or_without_an_initial_response() {
    let mut with_initial = vec![initial_response()];
    with_initial.extend(three_events());
    for messages in [three_events(), with_initial] {
        let (mut subscription, rule) = subscription(body(&messages)).await;
        let events = drain(&mut subscription).await;
        assert_eq!(events.len(), 4, "{events:?}");
        assert_eq!(
            summary(&events[0]),
            (
                vec!["2".into(), "3".into()],
                Some("3".into()),
                1_000,
                vec![]
            )
        );
        assert_eq!(summary(&events[1]), (vec![], Some("3".into()), 0, vec![]));
        assert_eq!(
            summary(&events[2]),
            (vec!["4".into()], Some("4".into()), 0, vec![])
        );
        assert!(matches!(events[3], FanOutEvent::End), "{events:?}");
        let FanOutEvent::Event { records, .. } = &events[0] else {
            unreachable!()
        };
        assert_eq!(records[1].data().as_ref(), b"b");
        // The end of the body (the subscription expired) stays the end.
        assert!(matches!(subscription.next().await, FanOutEvent::End));
        assert_eq!(rule.num_calls(), 1);
    }
}

#[tokio::test]
async fn an_empty_body_is_the_end() {
    let (mut subscription, _rule) = subscription(Vec::new()).await;
    assert!(matches!(subscription.next().await, FanOutEvent::End));
}

#[tokio::test]
async fn resource_in_use_is_an_error_the_caller_can_classify() {
    let messages = [
        event(&[("2", b"a")], Some("2"), 0, &[]),
        exception(
            "ResourceInUseException",
            "Another active subscription exists",
        ),
    ];
    let (mut subscription, _rule) = subscription(body(&messages)).await;
    let events = drain(&mut subscription).await;
    assert_eq!(events.len(), 2, "{events:?}");
    let FanOutEvent::Error(err) = &events[1] else {
        panic!("{events:?}")
    };
    assert!(matches!(err, KinesisError::ResourceInUse(_)), "{err:?}");
    assert!(err.is_retriable());
    // Nothing more after an error.
    assert!(matches!(subscription.next().await, FanOutEvent::End));
}

#[tokio::test]
async fn resource_in_use_as_the_first_frame_is_an_error_too() {
    let messages = [exception("ResourceInUseException", "in use")];
    let (mut subscription, _rule) = subscription(body(&messages)).await;
    let event = subscription.next().await;
    assert!(
        matches!(event, FanOutEvent::Error(KinesisError::ResourceInUse(_))),
        "{event:?}"
    );
}

#[tokio::test]
async fn a_cut_off_body_is_a_retriable_error() {
    let messages = [
        event(&[("2", b"a")], Some("2"), 0, &[]),
        event(&[("3", b"b")], Some("3"), 0, &[]),
    ];
    let (mut subscription, _rule) = subscription(cut_off(body(&messages))).await;
    let events = drain(&mut subscription).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(summary(&events[0]).0, vec!["2".to_owned()]);
    let FanOutEvent::Error(err) = &events[1] else {
        panic!("{events:?}")
    };
    assert!(
        matches!(
            err,
            KinesisError::Other {
                retriable: true,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_final_event_has_no_continuation_and_the_child_shards() {
    let messages = [
        event(&[("2", b"a")], Some("2"), 0, &[]),
        event(
            &[("3", b"b")],
            None,
            0,
            &[
                ("shardId-000000000002", &["shardId-000000000000"]),
                (
                    "shardId-000000000003",
                    &["shardId-000000000001", "shardId-000000000000"],
                ),
            ],
        ),
    ];
    let (mut subscription, _rule) = subscription(body(&messages)).await;
    let events = drain(&mut subscription).await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(
        summary(&events[1]),
        (
            vec!["3".to_owned()],
            None,
            0,
            vec![
                ShardInfo {
                    shard_id: "shardId-000000000002".to_owned(),
                    parent_shard_ids: vec!["shardId-000000000000".to_owned()],
                },
                ShardInfo {
                    shard_id: "shardId-000000000003".to_owned(),
                    parent_shard_ids: vec![
                        "shardId-000000000000".to_owned(),
                        "shardId-000000000001".to_owned()
                    ],
                },
            ]
        )
    );
    assert!(matches!(events[2], FanOutEvent::End));
}

#[tokio::test]
async fn subscribe_errors_are_classified() {
    let in_use =
        mock!(Client::subscribe_to_shard).then_http_response(error("ResourceInUseException"));
    let limited =
        mock!(Client::subscribe_to_shard).then_http_response(error("LimitExceededException"));
    let client = client(&[&in_use, &limited]);
    let subscribe = || {
        subscribe_to_shard(
            &client,
            CONSUMER_ARN,
            "shardId-000000000000",
            &StartingPosition::TrimHorizon,
        )
    };
    let err = subscribe().await.unwrap_err();
    assert!(matches!(err, KinesisError::ResourceInUse(_)), "{err:?}");
    let err = subscribe().await.unwrap_err();
    assert!(matches!(err, KinesisError::Throttled(_)), "{err:?}");
}

#[tokio::test]
async fn a_renewal_resubscribes_after_the_last_continuation() {
    // The first subscription ends (expiry) after the event continuing at 3;
    // the second starts AFTER_SEQUENCE_NUMBER 3 and reads on from 4.
    let after = |sequence_number: &'static str| {
        move |input: &aws_sdk_kinesis::operation::subscribe_to_shard::SubscribeToShardInput| {
            input.starting_position().is_some_and(|position| {
                *position.r#type() == ShardIteratorType::AfterSequenceNumber
                    && position.sequence_number() == Some(sequence_number)
            })
        }
    };
    let first_body = body(&[event(&[("2", b"a"), ("3", b"b")], Some("3"), 0, &[])]);
    let second_body = body(&[event(&[("4", b"c")], Some("4"), 0, &[])]);
    let first = mock!(Client::subscribe_to_shard)
        .match_requests(after("1"))
        .then_http_response(move || response(first_body.clone()));
    let second = mock!(Client::subscribe_to_shard)
        .match_requests(after("3"))
        .then_http_response(move || response(second_body.clone()));
    let client = client(&[&first, &second]);
    let mut position = StartingPosition::AfterSequenceNumber(SequenceNumber::parse("1").unwrap());
    let mut read = Vec::new();
    for _ in 0..2 {
        let mut subscription =
            subscribe_to_shard(&client, CONSUMER_ARN, "shardId-000000000000", &position)
                .await
                .unwrap();
        for event in drain(&mut subscription).await {
            if let FanOutEvent::Event {
                records,
                continuation: Some(continuation),
                ..
            } = event
            {
                read.extend(records.iter().map(|r| r.sequence_number().to_owned()));
                position = StartingPosition::AfterSequenceNumber(
                    SequenceNumber::parse(&continuation).unwrap(),
                );
            }
        }
    }
    assert_eq!(read, ["2", "3", "4"]);
    assert_eq!((first.num_calls(), second.num_calls()), (1, 1));
}

#[test]
fn every_starting_position_has_its_type() {
    let sequence_number = SequenceNumber::parse("7").unwrap();
    let cases = [
        (
            StartingPosition::TrimHorizon,
            ShardIteratorType::TrimHorizon,
            None,
        ),
        (StartingPosition::Latest, ShardIteratorType::Latest, None),
        (
            StartingPosition::AtSequenceNumber(sequence_number.clone()),
            ShardIteratorType::AtSequenceNumber,
            Some("7"),
        ),
        (
            StartingPosition::AfterSequenceNumber(sequence_number),
            ShardIteratorType::AfterSequenceNumber,
            Some("7"),
        ),
    ];
    for (position, expected_type, expected_number) in cases {
        let sdk = starting_position(&position).unwrap();
        assert_eq!(
            (sdk.r#type(), sdk.sequence_number()),
            (&expected_type, expected_number)
        );
        assert!(sdk.timestamp().is_none());
    }
    let time = chrono::DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
    let sdk = starting_position(&StartingPosition::AtTimestamp(time)).unwrap();
    assert_eq!(sdk.r#type(), &ShardIteratorType::AtTimestamp);
    assert_eq!(
        sdk.timestamp(),
        Some(&aws_smithy_types::DateTime::from_millis(1_700_000_000_123))
    );
}
