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
//! - **Refused** ([`supported`]), because they need what no partition keeps: reads
//!   at a past revision, watches and the event history, compaction, the store's
//!   hash, leases (a lease's expiry deletes keys in every partition at one ordered
//!   time), and batches (each request of one takes a revision of its own).

use crate::{Kind, ObjectId, ObjectService, Scanner, View};
use partita_kv::{
    check, is_read_only, ErrorResponse, KeyRange, KeyValue, KvCommand, KvError, KvReply, KvStore,
    RequestOp, ResponseOp,
};
use std::collections::{BTreeMap, BTreeSet};

/// The key-value store partitioned by S-SMR or DS-SMR.
pub struct KvObjects;

/// The object that holds `key`.
pub fn key_object(key: &[u8]) -> ObjectId {
    partita_service::stable_hash(key)
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
                       history, lease table or revision counter";
    let op = |op: &RequestOp| match op {
        RequestOp::Put(p) if p.lease != 0 => Err(format!("a put with a lease: {WHY}")),
        RequestOp::Range(r) if r.revision != 0 => Err(format!("a read at a past revision: {WHY}")),
        _ => Ok(()),
    };
    match cmd {
        KvCommand::Put(p) => op(&RequestOp::Put(p.clone())),
        KvCommand::Range(r) => op(&RequestOp::Range(r.clone())),
        KvCommand::DeleteRange(_) => Ok(()),
        KvCommand::Txn(t) => t.success.iter().chain(&t.failure).try_for_each(op),
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

/// The single keys `cmd` names (puts, compares, single-key reads and deletes).
fn keys(cmd: &KvCommand) -> Vec<&[u8]> {
    let single = |key: &[u8], end: &[u8]| matches!(KeyRange::new(key, end), KeyRange::Single(_));
    let mut out: Vec<&[u8]> = Vec::new();
    match cmd {
        KvCommand::Put(p) => out.push(&p.key),
        KvCommand::Range(r) if single(&r.key, &r.end) => out.push(&r.key),
        KvCommand::DeleteRange(d) if single(&d.key, &d.end) => out.push(&d.key),
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
    /// The keys of one hash, in key order.
    type Object = Vec<KeyValue>;
    type Command = KvCommand;
    type Reply = KvReply;

    fn kind(cmd: &KvCommand) -> Kind {
        let ids: BTreeSet<ObjectId> = keys(cmd).into_iter().map(key_object).collect();
        Kind::Access(ids.into_iter().collect())
    }

    fn implicit() -> Option<Vec<KeyValue>> {
        Some(Vec::new())
    }

    fn scans(cmd: &KvCommand) -> bool {
        !ranges(cmd).is_empty()
    }

    /// The objects holding a key in one of the command's ranges.
    fn scanner<'c>(cmd: &'c KvCommand) -> Scanner<'c, Vec<KeyValue>> {
        let rs = ranges(cmd);
        Box::new(move |_, obj| obj.iter().any(|kv| rs.iter().any(|r| r.contains(&kv.key))))
    }

    fn create(_cmd: &KvCommand) -> Vec<KeyValue> {
        Vec::new()
    }

    fn execute(cmd: &KvCommand, view: &mut View<'_, Vec<KeyValue>>) -> KvReply {
        // Reads report the revision before their own: every write they see is at or
        // below it.
        let revision = view.position().saturating_sub(1);
        if let Err(why) = check(cmd).and_then(|()| supported(cmd)) {
            return KvReply::Error(ErrorResponse {
                error: KvError::Unsupported(why),
                revision,
            });
        }
        let mut seen: BTreeMap<ObjectId, Vec<KeyValue>> = BTreeMap::new();
        if let Kind::Access(named) = Self::kind(cmd) {
            for id in named {
                if let Some(o) = view.get(id) {
                    seen.insert(id, o.clone());
                }
            }
        }
        for (id, o) in view.scan(Self::scanner(cmd)) {
            seen.entry(id).or_insert(o);
        }
        let mut store = KvStore::with_entries(seen.values().flatten().cloned(), revision);
        let (reply, _) = store.execute(cmd);
        if is_read_only(cmd) {
            return reply;
        }
        // Write back every object whose keys changed (only this member's: another
        // destination writes its own).
        let mut after: BTreeMap<ObjectId, Vec<KeyValue>> =
            seen.keys().map(|id| (*id, Vec::new())).collect();
        for kv in store.iter() {
            after.entry(key_object(&kv.key)).or_default().push(kv);
        }
        for (id, keys) in after {
            if seen
                .get(&id)
                .map_or(!keys.is_empty(), |before| *before != keys)
            {
                if let Some(o) = view.get_mut(id) {
                    *o = keys;
                }
            }
        }
        reply
    }
}
