//! SubscribeToShard responses framed as the service sends them: an
//! `application/vnd.amazon.eventstream` body of messages, each with the
//! `:message-type`, `:event-type` / `:exception-type` and `:content-type`
//! headers and a JSON payload ([Event Stream Encoding]). `aws-smithy-mocks`
//! cannot build an event-stream output with `then_output`; serve these with
//! `then_http_response` instead.
//!
//! [Event Stream Encoding]: https://docs.aws.amazon.com/AmazonS3/latest/API/RESTSelectObjectAppendix.html

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use serde_json::{Value, json};

/// One record of an event: sequence number and data.
pub type FakeRecord<'a> = (&'a str, &'a [u8]);

/// A message with the three string headers and a JSON payload.
fn message(message_type: &str, type_header: (&str, &str), payload: &Value) -> Message {
    let header = |name: &str, value: &str| {
        Header::new(
            name.to_owned(),
            HeaderValue::String(value.to_owned().into()),
        )
    };
    Message::new(payload.to_string().into_bytes())
        .add_header(header(":message-type", message_type))
        .add_header(header(type_header.0, type_header.1))
        .add_header(header(":content-type", "application/json"))
}

/// The `initial-response` event some servers send first (an empty JSON
/// object); the SDK consumes it inside `send()`.
pub fn initial_response() -> Message {
    message("event", (":event-type", "initial-response"), &json!({}))
}

/// A `SubscribeToShardEvent`. `continuation: None` sends a JSON null, as
/// the service does when the shard ended; `child_shards` are (shard id,
/// parent shard ids).
pub fn event(
    records: &[FakeRecord<'_>],
    continuation: Option<&str>,
    millis_behind: i64,
    child_shards: &[(&str, &[&str])],
) -> Message {
    let records: Vec<Value> = records
        .iter()
        .map(|(sequence_number, data)| {
            json!({
                "SequenceNumber": sequence_number,
                "Data": aws_smithy_types::base64::encode(data),
                "PartitionKey": "key",
                "ApproximateArrivalTimestamp": 1_700_000_000.5,
            })
        })
        .collect();
    let mut payload = json!({
        "Records": records,
        "ContinuationSequenceNumber": continuation,
        "MillisBehindLatest": millis_behind,
    });
    if !child_shards.is_empty() {
        payload["ChildShards"] = child_shards
            .iter()
            .map(|(shard_id, parents)| {
                json!({
                    "ShardId": shard_id,
                    "ParentShards": parents,
                    "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "1"},
                })
            })
            .collect();
    }
    message("event", (":event-type", "SubscribeToShardEvent"), &payload)
}

/// An exception event, e.g. `ResourceInUseException`: it ends the
/// subscription with that error.
pub fn exception(exception_type: &str, text: &str) -> Message {
    message(
        "exception",
        (":exception-type", exception_type),
        &json!({ "message": text }),
    )
}

/// The body: each message framed (prelude, headers, payload, CRCs).
pub fn body(messages: &[Message]) -> Vec<u8> {
    let mut body = Vec::new();
    for message in messages {
        write_message_to(message, &mut body).unwrap();
    }
    body
}

/// `body` cut off in the middle of its last message, as a dropped
/// connection leaves it.
pub fn cut_off(mut body: Vec<u8>) -> Vec<u8> {
    body.truncate(body.len() - 5);
    body
}

/// A 200 response carrying `body`.
pub fn response(body: Vec<u8>) -> HttpResponse {
    HttpResponse::new(StatusCode::try_from(200).unwrap(), SdkBody::from(body))
}
