//! [`FakeTable`]: the items of one lease table in memory, and
//! [`fake_client`]: a DynamoDB client served from them through
//! `aws-smithy-mocks` rules, so the code under test uses a real SDK client.
//!
//! It answers [GetItem], [BatchGetItem], [PutItem], [UpdateItem],
//! [DeleteItem], [Scan] (one page) and [DescribeTable]. Items are keyed by
//! `leaseKey`, or by another string attribute ([`FakeTable::keyed_by`]).
//! Expressions are read back with
//! [`parse`](fn@parse) and evaluated with [`holds`] and [`apply`]: what the
//! lease table sends is accepted, anything else is a `ValidationException`,
//! as is an item over DynamoDB's 400 KB ([`MAX_ITEM_BYTES`]). Errors are
//! sent as DynamoDB sends them (HTTP 400, a JSON body naming the error
//! type), for the SDK to decode. GetItem, BatchGetItem and PutItem report
//! the capacity units they consumed when asked (`ReturnConsumedCapacity`),
//! computed from the items' sizes ([`item_size`](mod@super::item_size)).
//!
//! [GetItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_GetItem.html
//! [BatchGetItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html
//! [PutItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html
//! [UpdateItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html
//! [DeleteItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DeleteItem.html
//! [Scan]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Scan.html
//! [DescribeTable]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DescribeTable.html

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::batch_get_item::{BatchGetItemInput, BatchGetItemOutput};
use aws_sdk_dynamodb::operation::delete_item::{DeleteItemInput, DeleteItemOutput};
use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
use aws_sdk_dynamodb::operation::get_item::{GetItemInput, GetItemOutput};
use aws_sdk_dynamodb::operation::put_item::{PutItemInput, PutItemOutput};
use aws_sdk_dynamodb::operation::scan::ScanOutput;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemInput, UpdateItemOutput};
use aws_sdk_dynamodb::types::{
    AttributeValue, ConsumedCapacity, KeysAndAttributes, ReturnConsumedCapacity, ReturnValue,
    TableDescription, TableStatus,
};
use aws_smithy_mocks::{MockResponse, RuleMode, mock, mock_client};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::retry::RetryConfig;

use super::item_size::{MAX_ITEM_BYTES, item_size, read_units, write_units};
use super::{ExpressionError, apply, holds, parse};
use crate::Update;
use crate::lease::attr;

/// One item: attribute name → value.
type Item = HashMap<String, AttributeValue>;

/// DynamoDB items of one table, by `leaseKey` (or the attribute given to
/// [`keyed_by`](Self::keyed_by)), with failures to inject.
#[derive(Debug, Default)]
pub struct FakeTable {
    /// Key → item.
    pub items: Mutex<HashMap<String, HashMap<String, AttributeValue>>>,
    /// The next this-many UpdateItem calls fail with
    /// `ProvisionedThroughputExceededException`.
    pub failing_updates: AtomicUsize,
    /// The next this-many PutItem calls fail with
    /// `ProvisionedThroughputExceededException`.
    pub failing_puts: AtomicUsize,
    /// The next this-many BatchGetItem calls fail with
    /// `ProvisionedThroughputExceededException`.
    pub failing_batch_gets: AtomicUsize,
    /// The next this-many BatchGetItem calls answer only their first key and
    /// return the others as `UnprocessedKeys`, as DynamoDB does when it
    /// runs out of capacity or response size.
    pub partial_batch_gets: AtomicUsize,
    /// The next this-many items that GetItem or BatchGetItem would return
    /// are answered as absent: a read that reached the table before another
    /// writer created the item.
    pub missed_reads: AtomicUsize,
    /// When not 0: every this-many-th UpdateItem call is throttled.
    pub throttle_every: AtomicUsize,
    /// The next this-many DescribeTable calls say `CREATING`.
    pub creating_polls: AtomicUsize,
    /// UpdateItem calls so far, for `throttle_every`.
    updates: AtomicUsize,
    /// The key attribute; `None` for `leaseKey`.
    key_attribute: Option<String>,
}

/// A client whose DynamoDB calls are answered from `table` (SDK retries
/// off, so every injected failure reaches the caller).
pub fn fake_client(table: Arc<FakeTable>) -> Client {
    let t = table.clone();
    let get = mock!(Client::get_item).then_compute_response(move |input| answer(t.get(input)));
    let t = table.clone();
    let batch_get = mock!(Client::batch_get_item)
        .then_compute_response(move |input| answer(t.batch_get(input)));
    let t = table.clone();
    let put = mock!(Client::put_item).then_compute_response(move |input| answer(t.put(input)));
    let t = table.clone();
    let update =
        mock!(Client::update_item).then_compute_response(move |input| answer(t.update(input)));
    let t = table.clone();
    let delete =
        mock!(Client::delete_item).then_compute_response(move |input| answer(t.delete(input)));
    let t = table.clone();
    let scan = mock!(Client::scan).then_compute_output(move |_| t.scan());
    let describe = mock!(Client::describe_table).then_compute_output(move |_| table.describe());
    mock_client!(
        aws_sdk_dynamodb,
        RuleMode::MatchAny,
        [&get, &batch_get, &put, &update, &delete, &scan, &describe],
        |c| c.retry_config(RetryConfig::disabled())
    )
}

impl FakeTable {
    /// An empty table whose items are keyed by the string attribute
    /// `attribute` instead of `leaseKey`.
    pub fn keyed_by(attribute: &str) -> Self {
        Self {
            key_attribute: Some(attribute.to_owned()),
            ..Self::default()
        }
    }

    /// The name of the key attribute.
    fn key_name(&self) -> &str {
        self.key_attribute.as_deref().unwrap_or(attr::LEASE_KEY)
    }

    /// The key of a request's key, or of the item it puts.
    fn key_of(&self, key: Option<&Item>) -> Result<String, Refusal> {
        match key.and_then(|key| key.get(self.key_name())) {
            Some(AttributeValue::S(value)) => Ok(value.clone()),
            _ => Err(Refusal::new(
                "ValidationException",
                "The provided key element does not match the schema",
            )),
        }
    }

    /// The item at `key` as a read sees it (absent while `missed_reads`
    /// lasts).
    fn read(&self, key: &str) -> Option<Item> {
        let item = self.items().get(key).cloned()?;
        (!take_one(&self.missed_reads)).then_some(item)
    }

    fn items(&self) -> MutexGuard<'_, HashMap<String, Item>> {
        // A poisoned lock means another test thread panicked; its items are
        // still what the test wants to see.
        self.items.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, input: &GetItemInput) -> Result<GetItemOutput, Refusal> {
        let key = self.key_of(input.key())?;
        let item = self.read(&key);
        let units = read_units(
            item.as_ref().map_or(0, item_size),
            input.consistent_read() == Some(true),
        );
        Ok(GetItemOutput::builder()
            .set_item(item)
            .set_consumed_capacity(consumed(
                input.return_consumed_capacity(),
                input.table_name(),
                units,
            ))
            .build())
    }

    /// Every table's keys, answered in request order; only the first key
    /// while `partial_batch_gets` lasts, the rest left unprocessed.
    fn batch_get(&self, input: &BatchGetItemInput) -> Result<BatchGetItemOutput, Refusal> {
        if take_one(&self.failing_batch_gets) {
            return Err(Refusal::new(
                "ProvisionedThroughputExceededException",
                "fake throttling",
            ));
        }
        let partial = take_one(&self.partial_batch_gets);
        let mut output = BatchGetItemOutput::builder();
        let mut answered = 0_usize;
        for (table, request) in input.request_items().into_iter().flatten() {
            if request.keys().len() > 100 {
                return Err(Refusal::new(
                    "ValidationException",
                    "Too many items requested for the BatchGetItem call",
                ));
            }
            let mut found = Vec::new();
            let mut unprocessed = Vec::new();
            let mut units = 0.0;
            for key in request.keys() {
                if partial && answered > 0 {
                    unprocessed.push(key.clone());
                    continue;
                }
                answered += 1;
                let item = self.read(&self.key_of(Some(key))?);
                units += read_units(
                    item.as_ref().map_or(0, item_size),
                    request.consistent_read() == Some(true),
                );
                found.extend(item);
            }
            output = output.responses(table, found);
            if let Some(capacity) = consumed(
                input.return_consumed_capacity(),
                Some(table.as_str()),
                units,
            ) {
                output = output.consumed_capacity(capacity);
            }
            if !unprocessed.is_empty() {
                let keys = KeysAndAttributes::builder()
                    .set_keys(Some(unprocessed))
                    .set_consistent_read(request.consistent_read())
                    .build()
                    .map_err(|err| Refusal::new("ValidationException", &err.to_string()))?;
                output = output.unprocessed_keys(table, keys);
            }
        }
        Ok(output.build())
    }

    fn put(&self, input: &PutItemInput) -> Result<PutItemOutput, Refusal> {
        if take_one(&self.failing_puts) {
            return Err(Refusal::new(
                "ProvisionedThroughputExceededException",
                "fake throttling",
            ));
        }
        let item = input.item().cloned().unwrap_or_default();
        let key = self.key_of(Some(&item))?;
        let size = fits(&item)?;
        let (_, mut items) = self.items_if(
            &key,
            None,
            input.condition_expression(),
            input.expression_attribute_names(),
            input.expression_attribute_values(),
        )?;
        let old = items.get(&key).map_or(0, item_size);
        items.insert(key, item);
        Ok(PutItemOutput::builder()
            .set_consumed_capacity(consumed(
                input.return_consumed_capacity(),
                input.table_name(),
                write_units(size.max(old)),
            ))
            .build())
    }

    /// Throttled first when a failure is due; then, like DynamoDB, an
    /// absent item is created (with its key) if the condition allows.
    fn update(&self, input: &UpdateItemInput) -> Result<UpdateItemOutput, Refusal> {
        let nth = self.updates.fetch_add(1, Ordering::SeqCst) + 1;
        let every = self.throttle_every.load(Ordering::SeqCst);
        if take_one(&self.failing_updates) || (every > 0 && nth.is_multiple_of(every)) {
            return Err(Refusal::new(
                "ProvisionedThroughputExceededException",
                "fake throttling",
            ));
        }
        let key = self.key_of(input.key())?;
        let (update, mut items) = self.items_if(
            &key,
            input.update_expression(),
            input.condition_expression(),
            input.expression_attribute_names(),
            input.expression_attribute_values(),
        )?;
        let mut item = items.get(&key).cloned().unwrap_or_else(|| {
            HashMap::from([(self.key_name().to_owned(), AttributeValue::S(key.clone()))])
        });
        apply(&update, &mut item).map_err(Refusal::invalid)?;
        fits(&item)?;
        items.insert(key, item.clone());
        let all_new = input.return_values() == Some(&ReturnValue::AllNew);
        Ok(UpdateItemOutput::builder()
            .set_attributes(all_new.then_some(item))
            .build())
    }

    fn delete(&self, input: &DeleteItemInput) -> Result<DeleteItemOutput, Refusal> {
        let key = self.key_of(input.key())?;
        let (_, mut items) = self.items_if(
            &key,
            None,
            input.condition_expression(),
            input.expression_attribute_names(),
            input.expression_attribute_values(),
        )?;
        items.remove(&key);
        Ok(DeleteItemOutput::builder().build())
    }

    /// A request's update, and the items locked, when its expressions are
    /// valid and its condition holds for the item at `key`.
    fn items_if(
        &self,
        key: &str,
        update: Option<&str>,
        condition: Option<&str>,
        names: Option<&HashMap<String, String>>,
        values: Option<&Item>,
    ) -> Result<(Update, MutexGuard<'_, HashMap<String, Item>>), Refusal> {
        let (update, condition) =
            parse(update, condition, names, values).map_err(Refusal::invalid)?;
        let items = self.items();
        match holds(&condition, items.get(key)) {
            true => Ok((update, items)),
            false => Err(Refusal::condition_failed()),
        }
    }

    fn scan(&self) -> ScanOutput {
        ScanOutput::builder()
            .set_items(Some(self.items().values().cloned().collect()))
            .build()
    }

    fn describe(&self) -> DescribeTableOutput {
        let status = if take_one(&self.creating_polls) {
            TableStatus::Creating
        } else {
            TableStatus::Active
        };
        DescribeTableOutput::builder()
            .table(TableDescription::builder().table_status(status).build())
            .build()
    }
}

/// The size of `item`, or DynamoDB's refusal of an item over
/// [`MAX_ITEM_BYTES`].
fn fits(item: &Item) -> Result<usize, Refusal> {
    match item_size(item) {
        size if size <= MAX_ITEM_BYTES => Ok(size),
        _ => Err(Refusal::new(
            "ValidationException",
            "Item size has exceeded the maximum allowed size",
        )),
    }
}

/// The consumed capacity to report: `units` of `table`, when the request
/// asked for it.
fn consumed(
    asked: Option<&ReturnConsumedCapacity>,
    table: Option<&str>,
    units: f64,
) -> Option<ConsumedCapacity> {
    let asked = matches!(
        asked,
        Some(ReturnConsumedCapacity::Total | ReturnConsumedCapacity::Indexes)
    );
    asked.then(|| {
        ConsumedCapacity::builder()
            .set_table_name(table.map(str::to_owned))
            .capacity_units(units)
            .build()
    })
}

/// The output, or the refusal as DynamoDB sends it, as the mock rule's
/// answer.
fn answer<O, E>(result: Result<O, Refusal>) -> MockResponse<O, E> {
    match result {
        Ok(output) => MockResponse::Output(output),
        Err(refusal) => MockResponse::Http(refusal.response()),
    }
}

/// Takes one from `counter` if it is above zero.
fn take_one(counter: &AtomicUsize) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// A DynamoDB error the fake answers with: its code and message.
#[derive(Debug)]
struct Refusal {
    code: &'static str,
    message: String,
}

impl Refusal {
    fn new(code: &'static str, message: &str) -> Self {
        Self {
            code,
            message: message.to_owned(),
        }
    }

    fn condition_failed() -> Self {
        Self::new(
            "ConditionalCheckFailedException",
            "The conditional request failed",
        )
    }

    fn invalid(err: ExpressionError) -> Self {
        Self::new("ValidationException", &err.to_string())
    }

    /// HTTP 400 and a JSON body naming the error, as DynamoDB sends it.
    fn response(&self) -> HttpResponse {
        let message = self.message.replace('\\', "\\\\").replace('"', "\\\"");
        HttpResponse::new(
            bad_request(),
            SdkBody::from(format!(
                r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{}","message":"{message}"}}"#,
                self.code
            )),
        )
    }
}

/// HTTP 400, the status of DynamoDB's client errors.
#[allow(
    clippy::expect_used,
    reason = "`StatusCode::try_from` fails only outside 100..=999"
)]
fn bad_request() -> StatusCode {
    StatusCode::try_from(400).expect("400 is a valid status code")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use aws_smithy_types::error::metadata::ProvideErrorMetadata;
    use sequence_range::SequenceNumber;
    use tokio::time::Instant;

    use super::*;
    use crate::{
        Checkpoint, CreateOutcome, HeldLease, Lease, LeaseTable, PendingBatch, TableCreation,
    };

    const SHARD: &str = "shardId-000000000000";

    #[tokio::test]
    async fn serves_every_call_of_the_lease_table() {
        let fake = Arc::new(FakeTable::default());
        let table = LeaseTable::new(fake_client(fake.clone()), "leases")
            .with_failover_time(Duration::from_secs(10));
        assert_eq!(
            table.create_table_if_missing().await.unwrap(),
            TableCreation::Existed
        );
        let lease = Lease::new(SHARD, Checkpoint::TrimHorizon, vec![]);
        let CreateOutcome::Created(created) = table.create_lease(&lease).await.unwrap() else {
            panic!("created")
        };
        assert_eq!(
            table.create_lease(&lease).await.unwrap(),
            CreateOutcome::AlreadyExists
        );

        let taken = table.take_lease(&created, "worker-a").await.unwrap();
        assert_eq!(taken.lease_owner.as_deref(), Some("worker-a"));
        assert_eq!(
            (taken.lease_counter, taken.owner_switches_since_checkpoint),
            (1, 1)
        );
        assert_eq!(taken.owner_failover_time, Some(Duration::from_secs(10)));
        let late = table.take_lease(&created, "worker-b").await.unwrap_err();
        assert!(late.is_lease_lost(), "{late:?}");

        let held = HeldLease::new(table.clone(), taken, Instant::now());
        held.renew().await.unwrap();
        let batch = PendingBatch {
            key: "k".to_owned(),
            first: SequenceNumber::from(1u64),
            last: SequenceNumber::from(2u64),
        };
        held.record_pending_batch(&batch).await.unwrap();
        assert_eq!(held.snapshot().await.pending_batch, Some(batch));
        held.checkpoint(&Checkpoint::ShardEnd).await.unwrap();
        let row = table.get_lease(SHARD).await.unwrap().unwrap();
        assert_eq!(row, held.snapshot().await);
        assert_eq!((row.lease_counter, row.pending_batch), (4, None));
        assert!(row.shard_ended_at.is_some());
        held.release().await.unwrap();
        let released = table.get_lease(SHARD).await.unwrap().unwrap();
        assert_eq!(released.lease_owner, None);
        assert_eq!(released.owner_failover_time, None);
        assert_eq!(released.lease_counter, 5);

        table.heartbeat("worker-a", 1).await.unwrap();
        table.heartbeat("worker-a", 0).await.unwrap();
        let scan = table.scan().await.unwrap();
        assert_eq!(scan.leases, vec![released.clone()]);
        assert_eq!(
            (
                scan.workers[0].heartbeat_counter,
                scan.workers[0].leases_held
            ),
            (2, 0)
        );
        table.remove_heartbeat("worker-a").await.unwrap();
        assert!(
            table
                .delete_lease(&created)
                .await
                .unwrap_err()
                .is_lease_lost()
        );
        table.delete_lease(&released).await.unwrap();
        assert!(fake.items().is_empty());
    }

    #[tokio::test]
    async fn serves_batch_reads_of_a_table_keyed_by_another_attribute() {
        let fake = Arc::new(FakeTable::keyed_by("id"));
        let client = fake_client(fake.clone());
        let key = |id: &str| HashMap::from([("id".to_owned(), AttributeValue::S(id.to_owned()))]);
        for id in ["a", "b"] {
            client
                .put_item()
                .table_name("t")
                .set_item(Some(key(id)))
                .condition_expression("attribute_not_exists(#a0)")
                .expression_attribute_names("#a0", "id")
                .send()
                .await
                .unwrap();
        }
        let batch_get = || {
            client.batch_get_item().request_items(
                "t",
                KeysAndAttributes::builder()
                    .set_keys(Some(vec![key("a"), key("b"), key("c")]))
                    .build()
                    .unwrap(),
            )
        };
        let all = batch_get().send().await.unwrap();
        assert_eq!(all.responses().unwrap()["t"].len(), 2, "c has no item");
        assert!(all.unprocessed_keys().is_none_or(HashMap::is_empty));
        fake.partial_batch_gets.store(1, Ordering::SeqCst);
        fake.missed_reads.store(1, Ordering::SeqCst);
        let partial = batch_get().send().await.unwrap();
        assert!(partial.responses().unwrap()["t"].is_empty(), "a missed");
        assert_eq!(partial.unprocessed_keys().unwrap()["t"].keys().len(), 2);
        fake.failing_batch_gets.store(1, Ordering::SeqCst);
        let err = batch_get().send().await.unwrap_err();
        assert_eq!(err.code(), Some("ProvisionedThroughputExceededException"));
    }

    #[tokio::test]
    async fn refuses_items_over_400_kb_and_reports_capacity_by_size() {
        let fake = Arc::new(FakeTable::keyed_by("id"));
        let client = fake_client(fake.clone());
        let item = |bytes: usize| {
            HashMap::from([
                ("id".to_owned(), AttributeValue::S("a".to_owned())),
                ("d".to_owned(), AttributeValue::S("x".repeat(bytes))),
            ])
        };
        let put = |item| {
            client
                .put_item()
                .table_name("t")
                .set_item(Some(item))
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .send()
        };
        // "id" + "a" + "d": 4 bytes besides the data.
        let err = put(item(MAX_ITEM_BYTES - 3)).await.unwrap_err();
        assert_eq!(err.code(), Some("ValidationException"));
        assert!(fake.items().is_empty());
        let written = put(item(MAX_ITEM_BYTES - 4)).await.unwrap();
        assert_eq!(
            written.consumed_capacity().unwrap().capacity_units(),
            Some(400.0)
        );
        // The larger of the old and the new item.
        let small = put(item(1)).await.unwrap();
        assert_eq!(
            small.consumed_capacity().unwrap().capacity_units(),
            Some(400.0)
        );
        let again = put(item(1)).await.unwrap();
        assert_eq!(
            again.consumed_capacity().unwrap().capacity_units(),
            Some(1.0)
        );
        let get = || {
            client
                .get_item()
                .table_name("t")
                .key("id", AttributeValue::S("a".to_owned()))
        };
        let read = get()
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .unwrap();
        assert_eq!(
            read.consumed_capacity().unwrap().capacity_units(),
            Some(0.5)
        );
        let unasked = get().send().await.unwrap();
        assert!(unasked.consumed_capacity().is_none());
    }

    #[tokio::test]
    async fn refuses_expressions_the_lease_table_would_not_send() {
        let client = fake_client(Arc::new(FakeTable::default()));
        let err = client
            .update_item()
            .table_name("leases")
            .key(attr::LEASE_KEY, AttributeValue::S(SHARD.to_owned()))
            .update_expression("SET leaseOwner = :v0")
            .expression_attribute_values(":v0", AttributeValue::S("me".to_owned()))
            .send()
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("ValidationException"));
    }
}
