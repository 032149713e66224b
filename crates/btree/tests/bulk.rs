//! Bulk loading and the content digest.

use partita_btree::{BPlusTree, BulkLoadError};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[test]
fn every_small_size_and_capacity_is_valid() {
    for node_keys in [4, 5, 6, 7, 8, 13, 30, 31, 64] {
        for n in 0..400u64 {
            let t =
                BPlusTree::bulk_load_with_node_keys(node_keys, (0..n).map(|k| (k * 3, k))).unwrap();
            if let Err(e) = t.check_invariants() {
                panic!("node_keys {node_keys}, {n} entries: {e}");
            }
            assert_eq!(t.len() as u64, n);
            assert!(t.iter().map(|(k, _)| k).eq((0..n).map(|k| k * 3)));
        }
    }
}

#[test]
fn unsorted_or_duplicate_input_is_an_error() {
    assert_eq!(
        BPlusTree::bulk_load([(1, 0), (3, 0), (2, 0)]).unwrap_err(),
        BulkLoadError {
            index: 2,
            prev: 3,
            key: 2
        }
    );
    assert_eq!(
        BPlusTree::bulk_load([(1, 0), (1, 0)]).unwrap_err(),
        BulkLoadError {
            index: 1,
            prev: 1,
            key: 1
        }
    );
    assert!(BPlusTree::bulk_load([(0, 0), (u64::MAX, 0)]).is_ok());
}

#[test]
#[should_panic(expected = "node_keys")]
fn tiny_capacity_is_refused() {
    BPlusTree::with_node_keys(3);
}

#[test]
fn large_load_is_compact_and_usable() {
    let n = 300_000u64;
    let mut t = BPlusTree::bulk_load((0..n).map(|k| (k * 2, k))).unwrap();
    t.check_invariants().unwrap();
    assert_eq!(t.node_keys(), 30);
    // ~90% full leaves.
    let fill = n as f64 / (t.leaf_count() as f64 * 30.0);
    assert!(fill > 0.85 && fill <= 1.0, "fill {fill}");
    assert_eq!(t.read(123_456), Some(61_728));
    assert_eq!(t.read(123_457), None);
    assert!(t.insert(123_457, 1));
    assert_eq!(t.delete(0), Some(0));
    assert_eq!(t.query(10, 20).len(), 6);
    t.check_invariants().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Equal contents give equal digests whatever the history and shape.
    #[test]
    fn digest_depends_on_contents_only(
        entries in prop::collection::btree_map(any::<u64>(), any::<u64>(), 0..300),
        extra in prop::collection::vec(any::<u64>(), 0..100),
        node_keys in prop_oneof![Just(4usize), Just(5), Just(30)],
    ) {
        let bulk = BPlusTree::bulk_load_with_node_keys(node_keys, entries.iter().map(|(&k, &v)| (k, v))).unwrap();
        // Insert in reverse order with detours through extra keys and other values.
        let mut t = BPlusTree::with_node_keys(30);
        for &k in &extra {
            t.insert(k, 1);
        }
        for (&k, &v) in entries.iter().rev() {
            if !t.insert(k, v.wrapping_add(1)) {
                t.update(k, v.wrapping_add(1));
            }
            t.update(k, v);
        }
        for &k in &extra {
            if !entries.contains_key(&k) {
                t.delete(k);
            }
        }
        prop_assert_eq!(t.digest(), bulk.digest());
        prop_assert!(t == bulk);
        // Any change of contents changes the digest.
        if let Some((&k, &v)) = entries.iter().next() {
            let mut u = bulk.clone();
            u.update(k, v ^ 1);
            prop_assert_ne!(u.digest(), bulk.digest());
            let mut d = bulk.clone();
            d.delete(k);
            prop_assert_ne!(d.digest(), bulk.digest());
        }
    }

    #[test]
    fn bulk_load_matches_inserts(entries in prop::collection::btree_map(any::<u64>(), any::<u64>(), 0..500)) {
        let t = BPlusTree::bulk_load_with_node_keys(5, entries.iter().map(|(&k, &v)| (k, v))).unwrap();
        t.check_invariants().unwrap();
        let m: BTreeMap<u64, u64> = t.iter().collect();
        prop_assert_eq!(m, entries);
    }
}

#[test]
fn digest_is_fixed_across_builds_and_platforms() {
    // Pinned value: the digest is part of the replicas' wire contract.
    assert_eq!(
        BPlusTree::new().digest(),
        BPlusTree::bulk_load([]).unwrap().digest()
    );
    let t = BPlusTree::bulk_load((1..=3u64).map(|k| (k, k * 10))).unwrap();
    let d = t.digest();
    assert_eq!(d, PINNED, "digest {d:#018x}");
}

const PINNED: u64 = 0xaa8f_09ed_ab92_94be;
