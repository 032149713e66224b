//! Snapshots round-trip, and damaged snapshots are typed errors, never panics.

use partita_btree::{BPlusTree, SnapshotError};
use proptest::prelude::*;
use std::collections::BTreeSet;

fn tree_of(node_keys: usize, keys: &BTreeSet<u64>) -> BPlusTree {
    let mut t = BPlusTree::with_node_keys(node_keys);
    for &k in keys {
        t.insert(k, k.wrapping_mul(0x9e37_79b9));
    }
    t
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn round_trip(
        node_keys in prop_oneof![Just(4usize), Just(5), Just(30), Just(64)],
        keys in prop::collection::btree_set(any::<u64>(), 0..500),
        deletions in prop::collection::vec(any::<prop::sample::Index>(), 0..100),
    ) {
        let mut t = tree_of(node_keys, &keys);
        let list: Vec<u64> = keys.iter().copied().collect();
        if !list.is_empty() {
            for d in deletions {
                t.delete(list[d.index(list.len())]);
            }
        }
        let bytes = t.snapshot();
        let r = BPlusTree::restore(&bytes).unwrap();
        r.check_invariants().unwrap();
        prop_assert_eq!(r.node_keys(), node_keys);
        prop_assert_eq!(r.len(), t.len());
        prop_assert_eq!(r.digest(), t.digest());
        prop_assert!(r.iter().eq(t.iter()));
        prop_assert!(r == t);
        // The very same tree, shape included: the same bytes again, and the same
        // nodes (leaves and internal nodes) as the original.
        prop_assert_eq!(r.snapshot(), bytes);
        prop_assert_eq!(r.leaf_count(), t.leaf_count());
        prop_assert_eq!(r.internal_count(), t.internal_count());
        prop_assert_eq!(r.height(), t.height());
    }

    #[test]
    fn flipped_byte_is_an_error(
        keys in prop::collection::btree_set(any::<u64>(), 0..200),
        at in any::<prop::sample::Index>(),
        mask in 1u8..=255,
    ) {
        let mut bytes = tree_of(5, &keys).snapshot();
        let i = at.index(bytes.len());
        bytes[i] ^= mask;
        prop_assert!(BPlusTree::restore(&bytes).is_err());
    }

    #[test]
    fn truncated_or_extended_is_an_error(
        keys in prop::collection::btree_set(any::<u64>(), 0..200),
        cut in any::<prop::sample::Index>(),
        extra in prop::collection::vec(any::<u8>(), 1..20),
    ) {
        let bytes = tree_of(5, &keys).snapshot();
        let n = cut.index(bytes.len());
        prop_assert!(BPlusTree::restore(&bytes[..n]).is_err());
        let mut longer = bytes.clone();
        longer.extend_from_slice(&extra);
        prop_assert!(BPlusTree::restore(&longer).is_err());
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = BPlusTree::restore(&bytes);
    }
}

/// Rewrite the checksum after tampering, to reach the checks behind it.
fn reseal(bytes: &mut [u8]) {
    let body = bytes.len() - 4;
    let crc = crc32c_of(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
}

fn crc32c_of(data: &[u8]) -> u32 {
    // Bitwise CRC32C (Castagnoli, reflected), independent of the crate under test.
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn each_check_reports_its_error() {
    let t = BPlusTree::bulk_load_with_node_keys(6, (1..=50u64).map(|k| (k, k))).unwrap();
    let good = t.snapshot();
    let entries_end = 32 + 50 * 16;
    // The shape: leaf count and lengths, height, one level of separators.
    let leaves = t.leaf_count();
    // Per level a node count, per internal node a key count; every node but the root
    // is a child, so the separators number leaves - 1.
    let (height, inner) = (t.height(), t.internal_count());
    assert!(height >= 1);
    assert_eq!(
        good.len(),
        entries_end + 8 + 4 * leaves + 4 + 8 * height + 4 * inner + 8 * (leaves - 1) + 4
    );
    assert!(BPlusTree::restore(&good).is_ok());
    // Version 1 (entries only) is still read, bulk-loaded.
    let mut v1 = good[..entries_end].to_vec();
    v1[8..12].copy_from_slice(&1u32.to_le_bytes());
    v1.extend_from_slice(&[0; 4]);
    reseal(&mut v1);
    let r = BPlusTree::restore(&v1).unwrap();
    assert!(r.iter().eq(t.iter()));
    // A separator moved out of order, resealed: the shape check refuses it.
    let mut b = good.clone();
    // (the root's last separator, the last bytes before the checksum)
    let last = good.len() - 4 - 8;
    b[last..last + 8].copy_from_slice(&0u64.to_le_bytes());
    reseal(&mut b);
    assert!(
        matches!(BPlusTree::restore(&b), Err(SnapshotError::Shape(_))),
        "{:?}",
        BPlusTree::restore(&b)
    );
    // A leaf length that does not add up, resealed.
    let mut b = good.clone();
    b[entries_end + 8..entries_end + 12].copy_from_slice(&7u32.to_le_bytes());
    reseal(&mut b);
    assert!(matches!(
        BPlusTree::restore(&b),
        Err(SnapshotError::Shape(_))
    ));

    assert_eq!(
        BPlusTree::restore(&good[..10]),
        Err(SnapshotError::Truncated(10))
    );
    let mut b = good.clone();
    b[0] ^= 1;
    assert_eq!(BPlusTree::restore(&b), Err(SnapshotError::Magic));
    let mut b = good.clone();
    b[8] = 9;
    assert_eq!(BPlusTree::restore(&b), Err(SnapshotError::Version(9)));
    let mut b = good.clone();
    b[12..16].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(BPlusTree::restore(&b), Err(SnapshotError::NodeKeys(2)));
    let mut b = good.clone();
    b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        BPlusTree::restore(&b),
        Err(SnapshotError::Length { .. })
    ));
    let mut b = good.clone();
    b[40] ^= 0x10;
    assert!(matches!(
        BPlusTree::restore(&b),
        Err(SnapshotError::Checksum { .. })
    ));
    // Swap two entries and fix the checksum: the order check catches it.
    let mut b = good.clone();
    let (e0, e1) = (32, 48);
    let tmp: Vec<u8> = b[e0..e0 + 16].to_vec();
    b.copy_within(e1..e1 + 16, e0);
    b[e1..e1 + 16].copy_from_slice(&tmp);
    reseal(&mut b);
    assert_eq!(BPlusTree::restore(&b), Err(SnapshotError::Unsorted(1)));
    // Change a value and fix the checksum: the digest check catches it.
    let mut b = good.clone();
    b[32 + 8] ^= 1;
    reseal(&mut b);
    assert!(matches!(
        BPlusTree::restore(&b),
        Err(SnapshotError::Digest { .. })
    ));
}

#[test]
fn empty_tree_round_trips() {
    let t = BPlusTree::new();
    let r = BPlusTree::restore(&t.snapshot()).unwrap();
    assert!(r.is_empty());
    assert_eq!(r.digest(), t.digest());
    r.check_invariants().unwrap();
}
