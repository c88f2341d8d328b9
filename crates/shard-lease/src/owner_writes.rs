//! The writes that take, hold and give up a lease — take, renew, record a
//! pending batch, checkpoint, release — as [`LeaseTable`] methods, and what a
//! failed condition means.
//!
//! Protocol (see `docs/DESIGN.md`, "Leases"): every write to a row increments
//! `leaseCounter` and is conditional on the counter (and, for an owner's
//! writes, on `leaseOwner`) the writer last saw. A worker whose write fails its
//! condition has lost the lease, unless a consistent re-read shows that the
//! write did apply (its first attempt timed out after DynamoDB applied it, and
//! the SDK's retry then failed the condition): see `resolve_conflict` below.
//!
//! Each write is one [UpdateItem] with `ReturnValues=ALL_NEW`, built as an
//! [`Update`] and a [`Condition`].
//!
//! [UpdateItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html

use std::time::SystemTime;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use tracing::debug;

use crate::lease::{attr, millis, number, pending_batch_attributes};
use crate::retry::{Kind, kind};
use crate::{
    Checkpoint, Condition, Expressions, Lease, LeaseError, LeaseTable, PendingBatch, Update,
    WriteToken,
};

impl LeaseTable {
    /// Takes `observed` for `worker_id`: sets `leaseOwner`, increments
    /// `leaseCounter` (and `ownerSwitchesSinceCheckpoint` when the owner
    /// changes), records this handle's failover time (see
    /// [`with_failover_time`](Self::with_failover_time)), conditional on the
    /// counter, owner and creation token being what the caller observed. Used
    /// for free leases, expired leases and steals.
    ///
    /// # Errors
    /// [`LeaseError::LeaseLost`] when the row changed since it was observed
    /// (another worker was faster), plus those of [`Self::get_lease`].
    pub async fn take_lease(&self, observed: &Lease, worker_id: &str) -> Result<Lease, LeaseError> {
        let switched = !observed.is_owned_by(worker_id);
        let mut update = Update::new()
            .set(attr::LEASE_OWNER, AttributeValue::S(worker_id.to_owned()))
            .add(attr::LEASE_COUNTER, 1)
            .add_or_start(
                attr::OWNER_SWITCHES_SINCE_CHECKPOINT,
                0,
                u64::from(switched),
            );
        if let Some(failover) = self.failover_time {
            update = update.set(attr::OWNER_FAILOVER_TIME_MILLIS, number(millis(failover)));
        }
        let condition = Condition::new()
            .equals(attr::LEASE_COUNTER, number(observed.lease_counter))
            .equals_or_absent(
                attr::LEASE_OWNER,
                observed.lease_owner.clone().map(AttributeValue::S),
            )
            // The row observed, not one created again since with the same
            // counter and owner (0, none).
            .equals_or_absent(
                attr::CREATION_TOKEN,
                observed.creation_token.clone().map(AttributeValue::S),
            );
        let expected_counter = observed.lease_counter + 1;
        let token = WriteToken::random();
        self.conditional_update("take", observed, &token, update, condition, |current| {
            current.is_owned_by(worker_id) && current.lease_counter == expected_counter
        })
        .await
    }

    /// Renews `held` (increments `leaseCounter`), conditional on owner and
    /// counter. Any write by the owner renews too; this is for idle shards.
    /// `token` is stamped into the row; retries of this renewal pass the
    /// same one (see [`WriteToken`]).
    ///
    /// # Errors
    /// [`LeaseError::LeaseLost`], plus those of [`Self::get_lease`].
    pub async fn renew_lease(&self, held: &Lease, token: &WriteToken) -> Result<Lease, LeaseError> {
        let update = Update::new().add(attr::LEASE_COUNTER, 1);
        let owner = held.lease_owner.clone();
        let expected_counter = held.lease_counter + 1;
        self.conditional_update(
            "renew",
            held,
            token,
            update,
            owner_condition(held),
            |current| current.lease_owner == owner && current.lease_counter == expected_counter,
        )
        .await
    }

    /// Records the batch about to be written (key, first, last) in `held`'s
    /// row, conditional on owner and counter. Must succeed before the PUT: a
    /// worker that lost the lease therefore cannot start a new batch (C6 in
    /// shardsink's docs/DESIGN.md). `token`: as for [`renew_lease`](Self::renew_lease).
    ///
    /// # Errors
    /// [`LeaseError::LeaseLost`], plus those of [`Self::get_lease`].
    pub async fn record_pending_batch(
        &self,
        held: &Lease,
        batch: &PendingBatch,
        token: &WriteToken,
    ) -> Result<Lease, LeaseError> {
        debug_assert!(
            held.pending_batch.is_none(),
            "a pending batch must be checkpointed before the next one"
        );
        let update = pending_batch_attributes(batch).into_iter().fold(
            Update::new().add(attr::LEASE_COUNTER, 1),
            |update, (name, value)| update.set(name, value),
        );
        let owner = held.lease_owner.clone();
        let expected_counter = held.lease_counter + 1;
        self.conditional_update(
            "record pending batch",
            held,
            token,
            update,
            owner_condition(held),
            |current| {
                current.lease_owner == owner
                    && current.lease_counter == expected_counter
                    && current.pending_batch.as_ref() == Some(batch)
            },
        )
        .await
    }

    /// Moves `held`'s checkpoint to `checkpoint` and clears the pending batch,
    /// conditional on owner, counter and the checkpoint being the one `held`
    /// holds. Resets `ownerSwitchesSinceCheckpoint`. `token`: as for
    /// [`renew_lease`](Self::renew_lease).
    ///
    /// # Errors
    /// [`LeaseError::LeaseLost`]; [`LeaseError::CheckpointConflict`] when the
    /// lease is still ours but its checkpoint was changed by someone else; plus
    /// those of [`Self::get_lease`].
    pub async fn checkpoint(
        &self,
        held: &Lease,
        checkpoint: &Checkpoint,
        token: &WriteToken,
    ) -> Result<Lease, LeaseError> {
        let mut update = Update::new()
            .add(attr::LEASE_COUNTER, 1)
            .set(
                attr::CHECKPOINT,
                AttributeValue::S(checkpoint.to_attribute()),
            )
            .set(attr::CHECKPOINT_SUB_SEQUENCE_NUMBER, number(0))
            .set(attr::OWNER_SWITCHES_SINCE_CHECKPOINT, number(0));
        // SHARD_END also stamps the wall-clock time, from which the ended
        // lease's retention is counted.
        if checkpoint.is_shard_end() {
            update = update.set(
                attr::SHARD_ENDED_AT,
                AttributeValue::S(humantime::format_rfc3339_millis(SystemTime::now()).to_string()),
            );
        }
        let update = update
            .remove(attr::PENDING_CHECKPOINT)
            .remove(attr::PENDING_BATCH_KEY)
            .remove(attr::PENDING_BATCH_FIRST);
        let condition = owner_condition(held).equals(
            attr::CHECKPOINT,
            AttributeValue::S(held.checkpoint.to_attribute()),
        );
        let owner = held.lease_owner.clone();
        let expected_counter = held.lease_counter + 1;
        self.conditional_update("checkpoint", held, token, update, condition, |current| {
            current.lease_owner == owner
                && current.lease_counter == expected_counter
                && &current.checkpoint == checkpoint
                && current.pending_batch.is_none()
        })
        .await
    }

    /// Gives `held` up: removes `leaseOwner` and the owner's failover time
    /// (so any worker may take it at once, without waiting for expiry),
    /// conditional on owner and counter. `token`: as for
    /// [`renew_lease`](Self::renew_lease).
    ///
    /// # Errors
    /// [`LeaseError::LeaseLost`], plus those of [`Self::get_lease`].
    pub async fn release_lease(
        &self,
        held: &Lease,
        token: &WriteToken,
    ) -> Result<Lease, LeaseError> {
        let update = Update::new()
            .add(attr::LEASE_COUNTER, 1)
            .remove(attr::LEASE_OWNER)
            .remove(attr::OWNER_FAILOVER_TIME_MILLIS);
        let expected_counter = held.lease_counter + 1;
        self.conditional_update(
            "release",
            held,
            token,
            update,
            owner_condition(held),
            |current| current.lease_owner.is_none() && current.lease_counter == expected_counter,
        )
        .await
    }

    /// Runs one conditional [UpdateItem] of `observed`'s row returning the
    /// new row, with `token` stamped into `lastWriteToken`; `applied` tells
    /// whether a re-read row shows the write's effect.
    ///
    /// [UpdateItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html
    async fn conditional_update(
        &self,
        what: &'static str,
        observed: &Lease,
        token: &WriteToken,
        update: Update,
        condition: Condition,
        applied: impl Fn(&Lease) -> bool,
    ) -> Result<Lease, LeaseError> {
        // Every conditional write stamps its token; see
        // `attr::LAST_WRITE_TOKEN` and `resolve_conflict`.
        let token = token.as_str();
        let update = update.set(attr::LAST_WRITE_TOKEN, AttributeValue::S(token.to_owned()));
        let expressions = Expressions::new(&update, &condition);
        let applied = |current: &Lease| {
            current.last_write_token.as_deref() == Some(token) && applied(current)
        };
        let result = self
            .client
            .update_item()
            .table_name(&self.table_name)
            .key(
                attr::LEASE_KEY,
                AttributeValue::S(observed.lease_key.clone()),
            )
            .set_update_expression(expressions.update)
            .set_condition_expression(expressions.condition)
            .set_expression_attribute_names(expressions.names)
            .set_expression_attribute_values(expressions.values)
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match result {
            Ok(output) => match output.attributes {
                Some(item) => Ok(Lease::from_item(&item)?),
                // DynamoDB returns the row for ALL_NEW; a server that does not
                // is read back instead.
                None => self.resolve_conflict(observed, applied).await,
            },
            Err(err) if kind(&err) == Some(Kind::ConditionalCheckFailed) => {
                debug!(shard_id = %observed.lease_key, operation = what, "lease condition failed; re-reading the row");
                self.resolve_conflict(observed, applied).await
            }
            Err(err) => Err(self.sdk_error("UpdateItem", err)),
        }
    }

    /// Decides what a failed condition means by re-reading the row:
    /// - the row carries this write's token and shows its effect (`applied`)
    ///   → the write did apply (an earlier attempt succeeded, its response was
    ///   lost) → success;
    /// - same owner and counter but another checkpoint → `CheckpointConflict`;
    /// - anything else, or no row → `LeaseLost`.
    async fn resolve_conflict(
        &self,
        observed: &Lease,
        applied: impl Fn(&Lease) -> bool,
    ) -> Result<Lease, LeaseError> {
        let shard_id = observed.lease_key.clone();
        match self.get_lease(&shard_id).await? {
            Some(current) if applied(&current) => Ok(current),
            Some(current)
                if current.lease_owner == observed.lease_owner
                    && current.lease_counter == observed.lease_counter
                    && current.checkpoint != observed.checkpoint =>
            {
                Err(LeaseError::CheckpointConflict {
                    shard_id,
                    expected: observed.checkpoint.clone(),
                    actual: current.checkpoint,
                })
            }
            _ => Err(LeaseError::LeaseLost { shard_id }),
        }
    }
}

/// `leaseOwner = owner AND leaseCounter = counter AND lastWriteToken =
/// token` for a write by `held`'s owner. The token (of this owner's last
/// write, which `held` holds) makes the fence exact: a lease re-created after
/// a table loss and taken by another process with the same worker id can
/// reach the same counter, but never the same random token.
fn owner_condition(held: &Lease) -> Condition {
    debug_assert!(held.lease_owner.is_some(), "owner writes need an owner");
    let condition = Condition::new()
        .equals(
            attr::LEASE_OWNER,
            AttributeValue::S(held.lease_owner.clone().unwrap_or_default()),
        )
        .equals(attr::LEASE_COUNTER, number(held.lease_counter));
    // Rows written before tokens existed have none; the counter fences them.
    match &held.last_write_token {
        Some(last) => condition.equals(attr::LAST_WRITE_TOKEN, AttributeValue::S(last.clone())),
        None => condition,
    }
}

#[cfg(test)]
mod tests {
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
    fn write_then_reread(
        own_token: bool,
    ) -> (Lease, aws_smithy_mocks::Rule, aws_smithy_mocks::Rule) {
        let sent_token = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
        let (record, read) = (sent_token.clone(), sent_token);
        let update = mock!(Client::update_item)
            .match_requests(move |input| {
                let token = update_value(input, "lastWriteToken")
                    .and_then(|value| value.as_s().ok().cloned());
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
}
