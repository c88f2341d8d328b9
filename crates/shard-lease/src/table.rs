//! [`LeaseTable`]: the handle on the lease table, and its calls that are not
//! an owner's writes: create the table, scan it, read a row, create and
//! delete lease rows. The owner's writes are in [`crate::owner_writes`], the
//! heartbeats in [`crate::heartbeat`], the Iceberg committer row in
//! [`crate::committer`]. Every write to a lease row is
//! conditional; a heartbeat row, written only by its own worker, is not.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use tracing::{debug, info, warn};

use crate::committer::{COMMITTER_KEY, ICEBERG_KEY_PREFIX};
use crate::heartbeat::WORKER_KEY_PREFIX;
use crate::lease::{attr, number};
use crate::provision::{self, TableCreation, TableSetupError};
use crate::retry::{ErrorClass, Kind, Modeled, classify, kind};
use crate::{
    CommitterLease, Condition, Expressions, Lease, LeaseError, Update, WorkerHeartbeat, WriteToken,
};

/// The lease table: one row per shard, keyed by `leaseKey` (the shard id).
///
/// Cheap to clone (the SDK client is reference-counted).
#[derive(Clone, Debug)]
pub struct LeaseTable {
    pub(crate) client: Client,
    pub(crate) table_name: String,
    /// Recorded in every lease this handle takes (`ownerFailoverTimeMillis`).
    pub(crate) failover_time: Option<Duration>,
}

/// Everything in the lease table: leases, worker heartbeats and the Iceberg
/// committer row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableScan {
    /// Lease rows, by `leaseKey`.
    pub leases: Vec<Lease>,
    /// Heartbeat rows, by worker id.
    pub workers: Vec<WorkerHeartbeat>,
    /// The committer row ([`COMMITTER_KEY`]), when there is one.
    pub committer: Option<CommitterLease>,
}

/// What kind of row a `leaseKey` names.
enum RowKind {
    Lease,
    Worker,
    Committer,
    /// Another `iceberg#` row, which this version does not know.
    OtherIceberg,
}

impl RowKind {
    fn of(item: &HashMap<String, AttributeValue>) -> Self {
        match item.get(attr::LEASE_KEY).and_then(|key| key.as_s().ok()) {
            Some(key) if key.starts_with(WORKER_KEY_PREFIX) => Self::Worker,
            Some(key) if key == COMMITTER_KEY => Self::Committer,
            Some(key) if key.starts_with(ICEBERG_KEY_PREFIX) => Self::OtherIceberg,
            _ => Self::Lease,
        }
    }
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
    /// on-demand billing — and waits until it is `ACTIVE`
    /// ([`create_table_if_missing`](crate::provision::create_table_if_missing):
    /// DescribeTable, CreateTable, DescribeTable every second). Two workers
    /// racing to create it both succeed.
    ///
    /// # Errors
    /// [`LeaseError::Dynamo`] when a call fails, or (retriable) when the
    /// table is not `ACTIVE` after [`TABLE_ACTIVE_TIMEOUT`](crate::TABLE_ACTIVE_TIMEOUT).
    pub async fn create_table_if_missing(&self) -> Result<TableCreation, LeaseError> {
        let outcome = provision::create_table_if_missing(
            &self.client,
            &self.table_name,
            attr::LEASE_KEY,
            &|_| {},
        )
        .await
        .map_err(|err| match err {
            TableSetupError::Dynamo {
                operation,
                class,
                source,
                ..
            } => self.classified(operation, class, source),
            TableSetupError::NotActive { waited, .. } => LeaseError::Dynamo {
                operation: "DescribeTable",
                table: self.table_name.clone(),
                retriable: true,
                throttled: false,
                source: format!("table not ACTIVE after {waited:?}").into(),
            },
        })?;
        if outcome == TableCreation::Created {
            info!(table = %self.table_name, "lease table created");
        }
        Ok(outcome)
    }

    /// Every row, read with a consistent [Scan] (all pages): the leases, the
    /// worker heartbeats and the committer row; other `iceberg#` rows are
    /// skipped. Rows that do not decode are logged and skipped, so a
    /// foreign row cannot stop the worker.
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
                let decoded = match RowKind::of(item) {
                    RowKind::Worker => {
                        WorkerHeartbeat::from_item(item).map(|worker| scan.workers.push(worker))
                    }
                    RowKind::Committer => CommitterLease::from_item(item)
                        .map(|committer| scan.committer = Some(committer)),
                    RowKind::OtherIceberg => Ok(()),
                    RowKind::Lease => Lease::from_item(item).map(|lease| scan.leases.push(lease)),
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

    /// Every lease row ([`scan`](Self::scan) without the heartbeats and the
    /// committer row).
    ///
    /// # Errors
    /// As [`scan`](Self::scan).
    pub async fn list_leases(&self) -> Result<Vec<Lease>, LeaseError> {
        Ok(self.scan().await?.leases)
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
            .get_or_insert_with(|| WriteToken::random().as_str().to_owned());
        let expressions = Expressions::new(
            &Update::new(),
            &Condition::new().not_exists(attr::LEASE_KEY),
        );
        let result = self
            .client
            .put_item()
            .table_name(&self.table_name)
            .set_item(Some(lease.to_item()))
            .set_condition_expression(expressions.condition)
            .set_expression_attribute_names(expressions.names)
            .set_expression_attribute_values(expressions.values)
            .send()
            .await;
        match result {
            Ok(_) => {
                debug!(shard_id = %lease.lease_key, checkpoint = %lease.checkpoint, "lease created");
                Ok(CreateOutcome::Created(Box::new(lease)))
            }
            Err(err) if kind(&err) == Some(Kind::ConditionalCheckFailed) => {
                Ok(CreateOutcome::AlreadyExists)
            }
            Err(err) => Err(self.sdk_error("PutItem", err)),
        }
    }

    /// Deletes `observed`'s row ([DeleteItem]), conditional on its counter.
    ///
    /// [DeleteItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DeleteItem.html
    ///
    /// # Errors
    /// [`LeaseError::LeaseLost`] when the row changed since it was observed.
    pub async fn delete_lease(&self, observed: &Lease) -> Result<(), LeaseError> {
        let condition =
            Condition::new().equals(attr::LEASE_COUNTER, number(observed.lease_counter));
        let expressions = Expressions::new(&Update::new(), &condition);
        let result = self
            .client
            .delete_item()
            .table_name(&self.table_name)
            .key(
                attr::LEASE_KEY,
                AttributeValue::S(observed.lease_key.clone()),
            )
            .set_condition_expression(expressions.condition)
            .set_expression_attribute_names(expressions.names)
            .set_expression_attribute_values(expressions.values)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(err) if kind(&err) == Some(Kind::ConditionalCheckFailed) => {
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

    /// The [`LeaseError`] for a failed call: `TableMissing` for
    /// `ResourceNotFoundException`, else `Dynamo`, retriable and throttled
    /// as [`crate::retry::classify`] says.
    pub(crate) fn sdk_error<E>(
        &self,
        operation: &'static str,
        err: SdkError<E, HttpResponse>,
    ) -> LeaseError
    where
        E: Modeled,
    {
        self.classified(operation, classify(&err), Box::new(err))
    }

    /// The [`LeaseError`] for a failed call classified as `class`.
    fn classified(
        &self,
        operation: &'static str,
        class: ErrorClass,
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    ) -> LeaseError {
        if class == ErrorClass::TableMissing {
            return LeaseError::TableMissing {
                table: self.table_name.clone(),
            };
        }
        LeaseError::Dynamo {
            operation,
            table: self.table_name.clone(),
            retriable: class.is_retriable(),
            throttled: class.is_throttling(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::operation::create_table::CreateTableOutput;
    use aws_sdk_dynamodb::operation::describe_table::{DescribeTableError, DescribeTableOutput};
    use aws_sdk_dynamodb::operation::put_item::PutItemError;
    use aws_sdk_dynamodb::operation::scan::ScanOutput;
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ResourceNotFoundException,
    };
    use aws_sdk_dynamodb::types::{BillingMode, TableDescription, TableStatus};
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use aws_smithy_types::error::ErrorMetadata;
    use sequence_range::SequenceNumber;

    use super::*;
    use crate::Checkpoint;

    const SHARD: &str = "shardId-000000000007";

    fn meta(code: &str) -> ErrorMetadata {
        ErrorMetadata::builder().code(code).message("mock").build()
    }

    fn seq(n: u64) -> Checkpoint {
        Checkpoint::SequenceNumber(SequenceNumber::from(n))
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
        let status = crate::provision::tests::described;
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
