//! [`ReadMetrics`]: the read mode, and what enhanced fan-out
//! subscriptions (SubscribeToShard) did.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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
#[derive(Debug, Default)]
pub struct ReadMetrics {
    /// `shardsink_read_mode{mode}`: 1 for the mode this process reads in.
    pub mode: Family<ModeLabel, Gauge>,
    /// `shardsink_fan_out_subscriptions_total{kind}`: SubscribeToShard
    /// subscriptions opened.
    pub subscriptions: Family<SubscriptionKindLabel, Counter>,
    /// `shardsink_fan_out_events_total`: SubscribeToShardEvents received.
    pub events: Counter,
    /// `shardsink_fan_out_subscription_errors_total{cause}`: subscriptions
    /// refused or failed.
    pub subscription_errors: Family<SubscriptionCauseLabel, Counter>,
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
    }

    /// Says the process reads in `mode` (`polling` or `fan-out`).
    pub fn set_mode(&self, mode: &'static str) {
        self.mode.get_or_create(&ModeLabel { mode }).set(1);
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
