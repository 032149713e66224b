//! Full structural check, for tests and for replicas that want to verify a restored
//! or long-running tree.

use crate::digest::entry_hash;
use crate::node::{children, len, next, prev, NodeId, IK, LK, NIL};
use crate::tree::BPlusTree;

impl BPlusTree {
    /// Verify every structural invariant: key order inside nodes, separators bounding
    /// their subtrees, fill bounds (all nodes but the root between `node_keys / 2` and
    /// `node_keys` keys), all leaves at the same depth, leaf links forming the in-order
    /// chain in both directions, no node reachable twice or both live and free, `len`
    /// and the running digest matching the contents.
    pub fn check_invariants(&self) -> Result<(), String> {
        let cap = self.cap;
        let min = self.min;
        let mut seen_leaf = vec![false; self.leaves.slots() as usize];
        let mut seen_inner = vec![false; self.inners.slots() as usize];
        for &f in &self.free_leaves {
            let slot = seen_leaf
                .get_mut(f as usize)
                .ok_or(format!("free leaf {f} out of range"))?;
            if std::mem::replace(slot, true) {
                return Err(format!("leaf {f} freed twice"));
            }
        }
        for &f in &self.free_inners {
            let slot = seen_inner
                .get_mut(f as usize)
                .ok_or(format!("free internal node {f} out of range"))?;
            if std::mem::replace(slot, true) {
                return Err(format!("internal node {f} freed twice"));
            }
        }

        // Depth-first, left to right; bounds are [low, high) with None as unbounded.
        let mut stack: Vec<(NodeId, usize, u64, Option<u64>)> = vec![(self.root, 0, 0, None)];
        let mut leaves_in_order: Vec<u32> = Vec::new();
        let mut count = 0usize;
        let mut sum = 0u64;
        while let Some((id, depth, low, high)) = stack.pop() {
            let is_root = id == self.root;
            let in_bounds = |k: u64| k >= low && high.is_none_or(|h| k < h);
            if id.is_leaf() {
                let i = id.index();
                let seen = seen_leaf
                    .get_mut(i as usize)
                    .ok_or(format!("{id} out of range"))?;
                if std::mem::replace(seen, true) {
                    return Err(format!("{id} reachable twice or also free"));
                }
                if depth != self.height {
                    return Err(format!("{id} at depth {depth}, height is {}", self.height));
                }
                let w = self.leaves.node(i);
                let n = len(w);
                if n > cap || (!is_root && n < min) {
                    return Err(format!("{id} holds {n} entries, bounds {min}..={cap}"));
                }
                let keys = &w[LK..LK + n];
                for (j, &k) in keys.iter().enumerate() {
                    if j > 0 && keys[j - 1] >= k {
                        return Err(format!("{id} keys out of order at {j}"));
                    }
                    if !in_bounds(k) {
                        return Err(format!("{id} key {k} outside [{low}, {high:?})"));
                    }
                    sum = sum.wrapping_add(entry_hash(k, w[LK + cap + j]));
                }
                count += n;
                leaves_in_order.push(i);
            } else {
                let i = id.index();
                let seen = seen_inner
                    .get_mut(i as usize)
                    .ok_or(format!("{id} out of range"))?;
                if std::mem::replace(seen, true) {
                    return Err(format!("{id} reachable twice or also free"));
                }
                if depth >= self.height {
                    return Err(format!(
                        "{id} internal at depth {depth}, height is {}",
                        self.height
                    ));
                }
                let w = self.inners.node(i);
                let n = len(w);
                if n > cap || (is_root && n < 1) || (!is_root && n < min) {
                    return Err(format!("{id} holds {n} keys, bounds {min}..={cap}"));
                }
                let keys = &w[IK..IK + n];
                for (j, &k) in keys.iter().enumerate() {
                    if j > 0 && keys[j - 1] >= k {
                        return Err(format!("{id} separators out of order at {j}"));
                    }
                    // Strictly above `low`: the child left of the separator is non-empty.
                    if k <= low || high.is_some_and(|h| k >= h) {
                        return Err(format!("{id} separator {k} outside ({low}, {high:?})"));
                    }
                }
                let kids = children(w, cap);
                for c in (0..=n).rev() {
                    let clow = if c == 0 { low } else { keys[c - 1] };
                    let chigh = if c == n { high } else { Some(keys[c]) };
                    stack.push((NodeId(kids[c]), depth + 1, clow, chigh));
                }
            }
        }
        if seen_leaf.iter().any(|s| !s) || seen_inner.iter().any(|s| !s) {
            return Err("a node is neither reachable nor free (leaked)".into());
        }
        if count != self.len {
            return Err(format!("len is {}, leaves hold {count}", self.len));
        }
        if sum != self.digest_sum {
            return Err("running digest does not match the contents".into());
        }
        // The leaf chain, both directions.
        for (j, &li) in leaves_in_order.iter().enumerate() {
            let w = self.leaves.node(li);
            let want_prev = if j == 0 { NIL } else { leaves_in_order[j - 1] };
            let want_next = leaves_in_order.get(j + 1).copied().unwrap_or(NIL);
            if prev(w) != want_prev || next(w) != want_next {
                return Err(format!(
                    "leaf L{li} links prev {} next {}, in-order neighbours {want_prev} {want_next}",
                    prev(w),
                    next(w)
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::node::{set_len, set_next, IK, LK};
    use crate::BPlusTree;

    fn sample() -> BPlusTree {
        BPlusTree::bulk_load_with_node_keys(4, (0..100u64).map(|k| (k * 2, k))).unwrap()
    }

    #[test]
    fn detects_corruption() {
        let t = sample();
        t.check_invariants().unwrap();

        let mut bad = sample();
        let li = bad.find_leaf(50);
        bad.leaves.node_mut(li)[LK] = 1_000_000; // key order / bounds
        assert!(bad.check_invariants().is_err());

        let mut bad = sample();
        let li = bad.find_leaf(50);
        set_len(bad.leaves.node_mut(li), 1); // underfull
        assert!(bad.check_invariants().is_err());

        let mut bad = sample();
        let li = bad.find_leaf(50);
        set_next(bad.leaves.node_mut(li), crate::node::NIL); // broken chain
        assert!(bad.check_invariants().is_err());

        let mut bad = sample();
        let root = bad.root.index();
        bad.inners.node_mut(root)[IK] += 1; // separator no longer bounds its children
        assert!(bad.check_invariants().is_err());

        let mut bad = sample();
        bad.len += 1;
        assert!(bad.check_invariants().is_err());

        let mut bad = sample();
        bad.free_leaves.push(bad.find_leaf(0)); // live and free
        assert!(bad.check_invariants().is_err());
    }
}
