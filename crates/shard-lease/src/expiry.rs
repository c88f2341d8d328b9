//! [`LeaseExpiry`]: which leases another worker has stopped renewing.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::Lease;

/// Tracks, per lease, when this worker last saw its `leaseCounter` change, on
/// the local monotonic clock.
///
/// A lease is expired when its counter has not changed for longer than the
/// failover time. This is the KCL's rule (`DynamoDBLeaseRefresher` /
/// `LeaseTaker`): workers' clocks are never compared, only each worker's own
/// observations, so clock skew cannot expire a live lease. A lease seen for
/// the first time counts as just renewed: a new worker waits one failover time
/// before taking another worker's leases.
#[derive(Debug, Default)]
pub struct LeaseExpiry {
    seen: HashMap<String, Observation>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Observation {
    counter: u64,
    owner: Option<String>,
    changed_at: Instant,
}

impl LeaseExpiry {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the leases of one table scan made at `now`, and forgets leases
    /// no longer in the table.
    pub fn observe(&mut self, leases: &[Lease], now: Instant) {
        self.observe_counters(
            leases.iter().map(|lease| {
                (
                    lease.lease_key.as_str(),
                    lease.lease_counter,
                    lease.lease_owner.as_deref(),
                )
            }),
            now,
        );
    }

    /// Records `(key, counter, owner)` entries of one scan made at `now` —
    /// leases, or worker heartbeats — and forgets keys not in it.
    pub fn observe_counters<'a>(
        &mut self,
        entries: impl IntoIterator<Item = (&'a str, u64, Option<&'a str>)>,
        now: Instant,
    ) {
        let entries: Vec<(&str, u64, Option<&str>)> = entries.into_iter().collect();
        self.seen
            .retain(|key, _| entries.iter().any(|(k, _, _)| *k == key));
        for (key, counter, owner) in entries {
            let changed = self
                .seen
                .get(key)
                .is_none_or(|seen| seen.counter != counter || seen.owner.as_deref() != owner);
            if changed {
                self.seen.insert(
                    key.to_owned(),
                    Observation {
                        counter,
                        owner: owner.map(str::to_owned),
                        changed_at: now,
                    },
                );
            }
        }
    }

    /// Whether `lease` may be taken at `now`:
    /// - released (no owner, counter above 0): at once — its last owner
    ///   stopped working on it before releasing;
    /// - never owned (no owner, counter 0: new, or recreated after the table
    ///   was lost): once unchanged for more than `failover_time`, like an
    ///   expired lease, so that a write its former owner had in flight when
    ///   the row vanished has landed before anyone lists the shard;
    /// - owned: once its counter has not changed for more than
    ///   `failover_time`.
    ///
    /// A lease never observed is not expired.
    pub fn is_expired(&self, lease: &Lease, now: Instant, failover_time: Duration) -> bool {
        (lease.lease_owner.is_none() && lease.lease_counter > 0)
            || self.is_stale(&lease.lease_key, lease.lease_counter, now, failover_time)
    }

    /// Whether the counter of `key` has stayed at `counter` for more than
    /// `failover_time` (an expired lease, or a worker's heartbeat gone
    /// quiet). A key never observed is not stale.
    pub fn is_stale(&self, key: &str, counter: u64, now: Instant, failover_time: Duration) -> bool {
        self.seen.get(key).is_some_and(|seen| {
            seen.counter == counter
                && now.saturating_duration_since(seen.changed_at) > failover_time
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Checkpoint;

    fn lease(counter: u64, owner: Option<&str>) -> Lease {
        let mut lease = Lease::new("shardId-000000000000", Checkpoint::TrimHorizon, vec![]);
        lease.lease_counter = counter;
        lease.lease_owner = owner.map(str::to_owned);
        lease
    }

    #[tokio::test(start_paused = true)]
    async fn expires_only_after_failover_time_without_counter_change() {
        let failover = Duration::from_secs(10);
        let mut expiry = LeaseExpiry::new();
        let held = lease(5, Some("other"));
        assert!(
            !expiry.is_expired(&held, Instant::now(), failover),
            "never observed"
        );
        expiry.observe(std::slice::from_ref(&held), Instant::now());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(
            !expiry.is_expired(&held, Instant::now(), failover),
            "exactly the failover time is not more"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(expiry.is_expired(&held, Instant::now(), failover));

        // A renewal (counter change) restarts the clock.
        let renewed = lease(6, Some("other"));
        expiry.observe(std::slice::from_ref(&renewed), Instant::now());
        assert!(!expiry.is_expired(&renewed, Instant::now(), failover));
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(expiry.is_expired(&renewed, Instant::now(), failover));
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_lease_is_takeable_at_once() {
        let expiry = LeaseExpiry::new();
        assert!(expiry.is_expired(&lease(3, None), Instant::now(), Duration::from_secs(10)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_never_owned_lease_waits_the_failover_time() {
        // A row recreated after the table was lost: a former owner may still
        // have a write in flight.
        let failover = Duration::from_secs(10);
        let mut expiry = LeaseExpiry::new();
        let fresh = lease(0, None);
        assert!(
            !expiry.is_expired(&fresh, Instant::now(), failover),
            "never observed"
        );
        expiry.observe(std::slice::from_ref(&fresh), Instant::now());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!expiry.is_expired(&fresh, Instant::now(), failover));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(expiry.is_expired(&fresh, Instant::now(), failover));
    }

    #[tokio::test(start_paused = true)]
    async fn forgets_leases_that_left_the_table() {
        let mut expiry = LeaseExpiry::new();
        let held = lease(1, Some("other"));
        expiry.observe(std::slice::from_ref(&held), Instant::now());
        expiry.observe(&[], Instant::now());
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(
            !expiry.is_expired(&held, Instant::now(), Duration::from_secs(10)),
            "re-observed from scratch"
        );
    }
}
