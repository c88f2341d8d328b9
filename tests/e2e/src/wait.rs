//! Polling helpers: tests wait for a condition to become true, never
//! sleep-and-hope.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};

/// How often [`wait_until`] and [`wait_for`] evaluate their condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// `timeout` multiplied by `SHARDSINK_E2E_TIMEOUT_SCALE` (a float, default
/// 1), for slow machines.
pub fn scaled(timeout: Duration) -> Duration {
    let scale = crate::env::env_nonempty("SHARDSINK_E2E_TIMEOUT_SCALE")
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(1.0);
    timeout.mul_f64(scale)
}

/// What a condition passed to [`wait_until`] may return: a plain `bool`, or
/// an `anyhow::Result<bool>` whose error counts as "not yet" (kept for the
/// timeout message).
pub trait Condition {
    /// `Ok(true)` when the awaited state is reached.
    fn into_result(self) -> Result<bool>;
}

impl Condition for bool {
    fn into_result(self) -> Result<bool> {
        Ok(self)
    }
}

impl Condition for Result<bool> {
    fn into_result(self) -> Result<bool> {
        self
    }
}

/// Polls `condition` every [`POLL_INTERVAL`] until it is true.
///
/// `what` describes the awaited state for the error ("stream x ACTIVE").
///
/// # Errors
/// When `timeout` passes first; the message names `what` and the last error
/// the condition returned, if any.
pub async fn wait_until<F, Fut, C>(timeout: Duration, what: &str, mut condition: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = C>,
    C: Condition,
{
    wait_for(timeout, what, || {
        let fut = condition();
        async move { fut.await.into_result().map(|done| done.then_some(())) }
    })
    .await
}

/// Polls `probe` every [`POLL_INTERVAL`] until it returns `Ok(Some(value))`,
/// and returns the value. `Ok(None)` and `Err` mean "not yet".
///
/// # Errors
/// When `timeout` passes first; the message names `what` and the last error.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last_error: Option<anyhow::Error> = None;
    loop {
        match probe().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(error) => last_error = Some(error),
        }
        if start.elapsed() >= timeout {
            return Err(match last_error {
                Some(error) => anyhow!(
                    "timed out after {:.1?} waiting for {what}; last error: {error:#}",
                    start.elapsed()
                ),
                None => anyhow!("timed out after {:.1?} waiting for {what}", start.elapsed()),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn returns_once_true() {
        let calls = AtomicU32::new(0);
        wait_until(Duration::from_secs(5), "third call", || async {
            calls.fetch_add(1, Ordering::SeqCst) >= 2
        })
        .await
        .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn times_out_with_the_last_error() {
        let err = wait_until(Duration::from_millis(300), "never", || async {
            Err::<bool, _>(anyhow!("boom"))
        })
        .await
        .unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("never") && text.contains("boom"), "{text}");
    }
}
