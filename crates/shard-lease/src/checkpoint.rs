//! [`Checkpoint`]: where a shard's reading resumes, as stored in the lease
//! row's `checkpoint` attribute.

use std::fmt;

use sequence_range::{ParseSequenceNumberError, SequenceNumber};

/// The position up to which a shard's records are durably in S3.
///
/// Stored as text in the `checkpoint` attribute, with the KCL's sentinel
/// values (`ExtendedSequenceNumber` in amazon-kinesis-client: `TRIM_HORIZON`,
/// `LATEST`, `AT_TIMESTAMP`, `SHARD_END`) so an operator who knows the KCL can
/// read the table. A new lease holds the initial position; shardsink replaces
/// it with a sequence number after the first batch is written.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Checkpoint {
    /// Nothing read yet; start at the oldest record (`TRIM_HORIZON`).
    TrimHorizon,
    /// Nothing read yet; start at the newest record (`LATEST`).
    Latest,
    /// Nothing read yet; start at the worker's configured timestamp
    /// (`AT_TIMESTAMP`, as the KCL stores it: the time itself is configuration).
    AtTimestamp,
    /// Every record up to and including this sequence number is durably in
    /// S3; resume `AFTER_SEQUENCE_NUMBER` it. shardsink checkpoints whole
    /// Kinesis records, so `checkpointSubSequenceNumber` is always 0.
    SequenceNumber(SequenceNumber),
    /// The shard is closed and every record of it is in S3 (`SHARD_END`).
    ShardEnd,
}

impl Checkpoint {
    /// The text stored in the `checkpoint` attribute.
    pub fn to_attribute(&self) -> String {
        match self {
            Self::TrimHorizon => "TRIM_HORIZON".to_owned(),
            Self::Latest => "LATEST".to_owned(),
            Self::AtTimestamp => "AT_TIMESTAMP".to_owned(),
            Self::SequenceNumber(n) => n.to_string(),
            Self::ShardEnd => "SHARD_END".to_owned(),
        }
    }

    /// Parses the `checkpoint` attribute.
    ///
    /// # Errors
    /// [`ParseSequenceNumberError`] when the text is neither a sentinel nor a
    /// sequence number.
    pub fn from_attribute(text: &str) -> Result<Self, ParseSequenceNumberError> {
        Ok(match text {
            "TRIM_HORIZON" => Self::TrimHorizon,
            "LATEST" => Self::Latest,
            "AT_TIMESTAMP" => Self::AtTimestamp,
            "SHARD_END" => Self::ShardEnd,
            other => Self::SequenceNumber(SequenceNumber::parse(other)?),
        })
    }

    /// The sequence number, when the checkpoint is one.
    pub fn sequence_number(&self) -> Option<&SequenceNumber> {
        match self {
            Self::SequenceNumber(n) => Some(n),
            _ => None,
        }
    }

    /// Whether the shard has been read to its end.
    pub fn is_shard_end(&self) -> bool {
        matches!(self, Self::ShardEnd)
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_attribute())
    }
}

impl fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Checkpoint({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinels_and_numbers_round_trip() {
        for text in [
            "TRIM_HORIZON",
            "LATEST",
            "AT_TIMESTAMP",
            "SHARD_END",
            "0",
            "12345678901234567890123456789012345678901234567890123456",
        ] {
            assert_eq!(
                Checkpoint::from_attribute(text).unwrap().to_attribute(),
                text
            );
        }
    }

    #[test]
    fn rejects_garbage() {
        assert!(Checkpoint::from_attribute("trim_horizon").is_err());
        assert!(Checkpoint::from_attribute("").is_err());
        assert!(Checkpoint::from_attribute("01").is_err());
    }
}
