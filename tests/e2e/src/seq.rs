//! Sequence numbers as the harness sees them, written independently of the
//! daemon's `sequence-range` crate so the tests are a second opinion:
//! decimal text ordered numerically, and the key encodings of the contract
//! (three digits giving the digit count, then the digits; the sorter is the
//! nines' complement of that).

use std::cmp::Ordering;
use std::fmt;

/// Most digits a Kinesis sequence number may have.
pub const MAX_DIGITS: usize = 129;

/// A sequence number: canonical decimal text (no leading zero unless it is
/// `0`, at most [`MAX_DIGITS`] digits), ordered numerically.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Seq(String);

impl Seq {
    /// Parses canonical decimal text.
    ///
    /// # Errors
    /// Empty, non-digit, leading zero, or more than [`MAX_DIGITS`] digits.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{text:?} is not a decimal number"));
        }
        if text.len() > 1 && text.starts_with('0') {
            return Err(format!("{text:?} has a leading zero"));
        }
        if text.len() > MAX_DIGITS {
            return Err(format!("{text:?} has more than {MAX_DIGITS} digits"));
        }
        Ok(Self(text.to_owned()))
    }

    /// The decimal text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The ascending key form: `9` → `0019`, `10` → `00210`.
    pub fn encode_ascending(&self) -> String {
        format!("{:03}{}", self.0.len(), self.0)
    }

    /// The descending key form (the "sorter"): the nines' complement of
    /// [`Seq::encode_ascending`], `9` → `9980`.
    pub fn encode_descending(&self) -> String {
        complement(&self.encode_ascending())
    }

    /// Parses the ascending key form.
    ///
    /// # Errors
    /// Not exactly three digits of length followed by that many digits of a
    /// canonical number.
    pub fn decode_ascending(text: &str) -> Result<Self, String> {
        if text.len() < 4 || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{text:?} is not a length-prefixed number"));
        }
        let (prefix, digits) = text.split_at(3);
        let declared: usize = prefix
            .parse()
            .map_err(|_| format!("bad length prefix in {text:?}"))?;
        if declared != digits.len() {
            return Err(format!(
                "{text:?}: length prefix says {declared} digits, {} follow",
                digits.len()
            ));
        }
        Self::parse(digits)
    }

    /// Parses the descending key form.
    ///
    /// # Errors
    /// As [`Seq::decode_ascending`] on the complemented text.
    pub fn decode_descending(text: &str) -> Result<Self, String> {
        if !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{text:?} is not all digits"));
        }
        Self::decode_ascending(&complement(text))
    }
}

fn complement(digits: &str) -> String {
    digits
        .bytes()
        .map(|b| char::from(b'9' - (b - b'0')))
        .collect()
}

impl Ord for Seq {
    fn cmp(&self, other: &Self) -> Ordering {
        // Canonical text: more digits is larger; equal length compares
        // digit by digit.
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for Seq {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Seq({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Seq {
        Seq::parse(text).unwrap()
    }

    #[test]
    fn encodings_from_the_contract() {
        assert_eq!(s("9").encode_ascending(), "0019");
        assert_eq!(s("10").encode_ascending(), "00210");
        assert_eq!(s("9").encode_descending(), "9980");
        assert_eq!(s("10").encode_descending(), "99789");
        assert_eq!(Seq::decode_ascending("00210").unwrap(), s("10"));
        assert_eq!(Seq::decode_descending("9980").unwrap(), s("9"));
        for bad in ["", "001", "0029", "00201", "002a0", "0019x"] {
            assert!(Seq::decode_ascending(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn numeric_order() {
        assert!(s("9") < s("10"));
        assert!(s("100") > s("99"));
        assert!(s("49590338271490256608559692538361571095921575989136588898") > s("9"));
        assert!(s("9").encode_descending() > s("10").encode_descending());
        assert!(Seq::parse("012").is_err());
        assert!(Seq::parse("0").is_ok());
    }
}
