//! The sequential specification the checker holds key-value histories to: etcd's data
//! model with one revision, written here from the specification and independently of
//! the `partita-kv` crate.
//!
//! * The store has a revision (1 when empty, as etcd's). An operation that changes
//!   something creates the next revision: a put; a delete that deleted at least one
//!   key; a transaction whose branch put or deleted anything (one revision for all its
//!   writes). Others report the current revision.
//! * A key has a value, a create revision, a mod revision and a version (1 when
//!   created, +1 per put); a delete removes all of it.
//! * Ranges follow etcd's `range_end`: empty for one key, `[0]` for every key from
//!   `key` on, otherwise `[key, end)` (empty when `end <= key`). `count` counts the
//!   whole range, `limit` (0: none) cuts the entries and sets `more`; `count_only`
//!   returns no entries (and `more` false), `keys_only` empty values.
//! * Compares (etcd's `applyCompare`): an absent key has version, create and mod
//!   revision 0, and a value compare on it is false whatever the operator; values
//!   compare as bytes.
//! * In a transaction the compares see the state before it; its operations run in
//!   order, each seeing the writes before it, and report the revision they saw: the old
//!   one until the first write, the new one after.
//!
//! [`eval`] evaluates one operation on any [`View`] (the current state, or the state
//! at an older revision) without changing it, returning the result and the changes.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::history::{Bytes, CmpOp, KvOp, KvResult, Target};

/// A key's value and metadata.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    pub value: Bytes,
    pub create_revision: u64,
    pub mod_revision: u64,
    pub version: u64,
}

/// A state the model can read.
pub trait View {
    fn get(&self, key: &[u8]) -> Option<&Entry>;
    /// The entries with keys in `[from, to)` (`to` unbounded when `None`), in key order.
    fn scan(&self, from: &[u8], to: Option<&[u8]>) -> Vec<(&[u8], &Entry)>;
}

impl View for BTreeMap<Bytes, Entry> {
    fn get(&self, key: &[u8]) -> Option<&Entry> {
        BTreeMap::get(self, key)
    }

    fn scan(&self, from: &[u8], to: Option<&[u8]>) -> Vec<(&[u8], &Entry)> {
        let hi = to.map_or(Bound::Unbounded, Bound::Excluded);
        self.range::<[u8], _>((Bound::Included(from), hi))
            .map(|(k, e)| (k.as_slice(), e))
            .collect()
    }
}

/// The keys `(key, end)` selects, as a scan (`None`: nothing, `end <= key`), or the
/// single key.
enum Sel<'a> {
    One(&'a [u8]),
    Scan(&'a [u8], Option<&'a [u8]>),
    Nothing,
}

fn select<'a>(key: &'a [u8], end: &'a [u8]) -> Sel<'a> {
    match end {
        [] => Sel::One(key),
        [0] => Sel::Scan(key, None),
        e if e <= key => Sel::Nothing,
        e => Sel::Scan(key, Some(e)),
    }
}

/// What one operation does: its result and the entries it changes (each key once,
/// with its entry afterwards; empty when it changes nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effect {
    pub result: KvResult,
    pub changes: Vec<(Bytes, Option<Entry>)>,
}

/// A transaction's writes over the state it started from.
struct Overlay<'v, V: View> {
    base: &'v V,
    writes: BTreeMap<Bytes, Option<Entry>>,
    /// Whether anything was put or deleted yet.
    wrote: bool,
    old_revision: u64,
}

impl<V: View> Overlay<'_, V> {
    fn get(&self, key: &[u8]) -> Option<&Entry> {
        match self.writes.get(key) {
            Some(w) => w.as_ref(),
            None => self.base.get(key),
        }
    }

    fn seen_revision(&self) -> u64 {
        self.old_revision + u64::from(self.wrote)
    }

    /// The entries selected, in key order, with this transaction's writes applied.
    fn select(&self, key: &[u8], end: &[u8]) -> Vec<(Bytes, Entry)> {
        let (from, to) = match select(key, end) {
            Sel::Nothing => return Vec::new(),
            Sel::One(k) => {
                return self
                    .get(k)
                    .map(|e| (k.to_vec(), e.clone()))
                    .into_iter()
                    .collect()
            }
            Sel::Scan(from, to) => (from, to),
        };
        let mut out: BTreeMap<Bytes, Entry> = self
            .base
            .scan(from, to)
            .into_iter()
            .map(|(k, e)| (k.to_vec(), e.clone()))
            .collect();
        for (k, w) in &self.writes {
            if k.as_slice() >= from && to.is_none_or(|t| k.as_slice() < t) {
                match w {
                    Some(e) => out.insert(k.clone(), e.clone()),
                    None => out.remove(k),
                };
            }
        }
        out.into_iter().collect()
    }

    fn apply(&mut self, op: &KvOp) -> KvResult {
        let new_revision = self.old_revision + 1;
        match op {
            KvOp::Put { key, value, .. } => {
                let old = self.get(key).cloned();
                let entry = match &old {
                    Some(o) => Entry {
                        value: value.clone(),
                        create_revision: o.create_revision,
                        mod_revision: new_revision,
                        version: o.version + 1,
                    },
                    None => Entry {
                        value: value.clone(),
                        create_revision: new_revision,
                        mod_revision: new_revision,
                        version: 1,
                    },
                };
                self.writes.insert(key.clone(), Some(entry));
                self.wrote = true;
                KvResult::Put {
                    revision: new_revision,
                    prev: Some(old.map(|o| o.value)),
                }
            }
            KvOp::Get { key } => {
                let e = self.get(key);
                KvResult::Get {
                    value: e.map(|e| e.value.clone()),
                    mod_revision: e.map(|e| e.mod_revision),
                    version: e.map_or(0, |e| e.version),
                    revision: Some(self.seen_revision()),
                }
            }
            KvOp::Range {
                key,
                end,
                limit,
                keys_only,
                count_only,
            } => {
                let all = self.select(key, end);
                let count = all.len() as u64;
                let shown = match (*count_only, *limit) {
                    (true, _) => 0,
                    (false, 0) => all.len(),
                    (false, l) => all.len().min(usize::try_from(l).unwrap_or(usize::MAX)),
                };
                let entries = all
                    .into_iter()
                    .take(shown)
                    .map(|(k, e)| {
                        let v = if *keys_only { Vec::new() } else { e.value };
                        (k, v, e.mod_revision)
                    })
                    .collect();
                KvResult::Range {
                    entries,
                    revision: self.seen_revision(),
                    count: Some(count),
                    more: Some((shown as u64) < count && !*count_only),
                }
            }
            KvOp::Del { key, end, .. } => {
                let gone = self.select(key, end.as_deref().unwrap_or_default());
                for (k, _) in &gone {
                    self.writes.insert(k.clone(), None);
                }
                self.wrote |= !gone.is_empty();
                KvResult::Del {
                    deleted: gone.len() as u64,
                    revision: self.seen_revision(),
                    prev: Some(gone.into_iter().map(|(k, e)| (k, e.value)).collect()),
                }
            }
            KvOp::Txn { .. } => unreachable!("transactions do not nest (refused when parsed)"),
        }
    }

    fn compare(&self, key: &[u8], target: &Target, op: CmpOp) -> bool {
        let e = self.base.get(key);
        let ordering = match (target, e) {
            // etcd: a value compare on a missing key is false, whatever the operator.
            (Target::Value(_), None) => return false,
            (Target::Value(v), Some(e)) => e.value.as_slice().cmp(v.as_slice()),
            (Target::Version(n), e) => e.map_or(0, |e| e.version).cmp(n),
            (Target::Create(n), e) => e.map_or(0, |e| e.create_revision).cmp(n),
            (Target::Mod(n), e) => e.map_or(0, |e| e.mod_revision).cmp(n),
        };
        match op {
            CmpOp::Eq => ordering.is_eq(),
            CmpOp::Ne => ordering.is_ne(),
            CmpOp::Lt => ordering.is_lt(),
            CmpOp::Gt => ordering.is_gt(),
        }
    }
}

/// Evaluate `op` on `view`, a state at `revision`, without changing it.
pub fn eval<V: View>(view: &V, revision: u64, op: &KvOp) -> Effect {
    let mut o = Overlay {
        base: view,
        writes: BTreeMap::new(),
        wrote: false,
        old_revision: revision,
    };
    let result = match op {
        KvOp::Txn {
            compare,
            then,
            otherwise,
        } => {
            let succeeded = compare.iter().all(|c| o.compare(&c.key, &c.target, c.op));
            let branch = if succeeded { then } else { otherwise };
            let results = branch.iter().map(|x| o.apply(x)).collect();
            KvResult::Txn {
                succeeded,
                results,
                revision: Some(o.seen_revision()),
            }
        }
        other => o.apply(other),
    };
    let changes = if o.wrote {
        o.writes.into_iter().collect()
    } else {
        Vec::new()
    };
    Effect { result, changes }
}

/// The model as a store that executes operations one after another: the reference
/// the history generator ([`super::gen`]) runs clients against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelStore {
    pub map: BTreeMap<Bytes, Entry>,
    pub revision: u64,
}

impl Default for ModelStore {
    fn default() -> Self {
        ModelStore {
            map: BTreeMap::new(),
            revision: 1,
        }
    }
}

impl ModelStore {
    /// Execute `op`: its result, the store changed accordingly.
    pub fn execute(&mut self, op: &KvOp) -> KvResult {
        let effect = eval(&self.map, self.revision, op);
        if !effect.changes.is_empty() {
            self.revision += 1;
            for (k, e) in effect.changes {
                match e {
                    Some(e) => self.map.insert(k, e),
                    None => self.map.remove(&k),
                };
            }
        }
        effect.result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::history::Compare;

    fn put(k: &str, v: &str) -> KvOp {
        KvOp::Put {
            key: k.into(),
            value: v.into(),
            prev_kv: false,
        }
    }

    #[test]
    fn revisions_versions_and_deletes() {
        let mut s = ModelStore::default();
        assert_eq!(
            s.execute(&put("a", "1")),
            KvResult::Put {
                revision: 2,
                prev: Some(None)
            }
        );
        s.execute(&put("a", "2"));
        let get = KvOp::Get { key: "a".into() };
        assert_eq!(
            s.execute(&get),
            KvResult::Get {
                value: Some("2".into()),
                mod_revision: Some(3),
                version: 2,
                revision: Some(3)
            }
        );
        let del = |end: Option<&str>| KvOp::Del {
            key: "a".into(),
            end: end.map(Into::into),
            prev_kv: false,
        };
        assert!(matches!(
            s.execute(&del(Some("\0"))),
            KvResult::Del {
                deleted: 1,
                revision: 4,
                ..
            }
        ));
        assert!(matches!(
            s.execute(&del(None)),
            KvResult::Del {
                deleted: 0,
                revision: 4,
                ..
            }
        ));
        s.execute(&put("a", "3"));
        assert_eq!(s.map[b"a".as_slice()].create_revision, 5);
        assert_eq!(s.map[b"a".as_slice()].version, 1);
    }

    #[test]
    fn transactions_see_their_own_writes() {
        let mut s = ModelStore::default();
        s.execute(&put("a", "1"));
        let txn = KvOp::Txn {
            compare: vec![Compare {
                key: "zz".into(),
                target: Target::Value("x".into()),
                op: CmpOp::Ne,
            }],
            then: vec![],
            otherwise: vec![
                KvOp::Get { key: "b".into() },
                put("b", "2"),
                KvOp::Range {
                    key: "a".into(),
                    end: vec![0],
                    limit: 1,
                    keys_only: false,
                    count_only: false,
                },
            ],
        };
        let KvResult::Txn {
            succeeded,
            results,
            revision,
        } = s.execute(&txn)
        else {
            panic!()
        };
        // A value compare on a missing key is false, even with `!=`.
        assert!(!succeeded);
        assert_eq!(revision, Some(3));
        assert!(matches!(
            results[0],
            KvResult::Get {
                revision: Some(2),
                ..
            }
        ));
        assert_eq!(
            results[2],
            KvResult::Range {
                entries: vec![("a".into(), "1".into(), 2)],
                revision: 3,
                count: Some(2),
                more: Some(true)
            }
        );
    }
}
