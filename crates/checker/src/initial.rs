//! The state of the map before the first operation of a history.

use serde::{Deserialize, Serialize};

/// Contents of the map before the history starts.
///
/// The checker never materializes the whole initial state: it asks only for the entries
/// inside the key ranges a sub-history touches ([`Initial::entries_in`]), so a preload of
/// millions of keys costs nothing for keys no operation looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Initial {
    /// No entries.
    #[default]
    Empty,
    /// Exactly these entries. Order does not matter; for a key listed twice the last
    /// value wins.
    Entries(Vec<(u64, u64)>),
    /// The benchmark preload: `count` entries with keys `0, stride, 2*stride, ...`
    /// (`key = i * stride` for `i < count`) and `value = key`. Keys that would overflow
    /// `u64` are left out; `stride == 0` stands for the single key 0.
    Preload { count: u64, stride: u64 },
}

impl Initial {
    /// Entries as a sorted, duplicate-free list (last value wins), for [`Initial::Entries`].
    fn normalized(entries: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut v: Vec<(usize, (u64, u64))> = entries.iter().copied().enumerate().collect();
        // Sort by key, then by position, so the last occurrence of a key comes last.
        v.sort_by_key(|&(i, (k, _))| (k, i));
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for (_, (k, val)) in v {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = val,
                _ => out.push((k, val)),
            }
        }
        out
    }

    /// Preload: number of keys that exist and fit in u64.
    fn preload_len(count: u64, stride: u64) -> u64 {
        match u64::MAX.checked_div(stride) {
            _ if count == 0 => 0,
            // Stride 0: every i maps to key 0.
            None => 1,
            Some(last) => count.min(last.saturating_add(1)),
        }
    }

    /// Entries with `lo <= key <= hi`, in key order.
    pub fn entries_in(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        if lo > hi {
            return Vec::new();
        }
        match self {
            Initial::Empty => Vec::new(),
            Initial::Entries(es) => Initial::normalized(es)
                .into_iter()
                .filter(|(k, _)| (lo..=hi).contains(k))
                .collect(),
            Initial::Preload { count, stride } => {
                let n = Initial::preload_len(*count, *stride);
                if n == 0 {
                    return Vec::new();
                }
                if *stride == 0 {
                    return if lo == 0 { vec![(0, 0)] } else { Vec::new() };
                }
                let first = lo.div_ceil(*stride);
                let last = (hi / stride).min(n - 1);
                if first > last {
                    return Vec::new();
                }
                (first..=last).map(|i| (i * stride, i * stride)).collect()
            }
        }
    }

    /// The initial value of `key`.
    pub fn get(&self, key: u64) -> Option<u64> {
        match self {
            Initial::Empty => None,
            Initial::Entries(es) => es.iter().rev().find(|(k, _)| *k == key).map(|e| e.1),
            Initial::Preload { count, stride } => {
                let n = Initial::preload_len(*count, *stride);
                let present = match *stride {
                    _ if n == 0 => false,
                    0 => key == 0,
                    s => key.is_multiple_of(s) && key / s < n,
                };
                present.then_some(key)
            }
        }
    }

    /// Every entry, in key order. Linear in the size of the initial state.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (u64, u64)> + '_> {
        match self {
            Initial::Empty => Box::new(std::iter::empty()),
            Initial::Entries(es) => Box::new(Initial::normalized(es).into_iter()),
            Initial::Preload { count, stride } => {
                let n = Initial::preload_len(*count, *stride);
                let stride = *stride;
                Box::new((0..n).map(move |i| (i * stride, i * stride)))
            }
        }
    }
}

/// An [`Initial`] prepared for many lookups: explicit entries are sorted once, so that
/// per-group range lookups are binary searches.
pub(crate) struct InitialIndex<'a> {
    initial: &'a Initial,
    sorted: Vec<(u64, u64)>,
}

impl<'a> InitialIndex<'a> {
    pub(crate) fn new(initial: &'a Initial) -> InitialIndex<'a> {
        let sorted = match initial {
            Initial::Entries(es) => Initial::normalized(es),
            _ => Vec::new(),
        };
        InitialIndex { initial, sorted }
    }

    /// Entries inside any of `ranges` (inclusive, sorted, disjoint), in key order.
    pub(crate) fn entries_in_ranges(&self, ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
        match self.initial {
            Initial::Entries(_) => {
                let mut out = Vec::new();
                for &(lo, hi) in ranges {
                    let start = self.sorted.partition_point(|(k, _)| *k < lo);
                    out.extend(self.sorted[start..].iter().take_while(|(k, _)| *k <= hi));
                }
                out
            }
            other => ranges
                .iter()
                .flat_map(|&(lo, hi)| other.entries_in(lo, hi))
                .collect(),
        }
    }

    pub(crate) fn get(&self, key: u64) -> Option<u64> {
        match self.initial {
            Initial::Entries(_) => self
                .sorted
                .binary_search_by_key(&key, |e| e.0)
                .ok()
                .map(|i| self.sorted[i].1),
            other => other.get(key),
        }
    }

    /// Every entry in key order.
    pub(crate) fn iter(&self) -> Box<dyn Iterator<Item = (u64, u64)> + '_> {
        match self.initial {
            Initial::Entries(_) => Box::new(self.sorted.iter().copied()),
            other => other.iter(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_ranges_and_lookup() {
        let p = Initial::Preload {
            count: 5,
            stride: 2,
        };
        assert_eq!(
            p.entries_in(0, 100),
            vec![(0, 0), (2, 2), (4, 4), (6, 6), (8, 8)]
        );
        assert_eq!(p.entries_in(3, 6), vec![(4, 4), (6, 6)]);
        assert_eq!(p.entries_in(9, 100), vec![]);
        assert_eq!(p.entries_in(5, 3), vec![]);
        assert_eq!(p.get(8), Some(8));
        assert_eq!(p.get(10), None);
        assert_eq!(p.get(3), None);
        assert_eq!(p.iter().count(), 5);
        let idx = InitialIndex::new(&p);
        assert_eq!(
            idx.entries_in_ranges(&[(0, 1), (7, 8)]),
            vec![(0, 0), (8, 8)]
        );
        assert_eq!(idx.get(4), Some(4));
        // Keys that would overflow are not part of the preload.
        let huge = Initial::Preload {
            count: u64::MAX,
            stride: u64::MAX / 2,
        };
        assert_eq!(huge.iter().count(), 3);
        assert_eq!(huge.entries_in(1, u64::MAX).len(), 2);
    }

    #[test]
    fn explicit_entries_last_wins() {
        let e = Initial::Entries(vec![(5, 1), (1, 1), (5, 2)]);
        assert_eq!(e.entries_in(0, 10), vec![(1, 1), (5, 2)]);
        assert_eq!(e.get(5), Some(2));
        assert_eq!(e.iter().collect::<Vec<_>>(), vec![(1, 1), (5, 2)]);
        let idx = InitialIndex::new(&e);
        assert_eq!(
            idx.entries_in_ranges(&[(0, 2), (4, 5)]),
            vec![(1, 1), (5, 2)]
        );
        assert_eq!(idx.get(5), Some(2));
        assert_eq!(idx.get(4), None);
        assert_eq!(idx.iter().count(), 2);
    }
}
