//! The tree's invariants and its digest.

use super::{GeoBTree, NodeId};

impl GeoBTree {
    /// Checks the whole tree (O(nodes + entries)); panics on the first violation. The
    /// module documentation lists what is checked.
    pub fn invariants(&self) {
        let n = self.n();
        let root = self.node(self.root);
        assert!(root.parent.is_none(), "the root has a parent");
        assert_eq!(root.depth, 0, "the root's depth");
        let mut seen = vec![false; self.nodes.len()];
        let mut leaves = Vec::new();
        let mut entries = 0u64;
        // Depth-first, children left to right: leaves come out in key order.
        let mut stack = vec![(self.root, None::<u64>, None::<u64>)];
        while let Some((id, lo, hi)) = stack.pop() {
            let node = self.node(id);
            assert!(!seen[id.index()], "node {} reached twice", node.uid);
            seen[id.index()] = true;
            assert_eq!(node.uid, id.index() as u64, "uid is the arena index");
            assert!(node.keys.len() <= self.order, "node {} overfull", node.uid);
            assert!(
                node.keys.windows(2).all(|w| w[0] < w[1]),
                "node {} keys not strictly sorted",
                node.uid
            );
            assert!(
                node.keys
                    .iter()
                    .all(|&k| lo.is_none_or(|l| k >= l) && hi.is_none_or(|h| k < h)),
                "node {} keys outside its parent's separators",
                node.uid
            );
            assert!(node.reps.span() <= n, "node {} reps outside N", node.uid);
            assert!(
                self.changed(id) || self.stats(id).is_empty(),
                "node {} counted accesses without changed",
                node.uid
            );
            if id != self.root {
                assert!(
                    !node.keys.is_empty(),
                    "node {} empty below the root",
                    node.uid
                );
            }
            if node.is_leaf {
                assert!(node.children.is_empty());
                assert_eq!(
                    node.values.len(),
                    node.keys.len(),
                    "leaf {} values",
                    node.uid
                );
                assert!(node.values.iter().all(|v| v.len() <= self.value_bytes_max));
                entries += node.keys.len() as u64;
                leaves.push(id);
                continue;
            }
            assert!(node.values.is_empty() && node.prev_leaf.is_none() && node.next_leaf.is_none());
            assert_eq!(
                node.children.len(),
                node.keys.len() + 1,
                "node {} children",
                node.uid
            );
            for (i, &c) in node.children.iter().enumerate().rev() {
                let child = self.node(c);
                assert_eq!(child.parent, Some(id), "node {} parent link", child.uid);
                assert_eq!(child.depth, node.depth + 1, "node {} depth", child.uid);
                let clo = if i == 0 { lo } else { Some(node.keys[i - 1]) };
                let chi = node.keys.get(i).copied().or(hi);
                stack.push((c, clo, chi));
            }
        }
        assert!(seen.iter().all(|&s| s), "a node is unreachable");
        assert_eq!(
            self.counts.len(),
            self.nodes.len() * 2 * n,
            "counters per node"
        );
        assert_eq!(
            self.changed.len(),
            self.nodes.len(),
            "changed flags per node"
        );
        assert_eq!(entries, self.len, "entry count");
        let depth = self.node(leaves[0]).depth;
        for (i, &l) in leaves.iter().enumerate() {
            let leaf = self.node(l);
            assert_eq!(leaf.depth, depth, "leaves at different depths");
            let prev = i.checked_sub(1).map(|j| leaves[j]);
            assert_eq!(leaf.prev_leaf, prev, "leaf {} prev link", leaf.uid);
            assert_eq!(
                leaf.next_leaf,
                leaves.get(i + 1).copied(),
                "leaf {} next link",
                leaf.uid
            );
        }
        // An inner node counts what the leaves below it count (see `execute`).
        let n = self.n();
        for (id, node) in self.nodes() {
            if node.is_leaf {
                continue;
            }
            for slot in 0..2 * n {
                let sum = node.children.iter().fold(0u64, |s, c| {
                    s.saturating_add(self.counts[c.index() * 2 * n + slot])
                });
                assert_eq!(
                    self.counts[id.index() * 2 * n + slot],
                    sum,
                    "node {} counts what its children count",
                    node.uid
                );
            }
        }
        self.optimizer.invariants();
    }

    /// Every node, breadth-first from the root, children left to right: an order that
    /// depends on the tree's shape alone. Uids (arena indices) follow the order in
    /// which splits happened, which differs between replicas for inserts that share no
    /// serializer (they run in either order), so nothing replicated may depend on
    /// them: the DOP walks nodes in this order, and the digest hashes them in it.
    pub fn tree_order(&self) -> Vec<NodeId> {
        let mut order = Vec::with_capacity(self.nodes.len());
        order.push(self.root);
        let mut next = 0;
        while next < order.len() {
            let id = order[next];
            next += 1;
            order.extend_from_slice(&self.node(id).children);
        }
        order
    }

    /// A 64-bit digest (FNV-1a) of everything replicas must agree on: the order and
    /// the value bound, every node in tree order ([`GeoBTree::tree_order`]) with all
    /// of Table II's fields but its uid (keys, values, depth, number of children, leaf
    /// or not, reps, `changed`, counters: the shape follows from the order and the
    /// children counts, and the invariants check parent and leaf links against it),
    /// and the optimizer's cache (its entries in recency order), which decides future
    /// DOPs. Replicas that executed the same requests have equal digests, whatever
    /// order their uids came in.
    pub fn digest(&self) -> u64 {
        let mut h = Fnv::new();
        h.word(self.order as u64);
        h.word(self.value_bytes_max as u64);
        h.word(self.n() as u64);
        h.word(self.len);
        h.word(self.nodes.len() as u64);
        for id in self.tree_order() {
            let node = self.node(id);
            h.word(u64::from(node.depth));
            h.word(u64::from(node.is_leaf) | u64::from(self.changed(id)) << 1);
            h.word(u64::from(node.reps.mask()));
            h.word(node.keys.len() as u64);
            node.keys.iter().for_each(|&k| h.word(k));
            for v in &node.values {
                h.word(v.len() as u64);
                h.bytes(v);
            }
            h.word(node.children.len() as u64);
            self.reads(id).iter().for_each(|&c| h.word(c));
            self.writes(id).iter().for_each(|&c| h.word(c));
        }
        if let Some(cache) = self.optimizer.cache() {
            for (key, config) in cache.entries() {
                for g in 0..key.n() {
                    h.word(
                        u64::from(key.load_hundredths(g)) << 8
                            | u64::from(key.update_hundredths(g)),
                    );
                }
                h.word(u64::from(config.mask()));
            }
        }
        h.finish()
    }
}

/// FNV-1a, 64 bits: simple, stable across Rust versions and platforms (unlike std's
/// hashers, which promise neither).
pub(crate) struct Fnv(u64);

impl Fnv {
    pub(crate) fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub(crate) fn word(&mut self, w: u64) {
        self.bytes(&w.to_le_bytes());
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::super::{GbTreeOptions, GeoBTree, NodeId, Op};
    use crate::Topology;

    fn tree(keys: u64) -> GeoBTree {
        let mut t =
            GeoBTree::new(Topology::paper_three_regions(), GbTreeOptions::new(3, 7)).unwrap();
        for k in 0..keys {
            t.execute(
                &Op::Insert {
                    key: k * 2,
                    value: vec![1],
                },
                (k % 3) as usize,
            )
            .unwrap();
        }
        t.invariants();
        t
    }

    // Planted bugs: each corruption must be caught by invariants().

    #[test]
    #[should_panic(expected = "not strictly sorted")]
    fn catches_unsorted_keys() {
        let mut t = tree(20);
        let leaf = t.find_leaf(10);
        t.nodes[leaf.index()].keys.swap(0, 1);
        t.invariants();
    }

    #[test]
    #[should_panic(expected = "counted accesses without changed")]
    fn catches_counters_without_changed() {
        let mut t = tree(20);
        t.dop();
        t.invariants();
        // Node 0's reads[1].
        t.counts[1] += 1;
        t.invariants();
    }

    #[test]
    #[should_panic(expected = "parent link")]
    fn catches_a_bad_parent_link() {
        let mut t = tree(20);
        let leaf = t.find_leaf(0);
        t.nodes[leaf.index()].parent = Some(leaf);
        t.invariants();
    }

    #[test]
    #[should_panic(expected = "depth")]
    fn catches_a_bad_depth() {
        let mut t = tree(20);
        let leaf = t.find_leaf(0);
        t.nodes[leaf.index()].depth += 1;
        t.invariants();
    }

    #[test]
    #[should_panic(expected = "overfull")]
    fn catches_an_overfull_node() {
        let mut t = tree(20);
        let leaf = t.find_leaf(0);
        let n = &mut t.nodes[leaf.index()];
        while n.keys.len() <= 3 {
            let k = n.keys[0];
            n.keys.insert(0, k);
            n.values.insert(0, Box::new([]));
        }
        t.invariants();
    }

    #[test]
    #[should_panic(expected = "next link")]
    fn catches_a_broken_leaf_chain() {
        let mut t = tree(20);
        let leaf = t.find_leaf(0);
        t.nodes[leaf.index()].next_leaf = None;
        t.invariants();
    }

    #[test]
    fn digest_sees_every_field() {
        let t = tree(20);
        let base = t.digest();
        let mut u = t.clone();
        u.changed[1] = !u.changed[1];
        assert_ne!(u.digest(), base);
        let mut u = t.clone();
        // Node 0's writes[2] (N = 3).
        u.counts[3 + 2] += 1;
        assert_ne!(u.digest(), base);
        let mut u = t.clone();
        u.randomize_reps(99);
        assert_ne!(u.digest(), base);
        let mut u = t.clone();
        let leaf = u.find_leaf(4);
        u.nodes[leaf.index()].values[0] = Box::new([2]);
        assert_ne!(u.digest(), base);
        assert_eq!(t.clone().digest(), base);
        assert_eq!(NodeId(3).index(), 3);
    }
}
