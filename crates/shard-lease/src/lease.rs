//! [`Lease`]: one row of the lease table, and its DynamoDB attribute mapping.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use sequence_range::SequenceNumber;

use crate::Checkpoint;

/// Attribute names of a lease row. The first eight are the KCL's
/// (`DynamoDBLeaseSerializer` in amazon-kinesis-client), so an operator who
/// knows the KCL can read the table; the last two are shardsink's own.
pub mod attr {
    /// `S`, hash key: the shard id, e.g. `shardId-000000000001`.
    pub const LEASE_KEY: &str = "leaseKey";
    /// `S`: the worker id holding the lease; absent when nobody does.
    pub const LEASE_OWNER: &str = "leaseOwner";
    /// `N`: incremented by every write to the row. Every write is conditional
    /// on it, which fences out a worker that has lost the lease.
    pub const LEASE_COUNTER: &str = "leaseCounter";
    /// `S`: a sequence number or a sentinel, see [`crate::Checkpoint`].
    pub const CHECKPOINT: &str = "checkpoint";
    /// `N`: always 0; shardsink checkpoints whole Kinesis records.
    pub const CHECKPOINT_SUB_SEQUENCE_NUMBER: &str = "checkpointSubSequenceNumber";
    /// `S`: the last sequence number of the batch being written (the
    /// checkpoint it will reach), present from before its PUT until the
    /// checkpoint after it.
    pub const PENDING_CHECKPOINT: &str = "pendingCheckpoint";
    /// `N`: how many times the lease changed owner since the last checkpoint.
    pub const OWNER_SWITCHES_SINCE_CHECKPOINT: &str = "ownerSwitchesSinceCheckpoint";
    /// `SS`: the parent shards (one after a split, two after a merge); absent
    /// for a shard without parents (DynamoDB sets cannot be empty).
    pub const PARENT_SHARD_ID: &str = "parentShardId";
    /// `S`: the S3 key of the pending batch (shardsink).
    pub const PENDING_BATCH_KEY: &str = "pendingBatchKey";
    /// `S`: the first sequence number of the pending batch (shardsink).
    pub const PENDING_BATCH_FIRST: &str = "pendingBatchFirstSequenceNumber";
    /// `S`: a random token written by every conditional write (shardsink). A
    /// writer whose write failed its condition re-reads the row and counts the
    /// write as applied only if the row carries its own token — so a second
    /// process with the same worker id can never adopt another's write.
    pub const LAST_WRITE_TOKEN: &str = "lastWriteToken";
    /// `S`: RFC 3339 start time for a lease at `AT_TIMESTAMP` (shardsink): the
    /// configured `--initial-timestamp`, or the creation time of a lease
    /// created for `--initial-position LATEST`, so that whoever holds the lease
    /// starts at the same place.
    pub const INITIAL_TIMESTAMP: &str = "initialTimestamp";
    /// `S`: RFC 3339 wall-clock time the shard was checkpointed at
    /// `SHARD_END` (shardsink); ended leases are deleted a retention after it.
    pub const SHARD_ENDED_AT: &str = "shardEndedAt";
    /// `S`: a random token written once, when the row is created
    /// (shardsink). A row deleted and created again between two scans can
    /// look unchanged (counter 0, no owner); its new token tells an observer
    /// that the row is new, so its expiry clock starts again.
    pub const CREATION_TOKEN: &str = "creationToken";
    /// `N`: the owner's `--failover-time` in milliseconds, written when the
    /// lease is taken (shardsink). The owner bounds its S3 writes by its own
    /// failover time; another worker expires the lease only after the larger
    /// of its own and this one, so workers with different settings (during a
    /// rolling change) still fence each other.
    pub const OWNER_FAILOVER_TIME_MILLIS: &str = "ownerFailoverTimeMillis";
    /// `L` of `S` (shardsink): the batches the owner has staged for an
    /// Iceberg table — data files written to S3, not yet committed to the
    /// table — oldest first, each an opaque entry (JSON) made by the caller.
    /// Appended by [`crate::LeaseTable::stage_batch`], trimmed to what is
    /// still uncommitted by [`crate::LeaseTable::checkpoint_committed`];
    /// absent when there is none. Kept across changes of owner: the next
    /// owner continues from them.
    pub const STAGED_BATCHES: &str = "stagedBatches";
}

/// The batch a lease owner is about to PUT, recorded in the lease row before
/// the PUT (C6 in shardsink's docs/DESIGN.md): whoever holds the lease next replays
/// exactly this batch — records `first..=last` of the shard under `key` —
/// before anything else.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PendingBatch {
    /// Full S3 object key the batch is written to.
    pub key: String,
    /// Sequence number of the batch's first Kinesis record.
    pub first: SequenceNumber,
    /// Sequence number of the batch's last Kinesis record.
    pub last: SequenceNumber,
}

/// One lease row: who owns a shard, and how far its records are in S3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The shard id (`leaseKey`).
    pub lease_key: String,
    /// The worker holding the lease (`leaseOwner`), `None` when free.
    pub lease_owner: Option<String>,
    /// `leaseCounter`: bumped by every write.
    pub lease_counter: u64,
    /// `checkpoint`.
    pub checkpoint: Checkpoint,
    /// The batch between "recorded" and "checkpointed", if any
    /// (`pendingCheckpoint`, `pendingBatchKey`, `pendingBatchFirstSequenceNumber`).
    pub pending_batch: Option<PendingBatch>,
    /// `ownerSwitchesSinceCheckpoint`.
    pub owner_switches_since_checkpoint: u64,
    /// `parentShardId`: parents of this shard, sorted.
    pub parent_shard_ids: Vec<String>,
    /// `shardEndedAt`: when `SHARD_END` was checkpointed (RFC 3339).
    pub shard_ended_at: Option<String>,
    /// `initialTimestamp`: where an `AT_TIMESTAMP` lease starts (RFC 3339).
    pub initial_timestamp: Option<String>,
    /// `lastWriteToken`: token of the last conditional write.
    pub last_write_token: Option<String>,
    /// `creationToken`: written once when the row was created.
    pub creation_token: Option<String>,
    /// `ownerFailoverTimeMillis`: the owner's failover time, recorded when
    /// it took the lease.
    pub owner_failover_time: Option<Duration>,
    /// `stagedBatches`: the batches staged for an Iceberg table and not yet
    /// committed, oldest first; each entry is opaque to this crate. Empty
    /// when the attribute is absent.
    pub staged_batches: Vec<String>,
}

impl Lease {
    /// A lease nobody owns yet, as [`crate::LeaseTable::create_lease`] writes it,
    /// with a fresh random creation token.
    pub fn new(
        shard_id: impl Into<String>,
        checkpoint: Checkpoint,
        mut parent_shard_ids: Vec<String>,
    ) -> Self {
        parent_shard_ids.sort();
        parent_shard_ids.dedup();
        Self {
            lease_key: shard_id.into(),
            lease_owner: None,
            lease_counter: 0,
            checkpoint,
            pending_batch: None,
            owner_switches_since_checkpoint: 0,
            parent_shard_ids,
            shard_ended_at: None,
            initial_timestamp: None,
            last_write_token: None,
            creation_token: Some(crate::WriteToken::random().as_str().to_owned()),
            owner_failover_time: None,
            staged_batches: Vec::new(),
        }
    }

    /// The shard this lease is for (same as `lease_key`).
    pub fn shard_id(&self) -> &str {
        &self.lease_key
    }

    /// Whether `worker_id` is the owner.
    pub fn is_owned_by(&self, worker_id: &str) -> bool {
        self.lease_owner.as_deref() == Some(worker_id)
    }

    /// How long this lease must stand still before a worker whose own
    /// failover time is `own` may take it: the larger of `own` and the
    /// owner's recorded failover time, which bounds the owner's writes.
    pub fn expiry_time(&self, own: Duration) -> Duration {
        self.owner_failover_time.map_or(own, |owner| owner.max(own))
    }

    /// The full item, for PutItem.
    pub(crate) fn to_item(&self) -> HashMap<String, AttributeValue> {
        let mut item = HashMap::from([
            (
                attr::LEASE_KEY.to_owned(),
                AttributeValue::S(self.lease_key.clone()),
            ),
            (attr::LEASE_COUNTER.to_owned(), number(self.lease_counter)),
            (
                attr::CHECKPOINT.to_owned(),
                AttributeValue::S(self.checkpoint.to_attribute()),
            ),
            (attr::CHECKPOINT_SUB_SEQUENCE_NUMBER.to_owned(), number(0)),
            (
                attr::OWNER_SWITCHES_SINCE_CHECKPOINT.to_owned(),
                number(self.owner_switches_since_checkpoint),
            ),
        ]);
        if let Some(owner) = &self.lease_owner {
            item.insert(
                attr::LEASE_OWNER.to_owned(),
                AttributeValue::S(owner.clone()),
            );
        }
        if !self.parent_shard_ids.is_empty() {
            item.insert(
                attr::PARENT_SHARD_ID.to_owned(),
                AttributeValue::Ss(self.parent_shard_ids.clone()),
            );
        }
        if let Some(batch) = &self.pending_batch {
            item.extend(pending_batch_attributes(batch));
        }
        if let Some(failover) = self.owner_failover_time {
            item.insert(
                attr::OWNER_FAILOVER_TIME_MILLIS.to_owned(),
                number(millis(failover)),
            );
        }
        if let Some(staged) = staged_batches_value(&self.staged_batches) {
            item.insert(attr::STAGED_BATCHES.to_owned(), staged);
        }
        let optional = [
            (attr::SHARD_ENDED_AT, &self.shard_ended_at),
            (attr::INITIAL_TIMESTAMP, &self.initial_timestamp),
            (attr::LAST_WRITE_TOKEN, &self.last_write_token),
            (attr::CREATION_TOKEN, &self.creation_token),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                item.insert(name.to_owned(), AttributeValue::S(value.clone()));
            }
        }
        item
    }

    /// Decodes a row read from DynamoDB.
    ///
    /// # Errors
    /// [`MalformedLease`] naming the attribute when a required attribute is
    /// missing or of the wrong type. Unknown attributes (e.g. a KCL's) are
    /// ignored.
    pub fn from_item(item: &HashMap<String, AttributeValue>) -> Result<Self, MalformedLease> {
        let lease_key = string(item, attr::LEASE_KEY, "?")?.ok_or_else(|| MalformedLease {
            lease_key: "?".to_owned(),
            reason: format!("no {} attribute", attr::LEASE_KEY),
        })?;
        let key = lease_key.as_str();
        let malformed = |reason: String| MalformedLease {
            lease_key: key.to_owned(),
            reason,
        };
        let checkpoint_text = string(item, attr::CHECKPOINT, key)?
            .ok_or_else(|| malformed(format!("no {} attribute", attr::CHECKPOINT)))?;
        let checkpoint = Checkpoint::from_attribute(&checkpoint_text)
            .map_err(|err| malformed(err.to_string()))?;
        let pending_batch = match (
            string(item, attr::PENDING_BATCH_KEY, key)?,
            string(item, attr::PENDING_BATCH_FIRST, key)?,
            string(item, attr::PENDING_CHECKPOINT, key)?,
        ) {
            (Some(batch_key), Some(first), Some(last)) => Some(PendingBatch {
                key: batch_key,
                first: SequenceNumber::parse(&first).map_err(|err| malformed(err.to_string()))?,
                last: SequenceNumber::parse(&last).map_err(|err| malformed(err.to_string()))?,
            }),
            (None, None, None) => None,
            _ => {
                return Err(malformed(format!(
                    "{}, {} and {} must be all present or all absent",
                    attr::PENDING_BATCH_KEY,
                    attr::PENDING_BATCH_FIRST,
                    attr::PENDING_CHECKPOINT
                )));
            }
        };
        let mut parent_shard_ids = match item.get(attr::PARENT_SHARD_ID) {
            None => Vec::new(),
            Some(AttributeValue::Ss(ids)) => ids.clone(),
            // A single parent written as a plain string by another tool.
            Some(AttributeValue::S(id)) => vec![id.clone()],
            Some(_) => {
                return Err(malformed(format!(
                    "{} is not a string set",
                    attr::PARENT_SHARD_ID
                )));
            }
        };
        parent_shard_ids.sort();
        let staged_batches = match item.get(attr::STAGED_BATCHES) {
            None | Some(AttributeValue::Null(_)) => Vec::new(),
            Some(AttributeValue::L(entries)) => entries
                .iter()
                .map(|entry| entry.as_s().cloned())
                .collect::<Result<_, _>>()
                .map_err(|_| {
                    malformed(format!(
                        "{} has an element that is not a string",
                        attr::STAGED_BATCHES
                    ))
                })?,
            Some(_) => {
                return Err(malformed(format!("{} is not a list", attr::STAGED_BATCHES)));
            }
        };
        Ok(Self {
            lease_owner: string(item, attr::LEASE_OWNER, key)?,
            lease_counter: unsigned(item, attr::LEASE_COUNTER, key)?
                .ok_or_else(|| malformed(format!("no {} attribute", attr::LEASE_COUNTER)))?,
            checkpoint,
            pending_batch,
            owner_switches_since_checkpoint: unsigned(
                item,
                attr::OWNER_SWITCHES_SINCE_CHECKPOINT,
                key,
            )?
            .unwrap_or(0),
            parent_shard_ids,
            shard_ended_at: string(item, attr::SHARD_ENDED_AT, key)?,
            initial_timestamp: string(item, attr::INITIAL_TIMESTAMP, key)?,
            last_write_token: string(item, attr::LAST_WRITE_TOKEN, key)?,
            creation_token: string(item, attr::CREATION_TOKEN, key)?,
            owner_failover_time: unsigned(item, attr::OWNER_FAILOVER_TIME_MILLIS, key)?
                .map(Duration::from_millis),
            staged_batches,
            lease_key,
        })
    }
}

/// The three attributes that record a pending batch.
pub(crate) fn pending_batch_attributes(batch: &PendingBatch) -> [(String, AttributeValue); 3] {
    [
        (
            attr::PENDING_BATCH_KEY.to_owned(),
            AttributeValue::S(batch.key.clone()),
        ),
        (
            attr::PENDING_BATCH_FIRST.to_owned(),
            AttributeValue::S(batch.first.to_string()),
        ),
        (
            attr::PENDING_CHECKPOINT.to_owned(),
            AttributeValue::S(batch.last.to_string()),
        ),
    ]
}

/// The `stagedBatches` value for `entries`: a list of strings, or `None`
/// for no entry (the attribute is then absent, never an empty list).
pub(crate) fn staged_batches_value(entries: &[String]) -> Option<AttributeValue> {
    (!entries.is_empty()).then(|| {
        AttributeValue::L(
            entries
                .iter()
                .map(|entry| AttributeValue::S(entry.clone()))
                .collect(),
        )
    })
}

/// A DynamoDB number attribute.
pub(crate) fn number(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// Whole milliseconds of `duration`, saturating.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

pub(crate) fn string(
    item: &HashMap<String, AttributeValue>,
    name: &str,
    key: &str,
) -> Result<Option<String>, MalformedLease> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::S(value)) => Ok(Some(value.clone())),
        Some(_) => Err(MalformedLease {
            lease_key: key.to_owned(),
            reason: format!("{name} is not a string"),
        }),
    }
}

pub(crate) fn unsigned(
    item: &HashMap<String, AttributeValue>,
    name: &str,
    key: &str,
) -> Result<Option<u64>, MalformedLease> {
    match item.get(name) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::N(value)) => value.parse().map(Some).map_err(|_| MalformedLease {
            lease_key: key.to_owned(),
            reason: format!("{name} is not a non-negative integer: {value:?}"),
        }),
        Some(_) => Err(MalformedLease {
            lease_key: key.to_owned(),
            reason: format!("{name} is not a number"),
        }),
    }
}

/// A lease row that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed lease row {lease_key:?}: {reason}")]
pub struct MalformedLease {
    /// The row's `leaseKey`, or `?` when it has none.
    pub lease_key: String,
    /// What is wrong with it.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Lease {
        let mut lease = Lease::new(
            "shardId-000000000002",
            Checkpoint::SequenceNumber(
                SequenceNumber::parse("49590338271490256608559692538361571095921575989136588898")
                    .unwrap(),
            ),
            vec![
                "shardId-000000000001".to_owned(),
                "shardId-000000000000".to_owned(),
            ],
        );
        lease.lease_owner = Some("worker-a".to_owned());
        lease.lease_counter = 42;
        lease.owner_switches_since_checkpoint = 1;
        lease.creation_token = Some("c0ffee".to_owned());
        lease.owner_failover_time = Some(Duration::from_secs(10));
        lease.pending_batch = Some(PendingBatch {
            key: "p/2026/11/21/05/27/shardId-000000000002/x-1-2.jsonl".to_owned(),
            first: SequenceNumber::from(1u64),
            last: SequenceNumber::from(2u64),
        });
        lease.staged_batches = vec![r#"{"files":["a"]}"#.to_owned(), "{}".to_owned()];
        lease
    }

    #[test]
    fn item_round_trips_with_kcl_attribute_names() {
        let lease = sample();
        let item = lease.to_item();
        for name in [
            "leaseKey",
            "leaseOwner",
            "leaseCounter",
            "checkpoint",
            "checkpointSubSequenceNumber",
            "pendingCheckpoint",
            "ownerSwitchesSinceCheckpoint",
            "parentShardId",
            "stagedBatches",
        ] {
            assert!(item.contains_key(name), "missing {name}");
        }
        assert_eq!(
            item["parentShardId"],
            AttributeValue::Ss(vec![
                "shardId-000000000000".to_owned(),
                "shardId-000000000001".to_owned()
            ])
        );
        assert_eq!(Lease::from_item(&item).unwrap(), lease);
    }

    #[test]
    fn a_free_lease_has_no_owner_attribute() {
        let lease = Lease::new("shardId-000000000000", Checkpoint::TrimHorizon, vec![]);
        let item = lease.to_item();
        assert!(!item.contains_key("leaseOwner"));
        assert!(!item.contains_key("parentShardId"));
        assert!(!item.contains_key("pendingCheckpoint"));
        assert!(!item.contains_key("stagedBatches"));
        assert_eq!(Lease::from_item(&item).unwrap(), lease);
    }

    #[test]
    fn malformed_rows_name_the_problem() {
        let mut item = sample().to_item();
        item.insert("leaseCounter".to_owned(), AttributeValue::S("x".to_owned()));
        assert_eq!(
            Lease::from_item(&item).unwrap_err().to_string(),
            "malformed lease row \"shardId-000000000002\": leaseCounter is not a number"
        );
        let mut item = sample().to_item();
        item.remove("pendingBatchKey");
        assert!(
            Lease::from_item(&item)
                .unwrap_err()
                .reason
                .contains("all present or all absent")
        );
        let mut item = sample().to_item();
        item.insert(
            "checkpoint".to_owned(),
            AttributeValue::S("nonsense".to_owned()),
        );
        assert!(
            Lease::from_item(&item)
                .unwrap_err()
                .reason
                .contains("invalid sequence number")
        );
        let mut item = sample().to_item();
        item.insert(
            "stagedBatches".to_owned(),
            AttributeValue::L(vec![AttributeValue::N("1".to_owned())]),
        );
        assert!(
            Lease::from_item(&item)
                .unwrap_err()
                .reason
                .contains("stagedBatches has an element that is not a string")
        );
        let mut item = sample().to_item();
        item.insert(
            "stagedBatches".to_owned(),
            AttributeValue::S("{}".to_owned()),
        );
        assert!(
            Lease::from_item(&item)
                .unwrap_err()
                .reason
                .contains("stagedBatches is not a list")
        );
        assert!(
            Lease::from_item(&HashMap::new())
                .unwrap_err()
                .reason
                .contains("no leaseKey")
        );
    }

    #[test]
    fn ignores_unknown_attributes() {
        let mut item = sample().to_item();
        item.insert(
            "throughputKBps".to_owned(),
            AttributeValue::N("1.5".to_owned()),
        );
        assert_eq!(Lease::from_item(&item).unwrap(), sample());
    }
}
