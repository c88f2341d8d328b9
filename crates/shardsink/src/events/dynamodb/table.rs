//! [`EventTable`]: one thin, documented function per DynamoDB call the
//! DynamoDB store makes, each counted in
//! `shardsink_event_manifest_requests_total{operation}` and the item
//! requests' consumed capacity in
//! `shardsink_event_manifest_capacity_units_total{operation}`; and
//! [`DynamoDbStoreError`], with how a failure is retried ([`Classify`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::BuildError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConsumedCapacity, KeysAndAttributes, ReturnConsumedCapacity,
    TimeToLiveSpecification, TimeToLiveStatus,
};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use shard_lease::retry::{ErrorClass, Kind, Modeled, classify, kind};
use shard_lease::{Condition, Expressions, Update};
use shard_lease::{TableCreation, TableSetupError};

use super::item::{Item, attr, event_id, parse_event_id};
use crate::aws::BoxError;
use crate::aws::retry::{Classify, Failure};
use crate::events::rule::EventKey;
use crate::ops::metrics::{Metrics, RetryCause};

/// Keys per BatchGetItem request: DynamoDB's limit.
pub const BATCH_GET_KEYS: usize = 100;

/// Why a DynamoDB store call failed. [`Classify`] says how to retry: throttling
/// and 5xx soon, what an operator must fix slowly; a missing table or a
/// TTL on another attribute not at all.
#[derive(Debug, thiserror::Error)]
pub enum DynamoDbStoreError {
    /// The table does not exist (`ResourceNotFoundException`): deleted
    /// while running.
    /// [`DynamoDbStore::ensure_table`](super::DynamoDbStore::ensure_table)
    /// creates it again, empty.
    #[error("DynamoDB event table {table} does not exist")]
    TableMissing {
        /// The table name.
        table: String,
    },
    /// A DynamoDB call failed.
    #[error("dynamodb {operation} on DynamoDB event table {table} failed")]
    Dynamo {
        /// The DynamoDB operation, e.g. `PutItem`.
        operation: &'static str,
        /// The table name.
        table: String,
        /// Whether a retry after a backoff may succeed (throttling, 5xx,
        /// timeouts, transient errors).
        retriable: bool,
        /// Whether DynamoDB throttled the call.
        throttled: bool,
        /// The SDK error.
        #[source]
        source: BoxError,
    },
    /// DynamoDB refused an item request as one that can never succeed
    /// ([`REFUSED_CODES`](shard_lease::retry::REFUSED_CODES)): not
    /// retried. The DynamoDB store records nothing for the item and decides its
    /// records as they are, kept.
    #[error("dynamodb refused {operation} on DynamoDB event table {table}: it can never succeed")]
    Rejected {
        /// The DynamoDB operation, e.g. `PutItem`.
        operation: &'static str,
        /// The table name.
        table: String,
        /// The SDK error, with DynamoDB's message.
        #[source]
        source: BoxError,
    },
    /// BatchGetItem left keys unprocessed (DynamoDB out of capacity): like
    /// throttling.
    #[error("dynamodb BatchGetItem on DynamoDB event table {table} left {keys} keys unprocessed")]
    Unprocessed {
        /// The table name.
        table: String,
        /// How many keys.
        keys: usize,
    },
    /// An item the DynamoDB store did not write, or cannot read back.
    #[error("item {event_id} in DynamoDB event table {table} is malformed: {reason}")]
    Malformed {
        /// The table name.
        table: String,
        /// Its `eventId`.
        event_id: String,
        /// What is wrong.
        reason: String,
    },
    /// Another writer changed one item between this worker's read and its
    /// conditional write too many times in a row.
    #[error(
        "item {event_id} in DynamoDB event table {table} changed under {attempts} writes in a row"
    )]
    Contended {
        /// The table name.
        table: String,
        /// The item's `eventId`.
        event_id: String,
        /// Conditional writes that failed.
        attempts: u32,
    },
    /// The table did not become `ACTIVE` in time.
    #[error("DynamoDB event table {table} not ACTIVE after {waited:?}")]
    NotActive {
        /// The table name.
        table: String,
        /// How long it was waited for.
        waited: Duration,
    },
    /// The server does not know Time to Live (`UnknownOperationException`:
    /// a DynamoDB-compatible server such as dynalite; DynamoDB itself always
    /// has it). Items never expire there.
    #[error(
        "the server of DynamoDB event table {table} has no Time to Live; its items never expire"
    )]
    TtlUnsupported {
        /// The table name.
        table: String,
    },
    /// Time to Live is on for another attribute than `ttl`: items would
    /// never expire. An operator must turn it off.
    #[error("DynamoDB event table {table} has Time to Live on attribute {attribute}, not ttl")]
    TtlOnOtherAttribute {
        /// The table name.
        table: String,
        /// The attribute TTL is on.
        attribute: String,
    },
}

impl Classify for DynamoDbStoreError {
    fn classify(&self) -> Failure {
        match self {
            Self::Dynamo {
                throttled: true, ..
            }
            | Self::Unprocessed { .. } => Failure::Transient(RetryCause::event_manifest_throttled),
            Self::Dynamo {
                retriable: true, ..
            }
            | Self::Contended { .. }
            | Self::NotActive { .. } => Failure::Transient(RetryCause::event_manifest_error),
            // Access denied, a bad item: until an operator fixes it.
            Self::Dynamo { .. } | Self::Malformed { .. } => {
                Failure::Persistent(RetryCause::event_manifest_error)
            }
            // The caller decides: recreate the table, go on without the
            // item, or stop.
            Self::TableMissing { .. }
            | Self::Rejected { .. }
            | Self::TtlOnOtherAttribute { .. }
            | Self::TtlUnsupported { .. } => Failure::Final,
        }
    }
}

/// What a conditional write found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The item was written.
    Yes,
    /// Its condition failed: another writer changed the item.
    ConditionFailed,
}

/// The DynamoDB event table: client, name, and the request counter.
#[derive(Debug, Clone)]
pub struct EventTable {
    client: Client,
    name: Arc<str>,
    metrics: Arc<Metrics>,
}

impl EventTable {
    /// The table `name` through `client`.
    pub fn new(client: Client, name: impl Into<String>, metrics: Arc<Metrics>) -> Self {
        Self {
            client,
            name: Arc::from(name.into()),
            metrics,
        }
    }

    /// The table name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Creates the table if it is missing — partition key `eventId` (S),
    /// on-demand billing — and waits until it is `ACTIVE`, each request
    /// counted ([`shard_lease::create_table_if_missing`]: [DescribeTable],
    /// [CreateTable], DescribeTable every second for up to
    /// [`shard_lease::TABLE_ACTIVE_TIMEOUT`]). Workers racing each other
    /// all succeed.
    ///
    /// [DescribeTable]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DescribeTable.html
    /// [CreateTable]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CreateTable.html
    ///
    /// # Errors
    /// [`DynamoDbStoreError::Dynamo`]; [`DynamoDbStoreError::NotActive`]
    /// after the timeout.
    pub async fn create_if_missing(&self) -> Result<TableCreation, DynamoDbStoreError> {
        let count = |operation| self.count(operation);
        shard_lease::create_table_if_missing(&self.client, &self.name, attr::EVENT_ID, &count)
            .await
            .map_err(|err| match err {
                TableSetupError::Dynamo {
                    operation,
                    class,
                    source,
                    ..
                } => self.classified(operation, class, source, false),
                TableSetupError::NotActive { waited, .. } => DynamoDbStoreError::NotActive {
                    table: self.name.to_string(),
                    waited,
                },
            })
    }

    /// The attribute Time to Live is on (or being turned on) for, from
    /// [DescribeTimeToLive]; `None` when it is off.
    ///
    /// [DescribeTimeToLive]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DescribeTimeToLive.html
    ///
    /// # Errors
    /// [`DynamoDbStoreError::TableMissing`], [`DynamoDbStoreError::Dynamo`].
    pub async fn describe_time_to_live(&self) -> Result<Option<String>, DynamoDbStoreError> {
        self.count("DescribeTimeToLive");
        let output = match self
            .client
            .describe_time_to_live()
            .table_name(&*self.name)
            .send()
            .await
        {
            Ok(output) => output,
            // A DynamoDB-compatible server without Time to Live (dynalite):
            // a common error no operation models.
            Err(err)
                if err.as_service_error().and_then(ProvideErrorMetadata::code)
                    == Some("UnknownOperationException") =>
            {
                return Err(DynamoDbStoreError::TtlUnsupported {
                    table: self.name.to_string(),
                });
            }
            Err(err) => return Err(self.sdk_error("DescribeTimeToLive", err)),
        };
        let description = output.time_to_live_description();
        let on = description
            .and_then(|d| d.time_to_live_status())
            .is_some_and(|status| {
                matches!(
                    status,
                    TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling
                )
            });
        Ok(on
            .then(|| {
                description
                    .and_then(|d| d.attribute_name())
                    .map(str::to_owned)
            })
            .flatten())
    }

    /// Turns Time to Live on for attribute `ttl` ([UpdateTimeToLive]).
    /// DynamoDB refuses when it is on already (a `ValidationException`):
    /// taken as success, since another worker may have raced this one.
    ///
    /// [UpdateTimeToLive]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateTimeToLive.html
    ///
    /// # Errors
    /// [`DynamoDbStoreError::TableMissing`], [`DynamoDbStoreError::Dynamo`].
    pub async fn update_time_to_live(&self) -> Result<(), DynamoDbStoreError> {
        let specification = TimeToLiveSpecification::builder()
            .enabled(true)
            .attribute_name(attr::TTL)
            .build()
            .map_err(|err| self.build_error("UpdateTimeToLive", err))?;
        self.count("UpdateTimeToLive");
        match self
            .client
            .update_time_to_live()
            .table_name(&*self.name)
            .time_to_live_specification(specification)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            // ValidationException is a common error no operation models.
            Err(err)
                if err.as_service_error().and_then(ProvideErrorMetadata::code)
                    == Some("ValidationException")
                    && err
                        .as_service_error()
                        .and_then(ProvideErrorMetadata::message)
                        .is_some_and(|m| m.to_ascii_lowercase().contains("already enabled")) =>
            {
                Ok(())
            }
            Err(err)
                if err.as_service_error().and_then(ProvideErrorMetadata::code)
                    == Some("UnknownOperationException") =>
            {
                Err(DynamoDbStoreError::TtlUnsupported {
                    table: self.name.to_string(),
                })
            }
            Err(err) => Err(self.sdk_error("UpdateTimeToLive", err)),
        }
    }

    /// The items of `keys` (at most [`BATCH_GET_KEYS`]) with one
    /// [BatchGetItem], eventually consistent (half a read unit per item of up
    /// to 4 KB, absent ones included; a stale answer is caught by the
    /// conditional write). Returns the items found (absent keys have none)
    /// and the keys DynamoDB left unprocessed, to be asked again after a
    /// backoff.
    ///
    /// [BatchGetItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html
    ///
    /// # Errors
    /// [`DynamoDbStoreError::TableMissing`], [`DynamoDbStoreError::Rejected`],
    /// [`DynamoDbStoreError::Dynamo`], [`DynamoDbStoreError::Malformed`] for an
    /// unprocessed key that is not one.
    pub async fn batch_get_item(
        &self,
        keys: &[EventKey],
    ) -> Result<(Vec<Item>, Vec<EventKey>), DynamoDbStoreError> {
        debug_assert!(keys.len() <= BATCH_GET_KEYS);
        let request = KeysAndAttributes::builder()
            .set_keys(Some(keys.iter().map(key).collect()))
            .consistent_read(false)
            .build()
            .map_err(|err| self.build_error("BatchGetItem", err))?;
        self.count("BatchGetItem");
        let mut output = self
            .client
            .batch_get_item()
            .request_items(&*self.name, request)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|err| self.item_error("BatchGetItem", err))?;
        for capacity in output.consumed_capacity() {
            self.consumed("BatchGetItem", Some(capacity));
        }
        let items = output
            .responses
            .as_mut()
            .and_then(|responses| responses.remove(&*self.name))
            .unwrap_or_default();
        let unprocessed = output
            .unprocessed_keys
            .as_ref()
            .and_then(|keys| keys.get(&*self.name))
            .map(|keys| keys.keys().iter().map(|key| self.key_id(key)).collect())
            .transpose()?
            .unwrap_or_default();
        Ok((items, unprocessed))
    }

    /// The item of `key`, read consistently with [GetItem] (after a failed
    /// condition: the writer that won is seen): one read unit per 4 KB.
    ///
    /// [GetItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_GetItem.html
    ///
    /// # Errors
    /// [`DynamoDbStoreError::TableMissing`], [`DynamoDbStoreError::Rejected`],
    /// [`DynamoDbStoreError::Dynamo`].
    pub async fn get_item(&self, key: &EventKey) -> Result<Option<Item>, DynamoDbStoreError> {
        self.count("GetItem");
        let output = self
            .client
            .get_item()
            .table_name(&*self.name)
            .set_key(Some(self::key(key)))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|err| self.item_error("GetItem", err))?;
        self.consumed("GetItem", output.consumed_capacity());
        Ok(output.item)
    }

    /// Writes `item` with [PutItem] if the item in the table is still at
    /// `read_version` (`None`: absent). One write request unit per KB of
    /// the larger of the old and the new item, failed conditions included
    /// (DynamoDB reports the units of successful writes only).
    ///
    /// [PutItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html
    ///
    /// # Errors
    /// [`DynamoDbStoreError::TableMissing`], [`DynamoDbStoreError::Rejected`]
    /// (an item DynamoDB will never take), [`DynamoDbStoreError::Dynamo`].
    pub async fn put_item(
        &self,
        item: Item,
        read_version: Option<u64>,
    ) -> Result<Written, DynamoDbStoreError> {
        let rendered = Expressions::new(&Update::new(), &condition(read_version));
        self.count("PutItem");
        let result = self
            .client
            .put_item()
            .table_name(&*self.name)
            .set_item(Some(item))
            .set_condition_expression(rendered.condition)
            .set_expression_attribute_names(rendered.names)
            .set_expression_attribute_values(rendered.values)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await;
        match result {
            Ok(output) => {
                self.consumed("PutItem", output.consumed_capacity());
                Ok(Written::Yes)
            }
            Err(err) if kind(&err) == Some(Kind::ConditionalCheckFailed) => {
                Ok(Written::ConditionFailed)
            }
            Err(err) => Err(self.item_error("PutItem", err)),
        }
    }

    fn count(&self, operation: &'static str) {
        self.metrics.event_table_request(operation);
    }

    /// Counts the capacity units a successful request reported.
    fn consumed(&self, operation: &'static str, capacity: Option<&ConsumedCapacity>) {
        if let Some(units) = capacity.and_then(ConsumedCapacity::capacity_units) {
            self.metrics.event_table_capacity(operation, units);
        }
    }

    /// The key of a key DynamoDB handed back.
    fn key_id(&self, key: &Item) -> Result<EventKey, DynamoDbStoreError> {
        let text = match key.get(attr::EVENT_ID) {
            Some(AttributeValue::S(text)) => text.as_str(),
            _ => "",
        };
        parse_event_id(text).ok_or_else(|| DynamoDbStoreError::Malformed {
            table: self.name.to_string(),
            event_id: text.to_owned(),
            reason: "not 48 hex digits".to_owned(),
        })
    }

    /// The [`DynamoDbStoreError`] of a failed item request:
    /// [`DynamoDbStoreError::Rejected`] for a request DynamoDB refuses for good
    /// ([`ErrorClass::Refused`]), else as [`sdk_error`](Self::sdk_error).
    fn item_error<E: Modeled>(
        &self,
        operation: &'static str,
        err: SdkError<E, HttpResponse>,
    ) -> DynamoDbStoreError {
        self.classified(operation, classify(&err), Box::new(err), true)
    }

    /// The [`DynamoDbStoreError`] of a failed call, as
    /// [`shard_lease::retry::classify`] says: `TableMissing` for
    /// `ResourceNotFoundException`, else `Dynamo` — throttled, or
    /// retriable when DynamoDB did not answer, answered 5xx or 429, or with
    /// a transient error.
    fn sdk_error<E: Modeled>(
        &self,
        operation: &'static str,
        err: SdkError<E, HttpResponse>,
    ) -> DynamoDbStoreError {
        self.classified(operation, classify(&err), Box::new(err), false)
    }

    /// The [`DynamoDbStoreError`] of a failed call classified as `class`; a
    /// refused request is [`DynamoDbStoreError::Rejected`] for item requests
    /// only.
    fn classified(
        &self,
        operation: &'static str,
        class: ErrorClass,
        source: BoxError,
        item_request: bool,
    ) -> DynamoDbStoreError {
        match class {
            ErrorClass::Refused if item_request => DynamoDbStoreError::Rejected {
                operation,
                table: self.name.to_string(),
                source,
            },
            ErrorClass::TableMissing => DynamoDbStoreError::TableMissing {
                table: self.name.to_string(),
            },
            class => DynamoDbStoreError::Dynamo {
                operation,
                table: self.name.to_string(),
                retriable: class.is_retriable(),
                throttled: class.is_throttling(),
                source,
            },
        }
    }

    fn build_error(&self, operation: &'static str, err: BuildError) -> DynamoDbStoreError {
        DynamoDbStoreError::Dynamo {
            operation,
            table: self.name.to_string(),
            retriable: false,
            throttled: false,
            source: Box::new(err),
        }
    }
}

/// The DynamoDB key of the item of `key`.
fn key(key: &EventKey) -> Item {
    HashMap::from([(attr::EVENT_ID.to_owned(), AttributeValue::S(event_id(key)))])
}

/// The condition of a write over the item read at `read_version`.
fn condition(read_version: Option<u64>) -> Condition {
    match read_version {
        Some(version) => {
            Condition::new().equals(attr::VERSION, AttributeValue::N(version.to_string()))
        }
        None => Condition::new().not_exists(attr::EVENT_ID),
    }
}
