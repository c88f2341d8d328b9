//! [`SequenceNumber`]: a Kinesis sequence number as an arbitrary-precision
//! unsigned integer.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::iter;
use std::str::FromStr;

use num_bigint::BigUint;

/// Longest input kept verbatim in an error message, in bytes; longer inputs are
/// cut and marked with `…` so a hostile key cannot flood the logs.
const MAX_INPUT_IN_ERROR: usize = 160;

/// A Kinesis sequence number.
///
/// Kinesis returns sequence numbers as decimal text of 1 to 129 digits
/// (`SequenceNumber` in the Kinesis API reference: pattern `0|([1-9]\d{0,128})`).
/// Real ones have 56 digits (186 bits), so they do not fit in `u128`; this type
/// orders them numerically — `"9" < "10"`, which plain string comparison
/// gets wrong.
///
/// Parsing accepts exactly the API's pattern: no sign, no whitespace, no leading
/// zeros except the number `0` itself. [`Display`](fmt::Display) writes the same
/// canonical text back, so `parse(s)?.to_string() == s` for every valid `s`.
///
/// The value is its canonical text ([`as_str`](Self::as_str)), checked once
/// where it is read and written out many times (in every line and key)
/// without converting back to decimal. Canonical texts order numerically by
/// length and then byte by byte, and the only arithmetic ranges need — one
/// more, one less, "is one more than" — is done on the digits, so no big
/// integer is built on any path: a record read, compared against written
/// ranges and encoded costs a digit check. [`to_biguint`](Self::to_biguint)
/// gives the integer where one is wanted.
/// [`clone_from`](Clone::clone_from) reuses the buffer, so keeping "the last
/// number seen" up to date allocates nothing.
pub struct SequenceNumber {
    /// Canonical decimal text (validated).
    text: String,
}

impl Clone for SequenceNumber {
    fn clone(&self) -> Self {
        Self {
            text: self.text.clone(),
        }
    }

    fn clone_from(&mut self, source: &Self) {
        self.text.clone_from(&source.text);
    }
}

impl PartialEq for SequenceNumber {
    fn eq(&self, other: &Self) -> bool {
        // Canonical text: equal numbers have equal texts.
        self.text == other.text
    }
}

impl Eq for SequenceNumber {}

impl Hash for SequenceNumber {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl Ord for SequenceNumber {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_canonical(&self.text, &other.text)
    }
}

impl PartialOrd for SequenceNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Numeric order of two canonical decimal texts: the longer is larger; of
/// equal length, byte order is digit order.
fn compare_canonical(a: &str, b: &str) -> Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.as_bytes().cmp(b.as_bytes()))
}

/// Index of the last byte of `digits` that is not `digit`.
fn last_digit_not(digits: &[u8], digit: u8) -> Option<usize> {
    digits.iter().rposition(|&byte| byte != digit)
}

impl SequenceNumber {
    /// Most decimal digits a sequence number may have (Kinesis API reference,
    /// `SequenceNumber` pattern `0|([1-9]\d{0,128})`).
    pub const MAX_DIGITS: usize = 129;

    /// Parses the decimal text Kinesis returns.
    ///
    /// # Errors
    /// [`ParseSequenceNumberError`] naming the input when it is empty, longer
    /// than [`Self::MAX_DIGITS`], holds a byte other than `0`–`9`, or has a
    /// leading zero.
    pub fn parse(text: &str) -> Result<Self, ParseSequenceNumberError> {
        Self::try_from(text.to_owned())
    }

    /// The canonical decimal text, as Kinesis writes it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Checks that `text` is a canonical sequence number without building the
    /// integer: the cheap check for the per-record path, where the number is
    /// only compared ([`cmp_text`](Self::cmp_text)) and written out.
    ///
    /// # Errors
    /// As [`parse`](Self::parse).
    pub fn validate_text(text: &str) -> Result<(), ParseSequenceNumberError> {
        validate_digits(text)
    }

    /// Compares two texts that passed [`validate_text`](Self::validate_text)
    /// numerically, without parsing: canonical decimals order by length, then
    /// byte by byte.
    pub fn cmp_text(a: &str, b: &str) -> std::cmp::Ordering {
        debug_assert!(validate_digits(a).is_ok() && validate_digits(b).is_ok());
        compare_canonical(a, b)
    }

    /// The number 0, the smallest sequence number.
    pub fn zero() -> Self {
        Self {
            text: "0".to_owned(),
        }
    }

    /// The integer value.
    pub fn to_biguint(&self) -> BigUint {
        // 19 digits at a time (the most a `u64` holds); every byte is an
        // ASCII digit (checked at construction), so this cannot fail.
        self.text
            .as_bytes()
            .chunks(19)
            .fold(BigUint::ZERO, |value, chunk| {
                let (scale, part) = chunk.iter().fold((1u64, 0u64), |(scale, part), digit| {
                    (scale * 10, part * 10 + u64::from(digit - b'0'))
                });
                value * scale + part
            })
    }

    /// `self + 1`: the smallest sequence number greater than `self`. Kinesis
    /// does not hand out consecutive numbers, so this is interval arithmetic,
    /// not "the next record".
    pub fn successor(&self) -> Self {
        let digits = self.text.as_bytes();
        let mut text = String::with_capacity(digits.len() + 1);
        match last_digit_not(digits, b'9') {
            // 9…9 + 1 = 10…0, one digit longer.
            None => {
                text.push('1');
                text.extend(iter::repeat_n('0', digits.len()));
            }
            Some(i) => {
                text.push_str(&self.text[..i]);
                text.push(char::from(digits[i] + 1));
                text.extend(iter::repeat_n('0', digits.len() - i - 1));
            }
        }
        Self { text }
    }

    /// Whether `self` is `other + 1`, without building the successor:
    /// `other` is `p d 9…9` and `self` is `p (d+1) 0…0`, or `other` is all
    /// nines and `self` is `1 0…0`, one digit longer.
    pub fn follows(&self, other: &Self) -> bool {
        let (digits, before) = (self.text.as_bytes(), other.text.as_bytes());
        match last_digit_not(before, b'9') {
            None => {
                digits.len() == before.len() + 1
                    && digits[0] == b'1'
                    && digits[1..].iter().all(|&digit| digit == b'0')
            }
            Some(i) => {
                digits.len() == before.len()
                    && digits[..i] == before[..i]
                    && digits[i] == before[i] + 1
                    && digits[i + 1..].iter().all(|&digit| digit == b'0')
            }
        }
    }

    /// `self - 1`, or `None` for 0.
    pub fn predecessor(&self) -> Option<Self> {
        let digits = self.text.as_bytes();
        // Canonical and not 0: some digit is not 0.
        let i = last_digit_not(digits, b'0')?;
        let lowered = digits[i] - 1;
        let mut text = String::with_capacity(digits.len());
        // 10…0 - 1 = 9…9, one digit shorter: no leading zero.
        if !(i == 0 && lowered == b'0' && digits.len() > 1) {
            text.push_str(&self.text[..i]);
            text.push(char::from(lowered));
        }
        text.extend(iter::repeat_n('9', digits.len() - i - 1));
        Some(Self { text })
    }

    /// Number of decimal digits in the canonical text (1 for 0).
    pub fn digit_count(&self) -> usize {
        self.text.len()
    }
}

/// `input` cut to [`MAX_INPUT_IN_ERROR`] bytes (at a char boundary, marked
/// with `…`), for error messages.
pub(crate) fn input_for_error(input: &str) -> String {
    if input.len() <= MAX_INPUT_IN_ERROR {
        return input.to_owned();
    }
    let mut end = MAX_INPUT_IN_ERROR;
    while !input.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &input[..end])
}

/// Checks `text` against the API's pattern `0|([1-9]\d{0,128})`.
fn validate_digits(text: &str) -> Result<(), ParseSequenceNumberError> {
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return Err(ParseSequenceNumberError::new(text, ParseErrorKind::Empty));
    }
    if bytes.len() > SequenceNumber::MAX_DIGITS {
        return Err(ParseSequenceNumberError::new(
            text,
            ParseErrorKind::TooLong {
                digits: bytes.len(),
            },
        ));
    }
    if let Some(position) = bytes.iter().position(|byte| !byte.is_ascii_digit()) {
        return Err(ParseSequenceNumberError::new(
            text,
            ParseErrorKind::NotDecimal { position },
        ));
    }
    if bytes.len() > 1 && bytes[0] == b'0' {
        return Err(ParseSequenceNumberError::new(
            text,
            ParseErrorKind::LeadingZero,
        ));
    }
    Ok(())
}

/// Parses text the caller owns (a GetRecords record's `SequenceNumber`),
/// keeping that `String` as the text instead of copying it.
impl TryFrom<String> for SequenceNumber {
    type Error = ParseSequenceNumberError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        validate_digits(&text)?;
        Ok(Self { text })
    }
}

impl FromStr for SequenceNumber {
    type Err = ParseSequenceNumberError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for SequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.text)
    }
}

impl fmt::Debug for SequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SequenceNumber({})", self.text)
    }
}

impl From<u64> for SequenceNumber {
    fn from(value: u64) -> Self {
        Self {
            text: value.to_string(),
        }
    }
}

impl From<u128> for SequenceNumber {
    fn from(value: u128) -> Self {
        Self {
            text: value.to_string(),
        }
    }
}

impl From<BigUint> for SequenceNumber {
    fn from(value: BigUint) -> Self {
        Self {
            text: value.to_str_radix(10),
        }
    }
}

/// Why a text is not a sequence number; see [`ParseSequenceNumberError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseErrorKind {
    /// The text is empty.
    Empty,
    /// The text has more than [`SequenceNumber::MAX_DIGITS`] digits.
    TooLong {
        /// Length of the text in bytes.
        digits: usize,
    },
    /// The byte at `position` (0-based) is not an ASCII digit.
    NotDecimal {
        /// Offset of the first offending byte.
        position: usize,
    },
    /// The text has more than one digit and starts with `0`.
    LeadingZero,
}

impl fmt::Display for ParseErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("it is empty"),
            Self::TooLong { digits } => write!(
                f,
                "it has {digits} digits, more than the {} Kinesis allows",
                SequenceNumber::MAX_DIGITS
            ),
            Self::NotDecimal { position } => write!(f, "byte {position} is not a decimal digit"),
            Self::LeadingZero => f.write_str("it has a leading zero"),
        }
    }
}

/// A text that is not a valid Kinesis sequence number.
///
/// Carries the offending input (cut to 160 bytes) so a log line names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid sequence number {input:?}: {kind}")]
pub struct ParseSequenceNumberError {
    input: String,
    kind: ParseErrorKind,
}

impl ParseSequenceNumberError {
    fn new(input: &str, kind: ParseErrorKind) -> Self {
        Self {
            input: input_for_error(input),
            kind,
        }
    }

    /// The rejected input, cut to 160 bytes (with `…`) when longer.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// Why it was rejected.
    pub fn kind(&self) -> ParseErrorKind {
        self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real sequence number from Kinesis (56 digits, 186 bits).
    const REAL: &str = "49590338271490256608559692538361571095921575989136588898";

    #[test]
    fn parses_and_displays_real_sequence_number() {
        let n = SequenceNumber::parse(REAL).unwrap();
        assert_eq!(n.to_string(), REAL);
        assert_eq!(n.digit_count(), 56);
        assert!(n.to_biguint().bits() > 128, "must not fit in u128");
    }

    #[test]
    fn orders_numerically_not_lexically() {
        let nine = SequenceNumber::parse("9").unwrap();
        let ten = SequenceNumber::parse("10").unwrap();
        assert!(nine < ten);
        assert!("9" > "10", "the string order this type exists to avoid");
    }

    #[test]
    fn accepts_zero_and_max_length() {
        assert_eq!(SequenceNumber::parse("0").unwrap(), SequenceNumber::zero());
        let max = "9".repeat(SequenceNumber::MAX_DIGITS);
        assert_eq!(SequenceNumber::parse(&max).unwrap().to_string(), max);
    }

    #[test]
    fn rejects_invalid_text_with_typed_errors() {
        let cases: [(&str, ParseErrorKind); 7] = [
            ("", ParseErrorKind::Empty),
            ("-1", ParseErrorKind::NotDecimal { position: 0 }),
            ("+1", ParseErrorKind::NotDecimal { position: 0 }),
            (" 1", ParseErrorKind::NotDecimal { position: 0 }),
            ("12a", ParseErrorKind::NotDecimal { position: 2 }),
            ("007", ParseErrorKind::LeadingZero),
            ("١٢", ParseErrorKind::NotDecimal { position: 0 }),
        ];
        for (input, kind) in cases {
            let err = SequenceNumber::parse(input).unwrap_err();
            assert_eq!(err.kind(), kind, "input {input:?}");
            assert_eq!(err.input(), input);
        }
        let long = "1".repeat(SequenceNumber::MAX_DIGITS + 1);
        let err = SequenceNumber::parse(&long).unwrap_err();
        assert_eq!(err.kind(), ParseErrorKind::TooLong { digits: 130 });
        assert_eq!(err.input(), long, "130 bytes fit in an error message");
        let huge = "7".repeat(1_000);
        let err = SequenceNumber::parse(&huge).unwrap_err();
        assert_eq!(
            err.input(),
            format!("{}…", &huge[..160]),
            "long input is cut"
        );
    }

    #[test]
    fn error_message_names_the_input() {
        let err = SequenceNumber::parse("12x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid sequence number \"12x\": byte 2 is not a decimal digit"
        );
    }

    #[test]
    fn successor_and_predecessor() {
        let n = SequenceNumber::parse("99").unwrap();
        assert_eq!(n.successor().to_string(), "100");
        assert_eq!(n.predecessor().unwrap().to_string(), "98");
        assert_eq!(SequenceNumber::zero().predecessor(), None);
    }

    proptest::proptest! {
        #[test]
        fn display_round_trips(value in proptest::num::u128::ANY) {
            let text = value.to_string();
            let parsed = SequenceNumber::parse(&text).unwrap();
            proptest::prop_assert_eq!(parsed.to_string(), text);
            proptest::prop_assert_eq!(parsed, SequenceNumber::from(value));
        }

        #[test]
        fn order_matches_integer_order(a in proptest::num::u128::ANY, b in proptest::num::u128::ANY) {
            let (ta, tb) = (a.to_string(), b.to_string());
            let (sa, sb) = (SequenceNumber::parse(&ta).unwrap(), SequenceNumber::parse(&tb).unwrap());
            proptest::prop_assert_eq!(sa.cmp(&sb), a.cmp(&b));
            proptest::prop_assert_eq!(sa == sb, a == b);
            proptest::prop_assert_eq!(SequenceNumber::cmp_text(&ta, &tb), a.cmp(&b));
        }

        #[test]
        fn the_integer_is_the_text_s_value(text in "0|[1-9][0-9]{0,128}") {
            let n = SequenceNumber::parse(&text).unwrap();
            let expected = BigUint::parse_bytes(text.as_bytes(), 10).unwrap();
            proptest::prop_assert_eq!(n.to_biguint(), expected.clone());
            let next = n.successor();
            proptest::prop_assert_eq!(next.to_biguint(), &expected + 1u32);
            proptest::prop_assert!(next.follows(&n));
            proptest::prop_assert!(!n.follows(&next) && !n.follows(&n));
            proptest::prop_assert_eq!(next.predecessor(), Some(n.clone()));
            match n.predecessor() {
                Some(before) => {
                    proptest::prop_assert_eq!(before.to_biguint(), expected - 1u32);
                    proptest::prop_assert!(n.follows(&before));
                }
                None => proptest::prop_assert_eq!(text, "0"),
            }
        }

        #[test]
        fn follows_only_the_number_one_less(a in "0|[1-9][0-9]{0,60}", b in "0|[1-9][0-9]{0,60}") {
            let (sa, sb) = (SequenceNumber::parse(&a).unwrap(), SequenceNumber::parse(&b).unwrap());
            let (ia, ib) = (sa.to_biguint(), sb.to_biguint());
            proptest::prop_assert_eq!(sa.follows(&sb), ia == ib + 1u32);
        }

        #[test]
        fn long_numbers_order_as_integers(a in "[1-9][0-9]{40,70}", b in "[1-9][0-9]{40,70}") {
            let (sa, sb) = (SequenceNumber::parse(&a).unwrap(), SequenceNumber::parse(&b).unwrap());
            let (ia, ib) = (sa.to_biguint(), sb.to_biguint());
            proptest::prop_assert_eq!(sa.cmp(&sb), ia.cmp(&ib));
        }

        #[test]
        fn never_panics_on_arbitrary_text(text in ".{0,140}") {
            let _ = SequenceNumber::parse(&text);
        }
    }

    #[test]
    fn keeps_its_text_and_knows_its_neighbours() {
        let text = "49590338271490256608559692538361571095921575989136588898";
        let n = SequenceNumber::parse(text).unwrap();
        assert_eq!(n.as_str(), text);
        assert_eq!(n.digit_count(), 56);
        let next = n.successor();
        assert_eq!(
            next.as_str(),
            "49590338271490256608559692538361571095921575989136588899"
        );
        assert!(next.follows(&n));
        assert!(!n.follows(&n) && !n.follows(&next));
        assert_eq!(SequenceNumber::from(10u64).as_str(), "10");
        let mut last = SequenceNumber::from(9u64);
        last.clone_from(&n);
        assert_eq!((last.as_str(), &last), (text, &n));
        last.clone_from(&SequenceNumber::from(7u64));
        assert_eq!(last.to_biguint(), BigUint::from(7u64));
    }
}
