//! Waiting for SIGTERM (what ECS and systemd send) or SIGINT (Ctrl-C).
//!
//! The handlers are installed as soon as the daemon's runtime exists, before
//! settings are checked or AWS clients are built: a SIGTERM that arrives
//! while shardsink is still starting is then a shutdown request like any
//! other (exit 0), not the signal's default action (killed by SIGTERM).

use tracing::info;

/// Installed SIGTERM and SIGINT handlers. A signal received after
/// [`install`](Self::install) is kept until [`received`](Self::received) is
/// awaited (tokio's signal streams buffer one delivery).
#[derive(Debug)]
pub struct ShutdownSignals {
    #[cfg(unix)]
    handlers: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl ShutdownSignals {
    /// Installs the handlers now. Must be called within a tokio runtime
    /// (after `Runtime::enter`). Where they cannot be installed, falls back
    /// to waiting for Ctrl-C.
    pub fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let handlers = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(term), Ok(int)) => Some((term, int)),
                _ => None,
            };
            Self { handlers }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// Resolves when the process has received SIGTERM or SIGINT since
    /// [`install`](Self::install).
    pub async fn received(self) {
        #[cfg(unix)]
        if let Some((mut term, mut int)) = self.handlers {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            info!(signal = name, "shutdown requested");
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
        info!(signal = "SIGINT", "shutdown requested");
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_signal_before_anyone_waits_is_kept_and_does_not_kill() {
        let signals = ShutdownSignals::install();
        // Without a handler installed, SIGTERM would end this test process.
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        tokio::time::timeout(Duration::from_secs(10), signals.received())
            .await
            .expect("the SIGTERM sent before waiting is received");
    }
}
