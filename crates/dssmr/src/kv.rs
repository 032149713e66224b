//! The key-value store (`partita_kv`, etcd's data model) as an [`ObjectService`], so
//! that S-SMR and DS-SMR (paper 003) partition it: `service = "kv"` with
//! `[execution] model = "ssmr"` or `"dssmr"`.
//!
//! - **Objects.** A key is an object: its id is a 64-bit hash of the key, and the
//!   object holds every key of that hash (one, short of a collision), with its value,
//!   revisions and version. Objects are implicit ([`ObjectService::implicit`]): every
//!   id exists from the start, empty, in the partition the static map hashes it to,
//!   so a put needs no create and a delete leaves an empty object behind.
//! - **Commands.** A put, a single-key read or delete, and a transaction name the
//!   objects of their keys: DS-SMR moves them into one partition and runs the command
//!   there; S-SMR sends it to every partition that holds one. A range over keys (a
//!   range read, a delete range, or a transaction holding one) cannot name its
//!   objects: it runs at every data partition, each sending the others its objects
//!   with keys in the range ([`ObjectService::scans`]), so every destination sees the
//!   whole range as of the command's place in the order, and each writes its own.
//!   Each execution builds a [`KvStore`] of the keys it sees and runs the command on
//!   it: the store's own code decides compares, limits, counts and `prev_kv`, as for
//!   an unpartitioned store.
//! - **Revisions.** A store-wide counter would be an object every write touches, in
//!   one partition: no scaling. Instead a command's revision is its position in the
//!   order ([`View::position`], [`crate::server::position`]): the ordering's instance
//!   name, then the command's place in the instance (a Lamport clock of the members
//!   inside the instance). Every partition that runs a command gives it the same
//!   revision; revisions are unique to a command and grow along every partition's
//!   delivery; on one ordered stream (Ring Paxos, Multi-Paxos) a write that starts
//!   after another finished has a larger revision, whichever partitions they ran in
//!   (etcd's guarantee; Multi-Ring Paxos orders rings with each other only where a
//!   learner merges them, so the cluster-file check refuses it here); a
//!   transaction's changes share one. A write's reply reports its revision; a read's
//!   the revision just before its own, which is larger than every write it sees and
//!   smaller than every write it does not. Unlike etcd's, revisions are not dense
//!   (the next write's revision is not this one plus one) and they are large.
//!   Compares on `mod_revision`, `create_revision` and `version`, and the lock and
//!   election recipes that order keys by `create_revision`, work as on etcd.
//! - **History.** Each object keeps the newest changes of its keys ([`KvObject`]: at
//!   most [`EVENTS_PER_OBJECT`], each with the pair before it), so watches (event
//!   reads, `KvCommand::Events`) and reads at past revisions work: the execution
//!   merges the histories of the objects it sees by revision. A change older than
//!   what an object kept is compacted for that object alone: a watch or read from
//!   before it is refused as compacted (etcd's answer after a compaction). An event
//!   read over a range runs at every partition like a range read; its revision is
//!   the command's, and every change below it in every partition has executed, so a
//!   watcher that goes on from there misses none.
//! - **Leases.** A lease is an object too ([`lease_object`], holding a [`KvLease`]),
//!   so a grant names its id (the client picks one for a grant of id 0). Grants,
//!   keep-alives and times to live name the lease's object; a put with a lease names
//!   it beside the key's, and fails if it is missing or expired. A key's pair records
//!   its lease; no lease records its keys (that list would go stale when a key in
//!   another partition changed lease), so a revoke, a time to live with keys and the
//!   lease list are scans: every partition picks its keys attached to the lease (or
//!   its lease objects) and the execution's store revokes as the one store does, every
//!   attached key deleted in one revision. Time is ordered time ([`View::now_ms`]):
//!   the stamp of the value that delivered the command, the same at every
//!   destination. No partition holds every lease, so none expires them as it
//!   executes: `KvCommand::LeaseExpire`, which the etcd gateways order for the leases
//!   they find expired, revokes a lease only if it has expired at its own place in the
//!   order; until then an expired lease is gone to puts and keep-alives.
//! - **Compaction.** A store-wide compaction runs at every partition, each trimming
//!   its own objects' histories below it (nothing is exchanged: [`View::local_picked`]);
//!   the newest one's revision is kept in an object of its own
//!   ([`compaction_object`]), which only compactions name, so that one at or below it
//!   is refused as etcd refuses it. A read from below it that sees an object with
//!   changes below it is refused as compacted; one that sees none is answered, rightly,
//!   from the history it sees (etcd would refuse it).
//! - **Refused** ([`supported`]), because they need what no partition keeps: the
//!   store's hash, and batches (each request of one takes a revision of its own).

use crate::{Kind, ObjectId, ObjectService, Scanner, View};
use partita_kv::store::event_bytes;
use partita_kv::{
    check, is_read_only, CompactResponse, ErrorResponse, Event, KeyRange, KeyValue, KvCommand,
    KvError, KvReply, KvStore, RequestOp, ResponseOp, COMPACTED_ALREADY, COMPACT_IN_FUTURE,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Most changes an object keeps in its history ([`KvObject::events`]): beyond, its
/// oldest revisions are dropped, as by a compaction of that object alone ...
pub const EVENTS_PER_OBJECT: usize = 32;
/// ... and most key and value bytes (before and after) they hold; the newest revision
/// is kept whatever its size.
pub const EVENT_BYTES_PER_OBJECT: usize = 1 << 20;

/// One object: the keys of one hash, with their newest changes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvObject {
    /// The keys, in key order.
    pub keys: Vec<KeyValue>,
    /// The newest changes of these keys (deletes too), oldest first, each with the
    /// pair before it: what watches and reads at past revisions read. At most
    /// [`EVENTS_PER_OBJECT`] and [`EVENT_BYTES_PER_OBJECT`], whole revisions.
    pub events: Vec<Event>,
    /// Changes below this revision are gone from `events` (0: none was dropped).
    pub compacted: u64,
    /// The lease this object holds, if it is that lease's object ([`lease_object`]).
    pub lease: Option<KvLease>,
}

/// A lease, held by the object [`lease_object`] names for its id: granted, renewed and
/// revoked there, and read by every put that attaches a key to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvLease {
    pub id: i64,
    /// The TTL granted, in seconds.
    pub ttl: i64,
    /// Ordered time (ms, [`View::now_ms`]) at which it expires.
    pub expiry_ms: u64,
}

impl KvObject {
    /// The object without its history (for a command that does not read it).
    fn keys_only(&self) -> KvObject {
        KvObject {
            keys: self.keys.clone(),
            events: Vec::new(),
            compacted: self.compacted,
            lease: self.lease,
        }
    }

    /// Keep the history within its bounds, dropping whole revisions, never the
    /// newest.
    fn trim(&mut self) {
        let mut bytes: usize = self.events.iter().map(event_bytes).sum();
        while self.events.len() > EVENTS_PER_OBJECT || bytes > EVENT_BYTES_PER_OBJECT {
            let oldest = self.events[0].revision();
            if self.events.last().map(Event::revision) == Some(oldest) {
                break;
            }
            let n = self
                .events
                .iter()
                .take_while(|e| e.revision() == oldest)
                .count();
            bytes -= self
                .events
                .drain(..n)
                .map(|e| event_bytes(&e))
                .sum::<usize>();
            self.compacted = oldest + 1;
        }
    }
}

/// The key-value store partitioned by S-SMR or DS-SMR.
pub struct KvObjects;

/// The object that holds `key`.
pub fn key_object(key: &[u8]) -> ObjectId {
    partita_service::stable_hash(key)
}

/// The object that holds lease `id` (an object of its own hash; a key whose hash is
/// the same shares it, holding its pair beside the lease).
pub fn lease_object(id: i64) -> ObjectId {
    let mut name = b"\0lease:".to_vec();
    name.extend_from_slice(&id.to_be_bytes());
    partita_service::stable_hash(&name)
}

/// The object that holds the store-wide compaction (the revision of the newest, in
/// its [`KvObject::compacted`]): only compactions name it.
pub fn compaction_object() -> ObjectId {
    partita_service::stable_hash(b"\0compaction")
}

/// The leases `cmd` names: the one a lease command is about, and those its puts
/// attach keys to.
fn lease_ids(cmd: &KvCommand) -> Vec<i64> {
    let put = |o: &RequestOp| match o {
        RequestOp::Put(p) if p.lease != 0 => Some(p.lease),
        _ => None,
    };
    match cmd {
        KvCommand::Put(p) if p.lease != 0 => vec![p.lease],
        KvCommand::Txn(t) => t.success.iter().chain(&t.failure).filter_map(put).collect(),
        KvCommand::LeaseGrant(g) => vec![g.id],
        KvCommand::LeaseRevoke(l)
        | KvCommand::LeaseExpire(l)
        | KvCommand::LeaseKeepAlive(l)
        | KvCommand::LeaseTimeToLive(l) => vec![l.id],
        _ => Vec::new(),
    }
}

/// What a lease command must find in every partition: the keys attached to a lease
/// (a revoke deletes them, a time-to-live with keys lists them), or every lease.
#[derive(Clone, Copy)]
enum LeaseScan {
    KeysOf(i64),
    Leases,
}

fn lease_scan(cmd: &KvCommand) -> Option<LeaseScan> {
    match cmd {
        KvCommand::LeaseRevoke(l) | KvCommand::LeaseExpire(l) => Some(LeaseScan::KeysOf(l.id)),
        KvCommand::LeaseTimeToLive(l) if l.keys => Some(LeaseScan::KeysOf(l.id)),
        KvCommand::LeaseLeases => Some(LeaseScan::Leases),
        _ => None,
    }
}

/// Whether `reply` says its command changed something, and so took its position as
/// its revision (a read, a delete of nothing or a transaction that wrote nothing
/// reports the position before its own).
pub fn changed(reply: &KvReply) -> bool {
    match reply {
        KvReply::Put(_) => true,
        KvReply::DeleteRange(d) => d.deleted > 0,
        KvReply::Txn(t) => t.responses.iter().any(|r| match r {
            ResponseOp::Put(_) => true,
            ResponseOp::DeleteRange(d) => d.deleted > 0,
            ResponseOp::Range(_) => false,
        }),
        _ => false,
    }
}

/// Whether S-SMR and DS-SMR serve `cmd` (the reason when not): the client refuses it
/// before sending, and a replica that gets it anyway answers
/// [`KvError::Unsupported`].
pub fn supported(cmd: &KvCommand) -> Result<(), String> {
    const WHY: &str = "S-SMR and DS-SMR partition the keys and keep no store-wide \
                       digest or counter";
    match cmd {
        KvCommand::Put(_)
        | KvCommand::Range(_)
        | KvCommand::DeleteRange(_)
        | KvCommand::Events(_)
        | KvCommand::Txn(_)
        | KvCommand::LeaseRevoke(_)
        | KvCommand::LeaseExpire(_)
        | KvCommand::LeaseKeepAlive(_)
        | KvCommand::LeaseTimeToLive(_)
        | KvCommand::LeaseLeases
        | KvCommand::Compact(_) => Ok(()),
        KvCommand::LeaseGrant(g) if g.id != 0 => Ok(()),
        KvCommand::LeaseGrant(_) => Err(
            "a grant of lease id 0 (a lease is an object named by its id, so the client \
             picks the id: partita's clients do)"
                .into(),
        ),
        KvCommand::Batch(_) => Err(format!(
            "a batch (each request takes a revision of its own; send them one by one): {WHY}"
        )),
        other => Err(format!("{}: {WHY}", other.name())),
    }
}

/// The key ranges `cmd` reads or deletes that name no single key.
fn ranges(cmd: &KvCommand) -> Vec<KeyRange<'_>> {
    fn push<'a>(key: &'a [u8], end: &'a [u8], out: &mut Vec<KeyRange<'a>>) {
        let r = KeyRange::new(key, end);
        if !matches!(r, KeyRange::Single(_)) {
            out.push(r);
        }
    }
    let mut out = Vec::new();
    match cmd {
        KvCommand::Range(r) => push(&r.key, &r.end, &mut out),
        KvCommand::DeleteRange(d) => push(&d.key, &d.end, &mut out),
        KvCommand::Events(e) => push(&e.key, &e.end, &mut out),
        KvCommand::Txn(t) => {
            for o in t.success.iter().chain(&t.failure) {
                match o {
                    RequestOp::Range(r) => push(&r.key, &r.end, &mut out),
                    RequestOp::DeleteRange(d) => push(&d.key, &d.end, &mut out),
                    RequestOp::Put(_) => {}
                }
            }
        }
        _ => {}
    }
    out
}

/// The oldest revision `cmd` reads at (a read at a past revision, or the start of an
/// event read), if any: an object that compacted changes above it must be seen, for
/// its compaction to be known, whatever keys it holds now.
fn floor(cmd: &KvCommand) -> Option<u64> {
    let past = |r: u64| (r != 0).then_some(r);
    match cmd {
        KvCommand::Range(r) => past(r.revision),
        KvCommand::Events(e) => past(e.start_revision),
        KvCommand::Txn(t) => t
            .success
            .iter()
            .chain(&t.failure)
            .filter_map(|o| match o {
                RequestOp::Range(r) => past(r.revision),
                _ => None,
            })
            .min(),
        _ => None,
    }
}

/// The single keys `cmd` names (puts, compares, single-key reads and deletes).
fn keys(cmd: &KvCommand) -> Vec<&[u8]> {
    let single = |key: &[u8], end: &[u8]| matches!(KeyRange::new(key, end), KeyRange::Single(_));
    let mut out: Vec<&[u8]> = Vec::new();
    match cmd {
        KvCommand::Put(p) => out.push(&p.key),
        KvCommand::Range(r) if single(&r.key, &r.end) => out.push(&r.key),
        KvCommand::DeleteRange(d) if single(&d.key, &d.end) => out.push(&d.key),
        KvCommand::Events(e) if single(&e.key, &e.end) => out.push(&e.key),
        KvCommand::Txn(t) => {
            out.extend(t.compare.iter().map(|c| c.key.as_slice()));
            for o in t.success.iter().chain(&t.failure) {
                match o {
                    RequestOp::Put(p) => out.push(&p.key),
                    RequestOp::Range(r) if single(&r.key, &r.end) => out.push(&r.key),
                    RequestOp::DeleteRange(d) if single(&d.key, &d.end) => out.push(&d.key),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    out
}

impl ObjectService for KvObjects {
    const NAME: &'static str = "kv";
    type Object = KvObject;
    type Command = KvCommand;
    type Reply = KvReply;

    fn kind(cmd: &KvCommand) -> Kind {
        let mut ids: BTreeSet<ObjectId> = keys(cmd).into_iter().map(key_object).collect();
        ids.extend(lease_ids(cmd).into_iter().map(lease_object));
        if let KvCommand::Compact(_) = cmd {
            ids.insert(compaction_object());
        }
        Kind::Access(ids.into_iter().collect())
    }

    fn implicit() -> Option<KvObject> {
        Some(KvObject::default())
    }

    /// A compaction runs at every partition too, each trimming its own objects; its
    /// scanner picks nothing, so nothing is exchanged for it.
    fn scans(cmd: &KvCommand) -> bool {
        !ranges(cmd).is_empty() || lease_scan(cmd).is_some() || matches!(cmd, KvCommand::Compact(_))
    }

    /// The objects holding a key in one of the command's ranges, or a change of one
    /// in their history, or that compacted changes the command reads; for a lease
    /// command, those holding a key attached to its lease, or every lease.
    fn scanner<'c>(cmd: &'c KvCommand) -> Scanner<'c, KvObject> {
        let rs = ranges(cmd);
        let floor = floor(cmd);
        let leases = lease_scan(cmd);
        Box::new(move |_, obj| {
            let ours = |key: &[u8]| rs.iter().any(|r| r.contains(key));
            obj.keys.iter().any(|kv| ours(&kv.key))
                || obj.events.iter().any(|e| ours(&e.kv.key))
                || floor.is_some_and(|f| obj.compacted > f)
                || match leases {
                    Some(LeaseScan::KeysOf(id)) => obj.keys.iter().any(|kv| kv.lease == id),
                    Some(LeaseScan::Leases) => obj.lease.is_some(),
                    None => false,
                }
        })
    }

    /// Keys only, unless the command reads the history (a read at a past revision, an
    /// event read from one): another destination's changes of its own keys are its
    /// own to record.
    fn exchanged(cmd: &KvCommand, obj: &KvObject) -> Option<KvObject> {
        floor(cmd).is_none().then(|| obj.keys_only())
    }

    fn create(_cmd: &KvCommand) -> KvObject {
        KvObject::default()
    }

    fn execute(cmd: &KvCommand, view: &mut View<'_, KvObject>) -> KvReply {
        // Reads report the revision before their own: every write they see is at or
        // below it.
        let position = view.position();
        let revision = position.saturating_sub(1);
        if let Err(why) = check(cmd).and_then(|()| supported(cmd)) {
            return KvReply::Error(ErrorResponse {
                error: KvError::Unsupported(why),
                revision,
            });
        }
        if let KvCommand::Compact(c) = cmd {
            return KvReply::Compact(compact(c.revision, revision, view));
        }
        // The objects as this execution reads them: with their histories only when it
        // reads history (a read at a past revision, an event read from one).
        let history = floor(cmd).is_some();
        let copy = |o: &KvObject| match history {
            true => o.clone(),
            false => o.keys_only(),
        };
        let mut seen: BTreeMap<ObjectId, KvObject> = BTreeMap::new();
        if let Kind::Access(named) = Self::kind(cmd) {
            for id in named {
                if let Some(o) = view.get(id) {
                    seen.insert(id, copy(o));
                }
            }
        }
        for (id, mut o) in view.scan(Self::scanner(cmd)) {
            if !history {
                o.events.clear();
            }
            seen.entry(id).or_insert(o);
        }
        // The histories merged by revision (objects in id order within one, the same
        // at every destination); compacted up to the newest object's compaction.
        let mut events: Vec<Event> = seen
            .values_mut()
            .flat_map(|o| std::mem::take(&mut o.events))
            .collect();
        events.sort_by_key(Event::revision);
        let compacted = seen.values().map(|o| o.compacted).max().unwrap_or(0);
        // A grant whose id's object holds another lease (two ids of one hash): that
        // id is taken, as far as this store can tell.
        if let KvCommand::LeaseGrant(g) = cmd {
            if view
                .get(lease_object(g.id))
                .and_then(|o| o.lease)
                .is_some_and(|l| l.id != g.id)
            {
                return KvReply::Error(ErrorResponse {
                    error: KvError::LeaseExists(g.id),
                    revision,
                });
            }
        }
        let leases: Vec<KvLease> = seen.values().filter_map(|o| o.lease).collect();
        let mut store = KvStore::partial(
            seen.values().flat_map(|o| o.keys.iter().cloned()),
            events,
            compacted,
            revision,
            leases.iter().map(|l| (l.id, l.ttl, l.expiry_ms)),
            view.now_ms(),
        );
        let (reply, _) = store.execute(cmd);
        if is_read_only(cmd) {
            return reply;
        }
        // The leases the command granted, renewed or revoked, in their objects (only
        // this member's: the lease's partition writes it).
        for id in lease_ids(cmd) {
            let after = store
                .lease(id)
                .map(|(ttl, expiry_ms)| KvLease { id, ttl, expiry_ms });
            let before = leases.iter().find(|l| l.id == id).copied();
            if after != before {
                if let Some(o) = view.get_mut(lease_object(id)) {
                    o.lease = after;
                }
            }
        }
        // Write back every object whose keys the command changed, its changes joining
        // the object's history (only this member's objects: another destination
        // writes its own).
        let mut changes: BTreeMap<ObjectId, Vec<Event>> = BTreeMap::new();
        for e in store.events().filter(|e| e.revision() == position) {
            changes
                .entry(key_object(&e.kv.key))
                .or_default()
                .push(e.clone());
        }
        let mut after: BTreeMap<ObjectId, Vec<KeyValue>> =
            changes.keys().map(|id| (*id, Vec::new())).collect();
        for kv in store.iter() {
            if let Some(keys) = after.get_mut(&key_object(&kv.key)) {
                keys.push(kv);
            }
        }
        for (id, keys) in after {
            if let Some(o) = view.get_mut(id) {
                o.keys = keys;
                o.events.extend(changes.remove(&id).unwrap_or_default());
                o.trim();
            }
        }
        reply
    }
}

/// A store-wide compaction at `to` by a command whose revision is `revision`: refused
/// (in etcd's words) at or below the last one, or above `revision`; else every object
/// of this member with changes below `to` drops them and marks itself compacted at
/// `to`, so a read or watch from below `to` that sees it is refused as compacted. A
/// read from below `to` that sees no such object (its keys did not change before
/// `to`) is answered, rightly, from the history it sees, where etcd would refuse it.
fn compact(to: u64, revision: u64, view: &mut View<'_, KvObject>) -> CompactResponse {
    let last = view.get(compaction_object()).map_or(0, |o| o.compacted);
    let refused = |error: &str, compacted: u64| CompactResponse {
        revision,
        compacted,
        error: Some(error.into()),
    };
    if to <= last {
        return refused(COMPACTED_ALREADY, last);
    }
    if to > revision {
        return refused(COMPACT_IN_FUTURE, last);
    }
    let older = |_: ObjectId, o: &KvObject| o.events.first().is_some_and(|e| e.revision() < to);
    for id in view.local_picked(older) {
        if let Some(o) = view.get_mut(id) {
            o.events.retain(|e| e.revision() >= to);
            o.compacted = o.compacted.max(to);
        }
    }
    if let Some(o) = view.get_mut(compaction_object()) {
        o.compacted = to;
    }
    CompactResponse {
        revision,
        compacted: to,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_kv::{EventKind, EventsRequest, KvError, RangeRequest};
    use partita_types::DetHashMap;

    /// The objects `cmd` names.
    fn named(cmd: &KvCommand) -> Vec<ObjectId> {
        let Kind::Access(named) = KvObjects::kind(cmd) else {
            unreachable!("the store's commands are accesses")
        };
        named
    }

    /// Run `cmd` at `position` over one member holding every object, its writes
    /// applied.
    fn run(objects: &mut DetHashMap<ObjectId, KvObject>, position: u64, cmd: KvCommand) -> KvReply {
        for id in named(&cmd) {
            objects.entry(id).or_default();
        }
        let remote = BTreeMap::new();
        let mut view = View::new(&*objects, &remote, false, position, KvObjects::scans(&cmd));
        let reply = KvObjects::execute(&cmd, &mut view);
        let (writes, _, _) = view.finish();
        objects.extend(writes);
        reply
    }

    fn events(key: &str, end: &str, start: u64) -> KvCommand {
        KvCommand::Events(EventsRequest {
            key: key.into(),
            end: end.into(),
            start_revision: start,
            limit: 0,
        })
    }

    /// Watches and past reads over the objects' histories, across objects; an
    /// object's history keeps its newest changes, and a read from before what it
    /// kept is refused as compacted even once the object holds no key in the range.
    #[test]
    fn histories_serve_watches_and_past_reads_until_compacted() {
        let mut objects = DetHashMap::default();
        run(&mut objects, 10, KvCommand::put("a", "1"));
        run(&mut objects, 20, KvCommand::put("b", "2"));
        run(&mut objects, 30, KvCommand::put("a", "3"));
        run(&mut objects, 40, KvCommand::delete("b"));
        let KvReply::Events(e) = run(&mut objects, 50, events("a", "c", 15)) else {
            panic!("an events reply")
        };
        let seen: Vec<(EventKind, u64)> = e.events.iter().map(|e| (e.kind, e.revision())).collect();
        assert_eq!(
            seen,
            [
                (EventKind::Put, 20),
                (EventKind::Put, 30),
                (EventKind::Delete, 40)
            ],
            "{e:?}"
        );
        assert_eq!(e.revision, 49);
        assert_eq!(e.events[1].prev_kv.as_ref().unwrap().value, b"1");
        // The range at revision 25: a at 10, b at 20 (deleted since).
        let mut at = RangeRequest::new(b"a".to_vec(), b"c".to_vec());
        at.revision = 25;
        let KvReply::Range(r) = run(&mut objects, 51, KvCommand::Range(at.clone())) else {
            panic!("a range reply")
        };
        let kvs: Vec<(&[u8], &[u8])> = r.kvs.iter().map(|k| (&k.key[..], &k.value[..])).collect();
        assert_eq!(kvs, [(&b"a"[..], &b"1"[..]), (&b"b"[..], &b"2"[..])]);
        // b's object alone changes past its bound: its oldest changes go.
        for i in 0..EVENTS_PER_OBJECT as u64 {
            run(&mut objects, 100 + i, KvCommand::put("b", "x"));
        }
        let b = &objects[&key_object(b"b")];
        assert_eq!(b.events.len(), EVENTS_PER_OBJECT);
        assert_eq!(b.compacted, 41, "revisions 20 and 40 dropped");
        let KvReply::Error(e) = run(&mut objects, 200, KvCommand::Range(at)) else {
            panic!("compacted")
        };
        assert_eq!(e.error, KvError::Compacted(41));
        // Deleted, b's object holds no key: a read at 35 still finds its history and
        // its compaction, rather than answering without b.
        run(&mut objects, 201, KvCommand::delete("b"));
        let mut old = RangeRequest::new(b"a".to_vec(), b"b\0".to_vec());
        old.revision = 35;
        let KvReply::Error(e) = run(&mut objects, 400, KvCommand::Range(old)) else {
            panic!("compacted")
        };
        assert!(matches!(e.error, KvError::Compacted(_)), "{e:?}");
    }

    /// A store-wide compaction across two members: refused above the command's
    /// revision, then every object with older changes drops them, a read below it
    /// that sees one is refused as compacted, one above it is answered from what was
    /// kept, and a compaction at or below it is refused.
    #[test]
    fn compaction_trims_every_partition() {
        let compact = |revision| KvCommand::Compact(partita_kv::CompactRequest { revision });
        let mut m: [DetHashMap<ObjectId, KvObject>; 2] = Default::default();
        let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
        for (i, k) in keys.iter().enumerate() {
            run_both(&mut m, 10 + i as u64, 0, KvCommand::put(k.clone(), "old"));
        }
        for (i, k) in keys.iter().enumerate() {
            run_both(&mut m, 30 + i as u64, 0, KvCommand::put(k.clone(), "new"));
        }
        let KvReply::Compact(c) = run_both(&mut m, 40, 0, compact(45)) else {
            panic!("a compaction reply")
        };
        assert_eq!(
            c.error.as_deref(),
            Some("mvcc: required revision is a future revision")
        );
        let KvReply::Compact(c) = run_both(&mut m, 50, 0, compact(30)) else {
            panic!("a compaction reply")
        };
        assert_eq!((c.error, c.compacted, c.revision), (None, 30, 49));
        for member in &m {
            for o in member.values().filter(|o| !o.keys.is_empty()) {
                assert!(o.events.iter().all(|e| e.revision() >= 30), "{o:?}");
            }
        }
        assert!(m.iter().all(|m| !m.is_empty()), "objects in both members");
        let mut at = RangeRequest::new(b"k".to_vec(), b"l".to_vec());
        at.revision = 20;
        let r = run_both(&mut m, 51, 0, KvCommand::Range(at.clone()));
        assert!(
            matches!(r, KvReply::Error(ref e) if e.error == KvError::Compacted(30)),
            "{r:?}"
        );
        at.revision = 33;
        let KvReply::Range(r) = run_both(&mut m, 52, 0, KvCommand::Range(at)) else {
            panic!("a range")
        };
        let values: Vec<&[u8]> = r.kvs.iter().map(|kv| &kv.value[..]).collect();
        assert_eq!(
            values,
            [
                &b"new"[..],
                b"new",
                b"new",
                b"new",
                b"old",
                b"old",
                b"old",
                b"old"
            ]
        );
        let KvReply::Compact(c) = run_both(&mut m, 53, 0, compact(30)) else {
            panic!("a compaction reply")
        };
        assert_eq!(
            c.error.as_deref(),
            Some("mvcc: required revision has been compacted")
        );
        assert_eq!(c.compacted, 30);
    }

    /// Two members (partitions) and a command run at both, as S-SMR runs one that
    /// spans them: each sends the other the objects the command names or scans that
    /// it holds, and writes only its own. The reply of the first.
    fn run_both(
        members: &mut [DetHashMap<ObjectId, KvObject>; 2],
        position: u64,
        now_ms: u64,
        cmd: KvCommand,
    ) -> KvReply {
        let named = named(&cmd);
        // Implicit objects start at home: hashed to a member.
        for id in &named {
            let home = (*id % 2) as usize;
            if !members[1 - home].contains_key(id) {
                members[home].entry(*id).or_default();
            }
        }
        let pick = KvObjects::scanner(&cmd);
        let sent: Vec<BTreeMap<ObjectId, KvObject>> = members
            .iter()
            .map(|m| {
                m.iter()
                    .filter(|(id, o)| {
                        named.contains(id) || (KvObjects::scans(&cmd) && pick(**id, o))
                    })
                    .map(|(id, o)| {
                        let x = KvObjects::exchanged(&cmd, o).unwrap_or_else(|| o.clone());
                        (*id, x)
                    })
                    .collect()
            })
            .collect();
        let mut replies = Vec::new();
        for (i, m) in members.iter_mut().enumerate() {
            let remote = &sent[1 - i];
            let mut view =
                View::new(&*m, remote, false, position, KvObjects::scans(&cmd)).at_time(now_ms);
            replies.push(KvObjects::execute(&cmd, &mut view));
            let (writes, _, _) = view.finish();
            m.extend(writes);
        }
        assert_eq!(replies[0], replies[1], "both members answer alike: {cmd:?}");
        replies.swap_remove(0)
    }

    /// Leases over objects of two partitions: a lease lives in its object, a put
    /// attaches a key of either partition to it, a keep-alive renews it, a time to
    /// live with keys finds them in both, and it expires only by a command that runs
    /// after its expiry in ordered time (an expire before then changes nothing), which
    /// deletes exactly the keys still attached, in one revision, in both partitions.
    #[test]
    fn leases_span_partitions_and_expire_in_ordered_time() {
        let mut m: [DetHashMap<ObjectId, KvObject>; 2] = Default::default();
        let lease = 77;
        let granted = run_both(&mut m, 10, 1_000, KvCommand::lease_grant(lease, 5));
        assert!(
            matches!(granted, KvReply::LeaseGrant(ref g) if g.id == lease && g.ttl == 5),
            "{granted:?}"
        );
        let again = run_both(&mut m, 11, 1_000, KvCommand::lease_grant(lease, 5));
        assert!(matches!(again, KvReply::Error(ref e) if e.error == KvError::LeaseExists(lease)));
        // Keys in both members (the hash picks), attached; one of them re-put without
        // the lease, which detaches it.
        let names: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
        let homes: BTreeSet<u64> = names.iter().map(|k| key_object(k.as_bytes()) % 2).collect();
        assert_eq!(homes.len(), 2, "keys in both members");
        for (i, k) in names.iter().enumerate() {
            let r = run_both(
                &mut m,
                20 + i as u64,
                1_500,
                KvCommand::put_leased(k.clone(), "v", lease),
            );
            assert!(matches!(r, KvReply::Put(_)), "{r:?}");
        }
        run_both(&mut m, 30, 1_600, KvCommand::put("k0", "free"));
        run_both(&mut m, 31, 1_600, KvCommand::put("other", "x"));
        // A put naming a lease that does not exist changes nothing.
        let r = run_both(&mut m, 32, 1_600, KvCommand::put_leased("k9", "v", 78));
        assert!(
            matches!(r, KvReply::Error(ref e) if e.error == KvError::LeaseNotFound(78)),
            "{r:?}"
        );
        let KvReply::LeaseTimeToLive(t) = run_both(
            &mut m,
            33,
            2_000,
            KvCommand::lease_time_to_live(lease, true),
        ) else {
            panic!("a time to live")
        };
        let attached: Vec<Vec<u8>> = names[1..].iter().map(|k| k.as_bytes().to_vec()).collect();
        assert_eq!((t.ttl, t.granted_ttl, &t.keys), (4, 5, &attached));
        // Renewed at 4,000: it now ends at 9,000.
        let KvReply::LeaseKeepAlive(k) =
            run_both(&mut m, 34, 4_000, KvCommand::lease_keep_alive(lease))
        else {
            panic!("a keep-alive")
        };
        assert_eq!(k.ttl, 5);
        let KvReply::LeaseLeases(l) = run_both(&mut m, 35, 4_500, KvCommand::LeaseLeases) else {
            panic!("the leases")
        };
        assert_eq!((l.ids, l.remaining_ms), (vec![lease], vec![4_500]));
        // Not expired at 8,999: nothing changes.
        let r = run_both(&mut m, 40, 8_999, KvCommand::lease_expire(lease));
        assert_eq!(
            r,
            KvReply::LeaseRevoke(partita_kv::LeaseRevokeResponse { revision: 39 })
        );
        // Expired, not yet revoked: as good as gone to a put and a keep-alive.
        let r = run_both(
            &mut m,
            41,
            9_000,
            KvCommand::put_leased("k1", "late", lease),
        );
        assert!(
            matches!(r, KvReply::Error(ref e) if e.error == KvError::LeaseNotFound(lease)),
            "{r:?}"
        );
        let KvReply::LeaseKeepAlive(k) =
            run_both(&mut m, 42, 9_000, KvCommand::lease_keep_alive(lease))
        else {
            panic!("a keep-alive")
        };
        assert_eq!(k.ttl, 0, "no renewal after the expiry");
        let r = run_both(&mut m, 50, 9_100, KvCommand::lease_expire(lease));
        assert_eq!(
            r,
            KvReply::LeaseRevoke(partita_kv::LeaseRevokeResponse { revision: 50 })
        );
        let KvReply::Range(all) = run_both(
            &mut m,
            51,
            9_100,
            KvCommand::Range(RangeRequest::new(b"a".to_vec(), b"z".to_vec())),
        ) else {
            panic!("a range")
        };
        let left: Vec<&[u8]> = all.kvs.iter().map(|kv| &kv.key[..]).collect();
        assert_eq!(
            left,
            [&b"k0"[..], &b"other"[..]],
            "the attached keys went, in both members"
        );
        let KvReply::Events(e) = run_both(&mut m, 52, 9_100, events("k", "l", 50)) else {
            panic!("events")
        };
        assert_eq!(
            e.events.len(),
            7,
            "one delete per attached key, all at revision 50"
        );
        assert!(e
            .events
            .iter()
            .all(|e| e.kind == EventKind::Delete && e.revision() == 50));
        assert!(
            m.iter().all(|m| m.values().all(|o| o.lease.is_none())),
            "the lease is gone"
        );
        let r = run_both(&mut m, 53, 9_100, KvCommand::lease_revoke(lease));
        assert!(
            matches!(r, KvReply::Error(ref e) if e.error == KvError::LeaseNotFound(lease)),
            "{r:?}"
        );
        // A revoke before the expiry deletes the keys too.
        run_both(&mut m, 60, 10_000, KvCommand::lease_grant(5, 60));
        run_both(&mut m, 61, 10_000, KvCommand::put_leased("k3", "v", 5));
        let r = run_both(&mut m, 62, 10_000, KvCommand::lease_revoke(5));
        assert_eq!(
            r,
            KvReply::LeaseRevoke(partita_kv::LeaseRevokeResponse { revision: 62 })
        );
        let r = run_both(&mut m, 63, 10_000, KvCommand::get("k3"));
        assert!(
            matches!(r, KvReply::Range(ref g) if g.kvs.is_empty()),
            "{r:?}"
        );
        // Id 0 is the client's to replace.
        let r = run_both(&mut m, 64, 10_000, KvCommand::lease_grant(0, 60));
        assert!(
            matches!(r, KvReply::Error(ref e) if matches!(e.error, KvError::Unsupported(_))),
            "{r:?}"
        );
    }
}
