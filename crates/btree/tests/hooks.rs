//! Structure hooks: the opt-PSMR safety check (paper 002 §V-B) and the GeoPaxos+
//! node identities, paths, metadata and split prediction (paper 004 §IV).

use crate::common;

use common::*;
use partita_btree::{BPlusTree, NodeId, NodeMeta, SafetyCheck, StructureEvent};
use partita_btree::{BatchOp, Op};
use proptest::prelude::*;

fn random_tree(node_keys: usize, inserts: &[u64], deletes: &[u64]) -> BPlusTree {
    let mut t = BPlusTree::with_node_keys(node_keys);
    for &k in inserts {
        t.insert(k, k + 1);
    }
    for &k in deletes {
        t.delete(k);
    }
    t
}

/// Check the safety verdict for `op` against what executing it actually does.
fn verify_safety(t: &BPlusTree, op: &Op) {
    let verdict = t.safety_check(op);
    let mut after = t.clone();
    after.record_events(true);
    after.execute(op);
    let events = after.drain_events();
    let changed: Vec<(u64, u64)> = {
        // Entries that differ between before and after (symmetric difference).
        let a: std::collections::BTreeSet<_> = t.iter().collect();
        let b: std::collections::BTreeSet<_> = after.iter().collect();
        a.symmetric_difference(&b).copied().collect()
    };
    match verdict {
        SafetyCheck::ReadOnly => {
            assert!(events.is_empty(), "{op:?}: read-only but {events:?}");
            assert!(changed.is_empty());
        }
        SafetyCheck::LeafLocal { leaf, low, high } => {
            assert!(events.is_empty(), "{op:?}: said LeafLocal, got {events:?}");
            assert_eq!(after.leaf_count(), t.leaf_count());
            assert_eq!(after.internal_count(), t.internal_count());
            assert!(leaf.is_leaf());
            for k in written_keys(op) {
                assert!(
                    low <= k && k <= high,
                    "{op:?}: key {k} outside [{low}, {high}]"
                );
                assert_eq!(t.path_to_leaf(k).last().unwrap().id, leaf);
            }
            for (k, _) in changed {
                assert!(low <= k && k <= high);
                assert_eq!(after.path_to_leaf(k).last().unwrap().id, leaf);
            }
        }
        SafetyCheck::MultiLeaf { low, high } => {
            assert!(events.is_empty(), "{op:?}: said MultiLeaf, got {events:?}");
            assert_eq!(after.leaf_count(), t.leaf_count());
            for (k, _) in changed {
                assert!(low <= k && k <= high);
            }
        }
        SafetyCheck::Structural => {
            assert!(
                !events.is_empty(),
                "{op:?}: said Structural, nothing happened"
            );
            assert!(after.structure_stats().total() > t.structure_stats().total());
        }
    }
    // The check itself changes nothing.
    assert_eq!(t.safety_check(op), verdict);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn safety_check_agrees_with_execution(
        node_keys in prop_oneof![Just(4usize), Just(5), Just(30)],
        inserts in prop::collection::vec(0u64..300, 0..300),
        deletes in prop::collection::vec(0u64..300, 0..150),
        ops in prop::collection::vec(op(300), 1..20),
    ) {
        let t = random_tree(node_keys, &inserts, &deletes);
        for op in &ops {
            verify_safety(&t, op);
        }
    }

    #[test]
    fn predicted_splits_are_the_actual_splits(
        node_keys in prop_oneof![Just(4usize), Just(5), Just(30)],
        inserts in prop::collection::vec(0u64..2000, 0..400),
        probes in prop::collection::vec(0u64..2000, 1..20),
    ) {
        let t = random_tree(node_keys, &inserts, &[]);
        for &k in &probes {
            let predicted = t.predict_insert_splits(k);
            let mut after = t.clone();
            after.record_events(true);
            after.insert(k, 0);
            let split: Vec<NodeId> = after
                .drain_events()
                .into_iter()
                .filter_map(|e| match e {
                    StructureEvent::Split { node, .. } => Some(node),
                    _ => None,
                })
                .collect();
            prop_assert_eq!(&predicted, &split);
            if t.contains(k) {
                prop_assert!(predicted.is_empty());
            }
            // A root split adds a level.
            let root_split = predicted.last() == Some(&t.root());
            prop_assert_eq!(after.height(), t.height() + root_split as usize);
        }
    }

    #[test]
    fn paths_have_depths_and_parents(
        node_keys in prop_oneof![Just(4usize), Just(30)],
        inserts in prop::collection::vec(any::<u64>(), 0..400),
        probes in prop::collection::vec(any::<u64>(), 1..20),
    ) {
        let t = random_tree(node_keys, &inserts, &[]);
        for &k in &probes {
            let path = t.path_to_leaf(k);
            prop_assert_eq!(path.len(), t.height() + 1);
            prop_assert_eq!(path[0].id, t.root());
            prop_assert_eq!(path[0].parent, None);
            for (d, info) in path.iter().enumerate() {
                prop_assert_eq!(info.depth as usize, d);
                prop_assert_eq!(info.id.is_leaf(), d == t.height());
                if d > 0 {
                    prop_assert_eq!(info.parent, Some(path[d - 1].id));
                }
            }
        }
    }
}

#[test]
fn safety_check_cases() {
    // Root leaf: inserts are local until it is full, deletes always.
    let mut t = BPlusTree::with_node_keys(4);
    for k in 1..=3 {
        t.insert(k * 10, 0);
    }
    let local = SafetyCheck::LeafLocal {
        leaf: t.root(),
        low: 0,
        high: u64::MAX,
    };
    assert_eq!(t.safety_check(&Op::Insert { key: 5, value: 0 }), local);
    assert_eq!(t.safety_check(&Op::Delete { key: 10 }), local);
    t.insert(40, 0);
    assert_eq!(
        t.safety_check(&Op::Insert { key: 5, value: 0 }),
        SafetyCheck::Structural
    );
    assert_eq!(
        t.safety_check(&Op::Insert { key: 40, value: 1 }),
        local,
        "existing key: no change"
    );
    assert_eq!(t.safety_check(&Op::Read { key: 1 }), SafetyCheck::ReadOnly);
    assert_eq!(
        t.safety_check(&Op::Query { min: 0, max: 100 }),
        SafetyCheck::ReadOnly
    );
    assert_eq!(t.safety_check(&Op::Batch(vec![])), SafetyCheck::ReadOnly);
    assert!(t.safety_check(&Op::Next { key: 1 }).is_local());

    // Two leaves [10, 20] and [30, 40, 50] under one root with separator 30.
    t.insert(50, 0);
    assert_eq!(t.height(), 1);
    let left = t.path_to_leaf(10).last().unwrap().id;
    let right = t.path_to_leaf(50).last().unwrap().id;
    assert_eq!(
        t.safety_check(&Op::Update { key: 15, value: 1 }),
        SafetyCheck::LeafLocal {
            leaf: left,
            low: 0,
            high: 29
        }
    );
    assert_eq!(
        t.safety_check(&Op::Delete { key: 30 }),
        SafetyCheck::LeafLocal {
            leaf: right,
            low: 30,
            high: u64::MAX
        }
    );
    // The left leaf is at its minimum: a delete would borrow.
    assert_eq!(
        t.safety_check(&Op::Delete { key: 10 }),
        SafetyCheck::Structural
    );
    // A batch across both leaves that changes no shape.
    let batch = Op::Batch(vec![
        BatchOp::Insert { key: 11, value: 0 },
        BatchOp::Delete { key: 40 },
    ]);
    assert_eq!(
        t.safety_check(&batch),
        SafetyCheck::MultiLeaf {
            low: 0,
            high: u64::MAX
        }
    );
    // Net-zero batch that overflows the leaf midway is structural.
    let batch = Op::Batch(vec![
        BatchOp::Insert { key: 31, value: 0 },
        BatchOp::Insert { key: 32, value: 0 },
        BatchOp::Delete { key: 31 },
        BatchOp::Delete { key: 32 },
    ]);
    assert_eq!(t.safety_check(&batch), SafetyCheck::Structural);
    let batch = Op::Batch(vec![
        BatchOp::Insert { key: 31, value: 0 },
        BatchOp::Delete { key: 31 },
    ]);
    assert_eq!(
        t.safety_check(&batch),
        SafetyCheck::LeafLocal {
            leaf: right,
            low: 30,
            high: u64::MAX
        }
    );
    verify_safety(&t, &batch);
}

#[test]
fn node_meta_follows_structure() {
    // Assign every node a "site"; new nodes from splits inherit it (paper 004: a split
    // node's halves stay where the node was until the partitioner moves them).
    let mut t = BPlusTree::with_node_keys(4);
    t.record_events(true);
    let mut meta: NodeMeta<u32> = NodeMeta::new();
    meta.set(t.root(), 7);
    for k in 0..200u64 {
        t.insert(k, k);
        for e in t.drain_events() {
            meta.follow(&e);
        }
    }
    // Every leaf descends from the original root leaf by splits.
    for k in (0..200u64).step_by(13) {
        let leaf = t.path_to_leaf(k).last().unwrap().id;
        assert_eq!(*meta.get(leaf), 7, "leaf {leaf}");
    }
    // Internal nodes came from root splits (default 0) or their splits.
    let root = t.root();
    assert_eq!(*meta.get(root), 0);
    *meta.get_mut(root) = 3;
    assert_eq!(*meta.get(root), 3);
    meta.reset(root);
    assert_eq!(*meta.get(root), 0);
    for k in 0..200u64 {
        t.delete(k);
        for e in t.drain_events() {
            meta.follow(&e);
        }
    }
    assert_eq!(t.height(), 0);
    t.check_invariants().unwrap();
}

#[test]
fn events_and_stats_cover_every_kind() {
    let mut t = BPlusTree::with_node_keys(4);
    t.record_events(true);
    for k in 0..300u64 {
        t.insert(k, k);
    }
    for k in (0..300u64).rev().step_by(2) {
        t.delete(k);
    }
    for k in 0..300u64 {
        t.delete(k);
    }
    let events = t.drain_events();
    let has = |f: fn(&StructureEvent) -> bool| events.iter().any(f);
    assert!(has(
        |e| matches!(e, StructureEvent::Split { node, .. } if node.is_leaf())
    ));
    assert!(has(
        |e| matches!(e, StructureEvent::Split { node, .. } if !node.is_leaf())
    ));
    assert!(has(
        |e| matches!(e, StructureEvent::Merge { into, .. } if into.is_leaf())
    ));
    assert!(has(
        |e| matches!(e, StructureEvent::Merge { into, .. } if !into.is_leaf())
    ));
    assert!(has(
        |e| matches!(e, StructureEvent::Borrow { to, .. } if to.is_leaf())
    ));
    assert!(has(
        |e| matches!(e, StructureEvent::Borrow { to, .. } if !to.is_leaf())
    ));
    assert!(has(|e| matches!(e, StructureEvent::NewRoot { .. })));
    assert!(has(|e| matches!(e, StructureEvent::RootCollapse { .. })));
    let s = t.structure_stats();
    assert!(s.splits > 0 && s.merges > 0 && s.borrows > 0 && s.root_changes > 0);
    t.record_events(false);
    t.insert(1, 1);
    assert!(t.drain_events().is_empty());
}

#[test]
fn node_ids_encode_kind() {
    let t = BPlusTree::bulk_load_with_node_keys(4, (0..100u64).map(|k| (k, k))).unwrap();
    let path = t.path_to_leaf(50);
    let leaf = path.last().unwrap().id;
    assert!(leaf.is_leaf());
    assert!(!path[0].id.is_leaf());
    assert_ne!(leaf.raw(), path[0].id.raw());
    assert_eq!(format!("{leaf}"), format!("L{}", leaf.index()));
    assert_eq!(
        format!("{}", path[0].id),
        format!("I{}", path[0].id.index())
    );
}
