//! execute (Algorithm 1, lines 38–57): counting accesses, applying requests, splits
//! and the DOP.

use super::{GbTreeError, GeoBTree, Node, NodeId, Op, Reply};
use crate::cache::CacheKey;
use crate::optimizer::Plan;
use crate::set::{Config, Replica};
use crate::stats::AccessStats;
use serde::{Deserialize, Serialize};

/// What one DOP did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DopReport {
    /// Nodes whose `changed` flag was set: each was given to the optimizer.
    pub nodes_evaluated: u64,
    /// Of those, nodes with no access counted (new nodes from splits): they keep reps.
    pub nodes_skipped_empty: u64,
    /// Nodes whose reps differ after the DOP.
    pub reps_changed: u64,
    /// Plans the optimizer computed by enumeration.
    pub computed: u64,
    /// Plans it found in its cache.
    pub cache_hits: u64,
    /// Configurations evaluated with Equation 1.
    pub evaluations: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

impl GeoBTree {
    /// Executes a delivered request submitted at `from` (the caller has checked
    /// [`GeoBTree::deliver_decision`]): counts the access on k's leaf and every
    /// ancestor up to **and including** the root, then applies it. An inner node's
    /// counters always equal the sums of its children's (splits recompute them), so
    /// they do not depend on the order of operations that share no serializer. The DOP recomputes
    /// the serializers ([`GeoBTree::dop`]).
    ///
    /// A value above the bound is refused before anything changes.
    ///
    /// # Panics
    /// When `from` is not a replica of the topology.
    pub fn execute(&mut self, op: &Op, from: Replica) -> Result<Reply, GbTreeError> {
        self.check_from(from);
        self.run(op, Some(from))
    }

    /// Applies `op` as [`GeoBTree::execute`] does, but counts no access: for an
    /// ordering that delivers commands without an origin replica (EPaxos, a single
    /// stream), where no DOP ever reads the counters. Replies, entries and shape are
    /// those `execute` gives; only the counters and `changed` flags of existing nodes
    /// stay as they are (new nodes from splits are still marked changed).
    pub fn apply(&mut self, op: &Op) -> Result<Reply, GbTreeError> {
        self.run(op, None)
    }

    /// `execute` (counting from `from`) or `apply` (counting nothing).
    fn run(&mut self, op: &Op, from: Option<Replica>) -> Result<Reply, GbTreeError> {
        self.check_value(op)?;
        let reply = match op {
            Op::Dop => Reply::Dop(self.dop()),
            &Op::Read { key } => {
                let leaf = self.count_path(key, from, Access::Read);
                let n = self.node(leaf);
                let value = n
                    .keys
                    .binary_search(&key)
                    .ok()
                    .map(|i| n.values[i].to_vec());
                Reply::Value(value)
            }
            Op::GetNext { key } | Op::GetPrev { key } => {
                let leaf = self.count_path(*key, from, Access::Read);
                let found = self.neighbour(op);
                Reply::Entry(found.map(|(id, i)| {
                    if id != leaf {
                        // The answer's leaf is read too, and its serializer ordered it;
                        // counted with its ancestors, as every leaf access is (an inner
                        // node counts what its leaves count).
                        self.count_up(id, from, Access::Read);
                    }
                    let n = self.node(id);
                    (n.keys[i], n.values[i].to_vec())
                }))
            }
            Op::Update { key, value } => {
                let leaf = self.count_path(*key, from, Access::Write);
                let n = &mut self.nodes[leaf.index()];
                let old =
                    n.keys.binary_search(key).ok().map(|i| {
                        std::mem::replace(&mut n.values[i], value.clone().into_boxed_slice())
                    });
                Reply::Old(old.map(Vec::from))
            }
            Op::Insert { key, value } => {
                let predicted = self.insert_site(*key);
                let leaf = self.count_path(*key, from, Access::Write);
                Reply::Inserted(self.insert_at(leaf, *key, value, predicted))
            }
        };
        debug_assert!(self.nodes[self.root.index()].parent.is_none());
        Ok(reply)
    }

    /// Counts one access from `from` on k's leaf and every ancestor, the root included
    /// (a do-while: Algorithm 1's `while n.parent` skips the root). Returns the leaf.
    /// Counts nothing when `from` is `None` ([`GeoBTree::apply`]).
    fn count_path(&mut self, key: u64, from: Option<Replica>, access: Access) -> NodeId {
        let leaf = self.find_leaf(key);
        self.count_up(leaf, from, access);
        leaf
    }

    /// Counts one access on `leaf` and every ancestor up to the root (nothing when
    /// `from` is `None`).
    fn count_up(&mut self, leaf: NodeId, from: Option<Replica>, access: Access) {
        let Some(from) = from else {
            return;
        };
        let mut id = leaf;
        let mut counted = 0u32;
        loop {
            self.count(id, from, access);
            counted += 1;
            match self.nodes[id.index()].parent {
                Some(p) => id = p,
                None => break,
            }
        }
        assert_eq!(id, self.root, "the walk ends at the root");
        assert_eq!(
            counted,
            self.node(leaf).depth + 1,
            "every level counted once"
        );
    }

    /// Sets an inner node's counters to the sums of its children's (after a split
    /// moved children). Every access counts on a leaf and all its ancestors, so an
    /// inner node always counts exactly what the leaves below it count: which inner
    /// node a leaf hangs under when an access runs must not matter, since a read
    /// ordered by its leaf's serializer alone runs before a split of the leaf's
    /// parent at one replica and after it at another.
    fn resum(&mut self, id: NodeId) {
        let n = self.n();
        let children = std::mem::take(&mut self.nodes[id.index()].children);
        let mut sums = vec![0u64; 2 * n];
        for &c in &children {
            for (s, &v) in sums
                .iter_mut()
                .zip(&self.counts[c.index() * 2 * n..][..2 * n])
            {
                *s = s.saturating_add(v);
            }
        }
        self.counts[id.index() * 2 * n..][..2 * n].copy_from_slice(&sums);
        if sums.iter().any(|&v| v > 0) {
            self.changed[id.index()] = true;
        }
        self.nodes[id.index()].children = children;
    }

    fn count(&mut self, id: NodeId, from: Replica, access: Access) {
        let n = self.n();
        let slot = id.index() * 2 * n
            + match access {
                Access::Read => from,
                Access::Write => n + from,
            };
        // Saturating, as AccessStats: replicas that apply the same increments agree.
        self.counts[slot] = self.counts[slot].saturating_add(1);
        self.changed[id.index()] = true;
    }

    /// Inserts into `leaf` (k's leaf) unless `key` is present, splitting up the tree as
    /// needed. Every node modified must be within `predicted` (the insertion's psite).
    fn insert_at(&mut self, leaf: NodeId, key: u64, value: &[u8], predicted: Config) -> bool {
        let n = &mut self.nodes[leaf.index()];
        let Err(i) = n.keys.binary_search(&key) else {
            return false;
        };
        n.keys.insert(i, key);
        n.values.insert(i, value.to_vec().into_boxed_slice());
        assert!(n.reps.is_subset_of(predicted), "leaf outside psite");
        self.len += 1;
        let mut id = leaf;
        while self.nodes[id.index()].keys.len() > self.order {
            id = self.split(id, predicted);
        }
        true
    }

    /// Splits the overfull node `id` and returns its parent (the node that received
    /// the separator), creating a new root when `id` was the root.
    fn split(&mut self, id: NodeId, predicted: Config) -> NodeId {
        let sibling = NodeId(u32::try_from(self.nodes.len()).expect("at most 2^32 nodes"));
        let n = &mut self.nodes[id.index()];
        assert_eq!(
            n.keys.len(),
            self.order + 1,
            "a node splits as soon as it overflows"
        );
        // Only nodes psite named may change: a split node's parent is modified and was
        // added to the insertion's serializers because this node was full.
        assert!(n.reps.is_subset_of(predicted), "split node outside psite");
        let (reps, depth, parent, is_leaf) = (n.reps, n.depth, n.parent, n.is_leaf);
        let mut right = Node::new(u64::from(sibling.0), depth, parent, is_leaf, reps);
        let mid = n.keys.len() / 2;
        let separator = if is_leaf {
            right.keys = n.keys.split_off(mid);
            right.values = n.values.split_off(mid);
            right.prev_leaf = Some(id);
            right.next_leaf = n.next_leaf.replace(sibling);
            right.keys[0]
        } else {
            right.keys = n.keys.split_off(mid + 1);
            right.children = n.children.split_off(mid + 1);
            n.keys.pop().expect("the middle key")
        };
        if let Some(next) = right.next_leaf {
            self.nodes[next.index()].prev_leaf = Some(sibling);
        }
        for &c in &right.children {
            self.nodes[c.index()].parent = Some(sibling);
        }
        assert_eq!(self.push_node(right), sibling);
        if !is_leaf {
            // The children that moved take their counts with them. (A split leaf
            // keeps its counts and its new sibling starts at zero: every access to
            // the leaf is ordered with the insert that split it.)
            self.resum(id);
            self.resum(sibling);
        }
        match parent {
            Some(p) => {
                let pn = &mut self.nodes[p.index()];
                assert!(pn.reps.is_subset_of(predicted), "parent outside psite");
                let at = pn.children.iter().position(|&c| c == id).expect("a child");
                pn.keys.insert(at, separator);
                pn.children.insert(at + 1, sibling);
                p
            }
            None => self.new_root(id, sibling, separator),
        }
    }

    /// A new root above the old root `left` and its new sibling, with the old root's
    /// reps; every other node moves one level down.
    fn new_root(&mut self, left: NodeId, right: NodeId, separator: u64) -> NodeId {
        assert_eq!(left, self.root);
        let id = NodeId(u32::try_from(self.nodes.len()).expect("at most 2^32 nodes"));
        let reps = self.nodes[left.index()].reps;
        for n in &mut self.nodes {
            n.depth += 1;
        }
        let mut root = Node::new(u64::from(id.0), 0, None, false, reps);
        root.keys = vec![separator];
        root.children = vec![left, right];
        self.nodes[left.index()].parent = Some(id);
        self.nodes[right.index()].parent = Some(id);
        assert_eq!(self.push_node(root), id);
        self.resum(id);
        self.root = id;
        id
    }

    /// The DOP (Algorithm 1, lines 48–57, with the comparison the right way round):
    /// for every changed node, in tree order ([`GeoBTree::tree_order`]), reps ← the
    /// optimizer's configuration
    /// (unchanged when no access was counted), then `changed` ← false and the counters
    /// reset (§VI-D).
    pub fn dop(&mut self) -> DopReport {
        self.dop_with(|_, _| {})
    }

    /// [`GeoBTree::dop`], also returning every plan with its node (for experiments that
    /// compare strategies).
    pub fn dop_with_plans(&mut self) -> (DopReport, Vec<(NodeId, Plan)>) {
        let mut plans = Vec::new();
        let r = self.dop_with(|id, p| plans.push((id, *p)));
        (r, plans)
    }

    fn dop_with(&mut self, mut on_plan: impl FnMut(NodeId, &Plan)) -> DopReport {
        let before = self.optimizer.counters();
        let n = self.n();
        let len = self.nodes.len();
        let mut r = DopReport::default();
        // The optimizer must see the nodes in tree order (below), which visits the
        // arena out of memory order: on a big tree, a node's counters and its reps
        // touched there would cost cache misses a node, most of a cached DOP's time.
        // So the walk in tree order reads only each changed node's cache key and
        // writes its plan, both dense; the counters are read (for the keys) and
        // reset, and the plans applied, in memory order around it. The counters of a
        // node are read again in the walk only when its plan must be computed.
        let mut stats = AccessStats::new(n);
        let fill = |stats: &mut AccessStats, counts: &[u64]| {
            stats.reset();
            for g in 0..n {
                stats.add_reads(g, counts[g]);
                stats.add_writes(g, counts[n + g]);
            }
        };
        let mut keys: Vec<Option<CacheKey>> = vec![None; len];
        for (i, key) in keys.iter_mut().enumerate() {
            let counts = &self.counts[i * 2 * n..][..2 * n];
            if !self.changed[i] {
                debug_assert!(counts.iter().all(|&c| c == 0), "counters without changed");
                continue;
            }
            *key = CacheKey::of_counts(&counts[..n], &counts[n..]);
        }
        // Tree order, not uid order: uids follow the order in which splits happened,
        // and inserts that share no serializer split in either order at different
        // replicas, while the optimizer's cache makes its answers depend on the
        // order it sees nodes in.
        // The changed nodes' keys gathered in that order first, in a loop of a few
        // instructions that has many of its reads in flight at once.
        let walk: Vec<(NodeId, Option<CacheKey>)> = self
            .tree_order()
            .into_iter()
            .filter(|id| self.changed[id.index()])
            .map(|id| (id, keys[id.index()]))
            .collect();
        drop(keys);
        let mut planned: Vec<Option<Config>> = vec![None; len];
        for (id, key) in walk {
            let i = id.index();
            r.nodes_evaluated += 1;
            let counts = &self.counts[i * 2 * n..][..2 * n];
            let plan = self.optimizer.optimize_keyed(key, || {
                fill(&mut stats, counts);
                &stats
            });
            match plan {
                Some(plan) => {
                    assert!(plan.config.span() <= n);
                    planned[i] = Some(plan.config);
                    on_plan(id, &plan);
                }
                None => r.nodes_skipped_empty += 1,
            }
        }
        for (i, (node, config)) in self.nodes.iter_mut().zip(planned).enumerate() {
            if !self.changed[i] {
                continue;
            }
            self.changed[i] = false;
            self.counts[i * 2 * n..][..2 * n].fill(0);
            if let Some(config) = config.filter(|&c| c != node.reps) {
                r.reps_changed += 1;
                node.reps = config;
            }
        }
        let after = self.optimizer.counters();
        r.computed = after.computed - before.computed;
        r.cache_hits = after.cache_hits - before.cache_hits;
        r.evaluations = after.evaluations - before.evaluations;
        assert_eq!(
            r.nodes_evaluated,
            r.nodes_skipped_empty + r.computed + r.cache_hits,
            "every changed node got a plan or was empty"
        );
        r
    }
}
