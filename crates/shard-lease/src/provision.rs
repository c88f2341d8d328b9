//! [`create_table_if_missing`]: a DynamoDB table with one string partition
//! key and on-demand billing, created if it does not exist, then waited for
//! until it is `ACTIVE` — the lease table's and the daemon's other tables'
//! one way to make sure of their table.
//!
//! The waiting is the SDK's waiter machinery (smithy's
//! `WaiterOrchestrator`, which `Client::wait_until_table_exists` and
//! `wait_until_table_not_exists` run) with those waiters' acceptors, but
//! polling every second: the generated waiters wait at least 20 s between
//! polls, and after a lost table the workers are idle until it is back.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::describe_table::{DescribeTableError, DescribeTableOutput};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, TableStatus,
};
use aws_smithy_async::rt::sleep::{SharedAsyncSleep, TokioSleep};
use aws_smithy_runtime::client::waiters::{AcceptorState, WaiterOrchestrator};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_runtime_api::client::waiters::error::WaiterError;
use tracing::debug;

use crate::retry::{ErrorClass, Kind, Modeled, classify, kind};

/// How long [`create_table_if_missing`] waits for a table to become
/// `ACTIVE` (or, first, for one being deleted to be gone).
pub const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(300);

/// How often it looks.
const TABLE_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// What [`create_table_if_missing`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableCreation {
    /// The table existed (or another caller created it meanwhile).
    Existed,
    /// This call created it.
    Created,
}

/// Called with the operation's name (`DescribeTable`, `CreateTable`) before
/// each request [`create_table_if_missing`] sends, waiter polls included:
/// for a caller that counts its requests.
pub type OnRequest<'a> = dyn Fn(&'static str) + Send + Sync + 'a;

/// Why [`create_table_if_missing`] failed.
#[derive(Debug, thiserror::Error)]
pub enum TableSetupError {
    /// A DynamoDB call failed; `class` says how to retry it.
    #[error("dynamodb {operation} on table {table} failed")]
    Dynamo {
        /// The DynamoDB operation: `DescribeTable` or `CreateTable`.
        operation: &'static str,
        /// The table name.
        table: String,
        /// How the failure is retried ([`classify`]).
        class: ErrorClass,
        /// The SDK error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The table did not become `ACTIVE` (or a table being deleted did
    /// not go) within [`TABLE_ACTIVE_TIMEOUT`].
    #[error("table {table} not ACTIVE after {waited:?}")]
    NotActive {
        /// The table name.
        table: String,
        /// How long it was waited for.
        waited: Duration,
    },
}

/// Creates table `table` if it does not exist — partition key `hash_key`
/// (a string), on-demand billing — and waits until it is `ACTIVE`, for at
/// most [`TABLE_ACTIVE_TIMEOUT`]. A table being deleted is waited out, then
/// created again. Idempotent: callers racing each other all succeed
/// (`ResourceInUseException` from CreateTable counts as "exists").
///
/// Calls [DescribeTable], then as needed [CreateTable] and DescribeTable
/// every second until the table is `ACTIVE` (or gone, when it was being
/// deleted); `on_request` is told of each call.
///
/// [DescribeTable]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DescribeTable.html
/// [CreateTable]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CreateTable.html
///
/// # Errors
/// [`TableSetupError::Dynamo`] when a call fails (any DescribeTable error
/// but `ResourceNotFoundException`, any CreateTable error but
/// `ResourceInUseException`); [`TableSetupError::NotActive`] after the
/// timeout.
pub async fn create_table_if_missing(
    client: &Client,
    table: &str,
    hash_key: &str,
    on_request: &OnRequest<'_>,
) -> Result<TableCreation, TableSetupError> {
    let started = tokio::time::Instant::now();
    let remaining = || TABLE_ACTIVE_TIMEOUT.saturating_sub(started.elapsed());
    on_request("DescribeTable");
    let described = client.describe_table().table_name(table).send().await;
    let outcome = match described {
        Ok(output) => match status(&output) {
            TableStatus::Active => return Ok(TableCreation::Existed),
            TableStatus::Deleting => {
                debug!(table, "waiting for the table being deleted to go");
                wait(client, table, on_request, is_gone, remaining()).await?;
                create(client, table, hash_key, on_request).await?
            }
            _ => TableCreation::Existed,
        },
        Err(err) if kind(&err) == Some(Kind::ResourceNotFound) => {
            create(client, table, hash_key, on_request).await?
        }
        Err(err) => return Err(sdk_error("DescribeTable", table, err)),
    };
    debug!(table, "waiting for the table to become ACTIVE");
    wait(client, table, on_request, is_active, remaining()).await?;
    Ok(outcome)
}

/// [CreateTable]: `Created`, or `Existed` when the table is in use (another
/// caller is creating it, or it is still being deleted).
///
/// [CreateTable]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CreateTable.html
async fn create(
    client: &Client,
    table: &str,
    hash_key: &str,
    on_request: &OnRequest<'_>,
) -> Result<TableCreation, TableSetupError> {
    let build_error = |err: aws_sdk_dynamodb::error::BuildError| TableSetupError::Dynamo {
        operation: "CreateTable",
        table: table.to_owned(),
        class: ErrorClass::Persistent,
        source: Box::new(err),
    };
    let key = KeySchemaElement::builder()
        .attribute_name(hash_key)
        .key_type(KeyType::Hash)
        .build()
        .map_err(build_error)?;
    let definition = AttributeDefinition::builder()
        .attribute_name(hash_key)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(build_error)?;
    on_request("CreateTable");
    let result = client
        .create_table()
        .table_name(table)
        .key_schema(key)
        .attribute_definitions(definition)
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await;
    match result {
        Ok(_) => Ok(TableCreation::Created),
        Err(err) if kind(&err) == Some(Kind::ResourceInUse) => Ok(TableCreation::Existed),
        Err(err) => Err(sdk_error("CreateTable", table, err)),
    }
}

/// The status DescribeTable reports; a table without one is taken as
/// `ACTIVE`.
fn status(output: &DescribeTableOutput) -> TableStatus {
    output
        .table()
        .and_then(|table| table.table_status())
        .cloned()
        .unwrap_or(TableStatus::Active)
}

/// The `TableExists` waiter's acceptors: done when `ACTIVE`; a table not
/// (yet) found, or in another status, is polled again.
fn is_active(result: Result<&DescribeTableOutput, &DescribeTableError>) -> AcceptorState {
    match result {
        Ok(output) if status(output) == TableStatus::Active => AcceptorState::Success,
        Ok(_) => AcceptorState::Retry,
        Err(err) if err.kind() == Kind::ResourceNotFound => AcceptorState::Retry,
        Err(_) => AcceptorState::NoAcceptorsMatched,
    }
}

/// The `TableNotExists` waiter's acceptors: done when the table is not
/// found; while it is there, polled again.
fn is_gone(result: Result<&DescribeTableOutput, &DescribeTableError>) -> AcceptorState {
    match result {
        Ok(_) => AcceptorState::Retry,
        Err(err) if err.kind() == Kind::ResourceNotFound => AcceptorState::Success,
        Err(_) => AcceptorState::NoAcceptorsMatched,
    }
}

/// Polls DescribeTable every second until `acceptor` says done, for at
/// most `max_wait`, with the client's clock and sleep.
async fn wait(
    client: &Client,
    table: &str,
    on_request: &OnRequest<'_>,
    acceptor: fn(Result<&DescribeTableOutput, &DescribeTableError>) -> AcceptorState,
    max_wait: Duration,
) -> Result<(), TableSetupError> {
    let config = client.config();
    let orchestrator = WaiterOrchestrator::builder()
        .min_delay(TABLE_POLL_INTERVAL)
        .max_delay(TABLE_POLL_INTERVAL)
        .max_wait(max_wait)
        .time_source(config.time_source().unwrap_or_default())
        .sleep_impl(
            config
                .sleep_impl()
                .unwrap_or_else(|| SharedAsyncSleep::new(TokioSleep::new())),
        )
        .acceptor(acceptor)
        .operation(|| {
            on_request("DescribeTable");
            client.describe_table().table_name(table).send()
        })
        .build();
    match orchestrator.orchestrate().await {
        Ok(_) => Ok(()),
        Err(WaiterError::ExceededMaxWait(_)) => Err(TableSetupError::NotActive {
            table: table.to_owned(),
            waited: TABLE_ACTIVE_TIMEOUT,
        }),
        Err(WaiterError::OperationFailed(failed)) => {
            Err(sdk_error("DescribeTable", table, failed.into_error()))
        }
        // No acceptor above says failure; construction needs nothing.
        Err(other) => Err(TableSetupError::Dynamo {
            operation: "DescribeTable",
            table: table.to_owned(),
            class: ErrorClass::Persistent,
            source: format!("{other:?}").into(),
        }),
    }
}

fn sdk_error<E: Modeled>(
    operation: &'static str,
    table: &str,
    err: SdkError<E, HttpResponse>,
) -> TableSetupError {
    TableSetupError::Dynamo {
        operation,
        table: table.to_owned(),
        class: classify(&err),
        source: Box::new(err),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Mutex;

    use aws_sdk_dynamodb::operation::create_table::{CreateTableError, CreateTableOutput};
    use aws_sdk_dynamodb::types::TableDescription;
    use aws_sdk_dynamodb::types::error::{ResourceInUseException, ResourceNotFoundException};
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use aws_smithy_types::error::ErrorMetadata;

    use super::*;

    fn meta(code: &str) -> ErrorMetadata {
        ErrorMetadata::builder().code(code).message("mock").build()
    }

    /// A DescribeTable answer with `status`, for `then_output`.
    pub(crate) fn described(status: TableStatus) -> impl Fn() -> DescribeTableOutput {
        move || {
            DescribeTableOutput::builder()
                .table(
                    TableDescription::builder()
                        .table_status(status.clone())
                        .build(),
                )
                .build()
        }
    }

    fn missing() -> DescribeTableError {
        DescribeTableError::ResourceNotFoundException(
            ResourceNotFoundException::builder()
                .meta(meta("ResourceNotFoundException"))
                .build(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn creates_with_the_key_asked_for_polls_every_second_and_tells_each_request() {
        let gone = mock!(Client::describe_table).then_error(missing);
        let create = mock!(Client::create_table)
            .match_requests(|input| {
                input.table_name() == Some("events")
                    && input.billing_mode() == Some(&BillingMode::PayPerRequest)
                    && input.key_schema().first().map(|k| k.attribute_name()) == Some("eventId")
            })
            .then_output(|| CreateTableOutput::builder().build());
        let not_yet = mock!(Client::describe_table).then_error(missing);
        let creating = mock!(Client::describe_table).then_output(described(TableStatus::Creating));
        let updating = mock!(Client::describe_table).then_output(described(TableStatus::Updating));
        let active = mock!(Client::describe_table).then_output(described(TableStatus::Active));
        let client = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::Sequential,
            [&gone, &create, &not_yet, &creating, &updating, &active]
        );
        let requests = Mutex::new(Vec::new());
        let started = tokio::time::Instant::now();
        let outcome = create_table_if_missing(&client, "events", "eventId", &|operation| {
            requests.lock().unwrap().push(operation);
        })
        .await
        .unwrap();
        assert_eq!(outcome, TableCreation::Created);
        assert_eq!(active.num_calls(), 1);
        let waited = started.elapsed();
        assert!(
            (Duration::from_secs(3)..Duration::from_secs(4)).contains(&waited),
            "three polls a second apart after the first: {waited:?}"
        );
        assert_eq!(
            *requests.lock().unwrap(),
            [
                "DescribeTable",
                "CreateTable",
                "DescribeTable",
                "DescribeTable",
                "DescribeTable",
                "DescribeTable"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_table_in_use_is_waited_for_and_a_failed_poll_is_classified() {
        let gone = mock!(Client::describe_table).then_error(missing);
        let in_use = mock!(Client::create_table).then_error(|| {
            CreateTableError::ResourceInUseException(
                ResourceInUseException::builder()
                    .meta(meta("ResourceInUseException"))
                    .build(),
            )
        });
        let throttled = mock!(Client::describe_table)
            .then_error(|| DescribeTableError::generic(meta("ThrottlingException")));
        let client = mock_client!(
            aws_sdk_dynamodb,
            RuleMode::Sequential,
            [&gone, &in_use, &throttled]
        );
        let err = create_table_if_missing(&client, "leases", "leaseKey", &|_| {})
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                TableSetupError::Dynamo {
                    operation: "DescribeTable",
                    class: ErrorClass::Throttling,
                    ..
                }
            ),
            "{err:?}"
        );
        // The SDK's own retries (standard mode, 3 attempts) come first.
        assert_eq!((in_use.num_calls(), throttled.num_calls()), (1, 3));

        let creating = mock!(Client::describe_table).then_output(described(TableStatus::Creating));
        let active = mock!(Client::describe_table).then_output(described(TableStatus::Active));
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&creating, &active]);
        assert_eq!(
            create_table_if_missing(&client, "leases", "leaseKey", &|_| {})
                .await
                .unwrap(),
            TableCreation::Existed
        );
    }
}
