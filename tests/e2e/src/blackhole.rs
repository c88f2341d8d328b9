//! [`Blackhole`]: a TCP listener the test owns in front of a server, which
//! forwards connections to it, or — while cut — takes them and never
//! answers, as a network that drops packets looks to a client: only the
//! client's own timeouts end its requests. Point the daemon's endpoint
//! (`AWS_ENDPOINT_URL_KINESIS`, say) at [`Blackhole::url`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context as _, Result};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A forwarding listener that can be cut; stops listening when dropped.
#[derive(Debug)]
pub struct Blackhole {
    address: SocketAddr,
    cut: watch::Sender<bool>,
    held: Arc<AtomicUsize>,
    accepting: JoinHandle<()>,
}

impl Blackhole {
    /// Listens on a free loopback port and forwards every connection to
    /// the server at `url` (`http://host:port`, as in `AWS_ENDPOINT_URL_*`).
    ///
    /// # Errors
    /// `url` names no reachable address, or no port could be bound.
    pub async fn start(url: &str) -> Result<Self> {
        let authority = url
            .strip_prefix("http://")
            .with_context(|| format!("{url} is not an http:// URL"))?
            .trim_end_matches('/');
        let target = tokio::net::lookup_host(authority)
            .await
            .with_context(|| format!("failed to resolve {authority}"))?
            .next()
            .with_context(|| format!("{authority} has no address"))?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("failed to bind the blackhole's port")?;
        let address = listener.local_addr()?;
        let (cut, _) = watch::channel(false);
        let held = Arc::new(AtomicUsize::new(0));
        let accepting = tokio::spawn(accept(listener, target, cut.clone(), held.clone()));
        Ok(Self {
            address,
            cut,
            held,
            accepting,
        })
    }

    /// `http://127.0.0.1:<port>`, for an `AWS_ENDPOINT_URL_*` variable.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// From now on, connections are taken and never answered; the ones
    /// being forwarded are closed (so a client's pooled connection cannot
    /// get through).
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// From now on, connections are forwarded again (those taken while cut
    /// stay unanswered until their client gives up on them).
    pub fn restore(&self) {
        self.cut.send_replace(false);
    }

    /// How many connections were taken while cut.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

async fn accept(
    listener: TcpListener,
    target: SocketAddr,
    cut: watch::Sender<bool>,
    held: Arc<AtomicUsize>,
) {
    while let Ok((client, _)) = listener.accept().await {
        let cut = cut.subscribe();
        if *cut.borrow() {
            held.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(swallow(client));
        } else {
            tokio::spawn(forward(client, target, cut));
        }
    }
}

/// Reads what the client sends until it closes, answering nothing.
async fn swallow(mut client: TcpStream) {
    let _ = tokio::io::copy(&mut client, &mut tokio::io::sink()).await;
}

/// Copies both ways between `client` and `target` until either closes or
/// the link is cut.
async fn forward(mut client: TcpStream, target: SocketAddr, mut cut: watch::Receiver<bool>) {
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = cut.wait_for(|cut| *cut) => {}
    }
}
