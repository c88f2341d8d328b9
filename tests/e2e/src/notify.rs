//! [`NotifySocket`]: the socket systemd gives a `Type=notify` service
//! (`NOTIFY_SOCKET`, a Unix datagram socket; sd_notify(3)), bound by the
//! test, with every state the daemon sends and when it arrived.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context as _, Result};
use tokio::net::UnixDatagram;
use tokio::task::JoinHandle;

use crate::env::unique_name;

/// A bound notify socket, recording what arrives; removed when dropped.
#[derive(Debug)]
pub struct NotifySocket {
    path: PathBuf,
    received: Arc<Mutex<Vec<(Instant, String)>>>,
    receiving: JoinHandle<()>,
}

impl NotifySocket {
    /// Binds a socket in the temporary directory.
    ///
    /// # Errors
    /// It cannot be bound.
    pub fn bind() -> Result<Self> {
        let path = std::env::temp_dir().join(unique_name("notify"));
        let socket = UnixDatagram::bind(&path)
            .with_context(|| format!("failed to bind {}", path.display()))?;
        let received = Arc::new(Mutex::new(Vec::new()));
        let receiving = tokio::spawn(receive(socket, received.clone()));
        Ok(Self {
            path,
            received,
            receiving,
        })
    }

    /// The socket's path, for `NOTIFY_SOCKET`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// When each message with exactly the line `state` (`READY=1`,
    /// `WATCHDOG=1`) arrived, in order.
    pub fn arrivals(&self, state: &str) -> Vec<Instant> {
        self.received
            .lock()
            .expect("no panic while holding the lock")
            .iter()
            .filter(|(_, message)| message.lines().any(|line| line == state))
            .map(|(at, _)| *at)
            .collect()
    }
}

impl Drop for NotifySocket {
    fn drop(&mut self) {
        self.receiving.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

async fn receive(socket: UnixDatagram, received: Arc<Mutex<Vec<(Instant, String)>>>) {
    let mut buffer = vec![0; 4_096];
    while let Ok(len) = socket.recv(&mut buffer).await {
        let message = String::from_utf8_lossy(&buffer[..len]).into_owned();
        received
            .lock()
            .expect("no panic while holding the lock")
            .push((Instant::now(), message));
    }
}
