//! [`Manifest`]: the DynamoDB event store (`--event-dedup-store dynamodb`),
//! stream scope — the accepted copies of every shard, seen by every worker,
//! so that a producer's retry that landed on another shard is found too.
//!
//! # The table
//! One item per event id ([`item`] has the attributes): `eventId` (32 hex
//! digits of the id's hash), the id's accepted copies (fingerprint, arrival,
//! shard, sequence and sub-sequence number), a `version` raised by every
//! write, and `ttl` for DynamoDB Time to Live. [`Manifest::ensure_table`]
//! creates it (on-demand billing) and turns TTL on.
//!
//! # Deciding a run
//! [`Manifest::decide`] takes a run of one shard's candidates:
//! 1. **Cache.** A candidate whose cached item ([`cache`]) already shows a
//!    duplicate of it, or shows the candidate itself (accepted by an earlier
//!    attempt), is decided without a request — unless an earlier candidate
//!    of its id in the run was not.
//! 2. **Read.** The items of the other candidates' ids are read with
//!    BatchGetItem, 100 keys a request (keys left unprocessed are asked
//!    again after a backoff); an id with a cached item uses that instead.
//! 3. **Decide.** The candidates of each id are decided in order against its
//!    item ([`item::verdict`]): its prior copies are those of other shards
//!    and those of its own shard that precede it (`store::precedes_in_shard`);
//!    an accepted candidate is a prior copy of the later ones.
//! 4. **Write.** An id with newly accepted copies is written back with a
//!    conditional PutItem: *only if its version is still the one decided
//!    against* (`attribute_not_exists(eventId)` for a new item). Writes of
//!    distinct ids go out concurrently ([`WRITES_IN_FLIGHT`](store::WRITES_IN_FLIGHT)). When the
//!    condition fails another worker changed the item: it is read again
//!    (consistently) and its candidates decided again, until a write holds
//!    or nothing is left to accept.
//!
//! Every accepted copy is in the table when `decide` returns.
//!
//! # Why it is exact
//! - *Never two accepted copies of one event within the window.* An
//!   accepted copy enters its item through a write conditional on the
//!   version its decision read, so that decision saw every copy written
//!   before it. Of two matching copies within the window, the one written
//!   second had the first among its prior copies — a copy of another shard
//!   always is; one of its own shard is when it precedes, and a record of
//!   a shard is only decided after those before it — so it was decided a
//!   duplicate, not accepted.
//! - *A rerun decides as before* (after a crash, a lost lease, a failed
//!   call): a candidate found in its item was accepted by an earlier
//!   attempt and stays accepted, never its own duplicate; nothing is
//!   written. Copies of its own shard after it are not prior copies, so
//!   what a later batch accepted changes nothing either. Any call can
//!   therefore be retried whole, and a dropped call leaves only accepted
//!   copies behind.
//! - *Stale state only ever names true duplicates.* Copies are only added
//!   to an item (and dropped only when no decision can consult them:
//!   [`item::keeps`]), so a copy seen in the cache or in an eventually
//!   consistent read was accepted. A duplicate decided from it is one,
//!   though a fresh read might name a later copy as its original; anything
//!   that accepts is settled by the conditional write.
//!
//! Limits, stated: a copy is kept until 2 × window +
//! [`item::LAG_ALLOWANCE_MILLIS`] (a day) past its arrival by the wall
//! clock — a shard read further behind the stream's tip may find an earlier
//! copy's item expired. Losing the table forgets every accepted copy: the
//! next copy of each event is accepted again (the decisions already
//! recorded in S3 stand). One item holds at most 400 KB, about 2,700
//! copies: an id accepted more often than that within its horizon (an id
//! shared by many distinct payloads with `--event-fingerprint payload`)
//! cannot be written: DynamoDB refuses the write (a `ValidationException`,
//! [`ManifestError::Dynamo`], retried slowly until an operator acts).
//!
//! # Throughput and cost
//! A new event needs one conditional write, and DynamoDB batches
//! conditional writes only in transactions; so the manifest sends one
//! conditional PutItem per id with new copies, [`WRITES_IN_FLIGHT`](store::WRITES_IN_FLIGHT) at
//! once, and reads with BatchGetItem (100 keys a request, eventually
//! consistent). Measured against the local server (moto 5.2.5 on two
//! shared, busy cores), two workers deciding 50,000 records with 90% of
//! the events new: 240 to 290 events a second, one PutItem per new event
//! and one BatchGetItem per 100 ids. moto is the bound: one Python
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
//! Cost on DynamoDB, on-demand: an item of one copy is about 210 bytes. A
//! new event costs half a read request unit (eventually consistent, up to
//! 4 KB, absent items too) and one write request unit (up to 1 KB: about
//! five copies); a duplicate half a read unit, none when the cache knows
//! it. At $0.25 per million read and $1.25 per million write units: $1.38
//! per million new events, $0.13 per million duplicates — $1.25 per
//! million events with 10% duplicates. A lost race adds a failed write and
//! a consistent read (one unit each). TTL deletions are free; storage is
//! about 210 bytes per event for 2 × window + a day.
//!
//! # Layout
//! - [`store`]: [`Manifest`] — the table made sure of, runs decided, copies
//!   adopted: the steps above;
//! - [`item`]: the item's attributes, and decisions against an item;
//! - [`cache`]: the items read or written recently;
//! - [`table`]: one function per DynamoDB call, and [`ManifestError`].

pub mod cache;
pub mod item;
pub mod store;
pub mod table;
#[cfg(test)]
mod tests;

pub use self::store::Manifest;
pub use self::table::ManifestError;
