//! Snapshots: the store's revision and its entries in key order behind a small header,
//! then the event history, checksummed with CRC32C like the B+tree's.
//!
//! Layout (version 2), little endian:
//! `magic[8] | version:u32 | revision:u64 | count:u64 | digest:u64 |
//!  (key_len:u32, value_len:u32, create_revision:u64, mod_revision:u64, version:u64,
//!   key, value)[count] | compacted:u64 | event_count:u64 |
//!  (kind:u8 (0 put, 1 delete), has_prev:u8, kv, prev kv if has_prev)[event_count] |
//!  crc32c:u32`, where each kv of an event is laid out as an entry above.
//!
//! Version 1 (before the event history) has no `compacted` and no events; it is still
//! read, as a store whose history is compacted up to its revision (a watch from an
//! older revision is refused as compacted, as after etcd's compaction).
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

use crate::store::{Entry, KvStore, INITIAL_REVISION};
use crate::types::{Event, EventKind, KeyValue, KEY_BYTES_MAX, VALUE_BYTES_MAX};

pub const SNAPSHOT_MAGIC: [u8; 8] = *b"PKVSNAP\x01";
/// The version written; [`SNAPSHOT_VERSION_V1`] is still read.
pub const SNAPSHOT_VERSION: u32 = 2;
/// Snapshots from before the event history.
pub const SNAPSHOT_VERSION_V1: u32 = 1;
const HEADER: usize = 8 + 4 + 8 + 8 + 8;
const ENTRY_HEADER: usize = 4 + 4 + 8 + 8 + 8;
const TRAILER: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("key-value snapshot of {0} bytes is shorter than its header and checksum")]
    Truncated(usize),
    #[error("not a key-value snapshot (bad magic)")]
    Magic,
    #[error(
        "key-value snapshot version {0} is not a supported version ({SNAPSHOT_VERSION_V1} or \
         {SNAPSHOT_VERSION})"
    )]
    Version(u32),
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
        if version != SNAPSHOT_VERSION && version != SNAPSHOT_VERSION_V1 {
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
        let mut map: BTreeMap<Vec<u8>, Entry> = BTreeMap::new();
        let mut at = HEADER;
        let mut last: Option<&[u8]> = None;
        for index in 0..count {
            let bad = |what: String| SnapshotError::Entry { index, what };
            if end - at < ENTRY_HEADER {
                return Err(bad(format!(
                    "its header needs {ENTRY_HEADER} bytes, {} are left",
                    end - at
                )));
            }
            let key_len = u32_at(bytes, at) as usize;
            let value_len = u32_at(bytes, at + 4) as usize;
            let create = u64_at(bytes, at + 8);
            let modr = u64_at(bytes, at + 16);
            let version = u64_at(bytes, at + 24);
            at += ENTRY_HEADER;
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
                Entry::new(key, value.to_vec(), create, modr, version),
            );
        }
        let (events, compacted) = if version == SNAPSHOT_VERSION_V1 {
            (VecDeque::new(), 0)
        } else {
            read_events(bytes, &mut at, end, revision)?
        };
        if at != end {
            return Err(SnapshotError::Trailing(end - at));
        }
        let mut store = KvStore::from_parts(map, revision, events, compacted);
        if store.digest() != header_digest {
            return Err(SnapshotError::Digest {
                header: header_digest,
                contents: store.digest(),
            });
        }
        if version == SNAPSHOT_VERSION_V1 {
            // No history was kept: every revision up to the store's is gone.
            store = KvStore::from_parts(store_map(store), revision, VecDeque::new(), revision + 1);
        }
        Ok(store)
    }
}

fn store_map(s: KvStore) -> std::collections::BTreeMap<Vec<u8>, Entry> {
    s.into_map()
}

/// The event section of a version 2 snapshot, validated: kinds, sizes, revisions in
/// order within `[max(compacted, 2), revision]`, a previous pair on every delete.
fn read_events(
    bytes: &[u8],
    at: &mut usize,
    end: usize,
    revision: u64,
) -> Result<(VecDeque<Event>, u64), SnapshotError> {
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
        if end - *at < ENTRY_HEADER {
            return Err(bad(index, "a pair's header is cut".into()));
        }
        let key_len = u32_at(bytes, *at) as usize;
        let value_len = u32_at(bytes, *at + 4) as usize;
        let create_revision = u64_at(bytes, *at + 8);
        let mod_revision = u64_at(bytes, *at + 16);
        let version = u64_at(bytes, *at + 24);
        *at += ENTRY_HEADER;
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
    use crate::types::KvCommand;

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
        let back = KvStore::restore(&s.snapshot()).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.digest(), s.digest());
        let empty = KvStore::new();
        assert_eq!(KvStore::restore(&empty.snapshot()).unwrap(), empty);
    }

    /// A snapshot from before the event history restores with its entries and a
    /// history compacted past its revision.
    #[test]
    fn version_1_snapshots_restore_as_compacted() {
        let s = sample();
        let v2 = s.snapshot();
        let body: usize = s
            .entries()
            .map(|(k, e)| ENTRY_HEADER + k.len() + e.value.len())
            .sum();
        let mut v1 = v2[..HEADER + body].to_vec();
        v1[8..12].copy_from_slice(&SNAPSHOT_VERSION_V1.to_le_bytes());
        let plain = KvStore::from_parts(s.clone().into_map(), s.revision(), VecDeque::new(), 0);
        v1[28..36].copy_from_slice(&plain.digest().to_le_bytes());
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        let back = KvStore::restore(&v1).unwrap();
        assert_eq!(
            back.iter().collect::<Vec<_>>(),
            s.iter().collect::<Vec<_>>()
        );
        assert_eq!(back.revision(), s.revision());
        assert_eq!(back.events().count(), 0);
        assert_eq!(back.compacted(), s.revision() + 1);
        assert!(s.events().count() > 0);
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
