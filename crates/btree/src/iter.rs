//! In-order iteration along the leaf chain.

use crate::node::{len, next, LK, NIL};
use crate::tree::BPlusTree;
use std::iter::FusedIterator;

/// Entries with keys in `[min, max]`, in key order. See [`BPlusTree::range`].
#[derive(Clone)]
pub struct Range<'a> {
    tree: &'a BPlusTree,
    leaf: u32,
    pos: usize,
    max: u64,
}

impl Iterator for Range<'_> {
    type Item = (u64, u64);

    #[inline]
    fn next(&mut self) -> Option<(u64, u64)> {
        while self.leaf != NIL {
            let w = self.tree.leaves.node(self.leaf);
            if self.pos < len(w) {
                let k = w[LK + self.pos];
                if k > self.max {
                    self.leaf = NIL;
                    return None;
                }
                let v = w[LK + self.tree.cap + self.pos];
                self.pos += 1;
                return Some((k, v));
            }
            self.leaf = next(w);
            self.pos = 0;
        }
        None
    }
}

impl FusedIterator for Range<'_> {}

impl BPlusTree {
    /// Iterator over the entries with `min <= key <= max` (empty when `min > max`).
    pub fn range(&self, min: u64, max: u64) -> Range<'_> {
        if min > max {
            return Range {
                tree: self,
                leaf: NIL,
                pos: 0,
                max,
            };
        }
        let leaf = self.find_leaf(min);
        let (pos, _) = self.leaf_search(leaf, min);
        Range {
            tree: self,
            leaf,
            pos,
            max,
        }
    }

    /// Iterator over all entries in key order.
    pub fn iter(&self) -> Range<'_> {
        Range {
            tree: self,
            leaf: self.first_leaf(),
            pos: 0,
            max: u64::MAX,
        }
    }
}

impl<'a> IntoIterator for &'a BPlusTree {
    type Item = (u64, u64);
    type IntoIter = Range<'a>;

    fn into_iter(self) -> Range<'a> {
        self.iter()
    }
}
