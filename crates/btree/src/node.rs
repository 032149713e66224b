//! Node storage: two arenas of fixed-stride nodes and the word layout inside a node.
//!
//! Every node lives in a [`Slab`], one contiguous `Vec` of 64-byte aligned cache lines,
//! at `index * stride` words. A node is addressed by its `u32` index, so a child link
//! costs four bytes, there is no allocation per node, and the header, the keys and the
//! values of one node are adjacent in memory (the header shares a cache line with the
//! first keys, so reading `len` costs no extra miss).
//!
//! Leaf layout (words): `[len | next:u32 prev:u32 | keys[cap] | vals[cap]]`.
//! Internal layout (words): `[len | keys[cap] | children: u32[cap + 1]]`.
//!
//! Children are raw [`NodeId`]s (the leaf bit says which arena), so a descent needs no
//! knowledge of the height.

use serde::{Deserialize, Serialize};
use std::fmt;

/// "No node": the end of the leaf chain.
pub(crate) const NIL: u32 = u32::MAX;
/// Set in a [`NodeId`] that names a leaf; clear for an internal node.
pub(crate) const LEAF_BIT: u32 = 1 << 31;

/// Identity of a node: stable for as long as the node exists (a freed id may be reused
/// by a later split). Leaves and internal nodes live in separate arenas; the top bit
/// says which one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub(crate) u32);

impl NodeId {
    pub(crate) fn leaf(index: u32) -> NodeId {
        assert!(index < LEAF_BIT, "leaf arena exhausted");
        NodeId(index | LEAF_BIT)
    }

    pub(crate) fn inner(index: u32) -> NodeId {
        assert!(index < LEAF_BIT, "internal arena exhausted");
        NodeId(index)
    }

    /// Whether the node is a leaf.
    pub fn is_leaf(self) -> bool {
        self.0 & LEAF_BIT != 0
    }

    /// Index inside its arena (leaves and internal nodes are numbered separately).
    pub fn index(self) -> u32 {
        self.0 & !LEAF_BIT
    }

    /// The raw encoding (leaf bit included): a compact, unique `u32` per live node.
    pub fn raw(self) -> u32 {
        self.0
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_leaf() {
            write!(f, "L{}", self.index())
        } else {
            write!(f, "I{}", self.index())
        }
    }
}

/// One cache line. Allocating the arena in these guarantees every node starts on a
/// line boundary (strides are whole lines).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u64; 8]);

const ZERO_LINE: Line = Line([0; 8]);

/// log2 of the nodes per chunk: 4096 nodes, 2 MiB of 30-key leaves.
pub(crate) const CHUNK_SHIFT: u32 = 12;
const CHUNK_NODES: usize = 1 << CHUNK_SHIFT;
pub(crate) const CHUNK_MASK: u32 = CHUNK_NODES as u32 - 1;

/// An arena of equally sized nodes, in fixed-size chunks.
///
/// Chunks, not one growing `Vec`: growing a multi-hundred-megabyte vector would copy
/// it all (aligned buffers cannot be `mremap`ed by realloc) and fault in twice the
/// memory in the middle of a burst of splits. The chunk table is tiny and stays in L1,
/// so the extra indirection costs a cache hit per node visited. Only the first chunk
/// grows gradually, so small trees stay small.
#[derive(Clone)]
pub(crate) struct Slab {
    chunks: Vec<Vec<Line>>,
    /// Words per node, a multiple of 8.
    pub(crate) stride: usize,
    /// Node slots handed out (live or free).
    slots: u32,
}

#[inline(always)]
fn as_words(lines: &[Line]) -> &[u64] {
    // SAFETY: `Line` is `repr(C)` around `[u64; 8]`: `len * 8` initialized, aligned u64s.
    unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<u64>(), lines.len() * 8) }
}

#[inline(always)]
fn as_words_mut(lines: &mut [Line]) -> &mut [u64] {
    // SAFETY: as in `as_words`, and the borrow is unique.
    unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<u64>(), lines.len() * 8) }
}

impl Slab {
    pub(crate) fn new(stride_words: usize) -> Slab {
        assert!(stride_words > 0 && stride_words.is_multiple_of(8));
        Slab {
            chunks: Vec::new(),
            stride: stride_words,
            slots: 0,
        }
    }

    #[inline(always)]
    pub(crate) fn node(&self, index: u32) -> &[u64] {
        let chunk = &self.chunks[(index >> CHUNK_SHIFT) as usize];
        let start = (index & CHUNK_MASK) as usize * self.stride;
        &as_words(chunk)[start..start + self.stride]
    }

    #[inline(always)]
    pub(crate) fn node_mut(&mut self, index: u32) -> &mut [u64] {
        let stride = self.stride;
        let chunk = &mut self.chunks[(index >> CHUNK_SHIFT) as usize];
        let start = (index & CHUNK_MASK) as usize * stride;
        &mut as_words_mut(chunk)[start..start + stride]
    }

    /// Hint the CPU to fetch every cache line of a node now, so that the lines a
    /// search needs after the key scan (child links, values) arrive together with the
    /// keys instead of costing a second dependent miss.
    #[inline(always)]
    pub(crate) fn prefetch(&self, index: u32) {
        #[cfg(target_arch = "x86_64")]
        {
            let chunk = &self.chunks[(index >> CHUNK_SHIFT) as usize];
            let start = (index & CHUNK_MASK) as usize * self.stride;
            let node = &as_words(chunk)[start..start + self.stride];
            for line in node.chunks_exact(8) {
                // SAFETY: prefetching is only a hint and never faults; SSE is part of
                // the x86_64 baseline.
                #[allow(unused_unsafe)]
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        line.as_ptr().cast::<i8>(),
                    );
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = index;
    }

    /// Two distinct nodes, both mutable (for splits, merges and borrows).
    pub(crate) fn pair_mut(&mut self, a: u32, b: u32) -> (&mut [u64], &mut [u64]) {
        assert_ne!(a, b, "a node cannot be its own sibling");
        let stride = self.stride;
        let (ca, cb) = ((a >> CHUNK_SHIFT) as usize, (b >> CHUNK_SHIFT) as usize);
        let (sa, sb) = (
            (a & CHUNK_MASK) as usize * stride,
            (b & CHUNK_MASK) as usize * stride,
        );
        if ca == cb {
            let words = as_words_mut(&mut self.chunks[ca]);
            if sa < sb {
                let (lo, hi) = words.split_at_mut(sb);
                (&mut lo[sa..sa + stride], &mut hi[..stride])
            } else {
                let (lo, hi) = words.split_at_mut(sa);
                (&mut hi[..stride], &mut lo[sb..sb + stride])
            }
        } else if ca < cb {
            let (lo, hi) = self.chunks.split_at_mut(cb);
            (
                &mut as_words_mut(&mut lo[ca])[sa..sa + stride],
                &mut as_words_mut(&mut hi[0])[sb..sb + stride],
            )
        } else {
            let (lo, hi) = self.chunks.split_at_mut(ca);
            (
                &mut as_words_mut(&mut hi[0])[sa..sa + stride],
                &mut as_words_mut(&mut lo[cb])[sb..sb + stride],
            )
        }
    }

    /// The first word of every chunk, for [`crate::SharedTree`]'s word-by-word access
    /// (taken from the exclusive borrow, so writes through them are allowed).
    pub(crate) fn chunk_ptrs(&mut self) -> Vec<*mut u64> {
        self.chunks
            .iter_mut()
            .map(|c| c.as_mut_ptr().cast::<u64>())
            .collect()
    }

    /// Number of node slots, live or free.
    pub(crate) fn slots(&self) -> u32 {
        self.slots
    }

    /// Append a zeroed node and return its index.
    pub(crate) fn push(&mut self) -> u32 {
        let index = self.slots;
        assert!(index < LEAF_BIT, "node arena exhausted");
        let lines = self.stride / 8;
        let c = (index >> CHUNK_SHIFT) as usize;
        if c == self.chunks.len() {
            // Later chunks are allocated whole; the first grows with the tree.
            let capacity = if c == 0 {
                lines * 8
            } else {
                lines * CHUNK_NODES
            };
            self.chunks.push(Vec::with_capacity(capacity));
        }
        let chunk = &mut self.chunks[c];
        if chunk.len() == chunk.capacity() {
            let want = (chunk.capacity() * 2).clamp(lines, lines * CHUNK_NODES);
            chunk.reserve_exact(want - chunk.len());
        }
        chunk.resize(chunk.len() + lines, ZERO_LINE);
        self.slots += 1;
        index
    }

    /// Make room for `nodes` more nodes without reallocating.
    pub(crate) fn reserve(&mut self, nodes: usize) {
        let lines = self.stride / 8;
        let target = (self.slots as usize + nodes).min(LEAF_BIT as usize);
        if self.chunks.is_empty() {
            self.chunks.push(Vec::new());
        }
        let first = &mut self.chunks[0];
        let want = target.min(CHUNK_NODES) * lines;
        if first.capacity() < want {
            first.reserve_exact(want - first.len());
        }
        // Chunks past the first are allocated whole when first used.
    }

    pub(crate) fn bytes(&self) -> usize {
        self.chunks
            .iter()
            .map(|c| c.capacity() * std::mem::size_of::<Line>())
            .sum()
    }
}

/// Words per leaf for `cap` keys, rounded up to whole cache lines.
pub(crate) fn leaf_stride(cap: usize) -> usize {
    (2 + 2 * cap).div_ceil(8) * 8
}

/// Words per internal node for `cap` keys and `cap + 1` u32 children.
pub(crate) fn inner_stride(cap: usize) -> usize {
    (1 + cap + (cap + 1).div_ceil(2)).div_ceil(8) * 8
}

// ---- leaf accessors -------------------------------------------------------------

/// Offset of the first key in a leaf.
pub(crate) const LK: usize = 2;

#[inline(always)]
pub(crate) fn len(w: &[u64]) -> usize {
    w[0] as usize
}

#[inline(always)]
pub(crate) fn set_len(w: &mut [u64], n: usize) {
    w[0] = n as u64;
}

#[inline(always)]
pub(crate) fn next(w: &[u64]) -> u32 {
    w[1] as u32
}

#[inline(always)]
pub(crate) fn prev(w: &[u64]) -> u32 {
    (w[1] >> 32) as u32
}

#[inline(always)]
pub(crate) fn set_next(w: &mut [u64], n: u32) {
    w[1] = (w[1] & !0xffff_ffff) | n as u64;
}

#[inline(always)]
pub(crate) fn set_prev(w: &mut [u64], p: u32) {
    w[1] = (w[1] & 0xffff_ffff) | ((p as u64) << 32);
}

/// Insert `(key, value)` at `pos` in a leaf holding `n < cap` entries.
#[inline]
pub(crate) fn leaf_insert_at(
    w: &mut [u64],
    cap: usize,
    n: usize,
    pos: usize,
    key: u64,
    value: u64,
) {
    debug_assert!(n < cap && pos <= n);
    let vk = LK + cap;
    w.copy_within(LK + pos..LK + n, LK + pos + 1);
    w[LK + pos] = key;
    w.copy_within(vk + pos..vk + n, vk + pos + 1);
    w[vk + pos] = value;
    set_len(w, n + 1);
}

/// Remove the entry at `pos` from a leaf holding `n` entries; returns it.
#[inline]
pub(crate) fn leaf_remove_at(w: &mut [u64], cap: usize, n: usize, pos: usize) -> (u64, u64) {
    debug_assert!(pos < n);
    let vk = LK + cap;
    let out = (w[LK + pos], w[vk + pos]);
    w.copy_within(LK + pos + 1..LK + n, LK + pos);
    w.copy_within(vk + pos + 1..vk + n, vk + pos);
    set_len(w, n - 1);
    out
}

// ---- internal accessors ---------------------------------------------------------

/// Offset of the first separator key in an internal node.
pub(crate) const IK: usize = 1;

#[inline(always)]
pub(crate) fn children(w: &[u64], cap: usize) -> &[u32] {
    let tail = &w[IK + cap..];
    debug_assert!(tail.len() * 2 > cap);
    // SAFETY: the stride reserves ceil((cap + 1) / 2) words after the keys, i.e. room
    // for cap + 1 u32s; u64 alignment satisfies u32 alignment; any bits are a valid u32.
    unsafe { std::slice::from_raw_parts(tail.as_ptr().cast::<u32>(), cap + 1) }
}

/// The separator keys (all `cap` slots) and the children, both mutable.
#[inline(always)]
pub(crate) fn inner_parts_mut(w: &mut [u64], cap: usize) -> (&mut [u64], &mut [u32]) {
    let (head, tail) = w.split_at_mut(IK + cap);
    debug_assert!(tail.len() * 2 > cap);
    // SAFETY: see `children`; `tail` is uniquely borrowed.
    let kids = unsafe { std::slice::from_raw_parts_mut(tail.as_mut_ptr().cast::<u32>(), cap + 1) };
    (&mut head[IK..], kids)
}

/// Insert separator `key` at `slot` and `child` right of it (at `slot + 1`) into an
/// internal node holding `n < cap` keys.
pub(crate) fn inner_insert_at(
    w: &mut [u64],
    cap: usize,
    n: usize,
    slot: usize,
    key: u64,
    child: u32,
) {
    debug_assert!(n < cap && slot <= n);
    let (keys, kids) = inner_parts_mut(w, cap);
    keys.copy_within(slot..n, slot + 1);
    keys[slot] = key;
    kids.copy_within(slot + 1..n + 1, slot + 2);
    kids[slot + 1] = child;
    set_len(w, n + 1);
}

/// Remove separator `slot` and the child right of it (at `slot + 1`).
pub(crate) fn inner_remove_at(w: &mut [u64], cap: usize, n: usize, slot: usize) {
    debug_assert!(slot < n);
    let (keys, kids) = inner_parts_mut(w, cap);
    keys.copy_within(slot + 1..n, slot);
    kids.copy_within(slot + 2..n + 1, slot + 1);
    set_len(w, n - 1);
}

// ---- search ---------------------------------------------------------------------

/// Number of keys below `k`, i.e. the position of `k` in a sorted slice.
///
/// Counting instead of branching on each comparison: the comparisons are independent,
/// so the loads of all cache lines of a node issue at once and there is no
/// data-dependent branch to mispredict. Nodes are small (30 keys by default), and the
/// scan is dominated by the cache misses it overlaps.
#[inline(always)]
pub(crate) fn rank_lt(keys: &[u64], k: u64) -> usize {
    let mut c = 0;
    for &x in keys {
        c += (x < k) as usize;
    }
    c
}

/// Number of keys at or below `k`: the child to follow in an internal node.
#[inline(always)]
pub(crate) fn rank_le(keys: &[u64], k: u64) -> usize {
    let mut c = 0;
    for &x in keys {
        c += (x <= k) as usize;
    }
    c
}
