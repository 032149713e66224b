//! The LRU cache of §III-D: best configurations keyed by an object's normalised load
//! (Equation 3) and update ratio (Equation 4) per replica.

use crate::error::GeoError;
use crate::set::{Config, Replica};
use crate::stats::AccessStats;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// The cache key of an object's workload: for every replica g, in hundredths and
/// truncated ("we cap the results at two decimal digits"),
///
/// - the normalised load L_{X,g} = (w_{X,g} + r_{X,g}) / Σ_h (w_{X,h} + r_{X,h})
///   (Equation 3), and
/// - the update ratio U_{X,g} = w_{X,g} / (r_{X,g} + w_{X,g}) (Equation 4), taken as 0
///   when g issued no operation (the paper leaves 0/0 undefined).
///
/// Both are integers in 0..=100, computed exactly (`floor(100·a/b)` on integers), so
/// every replica derives the same key. Equation 1 divided by the total operation count
/// is a function of the exact L and U alone, so statistics that are multiples of each
/// other have the same key and the same best configuration; statistics that merely
/// truncate to the same key may not (the accuracy the paper trades for hits).
///
/// Its [`Display`](fmt::Display) is the paper's string: per replica in index order, L
/// then U, each as three digits without the decimal point (Fig. 2's replica A:
/// L = 20/176 → "011", U = 10/20 → "050", so the key starts "011050").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CacheKey {
    n: u8,
    /// 16 bits per replica, four replicas per word: L in the high byte, U in the low.
    words: [u64; 4],
}

impl CacheKey {
    /// The key of `stats`, or `None` when it counts no operation (Equation 3 divides
    /// by zero).
    pub fn of(stats: &AccessStats) -> Option<CacheKey> {
        CacheKey::of_counts(stats.read_counts(), stats.write_counts())
    }

    /// [`CacheKey::of`] the statistics with these reads and writes per replica (as
    /// [`AccessStats::from_counts`] takes them), without building them.
    ///
    /// # Panics
    /// When the two have different lengths, or none or more than [`REPLICAS_MAX`](crate::REPLICAS_MAX).
    pub fn of_counts(reads: &[u64], writes: &[u64]) -> Option<CacheKey> {
        assert_eq!(reads.len(), writes.len(), "reads and writes per replica");
        let n = reads.len();
        let ops = |g: usize| u128::from(reads[g]) + u128::from(writes[g]);
        let total: u128 = (0..n).map(ops).sum();
        if total == 0 {
            return None;
        }
        let mut key = CacheKey {
            n: u8::try_from(n).expect("n <= REPLICAS_MAX"),
            words: [0; 4],
        };
        for (g, &w) in writes.iter().enumerate() {
            let ops = ops(g);
            let load = hundredths(ops, total);
            let update = if ops == 0 {
                0
            } else {
                hundredths(u128::from(w), ops)
            };
            key.words[g / 4] |= (u64::from(load) << 8 | u64::from(update)) << (16 * (g % 4));
        }
        debug_assert!((0..n).all(|g| key.load_hundredths(g) <= 100));
        Some(key)
    }

    /// The number of replicas.
    pub fn n(&self) -> usize {
        usize::from(self.n)
    }

    /// L_{X,g} in hundredths, truncated.
    pub fn load_hundredths(&self, g: Replica) -> u8 {
        (self.part(g) >> 8) as u8
    }

    /// U_{X,g} in hundredths, truncated.
    pub fn update_hundredths(&self, g: Replica) -> u8 {
        self.part(g) as u8
    }

    fn part(&self, g: Replica) -> u16 {
        assert!(
            g < self.n(),
            "replica {g} outside a key of {} replicas",
            self.n
        );
        (self.words[g / 4] >> (16 * (g % 4))) as u16
    }
}

/// floor(100 · a / b) for a ≤ b, b > 0.
fn hundredths(a: u128, b: u128) -> u8 {
    debug_assert!(a <= b && b > 0);
    // a ≤ b ≤ 2^66 so 100·a cannot overflow. In 64 bits when it fits, as it does for
    // any count a replica can have seen: a 128-bit division is a library call, and a
    // DOP takes two of these per replica for every changed node it looks up.
    let r = match (u64::try_from(a * 100), u64::try_from(b)) {
        (Ok(a), Ok(b)) => u128::from(a / b),
        _ => a * 100 / b,
    };
    u8::try_from(r).expect("a ratio of at most 1")
}

impl Hash for CacheKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // n is implied by the words of a given optimizer (one topology), so only the
        // words are mixed in.
        for w in self.words {
            state.write_u64(w);
        }
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for g in 0..self.n() {
            write!(
                f,
                "{:03}{:03}",
                self.load_hundredths(g),
                self.update_hundredths(g)
            )?;
        }
        Ok(())
    }
}

/// A fast hasher for [`CacheKey`]s, with no random seed (the workspace's cores may not
/// iterate in a seed-dependent order; this map is never iterated, but the rule is
/// simpler kept than argued). Multiply-rotate, as rustc's FxHasher.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }

    fn write_u64(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

const NIL: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct Slot {
    key: CacheKey,
    config: Config,
    /// Toward the most recently used end.
    prev: u32,
    /// Toward the least recently used end.
    next: u32,
}

/// Hit, miss and eviction counts of an [`LruCache`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheCounters {
    /// Lookups that found their key.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Entries dropped to make room.
    pub evictions: u64,
}

/// A bounded map from [`CacheKey`] to the best [`Config`] computed for it, evicting the
/// least recently used entry when full (§III-D: "we limit the size of the cache using
/// an LRU strategy"). Lookups and insertions are O(1): a hash map into a slab of
/// entries linked in recency order.
///
/// The cache's contents change the optimizer's answers (a hit returns the answer for
/// an earlier, only similar workload), so replicas that must agree on a configuration
/// must hold identical caches: the cache is a deterministic function of its capacity
/// and the sequence of lookups and insertions, and it (de)serializes, recency order
/// and counters included, so it can go into a checkpoint.
#[derive(Clone, Debug)]
pub struct LruCache {
    entries_max: usize,
    map: HashMap<CacheKey, u32, BuildHasherDefault<KeyHasher>>,
    slots: Vec<Slot>,
    /// Most recently used, or NIL when empty.
    head: u32,
    /// Least recently used, or NIL when empty.
    tail: u32,
    counters: CacheCounters,
}

impl LruCache {
    /// An empty cache of at most `entries_max` entries (at least 1).
    pub fn new(entries_max: usize) -> Result<LruCache, GeoError> {
        if entries_max == 0 || entries_max >= NIL as usize {
            return Err(GeoError::CacheEntries {
                entries: entries_max,
            });
        }
        Ok(LruCache {
            entries_max,
            map: HashMap::default(),
            slots: Vec::new(),
            head: NIL,
            tail: NIL,
            counters: CacheCounters::default(),
        })
    }

    /// The capacity.
    pub fn entries_max(&self) -> usize {
        self.entries_max
    }

    /// The number of entries held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Hits, misses and evictions so far.
    pub fn counters(&self) -> CacheCounters {
        self.counters
    }

    /// The configuration cached for `key`, made the most recently used; counts a hit
    /// or a miss.
    pub fn get(&mut self, key: &CacheKey) -> Option<Config> {
        match self.map.get(key) {
            Some(&i) => {
                self.counters.hits += 1;
                self.make_most_recent(i);
                Some(self.slots[i as usize].config)
            }
            None => {
                self.counters.misses += 1;
                None
            }
        }
    }

    /// The configuration cached for `key`, without touching recency or counters.
    pub fn peek(&self, key: &CacheKey) -> Option<Config> {
        self.map.get(key).map(|&i| self.slots[i as usize].config)
    }

    /// Caches `config` for `key` as the most recently used entry, replacing an entry
    /// of the same key, else evicting the least recently used one when full.
    pub fn insert(&mut self, key: CacheKey, config: Config) {
        if let Some(&i) = self.map.get(&key) {
            self.slots[i as usize].config = config;
            self.make_most_recent(i);
            return;
        }
        let i = if self.slots.len() < self.entries_max {
            self.slots.push(Slot {
                key,
                config,
                prev: NIL,
                next: NIL,
            });
            (self.slots.len() - 1) as u32
        } else {
            let i = self.tail;
            self.unlink(i);
            let old = std::mem::replace(&mut self.slots[i as usize].key, key);
            self.map.remove(&old).expect("every slot's key is mapped");
            self.slots[i as usize].config = config;
            self.counters.evictions += 1;
            i
        };
        self.map.insert(key, i);
        self.link_front(i);
        debug_assert!(self.slots.len() <= self.entries_max);
    }

    /// The entries from the most to the least recently used.
    pub fn entries(&self) -> impl Iterator<Item = (CacheKey, Config)> + '_ {
        let mut i = self.head;
        std::iter::from_fn(move || {
            (i != NIL).then(|| {
                let s = &self.slots[i as usize];
                i = s.next;
                (s.key, s.config)
            })
        })
    }

    fn make_most_recent(&mut self, i: u32) {
        if self.head != i {
            self.unlink(i);
            self.link_front(i);
        }
    }

    fn unlink(&mut self, i: u32) {
        let Slot { prev, next, .. } = self.slots[i as usize];
        match prev {
            NIL => self.head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
    }

    fn link_front(&mut self, i: u32) {
        let old = self.head;
        {
            let s = &mut self.slots[i as usize];
            s.prev = NIL;
            s.next = old;
        }
        match old {
            NIL => self.tail = i,
            o => self.slots[o as usize].prev = i,
        }
        self.head = i;
    }

    /// The structure's invariants: at most `entries_max` entries; the recency list
    /// visits every slot once, both ways; every slot's key maps back to it.
    pub fn invariants(&self) {
        assert!(self.slots.len() <= self.entries_max);
        assert_eq!(self.map.len(), self.slots.len());
        let mut seen = 0usize;
        let (mut i, mut prev) = (self.head, NIL);
        while i != NIL {
            assert!(seen < self.slots.len(), "recency list has a cycle");
            let s = &self.slots[i as usize];
            assert_eq!(s.prev, prev);
            assert_eq!(self.map.get(&s.key), Some(&i));
            prev = i;
            i = s.next;
            seen += 1;
        }
        assert_eq!(self.tail, prev);
        assert_eq!(seen, self.slots.len());
    }
}

/// Equal contents, recency order, capacity and counters. (Slab positions are not
/// observable and do not count.)
impl PartialEq for LruCache {
    fn eq(&self, other: &LruCache) -> bool {
        self.entries_max == other.entries_max
            && self.counters == other.counters
            && self.entries().eq(other.entries())
    }
}

impl Eq for LruCache {}

/// The serialized form of an [`LruCache`]: entries from the most to the least recently
/// used.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct LruRepr {
    entries_max: usize,
    entries: Vec<(CacheKey, Config)>,
    counters: CacheCounters,
}

impl Serialize for LruCache {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        LruRepr {
            entries_max: self.entries_max,
            entries: self.entries().collect(),
            counters: self.counters,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for LruCache {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<LruCache, D::Error> {
        let r = LruRepr::deserialize(d)?;
        LruCache::try_from(r).map_err(serde::de::Error::custom)
    }
}

impl TryFrom<LruRepr> for LruCache {
    type Error = GeoError;

    fn try_from(r: LruRepr) -> Result<LruCache, GeoError> {
        let mut c = LruCache::new(r.entries_max)?;
        if r.entries.len() > r.entries_max {
            return Err(GeoError::CacheSnapshot("more entries than entries_max"));
        }
        // Inserting from the least recently used end rebuilds the same order.
        for &(key, config) in r.entries.iter().rev() {
            if c.peek(&key).is_some() {
                return Err(GeoError::CacheSnapshot("a key appears twice"));
            }
            c.insert(key, config);
        }
        c.counters = r.counters;
        c.invariants();
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> CacheKey {
        CacheKey::of(&AccessStats::from_counts(vec![i, 100 - i], vec![0, 0]).unwrap()).unwrap()
    }

    #[test]
    fn evicts_least_recently_used() {
        let mut c = LruCache::new(2).unwrap();
        let (a, b, d) = (Config::single(0), Config::single(1), Config::all(2));
        c.insert(key(1), a);
        c.insert(key(2), b);
        assert_eq!(c.get(&key(1)), Some(a)); // key(2) is now the oldest
        c.insert(key(3), d);
        c.invariants();
        assert_eq!(c.peek(&key(2)), None);
        assert_eq!(c.get(&key(2)), None);
        assert_eq!(
            c.entries().collect::<Vec<_>>(),
            vec![(key(3), d), (key(1), a)]
        );
        assert_eq!(
            c.counters(),
            CacheCounters {
                hits: 1,
                misses: 1,
                evictions: 1
            }
        );
        // Replacing a key's value moves it to the front and evicts nothing.
        c.insert(key(1), b);
        c.invariants();
        assert_eq!(
            c.entries().collect::<Vec<_>>(),
            vec![(key(1), b), (key(3), d)]
        );
        assert_eq!(c.counters().evictions, 1);
    }

    #[test]
    fn capacity_one() {
        let mut c = LruCache::new(1).unwrap();
        for i in 0..10 {
            c.insert(key(i), Config::single(0));
            c.invariants();
            assert_eq!(c.len(), 1);
        }
        assert_eq!(c.counters().evictions, 9);
        assert!(LruCache::new(0).is_err());
    }

    #[test]
    fn serde_keeps_order_and_counters() {
        let mut c = LruCache::new(3).unwrap();
        for i in 0..5 {
            c.insert(key(i), Config::single((i % 2) as usize));
        }
        c.get(&key(2));
        c.get(&key(9));
        let j = serde_json::to_string(&c).unwrap();
        let back: LruCache = serde_json::from_str(&j).unwrap();
        assert_eq!(back, c);
        back.invariants();
        let over = r#"{"entries_max":1,"entries":[[{"n":1,"words":[0,0,0,0]},1],[{"n":1,"words":[1,0,0,0]},1]],"counters":{"hits":0,"misses":0,"evictions":0}}"#;
        assert!(serde_json::from_str::<LruCache>(over).is_err());
        let twice = r#"{"entries_max":2,"entries":[[{"n":1,"words":[0,0,0,0]},1],[{"n":1,"words":[0,0,0,0]},1]],"counters":{"hits":0,"misses":0,"evictions":0}}"#;
        assert!(serde_json::from_str::<LruCache>(twice).is_err());
    }

    #[test]
    fn key_parts_and_zero_ops() {
        let s = AccessStats::from_counts(vec![3, 0, 1], vec![1, 0, 0]).unwrap();
        let k = CacheKey::of(&s).unwrap();
        assert_eq!((k.load_hundredths(0), k.update_hundredths(0)), (80, 25));
        assert_eq!((k.load_hundredths(1), k.update_hundredths(1)), (0, 0));
        assert_eq!((k.load_hundredths(2), k.update_hundredths(2)), (20, 0));
        assert_eq!(k.to_string(), "080025000000020000");
        assert_eq!(CacheKey::of(&AccessStats::new(3)), None);
        let all = AccessStats::from_counts(vec![0], vec![7]).unwrap();
        assert_eq!(CacheKey::of(&all).unwrap().to_string(), "100100");
    }

    #[test]
    fn hundredths_in_64_bits_agree_with_128() {
        let big = u128::from(u64::MAX);
        let cases = [
            (0, 1),
            (1, 3),
            (2, 3),
            (7, 7),
            (big / 100, big / 100 + 1),
            (big / 100 + 1, big),
            (big, big),
            (big, 2 * big + 2),
            (3 * big, 4 * big),
        ];
        for (a, b) in cases {
            assert_eq!(u128::from(hundredths(a, b)), a * 100 / b, "{a} / {b}");
        }
        // Saturated counters of two replicas.
        let s = AccessStats::from_counts(vec![u64::MAX, u64::MAX], vec![u64::MAX, 0]).unwrap();
        let k = CacheKey::of(&s).unwrap();
        assert_eq!((k.load_hundredths(0), k.update_hundredths(0)), (66, 50));
        assert_eq!((k.load_hundredths(1), k.update_hundredths(1)), (33, 0));
    }
}
