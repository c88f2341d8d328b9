//! Text encodings of sequence numbers whose byte order is numeric order, for
//! use in S3 object keys.
//!
//! S3 lists keys in ascending UTF-8 binary order (ListObjectsV2 API reference).
//! Plain decimal text sorts `"10"` before `"9"`, so keys hold numbers in a
//! length-prefixed form instead:
//!
//! * **ascending**: three decimal digits giving the digit count, then the
//!   digits: `9` → `0019`, `10` → `00210`, a 56-digit number → `056…`. Byte
//!   order equals numeric order: a longer number has a larger prefix, and at
//!   equal length the digits decide.
//! * **descending**: the nines' complement (`d` → `9 - d`) of every byte of the
//!   ascending form: `9` → `9980`, `10` → `99789`. Byte order is the reverse of
//!   numeric order, because no ascending form is a proper prefix of another
//!   (equal lengths have equal prefixes; different lengths differ within the
//!   first three bytes), so complementing flips the first differing byte.
//!
//! Both forms keep the digits readable, so a sequence number can still be found
//! in a key by eye. Decoding rejects anything that is not exactly a form
//! produced by the encoder, with a typed error, never a panic.

use std::fmt;

use crate::sequence_number::input_for_error;
use crate::{ParseSequenceNumberError, SequenceNumber};

/// Width of the digit-count prefix. 129, the most digits a sequence number
/// may have, needs three.
const LENGTH_PREFIX_WIDTH: usize = 3;

/// Appends the ascending form of `n` to `out`.
pub fn encode_ascending(n: &SequenceNumber, out: &mut String) {
    let digits = n.as_str();
    debug_assert!(digits.len() <= SequenceNumber::MAX_DIGITS);
    push_length_prefixed(digits, out);
}

/// Appends the descending form of `n` to `out`.
pub fn encode_descending(n: &SequenceNumber, out: &mut String) {
    let start = out.len();
    encode_ascending(n, out);
    let complemented: String = out[start..]
        .bytes()
        .map(complement_digit)
        .map(char::from)
        .collect();
    out.truncate(start);
    out.push_str(&complemented);
}

/// The ascending form of `n` as a new string.
pub fn to_ascending(n: &SequenceNumber) -> String {
    let mut out = String::new();
    encode_ascending(n, &mut out);
    out
}

/// The descending form of `n` as a new string.
pub fn to_descending(n: &SequenceNumber) -> String {
    let mut out = String::new();
    encode_descending(n, &mut out);
    out
}

/// Parses the ascending form back.
///
/// # Errors
/// [`KeyDecodeError`] when `text` is not exactly `NNN` followed by `NNN`
/// digits of a valid sequence number.
pub fn decode_ascending(text: &str) -> Result<SequenceNumber, KeyDecodeError> {
    let bytes = text.as_bytes();
    if bytes.len() < LENGTH_PREFIX_WIDTH || !bytes.iter().all(u8::is_ascii_digit) {
        return Err(KeyDecodeError::new(text, KeyDecodeErrorKind::Malformed));
    }
    let (prefix, digits) = text.split_at(LENGTH_PREFIX_WIDTH);
    let declared: usize = prefix
        .parse()
        .map_err(|_| KeyDecodeError::new(text, KeyDecodeErrorKind::Malformed))?;
    if declared != digits.len() {
        return Err(KeyDecodeError::new(
            text,
            KeyDecodeErrorKind::LengthMismatch {
                declared,
                actual: digits.len(),
            },
        ));
    }
    SequenceNumber::parse(digits)
        .map_err(|source| KeyDecodeError::new(text, KeyDecodeErrorKind::Number(source)))
}

/// Parses the descending form back.
///
/// # Errors
/// As [`decode_ascending`], on the complemented text.
pub fn decode_descending(text: &str) -> Result<SequenceNumber, KeyDecodeError> {
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(KeyDecodeError::new(text, KeyDecodeErrorKind::Malformed));
    }
    let ascending: String = text.bytes().map(complement_digit).map(char::from).collect();
    decode_ascending(&ascending).map_err(|err| KeyDecodeError::new(text, err.kind))
}

fn push_length_prefixed(digits: &str, out: &mut String) {
    use std::fmt::Write as _;
    // Writing to a String cannot fail.
    let _ = write!(out, "{:0width$}", digits.len(), width = LENGTH_PREFIX_WIDTH);
    out.push_str(digits);
}

/// Nines' complement of an ASCII digit; other bytes are left alone (callers
/// only pass digits).
fn complement_digit(byte: u8) -> u8 {
    if byte.is_ascii_digit() {
        b'9' - (byte - b'0')
    } else {
        byte
    }
}

/// Why a key component is not an encoded sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyDecodeErrorKind {
    /// Not all digits, or shorter than the three-digit length prefix.
    Malformed,
    /// The length prefix does not match the number of digits after it.
    LengthMismatch {
        /// Digit count the prefix declares.
        declared: usize,
        /// Digit count present.
        actual: usize,
    },
    /// The digits are not a valid sequence number (e.g. a leading zero).
    Number(ParseSequenceNumberError),
}

impl fmt::Display for KeyDecodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed => f.write_str("not a length-prefixed decimal number"),
            Self::LengthMismatch { declared, actual } => {
                write!(
                    f,
                    "length prefix says {declared} digits but {actual} follow"
                )
            }
            Self::Number(source) => write!(f, "{source}"),
        }
    }
}

/// A key component that does not decode to a sequence number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid encoded sequence number {input:?}: {kind}")]
pub struct KeyDecodeError {
    input: String,
    kind: KeyDecodeErrorKind,
}

impl KeyDecodeError {
    fn new(input: &str, kind: KeyDecodeErrorKind) -> Self {
        Self {
            input: input_for_error(input),
            kind,
        }
    }

    /// The rejected text (cut to 160 bytes).
    pub fn input(&self) -> &str {
        &self.input
    }

    /// Why it was rejected.
    pub fn kind(&self) -> &KeyDecodeErrorKind {
        &self.kind
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn n(text: &str) -> SequenceNumber {
        SequenceNumber::parse(text).unwrap()
    }

    #[test]
    fn known_encodings() {
        assert_eq!(to_ascending(&n("9")), "0019");
        assert_eq!(to_ascending(&n("10")), "00210");
        assert_eq!(to_descending(&n("9")), "9980");
        assert_eq!(to_descending(&n("10")), "99789");
        assert_eq!(to_ascending(&n("0")), "0010");
    }

    #[test]
    fn ascending_fixes_the_string_order_bug() {
        assert!(to_ascending(&n("9")) < to_ascending(&n("10")));
        assert!(to_descending(&n("9")) > to_descending(&n("10")));
    }

    #[test]
    fn decode_rejects_foreign_text() {
        for bad in [
            "", "12", "abc", "0019x", "00210-", "0029", "00209", "002a0", "003010",
        ] {
            assert!(decode_ascending(bad).is_err(), "{bad:?} must be rejected");
        }
        assert_eq!(
            decode_ascending("00512").unwrap_err().kind(),
            &KeyDecodeErrorKind::LengthMismatch {
                declared: 5,
                actual: 2
            }
        );
        assert!(matches!(
            decode_ascending("00201").unwrap_err().kind(),
            KeyDecodeErrorKind::Number(_)
        ));
        assert!(decode_descending("99x").is_err());
    }

    fn arb_sequence_number() -> impl Strategy<Value = SequenceNumber> {
        // Up to the full 129 digits, no leading zero.
        ("[1-9][0-9]{0,128}", any::<bool>()).prop_map(|(digits, zero)| {
            if zero {
                SequenceNumber::zero()
            } else {
                n(&digits)
            }
        })
    }

    proptest! {
        #[test]
        fn round_trips(a in arb_sequence_number()) {
            prop_assert_eq!(decode_ascending(&to_ascending(&a)).unwrap(), a.clone());
            prop_assert_eq!(decode_descending(&to_descending(&a)).unwrap(), a);
        }

        #[test]
        fn byte_order_is_numeric_order(a in arb_sequence_number(), b in arb_sequence_number()) {
            prop_assert_eq!(to_ascending(&a).cmp(&to_ascending(&b)), a.cmp(&b));
            prop_assert_eq!(to_descending(&a).cmp(&to_descending(&b)), b.cmp(&a));
        }

        #[test]
        fn decode_never_panics(text in ".{0,200}") {
            let _ = decode_ascending(&text);
            let _ = decode_descending(&text);
        }
    }
}
