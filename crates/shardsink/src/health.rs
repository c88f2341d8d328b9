//! [`Health`]: liveness and readiness, as `/healthz` and `/readyz` report
//! them and the systemd watchdog uses them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// What the worker loop reports about itself.
#[derive(Debug)]
pub struct Health {
    /// Liveness fails when the worker loop has not ticked for this long.
    liveness_window: Duration,
    /// Readiness fails when no lease-table scan succeeded for this long.
    readiness_window: Duration,
    started: AtomicBool,
    last_tick: Mutex<Instant>,
    last_scan_ok: Mutex<Option<Instant>>,
    leases_held: AtomicUsize,
    /// The last scan planned nothing more to take or steal.
    settled: AtomicBool,
}

impl Health {
    /// Health for a worker that scans the lease table every
    /// `taking_interval`: live while its loop ticked within
    /// max(60 s, 10 × interval); ready while a scan succeeded within
    /// 3 × interval + 30 s (time for the SDK's own retries).
    pub fn new(taking_interval: Duration) -> Self {
        Self {
            liveness_window: (taking_interval * 10).max(Duration::from_secs(60)),
            readiness_window: taking_interval * 3 + Duration::from_secs(30),
            started: AtomicBool::new(false),
            last_tick: Mutex::new(Instant::now()),
            last_scan_ok: Mutex::new(None),
            leases_held: AtomicUsize::new(0),
            settled: AtomicBool::new(false),
        }
    }

    /// The worker loop is alive.
    pub fn tick(&self) {
        *self
            .last_tick
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
    }

    /// Start-up checks passed (stream, bucket, lease table).
    pub fn started(&self) {
        self.started.store(true, Ordering::SeqCst);
        self.tick();
    }

    /// A lease-table scan succeeded; `settled` when it left nothing more to
    /// take or steal.
    pub fn scan_succeeded(&self, leases_held: usize, settled: bool) {
        *self
            .last_scan_ok
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        self.leases_held.store(leases_held, Ordering::SeqCst);
        self.settled.store(settled, Ordering::SeqCst);
        self.tick();
    }

    /// Whether the process and its loops are alive. Start-up (which may wait
    /// on AWS with retries) counts as alive.
    pub fn is_live(&self) -> bool {
        let last = *self
            .last_tick
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        last.elapsed() <= self.liveness_window
    }

    /// `Ok` when ready to work: started, the lease table reachable recently,
    /// and leases held or nothing more to take. Otherwise the reason.
    pub fn readiness(&self) -> Result<(), &'static str> {
        if !self.started.load(Ordering::SeqCst) {
            return Err("starting: checking the stream, bucket and lease table");
        }
        let last_scan = *self
            .last_scan_ok
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last_scan.is_none_or(|at| at.elapsed() > self.readiness_window) {
            return Err("the lease table has not been read successfully recently");
        }
        if self.leases_held.load(Ordering::SeqCst) == 0 && !self.settled.load(Ordering::SeqCst) {
            return Err("no lease held yet");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn liveness_follows_the_loop() {
        let health = Health::new(Duration::from_secs(2));
        assert!(health.is_live(), "starting counts as alive");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(
            !health.is_live(),
            "a loop that stopped ticking is not alive"
        );
        health.tick();
        assert!(health.is_live());
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_needs_start_a_recent_scan_and_work() {
        let health = Health::new(Duration::from_secs(2));
        assert!(health.readiness().is_err());
        health.started();
        assert_eq!(
            health.readiness(),
            Err("the lease table has not been read successfully recently")
        );
        health.scan_succeeded(0, false);
        assert_eq!(health.readiness(), Err("no lease held yet"));
        health.scan_succeeded(3, false);
        assert_eq!(health.readiness(), Ok(()));
        health.scan_succeeded(0, true);
        assert_eq!(
            health.readiness(),
            Ok(()),
            "a standby worker with nothing to take is ready"
        );
        tokio::time::advance(Duration::from_secs(37)).await;
        assert!(
            health.readiness().is_err(),
            "no successful scan for 3 intervals + 30 s"
        );
    }
}
