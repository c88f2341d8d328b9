use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
use aws_sdk_dynamodb::operation::update_item::{
    UpdateItemError, UpdateItemInput, UpdateItemOutput,
};
use aws_sdk_dynamodb::types::error::{
    ConditionalCheckFailedException, ProvisionedThroughputExceededException,
    ResourceNotFoundException,
};
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use aws_smithy_types::error::ErrorMetadata;
use sequence_range::SequenceNumber;

use super::*;
use crate::test_util::parse_update_item;

const SHARD: &str = "shardId-000000000007";

fn meta(code: &str) -> ErrorMetadata {
    ErrorMetadata::builder().code(code).message("mock").build()
}

fn condition_failed() -> UpdateItemError {
    UpdateItemError::ConditionalCheckFailedException(
        ConditionalCheckFailedException::builder()
            .message("The conditional request failed")
            .meta(meta("ConditionalCheckFailedException"))
            .build(),
    )
}

fn held(counter: u64, checkpoint: Checkpoint) -> Lease {
    let mut lease = Lease::new(SHARD, checkpoint, vec![]);
    lease.lease_owner = Some("worker-a".to_owned());
    lease.lease_counter = counter;
    lease
}

fn seq(n: u64) -> Checkpoint {
    Checkpoint::SequenceNumber(SequenceNumber::from(n))
}

fn get_output(lease: Option<Lease>) -> GetItemOutput {
    GetItemOutput::builder()
        .set_item(lease.map(|l| l.to_item()))
        .build()
}

/// The value an update's condition compares `attribute` with, e.g. the
/// expected `leaseCounter`.
fn condition_value(input: &UpdateItemInput, attribute: &str) -> Option<AttributeValue> {
    let (_, condition) = parse_update_item(input).ok()?;
    condition.expected(attribute).cloned()
}

/// The value an update sets `attribute` to.
fn update_value(input: &UpdateItemInput, attribute: &str) -> Option<AttributeValue> {
    let (update, _) = parse_update_item(input).ok()?;
    update.value_of(attribute).cloned()
}

#[tokio::test]
async fn checkpoint_is_conditional_on_owner_counter_and_previous_checkpoint() {
    let lease = held(41, seq(100));
    let mut expected = lease.clone();
    expected.lease_counter = 42;
    expected.checkpoint = seq(200);
    let returned = expected.clone();
    let update = mock!(Client::update_item)
        .match_requests(|input| {
            condition_value(input, "leaseCounter") == Some(AttributeValue::N("41".into()))
                && condition_value(input, "leaseOwner")
                    == Some(AttributeValue::S("worker-a".into()))
                && condition_value(input, "checkpoint") == Some(AttributeValue::S("100".into()))
                && input
                    .update_expression()
                    .is_some_and(|u| u.contains("REMOVE"))
        })
        .then_output(move || {
            UpdateItemOutput::builder()
                .set_attributes(Some(returned.to_item()))
                .build()
        });
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update]);
    let table = LeaseTable::new(client, "leases");
    let after = table
        .checkpoint(&lease, &seq(200), &WriteToken::random())
        .await
        .unwrap();
    assert_eq!(after, expected);
    assert_eq!(update.num_calls(), 1);
}

/// A row re-created and taken by another process with the same worker
/// id can reach this holder's counter; the token of the holder's last
/// write still tells them apart.
#[tokio::test]
async fn owner_writes_are_conditional_on_the_last_write_token() {
    let mut lease = held(7, seq(100));
    lease.last_write_token = Some("0123456789abcdef".to_owned());
    let update = mock!(Client::update_item)
        .match_requests(|input| {
            condition_value(input, "lastWriteToken")
                == Some(AttributeValue::S("0123456789abcdef".into()))
                && condition_value(input, "leaseCounter") == Some(AttributeValue::N("7".into()))
        })
        .then_error(condition_failed);
    let mut twin = lease.clone();
    twin.last_write_token = Some("fedcba9876543210".to_owned());
    let get = mock!(Client::get_item).then_output(move || get_output(Some(twin.clone())));
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update, &get]);
    let table = LeaseTable::new(client, "leases");
    let err = table
        .renew_lease(&lease, &WriteToken::random())
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    assert_eq!(update.num_calls(), 1, "the condition names the token");
}

#[tokio::test]
async fn condition_failure_with_another_owner_is_lease_lost() {
    let lease = held(5, seq(100));
    let mut stolen = lease.clone();
    stolen.lease_owner = Some("worker-b".to_owned());
    stolen.lease_counter = 6;
    let update = mock!(Client::update_item).then_error(condition_failed);
    let get = mock!(Client::get_item).then_output(move || get_output(Some(stolen.clone())));
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update, &get]);
    let table = LeaseTable::new(client, "leases");
    let err = table
        .checkpoint(&lease, &seq(200), &WriteToken::random())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LeaseError::LeaseLost { ref shard_id } if shard_id == SHARD),
        "{err:?}"
    );
    assert_eq!(get.num_calls(), 1, "the row is re-read once");
}

#[tokio::test]
async fn condition_failure_after_an_applied_retry_is_success() {
    // The first attempt applied but its response was lost; the SDK's retry
    // then failed the condition. The re-read shows our own write (our
    // token).
    let (applied, update, get) = write_then_reread(true);
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update, &get]);
    let table = LeaseTable::new(client, "leases");
    let after = table
        .checkpoint(&held(5, seq(100)), &seq(200), &WriteToken::random())
        .await
        .unwrap();
    assert_eq!(after.checkpoint, applied.checkpoint);
    assert_eq!(after.lease_counter, 6);
}

#[tokio::test]
async fn the_same_effect_written_by_another_process_is_not_adopted() {
    // Another process with the same worker id made the same-looking
    // write (same owner, counter + 1, same checkpoint) with its own token:
    // this write did not apply and the lease is not ours.
    let (_, update, get) = write_then_reread(false);
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update, &get]);
    let table = LeaseTable::new(client, "leases");
    let err = table
        .checkpoint(&held(5, seq(100)), &seq(200), &WriteToken::random())
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err:?}");
}

/// A checkpoint write 100 → 200 that fails its condition, and a re-read
/// row showing that effect, carrying the write's own token or another.
fn write_then_reread(own_token: bool) -> (Lease, aws_smithy_mocks::Rule, aws_smithy_mocks::Rule) {
    let sent_token = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let (record, read) = (sent_token.clone(), sent_token);
    let update = mock!(Client::update_item)
        .match_requests(move |input| {
            let token =
                update_value(input, "lastWriteToken").and_then(|value| value.as_s().ok().cloned());
            *record.lock().unwrap() = token;
            true
        })
        .then_error(condition_failed);
    let mut applied = held(6, seq(200));
    applied.lease_counter = 6;
    let row = applied.clone();
    let get = mock!(Client::get_item).then_output(move || {
        let mut row = row.clone();
        let sent = read
            .lock()
            .unwrap()
            .clone()
            .expect("the write carried a token");
        row.last_write_token = Some(if own_token {
            sent
        } else {
            "another-process".to_owned()
        });
        get_output(Some(row))
    });
    (applied, update, get)
}

#[tokio::test]
async fn checkpoint_moved_by_someone_else_is_a_conflict() {
    let lease = held(5, seq(100));
    let mut edited = lease.clone();
    edited.checkpoint = seq(150);
    let update = mock!(Client::update_item).then_error(condition_failed);
    let get = mock!(Client::get_item).then_output(move || get_output(Some(edited.clone())));
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update, &get]);
    let table = LeaseTable::new(client, "leases");
    match table
        .checkpoint(&lease, &seq(200), &WriteToken::random())
        .await
        .unwrap_err()
    {
        LeaseError::CheckpointConflict {
            shard_id,
            expected,
            actual,
        } => {
            assert_eq!(shard_id, SHARD);
            assert_eq!(expected, seq(100));
            assert_eq!(actual, seq(150));
        }
        other => panic!("expected CheckpointConflict, got {other:?}"),
    }
}

#[tokio::test]
async fn a_deleted_row_is_lease_lost() {
    let update = mock!(Client::update_item).then_error(condition_failed);
    let get = mock!(Client::get_item).then_output(|| get_output(None));
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update, &get]);
    let table = LeaseTable::new(client, "leases");
    let err = table
        .renew_lease(&held(1, Checkpoint::TrimHorizon), &WriteToken::random())
        .await
        .unwrap_err();
    assert!(err.is_lease_lost());
}

#[tokio::test]
async fn throttling_is_a_retriable_error_not_a_lost_lease() {
    let update = mock!(Client::update_item).then_error(|| {
        UpdateItemError::ProvisionedThroughputExceededException(
            ProvisionedThroughputExceededException::builder()
                .message("slow down")
                .meta(meta("ProvisionedThroughputExceededException"))
                .build(),
        )
    });
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update], |c| c
        .retry_config(aws_smithy_types::retry::RetryConfig::disabled()));
    let table = LeaseTable::new(client, "leases");
    let err = table
        .renew_lease(&held(1, Checkpoint::TrimHorizon), &WriteToken::random())
        .await
        .unwrap_err();
    assert!(err.is_retriable(), "{err:?}");
    assert!(!err.is_lease_lost());
}

#[tokio::test]
async fn a_missing_table_is_reported_as_such() {
    let update = mock!(Client::update_item).then_error(|| {
        UpdateItemError::ResourceNotFoundException(
            ResourceNotFoundException::builder()
                .message("Requested resource not found")
                .meta(meta("ResourceNotFoundException"))
                .build(),
        )
    });
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update]);
    let table = LeaseTable::new(client, "leases");
    let err = table
        .renew_lease(&held(1, Checkpoint::TrimHorizon), &WriteToken::random())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LeaseError::TableMissing { ref table } if table == "leases"),
        "{err:?}"
    );
}

#[tokio::test]
async fn take_is_conditional_on_the_observed_counter_and_owner() {
    let mut observed = held(9, seq(100));
    observed.lease_owner = Some("worker-dead".to_owned());
    let mut taken = observed.clone();
    taken.lease_owner = Some("worker-a".to_owned());
    taken.lease_counter = 10;
    taken.owner_switches_since_checkpoint = 1;
    let row = taken.clone();
    let update = mock!(Client::update_item)
        .match_requests(|input| {
            condition_value(input, "leaseCounter") == Some(AttributeValue::N("9".into()))
                && condition_value(input, "leaseOwner")
                    == Some(AttributeValue::S("worker-dead".into()))
        })
        .then_output(move || {
            UpdateItemOutput::builder()
                .set_attributes(Some(row.to_item()))
                .build()
        });
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update]);
    let table = LeaseTable::new(client, "leases");
    assert_eq!(
        table.take_lease(&observed, "worker-a").await.unwrap(),
        taken
    );
}

#[tokio::test]
async fn take_records_the_failover_time_and_checks_the_creation_token() {
    let mut observed = held(0, Checkpoint::TrimHorizon);
    observed.lease_owner = None;
    observed.creation_token = Some("created-once".to_owned());
    let mut taken = observed.clone();
    taken.lease_owner = Some("worker-a".to_owned());
    taken.lease_counter = 1;
    taken.owner_failover_time = Some(Duration::from_secs(30));
    let row = taken.clone();
    let update = mock!(Client::update_item)
        .match_requests(|input| {
            condition_value(input, attr::CREATION_TOKEN)
                == Some(AttributeValue::S("created-once".into()))
                && update_value(input, attr::OWNER_FAILOVER_TIME_MILLIS)
                    == Some(AttributeValue::N("30000".into()))
        })
        .then_output(move || {
            UpdateItemOutput::builder()
                .set_attributes(Some(row.to_item()))
                .build()
        });
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update]);
    let table = LeaseTable::new(client, "leases").with_failover_time(Duration::from_secs(30));
    assert_eq!(
        table.take_lease(&observed, "worker-a").await.unwrap(),
        taken
    );
    assert_eq!(update.num_calls(), 1);
}
