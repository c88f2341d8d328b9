//! Test support, compiled with the `test-util` feature (and in this crate's
//! own tests):
//! - [`fake_table`]: [`FakeTable`], a lease table in memory, and
//!   [`fake_client`], a DynamoDB client served from it through
//!   `aws-smithy-mocks` rules;
//! - [`parse`](mod@parse): reads a request's expressions back into an
//!   [`Update`](crate::Update) and a [`Condition`](crate::Condition),
//!   accepting exactly what [`Expressions`](crate::Expressions) renders;
//! - [`evaluate`](mod@evaluate): applies them to an item as DynamoDB does;
//! - [`item_size`](mod@item_size): an item's size and the capacity units a
//!   request for it consumes, by DynamoDB's rules.

pub mod evaluate;
pub mod fake_table;
pub mod item_size;
pub mod parse;

pub use evaluate::{apply, holds};
pub use fake_table::{FakeTable, fake_client};
pub use item_size::{MAX_ITEM_BYTES, item_size};
pub use parse::{ExpressionError, parse, parse_update_item};
