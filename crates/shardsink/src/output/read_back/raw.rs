//! Raw payloads read back — the bodies of the `raw` format: each payload
//! followed by the delimiter (`--delimiter`, stored with the object in
//! `x-amz-meta-shardsink-format`). Raw bodies hold no record identity.
//!
//! - [`decode`]: a body's payloads — the inverse of the encoder for
//!   payloads that do not hold the delimiter's bytes, checked by a
//!   round-trip test.

/// Splits a raw body (uncompressed) into its payloads, each up to the next
/// `delimiter`; what follows the last delimiter (a body cut short, or
/// written without one at the end) is a payload too, when not empty. With
/// an empty delimiter the whole body is one payload (none when empty).
///
/// A payload that holds the delimiter itself is split there: the encoder
/// does not escape it.
#[cfg_attr(not(test), allow(dead_code))] // only the round-trip test needs payloads today
pub fn decode<'a>(body: &'a [u8], delimiter: &[u8]) -> Vec<&'a [u8]> {
    if delimiter.is_empty() {
        return if body.is_empty() {
            Vec::new()
        } else {
            vec![body]
        };
    }
    let mut payloads = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        match rest
            .windows(delimiter.len())
            .position(|window| window == delimiter)
        {
            Some(at) => {
                payloads.push(&rest[..at]);
                rest = &rest[at + delimiter.len()..];
            }
            None => {
                payloads.push(rest);
                break;
            }
        }
    }
    payloads
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;

    use super::*;
    use crate::output::format::{BodyEncoder, Format, MainBody};
    use crate::read::record::ShardRecord;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Payloads without the delimiter's bytes decode to themselves, in
        /// order, whatever the delimiter.
        #[test]
        fn raw_bodies_decode_to_the_payloads_encoded(
            delimiter in prop::collection::vec(any::<u8>(), 1..4),
            payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..32), 0..24),
        ) {
            let payloads: Vec<Vec<u8>> = payloads
                .into_iter()
                .map(|payload| payload.into_iter().filter(|b| !delimiter.contains(b)).collect())
                .collect();
            let format = Format::Raw { delimiter: delimiter.clone() };
            let mut encoder = BodyEncoder::new("shardId-000000000007", &format);
            for (i, payload) in payloads.iter().enumerate() {
                encoder.push(
                    &ShardRecord {
                        sequence_number: sequence_range::SequenceNumber::from(i as u64 + 1),
                        arrival_millis: 1_795_238_823_045,
                        partition_key: "pk".to_owned(),
                        data: Bytes::copy_from_slice(payload),
                        user_records: None,
                    },
                    None,
                );
            }
            let MainBody::Bytes(body) = encoder.finish().main else {
                panic!("raw payloads are bytes");
            };
            let decoded = decode(&body, &delimiter);
            prop_assert_eq!(decoded, payloads.iter().map(Vec::as_slice).collect::<Vec<_>>());
        }
    }
}
