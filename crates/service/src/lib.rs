//! The state-machine API: what a service implements to be replicated by Partita.
//!
//! In the spirit of Eyrie (paper 003 §5.1), openraft's state machine and BFT-SMaRt's
//! `Executable`, a service is two traits. [`ServiceCodec`] is what its clients need:
//! its command and reply types and their encoding, whether a command only reads, the
//! objects (keys) a command touches ([`ServiceCodec::objects`]), how it splits over
//! partitions and worker threads and how replies merge. [`StateMachine`] adds what
//! replicas need: a deterministic [`StateMachine::execute`], undo records for
//! speculative execution, snapshot and restore, a digest of its state.
//! The execution models (`partita-smr`: the sequential replica with speculation, early
//! replies, checkpoints and state transfer) are generic over it, and ordering never
//! sees a command other than as bytes ([`partita_types::Payload`]).
//!
//! # Partitioning
//!
//! With state partitioning (paper 001 §III-C) each partition holds the objects whose
//! keys fall in its range ([`PartitionMap`]). A key type says where it falls with
//! [`PartitionKey::position`], an order-preserving map into `0..=u64::MAX`, so that a
//! range of keys is a range of partitions. [`ServiceCodec::split`] cuts a command into
//! the sub-command each addressed partition executes, and [`ServiceCodec::merge`] puts
//! their replies back together. The defaults send a command whose objects all lie in
//! one partition there, and refuse one that spans several ([`SplitError::Spans`]): a
//! service that can split such commands (the B+tree's range queries and batches, the
//! key-value store's range reads) overrides both. [`envelope`] turns a command into the
//! multicast envelope the client sends.
//!
//! # Determinism
//!
//! Every replica executes the same commands in the same order and must reach the
//! same state and replies: `execute` may not read clocks, random sources or anything
//! but the state and the command, and iteration over hash maps must not leak into
//! replies or snapshots. [`StateMachine::digest`] lets replicas (and the simulator)
//! compare states; two replicas with equal digests are taken to hold equal states.
//!
//! # Errors
//!
//! A command that does not decode, or that [`ServiceCodec::check`] refuses, is not
//! executed: the replica the client chose answers with the refusal's text
//! ([`partita_types::Outcome`]), every replica decides the same, and nothing changes.

use partita_types::{
    encode, mask_partitions, Body, ClientId, Command, DecodeError, GroupMask, NodeId, PartitionId,
    PartitionMap, Payload,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use std::ops::Bound;

/// A key's place in the partitioned key space: an order-preserving map into
/// `0..=u64::MAX` (keys `a <= b` have positions `position(a) <= position(b)`).
pub trait PartitionKey {
    fn position(&self) -> u64;
    /// The key as an object id for orderings that order only conflicting commands
    /// (EPaxos) or place objects (GeoPaxos+): equal keys give equal ids, and distinct
    /// keys distinct ones but for rare collisions, which only make two commands
    /// conflict that need not. The default is the position (exact for `u64`).
    fn object_id(&self) -> u64 {
        self.position()
    }
}

/// A 64-bit hash of `bytes`, the same on every machine and in every run (FNV-1a with a
/// final mix): object ids of byte-string keys.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

impl PartitionKey for u64 {
    fn position(&self) -> u64 {
        *self
    }
}

/// Byte strings fall by their first eight bytes, big endian, shorter ones padded with
/// zeros: lexicographic order is kept.
impl PartitionKey for [u8] {
    fn position(&self) -> u64 {
        let mut b = [0u8; 8];
        let n = self.len().min(8);
        b[..n].copy_from_slice(&self[..n]);
        u64::from_be_bytes(b)
    }
    /// The whole key's hash: keys that share their first eight bytes (etcd's
    /// `/registry/...`) must not all conflict.
    fn object_id(&self) -> u64 {
        stable_hash(self)
    }
}

impl PartitionKey for Vec<u8> {
    fn position(&self) -> u64 {
        self.as_slice().position()
    }
    fn object_id(&self) -> u64 {
        self.as_slice().object_id()
    }
}

impl PartitionKey for String {
    fn position(&self) -> u64 {
        self.as_bytes().position()
    }
    fn object_id(&self) -> u64 {
        self.as_bytes().object_id()
    }
}

/// What a command touches, as an ordering that orders only conflicting commands
/// (EPaxos) needs it: two commands conflict when they share an object and one of them
/// writes it, or when either touches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// Object ids ([`PartitionKey::object_id`]) and whether the command may write
    /// each, sorted by id, each once (read and written counts as written).
    pub objects: Vec<(u64, bool)>,
    /// The command may touch any object (a range, a scan, a malformed command): it
    /// conflicts with every command.
    pub everything: bool,
}

impl Access {
    /// Conflicts with every command.
    pub fn everything() -> Access {
        Access {
            objects: Vec::new(),
            everything: true,
        }
    }

    /// These objects, read or written by a command that writes (`write`) or only
    /// reads; a range makes it touch everything.
    pub fn of<K: PartitionKey>(objects: &Objects<K>, write: bool) -> Access {
        if !objects.ranges.is_empty() {
            return Access::everything();
        }
        let mut a = Access::default();
        for k in &objects.keys {
            a.add(k.object_id(), write);
        }
        a
    }

    /// Add object `id` (kept sorted and unique; written wins over read).
    pub fn add(&mut self, id: u64, write: bool) {
        match self.objects.binary_search_by_key(&id, |&(o, _)| o) {
            Ok(i) => self.objects[i].1 |= write,
            Err(i) => self.objects.insert(i, (id, write)),
        }
    }

    /// Whether the two must be ordered with each other.
    pub fn conflicts(&self, other: &Access) -> bool {
        if self.everything || other.everything {
            return true;
        }
        let (mut i, mut j) = (0, 0);
        while i < self.objects.len() && j < other.objects.len() {
            let ((a, aw), (b, bw)) = (self.objects[i], other.objects[j]);
            match a.cmp(&b) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    if aw || bw {
                        return true;
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        false
    }
}

/// The objects a command touches: single keys, and ranges of keys (a range query, or
/// "every key after k" for a next). Routing (partitions now; P-SMR groups, DS-SMR's
/// oracle and GeoPaxos's serializers later) is computed from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Objects<K> {
    pub keys: Vec<K>,
    pub ranges: Vec<(Bound<K>, Bound<K>)>,
}

impl<K> Default for Objects<K> {
    fn default() -> Self {
        Objects {
            keys: Vec::new(),
            ranges: Vec::new(),
        }
    }
}

impl<K: PartitionKey> Objects<K> {
    /// One key.
    pub fn key(k: K) -> Objects<K> {
        Objects {
            keys: vec![k],
            ranges: Vec::new(),
        }
    }

    /// Whether the command touches nothing at all.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.ranges.is_empty()
    }

    /// The partitions these objects fall in, one bit each (0 when there are none).
    pub fn partitions(&self, map: &PartitionMap) -> GroupMask {
        let mut mask = 0;
        for k in &self.keys {
            mask |= 1u64 << map.of_key(k.position());
        }
        for (lo, hi) in &self.ranges {
            let lo = match lo {
                Bound::Included(k) | Bound::Excluded(k) => k.position(),
                Bound::Unbounded => 0,
            };
            let hi = match hi {
                Bound::Included(k) | Bound::Excluded(k) => k.position(),
                Bound::Unbounded => u64::MAX,
            };
            mask |= map.mask_of_range(lo, hi);
        }
        mask
    }
}

/// Why a command cannot be cut into per-partition sub-commands.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    #[error(
        "this command touches objects in partitions {partitions:?}; the service cannot split \
         it across partitions"
    )]
    Spans { partitions: Vec<PartitionId> },
    #[error("{0}")]
    Refused(String),
}

/// Why sub-replies do not merge into the reply of the whole command (they do not fit
/// it: a missing or extra partition, or a reply of the wrong kind).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("sub-replies do not merge: {0}")]
pub struct MergeError(pub String);

/// The kinds of work the simulator's cost table prices, in [`ExecutionWork::by_kind`]
/// order. They are the B+tree's operations; another service counts each command as
/// the kind closest in cost (a key-value put as an insert or update, a get as a read,
/// a range read as a query returning its entries), or as none (then only
/// [`ExecutionWork::commands`] counts it).
pub const WORK_KINDS: [&str; 7] = [
    "insert", "delete", "update", "read", "next", "prev", "query",
];

/// Execution work done, counted as it happens and never rewound by a rollback (a
/// rolled-back speculation did run). Differences across a handler tell what that
/// handler executed; the simulator charges CPU time from them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecutionWork {
    /// Commands executed (speculated or decided).
    pub commands: u64,
    /// Service operations ([`StateMachine::op_count`]: a B+tree batch of seven is 7).
    pub ops: u64,
    /// The operations by kind ([`WORK_KINDS`] order).
    pub by_kind: [u64; 7],
    /// Entries returned by range reads.
    pub query_entries: u64,
}

impl ExecutionWork {
    /// The work done since `before` (zero where a counter went back, as when the
    /// replica was replaced by a restored checkpoint).
    pub fn since(&self, before: &ExecutionWork) -> ExecutionWork {
        let mut by_kind = [0; 7];
        for (i, k) in by_kind.iter_mut().enumerate() {
            *k = self.by_kind[i].saturating_sub(before.by_kind[i]);
        }
        ExecutionWork {
            commands: self.commands.saturating_sub(before.commands),
            ops: self.ops.saturating_sub(before.ops),
            by_kind,
            query_entries: self.query_entries.saturating_sub(before.query_entries),
        }
    }
}

/// A service as its clients see it: its name, its commands and replies as bytes, the
/// objects a command names and the partitions and worker-thread groups it goes to,
/// and how the partitions' replies merge. Clients need only this
/// (`partita_client_core::ClientCore<S: ServiceCodec>`), so a client's wire needs no
/// state machine that could execute (DS-SMR's `DsWire`); a replicated service is a
/// [`StateMachine`], which adds execution.
pub trait ServiceCodec: Sized + Send + 'static {
    /// The service's name in cluster files, checkpoints and histories (`"btree"`,
    /// `"kv"`): a checkpoint of one service is never restored into another.
    const NAME: &'static str;
    type Command: Clone + Debug + Send + Sync + Serialize + DeserializeOwned + 'static;
    type Reply: Clone + Debug + PartialEq + Send + Sync + Serialize + DeserializeOwned + 'static;
    type Key: PartitionKey + Clone + Debug;
    /// The command's bytes (the project's codec by default).
    fn encode_command(cmd: &Self::Command) -> Payload {
        Payload::from(encode(cmd))
    }
    fn decode_command(bytes: &[u8]) -> Result<Self::Command, DecodeError> {
        partita_types::decode(bytes)
    }
    fn encode_reply(reply: &Self::Reply) -> Payload {
        Payload::from(encode(reply))
    }
    fn decode_reply(bytes: &[u8]) -> Result<Self::Reply, DecodeError> {
        partita_types::decode(bytes)
    }
    /// Refuse an impossible command (an oversized key, say) with a reason, before it
    /// is executed. Clients check it before sending; replicas check it again on what
    /// was ordered (a client may be broken).
    fn check(_cmd: &Self::Command) -> Result<(), String> {
        Ok(())
    }
    /// Whether executing `cmd` cannot change the state. Read-only commands are
    /// executed only by the replica the client chose (paper 001 §IV).
    fn is_read_only(cmd: &Self::Command) -> bool;
    /// The objects `cmd` touches.
    fn objects(cmd: &Self::Command) -> Objects<Self::Key>;
    /// The sub-command each addressed partition executes, in partition order. The
    /// default: the partition of every object, if they share one (partition 0 for a
    /// command that touches nothing); several is an error.
    fn split(
        cmd: &Self::Command,
        map: &PartitionMap,
    ) -> Result<Vec<(PartitionId, Self::Command)>, SplitError> {
        let mask = Self::objects(cmd).partitions(map);
        match mask.count_ones() {
            0 => Ok(vec![(0, cmd.clone())]),
            1 => Ok(vec![(mask.trailing_zeros(), cmd.clone())]),
            _ => Err(SplitError::Spans {
                partitions: mask_partitions(mask),
            }),
        }
    }
    /// P-SMR's command-to-thread mapping (paper 002 §III-F, §IV): the one worker
    /// thread that may run `cmd` alone, in parallel with the others, or `None` for
    /// g_all (every thread; synchronous mode). `optimistic` asks for opt-PSMR's OC-G
    /// (static dependencies only: commands that may change the state's shape go to one
    /// thread too, and must pass [`StateMachine::thread_check`]); otherwise CC-G. A
    /// single-thread answer of CC-G must be safe without any check: two commands CC-G
    /// sends to different threads never touch the same data. For a
    /// [`StateMachine::TIMED`] service, a command sent to one thread must neither read
    /// ordered time nor change what [`StateMachine::time_changes`] answers (its time
    /// reaches the state lazily under P-SMR). The default sends every command to g_all,
    /// which is always safe (and runs like SMR).
    fn thread_group(
        _cmd: &Self::Command,
        _layout: &ThreadLayout,
        _optimistic: bool,
    ) -> Option<usize> {
        None
    }
    /// The reply of the whole command from its partitions' sub-replies (any order).
    /// The default takes the only one.
    fn merge(
        _cmd: &Self::Command,
        mut parts: Vec<(PartitionId, Self::Reply)>,
        _map: &PartitionMap,
    ) -> Result<Self::Reply, MergeError> {
        if parts.len() == 1 {
            Ok(parts.pop().expect("one").1)
        } else {
            Err(MergeError(format!(
                "{} sub-replies for a command of one partition",
                parts.len()
            )))
        }
    }
}

/// A replicated service: its [`ServiceCodec`], and how replicas execute it. See the crate
/// doc for what each part is for.
pub trait StateMachine: ServiceCodec {
    /// What undoes one command's effects (speculative execution, paper 001 §III-B).
    type Undo: Send + 'static;

    /// The empty state every replica starts from.
    fn new() -> Self;

    /// What `cmd` touches, with the state as it is now, for orderings that order only
    /// conflicting commands (EPaxos): the default is [`ServiceCodec::objects`], all
    /// written unless the command only reads, and everything for a range. A service
    /// may narrow it from its state (the B+tree's next and prev read up to the
    /// neighbour they would find) or add objects every command of a kind shares (the
    /// key-value store's store-wide revision), as long as two commands whose order
    /// matters conflict wherever they are proposed.
    fn access(&self, cmd: &Self::Command) -> Access {
        Access::of(&Self::objects(cmd), !Self::is_read_only(cmd))
    }

    /// GeoPaxos+ (paper 004 §III-A): the serializers that must order `cmd` submitted at
    /// replica `from` (bit `i` for replica `i`'s serializer), for a service that places
    /// its own objects (the geo B+tree: its nodes, with splits predicted): one
    /// serializer of each object it only reads (the nearest to `from`), every
    /// serializer of each it writes. `None` (the default): the service places nothing
    /// itself, and the replica places the objects [`StateMachine::access`] names
    /// ([`ObjectPlacement`]). A service that answers `Some` for a command answers for
    /// it [`StateMachine::misplaced`], [`StateMachine::execute_at`] and
    /// [`StateMachine::reconfigure`] too.
    fn psite(&self, _cmd: &Self::Command, _from: usize) -> Option<u64> {
        None
    }

    /// GeoPaxos+'s delivery decision (paper 004 Algorithm 1) for a service that places
    /// its own objects: `Some(new)` when the serializers `dst` that ordered `cmd` (from
    /// replica `from`) no longer cover it here, now (a reconfiguration moved an object,
    /// a split nobody predicted): nobody executes it and its origin submits it again to
    /// `new`. Deterministic: every replica decides alike at the same point of the order.
    fn misplaced(&self, _cmd: &Self::Command, _from: usize, _dst: u64) -> Option<u64> {
        None
    }

    /// Execute a command GeoPaxos+ ordered for replica `from`, counting its accesses for
    /// the next reconfiguration (a service that places its own objects). The counts are
    /// replicated state: every replica calls it for every command that runs, reads
    /// included (a replica that ran reads only for its own clients would count
    /// differently and reconfigure differently). The default executes it.
    fn execute_at(&mut self, cmd: &Self::Command, _from: usize) -> Self::Reply {
        self.execute(cmd)
    }

    /// GeoPaxos+'s reconfiguration (the DOP, ordered with every command): recompute the
    /// serializers of the objects from the accesses counted, then forget the counts.
    /// The default does nothing.
    fn reconfigure(&mut self) {}

    /// Execute `cmd` deterministically.
    fn execute(&mut self, cmd: &Self::Command) -> Self::Reply;

    /// Whether the state depends on ordered time ([`StateMachine::advance_time`]):
    /// its orderings then move ordered time at least every
    /// [`StateMachine::TICK_MS`] while idle, and P-SMR hands a value's time to the
    /// state as a step of every thread where [`StateMachine::time_changes`] says it
    /// may change something.
    const TIMED: bool = false;

    /// How often ordered time must move while nothing is ordered, for a
    /// [`StateMachine::TIMED`] service (a lease must expire in an idle cluster too);
    /// the step between two values is capped at twice it.
    const TICK_MS: u64 = 500;

    /// Ordered time moves to `now_ms` (ms, the time the ordering stamped on the value
    /// about to run; it never decreases): called before the commands of every value, at
    /// every replica alike, decided or speculated. A service whose state depends on
    /// time (etcd's leases) records it and does what it brings (a lease expires),
    /// returning what undoes that; the default ignores it. Deterministic, like
    /// [`StateMachine::execute`]: never read a local clock.
    fn advance_time(&mut self, _now_ms: u64) -> Option<Self::Undo> {
        None
    }

    /// Whether moving ordered time to `now_ms` may change this state (a lease would
    /// expire by then), for a [`StateMachine::TIMED`] service. P-SMR asks it when a
    /// value arrives while commands of single threads are queued, and hands the value's
    /// time to the state as a step of every thread only where the answer is `true`;
    /// otherwise the state's time moves later, before the next command that runs with
    /// every thread stopped. The default, always, is right for every timed service.
    fn time_changes(&self, _now_ms: u64) -> bool {
        true
    }

    /// A new cluster starts from this state: a backup seeded at instance 0 (`partita
    /// snapshot restore`, `partita_smr::seed_checkpoint`), restored by every replica
    /// alike before anything is ordered. The new cluster's ordered time has nothing to
    /// do with the old one's, so a service that keeps deadlines in ordered time starts
    /// them over at the first value (the key-value store gives every lease its whole
    /// TTL again, as etcd's leader does after a restore). The default does nothing.
    fn on_seeded(&mut self) {}

    /// Apply a genesis command: the service's initial contents or configuration, the
    /// same at every replica, applied to [`StateMachine::new`]'s state before anything
    /// is ordered (`partita_smr::ServiceFactory::seeded`). The default executes it.
    fn genesis(&mut self, cmd: &Self::Command) {
        self.execute(cmd);
    }

    /// Execute `cmd` and return what undoes it.
    fn execute_undoable(&mut self, cmd: &Self::Command) -> (Self::Reply, Self::Undo);

    /// Undo one command's effects; undos are applied newest first.
    fn undo(&mut self, undo: Self::Undo);

    /// The whole state as bytes, a function of the state alone (equal states give
    /// equal bytes), for checkpoints and state transfer.
    fn snapshot(&self) -> Vec<u8>;

    /// The state a snapshot describes; damaged bytes are an error, never a panic.
    fn restore(bytes: &[u8]) -> Result<Self, String>;

    /// A digest of the state: equal states have equal digests, whatever history led
    /// to them.
    fn digest(&self) -> u64;

    /// Objects held (entries, keys, accounts), for status output.
    fn len(&self) -> u64 {
        0
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Service operations a command stands for (throughput in operations/s).
    fn op_count(_cmd: &Self::Command) -> u64 {
        1
    }

    /// Count the work of one executed command (see [`WORK_KINDS`]).
    fn account(cmd: &Self::Command, _reply: &Self::Reply, work: &mut ExecutionWork) {
        work.commands += 1;
        work.ops += Self::op_count(cmd);
    }

    /// opt-PSMR's safety check (paper 002 §IV-B, Algorithm 1): whether thread `t` may
    /// execute `cmd` alone now, with the state as it is, although CC-G would send it to
    /// g_all. `Err` says why not; the command then has no effect and is resubmitted
    /// conservatively. Deterministic: every replica reaches the same verdict. The
    /// default: never.
    fn thread_check(
        &self,
        _cmd: &Self::Command,
        _t: usize,
        _layout: &ThreadLayout,
    ) -> Result<(), String> {
        Err(format!(
            "the {} service has no opt-PSMR safety check",
            Self::NAME
        ))
    }

    /// P-SMR on OS threads: a view of the state through which the worker threads of
    /// `layout` execute their own commands at the same time, each on a thread of its
    /// own (see [`SharedExecution`]); the state is whole again when the view is
    /// dropped. `None` (the default): the service has no such view, and the worker
    /// threads run one after another.
    fn shared(&mut self, _layout: &ThreadLayout) -> Option<Box<dyn SharedExecution<Self> + '_>> {
        None
    }

    /// How many times the state changed shape so far (for the B+tree: splits, merges,
    /// borrows, root changes). The P-SMR replica's race check: a command one thread
    /// ran alone must not move it, since other threads may be reading the shared
    /// structure at the same time. The default (0) checks nothing.
    fn shape_changes(&self) -> u64 {
        0
    }
}

/// GeoPaxos+'s placement of a service's objects on serializers (paper 004 §III), kept by
/// the replica for a service that does not place its own ([`StateMachine::psite`]
/// answers `None`): per object its serializers and the reads and writes counted since
/// the last reconfiguration, by origin replica. Sets of serializers are bitmasks, bit
/// `i` for replica `i`'s. Replicated state: every method is deterministic, and the
/// replica checkpoints it with the service's state.
pub trait ObjectPlacement: Send {
    /// The serializers that must order a command touching `access`, submitted at
    /// replica `from`: one of each object it only reads (the nearest to `from`), all
    /// of each it writes, every serializer for a command that touches everything.
    fn psite(&self, access: &Access, from: usize) -> u64;
    /// The delivery decision: `Some(new)` when `dst` no longer covers the command.
    fn misplaced(&self, access: &Access, from: usize, dst: u64) -> Option<u64>;
    /// The command ran at this point of the order: count its accesses. Every replica
    /// records every command that runs, reads included (the counts are replicated).
    fn record(&mut self, access: &Access, from: usize);
    /// A reconfiguration (the DOP): recompute every counted object's serializers, then
    /// forget the counts.
    fn reconfigure(&mut self);
    /// The whole placement as bytes (a function of the placement alone).
    fn snapshot(&self) -> Vec<u8>;
    /// The placement a snapshot describes; damaged bytes are an error.
    fn restore(&mut self, bytes: &[u8]) -> Result<(), String>;
    /// Equal placements, equal digests.
    fn digest(&self) -> u64;
    /// Objects placed elsewhere than their initial serializers, or counted (status).
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// P-SMR: a replica's worker threads over the service's key space (paper 002
/// §III-F), or over its partition's part of it: thread `t` owns the positions from
/// `key_min + ⌈t·(key_max−key_min+1)/threads⌉` up to the next thread's first
/// (positions below `key_min` belong to the first thread, above `key_max` to the
/// last).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ThreadLayout {
    pub threads: usize,
    pub key_min: u64,
    pub key_max: u64,
}

/// P-SMR on OS threads: what runs a round's K calls at the same time, each on a thread
/// of its own. The driver provides it (cores stay free of threads): `partita-gang` on
/// real processes; without one, a replica runs its worker threads one after another.
pub trait ThreadRunner: Send + Sync {
    /// Calls per round.
    fn threads(&self) -> usize;
    /// `f(i)` for every `i` in `0..threads()`, at the same time; returns when all did
    /// (and raises a panic of any call then).
    fn run(&self, f: &(dyn Fn(usize) + Sync));
}

/// What a worker thread's command came to in [`SharedExecution::execute`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shared<R> {
    /// Executed: its reply.
    Done(R),
    /// The opt-PSMR safety check failed: no effect (the command is resubmitted
    /// conservatively).
    Refused(String),
    /// Not something this view can run alone at the same time as other threads (it
    /// would change what they share): no effect; the replica runs it by itself, with
    /// every other thread stopped.
    Alone,
}

/// P-SMR on OS threads (paper 002 §III-F, §IV): the state as K worker threads share
/// it. Thread `t` calls [`SharedExecution::execute`] with the commands its group
/// delivers, in order, while the other threads call it with theirs. A command of
/// thread `t` that CC-G maps to `t` (`check` false) or that passed the opt-PSMR safety
/// check touches nothing another thread touches; an implementation must make sure of
/// it itself (answering [`Shared::Alone`] otherwise), so that no caller can make two
/// threads write the same memory. Results are those of [`StateMachine::execute`] on
/// the state in the order each thread ran its commands.
pub trait SharedExecution<S: StateMachine>: Sync {
    /// Thread `t` executes `cmd`. With `check`, the opt-PSMR safety check decides
    /// first, as [`StateMachine::thread_check`] does on the same state.
    fn execute(&self, t: usize, cmd: &S::Command, check: bool) -> Shared<S::Reply>;
}

/// Most worker threads a P-SMR replica takes (one bit of [`partita_types::GroupMask`]
/// each).
pub const THREADS_MAX: usize = 64;

impl ThreadLayout {
    /// `threads` workers over the positions `0..=key_max`.
    pub fn new(threads: usize, key_max: u64) -> Result<ThreadLayout, String> {
        ThreadLayout::within(threads, 0, key_max)
    }

    /// `threads` workers over the positions `key_min..=key_max` (a partition's).
    pub fn within(threads: usize, key_min: u64, key_max: u64) -> Result<ThreadLayout, String> {
        if threads == 0 {
            return Err("a P-SMR replica needs at least one worker thread".into());
        }
        if threads > THREADS_MAX {
            return Err(format!("{threads} worker threads: at most {THREADS_MAX}"));
        }
        if key_min > key_max {
            return Err(format!("no keys in {key_min}..={key_max}"));
        }
        let keys = key_max as u128 - key_min as u128 + 1;
        if threads as u128 > keys {
            return Err(format!(
                "{threads} worker threads over the {keys} keys {key_min}..={key_max}: every \
                 thread needs a key"
            ));
        }
        Ok(ThreadLayout {
            threads,
            key_min,
            key_max,
        })
    }

    /// Every thread's bit.
    pub fn all(&self) -> partita_types::GroupMask {
        if self.threads >= 64 {
            u64::MAX
        } else {
            (1u64 << self.threads) - 1
        }
    }
}

/// The envelope a client multicasts for `cmd`: its session and sequence number, the
/// replica that must answer, and what each addressed partition executes (one payload
/// for one partition; one per partition otherwise).
pub fn envelope<S: ServiceCodec>(
    client: ClientId,
    seq: u64,
    reply_to: NodeId,
    cmd: &S::Command,
    map: &PartitionMap,
) -> Result<Command, SplitError> {
    S::check(cmd).map_err(SplitError::Refused)?;
    let parts = S::split(cmd, map)?;
    assert!(
        !parts.is_empty() && parts.windows(2).all(|w| w[0].0 < w[1].0),
        "{}::split must name each partition once, in order",
        S::NAME
    );
    assert!(
        parts.iter().all(|(p, _)| *p < map.count()),
        "{}::split named a partition outside the map",
        S::NAME
    );
    let groups = parts.iter().fold(0u64, |m, (p, _)| m | (1u64 << p));
    let body = if parts.len() == 1 {
        Body::Whole {
            groups,
            payload: S::encode_command(&parts[0].1),
        }
    } else {
        Body::Split {
            groups,
            payloads: parts.iter().map(|(_, c)| S::encode_command(c)).collect(),
        }
    };
    Ok(Command {
        client,
        seq,
        session: 0,
        reply_to,
        body,
        route: 0,
    })
}

/// The partitions a command's envelope addresses, in order.
pub fn partitions_of<S: ServiceCodec>(
    cmd: &S::Command,
    map: &PartitionMap,
) -> Result<Vec<PartitionId>, SplitError> {
    Ok(S::split(cmd, map)?.into_iter().map(|(p, _)| p).collect())
}

/// Decode a reply's outcome into the service's reply (a refusal stays one; bytes
/// that do not decode become one too, naming the service).
pub fn decode_outcome<S: ServiceCodec>(
    outcome: &partita_types::Outcome,
) -> Result<S::Reply, String> {
    match outcome {
        Ok(bytes) => S::decode_reply(bytes)
            .map_err(|e| format!("a {} reply that does not decode: {e}", S::NAME)),
        Err(why) => Err(why.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    /// A register per key: the smallest service there is, to test the defaults.
    struct Registers(std::collections::BTreeMap<u64, u64>);

    #[derive(Clone, Debug, Serialize, Deserialize)]
    enum Cmd {
        Set(u64, u64),
        Get(u64),
        Swap(u64, u64),
    }

    impl ServiceCodec for Registers {
        const NAME: &'static str = "registers";
        type Command = Cmd;
        type Reply = Option<u64>;
        type Key = u64;
        fn is_read_only(cmd: &Cmd) -> bool {
            matches!(cmd, Cmd::Get(_))
        }
        fn objects(cmd: &Cmd) -> Objects<u64> {
            match cmd {
                Cmd::Set(k, _) | Cmd::Get(k) => Objects::key(*k),
                Cmd::Swap(a, b) => Objects {
                    keys: vec![*a, *b],
                    ranges: vec![],
                },
            }
        }
    }

    impl StateMachine for Registers {
        type Undo = (u64, Option<u64>);
        fn new() -> Self {
            Registers(Default::default())
        }
        fn execute(&mut self, cmd: &Cmd) -> Option<u64> {
            self.execute_undoable(cmd).0
        }
        fn execute_undoable(&mut self, cmd: &Cmd) -> (Option<u64>, (u64, Option<u64>)) {
            match cmd {
                Cmd::Set(k, v) => {
                    let old = self.0.insert(*k, *v);
                    (old, (*k, old))
                }
                Cmd::Get(k) => (self.0.get(k).copied(), (*k, self.0.get(k).copied())),
                Cmd::Swap(..) => unreachable!("never executed in these tests"),
            }
        }
        fn undo(&mut self, (k, old): (u64, Option<u64>)) {
            match old {
                Some(v) => self.0.insert(k, v),
                None => self.0.remove(&k),
            };
        }
        fn snapshot(&self) -> Vec<u8> {
            encode(&self.0)
        }
        fn restore(bytes: &[u8]) -> Result<Self, String> {
            partita_types::decode(bytes)
                .map(Registers)
                .map_err(|e| e.to_string())
        }
        fn digest(&self) -> u64 {
            self.0
                .iter()
                .fold(0, |h, (k, v)| h ^ k.wrapping_mul(31) ^ v)
        }
    }

    #[test]
    fn byte_keys_keep_their_order_in_positions() {
        let keys: Vec<&[u8]> = vec![b"", b"a", b"ab", b"abcdefgh", b"abcdefghz", b"b", b"\xff"];
        for w in keys.windows(2) {
            assert!(w[0] <= w[1]);
            assert!(w[0].position() <= w[1].position(), "{w:?}");
        }
        assert_eq!(b"\x01".as_slice().position(), 1u64 << 56);
    }

    #[test]
    fn objects_map_to_partitions() {
        let map = PartitionMap::new(4, 400).unwrap();
        let o = Objects {
            keys: vec![5u64, 350],
            ranges: vec![(Bound::Included(150), Bound::Excluded(250))],
        };
        assert_eq!(o.partitions(&map), 0b1111);
        let next = Objects::<u64> {
            keys: vec![],
            ranges: vec![(Bound::Excluded(150), Bound::Unbounded)],
        };
        assert_eq!(next.partitions(&map), 0b1110);
        assert_eq!(Objects::<u64>::default().partitions(&map), 0);
    }

    #[test]
    fn the_default_split_keeps_one_partition_and_refuses_several() {
        let map = PartitionMap::new(2, 100).unwrap();
        let c = envelope::<Registers>(1, 1, 3, &Cmd::Set(70, 1), &map).unwrap();
        assert_eq!(c.body.groups(), 0b10);
        let back = Registers::decode_command(c.body.payload_for(1).unwrap()).unwrap();
        assert!(matches!(back, Cmd::Set(70, 1)));
        let err = envelope::<Registers>(1, 2, 3, &Cmd::Swap(10, 90), &map).unwrap_err();
        assert_eq!(
            err,
            SplitError::Spans {
                partitions: vec![0, 1]
            }
        );
        assert!(err.to_string().contains("[0, 1]"));
        // One partition: everything goes to partition 0.
        let c = envelope::<Registers>(1, 3, 3, &Cmd::Swap(10, 90), &PartitionMap::single());
        assert_eq!(c.unwrap().body.groups(), 1);
    }

    #[test]
    fn the_default_merge_takes_exactly_one_reply() {
        let map = PartitionMap::single();
        assert_eq!(
            Registers::merge(&Cmd::Get(1), vec![(0, Some(4))], &map),
            Ok(Some(4))
        );
        assert!(Registers::merge(&Cmd::Get(1), vec![(0, None), (1, None)], &map).is_err());
        assert!(Registers::merge(&Cmd::Get(1), vec![], &map).is_err());
    }

    #[test]
    fn outcomes_decode_or_stay_refusals() {
        let ok: partita_types::Outcome = Ok(Registers::encode_reply(&Some(9)));
        assert_eq!(decode_outcome::<Registers>(&ok), Ok(Some(9)));
        let bad: partita_types::Outcome = Ok(Payload::from_static(b"\x07"));
        assert!(decode_outcome::<Registers>(&bad)
            .unwrap_err()
            .contains("registers reply"));
        let refused: partita_types::Outcome =
            Err(partita_types::Refusal::Rejected("too big".into()));
        assert_eq!(decode_outcome::<Registers>(&refused), Err("too big".into()));
    }

    #[test]
    fn undo_restores_the_state() {
        let mut r = Registers::new();
        let d0 = r.digest();
        let (_, u1) = r.execute_undoable(&Cmd::Set(1, 10));
        let (old, u2) = r.execute_undoable(&Cmd::Set(1, 20));
        assert_eq!(old, Some(10));
        r.undo(u2);
        r.undo(u1);
        assert_eq!(r.digest(), d0);
        let back = Registers::restore(&r.snapshot()).unwrap();
        assert_eq!(back.digest(), r.digest());
        assert!(Registers::restore(b"\xff\xff").is_err());
    }
}
