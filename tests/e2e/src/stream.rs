//! The ground truth: every Kinesis record of every shard, read with
//! `GetRecords` from `TRIM_HORIZON` — to check `approximateArrivalTimestamp`
//! and to confirm that what the producer recorded is what the stream holds.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use aws_sdk_kinesis::types::ShardIteratorType;
use chrono::{DateTime, Utc};

use crate::archive::format_timestamp;
use crate::env::TestEnv;
use crate::fixtures::list_shards;
use crate::producer::ProducedRecord;

/// One Kinesis record as `GetRecords` returned it (an aggregate stays one
/// record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamRecord {
    /// The shard read.
    pub shard_id: String,
    /// Sequence number (decimal text).
    pub sequence_number: String,
    /// Partition key.
    pub partition_key: String,
    /// Data (for an aggregate: the whole aggregate).
    pub data: Vec<u8>,
    /// `ApproximateArrivalTimestamp`, as precise as the server gave it.
    pub approximate_arrival_timestamp: DateTime<Utc>,
}

impl StreamRecord {
    /// The arrival time as the archive must show it (RFC 3339, UTC,
    /// milliseconds truncated).
    pub fn arrival_text(&self) -> String {
        format_timestamp(self.approximate_arrival_timestamp)
    }
}

/// Every record of a stream, indexed by (shard id, sequence number).
#[derive(Clone, Debug, Default)]
pub struct GroundTruth {
    /// The records, shard by shard in shard id order, in sequence order.
    pub records: Vec<StreamRecord>,
    index: HashMap<(String, String), usize>,
}

impl GroundTruth {
    /// The record at (shard, sequence number).
    pub fn get(&self, shard_id: &str, sequence_number: &str) -> Option<&StreamRecord> {
        self.index
            .get(&(shard_id.to_owned(), sequence_number.to_owned()))
            .map(|&i| &self.records[i])
    }

    /// How many Kinesis records the stream holds.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the stream is empty.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Checks that every produced plain record is in the stream where the
    /// producer says, with its partition key and data, and that the stream
    /// holds no Kinesis record nobody produced. Returns problems as
    /// messages (empty when consistent). KPL user records are only checked
    /// for presence of their Kinesis record.
    pub fn check_produced(&self, produced: &[ProducedRecord]) -> Vec<String> {
        let mut problems = Vec::new();
        let mut seen: HashMap<(&str, &str), ()> = HashMap::new();
        for record in produced {
            seen.insert((&record.shard_id, &record.sequence_number), ());
            let Some(truth) = self.get(&record.shard_id, &record.sequence_number) else {
                problems.push(format!(
                    "produced {}/{} is not in the stream",
                    record.shard_id, record.sequence_number
                ));
                continue;
            };
            if record.sub_sequence_number.is_none()
                && (truth.data != record.data || truth.partition_key != record.partition_key)
            {
                problems.push(format!(
                    "produced {}/{} differs from the stream's record",
                    record.shard_id, record.sequence_number
                ));
            }
        }
        for truth in &self.records {
            if !seen.contains_key(&(truth.shard_id.as_str(), truth.sequence_number.as_str())) {
                problems.push(format!(
                    "stream record {}/{} was not produced by the test",
                    truth.shard_id, truth.sequence_number
                ));
            }
        }
        problems
    }

    fn push(&mut self, record: StreamRecord) {
        self.index.insert(
            (record.shard_id.clone(), record.sequence_number.clone()),
            self.records.len(),
        );
        self.records.push(record);
    }
}

/// Reads every shard of `stream` from `TRIM_HORIZON` until it is caught up
/// (an empty `GetRecords` response with `MillisBehindLatest` 0 or absent) or
/// at `SHARD_END` (no next iterator).
///
/// API: <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_GetShardIterator.html>,
/// <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_GetRecords.html>
///
/// # Errors
/// Any AWS error (throttling is retried); a record without an arrival
/// timestamp.
pub async fn read_stream(env: &TestEnv, stream: &str) -> Result<GroundTruth> {
    let mut truth = GroundTruth::default();
    for shard in list_shards(env, stream).await? {
        let shard_id = shard.shard_id;
        let mut iterator = env
            .kinesis
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(&shard_id)
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .with_context(|| format!("failed to get a shard iterator for {shard_id}"))?
            .shard_iterator()
            .map(str::to_owned);
        let mut throttled = 0;
        while let Some(current) = iterator.take() {
            let output = match env
                .kinesis
                .get_records()
                .shard_iterator(&current)
                .limit(10_000)
                .send()
                .await
            {
                Ok(output) => output,
                Err(err) => {
                    let retry = err
                        .as_service_error()
                        .is_some_and(|e| e.is_provisioned_throughput_exceeded_exception());
                    if retry && throttled < 20 {
                        throttled += 1;
                        iterator = Some(current);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                    return Err(err)
                        .with_context(|| format!("failed to get records from {shard_id}"));
                }
            };
            for record in output.records() {
                let Some(arrival) = record.approximate_arrival_timestamp() else {
                    bail!(
                        "record {shard_id}/{} has no ApproximateArrivalTimestamp",
                        record.sequence_number()
                    );
                };
                let approximate_arrival_timestamp =
                    DateTime::from_timestamp(arrival.secs(), arrival.subsec_nanos())
                        .context("arrival timestamp out of range")?;
                truth.push(StreamRecord {
                    shard_id: shard_id.clone(),
                    sequence_number: record.sequence_number().to_owned(),
                    partition_key: record.partition_key().unwrap_or_default().to_owned(),
                    data: record.data().as_ref().to_vec(),
                    approximate_arrival_timestamp,
                });
            }
            let caught_up =
                output.records().is_empty() && output.millis_behind_latest().unwrap_or(0) == 0;
            if !caught_up {
                iterator = output.next_shard_iterator().map(str::to_owned);
            }
        }
    }
    Ok(truth)
}
