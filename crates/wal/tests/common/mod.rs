//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use partita_wal::{Durability, Lsn, WalOptions};

pub const CLUSTER: u64 = 0x5eed_c1a5_7e40_0001;
pub const NODE: u32 = 3;

pub fn opts(segment_bytes_max: u64, durability: Durability) -> WalOptions {
    WalOptions {
        cluster_id: CLUSTER,
        node_id: NODE,
        segment_bytes_max,
        durability,
        // Recovery tests reason about exact file lengths; preallocation has tests
        // of its own.
        preallocate_bytes: 0,
    }
}

/// Deterministic payload for record number `i` (LSN `i + 1` in a fresh log), of
/// `len` bytes; starts with `i` so records are distinguishable.
pub fn payload(i: u64, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len)
        .map(|k| (k as u64).wrapping_mul(31).wrapping_add(i * 7) as u8)
        .collect();
    let tag = i.to_le_bytes();
    let n = len.min(8);
    p[..n].copy_from_slice(&tag[..n]);
    p
}

/// Segment files, oldest first.
pub fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.starts_with("wal-") && n.ends_with(".log")
        })
        .collect();
    v.sort();
    v
}

pub fn first_lsn_of(path: &Path) -> Lsn {
    let n = path.file_name().unwrap().to_str().unwrap();
    n["wal-".len()..n.len() - ".log".len()].parse().unwrap()
}

/// Every file in the directory except the lock file, with its bytes.
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "LOCK")
        .map(|e| {
            (
                e.file_name().to_str().unwrap().to_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

pub fn flip_bit(path: &Path, offset: u64, bit: u8) {
    let mut b = fs::read(path).unwrap();
    b[offset as usize] ^= 1 << bit;
    fs::write(path, b).unwrap();
}

pub fn truncate(path: &Path, len: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

thread_local! {
    /// The events of this thread while [`with_warnings`] runs (`None` otherwise).
    static CAPTURED: std::cell::RefCell<Option<Vec<(tracing::Level, String)>>> =
        const { std::cell::RefCell::new(None) };
}

/// The process's one tracing subscriber (installed by the first [`with_warnings`]): it
/// hands each event to the capture of the thread that emits it, if one is on. One
/// global subscriber, not one per call with `with_default`: with four tests at a time,
/// scoped subscribers coming and going raced with tracing's per-callsite interest
/// cache, and a torn tail's warning went uncaptured about once in 40 runs.
struct Capture;

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        CAPTURED.with(|c| {
            if let Some(events) = c.borrow_mut().as_mut() {
                let mut f = Fields(String::new());
                event.record(&mut f);
                events.push((*event.metadata().level(), f.0));
            }
        });
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Run `f`, returning its result and the WARN-or-worse events it logged (on this
/// thread).
pub fn with_warnings<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        tracing::subscriber::set_global_default(Capture).expect("the only global subscriber")
    });
    CAPTURED.with(|c| *c.borrow_mut() = Some(Vec::new()));
    let out = f();
    let events = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
    let warnings = events
        .into_iter()
        .filter(|(level, _)| *level <= tracing::Level::WARN)
        .map(|(_, msg)| msg)
        .collect();
    (out, warnings)
}
