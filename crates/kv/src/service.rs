//! The store as a replicated service ([`partita_service::StateMachine`], `NAME = "kv"`).
//!
//! State partitioning (paper 001 §III-C): a key falls in the partition of its first
//! eight bytes ([`partita_service::PartitionKey`] for byte strings), so a partition
//! holds a contiguous range of keys. Splitting and merging:
//!
//! | command | partitions | sub-command in partition p | merge |
//! | --- | --- | --- | --- |
//! | put | the key's | the same | the only reply |
//! | range, delete range | every partition the key range overlaps | the same (p holds only its own keys) | entries concatenated in partition order, the limit applied again, counts summed |
//! | txn | the one partition of all its keys | the same | the only reply |
//!
//! A transaction whose compares and operations name keys of several partitions is
//! refused with [`SplitError::Spans`]: executing it atomically across partitions needs
//! S-SMR's coordination, which is not built yet.
//!
//! **Limitation: one revision counter per partition.** Each partition counts its own
//! revisions, as an unpartitioned store would for the commands it sees. Revisions are
//! therefore only comparable within a partition: two keys of different partitions may
//! carry the same mod revision, and a merged reply reports the largest revision of the
//! partitions that answered. A store-wide revision across partitions (as etcd's) would
//! need every write to be ordered with every partition.
//!
//! **P-SMR** (paper 002 §III-F): etcd's revisions make every write depend on every
//! other command. A write takes the next store-wide revision only if it changes
//! something (a delete of nothing takes none), so a write's revision depends on
//! every write ordered before it, and every reply reports the store's revision,
//! which depends on every write before it. CC-G therefore sends every write to g_all
//! (it runs with every thread stopped, at its place in the order) and a read to one
//! thread, chosen by a hash of its first key: reads commute with reads, and between
//! two writes every thread reads the same store. Reads run at the same time on OS
//! threads through [`KvStore::read`]. The lease reads go to g_all too, since they read
//! ordered time, which under P-SMR reaches the store only where a lease may expire
//! ([`StateMachine::time_changes`]). opt-PSMR has nothing to add: no check could let a
//! write run beside another command, so OC-G maps as CC-G does and every safety check
//! fails. A workload gains from threads in proportion to its reads.

use partita_service::{
    stable_hash, Access, ExecutionWork, MergeError, Objects, ServiceCodec, Shared, SharedExecution,
    SplitError, StateMachine, ThreadLayout,
};
use partita_types::{mask_partitions, PartitionId, PartitionMap};
use std::ops::Bound;

use crate::store::{KvStore, KvUndo};
use crate::types::*;

/// The objects of one key range: a point for a single key (and for an empty range,
/// which must still be executed somewhere: it reads nothing, in the key's partition).
fn range_objects(key: &[u8], end: &[u8], out: &mut Objects<Vec<u8>>) {
    let range = KeyRange::new(key, end);
    match range {
        KeyRange::Single(k) => out.keys.push(k.to_vec()),
        _ if range.is_empty() => out.keys.push(key.to_vec()),
        KeyRange::From(from) => out
            .ranges
            .push((Bound::Included(from.to_vec()), Bound::Unbounded)),
        KeyRange::Between(from, to) => out
            .ranges
            .push((Bound::Included(from.to_vec()), Bound::Excluded(to.to_vec()))),
    }
}

fn op_objects(op: &RequestOp, out: &mut Objects<Vec<u8>>) {
    match op {
        RequestOp::Put(p) => out.keys.push(p.key.clone()),
        RequestOp::Range(r) => range_objects(&r.key, &r.end, out),
        RequestOp::DeleteRange(d) => range_objects(&d.key, &d.end, out),
    }
}

/// The partitions `cmd` addresses, one bit each (partition 0 for a transaction that
/// names no key).
pub fn mask(cmd: &KvCommand, map: &PartitionMap) -> u64 {
    match KvStore::objects(cmd).partitions(map) {
        0 => 1,
        m => m,
    }
}

/// The partitions `cmd` addresses, in order.
pub fn partitions_of(cmd: &KvCommand, map: &PartitionMap) -> Vec<PartitionId> {
    mask_partitions(mask(cmd, map))
}

/// How often ordered time moves while the cluster is idle (so that a lease expires
/// within this much of its deadline), and half the largest step it takes between two
/// values: with the shortest lease of [`LEASE_TTL_MIN`] seconds, a value after an
/// outage moves time by at most 1 s, leaving a holder at least 1 s to renew.
pub const LEASE_TICK_MS: u64 = 500;

/// Whether `cmd` is a lease command (granted, renewed, revoked or read in every
/// partition: each holds the whole lease table, and its own keys of each lease).
pub fn is_lease_command(cmd: &KvCommand) -> bool {
    matches!(
        cmd,
        KvCommand::LeaseGrant(_)
            | KvCommand::LeaseRevoke(_)
            | KvCommand::LeaseExpire(_)
            | KvCommand::LeaseKeepAlive(_)
            | KvCommand::LeaseTimeToLive(_)
            | KvCommand::LeaseLeases
    )
}

/// Whether `cmd` reads keys, the history or the hash and nothing else
/// ([`KvStore::read`] answers it): what P-SMR runs on one thread.
fn reads_alone(cmd: &KvCommand) -> bool {
    match cmd {
        KvCommand::Range(_) | KvCommand::Events(_) | KvCommand::Hash(_) => true,
        KvCommand::Txn(_) => is_read_only(cmd),
        KvCommand::Batch(cmds) => cmds.iter().all(reads_alone),
        _ => false,
    }
}

/// The first key `cmd` names, if any.
fn first_key(cmd: &KvCommand) -> Option<&[u8]> {
    fn op_key(op: &RequestOp) -> &[u8] {
        match op {
            RequestOp::Put(p) => &p.key,
            RequestOp::Range(r) => &r.key,
            RequestOp::DeleteRange(d) => &d.key,
        }
    }
    match cmd {
        KvCommand::Put(p) => Some(&p.key),
        KvCommand::Range(r) => Some(&r.key),
        KvCommand::DeleteRange(d) => Some(&d.key),
        KvCommand::Txn(t) => t
            .compare
            .first()
            .map(|c| c.key.as_slice())
            .or_else(|| t.success.iter().chain(&t.failure).next().map(op_key)),
        KvCommand::Batch(cmds) => cmds.iter().find_map(first_key),
        _ => None,
    }
}

/// P-SMR on OS threads: the store as the worker threads share it, for reads only
/// (every write runs with the threads stopped).
struct Reads<'a>(&'a KvStore);

impl SharedExecution<KvStore> for Reads<'_> {
    fn execute(&self, _t: usize, cmd: &KvCommand, _check: bool) -> Shared<KvReply> {
        self.0.read(cmd).map_or(Shared::Alone, Shared::Done)
    }
}

/// The object id of the store-wide revision in [`StateMachine::access`] (a key whose
/// id collides with it only conflicts more).
pub const REVISION_OBJECT: u64 = 0x7265_7669_7369_6f6e;

impl ServiceCodec for KvStore {
    const NAME: &'static str = "kv";
    type Command = KvCommand;
    type Reply = KvReply;
    type Key = Vec<u8>;
    fn check(cmd: &KvCommand) -> Result<(), String> {
        check(cmd)
    }
    fn is_read_only(cmd: &KvCommand) -> bool {
        is_read_only(cmd)
    }
    fn objects(cmd: &KvCommand) -> Objects<Vec<u8>> {
        let mut out = Objects::default();
        command_objects(cmd, &mut out);
        out
    }
    fn split(
        cmd: &KvCommand,
        map: &PartitionMap,
    ) -> Result<Vec<(PartitionId, KvCommand)>, SplitError> {
        let parts = partitions_of(cmd, map);
        // A put names one key; a range or delete range runs in every partition it
        // overlaps; a transaction would have to be atomic across partitions.
        if parts.len() > 1 && matches!(cmd, KvCommand::Txn(_) | KvCommand::Batch(_)) {
            return Err(SplitError::Spans { partitions: parts });
        }
        // Each partition holds only its own keys, so a range needs no clipping.
        Ok(parts.into_iter().map(|p| (p, cmd.clone())).collect())
    }
    fn merge(
        cmd: &KvCommand,
        parts: Vec<(PartitionId, KvReply)>,
        map: &PartitionMap,
    ) -> Result<KvReply, MergeError> {
        merge(cmd, parts, map).map_err(MergeError)
    }
    /// P-SMR (see the module's section): a read to one thread, chosen by its first
    /// key; everything that writes, and the lease reads, to g_all. The same for OC-G:
    /// no check could let a write run beside anything (below).
    fn thread_group(cmd: &KvCommand, layout: &ThreadLayout, _optimistic: bool) -> Option<usize> {
        if !reads_alone(cmd) {
            return None;
        }
        let key = first_key(cmd).unwrap_or_default();
        Some((stable_hash(key) % layout.threads.max(1) as u64) as usize)
    }
}

impl StateMachine for KvStore {
    type Undo = KvUndo;

    fn new() -> Self {
        KvStore::new()
    }

    /// The keys, and the store-wide revision: every reply reports it, and every change
    /// takes the next one, so every command reads it and every mutation writes it. An
    /// ordering that orders only conflicting commands (EPaxos) thus orders every
    /// mutation with every other command, which etcd's one sequence of revisions
    /// requires; reads still commute with reads.
    ///
    /// A lease command conflicts with everything: a grant or keep-alive sets a
    /// deadline from the ordered time where it runs, and a revoke deletes keys nobody
    /// named.
    fn access(&self, cmd: &KvCommand) -> Access {
        let leases = match cmd {
            KvCommand::Batch(cmds) => cmds.iter().any(is_lease_command),
            _ => is_lease_command(cmd),
        };
        if leases {
            return Access::everything();
        }
        let write = !Self::is_read_only(cmd);
        let mut a = Access::of(&Self::objects(cmd), write);
        a.add(REVISION_OBJECT, write);
        a
    }

    fn execute(&mut self, cmd: &KvCommand) -> KvReply {
        KvStore::execute(self, cmd).0
    }

    /// Leases expire in ordered time.
    const TIMED: bool = true;
    const TICK_MS: u64 = LEASE_TICK_MS;

    fn advance_time(&mut self, now_ms: u64) -> Option<KvUndo> {
        KvStore::advance_time(self, now_ms)
    }

    /// Only a lease's expiry changes the store with time.
    fn time_changes(&self, now_ms: u64) -> bool {
        self.lease_due(now_ms)
    }

    /// Every lease gets its whole TTL again, from the new cluster's first value.
    fn on_seeded(&mut self) {
        KvStore::rearm_leases(self)
    }

    /// Never: every write takes the store-wide revision, which every other command
    /// reads (see the module's section on P-SMR).
    fn thread_check(&self, _cmd: &KvCommand, _t: usize, _l: &ThreadLayout) -> Result<(), String> {
        Err(
            "a write takes the next store-wide revision, which every command reads: it \
             runs with every thread stopped"
                .into(),
        )
    }

    fn shared(&mut self, _layout: &ThreadLayout) -> Option<Box<dyn SharedExecution<Self> + '_>> {
        Some(Box::new(Reads(self)))
    }

    fn execute_undoable(&mut self, cmd: &KvCommand) -> (KvReply, KvUndo) {
        KvStore::execute(self, cmd)
    }

    fn undo(&mut self, undo: KvUndo) {
        KvStore::undo(self, undo)
    }

    fn snapshot(&self) -> Vec<u8> {
        KvStore::snapshot(self)
    }

    fn restore(bytes: &[u8]) -> Result<Self, String> {
        KvStore::restore(bytes).map_err(|e| e.to_string())
    }

    fn digest(&self) -> u64 {
        KvStore::digest(self)
    }

    fn len(&self) -> u64 {
        KvStore::len(self) as u64
    }

    /// Every command is one request, as etcd counts them (a transaction too); a batch
    /// counts its requests.
    fn op_count(cmd: &KvCommand) -> u64 {
        match cmd {
            KvCommand::Batch(cmds) => cmds.len() as u64,
            _ => 1,
        }
    }

    /// A put counts as an insert, a single-key read as a read, a range read as a query
    /// returning its entries, a delete as a delete; a transaction as one read per
    /// compare plus the operations of the branch that ran.
    fn account(cmd: &KvCommand, reply: &KvReply, work: &mut ExecutionWork) {
        const INSERT: usize = 0;
        const DELETE: usize = 1;
        const READ: usize = 3;
        const QUERY: usize = 6;
        fn range(r: &RangeRequest, resp: &RangeResponse, work: &mut ExecutionWork) {
            if r.end.is_empty() {
                work.by_kind[READ] += 1;
            } else {
                work.by_kind[QUERY] += 1;
                work.query_entries += resp.kvs.len() as u64;
            }
        }
        if let (KvCommand::Batch(cmds), KvReply::Batch(replies)) = (cmd, reply) {
            for (c, r) in cmds.iter().zip(replies) {
                Self::account(c, r, work);
            }
            // One command for the machinery, however many requests it carries.
            work.commands -= cmds.len().min(replies.len()) as u64;
            work.commands += 1;
            return;
        }
        work.commands += 1;
        work.ops += Self::op_count(cmd);
        match (cmd, reply) {
            (KvCommand::Put(_), _) => work.by_kind[INSERT] += 1,
            (KvCommand::DeleteRange(_), _) => work.by_kind[DELETE] += 1,
            (KvCommand::Events(_), KvReply::Events(resp)) => {
                work.by_kind[QUERY] += 1;
                work.query_entries += resp.events.len() as u64;
            }
            (KvCommand::Range(r), KvReply::Range(resp)) => range(r, resp, work),
            (KvCommand::Txn(t), KvReply::Txn(resp)) => {
                work.by_kind[READ] += t.compare.len() as u64;
                let ops = if resp.succeeded {
                    &t.success
                } else {
                    &t.failure
                };
                for (op, r) in ops.iter().zip(&resp.responses) {
                    match (op, r) {
                        (RequestOp::Put(_), _) => work.by_kind[INSERT] += 1,
                        (RequestOp::DeleteRange(_), _) => work.by_kind[DELETE] += 1,
                        (RequestOp::Range(q), ResponseOp::Range(resp)) => range(q, resp, work),
                        (RequestOp::Range(_), _) => work.by_kind[READ] += 1,
                    }
                }
            }
            // A reply of another kind than the command cannot come from `execute`.
            _ => {}
        }
    }
}

/// The keys and ranges a command touches (a batch: those of its requests).
fn command_objects(cmd: &KvCommand, out: &mut Objects<Vec<u8>>) {
    match cmd {
        KvCommand::Put(p) => out.keys.push(p.key.clone()),
        KvCommand::Range(r) => range_objects(&r.key, &r.end, out),
        KvCommand::DeleteRange(d) => range_objects(&d.key, &d.end, out),
        KvCommand::Txn(t) => {
            out.keys.extend(t.compare.iter().map(|c| c.key.clone()));
            for op in t.success.iter().chain(&t.failure) {
                op_objects(op, out);
            }
        }
        KvCommand::Events(e) => range_objects(&e.key, &e.end, out),
        // Every partition compacts its own history, and holds every lease.
        KvCommand::Compact(_)
        | KvCommand::LeaseGrant(_)
        | KvCommand::LeaseRevoke(_)
        | KvCommand::LeaseExpire(_)
        | KvCommand::LeaseKeepAlive(_)
        | KvCommand::LeaseTimeToLive(_)
        | KvCommand::LeaseLeases
        | KvCommand::Hash(_) => out.ranges.push((Bound::Unbounded, Bound::Unbounded)),
        KvCommand::Batch(cmds) => {
            for c in cmds {
                command_objects(c, out);
            }
        }
    }
}

fn merge(
    cmd: &KvCommand,
    mut parts: Vec<(PartitionId, KvReply)>,
    map: &PartitionMap,
) -> Result<KvReply, String> {
    let want = partitions_of(cmd, map);
    parts.sort_by_key(|(p, _)| *p);
    let got: Vec<PartitionId> = parts.iter().map(|(p, _)| *p).collect();
    if got != want {
        return Err(format!(
            "{} addresses partitions {want:?}, but replies came from {got:?}",
            cmd.name()
        ));
    }
    let kind = |r: &KvReply| format!("{} reply {r:?} is not of its kind", cmd.name());
    if parts.len() == 1 {
        let (_, reply) = parts.pop().expect("one");
        let fits = matches!(
            (cmd, &reply),
            (KvCommand::Put(_), KvReply::Put(_))
                | (KvCommand::Range(_), KvReply::Range(_))
                | (KvCommand::DeleteRange(_), KvReply::DeleteRange(_))
                | (KvCommand::Txn(_), KvReply::Txn(_))
                | (KvCommand::Compact(_), KvReply::Compact(_))
                | (KvCommand::Events(_), KvReply::Events(_))
                | (KvCommand::Batch(_), KvReply::Batch(_))
                | (KvCommand::LeaseGrant(_), KvReply::LeaseGrant(_))
                | (
                    KvCommand::LeaseRevoke(_) | KvCommand::LeaseExpire(_),
                    KvReply::LeaseRevoke(_)
                )
                | (KvCommand::LeaseKeepAlive(_), KvReply::LeaseKeepAlive(_))
                | (KvCommand::LeaseTimeToLive(_), KvReply::LeaseTimeToLive(_))
                | (KvCommand::LeaseLeases, KvReply::LeaseLeases(_))
                | (KvCommand::Hash(_), KvReply::Hash(_))
                | (_, KvReply::Error(_))
        );
        return if fits { Ok(reply) } else { Err(kind(&reply)) };
    }
    // A refusal from any partition is the reply (every partition holds every lease,
    // so they refuse alike).
    if let Some(i) = parts
        .iter()
        .position(|(_, r)| matches!(r, KvReply::Error(_)))
    {
        return Ok(parts.swap_remove(i).1);
    }
    if is_lease_command(cmd) {
        return merge_lease(parts)
            .ok_or_else(|| format!("{} replies of several partitions do not agree", cmd.name()));
    }
    match cmd {
        KvCommand::Range(r) => {
            let mut kvs = Vec::new();
            let (mut count, mut revision) = (0u64, 0u64);
            for (_, reply) in parts {
                let KvReply::Range(resp) = reply else {
                    return Err(kind(&reply));
                };
                kvs.extend(resp.kvs);
                count += resp.count;
                revision = revision.max(resp.revision);
            }
            // Each partition cut its own entries at the limit; the whole range is cut
            // once more, so that the merged reply is what one store would return.
            if r.limit > 0 {
                kvs.truncate(usize::try_from(r.limit).unwrap_or(usize::MAX));
            }
            let more = !r.count_only && (kvs.len() as u64) < count;
            Ok(KvReply::Range(RangeResponse {
                kvs,
                count,
                more,
                revision,
            }))
        }
        KvCommand::DeleteRange(_) => {
            let mut prev_kvs = Vec::new();
            let (mut deleted, mut revision) = (0u64, 0u64);
            for (_, reply) in parts {
                let KvReply::DeleteRange(resp) = reply else {
                    return Err(kind(&reply));
                };
                prev_kvs.extend(resp.prev_kvs);
                deleted += resp.deleted;
                revision = revision.max(resp.revision);
            }
            Ok(KvReply::DeleteRange(DeleteRangeResponse {
                deleted,
                prev_kvs,
                revision,
            }))
        }
        // Revisions of different partitions are not comparable (see the module
        // documentation): events are ordered by revision, then partition.
        KvCommand::Events(_) => {
            let mut events = Vec::new();
            let (mut revision, mut more) = (0u64, false);
            let mut compacted = None;
            for (_, reply) in parts {
                let KvReply::Events(resp) = reply else {
                    return Err(kind(&reply));
                };
                events.extend(resp.events);
                revision = revision.max(resp.revision);
                more |= resp.more;
                compacted = compacted.max(resp.compacted);
            }
            events.sort_by_key(|e| e.revision());
            Ok(KvReply::Events(EventsResponse {
                events: if compacted.is_some() { vec![] } else { events },
                compacted,
                more,
                revision,
            }))
        }
        // Each partition hashes its own keys: the hash of the (partition, hash) pairs,
        // the sizes summed.
        KvCommand::Hash(_) => {
            let (mut hash, mut size, mut revision, mut compact_revision) = (0u32, 0, 0, 0);
            let mut hash_revision = 0;
            for (p, reply) in parts {
                let KvReply::Hash(h) = reply else {
                    return Err(kind(&reply));
                };
                hash = crc32c::crc32c_append(hash, &p.to_le_bytes());
                hash = crc32c::crc32c_append(hash, &h.hash.to_le_bytes());
                size += h.size;
                revision = revision.max(h.revision);
                hash_revision = hash_revision.max(h.hash_revision);
                compact_revision = compact_revision.max(h.compact_revision);
            }
            Ok(KvReply::Hash(HashResponse {
                hash,
                hash_revision,
                compact_revision,
                size,
                revision,
            }))
        }
        KvCommand::Compact(_) => {
            let mut merged: Option<CompactResponse> = None;
            for (_, reply) in parts {
                let KvReply::Compact(resp) = reply else {
                    return Err(kind(&reply));
                };
                merged = Some(match merged {
                    None => resp,
                    Some(m) => CompactResponse {
                        revision: m.revision.max(resp.revision),
                        compacted: m.compacted.min(resp.compacted),
                        error: m.error.or(resp.error),
                    },
                });
            }
            merged
                .map(KvReply::Compact)
                .ok_or_else(|| "no reply".to_string())
        }
        other => Err(format!(
            "{} addresses one partition, yet {} replies arrived",
            other.name(),
            got.len()
        )),
    }
}

/// One reply for a lease command from every partition's: the lease's fields agree
/// (each partition holds the same table, moved by the same ordered commands), its keys
/// are the union, and the revision is the largest (see the module's limitation).
fn merge_lease(parts: Vec<(PartitionId, KvReply)>) -> Option<KvReply> {
    let mut replies = parts.into_iter().map(|(_, r)| r);
    let first = replies.next()?;
    replies.try_fold(first, |acc, r| {
        Some(match (acc, r) {
            (KvReply::LeaseGrant(a), KvReply::LeaseGrant(b)) if (a.id, a.ttl) == (b.id, b.ttl) => {
                KvReply::LeaseGrant(LeaseGrantResponse {
                    revision: a.revision.max(b.revision),
                    ..a
                })
            }
            (KvReply::LeaseRevoke(a), KvReply::LeaseRevoke(b)) => {
                KvReply::LeaseRevoke(LeaseRevokeResponse {
                    revision: a.revision.max(b.revision),
                })
            }
            (KvReply::LeaseKeepAlive(a), KvReply::LeaseKeepAlive(b)) if a.ttl == b.ttl => {
                KvReply::LeaseKeepAlive(LeaseKeepAliveResponse {
                    revision: a.revision.max(b.revision),
                    ..a
                })
            }
            (KvReply::LeaseTimeToLive(a), KvReply::LeaseTimeToLive(b))
                if (a.ttl, a.granted_ttl) == (b.ttl, b.granted_ttl) =>
            {
                let mut keys = a.keys;
                keys.extend(b.keys);
                keys.sort();
                KvReply::LeaseTimeToLive(LeaseTimeToLiveResponse {
                    keys,
                    revision: a.revision.max(b.revision),
                    ..a
                })
            }
            (KvReply::LeaseLeases(a), KvReply::LeaseLeases(b)) if a.ids == b.ids => {
                KvReply::LeaseLeases(LeaseLeasesResponse {
                    revision: a.revision.max(b.revision),
                    ..a
                })
            }
            _ => return None,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four partitions by first byte: 0x00-0x3f, 0x40-0x7f, 0x80-0xbf, 0xc0-0xff.
    fn map4() -> PartitionMap {
        PartitionMap::new(4, u64::MAX).unwrap()
    }

    #[test]
    fn point_commands_go_to_their_keys_partition() {
        let m = map4();
        assert_eq!(partitions_of(&KvCommand::put("A", "1"), &m), vec![1]);
        assert_eq!(partitions_of(&KvCommand::get(vec![0x90]), &m), vec![2]);
        assert_eq!(partitions_of(&KvCommand::delete(vec![0xf0]), &m), vec![3]);
        // An empty range still goes somewhere: the partition of its key.
        assert_eq!(partitions_of(&KvCommand::range("z", "a"), &m), vec![1]);
    }

    #[test]
    fn ranges_go_to_every_partition_they_overlap() {
        let m = map4();
        let r = KvCommand::range(vec![0x30], vec![0x90]);
        let split = <KvStore as ServiceCodec>::split(&r, &m).unwrap();
        assert_eq!(
            split.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert!(split.iter().all(|(_, c)| *c == r));
        assert_eq!(
            partitions_of(&KvCommand::range(vec![0x50], vec![0]), &m),
            vec![1, 2, 3]
        );
    }

    #[test]
    fn transactions_across_partitions_are_refused() {
        let m = map4();
        let t = KvCommand::Txn(TxnRequest {
            compare: vec![Compare {
                key: vec![0x10],
                op: CompareOp::Equal,
                target: CompareTarget::Version(0),
            }],
            success: vec![RequestOp::Put(PutRequest {
                key: vec![0xd0],
                value: vec![],
                prev_kv: false,
                lease: 0,
            })],
            failure: vec![],
        });
        let err = <KvStore as ServiceCodec>::split(&t, &m).unwrap_err();
        assert_eq!(
            err,
            SplitError::Spans {
                partitions: vec![0, 3]
            }
        );
        let err = partita_service::envelope::<KvStore>(1, 1, 1, &t, &m).unwrap_err();
        assert!(matches!(err, SplitError::Spans { .. }));
        // Within one partition, or unpartitioned, it goes through.
        assert!(partita_service::envelope::<KvStore>(1, 1, 1, &t, &PartitionMap::single()).is_ok());
        let empty = KvCommand::Txn(TxnRequest {
            compare: vec![],
            success: vec![],
            failure: vec![],
        });
        assert_eq!(partitions_of(&empty, &m), vec![0]);
    }

    #[test]
    fn merges_refuse_missing_partitions_and_wrong_kinds() {
        let m = map4();
        let r = KvCommand::range(vec![0x30], vec![0x50]);
        let empty = |rev| {
            KvReply::Range(RangeResponse {
                kvs: vec![],
                count: 0,
                more: false,
                revision: rev,
            })
        };
        assert!(merge(&r, vec![(0, empty(1))], &m).is_err());
        let ok = merge(&r, vec![(1, empty(7)), (0, empty(3))], &m).unwrap();
        assert_eq!(ok, empty(7));
        let wrong = KvReply::Put(PutResponse {
            revision: 1,
            prev_kv: None,
        });
        assert!(merge(&r, vec![(0, empty(1)), (1, wrong.clone())], &m).is_err());
        assert!(merge(&KvCommand::get("a"), vec![(1, wrong)], &m).is_err());
    }

    #[test]
    fn accounting_maps_onto_the_btree_kinds() {
        let mut s = KvStore::new();
        let mut work = ExecutionWork::default();
        for cmd in [
            KvCommand::put("a", "1"),
            KvCommand::put("b", "1"),
            KvCommand::get("a"),
            KvCommand::range("a", "\0"),
            KvCommand::delete("a"),
        ] {
            let reply = <KvStore as StateMachine>::execute(&mut s, &cmd);
            KvStore::account(&cmd, &reply, &mut work);
        }
        assert_eq!(work.commands, 5);
        assert_eq!(work.by_kind, [2, 1, 0, 1, 0, 0, 1]);
        assert_eq!(work.query_entries, 2);
    }
}
