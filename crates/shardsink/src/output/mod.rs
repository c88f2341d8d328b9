//! Output: what a batch of records becomes in S3 — the lines, their
//! compression, the object key and the arrival minute it lives under.
//!
//! - `batch`: [`Batch`](batch::Batch), one shard's records of one minute, encoded as they
//!   arrive and held against the memory budget;
//! - `encode`: the JSON Lines envelope of a record;
//! - `compression`: the codec of an object body and the key extension;
//! - `key`: the key layout and its inverse (parsing a key back into its
//!   minute, shard, range and codec);
//! - `minute`: a record's UTC arrival minute.

pub(crate) mod batch;
pub(crate) mod compression;
pub(crate) mod encode;
pub(crate) mod key;
pub(crate) mod minute;
