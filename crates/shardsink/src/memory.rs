//! [`MemoryBudget`]: the records a process holds, against
//! `--buffer-memory-limit`, in every phase — read, buffered, being written,
//! being replayed.
//!
//! Everything that holds records takes a [`Reservation`] of its bytes:
//! - a batch being built (its encoded lines, growing record by record);
//! - a batch being written: its lines and its compressed body, until the PUT
//!   and the checkpoint after it ended;
//! - a GetRecords response, until its records are in batches.
//!
//! Three rules keep the total near the limit:
//! 1. A shard that adds a record while the budget is exceeded writes its own
//!    batch early ([`crate::batch::FlushReason::MemoryLimit`]), and so does a
//!    shard about to read.
//! 2. A read waits until the budget is not exceeded, and for one of
//!    `limit / 10 MiB` (at least 4) read permits: a response is up to 10 MiB
//!    and is held whole until its records are in batches.
//! 3. A pending batch being replayed cannot be written early (it must be
//!    exactly the records recorded in the lease row), so it is exempt from
//!    rule 2; instead at most `limit / --buffer-max-bytes` (at least one)
//!    replays run at once, and the others wait before their first read.
//!
//! The records in memory then stay within about twice the limit: the limit
//! itself (batches, writes, responses whose records are being placed), plus
//! the responses in flight (at most the limit again), plus the replays the
//! limit allows.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The most data one GetRecords response holds: 10 MiB ("Each GetRecords
/// call can return up to 10 MiB of data", Kinesis API reference,
/// GetRecords).
pub const MAX_GET_RECORDS_BYTES: u64 = 10 << 20;

/// The fewest GetRecords calls in flight a budget allows, however small.
const MIN_READS_IN_FLIGHT: usize = 4;

/// Memory the process may use for records (see the module documentation).
#[derive(Debug)]
pub struct MemoryBudget {
    used: AtomicU64,
    limit: u64,
    /// Woken whenever bytes are released.
    released: Notify,
    reads: Arc<Semaphore>,
    reads_limit: usize,
    replays: Arc<Semaphore>,
}

impl MemoryBudget {
    /// A budget of `limit` bytes (`--buffer-memory-limit`), for batches of
    /// up to `max_batch_bytes` (`--buffer-max-bytes`).
    pub fn new(limit: u64, max_batch_bytes: u64) -> Arc<Self> {
        let reads = usize::try_from(limit / MAX_GET_RECORDS_BYTES)
            .unwrap_or(usize::MAX)
            .clamp(MIN_READS_IN_FLIGHT, Semaphore::MAX_PERMITS);
        let replays = usize::try_from(limit / max_batch_bytes.max(1))
            .unwrap_or(usize::MAX)
            .clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Self {
            used: AtomicU64::new(0),
            limit,
            released: Notify::new(),
            reads: Arc::new(Semaphore::new(reads)),
            reads_limit: reads,
            replays: Arc::new(Semaphore::new(replays)),
        })
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether the reserved bytes are over the limit.
    pub fn is_exceeded(&self) -> bool {
        self.used() > self.limit
    }

    /// How many GetRecords calls may be in flight at once.
    pub fn reads_in_flight_limit(&self) -> usize {
        self.reads_limit
    }

    /// Read permits free now.
    #[cfg(test)]
    pub(crate) fn reads_available(&self) -> usize {
        self.reads.available_permits()
    }

    /// An empty reservation, to grow as records are held.
    pub fn reserve(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// Waits until a GetRecords call may be made: the budget not exceeded
    /// (unless `replaying`: a replay must read on to finish, see the module
    /// documentation), then a read permit. Hold the permit until the
    /// response's records are in batches.
    ///
    /// `None` only if the semaphore were closed, which nothing does; a read
    /// then goes ahead without a permit rather than stall the shard.
    pub async fn read_permit(&self, replaying: bool) -> Option<OwnedSemaphorePermit> {
        if !replaying {
            self.wait_for_room().await;
        }
        self.reads.clone().acquire_owned().await.ok()
    }

    /// Waits for a turn to replay a pending batch; hold it until the replay
    /// is written. `None` as for [`read_permit`](Self::read_permit).
    pub async fn replay_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.replays.clone().acquire_owned().await.ok()
    }

    /// Returns once the budget is not exceeded.
    async fn wait_for_room(&self) {
        loop {
            // Registered before the check, so a release in between wakes it.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if !self.is_exceeded() {
                return;
            }
            released.await;
        }
    }

    fn release(&self, bytes: u64) {
        if bytes > 0 {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
            self.released.notify_waiters();
        }
    }
}

/// Bytes of records held against a [`MemoryBudget`]; released when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: u64,
}

impl Reservation {
    /// Holds `bytes` more.
    pub fn grow(&mut self, bytes: u64) {
        self.budget.used.fetch_add(bytes, Ordering::Relaxed);
        self.bytes += bytes;
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn reads_in_flight_are_bounded_by_the_budget() {
        assert_eq!(
            MemoryBudget::new(256 << 20, 64 << 20).reads_in_flight_limit(),
            25
        );
        let small = MemoryBudget::new(1 << 20, 1 << 20);
        assert_eq!(small.reads_in_flight_limit(), MIN_READS_IN_FLIGHT);
        let mut held = Vec::new();
        for _ in 0..MIN_READS_IN_FLIGHT {
            held.push(small.read_permit(false).await);
        }
        let next = small.read_permit(false);
        tokio::pin!(next);
        assert!(
            futures::poll!(next.as_mut()).is_pending(),
            "a fifth read must wait"
        );
        held.pop();
        assert!(
            futures::poll!(next.as_mut()).is_ready(),
            "a freed permit is taken"
        );
    }

    #[tokio::test]
    async fn reads_wait_while_the_budget_is_exceeded_except_a_replays() {
        let budget = MemoryBudget::new(100, 100);
        let mut held = budget.reserve();
        held.grow(101);
        let read = budget.read_permit(false);
        tokio::pin!(read);
        assert!(futures::poll!(read.as_mut()).is_pending(), "over the limit");
        assert!(
            futures::poll!(std::pin::pin!(budget.read_permit(true))).is_ready(),
            "a replay reads on"
        );
        drop(held);
        assert_eq!(budget.used(), 0);
        assert!(
            futures::poll!(read.as_mut()).is_ready(),
            "room again: the read goes ahead"
        );
    }

    #[tokio::test]
    async fn replays_take_turns() {
        // 64 MiB of budget, batches of up to 32 MiB: two replays at once.
        let budget = MemoryBudget::new(64 << 20, 32 << 20);
        let (first, second) = (budget.replay_permit().await, budget.replay_permit().await);
        let third = budget.replay_permit();
        tokio::pin!(third);
        assert!(futures::poll!(third.as_mut()).is_pending());
        drop((first, second));
        assert!(futures::poll!(third.as_mut()).is_ready());
        assert_eq!(
            MemoryBudget::new(16 << 20, 64 << 20)
                .replays
                .available_permits(),
            1,
            "at least one"
        );
    }
}
