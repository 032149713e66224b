//! The whole tree as bytes, for checkpoints and state transfer: serde for [`GeoBTree`].
//!
//! **Format.** The topology, the options (order, seed, value bound, optimizer
//! strategy), the entry count, every node in tree order ([`GeoBTree::tree_order`]:
//! breadth-first from the root, children left to right) with Table II's fields but its
//! uid, parent and leaf links (leaf or not, keys, values or the number of children,
//! reps, `changed`, the counters), and the optimizer's LRU cache with its recency
//! order (it decides future DOPs, so it is replicated state). Uids are left out on
//! purpose: they follow the order in which splits happened, which differs between
//! replicas that ran inserts sharing no serializer in different orders, and a snapshot
//! must be a function of the state alone (equal states, equal bytes). A restored tree
//! numbers its nodes in tree order; nothing replicated depends on uids.
//!
//! **Restore** rebuilds parents, depths and leaf links from the order and the children
//! counts, and checks everything [`GeoBTree::invariants`] asserts before it runs them,
//! so damaged bytes are an error and never a panic: node counts that do not add up,
//! keys unsorted or outside their parent's separators, an overfull or (below the root)
//! empty node, values over the bound, leaves at different depths, counters without
//! `changed`, an inner node whose counters are not its children's sums, the wrong
//! entry count, a cache of another capacity than the options say.

use super::{GbTreeOptions, GeoBTree, Node, NodeId};
use crate::cache::LruCache;
use crate::optimizer::Optimizer;
use crate::set::Config;
use crate::topology::Topology;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The serialized form, borrowed from a tree (field for field the same as [`TreeRepr`]).
#[derive(Serialize)]
struct TreeRef<'a> {
    topology: &'a Topology,
    options: GbTreeOptions,
    len: u64,
    nodes: Vec<NodeRef<'a>>,
    cache: Option<&'a LruCache>,
}

#[derive(Serialize)]
struct NodeRef<'a> {
    leaf: bool,
    keys: &'a [u64],
    values: &'a [Box<[u8]>],
    children: u32,
    reps: Config,
    changed: bool,
    counts: &'a [u64],
}

/// The serialized form, owned, as it is decoded.
#[derive(Deserialize)]
struct TreeRepr {
    topology: Topology,
    options: GbTreeOptions,
    len: u64,
    nodes: Vec<NodeRepr>,
    cache: Option<LruCache>,
}

#[derive(Deserialize)]
struct NodeRepr {
    leaf: bool,
    keys: Vec<u64>,
    values: Vec<Box<[u8]>>,
    children: u32,
    reps: Config,
    changed: bool,
    counts: Vec<u64>,
}

impl GeoBTree {
    /// The options the tree was built with (its optimizer's strategy included).
    pub fn options(&self) -> GbTreeOptions {
        GbTreeOptions {
            order: self.order,
            seed: self.seed,
            value_bytes_max: self.value_bytes_max,
            optimizer: self.optimizer.options(),
        }
    }
}

impl Serialize for GeoBTree {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let n = self.n();
        let nodes = self
            .tree_order()
            .into_iter()
            .map(|id| {
                let node = self.node(id);
                NodeRef {
                    leaf: node.is_leaf,
                    keys: &node.keys,
                    values: &node.values,
                    children: u32::try_from(node.children.len()).expect("at most 2^32 nodes"),
                    reps: node.reps,
                    changed: self.changed(id),
                    counts: &self.counts[id.index() * 2 * n..][..2 * n],
                }
            })
            .collect();
        TreeRef {
            topology: self.topology(),
            options: self.options(),
            len: self.len,
            nodes,
            cache: self.optimizer.cache(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for GeoBTree {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<GeoBTree, D::Error> {
        let repr = TreeRepr::deserialize(d)?;
        GeoBTree::from_repr(repr).map_err(serde::de::Error::custom)
    }
}

/// Where a node sits, known once its parent has been read: its parent, depth and the
/// separators that bound its keys.
#[derive(Clone, Copy)]
struct Place {
    parent: Option<NodeId>,
    depth: u32,
    lo: Option<u64>,
    hi: Option<u64>,
}

impl GeoBTree {
    /// A tree from its serialized form, or why the form describes no valid tree.
    fn from_repr(r: TreeRepr) -> Result<GeoBTree, String> {
        let TreeRepr {
            topology,
            options,
            len,
            nodes: reprs,
            cache,
        } = r;
        options.validate().map_err(|e| e.to_string())?;
        let optimizer = match cache {
            Some(c) => Optimizer::with_cache(topology, options.optimizer, c),
            None if options.optimizer.cache_entries_max.is_some() => {
                return Err("the optimizer has a cache but the snapshot holds none".into())
            }
            None => Optimizer::new(topology, options.optimizer),
        }
        .map_err(|e| e.to_string())?;
        let n = optimizer.topology().n();
        if let Some(cache) = optimizer.cache() {
            if cache.entries().any(|(key, _)| key.n() != n) {
                return Err("a cache key for another number of replicas".into());
            }
        }
        let count = reprs.len();
        if count == 0 {
            return Err("a tree has at least its root".into());
        }
        if u32::try_from(count).is_err() {
            return Err(format!("{count} nodes: at most 2^32"));
        }
        let mut places: Vec<Option<Place>> = vec![None; count];
        places[0] = Some(Place {
            parent: None,
            depth: 0,
            lo: None,
            hi: None,
        });
        let mut nodes: Vec<Node> = Vec::with_capacity(count);
        let mut counts: Vec<u64> = Vec::with_capacity(count * 2 * n);
        let mut changed: Vec<bool> = Vec::with_capacity(count);
        let mut leaves: Vec<NodeId> = Vec::new();
        let mut entries = 0u64;
        // Children of the nodes read so far occupy the positions up to here.
        let mut claimed = 1usize;
        for (i, r) in reprs.into_iter().enumerate() {
            let id = NodeId(i as u32);
            let place = places[i].ok_or_else(|| format!("node {i} is no node's child"))?;
            let what = |why: &str| format!("node {i} (tree order): {why}");
            if r.keys.len() > options.order {
                return Err(what("more keys than the order"));
            }
            if !r.keys.windows(2).all(|w| w[0] < w[1]) {
                return Err(what("keys not strictly sorted"));
            }
            let within =
                |k: &u64| place.lo.is_none_or(|l| *k >= l) && place.hi.is_none_or(|h| *k < h);
            if !r.keys.iter().all(within) {
                return Err(what("keys outside the parent's separators"));
            }
            if i > 0 && r.keys.is_empty() {
                return Err(what("empty below the root"));
            }
            if r.reps.span() > n {
                return Err(what("serializers outside the topology"));
            }
            if r.counts.len() != 2 * n {
                return Err(what("counters for another number of replicas"));
            }
            if !r.changed && r.counts.iter().any(|&c| c > 0) {
                return Err(what("counted accesses without changed"));
            }
            let mut node = Node::new(i as u64, place.depth, place.parent, r.leaf, r.reps);
            if r.leaf {
                if r.children != 0 {
                    return Err(what("a leaf with children"));
                }
                if r.values.len() != r.keys.len() {
                    return Err(what("a value per key"));
                }
                if r.values.iter().any(|v| v.len() > options.value_bytes_max) {
                    return Err(what("a value over value_bytes_max"));
                }
                entries += r.keys.len() as u64;
                node.values = r.values;
                leaves.push(id);
            } else {
                if !r.values.is_empty() {
                    return Err(what("an inner node with values"));
                }
                let c = r.children as usize;
                if c != r.keys.len() + 1 {
                    return Err(what("children other than keys + 1"));
                }
                if claimed + c > count {
                    return Err(what("children beyond the last node"));
                }
                for j in 0..c {
                    places[claimed + j] = Some(Place {
                        parent: Some(id),
                        depth: place.depth + 1,
                        lo: if j == 0 {
                            place.lo
                        } else {
                            Some(r.keys[j - 1])
                        },
                        hi: r.keys.get(j).copied().or(place.hi),
                    });
                }
                node.children = (claimed..claimed + c).map(|k| NodeId(k as u32)).collect();
                claimed += c;
            }
            node.keys = r.keys;
            nodes.push(node);
            counts.extend_from_slice(&r.counts);
            changed.push(r.changed);
        }
        if claimed != count {
            return Err(format!("{} nodes are no node's child", count - claimed));
        }
        if entries != len {
            return Err(format!("{entries} entries in the leaves, {len} counted"));
        }
        // Breadth-first, the leaves come in key order once they are all on one level.
        let depth = nodes[leaves[0].index()].depth;
        if leaves.iter().any(|l| nodes[l.index()].depth != depth) {
            return Err("leaves at different depths".into());
        }
        for w in leaves.windows(2) {
            nodes[w[0].index()].next_leaf = Some(w[1]);
            nodes[w[1].index()].prev_leaf = Some(w[0]);
        }
        for (i, node) in nodes.iter().enumerate() {
            for slot in 0..2 * n {
                let sum = node.children.iter().fold(0u64, |s, c| {
                    s.saturating_add(counts[c.index() * 2 * n + slot])
                });
                if !node.is_leaf && counts[i * 2 * n + slot] != sum {
                    return Err(format!(
                        "node {i} (tree order): counters are not its children's sums"
                    ));
                }
            }
        }
        let t = GeoBTree {
            nodes,
            root: NodeId(0),
            order: options.order,
            value_bytes_max: options.value_bytes_max,
            seed: options.seed,
            len,
            counts,
            changed,
            optimizer,
        };
        // Everything asserted here was checked above: a failure is a bug in this file.
        t.invariants();
        Ok(t)
    }
}
