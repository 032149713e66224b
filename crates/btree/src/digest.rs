//! Content digest: an order-independent sum of mixed `(key, value)` hashes.
//!
//! Replicas compare digests to check they hold the same state, so the digest must
//! depend on the contents only (never on node shapes, which differ between a
//! bulk-loaded and an incrementally built tree) and must be identical on every
//! platform and build: a fixed 64-bit mixer, no `RandomState`. A wrapping sum lets
//! every mutation update it in O(1), so `digest()` is free even at millions of entries.

/// The SplitMix64 finalizer: a fixed, portable bijective mixer.
#[inline(always)]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Hash of one entry. The value is mixed before meeting the key so that swapping key
/// and value, or moving a value to another key, changes the hash.
#[inline(always)]
pub(crate) fn entry_hash(key: u64, value: u64) -> u64 {
    mix64(key ^ mix64(value.wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// Final digest from the running sum and the entry count.
pub(crate) fn finish(sum: u64, len: u64) -> u64 {
    mix64(sum ^ mix64(len ^ 0x5bd1_e995_7f4a_7c15))
}
