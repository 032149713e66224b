//! Leases in ordered time (etcd's `lessor`, made replicated state).
//!
//! A lease is {id, granted TTL, expiry, keys}. Grant, keep-alive and revoke are
//! ordered commands like any other, and expiry is decided in *ordered time*: the time
//! the leader stamps on each value (`Value::time_ms`), which advances with a monotonic
//! clock, never faster than real time, by at most a capped step between two values.
//! Before the commands of each value, the replica hands the store the value's time
//! ([`crate::KvStore::advance_time`]), and the store expires every lease whose expiry
//! is at or before it, in (expiry, id) order, each in a revision of its own that
//! deletes its keys (none when it has none). Every replica executes the same values
//! with the same times, so every replica expires the same leases at the same point of
//! the order; no node revokes anything from its own clock.
//!
//! **The holder's rule.** A holder that sent a grant or keep-alive at its local time
//! `s` and was answered TTL `T` keeps its keys until at least real time `s + T`:
//! the renewal executes in a value stamped after it reached the leader (so at ordered
//! time `t >= ` the ordered time of its arrival), its expiry is `t + T`, ordered time
//! advances no faster than real time, and the answer leaves only once the value is
//! decided. A leader change moves nothing: the deadlines are in the replicated state,
//! and a new leader continues ordered time from the newest it saw, so leases are
//! neither cut nor (as in etcd, which re-arms every lease at a new leader) extended.
//!
//! **Ids** are positive 63-bit numbers. The store picks one from a counter that never
//! goes back (it is in snapshots), scrambled by a bijection of 63 bits so that ids look
//! like etcd's; a picked id is never picked again.
//!
//! The keys of a lease are an index of the entries' `lease` field, kept by the store's
//! one write primitive, so undo (speculation) and restore rebuild it for free.

use std::collections::{BTreeMap, BTreeSet};

use crate::digest::mix64;

/// A lease's replicated fields (its keys are kept beside, as an index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseMeta {
    /// The TTL granted, in seconds.
    pub(crate) ttl: i64,
    /// Ordered time (ms) at which it expires.
    pub(crate) expiry_ms: u64,
}

impl LeaseMeta {
    fn hash(&self, id: i64) -> u64 {
        mix64(id as u64 ^ mix64(self.ttl as u64 ^ mix64(self.expiry_ms ^ 0x001e_a5e5)))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Lease {
    meta: LeaseMeta,
    keys: BTreeSet<Vec<u8>>,
}

/// The lease table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leases {
    table: BTreeMap<i64, Lease>,
    by_expiry: BTreeSet<(u64, i64)>,
    /// Wrapping sum of the leases' hashes (the digest's lease term).
    sum: u64,
    /// Ids picked so far (the allocator's counter).
    pub(crate) picked: u64,
}

const ID_MASK: u64 = (1 << 63) - 1;

/// A bijection of `[0, 2^63)`: odd multipliers and right xor-shifts, each invertible
/// modulo 2^63.
fn scramble(n: u64) -> i64 {
    let mut x = n & ID_MASK;
    x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15) & ID_MASK;
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9) & ID_MASK;
    x ^= x >> 29;
    x as i64
}

impl Leases {
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn contains(&self, id: i64) -> bool {
        self.table.contains_key(&id)
    }

    pub(crate) fn meta(&self, id: i64) -> Option<LeaseMeta> {
        self.table.get(&id).map(|l| l.meta)
    }

    pub(crate) fn keys(&self, id: i64) -> impl Iterator<Item = &Vec<u8>> + '_ {
        self.table.get(&id).into_iter().flat_map(|l| l.keys.iter())
    }

    /// Every lease with its fields, by id (snapshots).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (i64, LeaseMeta)> + '_ {
        self.table.iter().map(|(&id, l)| (id, l.meta))
    }

    /// The digest's term for the leases.
    pub(crate) fn digest(&self) -> u64 {
        mix64(self.sum ^ mix64(self.table.len() as u64 ^ 0x1ea5_e5e5))
    }

    /// The lease that expires first, if it expires at or before `now_ms`.
    pub(crate) fn due(&self, now_ms: u64) -> Option<i64> {
        self.by_expiry
            .first()
            .filter(|&&(at, _)| at <= now_ms)
            .map(|&(_, id)| id)
    }

    /// A fresh id: never picked before, and not held now (an id a client chose).
    pub(crate) fn pick(&mut self) -> i64 {
        loop {
            self.picked += 1;
            let id = scramble(self.picked);
            if id > 0 && !self.table.contains_key(&id) {
                return id;
            }
        }
    }

    /// Set lease `id`'s fields, or remove it (which it must be free of keys for);
    /// returns the fields before. Every change of the table goes through here.
    pub(crate) fn set(&mut self, id: i64, meta: Option<LeaseMeta>) -> Option<LeaseMeta> {
        let old = self.table.get(&id).map(|l| l.meta);
        if let Some(o) = old {
            self.by_expiry.remove(&(o.expiry_ms, id));
            self.sum = self.sum.wrapping_sub(o.hash(id));
        }
        match meta {
            Some(m) => {
                self.table
                    .entry(id)
                    .or_insert_with(|| Lease {
                        meta: m,
                        keys: BTreeSet::new(),
                    })
                    .meta = m;
                self.by_expiry.insert((m.expiry_ms, id));
                self.sum = self.sum.wrapping_add(m.hash(id));
            }
            None => {
                if let Some(l) = self.table.remove(&id) {
                    assert!(l.keys.is_empty(), "lease {id:x} removed with keys attached");
                }
            }
        }
        old
    }

    /// Attach `key` to lease `id` (which exists).
    pub(crate) fn attach(&mut self, id: i64, key: &[u8]) {
        if let Some(l) = self.table.get_mut(&id) {
            l.keys.insert(key.to_vec());
        } else {
            debug_assert!(false, "key attached to lease {id:x}, which does not exist");
        }
    }

    /// Detach `key` from lease `id`.
    pub(crate) fn detach(&mut self, id: i64, key: &[u8]) {
        if let Some(l) = self.table.get_mut(&id) {
            l.keys.remove(key);
        }
    }
}
