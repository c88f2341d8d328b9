//! Waiting in tests that run in paused time (`#[tokio::test(start_paused =
//! true)]`): poll a condition every 100 ms of the runtime's clock, and fail
//! the test — naming what it waited for — when the condition does not hold
//! within a limit. A wait that runs out is a failure, never a cue to stop
//! the code under test and assert on what its shutdown left behind.
//!
//! In paused time the clock jumps ahead whenever every task is idle, so the
//! limit costs no wall-clock time; it bounds a test whose code under test
//! would wait forever.

use std::time::Duration;

/// How long [`wait_until`] waits by default, in paused time: longer than any
/// backoff, failover time or buffering age the unit tests configure.
pub const DEFAULT_LIMIT: Duration = Duration::from_secs(60);

/// Polling interval of [`wait_until_within`], in paused time.
const POLL: Duration = Duration::from_millis(100);

/// Waits until `done` holds, checking at once and then every 100 ms, for
/// at most [`DEFAULT_LIMIT`].
///
/// # Panics
/// When `done` still does not hold after the limit; the message names
/// `what` was waited for.
pub async fn wait_until(what: &str, done: impl FnMut() -> bool) {
    wait_until_within(what, DEFAULT_LIMIT, done).await;
}

/// [`wait_until`] with another limit.
///
/// # Panics
/// When `done` still does not hold after `limit`.
pub async fn wait_until_within(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn returns_once_the_condition_holds() {
        let flag = Arc::new(AtomicBool::new(false));
        let setter = flag.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            setter.store(true, Ordering::SeqCst);
        });
        wait_until("the flag", || flag.load(Ordering::SeqCst)).await;
        assert!(flag.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out after 1s waiting for a condition that never holds")]
    async fn a_condition_that_never_holds_fails_the_test() {
        wait_until_within(
            "a condition that never holds",
            Duration::from_secs(1),
            || false,
        )
        .await;
    }
}
