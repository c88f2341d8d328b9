//! The `json` format: JSON Lines whose lines are the records' payloads —
//! each must be one JSON object in UTF-8 — with the Kinesis metadata added
//! under one field (`--metadata-field`, `_kinesis` by default):
//!
//! ```json
//! {"order":17,"_kinesis":{"shardId":"shardId-000000000000","sequenceNumber":"4959…","partitionKey":"user-7","approximateArrivalTimestamp":"2026-11-21T05:27:03.045Z"}}
//! ```
//!
//! The payload's own text is kept (its members, their order and numbers as
//! written); only the line breaks a pretty-printed payload may hold become
//! spaces (outside strings a raw line break can only be whitespace, so the
//! value is unchanged) and the metadata member is appended. A payload that
//! is not UTF-8, not one JSON object, or already has the metadata field is
//! rejected: it goes to the error prefix.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use super::envelope::{LineEncoder, push_json_string};
use crate::output::view::{RejectReason, Rejection};
use crate::read::record::UserRecordView;

/// Appends `user`'s line to `out`: its payload with `"{field}":{metadata}`
/// appended when `metadata_field` is set.
///
/// # Errors
/// [`Rejection`] when the payload is not a JSON object in UTF-8 or already
/// has the metadata field; `out` is then unchanged.
pub fn encode_line(
    envelope: &mut LineEncoder,
    metadata_field: Option<&str>,
    user: &UserRecordView<'_>,
    out: &mut Vec<u8>,
) -> Result<(), Rejection> {
    let text = std::str::from_utf8(user.data).map_err(|err| {
        Rejection::new(
            RejectReason::NotUtf8,
            format!("payload is not UTF-8: {err}"),
        )
    })?;
    let shape = probe(text, metadata_field)?;
    let object = text.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\r'));
    let start = out.len();
    match metadata_field {
        None => out.extend_from_slice(object.as_bytes()),
        Some(field) => {
            // Valid and an object: it ends with '}'.
            out.extend_from_slice(&object.as_bytes()[..object.len() - 1]);
            if !shape.empty {
                out.push(b',');
            }
            push_json_string(out, field);
            out.push(b':');
            envelope.encode_metadata(user, out);
            out.push(b'}');
        }
    }
    for byte in &mut out[start..] {
        if matches!(*byte, b'\n' | b'\r') {
            *byte = b' ';
        }
    }
    out.push(b'\n');
    Ok(())
}

/// What a payload's top level is.
struct Shape {
    /// `{}`: no members.
    empty: bool,
}

/// Checks that `text` is exactly one JSON object and that it has no member
/// named `field`, reading it once without building it.
fn probe(text: &str, field: Option<&str>) -> Result<Shape, Rejection> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let shape = TopLevel { field }
        .deserialize(&mut deserializer)
        .and_then(|shape| deserializer.end().map(|()| shape));
    match shape {
        Ok(Ok(shape)) => Ok(shape),
        Ok(Err(())) => Err(Rejection::new(
            RejectReason::MetadataFieldPresent,
            format!(
                "payload already has a member named {:?} (the metadata field)",
                field.unwrap_or_default()
            ),
        )),
        Err(err) => Err(Rejection::new(
            RejectReason::NotJsonObject,
            format!("payload is not a JSON object: {err}"),
        )),
    }
}

/// Deserializes a top-level object, skipping its values; `Err(())` inside
/// means a member named `field` was found.
struct TopLevel<'a> {
    field: Option<&'a str>,
}

impl<'de> DeserializeSeed<'de> for TopLevel<'_> {
    type Value = Result<Shape, ()>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopLevel<'_> {
    type Value = Result<Shape, ()>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut empty = true;
        let mut taken = false;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            empty = false;
            taken |= self.field.is_some_and(|field| key == field);
            map.next_value::<IgnoredAny>()?;
        }
        Ok(if taken { Err(()) } else { Ok(Shape { empty }) })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    fn view(data: &[u8]) -> UserRecordView<'_> {
        UserRecordView {
            shard_id: "shardId-000000000001",
            sequence_number: "42",
            sub_sequence_number: None,
            partition_key: "pk",
            arrival_millis: 1_795_238_823_045,
            data,
        }
    }

    fn line(field: Option<&str>, data: &[u8]) -> Result<String, Rejection> {
        let mut out = b"previous\n".to_vec();
        let mut envelope = LineEncoder::new("shardId-000000000001");
        let result = encode_line(&mut envelope, field, &view(data), &mut out);
        let text = String::from_utf8(out).unwrap();
        let line = text.strip_prefix("previous\n").unwrap().to_owned();
        match result {
            Ok(()) => Ok(line),
            Err(rejection) => {
                assert_eq!(line, "", "a rejected record writes nothing");
                Err(rejection)
            }
        }
    }

    #[test]
    fn the_payload_gets_the_metadata_member() {
        let text = line(
            Some("_kinesis"),
            br#"{"order":17,"big":12345678901234567890123}"#,
        )
        .unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"order":17,"big":12345678901234567890123,"_kinesis":{"shardId":"shardId-000000000001","sequenceNumber":"42","#,
                r#""partitionKey":"pk","approximateArrivalTimestamp":"2026-11-21T05:27:03.045Z"}}"#,
                "\n"
            ),
            "the payload's text is kept as written"
        );
    }

    #[test]
    fn empty_objects_whitespace_and_no_metadata() {
        let value: Value = serde_json::from_str(&line(Some("m"), b" {\n} ").unwrap()).unwrap();
        assert_eq!(value["m"]["sequenceNumber"], "42");
        assert_eq!(value.as_object().unwrap().len(), 1);
        let pretty = b"{\n  \"a\": \"x\\ny\",\r\n  \"b\": [1,\n 2]\n}\n";
        let text = line(None, pretty).unwrap();
        assert_eq!(text.matches('\n').count(), 1, "{text:?}");
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap(),
            json!({"a": "x\ny", "b": [1, 2]})
        );
    }

    #[test]
    fn what_is_not_a_json_object_is_rejected() {
        for (data, reason) in [
            (&b"\xff\xfe"[..], RejectReason::NotUtf8),
            (b"[1,2]", RejectReason::NotJsonObject),
            (b"\"text\"", RejectReason::NotJsonObject),
            (b"", RejectReason::NotJsonObject),
            (b"{\"a\":1} {\"b\":2}", RejectReason::NotJsonObject),
            (b"{\"a\":1", RejectReason::NotJsonObject),
            (b"{\"a\":\"line\nbreak\"}", RejectReason::NotJsonObject),
            (b"{\"_kinesis\":1}", RejectReason::MetadataFieldPresent),
            (
                b"{\"\\u005fkinesis\":1}",
                RejectReason::MetadataFieldPresent,
            ),
        ] {
            let rejection = line(Some("_kinesis"), data).unwrap_err();
            assert_eq!(
                rejection.reason,
                reason,
                "{:?}",
                String::from_utf8_lossy(data)
            );
            assert!(!rejection.message.is_empty());
        }
        // Without a metadata field, any member name is fine.
        assert!(line(None, b"{\"_kinesis\":1}").is_ok());
    }

    proptest! {
        #[test]
        fn lines_parse_back_to_the_payload_and_metadata(
            members in prop::collection::btree_map("\\PC{0,8}", any::<i64>(), 0..6),
            pretty in any::<bool>(),
        ) {
            let payload = Value::Object(members.iter().map(|(k, v)| (k.clone(), json!(v))).collect());
            let text = if pretty { serde_json::to_string_pretty(&payload) } else { serde_json::to_string(&payload) }.unwrap();
            prop_assume!(!members.contains_key("_kinesis"));
            let out = line(Some("_kinesis"), text.as_bytes()).unwrap();
            prop_assert_eq!(out.matches('\n').count(), 1);
            let mut value: Value = serde_json::from_str(&out).unwrap();
            let metadata = value.as_object_mut().unwrap().remove("_kinesis").unwrap();
            prop_assert_eq!(value, payload);
            prop_assert_eq!(&metadata["sequenceNumber"], "42");
        }
    }
}
