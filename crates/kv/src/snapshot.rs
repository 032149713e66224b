//! Snapshots: the store's revision and its entries in key order behind a small header,
//! then the event history, checksummed with CRC32C like the B+tree's.
//!
//! Layout (version 3), little endian:
//! `magic[8] | version:u32 | revision:u64 | count:u64 | digest:u64 |
//!  (key_len:u32, value_len:u32, create_revision:u64, mod_revision:u64, version:u64,
//!   lease:i64, key, value)[count] | compacted:u64 | event_count:u64 |
//!  (kind:u8 (0 put, 1 delete), has_prev:u8, kv, prev kv if has_prev)[event_count] |
//!  now_ms:u64 | leases_picked:u64 | lease_count:u64 |
//!  (id:i64, ttl:i64, expiry_ms:u64)[lease_count] | crc32c:u32`, where each kv of an
//! event is laid out as an entry above. A lease's keys are those whose entry names it.
//!
//! Version 2 (before leases) has no `lease` in its pairs and no lease section; version
//! 1 (before the event history) has no `compacted` and no events either. Both are
//! still read: with no leases, and a version 1 store as one whose history is compacted
//! up to its revision (a watch from an older revision is refused as compacted, as
//! after etcd's compaction).
//!
//! The checksum covers everything before it and is verified before anything else is
//! read, so a flipped bit anywhere is refused as such; a cut anywhere is refused too,
//! by the checksum or by the entries running past the end. Beyond the checksum, restore
//! checks what a valid store guarantees (keys strictly increasing and within the size
//! limits, `2 <= create <= mod <= revision`, a version no larger than the puts the
//! revisions leave room for, the digest in the header), so that bytes from a buggy
//! writer are refused too. Nothing is allocated from a length field before the bytes it
//! promises are known to be there: every damage is an error, never a panic.

use std::collections::BTreeMap;

use std::collections::VecDeque;

use crate::lease::{LeaseMeta, Leases};
use crate::store::{Entry, KvStore, INITIAL_REVISION};
use crate::types::{
    Event, EventKind, KeyValue, KEY_BYTES_MAX, LEASE_TTL_MAX, LEASE_TTL_MIN, VALUE_BYTES_MAX,
};

pub const SNAPSHOT_MAGIC: [u8; 8] = *b"PKVSNAP\x01";
/// The version written; [`SNAPSHOT_VERSION_V1`] and [`SNAPSHOT_VERSION_V2`] are still
/// read.
pub const SNAPSHOT_VERSION: u32 = 3;
/// Snapshots from before the event history.
pub const SNAPSHOT_VERSION_V1: u32 = 1;
/// Snapshots from before leases.
pub const SNAPSHOT_VERSION_V2: u32 = 2;
const HEADER: usize = 8 + 4 + 8 + 8 + 8;
/// A pair's header (version 3; versions 1 and 2 have no lease, 8 bytes less).
const ENTRY_HEADER: usize = 4 + 4 + 8 + 8 + 8 + 8;
const TRAILER: usize = 4;

/// A pair's header in a snapshot of `version`.
fn entry_header(version: u32) -> usize {
    if version >= SNAPSHOT_VERSION {
        ENTRY_HEADER
    } else {
        ENTRY_HEADER - 8
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("key-value snapshot of {0} bytes is shorter than its header and checksum")]
    Truncated(usize),
    #[error("not a key-value snapshot (bad magic)")]
    Magic,
    #[error(
        "key-value snapshot version {0} is not a supported version ({SNAPSHOT_VERSION_V1} to \
         {SNAPSHOT_VERSION})"
    )]
    Version(u32),
    #[error("key-value snapshot lease {index}: {what}")]
    Lease { index: u64, what: String },
    #[error(
        "key-value snapshot checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
    )]
    Checksum { stored: u32, computed: u32 },
    #[error("key-value snapshot revision {0} is below the initial revision {INITIAL_REVISION}")]
    Revision(u64),
    #[error("key-value snapshot entry {index}: {what}")]
    Entry { index: u64, what: String },
    #[error("key-value snapshot event {index}: {what}")]
    Event { index: u64, what: String },
    #[error("key-value snapshot has {0} bytes after its last entry")]
    Trailing(usize),
    #[error(
        "key-value snapshot digest mismatch: header {header:#018x}, contents {contents:#018x}"
    )]
    Digest { header: u64, contents: u64 },
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl KvStore {
    /// The length of [`KvStore::snapshot`], counted without writing it.
    pub fn snapshot_len(&self) -> usize {
        let entries: usize = self
            .entries()
            .map(|(k, e)| ENTRY_HEADER + k.len() + e.value.len())
            .sum();
        let pair = |kv: &KeyValue| ENTRY_HEADER + kv.key.len() + kv.value.len();
        let events: usize = self
            .events()
            .map(|e| 2 + pair(&e.kv) + e.prev_kv.as_ref().map_or(0, pair))
            .sum();
        let (leases, _) = self.lease_parts();
        HEADER + entries + 16 + events + 24 + 24 * leases.len() + TRAILER
    }

    /// Serialize the store (see the module documentation for the format).
    pub fn snapshot(&self) -> Vec<u8> {
        let body: usize = self
            .entries()
            .map(|(k, e)| ENTRY_HEADER + k.len() + e.value.len())
            .sum();
        let mut out = Vec::with_capacity(HEADER + body + TRAILER);
        out.extend_from_slice(&SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        out.extend_from_slice(&self.revision().to_le_bytes());
        out.extend_from_slice(&(self.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.digest().to_le_bytes());
        for (k, e) in self.entries() {
            // Sizes fit in u32: keys and values are bounded by `check` (4 KiB, 1 MiB).
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(&(e.value.len() as u32).to_le_bytes());
            out.extend_from_slice(&e.create_revision.to_le_bytes());
            out.extend_from_slice(&e.mod_revision.to_le_bytes());
            out.extend_from_slice(&e.version.to_le_bytes());
            out.extend_from_slice(&e.lease.to_le_bytes());
            out.extend_from_slice(k);
            out.extend_from_slice(&e.value);
        }
        assert_eq!(out.len(), HEADER + body);
        out.extend_from_slice(&self.compacted().to_le_bytes());
        out.extend_from_slice(&(self.events().count() as u64).to_le_bytes());
        let put_kv = |out: &mut Vec<u8>, kv: &KeyValue| {
            out.extend_from_slice(&(kv.key.len() as u32).to_le_bytes());
            out.extend_from_slice(&(kv.value.len() as u32).to_le_bytes());
            out.extend_from_slice(&kv.create_revision.to_le_bytes());
            out.extend_from_slice(&kv.mod_revision.to_le_bytes());
            out.extend_from_slice(&kv.version.to_le_bytes());
            out.extend_from_slice(&kv.lease.to_le_bytes());
            out.extend_from_slice(&kv.key);
            out.extend_from_slice(&kv.value);
        };
        for e in self.events() {
            out.push(match e.kind {
                EventKind::Put => 0,
                EventKind::Delete => 1,
            });
            out.push(u8::from(e.prev_kv.is_some()));
            put_kv(&mut out, &e.kv);
            if let Some(p) = &e.prev_kv {
                put_kv(&mut out, p);
            }
        }
        let (leases, now_ms) = self.lease_parts();
        out.extend_from_slice(&now_ms.to_le_bytes());
        out.extend_from_slice(&leases.picked.to_le_bytes());
        out.extend_from_slice(&(leases.len() as u64).to_le_bytes());
        for (id, m) in leases.iter() {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&m.ttl.to_le_bytes());
            out.extend_from_slice(&m.expiry_ms.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Rebuild a store from [`KvStore::snapshot`] bytes.
    pub fn restore(bytes: &[u8]) -> Result<KvStore, SnapshotError> {
        if bytes.len() < HEADER + TRAILER {
            return Err(SnapshotError::Truncated(bytes.len()));
        }
        if bytes[..8] != SNAPSHOT_MAGIC {
            return Err(SnapshotError::Magic);
        }
        let version = u32_at(bytes, 8);
        if !(SNAPSHOT_VERSION_V1..=SNAPSHOT_VERSION).contains(&version) {
            return Err(SnapshotError::Version(version));
        }
        let end = bytes.len() - TRAILER;
        let stored = u32_at(bytes, end);
        let computed = crc32c::crc32c(&bytes[..end]);
        if stored != computed {
            return Err(SnapshotError::Checksum { stored, computed });
        }
        let revision = u64_at(bytes, 12);
        if revision < INITIAL_REVISION {
            return Err(SnapshotError::Revision(revision));
        }
        let count = u64_at(bytes, 20);
        let header_digest = u64_at(bytes, 28);
        let format = version;
        let entry_header = entry_header(format);
        let mut map: BTreeMap<Vec<u8>, Entry> = BTreeMap::new();
        let mut at = HEADER;
        let mut last: Option<&[u8]> = None;
        for index in 0..count {
            let bad = |what: String| SnapshotError::Entry { index, what };
            if end - at < entry_header {
                return Err(bad(format!(
                    "its header needs {entry_header} bytes, {} are left",
                    end - at
                )));
            }
            let key_len = u32_at(bytes, at) as usize;
            let value_len = u32_at(bytes, at + 4) as usize;
            let create = u64_at(bytes, at + 8);
            let modr = u64_at(bytes, at + 16);
            let version = u64_at(bytes, at + 24);
            let lease = lease_at(bytes, at, format);
            at += entry_header;
            if lease < 0 {
                return Err(bad(format!("negative lease id {lease}")));
            }
            if !(1..=KEY_BYTES_MAX).contains(&key_len) {
                return Err(bad(format!(
                    "key of {key_len} bytes (keys are 1 to {KEY_BYTES_MAX})"
                )));
            }
            if value_len > VALUE_BYTES_MAX {
                return Err(bad(format!(
                    "value of {value_len} bytes exceeds the limit of {VALUE_BYTES_MAX}"
                )));
            }
            if end - at < key_len + value_len {
                return Err(bad(format!(
                    "its key and value need {} bytes, {} are left",
                    key_len + value_len,
                    end - at
                )));
            }
            // Every key was created by a write, which made revision 2 at the earliest;
            // puts since creation each took a revision of their own.
            if !(INITIAL_REVISION < create && create <= modr && modr <= revision)
                || version == 0
                || version - 1 > modr - create
            {
                return Err(bad(format!(
                    "impossible metadata: create revision {create}, mod revision {modr}, \
                     version {version} at store revision {revision}"
                )));
            }
            let key = &bytes[at..at + key_len];
            let value = &bytes[at + key_len..at + key_len + value_len];
            at += key_len + value_len;
            if last.is_some_and(|l| l >= key) {
                return Err(bad("keys not strictly increasing".to_string()));
            }
            last = Some(key);
            map.insert(
                key.to_vec(),
                Entry::new(key, value.to_vec(), create, modr, version, lease),
            );
        }
        let (events, compacted) = if format == SNAPSHOT_VERSION_V1 {
            (VecDeque::new(), 0)
        } else {
            read_events(bytes, &mut at, end, revision, format)?
        };
        let (leases, now_ms) = if format >= SNAPSHOT_VERSION {
            read_leases(bytes, &mut at, end)?
        } else {
            (Leases::default(), 0)
        };
        if at != end {
            return Err(SnapshotError::Trailing(end - at));
        }
        if let Some((k, e)) = map
            .iter()
            .find(|(_, e)| e.lease != 0 && !leases.contains(e.lease))
        {
            return Err(SnapshotError::Lease {
                index: 0,
                what: format!(
                    "key {} names lease {:x}, which the snapshot does not hold",
                    crate::types::show_key(k),
                    e.lease
                ),
            });
        }
        let mut store = KvStore::from_parts(map, revision, events, compacted, leases, now_ms);
        if store.digest() != header_digest {
            return Err(SnapshotError::Digest {
                header: header_digest,
                contents: store.digest(),
            });
        }
        if format == SNAPSHOT_VERSION_V1 {
            // No history was kept: every revision up to the store's is gone.
            store = KvStore::from_parts(
                store_map(store),
                revision,
                VecDeque::new(),
                revision + 1,
                Leases::default(),
                0,
            );
        }
        Ok(store)
    }
}

fn store_map(s: KvStore) -> std::collections::BTreeMap<Vec<u8>, Entry> {
    s.into_map()
}

/// A pair's lease in a snapshot of `format` (0 before version 3).
fn lease_at(bytes: &[u8], at: usize, format: u32) -> i64 {
    if format >= SNAPSHOT_VERSION {
        u64_at(bytes, at + 32) as i64
    } else {
        0
    }
}

/// The lease section of a version 3 snapshot, validated: ids positive and increasing,
/// TTLs within the limits.
fn read_leases(bytes: &[u8], at: &mut usize, end: usize) -> Result<(Leases, u64), SnapshotError> {
    let bad = |index: u64, what: String| SnapshotError::Lease { index, what };
    if end - *at < 24 {
        return Err(bad(0, "the lease section's header is cut".into()));
    }
    let now_ms = u64_at(bytes, *at);
    let picked = u64_at(bytes, *at + 8);
    let count = u64_at(bytes, *at + 16);
    *at += 24;
    let mut leases = Leases::default();
    leases.picked = picked;
    let mut last = 0i64;
    for index in 0..count {
        if end - *at < 24 {
            return Err(bad(index, "cut".into()));
        }
        let id = u64_at(bytes, *at) as i64;
        let ttl = u64_at(bytes, *at + 8) as i64;
        let expiry_ms = u64_at(bytes, *at + 16);
        *at += 24;
        if id <= last {
            return Err(bad(
                index,
                format!("id {id} is not positive and above {last}"),
            ));
        }
        if !(LEASE_TTL_MIN..=LEASE_TTL_MAX).contains(&ttl) {
            return Err(bad(index, format!("TTL of {ttl} s")));
        }
        last = id;
        leases.set(id, Some(LeaseMeta { ttl, expiry_ms }));
    }
    Ok((leases, now_ms))
}

/// The event section of a version 2 or 3 snapshot, validated: kinds, sizes, revisions
/// in order within `[max(compacted, 2), revision]`, a previous pair on every delete.
fn read_events(
    bytes: &[u8],
    at: &mut usize,
    end: usize,
    revision: u64,
    format: u32,
) -> Result<(VecDeque<Event>, u64), SnapshotError> {
    let entry_header = entry_header(format);
    let bad = |index: u64, what: String| SnapshotError::Event { index, what };
    if end - *at < 16 {
        return Err(bad(0, "the event section's header is cut".into()));
    }
    let compacted = u64_at(bytes, *at);
    let count = u64_at(bytes, *at + 8);
    *at += 16;
    if compacted > revision + 1 {
        return Err(bad(
            0,
            format!("compaction revision {compacted} is beyond the store's {revision}"),
        ));
    }
    let read_kv = |index: u64, at: &mut usize| -> Result<KeyValue, SnapshotError> {
        if end - *at < entry_header {
            return Err(bad(index, "a pair's header is cut".into()));
        }
        let key_len = u32_at(bytes, *at) as usize;
        let value_len = u32_at(bytes, *at + 4) as usize;
        let create_revision = u64_at(bytes, *at + 8);
        let mod_revision = u64_at(bytes, *at + 16);
        let version = u64_at(bytes, *at + 24);
        let lease = lease_at(bytes, *at, format);
        *at += entry_header;
        if !(1..=KEY_BYTES_MAX).contains(&key_len) || value_len > VALUE_BYTES_MAX {
            return Err(bad(
                index,
                format!("a key of {key_len} bytes or a value of {value_len} bytes"),
            ));
        }
        if end - *at < key_len + value_len {
            return Err(bad(index, "a pair's key and value are cut".into()));
        }
        let kv = KeyValue {
            key: bytes[*at..*at + key_len].to_vec(),
            value: bytes[*at + key_len..*at + key_len + value_len].to_vec(),
            create_revision,
            mod_revision,
            version,
            lease,
        };
        *at += key_len + value_len;
        Ok(kv)
    };
    let mut events = VecDeque::new();
    let mut last = compacted.max(INITIAL_REVISION + 1);
    for index in 0..count {
        if end - *at < 2 {
            return Err(bad(index, "its kind is cut".into()));
        }
        let kind = match bytes[*at] {
            0 => EventKind::Put,
            1 => EventKind::Delete,
            k => return Err(bad(index, format!("unknown kind {k}"))),
        };
        let has_prev = match bytes[*at + 1] {
            0 => false,
            1 => true,
            p => return Err(bad(index, format!("previous-pair flag {p}"))),
        };
        *at += 2;
        let kv = read_kv(index, at)?;
        let prev_kv = if has_prev {
            Some(read_kv(index, at)?)
        } else {
            None
        };
        let rev = kv.mod_revision;
        if rev < last || rev > revision {
            return Err(bad(
                index,
                format!("revision {rev} out of order (after {last}, store at {revision})"),
            ));
        }
        if kind == EventKind::Delete && prev_kv.is_none() {
            return Err(bad(index, "a delete without the deleted pair".into()));
        }
        last = rev;
        events.push_back(Event { kind, kv, prev_kv });
    }
    Ok((events, compacted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{KvCommand, KvReply};

    fn sample() -> KvStore {
        let mut s = KvStore::new();
        for (k, v) in [("a", "1"), ("b", ""), ("c", "333")] {
            s.execute(&KvCommand::put(k, v));
        }
        s.execute(&KvCommand::put("a", "11"));
        s.execute(&KvCommand::put(vec![0xff, 0], vec![0u8; 40]));
        s.execute(&KvCommand::delete("b"));
        s
    }

    #[test]
    fn round_trip() {
        let s = sample();
        assert_eq!(s.snapshot_len(), s.snapshot().len());
        assert_eq!(
            KvStore::new().snapshot_len(),
            KvStore::new().snapshot().len()
        );
        let back = KvStore::restore(&s.snapshot()).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.digest(), s.digest());
        let empty = KvStore::new();
        assert_eq!(KvStore::restore(&empty.snapshot()).unwrap(), empty);
    }

    /// A snapshot of `s` (which holds no lease) as version 1 or 2 wrote it: pairs
    /// without a lease, no lease section, and for version 1 no history.
    fn legacy(s: &KvStore, version: u32) -> Vec<u8> {
        let put_kv = |out: &mut Vec<u8>, kv: &KeyValue| {
            out.extend_from_slice(&(kv.key.len() as u32).to_le_bytes());
            out.extend_from_slice(&(kv.value.len() as u32).to_le_bytes());
            out.extend_from_slice(&kv.create_revision.to_le_bytes());
            out.extend_from_slice(&kv.mod_revision.to_le_bytes());
            out.extend_from_slice(&kv.version.to_le_bytes());
            out.extend_from_slice(&kv.key);
            out.extend_from_slice(&kv.value);
        };
        let mut out = SNAPSHOT_MAGIC.to_vec();
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&s.revision().to_le_bytes());
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        let digest = if version == SNAPSHOT_VERSION_V1 {
            KvStore::from_parts(
                s.clone().into_map(),
                s.revision(),
                VecDeque::new(),
                0,
                Leases::default(),
                0,
            )
            .digest()
        } else {
            s.digest()
        };
        out.extend_from_slice(&digest.to_le_bytes());
        for kv in s.iter() {
            put_kv(&mut out, &kv);
        }
        if version == SNAPSHOT_VERSION_V2 {
            out.extend_from_slice(&s.compacted().to_le_bytes());
            out.extend_from_slice(&(s.events().count() as u64).to_le_bytes());
            for e in s.events() {
                out.push(u8::from(e.kind == EventKind::Delete));
                out.push(u8::from(e.prev_kv.is_some()));
                put_kv(&mut out, &e.kv);
                if let Some(p) = &e.prev_kv {
                    put_kv(&mut out, p);
                }
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// A snapshot from before the event history restores with its entries and a
    /// history compacted past its revision.
    #[test]
    fn version_1_snapshots_restore_as_compacted() {
        let s = sample();
        let back = KvStore::restore(&legacy(&s, SNAPSHOT_VERSION_V1)).unwrap();
        assert_eq!(
            back.iter().collect::<Vec<_>>(),
            s.iter().collect::<Vec<_>>()
        );
        assert_eq!(back.revision(), s.revision());
        assert_eq!(back.events().count(), 0);
        assert_eq!(back.compacted(), s.revision() + 1);
        assert!(s.events().count() > 0);
    }

    /// A snapshot from before leases restores as the store it was, with no lease.
    #[test]
    fn version_2_snapshots_restore_without_leases() {
        let s = sample();
        let back = KvStore::restore(&legacy(&s, SNAPSHOT_VERSION_V2)).unwrap();
        assert_eq!(back, s);
    }

    /// Leases, their keys, the id allocator and ordered time survive a snapshot; a key
    /// naming a lease the snapshot lacks is refused.
    #[test]
    fn leases_round_trip() {
        let mut s = sample();
        s.advance_time(5_000);
        let KvReply::LeaseGrant(g) = s.execute(&KvCommand::lease_grant(0, 10)).0 else {
            panic!()
        };
        s.execute(&KvCommand::lease_grant(77, 30));
        s.execute(&KvCommand::put_leased("l1", "v", g.id));
        s.execute(&KvCommand::put_leased("l2", "v", g.id));
        s.execute(&KvCommand::put_leased("m", "v", 77));
        assert_eq!(s.snapshot_len(), s.snapshot().len());
        let back = KvStore::restore(&s.snapshot()).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.digest(), s.digest());
        // The restored store picks the id the original would.
        let (mut a, mut b) = (s.clone(), back);
        assert_eq!(
            a.execute(&KvCommand::lease_grant(0, 5)).0,
            b.execute(&KvCommand::lease_grant(0, 5)).0
        );
        // Both expire the same lease at the same time, with its keys.
        assert_eq!(
            a.advance_time(15_000).is_some(),
            b.advance_time(15_000).is_some()
        );
        assert_eq!(a, b);
        assert!(a.get(b"l1").is_none() && a.get(b"m").is_some());
    }

    #[test]
    fn every_cut_and_every_flipped_bit_is_refused() {
        let bytes = sample().snapshot();
        for len in 0..bytes.len() {
            assert!(KvStore::restore(&bytes[..len]).is_err(), "cut at {len}");
        }
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(KvStore::restore(&b).is_err(), "bit {i}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(KvStore::restore(&longer).is_err());
    }

    /// Damage with a valid checksum (a buggy writer): refused by the structure checks.
    #[test]
    fn structurally_wrong_snapshots_are_refused() {
        let reseal = |mut b: Vec<u8>| {
            let end = b.len() - TRAILER;
            let crc = crc32c::crc32c(&b[..end]);
            b[end..].copy_from_slice(&crc.to_le_bytes());
            b
        };
        let bytes = sample().snapshot();
        // Count one more entry than there is.
        let mut b = bytes.clone();
        let count = u64_at(&b, 20) + 1;
        b[20..28].copy_from_slice(&count.to_le_bytes());
        assert!(matches!(
            KvStore::restore(&reseal(b)),
            Err(SnapshotError::Entry { .. })
        ));
        // A huge key length.
        let mut b = bytes.clone();
        b[HEADER..HEADER + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            KvStore::restore(&reseal(b)),
            Err(SnapshotError::Entry { .. })
        ));
        // Metadata: mod revision beyond the store's.
        let mut b = bytes.clone();
        b[HEADER + 16..HEADER + 24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            KvStore::restore(&reseal(b)),
            Err(SnapshotError::Entry { .. })
        ));
        // A wrong digest.
        let mut b = bytes.clone();
        b[28] ^= 1;
        assert!(matches!(
            KvStore::restore(&reseal(b)),
            Err(SnapshotError::Digest { .. })
        ));
        // Revision 0.
        let mut b = bytes.clone();
        b[12..20].copy_from_slice(&0u64.to_le_bytes());
        assert!(matches!(
            KvStore::restore(&reseal(b)),
            Err(SnapshotError::Revision(0))
        ));
        assert_eq!(
            KvStore::restore(b"PBTREE\0\x01 and more bytes than a header......"),
            Err(SnapshotError::Magic)
        );
    }
}
