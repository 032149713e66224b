//! partita-btree: the in-memory B+tree service replicated by Partita.
//!
//! A B+tree from `u64` keys to `u64` values with the exact operation semantics of
//! [`Op`] (insert only if absent, delete returning the value, inclusive
//! range query, read, update of an existing key, next/previous entry, batches), plus
//! what the execution models built on it need:
//!
//! - **Logical undo** (paper 001 §IV): [`BPlusTree::execute`] returns an [`Undo`] of
//!   inverse operations; applying the undos of a sequence of commands in reverse order
//!   restores the prior contents exactly (not the prior shape, which nobody observes).
//! - **opt-PSMR safety check** (paper 002 §V-B): [`BPlusTree::safety_check`] says,
//!   without mutating, whether a command stays inside one leaf with no split, merge or
//!   borrow, and the key interval that leaf covers; [`psmr`] splits the key space among
//!   a replica's K worker threads, maps commands to groups (CC-G for P-SMR, OC-G for
//!   opt-PSMR) and gives a thread's verdict (pass only if every leaf written lies
//!   wholly inside its range).
//! - **GeoPaxos+ hooks** (paper 004 §IV, Algorithm 1): stable [`NodeId`]s, root-to-leaf
//!   paths with depths and parents ([`BPlusTree::path_to_leaf`]), a caller-owned
//!   per-node side table ([`NodeMeta`]), an optional log of structural changes, and the
//!   nodes an insert would split ([`BPlusTree::predict_insert_splits`]).
//! - **Digest and snapshots**: an O(1), shape-independent content digest and a
//!   checksummed snapshot format that keeps the tree's shape (restored node for node;
//!   the older entries-only format is bulk-loaded).
//!
//! # Design
//!
//! Speed comes from memory layout. Nodes live in two arenas (leaves and internal
//! nodes), each one `Vec` of cache-line-aligned fixed-size slots addressed by `u32`
//! indices: no allocation per node, 4-byte child links, and each node's header, keys
//! and values contiguous (header and first keys share a cache line). Keys are plain
//! sorted `u64` arrays searched by a branch-free counting scan, whose independent loads
//! overlap the node's cache misses. Leaves are doubly linked, so range queries walk the
//! leaf chain and, after a bulk load, memory in order; within a leaf a range query
//! finds its end once and then runs a comparison-free loop.
//!
//! At millions of entries every level below the top few is a cache (and TLB) miss, so
//! the tree prefetches: a descent requests all lines of the child it is about to
//! search (the child link or value it needs after the key scan then arrives with the
//! keys instead of costing a second dependent miss), and a range query runs a cursor a
//! dozen leaves ahead through the parents' child arrays, prefetching them, so that
//! leaf misses overlap.
//!
//! There are no parent pointers: every mutation descends from the root and remembers
//! its path, so splits and merges never have to rewrite the parent links of moved
//! children. Both node kinds hold up to `node_keys` keys (default 30, at least 4);
//! every node but the root holds at least `node_keys / 2`. Deletion rebalances by
//! borrowing from a sibling that can spare an entry, else merging.
//!
//! Separators follow the usual convention: child `i` of an internal node holds keys in
//! `[sep[i - 1], sep[i])`. A deletion never updates separators (a stale separator is
//! still a valid one), which keeps non-underflowing deletions leaf-local.

mod bulk;
mod check;
mod digest;
mod hooks;
mod iter;
mod node;
pub mod ops;
pub mod psmr;
pub mod service;
mod shared;
mod snapshot;
mod tree;
mod undo;

pub mod bench;

pub use bulk::BulkLoadError;
pub use hooks::{NodeInfo, NodeMeta, SafetyCheck, StructureEvent, StructureStats};
pub use iter::Range;
pub use node::NodeId;
pub use ops::{BatchOp, Op, OpResult};
pub use shared::SharedTree;
pub use snapshot::{SnapshotError, SNAPSHOT_MAGIC, SNAPSHOT_VERSION};
pub use tree::{BPlusTree, DEFAULT_NODE_KEYS, MAX_NODE_KEYS, MIN_NODE_KEYS};
pub use undo::{Undo, UndoRecord};
