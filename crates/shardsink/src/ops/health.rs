//! [`Health`]: liveness and readiness, as `/healthz` and `/readyz` report
//! them and the systemd watchdog uses them.
//!
//! Live means "the worker loop is not stuck": it ticked within the liveness
//! window, or it said it is waiting on AWS on purpose — start-up retries
//! while a permission or the network is being fixed, a lease table being
//! created — and that wait is not overdue. Such a wait is not ready, with
//! its reason, but it is alive: restarting the process would not help.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::lock::lock;

/// A wait on AWS the worker loop announced.
#[derive(Debug, Clone)]
struct Waiting {
    /// For `/readyz` and logs, e.g. "starting: describe stream failed: …".
    reason: String,
    /// When the loop expects to act again at the latest.
    until: Instant,
}

/// What the worker loop reports about itself.
#[derive(Debug)]
pub struct Health {
    /// Liveness fails when the worker loop has not ticked for this long.
    liveness_window: Duration,
    /// Readiness fails when no lease-table scan succeeded for this long.
    readiness_window: Duration,
    started: AtomicBool,
    last_tick: Mutex<Instant>,
    waiting: Mutex<Option<Waiting>>,
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
            waiting: Mutex::new(None),
            last_scan_ok: Mutex::new(None),
            leases_held: AtomicUsize::new(0),
            settled: AtomicBool::new(false),
        }
    }

    /// The worker loop is alive, and waits on nothing.
    pub fn tick(&self) {
        *lock(&self.last_tick) = Instant::now();
        *lock(&self.waiting) = None;
    }

    /// The worker loop waits on AWS on purpose (a start-up call being
    /// retried, a lease table being created) and expects to act again by
    /// `until`: alive until the liveness window after that, not ready, for
    /// `reason`. Ends at the next [`tick`](Self::tick).
    pub fn waiting(&self, reason: impl Into<String>, until: Instant) {
        *lock(&self.waiting) = Some(Waiting {
            reason: reason.into(),
            until,
        });
    }

    /// Start-up checks passed (stream, bucket, lease table).
    pub fn started(&self) {
        self.started.store(true, Ordering::SeqCst);
        self.tick();
    }

    /// A lease-table scan succeeded; `settled` when it left nothing more to
    /// take or steal.
    pub fn scan_succeeded(&self, leases_held: usize, settled: bool) {
        *lock(&self.last_scan_ok) = Some(Instant::now());
        self.leases_held.store(leases_held, Ordering::SeqCst);
        self.settled.store(settled, Ordering::SeqCst);
        self.tick();
    }

    /// Whether the process and its loops are alive: the worker loop ticked
    /// within the liveness window, or is in an announced wait that is not
    /// overdue by more than the window.
    pub fn is_live(&self) -> bool {
        let now = Instant::now();
        let ticked = now.saturating_duration_since(*lock(&self.last_tick)) <= self.liveness_window;
        ticked
            || lock(&self.waiting)
                .as_ref()
                .is_some_and(|wait| now <= wait.until + self.liveness_window)
    }

    /// `Ok` when ready to work: started, not waiting on AWS, the lease table
    /// read recently, and leases held or nothing more to take. Otherwise the
    /// reason.
    pub fn readiness(&self) -> Result<(), String> {
        let waiting = lock(&self.waiting).as_ref().map(|wait| wait.reason.clone());
        if !self.started.load(Ordering::SeqCst) {
            return Err(waiting.unwrap_or_else(|| {
                "starting: checking the stream, bucket and lease table".to_owned()
            }));
        }
        if let Some(reason) = waiting {
            return Err(reason);
        }
        let last_scan = *lock(&self.last_scan_ok);
        if last_scan.is_none_or(|at| at.elapsed() > self.readiness_window) {
            return Err("the lease table has not been read successfully recently".to_owned());
        }
        if self.leases_held.load(Ordering::SeqCst) == 0 && !self.settled.load(Ordering::SeqCst) {
            return Err("no lease held yet".to_owned());
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
    async fn an_announced_wait_is_alive_but_not_ready() {
        let health = Health::new(Duration::from_secs(2));
        let until = Instant::now() + Duration::from_secs(300);
        health.waiting("starting: describe stream failed; retrying", until);
        tokio::time::advance(Duration::from_secs(200)).await;
        assert!(health.is_live(), "waiting on AWS is not a stuck loop");
        assert_eq!(
            health.readiness().unwrap_err(),
            "starting: describe stream failed; retrying"
        );
        tokio::time::advance(Duration::from_secs(161)).await;
        assert!(!health.is_live(), "a wait overdue by the window is stuck");
        health.started();
        assert!(health.is_live());
        health.waiting("the lease table is being created again", Instant::now());
        assert_eq!(
            health.readiness().unwrap_err(),
            "the lease table is being created again"
        );
        health.scan_succeeded(1, true);
        assert_eq!(health.readiness(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_needs_start_a_recent_scan_and_work() {
        let health = Health::new(Duration::from_secs(2));
        assert!(health.readiness().is_err());
        health.started();
        assert_eq!(
            health.readiness().unwrap_err(),
            "the lease table has not been read successfully recently"
        );
        health.scan_succeeded(0, false);
        assert_eq!(health.readiness().unwrap_err(), "no lease held yet");
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
