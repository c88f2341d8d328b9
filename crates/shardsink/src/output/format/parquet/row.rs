//! A payload decoded into a schema's typed cells: one JSON object whose
//! members named by the schema are checked against their column's type and
//! converted, or a [`Rejection`] saying why the payload does not fit.
//!
//! Shared by the `parquet` format (a [`ParquetSchema`]) and the `iceberg`
//! format (an Iceberg table's payload columns): each says what its columns
//! are through [`RowColumns`], in terms of [`CellType`].

use std::borrow::Cow;
use std::fmt;

use base64::Engine as _;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::output::format::schema::{ColumnType, ParquetSchema};
use crate::output::view::{RejectReason, Rejection};

/// Days from 0001-01-01 (day 1 of the common era) to 1970-01-01.
const UNIX_EPOCH_DAYS_FROM_CE: i32 = 719_163;

/// How much of a text value a rejection message quotes, in characters.
pub(crate) const EXCERPT_CHARS: usize = 40;

/// Most digits of a decimal column: what an `i128` holds in full (Iceberg
/// `decimal(P,S)` allows P up to 38; spec section "Primitive Types").
pub(crate) const MAX_DECIMAL_PRECISION: u32 = 38;

/// One schema column's value of one row, checked and converted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell<'a> {
    Null,
    Bool(bool),
    Int32(i32),
    Int64(i64),
    Float32(f32),
    Float64(f64),
    /// `string` text, or a `json` value's compact text.
    Text(Cow<'a, str>),
    /// `timestamp`: UTC milliseconds since the epoch.
    TimestampMillis(i64),
    /// A timestamp in UTC microseconds since the epoch.
    TimestampMicros(i64),
    /// `date`: days since 1970-01-01.
    Date(i32),
    /// A decimal's unscaled value (the value times 10^scale).
    Decimal(i128),
    /// Bytes: decoded base64 text, a UUID's 16 bytes, or a payload.
    Bytes(Cow<'a, [u8]>),
}

/// What a JSON member is checked against and converted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CellType {
    /// A JSON string, as [`Cell::Text`].
    String,
    /// `true` or `false`.
    Boolean,
    /// An integer from -2^31 to 2^31-1.
    Int32,
    /// An integer from -2^63 to 2^63-1.
    Int64,
    /// A number, rounded to the nearest 32-bit float.
    Float32,
    /// A number, rounded to the nearest 64-bit float.
    Float64,
    /// RFC 3339 text with any offset, or integer epoch milliseconds, as
    /// [`Cell::TimestampMillis`] (finer digits truncated).
    TimestampMillis,
    /// RFC 3339 text with any offset, or integer epoch milliseconds, as
    /// [`Cell::TimestampMicros`] (finer digits truncated).
    TimestampMicros,
    /// `YYYY-MM-DD` text.
    Date,
    /// Any JSON value, as its compact text.
    Json,
    /// A JSON number or a string holding one, exactly: at most `scale`
    /// digits after the point once trailing zeros are dropped, at most
    /// `precision` digits in all.
    Decimal { precision: u32, scale: u32 },
    /// Base64 text (RFC 4648 section 4, standard alphabet, padded), as
    /// [`Cell::Bytes`].
    Base64,
    /// A UUID's text (`8-4-4-4-12` hex digits, either case), as its 16
    /// bytes in [`Cell::Bytes`].
    Uuid,
}

impl From<ColumnType> for CellType {
    fn from(column_type: ColumnType) -> Self {
        match column_type {
            ColumnType::String => Self::String,
            ColumnType::Boolean => Self::Boolean,
            ColumnType::Int32 => Self::Int32,
            ColumnType::Int64 => Self::Int64,
            ColumnType::Float32 => Self::Float32,
            ColumnType::Float64 => Self::Float64,
            ColumnType::Timestamp => Self::TimestampMillis,
            ColumnType::Date => Self::Date,
            ColumnType::Json => Self::Json,
        }
    }
}

impl CellType {
    /// What a member must hold, for messages: the column's type name
    /// (`type_name`, as its schema spells it) and, where text is parsed,
    /// the accepted form.
    fn expected(self, type_name: &str) -> String {
        match self {
            Self::TimestampMillis | Self::TimestampMicros => {
                format!("{type_name} (RFC 3339 text or integer epoch milliseconds)")
            }
            Self::Date => format!("{type_name} (YYYY-MM-DD)"),
            Self::Decimal { .. } => format!("{type_name} (a number, or a string holding one)"),
            Self::Base64 => format!("{type_name} (base64 text)"),
            Self::Uuid => format!("{type_name} (UUID text)"),
            _ => type_name.to_owned(),
        }
    }
}

/// The columns a payload's members are read into.
pub(crate) trait RowColumns {
    /// How many columns (cells a row has).
    fn len(&self) -> usize;
    /// The index of the column the member named exactly `name` fills.
    fn index_of(&self, name: &str) -> Option<usize>;
    /// The name of the column at `index` (`index < len()`).
    fn name(&self, index: usize) -> &str;
    /// What the column at `index` accepts.
    fn cell_type(&self, index: usize) -> CellType;
    /// The column's type as its schema spells it (`int64`, `long`, …).
    fn type_name(&self, index: usize) -> Cow<'_, str>;
}

impl RowColumns for ParquetSchema {
    fn len(&self) -> usize {
        self.columns().len()
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.column_index(name)
    }

    fn name(&self, index: usize) -> &str {
        self.columns().get(index).map_or("", |column| &column.name)
    }

    fn cell_type(&self, index: usize) -> CellType {
        self.columns()
            .get(index)
            .map_or(CellType::Json, |column| column.column_type.into())
    }

    fn type_name(&self, index: usize) -> Cow<'_, str> {
        Cow::Borrowed(
            self.columns()
                .get(index)
                .map_or("", |column| column.column_type.name()),
        )
    }
}

/// A payload's cells, one per column, and how many of its members no
/// column named.
#[derive(Debug)]
pub(crate) struct Row<'d> {
    pub(crate) cells: Vec<Cell<'d>>,
    pub(crate) ignored_members: u64,
}

/// The cells of a payload, one per column of `columns`.
pub(crate) fn parse_row<'d, C: RowColumns + ?Sized>(
    columns: &C,
    data: &'d [u8],
) -> Result<Row<'d>, Rejection> {
    let text = std::str::from_utf8(data).map_err(|err| {
        Rejection::new(
            RejectReason::NotUtf8,
            format!("payload is not UTF-8: {err}"),
        )
    })?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let row = RowSeed { columns }
        .deserialize(&mut deserializer)
        .and_then(|row| deserializer.end().map(|()| row));
    match row {
        Err(err) => Err(Rejection::new(
            RejectReason::NotJsonObject,
            format!("payload is not a JSON object: {err}"),
        )),
        Ok(Err((index, mismatch))) => Err(Rejection::new(
            RejectReason::SchemaMismatch,
            mismatch.message(columns, index),
        )),
        Ok(Ok(row)) => Ok(row),
    }
}

/// Why a member does not fit its column.
#[derive(Debug)]
struct Mismatch {
    /// What the member holds: "a string", "the number 1.5", …
    found: String,
    /// A number of the right kind, but too large for the type.
    out_of_range: bool,
}

impl Mismatch {
    fn not(found: impl Into<String>) -> Self {
        Self {
            found: found.into(),
            out_of_range: false,
        }
    }

    fn out_of_range(found: String) -> Self {
        Self {
            found,
            out_of_range: true,
        }
    }

    /// `field "user_id" is a string, not int64`, for the column at
    /// `index`.
    fn message<C: RowColumns + ?Sized>(&self, columns: &C, index: usize) -> String {
        let name = columns.name(index);
        let found = &self.found;
        let type_name = columns.type_name(index);
        if self.out_of_range {
            return format!("field {name:?} is {found}, out of {type_name}'s range");
        }
        let expected = columns.cell_type(index).expected(&type_name);
        format!("field {name:?} is {found}, not {expected}")
    }
}

/// The top-level object of a payload: its cells, or the first member that
/// does not fit (its column index). Members the schema does not name are
/// skipped unread; a member given twice counts as its last value, each
/// value having to fit.
struct RowSeed<'s, C: ?Sized> {
    columns: &'s C,
}

type RowResult<'de> = Result<Row<'de>, (usize, Mismatch)>;

impl<'de, C: RowColumns + ?Sized> DeserializeSeed<'de> for RowSeed<'_, C> {
    type Value = RowResult<'de>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, C: RowColumns + ?Sized> Visitor<'de> for RowSeed<'_, C> {
    type Value = RowResult<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let columns = self.columns;
        let mut cells = vec![Cell::Null; columns.len()];
        let mut ignored_members = 0;
        // Reported only once the whole payload has parsed: invalid JSON
        // later on makes it `NotJsonObject` instead.
        let mut mismatch = None;
        while let Some(Text(key)) = map.next_key()? {
            let Some(index) = columns.index_of(&key).filter(|&index| index < cells.len()) else {
                map.next_value::<IgnoredAny>()?;
                ignored_members += 1;
                continue;
            };
            // The value's JSON text, validated but not yet converted.
            let raw: &'de RawValue = map.next_value()?;
            match (
                cell(columns.cell_type(index), raw.get()),
                cells.get_mut(index),
            ) {
                (Ok(cell), Some(slot)) => *slot = cell,
                (Err(found), _) => {
                    mismatch.get_or_insert((index, found));
                }
                (Ok(_), None) => {}
            }
        }
        Ok(match mismatch {
            Some(mismatch) => Err(mismatch),
            None => Ok(Row {
                cells,
                ignored_members,
            }),
        })
    }
}

/// A JSON string's value (a member name, or a string member), borrowed
/// from the payload when it has no escapes.
struct Text<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Text<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// A member's value, `raw` (valid JSON text without surrounding
/// whitespace), as a cell of a column of `cell_type`. Numbers are
/// converted from their text, so floats are correctly rounded and integers
/// exact.
fn cell(cell_type: CellType, raw: &str) -> Result<Cell<'_>, Mismatch> {
    match raw.as_bytes().first() {
        Some(b'n') => Ok(Cell::Null),
        _ if cell_type == CellType::Json => Ok(Cell::Text(compact_json(raw))),
        Some(b't') => boolean(cell_type, true),
        Some(b'f') => boolean(cell_type, false),
        Some(b'"') => string(cell_type, raw),
        Some(b'[') => Err(Mismatch::not("an array")),
        Some(b'{') => Err(Mismatch::not("an object")),
        _ => number(cell_type, raw),
    }
}

fn boolean<'a>(cell_type: CellType, value: bool) -> Result<Cell<'a>, Mismatch> {
    match cell_type {
        CellType::Boolean => Ok(Cell::Bool(value)),
        _ => Err(Mismatch::not("a boolean")),
    }
}

/// `raw`: a JSON string.
fn string(cell_type: CellType, raw: &str) -> Result<Cell<'_>, Mismatch> {
    if !matches!(
        cell_type,
        CellType::String
            | CellType::TimestampMillis
            | CellType::TimestampMicros
            | CellType::Date
            | CellType::Decimal { .. }
            | CellType::Base64
            | CellType::Uuid
    ) {
        return Err(Mismatch::not("a string"));
    }
    let Ok(Text(text)) = serde_json::from_str::<Text<'_>>(raw) else {
        // Cannot happen: `raw` was read as JSON.
        return Err(Mismatch::not("a string"));
    };
    let unparsed = |text: &str| Mismatch::not(format!("the string {:?}", cut(text)));
    match cell_type {
        CellType::TimestampMillis => chrono::DateTime::parse_from_rfc3339(&text)
            .map(|at| Cell::TimestampMillis(at.timestamp_millis()))
            .map_err(|_| unparsed(&text)),
        CellType::TimestampMicros => chrono::DateTime::parse_from_rfc3339(&text)
            .map(|at| Cell::TimestampMicros(at.timestamp_micros()))
            .map_err(|_| unparsed(&text)),
        CellType::Date => parse_date(&text)
            .map(Cell::Date)
            .ok_or_else(|| unparsed(&text)),
        CellType::Decimal { precision, scale } => match parse_decimal(&text, precision, scale) {
            Some(Ok(unscaled)) => Ok(Cell::Decimal(unscaled)),
            Some(Err(())) => Err(Mismatch::out_of_range(format!(
                "the string {:?}",
                cut(&text)
            ))),
            None => Err(unparsed(&text)),
        },
        CellType::Base64 => base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map(|bytes| Cell::Bytes(Cow::Owned(bytes)))
            .map_err(|_| unparsed(&text)),
        CellType::Uuid => parse_uuid(&text)
            .map(|bytes| Cell::Bytes(Cow::Owned(bytes.to_vec())))
            .ok_or_else(|| unparsed(&text)),
        _ => Ok(Cell::Text(text)),
    }
}

/// `raw`: a JSON number.
fn number(cell_type: CellType, raw: &str) -> Result<Cell<'_>, Mismatch> {
    let found = || format!("the number {}", cut(raw));
    // JSON text without fraction or exponent.
    let integer = !raw.contains(['.', 'e', 'E']);
    let result = match cell_type {
        CellType::Int32 if integer => raw.parse().map(Cell::Int32).ok(),
        CellType::Int64 if integer => raw.parse().map(Cell::Int64).ok(),
        CellType::TimestampMillis if integer => raw.parse().map(Cell::TimestampMillis).ok(),
        CellType::TimestampMicros if integer => raw
            .parse::<i64>()
            .ok()
            .and_then(|millis| millis.checked_mul(1000))
            .map(Cell::TimestampMicros),
        CellType::Float32 => raw
            .parse::<f32>()
            .ok()
            .filter(|value| value.is_finite())
            .map(Cell::Float32),
        CellType::Float64 => raw
            .parse::<f64>()
            .ok()
            .filter(|value| value.is_finite())
            .map(Cell::Float64),
        CellType::Decimal { precision, scale } => parse_decimal(raw, precision, scale)
            .and_then(Result::ok)
            .map(Cell::Decimal),
        _ => return Err(Mismatch::not(found())),
    };
    // The right kind of number, but too large for the type.
    result.ok_or_else(|| Mismatch::out_of_range(found()))
}

/// The unscaled value (times 10^`scale`) of decimal text `text` in JSON
/// number syntax (`-12.5`, `1e3`): `None` when it is not such text,
/// `Some(Err(()))` when it does not fit `decimal(precision, scale)` exactly
/// (a non-zero digit beyond `scale`, or more than `precision` digits).
fn parse_decimal(text: &str, precision: u32, scale: u32) -> Option<Result<i128, ()>> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => {
            let exponent = exponent.strip_prefix('+').unwrap_or(exponent);
            let digits = exponent.strip_prefix('-').unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // An exponent beyond any precision: `None` on overflow too.
            (mantissa, exponent.parse::<i64>().ok()?)
        }
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    if mantissa.contains('.') && fraction.is_empty() {
        return None;
    }
    // The digits, and the power of ten of the last one.
    let digits = whole.bytes().chain(fraction.bytes());
    let last_power = exponent.checked_sub(i64::try_from(fraction.len()).ok()?)?;
    // Digits below 10^-scale must be zeros.
    let shift = last_power.checked_add(i64::from(scale))?;
    let mut unscaled: i128 = 0;
    let mut significant = 0u32;
    let count = whole.len() + fraction.len();
    for (position, digit) in digits.enumerate() {
        let digit = i128::from(digit - b'0');
        // The power of ten of this digit relative to 10^-scale.
        let power = shift + i64::try_from(count - 1 - position).ok()?;
        if power < 0 {
            if digit != 0 {
                return Some(Err(()));
            }
            continue;
        }
        if unscaled == 0 && digit == 0 {
            continue;
        }
        significant += 1;
        if significant > precision.min(MAX_DECIMAL_PRECISION) {
            return Some(Err(()));
        }
        unscaled = unscaled * 10 + digit;
    }
    // Trailing powers of ten of a positive exponent.
    if shift > 0 && unscaled != 0 {
        let zeros = u32::try_from(shift).ok()?;
        if significant + zeros > precision.min(MAX_DECIMAL_PRECISION) {
            return Some(Err(()));
        }
        unscaled *= 10i128.pow(zeros);
    }
    Some(Ok(if negative { -unscaled } else { unscaled }))
}

/// The 16 bytes of UUID text `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (RFC
/// 9562 section 4), hex digits in either case.
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let bytes = text.as_bytes();
    if bytes.len() != 36
        || [8, 13, 18, 23]
            .iter()
            .any(|&at| bytes.get(at) != Some(&b'-'))
    {
        return None;
    }
    let mut hex = bytes.iter().filter(|&&b| b != b'-');
    let mut uuid = [0u8; 16];
    for byte in &mut uuid {
        let high = char::from(*hex.next()?).to_digit(16)?;
        let low = char::from(*hex.next()?).to_digit(16)?;
        *byte = u8::try_from(high * 16 + low).ok()?;
    }
    Some(uuid)
}

/// `raw` (valid JSON) without the whitespace outside strings: the value's
/// compact text, member order and numbers as written.
fn compact_json(raw: &str) -> Cow<'_, str> {
    let is_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r');
    if !raw.contains(is_space) {
        return Cow::Borrowed(raw);
    }
    let mut compact = String::with_capacity(raw.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in raw.chars() {
        if in_string {
            compact.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if !is_space(c) {
            in_string = c == '"';
            compact.push(c);
        }
    }
    Cow::Owned(compact)
}

/// Days since 1970-01-01 of exactly `YYYY-MM-DD` (a real date).
fn parse_date(text: &str) -> Option<i32> {
    let bytes = text.as_bytes();
    if bytes.len() != 10 || bytes.get(4) != Some(&b'-') || bytes.get(7) != Some(&b'-') {
        return None;
    }
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        text.get(range)
            .filter(|part| part.bytes().all(|b| b.is_ascii_digit()))?
            .parse()
            .ok()
    };
    let year = i32::try_from(digits(0..4)?).ok()?;
    let date = chrono::NaiveDate::from_ymd_opt(year, digits(5..7)?, digits(8..10)?)?;
    Some(chrono::Datelike::num_days_from_ce(&date) - UNIX_EPOCH_DAYS_FROM_CE)
}

/// `text` cut to its first [`EXCERPT_CHARS`] characters, with `…` when
/// cut, for messages.
fn cut(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(EXCERPT_CHARS) {
        None => Cow::Borrowed(text),
        Some((end, _)) => Cow::Owned(format!("{}…", &text[..end])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact_or_refused() {
        let ok = |text, precision, scale| parse_decimal(text, precision, scale);
        assert_eq!(ok("12.5", 9, 2), Some(Ok(1250)));
        assert_eq!(ok("-0.05", 9, 2), Some(Ok(-5)));
        assert_eq!(ok("12.500", 4, 2), Some(Ok(1250)));
        assert_eq!(ok("1e2", 5, 2), Some(Ok(10_000)));
        assert_eq!(ok("1.5E-1", 3, 2), Some(Ok(15)));
        assert_eq!(ok("0", 1, 0), Some(Ok(0)));
        assert_eq!(ok("007", 1, 0), Some(Ok(7)));
        // A non-zero digit beyond the scale, or too many digits.
        assert_eq!(ok("1.234", 9, 2), Some(Err(())));
        assert_eq!(ok("100.00", 4, 2), Some(Err(())));
        assert_eq!(ok("1e3", 5, 2), Some(Err(())));
        assert_eq!(ok("1e-400", 9, 2), Some(Err(())));
        assert_eq!(
            ok("99999999999999999999999999999999999999", 38, 0),
            Some(Ok(99_999_999_999_999_999_999_999_999_999_999_999_999))
        );
        assert_eq!(ok("1e38", 38, 0), Some(Err(())));
        // Not decimal text.
        for text in ["", "-", "1.", ".5", "+1", "1e", "0x10", "1.2.3", "NaN"] {
            assert_eq!(ok(text, 9, 2), None, "{text:?}");
        }
    }

    #[test]
    fn uuids_are_their_sixteen_bytes() {
        assert_eq!(
            parse_uuid("00112233-4455-6677-8899-AaBbCcDdEeFf"),
            Some([
                0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
                0xee, 0xff
            ])
        );
        for text in [
            "00112233445566778899aabbccddeeff",
            "00112233-4455-6677-8899-aabbccddeef",
            "0011223-34455-6677-8899-aabbccddeeff",
            "00112233-4455-6677-8899-aabbccddeefg",
        ] {
            assert_eq!(parse_uuid(text), None, "{text:?}");
        }
    }
}
