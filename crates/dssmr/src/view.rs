//! The objects a command executes over, wherever they live.

use crate::ObjectId;
use partita_types::DetHashMap;
use std::collections::{BTreeMap, BTreeSet};

/// The objects one execution sees: the member's own (writable; writes are buffered and
/// applied only if the execution stands), copies of other members' objects that the
/// command named (read-only: their owners execute the command too and write them
/// there), and nothing else.
///
/// A *strict* view (DS-SMR's single-partition access) records every object the
/// command reaches for that is not local; the server then discards the execution and
/// answers retry with every object the command touched.
pub struct View<'a, O> {
    local: &'a DetHashMap<ObjectId, O>,
    remote: &'a BTreeMap<ObjectId, O>,
    writes: BTreeMap<ObjectId, O>,
    touched: BTreeSet<ObjectId>,
    missing: BTreeSet<ObjectId>,
    strict: bool,
    position: u64,
    now_ms: u64,
    scanning: bool,
}

impl<'a, O: Clone> View<'a, O> {
    pub(crate) fn new(
        local: &'a DetHashMap<ObjectId, O>,
        remote: &'a BTreeMap<ObjectId, O>,
        strict: bool,
        position: u64,
        scanning: bool,
    ) -> View<'a, O> {
        View {
            local,
            remote,
            writes: BTreeMap::new(),
            touched: BTreeSet::new(),
            missing: BTreeSet::new(),
            strict,
            position,
            now_ms: 0,
            scanning,
        }
    }

    /// The view of a command delivered in a value stamped `now_ms`.
    pub(crate) fn at_time(mut self, now_ms: u64) -> View<'a, O> {
        self.now_ms = now_ms;
        self
    }

    /// The ordered time (ms) of the value that delivered the command (the leader's
    /// stamp, [`partita_types::Value::time_ms`]): the same at every member that
    /// executes it, since one value delivers it everywhere, and never going back along
    /// one ordered stream. What the key-value store's leases expire by.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The command's position in the order ([`crate::server::position`]): the same at
    /// every member that executes it, larger than every command's its member ran
    /// before, unique to it, and on one ordered stream larger than every command's
    /// that finished before it started. Not dense. The key-value store's revisions are
    /// these.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// A scanning command's objects that `pick` chooses, ascending by id: this
    /// member's (as this execution left them) and those the other destinations sent
    /// (every data partition's, since a scan runs at all). Empty for a command that
    /// does not scan ([`crate::ObjectService::scans`]).
    pub fn scan(&mut self, pick: impl Fn(ObjectId, &O) -> bool) -> Vec<(ObjectId, O)> {
        if !self.scanning {
            return Vec::new();
        }
        let mut found = BTreeMap::new();
        for (id, o) in self.remote {
            if !self.local.contains_key(id) && pick(*id, o) {
                found.insert(*id, o.clone());
            }
        }
        for (id, o) in self.local {
            let o = self.writes.get(id).unwrap_or(o);
            if pick(*id, o) {
                found.insert(*id, o.clone());
            }
        }
        self.touched.extend(found.keys().copied());
        found.into_iter().collect()
    }

    /// Read an object: this member's, or a copy another destination sent.
    pub fn get(&mut self, id: ObjectId) -> Option<&O> {
        self.touched.insert(id);
        if self.writes.contains_key(&id) {
            return self.writes.get(&id);
        }
        if let Some(o) = self.local.get(&id) {
            return Some(o);
        }
        if self.strict {
            self.missing.insert(id);
            return None;
        }
        self.remote.get(&id)
    }

    /// Write an object of this member. `None` when it is not here: it lives in another
    /// partition (which writes it itself) or nowhere.
    pub fn get_mut(&mut self, id: ObjectId) -> Option<&mut O> {
        self.touched.insert(id);
        if !self.writes.contains_key(&id) {
            match self.local.get(&id) {
                Some(o) => {
                    self.writes.insert(id, o.clone());
                }
                None => {
                    if self.strict {
                        self.missing.insert(id);
                    }
                    return None;
                }
            }
        }
        self.writes.get_mut(&id)
    }

    /// This member's objects that `pick` chooses (as this execution left them),
    /// ascending by id: what a command that changes objects it cannot name changes,
    /// each destination its own (the key-value store's compaction of every object's
    /// history). Nothing is exchanged for them.
    pub fn local_picked(&self, pick: impl Fn(ObjectId, &O) -> bool) -> Vec<ObjectId> {
        let mut ids: Vec<ObjectId> = self
            .local
            .iter()
            .filter(|(id, o)| pick(**id, self.writes.get(id).unwrap_or(o)))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Whether the object is this member's (the service may ask before writing).
    pub fn is_local(&self, id: ObjectId) -> bool {
        self.local.contains_key(&id)
    }

    /// The execution's outcome: the local writes, every object touched, and those
    /// missing (strict views only).
    pub(crate) fn finish(
        self,
    ) -> (
        BTreeMap<ObjectId, O>,
        BTreeSet<ObjectId>,
        BTreeSet<ObjectId>,
    ) {
        (self.writes, self.touched, self.missing)
    }
}
