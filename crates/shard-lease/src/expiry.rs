//! [`LeaseExpiry`]: which leases another worker has stopped renewing.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::Lease;

/// Tracks, per lease, when this worker last saw its row change — its
/// `leaseCounter`, `leaseOwner` or `creationToken` — on the local monotonic
/// clock.
///
/// A lease is expired when its row has not changed for longer than the
/// failover time (the larger of this worker's and the owner's, see
/// [`Lease::expiry_time`]). This is the KCL's rule (`DynamoDBLeaseRefresher`
/// / `LeaseTaker`): workers' clocks are never compared, only each worker's
/// own observations, so clock skew cannot expire a live lease. A lease seen
/// for the first time counts as just renewed: a new worker waits one failover
/// time before taking another worker's leases. A row deleted and created
/// again between two scans has a new creation token, so it counts as new
/// even when its counter and owner look the same (0, none).
#[derive(Debug, Default)]
pub struct LeaseExpiry {
    seen: HashMap<String, Observation>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Observation {
    version: RowVersion,
    changed_at: Instant,
}

/// What makes two observations of a row the same row state.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RowVersion {
    counter: u64,
    owner: Option<String>,
    creation_token: Option<String>,
}

impl LeaseExpiry {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the leases of one table scan made at `now`, and forgets leases
    /// no longer in the table.
    pub fn observe(&mut self, leases: &[Lease], now: Instant) {
        self.record(
            leases.iter().map(|lease| {
                (
                    lease.lease_key.as_str(),
                    RowVersion {
                        counter: lease.lease_counter,
                        owner: lease.lease_owner.clone(),
                        creation_token: lease.creation_token.clone(),
                    },
                )
            }),
            now,
        );
    }

    /// Records `(key, counter)` entries of one scan made at `now` — worker
    /// heartbeats — and forgets keys not in it.
    pub fn observe_counters<'a>(
        &mut self,
        entries: impl IntoIterator<Item = (&'a str, u64)>,
        now: Instant,
    ) {
        self.record(
            entries.into_iter().map(|(key, counter)| {
                (
                    key,
                    RowVersion {
                        counter,
                        owner: None,
                        creation_token: None,
                    },
                )
            }),
            now,
        );
    }

    fn record<'a>(&mut self, entries: impl Iterator<Item = (&'a str, RowVersion)>, now: Instant) {
        let entries: HashMap<&str, RowVersion> = entries.collect();
        self.seen
            .retain(|key, _| entries.contains_key(key.as_str()));
        for (key, version) in entries {
            let changed = self
                .seen
                .get(key)
                .is_none_or(|seen| seen.version != version);
            if changed {
                self.seen.insert(
                    key.to_owned(),
                    Observation {
                        version,
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
    /// - owned: once its row has not changed for more than
    ///   `failover_time`, or the owner's recorded failover time if larger.
    ///
    /// A lease never observed, or observed in another state than `lease`
    /// (another counter, owner or creation token), is not expired.
    pub fn is_expired(&self, lease: &Lease, now: Instant, failover_time: Duration) -> bool {
        (lease.lease_owner.is_none() && lease.lease_counter > 0)
            || self.is_lease_stale(lease, now, failover_time)
    }

    /// Whether `lease`'s row, in exactly this state, has stood still for
    /// more than [`Lease::expiry_time`] of `failover_time`.
    pub fn is_lease_stale(&self, lease: &Lease, now: Instant, failover_time: Duration) -> bool {
        self.seen.get(&lease.lease_key).is_some_and(|seen| {
            seen.version.counter == lease.lease_counter
                && seen.version.owner == lease.lease_owner
                && seen.version.creation_token == lease.creation_token
                && now.saturating_duration_since(seen.changed_at) > lease.expiry_time(failover_time)
        })
    }

    /// Whether the counter of `key` has stayed at `counter` for more than
    /// `failover_time` (a worker's heartbeat gone quiet). A key never
    /// observed is not stale.
    pub fn is_stale(&self, key: &str, counter: u64, now: Instant, failover_time: Duration) -> bool {
        self.seen.get(key).is_some_and(|seen| {
            seen.version.counter == counter
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
    async fn a_row_created_again_between_scans_restarts_the_clock() {
        // Counter 0 and no owner before and after: only the creation token
        // tells the rows apart. A former owner's write may still be in
        // flight when the row is recreated; it must wait a full failover time.
        let failover = Duration::from_secs(10);
        let mut expiry = LeaseExpiry::new();
        let mut first = lease(0, None);
        first.creation_token = Some("one".to_owned());
        expiry.observe(std::slice::from_ref(&first), Instant::now());
        tokio::time::advance(Duration::from_secs(9)).await;
        let mut recreated = first.clone();
        recreated.creation_token = Some("two".to_owned());
        expiry.observe(std::slice::from_ref(&recreated), Instant::now());
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(
            !expiry.is_expired(&recreated, Instant::now(), failover),
            "18 s after the first row, but only 9 s after the new one"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(expiry.is_expired(&recreated, Instant::now(), failover));
    }

    #[tokio::test(start_paused = true)]
    async fn the_owners_longer_failover_time_is_waited_for() {
        // A rolling change from 30 s to 10 s: the owner still bounds its
        // writes by 30 s, so a worker with 10 s must wait 30 s too.
        let mut expiry = LeaseExpiry::new();
        let mut held = lease(5, Some("old-settings"));
        held.owner_failover_time = Some(Duration::from_secs(30));
        expiry.observe(std::slice::from_ref(&held), Instant::now());
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(!expiry.is_expired(&held, Instant::now(), Duration::from_secs(10)));
        tokio::time::advance(Duration::from_secs(20)).await;
        assert!(expiry.is_expired(&held, Instant::now(), Duration::from_secs(10)));
        // And a shorter recorded time never shortens this worker's own.
        let mut expiry = LeaseExpiry::new();
        held.owner_failover_time = Some(Duration::from_secs(2));
        expiry.observe(std::slice::from_ref(&held), Instant::now());
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!expiry.is_expired(&held, Instant::now(), Duration::from_secs(10)));
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
