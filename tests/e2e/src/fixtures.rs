//! Test fixtures: streams, buckets and the lease table — creating them,
//! reading them, and breaking them (deleting or emptying the lease table).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::env::TestEnv;
use crate::seq::Seq;
use crate::wait::{scaled, wait_until};
use anyhow::{Context as _, Result, bail};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::types::StreamStatus;
use aws_sdk_s3::types::{
    BucketLocationConstraint, BucketVersioningStatus, CreateBucketConfiguration,
    VersioningConfiguration,
};

/// One shard as `ListShards` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardInfo {
    /// The shard id, e.g. `shardId-000000000000`.
    pub shard_id: String,
    /// The parent shard, for shards created by a split or merge.
    pub parent_shard_id: Option<String>,
    /// The other parent, for a shard created by a merge.
    pub adjacent_parent_shard_id: Option<String>,
    /// The shard's starting sequence number (decimal text).
    pub starting_sequence_number: String,
    /// The shard's ending sequence number when closed. Never trust it
    /// numerically (kinesis-mock reports `9223372036854775807` for closed
    /// parents).
    pub ending_sequence_number: Option<String>,
    /// The shard's hash key range, `(starting, ending)` hash key (128-bit
    /// numbers the API sends as decimal text).
    pub hash_key_range: (u128, u128),
}

/// Creates a provisioned stream with `shard_count` shards and waits until it
/// is `ACTIVE` (`CreateStream`, then `DescribeStreamSummary` polling).
/// Returns its shards, sorted by id.
///
/// API: <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_CreateStream.html>
///
/// # Errors
/// Any AWS error, or the stream not becoming active within 60 s.
pub async fn create_stream(env: &TestEnv, name: &str, shard_count: i32) -> Result<Vec<ShardInfo>> {
    env.kinesis
        .create_stream()
        .stream_name(name)
        .shard_count(shard_count)
        .send()
        .await
        .with_context(|| format!("failed to create stream {name}"))?;
    wait_stream_active(env, name, scaled(Duration::from_secs(60))).await?;
    let shards = list_shards(env, name).await?;
    if shards.len() != usize::try_from(shard_count).unwrap_or_default() {
        bail!(
            "stream {name} has {} shards, asked for {shard_count}",
            shards.len()
        );
    }
    Ok(shards)
}

/// Every shard of a stream, open or closed, sorted by shard id (`ListShards`,
/// all pages).
///
/// API: <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_ListShards.html>
///
/// # Errors
/// Any AWS error; a shard without a hash key range or with one that is not
/// a 128-bit decimal number.
pub async fn list_shards(env: &TestEnv, stream: &str) -> Result<Vec<ShardInfo>> {
    let mut shards = Vec::new();
    let mut next_token: Option<String> = None;
    loop {
        let request = match &next_token {
            // With a token the stream name must not be sent.
            Some(token) => env.kinesis.list_shards().next_token(token),
            None => env.kinesis.list_shards().stream_name(stream),
        };
        let output = request
            .send()
            .await
            .with_context(|| format!("failed to list shards of {stream}"))?;
        for shard in output.shards() {
            let range = shard.sequence_number_range();
            let hash_key = |key: &str| {
                key.parse::<u128>()
                    .with_context(|| format!("bad hash key {key} of {}", shard.shard_id()))
            };
            let hash_key_range = shard
                .hash_key_range()
                .with_context(|| format!("{} has no hash key range", shard.shard_id()))?;
            shards.push(ShardInfo {
                shard_id: shard.shard_id().to_owned(),
                parent_shard_id: shard.parent_shard_id().map(str::to_owned),
                adjacent_parent_shard_id: shard.adjacent_parent_shard_id().map(str::to_owned),
                starting_sequence_number: range
                    .map(|r| r.starting_sequence_number().to_owned())
                    .unwrap_or_default(),
                ending_sequence_number: range
                    .and_then(|r| r.ending_sequence_number())
                    .map(str::to_owned),
                hash_key_range: (
                    hash_key(hash_key_range.starting_hash_key())?,
                    hash_key(hash_key_range.ending_hash_key())?,
                ),
            });
        }
        match output.next_token() {
            Some(token) if !token.is_empty() => next_token = Some(token.to_owned()),
            _ => break,
        }
    }
    shards.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
    Ok(shards)
}

/// The open shards of a stream (no ending sequence number), each with its
/// hash key range `(starting hash key, ending hash key)`, by shard id: what
/// a test needs to pick a shard to split or two adjacent shards to merge.
///
/// # Errors
/// As [`list_shards`].
pub async fn open_shard_hash_ranges(
    env: &TestEnv,
    stream: &str,
) -> Result<BTreeMap<String, (u128, u128)>> {
    Ok(list_shards(env, stream)
        .await?
        .into_iter()
        .filter(|shard| shard.ending_sequence_number.is_none())
        .map(|shard| (shard.shard_id, shard.hash_key_range))
        .collect())
}

/// Waits until the stream is `ACTIVE` (after it was created, split or merged).
///
/// API: <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_DescribeStreamSummary.html>
///
/// # Errors
/// The stream not `ACTIVE` within `timeout` (with the last AWS error).
pub async fn wait_stream_active(env: &TestEnv, stream: &str, timeout: Duration) -> Result<()> {
    wait_until(timeout, &format!("stream {stream} ACTIVE"), || async {
        let summary = env
            .kinesis
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .context("failed to describe stream")?;
        Ok(summary
            .stream_description_summary()
            .is_some_and(|s| s.stream_status() == &StreamStatus::Active))
    })
    .await
}

/// Splits the open shard `shard` at the middle of its hash key range
/// (`SplitShard`), waits until the stream is `ACTIVE` again, and returns
/// the two children's ids, lower hash keys first.
///
/// API: <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_SplitShard.html>
///
/// # Errors
/// `shard` is not an open shard of `stream`; the split or the wait fails;
/// the stream does not list two children of `shard` afterwards.
pub async fn split_shard_in_half(env: &TestEnv, stream: &str, shard: &str) -> Result<Vec<String>> {
    let open = open_shard_hash_ranges(env, stream).await?;
    let (low, high) = *open
        .get(shard)
        .with_context(|| format!("{shard} is not an open shard of {stream}"))?;
    env.kinesis
        .split_shard()
        .stream_name(stream)
        .shard_to_split(shard)
        .new_starting_hash_key((low + (high - low) / 2 + 1).to_string())
        .send()
        .await
        .with_context(|| format!("failed to split {shard}"))?;
    wait_stream_active(env, stream, scaled(Duration::from_secs(60))).await?;
    let mut children: Vec<ShardInfo> = list_shards(env, stream)
        .await?
        .into_iter()
        .filter(|child| child.parent_shard_id.as_deref() == Some(shard))
        .collect();
    children.sort_by_key(|child| child.hash_key_range.0);
    if children.len() != 2 {
        bail!(
            "{stream} lists {} children of {shard} after its split",
            children.len()
        );
    }
    Ok(children.into_iter().map(|child| child.shard_id).collect())
}

/// Deletes a stream (best effort: a missing stream is not an error).
///
/// API: <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_DeleteStream.html>
///
/// # Errors
/// Any other AWS error.
pub async fn delete_stream(env: &TestEnv, name: &str) -> Result<()> {
    match env
        .kinesis
        .delete_stream()
        .stream_name(name)
        .enforce_consumer_deletion(true)
        .send()
        .await
    {
        Ok(_) => Ok(()),
        Err(err) => {
            let err = err.into_service_error();
            if err.is_resource_not_found_exception() {
                Ok(())
            } else {
                Err(err).with_context(|| format!("failed to delete stream {name}"))
            }
        }
    }
}

/// Whether a bucket keeps every version of its objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Versioning {
    /// Plain bucket.
    Off,
    /// Versioning enabled before any object is written, so every overwrite
    /// leaves a trace ([`crate::archive::list_object_versions`]).
    Enabled,
}

/// Creates a bucket (in `env.region`), optionally with versioning.
///
/// API: <https://docs.aws.amazon.com/AmazonS3/latest/API/API_CreateBucket.html>,
/// <https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutBucketVersioning.html>
///
/// # Errors
/// Any AWS error.
pub async fn create_bucket(env: &TestEnv, name: &str, versioning: Versioning) -> Result<()> {
    let mut request = env.s3.create_bucket().bucket(name);
    if env.region != "us-east-1" {
        request = request.create_bucket_configuration(
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::from(env.region.as_str()))
                .build(),
        );
    }
    request
        .send()
        .await
        .with_context(|| format!("failed to create bucket {name}"))?;
    if versioning == Versioning::Enabled {
        env.s3
            .put_bucket_versioning()
            .bucket(name)
            .versioning_configuration(
                VersioningConfiguration::builder()
                    .status(BucketVersioningStatus::Enabled)
                    .build(),
            )
            .send()
            .await
            .with_context(|| format!("failed to enable versioning on {name}"))?;
    }
    Ok(())
}

/// Deletes the lease table and waits until the deletion took effect: the
/// table is gone, or it is there again with another creation time (a running
/// worker recreated it). Returns whether it existed.
///
/// API: <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DeleteTable.html>
///
/// # Errors
/// Any AWS error other than "not found"; the same table still there after
/// 60 s (scaled).
pub async fn delete_lease_table(env: &TestEnv, table: &str) -> Result<bool> {
    let created = |output: &aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput| {
        output.table().and_then(|t| t.creation_date_time()).copied()
    };
    let before = match env.dynamodb.describe_table().table_name(table).send().await {
        Ok(output) => created(&output),
        Err(err) => {
            let err = err.into_service_error();
            if err.is_resource_not_found_exception() {
                return Ok(false);
            }
            return Err(err).with_context(|| format!("failed to describe table {table}"));
        }
    };
    if let Err(err) = env.dynamodb.delete_table().table_name(table).send().await {
        let err = err.into_service_error();
        if err.is_resource_not_found_exception() {
            return Ok(false);
        }
        return Err(err).with_context(|| format!("failed to delete table {table}"));
    }
    wait_until(
        scaled(Duration::from_secs(60)),
        &format!("table {table} deleted (or recreated)"),
        || async {
            match env.dynamodb.describe_table().table_name(table).send().await {
                Ok(output) => Ok(created(&output) != before),
                Err(err) => {
                    let err = err.into_service_error();
                    if err.is_resource_not_found_exception() {
                        Ok(true)
                    } else {
                        Err(err).context("failed to describe table")
                    }
                }
            }
        },
    )
    .await?;
    Ok(true)
}

/// Deletes every row of the lease table, keeping the table (the "emptied"
/// failure). Returns how many rows were deleted.
///
/// API: <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DeleteItem.html>
///
/// # Errors
/// Any AWS error.
pub async fn clear_lease_table(env: &TestEnv, table: &str) -> Result<usize> {
    let rows = read_lease_rows(env, table).await?;
    for row in &rows {
        env.dynamodb
            .delete_item()
            .table_name(table)
            .key("leaseKey", AttributeValue::S(row.lease_key.clone()))
            .send()
            .await
            .with_context(|| format!("failed to delete lease row {}", row.lease_key))?;
    }
    Ok(rows.len())
}

/// One row of the lease table, with the attributes the contract names
/// decoded and the raw item kept for anything else.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseRow {
    /// `leaseKey`: the shard id.
    pub lease_key: String,
    /// `leaseOwner`: the worker holding the lease, if any.
    pub lease_owner: Option<String>,
    /// `leaseCounter` (N).
    pub lease_counter: Option<u64>,
    /// `checkpoint`: a sequence number or `TRIM_HORIZON` / `LATEST` /
    /// `AT_TIMESTAMP` / `SHARD_END`.
    pub checkpoint: Option<String>,
    /// `checkpointSubSequenceNumber` (N), if present.
    pub checkpoint_sub_sequence_number: Option<u64>,
    /// `pendingCheckpoint`: the last sequence number of the recorded batch.
    pub pending_checkpoint: Option<String>,
    /// `pendingBatchKey`: the full S3 key of the recorded batch.
    pub pending_batch_key: Option<String>,
    /// `pendingBatchFirstSequenceNumber`.
    pub pending_batch_first_sequence_number: Option<String>,
    /// The whole item as DynamoDB returned it.
    pub item: HashMap<String, AttributeValue>,
}

/// The batch a worker recorded in a lease row before its PUT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingBatch {
    /// The shard (the row's `leaseKey`).
    pub shard_id: String,
    /// Full S3 object key (`pendingBatchKey`).
    pub key: String,
    /// First sequence number (`pendingBatchFirstSequenceNumber`).
    pub first: String,
    /// Last sequence number (`pendingCheckpoint`).
    pub last: String,
}

impl LeaseRow {
    /// The checkpoint as a number, when it is a sequence number rather than
    /// a sentinel (or absent).
    pub fn checkpoint_sequence_number(&self) -> Option<Seq> {
        self.checkpoint.as_deref().and_then(|c| Seq::parse(c).ok())
    }

    /// The recorded pending batch, when `pendingBatchKey` is present.
    /// Missing companions (`pendingCheckpoint`,
    /// `pendingBatchFirstSequenceNumber`) come back as empty strings, which
    /// tests then report as a mismatch.
    pub fn pending_batch(&self) -> Option<PendingBatch> {
        let key = self.pending_batch_key.clone()?;
        Some(PendingBatch {
            shard_id: self.lease_key.clone(),
            key,
            first: self
                .pending_batch_first_sequence_number
                .clone()
                .unwrap_or_default(),
            last: self.pending_checkpoint.clone().unwrap_or_default(),
        })
    }

    /// Whether any of the three pending attributes is present.
    pub fn has_pending(&self) -> bool {
        self.pending_checkpoint.is_some()
            || self.pending_batch_key.is_some()
            || self.pending_batch_first_sequence_number.is_some()
    }

    fn from_item(item: HashMap<String, AttributeValue>) -> Result<Self> {
        let s = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        let n = |name: &str| -> Result<Option<u64>> {
            match item.get(name) {
                None => Ok(None),
                Some(AttributeValue::N(text)) => text
                    .parse()
                    .map(Some)
                    .with_context(|| format!("{name} is not an unsigned integer: {text:?}")),
                Some(other) => bail!("{name} is not of type N: {other:?}"),
            }
        };
        let lease_key = s("leaseKey").context("lease row without a string leaseKey")?;
        Ok(Self {
            lease_owner: s("leaseOwner"),
            lease_counter: n("leaseCounter")?,
            checkpoint: s("checkpoint"),
            checkpoint_sub_sequence_number: n("checkpointSubSequenceNumber")?,
            pending_checkpoint: s("pendingCheckpoint"),
            pending_batch_key: s("pendingBatchKey"),
            pending_batch_first_sequence_number: s("pendingBatchFirstSequenceNumber"),
            lease_key,
            item,
        })
    }
}

/// The `leaseKey` prefix of the daemon's worker heartbeat rows in the lease
/// table.
pub const WORKER_KEY_PREFIX: &str = "worker#";

/// Every lease row of the lease table (`Scan`, all pages, consistent read;
/// worker heartbeat rows left out), sorted by `leaseKey`. A missing table
/// gives an empty list.
///
/// API: <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Scan.html>
///
/// # Errors
/// Any other AWS error; a row without a string `leaseKey` or with a
/// non-numeric `leaseCounter`.
pub async fn read_lease_rows(env: &TestEnv, table: &str) -> Result<Vec<LeaseRow>> {
    let mut rows = Vec::new();
    let mut start_key: Option<HashMap<String, AttributeValue>> = None;
    loop {
        let output = match env
            .dynamodb
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start_key.take())
            .send()
            .await
        {
            Ok(output) => output,
            Err(err) => {
                let err = err.into_service_error();
                if err.is_resource_not_found_exception() {
                    return Ok(Vec::new());
                }
                return Err(err).with_context(|| format!("failed to scan lease table {table}"));
            }
        };
        for item in output.items() {
            // Worker heartbeat rows share the table.
            let is_worker = item
                .get("leaseKey")
                .and_then(|key| key.as_s().ok())
                .is_some_and(|key| key.starts_with(WORKER_KEY_PREFIX));
            if !is_worker {
                rows.push(LeaseRow::from_item(item.clone())?);
            }
        }
        match output.last_evaluated_key() {
            Some(key) if !key.is_empty() => start_key = Some(key.clone()),
            _ => break,
        }
    }
    rows.sort_by(|a, b| a.lease_key.cmp(&b.lease_key));
    Ok(rows)
}
