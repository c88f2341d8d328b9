//! [`FanOutReader`]: one shard's records, in order, through enhanced
//! fan-out subscriptions (SubscribeToShard), as [`ReadBatch`]es the shard
//! task handles exactly as GetRecords responses.
//!
//! - The first subscription starts where polling would: the position is
//!   planned and checked by [`ReadPosition`], with the same fall back to
//!   `TRIM_HORIZON` when Kinesis rejects it as expired.
//! - A subscription ends after five minutes; the next one starts
//!   `AFTER_SEQUENCE_NUMBER` the last event's `ContinuationSequenceNumber`
//!   (SubscribeToShard API reference), so nothing is skipped or read twice.
//!   After a failure too, as long as that continuation is recent: records
//!   stay in the stream for at least its retention, 24 hours or more.
//! - The shard ends with an event that has no continuation and names the
//!   shard's `ChildShards`. Servers that send no child shards (emulators)
//!   are covered too: while the shard reads caught up with no records,
//!   ListShards is asked now and then whether the shard has an
//!   `EndingSequenceNumber`; once it has, the rest is read by GetRecords to
//!   `SHARD_END` ([`ShardReader`]), which says it for certain.
//! - A failed or refused subscription (`ResourceInUseException` while a
//!   previous owner's subscription is still open, `LimitExceededException`
//!   past one subscription a second, a body cut off) is the caller's error
//!   to back off from; the next [`read`](FanOutReader::read) subscribes
//!   again. Kinesis lets a new subscriber take over after five seconds
//!   (SubscribeToShard API reference); a shard still refused
//!   [`IN_USE_FALLBACK_AFTER`] on is held by a subscriber that does not let
//!   go — a frozen previous owner on a server without that takeover, or
//!   another application with the same consumer name. The shard is then
//!   read by GetRecords for [`POLLING_FALLBACK_FOR`], the longest a
//!   subscription lasts, and subscribed to again after.
//!
//! Events are taken one at a time, when the caller asks: while it does not
//! (its memory budget is full), HTTP/2 flow control holds the rest at the
//! server.

use std::sync::Arc;
use std::time::Duration;

use sequence_range::SequenceNumber;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::aws::fan_out::{FanOutEvent, Subscription};
use crate::aws::{Kinesis, KinesisError, StartingPosition};
use crate::ops::metrics::Metrics;
use crate::read::batch::ReadBatch;
use crate::read::position::ReadPosition;
use crate::read::reader::ShardReader;

/// How long a shard may be refused with `ResourceInUseException` before it
/// is read by GetRecords for a while.
pub const IN_USE_FALLBACK_AFTER: Duration = Duration::from_secs(30);

/// How long a shard refused a subscription is read by GetRecords before it
/// is subscribed to again: five minutes, the longest a subscription lasts.
pub const POLLING_FALLBACK_FOR: Duration = Duration::from_secs(300);

/// How long a continuation is trusted without a check: a subscription
/// resumed after it is not checked against retention (which is 24 hours
/// at least, DescribeStreamSummary `RetentionPeriodHours`).
const CONTINUATION_TRUSTED_FOR: Duration = Duration::from_secs(3_600);

/// How long after the last look, at least, ListShards is asked again
/// whether a caught-up shard with no records coming has been closed. The
/// pause doubles while the shard stays quiet and open, up to
/// [`MAX_CLOSED_SHARD_CHECK_INTERVAL`], and is back to this once records
/// come: Kinesis itself ends a closed shard's subscription with its child
/// shards, so this is a fallback, kept cheap on a stream of many quiet
/// shards (ListShards: 1,000 calls a second per stream).
pub const CLOSED_SHARD_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// The longest pause between two looks at whether a quiet shard is closed.
pub const MAX_CLOSED_SHARD_CHECK_INTERVAL: Duration = Duration::from_secs(300);

/// Reads one shard through SubscribeToShard subscriptions of one stream
/// consumer.
#[derive(Debug)]
pub struct FanOutReader {
    kinesis: Kinesis,
    consumer_arn: String,
    position: ReadPosition,
    subscription: Option<Subscription>,
    /// The last event's `ContinuationSequenceNumber`, and when it came.
    continuation: Option<(SequenceNumber, Instant)>,
    /// The last subscription ended cleanly: the next one renews it.
    renewing: bool,
    /// When ListShards was last asked whether the shard is closed, and the
    /// pause before the next look.
    closed_checked_at: Option<Instant>,
    closed_check_interval: Duration,
    /// Reading by GetRecords instead: to `SHARD_END` (the shard is closed),
    /// or for a while (subscriptions were refused).
    polling: Option<Polling>,
    /// Since when every subscription has been refused with
    /// `ResourceInUseException`.
    in_use_since: Option<Instant>,
    /// GetRecords `Limit` once reading to the end.
    limit: i32,
    metrics: Arc<Metrics>,
}

impl FanOutReader {
    /// A reader of `position`'s shard from its position, through the
    /// `ACTIVE` consumer `consumer_arn`; `limit` is the GetRecords `Limit`
    /// of a closed shard's last reads.
    pub fn new(
        kinesis: Kinesis,
        consumer_arn: impl Into<String>,
        position: ReadPosition,
        limit: i32,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            kinesis,
            consumer_arn: consumer_arn.into(),
            position,
            subscription: None,
            continuation: None,
            renewing: false,
            closed_checked_at: None,
            closed_check_interval: CLOSED_SHARD_CHECK_INTERVAL,
            polling: None,
            in_use_since: None,
            limit,
            metrics,
        }
    }

    /// Where a fresh read would start: after the last record delivered, or
    /// the starting position when none was.
    pub fn position(&self) -> StartingPosition {
        match &self.polling {
            Some(polling) => polling.reader.position(),
            None => self.position.next(),
        }
    }

    /// Whether the shard is being read by GetRecords (to its end, or while
    /// subscriptions are refused), so reads are paced as polling's.
    pub fn is_polling(&self) -> bool {
        self.polling.is_some()
    }

    /// Forgets the GetRecords reader's expired iterator
    /// (`ExpiredIteratorException`), when reading by GetRecords.
    pub fn reset_iterator(&mut self) {
        if let Some(polling) = &mut self.polling {
            polling.reader.reset_iterator();
        }
    }

    /// The next event's records (subscribing first when no subscription is
    /// open), or once the shard is closed, the next GetRecords response.
    ///
    /// # Errors
    /// [`KinesisError`] of SubscribeToShard or of the subscription (it is
    /// then closed; the next call subscribes again), or of the closed
    /// shard's GetRecords.
    pub async fn read(&mut self) -> Result<ReadBatch, KinesisError> {
        loop {
            if self.polling.as_ref().is_some_and(Polling::is_over) {
                self.subscribe_again();
            }
            if let Some(polling) = &mut self.polling {
                return polling.reader.read().await;
            }
            if self
                .in_use_since
                .is_some_and(|since| since.elapsed() >= IN_USE_FALLBACK_AFTER)
            {
                self.poll_for_a_while();
                continue;
            }
            let subscription = match &mut self.subscription {
                Some(subscription) => subscription,
                None => {
                    let subscription = self.subscribe().await?;
                    self.subscription.insert(subscription)
                }
            };
            match subscription.next().await {
                FanOutEvent::Event {
                    records,
                    continuation,
                    millis_behind,
                    child_shards,
                } => {
                    self.metrics.read.events.inc();
                    self.in_use_since = None;
                    let mut batch = ReadBatch {
                        millis_behind_latest: Some(millis_behind),
                        ..ReadBatch::default()
                    };
                    match continuation.map(SequenceNumber::try_from) {
                        Some(Ok(next)) => self.continuation = Some((next, Instant::now())),
                        Some(Err(err)) => {
                            warn!(shard_id = %self.position.shard_id(), error = %err, "ignoring an event's ContinuationSequenceNumber that is not a sequence number");
                        }
                        None if !child_shards.is_empty() => {
                            batch.shard_end = true;
                            batch.child_shards = child_shards;
                            self.subscription = None;
                        }
                        None => {}
                    }
                    self.position.deliver(records, &mut batch);
                    if !batch.records.is_empty() {
                        self.closed_check_interval = CLOSED_SHARD_CHECK_INTERVAL;
                    } else if !batch.shard_end && batch.is_caught_up() {
                        self.read_to_end_if_closed().await;
                    }
                    return Ok(batch);
                }
                FanOutEvent::End => {
                    self.subscription = None;
                    self.renewing = true;
                }
                FanOutEvent::Error(err) => {
                    self.subscription = None;
                    self.renewing = false;
                    self.note_in_use(&err);
                    self.metrics
                        .read
                        .subscription_failed(subscription_error_cause(&err, true));
                    return Err(err);
                }
            }
        }
    }

    /// Opens a subscription: after the last continuation while it is
    /// recent, else at the reading position, checked, falling back to
    /// `TRIM_HORIZON` when that is rejected as expired.
    async fn subscribe(&mut self) -> Result<Subscription, KinesisError> {
        let renewed = std::mem::take(&mut self.renewing);
        let subscribed = self.subscribe_at_best_position().await;
        match &subscribed {
            Ok(_) => self.metrics.read.subscribed(renewed),
            Err(err) => {
                self.note_in_use(err);
                self.metrics
                    .read
                    .subscription_failed(subscription_error_cause(err, false));
            }
        }
        subscribed
    }

    /// Notes when subscriptions began to be refused as in use.
    fn note_in_use(&mut self, err: &KinesisError) {
        if matches!(err, KinesisError::ResourceInUse(_)) {
            self.in_use_since.get_or_insert_with(Instant::now);
        }
    }

    /// Reads by GetRecords for [`POLLING_FALLBACK_FOR`]: subscriptions have
    /// been refused as in use for [`IN_USE_FALLBACK_AFTER`].
    fn poll_for_a_while(&mut self) {
        warn!(
            shard_id = %self.position.shard_id(),
            refused_for = ?IN_USE_FALLBACK_AFTER,
            polling_for = ?POLLING_FALLBACK_FOR,
            "another subscriber holds the shard's subscription; reading by GetRecords for a while"
        );
        self.metrics.read.polling_fallback();
        self.in_use_since = None;
        self.subscription = None;
        self.polling = Some(Polling {
            reader: ShardReader::at(self.kinesis.clone(), self.position.clone(), self.limit),
            until: Some(Instant::now() + POLLING_FALLBACK_FOR),
        });
    }

    /// Ends a while of reading by GetRecords: subscriptions go on from
    /// where it stopped, checked as any fresh position.
    fn subscribe_again(&mut self) {
        if let Some(polling) = self.polling.take() {
            self.position = polling.reader.into_position();
            self.continuation = None;
            self.renewing = false;
            info!(shard_id = %self.position.shard_id(), position = ?self.position.next(), "subscribing to the shard again");
        }
    }

    async fn subscribe_at_best_position(&mut self) -> Result<Subscription, KinesisError> {
        let shard_id = self.position.shard_id().to_owned();
        let continuation = self
            .continuation
            .as_ref()
            .filter(|(_, at)| at.elapsed() < CONTINUATION_TRUSTED_FOR)
            .map(|(next, _)| StartingPosition::AfterSequenceNumber(next.clone()));
        if let Some(request) = continuation {
            self.position.plan_unchecked();
            match self.subscribe_to(&shard_id, &request).await {
                // Not where Kinesis said to go on: read from the
                // position, checked.
                Err(KinesisError::ExpiredPosition(source)) => {
                    warn!(shard_id = %shard_id, position = ?request, error = %source, "the continuation has expired from the stream; subscribing at the last record read, checked");
                    self.continuation = None;
                }
                other => return other,
            }
        }
        let (kinesis, consumer_arn) = (&self.kinesis, &self.consumer_arn);
        self.position
            .open_fresh(|position| {
                let shard_id = shard_id.clone();
                async move {
                    kinesis
                        .subscribe_to_shard(consumer_arn, &shard_id, &position)
                        .await
                }
            })
            .await
    }

    async fn subscribe_to(
        &self,
        shard_id: &str,
        position: &StartingPosition,
    ) -> Result<Subscription, KinesisError> {
        self.kinesis
            .subscribe_to_shard(&self.consumer_arn, shard_id, position)
            .await
    }

    /// Asks ListShards whether the shard is closed, when the pause since
    /// the last look is over (see [`CLOSED_SHARD_CHECK_INTERVAL`]); if it
    /// is, drops the subscription and reads the rest by GetRecords. A
    /// failed ListShards is tried again later: the events go on meanwhile.
    async fn read_to_end_if_closed(&mut self) {
        if let Some(at) = self.closed_checked_at {
            if at.elapsed() < self.closed_check_interval {
                return;
            }
            self.closed_check_interval =
                (self.closed_check_interval * 2).min(MAX_CLOSED_SHARD_CHECK_INTERVAL);
        }
        self.closed_checked_at = Some(Instant::now());
        let shard_id = self.position.shard_id();
        match self.kinesis.is_shard_closed(shard_id).await {
            Ok(Some(true)) => {
                info!(shard_id = %shard_id, position = ?self.position.next(), "the shard is closed (ListShards EndingSequenceNumber); reading the rest by GetRecords to SHARD_END");
                self.subscription = None;
                self.polling = Some(Polling {
                    reader: ShardReader::at(
                        self.kinesis.clone(),
                        self.position.clone(),
                        self.limit,
                    ),
                    until: None,
                });
            }
            Ok(_) => {}
            Err(err) => {
                warn!(shard_id = %shard_id, error = %err, "could not tell whether the shard is closed (ListShards); asking again later");
            }
        }
    }
}

/// Reading by GetRecords in place of subscriptions.
#[derive(Debug)]
struct Polling {
    reader: ShardReader,
    /// When to subscribe again; `None`: never (the shard is closed).
    until: Option<Instant>,
}

impl Polling {
    fn is_over(&self) -> bool {
        self.until.is_some_and(|until| Instant::now() >= until)
    }
}

/// The `cause` label of a refused or failed subscription; `mid_stream`:
/// the subscription was open (a failure then is a cut-off body unless the
/// service named an exception).
fn subscription_error_cause(err: &KinesisError, mid_stream: bool) -> &'static str {
    match err {
        KinesisError::ResourceInUse(_) => "resource_in_use",
        KinesisError::Throttled(_) => "throttled",
        KinesisError::NotFound(_) => "not_found",
        KinesisError::ExpiredPosition(_) => "expired_position",
        KinesisError::Other {
            retriable: true, ..
        } if mid_stream => "cut_off",
        _ => "other",
    }
}

#[cfg(test)]
mod tests;
