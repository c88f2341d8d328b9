//! The HTTP endpoints (`--metrics-address`): `GET /metrics` (Prometheus /
//! OpenMetrics text), `GET /healthz` (liveness) and `GET /readyz`
//! (readiness). Served with axum on its own task; stops with the worker.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::ops::health::Health;
use crate::ops::metrics::Metrics;

/// `Content-Type` of the exposition format prometheus-client writes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone)]
struct Endpoints {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// Binds `address` and serves the endpoints until `token` is cancelled.
///
/// # Errors
/// When the address cannot be bound (in use, not local, no permission).
pub async fn serve(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    token: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Endpoints { metrics, health });
    info!(address = %bound, "serving /metrics, /healthz and /readyz");
    Ok(tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app)
            .with_graceful_shutdown(token.cancelled_owned())
            .await
        {
            warn!(error = %err, "metrics server stopped");
        }
    }))
}

async fn metrics_text(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, OPENMETRICS)],
        endpoints.metrics.encode(),
    )
}

async fn healthz(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    if endpoints.health.is_live() {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the worker loop is not running\n",
        )
    }
}

async fn readyz(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    match endpoints.health.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n".to_owned()),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    }
}

/// `shardsink health`: GETs `/healthz` (or `/readyz`) from a running
/// shardsink and says whether it answered 200 — for container health checks
/// in images without curl. Plain HTTP/1.0 over a socket, 3 s timeout.
///
/// # Errors
/// A connection or I/O error, described.
pub fn probe(address: SocketAddr, path: &str) -> Result<bool, String> {
    use std::io::{Read as _, Write as _};
    use std::time::Duration;
    let timeout = Duration::from_secs(3);
    let mut stream = std::net::TcpStream::connect_timeout(&address, timeout)
        .map_err(|err| format!("cannot connect to {address}: {err}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|err| err.to_string())?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|err| err.to_string())?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n")
        .map_err(|err| err.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|err| err.to_string())?;
    let status_line = response.lines().next().unwrap_or_default();
    Ok(status_line.split_whitespace().nth(1) == Some("200"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serves_metrics_health_and_readiness() {
        let metrics = Arc::new(Metrics::new());
        metrics.records_read.inc_by(7);
        let health = Arc::new(Health::new(std::time::Duration::from_secs(2)));
        let token = CancellationToken::new();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let server = serve(address, metrics, health.clone(), token.clone())
            .await
            .unwrap();

        let get = |path: &'static str| tokio::task::spawn_blocking(move || probe(address, path));
        assert_eq!(get("/healthz").await.unwrap(), Ok(true));
        assert_eq!(get("/readyz").await.unwrap(), Ok(false), "not started yet");
        health.started();
        health.scan_succeeded(1, true);
        assert_eq!(get("/readyz").await.unwrap(), Ok(true));
        let text = tokio::task::spawn_blocking(move || {
            use std::io::{Read as _, Write as _};
            let mut stream = std::net::TcpStream::connect(address).unwrap();
            stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
            let mut out = String::new();
            stream.read_to_string(&mut out).unwrap();
            out
        })
        .await
        .unwrap();
        assert!(text.contains("shardsink_records_read_total 7"), "{text}");
        token.cancel();
        server.await.unwrap();
        assert!(
            get("/healthz").await.unwrap().is_err(),
            "stopped with the token"
        );
    }
}
