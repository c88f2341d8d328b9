//! [`MemoryBudget`]: the records a process holds, against
//! `--buffer-memory-limit`, in every phase — read, buffered, being written,
//! being replayed.
//!
//! Everything that holds records takes a [`Reservation`] of its bytes:
//! - a GetRecords call, before it is made: the most a response can take while
//!   the SDK decodes it ([`READ_RESERVATION`]); once it returned, what its
//!   records take, until they are in batches;
//! - a batch being built: its encoded lines, growing record by record;
//! - a batch being written: its lines and its compressed body, until the PUT
//!   ended;
//! - the check of a Parquet object already at a batch's key (after a 412):
//!   the whole object, from before its body is read until the comparison
//!   ended (lines are streamed instead).
//!
//! Three rules keep the total within the limit:
//! 1. A shard that adds a record while the budget is exceeded writes its own
//!    batch early ([`crate::output::batch::FlushReason::MemoryLimit`]).
//! 2. A read waits until its reservation fits under the limit
//!    ([`MemoryBudget::try_reserve_read`]). A shard never waits for room while
//!    it holds a batch: it writes the batch first. Whatever the others hold
//!    is then being written or being placed, and is released soon, so the
//!    wait ends.
//! 3. A batch being replayed — the pending batch from the lease row, or an
//!    uncommitted batch found in S3 — cannot be written early (it must be
//!    exactly the records recorded), so its reads go ahead past the limit,
//!    and so does the decisions object it adopts; instead at most
//!    `limit / (2 × --buffer-max-bytes)` (at least one) replays run at once
//!    ([`MemoryBudget::replay_permit`]) — a replayed batch holds its lines
//!    and then its compressed body too — and the other shards wait their
//!    turn: a pending batch before the shard's first read, an uncommitted
//!    batch before its decisions object is read.
//! 4. A rebuild of the local event store (a shard's window of accepted
//!    copies read back from S3) holds at most [`REBUILD_BYTES`] and never
//!    waits for room: it runs at a shard's first decision, while the shard
//!    holds a response's records and maybe a replay's turn, so a rebuild
//!    waiting for room could wait on shards that wait for it. Instead at
//!    most `limit / (4 × REBUILD_BYTES)` (at least one) rebuilds run at once
//!    ([`MemoryBudget::rebuild_permit`]), counted against the limit. A
//!    rebuild with its turn waits on nothing but S3 and the local disk, so
//!    it ends, and the next rebuild gets the turn.
//!
//! The records in memory then stay within the limit plus the replays and
//! the rebuilds it allows; the process itself (runtime, clients,
//! compression contexts) comes on top.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// What a GetRecords call is reserved before it is made: the most a
/// response takes in memory while the SDK decodes it — its JSON body, where
/// the data is base64 (4/3 of the 10 MiB a response holds at most: "Each
/// GetRecords call can return up to 10 MiB of data", Kinesis API reference,
/// GetRecords), and the decoded records (10 MiB) — with some slack for the
/// rest of the JSON.
pub const READ_RESERVATION: u64 = 24 << 20;

/// What one rebuild of the local event store holds at most while it has
/// its turn ([`MemoryBudget::rebuild_permit`]): the accepted copies read
/// from decisions objects but not yet inserted, the store's working set
/// while it inserts them, and the zstd decoder with its buffers
/// (`events::rebuild` sizes its chunks to fit).
pub const REBUILD_BYTES: u64 = 20 << 20;

/// Memory the process may use for records (see the module documentation).
#[derive(Debug)]
pub struct MemoryBudget {
    used: AtomicU64,
    limit: u64,
    /// Woken whenever bytes are released.
    released: Notify,
    replays: Arc<Semaphore>,
    rebuilds: Arc<Semaphore>,
}

impl MemoryBudget {
    /// `--buffer-memory-limit`, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// A budget of `limit` bytes (`--buffer-memory-limit`), for batches of
    /// up to `max_batch_bytes` (`--buffer-max-bytes`).
    pub fn new(limit: u64, max_batch_bytes: u64) -> Arc<Self> {
        // A replay holds up to a batch of lines and then its body as well.
        let replays = turns(limit, max_batch_bytes.saturating_mul(2));
        // Rebuilds go past the limit by at most a quarter of it (or one).
        let rebuilds = turns(limit, REBUILD_BYTES * 4);
        Arc::new(Self {
            used: AtomicU64::new(0),
            limit,
            released: Notify::new(),
            replays: Arc::new(Semaphore::new(replays)),
            rebuilds: Arc::new(Semaphore::new(rebuilds)),
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

    /// An empty reservation, to grow as records are held.
    pub fn reserve(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// The reservation for one GetRecords call, if it fits under the limit
    /// now (taken atomically): [`READ_RESERVATION`], or the whole limit if
    /// that is smaller, so that a read always fits an empty budget. Shrink it
    /// to the response's records once they are known.
    pub fn try_reserve_read(self: &Arc<Self>) -> Option<Reservation> {
        let bytes = READ_RESERVATION.min(self.limit);
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                (used.saturating_add(bytes) <= self.limit).then_some(used + bytes)
            })
            .ok()
            .map(|_| Reservation {
                budget: self.clone(),
                bytes,
            })
    }

    /// The reservation for one GetRecords call of a replay, which goes ahead
    /// whatever is used (see the module documentation).
    pub fn reserve_read_anyway(self: &Arc<Self>) -> Reservation {
        let mut reservation = self.reserve();
        reservation.grow(READ_RESERVATION.min(self.limit));
        reservation
    }

    /// Waits until some bytes are released; register with
    /// [`released`](Self::released) before checking, so that a release in
    /// between is not missed.
    pub fn released(&self) -> tokio::sync::futures::Notified<'_> {
        self.released.notified()
    }

    /// Waits for a turn to replay a pending batch; hold it until the replay
    /// is written. `None` only if the semaphore were closed, which nothing
    /// does; the replay then goes ahead rather than stall the shard.
    pub async fn replay_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.replays.clone().acquire_owned().await.ok()
    }

    /// Waits for a turn to rebuild a shard's window of the local event
    /// store; hold it, with a reservation of [`REBUILD_BYTES`], until the
    /// rebuild ended. `None` only if the semaphore were closed, which
    /// nothing does.
    pub async fn rebuild_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.rebuilds.clone().acquire_owned().await.ok()
    }

    fn release(&self, bytes: u64) {
        if bytes > 0 {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
            self.released.notify_waiters();
        }
    }
}

/// How many of something that holds up to `each` bytes fit in `limit`: at
/// least one.
fn turns(limit: u64, each: u64) -> usize {
    usize::try_from(limit / each.max(1))
        .unwrap_or(usize::MAX)
        .clamp(1, Semaphore::MAX_PERMITS)
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

    /// Holds exactly `bytes` from now on, growing or releasing the
    /// difference.
    pub fn resize(&mut self, bytes: u64) {
        if bytes >= self.bytes {
            self.grow(bytes - self.bytes);
        } else {
            self.budget.release(self.bytes - bytes);
            self.bytes = bytes;
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The budget the bytes are held against.
    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
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

    #[test]
    fn a_read_is_reserved_only_if_it_fits() {
        let budget = MemoryBudget::new(64 << 20, 64 << 20);
        let first = budget.try_reserve_read().expect("an empty budget");
        let mut second = budget.try_reserve_read().expect("48 MiB of 64");
        assert!(budget.try_reserve_read().is_none(), "72 MiB would not fit");
        // The response held 3 MiB of records: the rest is free again.
        second.resize(3 << 20);
        assert_eq!(budget.used(), (24 + 3) << 20);
        assert!(budget.try_reserve_read().is_some());
        drop((first, second));
        assert_eq!(budget.used(), 0);
        let small = MemoryBudget::new(1 << 20, 1 << 20);
        let whole = small.try_reserve_read().expect("fits an empty budget");
        assert_eq!(whole.bytes(), 1 << 20);
        assert!(small.try_reserve_read().is_none());
    }

    #[tokio::test]
    async fn a_release_wakes_a_waiting_reader() {
        let budget = MemoryBudget::new(30 << 20, 30 << 20);
        let held = budget.try_reserve_read().unwrap();
        let released = budget.released();
        tokio::pin!(released);
        released.as_mut().enable();
        assert!(budget.try_reserve_read().is_none());
        assert!(futures::poll!(released.as_mut()).is_pending());
        drop(held);
        assert!(futures::poll!(released.as_mut()).is_ready());
        assert!(budget.try_reserve_read().is_some());
    }

    #[test]
    fn a_replay_reads_whatever_is_used() {
        let budget = MemoryBudget::new(30 << 20, 30 << 20);
        let _held = budget.try_reserve_read().unwrap();
        let replay = budget.reserve_read_anyway();
        assert!(budget.is_exceeded());
        drop(replay);
        assert!(!budget.is_exceeded());
    }

    #[tokio::test]
    async fn replays_take_turns() {
        // 64 MiB of budget, batches of up to 16 MiB (lines and body: 32 MiB
        // a replay): two replays at once.
        let budget = MemoryBudget::new(64 << 20, 16 << 20);
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

    #[tokio::test]
    async fn rebuilds_take_turns_apart_from_replays() {
        // 64 MiB: one rebuild at a time (a quarter of the limit is less
        // than a rebuild), and one replay.
        let budget = MemoryBudget::new(64 << 20, 64 << 20);
        let rebuild = budget.rebuild_permit().await;
        let second = budget.rebuild_permit();
        tokio::pin!(second);
        assert!(futures::poll!(second.as_mut()).is_pending());
        let replay = budget.replay_permit();
        tokio::pin!(replay);
        assert!(
            futures::poll!(replay.as_mut()).is_ready(),
            "a rebuild does not take a replay's turn"
        );
        drop(rebuild);
        assert!(futures::poll!(second.as_mut()).is_ready());
        // The default limit: 256 MiB / (4 × 20 MiB) = 3.
        let default = MemoryBudget::new(256 << 20, 64 << 20);
        assert_eq!(default.rebuilds.available_permits(), 3);
    }
}
