//! A payload decoded into a schema's typed cells: one JSON object whose
//! members named by the schema are checked against their column's type and
//! converted, or a [`Rejection`] saying why the payload does not fit.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::output::format::schema::{ColumnType, ParquetSchema, SchemaColumn};
use crate::output::view::{RejectReason, Rejection};

/// Days from 0001-01-01 (day 1 of the common era) to 1970-01-01.
const UNIX_EPOCH_DAYS_FROM_CE: i32 = 719_163;

/// How much of a text value a rejection message quotes, in characters.
pub(super) const EXCERPT_CHARS: usize = 40;

/// One schema column's value of one row, checked and converted.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Cell<'a> {
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
    /// `date`: days since 1970-01-01.
    Date(i32),
}

/// The schema's cells of a payload, one per schema column.
pub(super) fn parse_row<'d>(
    schema: &ParquetSchema,
    data: &'d [u8],
) -> Result<Vec<Cell<'d>>, Rejection> {
    let text = std::str::from_utf8(data).map_err(|err| {
        Rejection::new(
            RejectReason::NotUtf8,
            format!("payload is not UTF-8: {err}"),
        )
    })?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let row = RowSeed { schema }
        .deserialize(&mut deserializer)
        .and_then(|row| deserializer.end().map(|()| row));
    match row {
        Err(err) => Err(Rejection::new(
            RejectReason::NotJsonObject,
            format!("payload is not a JSON object: {err}"),
        )),
        Ok(Err((index, mismatch))) => Err(Rejection::new(
            RejectReason::SchemaMismatch,
            match schema.columns().get(index) {
                Some(column) => mismatch.message(column),
                None => mismatch.found,
            },
        )),
        Ok(Ok(cells)) => Ok(cells),
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

    /// `field "user_id" is a string, not int64`.
    fn message(&self, column: &SchemaColumn) -> String {
        let name = &column.name;
        let found = &self.found;
        let column_type = column.column_type;
        if self.out_of_range {
            return format!("field {name:?} is {found}, out of {column_type}'s range");
        }
        let expected = match column_type {
            ColumnType::Timestamp => "timestamp (RFC 3339 text or integer epoch milliseconds)",
            ColumnType::Date => "date (YYYY-MM-DD)",
            other => other.name(),
        };
        format!("field {name:?} is {found}, not {expected}")
    }
}

/// The top-level object of a payload: its cells, or the first member that
/// does not fit (its column index). Members the schema does not name are
/// skipped unread; a member given twice counts as its last value, each
/// value having to fit.
struct RowSeed<'s> {
    schema: &'s ParquetSchema,
}

type RowResult<'de> = Result<Vec<Cell<'de>>, (usize, Mismatch)>;

impl<'de> DeserializeSeed<'de> for RowSeed<'_> {
    type Value = RowResult<'de>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RowSeed<'_> {
    type Value = RowResult<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let columns = self.schema.columns();
        let mut cells = vec![Cell::Null; columns.len()];
        // Reported only once the whole payload has parsed: invalid JSON
        // later on makes it `NotJsonObject` instead.
        let mut mismatch = None;
        while let Some(Text(key)) = map.next_key()? {
            let Some((index, column)) = self
                .schema
                .column_index(&key)
                .and_then(|index| Some((index, columns.get(index)?)))
            else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            // The value's JSON text, validated but not yet converted.
            let raw: &'de RawValue = map.next_value()?;
            match (cell(column.column_type, raw.get()), cells.get_mut(index)) {
                (Ok(cell), Some(slot)) => *slot = cell,
                (Err(found), _) => {
                    mismatch.get_or_insert((index, found));
                }
                (Ok(_), None) => {}
            }
        }
        Ok(match mismatch {
            Some(mismatch) => Err(mismatch),
            None => Ok(cells),
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
/// whitespace), as a cell of a column of `column_type`. Numbers are
/// converted from their text, so floats are correctly rounded and integers
/// exact.
fn cell(column_type: ColumnType, raw: &str) -> Result<Cell<'_>, Mismatch> {
    match raw.as_bytes().first() {
        Some(b'n') => Ok(Cell::Null),
        _ if column_type == ColumnType::Json => Ok(Cell::Text(compact_json(raw))),
        Some(b't') => boolean(column_type, true),
        Some(b'f') => boolean(column_type, false),
        Some(b'"') => string(column_type, raw),
        Some(b'[') => Err(Mismatch::not("an array")),
        Some(b'{') => Err(Mismatch::not("an object")),
        _ => number(column_type, raw),
    }
}

fn boolean<'a>(column_type: ColumnType, value: bool) -> Result<Cell<'a>, Mismatch> {
    match column_type {
        ColumnType::Boolean => Ok(Cell::Bool(value)),
        _ => Err(Mismatch::not("a boolean")),
    }
}

/// `raw`: a JSON string.
fn string(column_type: ColumnType, raw: &str) -> Result<Cell<'_>, Mismatch> {
    if !matches!(
        column_type,
        ColumnType::String | ColumnType::Timestamp | ColumnType::Date
    ) {
        return Err(Mismatch::not("a string"));
    }
    let Ok(Text(text)) = serde_json::from_str::<Text<'_>>(raw) else {
        // Cannot happen: `raw` was read as JSON.
        return Err(Mismatch::not("a string"));
    };
    let unparsed = |text: &str| Mismatch::not(format!("the string {:?}", cut(text)));
    match column_type {
        ColumnType::Timestamp => chrono::DateTime::parse_from_rfc3339(&text)
            .map(|at| Cell::TimestampMillis(at.timestamp_millis()))
            .map_err(|_| unparsed(&text)),
        ColumnType::Date => parse_date(&text)
            .map(Cell::Date)
            .ok_or_else(|| unparsed(&text)),
        _ => Ok(Cell::Text(text)),
    }
}

/// `raw`: a JSON number.
fn number(column_type: ColumnType, raw: &str) -> Result<Cell<'_>, Mismatch> {
    let found = || format!("the number {}", cut(raw));
    // JSON text without fraction or exponent.
    let integer = !raw.contains(['.', 'e', 'E']);
    let result = match column_type {
        ColumnType::Int32 if integer => raw.parse().map(Cell::Int32).ok(),
        ColumnType::Int64 if integer => raw.parse().map(Cell::Int64).ok(),
        ColumnType::Timestamp if integer => raw.parse().map(Cell::TimestampMillis).ok(),
        ColumnType::Float32 => raw
            .parse::<f32>()
            .ok()
            .filter(|value| value.is_finite())
            .map(Cell::Float32),
        ColumnType::Float64 => raw
            .parse::<f64>()
            .ok()
            .filter(|value| value.is_finite())
            .map(Cell::Float64),
        _ => return Err(Mismatch::not(found())),
    };
    // The right kind of number, but too large for the type.
    result.ok_or_else(|| Mismatch::out_of_range(found()))
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
