//! Snapshots: the entries in key order and the tree's shape behind a small header,
//! checksummed.
//!
//! Layout, little endian (version 2):
//! `magic[8] | version:u32 | node_keys:u32 | count:u64 | digest:u64 |
//! (key:u64, value:u64)[count] | leaves:u64 | leaf_len:u32[leaves] | height:u32 |
//! per internal level, bottom up: (nodes:u64 | per node: keys:u32, key:u64[keys]) |
//! crc32c:u32`. The checksum covers everything before it.
//!
//! The shape (how many entries each leaf holds, each internal node's separators) is
//! stored so that a restored tree is the very tree that was saved, node for node.
//! Contents alone would do for most uses, but opt-PSMR's safety check (paper 002 §IV-B)
//! asks whether an insert would split its leaf, or whether the leaf's routed range lies
//! inside a thread's partition: the answer depends on the shape, and every replica must
//! give the same answer, including one restored from a checkpoint or a peer's state.
//! Version 1 (entries only) is still read: it bulk-loads, which yields a compact tree.
//! Any damage is reported as a [`SnapshotError`], never a panic.

use crate::digest::entry_hash;
use crate::digest::finish;
use crate::node::{
    children, inner_parts_mut, len, next, set_len, set_next, set_prev, NodeId, IK, LK, NIL,
};
use crate::tree::{BPlusTree, MAX_NODE_KEYS, MIN_NODE_KEYS};

pub const SNAPSHOT_MAGIC: [u8; 8] = *b"PBTREE\0\x01";
pub const SNAPSHOT_VERSION: u32 = 2;
/// The entries-only format, still restored (bulk-loaded).
pub const SNAPSHOT_VERSION_ENTRIES: u32 = 1;
const HEADER: usize = 8 + 4 + 4 + 8 + 8;
const TRAILER: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot of {0} bytes is shorter than its header and checksum")]
    Truncated(usize),
    #[error("not a B+tree snapshot (bad magic)")]
    Magic,
    #[error("snapshot version {0} is not a supported version ({SNAPSHOT_VERSION_ENTRIES} or {SNAPSHOT_VERSION})")]
    Version(u32),
    #[error("snapshot shape: {0}")]
    Shape(String),
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

    /// Serialize the entries and the shape (see the module documentation).
    pub fn snapshot(&self) -> Vec<u8> {
        let cap = self.cap;
        // The internal levels, top down, each left to right.
        let mut levels: Vec<Vec<u32>> = Vec::with_capacity(self.height);
        if self.height > 0 {
            let mut cur = vec![self.root.index()];
            loop {
                levels.push(cur.clone());
                if levels.len() == self.height {
                    break;
                }
                let mut below = Vec::new();
                for &i in &cur {
                    let w = self.inners.node(i);
                    below.extend(
                        children(w, cap)[..len(w) + 1]
                            .iter()
                            .map(|&c| NodeId(c).index()),
                    );
                }
                cur = below;
            }
        }
        let leaves = self.leaf_count();
        let shape: usize = 8
            + 4 * leaves
            + 4
            + levels
                .iter()
                .map(|l| {
                    8 + l
                        .iter()
                        .map(|&i| 4 + 8 * len(self.inners.node(i)))
                        .sum::<usize>()
                })
                .sum::<usize>();
        let total = HEADER + 16 * self.len + shape + TRAILER;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        out.extend_from_slice(&(cap as u32).to_le_bytes());
        out.extend_from_slice(&(self.len as u64).to_le_bytes());
        out.extend_from_slice(&self.digest().to_le_bytes());
        let mut leaf_lens = Vec::with_capacity(leaves);
        let mut li = self.first_leaf();
        while li != NIL {
            let w = self.leaves.node(li);
            let n = len(w);
            for i in 0..n {
                out.extend_from_slice(&w[LK + i].to_le_bytes());
                out.extend_from_slice(&w[LK + cap + i].to_le_bytes());
            }
            leaf_lens.push(n as u32);
            li = next(w);
        }
        assert_eq!(
            out.len(),
            HEADER + 16 * self.len,
            "leaf chain and len agree"
        );
        assert_eq!(leaf_lens.len(), leaves, "leaf chain and leaf count agree");
        out.extend_from_slice(&(leaves as u64).to_le_bytes());
        for n in leaf_lens {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&(self.height as u32).to_le_bytes());
        for level in levels.iter().rev() {
            out.extend_from_slice(&(level.len() as u64).to_le_bytes());
            for &i in level {
                let w = self.inners.node(i);
                let n = len(w);
                out.extend_from_slice(&(n as u32).to_le_bytes());
                for k in &w[IK..IK + n] {
                    out.extend_from_slice(&k.to_le_bytes());
                }
            }
        }
        assert_eq!(out.len(), total - TRAILER);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
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
        if version != SNAPSHOT_VERSION && version != SNAPSHOT_VERSION_ENTRIES {
            return Err(SnapshotError::Version(version));
        }
        let node_keys = u32_at(bytes, 12);
        if !(MIN_NODE_KEYS..=MAX_NODE_KEYS).contains(&(node_keys as usize)) {
            return Err(SnapshotError::NodeKeys(node_keys));
        }
        let count = u64_at(bytes, 16);
        let entries_end = count
            .checked_mul(16)
            .and_then(|b| b.checked_add(HEADER as u64))
            .filter(|&e| e <= (bytes.len() - TRAILER) as u64);
        let exact = count
            .checked_mul(16)
            .and_then(|b| b.checked_add((HEADER + TRAILER) as u64));
        match (version, entries_end) {
            (SNAPSHOT_VERSION_ENTRIES, _) if exact != Some(bytes.len() as u64) => {
                return Err(SnapshotError::Length {
                    expected: exact.unwrap_or(u64::MAX),
                    actual: bytes.len() as u64,
                })
            }
            (_, None) => {
                return Err(SnapshotError::Length {
                    expected: exact.unwrap_or(u64::MAX),
                    actual: bytes.len() as u64,
                })
            }
            _ => {}
        }
        let entries_end = entries_end.expect("checked") as usize;
        let body = bytes.len() - TRAILER;
        let stored = u32_at(bytes, body);
        let computed = crc32c::crc32c(&bytes[..body]);
        if stored != computed {
            return Err(SnapshotError::Checksum { stored, computed });
        }
        let header_digest = u64_at(bytes, 24);
        let entries = bytes[HEADER..entries_end]
            .chunks_exact(16)
            .map(|e| (u64_at(e, 0), u64_at(e, 8)));
        let tree = if version == SNAPSHOT_VERSION_ENTRIES {
            BPlusTree::bulk_load_with_node_keys(node_keys as usize, entries)
                .map_err(|e| SnapshotError::Unsorted(e.index))?
        } else {
            let shape = Shape::parse(&bytes[entries_end..body])?;
            BPlusTree::build_shaped(node_keys as usize, count, entries, shape)?
        };
        if tree.digest() != header_digest {
            return Err(SnapshotError::Digest {
                header: header_digest,
                contents: tree.digest(),
            });
        }
        Ok(tree)
    }
}

/// The shape part of a version 2 snapshot.
struct Shape {
    leaf_lens: Vec<u32>,
    /// Internal levels, bottom up: each node's separators.
    levels: Vec<Vec<Vec<u64>>>,
}

/// A bounds-checked reader over the shape bytes.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], SnapshotError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(SnapshotError::Shape(format!(
                "{} bytes where {} more were expected",
                self.b.len() - self.at,
                n
            )));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, SnapshotError> {
        Ok(u32_at(self.take(4)?, 0))
    }
    fn u64(&mut self) -> Result<u64, SnapshotError> {
        Ok(u64_at(self.take(8)?, 0))
    }
    /// A count of items of at least `item` bytes each, bounded by what is left.
    fn count(&mut self, item: usize) -> Result<usize, SnapshotError> {
        let n = self.u64()?;
        let left = (self.b.len() - self.at) / item;
        if n > left as u64 {
            return Err(SnapshotError::Shape(format!(
                "{n} items of {item} bytes in {} bytes",
                self.b.len() - self.at
            )));
        }
        Ok(n as usize)
    }
}

impl Shape {
    fn parse(b: &[u8]) -> Result<Shape, SnapshotError> {
        let mut c = Cursor { b, at: 0 };
        let leaves = c.count(4)?;
        let leaf_lens = (0..leaves)
            .map(|_| c.u32())
            .collect::<Result<Vec<_>, _>>()?;
        let height = c.u32()? as usize;
        if height >= crate::tree::MAX_HEIGHT {
            return Err(SnapshotError::Shape(format!("height {height}")));
        }
        let mut levels = Vec::with_capacity(height);
        for _ in 0..height {
            let nodes = c.count(4)?;
            let mut level = Vec::with_capacity(nodes);
            for _ in 0..nodes {
                let n = c.u32()? as usize;
                if n > MAX_NODE_KEYS {
                    return Err(SnapshotError::Shape(format!(
                        "an internal node of {n} keys"
                    )));
                }
                level.push((0..n).map(|_| c.u64()).collect::<Result<Vec<_>, _>>()?);
            }
            levels.push(level);
        }
        if c.at != b.len() {
            return Err(SnapshotError::Shape(format!(
                "{} bytes after the shape",
                b.len() - c.at
            )));
        }
        Ok(Shape { leaf_lens, levels })
    }
}

impl BPlusTree {
    /// The tree of a version 2 snapshot: leaves of the stored lengths, internal nodes
    /// with the stored separators; refused unless it is a valid B+tree.
    fn build_shaped(
        node_keys: usize,
        count: u64,
        entries: impl Iterator<Item = (u64, u64)>,
        shape: Shape,
    ) -> Result<BPlusTree, SnapshotError> {
        let bad = |m: String| Err(SnapshotError::Shape(m));
        let mut t = BPlusTree::with_node_keys(node_keys);
        let cap = t.cap;
        if shape.leaf_lens.is_empty() {
            return bad("no leaves".into());
        }
        let total: u64 = shape.leaf_lens.iter().map(|&n| u64::from(n)).sum();
        if total != count {
            return bad(format!(
                "leaves hold {total} entries, the header says {count}"
            ));
        }
        if let Some(n) = shape.leaf_lens.iter().find(|&&n| n as usize > cap) {
            return bad(format!("a leaf of {n} entries (capacity {cap})"));
        }
        let mut entries = entries.enumerate();
        let mut prev: Option<u64> = None;
        let mut sum = 0u64;
        let mut level: Vec<u32> = Vec::with_capacity(shape.leaf_lens.len());
        let mut last = NIL;
        for &n in &shape.leaf_lens {
            let li = if last == NIL {
                t.root.index()
            } else {
                t.alloc_leaf()
            };
            if last != NIL {
                set_next(t.leaves.node_mut(last), li);
                set_prev(t.leaves.node_mut(li), last);
            }
            let w = t.leaves.node_mut(li);
            for i in 0..n as usize {
                let (index, (key, value)) = entries.next().expect("counted");
                if prev.is_some_and(|p| key <= p) {
                    return Err(SnapshotError::Unsorted(index as u64));
                }
                prev = Some(key);
                w[LK + i] = key;
                w[LK + cap + i] = value;
                sum = sum.wrapping_add(entry_hash(key, value));
            }
            set_len(w, n as usize);
            level.push(NodeId::leaf(li).raw());
            last = li;
        }
        t.len = count as usize;
        t.digest_sum = sum;
        for (h, seps) in shape.levels.iter().enumerate() {
            let wanted: usize = seps.iter().map(|k| k.len() + 1).sum();
            if wanted != level.len() {
                return bad(format!(
                    "internal level {} has {wanted} children for {} nodes below",
                    h + 1,
                    level.len()
                ));
            }
            let mut upper = Vec::with_capacity(seps.len());
            let mut at = 0;
            for keys in seps {
                if keys.len() > cap {
                    return bad(format!("an internal node of {} keys", keys.len()));
                }
                let ni = t.alloc_inner();
                let w = t.inners.node_mut(ni);
                let (ks, kids) = inner_parts_mut(w, cap);
                ks[..keys.len()].copy_from_slice(keys);
                kids[..keys.len() + 1].copy_from_slice(&level[at..at + keys.len() + 1]);
                set_len(w, keys.len());
                at += keys.len() + 1;
                upper.push(NodeId::inner(ni).raw());
            }
            level = upper;
            t.height += 1;
        }
        if level.len() != 1 {
            return bad(format!("{} nodes at the top level", level.len()));
        }
        t.root = NodeId(level[0]);
        t.check_invariants().map_err(SnapshotError::Shape)?;
        Ok(t)
    }
}
