//! The geo B+tree of paper 004 §IV (Table II, Algorithm 1): a B+tree whose every node
//! is an object with its own serializers (`reps`) and per-replica access counters, and
//! the functions a GeoPaxos+ replica runs on it: `psite` (which serializers must order
//! an operation), the delivery check (execute, or re-serialize because the mapping
//! moved), `execute` (count the access on the path, apply the operation) and the DOP
//! (recompute every changed node's serializers with the [`Optimizer`]).
//!
//! Pure and deterministic, like the rest of the crate: no I/O, no clock, no unseeded
//! randomness, no floating point, no hash map. Every replica that executes the same
//! operations in the same order holds the same tree ([`GeoBTree::digest`]).
//!
//! # Nodes (Table II)
//!
//! Every [`Node`] has a `uid` (its index in the tree's arena: nodes are never freed,
//! there is no delete), a `depth` (0 at the root), its `parent`, `is_leaf`, its sorted
//! `keys`, and either `values` (a leaf; byte strings of at most
//! [`GbTreeOptions::value_bytes_max`], 100 bytes in §VI's experiments) or `children`
//! (an inner node, one more than its keys: keys below `keys[0]` go to `children[0]`,
//! keys at or above `keys[i]` to `children[i + 1]`). Leaves are linked both ways, the
//! "linked leaves" of §IV-A. Each node also has `reps` (its [`Config`], set G of
//! Fig. 4), and a `changed` flag and `reads[N]`/`writes[N]` counters, which the tree
//! keeps in dense arrays indexed by uid rather than inside the node
//! ([`GeoBTree::changed`], [`GeoBTree::reads`], [`GeoBTree::writes`],
//! [`GeoBTree::stats`]): the DOP reads and resets them for every node, and with the
//! counters in two small heap vectors per node ([`AccessStats`]) scattered over a tree
//! of a million keys it spent most of its time waiting for memory rather than
//! optimizing. Measured by `partita experiment optimizer` (8 replicas, 1,000,000 keys,
//! after 100 DOPs): hot + LRU went from 0.68 to 0.21 µs per changed node, brute force
//! from 28 to 18 µs.
//!
//! **Order.** `order` is the most keys a node holds (the paper never gives the value
//! its experiments used). A node splits when an insertion finds it full
//! (`size == order`, i.e. `size + 1 > order`). Algorithm 1's test `n.size + 1 =
//! T.order` is the same test when `T.order` counts children, as the order of a B-tree
//! usually does (keys + 1); §IV-A's Fig. 4 has "fanout three", two keys per node.
//!
//! # Operations (Table III)
//!
//! [`Op`]: `READ(k)` → the value of k; `GET-NEXT(k)` → the entry with the smallest
//! key above k; `GET-PREV(k)` → the entry with the largest key below k (the paper says
//! "returns value"; the key comes along, as a client walking the tree needs it);
//! `UPDATE(k, v)` → replaces the value of k and returns the old one, and changes
//! nothing when k is absent (the paper is silent; an update is not an insert);
//! `INSERT(k, v)` → inserts k, and changes nothing when k is present (replies whether
//! it inserted); `DOP` → recomputes the serializers.
//!
//! # psite (Algorithm 1, lines 17–37)
//!
//! [`GeoBTree::psite`], with n the leaf that holds, or would hold, k:
//! - READ: the one serializer of n.reps closest to the replica the request came from
//!   (`from` itself when it is one of them; ties to the lowest index,
//!   [`Topology::nearest`]);
//! - GET-NEXT / GET-PREV: the closest serializer of n, plus the closest serializer of
//!   the leaf that holds the answer when that is another leaf (none when there is no
//!   answer);
//! - UPDATE: all of n.reps (write-all);
//! - INSERT: n.reps, then, while n has a parent and n would split, n ← n.parent and
//!   its reps are added: a split inserts a separator into the parent, so the parent is
//!   modified too (split prediction, line 34);
//! - DOP: every replica.
//!
//! # Delivery (lines 10–16): execute or resubmit
//!
//! [`GeoBTree::deliver_decision`] is evaluated at delivery on the tree as it is then,
//! identically at every replica (it depends on the operation, on `op.from`, which
//! travels with it, and on `op.dst`, never on the replica evaluating it):
//! - READ: execute iff `leaf.reps ∩ dst ≠ ∅`; GET-NEXT/GET-PREV: the same for k's leaf
//!   **and** for the answer's leaf. Read-one (§III-A) needs one current serializer per
//!   object read; requiring `psite(op) ⊆ dst` instead would also resubmit reads whose
//!   serializer is still current but no longer the closest.
//! - UPDATE, INSERT and DOP: execute iff `psite(op, from) ⊆ dst`: write-all needs
//!   every current serializer of every object written. This catches both a DOP that
//!   moved or added serializers since submission and a split that was not predicted
//!   at submission (the leaf filled up in between: the parent is now in psite).
//! - Otherwise resubmit with `dst ← psite(op, from)` on the current tree. A
//!   resubmission always names a serializer `dst` did not have (asserted), the
//!   paper's wording ("the new set of serializers … include a serializer that was not
//!   used").
//!
//! Splits cannot break a read: both halves of a split node keep its reps, so the leaf
//! that holds k after a split has the serializers the leaf had before.
//!
//! # execute (lines 38–57)
//!
//! [`GeoBTree::execute`] walks from k's leaf to the root, **the root included**, adding
//! one read (READ, GET-*) or one write (UPDATE, INSERT) from `from` to every node and
//! setting its `changed` flag; a GET-* whose answer lives in another leaf also counts
//! one read on that leaf and its ancestors (its serializer ordered the request, and
//! Equation 1 should see the access). So an inner node always counts exactly what the
//! leaves below it count, and splits keep it so (next paragraph): the counters must
//! not depend on the order of operations that share no serializer, which replicas run
//! in either order (a read ordered by its leaf's serializer alone, and an insert that
//! splits the leaf's parent). Then it applies the operation. Every write counts on every
//! ancestor, as Algorithm 1 is written (so the root counts every write; the reading
//! aid notes this contradicts §IV-A's "root mostly read" and leaves the choice open).
//!
//! **Splits.** A leaf holding `order + 1` keys after an insertion splits in two, the
//! right half's first key going up as separator; an inner node with `order + 1` keys
//! splits around its middle key, which goes up. Both halves keep the split node's
//! reps, a new root gets the old root's reps; every new node starts with
//! `changed = true` (so the next DOP visits it; with no access counted the optimizer
//! leaves its reps alone). A leaf's new right half starts with zero counters (the
//! left half keeps the leaf's: every access to the leaf is ordered with the insert
//! that split it); the halves of a split inner node and a new root take the sums of
//! their children's counters (Algorithm 1 leaves the counters where the accesses
//! found them, and a new root at zero). After an insertion, every node it modified is
//! asserted to have its reps within the insertion's psite computed before it.
//!
//! **DOP.** [`GeoBTree::dop`] walks the nodes in tree order, breadth-first from the
//! root ([`GeoBTree::tree_order`]; the order must be the same at every replica: the
//! optimizer's cache makes its answers depend on the order it sees workloads in, and
//! uid order is not: two inserts that share no serializer run in either order at
//! different replicas, so their splits number new nodes differently) and,
//! for every changed node, sets reps to the configuration the tree's [`Optimizer`]
//! returns (kept when no access was counted), clears `changed` and resets the counters
//! (§VI-D resets them after computing the serializers). It returns a [`DopReport`].
//! So the invariant `counters ≠ 0 ⇒ changed` holds at all times.
//!
//! # What Algorithm 1 gets wrong, and what this module does instead
//!
//! 1. Line 41, `while n.parent do`, stops before the root, whose counters are then
//!    never incremented and whose serializers never reflect the workload. The walk here
//!    is a do-while that counts the root too.
//! 2. `changed` is never set to true anywhere, so the DOP (line 49) would never visit a
//!    node. It is set here with every counter increment and on every new node.
//! 3. Line 53, `if cost < C_{n,i}`, with `cost = ∞` initially, never holds: the search
//!    would keep `replicas = ∅`. The [`Optimizer`] keeps a configuration when it is
//!    strictly cheaper (`C < cost`), ties broken by fewer serializers, then by the
//!    smaller bitmask ([`crate::best_among`]).
//! 4. Lines 24–29 pick "the closest serializer to r", where r is the replica running
//!    the code: evaluated at delivery, that differs between replicas. Here it is always
//!    relative to `op.from`, and delivery uses the intersection rule above.
//!
//! # Initial serializers
//!
//! A new tree's root gets a pseudo-random configuration drawn from
//! [`GbTreeOptions::seed`] and its uid (SplitMix64), and nodes made by splits inherit
//! as above. [`GeoBTree::randomize_reps`] redraws every node's configuration the same
//! way (DBT_b of §VI-A, "a random assignment of serializers") and
//! [`GeoBTree::initialize_reps`] assigns them by a function: both are initialization
//! steps, for a tree that serves no request yet (they are not replicated operations).
//!
//! # Inputs, outputs, invariants
//!
//! Inputs: [`Op`]s with the replica they came from, and `op.dst` at delivery.
//! Outputs: serializer sets, [`Decision`]s, [`Reply`]s, [`DopReport`]s.
//! [`GeoBTree::invariants`] checks: keys strictly sorted and within their parent's
//! separators; at most `order` keys per node and at least one below the root; children
//! = keys + 1 in inner nodes, values = keys in leaves; parent links and depths agree;
//! every leaf at the same depth, linked in key order; every node reachable once; reps
//! within the N replicas; counters for N replicas and zero unless `changed`; values
//! within their bound; the entry count; the optimizer's own invariants. Bad requests
//! (a value over the bound) are [`GbTreeError`]s that leave the tree unchanged; bugs (a
//! replica outside the topology) panic.

mod check;
mod exec;
mod site;
mod snapshot;

use crate::error::GeoError;
use crate::optimizer::{Optimizer, OptimizerOptions};
use crate::set::{Config, Replica};
use crate::stats::AccessStats;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use thiserror::Error;

pub(crate) use check::Fnv;
pub use exec::DopReport;

/// The smallest `order` (keys per node): a full inner node of 2 keys splits into one
/// key each side of the separator.
pub const ORDER_MIN: usize = 2;
/// The largest `order`: bounds the work of one insertion (shifting keys in a node).
pub const ORDER_MAX: usize = 4096;
/// An `order` when nothing else is known (the paper gives none).
pub const ORDER_DEFAULT: usize = 32;
/// The default bound on a value's size: §VI inserts 100-byte objects.
pub const VALUE_BYTES_MAX_DEFAULT: usize = 4096;
/// The largest bound a tree accepts for `value_bytes_max`.
pub const VALUE_BYTES_LIMIT: usize = 1 << 20;

/// The index of a node in its tree (equal to its uid).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(u32);

impl NodeId {
    /// The position in the tree's arena.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One node of the geo B+tree, with Table II's fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    uid: u64,
    depth: u32,
    parent: Option<NodeId>,
    is_leaf: bool,
    keys: Vec<u64>,
    /// Leaves: one value per key. Inner nodes: empty.
    values: Vec<Box<[u8]>>,
    /// Inner nodes: keys + 1 children. Leaves: empty.
    children: Vec<NodeId>,
    /// Leaves: the neighbouring leaves in key order.
    prev_leaf: Option<NodeId>,
    next_leaf: Option<NodeId>,
    reps: Config,
}

impl Node {
    /// A new node: no keys (its counters and `changed` flag live in the tree).
    fn new(uid: u64, depth: u32, parent: Option<NodeId>, is_leaf: bool, reps: Config) -> Node {
        Node {
            uid,
            depth,
            parent,
            is_leaf,
            keys: Vec::new(),
            values: Vec::new(),
            children: Vec::new(),
            prev_leaf: None,
            next_leaf: None,
            reps,
        }
    }

    /// The unique identifier (the arena index).
    pub fn uid(&self) -> u64 {
        self.uid
    }

    /// The distance from the root (0 at the root).
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// The parent, `None` at the root.
    pub fn parent(&self) -> Option<NodeId> {
        self.parent
    }

    /// Whether the node is a leaf.
    pub fn is_leaf(&self) -> bool {
        self.is_leaf
    }

    /// The number of keys (Table II's `size`).
    pub fn size(&self) -> usize {
        self.keys.len()
    }

    /// The sorted keys: entries in a leaf, separators in an inner node.
    pub fn keys(&self) -> &[u64] {
        &self.keys
    }

    /// A leaf's values, one per key (empty for an inner node).
    pub fn values(&self) -> impl Iterator<Item = &[u8]> {
        self.values.iter().map(|v| &v[..])
    }

    /// An inner node's children (empty for a leaf).
    pub fn children(&self) -> &[NodeId] {
        &self.children
    }

    /// The node's serializers (set G of Fig. 4).
    pub fn reps(&self) -> Config {
        self.reps
    }
}

/// A request on the tree (Table III), or the DOP that recomputes serializers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// The value of `key`.
    Read { key: u64 },
    /// The entry with the smallest key above `key`.
    GetNext { key: u64 },
    /// The entry with the largest key below `key`.
    GetPrev { key: u64 },
    /// Replace the value of `key` (if present) and return the old one.
    Update { key: u64, value: Vec<u8> },
    /// Insert `key` with `value` (if absent).
    Insert { key: u64, value: Vec<u8> },
    /// Recompute the serializers of every changed node (Algorithm 1, line 58).
    Dop,
}

impl Op {
    /// The key, for every request but the DOP.
    pub fn key(&self) -> Option<u64> {
        match *self {
            Op::Read { key }
            | Op::GetNext { key }
            | Op::GetPrev { key }
            | Op::Update { key, .. }
            | Op::Insert { key, .. } => Some(key),
            Op::Dop => None,
        }
    }

    /// READ, GET-NEXT and GET-PREV: ordered by one serializer per node read.
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            Op::Read { .. } | Op::GetNext { .. } | Op::GetPrev { .. }
        )
    }

    /// UPDATE and INSERT: ordered by every serializer of every node written.
    pub fn is_write(&self) -> bool {
        matches!(self, Op::Update { .. } | Op::Insert { .. })
    }

    /// The paper's name: `READ`, `GET-NEXT`, `GET-PREV`, `UPDATE`, `INSERT`, `DOP`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Read { .. } => "READ",
            Op::GetNext { .. } => "GET-NEXT",
            Op::GetPrev { .. } => "GET-PREV",
            Op::Update { .. } => "UPDATE",
            Op::Insert { .. } => "INSERT",
            Op::Dop => "DOP",
        }
    }

    fn value(&self) -> Option<&[u8]> {
        match self {
            Op::Update { value, .. } | Op::Insert { value, .. } => Some(value),
            _ => None,
        }
    }
}

/// What [`GeoBTree::execute`] returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// READ: the value, if the key is present.
    Value(Option<Vec<u8>>),
    /// GET-NEXT, GET-PREV: the entry found, if any.
    Entry(Option<(u64, Vec<u8>)>),
    /// UPDATE: the value replaced, or `None` when the key was absent (nothing changed).
    Old(Option<Vec<u8>>),
    /// INSERT: whether the key was inserted (false: it was present, nothing changed).
    Inserted(bool),
    /// DOP: what it did.
    Dop(DopReport),
}

/// The delivery decision of Algorithm 1, lines 10–16.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// The serializers that ordered the request still cover it: execute and reply.
    Execute,
    /// They do not (a DOP moved serializers, or an insertion will split a node that
    /// was not predicted to): the request's origin re-serializes it with this `dst`.
    Resubmit(Config),
}

/// What [`GeoBTree::deliver`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Executed, with its reply.
    Executed(Reply),
    /// Not executed: to be re-serialized with this `dst`.
    Resubmit(Config),
}

/// Why a tree or a request was refused. The tree is unchanged after an error.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum GbTreeError {
    /// `order` outside [`ORDER_MIN`]..=[`ORDER_MAX`].
    #[error("order = {order}; it must be in {min}..={max}")]
    Order {
        order: usize,
        min: usize,
        max: usize,
    },
    /// `value_bytes_max` of 0 or above [`VALUE_BYTES_LIMIT`].
    #[error("value_bytes_max = {bytes}; it must be in 1..={max}")]
    ValueBytesMax { bytes: usize, max: usize },
    /// A request's value is longer than the tree accepts.
    #[error("a value of {len} bytes; value_bytes_max is {max}")]
    ValueTooLarge { len: usize, max: usize },
    /// The optimizer options were refused.
    #[error("optimizer: {0}")]
    Optimizer(#[from] GeoError),
    /// A replacement optimizer was built for another topology.
    #[error("the optimizer's topology differs from the tree's")]
    TopologyMismatch,
}

/// How to build a [`GeoBTree`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GbTreeOptions {
    /// The most keys a node holds ([`ORDER_MIN`]..=[`ORDER_MAX`]).
    pub order: usize,
    /// Seeds the initial serializers (the root's, and [`GeoBTree::randomize_reps`]).
    pub seed: u64,
    /// The longest value accepted, in bytes (1..=[`VALUE_BYTES_LIMIT`]).
    pub value_bytes_max: usize,
    /// The DOP's strategy (brute force by default: exact, and the paper's reference).
    pub optimizer: OptimizerOptions,
}

impl GbTreeOptions {
    /// `order` and `seed`, values up to [`VALUE_BYTES_MAX_DEFAULT`], a brute-force DOP.
    pub fn new(order: usize, seed: u64) -> GbTreeOptions {
        GbTreeOptions {
            order,
            seed,
            value_bytes_max: VALUE_BYTES_MAX_DEFAULT,
            optimizer: OptimizerOptions::brute_force(),
        }
    }

    /// Refuses an order or a value bound out of range, or bad optimizer options.
    pub fn validate(&self) -> Result<(), GbTreeError> {
        if !(ORDER_MIN..=ORDER_MAX).contains(&self.order) {
            return Err(GbTreeError::Order {
                order: self.order,
                min: ORDER_MIN,
                max: ORDER_MAX,
            });
        }
        if !(1..=VALUE_BYTES_LIMIT).contains(&self.value_bytes_max) {
            return Err(GbTreeError::ValueBytesMax {
                bytes: self.value_bytes_max,
                max: VALUE_BYTES_LIMIT,
            });
        }
        self.optimizer.validate()?;
        Ok(())
    }
}

impl Default for GbTreeOptions {
    fn default() -> GbTreeOptions {
        GbTreeOptions::new(ORDER_DEFAULT, 0)
    }
}

/// The replicated geo B+tree: one copy per replica, all kept identical by executing the
/// same operations in the same order (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeoBTree {
    nodes: Vec<Node>,
    root: NodeId,
    order: usize,
    value_bytes_max: usize,
    seed: u64,
    /// Entries held.
    len: u64,
    /// Per node (by uid), `reads[0..N]` then `writes[0..N]` of the current window.
    counts: Vec<u64>,
    /// Per node (by uid): an access was counted, or it was created, since the last DOP.
    changed: Vec<bool>,
    /// The DOP's optimizer (its cache is replicated state too).
    optimizer: Optimizer,
}

impl GeoBTree {
    /// An empty tree (one empty leaf, the root, with a seeded random configuration)
    /// over `topology`.
    pub fn new(topology: Topology, options: GbTreeOptions) -> Result<GeoBTree, GbTreeError> {
        options.validate()?;
        let optimizer = Optimizer::new(topology, options.optimizer)?;
        let n = optimizer.topology().n();
        let root = Node::new(0, 0, None, true, random_config(options.seed, 0, n));
        let t = GeoBTree {
            nodes: vec![root],
            root: NodeId(0),
            order: options.order,
            value_bytes_max: options.value_bytes_max,
            seed: options.seed,
            len: 0,
            counts: vec![0; 2 * n],
            // A new tree has nothing for a DOP to do.
            changed: vec![false],
            optimizer,
        };
        t.invariants();
        Ok(t)
    }

    /// The number of replicas N.
    pub fn n(&self) -> usize {
        self.optimizer.topology().n()
    }

    /// The replicas and the latencies between them.
    pub fn topology(&self) -> &Topology {
        self.optimizer.topology()
    }

    /// The most keys a node holds.
    pub fn order(&self) -> usize {
        self.order
    }

    /// The longest value accepted, in bytes.
    pub fn value_bytes_max(&self) -> usize {
        self.value_bytes_max
    }

    /// The number of entries.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the tree holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Levels: 1 for a tree that is one leaf.
    pub fn height(&self) -> u32 {
        self.node(self.find_leaf(0)).depth + 1
    }

    /// The root.
    pub fn root(&self) -> NodeId {
        self.root
    }

    /// A node.
    ///
    /// # Panics
    /// When `id` is not a node of this tree.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// Every node, in uid order.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (NodeId(i as u32), n))
    }

    /// Whether an access was counted on node `id`, or it was created, since the last
    /// DOP (Table II's `changed`).
    pub fn changed(&self, id: NodeId) -> bool {
        self.changed[id.index()]
    }

    /// Node `id`'s `reads[N]` in the current window, by origin replica.
    pub fn reads(&self, id: NodeId) -> &[u64] {
        let n = self.n();
        &self.counts[id.index() * 2 * n..][..n]
    }

    /// Node `id`'s `writes[N]` in the current window, by origin replica.
    pub fn writes(&self, id: NodeId) -> &[u64] {
        let n = self.n();
        &self.counts[id.index() * 2 * n + n..][..n]
    }

    /// Node `id`'s counters as the optimizer takes them (a copy).
    pub fn stats(&self, id: NodeId) -> AccessStats {
        AccessStats::from_counts(self.reads(id).to_vec(), self.writes(id).to_vec())
            .expect("N counters of each kind")
    }

    /// Appends a new node with zero counters and `changed` set; returns its id.
    fn push_node(&mut self, node: Node) -> NodeId {
        let id = NodeId(u32::try_from(self.nodes.len()).expect("at most 2^32 nodes"));
        assert_eq!(node.uid, u64::from(id.0), "uid is the arena index");
        let n = self.n();
        self.nodes.push(node);
        self.counts.resize(self.counts.len() + 2 * n, 0);
        self.changed.push(true);
        id
    }

    /// The DOP's optimizer (for its counters and cache).
    pub fn optimizer(&self) -> &Optimizer {
        &self.optimizer
    }

    /// Replaces the DOP's optimizer, returning the old one. Its topology must be the
    /// tree's. Like [`GeoBTree::initialize_reps`], this is not a replicated operation:
    /// every replica must do the same at the same point (experiments use it to time
    /// the strategies on copies of one tree).
    pub fn replace_optimizer(&mut self, optimizer: Optimizer) -> Result<Optimizer, GbTreeError> {
        if optimizer.topology() != self.topology() {
            return Err(GbTreeError::TopologyMismatch);
        }
        Ok(std::mem::replace(&mut self.optimizer, optimizer))
    }

    /// The leaf that holds, or would hold, `key` (Algorithm 1's `find`).
    pub fn find_leaf(&self, key: u64) -> NodeId {
        let mut id = self.root;
        loop {
            let n = self.node(id);
            if n.is_leaf {
                return id;
            }
            // Keys at or above a separator go right of it.
            let i = n.keys.partition_point(|&s| s <= key);
            id = n.children[i];
        }
    }

    /// The value of `key`, without counting an access (not a replicated operation:
    /// for tests and tools).
    pub fn get(&self, key: u64) -> Option<&[u8]> {
        let leaf = self.node(self.find_leaf(key));
        let i = leaf.keys.binary_search(&key).ok()?;
        Some(&leaf.values[i])
    }

    /// Every entry in key order, following the leaf links.
    pub fn entries(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let mut leaf = Some(self.find_leaf(0));
        let mut i = 0usize;
        std::iter::from_fn(move || loop {
            let n = self.node(leaf?);
            if i < n.keys.len() {
                i += 1;
                return Some((n.keys[i - 1], &n.values[i - 1][..]));
            }
            leaf = n.next_leaf;
            i = 0;
        })
    }

    /// Assigns every node the configuration `f` returns for it. An initialization step
    /// for a tree that serves no request yet (every replica must run the same one);
    /// DOPs change reps afterwards.
    ///
    /// # Panics
    /// When `f` returns a configuration naming a replica outside the topology.
    pub fn initialize_reps(&mut self, mut f: impl FnMut(NodeId, &Node) -> Config) {
        let n = self.n();
        for i in 0..self.nodes.len() {
            let c = f(NodeId(i as u32), &self.nodes[i]);
            assert!(c.span() <= n, "configuration {c} outside {n} replicas");
            self.nodes[i].reps = c;
        }
    }

    /// Redraws every node's configuration at random from `seed` and its uid (DBT_b of
    /// §VI-A): uniform over the 2^N − 1 configurations, the same at every replica.
    pub fn randomize_reps(&mut self, seed: u64) {
        let n = self.n();
        self.initialize_reps(|_, node| random_config(seed, node.uid, n));
    }

    /// The seed the tree was built with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    fn check_from(&self, from: Replica) {
        assert!(
            from < self.n(),
            "replica {from} outside the {}-replica topology",
            self.n()
        );
    }

    fn check_value(&self, op: &Op) -> Result<(), GbTreeError> {
        match op.value() {
            Some(v) if v.len() > self.value_bytes_max => Err(GbTreeError::ValueTooLarge {
                len: v.len(),
                max: self.value_bytes_max,
            }),
            _ => Ok(()),
        }
    }
}

/// SplitMix64: a tiny, well-mixed, seedable generator (Steele, Lea and Flood).
pub(crate) fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A configuration of `n` replicas drawn from `seed` and `uid`, uniform over the
/// 2^n − 1 non-empty ones (the modulo bias is below 2^-47).
pub(crate) fn random_config(seed: u64, uid: u64, n: usize) -> Config {
    let x = splitmix64(seed ^ splitmix64(uid));
    let configs = (1u64 << n) - 1;
    let mask = 1 + x % configs;
    Config::from_mask(mask as u32).expect("a non-empty mask within n replicas")
}
