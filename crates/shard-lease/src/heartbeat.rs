//! [`WorkerHeartbeat`]: one row per running worker in the lease table, so
//! that who is alive — including a worker that holds no lease yet — is
//! visible from the table alone.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::MalformedLease;
use crate::lease::{attr, string, unsigned};

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
