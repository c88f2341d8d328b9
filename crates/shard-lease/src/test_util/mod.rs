//! Test support, compiled with the `test-util` feature (and in this crate's
//! own tests):
//! - [`fake_table`]: [`FakeTable`], a lease table in memory, and
//!   [`fake_client`], a DynamoDB client served from it through
//!   `aws-smithy-mocks` rules;
//! - [`parse`](mod@parse): reads a request's expressions back into an
//!   [`Update`](crate::Update) and a [`Condition`](crate::Condition),
//!   accepting exactly what [`Expressions`](crate::Expressions) renders;
//! - [`evaluate`](mod@evaluate): applies them to an item as DynamoDB does.

pub mod evaluate;
pub mod fake_table;
pub mod parse;

pub use evaluate::{apply, holds};
pub use fake_table::{FakeTable, fake_client};
pub use parse::{ExpressionError, parse, parse_update_item};
