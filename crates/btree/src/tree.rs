//! The tree proper: lookups, insertion with splits, deletion with borrow/merge.

use crate::digest::entry_hash;
use crate::hooks::{StructureEvent, StructureStats};
use crate::node::{
    children, inner_insert_at, inner_parts_mut, inner_remove_at, inner_stride, leaf_insert_at,
    leaf_remove_at, leaf_stride, len, next, prev, rank_le, rank_lt, set_len, set_next, set_prev,
    NodeId, Slab, IK, LEAF_BIT, LK, NIL,
};

/// Default keys per node (leaves and internal nodes alike).
pub const DEFAULT_NODE_KEYS: usize = 30;
/// Smallest node capacity: with 4 keys a node splits into two of at least 2 and merges
/// stay within capacity.
pub const MIN_NODE_KEYS: usize = 4;
/// Largest node capacity (a node of 1024 keys is 16 KiB, well past any sweet spot).
pub const MAX_NODE_KEYS: usize = 1024;

/// Bound on the number of internal levels. Every non-root internal node has at least
/// 3 children and ids are 31 bits, so real trees stay far below.
pub(crate) const MAX_HEIGHT: usize = 40;

/// Leaves a range query prefetches ahead of the one it is reading.
const PREFETCH_LEAVES: usize = 12;

/// Cursor of the range-query look-ahead: a root-to-parent path (see `prefetch_ahead`).
struct Ahead {
    path: Path,
    done: bool,
}

impl Ahead {
    fn new(path: Path) -> Ahead {
        // A root leaf has no successor to prefetch.
        Ahead {
            done: path.depth == 0,
            path,
        }
    }
}

/// The internal nodes visited by a descent and the child slot taken in each, root first.
#[derive(Clone, Copy)]
pub(crate) struct Path {
    pub(crate) nodes: [u32; MAX_HEIGHT],
    pub(crate) slots: [u32; MAX_HEIGHT],
    pub(crate) depth: usize,
}

/// An in-memory B+tree from `u64` keys to `u64` values.
///
/// See the crate documentation for the layout and the papers it serves.
#[derive(Clone)]
pub struct BPlusTree {
    /// Maximum keys per node.
    pub(crate) cap: usize,
    /// Minimum keys per non-root node (`cap / 2`).
    pub(crate) min: usize,
    pub(crate) leaves: Slab,
    pub(crate) inners: Slab,
    pub(crate) free_leaves: Vec<u32>,
    pub(crate) free_inners: Vec<u32>,
    pub(crate) root: NodeId,
    /// Internal levels above the leaves (0: the root is a leaf).
    pub(crate) height: usize,
    pub(crate) len: usize,
    /// Wrapping sum of `entry_hash` over all entries, kept current by every mutation so
    /// that `digest()` is O(1).
    pub(crate) digest_sum: u64,
    pub(crate) stats: StructureStats,
    pub(crate) events: Option<Vec<StructureEvent>>,
}

impl Default for BPlusTree {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for BPlusTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BPlusTree")
            .field("node_keys", &self.cap)
            .field("len", &self.len)
            .field("height", &self.height)
            .field("leaves", &self.leaf_count())
            .field("internal_nodes", &self.internal_count())
            .finish()
    }
}

/// Content equality: same entries, whatever the shape.
impl PartialEq for BPlusTree {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.digest_sum == other.digest_sum && self.iter().eq(other.iter())
    }
}

impl Eq for BPlusTree {}

impl BPlusTree {
    /// An empty tree with [`DEFAULT_NODE_KEYS`] keys per node.
    pub fn new() -> Self {
        Self::with_node_keys(DEFAULT_NODE_KEYS)
    }

    /// An empty tree with `node_keys` keys per node (leaves and internal nodes).
    ///
    /// Panics unless `MIN_NODE_KEYS <= node_keys <= MAX_NODE_KEYS`.
    pub fn with_node_keys(node_keys: usize) -> Self {
        assert!(
            (MIN_NODE_KEYS..=MAX_NODE_KEYS).contains(&node_keys),
            "node_keys {node_keys} outside {MIN_NODE_KEYS}..={MAX_NODE_KEYS}"
        );
        let mut t = BPlusTree {
            cap: node_keys,
            min: node_keys / 2,
            leaves: Slab::new(leaf_stride(node_keys)),
            inners: Slab::new(inner_stride(node_keys)),
            free_leaves: Vec::new(),
            free_inners: Vec::new(),
            root: NodeId(LEAF_BIT),
            height: 0,
            len: 0,
            digest_sum: 0,
            stats: StructureStats::default(),
            events: None,
        };
        let root = t.alloc_leaf();
        t.root = NodeId::leaf(root);
        t
    }

    /// Maximum keys per node.
    pub fn node_keys(&self) -> usize {
        self.cap
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Internal levels above the leaves (0 when the root is a leaf).
    pub fn height(&self) -> usize {
        self.height
    }

    /// The root node.
    pub fn root(&self) -> NodeId {
        self.root
    }

    /// Live leaves.
    pub fn leaf_count(&self) -> usize {
        self.leaves.slots() as usize - self.free_leaves.len()
    }

    /// Live internal nodes.
    pub fn internal_count(&self) -> usize {
        self.inners.slots() as usize - self.free_inners.len()
    }

    /// Bytes reserved by the node arenas.
    pub fn memory_bytes(&self) -> usize {
        self.leaves.bytes() + self.inners.bytes()
    }

    // ---- allocation ----------------------------------------------------------------

    pub(crate) fn alloc_leaf(&mut self) -> u32 {
        let i = match self.free_leaves.pop() {
            Some(i) => i,
            None => self.leaves.push(),
        };
        assert!(i < LEAF_BIT, "leaf arena exhausted");
        let w = self.leaves.node_mut(i);
        set_len(w, 0);
        w[1] = u64::MAX; // next = prev = NIL
        i
    }

    pub(crate) fn alloc_inner(&mut self) -> u32 {
        let i = match self.free_inners.pop() {
            Some(i) => i,
            None => self.inners.push(),
        };
        assert!(i < LEAF_BIT, "internal arena exhausted");
        set_len(self.inners.node_mut(i), 0);
        i
    }

    fn free_leaf(&mut self, i: u32) {
        self.free_leaves.push(i);
    }

    fn free_inner(&mut self, i: u32) {
        self.free_inners.push(i);
    }

    #[inline]
    pub(crate) fn event(&mut self, e: StructureEvent) {
        if let Some(log) = &mut self.events {
            log.push(e);
        }
    }

    // ---- descent -------------------------------------------------------------------

    /// Index of the leaf whose key interval contains `key`.
    #[inline(always)]
    pub(crate) fn find_leaf(&self, key: u64) -> u32 {
        let cap = self.cap;
        let mut id = self.root.0;
        while id & LEAF_BIT == 0 {
            let w = self.inners.node(id);
            let c = rank_le(&w[IK..IK + len(w)], key);
            id = children(w, cap)[c];
            self.prefetch(id);
        }
        id & !LEAF_BIT
    }

    /// Start fetching all of node `id` (see `Slab::prefetch`).
    #[inline(always)]
    fn prefetch(&self, id: u32) {
        if id & LEAF_BIT == 0 {
            self.inners.prefetch(id);
        } else {
            self.leaves.prefetch(id & !LEAF_BIT);
        }
    }

    /// Like `find_leaf`, remembering the internal nodes and slots on the way.
    #[inline]
    pub(crate) fn find_leaf_path(&self, key: u64) -> (u32, Path) {
        let cap = self.cap;
        let mut path = Path {
            nodes: [0; MAX_HEIGHT],
            slots: [0; MAX_HEIGHT],
            depth: 0,
        };
        let mut id = self.root.0;
        while id & LEAF_BIT == 0 {
            let w = self.inners.node(id);
            let c = rank_le(&w[IK..IK + len(w)], key);
            path.nodes[path.depth] = id;
            path.slots[path.depth] = c as u32;
            path.depth += 1;
            id = children(w, cap)[c];
            self.prefetch(id);
        }
        (id & !LEAF_BIT, path)
    }

    /// Position of `key` in leaf `li`: `(pos, found)`.
    #[inline(always)]
    pub(crate) fn leaf_search(&self, li: u32, key: u64) -> (usize, bool) {
        let w = self.leaves.node(li);
        let keys = &w[LK..LK + len(w)];
        let pos = rank_lt(keys, key);
        (pos, pos < keys.len() && keys[pos] == key)
    }

    /// Leftmost leaf.
    pub(crate) fn first_leaf(&self) -> u32 {
        self.find_leaf(0)
    }

    /// Rightmost leaf.
    pub(crate) fn last_leaf(&self) -> u32 {
        self.find_leaf(u64::MAX)
    }

    // ---- point operations ----------------------------------------------------------

    /// The value of `key`.
    #[inline]
    pub fn read(&self, key: u64) -> Option<u64> {
        let li = self.find_leaf(key);
        let w = self.leaves.node(li);
        let n = len(w);
        let keys = &w[LK..LK + n];
        let pos = rank_lt(keys, key);
        if pos < n && keys[pos] == key {
            Some(w[LK + self.cap + pos])
        } else {
            None
        }
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: u64) -> bool {
        self.read(key).is_some()
    }

    /// Add `(key, value)` if `key` is absent. Returns whether it was added; an existing
    /// key keeps its value.
    pub fn insert(&mut self, key: u64, value: u64) -> bool {
        let cap = self.cap;
        let (li, path) = self.find_leaf_path(key);
        let w = self.leaves.node_mut(li);
        let n = len(w);
        let pos = rank_lt(&w[LK..LK + n], key);
        if pos < n && w[LK + pos] == key {
            return false;
        }
        self.len += 1;
        self.digest_sum = self.digest_sum.wrapping_add(entry_hash(key, value));
        if n < cap {
            leaf_insert_at(w, cap, n, pos, key, value);
        } else {
            self.split_leaf_insert(li, pos, key, value, &path);
        }
        true
    }

    /// Replace the value of an existing `key`, returning the old one. An absent key
    /// changes nothing.
    pub fn update(&mut self, key: u64, value: u64) -> Option<u64> {
        let li = self.find_leaf(key);
        let (pos, found) = self.leaf_search(li, key);
        if !found {
            return None;
        }
        let cap = self.cap;
        let slot = &mut self.leaves.node_mut(li)[LK + cap + pos];
        let old = std::mem::replace(slot, value);
        self.digest_sum = self
            .digest_sum
            .wrapping_sub(entry_hash(key, old))
            .wrapping_add(entry_hash(key, value));
        Some(old)
    }

    /// Remove `key`, returning its value. Underfull leaves borrow from or merge with a
    /// sibling, so every non-root node stays at least half full.
    pub fn delete(&mut self, key: u64) -> Option<u64> {
        let cap = self.cap;
        let (li, path) = self.find_leaf_path(key);
        let w = self.leaves.node_mut(li);
        let n = len(w);
        let pos = rank_lt(&w[LK..LK + n], key);
        if pos >= n || w[LK + pos] != key {
            return None;
        }
        let (_, value) = leaf_remove_at(w, cap, n, pos);
        self.len -= 1;
        self.digest_sum = self.digest_sum.wrapping_sub(entry_hash(key, value));
        // The separator above may now be below the leaf's new first key; that is still
        // a valid separator, so a deletion touches nothing else unless the leaf
        // underflows.
        if path.depth > 0 && n - 1 < self.min {
            self.rebalance_leaf(li, &path);
        }
        Some(value)
    }

    /// The smallest entry with key `> key`.
    pub fn get_next(&self, key: u64) -> Option<(u64, u64)> {
        let target = key.checked_add(1)?;
        let li = self.find_leaf(target);
        let (pos, _) = self.leaf_search(li, target);
        let w = self.leaves.node(li);
        if pos < len(w) {
            return Some((w[LK + pos], w[LK + self.cap + pos]));
        }
        // Non-root leaves are never empty, so the next leaf's first entry is the answer.
        let nx = next(w);
        if nx == NIL {
            return None;
        }
        let nw = self.leaves.node(nx);
        assert!(len(nw) > 0, "empty non-root leaf");
        Some((nw[LK], nw[LK + self.cap]))
    }

    /// The largest entry with key `< key`.
    pub fn get_prev(&self, key: u64) -> Option<(u64, u64)> {
        let target = key.checked_sub(1)?;
        let li = self.find_leaf(target);
        let w = self.leaves.node(li);
        let pos = rank_le(&w[LK..LK + len(w)], target);
        if pos > 0 {
            return Some((w[LK + pos - 1], w[LK + self.cap + pos - 1]));
        }
        let pv = prev(w);
        if pv == NIL {
            return None;
        }
        let pw = self.leaves.node(pv);
        let n = len(pw);
        assert!(n > 0, "empty non-root leaf");
        Some((pw[LK + n - 1], pw[LK + self.cap + n - 1]))
    }

    /// The smallest entry.
    pub fn first(&self) -> Option<(u64, u64)> {
        let w = self.leaves.node(self.first_leaf());
        (len(w) > 0).then(|| (w[LK], w[LK + self.cap]))
    }

    /// The largest entry.
    pub fn last(&self) -> Option<(u64, u64)> {
        let w = self.leaves.node(self.last_leaf());
        let n = len(w);
        (n > 0).then(|| (w[LK + n - 1], w[LK + self.cap + n - 1]))
    }

    // ---- range queries -------------------------------------------------------------

    /// All entries with `min <= key <= max`, in key order (empty when `min > max`).
    pub fn query(&self, min: u64, max: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        self.query_with(min, max, |k, v| out.push((k, v)));
        out
    }

    /// Call `f(key, value)` for every entry with `min <= key <= max`, in key order,
    /// without allocating.
    ///
    /// Leaves are walked through their links. Within a leaf the end position is found
    /// once (a whole leaf is taken when its last key is in range), so the inner loop
    /// does no comparisons at all. Meanwhile a second cursor runs a few leaves ahead
    /// through the parents' child arrays and prefetches them, so the misses of a long
    /// scan overlap instead of being paid one leaf at a time.
    #[inline]
    pub fn query_with<F: FnMut(u64, u64)>(&self, min: u64, max: u64, mut f: F) {
        if min > max {
            return;
        }
        let cap = self.cap;
        let (mut li, path) = self.find_leaf_path(min);
        let mut ahead = Ahead::new(path);
        for _ in 0..PREFETCH_LEAVES {
            self.prefetch_ahead(&mut ahead, max);
        }
        let (mut pos, _) = self.leaf_search(li, min);
        loop {
            self.prefetch_ahead(&mut ahead, max);
            let w = self.leaves.node(li);
            let n = len(w);
            let keys = &w[LK..LK + n];
            let vals = &w[LK + cap..LK + cap + n];
            let whole = n > 0 && keys[n - 1] <= max;
            let end = if whole { n } else { rank_le(keys, max) };
            // Zipped sub-slices: no bounds checks, so the loop vectorizes.
            for (&k, &v) in keys[pos..end].iter().zip(&vals[pos..end]) {
                f(k, v);
            }
            if !whole {
                return;
            }
            li = next(w);
            if li == NIL {
                return;
            }
            pos = 0;
        }
    }

    /// Move the look-ahead cursor to the next leaf in key order (unless that leaf
    /// starts above `max`) and prefetch it.
    #[inline(always)]
    fn prefetch_ahead(&self, a: &mut Ahead, max: u64) {
        if a.done {
            return;
        }
        // Fast path: the next leaf has the same parent.
        let bottom = a.path.depth - 1;
        let w = self.inners.node(a.path.nodes[bottom]);
        let s = a.path.slots[bottom] as usize;
        if s < len(w) {
            if w[IK + s] > max {
                a.done = true;
            } else {
                a.path.slots[bottom] = s as u32 + 1;
                self.leaves
                    .prefetch(children(w, self.cap)[s + 1] & !LEAF_BIT);
            }
            return;
        }
        self.prefetch_ahead_climb(a, max);
    }

    /// `prefetch_ahead` when the cursor leaves its parent: climb to the first ancestor
    /// with a right neighbour and descend to that subtree's leftmost leaf.
    #[inline(never)]
    fn prefetch_ahead_climb(&self, a: &mut Ahead, max: u64) {
        let cap = self.cap;
        let bottom = a.path.depth - 1;
        let mut lvl = bottom;
        loop {
            let w = self.inners.node(a.path.nodes[lvl]);
            let s = a.path.slots[lvl] as usize;
            if s < len(w) {
                // keys[s] is the lower bound of child s + 1.
                if w[IK + s] > max {
                    a.done = true;
                    return;
                }
                a.path.slots[lvl] = s as u32 + 1;
                let mut id = children(w, cap)[s + 1];
                while lvl < bottom {
                    lvl += 1;
                    a.path.nodes[lvl] = id;
                    a.path.slots[lvl] = 0;
                    id = children(self.inners.node(id), cap)[0];
                }
                self.leaves.prefetch(id & !LEAF_BIT);
                return;
            }
            if lvl == 0 {
                a.done = true;
                return;
            }
            lvl -= 1;
        }
    }

    // ---- splits --------------------------------------------------------------------

    /// Leaf `li` is full: split it in two halves and insert `(key, value)` at `pos`.
    fn split_leaf_insert(&mut self, li: u32, pos: usize, key: u64, value: u64, path: &Path) {
        let cap = self.cap;
        let ri = self.alloc_leaf();
        let left_n = cap.div_ceil(2);
        let (lw, rw) = self.leaves.pair_mut(li, ri);
        let vk = LK + cap;
        if pos < left_n {
            // The new entry goes left: the right half is [left_n - 1, cap).
            let from = left_n - 1;
            let moved = cap - from;
            rw[LK..LK + moved].copy_from_slice(&lw[LK + from..LK + cap]);
            rw[vk..vk + moved].copy_from_slice(&lw[vk + from..vk + cap]);
            set_len(rw, moved);
            leaf_insert_at(lw, cap, from, pos, key, value);
        } else {
            let moved = cap - left_n;
            rw[LK..LK + moved].copy_from_slice(&lw[LK + left_n..LK + cap]);
            rw[vk..vk + moved].copy_from_slice(&lw[vk + left_n..vk + cap]);
            set_len(rw, moved);
            set_len(lw, left_n);
            leaf_insert_at(rw, cap, moved, pos - left_n, key, value);
        }
        let nx = next(lw);
        set_next(rw, nx);
        set_prev(rw, li);
        set_next(lw, ri);
        let sep = rw[LK];
        if nx != NIL {
            set_prev(self.leaves.node_mut(nx), ri);
        }
        self.stats.splits += 1;
        self.event(StructureEvent::Split {
            node: NodeId::leaf(li),
            new: NodeId::leaf(ri),
        });
        self.insert_into_parent(path, path.depth, NodeId::leaf(li), sep, NodeId::leaf(ri));
    }

    /// After `left` split off `right` (whose keys are all `>= sep`), insert the
    /// separator into the parent at `depth - 1`, splitting upward as needed.
    fn insert_into_parent(
        &mut self,
        path: &Path,
        mut depth: usize,
        mut left: NodeId,
        mut sep: u64,
        mut right: NodeId,
    ) {
        let cap = self.cap;
        loop {
            if depth == 0 {
                assert!(self.height + 1 < MAX_HEIGHT, "tree too tall");
                let ri = self.alloc_inner();
                let w = self.inners.node_mut(ri);
                let (keys, kids) = inner_parts_mut(w, cap);
                keys[0] = sep;
                kids[0] = left.0;
                kids[1] = right.0;
                set_len(w, 1);
                self.root = NodeId::inner(ri);
                self.height += 1;
                self.stats.root_changes += 1;
                self.event(StructureEvent::NewRoot { root: self.root });
                return;
            }
            depth -= 1;
            let ni = path.nodes[depth];
            let slot = path.slots[depth] as usize;
            let w = self.inners.node_mut(ni);
            let n = len(w);
            debug_assert_eq!(children(w, cap)[slot], left.0);
            if n < cap {
                inner_insert_at(w, cap, n, slot, sep, right.0);
                return;
            }
            // Full: lay out the cap + 1 keys and cap + 2 children, keep the lower half,
            // move the upper half to a new node and push the median up. Internal
            // splits are rare (one per ~cap/2 leaf splits), so a scratch copy is fine.
            let (keys, kids) = inner_parts_mut(w, cap);
            let mut all_keys = Vec::with_capacity(cap + 1);
            all_keys.extend_from_slice(&keys[..slot]);
            all_keys.push(sep);
            all_keys.extend_from_slice(&keys[slot..n]);
            let mut all_kids = Vec::with_capacity(cap + 2);
            all_kids.extend_from_slice(&kids[..=slot]);
            all_kids.push(right.0);
            all_kids.extend_from_slice(&kids[slot + 1..=n]);
            let m = cap / 2;
            let (keys, kids) = inner_parts_mut(w, cap);
            keys[..m].copy_from_slice(&all_keys[..m]);
            kids[..=m].copy_from_slice(&all_kids[..=m]);
            set_len(w, m);
            let ri = self.alloc_inner();
            let rw = self.inners.node_mut(ri);
            let rn = cap - m;
            let (rkeys, rkids) = inner_parts_mut(rw, cap);
            rkeys[..rn].copy_from_slice(&all_keys[m + 1..]);
            rkids[..=rn].copy_from_slice(&all_kids[m + 1..]);
            set_len(rw, rn);
            self.stats.splits += 1;
            self.event(StructureEvent::Split {
                node: NodeId::inner(ni),
                new: NodeId::inner(ri),
            });
            left = NodeId::inner(ni);
            sep = all_keys[m];
            right = NodeId::inner(ri);
        }
    }

    // ---- underflow -----------------------------------------------------------------

    /// Leaf `li` (not the root) dropped below `min`: borrow one entry from a sibling
    /// that can spare it, or merge with a sibling.
    fn rebalance_leaf(&mut self, li: u32, path: &Path) {
        let cap = self.cap;
        let min = self.min;
        let d = path.depth - 1;
        let pi = path.nodes[d];
        let slot = path.slots[d] as usize;
        let (pn, left, right) = {
            let pw = self.inners.node(pi);
            let pn = len(pw);
            let kids = children(pw, cap);
            debug_assert_eq!(kids[slot], li | LEAF_BIT);
            let left = (slot > 0).then(|| kids[slot - 1] & !LEAF_BIT);
            let right = (slot < pn).then(|| kids[slot + 1] & !LEAF_BIT);
            (pn, left, right)
        };
        if let Some(l) = left {
            if len(self.leaves.node(l)) > min {
                let (lw, w) = self.leaves.pair_mut(l, li);
                let ln = len(lw);
                let (k, v) = leaf_remove_at(lw, cap, ln, ln - 1);
                leaf_insert_at(w, cap, len(w), 0, k, v);
                inner_parts_mut(self.inners.node_mut(pi), cap).0[slot - 1] = k;
                self.stats.borrows += 1;
                self.event(StructureEvent::Borrow {
                    from: NodeId::leaf(l),
                    to: NodeId::leaf(li),
                });
                return;
            }
        }
        if let Some(r) = right {
            if len(self.leaves.node(r)) > min {
                let (w, rw) = self.leaves.pair_mut(li, r);
                let (k, v) = leaf_remove_at(rw, cap, len(rw), 0);
                let new_first = rw[LK];
                leaf_insert_at(w, cap, len(w), len(w), k, v);
                inner_parts_mut(self.inners.node_mut(pi), cap).0[slot] = new_first;
                self.stats.borrows += 1;
                self.event(StructureEvent::Borrow {
                    from: NodeId::leaf(r),
                    to: NodeId::leaf(li),
                });
                return;
            }
        }
        // Both neighbours are at the minimum: merge the right one of the pair into the
        // left one (min - 1 + min <= cap entries).
        let (a, b, sep_slot) = match (left, right) {
            (Some(l), _) => (l, li, slot - 1),
            (None, Some(r)) => (li, r, slot),
            (None, None) => panic!("internal node with a single child"),
        };
        let (aw, bw) = self.leaves.pair_mut(a, b);
        let (an, bn) = (len(aw), len(bw));
        assert!(an + bn <= cap, "merge overflows a leaf");
        aw[LK + an..LK + an + bn].copy_from_slice(&bw[LK..LK + bn]);
        aw[LK + cap + an..LK + cap + an + bn].copy_from_slice(&bw[LK + cap..LK + cap + bn]);
        set_len(aw, an + bn);
        let nx = next(bw);
        set_next(aw, nx);
        if nx != NIL {
            set_prev(self.leaves.node_mut(nx), a);
        }
        self.free_leaf(b);
        self.stats.merges += 1;
        self.event(StructureEvent::Merge {
            into: NodeId::leaf(a),
            removed: NodeId::leaf(b),
        });
        inner_remove_at(self.inners.node_mut(pi), cap, pn, sep_slot);
        self.after_inner_shrink(path, d);
    }

    /// Internal node `path.nodes[d]` lost a key: collapse an empty root, or fix an
    /// underfull node by rotating through the parent or merging, walking upward.
    fn after_inner_shrink(&mut self, path: &Path, mut d: usize) {
        let cap = self.cap;
        let min = self.min;
        loop {
            let ni = path.nodes[d];
            let n = len(self.inners.node(ni));
            if d == 0 {
                if n == 0 {
                    // The root kept a single child: that child becomes the root.
                    let child = children(self.inners.node(ni), cap)[0];
                    self.root = NodeId(child);
                    self.height -= 1;
                    self.free_inner(ni);
                    self.stats.root_changes += 1;
                    self.event(StructureEvent::RootCollapse {
                        removed: NodeId::inner(ni),
                        root: self.root,
                    });
                }
                return;
            }
            if n >= min {
                return;
            }
            let gi = path.nodes[d - 1];
            let slot = path.slots[d - 1] as usize;
            let (gn, left, right) = {
                let gw = self.inners.node(gi);
                let gn = len(gw);
                let kids = children(gw, cap);
                debug_assert_eq!(kids[slot], ni);
                let left = (slot > 0).then(|| kids[slot - 1]);
                let right = (slot < gn).then(|| kids[slot + 1]);
                (gn, left, right)
            };
            if let Some(l) = left {
                let ln = len(self.inners.node(l));
                if ln > min {
                    // Rotate right: the parent's separator comes down as our first key,
                    // the left sibling's last key goes up, its last child moves over.
                    let sep = self.inners.node(gi)[IK + slot - 1];
                    let (lw, w) = self.inners.pair_mut(l, ni);
                    let (lkeys, lkids) = inner_parts_mut(lw, cap);
                    let (up, moved) = (lkeys[ln - 1], lkids[ln]);
                    set_len(lw, ln - 1);
                    let (keys, kids) = inner_parts_mut(w, cap);
                    keys.copy_within(0..n, 1);
                    keys[0] = sep;
                    kids.copy_within(0..n + 1, 1);
                    kids[0] = moved;
                    set_len(w, n + 1);
                    self.inners.node_mut(gi)[IK + slot - 1] = up;
                    self.stats.borrows += 1;
                    self.event(StructureEvent::Borrow {
                        from: NodeId::inner(l),
                        to: NodeId::inner(ni),
                    });
                    return;
                }
            }
            if let Some(r) = right {
                let rn = len(self.inners.node(r));
                if rn > min {
                    // Rotate left, the mirror image.
                    let sep = self.inners.node(gi)[IK + slot];
                    let (w, rw) = self.inners.pair_mut(ni, r);
                    let (rkeys, rkids) = inner_parts_mut(rw, cap);
                    let (up, moved) = (rkeys[0], rkids[0]);
                    rkeys.copy_within(1..rn, 0);
                    rkids.copy_within(1..rn + 1, 0);
                    set_len(rw, rn - 1);
                    let (keys, kids) = inner_parts_mut(w, cap);
                    keys[n] = sep;
                    kids[n + 1] = moved;
                    set_len(w, n + 1);
                    self.inners.node_mut(gi)[IK + slot] = up;
                    self.stats.borrows += 1;
                    self.event(StructureEvent::Borrow {
                        from: NodeId::inner(r),
                        to: NodeId::inner(ni),
                    });
                    return;
                }
            }
            // Merge the right node of the pair into the left one, pulling the
            // separator down between them: (min - 1) + 1 + min <= cap keys.
            let (a, b, sep_slot) = match (left, right) {
                (Some(l), _) => (l, ni, slot - 1),
                (None, Some(r)) => (ni, r, slot),
                (None, None) => panic!("internal node with a single child"),
            };
            let sep = self.inners.node(gi)[IK + sep_slot];
            let (aw, bw) = self.inners.pair_mut(a, b);
            let (an, bn) = (len(aw), len(bw));
            assert!(an + 1 + bn <= cap, "merge overflows an internal node");
            let (bkeys, bkids) = inner_parts_mut(bw, cap);
            let (akeys, akids) = inner_parts_mut(aw, cap);
            akeys[an] = sep;
            akeys[an + 1..an + 1 + bn].copy_from_slice(&bkeys[..bn]);
            akids[an + 1..an + 2 + bn].copy_from_slice(&bkids[..=bn]);
            set_len(aw, an + 1 + bn);
            self.free_inner(b);
            self.stats.merges += 1;
            self.event(StructureEvent::Merge {
                into: NodeId::inner(a),
                removed: NodeId::inner(b),
            });
            inner_remove_at(self.inners.node_mut(gi), cap, gn, sep_slot);
            d -= 1;
        }
    }
}
