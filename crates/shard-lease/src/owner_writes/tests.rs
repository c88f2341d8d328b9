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

/// A table in memory with `SHARD`'s lease created and taken by `worker-a`.
async fn fake_with_taken_lease() -> (
    std::sync::Arc<crate::test_util::FakeTable>,
    LeaseTable,
    Lease,
) {
    let fake = std::sync::Arc::new(crate::test_util::FakeTable::default());
    let table = LeaseTable::new(crate::test_util::fake_client(fake.clone()), "leases");
    let crate::CreateOutcome::Created(created) = table
        .create_lease(&Lease::new(SHARD, seq(100), vec![]))
        .await
        .unwrap()
    else {
        panic!("the table is empty")
    };
    let taken = table.take_lease(&created, "worker-a").await.unwrap();
    (fake, table, taken)
}

fn entry(n: u32) -> String {
    format!(r#"{{"batch":{n},"files":["s3://b/data/{n}.parquet"]}}"#)
}

fn batch(first: u64, last: u64) -> PendingBatch {
    PendingBatch {
        key: format!("k-{first}-{last}"),
        first: SequenceNumber::from(first),
        last: SequenceNumber::from(last),
    }
}

#[tokio::test]
async fn staged_batches_accumulate_then_a_commit_checkpoints_and_keeps_the_rest() {
    let (_, table, taken) = fake_with_taken_lease().await;
    let held = crate::HeldLease::new(table.clone(), taken, tokio::time::Instant::now());
    held.record_pending_batch(&batch(101, 150)).await.unwrap();
    held.stage_batch(&entry(1)).await.unwrap();
    held.record_pending_batch(&batch(151, 200)).await.unwrap();
    held.stage_batch(&entry(2)).await.unwrap();
    let row = table.get_lease(SHARD).await.unwrap().unwrap();
    assert_eq!(row.staged_batches, [entry(1), entry(2)]);
    assert_eq!(row.pending_batch, None, "staging clears the pending batch");
    assert_eq!(
        row.checkpoint,
        seq(100),
        "staging does not move the checkpoint"
    );
    assert_eq!(row.lease_counter, 5);

    // A commit took the first batch: its end is the new checkpoint.
    held.checkpoint_committed(&seq(150), &[entry(2)])
        .await
        .unwrap();
    let row = table.get_lease(SHARD).await.unwrap().unwrap();
    assert_eq!(row.checkpoint, seq(150));
    assert_eq!(row.staged_batches, [entry(2)]);
    assert_eq!(row.owner_switches_since_checkpoint, 0);
    assert_eq!(row, held.snapshot().await);

    // The next commit took the rest: the attribute goes.
    held.checkpoint_committed(&seq(200), &[]).await.unwrap();
    let row = table.get_lease(SHARD).await.unwrap().unwrap();
    assert_eq!(row.checkpoint, seq(200));
    assert!(row.staged_batches.is_empty());
}

#[tokio::test]
async fn a_commit_checkpoint_leaves_the_pending_batch_of_the_next_batch() {
    let (_, table, taken) = fake_with_taken_lease().await;
    let staged = table
        .stage_batch(&taken, &entry(1), &WriteToken::random())
        .await
        .unwrap();
    let pending = table
        .record_pending_batch(&staged, &batch(151, 200), &WriteToken::random())
        .await
        .unwrap();
    let after = table
        .checkpoint_committed(&pending, &seq(150), &[], &WriteToken::random())
        .await
        .unwrap();
    assert_eq!(after.pending_batch, Some(batch(151, 200)));
    assert!(after.staged_batches.is_empty());
}

#[tokio::test]
async fn a_worker_that_lost_the_lease_stages_nothing() {
    let (fake, table, taken) = fake_with_taken_lease().await;
    let stolen = table.take_lease(&taken, "worker-b").await.unwrap();
    let err = table
        .stage_batch(&taken, &entry(1), &WriteToken::random())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LeaseError::LeaseLost { ref shard_id } if shard_id == SHARD),
        "{err:?}"
    );
    assert!(!fake.items.lock().unwrap()[SHARD].contains_key("stagedBatches"));
    let err = table
        .checkpoint_committed(&taken, &seq(150), &[], &WriteToken::random())
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err:?}");
    assert_eq!(table.get_lease(SHARD).await.unwrap(), Some(stolen));
}

#[tokio::test]
async fn staging_past_the_bound_is_refused_without_a_write() {
    let (_, table, taken) = fake_with_taken_lease().await;
    let big = "x".repeat(MAX_STAGED_BYTES - 10);
    let staged = table
        .stage_batch(&taken, &big, &WriteToken::random())
        .await
        .unwrap();
    let err = table
        .stage_batch(&staged, &"y".repeat(11), &WriteToken::random())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LeaseError::StagedFull { ref shard_id, bytes }
                if shard_id == SHARD && bytes == MAX_STAGED_BYTES + 1
        ),
        "{err:?}"
    );
    assert!(!err.is_retriable() && !err.is_lease_lost());
    assert_eq!(table.get_lease(SHARD).await.unwrap(), Some(staged.clone()));
    // Up to the bound exactly is accepted (and fits in a DynamoDB item).
    let full = table
        .stage_batch(&staged, &"y".repeat(10), &WriteToken::random())
        .await
        .unwrap();
    assert_eq!(full.staged_batches.len(), 2);
}

#[tokio::test]
async fn a_full_held_lease_stays_held() {
    let (_, table, taken) = fake_with_taken_lease().await;
    let held = crate::HeldLease::new(table, taken, tokio::time::Instant::now());
    held.stage_batch(&"x".repeat(MAX_STAGED_BYTES))
        .await
        .unwrap();
    let err = held.stage_batch("{}").await.unwrap_err();
    assert!(matches!(err, LeaseError::StagedFull { .. }), "{err:?}");
    assert!(!held.is_lost());
    held.renew().await.unwrap();
}

#[tokio::test]
async fn taking_and_releasing_a_lease_keep_its_staged_batches() {
    let (_, table, taken) = fake_with_taken_lease().await;
    let staged = table
        .stage_batch(&taken, &entry(1), &WriteToken::random())
        .await
        .unwrap();
    let staged = table
        .stage_batch(&staged, &entry(2), &WriteToken::random())
        .await
        .unwrap();
    let stolen = table.take_lease(&staged, "worker-b").await.unwrap();
    assert_eq!(stolen.staged_batches, [entry(1), entry(2)]);
    let released = table
        .release_lease(&stolen, &WriteToken::random())
        .await
        .unwrap();
    assert_eq!(released.staged_batches, [entry(1), entry(2)]);
    let row = table.get_lease(SHARD).await.unwrap().unwrap();
    assert_eq!(row.staged_batches, [entry(1), entry(2)]);
}

#[tokio::test]
async fn staged_batches_changed_under_their_owner_are_a_conflict() {
    let (fake, table, taken) = fake_with_taken_lease().await;
    let staged = table
        .stage_batch(&taken, &entry(1), &WriteToken::random())
        .await
        .unwrap();
    // Another tool appends an entry without touching counter or token.
    let edited = AttributeValue::L(vec![
        AttributeValue::S(entry(1)),
        AttributeValue::S(entry(9)),
    ]);
    fake.items
        .lock()
        .unwrap()
        .get_mut(SHARD)
        .unwrap()
        .insert("stagedBatches".to_owned(), edited);
    let err = table
        .checkpoint_committed(&staged, &seq(150), &[], &WriteToken::random())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LeaseError::StagedConflict { ref shard_id } if shard_id == SHARD),
        "{err:?}"
    );
    assert!(err.is_lease_lost());
    let row = table.get_lease(SHARD).await.unwrap().unwrap();
    assert_eq!(row.staged_batches, [entry(1), entry(9)], "entry 9 survives");
    assert_eq!(row.checkpoint, seq(100));
}

#[tokio::test]
async fn a_stage_whose_response_was_lost_is_found_applied() {
    // The first attempt appended the entry; the retry failed the condition.
    // The re-read row carries this write's token and ends with the entry.
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
    let get = mock!(Client::get_item).then_output(move || {
        let mut row = held(6, seq(100));
        row.staged_batches = vec![entry(0), entry(1)];
        row.last_write_token = read.lock().unwrap().clone();
        get_output(Some(row))
    });
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update, &get]);
    let table = LeaseTable::new(client, "leases");
    let mut before = held(5, seq(100));
    before.staged_batches = vec![entry(0)];
    let after = table
        .stage_batch(&before, &entry(1), &WriteToken::random())
        .await
        .unwrap();
    assert_eq!(after.staged_batches, [entry(0), entry(1)]);
    assert_eq!(after.lease_counter, 6);
}

#[tokio::test]
async fn a_commit_checkpoint_is_conditional_on_the_staged_batches() {
    let mut lease = held(5, seq(100));
    lease.staged_batches = vec![entry(1), entry(2)];
    let update = mock!(Client::update_item)
        .match_requests(|input| {
            let staged = AttributeValue::L(vec![
                AttributeValue::S(entry(1)),
                AttributeValue::S(entry(2)),
            ]);
            condition_value(input, "stagedBatches") == Some(staged)
                && condition_value(input, "checkpoint") == Some(AttributeValue::S("100".into()))
                && update_value(input, "stagedBatches")
                    == Some(AttributeValue::L(vec![AttributeValue::S(entry(2))]))
        })
        .then_error(condition_failed);
    let get = mock!(Client::get_item).then_output(|| get_output(None));
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&update, &get]);
    let table = LeaseTable::new(client, "leases");
    let err = table
        .checkpoint_committed(&lease, &seq(150), &[entry(2)], &WriteToken::random())
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err:?}");
    assert_eq!(update.num_calls(), 1, "the request matched");
}
