//! Bottom-up construction from sorted entries.
//!
//! Leaves are filled left to right to ~90% (so the first inserts after a load do not
//! all split), then each internal level is built over the one below with its children
//! spread evenly. Leaves are allocated in key order, so a range scan over a freshly
//! loaded tree walks memory sequentially.

use crate::digest::entry_hash;
use crate::node::{
    inner_parts_mut, leaf_insert_at, len, set_len, set_next, set_prev, NodeId, LK, NIL,
};
use crate::tree::{BPlusTree, MAX_HEIGHT};

/// Input to [`BPlusTree::bulk_load`] that is not strictly increasing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bulk load input not strictly increasing at entry {index}: key {key} after {prev}")]
pub struct BulkLoadError {
    /// Position of the offending entry.
    pub index: u64,
    pub prev: u64,
    pub key: u64,
}

/// Entries per leaf (and children per internal node, minus one) in a bulk load.
fn bulk_fill(cap: usize) -> usize {
    (cap - cap / 10).max(cap / 2 + 1)
}

/// Split `m` items into groups of between `lo` and `hi` items, close to `target`.
/// Possible for every `m >= lo` because `hi >= 2 * lo - 1`.
fn group_sizes(m: usize, lo: usize, hi: usize, target: usize) -> impl Iterator<Item = usize> {
    debug_assert!(hi + 1 >= 2 * lo && m >= lo);
    let g = m.div_ceil(target).max(m.div_ceil(hi)).min(m / lo).max(1);
    let (base, extra) = (m / g, m % g);
    assert!(
        base >= lo && base + (extra > 0) as usize <= hi,
        "no valid grouping"
    );
    (0..g).map(move |i| base + (i < extra) as usize)
}

impl BPlusTree {
    /// Build a tree with the default node capacity from strictly increasing entries.
    pub fn bulk_load<I: IntoIterator<Item = (u64, u64)>>(
        entries: I,
    ) -> Result<BPlusTree, BulkLoadError> {
        Self::bulk_load_with_node_keys(crate::DEFAULT_NODE_KEYS, entries)
    }

    /// Build a tree with `node_keys` keys per node from strictly increasing entries.
    /// Returns an error (and builds nothing) on unsorted or duplicate keys.
    pub fn bulk_load_with_node_keys<I: IntoIterator<Item = (u64, u64)>>(
        node_keys: usize,
        entries: I,
    ) -> Result<BPlusTree, BulkLoadError> {
        let mut t = BPlusTree::with_node_keys(node_keys);
        let cap = t.cap;
        let fill = bulk_fill(cap);
        let iter = entries.into_iter();
        t.leaves.reserve(iter.size_hint().0 / fill + 1);
        // (smallest key of the subtree, node) for every node of the level being built.
        let mut level: Vec<(u64, u32)> = vec![(0, t.root.raw())];
        let mut cur = t.root.index();
        let mut cur_n = 0;
        let mut prev_key: Option<u64> = None;
        let mut sum = 0u64;
        for (index, (key, value)) in iter.enumerate() {
            if let Some(prev) = prev_key {
                if key <= prev {
                    return Err(BulkLoadError {
                        index: index as u64,
                        prev,
                        key,
                    });
                }
            }
            prev_key = Some(key);
            if cur_n == fill {
                set_len(t.leaves.node_mut(cur), cur_n);
                let nl = t.alloc_leaf();
                set_next(t.leaves.node_mut(cur), nl);
                set_prev(t.leaves.node_mut(nl), cur);
                level.push((key, NodeId::leaf(nl).raw()));
                cur = nl;
                cur_n = 0;
            }
            let w = t.leaves.node_mut(cur);
            w[LK + cur_n] = key;
            w[LK + cap + cur_n] = value;
            cur_n += 1;
            sum = sum.wrapping_add(entry_hash(key, value));
        }
        set_len(t.leaves.node_mut(cur), cur_n);
        t.len = level.len().saturating_sub(1) * fill + cur_n;
        t.digest_sum = sum;

        // The last leaf may be underfull: merge it into its left neighbour if both fit
        // in one leaf, otherwise even them out.
        if level.len() > 1 && cur_n < t.min {
            let last = cur;
            let pl = crate::node::prev(t.leaves.node(last));
            let (pw, lw) = t.leaves.pair_mut(pl, last);
            let (pn, ln) = (len(pw), len(lw));
            let total = pn + ln;
            if total <= cap {
                for i in 0..ln {
                    let (k, v) = (lw[LK + i], lw[LK + cap + i]);
                    leaf_insert_at(pw, cap, pn + i, pn + i, k, v);
                }
                set_next(pw, NIL);
                t.free_leaves.push(last);
                level.pop();
            } else {
                let keep = total / 2;
                for i in (keep..pn).rev() {
                    let (k, v) = (pw[LK + i], pw[LK + cap + i]);
                    leaf_insert_at(lw, cap, len(lw), 0, k, v);
                }
                set_len(pw, keep);
                let first = lw[LK];
                level.last_mut().expect("two leaves").0 = first;
            }
        }

        // Internal levels.
        let inner_fill = fill + 1;
        while level.len() > 1 {
            assert!(t.height + 1 < MAX_HEIGHT, "tree too tall");
            let m = level.len();
            let mut upper = Vec::with_capacity(m / inner_fill + 1);
            let mut at = 0;
            let sizes: Vec<usize> = if m <= cap + 1 {
                vec![m]
            } else {
                group_sizes(m, t.min + 1, cap + 1, inner_fill).collect()
            };
            t.inners.reserve(sizes.len());
            for size in sizes {
                let group = &level[at..at + size];
                let ni = t.alloc_inner();
                let w = t.inners.node_mut(ni);
                let (keys, kids) = inner_parts_mut(w, cap);
                for (j, &(low, id)) in group.iter().enumerate() {
                    kids[j] = id;
                    if j > 0 {
                        keys[j - 1] = low;
                    }
                }
                set_len(w, size - 1);
                upper.push((group[0].0, NodeId::inner(ni).raw()));
                at += size;
            }
            level = upper;
            t.height += 1;
        }
        t.root = NodeId(level[0].1);
        Ok(t)
    }
}
