//! [`WriteToken`]: the random token a conditional write stamps into the row.

/// The token a conditional write stamps into `lastWriteToken`: random, one
/// per write — and the same across the retries of one write, so that a retry
/// of a write that did apply (its response lost) recognizes it in the row
/// instead of reading it as a lost lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteToken(String);

impl WriteToken {
    /// A fresh random token (64 bits, hex).
    pub fn random() -> Self {
        Self(format!("{:016x}", rand::random::<u64>()))
    }

    /// The token's text, as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}
