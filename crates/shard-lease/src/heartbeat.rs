//! [`WorkerHeartbeat`]: one row per running worker in the lease table, so
//! that who is alive — including a worker that holds no lease yet — is
//! visible from the table alone; and the [`LeaseTable`] calls that write
//! and delete it.

use std::collections::HashMap;
use std::time::SystemTime;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::lease::{attr, number, string, unsigned};
use crate::{Condition, Expressions, LeaseError, LeaseTable, MalformedLease, Update};

/// `leaseKey` prefix of heartbeat rows. Shard ids never contain `#`
/// (`shardId-` and digits), so the two kinds of row cannot collide.
pub const WORKER_KEY_PREFIX: &str = "worker#";

/// Attribute names of a heartbeat row (besides `leaseKey`).
pub mod worker_attr {
    /// `S`: the worker id.
    pub const WORKER_ID: &str = "workerId";
    /// `N`: incremented by every heartbeat; liveness is judged by it changing,
    /// on the observer's monotonic clock, like a lease counter.
    pub const HEARTBEAT_COUNTER: &str = "heartbeatCounter";
    /// `S`: RFC 3339 wall-clock time of the last heartbeat, for operators.
    pub const LAST_HEARTBEAT: &str = "lastHeartbeat";
    /// `N`: leases the worker held at its last heartbeat, for operators.
    pub const LEASES_HELD: &str = "leasesHeld";
}

/// A worker's heartbeat row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerHeartbeat {
    /// The worker id.
    pub worker_id: String,
    /// Heartbeat counter.
    pub heartbeat_counter: u64,
    /// Wall-clock time of the last heartbeat (RFC 3339), as the worker saw it.
    pub last_heartbeat: Option<String>,
    /// Leases held at the last heartbeat.
    pub leases_held: u64,
}

impl WorkerHeartbeat {
    /// The `leaseKey` of `worker_id`'s row.
    pub fn key(worker_id: &str) -> String {
        format!("{WORKER_KEY_PREFIX}{worker_id}")
    }

    /// Decodes a heartbeat row.
    ///
    /// # Errors
    /// [`MalformedLease`] when an attribute has the wrong type.
    pub fn from_item(item: &HashMap<String, AttributeValue>) -> Result<Self, MalformedLease> {
        let key = string(item, attr::LEASE_KEY, "?")?.unwrap_or_default();
        let worker_id = match string(item, worker_attr::WORKER_ID, &key)? {
            Some(id) => id,
            None => key.trim_start_matches(WORKER_KEY_PREFIX).to_owned(),
        };
        Ok(Self {
            worker_id,
            heartbeat_counter: unsigned(item, worker_attr::HEARTBEAT_COUNTER, &key)?.unwrap_or(0),
            last_heartbeat: string(item, worker_attr::LAST_HEARTBEAT, &key)?,
            leases_held: unsigned(item, worker_attr::LEASES_HELD, &key)?.unwrap_or(0),
        })
    }
}

impl LeaseTable {
    /// Writes this worker's heartbeat row ([UpdateItem]): increments
    /// `heartbeatCounter`, stamps `lastHeartbeat` with the wall-clock time and
    /// records how many leases it holds. Unconditional: each worker writes
    /// only its own row.
    ///
    /// [UpdateItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html
    ///
    /// # Errors
    /// [`LeaseError::TableMissing`], [`LeaseError::Dynamo`].
    pub async fn heartbeat(&self, worker_id: &str, leases_held: usize) -> Result<(), LeaseError> {
        let update = Update::new()
            .set(
                worker_attr::WORKER_ID,
                AttributeValue::S(worker_id.to_owned()),
            )
            .add_or_start(worker_attr::HEARTBEAT_COUNTER, 0, 1)
            .set(
                worker_attr::LAST_HEARTBEAT,
                AttributeValue::S(humantime::format_rfc3339_millis(SystemTime::now()).to_string()),
            )
            .set(worker_attr::LEASES_HELD, number(leases_held as u64));
        let expressions = Expressions::new(&update, &Condition::new());
        self.client
            .update_item()
            .table_name(&self.table_name)
            .key(
                attr::LEASE_KEY,
                AttributeValue::S(WorkerHeartbeat::key(worker_id)),
            )
            .set_update_expression(expressions.update)
            .set_expression_attribute_names(expressions.names)
            .set_expression_attribute_values(expressions.values)
            .send()
            .await
            .map(|_| ())
            .map_err(|err| self.sdk_error("UpdateItem", err))
    }

    /// Deletes a worker's heartbeat row ([DeleteItem]), at a clean shutdown
    /// or a long-dead worker's.
    ///
    /// [DeleteItem]: https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_DeleteItem.html
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
}
