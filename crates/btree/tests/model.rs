//! Random operation sequences against a `BTreeMap` model, with small node capacities so
//! that splits, borrows, merges and root changes all happen.

use crate::common;

use common::*;
use partita_btree::BPlusTree;
use partita_btree::Op;
use proptest::prelude::*;

fn run_against_model(node_keys: usize, initial: Vec<u64>, ops: &[Op]) {
    let mut sorted = initial;
    sorted.sort_unstable();
    sorted.dedup();
    let mut t = BPlusTree::bulk_load_with_node_keys(node_keys, sorted.iter().map(|&k| (k, k ^ 7)))
        .expect("sorted input");
    let mut m: Model = sorted.iter().map(|&k| (k, k ^ 7)).collect();
    t.check_invariants().unwrap();
    for (i, op) in ops.iter().enumerate() {
        let (got, _) = t.execute(op);
        let want = model_exec(&mut m, op);
        assert_eq!(got, want, "op #{i} {op:?}");
        assert_eq!(t.len(), m.len());
        if let Err(e) = t.check_invariants() {
            panic!("after op #{i} {op:?}: {e}");
        }
    }
    assert_eq!(contents(&t), model_contents(&m));
    // Iterators and ranges agree with the model too.
    let (lo, hi) = (
        m.keys().next().copied().unwrap_or(0),
        m.keys().last().copied().unwrap_or(0),
    );
    assert_eq!(t.range(lo, hi).collect::<Vec<_>>(), model_contents(&m));
    assert_eq!(t.first(), m.iter().next().map(|(&k, &v)| (k, v)));
    assert_eq!(t.last(), m.iter().next_back().map(|(&k, &v)| (k, v)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn cap4_matches_btreemap(ops in prop::collection::vec(op(120), 1..400)) {
        run_against_model(4, Vec::new(), &ops);
    }

    #[test]
    fn cap5_matches_btreemap(ops in prop::collection::vec(op(150), 1..400)) {
        run_against_model(5, Vec::new(), &ops);
    }

    #[test]
    fn cap30_matches_btreemap(ops in prop::collection::vec(op(1000), 1..600)) {
        run_against_model(30, Vec::new(), &ops);
    }

    #[test]
    fn bulk_loaded_trees_match_btreemap(
        node_keys in prop_oneof![Just(4usize), Just(5), Just(7), Just(30)],
        initial in prop::collection::vec(0u64..600, 0..400),
        ops in prop::collection::vec(op(600), 1..300),
    ) {
        run_against_model(node_keys, initial, &ops);
    }
}

/// Ascending then descending bulk deletions: every rebalancing path, down to an empty
/// tree and back.
#[test]
fn grow_and_shrink_sequentially() {
    for node_keys in [4, 5, 6, 30] {
        let mut t = BPlusTree::with_node_keys(node_keys);
        for k in 0..2000u64 {
            assert!(t.insert(k, k * 2));
        }
        t.check_invariants().unwrap();
        for k in (0..2000u64).step_by(2) {
            assert_eq!(t.delete(k), Some(k * 2));
        }
        t.check_invariants().unwrap();
        for k in (0..2000u64).rev() {
            assert!(t.insert(k, k) == (k % 2 == 0));
        }
        t.check_invariants().unwrap();
        for k in (0..2000u64).rev() {
            assert!(t.delete(k).is_some());
            if k % 97 == 0 {
                t.check_invariants().unwrap();
            }
        }
        assert!(t.is_empty());
        assert_eq!(t.height(), 0);
        assert_eq!(t.leaf_count(), 1);
        assert_eq!(t.internal_count(), 0);
        t.check_invariants().unwrap();
    }
}

#[test]
fn insert_keeps_existing_value_and_update_needs_presence() {
    let mut t = BPlusTree::new();
    assert!(t.insert(5, 50));
    assert!(!t.insert(5, 51));
    assert_eq!(t.read(5), Some(50));
    assert_eq!(t.update(5, 52), Some(50));
    assert_eq!(t.read(5), Some(52));
    assert_eq!(t.update(6, 60), None);
    assert_eq!(t.read(6), None);
    assert_eq!(t.len(), 1);
    assert_eq!(t.delete(6), None);
    assert_eq!(t.delete(5), Some(52));
    assert!(t.is_empty());
}

#[test]
fn next_and_prev_at_the_edges() {
    let mut t = BPlusTree::with_node_keys(4);
    for k in [0, u64::MAX, 1, u64::MAX - 1] {
        assert_eq!(t.get_next(k), None);
        assert_eq!(t.get_prev(k), None);
    }
    assert_eq!(t.first(), None);
    assert_eq!(t.last(), None);

    t.insert(10, 1);
    assert_eq!(t.get_next(0), Some((10, 1)));
    assert_eq!(t.get_next(9), Some((10, 1)));
    assert_eq!(t.get_next(10), None);
    assert_eq!(t.get_next(u64::MAX), None);
    assert_eq!(t.get_prev(11), Some((10, 1)));
    assert_eq!(t.get_prev(10), None);
    assert_eq!(t.get_prev(u64::MAX), Some((10, 1)));
    assert_eq!(t.get_prev(0), None);

    t.insert(0, 2);
    t.insert(u64::MAX, 3);
    assert_eq!(t.get_next(0), Some((10, 1)));
    assert_eq!(t.get_prev(0), None);
    assert_eq!(t.get_next(u64::MAX - 1), Some((u64::MAX, 3)));
    assert_eq!(t.get_next(u64::MAX), None);
    assert_eq!(t.get_prev(u64::MAX), Some((10, 1)));
    assert_eq!(t.get_prev(1), Some((0, 2)));
    assert_eq!(t.first(), Some((0, 2)));
    assert_eq!(t.last(), Some((u64::MAX, 3)));
    assert_eq!(t.query(0, u64::MAX), vec![(0, 2), (10, 1), (u64::MAX, 3)]);
    assert_eq!(t.query(u64::MAX, u64::MAX), vec![(u64::MAX, 3)]);
    assert_eq!(t.query(1, 0), vec![]);
    assert_eq!(t.range(5, 4).count(), 0);

    // Across many leaves: next/prev must cross leaf boundaries both ways.
    let mut t = BPlusTree::with_node_keys(4);
    for k in (0..500u64).map(|k| k * 3 + 1) {
        t.insert(k, k);
    }
    for probe in 0..1502u64 {
        let next = (probe + 1..1500).find(|k| k % 3 == 1);
        assert_eq!(t.get_next(probe).map(|e| e.0), next, "next of {probe}");
        let prev = (0..probe).rev().find(|k| k % 3 == 1);
        assert_eq!(t.get_prev(probe).map(|e| e.0), prev, "prev of {probe}");
    }
}

#[test]
fn query_variants_agree() {
    let t = BPlusTree::bulk_load_with_node_keys(5, (0..1000u64).map(|k| (k * 2, k))).unwrap();
    for (lo, hi) in [
        (0, 0),
        (1, 1),
        (3, 77),
        (0, u64::MAX),
        (1998, u64::MAX),
        (500, 400),
        (1999, 5000),
    ] {
        let want: Vec<(u64, u64)> = (0..1000u64)
            .map(|k| (k * 2, k))
            .filter(|&(k, _)| lo <= k && k <= hi)
            .collect();
        assert_eq!(t.query(lo, hi), want);
        assert_eq!(t.range(lo, hi).collect::<Vec<_>>(), want);
        let mut seen = Vec::new();
        t.query_with(lo, hi, |k, v| seen.push((k, v)));
        assert_eq!(seen, want);
    }
    assert_eq!((&t).into_iter().count(), 1000);
}

/// Enough leaves to span several arena chunks, with random churn, so splits and merges
/// pair nodes from different chunks.
#[test]
fn many_leaves_random_churn() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let mut t = BPlusTree::with_node_keys(4);
    let mut m = Model::new();
    for _ in 0..60_000 {
        let k = rng.gen_range(0..40_000u64);
        if rng.gen_bool(0.6) {
            let absent = !m.contains_key(&k);
            if absent {
                m.insert(k, k);
            }
            assert_eq!(t.insert(k, k), absent);
        } else {
            assert_eq!(t.delete(k), m.remove(&k));
        }
    }
    assert!(t.leaf_count() > 4096, "only {} leaves", t.leaf_count());
    t.check_invariants().unwrap();
    assert_eq!(contents(&t), model_contents(&m));
    for k in (0..40_000u64).step_by(3) {
        assert_eq!(t.delete(k), m.remove(&k));
    }
    t.check_invariants().unwrap();
    assert_eq!(contents(&t), model_contents(&m));
}
