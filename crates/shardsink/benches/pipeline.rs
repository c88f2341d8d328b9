//! Placeholder; the pipeline benchmark is written with the mocked-client tests.
#![allow(missing_docs)]
fn main() {}
