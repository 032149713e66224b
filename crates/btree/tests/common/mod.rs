//! Shared test helpers: a `BTreeMap` model of the operation semantics and proptest
//! strategies for operations.
#![allow(dead_code)]

use partita_btree::BPlusTree;
use partita_btree::{BatchOp, Op, OpResult};
use proptest::prelude::*;
use std::collections::BTreeMap;

pub type Model = BTreeMap<u64, u64>;

fn model_insert(m: &mut Model, key: u64, value: u64) -> bool {
    if let std::collections::btree_map::Entry::Vacant(e) = m.entry(key) {
        e.insert(value);
        true
    } else {
        false
    }
}

/// The reference semantics of `Op` (see `partita_btree::ops`).
pub fn model_exec(m: &mut Model, op: &Op) -> OpResult {
    match *op {
        Op::Insert { key, value } => OpResult::Inserted(model_insert(m, key, value)),
        Op::Delete { key } => OpResult::Removed(m.remove(&key)),
        Op::Read { key } => OpResult::Value(m.get(&key).copied()),
        Op::Update { key, value } => {
            OpResult::Old(m.get_mut(&key).map(|v| std::mem::replace(v, value)))
        }
        Op::Query { min, max } => OpResult::Entries(if min > max {
            Vec::new()
        } else {
            m.range(min..=max).map(|(&k, &v)| (k, v)).collect()
        }),
        Op::Next { key } => OpResult::Entry(
            key.checked_add(1)
                .and_then(|k| m.range(k..).next().map(|(&k, &v)| (k, v))),
        ),
        Op::Prev { key } => OpResult::Entry(m.range(..key).next_back().map(|(&k, &v)| (k, v))),
        Op::Batch(ref ops) => OpResult::Batch(
            ops.iter()
                .map(|b| match *b {
                    BatchOp::Insert { key, value } => {
                        OpResult::Inserted(model_insert(m, key, value))
                    }
                    BatchOp::Delete { key } => OpResult::Removed(m.remove(&key)),
                })
                .collect(),
        ),
    }
}

/// Keys from a small domain (so operations hit existing keys often) plus the edges.
pub fn key(domain: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        20 => 0..domain,
        1 => Just(0u64),
        1 => Just(u64::MAX),
        1 => Just(u64::MAX - 1),
    ]
}

pub fn batch_op(domain: u64) -> impl Strategy<Value = BatchOp> {
    prop_oneof![
        (key(domain), any::<u64>()).prop_map(|(key, value)| BatchOp::Insert { key, value }),
        key(domain).prop_map(|key| BatchOp::Delete { key }),
    ]
}

/// Any operation; inserts and deletes dominate so the tree grows and shrinks.
pub fn op(domain: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (key(domain), any::<u64>()).prop_map(|(key, value)| Op::Insert { key, value }),
        5 => key(domain).prop_map(|key| Op::Delete { key }),
        1 => key(domain).prop_map(|key| Op::Read { key }),
        1 => (key(domain), any::<u64>()).prop_map(|(key, value)| Op::Update { key, value }),
        1 => (key(domain), key(domain)).prop_map(|(min, max)| Op::Query { min, max }),
        1 => key(domain).prop_map(|key| Op::Next { key }),
        1 => key(domain).prop_map(|key| Op::Prev { key }),
        1 => prop::collection::vec(batch_op(domain), 0..8).prop_map(Op::Batch),
    ]
}

/// Only mutations (for undo and structure tests).
pub fn mutation(domain: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (key(domain), any::<u64>()).prop_map(|(key, value)| Op::Insert { key, value }),
        4 => key(domain).prop_map(|key| Op::Delete { key }),
        1 => (key(domain), any::<u64>()).prop_map(|(key, value)| Op::Update { key, value }),
        1 => prop::collection::vec(batch_op(domain), 0..8).prop_map(Op::Batch),
    ]
}

/// A tree and its model with `n` random entries from `0..domain`, built by inserts.
pub fn build(node_keys: usize, entries: &[(u64, u64)]) -> (BPlusTree, Model) {
    let mut t = BPlusTree::with_node_keys(node_keys);
    let mut m = Model::new();
    for &(k, v) in entries {
        assert_eq!(t.insert(k, v), model_insert(&mut m, k, v));
    }
    (t, m)
}

pub fn contents(t: &BPlusTree) -> Vec<(u64, u64)> {
    t.iter().collect()
}

pub fn model_contents(m: &Model) -> Vec<(u64, u64)> {
    m.iter().map(|(&k, &v)| (k, v)).collect()
}

/// Keys an operation writes (for locality checks).
pub fn written_keys(op: &Op) -> Vec<u64> {
    match *op {
        Op::Insert { key, .. } | Op::Delete { key } | Op::Update { key, .. } => vec![key],
        Op::Batch(ref ops) => ops
            .iter()
            .map(|b| match *b {
                BatchOp::Insert { key, .. } | BatchOp::Delete { key } => key,
            })
            .collect(),
        _ => Vec::new(),
    }
}
