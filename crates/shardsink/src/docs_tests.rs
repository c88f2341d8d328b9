//! `docs/ATHENA.md` checked against the code: every `CREATE EXTERNAL TABLE`
//! names the columns the code writes — the envelope fields, the `json`
//! format's metadata, the Parquet schema, the error and duplicates lines —
//! in the code's order, the example lines are what the encoder writes, and
//! every `storage.location.template` with its projection maps a record's
//! arrival time to the folder the key module puts its batch in.
//!
//! Names come from the code (an encoded line's keys, the Parquet schema),
//! never from a copied list, so renaming a field in the code or a column in
//! the document fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, Utc};
use sequence_range::{SequenceNumber, SequenceRange};
use serde::de::{Deserializer, MapAccess, Visitor};

use crate::events::rule::CopyRef;
use crate::output::Output;
use crate::output::format::envelope::LineEncoder;
use crate::output::format::parquet::arrow_schema;
use crate::output::format::schema::ParquetSchema;
use crate::output::format::{BodyKind, DEFAULT_METADATA_FIELD};
use crate::output::key::{KeyLayout, object_name};
use crate::read::record::UserRecordView;

const ATHENA: &str = include_str!("../../../docs/ATHENA.md");

const SHARD: &str = "shardId-000000000001";
const SEQUENCE: &str = "49590338271490256608559692538361571095921575989136588898";

/// A JSON object's members in the order they are written.
struct Ordered(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Ordered(members))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

impl Ordered {
    fn parse(line: &[u8]) -> Self {
        serde_json::from_slice(line).unwrap()
    }

    fn names(&self) -> Vec<String> {
        self.0.iter().map(|(name, _)| name.clone()).collect()
    }

    /// The names of the members of the object member `name`.
    fn names_in(&self, name: &str) -> Vec<String> {
        let (_, value) = self.0.iter().find(|(n, _)| n == name).unwrap();
        Self::parse(value.to_string().as_bytes()).names()
    }
}

/// A KPL user record, so that every optional field is written.
fn user(arrival_millis: i64) -> UserRecordView<'static> {
    UserRecordView {
        shard_id: SHARD,
        sequence_number: SEQUENCE,
        sub_sequence_number: Some(3),
        partition_key: "customer-42",
        arrival_millis,
        data: br#"{"order":42}"#,
    }
}

fn accepted_copy() -> CopyRef {
    CopyRef {
        shard_id: SHARD.into(),
        sequence_number: SequenceNumber::parse(SEQUENCE).unwrap(),
        sub_sequence_number: Some(1),
    }
}

/// What the code writes, per kind of line.
struct Written {
    envelope: Ordered,
    error: Ordered,
    duplicate: Ordered,
    metadata: Ordered,
}

fn written() -> Written {
    let mut encoder = LineEncoder::new(SHARD);
    let line = |f: &mut dyn FnMut(&mut Vec<u8>)| {
        let mut out = Vec::new();
        f(&mut out);
        Ordered::parse(&out)
    };
    let at = 1_795_238_823_045;
    Written {
        envelope: line(&mut |out| encoder.encode_line(&user(at), out)),
        error: line(&mut |out| encoder.encode_error(&user(at), "rejected", out)),
        duplicate: line(&mut |out| encoder.encode_duplicate(&user(at), &accepted_copy(), out)),
        metadata: line(&mut |out| encoder.encode_metadata(&user(at), out)),
    }
}

/// A column of a `CREATE EXTERNAL TABLE`, with a struct's field names.
#[derive(Debug)]
struct Column {
    name: String,
    fields: Vec<String>,
}

/// One `sql` block of the document that has a `storage.location.template`:
/// a whole table, or the projection of a layout.
#[derive(Debug)]
struct Block {
    table: Option<String>,
    columns: Vec<Column>,
    location: Option<String>,
    properties: BTreeMap<String, String>,
}

fn sql_blocks(doc: &str) -> Vec<&str> {
    doc.split("```sql\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap())
        .collect()
}

fn unquote(name: &str) -> String {
    name.trim_matches('`').to_owned()
}

/// `'key' = 'value'` → (key, value); the value may hold `=`.
fn property(line: &str) -> Option<(String, String)> {
    let line = line.trim().trim_end_matches(',');
    let rest = line.strip_prefix('\'')?;
    let (key, rest) = rest.split_once('\'')?;
    let value = rest.trim().strip_prefix('=')?.trim();
    let value = value.strip_prefix('\'')?.strip_suffix('\'')?;
    Some((key.to_owned(), value.to_owned()))
}

fn parse_block(sql: &str) -> Block {
    let mut lines = sql
        .lines()
        .skip_while(|l| !l.starts_with("CREATE EXTERNAL TABLE "));
    let mut table = None;
    let mut columns = Vec::new();
    if let Some(head) = lines.next() {
        table = Some(
            head.trim_start_matches("CREATE EXTERNAL TABLE ")
                .trim_end_matches(" (")
                .to_owned(),
        );
        let mut open_struct: Option<Column> = None;
        for line in lines.by_ref() {
            if line == ")" {
                break;
            }
            let line = line.trim().trim_end_matches(',');
            if let Some(column) = open_struct.as_mut() {
                let field = line.trim_end_matches('>');
                column
                    .fields
                    .push(field.split(':').next().unwrap().to_owned());
                if line.ends_with('>') {
                    columns.push(open_struct.take().unwrap());
                }
                continue;
            }
            let mut words = line.split_whitespace();
            let name = unquote(words.next().unwrap());
            let column = Column {
                name,
                fields: Vec::new(),
            };
            if words.next() == Some("struct<") {
                open_struct = Some(column);
            } else {
                columns.push(column);
            }
        }
    }
    let location = sql.lines().find_map(|l| {
        l.strip_prefix("LOCATION '")
            .and_then(|l| l.strip_suffix('\''))
            .map(str::to_owned)
    });
    let properties = sql.lines().filter_map(property).collect();
    Block {
        table,
        columns,
        location,
        properties,
    }
}

fn blocks() -> Vec<Block> {
    sql_blocks(ATHENA)
        .into_iter()
        .filter(|sql| sql.contains("CREATE EXTERNAL TABLE") || sql.contains("TBLPROPERTIES"))
        .map(parse_block)
        .collect()
}

fn names(columns: &[Column]) -> Vec<String> {
    columns.iter().map(|c| c.name.clone()).collect()
}

fn lower(names: Vec<String>) -> Vec<String> {
    names.into_iter().map(|n| n.to_lowercase()).collect()
}

/// The block's table columns, less its struct column `name`, and that
/// column's fields.
fn split_struct(block: &Block, name: &str) -> (Vec<String>, Vec<String>) {
    let column = block.columns.iter().find(|c| c.name == name);
    let column = column.unwrap_or_else(|| panic!("{:?} has no column {name}", block.table));
    let others = block.columns.iter().filter(|c| c.name != name);
    (
        others.map(|c| c.name.clone()).collect(),
        column.fields.clone(),
    )
}

/// The schema file the document's Parquet section shows.
fn documented_schema() -> ParquetSchema {
    let section = ATHENA.split("### With a schema file").nth(1).unwrap();
    let json = section.split("```json\n").nth(1).unwrap();
    ParquetSchema::from_json(json.split("```").next().unwrap()).unwrap()
}

#[test]
fn athena_tables_name_the_columns_the_code_writes() {
    let written = written();
    let mut seen = BTreeSet::new();
    for block in blocks() {
        let Some(table) = &block.table else { continue };
        seen.insert(table.clone());
        let columns = names(&block.columns);
        match table.as_str() {
            "shardsink_orders" => assert_eq!(columns, written.envelope.names(), "{table}"),
            "shardsink_orders_errors" => assert_eq!(columns, written.error.names(), "{table}"),
            "shardsink_orders_duplicates" => {
                let (top, fields) = split_struct(&block, "duplicateOf");
                let mut expected = written.duplicate.names();
                expected.retain(|n| n != "duplicateOf");
                assert_eq!(top, expected, "{table}");
                assert_eq!(
                    fields,
                    lower(written.duplicate.names_in("duplicateOf")),
                    "{table}: duplicateOf"
                );
                assert_eq!(
                    columns.last().map(String::as_str),
                    written.duplicate.names().last().map(String::as_str),
                    "{table}: duplicateOf comes last, as in the line"
                );
            }
            "shardsink_orders_json" => {
                let (_payload, fields) = split_struct(&block, DEFAULT_METADATA_FIELD);
                assert_eq!(
                    columns.last().map(String::as_str),
                    Some(DEFAULT_METADATA_FIELD),
                    "{table}"
                );
                assert_eq!(fields, lower(written.metadata.names()), "{table}: metadata");
            }
            "shardsink_orders_raw" => assert_eq!(columns, ["payload"], "{table}"),
            "shardsink_orders_parquet" => {
                let schema = arrow_schema(None);
                let expected: Vec<_> = schema.fields().iter().map(|f| f.name().clone()).collect();
                assert_eq!(columns, expected, "{table}");
            }
            "shardsink_events_parquet" => {
                let schema = arrow_schema(Some(&documented_schema()));
                let expected: Vec<_> = schema.fields().iter().map(|f| f.name().clone()).collect();
                assert_eq!(columns, expected, "{table}");
            }
            other => panic!("docs/ATHENA.md: table {other} is not checked against the code"),
        }
    }
    let expected = [
        "shardsink_orders",
        "shardsink_orders_errors",
        "shardsink_orders_duplicates",
        "shardsink_orders_json",
        "shardsink_orders_raw",
        "shardsink_orders_parquet",
        "shardsink_events_parquet",
    ];
    assert_eq!(seen, expected.iter().map(|t| (*t).to_owned()).collect());
}

/// The document's example lines: what the encoder writes for their
/// records, byte for byte.
#[test]
fn athena_example_lines_are_what_the_encoder_writes() {
    let example = |section: &str| -> String {
        let section = ATHENA.split(section).nth(1).unwrap();
        let json = section.split("```json\n").nth(1).unwrap();
        json.split('\n').next().unwrap().to_owned()
    };
    let reencode = |line: &str, duplicate: bool| -> String {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let text = |v: &serde_json::Value| v.as_str().unwrap().to_owned();
        let arrival = DateTime::parse_from_rfc3339(&text(&value["approximateArrivalTimestamp"]))
            .unwrap()
            .timestamp_millis();
        let data = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            text(&value["data"]),
        )
        .unwrap();
        let (shard, sequence, key) = (
            text(&value["shardId"]),
            text(&value["sequenceNumber"]),
            text(&value["partitionKey"]),
        );
        let view = UserRecordView {
            shard_id: &shard,
            sequence_number: &sequence,
            sub_sequence_number: value["subSequenceNumber"].as_u64(),
            partition_key: &key,
            arrival_millis: arrival,
            data: &data,
        };
        let mut encoder = LineEncoder::new(&shard);
        let mut out = Vec::new();
        if duplicate {
            let of = &value["duplicateOf"];
            let copy = CopyRef {
                shard_id: text(&of["shardId"]).into(),
                sequence_number: SequenceNumber::parse(&text(&of["sequenceNumber"])).unwrap(),
                sub_sequence_number: of["subSequenceNumber"].as_u64(),
            };
            encoder.encode_duplicate(&view, &copy, &mut out);
        } else {
            encoder.encode_line(&view, &mut out);
        }
        String::from_utf8(out).unwrap().trim_end().to_owned()
    };
    let envelope = example("## The envelope table");
    assert_eq!(reencode(&envelope, false), envelope);
    let duplicate = example("## The duplicates table");
    assert_eq!(reencode(&duplicate, true), duplicate);
    let json = example("## The json table");
    let metadata = Ordered::parse(json.as_bytes()).names_in(DEFAULT_METADATA_FIELD);
    let mut expected = written().metadata.names();
    expected.retain(|n| n != "subSequenceNumber");
    assert_eq!(metadata, expected, "the json example's metadata");
}

/// The output of a daemon started with `flags`: its layouts, with the
/// default error and duplicates prefixes of `--stream PREFIX`.
fn output(flags: &[&str]) -> Output {
    let mut args = vec![
        "--stream",
        "PREFIX",
        "--bucket",
        "archive",
        "--worker-id",
        "w",
    ];
    args.extend_from_slice(flags);
    crate::config::parse_flags_only(&args)
        .unwrap()
        .validate()
        .unwrap()
        .output
}

/// Java's date pattern letters of a `date` projection, as chrono's.
fn chrono_format(java: &str) -> String {
    [
        ("yyyy", "%Y"),
        ("MM", "%m"),
        ("dd", "%d"),
        ("HH", "%H"),
        ("mm", "%M"),
    ]
    .iter()
    .fold(java.to_owned(), |text, (from, to)| text.replace(from, to))
}

/// Where the block's projection puts a record that arrived at `arrival`:
/// its template with each partition value projected, and the layout the
/// block is for (hive or plain, per minute or per hour).
fn projected(block: &Block, arrival: DateTime<Utc>) -> (String, [&'static str; 4]) {
    let p = &block.properties;
    let template = &p["storage.location.template"];
    assert_eq!(p["projection.enabled"], "true", "{template}");
    if let Some(format) = p.get("projection.dt.format") {
        assert_eq!(p["projection.dt.type"], "date", "{template}");
        let bucket = match p["projection.dt.interval.unit"].as_str() {
            "MINUTES" => "minute",
            "HOURS" => "hour",
            other => panic!("{template}: unit {other}"),
        };
        let dt = arrival.format(&chrono_format(format)).to_string();
        let flags = ["--key-layout", "plain", "--time-bucket", bucket];
        return (template.replace("${dt}", &dt), flags);
    }
    let mut location = template.clone();
    for (column, pattern) in [
        ("year", "%Y"),
        ("month", "%m"),
        ("day", "%d"),
        ("hour", "%H"),
        ("minute", "%M"),
    ] {
        let placeholder = format!("${{{column}}}");
        if !location.contains(&placeholder) {
            continue;
        }
        assert_eq!(
            p[&format!("projection.{column}.type")],
            "integer",
            "{column}"
        );
        let value: u32 = arrival.format(pattern).to_string().parse().unwrap();
        let digits = p
            .get(&format!("projection.{column}.digits"))
            .map_or(0, |d| d.parse().unwrap());
        location = location.replace(&placeholder, &format!("{value:0digits$}"));
    }
    let bucket = if template.contains("${minute}") {
        "minute"
    } else {
        "hour"
    };
    (location, ["--key-layout", "hive", "--time-bucket", bucket])
}

#[test]
fn athena_locations_are_where_the_keys_are() {
    // Single digits everywhere, so that a missing zero pad shows.
    let arrival = DateTime::parse_from_rfc3339("2026-01-02T03:04:05.006Z")
        .unwrap()
        .with_timezone(&Utc);
    let range = SequenceRange::new(
        SequenceNumber::parse(SEQUENCE).unwrap(),
        SequenceNumber::parse(SEQUENCE).unwrap(),
    )
    .unwrap();
    let kind = BodyKind::ALL[0];
    let mut checked = 0;
    for block in blocks() {
        if !block.properties.contains_key("storage.location.template") {
            continue;
        }
        let (location, flags) = projected(&block, arrival);
        let output = output(&flags);
        let layout: &KeyLayout = match block.table.as_deref() {
            Some(table) if table.ends_with("_errors") => &output.error_layout,
            Some(table) if table.ends_with("_duplicates") => &output.duplicates_layout,
            _ => &output.layout,
        };
        let key = layout.object_key(
            layout.bucket_of(arrival.timestamp_millis()),
            SHARD,
            &range,
            kind,
        );
        assert_eq!(
            format!("s3://BUCKET/{key}"),
            format!("{location}{SHARD}/{}", object_name(&range, kind)),
            "{:?} with {flags:?}",
            block.table
        );
        if let Some(table_location) = &block.location {
            assert_eq!(
                table_location,
                &format!("s3://BUCKET/{}", layout.list_prefix()),
                "{:?}",
                block.table
            );
        }
        checked += 1;
    }
    // The six tables with a projection (the schema-file example has none),
    // and the per-hour and Hive projections.
    assert_eq!(checked, 8);

    // The per-shard table the prose suggests: the shard's own folder.
    let template = ATHENA
        .split("`'storage.location.template' = '")
        .nth(1)
        .and_then(|rest| rest.split("'`").next())
        .unwrap();
    let output = output(&[]);
    let key = output.layout.object_key(
        output.layout.bucket_of(arrival.timestamp_millis()),
        SHARD,
        &range,
        kind,
    );
    let location = template
        .replace("${dt}", &arrival.format("%Y/%m/%d/%H/%M").to_string())
        .replace("${shard_id}", SHARD);
    assert_eq!(
        format!("s3://BUCKET/{key}"),
        format!("{location}{}", object_name(&range, kind))
    );
}
