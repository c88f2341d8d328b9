//! [`LeaseTable`]: the DynamoDB calls on the lease table, one thin function
//! per operation, every write conditional.
//!
//! Protocol (see `docs/DESIGN.md`, "Leases"): every write to a row increments
//! `leaseCounter` and is conditional on the counter (and, for an owner's
//! writes, on `leaseOwner`) the writer last saw. A worker whose write fails its
//! condition has lost the lease, unless a consistent re-read shows that the
//! write did apply (its first attempt timed out after DynamoDB applied it, and
//! the SDK's retry then failed the condition): see
//! [`LeaseTable::resolve_conflict`].

use std::collections::HashMap;
use std::error::Error as StdError;
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
    ScalarAttributeType, TableStatus,
};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use tracing::{debug, info, warn};

use crate::heartbeat::{WORKER_KEY_PREFIX, worker_attr};
use crate::lease::{attr, millis, number, pending_batch_attributes};
use crate::retry::{is_retriable, is_throttling};
use crate::{Checkpoint, Lease, LeaseError, PendingBatch, WorkerHeartbeat};

/// How long [`LeaseTable::create_table_if_missing`] waits for a new table to
/// become `ACTIVE`.
pub const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(300);

/// How often it looks.
const TABLE_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The lease table: one row per shard, keyed by `leaseKey` (the shard id).
///
/// Cheap to clone (the SDK client is reference-counted).
#[derive(Clone, Debug)]
pub struct LeaseTable {
    client: Client,
    table_name: String,
    /// Recorded in every lease this handle takes (`ownerFailoverTimeMillis`).
    failover_time: Option<Duration>,
}

/// The token a conditional write stamps into `lastWriteToken`: random, one
/// per write — and the same across the retries of one write, so that a retry
/// of a write that did apply (its response lost) recognizes it in the row
/// instead of reading it as a lost lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteToken(String);

impl WriteToken {
    /// A fresh random token (64 bits, hex).
    pub fn random() -> Self {
        Self(format!("{:016x}", rand::random::<u64>()))
    }

    /// The token's text, as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What [`LeaseTable::create_table_if_missing`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableCreation {
    /// The table existed.
    Existed,
    /// This call created it.
    Created,
}

/// Everything in the lease table: leases and worker heartbeats.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableScan {
    /// Lease rows, by `leaseKey`.
    pub leases: Vec<Lease>,
    /// Heartbeat rows, by worker id.
    pub workers: Vec<WorkerHeartbeat>,
}

/// What [`LeaseTable::create_lease`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    /// The row was written; here it is.
    Created(Box<Lease>),
    /// A row for the shard already existed and was left alone.
    AlreadyExists,
}

impl LeaseTable {
    /// A handle on the table `table_name`.
    pub fn new(client: Client, table_name: impl Into<String>) -> Self {
        Self {
            client,
            table_name: table_name.into(),
            failover_time: None,
        }
    }

    /// This handle records `failover_time` (the worker's `--failover-time`)
    /// in every lease it takes, so that other workers wait at least that
    /// long before they take the lease in turn (see
    /// [`Lease::expiry_time`]).
    #[must_use]
    pub fn with_failover_time(mut self, failover_time: Duration) -> Self {
        self.failover_time = Some(failover_time);
        self
    }

    /// The table's name.
    pub fn table_name(&self) -> &str {
        &self.table_name
    }

    /// Creates the table if it does not exist — hash key `leaseKey` (S),
    /// on-demand billing — and waits until it is `ACTIVE`.
    ///
    /// Calls [DescribeTable], then [CreateTable] and the `TableExists` waiter.
    /// Two workers racing to create it both succeed (`ResourceInUseException`
    /// counts as "exists").
    ///
    /// [DescribeTable]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DescribeTable.html
    /// [CreateTable]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CreateTable.html
    ///
    /// # Errors
    /// [`LeaseError::Dynamo`] when a call fails.
    pub async fn create_table_if_missing(&self) -> Result<TableCreation, LeaseError> {
        // Polled every second, not with the SDK's waiter (which waits at
        // least 20 s between polls): after a lost table, workers are idle
        // until it is back.
        let deadline = tokio::time::Instant::now() + TABLE_ACTIVE_TIMEOUT;
        let mut outcome = TableCreation::Existed;
        loop {
            let described = self
                .client
                .describe_table()
                .table_name(&self.table_name)
                .send()
                .await;
            match described {
                Ok(output) => {
                    let status = output.table().and_then(|table| table.table_status());
                    if status.is_none_or(|status| *status == TableStatus::Active) {
                        return Ok(outcome);
                    }
                    debug!(table = %self.table_name, status = ?status, "waiting for the lease table");
                }
                Err(err) if error_code(&err) == Some("ResourceNotFoundException") => {
                    if self.create_table().await? {
                        info!(table = %self.table_name, "lease table created");
                        outcome = TableCreation::Created;
                        continue;
                    }
                    // Another worker is creating it, or an old one is still
                    // being deleted: wait and look again.
                }
                Err(err) => return Err(self.sdk_error("DescribeTable", err)),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(LeaseError::Dynamo {
                    operation: "DescribeTable",
                    table: self.table_name.clone(),
                    retriable: true,
                    throttled: false,
                    source: format!("table not ACTIVE after {TABLE_ACTIVE_TIMEOUT:?}").into(),
                });
            }
            tokio::time::sleep(TABLE_POLL_INTERVAL).await;
        }
    }

    /// [CreateTable]: hash key `leaseKey` (S), on-demand billing. `false`
    /// when the table is in use (being created by another worker, or still
    /// being deleted).
    async fn create_table(&self) -> Result<bool, LeaseError> {
        let key = KeySchemaElement::builder()
            .attribute_name(attr::LEASE_KEY)
            .key_type(KeyType::Hash)
            .build()
            .map_err(|err| self.build_error("CreateTable", err))?;
        let definition = AttributeDefinition::builder()
            .attribute_name(attr::LEASE_KEY)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(|err| self.build_error("CreateTable", err))?;
        let result = self
            .client
            .create_table()
            .table_name(&self.table_name)
            .key_schema(key)
            .attribute_definitions(definition)
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(err) if error_code(&err) == Some("ResourceInUseException") => Ok(false),
            Err(err) => Err(self.sdk_error("CreateTable", err)),
        }
    }

    /// Every row, read with a consistent [Scan] (all pages): the leases and
    /// the worker heartbeats. Rows that do not decode are logged and skipped,
    /// so a foreign row cannot stop the worker.
    ///
    /// [Scan]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Scan.html
    ///
    /// # Errors
    /// [`LeaseError::TableMissing`], [`LeaseError::Dynamo`].
    pub async fn scan(&self) -> Result<TableScan, LeaseError> {
        let mut scan = TableScan::default();
        let mut start_key: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table_name)
                .consistent_read(true)
                .set_exclusive_start_key(start_key.take())
                .send()
                .await
                .map_err(|err| self.sdk_error("Scan", err))?;
            for item in page.items() {
                let is_worker = item
                    .get(attr::LEASE_KEY)
                    .and_then(|key| key.as_s().ok())
                    .is_some_and(|key| key.starts_with(WORKER_KEY_PREFIX));
                let decoded = if is_worker {
                    WorkerHeartbeat::from_item(item).map(|worker| scan.workers.push(worker))
                } else {
                    Lease::from_item(item).map(|lease| scan.leases.push(lease))
                };
                if let Err(err) = decoded {
                    warn!(table = %self.table_name, error = %err, "skipping lease table row");
                }
            }
            match page.last_evaluated_key {
                Some(key) if !key.is_empty() => start_key = Some(key),
                _ => break,
            }
        }
        scan.leases.sort_by(|a, b| a.lease_key.cmp(&b.lease_key));
        scan.workers.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        Ok(scan)
    }

    /// Every lease row ([`scan`](Self::scan) without the heartbeats).
    ///
    /// # Errors
    /// As [`scan`](Self::scan).
    pub async fn list_leases(&self) -> Result<Vec<Lease>, LeaseError> {
        Ok(self.scan().await?.leases)
    }

    /// Writes this worker's heartbeat row: increments `heartbeatCounter`,
    /// stamps `lastHeartbeat` with the wall-clock time and records how many
    /// leases it holds. Unconditional: each worker writes only its own row.
    ///
    /// # Errors
    /// [`LeaseError::TableMissing`], [`LeaseError::Dynamo`].
    pub async fn heartbeat(&self, worker_id: &str, leases_held: usize) -> Result<(), LeaseError> {
        let mut expr = Expr::default();
        let (id, counter, last, held) = (
            expr.name(worker_attr::WORKER_ID),
            expr.name(worker_attr::HEARTBEAT_COUNTER),
            expr.name(worker_attr::LAST_HEARTBEAT),
            expr.name(worker_attr::LEASES_HELD),
        );
        let (id_value, zero, one) = (
            expr.value(AttributeValue::S(worker_id.to_owned())),
            expr.value(number(0)),
            expr.value(number(1)),
        );
        let now = expr.value(AttributeValue::S(
            humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        ));
        let held_value = expr.value(number(leases_held as u64));
        self.client
            .update_item()
            .table_name(&self.table_name)
            .key(
                attr::LEASE_KEY,
                AttributeValue::S(WorkerHeartbeat::key(worker_id)),
            )
            .update_expression(format!(
                "SET {id} = {id_value}, {counter} = if_not_exists({counter}, {zero}) + {one}, \
                 {last} = {now}, {held} = {held_value}"
            ))
            .set_expression_attribute_names(Some(expr.names))
            .set_expression_attribute_values(Some(expr.values))
            .send()
            .await
            .map(|_| ())
            .map_err(|err| self.sdk_error("UpdateItem", err))
    }

    /// Deletes a worker's heartbeat row (at a clean shutdown, or a long-dead
    /// worker's).
    ///
    /// # Errors
    /// [`LeaseError::TableMissing`], [`LeaseError::Dynamo`].
    pub async fn remove_heartbeat(&self, worker_id: &str) -> Result<(), LeaseError> {
        self.client
            .delete_item()
            .table_name(&self.table_name)
            .key(
                attr::LEASE_KEY,
                AttributeValue::S(WorkerHeartbeat::key(worker_id)),
            )
            .send()
            .await
            .map(|_| ())
            .map_err(|err| self.sdk_error("DeleteItem", err))
    }

    /// One lease row, read with a consistent [GetItem]; `None` when absent.
    ///
    /// [GetItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_GetItem.html
    ///
    /// # Errors
    /// [`LeaseError::TableMissing`], [`LeaseError::Malformed`], [`LeaseError::Dynamo`].
    pub async fn get_lease(&self, shard_id: &str) -> Result<Option<Lease>, LeaseError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table_name)
            .key(attr::LEASE_KEY, AttributeValue::S(shard_id.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| self.sdk_error("GetItem", err))?;
        Ok(output.item.as_ref().map(Lease::from_item).transpose()?)
    }

    /// Writes a new lease row ([PutItem] conditional on
    /// `attribute_not_exists(leaseKey)`); a lease without a creation token
    /// gets a fresh one.
    ///
    /// [PutItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html
    ///
    /// # Errors
    /// [`LeaseError::TableMissing`], [`LeaseError::Dynamo`].
    pub async fn create_lease(&self, lease: &Lease) -> Result<CreateOutcome, LeaseError> {
        let mut lease = lease.clone();
        lease
            .creation_token
            .get_or_insert_with(|| WriteToken::random().0);
        let mut expr = Expr::default();
        let key = expr.name(attr::LEASE_KEY);
        let result = self
            .client
            .put_item()
            .table_name(&self.table_name)
            .set_item(Some(lease.to_item()))
            .condition_expression(format!("attribute_not_exists({key})"))
            .set_expression_attribute_names(Some(expr.names))
            .send()
            .await;
        match result {
            Ok(_) => {
                debug!(shard_id = %lease.lease_key, checkpoint = %lease.checkpoint, "lease created");
                Ok(CreateOutcome::Created(Box::new(lease)))
            }
            Err(err) if error_code(&err) == Some("ConditionalCheckFailedException") => {
                Ok(CreateOutcome::AlreadyExists)
            }
            Err(err) => Err(self.sdk_error("PutItem", err)),
        }
    }

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
        let mut expr = Expr::default();
        let (owner, counter, switches) = (
            expr.name(attr::LEASE_OWNER),
            expr.name(attr::LEASE_COUNTER),
            expr.name(attr::OWNER_SWITCHES_SINCE_CHECKPOINT),
        );
        let (me, one, expected) = (
            expr.value(AttributeValue::S(worker_id.to_owned())),
            expr.value(number(1)),
            expr.value(number(observed.lease_counter)),
        );
        let switch_increment = expr.value(number(u64::from(!observed.is_owned_by(worker_id))));
        let zero = expr.value(number(0));
        let owner_condition = match &observed.lease_owner {
            Some(previous) => format!(
                "{owner} = {}",
                expr.value(AttributeValue::S(previous.clone()))
            ),
            None => format!("attribute_not_exists({owner})"),
        };
        let mut update = format!(
            "SET {owner} = {me}, {counter} = {counter} + {one}, \
             {switches} = if_not_exists({switches}, {zero}) + {switch_increment}"
        );
        if let Some(failover) = self.failover_time {
            let name = expr.name(attr::OWNER_FAILOVER_TIME_MILLIS);
            let value = expr.value(number(millis(failover)));
            update.push_str(&format!(", {name} = {value}"));
        }
        let mut condition = format!("{counter} = {expected} AND {owner_condition}");
        // The row observed, not one created again since with the same
        // counter and owner (0, none).
        let creation = expr.name(attr::CREATION_TOKEN);
        match &observed.creation_token {
            Some(token) => {
                let token = expr.value(AttributeValue::S(token.clone()));
                condition.push_str(&format!(" AND {creation} = {token}"));
            }
            None => condition.push_str(&format!(" AND attribute_not_exists({creation})")),
        }
        let expected_counter = observed.lease_counter + 1;
        let token = WriteToken::random();
        self.conditional_update(
            "take",
            observed,
            &token,
            expr,
            update,
            condition,
            |current| current.is_owned_by(worker_id) && current.lease_counter == expected_counter,
        )
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
        let mut expr = Expr::default();
        let counter = expr.name(attr::LEASE_COUNTER);
        let one = expr.value(number(1));
        let update = format!("SET {counter} = {counter} + {one}");
        let condition = owner_condition(&mut expr, held);
        let owner = held.lease_owner.clone();
        let expected_counter = held.lease_counter + 1;
        self.conditional_update("renew", held, token, expr, update, condition, |current| {
            current.lease_owner == owner && current.lease_counter == expected_counter
        })
        .await
    }

    /// Records the batch about to be written (key, first, last) in `held`'s
    /// row, conditional on owner and counter. Must succeed before the PUT: a
    /// worker that lost the lease therefore cannot start a new batch (brief
    /// contract line 6). `token`: as for [`renew_lease`](Self::renew_lease).
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
        let mut expr = Expr::default();
        let counter = expr.name(attr::LEASE_COUNTER);
        let one = expr.value(number(1));
        let mut sets = vec![format!("{counter} = {counter} + {one}")];
        for (name, value) in pending_batch_attributes(batch) {
            sets.push(format!("{} = {}", expr.name(&name), expr.value(value)));
        }
        let update = format!("SET {}", sets.join(", "));
        let condition = owner_condition(&mut expr, held);
        let owner = held.lease_owner.clone();
        let expected_counter = held.lease_counter + 1;
        self.conditional_update(
            "record pending batch",
            held,
            token,
            expr,
            update,
            condition,
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
        let mut expr = Expr::default();
        let (counter, checkpoint_name) =
            (expr.name(attr::LEASE_COUNTER), expr.name(attr::CHECKPOINT));
        let (sub, switches) = (
            expr.name(attr::CHECKPOINT_SUB_SEQUENCE_NUMBER),
            expr.name(attr::OWNER_SWITCHES_SINCE_CHECKPOINT),
        );
        let removed = [
            attr::PENDING_CHECKPOINT,
            attr::PENDING_BATCH_KEY,
            attr::PENDING_BATCH_FIRST,
        ]
        .map(|name| expr.name(name));
        let (one, zero) = (expr.value(number(1)), expr.value(number(0)));
        let new_value = expr.value(AttributeValue::S(checkpoint.to_attribute()));
        let old_value = expr.value(AttributeValue::S(held.checkpoint.to_attribute()));
        // SHARD_END also stamps the wall-clock time, from which the ended
        // lease's retention is counted.
        let ended = if checkpoint.is_shard_end() {
            let name = expr.name(attr::SHARD_ENDED_AT);
            let now = expr.value(AttributeValue::S(
                humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            ));
            format!(", {name} = {now}")
        } else {
            String::new()
        };
        let update = format!(
            "SET {counter} = {counter} + {one}, {checkpoint_name} = {new_value}, {sub} = {zero}, {switches} = {zero}{ended} \
             REMOVE {}",
            removed.join(", ")
        );
        let condition = format!(
            "{} AND {checkpoint_name} = {old_value}",
            owner_condition(&mut expr, held)
        );
        let owner = held.lease_owner.clone();
        let expected_counter = held.lease_counter + 1;
        self.conditional_update(
            "checkpoint",
            held,
            token,
            expr,
            update,
            condition,
            |current| {
                current.lease_owner == owner
                    && current.lease_counter == expected_counter
                    && &current.checkpoint == checkpoint
                    && current.pending_batch.is_none()
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
        let mut expr = Expr::default();
        let (owner, counter) = (expr.name(attr::LEASE_OWNER), expr.name(attr::LEASE_COUNTER));
        let failover = expr.name(attr::OWNER_FAILOVER_TIME_MILLIS);
        let one = expr.value(number(1));
        let update = format!("SET {counter} = {counter} + {one} REMOVE {owner}, {failover}");
        let condition = owner_condition(&mut expr, held);
        let expected_counter = held.lease_counter + 1;
        self.conditional_update("release", held, token, expr, update, condition, |current| {
            current.lease_owner.is_none() && current.lease_counter == expected_counter
        })
        .await
    }

    /// Deletes `observed`'s row ([DeleteItem]), conditional on its counter.
    ///
    /// [DeleteItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DeleteItem.html
    ///
    /// # Errors
    /// [`LeaseError::LeaseLost`] when the row changed since it was observed.
    pub async fn delete_lease(&self, observed: &Lease) -> Result<(), LeaseError> {
        let mut expr = Expr::default();
        let counter = expr.name(attr::LEASE_COUNTER);
        let expected = expr.value(number(observed.lease_counter));
        let result = self
            .client
            .delete_item()
            .table_name(&self.table_name)
            .key(
                attr::LEASE_KEY,
                AttributeValue::S(observed.lease_key.clone()),
            )
            .condition_expression(format!("{counter} = {expected}"))
            .set_expression_attribute_names(Some(expr.names))
            .set_expression_attribute_values(Some(expr.values))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(err) if error_code(&err) == Some("ConditionalCheckFailedException") => {
                match self.get_lease(&observed.lease_key).await? {
                    None => Ok(()),
                    Some(_) => Err(LeaseError::LeaseLost {
                        shard_id: observed.lease_key.clone(),
                    }),
                }
            }
            Err(err) => Err(self.sdk_error("DeleteItem", err)),
        }
    }

    /// Runs one conditional [UpdateItem] returning the new row.
    ///
    /// [UpdateItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html
    #[allow(clippy::too_many_arguments)]
    async fn conditional_update(
        &self,
        what: &'static str,
        observed: &Lease,
        token: &WriteToken,
        expr: Expr,
        update: String,
        condition: String,
        applied: impl Fn(&Lease) -> bool,
    ) -> Result<Lease, LeaseError> {
        // Every conditional write stamps its token; see
        // `attr::LAST_WRITE_TOKEN` and `resolve_conflict`.
        let mut expr = expr;
        let token = token.as_str();
        let token_name = expr.name(attr::LAST_WRITE_TOKEN);
        let token_value = expr.value(AttributeValue::S(token.to_owned()));
        debug_assert!(update.starts_with("SET "), "updates start with SET");
        let update = update.replacen("SET ", &format!("SET {token_name} = {token_value}, "), 1);
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
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(Some(expr.names))
            .set_expression_attribute_values(Some(expr.values))
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
            Err(err) if error_code(&err) == Some("ConditionalCheckFailedException") => {
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

    fn sdk_error<E>(&self, operation: &'static str, err: SdkError<E, HttpResponse>) -> LeaseError
    where
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
    {
        if error_code(&err) == Some("ResourceNotFoundException") {
            return LeaseError::TableMissing {
                table: self.table_name.clone(),
            };
        }
        LeaseError::Dynamo {
            operation,
            table: self.table_name.clone(),
            retriable: is_retriable(&err),
            throttled: is_throttling(&err),
            source: Box::new(err),
        }
    }

    fn build_error(
        &self,
        operation: &'static str,
        err: aws_sdk_dynamodb::error::BuildError,
    ) -> LeaseError {
        LeaseError::Dynamo {
            operation,
            table: self.table_name.clone(),
            retriable: false,
            throttled: false,
            source: Box::new(err),
        }
    }
}

/// `#owner = :me AND #counter = :counter AND #token = :token` for a write
/// by `held`'s owner. The token (of this owner's last write, which `held`
/// holds) makes the fence exact: a lease re-created after a table loss and
/// taken by another process with the same worker id can reach the same
/// counter, but never the same random token.
fn owner_condition(expr: &mut Expr, held: &Lease) -> String {
    debug_assert!(held.lease_owner.is_some(), "owner writes need an owner");
    let (owner, counter) = (expr.name(attr::LEASE_OWNER), expr.name(attr::LEASE_COUNTER));
    let me = expr.value(AttributeValue::S(
        held.lease_owner.clone().unwrap_or_default(),
    ));
    let expected = expr.value(number(held.lease_counter));
    let mut condition = format!("{owner} = {me} AND {counter} = {expected}");
    // Rows written before tokens existed have none; the counter fences them.
    if let Some(last) = &held.last_write_token {
        let token = expr.name(attr::LAST_WRITE_TOKEN);
        let last = expr.value(AttributeValue::S(last.clone()));
        condition.push_str(&format!(" AND {token} = {last}"));
    }
    condition
}

/// The service error code of a failed call, if the service sent one.
fn error_code<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> Option<&str> {
    match err {
        SdkError::ServiceError(context) => context.err().code(),
        _ => None,
    }
}

/// Placeholders for an expression: every attribute name as `#aN` (so reserved
/// words never matter), every value as `:vN`.
#[derive(Default)]
struct Expr {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Expr {
    fn name(&mut self, attribute: &str) -> String {
        if let Some((placeholder, _)) = self
            .names
            .iter()
            .find(|(_, name)| name.as_str() == attribute)
        {
            return placeholder.clone();
        }
        let placeholder = format!("#a{}", self.names.len());
        self.names.insert(placeholder.clone(), attribute.to_owned());
        placeholder
    }

    fn value(&mut self, value: AttributeValue) -> String {
        let placeholder = format!(":v{}", self.values.len());
        self.values.insert(placeholder.clone(), value);
        placeholder
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::operation::create_table::CreateTableOutput;
    use aws_sdk_dynamodb::operation::describe_table::{DescribeTableError, DescribeTableOutput};
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_sdk_dynamodb::operation::put_item::PutItemError;
    use aws_sdk_dynamodb::operation::scan::ScanOutput;
    use aws_sdk_dynamodb::operation::update_item::{
        UpdateItemError, UpdateItemInput, UpdateItemOutput,
    };
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ProvisionedThroughputExceededException,
        ResourceNotFoundException,
    };
    use aws_sdk_dynamodb::types::{TableDescription, TableStatus};
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use aws_smithy_types::error::ErrorMetadata;
    use sequence_range::SequenceNumber;

    use super::*;

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
        let names = input.expression_attribute_names()?;
        let (placeholder, _) = names.iter().find(|(_, name)| name.as_str() == attribute)?;
        let condition = input.condition_expression()?;
        let rest = condition.split(&format!("{placeholder} = ")).nth(1)?;
        let value_placeholder: String = rest
            .chars()
            .take_while(|c| *c == ':' || c.is_alphanumeric())
            .collect();
        input
            .expression_attribute_values()?
            .get(&value_placeholder)
            .cloned()
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
                let token = input
                    .expression_attribute_names()
                    .and_then(|names| names.iter().find(|(_, n)| n.as_str() == "lastWriteToken"))
                    .and_then(|(placeholder, _)| {
                        input
                            .update_expression()?
                            .split(&format!("{placeholder} = "))
                            .nth(1)
                    })
                    .and_then(|rest| rest.split(',').next())
                    .and_then(|value| input.expression_attribute_values()?.get(value.trim()))
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

    /// The value an update sets `attribute` to.
    fn update_value(input: &UpdateItemInput, attribute: &str) -> Option<AttributeValue> {
        let names = input.expression_attribute_names()?;
        let (placeholder, _) = names.iter().find(|(_, name)| name.as_str() == attribute)?;
        let rest = input
            .update_expression()?
            .split(&format!("{placeholder} = "))
            .nth(1)?;
        let value_placeholder: String = rest
            .chars()
            .take_while(|c| *c == ':' || c.is_alphanumeric())
            .collect();
        input
            .expression_attribute_values()?
            .get(&value_placeholder)
            .cloned()
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

    #[tokio::test]
    async fn created_rows_carry_a_creation_token() {
        let put = mock!(Client::put_item)
            .match_requests(|input| {
                input
                    .item()
                    .and_then(|item| item.get(attr::CREATION_TOKEN))
                    .is_some_and(|token| token.as_s().is_ok_and(|t| t.len() == 16))
            })
            .then_output(|| {
                aws_sdk_dynamodb::operation::put_item::PutItemOutput::builder().build()
            });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&put]);
        let table = LeaseTable::new(client, "leases");
        let lease = Lease::new(SHARD, Checkpoint::TrimHorizon, vec![]);
        let CreateOutcome::Created(created) = table.create_lease(&lease).await.unwrap() else {
            panic!("created")
        };
        assert!(created.creation_token.is_some());
        assert_eq!(put.num_calls(), 1);
    }

    #[tokio::test]
    async fn create_lease_leaves_an_existing_row_alone() {
        let put = mock!(Client::put_item)
            .match_requests(|input| {
                input
                    .condition_expression()
                    .is_some_and(|c| c.starts_with("attribute_not_exists("))
            })
            .then_error(|| {
                PutItemError::ConditionalCheckFailedException(
                    ConditionalCheckFailedException::builder()
                        .meta(meta("ConditionalCheckFailedException"))
                        .build(),
                )
            });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&put]);
        let table = LeaseTable::new(client, "leases");
        let lease = Lease::new(SHARD, Checkpoint::TrimHorizon, vec![]);
        assert_eq!(
            table.create_lease(&lease).await.unwrap(),
            CreateOutcome::AlreadyExists
        );
    }

    #[tokio::test]
    async fn list_leases_reads_every_page_and_skips_malformed_rows() {
        let first = Lease::new("shardId-000000000000", Checkpoint::TrimHorizon, vec![]);
        let second = Lease::new("shardId-000000000001", seq(7), vec![]);
        let (a, b) = (first.clone(), second.clone());
        let page1 = mock!(Client::scan)
            .match_requests(|input| {
                input.exclusive_start_key().is_none() && input.consistent_read() == Some(true)
            })
            .then_output(move || {
                let mut junk = HashMap::new();
                junk.insert("leaseKey".to_owned(), AttributeValue::S("junk".to_owned()));
                ScanOutput::builder()
                    .items(a.to_item())
                    .items(junk)
                    .set_last_evaluated_key(Some(HashMap::from([(
                        "leaseKey".to_owned(),
                        AttributeValue::S("junk".to_owned()),
                    )])))
                    .build()
            });
        let page2 = mock!(Client::scan)
            .match_requests(|input| input.exclusive_start_key().is_some())
            .then_output(move || ScanOutput::builder().items(b.to_item()).build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&page1, &page2]);
        let table = LeaseTable::new(client, "leases");
        assert_eq!(table.list_leases().await.unwrap(), vec![first, second]);
    }

    #[tokio::test]
    async fn scan_separates_heartbeats_from_leases() {
        let lease = Lease::new("shardId-000000000000", Checkpoint::TrimHorizon, vec![]);
        let row = lease.clone();
        let scan = mock!(Client::scan).then_output(move || {
            ScanOutput::builder()
                .items(row.to_item())
                .items(HashMap::from([
                    (
                        "leaseKey".to_owned(),
                        AttributeValue::S("worker#host-a".to_owned()),
                    ),
                    (
                        "workerId".to_owned(),
                        AttributeValue::S("host-a".to_owned()),
                    ),
                    (
                        "heartbeatCounter".to_owned(),
                        AttributeValue::N("7".to_owned()),
                    ),
                    ("leasesHeld".to_owned(), AttributeValue::N("3".to_owned())),
                ]))
                .build()
        });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&scan]);
        let table = LeaseTable::new(client, "leases");
        let scanned = table.scan().await.unwrap();
        assert_eq!(scanned.leases, vec![lease]);
        assert_eq!(
            scanned.workers,
            vec![WorkerHeartbeat {
                worker_id: "host-a".to_owned(),
                heartbeat_counter: 7,
                last_heartbeat: None,
                leases_held: 3,
            }]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn waits_out_a_deleting_table_then_creates_it_again() {
        let status = |status: TableStatus| {
            move || {
                DescribeTableOutput::builder()
                    .table(
                        TableDescription::builder()
                            .table_status(status.clone())
                            .build(),
                    )
                    .build()
            }
        };
        let deleting = mock!(Client::describe_table).then_output(status(TableStatus::Deleting));
        let gone = mock!(Client::describe_table).then_error(|| {
            DescribeTableError::ResourceNotFoundException(
                ResourceNotFoundException::builder()
                    .meta(meta("ResourceNotFoundException"))
                    .build(),
            )
        });
        let create =
            mock!(Client::create_table).then_output(|| CreateTableOutput::builder().build());
        let creating = mock!(Client::describe_table).then_output(status(TableStatus::Creating));
        let active = mock!(Client::describe_table).then_output(status(TableStatus::Active));
        let client = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::Sequential,
            [&deleting, &gone, &create, &creating, &active]
        );
        let table = LeaseTable::new(client, "leases");
        let started = tokio::time::Instant::now();
        assert_eq!(
            table.create_table_if_missing().await.unwrap(),
            TableCreation::Created
        );
        assert!(
            started.elapsed() <= Duration::from_secs(3),
            "polled every second, not every 20 s"
        );
        assert_eq!(active.num_calls(), 1);
    }

    #[tokio::test]
    async fn creates_a_missing_table_on_demand() {
        let describe_missing = mock!(Client::describe_table).then_error(|| {
            DescribeTableError::ResourceNotFoundException(
                ResourceNotFoundException::builder()
                    .meta(meta("ResourceNotFoundException"))
                    .build(),
            )
        });
        let create = mock!(Client::create_table)
            .match_requests(|input| {
                input.billing_mode() == Some(&BillingMode::PayPerRequest)
                    && input.key_schema().first().map(|k| k.attribute_name()) == Some("leaseKey")
            })
            .then_output(|| CreateTableOutput::builder().build());
        let describe_active = mock!(Client::describe_table).then_output(|| {
            DescribeTableOutput::builder()
                .table(
                    TableDescription::builder()
                        .table_status(TableStatus::Active)
                        .build(),
                )
                .build()
        });
        let client = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::Sequential,
            [&describe_missing, &create, &describe_active]
        );
        let table = LeaseTable::new(client, "leases");
        assert_eq!(
            table.create_table_if_missing().await.unwrap(),
            TableCreation::Created
        );
        assert_eq!(create.num_calls(), 1);
    }
}
