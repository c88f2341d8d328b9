//! [`Fence`]: an S3 write runs only while the shard's lease is confirmed, so
//! a worker that lost its lease — or was paused, or saw its lease table
//! vanish — cannot land a write after the next owner started (DESIGN.md,
//! "Fencing S3 writes").

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use shard_lease::HeldLease;

/// A PUT attempt ends this long before the lease could be seen expired:
/// slack for a request whose body was fully sent when the attempt was
/// abandoned, which S3 may still complete.
pub(crate) const LEASE_MARGIN: Duration = Duration::from_secs(1);

/// The lease a shard's writes are fenced by.
#[derive(Debug, Clone)]
pub(crate) struct Fence {
    lease: Arc<HeldLease>,
    /// `--failover-time` (the lease row also records it, and other workers
    /// wait at least this long before they take the lease).
    failover_time: Duration,
}

impl Fence {
    /// A fence on `lease`, for a worker whose failover time is
    /// `failover_time`.
    pub(crate) fn new(lease: Arc<HeldLease>, failover_time: Duration) -> Self {
        Self {
            lease,
            failover_time,
        }
    }

    /// Runs `write` only as long as the lease is confirmed: it is abandoned
    /// (`None`) [`LEASE_MARGIN`] before the moment another worker could see
    /// the lease expire (last confirmation + failover time). Renewals, which
    /// keep going meanwhile, push that moment on; whoever takes the lease
    /// next lists the shard only after this write ended.
    pub(crate) async fn within<F: Future>(&self, write: F) -> Option<F::Output> {
        tokio::pin!(write);
        loop {
            let deadline =
                self.lease.confirmed_at() + self.failover_time.saturating_sub(LEASE_MARGIN);
            if deadline <= tokio::time::Instant::now() {
                return None;
            }
            // Deadline first: a worker resumed after a pause (SIGSTOP) past
            // its deadline abandons the write as soon as this task runs. The
            // HTTP connection is driven by a task of its own, which may send
            // a little more of the body first (DESIGN.md, "Known limits").
            tokio::select! {
                biased;
                () = tokio::time::sleep_until(deadline) => {}
                output = &mut write => return Some(output),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use shard_lease::{Lease, LeaseTable};
    use tokio::time::Instant;

    use super::*;
    use crate::fake_aws::{self, FakeBucket, FakeStream, FakeTable};

    const FAILOVER: Duration = Duration::from_secs(10);

    async fn fence() -> Fence {
        let clients = fake_aws::clients(
            Arc::new(FakeStream::default()),
            Arc::new(FakeBucket::default()),
            Arc::new(FakeTable::default()),
        );
        let lease_table = LeaseTable::new(clients.dynamodb, "leases");
        let lease = Lease::new(
            "shardId-000000000000",
            shard_lease::Checkpoint::TrimHorizon,
            vec![],
        );
        lease_table.create_lease(&lease).await.unwrap();
        let taken_at = Instant::now();
        let taken = lease_table.take_lease(&lease, "worker-1").await.unwrap();
        Fence::new(
            Arc::new(HeldLease::new(lease_table, taken, taken_at)),
            FAILOVER,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_cannot_outlive_the_lease_confirmation() {
        let fence = fence().await;
        let started = Instant::now();
        let outcome = fence
            .within(tokio::time::sleep(Duration::from_secs(30)))
            .await;
        assert!(outcome.is_none(), "abandoned");
        assert_eq!(
            started.elapsed(),
            FAILOVER - LEASE_MARGIN,
            "before anyone could see the lease expire"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_let_a_long_write_finish() {
        let fence = fence().await;
        let lease = fence.lease.clone();
        // Renew every 3 s while a 25 s write runs.
        let renewals = tokio::spawn(async move {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_secs(3)).await;
                lease.renew().await.unwrap();
            }
        });
        let outcome = fence
            .within(tokio::time::sleep(Duration::from_secs(25)))
            .await;
        assert!(outcome.is_some(), "the lease stayed confirmed");
        renewals.abort();
    }
}
