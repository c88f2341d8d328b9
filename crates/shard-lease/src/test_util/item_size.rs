//! [`item_size`]: how many bytes DynamoDB counts for an item, by the rules
//! of "DynamoDB item sizes and formats" (Amazon DynamoDB Developer Guide,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html>),
//! and the capacity units a request for it consumes. The fake table
//! refuses items over [`MAX_ITEM_BYTES`] and reports capacity with them;
//! tests of other tables bound their items with them.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

/// DynamoDB's largest item: 400 KB, names and values included ("Items" in
/// "Constraints in Amazon DynamoDB"; 1 KB = 1,024 bytes there).
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// Bytes of item per write capacity unit (or write request unit): 1 KB.
pub const WRITE_UNIT_BYTES: usize = 1024;

/// Bytes of item per strongly consistent read capacity unit: 4 KB
/// (an eventually consistent read costs half).
pub const READ_UNIT_BYTES: usize = 4 * 1024;

/// The size DynamoDB counts for `item`: for each attribute, the UTF-8
/// bytes of its name and the size of its value — a string's UTF-8 bytes, a
/// binary's raw bytes, a number's significant digits (1 byte per two, plus
/// 1), 1 byte for a Boolean or a null, a set's elements summed; a list or
/// map 3 bytes plus 1 byte and the size of each element (a map's element
/// names count as attribute names).
pub fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter()
        .map(|(name, value)| name.len() + value_size(value))
        .sum()
}

/// Write capacity units of a PutItem of an item of `bytes` bytes (DynamoDB
/// counts the larger of the old and the new item): one per started KB, at
/// least one.
pub fn write_units(bytes: usize) -> f64 {
    units(bytes, WRITE_UNIT_BYTES)
}

/// Read capacity units of a read of an item of `bytes` bytes (0 for an
/// absent item, which costs the minimum: one unit): one per started 4 KB,
/// at least one; half of that when `consistent` is false.
pub fn read_units(bytes: usize, consistent: bool) -> f64 {
    let units = units(bytes, READ_UNIT_BYTES);
    if consistent { units } else { units / 2.0 }
}

/// Started `unit`s in `bytes`, at least one.
#[allow(
    clippy::cast_precision_loss,
    reason = "item sizes are at most a few hundred KB"
)]
fn units(bytes: usize, unit: usize) -> f64 {
    bytes.div_ceil(unit).max(1) as f64
}

/// The size of one value, without its attribute name.
fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(text) => text.len(),
        AttributeValue::N(number) => number_size(number),
        AttributeValue::B(bytes) => bytes.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(texts) => texts.iter().map(String::len).sum(),
        AttributeValue::Ns(numbers) => numbers.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(blobs) => blobs.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(values) => 3 + values.iter().map(|v| 1 + value_size(v)).sum::<usize>(),
        AttributeValue::M(map) => {
            3 + map
                .iter()
                .map(|(name, v)| 1 + name.len() + value_size(v))
                .sum::<usize>()
        }
        // A type newer than this SDK: as large as its debug text, which
        // is no smaller than what it holds.
        other => format!("{other:?}").len(),
    }
}

/// A number's size: 1 byte per two significant digits (leading and
/// trailing zeros trimmed; sign, point and exponent not counted), plus 1.
fn number_size(number: &str) -> usize {
    let mantissa = number.split(['e', 'E']).next().unwrap_or_default();
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
    significant.max(1).div_ceil(2) + 1
}

#[cfg(test)]
mod tests {
    use aws_smithy_types::Blob;

    use super::*;

    fn n(text: &str) -> AttributeValue {
        AttributeValue::N(text.to_owned())
    }

    #[test]
    fn sizes_follow_the_developer_guide() {
        assert_eq!(number_size("0"), 2);
        assert_eq!(number_size("12"), 2);
        assert_eq!(number_size("123"), 3);
        assert_eq!(number_size("-1000"), 2, "zeros trimmed, sign not counted");
        assert_eq!(number_size("0.00125"), 3);
        assert_eq!(number_size("1795238823045"), 8, "13 digits");
        let item = HashMap::from([
            ("id".to_owned(), AttributeValue::S("héllo".to_owned())),
            ("n".to_owned(), n("42")),
            ("b".to_owned(), AttributeValue::B(Blob::new(vec![0; 5]))),
            ("t".to_owned(), AttributeValue::Bool(true)),
            (
                "l".to_owned(),
                AttributeValue::L(vec![n("1"), AttributeValue::S("ab".to_owned())]),
            ),
            (
                "m".to_owned(),
                AttributeValue::M(HashMap::from([("xy".to_owned(), n("7"))])),
            ),
            ("e".to_owned(), AttributeValue::M(HashMap::new())),
        ]);
        // id: 2 + 6 (é is two bytes); n: 1 + 2; b: 1 + 5; t: 1 + 1;
        // l: 1 + 3 + (1 + 2) + (1 + 2); m: 1 + 3 + (1 + 2 + 2); e: 1 + 3.
        assert_eq!(item_size(&item), 8 + 3 + 6 + 2 + 10 + 9 + 4);
    }

    #[test]
    fn capacity_units_are_started_units_of_the_item() {
        assert_eq!(write_units(0), 1.0);
        assert_eq!(write_units(1024), 1.0);
        assert_eq!(write_units(1025), 2.0);
        assert_eq!(read_units(0, false), 0.5);
        assert_eq!(read_units(4096, true), 1.0);
        assert_eq!(read_units(4097, false), 1.0);
    }
}
