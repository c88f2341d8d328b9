//! A `--parquet-schema` file, read independently of the daemon's code: the
//! typed columns a JSON payload becomes, and the row a payload must become
//! (or why it cannot).

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use arrow_schema::{DataType, TimeUnit};
use chrono::{DateTime, NaiveDate};
use serde_json::{Map, Number, Value};

/// The type of a schema column (`"type"` in the file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// A JSON string.
    String,
    /// `true` or `false`.
    Boolean,
    /// A JSON integer (no fraction, no exponent) in `i32`.
    Int32,
    /// A JSON integer (no fraction, no exponent) in `i64`.
    Int64,
    /// Any JSON number, as the nearest `f32`.
    Float32,
    /// Any JSON number, as the nearest `f64`.
    Float64,
    /// RFC 3339 text or integer epoch milliseconds; UTC milliseconds.
    Timestamp,
    /// `YYYY-MM-DD` text; days since 1970-01-01.
    Date,
    /// Any JSON value, stored as its JSON text.
    Json,
}

impl ColumnType {
    /// The type a schema file names `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "string" => Self::String,
            "boolean" => Self::Boolean,
            "int32" => Self::Int32,
            "int64" => Self::Int64,
            "float32" => Self::Float32,
            "float64" => Self::Float64,
            "timestamp" => Self::Timestamp,
            "date" => Self::Date,
            "json" => Self::Json,
            _ => return None,
        })
    }

    /// The Arrow type a reader must see for the column, from the Parquet
    /// schema alone (no embedded Arrow schema).
    pub fn arrow_type(self) -> DataType {
        match self {
            Self::String | Self::Json => DataType::Utf8,
            Self::Boolean => DataType::Boolean,
            Self::Int32 => DataType::Int32,
            Self::Int64 => DataType::Int64,
            Self::Float32 => DataType::Float32,
            Self::Float64 => DataType::Float64,
            Self::Timestamp => DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            Self::Date => DataType::Date32,
        }
    }
}

/// The columns of a `--parquet-schema` file, in order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ParquetSchema {
    /// (name, type) in file order.
    pub columns: Vec<(String, ColumnType)>,
}

impl ParquetSchema {
    /// Parses a schema file's text:
    /// `[{"name":"user_id","type":"int64"}, …]`.
    ///
    /// # Errors
    /// Not such a list, or an unknown type.
    pub fn parse(text: &str) -> Result<Self> {
        let entries: Vec<Map<String, Value>> =
            serde_json::from_str(text).context("a schema is a JSON list of objects")?;
        let mut columns = Vec::with_capacity(entries.len());
        for entry in entries {
            let (Some(Value::String(name)), Some(Value::String(ty))) =
                (entry.get("name"), entry.get("type"))
            else {
                bail!("schema entry {entry:?} lacks a name or type");
            };
            let ty =
                ColumnType::from_name(ty).with_context(|| format!("unknown column type {ty:?}"))?;
            columns.push((name.clone(), ty));
        }
        Ok(Self { columns })
    }

    /// Reads and parses a schema file.
    ///
    /// # Errors
    /// As [`ParquetSchema::parse`], or the file cannot be read.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("failed to read {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("schema file {}", path.display()))
    }

    /// The row `payload` must become: a JSON object with one member per
    /// column — `null` for a missing or null member; a string, boolean or
    /// number as given; `float32` rounded to `f32`; a `timestamp` as UTC
    /// epoch milliseconds; a `date` as days since 1970-01-01; a `json`
    /// column's value itself.
    ///
    /// # Errors
    /// Why the format must reject the payload: not UTF-8, not one JSON
    /// object, or a member of the wrong type.
    pub fn expected_row(&self, payload: &[u8]) -> Result<Value, String> {
        let text = std::str::from_utf8(payload).map_err(|_| "payload is not UTF-8".to_owned())?;
        let value: Value =
            serde_json::from_str(text).map_err(|e| format!("payload is not JSON: {e}"))?;
        let Value::Object(members) = value else {
            return Err("payload is not a JSON object".to_owned());
        };
        let mut row = Map::new();
        for (name, ty) in &self.columns {
            let cell = match members.get(name) {
                None | Some(Value::Null) => Value::Null,
                Some(value) => {
                    cell(*ty, value).ok_or_else(|| format!("member {name:?} is not a {ty:?}"))?
                }
            };
            row.insert(name.clone(), cell);
        }
        Ok(Value::Object(row))
    }
}

/// The cell a member of type `ty` becomes, or `None` when it has another
/// type.
fn cell(ty: ColumnType, value: &Value) -> Option<Value> {
    Some(match ty {
        ColumnType::String => Value::String(value.as_str()?.to_owned()),
        ColumnType::Boolean => Value::Bool(value.as_bool()?),
        ColumnType::Int32 => Value::from(i32::try_from(value.as_i64()?).ok()?),
        ColumnType::Int64 => Value::from(value.as_i64()?),
        ColumnType::Float32 => {
            let rounded = value.as_f64()? as f32;
            if !rounded.is_finite() {
                return None;
            }
            Value::Number(Number::from_f64(f64::from(rounded))?)
        }
        ColumnType::Float64 => Value::Number(Number::from_f64(value.as_f64()?)?),
        ColumnType::Timestamp => match value {
            Value::String(text) => Value::from(
                DateTime::parse_from_rfc3339(text)
                    .ok()?
                    .to_utc()
                    .timestamp_millis(),
            ),
            _ => Value::from(value.as_i64()?),
        },
        ColumnType::Date => {
            let text = value.as_str()?;
            if text.len() != 10 {
                return None;
            }
            let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
            let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)?;
            Value::from((date - epoch).num_days())
        }
        ColumnType::Json => value.clone(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn rows_of_payloads() {
        let schema = ParquetSchema::parse(
            r#"[{"name":"id","type":"int64"},{"name":"event","type":"string"},
                {"name":"score","type":"float32"},{"name":"at","type":"timestamp"},
                {"name":"day","type":"date"},{"name":"extra","type":"json"},
                {"name":"ok","type":"boolean"}]"#,
        )
        .unwrap();
        assert_eq!(schema.columns.len(), 7);
        assert_eq!(
            schema
                .expected_row(
                    br#"{"id":7,"event":"e","score":0.1,"at":"1970-01-01T00:00:01.5009+00:00",
                         "day":"1970-01-03","extra":[1,{"a":null}],"unused":1}"#
                )
                .unwrap(),
            json!({"id":7,"event":"e","score":f64::from(0.1f32),"at":1500,"day":2,
                   "extra":[1,{"a":null}],"ok":null})
        );
        for bad in [
            &br#"{"id":"7"}"#[..],
            br#"{"id":1.5}"#,
            br#"{"id":1e3}"#,
            br#"{"event":5}"#,
            br#"{"ok":"yes"}"#,
            br#"{"at":"yesterday"}"#,
            br#"{"day":"2026-1-5"}"#,
            b"[1]",
            b"not json",
            b"\xff{}",
        ] {
            assert!(
                schema.expected_row(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(ParquetSchema::parse(r#"[{"name":"x","type":"decimal"}]"#).is_err());
    }
}
