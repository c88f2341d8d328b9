//! Where an event's id comes from (`--event-id`) and the [`EventKey`] a user
//! record gets: a hash of its id and, with `--event-fingerprint payload`, of
//! its payload.

use std::fmt;

use serde::Deserialize as _;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

use super::rule::EventKey;
use crate::read::record::UserRecordView;

/// `--event-id`: where a user record's event id is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventIdSource {
    /// The (user) record's partition key.
    PartitionKey,
    /// A member of the JSON payload, by JSON Pointer (RFC 6901): a string's
    /// text, or the JSON text of a number, boolean, object or array. Missing,
    /// `null`, or a payload that is not JSON: no id.
    JsonPointer(JsonPointer),
    /// The payload bytes themselves: the same bytes sent twice are one
    /// event.
    Payload,
}

impl EventIdSource {
    /// Parses `partition-key`, `payload` or `json-pointer:/path`.
    ///
    /// # Errors
    /// A sentence naming what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "partition-key" => Ok(Self::PartitionKey),
            "payload" => Ok(Self::Payload),
            _ => match text.strip_prefix("json-pointer:") {
                Some(pointer) => JsonPointer::parse(pointer).map(Self::JsonPointer),
                None => Err(format!(
                    "{text:?} is not partition-key, payload or json-pointer:/path"
                )),
            },
        }
    }

    /// The setting's text, as [`parse`](Self::parse) reads it.
    pub fn as_setting(&self) -> String {
        match self {
            Self::PartitionKey => "partition-key".to_owned(),
            Self::Payload => "payload".to_owned(),
            Self::JsonPointer(pointer) => format!("json-pointer:{}", pointer.text),
        }
    }

    /// The key of `user`, or `None` when it has no id. `fingerprint`: hash
    /// the payload too (`--event-fingerprint payload`).
    pub fn key(&self, user: &UserRecordView<'_>, fingerprint: bool) -> Option<EventKey> {
        let id = match self {
            Self::PartitionKey => xxh3_128(user.partition_key.as_bytes()),
            Self::Payload => xxh3_128(user.data),
            Self::JsonPointer(pointer) => xxh3_128(pointer.find(user.data)?.as_bytes()),
        };
        Some(EventKey {
            id,
            fingerprint: if fingerprint { xxh3_64(user.data) } else { 0 },
        })
    }
}

impl fmt::Display for EventIdSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_setting())
    }
}

/// A JSON Pointer (RFC 6901), e.g. `/event/id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPointer {
    /// As written.
    text: String,
    /// Its reference tokens, unescaped (`~1` → `/`, `~0` → `~`).
    tokens: Vec<String>,
}

impl JsonPointer {
    /// Parses a pointer: empty (the whole document) or `/`-separated tokens.
    ///
    /// # Errors
    /// When it does not start with `/` or has a `~` not followed by 0 or 1.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Ok(Self {
                text: String::new(),
                tokens: Vec::new(),
            });
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!("JSON pointer {text:?} must start with /"));
        };
        let tokens = rest
            .split('/')
            .map(|token| {
                let mut out = String::with_capacity(token.len());
                let mut chars = token.chars();
                while let Some(c) = chars.next() {
                    match (c, c == '~') {
                        (_, false) => out.push(c),
                        (_, true) => match chars.next() {
                            Some('0') => out.push('~'),
                            Some('1') => out.push('/'),
                            _ => {
                                return Err(format!(
                                    "JSON pointer {text:?}: ~ must be followed by 0 or 1"
                                ));
                            }
                        },
                    }
                }
                Ok(out)
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            text: text.to_owned(),
            tokens,
        })
    }

    /// The id the pointer finds in `payload`: a string's unescaped text, or
    /// the JSON text of any other value; `None` when the payload is not
    /// JSON, the member is missing or `null`. Reads the payload once,
    /// skipping what the pointer does not enter.
    pub fn find(&self, payload: &[u8]) -> Option<String> {
        let mut deserializer = serde_json::Deserializer::from_slice(payload);
        let found = Walk {
            tokens: &self.tokens,
        }
        .deserialize(&mut deserializer)
        .ok()??;
        deserializer.end().ok()?;
        let text = found.get();
        match text.as_bytes().first() {
            Some(b'n') => None,
            Some(b'"') => serde_json::from_str::<String>(text).ok(),
            _ => Some(text.to_owned()),
        }
    }
}

/// Follows `tokens` into a JSON value, returning the raw text of what they
/// point at (`None`: not there).
struct Walk<'t> {
    tokens: &'t [String],
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = Option<Box<RawValue>>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        match self.tokens.split_first() {
            None => Box::<RawValue>::deserialize(deserializer).map(Some),
            Some((token, rest)) => deserializer.deserialize_any(Step { token, rest }),
        }
    }
}

/// One level of a [`Walk`]: the member or element named `token`.
struct Step<'t> {
    token: &'t str,
    rest: &'t [String],
}

impl<'de> Visitor<'de> for Step<'_> {
    type Value = Option<Box<RawValue>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(is_token) = map.next_key_seed(KeyIs(self.token))? {
            if found.is_none() && is_token {
                found = map.next_value_seed(Walk { tokens: self.rest })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // RFC 6901: array indexes are decimal without leading zeros.
        let index = match self.token.parse::<usize>() {
            Ok(index) if self.token == index.to_string() => Some(index),
            _ => None,
        };
        let mut found = None;
        let mut at = 0;
        loop {
            if Some(at) == index {
                match seq.next_element_seed(Walk { tokens: self.rest })? {
                    Some(value) => found = value,
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            at += 1;
        }
        Ok(found)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Whether a member name equals the token, compared without allocating
/// unless the name has escapes.
struct KeyIs<'t>(&'t str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<bool, E> {
        Ok(name == self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(pointer: &str, payload: &str) -> Option<String> {
        JsonPointer::parse(pointer)
            .unwrap()
            .find(payload.as_bytes())
    }

    fn view<'a>(partition_key: &'a str, data: &'a [u8]) -> UserRecordView<'a> {
        UserRecordView {
            shard_id: "shardId-000000000000",
            sequence_number: "1",
            sub_sequence_number: None,
            partition_key,
            arrival_millis: 0,
            data,
        }
    }

    #[test]
    fn pointers_follow_rfc_6901() {
        let doc = r#"{"a":{"b/c":[10,{"id":"x\"y"}],"m~n":true},"":1,"id":null}"#;
        assert_eq!(find("/a/b~1c/1/id", doc).as_deref(), Some("x\"y"));
        assert_eq!(find("/a/b~1c/0", doc).as_deref(), Some("10"));
        assert_eq!(find("/a/m~0n", doc).as_deref(), Some("true"));
        assert_eq!(find("/", doc).as_deref(), Some("1"));
        assert_eq!(find("/a/b~1c/01", doc), None, "no leading zeros");
        assert_eq!(find("/a/b~1c/2", doc), None);
        assert_eq!(find("/id", doc), None, "null is no id");
        assert_eq!(find("/missing", doc), None);
        assert_eq!(find("/a/b~1c/1/id/deeper", doc), None);
        assert_eq!(find("/a", r#"{"a":[1, 2]}"#).as_deref(), Some("[1, 2]"));
        assert_eq!(find("/id", "not json"), None);
        assert_eq!(find("/id", r#"{"id":"a"} trailing"#), None);
        assert_eq!(
            find("/id", r#"{"id":"first","id":"second"}"#).as_deref(),
            Some("first")
        );
        assert!(JsonPointer::parse("id").is_err());
        assert!(JsonPointer::parse("/a~2").is_err());
    }

    #[test]
    fn settings_parse_and_print_back() {
        for text in [
            "partition-key",
            "payload",
            "json-pointer:/event/id",
            "json-pointer:",
        ] {
            assert_eq!(EventIdSource::parse(text).unwrap().as_setting(), text);
        }
        assert!(EventIdSource::parse("uuid").is_err());
    }

    #[test]
    fn keys_hash_the_id_and_the_payload() {
        let by_key = EventIdSource::PartitionKey;
        let a = by_key.key(&view("k", b"one"), true).unwrap();
        let b = by_key.key(&view("k", b"two"), true).unwrap();
        assert_eq!(a.id, b.id);
        assert_ne!(a.fingerprint, b.fingerprint);
        assert_eq!(
            by_key.key(&view("k", b"one"), false).unwrap().fingerprint,
            0
        );
        let pointer = EventIdSource::parse("json-pointer:/id").unwrap();
        let x = pointer
            .key(&view("p1", br#"{"id":"e-1","n":1}"#), true)
            .unwrap();
        let y = pointer
            .key(&view("p2", br#"{"n":1,"id":"e-1"}"#), true)
            .unwrap();
        assert_eq!(
            x.id, y.id,
            "the same id in another partition key and member order"
        );
        assert_eq!(pointer.key(&view("p", b"\xff"), true), None);
        let payload = EventIdSource::Payload;
        assert_eq!(
            payload.key(&view("a", b"same"), false),
            payload.key(&view("b", b"same"), false)
        );
    }
}
