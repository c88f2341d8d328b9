//! [`ParquetSchema`]: which fields of a JSON payload become typed Parquet
//! columns — the role a Glue table plays for Firehose's record format
//! conversion.
//!
//! # File format
//! A JSON array of columns, each an object with exactly two members, `name`
//! (the payload member, and the column's name) and `type`:
//!
//! ```json
//! [
//!   {"name": "user_id", "type": "int64"},
//!   {"name": "event", "type": "string"},
//!   {"name": "at", "type": "timestamp"}
//! ]
//! ```
//!
//! # Types
//! | `type`      | JSON value accepted                                   | Parquet column (Arrow type)            |
//! |-------------|-------------------------------------------------------|----------------------------------------|
//! | `string`    | a string                                              | `BYTE_ARRAY` `STRING` (Utf8)           |
//! | `boolean`   | `true` or `false`                                     | `BOOLEAN` (Boolean)                    |
//! | `int32`     | an integer in range (no fraction, no exponent)        | `INT32` (Int32)                        |
//! | `int64`     | an integer in range (no fraction, no exponent)        | `INT64` (Int64)                        |
//! | `float32`   | a number within `f32`'s range, rounded to nearest     | `FLOAT` (Float32)                      |
//! | `float64`   | a number within `f64`'s range, rounded to nearest     | `DOUBLE` (Float64)                     |
//! | `timestamp` | RFC 3339 text with any offset, or integer epoch ms    | `INT64` `TIMESTAMP(MILLIS, UTC)`       |
//! | `date`      | `YYYY-MM-DD` text                                     | `INT32` `DATE` (Date32)                |
//! | `json`      | any value                                             | `BYTE_ARRAY` `STRING`: its compact JSON text |
//!
//! So `1.5` or `"1"` is not an `int64`; `1.0` and `1e3` are not either (JSON
//! text with a fraction or exponent). A timestamp finer than a millisecond is
//! truncated to the millisecond before it; its offset is applied, so the
//! column holds UTC instants. A `json` value's text is kept as written
//! (member order and numbers included) with the whitespace outside strings
//! removed.
//!
//! Every column is nullable: a missing member or a JSON `null` is a null.
//! Members of the payload that the schema does not name are ignored, as
//! Firehose's record format conversion ignores fields its table lacks.
//!
//! Column names are compared without regard to ASCII case when checking for
//! duplicates and for the metadata columns' names (Athena, Glue and Spark do
//! not tell `userId` from `userid`); payload members are matched to columns
//! exactly.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use md5::{Digest, Md5};
use serde::Serialize;
use serde_json::Value;

/// Column: the shard the record was read from.
pub const SHARD_ID: &str = "shard_id";
/// Column: the Kinesis record's sequence number, decimal text.
pub const SEQUENCE_NUMBER: &str = "sequence_number";
/// Column: the user record's index in its KPL aggregate; null outside KPL.
pub const SUB_SEQUENCE_NUMBER: &str = "sub_sequence_number";
/// Column: the (user) record's partition key.
pub const PARTITION_KEY: &str = "partition_key";
/// Column: `ApproximateArrivalTimestamp`, UTC milliseconds.
pub const APPROXIMATE_ARRIVAL_TIMESTAMP: &str = "approximate_arrival_timestamp";
/// Column: the payload bytes, written when there is no schema.
pub const DATA: &str = "data";
/// The metadata columns, first in every file in this order; a schema column
/// may not take one of these names.
pub const METADATA_COLUMNS: [&str; 5] = [
    SHARD_ID,
    SEQUENCE_NUMBER,
    SUB_SEQUENCE_NUMBER,
    PARTITION_KEY,
    APPROXIMATE_ARRIVAL_TIMESTAMP,
];

/// The type of a schema column: what JSON value it accepts and how it is
/// stored (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// `string`: a JSON string, stored as UTF-8.
    String,
    /// `boolean`: `true` or `false`.
    Boolean,
    /// `int32`: a JSON integer from -2^31 to 2^31-1.
    Int32,
    /// `int64`: a JSON integer from -2^63 to 2^63-1.
    Int64,
    /// `float32`: a JSON number, rounded to the nearest 32-bit float; one
    /// beyond its range is a mismatch.
    Float32,
    /// `float64`: a JSON number, rounded to the nearest 64-bit float; one
    /// beyond its range is a mismatch.
    Float64,
    /// `timestamp`: RFC 3339 text with any offset, or an integer of
    /// milliseconds since the Unix epoch; stored as UTC milliseconds.
    Timestamp,
    /// `date`: `YYYY-MM-DD` text; stored as days since 1970-01-01.
    Date,
    /// `json`: any JSON value, stored as its compact JSON text.
    Json,
}

impl ColumnType {
    /// Every type, in the order the documentation lists them.
    pub const ALL: [Self; 9] = [
        Self::String,
        Self::Boolean,
        Self::Int32,
        Self::Int64,
        Self::Float32,
        Self::Float64,
        Self::Timestamp,
        Self::Date,
        Self::Json,
    ];

    /// The name used in a schema file (`"int64"`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Boolean => "boolean",
            Self::Int32 => "int32",
            Self::Int64 => "int64",
            Self::Float32 => "float32",
            Self::Float64 => "float64",
            Self::Timestamp => "timestamp",
            Self::Date => "date",
            Self::Json => "json",
        }
    }

    /// The type a schema file's name stands for (exact, lower case), or
    /// `None`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|ty| ty.name() == name)
    }
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One column of a [`ParquetSchema`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaColumn {
    /// The payload member read, and the column's name.
    pub name: String,
    /// What the member must hold.
    pub column_type: ColumnType,
}

impl SchemaColumn {
    /// A column named `name` of type `column_type`.
    pub fn new(name: impl Into<String>, column_type: ColumnType) -> Self {
        Self {
            name: name.into(),
            column_type,
        }
    }
}

/// The typed columns written from each JSON payload instead of the raw
/// `data` column: at least one, with distinct names, none a metadata
/// column's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParquetSchema {
    columns: Vec<SchemaColumn>,
    /// Column index by exact name.
    by_name: BTreeMap<String, usize>,
}

impl ParquetSchema {
    /// A schema of `columns`, in that order.
    ///
    /// # Errors
    /// A sentence naming the problem: no columns, an empty name, a name
    /// given twice (ignoring ASCII case), or a metadata column's name.
    pub fn new(columns: Vec<SchemaColumn>) -> Result<Self, String> {
        if columns.is_empty() {
            return Err("the schema has no columns".to_owned());
        }
        let mut folded: BTreeMap<String, &str> = BTreeMap::new();
        for (i, column) in columns.iter().enumerate() {
            let name = column.name.as_str();
            if name.is_empty() {
                return Err(format!("column {} of the schema has an empty name", i + 1));
            }
            if let Some(metadata) = METADATA_COLUMNS
                .iter()
                .find(|metadata| metadata.eq_ignore_ascii_case(name))
            {
                return Err(format!(
                    "column {name:?} of the schema takes the name of the metadata column \
                     {metadata:?} (the metadata columns, always written, are {})",
                    METADATA_COLUMNS.join(", ")
                ));
            }
            if let Some(previous) = folded.insert(name.to_ascii_lowercase(), name) {
                return Err(if previous == name {
                    format!("column {name:?} appears twice in the schema")
                } else {
                    format!(
                        "columns {previous:?} and {name:?} of the schema differ only in case, \
                         which Athena, Glue and Spark cannot tell apart"
                    )
                });
            }
        }
        let by_name = columns
            .iter()
            .enumerate()
            .map(|(i, column)| (column.name.clone(), i))
            .collect();
        Ok(Self { columns, by_name })
    }

    /// Parses a schema file's text: a JSON array of
    /// `{"name": "...", "type": "..."}` objects (see the module
    /// documentation).
    ///
    /// # Errors
    /// A sentence naming the problem: not JSON, not an array, a column that
    /// is not an object of a string `name` and a string `type` (no other
    /// member), an unknown type (the sentence lists the types), or any
    /// error of [`new`](Self::new).
    pub fn from_json(text: &str) -> Result<Self, String> {
        let value: Value =
            serde_json::from_str(text).map_err(|err| format!("the schema is not JSON: {err}"))?;
        let Value::Array(items) = value else {
            return Err(format!(
                "the schema is {}, not a JSON array of columns like \
                 [{{\"name\": \"user_id\", \"type\": \"int64\"}}]",
                json_kind(&value)
            ));
        };
        let columns = items
            .iter()
            .enumerate()
            .map(|(i, item)| parse_column(i + 1, item))
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(columns)
    }

    /// Reads and parses the schema file at `path` (see
    /// [`from_json`](Self::from_json)).
    ///
    /// # Errors
    /// A sentence starting with the path: the file cannot be read, or what
    /// [`from_json`](Self::from_json) found wrong.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| format!("cannot read the Parquet schema {}: {err}", path.display()))?;
        Self::from_json(&text).map_err(|err| format!("{}: {err}", path.display()))
    }

    /// The columns, in schema (and file) order.
    pub fn columns(&self) -> &[SchemaColumn] {
        &self.columns
    }

    /// The index in [`columns`](Self::columns) of the column named exactly
    /// `name`.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The schema as compact JSON with members in a fixed order, e.g.
    /// `[{"name":"user_id","type":"int64"}]`: the same for every file that
    /// parses to this schema, whatever its whitespace or member order.
    pub fn canonical_json(&self) -> String {
        #[derive(Serialize)]
        struct Column<'a> {
            name: &'a str,
            #[serde(rename = "type")]
            column_type: &'static str,
        }
        let columns: Vec<Column<'_>> = self
            .columns
            .iter()
            .map(|column| Column {
                name: &column.name,
                column_type: column.column_type.name(),
            })
            .collect();
        // Serializing strings and a derived struct cannot fail.
        serde_json::to_string(&columns).unwrap_or_default()
    }

    /// MD5 of [`canonical_json`](Self::canonical_json) as 32 lower-case hex
    /// digits: two schemas have the same fingerprint exactly when they have
    /// the same columns in the same order.
    pub fn fingerprint(&self) -> String {
        Md5::digest(self.canonical_json().as_bytes())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }
}

/// The `position`th (1-based) column of a schema file.
fn parse_column(position: usize, item: &Value) -> Result<SchemaColumn, String> {
    let Value::Object(members) = item else {
        return Err(format!(
            "column {position} of the schema is {}, not an object like \
             {{\"name\": \"user_id\", \"type\": \"int64\"}}",
            json_kind(item)
        ));
    };
    let Some(Value::String(name)) = members.get("name") else {
        return Err(format!(
            "column {position} of the schema has no \"name\" string"
        ));
    };
    if let Some(other) = members.keys().find(|key| *key != "name" && *key != "type") {
        return Err(format!(
            "column {name:?} of the schema has an unknown member {other:?} \
             (a column has only \"name\" and \"type\")"
        ));
    }
    let Some(Value::String(type_name)) = members.get("type") else {
        return Err(format!(
            "column {name:?} of the schema has no \"type\" string"
        ));
    };
    let column_type = ColumnType::from_name(type_name).ok_or_else(|| {
        let types: Vec<&str> = ColumnType::ALL.iter().map(|ty| ty.name()).collect();
        format!(
            "unknown type {type_name:?} for column {name:?}; the types are {}",
            types.join(", ")
        )
    })?;
    Ok(SchemaColumn::new(name.clone(), column_type))
}

/// "a string", "an array", …: what a JSON value is, for messages.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"[{"name": "user_id", "type": "int64"}, {"name": "event", "type": "string"}, {"name": "at", "type": "timestamp"}]"#;

    #[test]
    fn the_documented_example_parses_in_order() {
        let schema = ParquetSchema::from_json(EXAMPLE).unwrap();
        assert_eq!(
            schema.columns(),
            &[
                SchemaColumn::new("user_id", ColumnType::Int64),
                SchemaColumn::new("event", ColumnType::String),
                SchemaColumn::new("at", ColumnType::Timestamp),
            ]
        );
        assert_eq!(schema.column_index("event"), Some(1));
        assert_eq!(schema.column_index("Event"), None, "members match exactly");
        assert_eq!(
            schema.canonical_json(),
            r#"[{"name":"user_id","type":"int64"},{"name":"event","type":"string"},{"name":"at","type":"timestamp"}]"#
        );
    }

    #[test]
    fn every_type_name_parses() {
        let text = serde_json::to_string(
            &ColumnType::ALL
                .iter()
                .map(|ty| serde_json::json!({"type": ty.name(), "name": format!("c_{ty}")}))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let schema = ParquetSchema::from_json(&text).unwrap();
        let types: Vec<ColumnType> = schema.columns().iter().map(|c| c.column_type).collect();
        assert_eq!(types, ColumnType::ALL);
        for ty in ColumnType::ALL {
            assert_eq!(ColumnType::from_name(ty.name()), Some(ty));
        }
        assert_eq!(ColumnType::from_name("Int64"), None);
    }

    #[test]
    fn the_fingerprint_ignores_layout_but_not_columns() {
        let compact = ParquetSchema::from_json(EXAMPLE).unwrap();
        let pretty = ParquetSchema::from_json(
            "[\n  {\"type\": \"int64\", \"name\": \"user_id\"},\n  {\"name\": \"event\", \"type\": \"string\"},\n  {\"name\": \"at\", \"type\": \"timestamp\"}\n]\n",
        )
        .unwrap();
        assert_eq!(compact, pretty);
        assert_eq!(compact.fingerprint(), pretty.fingerprint());
        assert_eq!(compact.fingerprint().len(), 32);
        assert!(
            compact
                .fingerprint()
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        // MD5 of the canonical text, computed independently (`md5sum`).
        let one = ParquetSchema::from_json(r#"[ { "type" : "json", "name" : "a" } ]"#).unwrap();
        assert_eq!(one.canonical_json(), r#"[{"name":"a","type":"json"}]"#);
        assert_eq!(one.fingerprint(), "7a19ebd7f0f618f83c6277ed15ea72bd");
        for other in [
            r#"[{"name": "user_id", "type": "int32"}, {"name": "event", "type": "string"}, {"name": "at", "type": "timestamp"}]"#,
            r#"[{"name": "event", "type": "string"}, {"name": "user_id", "type": "int64"}, {"name": "at", "type": "timestamp"}]"#,
            r#"[{"name": "user_id", "type": "int64"}, {"name": "event", "type": "string"}]"#,
        ] {
            let other = ParquetSchema::from_json(other).unwrap();
            assert_ne!(other.fingerprint(), compact.fingerprint(), "{other:?}");
        }
    }

    fn error(text: &str) -> String {
        ParquetSchema::from_json(text).unwrap_err()
    }

    #[test]
    fn bad_files_are_one_sentence_naming_the_problem() {
        for (text, expected) in [
            ("{", "the schema is not JSON: "),
            ("", "the schema is not JSON: "),
            (
                r#"{"name": "a", "type": "int64"}"#,
                "the schema is an object, not a JSON array",
            ),
            ("[]", "the schema has no columns"),
            (
                r#"[{"name": "a", "type": "int64"}, 3]"#,
                "column 2 of the schema is a number, not an object",
            ),
            (
                r#"[{"type": "int64"}]"#,
                "column 1 of the schema has no \"name\" string",
            ),
            (
                r#"[{"name": 7, "type": "int64"}]"#,
                "column 1 of the schema has no \"name\" string",
            ),
            (
                r#"[{"name": "a"}]"#,
                "column \"a\" of the schema has no \"type\" string",
            ),
            (
                r#"[{"name": "a", "type": null}]"#,
                "column \"a\" of the schema has no \"type\" string",
            ),
            (
                r#"[{"name": "a", "type": "int64", "nullable": false}]"#,
                "column \"a\" of the schema has an unknown member \"nullable\"",
            ),
            (
                r#"[{"name": "y", "type": "x"}]"#,
                "unknown type \"x\" for column \"y\"; the types are string, boolean, int32, int64, float32, float64, timestamp, date, json",
            ),
            (
                r#"[{"name": "a", "type": "int64"}, {"name": "", "type": "string"}]"#,
                "column 2 of the schema has an empty name",
            ),
            (
                r#"[{"name": "a", "type": "int64"}, {"name": "a", "type": "string"}]"#,
                "column \"a\" appears twice in the schema",
            ),
            (
                r#"[{"name": "userId", "type": "int64"}, {"name": "userid", "type": "string"}]"#,
                "columns \"userId\" and \"userid\" of the schema differ only in case",
            ),
            (
                r#"[{"name": "sequence_number", "type": "string"}]"#,
                "column \"sequence_number\" of the schema takes the name of the metadata column \"sequence_number\"",
            ),
            (
                r#"[{"name": "Shard_ID", "type": "string"}]"#,
                "column \"Shard_ID\" of the schema takes the name of the metadata column \"shard_id\"",
            ),
        ] {
            let message = error(text);
            assert!(message.starts_with(expected), "{text}: {message}");
            assert!(!message.contains('\n'), "{message}");
        }
        // Every metadata column is reserved; `data` is not (no `data` column
        // is written with a schema).
        for name in METADATA_COLUMNS {
            let text = format!(r#"[{{"name": "{name}", "type": "string"}}]"#);
            assert!(error(&text).contains("metadata column"), "{name}");
        }
        assert!(ParquetSchema::from_json(r#"[{"name": "data", "type": "json"}]"#).is_ok());
    }

    #[test]
    fn load_reads_the_file_and_names_it_in_errors() {
        let dir =
            std::env::temp_dir().join(format!("shardsink-schema-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.json");
        std::fs::write(&good, EXAMPLE).unwrap();
        assert_eq!(
            ParquetSchema::load(&good).unwrap(),
            ParquetSchema::from_json(EXAMPLE).unwrap()
        );
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "[]").unwrap();
        let message = ParquetSchema::load(&bad).unwrap_err();
        assert_eq!(
            message,
            format!("{}: the schema has no columns", bad.display())
        );
        let missing = dir.join("missing.json");
        let message = ParquetSchema::load(&missing).unwrap_err();
        assert!(
            message.contains(&missing.display().to_string()),
            "{message}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
