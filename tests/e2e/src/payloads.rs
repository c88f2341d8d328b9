//! Payloads for the output formats, deterministic from a seed: JSON objects
//! (with payloads the `json` format must reject), raw bytes without a
//! delimiter byte, and JSON rows for a Parquet schema (with payloads of the
//! wrong types). Each generator says which of its records the format under
//! test cannot represent, so the test knows which must go to the error
//! prefix.

use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::{Value, json};

use crate::check::RecordId;
use crate::producer::{ProducedRecord, RecordSpec, special_partition_keys};

/// Records to put, and which of them the format under test must reject.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Payloads {
    /// The records, in the order to put them.
    pub specs: Vec<RecordSpec>,
    /// `rejected[i]`: the format cannot represent `specs[i]`.
    pub rejected: Vec<bool>,
}

impl Payloads {
    /// How many records the format must reject.
    pub fn rejected_count(&self) -> usize {
        self.rejected.iter().filter(|r| **r).count()
    }

    /// The ids of the rejected records, given what putting
    /// [`Payloads::specs`] produced (one record per spec, in order, as
    /// `put_records` returns them).
    ///
    /// # Panics
    /// When `produced` does not match the specs one for one.
    pub fn rejected_ids(&self, produced: &[ProducedRecord]) -> Vec<RecordId> {
        assert_eq!(produced.len(), self.specs.len(), "one record per spec");
        produced
            .iter()
            .zip(&self.specs)
            .zip(&self.rejected)
            .filter(|(_, rejected)| **rejected)
            .map(|((record, spec), _)| {
                assert_eq!(record.data, spec.data, "records in the order of the specs");
                RecordId::of_produced(record)
            })
            .collect()
    }

    fn push(&mut self, spec: RecordSpec, rejected: bool) {
        self.specs.push(spec);
        self.rejected.push(rejected);
    }
}

/// A partition key: mostly `pk-<number>` (spreads over shards), sometimes
/// one of [`special_partition_keys`].
fn partition_key(rng: &mut StdRng, specials: &[String]) -> String {
    if rng.random_bool(0.2) {
        specials[rng.random_range(0..specials.len())].clone()
    } else {
        format!("pk-{}", rng.random::<u32>())
    }
}

/// A string with JSON escapes, control characters and multi-byte UTF-8.
fn tricky_text(rng: &mut StdRng) -> String {
    const PIECES: &[&str] = &[
        "plain", "\"", "\\", "\n", "\r\n", "\t", "é", "日本", "🦀", "\u{0}", "\u{7f}", "\u{2028}",
        "}", "{", ",", "_kinesis", " ",
    ];
    (0..rng.random_range(0..12))
        .map(|_| PIECES[rng.random_range(0..PIECES.len())])
        .collect()
}

/// `count` records for the `json` format, deterministic from `seed`: JSON
/// objects of varied shape — nested objects (one with a nested `_kinesis`
/// member, which is allowed), arrays, big and fractional numbers, strings
/// full of escapes and multi-byte characters, `{}`, pretty-printed with
/// line breaks, whitespace around — and about one in eight that the format
/// must reject, cycling through: not JSON, a JSON array, not UTF-8, a JSON
/// string, an object that already has the `_kinesis` member, two objects,
/// and an empty payload.
pub fn json_payloads(count: usize, seed: u64, label: &str) -> Payloads {
    let mut rng = StdRng::seed_from_u64(seed);
    let specials = special_partition_keys();
    let mut payloads = Payloads::default();
    let mut invalid_kind = 0usize;
    for i in 0..count {
        let partition_key = partition_key(&mut rng, &specials);
        if i % 8 == 5 {
            let data: Vec<u8> = match invalid_kind % 7 {
                0 => format!("{label} #{i}: not JSON").into_bytes(),
                1 => format!("[{i}, \"{label}\", {{\"a\": 1}}]").into_bytes(),
                2 => {
                    let mut data =
                        format!("{{\"label\":\"{label}\",\"n\":{i},\"bad\":\"").into_bytes();
                    data.extend_from_slice(&[0xFF, 0xFE, 0x80]);
                    data.extend_from_slice(b"\"}");
                    data
                }
                3 => format!("\"{label} #{i}\"").into_bytes(),
                4 => format!("{{\"_kinesis\":{{\"n\":{i}}},\"label\":\"{label}\"}}").into_bytes(),
                5 => format!("{{\"n\":{i}}} {{\"label\":\"{label}\"}}").into_bytes(),
                _ => Vec::new(),
            };
            invalid_kind += 1;
            payloads.push(RecordSpec::new(partition_key, data), true);
            continue;
        }
        let mut object = json!({
            "label": label,
            "n": i,
            "text": tricky_text(&mut rng),
        });
        let extra = &mut object;
        match rng.random_range(0..6) {
            0 => {
                extra["nested"] =
                    json!({"_kinesis": {"shardId": "fake"}, "deep": [1, [2, {"x": null}]]})
            }
            1 => extra["big"] = json!(rng.random::<u64>()),
            2 => extra["float"] = json!(rng.random_range(-1.0e6..1.0e6)),
            3 => extra["flags"] = json!([true, false, null, "é"]),
            4 => extra["empty"] = json!({}),
            _ => {}
        }
        let mut text = match rng.random_range(0..5) {
            0 => serde_json::to_string_pretty(&object).expect("a value always serializes"),
            1 => format!(
                " \r\n{}\n\t",
                serde_json::to_string(&object).expect("a value always serializes")
            ),
            _ => serde_json::to_string(&object).expect("a value always serializes"),
        };
        if i % 97 == 3 {
            // An empty object, spaced.
            text = " { } ".to_owned();
        } else if i % 89 == 7 {
            // Numbers as written: more digits than any float keeps.
            text = format!(
                "{{\"n\":{i},\"exact\":1.000000000000000000001,\"huge\":123456789012345678901234567890}}"
            );
        }
        payloads.push(RecordSpec::new(partition_key, text.into_bytes()), false);
    }
    payloads
}

/// `count` events for event deduplication by `--event-id
/// json-pointer:/id`, deterministic from `seed`, each under one of
/// `partition_keys` keys (`{label}-key-{k}`; few keys, so that a KPL
/// aggregate can hold several events of one key): mostly JSON objects with
/// a distinct string `id` (`{label}-{i}`, escapes included), and, one in
/// twenty each, payloads without an id — not JSON, or `"id":null` — and
/// objects with an id that already have the `_kinesis` member. Marked
/// rejected: what the `json` format (metadata field `_kinesis`) cannot
/// represent, the payloads that are not JSON and those with `_kinesis`.
pub fn event_payloads(count: usize, seed: u64, label: &str, partition_keys: usize) -> Payloads {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut payloads = Payloads::default();
    for i in 0..count {
        let partition_key = format!("{label}-key-{}", rng.random_range(0..partition_keys.max(1)));
        let id = if i % 31 == 4 {
            format!("{label}-{i} \"quoted\" é\\")
        } else {
            format!("{label}-{i}")
        };
        let (data, rejected) = match i % 20 {
            7 => (format!("{label} #{i}: not JSON, no id"), true),
            13 => (json!({"id": id, "_kinesis": {"n": i}}).to_string(), true),
            17 => (json!({"n": i, "id": null}).to_string(), false),
            _ => {
                let mut object = json!({"n": i, "id": id, "text": tricky_text(&mut rng)});
                if rng.random_bool(0.3) {
                    object["nested"] = json!({"id": "not the event id", "list": [1, null]});
                }
                (object.to_string(), false)
            }
        };
        payloads.push(RecordSpec::new(partition_key, data.into_bytes()), rejected);
    }
    payloads
}

/// `count` records for the `raw` format, deterministic from `seed`: binary
/// and text payloads (line breaks included), some empty, none holding the
/// byte `delimiter`; the format rejects none.
pub fn raw_payloads(count: usize, seed: u64, label: &str, delimiter: u8) -> Payloads {
    let mut rng = StdRng::seed_from_u64(seed);
    let specials = special_partition_keys();
    let mut payloads = Payloads::default();
    for i in 0..count {
        let partition_key = partition_key(&mut rng, &specials);
        let mut data = match rng.random_range(0..10) {
            0 => Vec::new(),
            1..=4 => {
                let mut data = vec![0u8; rng.random_range(1..=300)];
                rng.fill(&mut data[..]);
                data
            }
            _ => format!("{label} #{i} {}\n", tricky_text(&mut rng)).into_bytes(),
        };
        for byte in &mut data {
            if *byte == delimiter {
                *byte = delimiter.wrapping_add(1);
            }
        }
        payloads.push(RecordSpec::new(partition_key, data), false);
    }
    payloads
}

/// The `--parquet-schema` file [`schema_payloads`] are made for.
pub const SCHEMA_FILE: &str = r#"[
  {"name": "user_id", "type": "int64"},
  {"name": "event", "type": "string"},
  {"name": "score", "type": "float64"},
  {"name": "ok", "type": "boolean"},
  {"name": "at", "type": "timestamp"},
  {"name": "tags", "type": "json"}
]"#;

/// `count` records for `parquet` with [`SCHEMA_FILE`], deterministic from
/// `seed`: JSON objects with every column, some missing or null, members
/// the schema does not name, timestamps as RFC 3339 text (with offsets) or
/// epoch milliseconds; and about one in eight that the format must reject,
/// cycling through: `user_id` as a string, `user_id` with a fraction,
/// `event` as a number, `ok` as a string, `at` that is no time, not JSON,
/// and a JSON array.
pub fn schema_payloads(count: usize, seed: u64, label: &str) -> Payloads {
    let mut rng = StdRng::seed_from_u64(seed);
    let specials = special_partition_keys();
    let mut payloads = Payloads::default();
    let mut invalid_kind = 0usize;
    for i in 0..count {
        let partition_key = partition_key(&mut rng, &specials);
        let user_id = i64::try_from(i).expect("a small index") * 1_000_003 - 5_000;
        if i % 8 == 6 {
            let data = match invalid_kind % 7 {
                0 => json!({"user_id": user_id.to_string(), "event": label}).to_string(),
                1 => json!({"user_id": 1.5, "event": label}).to_string(),
                2 => json!({"user_id": user_id, "event": i}).to_string(),
                3 => json!({"user_id": user_id, "ok": "yes"}).to_string(),
                4 => json!({"user_id": user_id, "at": "yesterday"}).to_string(),
                5 => format!("{label} #{i}: not JSON"),
                _ => format!("[{user_id}]"),
            };
            invalid_kind += 1;
            payloads.push(RecordSpec::new(partition_key, data.into_bytes()), true);
            continue;
        }
        let mut row = serde_json::Map::new();
        row.insert("user_id".to_owned(), json!(user_id));
        row.insert(
            "event".to_owned(),
            json!(format!("{label} {}", tricky_text(&mut rng))),
        );
        row.insert("score".to_owned(), json!(rng.random_range(-1.0e3..1.0e3)));
        row.insert("ok".to_owned(), json!(rng.random_bool(0.5)));
        let millis = 1_795_238_823_045_i64 + rng.random_range(0..86_400_000_i64);
        row.insert(
            "at".to_owned(),
            if rng.random_bool(0.5) {
                json!(millis)
            } else {
                let t = chrono::DateTime::from_timestamp_millis(millis)
                    .expect("in range")
                    .with_timezone(&chrono::FixedOffset::east_opt(5 * 3600 + 1800).expect("valid"));
                json!(t.to_rfc3339_opts(chrono::SecondsFormat::Micros, false))
            },
        );
        row.insert("tags".to_owned(), json!([label, i, {"k": null}]));
        row.insert("unnamed".to_owned(), json!("ignored"));
        // Some columns missing or null.
        for column in ["score", "ok", "at", "tags", "event"] {
            match rng.random_range(0..12) {
                0 => {
                    row.remove(column);
                }
                1 => {
                    row.insert(column.to_owned(), Value::Null);
                }
                _ => {}
            }
        }
        payloads.push(
            RecordSpec::new(partition_key, Value::Object(row).to_string().into_bytes()),
            false,
        );
    }
    payloads
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::ParquetSchema;

    #[test]
    fn json_payloads_are_what_they_claim() {
        let payloads = json_payloads(400, 1, "t");
        assert_eq!(payloads, json_payloads(400, 1, "t"));
        assert!(payloads.rejected_count() >= 40);
        for (spec, rejected) in payloads.specs.iter().zip(&payloads.rejected) {
            let object = std::str::from_utf8(&spec.data)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .and_then(|v| v.as_object().cloned());
            let valid = object.is_some_and(|o| !o.contains_key("_kinesis"));
            assert_eq!(
                valid,
                !rejected,
                "{:?}",
                String::from_utf8_lossy(&spec.data)
            );
        }
        assert!(
            payloads
                .specs
                .iter()
                .any(|s| s.data.contains(&b'\n') && !s.data.starts_with(b" "))
        );
    }

    #[test]
    fn event_payloads_are_what_they_claim() {
        let payloads = event_payloads(200, 4, "ev", 5);
        assert_eq!(payloads, event_payloads(200, 4, "ev", 5));
        let mut ids = std::collections::HashSet::new();
        let mut without_id = 0;
        for (spec, rejected) in payloads.specs.iter().zip(&payloads.rejected) {
            let value = serde_json::from_slice::<Value>(&spec.data).ok();
            let object = value.as_ref().and_then(Value::as_object);
            assert_eq!(
                *rejected,
                object.is_none_or(|o| o.contains_key("_kinesis")),
                "{:?}",
                String::from_utf8_lossy(&spec.data)
            );
            match object.and_then(|o| o.get("id")).and_then(Value::as_str) {
                Some(id) => assert!(ids.insert(id.to_owned()), "{id} twice"),
                None => without_id += 1,
            }
        }
        assert_eq!(without_id, 20);
        assert_eq!(payloads.rejected_count(), 20);
        assert!(ids.iter().any(|id| id.contains('"')));
        let keys: std::collections::HashSet<&str> = payloads
            .specs
            .iter()
            .map(|s| s.partition_key.as_str())
            .collect();
        assert_eq!(keys.len(), 5);
    }

    #[test]
    fn raw_payloads_avoid_the_delimiter() {
        let payloads = raw_payloads(300, 2, "t", 0x1e);
        assert_eq!(payloads.rejected_count(), 0);
        assert!(payloads.specs.iter().all(|s| !s.data.contains(&0x1e)));
        assert!(payloads.specs.iter().any(|s| s.data.is_empty()));
        assert!(payloads.specs.iter().any(|s| s.data.contains(&b'\n')));
    }

    #[test]
    fn schema_payloads_are_what_they_claim() {
        let schema = ParquetSchema::parse(SCHEMA_FILE).unwrap();
        let payloads = schema_payloads(300, 3, "t");
        assert!(payloads.rejected_count() >= 30);
        for (spec, rejected) in payloads.specs.iter().zip(&payloads.rejected) {
            assert_eq!(
                schema.expected_row(&spec.data).is_err(),
                *rejected,
                "{:?}",
                String::from_utf8_lossy(&spec.data)
            );
        }
    }
}
