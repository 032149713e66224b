//! Execution models. For now the sequential replica of paper 001 §IV ("Fully replicated
//! B-tree"), generic over the service it replicates ([`partita_service::StateMachine`]):
//! every replica executes every mutating command in the decided order; a read-only
//! command is ordered like everything else but only the replica the client chose
//! executes it; only the chosen replica replies. Commands arrive as opaque payloads
//! and are decoded here, with the service's codec; a payload that does not decode, or
//! that the service's `check` refuses, is answered with the refusal and changes
//! nothing, identically on every replica.
//!
//! The node core drives a replica through the object-safe [`Replica`] trait and builds
//! one with a [`ServiceFactory`] (`service::<S>()`), so nothing above this crate is
//! generic over the service.
//!
//! Exactly-once: a command carries (client id, sequence number). The replica keeps, per
//! client, the sequence number and reply of its last *mutating* command. A resubmitted
//! mutation is answered from that cache instead of being executed twice; anything older
//! than the cached sequence number is stale (the client has moved on) and ignored. Reads
//! need no cache: re-executing a resubmitted read at its new position in the order is
//! still within the operation's interval, so it stays linearizable. Because only
//! mutations touch the cache, it is the same on every replica (it is part of the
//! replicated state).
//!
//! Input: [`SequentialReplica::execute`] with a decided value, in instance order.
//! Output: the replies this replica must send. Invariants
//! ([`SequentialReplica::invariants`]): instances are executed once and in order; the
//! reply cache never goes backwards for a client and holds no reply from an instance
//! not yet executed.
//!
//! Speculative execution (paper 001 §III-B): with Ring Paxos a replica sees each
//! proposed value (Phase 2A) before it is decided. [`SequentialReplica::propose`] hands
//! it such a value; once it is the next instance after everything executed or already
//! speculated, the replica executes it at once, keeping per-instance undo records (the
//! service's undo records, the reply-cache entries it replaced, the cache's
//! high-water mark) and *holding* its replies. [`SequentialReplica::execute`] with the
//! decision then either confirms the head speculation (same value id: its held replies
//! are released) or rolls every speculated instance back, newest first, executes the
//! decided value and re-speculates the later proposals still pending. A newer
//! proposal for an already speculated instance (a new leader) rolls back from that
//! instance at once. With deferred speculation
//! ([`SequentialReplica::set_deferred_speculation`], what the node core uses),
//! `propose` and `execute` only record proposals and roll back what they contradict;
//! the caller runs [`SequentialReplica::speculate`] later, after sending the replies
//! the decision released. Invariants: the tree is the decided prefix plus the speculated
//! suffix; [`SequentialReplica::last_instance`] is the last *decided* instance
//! executed; [`SequentialReplica::digest`] is the digest of the decided state;
//! [`SequentialReplica::checkpoint`] refuses (panics) while anything is speculated, so
//! its caller rolls the speculation back first
//! ([`SequentialReplica::rollback_speculation`]) and re-speculates after
//! ([`SequentialReplica::respeculate`]); the re-speculation computes the same held
//! replies again. [`ReplicaStats::work`] counts the execution work done, rolled-back
//! speculation included, for CPU models.
//!
//! Early replies (paper 001 §VII; [`SequentialReplica::set_early_replies`]): the held
//! replies of a speculation also leave at once as tentative replies
//! ([`partita_types::early::EarlyReply::Tentative`]), and when the decision confirms
//! the speculation, a short confirmation per held reply leaves instead of the reply
//! ([`SequentialReplica::take_early`]). A rollback sends nothing: the re-execution
//! sends new tentative replies (speculated again) or final ones (the decided value).
//!
//! Checkpoints ([`checkpoint`]): [`SequentialReplica::checkpoint`] serializes the state,
//! the reply cache and the instance covered into one checksummed byte string that
//! [`SequentialReplica::restore`] turns back into a replica answering exactly as the
//! original would (paper 001 §IV: replicas checkpoint so that acceptors can truncate
//! their logs; a replica that fell behind the truncation point restores a peer's
//! checkpoint, then learns the suffix).

pub mod checkpoint;
pub mod sessions;

pub use checkpoint::{
    checkpoint_header, checkpoint_identity, checkpoint_ordering, read_checkpoint,
    restamp_checkpoint, seed_checkpoint, service_id, unsafe_move_checkpoint, verify_checkpoint,
    verify_checkpoint_of, write_checkpoint, CheckpointError, CheckpointInfo, CheckpointParts,
    CHECKPOINT_IDENTITY_BYTES, CHECKPOINT_MAGIC, CHECKPOINT_VERSION, INSTANCE_MAX,
};

pub use partita_service::{
    Access, ExecutionWork, ServiceCodec, Shared, StateMachine, ThreadLayout, ThreadRunner,
    WORK_KINDS as OP_KINDS,
};

use partita_consensus::Value;
use partita_consensus::Vid;
use partita_types::early::EarlyReply;
use partita_types::{
    ClientId, Command, DetHashMap, Instance, NodeId, Outcome, PartitionId, PartitionLayout,
    Payload, Refusal, Reply,
};
use std::any::Any;
use std::collections::{BTreeMap, VecDeque};
use std::marker::PhantomData;
use std::sync::Arc;

#[derive(Clone, Debug, Default)]
pub struct ReplicaStats {
    pub commands_executed: u64,
    pub reads_skipped: u64,
    pub duplicates_answered: u64,
    pub stale_ignored: u64,
    /// Sessions opened, and renewed.
    pub sessions_opened: u64,
    pub sessions_renewed: u64,
    /// Sessions forgotten after their lease ran out.
    pub sessions_expired: u64,
    /// Commands refused because their session is not (or no longer) known.
    pub session_refusals: u64,
    /// Commands refused without execution (did not decode, or the service's `check`
    /// refused them).
    pub refused: u64,
    /// Service operations executed ([`StateMachine::op_count`]).
    pub ops: u64,
    /// Instances executed speculatively (a re-speculation after a rollback counts again).
    pub speculated: u64,
    /// Speculated instances the decision confirmed (their held replies were released).
    pub speculation_confirmed: u64,
    /// Speculated instances rolled back (a decision or a newer proposal disagreed).
    pub speculation_rolled_back: u64,
    /// Work this replica did, rolled-back speculation included (never rewound): what
    /// a CPU model charges, where it ran.
    pub work: ExecutionWork,
    /// P-SMR: commands one worker thread ran alone, and g_all commands run in
    /// synchronous mode (every thread stopped at them).
    pub psmr_parallel: u64,
    pub psmr_synchronous: u64,
    /// opt-PSMR: commands that passed the safety check (ran alone although CC-G would
    /// have sent them to g_all), and those that failed it (answered "resubmit").
    pub psmr_passed: u64,
    pub psmr_failed: u64,
    /// P-SMR on OS threads: commands a thread could not run at the same time as the
    /// others (and those after them in its round), run with every thread stopped.
    pub psmr_alone: u64,
    /// GeoPaxos+: commands whose serializers no longer covered them where they were
    /// delivered (the same at every replica), those this replica submitted again as
    /// their origin, commands ordered by several serializers that ran, and
    /// reconfigurations (DOPs).
    pub resubmit_decisions: u64,
    pub resubmitted: u64,
    pub executed_multi: u64,
    pub reconfigurations: u64,
}

impl ReplicaStats {
    /// Restore the execution counters of `before` (a rolled-back speculation's work
    /// never happened), keeping the speculation counters and the work done.
    fn rewind_to(&mut self, before: &ReplicaStats) {
        let (s, c, r, w) = (
            self.speculated,
            self.speculation_confirmed,
            self.speculation_rolled_back,
            self.work,
        );
        *self = before.clone();
        self.speculated = s;
        self.speculation_confirmed = c;
        self.speculation_rolled_back = r;
        self.work = w;
    }
}

/// One speculatively executed instance: how to undo it, and the replies it holds.
struct Speculation<U> {
    instance: Instance,
    vid: Vid,
    /// The service's undo records, in execution order (applied in reverse).
    undo: Vec<U>,
    /// Session entries it changed, in order: (client, previous entry).
    session_log: sessions::SessionLog,
    /// Ordered time before it.
    now_ms_before: u64,
    max_cached_before: Instance,
    mutations_before: u64,
    stats_before: ReplicaStats,
    /// Digest of the state before it: for the head speculation, the decided state's.
    digest_before: u64,
    /// Replies held until the decision confirms the value.
    held: Vec<Reply>,
}

pub struct SequentialReplica<S: StateMachine> {
    id: NodeId,
    /// Written into checkpoints, so that one found in another cluster's data
    /// directory is refused (0 until [`SequentialReplica::set_cluster_id`]).
    cluster_id: u64,
    state: S,
    last_instance: Instance,
    /// Client sessions: per client, the reply of its last mutating command and when
    /// it was last active; expired after the lease (see the `sessions` module).
    sessions: sessions::Sessions,
    /// Highest instance (name, see [`SequentialReplica::execute_named`]) of any cached
    /// reply (a high-water mark), for `invariants`.
    max_cached_instance: Instance,
    /// Highest name of a value executed (a high-water mark; names are instances on
    /// one stream), for `invariants`.
    name_max: Instance,
    stats: ReplicaStats,
    /// Planted bug for checker controls: execute resubmitted commands again.
    unsafe_reexecute_duplicates: bool,
    /// Planted bug for checker controls: acknowledge every n-th mutation but undo it.
    unsafe_lose_every: u64,
    /// Planted bug: confirm the head speculation without checking the decided value id.
    unsafe_confirm_unchecked: bool,
    mutations: u64,
    /// Latest proposal (highest ballot) per instance above `last_instance`.
    pending: BTreeMap<Instance, Arc<Value>>,
    /// Speculated instances `last_instance + 1 ..= last_instance + spec.len()`.
    spec: VecDeque<Speculation<S::Undo>>,
    /// This replica's partition: which payload of a command it executes (0 when the
    /// state is not partitioned).
    partition: PartitionId,
    /// State partitioning: the layout (who answers what).
    answers: Option<PartitionLayout>,
    /// Early replies (see the crate doc), and what they produced for the driver.
    early: EarlyState,
    /// Proposals are only recorded by `propose` and `execute`; the caller runs
    /// [`SequentialReplica::speculate`] when it chooses (see
    /// [`SequentialReplica::set_deferred_speculation`]).
    deferred: bool,
    /// P-SMR: worker threads and the commands delivered to them, not yet run.
    psmr: Option<Psmr<S::Command>>,
    /// GeoPaxos+ ([`ReplicaOptions::placement`]): the replicas in serializer order (the
    /// `i`-th hosts serializer `i`).
    placement: Option<Vec<NodeId>>,
    /// GeoPaxos+: commands this replica decided to submit again as their origin, with
    /// their new serializers (the node core takes them).
    resubmits: Vec<Command>,
}

/// Who runs a command: anyone (sequential execution, or a g_all command in
/// synchronous mode), or one P-SMR worker thread alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    Any,
    Thread(usize),
}

/// P-SMR (paper 002 §III-F, §IV): the replica's worker threads. A decided value is
/// *delivered* at once (its commands queued, in order, at the threads of their
/// groups) and *executed* later, one command at a time, by the threads the driver
/// runs ([`SequentialReplica::run_thread`]). Thread `t` runs the head of its queue
/// when that command is its alone (g_t); a g_all command runs once it heads every
/// thread's queue (every thread stopped at it: the paper's synchronous mode, where the
/// lowest thread executes it after a signal from each other thread), and leaves every
/// queue at once. Commands of different threads never touch the same data (CC-G), or
/// passed the safety check (OC-G), so any order the driver picks among runnable
/// threads gives the same state and replies as executing in delivery order.
struct Psmr<C> {
    layout: ThreadLayout,
    /// Delivered commands not yet run, by delivery number.
    items: Slots<PsmrItem<C>>,
    /// Each thread's queue of delivery numbers, in order.
    queues: Vec<VecDeque<u64>>,
    next: u64,
    /// Planted bugs (controls): a thread runs a g_all command as soon as it reaches
    /// it, without waiting for the others; the safety check always passes.
    unsafe_no_barrier: bool,
    unsafe_check_passes: bool,
    /// What the race check found (see [`SequentialReplica::run_command`]).
    races: u64,
    race: Option<String>,
    /// Per client with a command queued: the delivery number of its newest one. A
    /// client's commands must run in their delivery order, for its exactly-once
    /// state (one sequence number and reply per client) to be the sequential
    /// replica's: a client's next command can be delivered here before its previous
    /// one ran (another replica answered it already), and on another thread it could
    /// run first. So a command whose client has one queued at another thread waits
    /// for it behind a barrier (queued at every thread); as the same result comes out
    /// whichever way a command is scheduled, this choice may differ between replicas.
    client_last: DetHashMap<ClientId, u64>,
    /// Session opens and renewals queued (they stamp sessions: see `deliver`).
    opens_queued: u64,
    /// Items queued at every thread (g_all: synchronous mode), time steps included.
    synchronous_queued: u64,
    /// The newest delivered value's time.
    time_ms: u64,
    /// What runs the worker threads at the same time, from the driver
    /// ([`SequentialReplica::set_thread_runner`]); `None`: one after another.
    runner: Option<Arc<dyn ThreadRunner>>,
}

/// P-SMR's queued commands by delivery number: numbers are handed out in order and
/// leave in any order, so a ring of slots from the oldest queued one (cheaper than a
/// map: no search, no node allocation, no moves of the large items).
struct Slots<T> {
    /// The delivery number of `slots[0]`.
    base: u64,
    slots: VecDeque<Option<T>>,
    live: usize,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            base: 0,
            slots: VecDeque::new(),
            live: 0,
        }
    }
}

impl<T> Slots<T> {
    /// Queue `item` as number `d`, the next one (`d` follows every number used).
    fn insert(&mut self, d: u64, item: T) {
        if self.live == 0 {
            self.slots.clear();
            self.base = d;
        }
        assert_eq!(
            d,
            self.base + self.slots.len() as u64,
            "delivery numbers in order"
        );
        self.slots.push_back(Some(item));
        self.live += 1;
    }

    fn get(&self, d: &u64) -> Option<&T> {
        let i = d.checked_sub(self.base)?;
        self.slots.get(usize::try_from(i).ok()?)?.as_ref()
    }

    fn get_mut(&mut self, d: &u64) -> Option<&mut T> {
        let i = d.checked_sub(self.base)?;
        self.slots.get_mut(usize::try_from(i).ok()?)?.as_mut()
    }

    fn remove(&mut self, d: &u64) -> Option<T> {
        let i = usize::try_from(d.checked_sub(self.base)?).ok()?;
        let item = self.slots.get_mut(i)?.take()?;
        self.live -= 1;
        while self.slots.front().is_some_and(Option::is_none) {
            self.slots.pop_front();
            self.base += 1;
        }
        Some(item)
    }

    fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn len(&self) -> usize {
        self.live
    }

    /// The newest queued item.
    fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.slots.iter().flatten()
    }

    fn last(&self) -> Option<&T> {
        self.slots.iter().rev().find_map(Option::as_ref)
    }
}

impl<T> std::ops::Index<&u64> for Slots<T> {
    type Output = T;
    fn index(&self, d: &u64) -> &T {
        self.get(d).expect("a queued delivery number")
    }
}

struct PsmrItem<C> {
    /// Its value's execution name (the instance, on one stream): what its reply says.
    instance: Instance,
    /// The ordered time of its value.
    time_ms: u64,
    /// `None`: time moves to `time_ms` and may expire sessions (a g_all step of its own).
    cmd: Option<Command>,
    /// The command decoded, if mapping it needed that (not decoded twice).
    op: Option<C>,
    /// Who may run it: the one thread the command was mapped to (checked when it
    /// runs), or anyone (g_all).
    gate: Gate,
    /// Where it is queued: `Some(t)`: thread t alone, in parallel with the others;
    /// `None`: at every thread, run in synchronous mode. A command gated to one thread
    /// is queued at every thread when an earlier command of the same client is still
    /// queued elsewhere (below).
    thread: Option<usize>,
}

/// The P-SMR settings of a replica ([`ReplicaOptions::psmr`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PsmrOptions {
    pub layout: ThreadLayout,
    pub unsafe_no_barrier: bool,
    pub unsafe_check_passes: bool,
}

/// Early replies: whether on, the tentative replies and confirmations not yet taken,
/// and whether the next speculation only redoes what was set aside (its tentative
/// replies already left).
#[derive(Default)]
struct EarlyState {
    on: bool,
    out: Vec<EarlyReply>,
    quiet: bool,
}

impl<S: StateMachine> SequentialReplica<S> {
    pub fn new(id: NodeId, state: S) -> SequentialReplica<S> {
        SequentialReplica {
            id,
            cluster_id: 0,
            state,
            last_instance: 0,
            sessions: sessions::Sessions::new(None),
            max_cached_instance: 0,
            name_max: 0,
            stats: ReplicaStats::default(),
            unsafe_reexecute_duplicates: false,
            unsafe_lose_every: 0,
            unsafe_confirm_unchecked: false,
            mutations: 0,
            pending: BTreeMap::new(),
            spec: VecDeque::new(),
            partition: 0,
            answers: None,
            early: EarlyState::default(),
            deferred: false,
            psmr: None,
            placement: None,
            resubmits: Vec::new(),
        }
    }

    /// GeoPaxos+ (paper 004): the replicas in serializer order; see
    /// [`ReplicaOptions::placement`].
    pub fn set_placement(&mut self, replicas: Option<Vec<NodeId>>) {
        if let Some(r) = &replicas {
            assert!(
                !r.is_empty() && r.len() <= 64,
                "1 to 64 serializers, one per replica"
            );
        }
        self.placement = replicas;
    }

    /// GeoPaxos+: replica `node`'s serializer (its place in the replica list).
    fn serializer_of(&self, node: NodeId) -> Option<usize> {
        self.placement.as_ref()?.iter().position(|&r| r == node)
    }

    /// GeoPaxos+: every serializer.
    fn all_serializers(&self) -> u64 {
        match self.placement.as_ref().map_or(0, |r| r.len()) {
            64 => u64::MAX,
            n => (1u64 << n) - 1,
        }
    }

    /// GeoPaxos+: the serializers a mutation of `client` must be ordered by besides
    /// its objects' (its session's home; a session not known yet will be created by
    /// this very command, at its origin `from`).
    fn session_home(&self, client: ClientId, from: usize) -> u64 {
        match self.sessions.get(client) {
            Some(s) if s.home != 0 => s.home,
            _ => 1u64 << from,
        }
    }

    /// GeoPaxos+ (paper 004 §III-A, psite): the serializers that must order `cmd`,
    /// submitted here by its client (`None` without placement). The objects' serializers
    /// come from the service, as this replica's state places them now
    /// ([`StateMachine::psite`]); a mutation adds its session's home (one client's
    /// mutations then share a serializer, so every replica runs them in one order:
    /// exactly-once). An open goes to every serializer: a session is named by the
    /// instance its open ran at, and only a command ordered with every other one runs at
    /// the same instance everywhere. A command that does not decode, or whose service
    /// does not place it, goes to every serializer too (correct, only slower).
    pub fn route(&self, cmd: &Command) -> Option<u64> {
        self.placement.as_ref()?;
        let all = self.all_serializers();
        let Some(from) = self.serializer_of(cmd.reply_to) else {
            return Some(all);
        };
        if cmd.is_open() {
            return Some(match cmd.session {
                0 => all,
                _ => self.session_home(cmd.client, from),
            });
        }
        let Some(payload) = cmd.body.payload_for(self.partition) else {
            return Some(all);
        };
        let Ok(op) = S::decode_command(payload) else {
            return Some(all);
        };
        let mut dst = self.state.psite(&op, from).unwrap_or(all) & all;
        if !S::is_read_only(&op) {
            dst |= self.session_home(cmd.client, from);
        }
        Some(if dst == 0 { all } else { dst })
    }

    /// GeoPaxos+: the commands this replica decided to submit again as their origin
    /// (see [`SequentialReplica::route`]; each with its new serializers in `route`).
    pub fn take_resubmits(&mut self) -> Vec<Command> {
        std::mem::take(&mut self.resubmits)
    }

    /// P-SMR: run commands on `o.layout.threads` worker threads (see [`Psmr`]). Only
    /// before the first delivery; not with speculation, state partitioning or session
    /// leases (the cluster file refuses those combinations).
    pub fn set_psmr(&mut self, o: PsmrOptions) {
        assert!(
            self.psmr.as_ref().is_none_or(|p| p.items.is_empty()),
            "P-SMR set with commands queued"
        );
        self.psmr = Some(Psmr {
            layout: o.layout,
            items: Slots::default(),
            queues: vec![VecDeque::new(); o.layout.threads],
            next: 0,
            unsafe_no_barrier: o.unsafe_no_barrier,
            unsafe_check_passes: o.unsafe_check_passes,
            races: 0,
            race: None,
            client_last: DetHashMap::default(),
            opens_queued: 0,
            synchronous_queued: 0,
            time_ms: self.sessions.now_ms(),
            runner: None,
        });
    }

    /// P-SMR worker threads (0: commands execute when their value is delivered).
    pub fn threads(&self) -> usize {
        self.psmr.as_ref().map_or(0, |p| p.layout.threads)
    }

    /// Whether thread `t` can run the head of its queue now.
    pub fn thread_runnable(&self, t: usize) -> bool {
        let Some(p) = &self.psmr else {
            return false;
        };
        let Some(&head) = p.queues.get(t).and_then(|q| q.front()) else {
            return false;
        };
        match p.items[&head].thread {
            Some(owner) => owner == t,
            None if p.unsafe_no_barrier => true,
            // Synchronous mode: the lowest thread runs it once every thread reached it.
            None => t == 0 && p.queues.iter().all(|q| q.front() == Some(&head)),
        }
    }

    /// Thread `t` runs the head of its queue ([`SequentialReplica::thread_runnable`]
    /// must hold); the replies go to `replies_out`.
    pub fn run_thread(&mut self, t: usize, replies_out: &mut Vec<Reply>) {
        assert!(self.thread_runnable(t), "thread {t} is not runnable");
        let p = self.psmr.as_mut().expect("runnable");
        let head = p.queues[t].pop_front().expect("runnable");
        let item = p.items.remove(&head).expect("queued");
        let now = p.time_ms;
        if let Some(cmd) = &item.cmd {
            if p.client_last.get(&cmd.client) == Some(&head) {
                p.client_last.remove(&cmd.client);
            }
            if cmd.is_open() {
                p.opens_queued -= 1;
            }
        }
        match item.thread {
            Some(_) => self.stats.psmr_parallel += 1,
            None => {
                // (The planted bug runs it before it heads every queue: the other
                // threads find it further down.)
                for q in &mut p.queues {
                    q.retain(|&d| d != head);
                }
                p.synchronous_queued -= 1;
                self.stats.psmr_synchronous += 1;
                // With every thread stopped here, the state takes the time of the
                // value that ordered it, as the sequential replica's did before it
                // (nothing expires: see `deliver_to_threads`).
                self.advance_service_time(item.time_ms, None);
            }
        }
        match &item.cmd {
            Some(cmd) => {
                // The time of the value that ordered it, as the sequential replica
                // sees it; then back to the newest.
                self.sessions.set_time(item.time_ms);
                self.run_command(item.instance, cmd, item.op, replies_out, None, item.gate);
                self.sessions.set_time(now);
            }
            None => {
                self.sessions.set_time(item.time_ms);
                self.stats.sessions_expired += self.sessions.advance(item.time_ms, None);
                self.advance_service_time(item.time_ms, None);
                self.sessions.set_time(now);
            }
        }
        self.caught_up();
    }

    /// Once every delivered command ran, the state takes the newest value's time, as
    /// the sequential replica's has (nothing expires then: see
    /// [`SequentialReplica::deliver_to_threads`]), so that equal positions hold equal
    /// states.
    fn caught_up(&mut self) {
        if let Some(p) = self.psmr.as_ref().filter(|p| p.items.is_empty()) {
            let t = p.time_ms;
            self.advance_service_time(t, None);
        }
    }

    /// Run the worker threads until none can run, each on an OS thread of its own
    /// where the driver gave a [`ThreadRunner`] and the service offers a shared view
    /// (else one after another, as the simulator's inline mode does).
    ///
    /// In rounds: a g_all command at the head of every queue runs alone (synchronous
    /// mode); otherwise each thread takes the commands at the head of its queue that
    /// are its alone (at most one per client, up to [`PSMR_ROUND_MAX`]), the replica
    /// prepares them (sessions, decoding: nothing that reads the state), the threads
    /// execute them at the same time through [`StateMachine::shared`], and the
    /// replica finishes them in each thread's order (replies, reply cache). A command
    /// the shared view cannot run alone, and what follows it in that thread's round,
    /// runs after the round with every thread stopped. The state and the replies are
    /// those of running the threads one after another: commands of different threads
    /// touch different data.
    pub fn run_threads(&mut self, replies_out: &mut Vec<Reply>) {
        loop {
            let Some(p) = self.psmr.as_ref() else {
                return;
            };
            let k = p.layout.threads;
            // Synchronous mode first (and everything when there are no OS threads).
            let mut ran = false;
            for t in 0..k {
                let parallel_head = self
                    .thread_head(t)
                    .and_then(|d| self.psmr.as_ref()?.items.get(&d))
                    .is_some_and(|i| i.thread == Some(t));
                let pooled = self.pooled();
                while self.thread_runnable(t) && !(pooled && parallel_head) {
                    self.run_thread(t, replies_out);
                    ran = true;
                    if pooled {
                        break;
                    }
                }
            }
            if ran {
                continue;
            }
            if !self.run_round(replies_out) {
                return;
            }
        }
    }

    /// Whether the worker threads run on OS threads (not with the planted bug that
    /// loses writes, which needs the sequential path's undo).
    fn pooled(&self) -> bool {
        self.unsafe_lose_every == 0 && self.psmr.as_ref().is_some_and(|p| p.runner.is_some())
    }

    /// P-SMR on OS threads: `runner` runs the worker threads' rounds at the same time
    /// (ignored unless it runs exactly as many calls as there are worker threads).
    pub fn set_thread_runner(&mut self, runner: Arc<dyn ThreadRunner>) {
        if let Some(p) = self.psmr.as_mut() {
            if runner.threads() == p.layout.threads {
                p.runner = Some(runner);
            }
        }
    }

    /// One round of [`SequentialReplica::run_threads`] on OS threads; whether any
    /// command ran.
    fn run_round(&mut self, replies_out: &mut Vec<Reply>) -> bool {
        let Some(p) = self.psmr.as_ref() else {
            return false;
        };
        if !self.pooled() {
            return false;
        }
        let layout = p.layout;
        let pool = p.runner.clone().expect("pooled");
        // Each thread's share: delivery numbers at the head of its queue, its alone.
        let mut clients = DetHashMap::default();
        let mut rounds: Vec<Vec<u64>> = Vec::with_capacity(layout.threads);
        for (t, q) in p.queues.iter().enumerate() {
            let mut mine = Vec::new();
            for &d in q.iter().take(PSMR_ROUND_MAX) {
                let item = &p.items[&d];
                match &item.cmd {
                    Some(cmd)
                        if item.thread == Some(t) && clients.insert(cmd.client, ()).is_none() =>
                    {
                        mine.push(d)
                    }
                    _ => break,
                }
            }
            rounds.push(mine);
        }
        if rounds.iter().all(Vec::is_empty) {
            return false;
        }
        // Prepare, in each thread's order (nothing here reads the state).
        let mut work: Vec<Vec<RoundItem<S>>> = Vec::with_capacity(layout.threads);
        for (t, ds) in rounds.iter().enumerate() {
            let mut items = Vec::with_capacity(ds.len());
            for &d in ds {
                let p = self.psmr.as_mut().expect("P-SMR");
                let item = p.items.get_mut(&d).expect("queued");
                let (instance, time_ms, op) = (item.instance, item.time_ms, item.op.take());
                // Taken: the item leaves the queues when this round finishes.
                let cmd = item.cmd.take().expect("a command");
                let now = p.time_ms;
                self.sessions.set_time(time_ms);
                let prepared = self.prepare_command(instance, &cmd, op, replies_out, None);
                self.sessions.set_time(now);
                let job = match prepared {
                    Prepared::Finished => None,
                    Prepared::Run { op, mine, mutation } => match self.thread_gate(&op, t) {
                        Err(why) => {
                            self.refuse_thread(&cmd, instance, why, mine, replies_out);
                            None
                        }
                        Ok(gate) => Some(RoundJob {
                            op,
                            mine,
                            mutation,
                            gate,
                            outcome: None,
                            encoded: None,
                        }),
                    },
                };
                items.push(RoundItem {
                    d,
                    instance,
                    time_ms,
                    cmd,
                    job,
                });
            }
            work.push(items);
        }
        // Execute: every thread its share, at the same time (the calling thread takes
        // thread 0's).
        let state = &mut self.state;
        if let Some(view) = state.shared(&layout) {
            let view = &*view;
            let shares: Vec<std::sync::Mutex<&mut Vec<RoundItem<S>>>> =
                work.iter_mut().map(std::sync::Mutex::new).collect();
            pool.run(&|t| {
                let mut items = shares[t].lock().unwrap_or_else(|e| e.into_inner());
                for item in items.iter_mut() {
                    let Some(job) = item.job.as_mut() else {
                        continue;
                    };
                    let check = job.gate == ThreadGate::Check;
                    let out = view.execute(t, &job.op, check);
                    let alone = out == Shared::Alone;
                    // The reply's bytes too, here rather than on the event loop.
                    if let Shared::Done(r) = &out {
                        job.encoded = Some(S::encode_reply(r));
                    }
                    job.outcome = Some(out);
                    if alone {
                        return;
                    }
                }
            });
        }
        // (No shared view: every job runs alone, below.)
        // Finish, in each thread's order; what could not run alone runs now.
        for (t, items) in work.into_iter().enumerate() {
            let mut alone = false;
            for item in items {
                let p = self.psmr.as_mut().expect("P-SMR");
                let head = p.queues[t].pop_front();
                assert_eq!(head, Some(item.d), "a round takes the head of its queue");
                p.items.remove(&item.d);
                if p.client_last.get(&item.cmd.client) == Some(&item.d) {
                    p.client_last.remove(&item.cmd.client);
                }
                let now = p.time_ms;
                self.stats.psmr_parallel += 1;
                let Some(job) = item.job else {
                    continue;
                };
                self.sessions.set_time(item.time_ms);
                match job.outcome {
                    Some(Shared::Done(result)) if !alone => {
                        if job.gate != ThreadGate::Own {
                            self.stats.psmr_passed += 1;
                        }
                        if job.mutation {
                            self.mutations += 1;
                        }
                        self.finish_command(
                            item.instance,
                            &item.cmd,
                            &job.op,
                            result,
                            job.encoded,
                            job.mine,
                            job.mutation,
                            replies_out,
                            None,
                        );
                    }
                    Some(Shared::Refused(why)) if !alone => {
                        self.refuse_thread(&item.cmd, item.instance, why, job.mine, replies_out);
                    }
                    _ => {
                        // Alone, or after an alone one in this thread's round.
                        alone = true;
                        self.stats.psmr_alone += 1;
                        self.complete_command(
                            item.instance,
                            &item.cmd,
                            job.op,
                            job.mine,
                            job.mutation,
                            Gate::Thread(t),
                            replies_out,
                            None,
                        );
                    }
                }
                self.sessions.set_time(now);
            }
        }
        self.caught_up();
        true
    }

    /// Whether every delivered command has run (always, without P-SMR): the state is
    /// that of [`SequentialReplica::last_instance`], ready for a checkpoint or a
    /// digest.
    pub fn quiescent(&self) -> bool {
        self.psmr.as_ref().is_none_or(|p| p.items.is_empty())
    }

    /// The delivery number (commands delivered to the threads so far, from 0) of the
    /// command at the head of thread `t`'s queue.
    pub fn thread_head(&self, t: usize) -> Option<u64> {
        self.psmr.as_ref()?.queues.get(t)?.front().copied()
    }

    /// Commands delivered to the worker threads and not yet run.
    pub fn queued(&self) -> usize {
        self.psmr.as_ref().map_or(0, |p| p.items.len())
    }

    /// The thread (or g_all, `None`) a delivered command is gated to: the one bit the
    /// client proxy chose (checked when it runs), else the replica's own CC-G; and the
    /// command decoded, when the mapping decoded it.
    fn psmr_gate(&self, cmd: &Command) -> (Option<usize>, Option<S::Command>) {
        let p = self.psmr.as_ref().expect("P-SMR");
        if cmd.is_open() {
            return (None, None);
        }
        if cmd.route.count_ones() == 1 {
            let t = cmd.route.trailing_zeros() as usize;
            return ((t < p.layout.threads).then_some(t), None);
        }
        if cmd.route != 0 {
            return (None, None);
        }
        let Some(op) = cmd
            .body
            .payload_for(self.partition)
            .and_then(|b| S::decode_command(b).ok())
        else {
            return (None, None);
        };
        let t = S::thread_group(&op, &p.layout, false).filter(|&t| t < p.layout.threads);
        (t, Some(op))
    }

    /// Deliver a decided value to the worker threads. Its time comes first: where it
    /// may expire sessions (judged from a state that may lag, see
    /// [`sessions::Sessions::would_expire`]) or change a timed service's state, it is a
    /// g_all step of its own, which expires exactly what the sequential replica would
    /// at this point.
    ///
    /// A timed service is asked ([`StateMachine::time_changes`]) only while no g_all
    /// command waits: the commands queued then are each one thread's, which neither
    /// read ordered time nor change what it would do (the contract of
    /// [`ServiceCodec::thread_group`]), so the state answers as the sequential
    /// replica's would here. Otherwise the step is taken whatever it brings. Where no
    /// step is taken the state's time moves later, before the next g_all command or
    /// once the threads caught up, and nothing expires then (it was asked). Replicas
    /// may take different steps (their threads lag differently); a step that changes
    /// nothing changes no result.
    fn deliver_to_threads(&mut self, instance: Instance, value: &Value) {
        let p = self.psmr.as_ref().expect("P-SMR");
        let t = value.time_ms.max(p.time_ms);
        let may_expire = S::TIMED && (p.synchronous_queued > 0 || self.state.time_changes(t))
            || self.sessions.lease_ms().is_some()
                && (p.opens_queued > 0 || self.sessions.would_expire(t));
        let p = self.psmr.as_mut().expect("P-SMR");
        p.time_ms = t;
        if p.items.is_empty() {
            // Nothing queued: this state is the delivery order's.
            self.stats.sessions_expired += self.sessions.advance(t, None);
            self.advance_service_time(t, None);
        } else if may_expire {
            let d = p.next;
            p.next += 1;
            p.queues.iter_mut().for_each(|q| q.push_back(d));
            p.synchronous_queued += 1;
            p.items.insert(
                d,
                PsmrItem {
                    instance,
                    time_ms: t,
                    cmd: None,
                    op: None,
                    gate: Gate::Any,
                    thread: None,
                },
            );
        }
        for cmd in &value.commands {
            let (gate, op) = self.psmr_gate(cmd);
            let p = self.psmr.as_mut().expect("P-SMR");
            if cmd.is_open() {
                p.opens_queued += 1;
            }
            let d = p.next;
            p.next += 1;
            let earlier = p
                .client_last
                .insert(cmd.client, d)
                .and_then(|e| p.items.get(&e))
                .map(|e| e.thread);
            let thread = match (gate, earlier) {
                (Some(t), None) => Some(t),
                (Some(t), Some(Some(e))) if e == t => Some(t),
                _ => None,
            };
            match thread {
                Some(t) => p.queues[t].push_back(d),
                None => {
                    p.queues.iter_mut().for_each(|q| q.push_back(d));
                    p.synchronous_queued += 1;
                }
            }
            p.items.insert(
                d,
                PsmrItem {
                    instance,
                    time_ms: t,
                    cmd: Some(cmd.clone()),
                    op,
                    gate: gate.map_or(Gate::Any, Gate::Thread),
                    thread,
                },
            );
        }
    }

    /// State partitioning: this replica holds partition `p` of `layout` and answers
    /// the commands whose client named a replica of its rank (see
    /// [`PartitionLayout::answerer`]).
    pub fn set_partition(&mut self, layout: PartitionLayout, p: PartitionId) {
        self.partition = p;
        self.answers = layout.map.is_partitioned().then_some(layout);
    }

    /// Early replies (paper 001 §VII): send each speculated reply at once as tentative
    /// and confirm it when the decision confirms its order (see the crate doc).
    pub fn set_early_replies(&mut self, on: bool) {
        self.early.on = on;
    }

    /// Deferred speculation: [`SequentialReplica::propose`] and
    /// [`SequentialReplica::execute`] only record proposals (and roll back what a
    /// newer proposal or a decision contradicts) and never execute one speculatively;
    /// the caller runs [`SequentialReplica::speculate`] when
    /// [`SequentialReplica::speculation_ready`] says so. The node core uses this to
    /// let the replies a decision released leave before further speculative work.
    pub fn set_deferred_speculation(&mut self, on: bool) {
        self.deferred = on;
    }

    /// Whether a pending proposal is next in line for speculation (only ever true
    /// with deferred speculation, or after [`SequentialReplica::rollback_speculation`]).
    pub fn speculation_ready(&self) -> bool {
        let next = self.last_instance + self.spec.len() as u64 + 1;
        self.pending.contains_key(&next)
    }

    /// Tentative replies and confirmations produced since the last call, in order.
    pub fn take_early(&mut self) -> Vec<EarlyReply> {
        std::mem::take(&mut self.early.out)
    }

    /// Early replies produced and not yet taken.
    pub fn early_pending(&self) -> usize {
        self.early.out.len()
    }

    /// Plant the "speculation confirmed without checking the decided value" bug: the
    /// head speculation's replies are released and it is kept whatever was decided
    /// (tests and `--unsafe` only).
    pub fn set_unsafe_confirm_unchecked(&mut self, on: bool) {
        self.unsafe_confirm_unchecked = on;
    }

    /// Planted bug (simulator controls only): forget every cached reply, as a replica
    /// that restored a snapshot without its reply cache would.
    pub fn unsafe_clear_reply_cache(&mut self) {
        self.sessions.unsafe_clear_replies();
    }

    /// Plant the "expired sessions come back" bug: a command of a session this
    /// replica does not know runs as if its session were new (tests only).
    pub fn set_unsafe_reopen_expired(&mut self, on: bool) {
        self.sessions.unsafe_reopen_expired = on;
    }

    /// Session leases: forget a client idle for longer than `lease_ms` of ordered
    /// time (`None`: never; sessions then open implicitly).
    pub fn set_session_lease(&mut self, lease_ms: Option<u64>) {
        self.sessions.set_lease(lease_ms);
    }

    /// The client sessions this replica keeps.
    pub fn sessions(&self) -> &sessions::Sessions {
        &self.sessions
    }

    /// Plant the "resubmitted command executed twice" bug (tests and `--unsafe` only).
    pub fn set_unsafe_reexecute_duplicates(&mut self, on: bool) {
        self.unsafe_reexecute_duplicates = on;
    }

    /// Plant the "acknowledged write lost" bug: every `n`-th mutation is executed and
    /// acknowledged, then silently undone (tests and `--unsafe` only; 0 turns it off).
    pub fn set_unsafe_lose_every(&mut self, n: u64) {
        self.unsafe_lose_every = n;
    }

    /// The cluster id written into checkpoints.
    pub fn set_cluster_id(&mut self, cluster_id: u64) {
        self.cluster_id = cluster_id;
    }
    pub fn cluster_id(&self) -> u64 {
        self.cluster_id
    }
    pub fn id(&self) -> NodeId {
        self.id
    }
    /// The cached reply of `client`'s last mutating command, if any.
    pub fn cached_reply(&self, client: ClientId) -> Option<&Reply> {
        self.sessions.get(client).and_then(|s| s.last.as_ref())
    }
    /// Client sessions kept.
    pub fn cached_clients(&self) -> usize {
        self.sessions.len()
    }

    /// O(1) checks, callable after every input. (The per-client monotonicity of the
    /// cache is asserted where it changes, in `execute`.)
    pub fn invariants(&self) {
        let speculated_to = self.last_instance + self.spec.len() as u64;
        assert!(
            self.max_cached_instance <= speculated_to.max(self.name_max),
            "reply cache holds a reply of instance {} beyond the last executed {}",
            self.max_cached_instance,
            speculated_to
        );
        if let (Some(f), Some(b)) = (self.spec.front(), self.spec.back()) {
            assert_eq!(
                f.instance,
                self.last_instance + 1,
                "speculation not at the head"
            );
            assert_eq!(b.instance, speculated_to, "speculation not contiguous");
        }
        if let Some((&i, _)) = self.pending.first_key_value() {
            assert!(i > self.last_instance, "a pending proposal already decided");
        }
        self.sessions.invariants();
        if let Some(p) = &self.psmr {
            assert!(self.spec.is_empty(), "P-SMR with speculation");
            if let Some(race) = &p.race {
                panic!("P-SMR race check: {race} ({} such commands)", p.races);
            }
            assert_eq!(p.queues.len(), p.layout.threads);
            assert_eq!(
                p.synchronous_queued,
                p.items.values().filter(|i| i.thread.is_none()).count() as u64,
                "g_all items miscounted"
            );
            if let Some(last) = p.items.last() {
                assert!(
                    last.instance <= self.last_instance.max(self.name_max),
                    "queued beyond delivery"
                );
            }
        }
        assert!(
            self.early.on || self.early.out.is_empty(),
            "early replies without early replies on"
        );
    }

    /// The service state (decided and speculated).
    pub fn state(&self) -> &S {
        &self.state
    }
    pub fn last_instance(&self) -> Instance {
        self.last_instance
    }
    pub fn stats(&self) -> &ReplicaStats {
        &self.stats
    }
    /// Digest of the decided service state (without the speculated suffix).
    pub fn digest(&self) -> u64 {
        match self.spec.front() {
            Some(s) => s.digest_before,
            None => self.state.digest(),
        }
    }

    /// Instances currently executed speculatively (beyond `last_instance`).
    pub fn speculated(&self) -> u64 {
        self.spec.len() as u64
    }

    /// Proposals held for instances not yet decided.
    pub fn pending_proposals(&self) -> usize {
        self.pending.len()
    }

    /// A value proposed (not yet decided) for `instance`. Kept if it is the newest
    /// proposal for its instance (highest ballot); if the instance was speculated with
    /// another value, that speculation and every later one are rolled back. Then every
    /// proposal that is next in line is executed speculatively, its replies held.
    pub fn propose(&mut self, instance: Instance, value: Arc<Value>) {
        self.early.quiet = false;
        if instance <= self.last_instance {
            return;
        }
        match self.pending.get(&instance) {
            Some(old) if old.vid == value.vid || old.vid.ballot > value.vid.ballot => return,
            _ => {}
        }
        self.pending.insert(instance, value);
        if instance <= self.last_instance + self.spec.len() as u64 {
            self.rollback_from(instance, true);
        }
        if !self.deferred {
            self.speculate();
        }
    }

    /// Execute speculatively every pending proposal next in line.
    pub fn speculate(&mut self) {
        self.speculate_up_to(Instance::MAX);
    }

    /// Speculate again exactly the `n` instances [`SequentialReplica::rollback_speculation`]
    /// set aside (same values on the same state: same held replies, and their
    /// tentative replies already left). Proposals that were not speculated before stay
    /// pending (with deferred speculation, the caller speculates them later).
    pub fn respeculate(&mut self, n: u64) {
        self.speculate_up_to(self.last_instance + n);
    }

    fn speculate_up_to(&mut self, last: Instance) {
        loop {
            let next = self.last_instance + self.spec.len() as u64 + 1;
            if next > last {
                break;
            }
            let Some(value) = self.pending.get(&next).cloned() else {
                break;
            };
            let mut s = Speculation {
                instance: next,
                vid: value.vid,
                undo: Vec::new(),
                session_log: Vec::new(),
                now_ms_before: self.sessions.now_ms(),
                max_cached_before: self.max_cached_instance,
                mutations_before: self.mutations,
                stats_before: self.stats.clone(),
                digest_before: self.state.digest(),
                held: Vec::new(),
            };
            let mut held = Vec::new();
            self.run_value(next, &value, &mut held, Some(&mut s));
            if self.early.on && !self.early.quiet {
                self.early
                    .out
                    .extend(held.iter().cloned().map(EarlyReply::Tentative));
            }
            s.held = held;
            self.stats.speculated += 1;
            self.spec.push_back(s);
        }
        self.early.quiet = false;
    }

    /// Undo every speculated instance, newest first (their held replies are dropped;
    /// the proposals stay pending, so [`SequentialReplica::speculate`] redoes them).
    /// Afterwards the tree and the reply cache are exactly the decided state. Not
    /// counted as a rollback in the statistics (it is the checkpoint's set-aside).
    pub fn rollback_speculation(&mut self) {
        self.rollback_from(self.last_instance + 1, false);
        // Speculating the same proposals on the same state again computes the same
        // replies: their tentative replies already left.
        self.early.quiet = true;
    }

    fn rollback_from(&mut self, instance: Instance, count: bool) {
        while self.spec.back().is_some_and(|s| s.instance >= instance) {
            let s = self.spec.pop_back().expect("checked");
            for u in s.undo.into_iter().rev() {
                self.state.undo(u);
            }
            self.sessions.undo(s.session_log, s.now_ms_before);
            self.max_cached_instance = s.max_cached_before;
            self.mutations = s.mutations_before;
            self.stats.rewind_to(&s.stats_before);
            if count {
                self.stats.speculation_rolled_back += 1;
            }
            assert_eq!(
                self.state.digest(),
                s.digest_before,
                "rolling back instance {} did not restore the state",
                s.instance
            );
        }
    }

    /// Planted bug (simulator controls only): answer a read-only command from the
    /// local state at once, without ordering it. A replica that lags behind the order
    /// then returns stale results.
    pub fn unsafe_read_unordered(&mut self, cmd: &Command) -> Option<Reply> {
        let op = S::decode_command(cmd.body.payload_for(self.partition)?).ok()?;
        if !S::is_read_only(&op) {
            return None;
        }
        let result = self.state.execute(&op);
        Some(Reply {
            client: cmd.client,
            seq: cmd.seq,
            instance: self.last_instance,
            result: Ok(S::encode_reply(&result)),
        })
    }

    /// The reply to `cmd` if this replica already executed it: a mutation, the last of
    /// its session (the very session it names), whose reply the session table holds,
    /// with nothing speculated. Ordering such a copy again would only have the
    /// replica answer it from the same table; the node answers it at once instead.
    /// (The command's single partition only: with state partitioning the other
    /// partitions' parts come from their replicas.)
    pub fn answered(&self, cmd: &Command) -> Option<Reply> {
        if cmd.is_system() || cmd.is_open() || cmd.seq == 0 || self.speculated() > 0 {
            return None;
        }
        let session = self.sessions.get(cmd.client)?;
        if session.opened_at != cmd.session {
            return None;
        }
        session
            .last
            .as_ref()
            .filter(|r| r.seq == cmd.seq && r.client == cmd.client)
            .cloned()
    }

    /// What `cmd` touches, for an ordering that orders only conflicting commands
    /// (EPaxos): the service's objects ([`StateMachine::access`], from the state as it
    /// is here) and, for a mutation or a renewal, the client's session (exactly-once
    /// needs every replica to run a client's mutations in one order: a late copy is
    /// recognised only against the session's newest reply). An open conflicts with
    /// everything: a session is named by the instance its open ran at, which must be
    /// the same at every replica, and only a command ordered with every other one has
    /// the same position everywhere. A command that does not decode conflicts with
    /// everything (every replica refuses it alike).
    pub fn access(&self, cmd: &Command) -> Access {
        if cmd.is_open() {
            if cmd.session == 0 {
                return Access::everything();
            }
            let mut a = Access::default();
            a.add(session_object(cmd.client), true);
            return a;
        }
        let Some(payload) = cmd.body.payload_for(self.partition) else {
            return Access::everything();
        };
        match S::decode_command(payload) {
            Err(_) => Access::everything(),
            Ok(op) => {
                let mut a = self.state.access(&op);
                if !S::is_read_only(&op) {
                    a.add(session_object(cmd.client), true);
                }
                a
            }
        }
    }

    /// Execute a decided value. Returns the replies this replica must send. If the
    /// instance was speculated with the same value, the speculation becomes final and
    /// its held replies are returned; with another value, all speculation is rolled
    /// back first and the pending later proposals are speculated again after it.
    pub fn execute(&mut self, instance: Instance, value: &Value, replies_out: &mut Vec<Reply>) {
        self.execute_named(instance, instance, value, replies_out)
    }

    /// [`SequentialReplica::execute`], the replies and a session this value opens
    /// naming the execution `name` rather than `instance`: an ordering whose learners
    /// number their deliveries differently (Multi-Ring Paxos) names a value alike at
    /// every replica, which is what a client matches a command's replies from several
    /// partitions, and a session's opens, by. Never speculated (one stream only
    /// speculates, and there the name is the instance).
    pub fn execute_named(
        &mut self,
        instance: Instance,
        name: Instance,
        value: &Value,
        replies_out: &mut Vec<Reply>,
    ) {
        assert_eq!(
            instance,
            self.last_instance + 1,
            "instances are executed in order, once"
        );
        assert!(
            name == instance || (self.spec.is_empty() && self.pending.is_empty()),
            "a named execution with speculation"
        );
        self.name_max = self.name_max.max(name);
        self.early.quiet = false;
        if self.psmr.is_some() {
            assert!(self.spec.is_empty(), "P-SMR with speculation");
            self.last_instance = instance;
            self.deliver_to_threads(name, value);
            return;
        }
        while self
            .pending
            .first_key_value()
            .is_some_and(|(&i, _)| i <= instance)
        {
            self.pending.pop_first();
        }
        if let Some(head) = self.spec.front() {
            if head.vid == value.vid || self.unsafe_confirm_unchecked {
                let s = self.spec.pop_front().expect("checked");
                self.last_instance = instance;
                self.stats.speculation_confirmed += 1;
                if self.early.on {
                    // The tentative replies left when it was speculated.
                    self.early
                        .out
                        .extend(s.held.iter().map(EarlyReply::confirm));
                } else {
                    replies_out.extend(s.held);
                }
                return;
            }
            self.rollback_from(instance, true);
        }
        self.last_instance = instance;
        self.run_value(name, value, replies_out, None);
        if !self.pending.is_empty() && !self.deferred {
            self.speculate();
        }
    }

    /// Execute `value` as instance `instance` (decided, or speculated with `log`
    /// recording how to undo it).
    fn run_value(
        &mut self,
        instance: Instance,
        value: &Value,
        replies_out: &mut Vec<Reply>,
        mut log: Option<&mut Speculation<S::Undo>>,
    ) {
        // Time first: sessions idle for longer than the lease expire before anything
        // of this value runs, at every replica alike.
        let expired = self.sessions.advance(
            value.time_ms,
            log.as_deref_mut().map(|l| &mut l.session_log),
        );
        self.stats.sessions_expired += expired;
        // The service's own time (leases expire), undone with the speculation.
        self.advance_service_time(value.time_ms, log.as_deref_mut());
        for cmd in &value.commands {
            self.run_command(
                instance,
                cmd,
                None,
                replies_out,
                log.as_deref_mut(),
                Gate::Any,
            );
        }
    }

    /// Hand the service ordered time ([`StateMachine::advance_time`]); what it changed
    /// is undone with the speculation it belongs to, if any.
    fn advance_service_time(&mut self, time_ms: u64, log: Option<&mut Speculation<S::Undo>>) {
        if !S::TIMED {
            return;
        }
        if let Some(undo) = self.state.advance_time(time_ms) {
            if let Some(l) = log {
                l.undo.push(undo);
            }
        }
    }

    /// Execute one command of instance `instance` (see [`SequentialReplica::run_value`]),
    /// `decoded` its payload if already decoded; `gate` says which P-SMR worker thread
    /// runs it alone, if one does.
    fn run_command(
        &mut self,
        instance: Instance,
        cmd: &Command,
        decoded: Option<S::Command>,
        replies_out: &mut Vec<Reply>,
        mut log: Option<&mut Speculation<S::Undo>>,
        gate: Gate,
    ) {
        if let Prepared::Run { op, mine, mutation } =
            self.prepare_command(instance, cmd, decoded, replies_out, log.as_deref_mut())
        {
            self.complete_command(instance, cmd, op, mine, mutation, gate, replies_out, log);
        }
    }

    /// The first part of [`SequentialReplica::run_command`], which does not depend on
    /// the state machine's state: addressing, decoding, sessions (exactly once). What
    /// it answers itself (refusals, duplicates) goes to `replies_out`.
    fn prepare_command(
        &mut self,
        instance: Instance,
        cmd: &Command,
        decoded: Option<S::Command>,
        replies_out: &mut Vec<Reply>,
        mut log: Option<&mut Speculation<S::Undo>>,
    ) -> Prepared<S::Command> {
        let mine = match &self.answers {
            None => cmd.reply_to == self.id,
            Some(layout) => layout.answerer(cmd.reply_to, self.partition) == Some(self.id),
        };
        let Some(payload) = cmd.body.payload_for(self.partition) else {
            // Not addressed to this partition (learners deliver projections, so
            // only a whole value delivered to a partitioned replica has these).
            return Prepared::Finished;
        };
        let refuse = |why: Refusal| Reply {
            client: cmd.client,
            seq: cmd.seq,
            instance,
            result: Err(why),
        };
        if let Some(op) = cmd.system_op() {
            // The ordering's own: a barrier only moves time (the value's, above); a
            // reconfiguration recomputes GeoPaxos+'s placement, at the same point of
            // the order everywhere (it is ordered with every command).
            if matches!(op, partita_types::SystemOp::Reconfigure { .. }) && self.placement.is_some()
            {
                self.state.reconfigure();
                self.stats.reconfigurations += 1;
            }
            return Prepared::Finished;
        }
        // GeoPaxos+: the origin (the replica the client chose), as a serializer.
        let origin = self.serializer_of(cmd.reply_to);
        if self.placement.is_some() && origin.is_none() {
            // No correct node orders a command for a client of no replica: skipped
            // alike everywhere.
            self.stats.refused += 1;
            return Prepared::Finished;
        }
        if cmd.is_open() {
            let home = origin.map_or(0, |o| 1u64 << o);
            let slog = log.as_deref_mut().map(|l| &mut l.session_log);
            let reply = session_step(
                &mut self.sessions,
                &mut self.stats,
                cmd,
                instance,
                payload,
                home,
                slog,
            );
            if mine {
                replies_out.push(reply);
            }
            return Prepared::Finished;
        }
        let op = match decoded
            .map_or_else(|| S::decode_command(payload), Ok)
            .map_err(|e| format!("a {} command that does not decode: {e}", S::NAME))
            .and_then(|op| S::check(&op).map(|()| op))
        {
            Ok(op) => op,
            Err(why) => {
                self.stats.refused += 1;
                if mine {
                    replies_out.push(refuse(Refusal::Rejected(why)));
                }
                return Prepared::Finished;
            }
        };
        let mutation = !S::is_read_only(&op);
        if let Some(from) = origin {
            // GeoPaxos+'s delivery decision (paper 004 Algorithm 1): do the serializers
            // that ordered it still cover it, here and now? Every replica reaches this
            // point with the same placement of what it touches, so every replica decides
            // alike; only its origin submits it again.
            let home = match mutation {
                true => self.session_home(cmd.client, from),
                false => 0,
            };
            let dst = cmd.route;
            let moved = self.state.misplaced(&op, from, dst);
            if moved.is_some() || home & !dst != 0 {
                self.stats.resubmit_decisions += 1;
                if mine {
                    self.stats.resubmitted += 1;
                    let again = moved.unwrap_or(dst) | home;
                    self.resubmits.push(Command {
                        route: again,
                        ..cmd.clone()
                    });
                }
                return Prepared::Finished;
            }
        }
        if origin.is_some() && !mutation {
            // GeoPaxos+: a read is not ordered with its client's mutations (it shares
            // no session object with them), so what the session table says of it may
            // differ between replicas. It touches no session and runs everywhere alike
            // (its accesses count toward the placement; only its replica answers).
            return Prepared::Run { op, mine, mutation };
        }
        let home = origin.map_or(0, |o| 1u64 << o);
        let last_seq = match self
            .sessions
            .admit(cmd, home, log.map(|l| &mut l.session_log))
        {
            sessions::Admission::Run { last_seq } => last_seq,
            sessions::Admission::Refuse(why) => {
                self.stats.session_refusals += 1;
                if mine {
                    replies_out.push(refuse(why));
                }
                return Prepared::Finished;
            }
        };
        if let Some(last_seq) = last_seq {
            if cmd.seq < last_seq || (cmd.seq == last_seq && !mutation) {
                self.stats.stale_ignored += 1;
                return Prepared::Finished;
            }
            if cmd.seq == last_seq && !self.unsafe_reexecute_duplicates {
                self.stats.duplicates_answered += 1;
                if mine {
                    let last = self.sessions.get(cmd.client).and_then(|s| s.last.clone());
                    replies_out.push(last.expect("admitted with a cached reply"));
                }
                return Prepared::Finished;
            }
        }
        // A read runs only at the replica that answers (paper 001 §IV), except with
        // GeoPaxos+: every replica counts every access (the placement is replicated
        // state, recomputed from those counts at every replica alike).
        if !mutation && !mine && self.placement.is_none() {
            self.stats.reads_skipped += 1;
            return Prepared::Finished;
        }
        Prepared::Run { op, mine, mutation }
    }

    /// P-SMR: whether thread `t` may run `op` alone, without the state: `Err` if the
    /// thread does not own what it touches (OC-G maps it elsewhere), else whether the
    /// opt-PSMR safety check must decide (CC-G maps it to g_all); the planted bug
    /// `unsafe_check_passes` skips the check (and says the command passed it).
    fn thread_gate(&self, op: &S::Command, t: usize) -> Result<ThreadGate, String> {
        let p = self.psmr.as_ref().expect("a thread gate only with P-SMR");
        let layout = p.layout;
        if S::thread_group(op, &layout, true) != Some(t) {
            Err(format!("thread {t} does not own what the command touches"))
        } else if S::thread_group(op, &layout, false) == Some(t) {
            Ok(ThreadGate::Own)
        } else if p.unsafe_check_passes {
            Ok(ThreadGate::Unchecked)
        } else {
            Ok(ThreadGate::Check)
        }
    }

    /// The rest of [`SequentialReplica::run_command`], on the state as it is.
    #[allow(clippy::too_many_arguments)]
    fn complete_command(
        &mut self,
        instance: Instance,
        cmd: &Command,
        op: S::Command,
        mine: bool,
        mutation: bool,
        gate: Gate,
        replies_out: &mut Vec<Reply>,
        mut log: Option<&mut Speculation<S::Undo>>,
    ) {
        // P-SMR: a command one worker thread runs alone must be that thread's (OC-G
        // maps it there), and unless CC-G maps it there too (then no other thread can
        // touch its data) it must pass the service's opt-PSMR safety check first. A
        // failure has no effect: the client resubmits it conservatively.
        let mut optimistic = None;
        if let Gate::Thread(t) = gate {
            let verdict = match self.thread_gate(&op, t) {
                Err(why) => Err(why),
                Ok(ThreadGate::Own) => Ok(false),
                Ok(ThreadGate::Unchecked) => Ok(true),
                Ok(ThreadGate::Check) => {
                    let layout = self.psmr.as_ref().expect("P-SMR").layout;
                    self.state.thread_check(&op, t, &layout).map(|()| true)
                }
            };
            match verdict {
                Ok(false) => {}
                Ok(true) => {
                    self.stats.psmr_passed += 1;
                    optimistic = Some((t, self.state.shape_changes()));
                }
                Err(why) => {
                    self.refuse_thread(cmd, instance, why, mine, replies_out);
                    return;
                }
            }
        }
        let result = if log.is_some() || (mutation && self.unsafe_lose_every > 0) {
            let (result, undo) = self.state.execute_undoable(&op);
            let mut undo = Some(undo);
            if mutation {
                self.mutations += 1;
                if self.unsafe_lose_every > 0
                    && self.mutations.is_multiple_of(self.unsafe_lose_every)
                {
                    self.state.undo(undo.take().expect("just made"));
                }
            }
            if let (Some(l), Some(u)) = (log.as_deref_mut(), undo) {
                l.undo.push(u);
            }
            result
        } else {
            if mutation {
                self.mutations += 1;
            }
            match self.serializer_of(cmd.reply_to) {
                // GeoPaxos+: executed for its origin, whose accesses it counts.
                Some(from) => {
                    if cmd.route.count_ones() > 1 {
                        self.stats.executed_multi += 1;
                    }
                    self.state.execute_at(&op, from)
                }
                None => self.state.execute(&op),
            }
        };
        if let Some((t, before)) = optimistic {
            // The race check: what a thread ran alone changed no shared structure.
            if self.state.shape_changes() != before {
                let p = self.psmr.as_mut().expect("checked above");
                p.races += 1;
                p.race.get_or_insert_with(|| {
                    format!(
                        "thread {t} ran {}'s command {} of instance {instance} alone, in \
                         parallel with the other threads, and it changed the shape of the \
                         shared {} state (a data race on real threads)",
                        cmd.client,
                        cmd.seq,
                        S::NAME
                    )
                });
            }
        }
        self.finish_command(
            instance,
            cmd,
            &op,
            result,
            None,
            mine,
            mutation,
            replies_out,
            log,
        );
    }

    /// opt-PSMR: a command a thread may not run alone has no effect; counted, and
    /// answered "resubmit conservatively" (if this replica answers).
    fn refuse_thread(
        &mut self,
        cmd: &Command,
        instance: Instance,
        why: String,
        mine: bool,
        replies_out: &mut Vec<Reply>,
    ) {
        self.stats.psmr_failed += 1;
        if mine {
            replies_out.push(Reply {
                client: cmd.client,
                seq: cmd.seq,
                instance,
                result: Err(Refusal::Resubmit(why)),
            });
        }
    }

    /// The end of a command that executed: counts, the reply cached (a mutation's)
    /// and sent (if this replica answers).
    #[allow(clippy::too_many_arguments)]
    fn finish_command(
        &mut self,
        instance: Instance,
        cmd: &Command,
        op: &S::Command,
        result: S::Reply,
        encoded: Option<Payload>,
        mine: bool,
        mutation: bool,
        replies_out: &mut Vec<Reply>,
        log: Option<&mut Speculation<S::Undo>>,
    ) {
        self.stats.commands_executed += 1;
        self.stats.ops += S::op_count(op);
        S::account(op, &result, &mut self.stats.work);
        let reply = Reply {
            client: cmd.client,
            seq: cmd.seq,
            instance,
            result: Ok(encoded.unwrap_or_else(|| S::encode_reply(&result))),
        };
        if mutation {
            self.max_cached_instance = instance;
            self.sessions
                .cache(cmd.client, reply.clone(), log.map(|l| &mut l.session_log));
        }
        if mine {
            replies_out.push(reply);
        }
    }
}

/// Most commands a worker thread takes in one round of
/// [`SequentialReplica::run_threads`].
pub const PSMR_ROUND_MAX: usize = 1024;

/// A command of one thread's round ([`SequentialReplica::run_round`]).
struct RoundItem<S: StateMachine> {
    d: u64,
    instance: Instance,
    time_ms: u64,
    cmd: Command,
    /// What to execute (`None`: the preparation finished it).
    job: Option<RoundJob<S>>,
}

struct RoundJob<S: StateMachine> {
    op: S::Command,
    mine: bool,
    mutation: bool,
    gate: ThreadGate,
    outcome: Option<Shared<S::Reply>>,
    /// The reply, encoded by the thread that executed it.
    encoded: Option<Payload>,
}

/// What [`SequentialReplica::prepare_command`] left to do.
enum Prepared<C> {
    /// Nothing: answered, refused, a duplicate, or not this replica's to execute.
    Finished,
    /// Execute `op`.
    Run { op: C, mine: bool, mutation: bool },
}

/// P-SMR: how a thread may run a command alone ([`SequentialReplica::thread_gate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ThreadGate {
    /// CC-G maps it to the thread: nobody else touches its data.
    Own,
    /// The opt-PSMR safety check decides.
    Check,
    /// The planted bug: the check is skipped and counts as passed.
    Unchecked,
}

/// Everything a replica is told about its place and behaviour once it is built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaOptions {
    pub cluster_id: u64,
    /// State partitioning: the layout and this replica's partition.
    pub partition: Option<(PartitionLayout, PartitionId)>,
    pub early_replies: bool,
    pub deferred_speculation: bool,
    /// Planted bugs (tests and `--unsafe` only).
    pub unsafe_lose_every: u64,
    pub unsafe_reexecute_duplicates: bool,
    pub unsafe_confirm_unchecked: bool,
    pub unsafe_clear_reply_cache: bool,
    pub unsafe_reopen_expired: bool,
    /// Session leases, in milliseconds of ordered time (`None`: sessions never expire).
    pub session_lease_ms: Option<u64>,
    /// P-SMR worker threads (`None`: sequential execution).
    pub psmr: Option<PsmrOptions>,
    /// GeoPaxos+ (paper 004): the replicas in serializer order (replica `i` hosts
    /// serializer `i`); the replica routes commands to serializers, decides at delivery
    /// whether they still cover them, and runs reconfigurations. `None`: elsewhere.
    pub placement: Option<Vec<NodeId>>,
}

/// A replica as the node core drives it, whatever service it replicates (object
/// safe: the node core holds a `Box<dyn Replica>`). See [`SequentialReplica`] for what
/// each method does.
/// A session open (`cmd.session == 0`, with the `home` its mutations are ordered by
/// under GeoPaxos+, else 0) or renewal ordered at `instance`, applied to `sessions`
/// and counted in `stats`: the reply the chosen replica sends (every
/// execution model that keeps sessions this way: the sequential replica, S-SMR/DS-SMR
/// members).
pub fn session_step(
    sessions: &mut sessions::Sessions,
    stats: &mut ReplicaStats,
    cmd: &Command,
    instance: Instance,
    payload: &[u8],
    home: u64,
    log: Option<&mut sessions::SessionLog>,
) -> Reply {
    let result = if cmd.session == 0 {
        stats.sessions_opened += 1;
        let replaces = partita_types::open_replaces(payload);
        Ok(sessions.open(cmd.client, instance, replaces, home, log))
    } else {
        stats.sessions_renewed += 1;
        sessions.renew(cmd.client, cmd.session, log)
    };
    Reply {
        client: cmd.client,
        seq: 0,
        instance,
        result: result.map(partita_types::session_reply),
    }
}

/// The object id of client `client`'s session in [`SequentialReplica::access`].
pub fn session_object(client: ClientId) -> u64 {
    let mut b = *b"partita/session/\0\0\0\0\0\0\0\0";
    b[16..].copy_from_slice(&client.to_be_bytes());
    partita_service::stable_hash(&b)
}

pub trait Replica: Send {
    /// The service's name ([`ServiceCodec::NAME`]).
    fn service(&self) -> &'static str;
    fn id(&self) -> NodeId;
    fn configure(&mut self, options: &ReplicaOptions);
    /// State partitioning: the replicas that answer each partition's commands changed
    /// (a membership change executed before the next command); this replica's own
    /// partition stays. Every replica of a partition calls it at the same position.
    fn set_answerers(&mut self, layout: PartitionLayout);
    /// Execute the value delivered at `instance`, which replies and session opens call
    /// `name` (see [`SequentialReplica::execute_named`]).
    fn execute_named(
        &mut self,
        instance: Instance,
        name: Instance,
        value: &Value,
        replies_out: &mut Vec<Reply>,
    );
    /// One stream: the instance names the execution.
    fn execute(&mut self, instance: Instance, value: &Value, replies_out: &mut Vec<Reply>) {
        self.execute_named(instance, instance, value, replies_out)
    }
    /// A checkpoint of the decided state (panics while anything is speculated), with
    /// the ordering layer's position at this instance (opaque; may be empty).
    fn checkpoint(&self, ordering: &[u8]) -> Vec<u8>;
    fn last_instance(&self) -> Instance;
    fn digest(&self) -> u64;
    /// Objects the service holds ([`StateMachine::len`]).
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn stats(&self) -> &ReplicaStats;
    fn cached_clients(&self) -> usize;
    fn invariants(&self);
    /// Whether every delivered command has run (checkpoints and digests wait for it):
    /// P-SMR's threads may lag, and S-SMR's commands wait for other partitions.
    fn quiescent(&self) -> bool {
        true
    }
    /// The planted bug `unordered-query`: a read answered at once, unordered (`None`:
    /// this replica cannot).
    fn unsafe_read_unordered(&mut self, _cmd: &Command) -> Option<Reply> {
        None
    }
    /// What `cmd` touches (see [`SequentialReplica::access`]).
    fn access(&self, cmd: &Command) -> Access;
    /// GeoPaxos+: the serializers that must order `cmd` (see
    /// [`SequentialReplica::route`]; `None` without placement).
    fn route(&self, _cmd: &Command) -> Option<u64> {
        None
    }
    /// The reply to a copy of a command executed already (see
    /// [`SequentialReplica::answered`]; `None` where not known).
    fn answered(&self, _cmd: &Command) -> Option<Reply> {
        None
    }
    /// GeoPaxos+: commands to submit again (see
    /// [`SequentialReplica::take_resubmits`]).
    fn take_resubmits(&mut self) -> Vec<Command> {
        Vec::new()
    }
    /// Speculative execution and early replies, if this replica offers them (`None`:
    /// it executes decided values only).
    fn speculation(&self) -> Option<&dyn Speculative> {
        None
    }
    fn speculation_mut(&mut self) -> Option<&mut dyn Speculative> {
        None
    }
    /// P-SMR's worker threads, if this replica has them (`None`: commands execute as
    /// their value is delivered).
    fn worker_threads(&self) -> Option<&dyn WorkerThreads> {
        None
    }
    fn worker_threads_mut(&mut self) -> Option<&mut dyn WorkerThreads> {
        None
    }
    /// Exchanges with replicas of other partitions (S-SMR, DS-SMR), if this replica's
    /// execution model has them.
    fn exchange(&self) -> Option<&dyn PartitionExchange> {
        None
    }
    fn exchange_mut(&mut self) -> Option<&mut dyn PartitionExchange> {
        None
    }
    /// The concrete replica, for tests and tools that know the service
    /// (`downcast_ref::<SequentialReplica<S>>()`).
    fn as_any(&self) -> &dyn Any;
}

/// A replica's speculative execution (paper 001 §III-B) and early replies (§VII): the
/// node core hands it proposals ahead of their decisions, asks it to execute them,
/// and rolls back what another decision contradicts.
pub trait Speculative {
    /// A proposal for `instance` arrived (Ring Paxos's Phase 2A).
    fn propose(&mut self, instance: Instance, value: Arc<Value>);
    /// Execute the proposals that follow what is executed, as far as they go.
    fn speculate(&mut self);
    /// Roll back and execute `n` proposals again (after a checkpoint).
    fn respeculate(&mut self, n: u64);
    fn rollback_speculation(&mut self);
    /// Whether a proposal waits to be executed speculatively.
    fn speculation_ready(&self) -> bool;
    /// Instances executed ahead of their decision.
    fn speculated(&self) -> u64;
    /// Early replies to send (tentative replies, confirmations).
    fn take_early(&mut self) -> Vec<EarlyReply>;
    fn early_pending(&self) -> usize;
}

/// A replica's P-SMR worker threads (paper 002): delivered commands queue at their
/// threads and run when the driver runs a thread.
pub trait WorkerThreads {
    /// Worker threads (0: commands execute as their value is delivered).
    fn threads(&self) -> usize;
    /// Whether worker thread `t` can run its next command now.
    fn thread_runnable(&self, t: usize) -> bool;
    /// Worker thread `t` runs its next command (only when runnable).
    fn run_thread(&mut self, t: usize, replies_out: &mut Vec<Reply>);
    /// Run the worker threads until none can run (on OS threads where the replica
    /// has them: [`SequentialReplica::run_threads`]).
    fn run_threads(&mut self, replies_out: &mut Vec<Reply>);
    /// P-SMR on OS threads (see [`SequentialReplica::set_thread_runner`]).
    fn set_thread_runner(&mut self, runner: Arc<dyn ThreadRunner>);
}

/// A replica's exchanges with replicas of other partitions (S-SMR and DS-SMR's
/// signals and objects).
pub trait PartitionExchange {
    /// A message from replica `from` of another partition; commands it unblocks reply
    /// into `replies_out`. Bytes that do not decode or a sender that may not send them
    /// are dropped and counted, never trusted.
    fn on_exec(&mut self, from: NodeId, data: &[u8], replies_out: &mut Vec<Reply>);
    /// Messages for other replicas: (to, bytes).
    fn take_exec(&mut self) -> Vec<(NodeId, Vec<u8>)>;
    /// A tick of the driver's clock: an execution model that waits for other
    /// partitions asks again after a while.
    fn exec_tick(&mut self);
    /// Whether the next [`PartitionExchange::exec_tick`] may act or counts toward
    /// acting (a driver that skips idle ticks delivers every tick while it is).
    fn exec_tick_due(&self) -> bool;
}

impl<S: StateMachine> Replica for SequentialReplica<S> {
    fn service(&self) -> &'static str {
        S::NAME
    }
    fn id(&self) -> NodeId {
        self.id
    }
    fn configure(&mut self, o: &ReplicaOptions) {
        self.set_cluster_id(o.cluster_id);
        if let Some((layout, p)) = &o.partition {
            self.set_partition(layout.clone(), *p);
        }
        self.set_early_replies(o.early_replies);
        self.set_deferred_speculation(o.deferred_speculation);
        self.set_unsafe_lose_every(o.unsafe_lose_every);
        self.set_unsafe_reexecute_duplicates(o.unsafe_reexecute_duplicates);
        self.set_unsafe_confirm_unchecked(o.unsafe_confirm_unchecked);
        if o.unsafe_clear_reply_cache {
            self.unsafe_clear_reply_cache();
        }
        self.set_unsafe_reopen_expired(o.unsafe_reopen_expired);
        self.set_session_lease(o.session_lease_ms);
        if let Some(p) = o.psmr {
            self.set_psmr(p);
        }
        self.set_placement(o.placement.clone());
    }

    fn set_answerers(&mut self, layout: PartitionLayout) {
        if self.answers.is_some() {
            self.answers = Some(layout);
        }
    }

    fn execute_named(
        &mut self,
        instance: Instance,
        name: Instance,
        value: &Value,
        replies_out: &mut Vec<Reply>,
    ) {
        SequentialReplica::execute_named(self, instance, name, value, replies_out)
    }
    fn checkpoint(&self, ordering: &[u8]) -> Vec<u8> {
        SequentialReplica::checkpoint_with(self, ordering)
    }
    fn last_instance(&self) -> Instance {
        SequentialReplica::last_instance(self)
    }
    fn digest(&self) -> u64 {
        SequentialReplica::digest(self)
    }
    fn len(&self) -> u64 {
        self.state.len()
    }
    fn stats(&self) -> &ReplicaStats {
        SequentialReplica::stats(self)
    }
    fn cached_clients(&self) -> usize {
        SequentialReplica::cached_clients(self)
    }
    fn invariants(&self) {
        SequentialReplica::invariants(self)
    }
    fn access(&self, cmd: &Command) -> Access {
        SequentialReplica::access(self, cmd)
    }
    fn answered(&self, cmd: &Command) -> Option<Reply> {
        SequentialReplica::answered(self, cmd)
    }
    fn route(&self, cmd: &Command) -> Option<u64> {
        SequentialReplica::route(self, cmd)
    }
    fn take_resubmits(&mut self) -> Vec<Command> {
        SequentialReplica::take_resubmits(self)
    }
    fn unsafe_read_unordered(&mut self, cmd: &Command) -> Option<Reply> {
        SequentialReplica::unsafe_read_unordered(self, cmd)
    }
    fn quiescent(&self) -> bool {
        SequentialReplica::quiescent(self)
    }
    fn speculation(&self) -> Option<&dyn Speculative> {
        Some(self)
    }
    fn speculation_mut(&mut self) -> Option<&mut dyn Speculative> {
        Some(self)
    }
    fn worker_threads(&self) -> Option<&dyn WorkerThreads> {
        Some(self)
    }
    fn worker_threads_mut(&mut self) -> Option<&mut dyn WorkerThreads> {
        Some(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl<S: StateMachine> Speculative for SequentialReplica<S> {
    fn propose(&mut self, instance: Instance, value: Arc<Value>) {
        SequentialReplica::propose(self, instance, value)
    }
    fn speculate(&mut self) {
        SequentialReplica::speculate(self)
    }
    fn respeculate(&mut self, n: u64) {
        SequentialReplica::respeculate(self, n)
    }
    fn rollback_speculation(&mut self) {
        SequentialReplica::rollback_speculation(self)
    }
    fn speculation_ready(&self) -> bool {
        SequentialReplica::speculation_ready(self)
    }
    fn speculated(&self) -> u64 {
        SequentialReplica::speculated(self)
    }
    fn take_early(&mut self) -> Vec<EarlyReply> {
        SequentialReplica::take_early(self)
    }
    fn early_pending(&self) -> usize {
        SequentialReplica::early_pending(self)
    }
}

impl<S: StateMachine> WorkerThreads for SequentialReplica<S> {
    fn threads(&self) -> usize {
        SequentialReplica::threads(self)
    }
    fn thread_runnable(&self, t: usize) -> bool {
        SequentialReplica::thread_runnable(self, t)
    }
    fn run_thread(&mut self, t: usize, replies_out: &mut Vec<Reply>) {
        SequentialReplica::run_thread(self, t, replies_out)
    }
    fn run_threads(&mut self, replies_out: &mut Vec<Reply>) {
        SequentialReplica::run_threads(self, replies_out)
    }
    fn set_thread_runner(&mut self, runner: Arc<dyn ThreadRunner>) {
        SequentialReplica::set_thread_runner(self, runner)
    }
}

/// Builds replicas of one service: the node core holds one and never names the
/// service's type.
pub trait ServiceFactory: Send + Sync {
    /// The service's name ([`ServiceCodec::NAME`]).
    fn name(&self) -> &'static str;
    /// For a service whose state keeps time ([`StateMachine::TIMED`]): how often
    /// ordered time must move while idle ([`StateMachine::TICK_MS`]). `None`: it does
    /// not keep time.
    fn tick_ms(&self) -> Option<u64> {
        None
    }
    /// A replica with the empty state.
    fn fresh(&self, id: NodeId) -> Box<dyn Replica>;
    /// A replica whose state is the empty state with `genesis` applied, in order: the
    /// service's initial contents, the same at every replica (commands in the
    /// service's encoding, executed before anything is ordered and outside any
    /// session or instance). A command that does not decode is an error. The
    /// default takes no genesis.
    fn seeded(&self, id: NodeId, genesis: &[Payload]) -> Result<Box<dyn Replica>, String> {
        match genesis.is_empty() {
            true => Ok(self.fresh(id)),
            false => Err(format!("the {} replicas take no genesis", self.name())),
        }
    }
    /// A replica restored from checkpoint bytes of cluster `cluster_id` (written by
    /// any of its replicas), as replica `node_id`. A checkpoint of another cluster or
    /// another service, or a damaged one, is refused.
    fn restore(
        &self,
        bytes: &[u8],
        cluster_id: u64,
        node_id: NodeId,
    ) -> Result<Box<dyn Replica>, CheckpointError>;
}

impl std::fmt::Debug for dyn ServiceFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServiceFactory({})", self.name())
    }
}

struct Factory<S>(PhantomData<fn() -> S>);

impl<S: StateMachine> ServiceFactory for Factory<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }
    fn tick_ms(&self) -> Option<u64> {
        S::TIMED.then_some(S::TICK_MS)
    }
    fn fresh(&self, id: NodeId) -> Box<dyn Replica> {
        Box::new(SequentialReplica::new(id, S::new()))
    }
    fn seeded(&self, id: NodeId, genesis: &[Payload]) -> Result<Box<dyn Replica>, String> {
        let mut state = S::new();
        for (i, bytes) in genesis.iter().enumerate() {
            let cmd = S::decode_command(bytes)
                .map_err(|e| format!("genesis command {i} is not a {} command: {e}", S::NAME))?;
            state.genesis(&cmd);
        }
        Ok(Box::new(SequentialReplica::new(id, state)))
    }
    fn restore(
        &self,
        bytes: &[u8],
        cluster_id: u64,
        node_id: NodeId,
    ) -> Result<Box<dyn Replica>, CheckpointError> {
        Ok(Box::new(SequentialReplica::<S>::restore_as(
            bytes, cluster_id, node_id,
        )?))
    }
}

/// The factory of replicas of service `S`.
pub fn service<S: StateMachine>() -> Arc<dyn ServiceFactory> {
    Arc::new(Factory::<S>(PhantomData))
}

/// The replica behind a `dyn Replica`, when it replicates `S` (tests and tools).
pub fn downcast<S: StateMachine>(r: &dyn Replica) -> Option<&SequentialReplica<S>> {
    r.as_any().downcast_ref::<SequentialReplica<S>>()
}

/// The decided outcome's service reply, for tests: panics on a refusal or bytes that
/// do not decode.
pub fn reply_of<S: StateMachine>(outcome: &Outcome) -> S::Reply {
    partita_service::decode_outcome::<S>(outcome).expect("a decodable reply")
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_btree::{BPlusTree, BatchOp, Op, OpResult};
    use partita_consensus::Vid;
    use partita_types::{Ballot, Command};

    fn res(r: &Reply) -> OpResult {
        reply_of::<BPlusTree>(&r.result)
    }

    fn value(cmds: Vec<Command>) -> Value {
        Value {
            vid: Vid {
                ballot: Ballot::ZERO,
                seq: 0,
            },
            commands: cmds,
            parts: Vec::new(),
            time_ms: 0,
            skip: 0,
        }
    }

    fn cmd(client: u64, seq: u64, reply_to: NodeId, op: Op) -> Command {
        partita_btree::service::command(client, seq, reply_to, &op)
    }

    #[test]
    fn only_the_chosen_replica_replies_and_reads() {
        let mut a = SequentialReplica::new(1, BPlusTree::new());
        let mut b = SequentialReplica::new(2, BPlusTree::new());
        let v = value(vec![
            cmd(7, 1, 1, Op::Insert { key: 5, value: 50 }),
            cmd(8, 1, 2, Op::Read { key: 5 }),
        ]);
        let (mut ra, mut rb) = (Vec::new(), Vec::new());
        a.execute(1, &v, &mut ra);
        b.execute(1, &v, &mut rb);
        assert_eq!(ra.len(), 1);
        assert_eq!((ra[0].client, ra[0].seq, ra[0].instance), (7, 1, 1));
        assert_eq!(res(&ra[0]), OpResult::Inserted(true));
        assert_eq!(rb.len(), 1);
        assert_eq!((rb[0].client, rb[0].seq, rb[0].instance), (8, 1, 1));
        assert_eq!(res(&rb[0]), OpResult::Value(Some(50)));
        assert_eq!(a.stats().reads_skipped, 1);
        assert_eq!(a.digest(), b.digest());
    }

    #[test]
    fn resubmitted_mutation_is_answered_from_cache() {
        let mut a = SequentialReplica::new(1, BPlusTree::new());
        let mut r = Vec::new();
        a.execute(
            1,
            &value(vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 50 })]),
            &mut r,
        );
        a.execute(
            2,
            &value(vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 50 })]),
            &mut r,
        );
        assert_eq!(res(&r[0]), OpResult::Inserted(true));
        assert_eq!(
            res(&r[1]),
            OpResult::Inserted(true),
            "the cached reply, not a second execution"
        );
        assert_eq!(r[1].instance, 1);
        // A stale (older) resubmission is ignored.
        a.execute(
            3,
            &value(vec![
                cmd(7, 2, 1, Op::Delete { key: 5 }),
                cmd(7, 1, 1, Op::Insert { key: 5, value: 9 }),
            ]),
            &mut r,
        );
        assert_eq!(r.len(), 3);
        assert_eq!(a.state().read(5), None);
    }

    #[test]
    fn planted_bug_executes_twice() {
        let mut a = SequentialReplica::new(1, BPlusTree::new());
        a.set_unsafe_reexecute_duplicates(true);
        let mut r = Vec::new();
        a.execute(
            1,
            &value(vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 50 })]),
            &mut r,
        );
        a.execute(
            2,
            &value(vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 50 })]),
            &mut r,
        );
        assert_eq!(res(&r[1]), OpResult::Inserted(false));
    }

    #[test]
    fn deferred_speculation_waits_for_speculate_and_work_is_never_rewound() {
        let mut a = SequentialReplica::new(1, BPlusTree::new());
        a.set_deferred_speculation(true);
        let v1 = Arc::new(value(vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 50 })]));
        a.propose(1, v1.clone());
        assert_eq!(a.speculated(), 0, "deferred: recorded only");
        assert!(a.speculation_ready());
        assert_eq!(a.stats().work, ExecutionWork::default());
        a.speculate();
        assert_eq!((a.speculated(), a.speculation_ready()), (1, false));
        let w = a.stats().work;
        assert_eq!((w.commands, w.ops, w.by_kind[0]), (1, 1, 1));
        // Decided with another value: rolled back, the decided value executed, and
        // nothing speculated again by `execute` itself.
        let mut other = value(vec![
            cmd(8, 1, 1, Op::Query { min: 0, max: 10 }),
            cmd(8, 2, 1, Op::Batch(vec![BatchOp::Delete { key: 5 }])),
        ]);
        other.vid.seq = 1;
        let v2 = Arc::new(value(vec![cmd(9, 1, 1, Op::Prev { key: 9 })]));
        a.propose(2, v2);
        a.speculate();
        assert_eq!(a.speculated(), 2);
        let mut r = Vec::new();
        a.execute(1, &other, &mut r);
        assert_eq!((a.speculated(), a.speculation_ready()), (0, true));
        assert_eq!(r.len(), 2);
        // Work counts everything that ran, the rolled-back speculations included.
        let w = a.stats().work.since(&w);
        assert_eq!(w.commands, 3, "prev (speculated), query, batch");
        assert_eq!(w.by_kind, [0, 1, 0, 0, 0, 1, 1]);
        assert_eq!(
            a.stats().commands_executed,
            2,
            "execution counters are rewound"
        );
        a.speculate();
        assert_eq!(a.speculated(), 1);
        a.invariants();
    }

    #[test]
    #[should_panic(expected = "in order")]
    fn out_of_order_instance_is_a_bug() {
        let mut a = SequentialReplica::new(1, BPlusTree::new());
        a.execute(2, &value(vec![]), &mut Vec::new());
    }
}

#[cfg(test)]
mod refusal_tests {
    use super::*;
    use partita_btree::{BPlusTree, Op};
    use partita_types::{Ballot, Payload};

    fn value(cmds: Vec<Command>) -> Value {
        Value::new(
            Vid {
                ballot: Ballot::ZERO,
                seq: 0,
            },
            cmds,
        )
    }

    /// A payload that does not decode is refused by every replica, the chosen one
    /// answers with the reason, nothing changes, and a later command still runs.
    #[test]
    fn undecodable_commands_are_refused_identically() {
        let garbage = Command::single(7, 1, 1, Payload::from_static(b"\xff\xff\xff"));
        let good = partita_btree::service::command(7, 2, 1, &Op::Insert { key: 1, value: 2 });
        let mut a = SequentialReplica::new(1, BPlusTree::new());
        let mut b = SequentialReplica::new(2, BPlusTree::new());
        let (mut ra, mut rb) = (Vec::new(), Vec::new());
        a.execute(1, &value(vec![garbage.clone(), good.clone()]), &mut ra);
        b.execute(1, &value(vec![garbage, good]), &mut rb);
        assert!(rb.is_empty(), "only the chosen replica answers");
        assert_eq!(ra.len(), 2);
        let why = ra[0].result.as_ref().unwrap_err();
        assert!(
            why.to_string()
                .contains("btree command that does not decode"),
            "{why}"
        );
        assert!(ra[1].result.is_ok());
        assert_eq!(a.digest(), b.digest());
        assert_eq!((a.stats().refused, b.stats().refused), (1, 1));
        a.invariants();
    }

    /// A command for another partition is not executed here.
    #[test]
    fn commands_for_other_partitions_are_skipped() {
        let mut a = SequentialReplica::new(1, BPlusTree::new());
        let mut layout = PartitionLayout {
            map: partita_types::PartitionMap::new(2, 100).unwrap(),
            replicas: vec![vec![1], vec![2]],
        };
        layout.replicas.sort();
        a.set_partition(layout, 0);
        let far = partita_service::envelope::<BPlusTree>(
            7,
            1,
            1,
            &Op::Insert { key: 70, value: 1 },
            &partita_types::PartitionMap::new(2, 100).unwrap(),
        )
        .unwrap();
        let mut r = Vec::new();
        a.execute(1, &value(vec![far]), &mut r);
        assert!(r.is_empty());
        assert_eq!(a.state().len(), 0);
    }
}
