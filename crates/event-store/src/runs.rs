//! The write epoch's keys as *runs*: what one call writes, stored as one
//! fjall entry, with an in-memory [`Index`] of the keys they hold.
//!
//! A `copies` key written one fjall entry at a time costs a memtable
//! skip-list insert (a dozen cache misses in a memtable of 100,000 keys),
//! a journal record and a flush of its own: most of the store's CPU when
//! nearly every decision writes a new key. So while an epoch takes writes
//! (*open*), each `decide` or `insert` call writes the keys it changed as
//! one [`Run`] — one entry of the epoch's *runs keyspace*, in the call's
//! atomic batch — and the epoch's [`Index`] answers reads of its keys from
//! memory. When the next epoch starts, the closed epoch's keys are sorted
//! and loaded into its `copies` keyspace with fjall's bulk ingestion
//! ([`fjall::Keyspace::start_ingestion`]: tables written directly, no
//! memtable, no journal), and its runs keyspace is deleted (`epochs`).
//!
//! A run's value: a format byte ([`RUN_FORMAT`]), then per key written
//!
//! | bytes | field |
//! |---|---|
//! | 20 | the `copies` key (`codec`) |
//! | 4 | the value's length, little-endian; `u32::MAX` for a removal |
//! | length | the `copies` value (`codec`) |
//!
//! Runs are numbered in the order they are written (a run key is its
//! number, 8 big-endian bytes); a later run's entry for a key replaces an
//! earlier one's, as a later write of the key would. Calls that write the
//! same key hold the same shard lock, so their runs are numbered in the
//! order they commit. Reopening the store rebuilds the index by reading
//! the runs in order.

use std::collections::hash_map::Entry;

use crate::codec::COPIES_KEY_LEN;

/// The first byte of every run value: the layout above.
pub(crate) const RUN_FORMAT: u8 = 1;

/// The length that marks a removal.
const REMOVED: u32 = u32::MAX;

/// Bytes of one chunk of the index's value storage: 1 MiB.
const CHUNK_BYTES: usize = 1024 * 1024;

/// A `copies` key: tenant and id (`codec::copies_key`).
pub(crate) type Key = [u8; COPIES_KEY_LEN];

/// A run value that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CorruptRun;

/// The keys one call writes, encoded as a run value.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    bytes: Vec<u8>,
    keys: usize,
    value_bytes: u64,
}

impl Default for Run {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl Run {
    /// A run with room for `keys` keys of one copy each.
    pub(crate) fn with_capacity(keys: usize) -> Self {
        let mut bytes = Vec::with_capacity(1 + keys * (COPIES_KEY_LEN + 4 + 48));
        bytes.push(RUN_FORMAT);
        Self {
            bytes,
            keys: 0,
            value_bytes: 0,
        }
    }

    /// Writes `value` under `key`.
    pub(crate) fn put(&mut self, key: &Key, value: &[u8]) {
        // Invariant: a `copies` value is a few copies of under 100 bytes
        // each, far below 4 GiB.
        debug_assert!(value.len() < REMOVED as usize);
        self.bytes.extend_from_slice(key);
        self.bytes
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(value);
        self.keys += 1;
        self.value_bytes += value.len() as u64;
    }

    /// Removes `key`.
    pub(crate) fn remove(&mut self, key: &Key) {
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(&REMOVED.to_le_bytes());
        self.keys += 1;
    }

    /// Whether it writes no key.
    pub(crate) fn is_empty(&self) -> bool {
        self.keys == 0
    }

    /// Bytes of the values it writes.
    pub(crate) fn value_bytes(&self) -> u64 {
        self.value_bytes
    }

    /// The run value.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Each key written, in order, with its value (`None` for a removal).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&Key, Option<&[u8]>)> {
        // Invariant: built by `put` and `remove`, so it decodes.
        entries(&self.bytes).map_while(Result::ok)
    }
}

/// Each key of run value `bytes`, in order, with its value (`None` for a
/// removal); an item is `Err` (and the last) where the bytes stop
/// following the layout.
pub(crate) fn entries(
    bytes: &[u8],
) -> impl Iterator<Item = Result<(&Key, Option<&[u8]>), CorruptRun>> {
    let mut rest = match bytes.split_first() {
        Some((&RUN_FORMAT, rest)) => Ok(rest),
        _ => Err(CorruptRun),
    };
    std::iter::from_fn(move || {
        let current = match rest {
            Ok([]) => return None,
            Ok(current) => current,
            Err(error) => {
                rest = Ok(&[]);
                return Some(Err(error));
            }
        };
        let entry = (|| {
            let (key, after) = current.split_first_chunk::<COPIES_KEY_LEN>()?;
            let (len, after) = after.split_first_chunk::<4>()?;
            match u32::from_le_bytes(*len) {
                REMOVED => Some(((key, None), after)),
                len => {
                    let (value, after) = after.split_at_checked(len as usize)?;
                    Some(((key, Some(value)), after))
                }
            }
        })();
        match entry {
            Some((entry, after)) => {
                rest = Ok(after);
                Some(Ok(entry))
            }
            None => {
                rest = Ok(&[]);
                Some(Err(CorruptRun))
            }
        }
    })
}

/// The key of run `number` in a runs keyspace.
pub(crate) fn run_key(number: u64) -> [u8; 8] {
    number.to_be_bytes()
}

/// The number of a run key; `None` when it is not one.
pub(crate) fn run_number(key: &[u8]) -> Option<u64> {
    key.try_into().ok().map(u64::from_be_bytes)
}

/// An open epoch's keys in memory: each key's latest value, as its runs
/// left it.
///
/// Memory: about 40 bytes of map entry and the value (about 47 bytes for a
/// key of one copy) per key, about 90 bytes; values replaced or removed
/// keep their bytes until the epoch is loaded into its keyspace.
#[derive(Debug, Default)]
pub(crate) struct Index {
    map: foldhash::HashMap<IndexKey, Span>,
    chunks: Vec<Vec<u8>>,
    /// Bytes of the values stored, replaced ones included.
    value_bytes: u64,
}

/// A `copies` key as integers, which hash and compare in a few
/// instructions where a byte array calls `memcmp`; ordered as the key's
/// bytes are (tenant, then the id's high and low halves, all big-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct IndexKey {
    tenant: u32,
    high: u64,
    low: u64,
}

impl IndexKey {
    fn new(key: &Key) -> Self {
        let [t0, t1, t2, t3, id @ ..] = *key;
        let id = u128::from_be_bytes(id);
        Self {
            tenant: u32::from_be_bytes([t0, t1, t2, t3]),
            // The id's halves.
            high: (id >> 64) as u64,
            low: id as u64,
        }
    }

    fn bytes(self) -> Key {
        let mut key = [0; COPIES_KEY_LEN];
        key[..4].copy_from_slice(&self.tenant.to_be_bytes());
        key[4..12].copy_from_slice(&self.high.to_be_bytes());
        key[12..].copy_from_slice(&self.low.to_be_bytes());
        key
    }
}

/// Where a value is in the index's chunks.
#[derive(Debug, Clone, Copy)]
struct Span {
    chunk: u32,
    start: u32,
    len: u32,
}

impl Index {
    /// An empty index with room for `keys` keys before its map grows.
    pub(crate) fn with_capacity(keys: u64) -> Self {
        Self {
            map: foldhash::HashMap::with_capacity_and_hasher(
                usize::try_from(keys).unwrap_or(0),
                Default::default(),
            ),
            ..Self::default()
        }
    }

    /// Bytes of the values it stored, replaced and removed ones included.
    pub(crate) fn value_bytes(&self) -> u64 {
        self.value_bytes
    }

    /// Applies run `entries` in order: a value replaces the key's, a
    /// removal removes it.
    pub(crate) fn apply<'a>(
        &mut self,
        entries: impl IntoIterator<Item = (&'a Key, Option<&'a [u8]>)>,
    ) {
        for (key, value) in entries {
            match value {
                Some(value) => {
                    let span = self.store(value);
                    match self.map.entry(IndexKey::new(key)) {
                        Entry::Occupied(mut occupied) => {
                            occupied.insert(span);
                        }
                        Entry::Vacant(vacant) => {
                            vacant.insert(span);
                        }
                    }
                }
                None => {
                    self.map.remove(&IndexKey::new(key));
                }
            }
        }
    }

    /// The value of `key`, if the epoch holds it.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&[u8]> {
        let key: &Key = key.try_into().ok()?;
        self.map
            .get(&IndexKey::new(key))
            .map(|span| self.value(*span))
    }

    /// Keys held.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Every key with its value, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Key, &[u8])> {
        self.map
            .iter()
            .map(|(key, span)| (key.bytes(), self.value(*span)))
    }

    /// Every key with its value, in key order (the order of an ingestion).
    /// Sorts a copy of the map's entries: 40 bytes per key.
    pub(crate) fn sorted(&self) -> impl Iterator<Item = (Key, &[u8])> {
        let mut entries: Vec<(IndexKey, Span)> =
            self.map.iter().map(|(key, span)| (*key, *span)).collect();
        entries.sort_unstable_by_key(|(key, _)| *key);
        entries
            .into_iter()
            .map(|(key, span)| (key.bytes(), self.value(span)))
    }

    fn value(&self, span: Span) -> &[u8] {
        let start = span.start as usize;
        // Invariant: spans are made by `store`, within their chunk.
        &self.chunks[span.chunk as usize][start..start + span.len as usize]
    }

    /// Copies `value` into the chunks.
    fn store(&mut self, value: &[u8]) -> Span {
        let fits = self
            .chunks
            .last()
            .is_some_and(|chunk| chunk.capacity() - chunk.len() >= value.len());
        if !fits {
            self.chunks
                .push(Vec::with_capacity(CHUNK_BYTES.max(value.len())));
        }
        let chunk_index = self.chunks.len() - 1;
        let chunk = &mut self.chunks[chunk_index];
        let start = chunk.len();
        chunk.extend_from_slice(value);
        self.value_bytes += value.len() as u64;
        // Chunks are below 4 GiB: 1 MiB, or one value of a run.
        Span {
            chunk: chunk_index as u32,
            start: start as u32,
            len: value.len() as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> Key {
        let mut key = [0; COPIES_KEY_LEN];
        key[0] = 1;
        key[COPIES_KEY_LEN - 1] = n;
        key
    }

    #[test]
    fn a_run_decodes_to_what_was_written() {
        let mut run = Run::default();
        assert!(run.is_empty());
        run.put(&key(1), b"one");
        run.remove(&key(2));
        run.put(&key(3), b"");
        let decoded: Vec<(&Key, Option<&[u8]>)> =
            entries(run.as_bytes()).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            decoded,
            vec![
                (&key(1), Some(&b"one"[..])),
                (&key(2), None),
                (&key(3), Some(&b""[..])),
            ]
        );
        assert_eq!(run.entries().count(), 3);
    }

    #[test]
    fn a_run_cut_short_or_of_another_format_is_corrupt() {
        let mut run = Run::default();
        run.put(&key(1), b"one");
        run.put(&key(2), b"two");
        let bytes = run.as_bytes();
        for cut in [bytes.len() - 1, bytes.len() - 4, 1 + COPIES_KEY_LEN + 2] {
            let decoded: Vec<_> = entries(&bytes[..cut]).collect();
            assert_eq!(decoded.last(), Some(&Err(CorruptRun)), "cut at {cut}");
        }
        let mut other = bytes.to_vec();
        other[0] = 2;
        assert_eq!(entries(&other).collect::<Vec<_>>(), vec![Err(CorruptRun)]);
        assert_eq!(entries(&[]).collect::<Vec<_>>(), vec![Err(CorruptRun)]);
        assert_eq!(entries(&[RUN_FORMAT]).count(), 0);
    }

    #[test]
    fn the_index_keeps_each_keys_latest_value() {
        let mut first = Run::default();
        first.put(&key(1), b"a");
        first.put(&key(2), b"b");
        first.put(&key(3), b"c");
        let mut second = Run::default();
        second.put(&key(2), b"bb");
        second.remove(&key(3));
        second.put(&key(4), &[7; 300]);
        let mut index = Index::default();
        index.apply(first.entries());
        index.apply(second.entries());
        assert_eq!(index.get(&key(1)), Some(&b"a"[..]));
        assert_eq!(index.get(&key(2)), Some(&b"bb"[..]));
        assert_eq!(index.get(&key(3)), None);
        assert_eq!(index.get(&key(4)), Some(&[7; 300][..]));
        assert_eq!(index.get(b"short"), None);
        assert_eq!(index.len(), 3);
        assert_eq!(index.value_bytes(), 1 + 1 + 1 + 2 + 300);
        assert_eq!(second.value_bytes(), 2 + 300);
        let sorted: Vec<Key> = index.sorted().map(|(key, _)| key).collect();
        assert_eq!(sorted, vec![key(1), key(2), key(4)]);
    }

    #[test]
    fn values_larger_than_a_chunk_are_kept_whole() {
        let mut index = Index::default();
        let big = vec![5; CHUNK_BYTES + 10];
        let mut run = Run::default();
        run.put(&key(1), b"small");
        run.put(&key(2), &big);
        run.put(&key(3), b"after");
        index.apply(run.entries());
        assert_eq!(index.get(&key(1)), Some(&b"small"[..]));
        assert_eq!(index.get(&key(2)), Some(&big[..]));
        assert_eq!(index.get(&key(3)), Some(&b"after"[..]));
    }

    #[test]
    fn index_keys_order_and_round_trip_as_their_bytes() {
        let keys: Vec<Key> = [
            [0_u8; COPIES_KEY_LEN],
            key(1),
            key(2),
            [0xff; COPIES_KEY_LEN],
            {
                let mut key = key(0);
                key[5] = 0x80;
                key
            },
            {
                let mut key = key(0);
                key[12] = 1;
                key
            },
        ]
        .to_vec();
        for a in &keys {
            assert_eq!(IndexKey::new(a).bytes(), *a);
            for b in &keys {
                assert_eq!(IndexKey::new(a).cmp(&IndexKey::new(b)), a.cmp(b));
            }
        }
    }

    #[test]
    fn run_keys_order_as_their_numbers() {
        assert!(run_key(9) < run_key(10));
        assert!(run_key(255) < run_key(256));
        assert_eq!(run_number(&run_key(42)), Some(42));
        assert_eq!(run_number(b"short"), None);
    }
}
