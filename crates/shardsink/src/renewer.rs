//! [`Renewer`]: renews every held lease and writes the worker's heartbeat,
//! on its own task.
//!
//! The worker loop scans, takes and steals leases and starts shard tasks; any
//! of that can wait on slow AWS calls. Renewals must not wait behind it: a
//! lease not renewed within the failover time is taken by another worker. So
//! they run here, every `--lease-renewal-interval`, each lease concurrently
//! (a slow write on one lease delays only that lease).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use shard_lease::{HeldLease, LeaseTable};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::writer::error_chain;

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
            loop {
                tokio::select! {
                    () = token.cancelled() => return,
                    _ = ticker.tick() => {}
                }
                let held: Vec<Arc<HeldLease>> = leases
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .values()
                    .cloned()
                    .collect();
                let renewals = held.iter().map(|lease| async move {
                    if let Err(err) = lease.renew().await {
                        if !err.is_lease_lost() {
                            warn!(shard_id = %lease.shard_id(), error = %error_chain(&err), "lease renewal failed");
                        }
                    }
                });
                let heartbeat = async {
                    if let Err(err) = table.heartbeat(&worker_id, held.len()).await {
                        debug!(error = %error_chain(&err), "heartbeat failed");
                    }
                };
                tokio::join!(futures::future::join_all(renewals), heartbeat);
            }
        });
        renewer
    }

    /// Starts renewing `lease`.
    pub fn add(&self, lease: Arc<HeldLease>) {
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(lease.shard_id().to_owned(), lease);
    }

    /// Stops renewing the lease of `shard_id`.
    pub fn remove(&self, shard_id: &str) {
        self.leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(shard_id);
    }
}
