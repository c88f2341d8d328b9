//! [`Health`]: liveness and readiness, as `/healthz` and `/readyz` report
//! them and the systemd watchdog uses them.
//!
//! Live means "the worker loop is not stuck": within the liveness window it
//! came round ([`Health::tick`]), or the long step it is in — start-up, a
//! lease sync round, a lease release — began or ended an AWS attempt
//! ([`Health::watch`]): an answer, an error, an attempt's timeout. Or it
//! said it is waiting on AWS on purpose — start-up retries while a
//! permission or the network is being fixed, a lease table being created —
//! and that wait is not overdue. Such a wait is not ready, with its reason,
//! but it is alive: restarting the process would not help.
//!
//! A step that is retrying begins or ends an attempt at least every 30 s:
//! every attempt the worker loop makes times out within that
//! (`aws::clients`), the SDK's backoffs between attempts are a few seconds,
//! and shardsink's longer backoffs are announced waits. A step waiting on
//! anything else that does not come — a lock never released, a call with no
//! timeout — begins no attempt, and liveness fails one window later. Only
//! the loop's own attempts count: shard tasks and renewals, on tasks of
//! their own, make the loop look no more alive.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::lock::lock;

tokio::task_local! {
    /// The health of the worker loop whose long step runs on this task
    /// ([`Health::watch`]).
    static WATCHED: Arc<Health>;
}

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
    /// Liveness fails when the worker loop has not made progress for this
    /// long.
    liveness_window: Duration,
    /// Readiness fails when no lease-table scan succeeded for this long.
    readiness_window: Duration,
    started: AtomicBool,
    /// When the loop last came round, or its step last began or ended an
    /// AWS attempt.
    last_progress: Mutex<Instant>,
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
            last_progress: Mutex::new(Instant::now()),
            waiting: Mutex::new(None),
            last_scan_ok: Mutex::new(None),
            leases_held: AtomicUsize::new(0),
            settled: AtomicBool::new(false),
        }
    }

    /// The worker loop came round: it is alive, and waits on nothing.
    pub fn tick(&self) {
        self.progressed();
        *lock(&self.waiting) = None;
    }

    /// Runs `step`, a long step of the worker loop (AWS calls and their
    /// retries), counting the loop alive each time the step begins or ends
    /// an SDK attempt ([`attempt_seen`](Self::attempt_seen), called by the
    /// clients' `aws::attempts::AttemptsAsProgress` interceptor). An
    /// announced [`waiting`](Self::waiting) is left as it is: the step may
    /// be the wait.
    pub async fn watch<F: Future>(self: &Arc<Self>, step: F) -> F::Output {
        WATCHED.scope(self.clone(), step).await
    }

    /// An SDK attempt began or ended on this task: progress of the worker
    /// loop if it is the loop's watched step, else nothing.
    pub fn attempt_seen() {
        let _ = WATCHED.try_with(|health| health.progressed());
    }

    fn progressed(&self) {
        *lock(&self.last_progress) = Instant::now();
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

    /// Whether the process and its loops are alive: the worker loop made
    /// progress (came round, or its step began or ended an AWS attempt)
    /// within the liveness window, or is in an announced wait that is not
    /// overdue by more than the window.
    pub fn is_live(&self) -> bool {
        let now = Instant::now();
        let progressed =
            now.saturating_duration_since(*lock(&self.last_progress)) <= self.liveness_window;
        progressed
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

    /// A step whose attempts end every 25 s — a call timing out, again
    /// and again — keeps a 60 s window alive for as long as it runs; a
    /// step that begins no attempt does not, whatever other tasks do.
    #[tokio::test(start_paused = true)]
    async fn a_step_is_alive_while_it_makes_attempts() {
        let health = Arc::new(Health::new(Duration::from_secs(2)));
        let start = Instant::now();
        let retrying = tokio::spawn({
            let health = health.clone();
            async move {
                health
                    .watch(async {
                        for _ in 0..12 {
                            tokio::time::sleep(Duration::from_secs(25)).await;
                            Health::attempt_seen();
                        }
                    })
                    .await;
            }
        });
        while !retrying.is_finished() {
            assert!(health.is_live(), "a step that is retrying is alive");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert!(Instant::now() >= start + Duration::from_secs(300));

        // The loop comes round, then starts a step that waits for ever.
        health.tick();
        let stuck = tokio::spawn({
            let health = health.clone();
            async move { health.watch(std::future::pending::<()>()).await }
        });
        // A shard task's attempts, on a task of its own.
        let others = tokio::spawn(async {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Health::attempt_seen();
            }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(health.is_live(), "within the window");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!health.is_live(), "a step without attempts is stuck");
        stuck.abort();
        others.abort();
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
