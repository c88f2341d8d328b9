//! Byte layout of the local store's two keyspaces.
//!
//! `copies`: key `{tenant}{id}` — the shard's tenant number (see
//! `tenants`) as 4 big-endian bytes and the event id hash as 16 big-endian
//! bytes, 20 bytes in all — so a shard's keys are one contiguous range.
//! Value: a format byte ([`COPIES_FORMAT`]) and the accepted copies of that
//! id under that shard, each as
//!
//! | bytes | field |
//! |---|---|
//! | 1 | flags: bit 0 = a sub-sequence number follows |
//! | 8 | fingerprint, little-endian |
//! | 8 | arrival, ms since the Unix epoch, little-endian |
//! | 8 | sub-sequence number, little-endian (when flagged) |
//! | 1 | number of decimal digits of the sequence number (at most 129) |
//! | ⌈digits/2⌉ | the digits, two per byte, high nibble first |
//!
//! 46 bytes for a copy with a 56-digit sequence number, outside KPL. A
//! copy's shard is the key's shard.
//!
//! `shards`: key `{tag}{shard id}`, one tag per fact of a shard (see
//! [`Tag`]); watermark values are a 4-byte little-endian length, the
//! settings' text and the sequence number's text; times are 8-byte
//! big-endian `i64` ms; tenants 4-byte big-endian `u32`.

use std::sync::Arc;

use sequence_range::SequenceNumber;

use crate::rule::{AcceptedCopy, CopyRef};

/// The first byte of every `copies` value: the layout above.
pub(crate) const COPIES_FORMAT: u8 = 1;

/// Length of a `copies` key: tenant and id.
pub(crate) const COPIES_KEY_LEN: usize = 4 + 16;

/// A value that does not decode: the store's files were changed by
/// something else, or a later format was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Corrupt;

/// The `copies` key of `id` under `tenant`.
pub(crate) fn copies_key(tenant: u32, id: u128) -> [u8; COPIES_KEY_LEN] {
    let mut key = [0; COPIES_KEY_LEN];
    let (prefix, rest) = key.split_at_mut(4);
    prefix.copy_from_slice(&tenant.to_be_bytes());
    rest.copy_from_slice(&id.to_be_bytes());
    key
}

/// The tenant of a `copies` key; `None` when it is not one.
pub(crate) fn key_tenant(key: &[u8]) -> Option<u32> {
    if key.len() != COPIES_KEY_LEN {
        return None;
    }
    key.first_chunk::<4>()
        .map(|tenant| u32::from_be_bytes(*tenant))
}

/// The id of a `copies` key; `None` when it is not one.
pub(crate) fn key_id(key: &[u8]) -> Option<u128> {
    if key.len() != COPIES_KEY_LEN {
        return None;
    }
    key.last_chunk::<16>().map(|id| u128::from_be_bytes(*id))
}

/// A readable rendering of a `copies` key of `shard_id` for error
/// messages: `{shard id}/{id as 32 hex digits}`.
pub(crate) fn describe_copies_key(key: &[u8], shard_id: &str) -> String {
    let id = key.get(4..).unwrap_or_default();
    let hex: String = id.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{shard_id}/{hex}")
}

/// Encodes `copies` as a `copies` value into `out` (cleared first).
pub(crate) fn encode_copies<'a>(
    copies: impl IntoIterator<Item = &'a AcceptedCopy>,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.push(COPIES_FORMAT);
    for copy in copies {
        let sub = copy.copy.sub_sequence_number;
        out.push(u8::from(sub.is_some()));
        out.extend_from_slice(&copy.fingerprint.to_le_bytes());
        out.extend_from_slice(&copy.arrival_millis.to_le_bytes());
        if let Some(sub) = sub {
            out.extend_from_slice(&sub.to_le_bytes());
        }
        let digits = copy.copy.sequence_number.as_str().as_bytes();
        // Invariant: sequence numbers have at most 129 digits
        // (`SequenceNumber::MAX_DIGITS`).
        debug_assert!(digits.len() <= usize::from(u8::MAX));
        out.push(u8::try_from(digits.len()).unwrap_or(u8::MAX));
        for pair in digits.chunks(2) {
            let high = pair[0] - b'0';
            let low = pair.get(1).map_or(0, |digit| digit - b'0');
            out.push(high << 4 | low);
        }
    }
}

/// Decodes a `copies` value stored under `shard_id`.
///
/// # Errors
/// [`Corrupt`] when the bytes do not follow the layout, or a sequence
/// number is not canonical.
pub(crate) fn decode_copies(
    value: &[u8],
    shard_id: &Arc<str>,
) -> Result<Vec<AcceptedCopy>, Corrupt> {
    let mut reader = Reader::new(value)?;
    let mut copies = Vec::with_capacity(1);
    while let Some(raw) = reader.next_copy()? {
        let mut text = String::with_capacity(raw.digit_count);
        for index in 0..raw.digit_count {
            let byte = raw.packed.get(index / 2).ok_or(Corrupt)?;
            let digit = if index % 2 == 0 {
                byte >> 4
            } else {
                byte & 0x0f
            };
            if digit > 9 {
                return Err(Corrupt);
            }
            text.push(char::from(b'0' + digit));
        }
        let sequence_number = SequenceNumber::try_from(text).map_err(|_| Corrupt)?;
        copies.push(AcceptedCopy {
            fingerprint: raw.fingerprint,
            arrival_millis: raw.arrival_millis,
            copy: CopyRef {
                shard_id: Arc::clone(shard_id),
                sequence_number,
                sub_sequence_number: raw.sub_sequence_number,
            },
        });
    }
    Ok(copies)
}

/// The latest arrival among the copies of a `copies` value, without
/// decoding sequence numbers; `None` when it holds none or is corrupt.
pub(crate) fn newest_arrival(value: &[u8]) -> Option<i64> {
    let mut reader = Reader::new(value).ok()?;
    let mut newest = None;
    while let Some(raw) = reader.next_copy().ok()? {
        newest = newest.max(Some(raw.arrival_millis));
    }
    newest
}

/// One copy as stored, its digits still packed.
struct RawCopy<'a> {
    fingerprint: u64,
    arrival_millis: i64,
    sub_sequence_number: Option<u64>,
    digit_count: usize,
    packed: &'a [u8],
}

/// Reads the copies of a `copies` value in turn.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Checks the format byte.
    fn new(value: &'a [u8]) -> Result<Self, Corrupt> {
        match value.split_first() {
            Some((&COPIES_FORMAT, rest)) => Ok(Self { rest }),
            _ => Err(Corrupt),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        if self.rest.len() < n {
            return Err(Corrupt);
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    fn eight(&mut self) -> Result<[u8; 8], Corrupt> {
        self.take(8)?.try_into().map_err(|_| Corrupt)
    }

    /// The next copy; `None` at the end.
    fn next_copy(&mut self) -> Result<Option<RawCopy<'a>>, Corrupt> {
        let Some((&flags, _)) = self.rest.split_first() else {
            return Ok(None);
        };
        self.take(1)?;
        if flags > 1 {
            return Err(Corrupt);
        }
        let fingerprint = u64::from_le_bytes(self.eight()?);
        let arrival_millis = i64::from_le_bytes(self.eight()?);
        let sub_sequence_number = match flags {
            1 => Some(u64::from_le_bytes(self.eight()?)),
            _ => None,
        };
        let digit_count = usize::from(*self.take(1)?.first().ok_or(Corrupt)?);
        let packed = self.take(digit_count.div_ceil(2))?;
        Ok(Some(RawCopy {
            fingerprint,
            arrival_millis,
            sub_sequence_number,
            digit_count,
            packed,
        }))
    }
}

/// What a `shards` key holds about its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Tag {
    /// The watermark: settings and the last sequence number decided.
    Watermark = b'w',
    /// Read to `SHARD_END`: the settings it was read with.
    Ended = b'e',
    /// The expiry horizon: copies whose newest arrival is older are
    /// dropped (`i64`, ms since the epoch; `i64::MAX`: forgotten).
    Horizon = b'h',
    /// When the shard was last written, by the wall clock (`i64` ms since
    /// the epoch).
    Touched = b't',
    /// The shard's tenant: the prefix of its `copies` keys (`u32`).
    Tenant = b'n',
}

impl Tag {
    /// The tag a key starts with.
    pub(crate) fn of_key(key: &[u8]) -> Option<(Self, &[u8])> {
        let (&tag, shard) = key.split_first()?;
        let tag = [
            Self::Watermark,
            Self::Ended,
            Self::Horizon,
            Self::Touched,
            Self::Tenant,
        ]
        .into_iter()
        .find(|known| *known as u8 == tag)?;
        Some((tag, shard))
    }
}

/// The `shards` key of `tag` for `shard_id`.
pub(crate) fn shard_key(tag: Tag, shard_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + shard_id.len());
    key.push(tag as u8);
    key.extend_from_slice(shard_id.as_bytes());
    key
}

/// A watermark value: settings and sequence number.
pub(crate) fn encode_watermark(settings: &str, through: &SequenceNumber) -> Vec<u8> {
    let through = through.as_str().as_bytes();
    let mut value = Vec::with_capacity(4 + settings.len() + through.len());
    // Settings are a short description, far below 4 GiB.
    value.extend_from_slice(
        &u32::try_from(settings.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    value.extend_from_slice(settings.as_bytes());
    value.extend_from_slice(through);
    value
}

/// Decodes a watermark value.
///
/// # Errors
/// [`Corrupt`] when the layout or the sequence number is wrong.
pub(crate) fn decode_watermark(value: &[u8]) -> Result<(String, SequenceNumber), Corrupt> {
    let (length, rest) = value.split_first_chunk::<4>().ok_or(Corrupt)?;
    let length = usize::try_from(u32::from_le_bytes(*length)).map_err(|_| Corrupt)?;
    if rest.len() < length {
        return Err(Corrupt);
    }
    let (settings, through) = rest.split_at(length);
    let settings = std::str::from_utf8(settings).map_err(|_| Corrupt)?;
    let through = std::str::from_utf8(through).map_err(|_| Corrupt)?;
    let through = SequenceNumber::parse(through).map_err(|_| Corrupt)?;
    Ok((settings.to_owned(), through))
}

/// An `i64` value (horizon, touched time).
pub(crate) fn encode_time(millis: i64) -> [u8; 8] {
    millis.to_be_bytes()
}

/// A tenant value.
pub(crate) fn encode_tenant(tenant: u32) -> [u8; 4] {
    tenant.to_be_bytes()
}

/// Decodes a tenant value.
///
/// # Errors
/// [`Corrupt`] unless it is 4 bytes.
pub(crate) fn decode_tenant(value: &[u8]) -> Result<u32, Corrupt> {
    Ok(u32::from_be_bytes(value.try_into().map_err(|_| Corrupt)?))
}

/// Decodes an `i64` value.
///
/// # Errors
/// [`Corrupt`] unless it is 8 bytes.
pub(crate) fn decode_time(value: &[u8]) -> Result<i64, Corrupt> {
    Ok(i64::from_be_bytes(value.try_into().map_err(|_| Corrupt)?))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn copy(sequence: &str, sub: Option<u64>, fingerprint: u64, arrival: i64) -> AcceptedCopy {
        AcceptedCopy {
            fingerprint,
            arrival_millis: arrival,
            copy: CopyRef {
                shard_id: Arc::from("shardId-000000000001"),
                sequence_number: SequenceNumber::parse(sequence).unwrap(),
                sub_sequence_number: sub,
            },
        }
    }

    #[test]
    fn a_real_copy_takes_46_bytes() {
        let one = copy(
            "49590338271490256608559692538361571095921575989136588898",
            None,
            7,
            1_795_238_823_045,
        );
        let mut value = Vec::new();
        encode_copies([&one], &mut value);
        assert_eq!(value.len(), 1 + 46);
        assert_eq!(
            decode_copies(&value, &one.copy.shard_id).unwrap(),
            vec![one]
        );
    }

    #[test]
    fn keys_name_their_tenant() {
        let key = copies_key(7, 0xab);
        assert_eq!(key.len(), 20, "kept inline by fjall");
        assert_eq!(key_tenant(&key), Some(7));
        assert_eq!(
            describe_copies_key(&key, "shardId-000000000002"),
            format!("shardId-000000000002/{:032x}", 0xab)
        );
        assert_eq!(key_tenant(b"short"), None);
        assert_eq!(decode_tenant(&encode_tenant(9)), Ok(9));
        assert_eq!(
            Tag::of_key(&shard_key(Tag::Horizon, "s")),
            Some((Tag::Horizon, &b"s"[..]))
        );
    }

    #[test]
    fn bad_values_are_corrupt() {
        let shard: Arc<str> = Arc::from("s");
        assert_eq!(decode_copies(b"", &shard), Err(Corrupt));
        assert_eq!(decode_copies(&[2], &shard), Err(Corrupt));
        assert_eq!(decode_copies(&[1, 0, 1], &shard), Err(Corrupt));
        let mut value = Vec::new();
        encode_copies([&copy("12", None, 1, 2)], &mut value);
        let last = value.len() - 1;
        value[last] = 0xa0;
        assert_eq!(decode_copies(&value, &shard), Err(Corrupt), "not a digit");
        assert_eq!(newest_arrival(&[1]), None);
        assert!(decode_watermark(b"\x09\0\0\0abc").is_err());
        assert!(decode_time(b"1234").is_err());
    }

    proptest! {
        #[test]
        fn copies_and_watermarks_round_trip(
            copies in prop::collection::vec(
                ("(0|[1-9][0-9]{0,128})", any::<Option<u64>>(), any::<u64>(), any::<i64>()),
                0..4,
            ),
            settings in ".{0,40}",
        ) {
            let copies: Vec<AcceptedCopy> = copies
                .iter()
                .map(|(sequence, sub, fingerprint, arrival)| copy(sequence, *sub, *fingerprint, *arrival))
                .collect();
            let mut value = Vec::new();
            encode_copies(&copies, &mut value);
            let shard: Arc<str> = Arc::from("shardId-000000000001");
            prop_assert_eq!(&decode_copies(&value, &shard).unwrap(), &copies);
            prop_assert_eq!(
                newest_arrival(&value),
                copies.iter().map(|copy| copy.arrival_millis).max()
            );
            if let Some(first) = copies.first() {
                let through = &first.copy.sequence_number;
                let decoded = decode_watermark(&encode_watermark(&settings, through)).unwrap();
                prop_assert_eq!(decoded, (settings.clone(), through.clone()));
            }
        }
    }
}
