//! Content digest: an order-independent wrapping sum of one hash per key, finished
//! with the key count and the store's revision.
//!
//! Replicas compare digests to check that they hold the same state, so the digest is a
//! function of the contents alone (keys, values, each key's create and mod revisions
//! and version, and the store's revision), identical on every platform and build: fixed
//! mixers, no `RandomState`. A wrapping sum lets every put, delete and undo update it in
//! O(1) from the hash each entry keeps, so `digest()` costs nothing however large the
//! store (the replica takes one before every speculated instance).

/// The SplitMix64 finalizer: a fixed, portable bijective mixer.
#[inline(always)]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const SEED_KEY: u64 = 0x243f_6a88_85a3_08d3;
const SEED_VALUE: u64 = 0x1319_8a2e_0370_7344;
const LANE_MUL: u64 = 0xff51_afd7_ed55_8ccd;

#[inline(always)]
fn absorb(h: u64, w: u64) -> u64 {
    let h = (h ^ w).wrapping_mul(LANE_MUL);
    h ^ (h >> 29)
}

/// A 64-bit hash of a byte string. Four independent lanes over 32-byte blocks keep the
/// multiplier busy (a 1 MiB value hashes in tens of microseconds, not hundreds); the
/// length is mixed in first, so zero padding of the tail cannot make two strings equal.
pub(crate) fn hash_bytes(seed: u64, bytes: &[u8]) -> u64 {
    let len = bytes.len() as u64;
    let mut lanes = [
        seed ^ len.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        seed.rotate_left(16) ^ 1,
        seed.rotate_left(32) ^ 2,
        seed.rotate_left(48) ^ 3,
    ];
    let mut blocks = bytes.chunks_exact(32);
    for block in &mut blocks {
        for (lane, word) in lanes.iter_mut().zip(block.chunks_exact(8)) {
            *lane = absorb(*lane, u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
    }
    for (i, word) in blocks.remainder().chunks(8).enumerate() {
        // Little-endian, zero-padded; byte by byte, since a copy of a length unknown
        // at compile time is a call to memmove (most keys end in such a tail).
        let w = word
            .iter()
            .enumerate()
            .fold(0u64, |w, (j, &b)| w | u64::from(b) << (8 * j));
        lanes[i] = absorb(lanes[i], w);
    }
    let h = lanes
        .iter()
        .fold(0u64, |acc, &l| mix64(acc.rotate_left(23) ^ l));
    mix64(h ^ len)
}

/// The hash of one entry. Each field is mixed before meeting the next, so that moving
/// a value to another key, or a revision from one field to another, changes it.
pub(crate) fn entry_hash(
    key: &[u8],
    value: &[u8],
    create_revision: u64,
    mod_revision: u64,
    version: u64,
    lease: i64,
) -> u64 {
    let mut meta = mix64(create_revision ^ mix64(mod_revision ^ mix64(version ^ 0x5851_f42d)));
    if lease != 0 {
        meta = mix64(meta ^ mix64(lease as u64 ^ 0x1ea5_e000_0000_0001));
    }
    mix64(hash_bytes(SEED_KEY, key) ^ mix64(hash_bytes(SEED_VALUE, value) ^ meta))
}

/// The digest from the running sum of entry hashes, the key count and the revision.
pub(crate) fn finish(sum: u64, len: u64, revision: u64) -> u64 {
    mix64(sum ^ mix64(len ^ mix64(revision ^ 0x5bd1_e995_7f4a_7c15)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_tell_lengths_and_lanes_apart() {
        let a = hash_bytes(1, b"");
        let b = hash_bytes(1, b"\0");
        let c = hash_bytes(1, b"\0\0");
        assert!(a != b && b != c && a != c);
        let long: Vec<u8> = (0..100u8).collect();
        let mut other = long.clone();
        other[70] ^= 1;
        assert_ne!(hash_bytes(1, &long), hash_bytes(1, &other));
        assert_ne!(hash_bytes(1, &long), hash_bytes(2, &long));
        assert_ne!(
            entry_hash(b"k", b"v", 2, 3, 1, 0),
            entry_hash(b"k", b"v", 3, 2, 1, 0)
        );
        assert_ne!(
            entry_hash(b"k", b"v", 2, 2, 1, 0),
            entry_hash(b"v", b"k", 2, 2, 1, 0)
        );
    }
}
