//! Waiting for SIGTERM (what ECS and systemd send) or SIGINT (Ctrl-C).

use tracing::info;

/// Resolves when the process receives SIGTERM or SIGINT.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                info!(signal = name, "shutdown requested");
            }
            _ => {
                // Cannot install handlers: fall back to Ctrl-C only.
                let _ = tokio::signal::ctrl_c().await;
                info!(signal = "SIGINT", "shutdown requested");
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        info!("shutdown requested");
    }
}
