use std::collections::HashSet;
use std::error::Error as _;

use proptest::prelude::*;

use super::*;

type Triple = (String, Option<String>, Vec<u8>);

fn triple(pk: &str, ehk: Option<&str>, data: &[u8]) -> Triple {
    (pk.to_owned(), ehk.map(str::to_owned), data.to_vec())
}

/// Wraps protobuf bytes in magic and a correct digest.
fn frame(body: &[u8]) -> Bytes {
    let mut out = KPL_MAGIC.to_vec();
    out.extend_from_slice(body);
    out.extend_from_slice(Md5::digest(body).as_slice());
    Bytes::from(out)
}

fn record(pk_index: Option<u64>, ehk_index: Option<u64>, data: Option<&[u8]>) -> Record {
    Record {
        partition_key_index: pk_index,
        explicit_hash_key_index: ehk_index,
        data: data.map(Bytes::copy_from_slice),
        tags: Vec::new(),
    }
}

fn message(pks: &[&str], ehks: &[&str], records: Vec<Record>) -> Bytes {
    let table = |keys: &[&str]| {
        keys.iter()
            .map(|k| Bytes::copy_from_slice(k.as_bytes()))
            .collect()
    };
    let msg = AggregatedRecord {
        partition_key_table: table(pks),
        explicit_hash_key_table: table(ehks),
        records,
    };
    frame(&msg.encode_to_vec())
}

fn body_of(aggregate: &[u8]) -> AggregatedRecord {
    let body = &aggregate[KPL_MAGIC.len()..aggregate.len() - DIGEST_LEN];
    AggregatedRecord::decode(body).unwrap()
}

fn assert_shares_buffer(input: &Bytes, records: &[UserRecord]) {
    let range = input.as_ptr_range();
    for r in records.iter().filter(|r| !r.data.is_empty()) {
        let data = r.data.as_ptr_range();
        assert!(
            range.start <= data.start && data.end <= range.end,
            "user record {} data was copied",
            r.sub_sequence_number
        );
    }
}

#[test]
fn magic_matches_format_doc() {
    assert_eq!(KPL_MAGIC, [0xF3, 0x89, 0x9A, 0xC2]);
    // The KCL's Java constant {-13, -119, -102, -62}.
    assert_eq!(
        KPL_MAGIC,
        [-13i8, -119, -102, -62].map(|b| b.to_ne_bytes()[0])
    );
}

#[test]
fn plain_records_are_not_aggregated() {
    for data in [
        &b""[..],
        &b"hello world"[..],
        &KPL_MAGIC[..3],
        &[
            0xF3, 0x89, 0x9A, 0x00, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
        ][..],
        &[0x89, 0xF3, 0x9A, 0xC2][..],
    ] {
        assert!(matches!(
            deaggregate(&Bytes::copy_from_slice(data)),
            Ok(None)
        ));
    }
    // The first three magic bytes followed by an otherwise valid frame.
    let mut almost = aggregate(&[triple("pk", None, b"x")]);
    almost[3] = 0;
    assert!(matches!(deaggregate(&Bytes::from(almost)), Ok(None)));
}

#[test]
fn decodes_hand_encoded_wire_bytes() {
    // partition_key_table = ["a", "b"], explicit_hash_key_table = ["7"],
    // records = [{pk 1, ehk 0, data "hi"}, {pk 0, data ""}].
    let body = [
        0x0A, 0x01, b'a', // field 1, "a"
        0x0A, 0x01, b'b', // field 1, "b"
        0x12, 0x01, b'7', // field 2, "7"
        0x1A, 0x08, 0x08, 0x01, 0x10, 0x00, 0x1A, 0x02, b'h', b'i', // field 3
        0x1A, 0x04, 0x08, 0x00, 0x1A, 0x00, // field 3
    ];
    let records = deaggregate(&frame(&body)).unwrap().unwrap();
    assert_eq!(
        records,
        vec![
            UserRecord {
                sub_sequence_number: 0,
                partition_key: "b".into(),
                explicit_hash_key: Some("7".into()),
                data: Bytes::from_static(b"hi"),
            },
            UserRecord {
                sub_sequence_number: 1,
                partition_key: "a".into(),
                explicit_hash_key: None,
                data: Bytes::new(),
            },
        ]
    );
}

#[test]
fn aggregate_emits_expected_wire_bytes() {
    let out = aggregate(&[triple("a", Some("7"), b"hi"), triple("a", None, b"")]);
    let body = [
        0x0A, 0x01, b'a', 0x12, 0x01, b'7', 0x1A, 0x08, 0x08, 0x00, 0x10, 0x00, 0x1A, 0x02, b'h',
        b'i', 0x1A, 0x04, 0x08, 0x00, 0x1A, 0x00,
    ];
    assert_eq!(out, frame(&body));
}

#[test]
fn sub_sequence_numbers_follow_record_order() {
    let input: Vec<Triple> = (0..10)
        .map(|i| triple(&format!("pk{}", i % 3), None, &[i]))
        .collect();
    let records = deaggregate(&Bytes::from(aggregate(&input)))
        .unwrap()
        .unwrap();
    assert_eq!(records.len(), 10);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.sub_sequence_number, i as u64);
        assert_eq!(r.data.as_ref(), &[i as u8]);
        assert_eq!(r.partition_key, format!("pk{}", i % 3));
    }
}

#[test]
fn single_record_is_still_aggregated() {
    let out = Bytes::from(aggregate(&[triple("k", None, b"only")]));
    assert!(out.starts_with(&KPL_MAGIC));
    let records = deaggregate(&out).unwrap().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].sub_sequence_number, 0);
    assert_eq!(records[0].data, Bytes::from_static(b"only"));
}

#[test]
fn explicit_hash_keys_are_optional_and_deduplicated() {
    let input = [
        triple("a", Some("340282366920938463463374607431768211455"), b"1"),
        triple("b", None, b"2"),
        triple("c", Some("0"), b"3"),
        triple("a", Some("340282366920938463463374607431768211455"), b"4"),
    ];
    let out = aggregate(&input);
    let msg = body_of(&out);
    assert_eq!(msg.explicit_hash_key_table.len(), 2);
    assert_eq!(msg.records[1].explicit_hash_key_index, None);
    assert_eq!(msg.records[3].explicit_hash_key_index, Some(0));
    let records = deaggregate(&Bytes::from(out)).unwrap().unwrap();
    let ehks: Vec<_> = records
        .iter()
        .map(|r| r.explicit_hash_key.as_deref())
        .collect();
    assert_eq!(
        ehks,
        [
            Some("340282366920938463463374607431768211455"),
            None,
            Some("0"),
            Some("340282366920938463463374607431768211455"),
        ]
    );
}

#[test]
fn partition_keys_are_deduplicated_in_first_seen_order() {
    let input = [
        triple("b", None, b""),
        triple("a", None, b""),
        triple("b", None, b""),
        triple("", None, b""),
        triple("a", None, b""),
    ];
    let msg = body_of(&aggregate(&input));
    let table: Vec<&[u8]> = msg.partition_key_table.iter().map(|k| k.as_ref()).collect();
    assert_eq!(table, [&b"b"[..], b"a", b""]);
    let indices: Vec<_> = msg.records.iter().map(|r| r.partition_key_index).collect();
    assert_eq!(indices, [Some(0), Some(1), Some(0), Some(2), Some(1)]);
}

#[test]
fn data_is_not_copied() {
    let input: Vec<Triple> = (0..20u8)
        .map(|i| triple("pk", None, &vec![i; usize::from(i) * 7]))
        .collect();
    let bytes = Bytes::from(aggregate(&input));
    let records = deaggregate(&bytes).unwrap().unwrap();
    assert_eq!(records.len(), 20);
    assert_shares_buffer(&bytes, &records);
}

#[test]
fn tags_are_ignored() {
    #[derive(Clone, PartialEq, Message)]
    struct FullTag {
        #[prost(string, optional, tag = "1")]
        key: Option<String>,
        #[prost(string, optional, tag = "2")]
        value: Option<String>,
    }
    let tag = FullTag {
        key: Some("k".into()),
        value: Some("v".into()),
    };
    let keyless = FullTag {
        key: None,
        value: Some("v".into()),
    };
    // Record {pk 0, data "d", tags [tag, valueless tag]}.
    let mut rec = vec![0x08, 0x00, 0x1A, 0x01, b'd'];
    for t in [
        tag.clone(),
        FullTag {
            key: Some("k2".into()),
            value: None,
        },
    ] {
        rec.push(0x22);
        t.encode_length_delimited(&mut rec).unwrap();
    }
    let mut body = vec![0x0A, 0x01, b'p', 0x1A, rec.len() as u8];
    body.extend_from_slice(&rec);
    let records = deaggregate(&frame(&body)).unwrap().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].data, Bytes::from_static(b"d"));

    // A tag without its required key makes the message invalid.
    let mut rec = vec![0x08, 0x00, 0x1A, 0x01, b'd', 0x22];
    keyless.encode_length_delimited(&mut rec).unwrap();
    let mut body = vec![0x0A, 0x01, b'p', 0x1A, rec.len() as u8];
    body.extend_from_slice(&rec);
    assert!(matches!(
        deaggregate(&frame(&body)),
        Err(KplError::MissingField { field: "Tag.key" })
    ));
}

#[test]
fn invalid_utf8_keys_are_replaced_like_protobuf_java() {
    let body = [
        0x0A, 0x02, b'a', 0xFF, // partition key "a\xFF"
        0x12, 0x01, 0xC3, // explicit hash key "\xC3"
        0x1A, 0x07, 0x08, 0x00, 0x10, 0x00, 0x1A, 0x01, b'x',
    ];
    let records = deaggregate(&frame(&body)).unwrap().unwrap();
    assert_eq!(records[0].partition_key, "a\u{FFFD}");
    assert_eq!(records[0].explicit_hash_key.as_deref(), Some("\u{FFFD}"));
}

#[test]
fn unknown_fields_are_skipped() {
    // Field 9 (varint) at top level and field 7 (bytes) inside the record.
    let body = [
        0x48, 0x05, 0x0A, 0x01, b'p', 0x1A, 0x08, 0x08, 0x00, 0x3A, 0x01, b'z', 0x1A, 0x01, b'x',
    ];
    let records = deaggregate(&frame(&body)).unwrap().unwrap();
    assert_eq!(records[0].data, Bytes::from_static(b"x"));
}

#[test]
fn error_too_short() {
    for len in 0..=15 {
        let mut data = KPL_MAGIC.to_vec();
        data.resize(KPL_MAGIC.len() + len, 0);
        let err = deaggregate(&Bytes::from(data)).unwrap_err();
        assert!(
            matches!(err, KplError::TooShort { len: l } if l == len + 4),
            "{err:?}"
        );
    }
    let err = deaggregate(&Bytes::from_static(&KPL_MAGIC)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "kpl record too short: 4 bytes, need at least 20"
    );
}

#[test]
fn error_digest_mismatch() {
    let mut data = aggregate(&[triple("pk", None, b"payload")]);
    let last = data.len() - 1;
    data[last] ^= 1;
    let err = deaggregate(&Bytes::from(data)).unwrap_err();
    assert!(matches!(err, KplError::DigestMismatch));
    assert_eq!(err.to_string(), "kpl digest mismatch");

    let mut data = aggregate(&[triple("pk", None, b"payload")]);
    data[6] ^= 0x40;
    assert!(matches!(
        deaggregate(&Bytes::from(data)),
        Err(KplError::DigestMismatch)
    ));
}

#[test]
fn error_decode() {
    // Field 1 announces 10 bytes but only 1 follows.
    let err = deaggregate(&frame(&[0x0A, 0x0A, b'a'])).unwrap_err();
    assert!(matches!(err, KplError::Decode(_)), "{err:?}");
    assert_eq!(err.to_string(), "kpl protobuf decode error");
    assert!(err.source().is_some());
    // Invalid wire type 7.
    assert!(matches!(
        deaggregate(&frame(&[0x0F])),
        Err(KplError::Decode(_))
    ));
    // Unterminated varint.
    assert!(matches!(
        deaggregate(&frame(&[0x1A, 0x03, 0x08, 0xFF, 0xFF])),
        Err(KplError::Decode(_))
    ));
}

#[test]
fn error_missing_required_fields() {
    let no_pk = message(&["p"], &[], vec![record(None, None, Some(b"d"))]);
    assert!(matches!(
        deaggregate(&no_pk),
        Err(KplError::MissingField {
            field: "Record.partition_key_index"
        })
    ));
    let no_data = message(&["p"], &[], vec![record(Some(0), None, None)]);
    let err = deaggregate(&no_data).unwrap_err();
    assert!(matches!(
        err,
        KplError::MissingField {
            field: "Record.data"
        }
    ));
    assert_eq!(err.to_string(), "kpl required field missing: Record.data");
    // A missing field anywhere wins over a bad index earlier on, as in
    // protobuf-java where parsing fails before any lookup.
    let both = message(
        &[],
        &[],
        vec![
            record(Some(5), None, Some(b"")),
            record(Some(0), None, None),
        ],
    );
    assert!(matches!(
        deaggregate(&both),
        Err(KplError::MissingField { .. })
    ));
}

#[test]
fn error_partition_key_index_out_of_range() {
    let bad = message(
        &["a", "b"],
        &[],
        vec![
            record(Some(1), None, Some(b"ok")),
            record(Some(2), None, Some(b"bad")),
        ],
    );
    let err = deaggregate(&bad).unwrap_err();
    assert!(matches!(
        err,
        KplError::PartitionKeyIndexOutOfRange {
            index: 2,
            table_len: 2
        }
    ));
    assert_eq!(
        err.to_string(),
        "kpl partition key index out of range: index 2, table length 2"
    );
    // Empty partition key table.
    let empty = message(&[], &[], vec![record(Some(0), None, Some(b""))]);
    assert!(matches!(
        deaggregate(&empty),
        Err(KplError::PartitionKeyIndexOutOfRange {
            index: 0,
            table_len: 0
        })
    ));
    // An index that does not fit 32 bits is not truncated.
    let huge = message(&["a"], &[], vec![record(Some(1 << 32), None, Some(b""))]);
    assert!(matches!(
        deaggregate(&huge),
        Err(KplError::PartitionKeyIndexOutOfRange {
            index: 0x1_0000_0000,
            table_len: 1
        })
    ));
    let max = message(&["a"], &[], vec![record(Some(u64::MAX), None, Some(b""))]);
    assert!(matches!(
        deaggregate(&max),
        Err(KplError::PartitionKeyIndexOutOfRange {
            index: u64::MAX,
            ..
        })
    ));
}

#[test]
fn error_explicit_hash_key_index_out_of_range() {
    let bad = message(&["a"], &["1"], vec![record(Some(0), Some(1), Some(b"x"))]);
    let err = deaggregate(&bad).unwrap_err();
    assert!(matches!(
        err,
        KplError::ExplicitHashKeyIndexOutOfRange {
            index: 1,
            table_len: 1
        }
    ));
    assert_eq!(
        err.to_string(),
        "kpl explicit hash key index out of range: index 1, table length 1"
    );
    let empty = message(&["a"], &[], vec![record(Some(0), Some(0), Some(b"x"))]);
    assert!(matches!(
        deaggregate(&empty),
        Err(KplError::ExplicitHashKeyIndexOutOfRange {
            index: 0,
            table_len: 0
        })
    ));
    // The partition key is looked up first, as in the KCL.
    let both = message(&[], &[], vec![record(Some(0), Some(0), Some(b"x"))]);
    assert!(matches!(
        deaggregate(&both),
        Err(KplError::PartitionKeyIndexOutOfRange { .. })
    ));
}

#[test]
fn error_no_records() {
    let err = deaggregate(&Bytes::from(aggregate(&[]))).unwrap_err();
    assert!(matches!(err, KplError::NoRecords));
    assert_eq!(err.to_string(), "kpl aggregate has no user records");
    // Exactly magic + digest of the empty message: 20 bytes.
    assert_eq!(frame(&[]).len(), MIN_AGGREGATE_LEN);
    assert!(matches!(deaggregate(&frame(&[])), Err(KplError::NoRecords)));
    // Key tables but no records.
    let tables_only = message(&["a", "b"], &["1"], vec![]);
    assert!(matches!(
        deaggregate(&tables_only),
        Err(KplError::NoRecords)
    ));
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-c]{0,2}",
        1 => "\\PC{0,12}",
    ]
}

fn triples() -> impl Strategy<Value = Vec<Triple>> {
    proptest::collection::vec(
        (
            key(),
            proptest::option::of(prop_oneof!["[0-9]{1,3}", "\\PC{0,8}"]),
            proptest::collection::vec(any::<u8>(), 0..48),
        ),
        0..24,
    )
}

proptest! {
    #[test]
    fn round_trip(input in triples()) {
        let bytes = Bytes::from(aggregate(&input));
        prop_assert!(bytes.starts_with(&KPL_MAGIC));
        let result = deaggregate(&bytes);
        if input.is_empty() {
            prop_assert!(matches!(result, Err(KplError::NoRecords)));
            return Ok(());
        }
        let records = result.unwrap().unwrap();
        prop_assert_eq!(records.len(), input.len());
        for (i, (r, (pk, ehk, data))) in records.iter().zip(&input).enumerate() {
            prop_assert_eq!(r.sub_sequence_number, i as u64);
            prop_assert_eq!(&r.partition_key, pk);
            prop_assert_eq!(&r.explicit_hash_key, ehk);
            prop_assert_eq!(r.data.as_ref(), data.as_slice());
        }
        assert_shares_buffer(&bytes, &records);

        // Tables hold each distinct key exactly once.
        let msg = body_of(&bytes);
        let pks: HashSet<&String> = input.iter().map(|t| &t.0).collect();
        let ehks: HashSet<&String> = input.iter().filter_map(|t| t.1.as_ref()).collect();
        prop_assert_eq!(msg.partition_key_table.len(), pks.len());
        prop_assert_eq!(msg.explicit_hash_key_table.len(), ehks.len());
    }

    #[test]
    fn indices_checked_against_tables(
        pk_table_len in 0usize..4,
        ehk_table_len in 0usize..4,
        recs in proptest::collection::vec(
            (0u64..6, proptest::option::of(0u64..6), proptest::collection::vec(any::<u8>(), 0..8)),
            0..8,
        ),
    ) {
        let pks: Vec<String> = (0..pk_table_len).map(|i| format!("pk{i}")).collect();
        let ehks: Vec<String> = (0..ehk_table_len).map(|i| i.to_string()).collect();
        let pk_refs: Vec<&str> = pks.iter().map(String::as_str).collect();
        let ehk_refs: Vec<&str> = ehks.iter().map(String::as_str).collect();
        let bytes = message(
            &pk_refs,
            &ehk_refs,
            recs.iter().map(|(p, e, d)| record(Some(*p), *e, Some(d))).collect(),
        );
        let result = deaggregate(&bytes);

        // Model: the first bad index in record order, partition key first.
        let first_bad = recs.iter().find_map(|(p, e, _)| {
            if *p >= pk_table_len as u64 {
                Some((true, *p))
            } else {
                e.filter(|e| *e >= ehk_table_len as u64).map(|e| (false, e))
            }
        });
        match (recs.is_empty(), first_bad, result) {
            (true, _, Err(KplError::NoRecords)) => {}
            (false, Some((true, i)), Err(KplError::PartitionKeyIndexOutOfRange { index, table_len })) => {
                prop_assert_eq!((index, table_len), (i, pk_table_len));
            }
            (false, Some((false, i)), Err(KplError::ExplicitHashKeyIndexOutOfRange { index, table_len })) => {
                prop_assert_eq!((index, table_len), (i, ehk_table_len));
            }
            (false, None, Ok(Some(records))) => {
                prop_assert_eq!(records.len(), recs.len());
                for (r, (p, e, d)) in records.iter().zip(&recs) {
                    prop_assert_eq!(&r.partition_key, &pks[*p as usize]);
                    prop_assert_eq!(r.explicit_hash_key.as_ref(), e.map(|e| &ehks[e as usize]));
                    prop_assert_eq!(r.data.as_ref(), d.as_slice());
                }
            }
            (empty, bad, other) => {
                prop_assert!(false, "empty={} bad={:?} got {:?}", empty, bad, other);
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let bytes = Bytes::from(data);
        let result = deaggregate(&bytes);
        if !bytes.starts_with(&KPL_MAGIC) {
            prop_assert!(matches!(result, Ok(None)));
        }
    }

    #[test]
    fn arbitrary_bytes_after_magic_never_panic(
        tail in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut data = KPL_MAGIC.to_vec();
        data.extend_from_slice(&tail);
        let result = deaggregate(&Bytes::from(data));
        prop_assert!(!matches!(result, Ok(None)));
        if tail.len() < DIGEST_LEN {
            prop_assert!(matches!(result, Err(KplError::TooShort { .. })), "{:?}", result);
        }
    }

    #[test]
    fn arbitrary_body_with_valid_digest_never_panics(
        body in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let bytes = frame(&body);
        match deaggregate(&bytes) {
            Ok(Some(records)) => {
                prop_assert!(!records.is_empty());
                assert_shares_buffer(&bytes, &records);
            }
            Ok(None) | Err(KplError::TooShort { .. } | KplError::DigestMismatch) => {
                prop_assert!(false, "framing not accepted");
            }
            Err(_) => {}
        }
    }

    #[test]
    fn mutated_aggregates_never_panic(
        input in triples(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let out = aggregate(&input);
        let mut body = out[KPL_MAGIC.len()..out.len() - DIGEST_LEN].to_vec();
        for (at, byte, op) in edits {
            let i = at.index(body.len() + 1);
            match op {
                0 if i < body.len() => body[i] = byte,
                1 => body.insert(i, byte),
                _ if i < body.len() => { body.remove(i); }
                _ => {}
            }
        }
        let bytes = frame(&body);
        if let Ok(Some(records)) = deaggregate(&bytes) {
            prop_assert!(!records.is_empty());
            for (i, r) in records.iter().enumerate() {
                prop_assert_eq!(r.sub_sequence_number, i as u64);
            }
            assert_shares_buffer(&bytes, &records);
        }
    }
}
