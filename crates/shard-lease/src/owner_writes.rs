//! The writes that take, hold and give up a lease — take, renew, record a
//! pending batch, checkpoint, stage a batch for an Iceberg table, checkpoint
//! what a table commit took, release — as [`LeaseTable`] methods, and what a
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

use crate::lease::{attr, millis, number, pending_batch_attributes, staged_batches_value};
use crate::retry::{Kind, kind};
use crate::{
    Checkpoint, Condition, Expressions, Lease, LeaseError, LeaseTable, PendingBatch, Update,
    WriteToken,
};

/// The most a row's staged batches (`stagedBatches`) may hold, in bytes of
/// the entries' UTF-8 (`str::len`, summed over the entries).
/// [`LeaseTable::stage_batch`] refuses an entry that would take the row past
/// it ([`LeaseError::StagedFull`]). A DynamoDB item is at most 400 KB,
/// attribute names and values included ("Items" in [Constraints in Amazon
/// DynamoDB]); this leaves the rest of the row, and the list's own few
/// bytes per element, ample room.
///
/// [Constraints in Amazon DynamoDB]: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Constraints.html
pub const MAX_STAGED_BYTES: usize = 256 * 1024;

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
        let update = checkpoint_update(checkpoint)
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

    /// Stages a batch for an Iceberg table: appends `entry` (opaque to this
    /// crate; the caller's JSON naming the batch's data files and range) to
    /// `held`'s `stagedBatches` and clears the pending batch, in one
    /// conditional write on owner, counter and the checkpoint being the one
    /// `held` holds — as [`checkpoint`](Self::checkpoint), except that the
    /// checkpoint does not move: it moves when a table commit has taken the
    /// batch ([`checkpoint_committed`](Self::checkpoint_committed)).
    /// `token`: as for [`renew_lease`](Self::renew_lease).
    ///
    /// # Errors
    /// [`LeaseError::StagedFull`], before any call, when `held`'s entries
    /// and `entry` would take more than [`MAX_STAGED_BYTES`];
    /// [`LeaseError::LeaseLost`]; [`LeaseError::CheckpointConflict`] as for
    /// [`checkpoint`](Self::checkpoint); plus those of [`Self::get_lease`].
    pub async fn stage_batch(
        &self,
        held: &Lease,
        entry: &str,
        token: &WriteToken,
    ) -> Result<Lease, LeaseError> {
        let bytes = staged_bytes(&held.staged_batches) + entry.len();
        if bytes > MAX_STAGED_BYTES {
            return Err(LeaseError::StagedFull {
                shard_id: held.lease_key.clone(),
                bytes,
            });
        }
        let update = Update::new()
            .add(attr::LEASE_COUNTER, 1)
            .append(
                attr::STAGED_BATCHES,
                vec![AttributeValue::S(entry.to_owned())],
            )
            .remove(attr::PENDING_CHECKPOINT)
            .remove(attr::PENDING_BATCH_KEY)
            .remove(attr::PENDING_BATCH_FIRST);
        let condition = owner_condition(held).equals(
            attr::CHECKPOINT,
            AttributeValue::S(held.checkpoint.to_attribute()),
        );
        let owner = held.lease_owner.clone();
        let expected_counter = held.lease_counter + 1;
        self.conditional_update("stage batch", held, token, update, condition, |current| {
            current.lease_owner == owner
                && current.lease_counter == expected_counter
                && current.staged_batches.last().map(String::as_str) == Some(entry)
                && current.pending_batch.is_none()
        })
        .await
    }

    /// Moves `held`'s checkpoint to `checkpoint` — the end a table commit
    /// reached — and replaces its staged batches with `keep`, the entries
    /// that commit did not take (the attribute is removed when `keep` is
    /// empty), in one write conditional on owner, counter, the checkpoint
    /// being the one `held` holds and the staged batches being exactly
    /// `held`'s, so that no entry staged meanwhile is lost. Resets
    /// `ownerSwitchesSinceCheckpoint` and stamps `shardEndedAt` at
    /// `SHARD_END`, as [`checkpoint`](Self::checkpoint). The pending batch is
    /// left alone: it belongs to a batch being written after the staged ones,
    /// which [`stage_batch`](Self::stage_batch) clears. `keep` is a
    /// subsequence of `held.staged_batches`. `token`: as for
    /// [`renew_lease`](Self::renew_lease).
    ///
    /// # Errors
    /// [`LeaseError::LeaseLost`]; [`LeaseError::CheckpointConflict`] as for
    /// [`checkpoint`](Self::checkpoint); [`LeaseError::StagedConflict`] when
    /// the lease and checkpoint are still ours but the staged batches
    /// differ from `held`'s; plus those of [`Self::get_lease`].
    pub async fn checkpoint_committed(
        &self,
        held: &Lease,
        checkpoint: &Checkpoint,
        keep: &[String],
        token: &WriteToken,
    ) -> Result<Lease, LeaseError> {
        debug_assert!(
            is_subsequence(keep, &held.staged_batches),
            "only staged entries can be kept"
        );
        let update = checkpoint_update(checkpoint);
        let update = match staged_batches_value(keep) {
            Some(kept) => update.set(attr::STAGED_BATCHES, kept),
            None => update.remove(attr::STAGED_BATCHES),
        };
        let condition = owner_condition(held)
            .equals(
                attr::CHECKPOINT,
                AttributeValue::S(held.checkpoint.to_attribute()),
            )
            .equals_or_absent(
                attr::STAGED_BATCHES,
                staged_batches_value(&held.staged_batches),
            );
        let owner = held.lease_owner.clone();
        let expected_counter = held.lease_counter + 1;
        self.conditional_update(
            "checkpoint committed",
            held,
            token,
            update,
            condition,
            |current| {
                current.lease_owner == owner
                    && current.lease_counter == expected_counter
                    && &current.checkpoint == checkpoint
                    && current.staged_batches == keep
            },
        )
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
    /// - same owner, counter and checkpoint but other staged batches →
    ///   `StagedConflict`;
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
            Some(current)
                if current.lease_owner == observed.lease_owner
                    && current.lease_counter == observed.lease_counter
                    && current.staged_batches != observed.staged_batches =>
            {
                Err(LeaseError::StagedConflict { shard_id })
            }
            _ => Err(LeaseError::LeaseLost { shard_id }),
        }
    }
}

/// The update that moves a checkpoint to `checkpoint`: the counter, the
/// checkpoint, its sub-sequence number, `ownerSwitchesSinceCheckpoint`
/// reset, and at `SHARD_END` the wall-clock time, from which the ended
/// lease's retention is counted.
fn checkpoint_update(checkpoint: &Checkpoint) -> Update {
    let update = Update::new()
        .add(attr::LEASE_COUNTER, 1)
        .set(
            attr::CHECKPOINT,
            AttributeValue::S(checkpoint.to_attribute()),
        )
        .set(attr::CHECKPOINT_SUB_SEQUENCE_NUMBER, number(0))
        .set(attr::OWNER_SWITCHES_SINCE_CHECKPOINT, number(0));
    if checkpoint.is_shard_end() {
        return update.set(
            attr::SHARD_ENDED_AT,
            AttributeValue::S(humantime::format_rfc3339_millis(SystemTime::now()).to_string()),
        );
    }
    update
}

/// Bytes of `entries`' UTF-8, summed: what [`MAX_STAGED_BYTES`] bounds.
fn staged_bytes(entries: &[String]) -> usize {
    entries.iter().map(String::len).sum()
}

/// Whether `part` is `whole` with some entries left out, in order.
fn is_subsequence(part: &[String], whole: &[String]) -> bool {
    let mut rest = whole.iter();
    part.iter()
        .all(|entry| rest.any(|candidate| candidate == entry))
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
mod tests;
