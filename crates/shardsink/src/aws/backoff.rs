//! Backoff policy for every retry loop: capped exponential backoff with full
//! jitter (AWS Architecture Blog, "Exponential Backoff And Jitter"), never
//! giving up — shardsink keeps retrying a throttled or failing call rather
//! than exiting into a crash loop.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Delays for one retry loop; [`reset`](Self::reset) after a success.
#[derive(Debug)]
pub struct Backoff {
    builder: ExponentialBuilder,
    delays: ExponentialBackoff,
}

impl Backoff {
    /// Delays from `min` doubling to `max`, each with random jitter, forever.
    pub fn new(min: Duration, max: Duration) -> Self {
        let builder = ExponentialBuilder::default()
            .with_min_delay(min)
            .with_max_delay(max)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Self {
            delays: builder.build(),
            builder,
        }
    }

    /// For calls that failed transiently (throttling, 5xx, timeouts):
    /// 100 ms doubling to 10 s.
    pub fn transient() -> Self {
        Self::new(Duration::from_millis(100), Duration::from_secs(10))
    }

    /// For calls that failed for a reason an operator must fix (access
    /// denied, missing bucket): 1 s doubling to 60 s, so the daemon heals by
    /// itself once it is fixed without flooding the logs meanwhile.
    pub fn persistent() -> Self {
        Self::new(Duration::from_secs(1), Duration::from_secs(60))
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        // `without_max_times` makes the iterator endless.
        self.delays.next().unwrap_or(Duration::from_secs(1))
    }

    /// Starts over from the smallest delay.
    pub fn reset(&mut self) {
        self.delays = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_and_resets() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let delays: Vec<Duration> = (0..20).map(|_| backoff.next_delay()).collect();
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(2)),
            "capped (jitter adds at most the delay): {delays:?}"
        );
        assert!(
            delays[15..].iter().all(|d| *d >= Duration::from_secs(1)),
            "reaches the cap: {delays:?}"
        );
        backoff.reset();
        assert!(backoff.next_delay() < Duration::from_millis(250));
    }
}
