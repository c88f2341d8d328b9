//! Kinesis sequence numbers, closed sequence ranges, and sets of them — the
//! arithmetic shardsink's exactly-once guarantee rests on. No I/O.
//!
//! # Layout
//! - [`sequence_number`]: [`SequenceNumber`], the decimal text Kinesis
//!   returns (up to 129 digits; real ones have 56), checked once and ordered
//!   numerically, with big-integer arithmetic when asked.
//! - [`range`]: [`SequenceRange`], a closed interval `[first, last]` — what an
//!   object key carries.
//! - [`range_set`]: [`RangeSet`], sorted merged ranges with insert, remove,
//!   difference and an O(log n) allocation-free `contains`. Dedup builds one
//!   from the keys under a shard's minute (or hour) prefix and asks it, record by
//!   record, what is already written.
//! - [`key_encoding`]: length-prefixed text forms whose byte order is numeric
//!   order (ascending) or its reverse (descending), for S3 keys.
//!
//! Data flows one way: text from Kinesis or from a key → [`SequenceNumber`] →
//! [`SequenceRange`] → [`RangeSet`]; and back to text for keys through
//! [`key_encoding`].
#![deny(missing_docs)]

pub mod key_encoding;
pub mod range;
pub mod range_set;
pub mod sequence_number;

pub use key_encoding::KeyDecodeError;
pub use range::{InvertedRangeError, SequenceRange};
pub use range_set::RangeSet;
pub use sequence_number::{ParseErrorKind, ParseSequenceNumberError, SequenceNumber};
