//! [`Config`]: a non-empty set of replicas that serializes an object (paper 004 §III-A,
//! the configuration P_{X,i} of §III-B), as a bitmask over replica indices.

use crate::error::GeoError;
use crate::REPLICAS_MAX;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A replica (region) index: `0..n` for a topology of `n` replicas.
pub type Replica = usize;

/// The bits a configuration may use: one per replica below [`REPLICAS_MAX`].
const MASK_ALL: u32 = (1u32 << REPLICAS_MAX) - 1;

/// A configuration P_{X,i}: the non-empty set of replicas whose serializers order
/// operations on an object, with read-one/write-all semantics (§III-A): an operation
/// that only reads the object is ordered by any one member, an operation that writes
/// it by all members.
///
/// Bit `g` of the mask stands for replica `g`. The set is never empty (every
/// constructor checks it) and never names a replica at or above [`REPLICAS_MAX`].
/// Configurations order by their mask, which is also the enumeration order of
/// [`Config::subsets`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct Config(u32);

impl Config {
    /// The configuration with bitmask `mask`, refused when empty or naming a replica at
    /// or above [`REPLICAS_MAX`].
    pub fn from_mask(mask: u32) -> Result<Config, GeoError> {
        if mask == 0 || mask & !MASK_ALL != 0 {
            return Err(GeoError::BadMask {
                mask,
                max: REPLICAS_MAX,
            });
        }
        Ok(Config(mask))
    }

    /// The configuration of the given replicas; `None` when there are none.
    ///
    /// # Panics
    /// When a replica is at or above [`REPLICAS_MAX`] (a bug in the caller).
    pub fn from_replicas(replicas: impl IntoIterator<Item = Replica>) -> Option<Config> {
        let mut mask = 0u32;
        for r in replicas {
            assert!(r < REPLICAS_MAX, "replica {r} >= REPLICAS_MAX");
            mask |= 1 << r;
        }
        (mask != 0).then_some(Config(mask))
    }

    /// The single replica `r`.
    ///
    /// # Panics
    /// When `r` is at or above [`REPLICAS_MAX`].
    pub fn single(r: Replica) -> Config {
        assert!(r < REPLICAS_MAX, "replica {r} >= REPLICAS_MAX");
        Config(1 << r)
    }

    /// Every replica of an `n`-replica topology.
    ///
    /// # Panics
    /// When `n` is 0 or above [`REPLICAS_MAX`].
    pub fn all(n: usize) -> Config {
        assert!(
            (1..=REPLICAS_MAX).contains(&n),
            "n = {n} outside 1..=REPLICAS_MAX"
        );
        Config(MASK_ALL >> (REPLICAS_MAX - n))
    }

    /// The bitmask: bit `g` set iff replica `g` is a member.
    pub fn mask(self) -> u32 {
        self.0
    }

    /// The number of members (at least 1).
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Always false: a configuration has at least one member. Present for clippy's
    /// `len_without_is_empty`.
    pub fn is_empty(self) -> bool {
        false
    }

    /// Whether replica `r` is a member.
    pub fn contains(self, r: Replica) -> bool {
        r < REPLICAS_MAX && self.0 & (1 << r) != 0
    }

    /// Whether every member of `self` is a member of `other`.
    pub fn is_subset_of(self, other: Config) -> bool {
        self.0 & !other.0 == 0
    }

    /// The members of either.
    pub fn union(self, other: Config) -> Config {
        Config(self.0 | other.0)
    }

    /// The highest member plus one: the least `n` such that `self` fits in an
    /// `n`-replica topology.
    pub fn span(self) -> usize {
        32 - self.0.leading_zeros() as usize
    }

    /// The members in ascending order.
    pub fn iter(self) -> impl Iterator<Item = Replica> {
        let mut rest = self.0;
        std::iter::from_fn(move || {
            if rest == 0 {
                return None;
            }
            let r = rest.trailing_zeros() as Replica;
            rest &= rest - 1;
            Some(r)
        })
    }

    /// Every non-empty subset of `self` (`self` included), in ascending mask order:
    /// `2^len − 1` configurations. This is the enumeration order of the searches, so
    /// it is part of their determinism.
    pub fn subsets(self) -> impl Iterator<Item = Config> {
        let m = self.0;
        // Ascending enumeration of the submasks of m: s ← (s − m) & m, from 0 back to 0.
        let mut s = 0u32;
        std::iter::from_fn(move || {
            s = s.wrapping_sub(m) & m;
            (s != 0).then_some(Config(s))
        })
    }
}

impl TryFrom<u32> for Config {
    type Error = GeoError;

    fn try_from(mask: u32) -> Result<Config, GeoError> {
        Config::from_mask(mask)
    }
}

impl From<Config> for u32 {
    fn from(c: Config) -> u32 {
        c.0
    }
}

/// `{0,2}`: member indices, ascending. [`crate::Topology::describe`] gives names.
impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, r) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsets_are_every_nonempty_submask_ascending() {
        let m = Config::from_mask(0b1011).unwrap();
        let got: Vec<u32> = m.subsets().map(Config::mask).collect();
        assert_eq!(got, vec![0b1, 0b10, 0b11, 0b1000, 0b1001, 0b1010, 0b1011]);
        assert_eq!(Config::all(3).subsets().count(), 7);
        assert_eq!(
            Config::all(REPLICAS_MAX).subsets().count(),
            (1 << REPLICAS_MAX) - 1
        );
        assert_eq!(
            Config::single(4).subsets().collect::<Vec<_>>(),
            vec![Config::single(4)]
        );
    }

    #[test]
    fn masks_are_checked() {
        assert!(Config::from_mask(0).is_err());
        assert!(Config::from_mask(1 << REPLICAS_MAX).is_err());
        assert_eq!(Config::from_mask(0b101).unwrap().to_string(), "{0,2}");
        assert_eq!(Config::from_replicas([]), None);
        assert_eq!(Config::from_replicas([2, 0]), Some(Config(0b101)));
        assert_eq!(Config::all(3).mask(), 0b111);
        assert_eq!(Config(0b100).span(), 3);
        assert!(serde_json::from_str::<Config>("0").is_err());
        assert_eq!(serde_json::to_string(&Config(5)).unwrap(), "5");
    }

    #[test]
    fn set_operations() {
        let a = Config::from_replicas([0, 1]).unwrap();
        let b = Config::from_replicas([1]).unwrap();
        assert!(b.is_subset_of(a));
        assert!(!a.is_subset_of(b));
        assert_eq!(
            a.union(Config::single(3)).iter().collect::<Vec<_>>(),
            vec![0, 1, 3]
        );
        assert!(a.contains(1) && !a.contains(2) && !a.contains(99));
        assert_eq!(a.len(), 2);
    }
}
