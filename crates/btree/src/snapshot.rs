//! Snapshots: the entries in key order behind a small header, checksummed.
//!
//! Layout, little endian:
//! `magic[8] | version:u32 | node_keys:u32 | count:u64 | digest:u64 | (key:u64, value:u64)[count] | crc32c:u32`.
//! The checksum covers everything before it. The tree's shape is not stored: restoring
//! bulk-loads the entries, which is both faster than replaying inserts and yields a
//! compact tree. Any damage is reported as a [`SnapshotError`], never a panic.

use crate::digest::finish;
use crate::node::{len, next, LK, NIL};
use crate::tree::{BPlusTree, MAX_NODE_KEYS, MIN_NODE_KEYS};

pub const SNAPSHOT_MAGIC: [u8; 8] = *b"PBTREE\0\x01";
pub const SNAPSHOT_VERSION: u32 = 1;
const HEADER: usize = 8 + 4 + 4 + 8 + 8;
const TRAILER: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot of {0} bytes is shorter than its header and checksum")]
    Truncated(usize),
    #[error("not a B+tree snapshot (bad magic)")]
    Magic,
    #[error("snapshot version {0} is not the supported version {SNAPSHOT_VERSION}")]
    Version(u32),
    #[error("snapshot node capacity {0} outside {MIN_NODE_KEYS}..={MAX_NODE_KEYS}")]
    NodeKeys(u32),
    #[error("snapshot of {actual} bytes, its header implies {expected}")]
    Length { expected: u64, actual: u64 },
    #[error("snapshot checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("snapshot entries not strictly increasing at entry {0}")]
    Unsorted(u64),
    #[error("snapshot digest mismatch: header {header:#018x}, contents {contents:#018x}")]
    Digest { header: u64, contents: u64 },
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl BPlusTree {
    /// Content digest: equal contents give equal digests, whatever the history or
    /// shape (see the `digest` module). O(1).
    pub fn digest(&self) -> u64 {
        finish(self.digest_sum, self.len as u64)
    }

    /// Serialize the entries (see the module documentation for the format).
    pub fn snapshot(&self) -> Vec<u8> {
        let cap = self.cap;
        let total = HEADER + 16 * self.len + TRAILER;
        let mut out = vec![0u8; total];
        out[..8].copy_from_slice(&SNAPSHOT_MAGIC);
        out[8..12].copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&(cap as u32).to_le_bytes());
        out[16..24].copy_from_slice(&(self.len as u64).to_le_bytes());
        out[24..32].copy_from_slice(&self.digest().to_le_bytes());
        let mut slots = out[HEADER..HEADER + 16 * self.len].chunks_exact_mut(16);
        let mut li = self.first_leaf();
        while li != NIL {
            let w = self.leaves.node(li);
            let n = len(w);
            for (i, slot) in (&mut slots).take(n).enumerate() {
                slot[..8].copy_from_slice(&w[LK + i].to_le_bytes());
                slot[8..].copy_from_slice(&w[LK + cap + i].to_le_bytes());
            }
            li = next(w);
        }
        assert!(slots.next().is_none(), "leaf chain shorter than len");
        let crc = crc32c::crc32c(&out[..total - TRAILER]);
        out[total - TRAILER..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Rebuild a tree from [`BPlusTree::snapshot`] bytes.
    pub fn restore(bytes: &[u8]) -> Result<BPlusTree, SnapshotError> {
        if bytes.len() < HEADER + TRAILER {
            return Err(SnapshotError::Truncated(bytes.len()));
        }
        if bytes[..8] != SNAPSHOT_MAGIC {
            return Err(SnapshotError::Magic);
        }
        let version = u32_at(bytes, 8);
        if version != SNAPSHOT_VERSION {
            return Err(SnapshotError::Version(version));
        }
        let node_keys = u32_at(bytes, 12);
        if !(MIN_NODE_KEYS..=MAX_NODE_KEYS).contains(&(node_keys as usize)) {
            return Err(SnapshotError::NodeKeys(node_keys));
        }
        let count = u64_at(bytes, 16);
        let expected = count
            .checked_mul(16)
            .and_then(|b| b.checked_add((HEADER + TRAILER) as u64));
        if expected != Some(bytes.len() as u64) {
            return Err(SnapshotError::Length {
                expected: expected.unwrap_or(u64::MAX),
                actual: bytes.len() as u64,
            });
        }
        let body = bytes.len() - TRAILER;
        let stored = u32_at(bytes, body);
        let computed = crc32c::crc32c(&bytes[..body]);
        if stored != computed {
            return Err(SnapshotError::Checksum { stored, computed });
        }
        let header_digest = u64_at(bytes, 24);
        let entries = bytes[HEADER..body]
            .chunks_exact(16)
            .map(|e| (u64_at(e, 0), u64_at(e, 8)));
        let tree = BPlusTree::bulk_load_with_node_keys(node_keys as usize, entries)
            .map_err(|e| SnapshotError::Unsorted(e.index))?;
        if tree.digest() != header_digest {
            return Err(SnapshotError::Digest {
                header: header_digest,
                contents: tree.digest(),
            });
        }
        Ok(tree)
    }
}
