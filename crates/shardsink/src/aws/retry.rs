//! [`Retry`]: the one retry path every AWS call goes through — how a failure
//! is classified ([`Classify`]), the backoff ([`Backoff`], capped exponential
//! with jitter), the `shardsink_retries_total{cause}` count, the log line, and
//! when to stop (the lease was lost, shutdown, or too many failures). Most
//! calls run in its loop ([`Retry::run`]); a loop that does more between
//! attempts — a shard's reads, `verify`'s — takes the same decisions one
//! failed attempt at a time from its [`RetryStep`].
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
            Self::ResourceInUse(_) => Failure::Transient(RetryCause::kinesis_resource_in_use),
            Self::ConsumerNotActive { .. }
            | Self::Other {
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

/// Why [`Retry::run`] (or a [`RetryStep`]) stopped without a result.
#[derive(Debug)]
pub(crate) enum Stopped<E> {
    /// The error no retry can fix (or the call's own final condition).
    Final(E),
    /// The last error, after [`Retry::give_up_after`] failures in a row.
    GaveUp(E),
    /// The stop token was cancelled (the lease was lost, or shutdown).
    Cancelled,
}

/// The log line of each retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Log {
    /// `call failed; retrying` (warning) or `call failed; retrying until it
    /// is fixed` (error), with the operation name.
    Call,
    /// `read failed; retrying` (warning, or error for a failure an operator
    /// must fix or the type calls final) or `read failed; retrying until it
    /// is fixed` (error): a shard task's GetRecords, under its shard's span.
    Read,
    /// No line: the caller reports the failure itself (`verify`).
    Off,
}

/// A retry loop for one kind of call: build it, then [`run`](Self::run) it
/// around the call, or take its [`step`](Self::step) into a loop of one's
/// own.
pub(crate) struct Retry<'a, E> {
    what: &'static str,
    log: Log,
    metrics: Option<&'a Metrics>,
    stop: Option<&'a CancellationToken>,
    give_up_after: Option<u32>,
    give_up_after_when: Option<(Picks<E>, u32)>,
    final_when: Option<Picks<E>>,
    retry_final: bool,
    on_retry: Option<&'a OnRetry<'a, E>>,
}

// By hand: a derive would ask `E: Copy`, and only `fn(&E)` is held.
impl<E> Clone for Retry<'_, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for Retry<'_, E> {}

/// Which errors a loop's option applies to.
type Picks<E> = fn(&E) -> bool;

/// A hook called before each backoff with the error and the delay.
pub(crate) type OnRetry<'a, E> = dyn Fn(&E, Duration) + Send + Sync + 'a;

impl<'a, E: Classify + std::error::Error + 'static> Retry<'a, E> {
    /// A loop for `what` (an operation name for the logs) that never gives
    /// up on its own.
    pub(crate) fn new(what: &'static str) -> Self {
        Self {
            what,
            log: Log::Call,
            metrics: None,
            stop: None,
            give_up_after: None,
            give_up_after_when: None,
            final_when: None,
            retry_final: false,
            on_retry: None,
        }
    }

    /// Logs each retry as `log` says (by default [`Log::Call`]).
    pub(crate) fn log(mut self, log: Log) -> Self {
        self.log = log;
        self
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

    /// Gives up after `failures` failures in a row instead when the last
    /// one is an error `is` picks (e.g. throttling, which a shard shared with
    /// a running daemon is expected to see for longer).
    pub(crate) fn give_up_after_when(mut self, is: fn(&E) -> bool, failures: u32) -> Self {
        self.give_up_after_when = Some((is, failures));
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

    /// The loop's decisions without the loop, for a caller that makes its
    /// calls itself (a shard's reads, `verify`'s): fresh backoffs, no
    /// failures yet.
    pub(crate) fn step(self) -> RetryStep<'a, E> {
        RetryStep {
            retry: self,
            transient: Backoff::transient(),
            persistent: Backoff::persistent(),
            failures: 0,
        }
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
        let mut step = self.step();
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
            let delay = match attempt {
                Ok(value) => return Ok(value),
                Err(err) => step.failed(err)?,
            };
            match self.stop {
                Some(token) => tokio::select! {
                    () = token.cancelled() => return Err(Stopped::Cancelled),
                    () = tokio::time::sleep(delay) => {}
                },
                None => tokio::time::sleep(delay).await,
            }
        }
    }

    /// The failures in a row after which the loop gives up with `err` last.
    fn limit_for(&self, err: &E) -> Option<u32> {
        match self.give_up_after_when {
            Some((is, failures)) if is(err) => Some(failures),
            _ => self.give_up_after,
        }
    }
}

/// What a failed attempt was retried as, for its log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retried {
    Transient,
    Persistent,
    /// Classified [`Failure::Final`], retried by [`Retry::retry_final`].
    Final,
}

/// One retry loop's state between attempts — the transient and persistent
/// [`Backoff`]s and the failures in a row — and its decision after each
/// failed attempt ([`failed`](Self::failed)). [`Retry::run`] is a loop
/// around it; a loop that must do more between attempts (a shard's reads)
/// holds one itself.
pub(crate) struct RetryStep<'a, E> {
    retry: Retry<'a, E>,
    transient: Backoff,
    persistent: Backoff,
    failures: u32,
}

impl<E: Classify + std::error::Error + 'static> RetryStep<'_, E> {
    /// After a failed attempt: classifies `err` ([`Classify`], then the
    /// loop's [`final_when`](Retry::final_when) and
    /// [`retry_final`](Retry::retry_final)), counts the retry in
    /// `shardsink_retries_total{cause}`, calls the
    /// [`on_retry`](Retry::on_retry) hook, logs it ([`Log`]) and returns how
    /// long to back off: from the transient backoff (100 ms doubling to
    /// 10 s) for a [`Failure::Transient`], else from the persistent one (1 s
    /// doubling to 60 s).
    ///
    /// # Errors
    /// [`Stopped`] when the loop should stop instead: a final error, the
    /// give-up limit reached, or the stop token cancelled — nothing counted
    /// or logged then.
    pub(crate) fn failed(&mut self, err: E) -> Result<Duration, Stopped<E>> {
        let retry = self.retry;
        if retry.final_when.is_some_and(|is_final| is_final(&err)) {
            return Err(Stopped::Final(err));
        }
        let (cause, delay, retried) = match err.classify() {
            Failure::Final if retry.retry_final => {
                (None, self.persistent.next_delay(), Retried::Final)
            }
            Failure::Final => return Err(Stopped::Final(err)),
            Failure::Transient(cause) => {
                (Some(cause), self.transient.next_delay(), Retried::Transient)
            }
            Failure::Persistent(cause) => (
                Some(cause),
                self.persistent.next_delay(),
                Retried::Persistent,
            ),
        };
        self.failures += 1;
        if retry
            .limit_for(&err)
            .is_some_and(|limit| self.failures >= limit)
        {
            return Err(Stopped::GaveUp(err));
        }
        if retry.stop.is_some_and(CancellationToken::is_cancelled) {
            return Err(Stopped::Cancelled);
        }
        if let (Some(metrics), Some(cause)) = (retry.metrics, cause) {
            metrics.retry(cause);
        }
        if let Some(hook) = retry.on_retry {
            hook(&err, delay);
        }
        log_retry(retry.what, retry.log, retried, &err, delay);
        Ok(delay)
    }

    /// After an attempt that succeeded: the backoffs start over from their
    /// smallest delay, and the failures in a row from 0.
    pub(crate) fn succeeded(&mut self) {
        self.transient.reset();
        self.persistent.reset();
        self.failures = 0;
    }
}

/// The log line of one retry: a warning for a transient failure, an error
/// for one an operator must fix.
fn log_retry(
    what: &'static str,
    log: Log,
    retried: Retried,
    err: &dyn std::error::Error,
    delay: Duration,
) {
    let error = error_chain(err);
    match (log, retried) {
        (Log::Off, _) => {}
        (Log::Call, Retried::Transient) => {
            warn!(operation = what, %error, ?delay, "call failed; retrying");
        }
        (Log::Call, Retried::Persistent | Retried::Final) => {
            error!(operation = what, %error, ?delay, "call failed; retrying until it is fixed");
        }
        (Log::Read, Retried::Transient) => warn!(%error, ?delay, "read failed; retrying"),
        (Log::Read, Retried::Persistent) => {
            error!(%error, ?delay, "read failed; retrying until it is fixed");
        }
        (Log::Read, Retried::Final) => error!(%error, ?delay, "read failed; retrying"),
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
        // Another subscription to the shard still open, a consumer not yet
        // ACTIVE: both heal with time.
        assert_eq!(
            KinesisError::ResourceInUse("in use".into()).classify(),
            Failure::Transient(RetryCause::kinesis_resource_in_use)
        );
        let not_active = KinesisError::ConsumerNotActive {
            consumer_name: "shardsink".to_owned(),
            status: "CREATING".to_owned(),
            waited: std::time::Duration::from_secs(60),
        };
        assert_eq!(
            not_active.classify(),
            Failure::Transient(RetryCause::kinesis_error)
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

    fn retries(metrics: &Metrics, cause: &str) -> u64 {
        let needle = format!("shardsink_retries_total{{cause=\"{cause}\"}} ");
        metrics
            .encode()
            .lines()
            .find_map(|line| line.strip_prefix(needle.as_str()))
            .map_or(0, |count| count.trim().parse().unwrap())
    }

    /// The transient backoff starts at 100 ms (at most twice that with its
    /// jitter), the persistent one at 1 s: a failure drawn from the wrong
    /// one is told by its first delay.
    #[tokio::test(start_paused = true)]
    async fn a_step_counts_each_cause_and_backs_off_by_what_can_heal() {
        let metrics = Metrics::new();
        let mut step = Retry::new("put").metrics(&metrics).step();
        let throttled = step.failed(s3(true, true)).unwrap();
        assert!(throttled <= Duration::from_millis(200), "{throttled:?}");
        let denied = step.failed(s3(false, false)).unwrap();
        assert!(denied >= Duration::from_secs(1), "{denied:?}");
        let server = step.failed(s3(true, false)).unwrap();
        assert!(
            server <= Duration::from_millis(400),
            "the transient backoff's second delay: {server:?}"
        );
        assert_eq!(retries(&metrics, "s3_throttled"), 1);
        assert_eq!(retries(&metrics, "s3_error"), 2);

        let mut reads = Retry::new("GetRecords").metrics(&metrics).step();
        for _ in 0..6 {
            reads
                .failed(KinesisError::Throttled("slow".into()))
                .unwrap();
        }
        reads.succeeded();
        let after = reads
            .failed(KinesisError::Throttled("slow".into()))
            .unwrap();
        assert!(
            after <= Duration::from_millis(200),
            "a success resets the backoff: {after:?}"
        );
        assert_eq!(retries(&metrics, "kinesis_throttled"), 7);
        let lease = Retry::new("renew")
            .metrics(&metrics)
            .step()
            .failed(LeaseError::Dynamo {
                operation: "UpdateItem",
                table: "t".to_owned(),
                retriable: true,
                throttled: true,
                source: "slow down".into(),
            });
        assert!(lease.is_ok());
        assert_eq!(retries(&metrics, "dynamodb_throttled"), 1);

        // The delay the step returns is the one the loop sleeps.
        let started = tokio::time::Instant::now();
        let calls = AtomicU32::new(0);
        Retry::new("put")
            .run(|| async {
                match calls.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(s3(false, false)),
                    _ => Ok(()),
                }
            })
            .await
            .unwrap();
        assert!(started.elapsed() >= Duration::from_secs(1));
    }

    #[test]
    fn a_step_stops_where_the_loop_would_and_counts_nothing_then() {
        let metrics = Metrics::new();
        let is_throttled = |err: &KinesisError| matches!(err, KinesisError::Throttled(_));
        let mut step = Retry::new("GetRecords")
            .metrics(&metrics)
            .final_when(|err: &KinesisError| !err.is_retriable())
            .give_up_after(2)
            .give_up_after_when(is_throttled, 4)
            .step();
        let throttled = || KinesisError::Throttled("slow".into());
        for _ in 0..3 {
            step.failed(throttled()).unwrap();
        }
        assert!(matches!(step.failed(throttled()), Err(Stopped::GaveUp(_))));
        step.succeeded();
        step.failed(throttled()).unwrap();
        let other = || KinesisError::Other {
            operation: "GetRecords",
            retriable: true,
            source: "503".into(),
        };
        assert!(
            matches!(step.failed(other()), Err(Stopped::GaveUp(_))),
            "two failures in a row, the last one not throttling"
        );
        step.succeeded();
        assert!(matches!(
            step.failed(KinesisError::NotFound("gone".into())),
            Err(Stopped::Final(_))
        ));
        assert_eq!(retries(&metrics, "kinesis_throttled"), 4);
        assert_eq!(retries(&metrics, "kinesis_error"), 0);

        let token = CancellationToken::new();
        token.cancel();
        let cancelled = Retry::new("x")
            .metrics(&metrics)
            .until(&token)
            .step()
            .failed(s3(true, true));
        assert!(matches!(cancelled, Err(Stopped::Cancelled)));
        assert_eq!(retries(&metrics, "s3_throttled"), 0);
    }

    /// Captures what a synchronous `f` logs.
    fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                crate::lock::lock(&self.0).extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = crate::lock::lock(&buffer.0).clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn a_step_logs_as_its_loop_says() {
        let line = |log: Log, err: KinesisError| {
            logged(|| {
                Retry::new("GetRecords")
                    .log(log)
                    .retry_final()
                    .step()
                    .failed(err)
                    .unwrap();
            })
        };
        let throttled = line(Log::Call, KinesisError::Throttled("slow".into()));
        assert!(throttled.contains("WARN"), "{throttled}");
        assert!(
            throttled.contains("call failed; retrying operation=\"GetRecords\""),
            "{throttled}"
        );
        let missing = line(Log::Call, KinesisError::NotFound("gone".into()));
        assert!(missing.contains("ERROR"), "{missing}");
        assert!(
            missing.contains("call failed; retrying until it is fixed"),
            "{missing}"
        );
        let read = line(Log::Read, KinesisError::Throttled("slow".into()));
        assert!(read.contains("WARN"), "{read}");
        assert!(read.contains("read failed; retrying error="), "{read}");
        assert!(!read.contains("operation"), "{read}");
        let read = line(Log::Read, KinesisError::NotFound("gone".into()));
        assert!(read.contains("ERROR"), "{read}");
        assert!(
            read.contains("read failed; retrying until it is fixed"),
            "{read}"
        );
        let read = line(Log::Read, KinesisError::ExpiredPosition("trimmed".into()));
        assert!(read.contains("ERROR"), "{read}");
        assert!(read.contains("read failed; retrying error="), "{read}");
        assert_eq!(line(Log::Off, KinesisError::Throttled("slow".into())), "");
    }
}
