//! [`ReadMetrics`]: the read mode, how long records wait in the stream
//! before they are read, and what enhanced fan-out subscriptions
//! (SubscribeToShard) did.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label set with `mode`: the read mode (`polling` or `fan-out`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabel {
    /// `polling` or `fan-out`.
    pub mode: &'static str,
}

/// Label set with `kind`: how a subscription came to be opened.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SubscriptionKindLabel {
    /// `opened` (a shard's first, or after a failure) or `renewed` (after
    /// the previous one ended cleanly, at most five minutes after it
    /// opened).
    pub kind: &'static str,
}

/// Label set with `cause`: why a subscription failed.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SubscriptionCauseLabel {
    /// `resource_in_use`, `throttled`, `cut_off`, `not_found`,
    /// `expired_position` or `other`.
    pub cause: &'static str,
}

/// The read mode's metrics.
#[derive(Debug)]
pub struct ReadMetrics {
    /// `shardsink_read_mode{mode}`: 1 for the mode this process reads in.
    pub mode: Family<ModeLabel, Gauge>,
    /// `shardsink_read_delay_seconds`: per Kinesis record read, the time
    /// from its `ApproximateArrivalTimestamp` to the read (by this host's
    /// clock): the put-to-read latency while caught up, the backlog's age
    /// while behind.
    pub delay: Histogram,
    /// `shardsink_fan_out_subscriptions_total{kind}`: SubscribeToShard
    /// subscriptions opened.
    pub subscriptions: Family<SubscriptionKindLabel, Counter>,
    /// `shardsink_fan_out_events_total`: SubscribeToShardEvents received.
    pub events: Counter,
    /// `shardsink_fan_out_subscription_errors_total{cause}`: subscriptions
    /// refused or failed.
    pub subscription_errors: Family<SubscriptionCauseLabel, Counter>,
    /// `shardsink_fan_out_polling_fallbacks_total`: times a shard was read
    /// by GetRecords for a while because its subscriptions kept being
    /// refused as in use.
    pub polling_fallbacks: Counter,
}

/// The read delay's buckets: from 10 ms, each √2 times the last, to about
/// 1.5 days (48 buckets): fine enough for a median of a few hundred
/// milliseconds to be read within a few percent.
const DELAY_BUCKETS: (f64, f64, u16) = (0.01, std::f64::consts::SQRT_2, 48);

impl Default for ReadMetrics {
    fn default() -> Self {
        let (start, factor, length) = DELAY_BUCKETS;
        Self {
            mode: Family::default(),
            delay: Histogram::new(exponential_buckets(start, factor, length)),
            subscriptions: Family::default(),
            events: Counter::default(),
            subscription_errors: Family::default(),
            polling_fallbacks: Counter::default(),
        }
    }
}

impl ReadMetrics {
    /// Registers every metric in `registry`.
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "read_mode",
            "1 for the read mode in use: polling (GetRecords) or fan-out (SubscribeToShard)",
            self.mode.clone(),
        );
        registry.register(
            "read_delay_seconds",
            "Per Kinesis record read, seconds from its ApproximateArrivalTimestamp to the read (this host's clock): put-to-read latency while caught up",
            self.delay.clone(),
        );
        registry.register(
            "fan_out_subscriptions",
            "SubscribeToShard subscriptions opened, by kind: opened (a shard's first, or after a failure) or renewed (after one ended cleanly)",
            self.subscriptions.clone(),
        );
        registry.register(
            "fan_out_events",
            "SubscribeToShardEvents received",
            self.events.clone(),
        );
        registry.register(
            "fan_out_subscription_errors",
            "SubscribeToShard subscriptions refused or failed, by cause: resource_in_use, throttled, cut_off, not_found, expired_position, other",
            self.subscription_errors.clone(),
        );
        registry.register(
            "fan_out_polling_fallbacks",
            "Times a shard was read by GetRecords for a while (5 minutes) because its subscriptions were refused as in use for 30 s",
            self.polling_fallbacks.clone(),
        );
    }

    /// Counts a shard read by GetRecords for a while, its subscriptions
    /// refused as in use.
    pub fn polling_fallback(&self) {
        self.polling_fallbacks.inc();
    }

    /// Says the process reads in `mode` (`polling` or `fan-out`).
    pub fn set_mode(&self, mode: &'static str) {
        self.mode.get_or_create(&ModeLabel { mode }).set(1);
    }

    /// Observes the read delay of records that arrived at `arrivals` (ms
    /// since the epoch), read at `now_millis`.
    pub fn read_delays(&self, arrivals: impl Iterator<Item = i64>, now_millis: i64) {
        for arrival in arrivals {
            let millis = now_millis.saturating_sub(arrival).max(0);
            // Milliseconds to seconds for the histogram: exact enough.
            #[allow(clippy::cast_precision_loss)]
            self.delay.observe(millis as f64 / 1_000.0);
        }
    }

    /// Counts a subscription opened: `renewed` after a clean end.
    pub fn subscribed(&self, renewed: bool) {
        let kind = if renewed { "renewed" } else { "opened" };
        self.subscriptions
            .get_or_create(&SubscriptionKindLabel { kind })
            .inc();
    }

    /// Counts a subscription refused or failed with `cause`.
    pub fn subscription_failed(&self, cause: &'static str) {
        self.subscription_errors
            .get_or_create(&SubscriptionCauseLabel { cause })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::super::Metrics;

    #[test]
    fn read_delays_are_observed_per_record_in_seconds() {
        let metrics = Metrics::new();
        metrics
            .read
            .read_delays([1_000, 2_500, 9_000].into_iter(), 3_000);
        let text = metrics.encode();
        let has = |line: &str| text.lines().any(|l| l == line);
        assert!(has("shardsink_read_delay_seconds_count 3"), "{text}");
        // 2 s + 0.5 s + 0 (a clock behind the arrival counts as none).
        assert!(has("shardsink_read_delay_seconds_sum 2.5"), "{text}");
        // Cumulative counts: one record below 0.5 s, two up to the first
        // bucket at or above it, three from 2 s on.
        let buckets: Vec<(f64, u64)> = text
            .lines()
            .filter_map(|line| line.strip_prefix("shardsink_read_delay_seconds_bucket{le=\""))
            .filter_map(|rest| rest.split_once("\"} "))
            .filter(|(le, _)| *le != "+Inf")
            .map(|(le, count)| (le.parse().unwrap(), count.parse().unwrap()))
            .collect();
        assert_eq!(buckets.len(), 48, "{text}");
        // The count of the last bucket below `seconds`, and of the first at
        // or above it.
        let around = |seconds: f64| {
            let below = buckets.iter().rev().find(|(le, _)| *le < seconds);
            let above = buckets.iter().find(|(le, _)| *le >= seconds);
            (below.map(|(_, n)| *n), above.map(|(_, n)| *n))
        };
        assert_eq!(around(0.01), (None, Some(1)));
        assert_eq!(around(0.5), (Some(1), Some(2)));
        assert_eq!(around(2.0), (Some(2), Some(3)));
    }
}
