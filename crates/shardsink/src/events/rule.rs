//! The event decision rule: whether a user record is the accepted copy of
//! its event or a duplicate of an earlier accepted copy — a pure function of
//! the record's [`EventKey`], its arrival time and the accepted copies that
//! precede it (the window, the fingerprint and the outcomes are documented
//! in `event_store::rule`). Both stores (the local store and the DynamoDB
//! store) only find those copies; the rule decides. It lives in the
//! `event-store` crate, beside the local store that applies it inside its
//! writes; the DynamoDB store, `verify` and the decisions objects use it
//! from here.

pub use event_store::rule::{AcceptedCopy, CopyRef, Decision, EventKey, Outcome, Rule};
