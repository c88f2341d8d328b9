//! systemd integration (`Type=notify`): `READY=1` once start-up checks pass
//! (`STATUS=` and `EXTEND_TIMEOUT_USEC=` while they are retried), `WATCHDOG=1`
//! every half of `WatchdogSec` while [`Health::is_live`], and `STOPPING=1` on
//! shutdown. Does nothing when not run by systemd (no
//! `NOTIFY_SOCKET`). Protocol: sd_notify(3).

use std::sync::Arc;
use std::time::Duration;

use sd_notify::NotifyState;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::ops::health::Health;

/// Tells systemd the service is ready.
pub fn ready() {
    notify(&[NotifyState::Ready]);
}

/// Tells systemd the service is stopping.
pub fn stopping() {
    notify(&[NotifyState::Stopping]);
}

/// While start-up waits on AWS (retrying until a permission or the network
/// is fixed): shows `status` in `systemctl status`, and asks systemd to wait
/// `wait` more before it gives up on the start (`EXTEND_TIMEOUT_USEC`,
/// systemd 236 and later), so a slow start is not killed and restarted in a
/// loop by `TimeoutStartSec`.
pub fn starting(status: &str, wait: Duration) {
    let usec = u32::try_from(wait.as_micros()).unwrap_or(u32::MAX);
    notify(&[
        NotifyState::Status(status),
        NotifyState::ExtendTimeoutUsec(usec),
    ]);
}

/// Pets the watchdog while `health` says the loops are alive, until `token`
/// is cancelled. A no-op unless systemd set `WATCHDOG_USEC` for us.
pub fn spawn_watchdog(health: Arc<Health>, token: CancellationToken) {
    let Some(interval) = sd_notify::watchdog_enabled() else {
        return;
    };
    let period = interval / 2;
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(period);
        loop {
            tokio::select! {
                () = token.cancelled() => return,
                _ = ticker.tick() => {
                    if health.is_live() {
                        notify(&[NotifyState::Watchdog]);
                    }
                }
            }
        }
    });
}

fn notify(states: &[NotifyState]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(err) = sd_notify::notify(states) {
        debug!(error = %err, "sd_notify failed");
    }
}
