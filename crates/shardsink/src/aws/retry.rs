//! [`Retry`]: the one retry loop every AWS call goes through — how a failure
//! is classified ([`Classify`]), the backoff ([`Backoff`], capped exponential
//! with jitter), the `shardsink_retries_total{cause}` count, the log line, and
//! when to stop (the lease was lost, shutdown, or too many failures).
//!
//! shardsink keeps retrying what can heal — throttling, 5xx, timeouts quickly;
//! access denied or a resource missing at run time slowly, until an operator
//! fixes it — rather than exit into a crash loop. What no retry can fix (a
//! lost lease, a bad request) is returned at once.

use std::future::Future;
use std::time::Duration;

use shard_lease::LeaseError;
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use super::backoff::Backoff;
use super::kinesis::KinesisError;
use super::s3::S3Error;
use crate::ops::log::error_chain;
use crate::ops::metrics::{Metrics, RetryCause};

/// What to do after a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Throttling, 5xx, timeouts, dropped connections: retry soon
    /// ([`Backoff::transient`]).
    Transient(RetryCause),
    /// Something an operator must fix (access denied, a missing resource):
    /// keep trying slowly ([`Backoff::persistent`]), logged as an error.
    Persistent(RetryCause),
    /// No retry can help: the caller gets the error.
    Final,
}

/// How an error of a call is retried.
pub(crate) trait Classify {
    /// What to do after this error.
    fn classify(&self) -> Failure;
}

impl Classify for S3Error {
    fn classify(&self) -> Failure {
        match self {
            Self::Other {
                throttled: true, ..
            } => Failure::Transient(RetryCause::s3_throttled),
            Self::Other {
                retriable: true, ..
            } => Failure::Transient(RetryCause::s3_error),
            // Access denied, a bucket deleted while running: until fixed.
            Self::Other { .. } | Self::NoSuchBucket { .. } => {
                Failure::Persistent(RetryCause::s3_error)
            }
        }
    }
}

impl Classify for KinesisError {
    fn classify(&self) -> Failure {
        match self {
            Self::ExpiredIterator => Failure::Transient(RetryCause::kinesis_expired_iterator),
            Self::Throttled(_) => Failure::Transient(RetryCause::kinesis_throttled),
            Self::Other {
                retriable: true, ..
            } => Failure::Transient(RetryCause::kinesis_error),
            Self::NotFound(_) | Self::Other { .. } => {
                Failure::Persistent(RetryCause::kinesis_error)
            }
            // The reader falls back to TRIM_HORIZON; anywhere else it is a bug.
            Self::ExpiredPosition(_) => Failure::Final,
        }
    }
}

impl Classify for LeaseError {
    fn classify(&self) -> Failure {
        if self.is_lease_lost() || matches!(self, Self::TableMissing { .. }) {
            Failure::Final
        } else if self.is_throttling() {
            Failure::Transient(RetryCause::dynamodb_throttled)
        } else if self.is_retriable() {
            Failure::Transient(RetryCause::dynamodb_error)
        } else {
            Failure::Persistent(RetryCause::dynamodb_error)
        }
    }
}

/// Why [`Retry::run`] returned without a result.
#[derive(Debug)]
pub(crate) enum Stopped<E> {
    /// The error no retry can fix (or the call's own final condition).
    Final(E),
    /// The last error, after [`Retry::give_up_after`] failures in a row.
    GaveUp(E),
    /// The stop token was cancelled (the lease was lost, or shutdown).
    Cancelled,
}

/// A retry loop for one kind of call; build it, then [`run`](Self::run) it.
pub(crate) struct Retry<'a, E> {
    what: &'static str,
    metrics: Option<&'a Metrics>,
    stop: Option<&'a CancellationToken>,
    give_up_after: Option<u32>,
    final_when: Option<fn(&E) -> bool>,
    retry_final: bool,
    on_retry: Option<&'a OnRetry<'a, E>>,
}

/// A hook called before each backoff with the error and the delay.
pub(crate) type OnRetry<'a, E> = dyn Fn(&E, Duration) + Send + Sync + 'a;

impl<'a, E: Classify + std::error::Error + 'static> Retry<'a, E> {
    /// A loop for `what` (an operation name for the logs) that never gives
    /// up on its own.
    pub(crate) fn new(what: &'static str) -> Self {
        Self {
            what,
            metrics: None,
            stop: None,
            give_up_after: None,
            final_when: None,
            retry_final: false,
            on_retry: None,
        }
    }

    /// Counts each retry in `shardsink_retries_total{cause}`.
    pub(crate) fn metrics(mut self, metrics: &'a Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Stops as soon as `token` is cancelled: an attempt under way is
    /// dropped, a backoff cut short.
    pub(crate) fn until(mut self, token: &'a CancellationToken) -> Self {
        self.stop = Some(token);
        self
    }

    /// Gives up after this many failures in a row.
    pub(crate) fn give_up_after(mut self, failures: u32) -> Self {
        self.give_up_after = Some(failures);
        self
    }

    /// Also treats errors `is_final` picks as final (e.g. a missing bucket at
    /// start-up: a bad setting, not an outage).
    pub(crate) fn final_when(mut self, is_final: fn(&E) -> bool) -> Self {
        self.final_when = Some(is_final);
        self
    }

    /// Retries even the errors their type classifies as final, as persistent
    /// failures, so that only [`final_when`](Self::final_when) ends the loop
    /// early. For start-up, where waiting for a fix beats exiting into a
    /// restart loop.
    pub(crate) fn retry_final(mut self) -> Self {
        self.retry_final = true;
        self
    }

    /// Called before each backoff with the error and the delay.
    pub(crate) fn on_retry(mut self, hook: &'a OnRetry<'a, E>) -> Self {
        self.on_retry = Some(hook);
        self
    }

    /// Calls `op` until it succeeds or the loop stops.
    ///
    /// # Errors
    /// [`Stopped`]: a final error, too many failures, or the stop token.
    pub(crate) async fn run<T, F, Fut>(&self, mut op: F) -> Result<T, Stopped<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let (mut transient, mut persistent) = (Backoff::transient(), Backoff::persistent());
        let mut failures = 0_u32;
        loop {
            if self.stop.is_some_and(CancellationToken::is_cancelled) {
                return Err(Stopped::Cancelled);
            }
            let attempt = match self.stop {
                Some(token) => tokio::select! {
                    () = token.cancelled() => return Err(Stopped::Cancelled),
                    attempt = op() => attempt,
                },
                None => op().await,
            };
            let err = match attempt {
                Ok(value) => return Ok(value),
                Err(err) => err,
            };
            if self.final_when.is_some_and(|is_final| is_final(&err)) {
                return Err(Stopped::Final(err));
            }
            let (cause, delay, persistent_failure) = match err.classify() {
                Failure::Final if self.retry_final => (None, persistent.next_delay(), true),
                Failure::Final => return Err(Stopped::Final(err)),
                Failure::Transient(cause) => (Some(cause), transient.next_delay(), false),
                Failure::Persistent(cause) => (Some(cause), persistent.next_delay(), true),
            };
            failures += 1;
            if self.give_up_after.is_some_and(|limit| failures >= limit) {
                return Err(Stopped::GaveUp(err));
            }
            if self.stop.is_some_and(CancellationToken::is_cancelled) {
                return Err(Stopped::Cancelled);
            }
            if let (Some(metrics), Some(cause)) = (self.metrics, cause) {
                metrics.retry(cause);
            }
            if let Some(hook) = self.on_retry {
                hook(&err, delay);
            }
            let what = self.what;
            if persistent_failure {
                error!(operation = what, error = %error_chain(&err), ?delay, "call failed; retrying until it is fixed");
            } else {
                warn!(operation = what, error = %error_chain(&err), ?delay, "call failed; retrying");
            }
            match self.stop {
                Some(token) => tokio::select! {
                    () = token.cancelled() => return Err(Stopped::Cancelled),
                    () = tokio::time::sleep(delay) => {}
                },
                None => tokio::time::sleep(delay).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn s3(retriable: bool, throttled: bool) -> S3Error {
        S3Error::Other {
            operation: "PutObject",
            bucket: "b".to_owned(),
            key: "k".to_owned(),
            retriable,
            throttled,
            source: "boom".into(),
        }
    }

    #[test]
    fn failures_are_classified_by_what_can_heal() {
        assert_eq!(
            s3(true, true).classify(),
            Failure::Transient(RetryCause::s3_throttled)
        );
        assert_eq!(
            s3(true, false).classify(),
            Failure::Transient(RetryCause::s3_error)
        );
        assert_eq!(
            s3(false, false).classify(),
            Failure::Persistent(RetryCause::s3_error)
        );
        let lost = LeaseError::LeaseLost {
            shard_id: "s".to_owned(),
        };
        assert_eq!(lost.classify(), Failure::Final);
        assert_eq!(
            KinesisError::Throttled("slow".into()).classify(),
            Failure::Transient(RetryCause::kinesis_throttled)
        );
        assert_eq!(
            KinesisError::ExpiredPosition("trimmed".into()).classify(),
            Failure::Final
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retries_until_success_and_counts_each_retry() {
        let metrics = Metrics::new();
        let calls = AtomicU32::new(0);
        let result = Retry::new("put")
            .metrics(&metrics)
            .run(|| async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0..=2 => Err(s3(true, true)),
                    _ => Ok(7),
                }
            })
            .await;
        assert_eq!(result.unwrap(), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert!(
            metrics
                .encode()
                .contains("shardsink_retries_total{cause=\"s3_throttled\"} 3")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stops_on_final_errors_give_up_and_cancellation() {
        let final_error = Retry::new("x")
            .final_when(|err: &S3Error| matches!(err, S3Error::NoSuchBucket { .. }))
            .run(|| async {
                Err::<(), _>(S3Error::NoSuchBucket {
                    bucket: "b".to_owned(),
                })
            })
            .await;
        assert!(matches!(final_error, Err(Stopped::Final(_))));
        let gave_up = Retry::new("x")
            .give_up_after(3)
            .run(|| async { Err::<(), _>(s3(true, false)) })
            .await;
        assert!(matches!(gave_up, Err(Stopped::GaveUp(_))));
        let token = CancellationToken::new();
        let cancel = token.clone();
        let stopped = Retry::new("x")
            .until(&token)
            .run(|| {
                cancel.cancel();
                async { Err::<(), _>(s3(true, false)) }
            })
            .await;
        assert!(matches!(stopped, Err(Stopped::Cancelled)));
    }

    #[tokio::test(start_paused = true)]
    async fn retry_final_retries_what_the_type_calls_final() {
        let calls = AtomicU32::new(0);
        let result = Retry::new("x")
            .retry_final()
            .run(|| async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0..=1 => Err(KinesisError::ExpiredPosition("trimmed".into())),
                    _ => Ok(1),
                }
            })
            .await;
        assert_eq!(result.unwrap(), 1);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        let without = Retry::new("x")
            .run(|| async { Err::<(), _>(KinesisError::ExpiredPosition("trimmed".into())) })
            .await;
        assert!(matches!(without, Err(Stopped::Final(_))));
    }
}
