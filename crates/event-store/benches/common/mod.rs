//! What the benchmarks share: the stream of user records, and measuring the
//! process (CPU time, resident memory, disk).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use event_store::{Candidate, CopyRef, EventKey, Lineage};
use sequence_range::SequenceNumber;
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

pub const SHARD: &str = "shardId-000000000000";
/// Records a decided run holds.
pub const RUN: usize = 500;
/// 2026-11-21T05:27:00Z.
pub const FIRST_ARRIVAL: i64 = 1_795_238_820_000;

/// A stream of user records: mostly new events, some retried.
pub struct Stream {
    pub lineage: Lineage,
    /// Records so far.
    pub records: u64,
    /// Distinct events so far.
    pub events: u64,
    pub rng: u64,
}

impl Stream {
    pub fn new() -> Self {
        Self {
            lineage: Lineage::root(SHARD),
            records: 0,
            events: 0,
            rng: 0x2545_f491_4f6c_dd1d,
        }
    }

    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    pub fn run(&mut self, len: usize) -> Vec<Candidate> {
        (0..len).map(|_| self.record()).collect()
    }

    pub fn record(&mut self) -> Candidate {
        let roll = self.random();
        let event = if roll.is_multiple_of(10) && self.events > 1_000 {
            self.events - 1 - (roll >> 8) % 1_000
        } else {
            self.events += 1;
            self.events - 1
        };
        self.records += 1;
        let id = uuid(event);
        let payload = format!(r#"{{"id":"{id}","event":{event},"kind":"click"}}"#);
        let sequence = format!(
            "4959033827149025660855969253836157109592{:016}",
            self.records
        );
        let arrival_millis = FIRST_ARRIVAL + self.records as i64;
        // `--event-id partition-key --event-fingerprint payload`.
        let key = EventKey {
            id: xxh3_128(id.as_bytes()),
            fingerprint: xxh3_64(payload.as_bytes()),
        };
        Candidate {
            key,
            copy: CopyRef {
                shard_id: Arc::clone(&self.lineage.shard_id),
                sequence_number: SequenceNumber::parse(&sequence).unwrap(),
                sub_sequence_number: None,
            },
            arrival_millis,
        }
    }
}

/// A version 4 UUID's text for event `n` (36 bytes).
fn uuid(n: u64) -> String {
    let a = splitmix(n);
    let b = splitmix(n ^ 0x5851_f42d_4c95_7f2d);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

fn splitmix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Where prepared stores are kept: `target/bench-data`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
        .join("bench-data")
}

/// Bytes of the files under `dir`.
pub fn disk_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                disk_bytes(&entry.path())
            } else {
                entry.metadata().unwrap().len()
            }
        })
        .sum()
}

/// User plus system CPU time of the whole process (Linux `/proc`).
pub fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime, fields 14 and 15 of proc(5), in clock ticks (1/100 s).
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// The process's resident memory, from `/proc/self/status`.
pub fn resident_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        >> 10
}

/// Waits until the process idles (less than 20 ms of CPU in 500 ms): the
/// flushes and compactions the writes started are done. Returns the
/// process's CPU time then.
pub fn wait_idle() -> Duration {
    let mut last = process_cpu();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = process_cpu();
        if now - last < Duration::from_millis(20) {
            return now;
        }
        last = now;
    }
}
