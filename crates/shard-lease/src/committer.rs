//! [`CommitterLease`]: the row that elects the one worker committing the
//! batches every shard owner has staged (`stagedBatches`) to an Iceberg
//! table, and the [`LeaseTable`] calls that read, take, renew and publish
//! through it.
//!
//! The row lives in the lease table under [`COMMITTER_KEY`], a small lease
//! of its own: an owner and a counter that every write increments and is
//! conditional on, as a shard's lease. Whether the current committer has
//! expired is judged by the caller, from the counter not moving for a
//! failover time (as for leases, see [`crate::LeaseExpiry`]); this module
//! only makes the conditional writes. After each table commit the committer
//! publishes `committed` (opaque to this crate; the caller's JSON), from
//! which each owner learns how far its shard was committed.
//!
//! Each write is one [UpdateItem] with `ReturnValues=ALL_NEW` and a random
//! [`WriteToken`] stamped into `lastWriteToken`: a write whose condition
//! fails counts as applied when a consistent re-read shows its token and
//! its effect (an earlier attempt applied and its response was lost).
//!
//! [UpdateItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use tracing::debug;

use crate::lease::{attr, number, string, unsigned};
use crate::retry::{Kind, kind};
use crate::{Condition, Expressions, LeaseError, LeaseTable, MalformedLease, Update, WriteToken};

/// `leaseKey` prefix of the rows that serve Iceberg tables. Shard ids never
/// contain `#` (`shardId-` and digits), and heartbeat rows start with
/// [`WORKER_KEY_PREFIX`](crate::heartbeat::WORKER_KEY_PREFIX), so these rows
/// collide with neither; scans leave them out of the leases.
pub const ICEBERG_KEY_PREFIX: &str = "iceberg#";

/// `leaseKey` of the committer row.
pub const COMMITTER_KEY: &str = "iceberg#committer";

/// Attribute names of the committer row besides those it shares with a
/// lease row (`leaseKey`, `leaseOwner`, `leaseCounter`, `lastWriteToken`,
/// see [`attr`]).
pub mod committer_attr {
    /// `S`: what the committer published after its last table commit,
    /// opaque to this crate (the caller's JSON); absent before the first.
    pub const COMMITTED: &str = "committed";
}

/// The committer row: which worker commits staged batches to the Iceberg
/// table, and what it last published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitterLease {
    /// The committing worker (`leaseOwner`); `None` when nobody is.
    pub owner: Option<String>,
    /// `leaseCounter`: incremented by every write to the row.
    pub counter: u64,
    /// `committed`: what the committer published after its last commit.
    pub committed: Option<String>,
    /// `lastWriteToken`: token of the last write.
    pub last_write_token: Option<String>,
}

impl CommitterLease {
    /// Whether `worker_id` is the committer.
    pub fn is_owned_by(&self, worker_id: &str) -> bool {
        self.owner.as_deref() == Some(worker_id)
    }

    /// Decodes the committer row.
    ///
    /// # Errors
    /// [`MalformedLease`] naming the attribute when `leaseCounter` is
    /// missing, or an attribute has the wrong type.
    pub fn from_item(item: &HashMap<String, AttributeValue>) -> Result<Self, MalformedLease> {
        let key = COMMITTER_KEY;
        Ok(Self {
            owner: string(item, attr::LEASE_OWNER, key)?,
            counter: unsigned(item, attr::LEASE_COUNTER, key)?.ok_or_else(|| MalformedLease {
                lease_key: key.to_owned(),
                reason: format!("no {} attribute", attr::LEASE_COUNTER),
            })?,
            committed: string(item, committer_attr::COMMITTED, key)?,
            last_write_token: string(item, attr::LAST_WRITE_TOKEN, key)?,
        })
    }
}

impl LeaseTable {
    /// The committer row, read with a consistent [GetItem]; `None` when it
    /// was never created.
    ///
    /// [GetItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_GetItem.html
    ///
    /// # Errors
    /// [`LeaseError::TableMissing`], [`LeaseError::Malformed`], [`LeaseError::Dynamo`].
    pub async fn get_committer(&self) -> Result<Option<CommitterLease>, LeaseError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table_name)
            .key(attr::LEASE_KEY, AttributeValue::S(COMMITTER_KEY.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| self.sdk_error("GetItem", err))?;
        Ok(output
            .item
            .as_ref()
            .map(CommitterLease::from_item)
            .transpose()?)
    }

    /// Makes `worker_id` the committer: sets the owner and increments the
    /// counter. With `observed` `None`, creates the row (counter 1),
    /// conditional on its absence; otherwise conditional on the counter and
    /// owner `observed` holds — the caller has judged that committer
    /// expired, or it was free.
    ///
    /// # Errors
    /// [`LeaseError::LeaseLost`] (with [`COMMITTER_KEY`]) when the row is
    /// not as observed (another worker was faster), plus those of
    /// [`Self::get_committer`].
    pub async fn take_committer(
        &self,
        observed: Option<&CommitterLease>,
        worker_id: &str,
    ) -> Result<CommitterLease, LeaseError> {
        let update = Update::new()
            .set(attr::LEASE_OWNER, AttributeValue::S(worker_id.to_owned()))
            .add_or_start(attr::LEASE_COUNTER, 0, 1);
        let (condition, expected_counter) = match observed {
            None => (Condition::new().not_exists(attr::LEASE_KEY), 1),
            Some(observed) => (
                Condition::new()
                    .equals(attr::LEASE_COUNTER, number(observed.counter))
                    .equals_or_absent(
                        attr::LEASE_OWNER,
                        observed.owner.clone().map(AttributeValue::S),
                    ),
                observed.counter + 1,
            ),
        };
        self.committer_update("take committer", update, condition, |current| {
            current.is_owned_by(worker_id) && current.counter == expected_counter
        })
        .await
    }

    /// Renews `held` (increments the counter), conditional on `worker_id`
    /// owning it at `held`'s counter. A committer renews at least once per
    /// failover time, or others take over.
    ///
    /// # Errors
    /// [`LeaseError::LeaseLost`] (with [`COMMITTER_KEY`]), plus those of
    /// [`Self::get_committer`].
    pub async fn renew_committer(
        &self,
        held: &CommitterLease,
        worker_id: &str,
    ) -> Result<CommitterLease, LeaseError> {
        let update = Update::new().add(attr::LEASE_COUNTER, 1);
        let expected_counter = held.counter + 1;
        self.committer_update(
            "renew committer",
            update,
            committer_condition(held, worker_id),
            |current| current.is_owned_by(worker_id) && current.counter == expected_counter,
        )
        .await
    }

    /// Publishes `committed` (opaque; what the committer's last table
    /// commit reached) and increments the counter, conditional on
    /// `worker_id` owning `held` at its counter — so a committer that lost
    /// the row publishes nothing.
    ///
    /// # Errors
    /// [`LeaseError::LeaseLost`] (with [`COMMITTER_KEY`]), plus those of
    /// [`Self::get_committer`].
    pub async fn publish_committed(
        &self,
        held: &CommitterLease,
        worker_id: &str,
        committed: &str,
    ) -> Result<CommitterLease, LeaseError> {
        let update = Update::new().add(attr::LEASE_COUNTER, 1).set(
            committer_attr::COMMITTED,
            AttributeValue::S(committed.to_owned()),
        );
        let expected_counter = held.counter + 1;
        self.committer_update(
            "publish committed",
            update,
            committer_condition(held, worker_id),
            |current| {
                current.is_owned_by(worker_id)
                    && current.counter == expected_counter
                    && current.committed.as_deref() == Some(committed)
            },
        )
        .await
    }

    /// Runs one conditional [UpdateItem] of the committer row with a fresh
    /// token stamped into `lastWriteToken`, returning the new row. On a
    /// failed condition, re-reads the row: it is this write's (its token,
    /// and `applied` holds) → success; otherwise `LeaseLost`.
    ///
    /// [UpdateItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html
    async fn committer_update(
        &self,
        what: &'static str,
        update: Update,
        condition: Condition,
        applied: impl Fn(&CommitterLease) -> bool,
    ) -> Result<CommitterLease, LeaseError> {
        let token = WriteToken::random();
        let update = update.set(
            attr::LAST_WRITE_TOKEN,
            AttributeValue::S(token.as_str().to_owned()),
        );
        let expressions = Expressions::new(&update, &condition);
        let result = self
            .client
            .update_item()
            .table_name(&self.table_name)
            .key(attr::LEASE_KEY, AttributeValue::S(COMMITTER_KEY.to_owned()))
            .set_update_expression(expressions.update)
            .set_condition_expression(expressions.condition)
            .set_expression_attribute_names(expressions.names)
            .set_expression_attribute_values(expressions.values)
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        let answered = match result {
            Ok(output) => output.attributes,
            Err(err) if kind(&err) == Some(Kind::ConditionalCheckFailed) => {
                debug!(
                    operation = what,
                    "committer condition failed; re-reading the row"
                );
                None
            }
            Err(err) => return Err(self.sdk_error("UpdateItem", err)),
        };
        if let Some(item) = answered {
            return Ok(CommitterLease::from_item(&item)?);
        }
        match self.get_committer().await? {
            Some(current)
                if current.last_write_token.as_deref() == Some(token.as_str())
                    && applied(&current) =>
            {
                Ok(current)
            }
            _ => Err(LeaseError::LeaseLost {
                shard_id: COMMITTER_KEY.to_owned(),
            }),
        }
    }
}

/// `leaseOwner = worker_id AND leaseCounter = held's counter`.
fn committer_condition(held: &CommitterLease, worker_id: &str) -> Condition {
    Condition::new()
        .equals(attr::LEASE_OWNER, AttributeValue::S(worker_id.to_owned()))
        .equals(attr::LEASE_COUNTER, number(held.counter))
}

#[cfg(test)]
mod tests;
