//! Structure hooks for the parallel execution models.
//!
//! - opt-PSMR (paper 002 §V-B): a worker executes a command optimistically only if it
//!   stays inside one leaf (no split, merge or borrow) whose key interval no
//!   neighbouring worker's range overlaps. [`BPlusTree::safety_check`] answers that
//!   question without mutating the tree.
//! - GeoPaxos+ (paper 004 §IV, Algorithm 1): partitioning is by tree node, so nodes
//!   have identities, depths and parents ([`BPlusTree::path_to_leaf`]), callers attach
//!   their own per-node data ([`NodeMeta`]) and need the nodes an insert would split
//!   (the "psite" of INSERT, [`BPlusTree::predict_insert_splits`]).
//!
//! The plain tree pays nothing for these: there are no parent pointers to maintain
//! (parents are found by descending), metadata lives in a side table the caller owns,
//! and the structural event log is off unless asked for.

use crate::node::{children, len, NodeId, IK, LEAF_BIT};
use crate::ops::{BatchOp, Op};
use crate::tree::BPlusTree;
use serde::{Deserialize, Serialize};

/// A structural change, as recorded by the optional event log
/// ([`BPlusTree::record_events`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StructureEvent {
    /// `node` split; its upper half went to the fresh node `new` (its right sibling).
    Split { node: NodeId, new: NodeId },
    /// `removed` (the right one of two siblings) was merged into `into` and freed.
    Merge { into: NodeId, removed: NodeId },
    /// `to` was underfull and took one entry (or child) from its sibling `from`.
    Borrow { from: NodeId, to: NodeId },
    /// The root split and `root` is the new root above it.
    NewRoot { root: NodeId },
    /// The root `removed` was left with one child, `root`, which replaced it.
    RootCollapse { removed: NodeId, root: NodeId },
}

/// Counters of structural changes since the tree was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StructureStats {
    pub splits: u64,
    pub merges: u64,
    pub borrows: u64,
    pub root_changes: u64,
}

impl StructureStats {
    /// Total number of structural changes.
    pub fn total(&self) -> u64 {
        self.splits + self.merges + self.borrows + self.root_changes
    }
}

/// Answer of the opt-PSMR safety check (paper 002 §V-B).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SafetyCheck {
    /// Executing the command cannot change the tree (reads, queries, empty batches).
    ReadOnly,
    /// The command only changes entries of leaf `leaf`, whose key interval is
    /// `[low, high]` (inclusive, from the separators of its ancestors), with no split,
    /// merge or borrow.
    LeafLocal { leaf: NodeId, low: u64, high: u64 },
    /// A batch touching several leaves, none of which splits, merges or borrows;
    /// `[low, high]` covers all of them (and any leaves between).
    MultiLeaf { low: u64, high: u64 },
    /// The command splits, merges or rebalances nodes.
    Structural,
}

impl SafetyCheck {
    /// Whether the command leaves the tree's shape unchanged.
    pub fn is_local(&self) -> bool {
        !matches!(self, SafetyCheck::Structural)
    }

    /// The key interval the command may write, if it is local and writes.
    pub fn interval(&self) -> Option<(u64, u64)> {
        match *self {
            SafetyCheck::LeafLocal { low, high, .. } | SafetyCheck::MultiLeaf { low, high } => {
                Some((low, high))
            }
            _ => None,
        }
    }
}

/// A node on a root-to-leaf path (paper 004 §IV).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: NodeId,
    /// 0 for the root.
    pub depth: u32,
    /// `None` for the root.
    pub parent: Option<NodeId>,
}

/// A leaf located by key, with the key interval its ancestors assign it.
pub(crate) struct Located {
    pub(crate) leaf: u32,
    pub(crate) low: u64,
    pub(crate) high: u64,
}

impl BPlusTree {
    /// Start (or stop) recording [`StructureEvent`]s. Recording is off by default so
    /// the plain tree never pays for it.
    pub fn record_events(&mut self, on: bool) {
        if on {
            self.events.get_or_insert_with(Vec::new);
        } else {
            self.events = None;
        }
    }

    /// Take the events recorded so far.
    pub fn drain_events(&mut self) -> Vec<StructureEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Structural change counters (always maintained; they are touched only on the
    /// rare split/merge paths).
    pub fn structure_stats(&self) -> StructureStats {
        self.stats
    }

    /// The leaf holding `key`'s interval, and that interval.
    pub(crate) fn locate(&self, key: u64) -> Located {
        let cap = self.cap;
        let (mut low, mut high) = (0, u64::MAX);
        let mut id = self.root.raw();
        while id & LEAF_BIT == 0 {
            let w = self.inners.node(id);
            let n = len(w);
            let keys = &w[IK..IK + n];
            let c = crate::node::rank_le(keys, key);
            // Child c holds keys in [keys[c - 1], keys[c]); deeper bounds are tighter.
            if c > 0 {
                low = keys[c - 1];
            }
            if c < n {
                high = keys[c] - 1; // separators are >= 1: some key lies below them
            }
            id = children(w, cap)[c];
        }
        Located {
            leaf: id & !LEAF_BIT,
            low,
            high,
        }
    }

    /// opt-PSMR safety check (paper 002 §V-B), without mutating the tree: whether `op`
    /// stays inside one leaf (no split, merge or borrow) and which key interval that
    /// leaf covers, so a worker can verify no neighbouring worker's range overlaps it.
    pub fn safety_check(&self, op: &Op) -> SafetyCheck {
        match *op {
            Op::Read { .. } | Op::Query { .. } | Op::Next { .. } | Op::Prev { .. } => {
                SafetyCheck::ReadOnly
            }
            Op::Update { key, .. } => {
                // Replacing a value (or finding nothing) never changes the shape.
                let at = self.locate(key);
                SafetyCheck::LeafLocal {
                    leaf: NodeId::leaf(at.leaf),
                    low: at.low,
                    high: at.high,
                }
            }
            Op::Insert { key, value } => self.batch_check(&[BatchOp::Insert { key, value }]),
            Op::Delete { key } => self.batch_check(&[BatchOp::Delete { key }]),
            Op::Batch(ref ops) => self.batch_check(ops),
        }
    }

    /// Simulate the fill of every leaf the batch touches, in order. Splits happen the
    /// moment a leaf would exceed `cap` and rebalancing the moment a non-root leaf
    /// drops below `min`, even if later operations would undo it, so each step is
    /// checked. As long as nothing is structural, every operation lands in the leaf it
    /// would land in on the unmodified tree.
    fn batch_check(&self, ops: &[BatchOp]) -> SafetyCheck {
        batch_check(ops, self.cap, self.min, self.height == 0, |key| {
            let at = self.locate(key);
            let fill = len(self.leaves.node(at.leaf));
            let found = self.leaf_search(at.leaf, key).1;
            (at, fill, found)
        })
    }

    /// The nodes from the root down to the leaf whose interval holds `key`, each with
    /// its depth and parent (paper 004 §IV).
    pub fn path_to_leaf(&self, key: u64) -> Vec<NodeInfo> {
        let (leaf, path) = self.find_leaf_path(key);
        let mut out = Vec::with_capacity(path.depth + 1);
        let mut parent = None;
        for d in 0..path.depth {
            let id = NodeId::inner(path.nodes[d]);
            out.push(NodeInfo {
                id,
                depth: d as u32,
                parent,
            });
            parent = Some(id);
        }
        out.push(NodeInfo {
            id: NodeId::leaf(leaf),
            depth: path.depth as u32,
            parent,
        });
        out
    }

    /// The nodes an insert of `key` would split, leaf first, then each full ancestor
    /// up to the first one with room (paper 004 Algorithm 1, psite of INSERT). Empty
    /// when `key` is present (the insert changes nothing) or its leaf has room.
    pub fn predict_insert_splits(&self, key: u64) -> Vec<NodeId> {
        let (leaf, path) = self.find_leaf_path(key);
        if self.leaf_search(leaf, key).1 || len(self.leaves.node(leaf)) < self.cap {
            return Vec::new();
        }
        let mut out = vec![NodeId::leaf(leaf)];
        for d in (0..path.depth).rev() {
            let ni = path.nodes[d];
            if len(self.inners.node(ni)) < self.cap {
                break;
            }
            out.push(NodeId::inner(ni));
        }
        out
    }
}

/// A per-node side table of caller data (paper 004 §IV: e.g. the site owning each
/// node). The tree does not know about it, so the plain tree pays nothing; callers that
/// track structure feed it the tree's [`StructureEvent`]s via [`NodeMeta::follow`].
#[derive(Clone, Debug, Default)]
pub struct NodeMeta<M> {
    leaves: Vec<M>,
    inners: Vec<M>,
    empty: M,
}

impl<M: Default + Clone> NodeMeta<M> {
    pub fn new() -> Self {
        NodeMeta {
            leaves: Vec::new(),
            inners: Vec::new(),
            empty: M::default(),
        }
    }

    fn table(&self, id: NodeId) -> &Vec<M> {
        if id.is_leaf() {
            &self.leaves
        } else {
            &self.inners
        }
    }

    /// The data of `id` (the default when never set).
    pub fn get(&self, id: NodeId) -> &M {
        self.table(id)
            .get(id.index() as usize)
            .unwrap_or(&self.empty)
    }

    /// Mutable data of `id`, created with the default when absent.
    pub fn get_mut(&mut self, id: NodeId) -> &mut M {
        let table = if id.is_leaf() {
            &mut self.leaves
        } else {
            &mut self.inners
        };
        let i = id.index() as usize;
        if table.len() <= i {
            table.resize(i + 1, M::default());
        }
        &mut table[i]
    }

    pub fn set(&mut self, id: NodeId, m: M) {
        *self.get_mut(id) = m;
    }

    /// Forget the data of `id` (back to the default).
    pub fn reset(&mut self, id: NodeId) {
        let table = if id.is_leaf() {
            &mut self.leaves
        } else {
            &mut self.inners
        };
        if let Some(slot) = table.get_mut(id.index() as usize) {
            *slot = M::default();
        }
    }

    /// Keep the table consistent with a structural change: a split node's new sibling
    /// inherits its data, freed nodes are reset (their ids may be reused), a new root
    /// starts at the default.
    pub fn follow(&mut self, event: &StructureEvent) {
        match *event {
            StructureEvent::Split { node, new } => {
                let m = self.get(node).clone();
                self.set(new, m);
            }
            StructureEvent::Merge { removed, .. } => self.reset(removed),
            StructureEvent::Borrow { .. } => {}
            StructureEvent::NewRoot { root } => self.reset(root),
            StructureEvent::RootCollapse { removed, .. } => self.reset(removed),
        }
    }
}

/// The opt-PSMR safety check of a batch (see `BPlusTree::batch_check`), with
/// `leaf_of(key)` giving where `key` leads, that leaf's entry count and whether `key`
/// is in it: the one rule for the tree and for `SharedTree`, which reads leaves word by
/// word.
pub(crate) fn batch_check(
    ops: &[BatchOp],
    cap: usize,
    min: usize,
    root_is_leaf: bool,
    leaf_of: impl Fn(u64) -> (Located, usize, bool),
) -> SafetyCheck {
    struct Touched {
        leaf: u32,
        fill: usize,
        low: u64,
        high: u64,
    }
    let mut touched: Vec<Touched> = Vec::new();
    // Presence of keys already touched by the batch (batches are small: linear).
    let mut present: Vec<(u64, bool)> = Vec::new();
    for op in ops {
        let key = match *op {
            BatchOp::Insert { key, .. } | BatchOp::Delete { key } => key,
        };
        let (at, fill, found) = leaf_of(key);
        let t = match touched.iter().position(|t| t.leaf == at.leaf) {
            Some(i) => i,
            None => {
                touched.push(Touched {
                    leaf: at.leaf,
                    fill,
                    low: at.low,
                    high: at.high,
                });
                touched.len() - 1
            }
        };
        let p = match present.iter().position(|&(k, _)| k == key) {
            Some(i) => i,
            None => {
                present.push((key, found));
                present.len() - 1
            }
        };
        match *op {
            BatchOp::Insert { .. } if !present[p].1 => {
                present[p].1 = true;
                touched[t].fill += 1;
                if touched[t].fill > cap {
                    return SafetyCheck::Structural;
                }
            }
            BatchOp::Delete { .. } if present[p].1 => {
                present[p].1 = false;
                touched[t].fill -= 1;
                if !root_is_leaf && touched[t].fill < min {
                    return SafetyCheck::Structural;
                }
            }
            _ => {}
        }
    }
    match touched.as_slice() {
        [] => SafetyCheck::ReadOnly,
        [one] => SafetyCheck::LeafLocal {
            leaf: NodeId::leaf(one.leaf),
            low: one.low,
            high: one.high,
        },
        many => SafetyCheck::MultiLeaf {
            low: many.iter().map(|t| t.low).min().unwrap_or(0),
            high: many.iter().map(|t| t.high).max().unwrap_or(u64::MAX),
        },
    }
}
