//! [`Renewer`]: renews every held lease and writes the worker's heartbeat,
//! on its own task.
//!
//! The worker loop scans, takes and steals leases and starts shard tasks; any
//! of that can wait on slow AWS calls. Renewals must not wait behind it: a
//! lease not renewed within the failover time is taken by another worker. So
//! they run here, every `--lease-renewal-interval`, each lease on a task of
//! its own (a slow write on one lease delays only that lease's next renewal).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shard_lease::{HeldLease, LeaseTable};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::lock::lock;
use crate::ops::log::error_chain;

/// The held leases, shared between the worker (which adds and removes them)
/// and the renewal task.
#[derive(Debug, Clone, Default)]
pub struct Renewer {
    leases: Arc<Mutex<BTreeMap<String, Arc<HeldLease>>>>,
}

impl Renewer {
    /// Starts renewing every `interval` until `token` is cancelled; the
    /// heartbeat row of `worker_id` is written each time too.
    pub fn spawn(
        table: LeaseTable,
        worker_id: String,
        interval: Duration,
        token: CancellationToken,
    ) -> Self {
        let renewer = Self::default();
        let leases = renewer.leases.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // One renewal per lease at a time, each on its own task: a slow
            // one (throttled, or waiting behind that lease's checkpoint)
            // delays no other lease's renewal.
            let mut in_flight: JoinSet<()> = JoinSet::new();
            let mut renewing: HashMap<tokio::task::Id, String> = HashMap::new();
            let heartbeat_key = String::new(); // no shard id is empty
            loop {
                tokio::select! {
                    () = token.cancelled() => break,
                    Some(done) = in_flight.join_next_with_id(), if !in_flight.is_empty() => {
                        let id = match done {
                            Ok((id, ())) => id,
                            Err(err) => err.id(),
                        };
                        renewing.remove(&id);
                        continue;
                    }
                    _ = ticker.tick() => {}
                }
                let held: Vec<Arc<HeldLease>> = lock(&leases).values().cloned().collect();
                let busy: HashSet<String> = renewing.values().cloned().collect();
                if !busy.contains(&heartbeat_key) {
                    let (table, worker_id, count) = (table.clone(), worker_id.clone(), held.len());
                    let task = in_flight.spawn(async move {
                        if let Err(err) = table.heartbeat(&worker_id, count).await {
                            debug!(error = %error_chain(&err), "heartbeat failed");
                        }
                    });
                    renewing.insert(task.id(), heartbeat_key.clone());
                }
                for lease in held {
                    if busy.contains(lease.shard_id()) {
                        continue;
                    }
                    let shard_id = lease.shard_id().to_owned();
                    let task = in_flight.spawn(async move {
                        if let Err(err) = lease.renew().await
                            && !err.is_lease_lost() {
                                warn!(shard_id = %lease.shard_id(), error = %error_chain(&err), "lease renewal failed");
                            }
                    });
                    renewing.insert(task.id(), shard_id);
                }
            }
            // Let renewals in flight finish (each is bounded by the lease
            // table's timeouts): one dropped half-way could have applied
            // unseen, and the release at shutdown would then fail.
            while in_flight.join_next().await.is_some() {}
        });
        renewer
    }

    /// Starts renewing `lease`.
    pub fn add(&self, lease: Arc<HeldLease>) {
        lock(&self.leases).insert(lease.shard_id().to_owned(), lease);
    }

    /// Stops renewing the lease of `shard_id`.
    pub fn remove(&self, shard_id: &str) {
        lock(&self.leases).remove(shard_id);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
    use aws_smithy_runtime_api::client::http::{
        HttpConnector, HttpConnectorFuture, SharedHttpConnector, http_client_fn,
    };
    use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use shard_lease::{Checkpoint, Lease};

    use super::*;

    const SLOW: &str = "shardId-000000000000";
    const FAST: &str = "shardId-000000000001";

    /// A DynamoDB endpoint that answers every UpdateItem with the lease row,
    /// taking `SLOW_CALL` for the slow shard, and counts calls by key.
    #[derive(Debug, Default, Clone)]
    struct SlowForOneShard {
        calls: Arc<Mutex<BTreeMap<String, usize>>>,
    }

    const SLOW_CALL: Duration = Duration::from_secs(5);

    impl HttpConnector for SlowForOneShard {
        fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
            let body: serde_json::Value =
                serde_json::from_slice(request.body().bytes().unwrap_or_default())
                    .unwrap_or_default();
            let key = body["Key"]["leaseKey"]["S"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            *self.calls.lock().unwrap().entry(key.clone()).or_default() += 1;
            HttpConnectorFuture::new(async move {
                if key == SLOW {
                    tokio::time::sleep(SLOW_CALL).await;
                }
                let row = serde_json::json!({ "Attributes": {
                    "leaseKey": { "S": key },
                    "leaseOwner": { "S": "w" },
                    "leaseCounter": { "N": "1" },
                    "checkpoint": { "S": "TRIM_HORIZON" },
                }});
                Ok(HttpResponse::new(
                    StatusCode::try_from(200).unwrap(),
                    SdkBody::from(row.to_string()),
                ))
            })
        }
    }

    /// A renewal that takes longer than the failover time on one lease
    /// does not hold up the others: each is renewed every interval.
    #[tokio::test(start_paused = true)]
    async fn a_slow_renewal_delays_no_other_lease() {
        let endpoint = SlowForOneShard::default();
        let connector = endpoint.clone();
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("a", "b", None, None, "test"))
            .http_client(http_client_fn(move |_, _| {
                SharedHttpConnector::new(connector.clone())
            }))
            .build();
        let table = LeaseTable::new(aws_sdk_dynamodb::Client::from_conf(config), "leases");
        let token = CancellationToken::new();
        let renewer = Renewer::spawn(
            table.clone(),
            "w".to_owned(),
            Duration::from_millis(100),
            token.clone(),
        );
        for shard in [SLOW, FAST] {
            let mut lease = Lease::new(shard, Checkpoint::TrimHorizon, vec![]);
            lease.lease_owner = Some("w".to_owned());
            renewer.add(Arc::new(HeldLease::new(
                table.clone(),
                lease,
                tokio::time::Instant::now(),
            )));
        }
        tokio::time::sleep(SLOW_CALL * 2).await;
        token.cancel();
        let calls = endpoint.calls.lock().unwrap().clone();
        // 10 s at one renewal per 100 ms: about 100 for the fast lease, 2
        // for the slow one (one at a time).
        assert!(calls.get(FAST).copied().unwrap_or(0) >= 50, "{calls:?}");
        assert!(calls.get(SLOW).copied().unwrap_or(0) <= 3, "{calls:?}");
    }
}
