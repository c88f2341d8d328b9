//! Operating the daemon: metrics, health, the HTTP endpoints, systemd,
//! signals and test failpoints.
//!
//! - `metrics`: the Prometheus registry;
//! - `health`: liveness and readiness;
//! - `http`: `/metrics`, `/healthz`, `/readyz`, and the `shardsink health`
//!   probe;
//! - `systemd`: `READY=1`, `STATUS=`, the watchdog, `STOPPING=1`;
//! - `shutdown`: SIGTERM and Ctrl-C;
//! - `failpoint`: named points where tests crash or pause the process;
//! - `log`: the log subscriber and `error_chain`.

pub(crate) mod failpoint;
pub(crate) mod health;
pub(crate) mod http;
pub(crate) mod log;
pub(crate) mod metrics;
pub(crate) mod shutdown;
pub(crate) mod systemd;
