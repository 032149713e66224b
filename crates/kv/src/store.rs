//! The store: a `BTreeMap` of keys to values with etcd's per-key metadata, the
//! store-wide revision, execution with undo records, and the incremental digest.
//!
//! Semantics (etcd's `mvcc` package, `kvstore_txn.go`, with one revision kept):
//!
//! * The store starts at revision 1 ([`INITIAL_REVISION`]), as etcd's does, so the
//!   first write creates revision 2.
//! * Every request that changes something creates exactly one revision: a put always;
//!   a delete when it deleted at least one key; a transaction when its branch put or
//!   deleted anything, all its writes sharing the one new revision. A read, a delete
//!   of nothing and a transaction that changed nothing leave the revision alone and
//!   report the current one.
//! * Per key: `create_revision` (of the put that created it), `mod_revision` (of the
//!   last put) and `version` (1 on creation, +1 per put). A delete removes the key with
//!   its metadata, so a later put starts over at version 1.
//! * Inside a transaction, operations run in order and see the writes of the ones
//!   before them (etcd's `storeTxnWrite`): a range after a put in the same branch reads
//!   the put, and reports the new revision; one before any write reports the old one.
//!
//! Undo: each executed command returns a [`KvUndo`] with the revision before it and,
//! for every key it changed, the entry before the change (moved, not copied). Undoing
//! puts those back newest first and restores the revision, which restores the digest
//! exactly, since the digest is maintained by the same two primitives.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;

use crate::digest::{entry_hash, finish, mix64};
use crate::lease::{LeaseMeta, Leases};
use crate::types::*;

/// The revision of an empty store (etcd's).
pub const INITIAL_REVISION: u64 = 1;

/// Most events the history keeps: beyond, the oldest revisions are dropped (as by a
/// compaction) after the write that crossed the bound.
pub const EVENTS_MAX: usize = 100_000;
/// Most key and value bytes (values before and after) the history keeps; beyond, the
/// oldest revisions are dropped as for [`EVENTS_MAX`].
pub const EVENT_BYTES_MAX: usize = 64 << 20;

/// The bytes an event holds, for [`EVENT_BYTES_MAX`] (and the bounds of other
/// histories of events, `partita_dssmr::kv`'s per object).
pub fn event_bytes(e: &Event) -> usize {
    e.kv.key.len() + e.kv.value.len() + e.prev_kv.as_ref().map_or(0, |p| p.value.len())
}

fn kv_hash(kv: &KeyValue) -> u64 {
    entry_hash(
        &kv.key,
        &kv.value,
        kv.create_revision,
        kv.mod_revision,
        kv.version,
        kv.lease,
    )
}

/// An event's term in the digest.
pub(crate) fn event_hash(e: &Event) -> u64 {
    let kind = match e.kind {
        EventKind::Put => 0x9e37_79b9,
        EventKind::Delete => 0x7f4a_7c15,
    };
    let prev = e.prev_kv.as_ref().map_or(0x3c6e_f372, kv_hash);
    mix64(kv_hash(&e.kv) ^ mix64(prev ^ kind))
}

/// A key's value and metadata, with its hash in the digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) value: Vec<u8>,
    pub(crate) create_revision: u64,
    pub(crate) mod_revision: u64,
    pub(crate) version: u64,
    /// The lease the key is attached to (0: none).
    pub(crate) lease: i64,
    pub(crate) hash: u64,
}

impl Entry {
    pub(crate) fn new(
        key: &[u8],
        value: Vec<u8>,
        create_revision: u64,
        mod_revision: u64,
        version: u64,
        lease: i64,
    ) -> Entry {
        let hash = entry_hash(key, &value, create_revision, mod_revision, version, lease);
        Entry {
            value,
            create_revision,
            mod_revision,
            version,
            lease,
            hash,
        }
    }

    fn to_kv(&self, key: &[u8], keys_only: bool) -> KeyValue {
        KeyValue {
            key: key.to_vec(),
            value: if keys_only {
                Vec::new()
            } else {
                self.value.clone()
            },
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
            version: self.version,
            lease: self.lease,
        }
    }
}

/// What undoes one command: the revision before it and the previous entry of every key
/// it changed, in the order of the changes.
#[derive(Debug)]
pub struct KvUndo {
    revision: u64,
    changes: Vec<(Vec<u8>, Option<Entry>)>,
    /// Events the command appended to the history.
    events_added: usize,
    /// Events it dropped from the front of the history (oldest first), and the
    /// compaction revision before.
    events_dropped: Vec<Event>,
    compacted: u64,
    /// A batch's requests' undos, in execution order (nothing else is set then).
    batch: Vec<KvUndo>,
    /// Leases changed (granted, renewed, revoked, expired), with their fields before,
    /// in the order of the changes.
    leases: Vec<(i64, Option<LeaseMeta>)>,
    /// The lease allocator's counter and the ordered time before, if they changed.
    leases_picked: Option<u64>,
    now_ms: Option<u64>,
    /// The leases were re-armed ([`KvStore::rearm_leases`]): undone, they wait again.
    rearmed: bool,
}

impl KvUndo {
    fn at(revision: u64, compacted: u64) -> KvUndo {
        KvUndo {
            revision,
            changes: Vec::new(),
            events_added: 0,
            events_dropped: Vec::new(),
            compacted,
            batch: Vec::new(),
            leases: Vec::new(),
            leases_picked: None,
            now_ms: None,
            rearmed: false,
        }
    }
}

impl KvUndo {
    /// Keys the command changed (0 for reads).
    pub fn changes(&self) -> usize {
        self.changes.len() + self.batch.iter().map(KvUndo::changes).sum::<usize>()
    }
}

/// The key-value store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvStore {
    map: BTreeMap<Vec<u8>, Entry>,
    revision: u64,
    /// Wrapping sum of the entries' hashes (see the `digest` module).
    digest_sum: u64,
    /// The event history (what etcd's watches deliver), oldest first: every event of
    /// every revision from `compacted` on, bounded by [`EVENTS_MAX`] and
    /// [`EVENT_BYTES_MAX`].
    events: VecDeque<Event>,
    /// Events below this revision are gone (0: none ever dropped).
    compacted: u64,
    /// [`event_bytes`] summed over `events`.
    event_bytes: usize,
    /// Wrapping sum of the events' hashes.
    events_sum: u64,
    leases: Leases,
    /// Ordered time (ms) of the newest value executed ([`KvStore::advance_time`]).
    now_ms: u64,
    /// Every lease starts its whole TTL over at the next ordered time
    /// ([`KvStore::rearm_leases`]). Not in snapshots: only a restored backup sets it,
    /// and the first value clears it.
    rearm: bool,
}

impl Default for KvStore {
    fn default() -> Self {
        KvStore::new()
    }
}

/// The write context of one command: the revision its writes get, whether it wrote
/// yet, and its undo record.
struct Writes {
    new_revision: u64,
    changed: bool,
    undo: KvUndo,
}

impl KvStore {
    pub fn new() -> KvStore {
        KvStore {
            map: BTreeMap::new(),
            revision: INITIAL_REVISION,
            digest_sum: 0,
            events: VecDeque::new(),
            compacted: 0,
            event_bytes: 0,
            events_sum: 0,
            leases: Leases::default(),
            now_ms: 0,
            rearm: false,
        }
    }

    /// A store from its parts (snapshot restore: the caller has validated them, and
    /// that every entry's lease is in `leases`, which has no keys yet; or one command's
    /// keys on S-SMR/DS-SMR, [`KvStore::partial`], whose entries may name leases the
    /// command did not read: those keys are attached to no lease here).
    pub(crate) fn from_parts(
        map: BTreeMap<Vec<u8>, Entry>,
        revision: u64,
        events: VecDeque<Event>,
        compacted: u64,
        mut leases: Leases,
        now_ms: u64,
    ) -> KvStore {
        for (k, e) in &map {
            if e.lease != 0 && leases.contains(e.lease) {
                leases.attach(e.lease, k);
            }
        }
        let digest_sum = map.values().fold(0u64, |s, e| s.wrapping_add(e.hash));
        let event_bytes = events.iter().map(event_bytes).sum();
        let events_sum = events
            .iter()
            .fold(0u64, |s, e| s.wrapping_add(event_hash(e)));
        KvStore {
            map,
            revision,
            digest_sum,
            events,
            compacted,
            event_bytes,
            events_sum,
            leases,
            now_ms,
            rearm: false,
        }
    }

    /// The part of a store that one command executes over on S-SMR and DS-SMR
    /// (`partita_dssmr::kv`), built from the objects it reads: the pairs `kvs` at
    /// `revision`, with the event history `events` (every change of these keys from
    /// `compacted` on, sorted by revision, each at or below `revision`) so that reads
    /// at past revisions and event reads work, and the leases `leases` (id, granted
    /// TTL, expiry) at ordered time `now_ms`. A key keeps the lease it names; it is
    /// attached (revoked with it, listed by it) only if that lease is given. A key
    /// given twice keeps its last pair.
    pub fn partial(
        kvs: impl IntoIterator<Item = KeyValue>,
        events: Vec<Event>,
        compacted: u64,
        revision: u64,
        leases: impl IntoIterator<Item = (i64, i64, u64)>,
        now_ms: u64,
    ) -> KvStore {
        let map = kvs
            .into_iter()
            .map(|kv| {
                let e = Entry::new(
                    &kv.key,
                    kv.value,
                    kv.create_revision,
                    kv.mod_revision,
                    kv.version,
                    kv.lease,
                );
                (kv.key, e)
            })
            .collect();
        let mut table = Leases::default();
        for (id, ttl, expiry_ms) in leases {
            table.set(id, Some(LeaseMeta { ttl, expiry_ms }));
        }
        KvStore::from_parts(map, revision, events.into(), compacted, table, now_ms)
    }

    /// Lease `id`'s granted TTL (s) and expiry (ordered ms), if held.
    pub fn lease(&self, id: i64) -> Option<(i64, u64)> {
        self.leases.meta(id).map(|m| (m.ttl, m.expiry_ms))
    }

    /// The lease table and the ordered time (snapshots).
    pub(crate) fn lease_parts(&self) -> (&Leases, u64) {
        (&self.leases, self.now_ms)
    }

    /// Ordered time (ms) of the newest value executed.
    /// This store starts a new cluster (a restored backup): at the next ordered time
    /// every lease gets its whole TTL again, from that time. The old cluster's
    /// deadlines are in its own ordered time, which the new cluster's does not
    /// continue; etcd's leader likewise re-arms every lease after a restore.
    pub fn rearm_leases(&mut self) {
        self.rearm = true;
    }

    /// Whether a lease expires at or before `now_ms`, or the leases wait to be
    /// re-armed ([`KvStore::rearm_leases`]).
    pub fn lease_due(&self, now_ms: u64) -> bool {
        self.rearm || self.leases.due(now_ms).is_some()
    }

    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Leases held.
    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }

    /// Ordered time moves to `now_ms` (never back): every lease whose expiry is at or
    /// before it expires, in (expiry, id) order, each deleting its keys in a revision
    /// of its own (see the `lease` module). `None` when nothing changed.
    pub fn advance_time(&mut self, now_ms: u64) -> Option<KvUndo> {
        if now_ms <= self.now_ms && !self.rearm {
            return None;
        }
        let mut undo = KvUndo::at(self.revision, self.compacted);
        undo.now_ms = Some(self.now_ms);
        self.now_ms = self.now_ms.max(now_ms);
        if std::mem::take(&mut self.rearm) {
            undo.rearmed = true;
            let all: Vec<(i64, LeaseMeta)> = self.leases.iter().collect();
            for (id, m) in all {
                let meta = LeaseMeta {
                    ttl: m.ttl,
                    expiry_ms: self.expiry(m.ttl),
                };
                let old = self.leases.set(id, Some(meta));
                undo.leases.push((id, old));
            }
        }
        while let Some(id) = self.leases.due(now_ms) {
            let mut w = Writes {
                new_revision: self.revision + 1,
                changed: false,
                undo,
            };
            self.revoke(id, &mut w);
            undo = w.undo;
            if w.changed {
                self.revision = w.new_revision;
                self.trim_events(&mut undo);
            }
        }
        Some(undo)
    }

    /// Revoke lease `id` (which exists): its keys deleted at `w`'s revision, in key
    /// order, then the lease removed.
    fn revoke(&mut self, id: i64, w: &mut Writes) {
        let keys: Vec<Vec<u8>> = self.leases.keys(id).cloned().collect();
        for k in keys {
            self.delete_key(k, w);
        }
        let old = self.leases.set(id, None);
        w.undo.leases.push((id, old));
    }

    fn grant(
        &mut self,
        g: &LeaseGrantRequest,
        w: &mut Writes,
    ) -> Result<LeaseGrantResponse, KvError> {
        if g.ttl > LEASE_TTL_MAX {
            return Err(KvError::LeaseTtlTooLarge(g.ttl));
        }
        if g.id != 0 && self.leases.contains(g.id) {
            return Err(KvError::LeaseExists(g.id));
        }
        let id = match g.id {
            0 => {
                w.undo.leases_picked = Some(self.leases.picked);
                self.leases.pick()
            }
            id => id,
        };
        let ttl = g.ttl.max(LEASE_TTL_MIN);
        let meta = LeaseMeta {
            ttl,
            expiry_ms: self.expiry(ttl),
        };
        let old = self.leases.set(id, Some(meta));
        w.undo.leases.push((id, old));
        Ok(LeaseGrantResponse {
            id,
            ttl,
            revision: self.revision,
        })
    }

    /// The ordered time at which a lease of `ttl` seconds granted or renewed now ends.
    fn expiry(&self, ttl: i64) -> u64 {
        self.now_ms
            .saturating_add(u64::try_from(ttl).unwrap_or(0).saturating_mul(1000))
    }

    /// Whether a lease has not expired (only the partitioned store's leases wait for
    /// a revocation after their expiry, [`KvCommand::LeaseExpire`]; an expired one is
    /// as good as gone: no put attaches to it and no keep-alive renews it).
    fn live(&self, m: LeaseMeta) -> bool {
        m.expiry_ms > self.now_ms
    }

    fn keep_alive(&mut self, id: i64, w: &mut Writes) -> LeaseKeepAliveResponse {
        let ttl = match self.leases.meta(id).filter(|m| self.live(*m)) {
            Some(m) => {
                let renewed = LeaseMeta {
                    expiry_ms: self.expiry(m.ttl),
                    ..m
                };
                let old = self.leases.set(id, Some(renewed));
                w.undo.leases.push((id, old));
                m.ttl
            }
            // Unknown (expired, revoked, never granted): TTL 0, as etcd answers.
            None => 0,
        };
        LeaseKeepAliveResponse {
            id,
            ttl,
            revision: self.revision,
        }
    }

    fn time_to_live(&self, l: &LeaseRequest) -> LeaseTimeToLiveResponse {
        match self.leases.meta(l.id) {
            Some(m) => LeaseTimeToLiveResponse {
                id: l.id,
                ttl: (m.expiry_ms.saturating_sub(self.now_ms) / 1000) as i64,
                granted_ttl: m.ttl,
                keys: if l.keys {
                    self.leases.keys(l.id).cloned().collect()
                } else {
                    Vec::new()
                },
                revision: self.revision,
            },
            None => LeaseTimeToLiveResponse {
                id: l.id,
                ttl: -1,
                granted_ttl: 0,
                keys: Vec::new(),
                revision: self.revision,
            },
        }
    }

    /// The lease a put names must exist when it executes (0 names none).
    fn check_put_lease(&self, p: &PutRequest) -> Result<(), KvError> {
        // Expired, though not yet revoked (only the partitioned store's leases wait
        // for a revocation after their expiry): as good as gone.
        if p.lease != 0 && !self.leases.meta(p.lease).is_some_and(|m| self.live(m)) {
            return Err(KvError::LeaseNotFound(p.lease));
        }
        Ok(())
    }

    /// The entries (snapshot restore).
    pub(crate) fn into_map(self) -> BTreeMap<Vec<u8>, Entry> {
        self.map
    }

    /// The retained event history, oldest first.
    pub fn events(&self) -> impl Iterator<Item = &Event> + '_ {
        self.events.iter()
    }

    /// Events below this revision are no longer retained (0: none was ever dropped).
    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    fn push_event(&mut self, e: Event, undo: &mut KvUndo) {
        self.event_bytes += event_bytes(&e);
        self.events_sum = self.events_sum.wrapping_add(event_hash(&e));
        self.events.push_back(e);
        undo.events_added += 1;
    }

    /// Drop the oldest revision's events; returns that revision.
    fn drop_oldest_revision(&mut self, undo: &mut KvUndo) -> Option<u64> {
        let rev = self.events.front()?.revision();
        while self.events.front().is_some_and(|e| e.revision() == rev) {
            let e = self.events.pop_front().expect("just seen");
            self.event_bytes -= event_bytes(&e);
            self.events_sum = self.events_sum.wrapping_sub(event_hash(&e));
            undo.events_dropped.push(e);
        }
        Some(rev)
    }

    /// Keep the history within its bounds, dropping whole revisions, never the newest.
    fn trim_events(&mut self, undo: &mut KvUndo) {
        while self.events.len() > EVENTS_MAX || self.event_bytes > EVENT_BYTES_MAX {
            if self.events.front().map(Event::revision) == Some(self.revision) {
                break;
            }
            match self.drop_oldest_revision(undo) {
                Some(rev) => self.compacted = rev + 1,
                None => break,
            }
        }
    }

    fn compact(&mut self, c: &CompactRequest, undo: &mut KvUndo) -> CompactResponse {
        let error = if c.revision <= self.compacted {
            Some(COMPACTED_ALREADY.to_string())
        } else if c.revision > self.revision {
            Some(COMPACT_IN_FUTURE.to_string())
        } else {
            while self
                .events
                .front()
                .is_some_and(|e| e.revision() < c.revision)
            {
                self.drop_oldest_revision(undo);
            }
            self.compacted = c.revision;
            None
        };
        CompactResponse {
            revision: self.revision,
            compacted: self.compacted,
            error,
        }
    }

    fn read_events(&self, r: &EventsRequest) -> EventsResponse {
        let start = match r.start_revision {
            0 => self.revision + 1,
            s => s,
        };
        let mut out = EventsResponse {
            events: Vec::new(),
            compacted: None,
            more: false,
            revision: self.revision,
        };
        if start < self.compacted {
            out.compacted = Some(self.compacted);
            return out;
        }
        let range = KeyRange::new(&r.key, &r.end);
        let from = self.events.partition_point(|e| e.revision() < start);
        let limit = match r.limit {
            0 => usize::MAX,
            n => usize::try_from(n).unwrap_or(usize::MAX),
        };
        let mut last_rev = 0;
        for e in self.events.range(from..) {
            if !range.contains(&e.kv.key) {
                continue;
            }
            if out.events.len() >= limit && e.revision() != last_rev {
                out.more = true;
                break;
            }
            last_rev = e.revision();
            out.events.push(e.clone());
        }
        out
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = (&Vec<u8>, &Entry)> {
        self.map.iter()
    }

    /// The store's revision: that of the last change (1 before any).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// One key with its metadata.
    pub fn get(&self, key: &[u8]) -> Option<KeyValue> {
        self.map.get(key).map(|e| e.to_kv(key, false))
    }

    /// Every key with its metadata, in key order.
    pub fn iter(&self) -> impl Iterator<Item = KeyValue> + '_ {
        self.map.iter().map(|(k, e)| e.to_kv(k, false))
    }

    /// Content digest (see the `digest` module). O(1).
    /// The event history enters it too (zero for a store that never wrote, so a
    /// fresh store's digest is what it was before the history existed).
    pub fn digest(&self) -> u64 {
        let leases = match self.leases.len() {
            0 => 0,
            _ => self.leases.digest(),
        };
        finish(self.digest_sum, self.map.len() as u64, self.revision)
            ^ self.events_sum
            ^ self.compacted.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ leases
    }

    /// Set `key` to `entry` (or remove it), keeping the digest; returns the previous
    /// entry. Every change goes through here.
    /// Keys attached to a lease are indexed by it here too.
    fn set(&mut self, key: &[u8], entry: Option<Entry>) -> Option<Entry> {
        let new = entry.as_ref().map(|e| (e.hash, e.lease));
        let old = match entry {
            // One search of the map when the key is there (most puts), and no copy of it.
            Some(e) => match self.map.get_mut(key) {
                Some(slot) => Some(std::mem::replace(slot, e)),
                None => self.map.insert(key.to_vec(), e),
            },
            None => self.map.remove(key),
        };
        self.account(key, new, old.as_ref());
        old
    }

    /// The digest and the leases' key sets after `key`'s entry `old` became one with
    /// hash and lease `new` (`None`: the key is gone).
    fn account(&mut self, key: &[u8], new: Option<(u64, i64)>, old: Option<&Entry>) {
        let lease = new.map_or(0, |(_, lease)| lease);
        if let Some((hash, _)) = new {
            self.digest_sum = self.digest_sum.wrapping_add(hash);
        }
        if lease != 0 {
            self.leases.attach(lease, key);
        }
        if let Some(o) = old {
            self.digest_sum = self.digest_sum.wrapping_sub(o.hash);
            if o.lease != 0 && o.lease != lease {
                self.leases.detach(o.lease, key);
            }
        }
    }

    /// A command that reads the keys, the history or the hash and nothing else, on the
    /// store as it is: its reply, as [`KvStore::execute`] gives it (which answers such
    /// commands here). `None` for every other command: writes, and the lease reads,
    /// which read ordered time. P-SMR's worker threads run these at the same time
    /// (see the service's `shared`).
    pub fn read(&self, cmd: &KvCommand) -> Option<KvReply> {
        let error = |error| {
            KvReply::Error(ErrorResponse {
                error,
                revision: self.revision,
            })
        };
        Some(match cmd {
            KvCommand::Range(r) => self
                .range(r, self.revision)
                .map_or_else(error, KvReply::Range),
            KvCommand::Events(e) => KvReply::Events(self.read_events(e)),
            KvCommand::Hash(h) => self.hash(h).map_or_else(error, KvReply::Hash),
            KvCommand::Txn(t) if is_read_only(cmd) => {
                let read = || -> Result<TxnResponse, KvError> {
                    let (succeeded, ops) = self.txn_branch(t)?;
                    let mut responses = Vec::with_capacity(ops.len());
                    for op in ops {
                        let RequestOp::Range(r) = op else {
                            unreachable!("a read-only transaction only reads")
                        };
                        responses.push(ResponseOp::Range(self.range(r, self.revision)?));
                    }
                    Ok(TxnResponse {
                        succeeded,
                        responses,
                        revision: self.revision,
                    })
                };
                read().map_or_else(error, KvReply::Txn)
            }
            KvCommand::Batch(cmds) => KvReply::Batch(
                cmds.iter()
                    .map(|c| self.read(c))
                    .collect::<Option<Vec<_>>>()?,
            ),
            _ => return None,
        })
    }

    /// Execute `cmd` (which [`check`] accepted) and return its reply and what undoes it.
    pub fn execute(&mut self, cmd: &KvCommand) -> (KvReply, KvUndo) {
        if let Some(reply) = self.read(cmd) {
            return (reply, KvUndo::at(self.revision, self.compacted));
        }
        if let KvCommand::Batch(cmds) = cmd {
            // Each request as if alone: its own revision when it changes something.
            let mut undo = KvUndo::at(self.revision, self.compacted);
            undo.batch.reserve(cmds.len());
            let mut replies = Vec::with_capacity(cmds.len());
            for c in cmds {
                let (r, u) = self.execute(c);
                replies.push(r);
                undo.batch.push(u);
            }
            return (KvReply::Batch(replies), undo);
        }
        let before = (self.revision, self.map.len());
        let mut w = Writes {
            new_revision: self
                .revision
                .checked_add(1)
                .expect("the revision counter cannot overflow 64 bits"),
            changed: false,
            undo: KvUndo::at(self.revision, self.compacted),
        };
        let result = match cmd {
            KvCommand::Put(p) => self
                .check_put_lease(p)
                .map(|()| KvReply::Put(self.put(p, &mut w))),
            KvCommand::DeleteRange(d) => Ok(KvReply::DeleteRange(self.delete_range(d, &mut w))),
            KvCommand::Txn(t) => self.txn(t, &mut w).map(KvReply::Txn),
            KvCommand::Compact(c) => Ok(KvReply::Compact(self.compact(c, &mut w.undo))),
            KvCommand::LeaseGrant(g) => self.grant(g, &mut w).map(KvReply::LeaseGrant),
            // An expire revokes only an expired lease (here never one: they expire as
            // ordered time moves; see `KvCommand::LeaseExpire`).
            KvCommand::LeaseRevoke(l) | KvCommand::LeaseExpire(l) => match self.leases.meta(l.id) {
                Some(m) => {
                    let expire = matches!(cmd, KvCommand::LeaseExpire(_));
                    if !expire || m.expiry_ms <= self.now_ms {
                        self.revoke(l.id, &mut w);
                    }
                    Ok(KvReply::LeaseRevoke(LeaseRevokeResponse {
                        revision: if w.changed {
                            w.new_revision
                        } else {
                            self.revision
                        },
                    }))
                }
                None => Err(KvError::LeaseNotFound(l.id)),
            },
            KvCommand::LeaseKeepAlive(l) => {
                Ok(KvReply::LeaseKeepAlive(self.keep_alive(l.id, &mut w)))
            }
            KvCommand::LeaseTimeToLive(l) => Ok(KvReply::LeaseTimeToLive(self.time_to_live(l))),
            KvCommand::LeaseLeases => {
                let (ids, remaining_ms) = self
                    .leases
                    .iter()
                    .map(|(id, m)| (id, m.expiry_ms.saturating_sub(self.now_ms)))
                    .unzip();
                Ok(KvReply::LeaseLeases(LeaseLeasesResponse {
                    ids,
                    remaining_ms,
                    revision: self.revision,
                }))
            }
            KvCommand::Range(_) | KvCommand::Events(_) | KvCommand::Hash(_) => {
                unreachable!("answered by read")
            }
            KvCommand::Batch(_) => unreachable!("handled above"),
        };
        let reply = result.unwrap_or_else(|error| {
            KvReply::Error(ErrorResponse {
                error,
                revision: self.revision,
            })
        });
        if w.changed {
            self.revision = w.new_revision;
            self.trim_events(&mut w.undo);
        }
        // A command creates one revision exactly when it changed something, and a
        // read-only command changes nothing.
        assert_eq!(w.changed, !w.undo.changes.is_empty());
        assert!(!is_read_only(cmd) || (self.revision, self.map.len()) == before);
        assert_eq!(reply.revision(), self.revision);
        (reply, w.undo)
    }

    /// Undo one command's effects (undos are applied newest first).
    pub fn undo(&mut self, undo: KvUndo) {
        if !undo.batch.is_empty() {
            for u in undo.batch.into_iter().rev() {
                self.undo(u);
            }
            assert_eq!(self.revision, undo.revision, "a batch undone in full");
            return;
        }
        assert!(
            undo.revision <= self.revision,
            "undo to revision {} from the older {}",
            undo.revision,
            self.revision
        );
        // Leases first: a key's entry before the change may name a lease the command
        // removed, which must be back before the key is.
        for (id, old) in undo.leases.into_iter().rev() {
            self.leases.set(id, old);
        }
        if let Some(picked) = undo.leases_picked {
            self.leases.picked = picked;
        }
        if let Some(now_ms) = undo.now_ms {
            self.now_ms = now_ms;
        }
        if undo.rearmed {
            self.rearm = true;
        }
        for (key, old) in undo.changes.into_iter().rev() {
            self.set(&key, old);
        }
        for _ in 0..undo.events_added {
            let e = self.events.pop_back().expect("the undone command added it");
            self.event_bytes -= event_bytes(&e);
            self.events_sum = self.events_sum.wrapping_sub(event_hash(&e));
        }
        for e in undo.events_dropped.into_iter().rev() {
            self.event_bytes += event_bytes(&e);
            self.events_sum = self.events_sum.wrapping_add(event_hash(&e));
            self.events.push_front(e);
        }
        self.compacted = undo.compacted;
        self.revision = undo.revision;
    }

    fn put(&mut self, p: &PutRequest, w: &mut Writes) -> PutResponse {
        let rev = w.new_revision;
        let new = |old: Option<&Entry>| match old {
            Some(old) => Entry::new(
                &p.key,
                p.value.clone(),
                old.create_revision,
                rev,
                old.version + 1,
                p.lease,
            ),
            None => Entry::new(&p.key, p.value.clone(), rev, rev, 1, p.lease),
        };
        // One search of the map: the entry is replaced in place when the key is there.
        let (kv, hash, old) = match self.map.get_mut(p.key.as_slice()) {
            Some(slot) => {
                let entry = new(Some(slot));
                (
                    entry.to_kv(&p.key, false),
                    entry.hash,
                    Some(std::mem::replace(slot, entry)),
                )
            }
            None => {
                let entry = new(None);
                let kv = entry.to_kv(&p.key, false);
                let hash = entry.hash;
                self.map.insert(p.key.clone(), entry);
                (kv, hash, None)
            }
        };
        self.account(&p.key, Some((hash, p.lease)), old.as_ref());
        let prev = old.as_ref().map(|o| o.to_kv(&p.key, false));
        let prev_kv = if p.prev_kv { prev.clone() } else { None };
        self.push_event(
            Event {
                kind: EventKind::Put,
                kv,
                prev_kv: prev,
            },
            &mut w.undo,
        );
        w.undo.changes.push((p.key.clone(), old));
        w.changed = true;
        PutResponse {
            revision: rev,
            prev_kv,
        }
    }

    /// The entries of a key range, in key order.
    fn entries_in<'s>(
        &'s self,
        range: KeyRange<'_>,
    ) -> Box<dyn Iterator<Item = (&'s Vec<u8>, &'s Entry)> + 's> {
        let bounds: (Bound<&[u8]>, Bound<&[u8]>) = match range {
            KeyRange::Single(k) => return Box::new(self.map.get_key_value(k).into_iter()),
            // BTreeMap::range panics on a start after the end; etcd answers nothing.
            _ if range.is_empty() => return Box::new(std::iter::empty()),
            KeyRange::From(from) => (Bound::Included(from), Bound::Unbounded),
            KeyRange::Between(from, to) => (Bound::Included(from), Bound::Excluded(to)),
        };
        Box::new(self.map.range::<[u8], _>(bounds))
    }

    /// A range read at the store's current contents, or at `r.revision` from the event
    /// history, reporting `revision` (the store's, or inside a transaction that wrote,
    /// the new one).
    fn range(&self, r: &RangeRequest, revision: u64) -> Result<RangeResponse, KvError> {
        let limit = match r.limit {
            0 => usize::MAX,
            n => usize::try_from(n).unwrap_or(usize::MAX),
        };
        let mut kvs = Vec::new();
        let mut count = 0u64;
        let range = KeyRange::new(&r.key, &r.end);
        if r.revision != 0 && r.revision != revision {
            if r.revision > revision {
                return Err(KvError::FutureRevision(revision));
            }
            if r.revision < self.compacted {
                return Err(KvError::Compacted(self.compacted));
            }
            for mut kv in self.entries_at(range, r.revision) {
                count += 1;
                if !r.count_only && kvs.len() < limit {
                    if r.keys_only {
                        kv.value.clear();
                    }
                    kvs.push(kv);
                }
            }
        } else {
            for (k, e) in self.entries_in(range) {
                count += 1;
                if !r.count_only && kvs.len() < limit {
                    kvs.push(e.to_kv(k, r.keys_only));
                }
            }
        }
        // etcd: `more` when entries were left out by the limit (never with count_only,
        // which returns none by request).
        let more = !r.count_only && (kvs.len() as u64) < count;
        Ok(RangeResponse {
            kvs,
            count,
            more,
            revision,
        })
    }

    /// [`HashRequest`]: CRC-32C of the pairs as they were at the revision, then of the
    /// events kept up to it and the compaction; or of the whole snapshot.
    fn hash(&self, h: &HashRequest) -> Result<HashResponse, KvError> {
        let rev = match h.revision {
            0 => self.revision,
            r => r,
        };
        if rev > self.revision {
            return Err(KvError::FutureRevision(self.revision));
        }
        if rev < self.compacted {
            return Err(KvError::Compacted(self.compacted));
        }
        let (hash, size) = if h.store {
            let snapshot = self.snapshot();
            (crc32c::crc32c(&snapshot), snapshot.len())
        } else {
            let kv_bytes = |c: u32, kv: &KeyValue| {
                let mut c = crc32c::crc32c_append(c, &(kv.key.len() as u64).to_le_bytes());
                c = crc32c::crc32c_append(c, &kv.key);
                c = crc32c::crc32c_append(c, &(kv.value.len() as u64).to_le_bytes());
                c = crc32c::crc32c_append(c, &kv.value);
                for n in [
                    kv.create_revision,
                    kv.mod_revision,
                    kv.version,
                    kv.lease as u64,
                ] {
                    c = crc32c::crc32c_append(c, &n.to_le_bytes());
                }
                c
            };
            let mut c = 0;
            if rev == self.revision {
                // Today's pairs, read in place.
                for (k, e) in &self.map {
                    c = kv_bytes(c, &e.to_kv(k, false));
                }
            } else {
                for kv in self.entries_at(KeyRange::From(&[]), rev) {
                    c = kv_bytes(c, &kv);
                }
            }
            for e in self.events.iter().take_while(|e| e.revision() <= rev) {
                c = crc32c::crc32c_append(c, &[u8::from(e.kind == EventKind::Delete)]);
                c = kv_bytes(c, &e.kv);
                if let Some(p) = &e.prev_kv {
                    c = kv_bytes(c, p);
                }
            }
            (
                crc32c::crc32c_append(c, &self.compacted.to_le_bytes()),
                self.snapshot_len(),
            )
        };
        Ok(HashResponse {
            hash,
            hash_revision: rev,
            compact_revision: self.compacted,
            size: size as u64,
            revision: self.revision,
        })
    }

    /// The pairs of `range` as they were at revision `rev` (at or above the
    /// compaction): today's, with every change after `rev` undone from the event
    /// history, newest first (each event holds the pair before it).
    fn entries_at(&self, range: KeyRange<'_>, rev: u64) -> Vec<KeyValue> {
        let mut at: BTreeMap<Vec<u8>, KeyValue> = self
            .entries_in(range)
            .map(|(k, e)| (k.clone(), e.to_kv(k, false)))
            .collect();
        for e in self.events.iter().rev() {
            if e.revision() <= rev {
                break;
            }
            if !range.contains(&e.kv.key) {
                continue;
            }
            match &e.prev_kv {
                Some(p) => at.insert(p.key.clone(), p.clone()),
                None => at.remove(&e.kv.key),
            };
        }
        at.into_values().collect()
    }

    fn delete_range(&mut self, d: &DeleteRangeRequest, w: &mut Writes) -> DeleteRangeResponse {
        let keys: Vec<Vec<u8>> = self
            .entries_in(KeyRange::new(&d.key, &d.end))
            .map(|(k, _)| k.clone())
            .collect();
        let mut prev_kvs = Vec::new();
        let deleted = keys.len() as u64;
        for k in keys {
            let old = self.delete_key(k, w);
            if d.prev_kv {
                prev_kvs.push(old);
            }
        }
        DeleteRangeResponse {
            deleted,
            prev_kvs,
            revision: if w.changed {
                w.new_revision
            } else {
                self.revision
            },
        }
    }

    /// Delete `key` (which exists) at `w`'s revision; returns the pair deleted.
    fn delete_key(&mut self, k: Vec<u8>, w: &mut Writes) -> KeyValue {
        let old = self.set(&k, None).expect("the key exists");
        let prev = old.to_kv(&k, false);
        let event = Event {
            kind: EventKind::Delete,
            kv: KeyValue {
                key: k.clone(),
                value: Vec::new(),
                create_revision: 0,
                mod_revision: w.new_revision,
                version: 0,
                lease: 0,
            },
            prev_kv: Some(prev.clone()),
        };
        self.push_event(event, &mut w.undo);
        w.undo.changes.push((k, Some(old)));
        w.changed = true;
        prev
    }

    /// etcd's `applyCompare` for one key (compare ranges are not supported).
    fn compare(&self, c: &Compare) -> bool {
        let e = self.map.get(c.key.as_slice());
        let (create, modr, version, lease) = e.map_or((0, 0, 0, 0), |e| {
            (e.create_revision, e.mod_revision, e.version, e.lease)
        });
        match &c.target {
            CompareTarget::Value(v) => match e {
                Some(e) => c.op.holds(e.value.as_slice().cmp(v.as_slice())),
                // A missing key has no value to compare: false, whatever the operator.
                None => false,
            },
            CompareTarget::Version(v) => c.op.holds(version.cmp(v)),
            CompareTarget::CreateRevision(v) => c.op.holds(create.cmp(v)),
            CompareTarget::ModRevision(v) => c.op.holds(modr.cmp(v)),
            CompareTarget::Lease(v) => c.op.holds(lease.cmp(v)),
        }
    }

    /// A transaction's compares, and the branch they choose, checked as etcd does: the
    /// branch's puts name leases that exist, and its ranges revisions that are kept and
    /// not in the future, or nothing runs.
    fn txn_branch<'t>(&self, t: &'t TxnRequest) -> Result<(bool, &'t [RequestOp]), KvError> {
        let succeeded = t.compare.iter().all(|c| self.compare(c));
        let ops = if succeeded { &t.success } else { &t.failure };
        for op in ops {
            match op {
                RequestOp::Put(p) => self.check_put_lease(p)?,
                RequestOp::Range(r) if r.revision > self.revision => {
                    return Err(KvError::FutureRevision(self.revision))
                }
                RequestOp::Range(r) if r.revision != 0 && r.revision < self.compacted => {
                    return Err(KvError::Compacted(self.compacted))
                }
                _ => {}
            }
        }
        Ok((succeeded, ops))
    }

    fn txn(&mut self, t: &TxnRequest, w: &mut Writes) -> Result<TxnResponse, KvError> {
        let (succeeded, ops) = self.txn_branch(t)?;
        let mut responses = Vec::with_capacity(ops.len());
        for op in ops {
            responses.push(match op {
                RequestOp::Put(p) => ResponseOp::Put(self.put(p, w)),
                RequestOp::Range(r) => {
                    let seen = if w.changed {
                        w.new_revision
                    } else {
                        self.revision
                    };
                    ResponseOp::Range(self.range(r, seen)?)
                }
                RequestOp::DeleteRange(d) => ResponseOp::DeleteRange(self.delete_range(d, w)),
            });
        }
        Ok(TxnResponse {
            succeeded,
            responses,
            revision: if w.changed {
                w.new_revision
            } else {
                self.revision
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str, c: u64, m: u64, v: u64) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: value.into(),
            create_revision: c,
            mod_revision: m,
            version: v,
            lease: 0,
        }
    }

    fn run(s: &mut KvStore, cmd: KvCommand) -> KvReply {
        check(&cmd).unwrap();
        s.execute(&cmd).0
    }

    #[test]
    fn revisions_and_versions_follow_etcd() {
        let mut s = KvStore::new();
        assert_eq!(s.revision(), 1);
        let r = run(&mut s, KvCommand::put("a", "1"));
        assert_eq!(r.revision(), 2);
        run(&mut s, KvCommand::put("a", "2"));
        assert_eq!(s.get(b"a"), Some(kv("a", "2", 2, 3, 2)));
        // Reading and deleting nothing leave the revision alone.
        assert_eq!(run(&mut s, KvCommand::get("zz")).revision(), 3);
        let KvReply::DeleteRange(d) = run(&mut s, KvCommand::delete("zz")) else {
            panic!()
        };
        assert_eq!((d.deleted, d.revision), (0, 3));
        let KvReply::DeleteRange(d) = run(&mut s, KvCommand::delete("a")) else {
            panic!()
        };
        assert_eq!((d.deleted, d.revision), (1, 4));
        // Created anew: version 1 and a new create revision.
        run(&mut s, KvCommand::put("a", "3"));
        assert_eq!(s.get(b"a"), Some(kv("a", "3", 5, 5, 1)));
    }

    #[test]
    fn put_returns_the_previous_pair_when_asked() {
        let mut s = KvStore::new();
        let put = |prev_kv| {
            KvCommand::Put(PutRequest {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
                prev_kv,
                lease: 0,
            })
        };
        let KvReply::Put(p) = run(&mut s, put(true)) else {
            panic!()
        };
        assert_eq!(p.prev_kv, None);
        let KvReply::Put(p) = run(&mut s, put(true)) else {
            panic!()
        };
        assert_eq!(p.prev_kv, Some(kv("k", "v", 2, 2, 1)));
        let KvReply::Put(p) = run(&mut s, put(false)) else {
            panic!()
        };
        assert_eq!(p.prev_kv, None);
    }

    #[test]
    fn ranges_follow_etcd_conventions() {
        let mut s = KvStore::new();
        for k in ["a", "b", "ba", "c", "d"] {
            run(&mut s, KvCommand::put(k, k));
        }
        let keys = |r: KvReply| -> (Vec<String>, u64, bool) {
            let KvReply::Range(r) = r else { panic!() };
            (
                r.kvs
                    .iter()
                    .map(|kv| String::from_utf8(kv.key.clone()).unwrap())
                    .collect(),
                r.count,
                r.more,
            )
        };
        assert_eq!(keys(run(&mut s, KvCommand::get("b"))).0, ["b"]);
        assert_eq!(keys(run(&mut s, KvCommand::range("b", "c"))).0, ["b", "ba"]);
        assert_eq!(keys(run(&mut s, KvCommand::prefix("b"))).0, ["b", "ba"]);
        assert_eq!(
            keys(run(&mut s, KvCommand::range("b", "\0"))).0,
            ["b", "ba", "c", "d"]
        );
        assert_eq!(keys(run(&mut s, KvCommand::range("c", "a"))).1, 0);
        let limited = KvCommand::Range(RangeRequest {
            limit: 2,
            ..RangeRequest::new("a", "\0")
        });
        assert_eq!(
            keys(run(&mut s, limited)),
            (vec!["a".into(), "b".into()], 5, true)
        );
        let counted = KvCommand::Range(RangeRequest {
            count_only: true,
            limit: 1,
            ..RangeRequest::new("a", "\0")
        });
        assert_eq!(keys(run(&mut s, counted)), (vec![], 5, false));
        let KvReply::Range(r) = run(
            &mut s,
            KvCommand::Range(RangeRequest {
                keys_only: true,
                ..RangeRequest::get("c")
            }),
        ) else {
            panic!()
        };
        assert_eq!(r.kvs, vec![kv("c", "", 5, 5, 1)]);
    }

    #[test]
    fn transactions_compare_then_write_at_one_revision() {
        let mut s = KvStore::new();
        run(&mut s, KvCommand::put("a", "1"));
        let txn = |c: Compare| {
            KvCommand::Txn(TxnRequest {
                compare: vec![c],
                success: vec![
                    RequestOp::Range(RangeRequest::get("b")),
                    RequestOp::Put(PutRequest {
                        key: b"b".to_vec(),
                        value: b"x".to_vec(),
                        prev_kv: false,
                        lease: 0,
                    }),
                    RequestOp::Put(PutRequest {
                        key: b"c".to_vec(),
                        value: b"y".to_vec(),
                        prev_kv: false,
                        lease: 0,
                    }),
                    RequestOp::Range(RangeRequest::new("a", "\0")),
                ],
                failure: vec![RequestOp::Range(RangeRequest::get("a"))],
            })
        };
        let absent_value = Compare {
            key: b"zz".to_vec(),
            op: CompareOp::NotEqual,
            target: CompareTarget::Value(b"q".to_vec()),
        };
        let KvReply::Txn(t) = run(&mut s, txn(absent_value)) else {
            panic!()
        };
        assert!(!t.succeeded);
        assert_eq!(t.revision, 2);
        let version0 = Compare {
            key: b"zz".to_vec(),
            op: CompareOp::Equal,
            target: CompareTarget::Version(0),
        };
        let KvReply::Txn(t) = run(&mut s, txn(version0)) else {
            panic!()
        };
        assert!(t.succeeded);
        assert_eq!(t.revision, 3);
        let ResponseOp::Range(before) = &t.responses[0] else {
            panic!()
        };
        assert_eq!((before.count, before.revision), (0, 2));
        let ResponseOp::Range(after) = &t.responses[3] else {
            panic!()
        };
        assert_eq!(after.revision, 3);
        assert_eq!(
            after.kvs,
            vec![
                kv("a", "1", 2, 2, 1),
                kv("b", "x", 3, 3, 1),
                kv("c", "y", 3, 3, 1)
            ]
        );
        let newer = Compare {
            key: b"a".to_vec(),
            op: CompareOp::Less,
            target: CompareTarget::ModRevision(3),
        };
        let KvReply::Txn(t) = run(&mut s, txn(newer)) else {
            panic!()
        };
        assert!(t.succeeded);
        assert_eq!(s.get(b"b"), Some(kv("b", "x", 3, 4, 2)));
    }

    #[test]
    fn undo_restores_revision_metadata_and_digest() {
        let mut s = KvStore::new();
        run(&mut s, KvCommand::put("a", "1"));
        run(&mut s, KvCommand::put("b", "1"));
        let before = s.clone();
        let d0 = s.digest();
        let (_, u1) = s.execute(&KvCommand::put("a", "2"));
        let (_, u2) = s.execute(&KvCommand::delete_range("a", "\0"));
        let (_, u3) = s.execute(&KvCommand::put("a", "3"));
        assert_ne!(s.digest(), d0);
        s.undo(u3);
        s.undo(u2);
        s.undo(u1);
        assert_eq!(s, before);
        assert_eq!(s.digest(), d0);
    }

    fn events(s: &mut KvStore, key: &str, end: &str, start: u64, limit: u64) -> EventsResponse {
        let KvReply::Events(e) = run(
            s,
            KvCommand::Events(EventsRequest {
                key: key.into(),
                end: end.into(),
                start_revision: start,
                limit,
            }),
        ) else {
            panic!()
        };
        e
    }

    #[test]
    fn the_event_history_serves_watches_until_compacted() {
        let mut s = KvStore::new();
        run(&mut s, KvCommand::put("a", "1")); // 2
        run(&mut s, KvCommand::put("b", "1")); // 3
        run(&mut s, KvCommand::put("a", "2")); // 4
        run(&mut s, KvCommand::delete_range("a", "c")); // 5: two deletes
        let e = events(&mut s, "a", "", 1, 0);
        let kinds: Vec<(EventKind, u64)> =
            e.events.iter().map(|e| (e.kind, e.revision())).collect();
        assert_eq!(
            kinds,
            [
                (EventKind::Put, 2),
                (EventKind::Put, 4),
                (EventKind::Delete, 5)
            ]
        );
        assert_eq!(e.events[1].prev_kv, Some(kv("a", "1", 2, 2, 1)));
        assert_eq!(e.events[2].prev_kv, Some(kv("a", "2", 2, 4, 2)));
        assert_eq!(e.events[2].kv, kv("a", "", 0, 5, 0));
        // From now: nothing yet; a limit never splits a revision.
        assert!(events(&mut s, "a", "\0", 0, 0).events.is_empty());
        let e = events(&mut s, "a", "\0", 4, 1);
        assert_eq!(e.events.len(), 1);
        assert!(e.more);
        let e = events(&mut s, "a", "\0", 5, 1);
        assert_eq!((e.events.len(), e.more), (2, false));
        // Compaction: refused into the future and below itself, as etcd's.
        let compact = |s: &mut KvStore, revision| {
            let KvReply::Compact(c) = run(s, KvCommand::Compact(CompactRequest { revision }))
            else {
                panic!()
            };
            c
        };
        assert!(compact(&mut s, 6).error.unwrap().contains("future"));
        let digest = s.digest();
        let (_, undo) = s.execute(&KvCommand::Compact(CompactRequest { revision: 4 }));
        assert_ne!(s.digest(), digest);
        assert_eq!(events(&mut s, "a", "\0", 3, 0).compacted, Some(4));
        assert_eq!(events(&mut s, "a", "\0", 4, 0).events.len(), 3);
        s.undo(undo);
        assert_eq!(s.digest(), digest);
        assert_eq!(events(&mut s, "a", "\0", 2, 0).events.len(), 5);
        assert!(compact(&mut s, 4).error.is_none());
        assert!(compact(&mut s, 4).error.unwrap().contains("compacted"));
        assert_eq!(s.compacted(), 4);
    }

    #[test]
    fn the_history_is_bounded_by_dropping_whole_old_revisions() {
        let mut s = KvStore::new();
        for i in 0..EVENTS_MAX as u64 {
            s.execute(&KvCommand::put(format!("k{}", i % 10), "v"));
        }
        assert_eq!(s.compacted(), 0);
        let before = s.clone();
        let (_, undo) = s.execute(&KvCommand::put("x", "v"));
        assert_eq!(s.events().count(), EVENTS_MAX);
        assert_eq!(s.compacted(), 3, "revision 2 dropped");
        assert_eq!(events(&mut s, "k", "\0", 2, 0).compacted, Some(3));
        s.undo(undo);
        assert_eq!(s, before);
        assert_eq!(s.digest(), before.digest());
    }
}
