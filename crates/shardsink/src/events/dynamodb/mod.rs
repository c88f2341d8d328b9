//! [`DynamoDbStore`]: the DynamoDB event store (`--event-dedup-store
//! dynamodb`), stream scope — the accepted copies of every shard, seen by every worker,
//! so that a producer's retry that landed on another shard is found too.
//!
//! # The table
//! One item per *event* — an id and, with `--event-fingerprint payload`,
//! a payload ([`item`] has the attributes): `eventId` (32 hex digits of the
//! id's hash, then 16 of the payload's fingerprint, 0 without
//! fingerprints), the event's accepted copies (arrival, write time, shard,
//! sequence and sub-sequence number), a `version` raised by every write,
//! and `ttl` for DynamoDB Time to Live. [`DynamoDbStore::ensure_table`] creates
//! it (on-demand billing) and turns TTL on.
//!
//! # Deciding a run
//! [`DynamoDbStore::decide`] takes a run of one shard's candidates:
//! 1. **Cache.** A candidate whose cached item ([`cache`]) already shows a
//!    duplicate of it, or shows the candidate itself (accepted by an earlier
//!    attempt), is decided without a request — unless an earlier candidate
//!    of its item in the run was not.
//! 2. **Read.** The other candidates' items are read with BatchGetItem,
//!    100 keys a request (keys left unprocessed are asked again after a
//!    backoff); an item cached is used instead.
//! 3. **Decide.** The candidates of each item are decided in order against
//!    it ([`verdict`]): its prior copies are those of other shards and those
//!    of its own shard that precede it (`store::precedes_in_shard`); an
//!    accepted candidate is a prior copy of the later ones.
//! 4. **Write.** An item with newly accepted copies is written back with a
//!    conditional PutItem: *only if its version is still the one decided
//!    against* (`attribute_not_exists(eventId)` for a new item). Writes of
//!    distinct items go out concurrently ([`WRITES_IN_FLIGHT`](store::WRITES_IN_FLIGHT)). When the
//!    condition fails another worker changed the item: it is read again
//!    (consistently) and its candidates decided again, until a write holds
//!    or nothing is left to accept.
//!
//! Every accepted copy is in the table when `decide` returns — but for an
//! item DynamoDB refuses for good (a `ValidationException`, which no retry
//! can change: [`DynamoDbStoreError::Rejected`]). Its records are then decided
//! against what was read of the item, kept as decided; their copies are
//! not recorded, the refusal is logged with the item's `eventId` and
//! counted (`shardsink_event_manifest_rejected_total`), and the shard goes
//! on. A rerun meets the same refusal and decides alike. (A BatchGetItem
//! refused is asked again key by key, so that a refusal concerns one item.)
//!
//! # Why it is exact
//! - *Never two accepted copies of one event within the window.* The
//!   rule makes a record a duplicate only of a *matching* copy — the same
//!   id and, with fingerprints, the same payload: exactly the copies of its
//!   item. An accepted copy enters its item through a write conditional on
//!   the version its decision read, so that decision saw every copy
//!   written before it. Of two matching copies within the window, the one
//!   written second had the first among its prior copies — a copy of
//!   another shard always is; one of its own shard is when it precedes, and
//!   a record of a shard is only decided after those before it — so it was
//!   decided a duplicate, not accepted.
//! - *A rerun decides as before* (after a crash, a lost lease, a failed
//!   call): a candidate found in its item was accepted by an earlier
//!   attempt and stays accepted, never its own duplicate; nothing is
//!   written. Copies of its own shard after it are not prior copies, so
//!   what a later batch accepted changes nothing either. And every copy
//!   that preceded it the first time is still there ([`retention`]: kept
//!   by write time for a day, the cap aside). Any call can therefore be
//!   retried whole, and a dropped call leaves only accepted copies behind.
//! - *Stale state only ever names true duplicates.* Copies are only added
//!   to an item (and dropped only by [`retention`]), so a copy seen in the
//!   cache or in an eventually consistent read was accepted. A duplicate
//!   decided from it is one, though a fresh read might name a later copy as
//!   its original; anything that accepts is settled by the conditional
//!   write.
//!
//! What the DynamoDB store cannot see: copies of the id with *other* payloads
//! are in other items, so it cannot tell `id_reused` from `unique` (the
//! local store can). Both are kept and accepted, so E1–E3 are the same;
//! under the DynamoDB store such a record's outcome is `unique`.
//!
//! # Limits, stated
//! - *Lag allowance.* A copy is kept while it is within 2 × window of its
//!   item's newest arrival, or was written less than 2 × window +
//!   [`LAG_ALLOWANCE_MILLIS`](item::LAG_ALLOWANCE_MILLIS) (a day)
//!   ago; the item's TTL is past both. A shard read more than a day behind
//!   another that carries the same events may find their copies gone.
//! - *Bounded items.* An item holds at most
//!   [`MAX_COPIES`](retention::MAX_COPIES) (3) copies, at most 1 KB (one
//!   write unit) whatever its ids and numbers. Matching accepted copies are
//!   more than a window apart, so at most two lie within 2 × window of the
//!   newest: the cap evicts (oldest arrival first) only copies that late
//!   decisions might consult — counted in
//!   `shardsink_event_manifest_evictions_total`, each logged. A decision
//!   misses a copy only when the same event (id and payload) was accepted
//!   more than 3 times after it, each more than a window after the one
//!   before, before the decision: a record of a shard read more than two
//!   windows behind another that carries the same event, or a replay of a
//!   shard's uncommitted records that accepted the event more than 3 times.
//!   Such a record is kept once more (E1 holds; E2 does not for it).
//! - Losing the table forgets every accepted copy: the next copy of each
//!   event is accepted again (the decisions already recorded in S3 stand).
//!   Items written by a version that keyed them by the id alone (32 hex
//!   digits) are not read: upgrading starts the window over, once.
//!
//! # Throughput and cost
//! A new event needs one conditional write, and DynamoDB batches
//! conditional writes only in transactions; so the DynamoDB store sends one
//! conditional PutItem per item with new copies, [`WRITES_IN_FLIGHT`](store::WRITES_IN_FLIGHT) at
//! once, and reads with BatchGetItem (100 keys a request, eventually
//! consistent). Measured against the local server (moto 5.2.5 on two
//! shared, busy cores), two workers deciding 50,000 records with 90% of
//! the events new: 240 to 290 events a second, one PutItem per new event
//! and one BatchGetItem per 100 items. moto is the bound: one Python
//! process spending about 3 ms of CPU per PutItem, so at most ~350 a
//! second with a core to itself, whatever the concurrency; even its
//! fastest write, an unconditional BatchWriteItem, stored 1,565 items a
//! second here, so no exact design reaches 5,000 events a second on it.
//! Against DynamoDB Local 3.3.0 (AWS's own emulator, Java, in memory), the
//! same test: about 710 events a second for the worker deciding most
//! records, 811 for both, the server spending about 1.4 ms of CPU per
//! conditional PutItem, so about 1,400 a second with both cores.
//! TransactWriteItems (100 conditional puts a request) was measured and
//! rejected: moto deep-copies the table for each item of a transaction (4
//! items a second on a table of 7,000 items), and on DynamoDB a
//! transactional write costs two write units, twice a PutItem. On DynamoDB,
//! at the usual 5–10 ms a PutItem, 64 writes in flight make 6,000 to
//! 12,000 new events a second per worker (not measured here).
//!
//! Cost on DynamoDB, on-demand: an item of one copy is about 190 bytes, of
//! three at most 1 KB. A new event costs half a read request unit
//! (eventually consistent, up to 4 KB, absent items too) and one write
//! request unit — the same whatever the id's history, as DynamoDB Local
//! reports (`ReturnConsumedCapacity`, counted in
//! `shardsink_event_manifest_capacity_units_total`); a duplicate half a
//! read unit, none when the cache knows it. At $0.25 per million read and
//! $1.25 per million write units: $1.38 per million new events, $0.13 per
//! million duplicates — $1.25 per million events with 10% duplicates. A
//! lost race adds a failed write and a consistent read (one unit each).
//! TTL deletions are free; storage is about 190 bytes per event for 2 ×
//! window + a day.
//!
//! # Layout
//! - [`store`]: [`DynamoDbStore`] — the table made sure of, runs decided,
//!   copies adopted: the steps above;
//! - [`item`]: an item's key and attributes;
//! - [`verdict`]: decisions against an item's copies;
//! - [`retention`]: which copies a rewrite keeps, and the cap;
//! - [`cache`]: the items read or written recently;
//! - [`table`]: one function per DynamoDB call, and [`DynamoDbStoreError`].

pub mod cache;
pub mod item;
pub mod retention;
pub mod store;
pub mod table;
#[cfg(test)]
mod tests;
pub mod verdict;

pub use self::store::DynamoDbStore;
pub use self::table::DynamoDbStoreError;
