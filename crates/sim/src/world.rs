//! The world: every node core, every client, the network, the disks and the fault
//! schedule of one run, driven by one event queue in virtual time.
//!
//! One event at a time is popped from the queue (earliest time first, ties in push
//! order) and handled; handling may push later events. Nothing else advances time, and
//! every random draw comes from a stream of the seed, so a run is a pure function of
//! (seed, options, code).
//!
//! A node ([`SimNode`]) is a `NodeCore` plus what the runtime around it would hold: an
//! inbox (the event channel), a disk, a clock and an incarnation number. It handles one
//! input at a time: the handler runs when the input is taken, the node's CPU is then
//! busy for the handler's cost (from the cost table), and the handler's outputs leave
//! when it is done (`NodeDone`). `invariants()` is called after every handler. A crash
//! drops the core, its inbox, the handler in progress and whatever the disk had not
//! synced; a restart builds a fresh `NodeCore` from the durable records only. Events of
//! an earlier incarnation (ticks, sync completions, handler completions) are recognised
//! by their incarnation number and ignored.
//!
//! The same world runs the experiment mode ([`World::new_bench`], see [`crate::bench`]):
//! a given cluster file, workload clients without quota or history, no faults, no
//! phases, no agreement oracle or end-of-run checks, and a report of throughput,
//! latency and each node's load over the measured window.

use crate::bench::{self as bm, BenchReport, BenchSpec, NodeLoad, ReplicaImage};
use crate::check::{self, Agreement, Check, Failure, ReplicaEnd};
use crate::client::{ClientAction, ClientBugs, ClientParams, SimClient};
use crate::cpu::{BtreeWork, CostTable, InputKind, Work};
use crate::disk::{Disk, DiskParams};
use crate::net::{Endpoint, Fate, LinkFaults, LinkTiming, NetParams, Network};
use crate::queue::{EventQueue, Time, MILLIS, SECONDS};
use crate::report::SeedReport;
use crate::swarm::{self, FaultClass, FaultParams, SeedParams, SimOptions};
use crate::trace::{Detail, Trace};
use partita_btree::{BPlusTree, BatchOp, Op};
use partita_checker::Event;
use partita_config::ClusterConfig;
use partita_consensus::{AcceptorRecord, Msg, PersistToken, TickDue};
use partita_node::{CheckpointBytes, Mode, NodeCore, NodeSetup, Output};
use partita_types::early::EarlyReply;
use partita_types::{encode, ClientId, Command, Instance, NodeId, PartitionLayout, Reply};
use partita_wire::Wire;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

mod members;

/// What travels on the simulated network.
#[derive(Clone, Debug)]
enum Payload {
    Peer(Msg),
    Request(Command),
    /// A reply with its sender's leader hint.
    Reply(Reply, Option<NodeId>),
    Refused {
        /// The refused session (a client may have two: `crate::client::MOVER_BIT`).
        client: u64,
        seq: u64,
        leader: Option<NodeId>,
    },
    /// Early replies: a tentative reply or a confirmation.
    Early(EarlyReply),
}

impl Payload {
    fn kind(&self) -> &'static str {
        match self {
            Payload::Peer(m) => m.kind(),
            Payload::Request(_) => "request",
            Payload::Reply(..) => "reply",
            Payload::Refused { .. } => "refused",
            Payload::Early(EarlyReply::Tentative(_)) => "tentative-reply",
            Payload::Early(EarlyReply::Confirm(_)) => "confirm",
        }
    }
}

/// An input waiting in a node's inbox.
#[derive(Debug)]
enum Input {
    Peer {
        from: NodeId,
        msg: Msg,
        bytes: usize,
    },
    Request {
        cmd: Command,
        bytes: usize,
    },
    /// The node's timer: the ticks it is owed (see [`World::account_ticks`]); never
    /// queued, it goes before what is, as the runtime's does.
    Tick,
    Persisted(Vec<PersistToken>),
    CheckpointSaved(Instance),
    /// An operator's membership request (the membership script).
    Member {
        request: u64,
        change: partita_types::members::MemberChange,
    },
}

/// An output of a finished handler, encoded and decoded back, ready to leave.
#[derive(Debug)]
enum Emit {
    Peer {
        to: NodeId,
        msg: Msg,
        bytes: usize,
        /// The same message as the step's previous peer send (a group send).
        copy: bool,
    },
    Persist {
        token: PersistToken,
        record: AcceptorRecord,
        bytes: usize,
    },
    Client {
        to: u32,
        payload: Payload,
        bytes: usize,
    },
    Checkpoint {
        instance: Instance,
        bytes: CheckpointBytes,
    },
    Truncate {
        below_token: PersistToken,
    },
    /// The answer to a membership request.
    Member {
        request: u64,
        result: Result<partita_types::members::Members, String>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FaultKind {
    Partition,
    Crash,
    Pause,
}

#[derive(Debug)]
enum Ev {
    Arrive {
        from: Endpoint,
        to: Endpoint,
        payload: Payload,
        bytes: usize,
    },
    NodeDone {
        node: usize,
        inc: u32,
    },
    /// A P-SMR worker thread finished the command it ran.
    WorkerDone {
        node: usize,
        thread: usize,
        inc: u32,
    },
    Tick {
        node: usize,
        inc: u32,
    },
    DiskDone {
        node: usize,
        inc: u32,
        job: u64,
    },
    CheckpointDone {
        node: usize,
        inc: u32,
        instance: Instance,
    },
    ClientTimer {
        client: u32,
        gen: u64,
    },
    Fault(FaultKind),
    Restart {
        node: usize,
        inc: u32,
    },
    Resume {
        node: usize,
        inc: u32,
        pause: u64,
    },
    Unpartition {
        id: u64,
    },
    Heal,
    /// The membership script's next step.
    MemberStep,
    Probe,
    Deadline,
    /// Experiment mode: the measured window starts or ends (a snapshot of the load).
    BenchMark,
    /// Experiment mode: the run ends.
    BenchEnd,
}

/// What the experiment mode adds to a world.
struct BenchState {
    workload: bm::Workload,
    think_ms: u64,
    preload: u64,
    fsync: bool,
    image: Option<ReplicaImage>,
    duration_ns: Time,
    /// The measured window.
    window: (Time, Time),
    marks: Vec<Mark>,
}

/// The load counters at one instant (experiment mode).
#[derive(Clone, Debug)]
struct Mark {
    busy_ns: Vec<u64>,
    egress_ns: Vec<u64>,
    syncs: Vec<u64>,
    decided: u64,
    /// P-SMR: each node's worker threads' CPU, summed; and the first replica's
    /// counters (parallel, synchronous, passed, failed).
    worker_busy_ns: Vec<u64>,
    psmr: [u64; 4],
}

/// Which phase the run is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Faults are injected; clients may give up.
    Safety,
    /// Everything healed; every command must complete.
    Liveness,
}

/// One node of the cluster and the machine around it.
pub struct SimNode {
    pub id: NodeId,
    /// Marked `join = true`: outside the initial membership.
    pub joining: bool,
    /// Removed from the cluster: stopped for good.
    pub gone: bool,
    setup: NodeSetup,
    core: Option<NodeCore>,
    inc: u32,
    paused: Option<u64>,
    /// A handler is in progress (its `NodeDone` is scheduled).
    busy: bool,
    /// A handler that emitted nothing and left nothing to follow it runs until this
    /// time, without a `NodeDone` event of its own (most handlers are such ticks):
    /// an input that arrives before then waits for it as for any handler (see
    /// [`World::start_next`]).
    quiet_until: Option<Time>,
    /// The handler finished while the node was paused: emit on resume.
    stalled: bool,
    emits: Vec<Emit>,
    inbox: VecDeque<Input>,
    /// A tick fell while the node had work running, and goes before what is queued
    /// when that work ends (the runtime's event loop takes its timer first).
    tick_pending: bool,
    /// The core's [`NodeCore::tick_due`] as last asked, until anything changes the
    /// core (a handler, a worker thread's, a restart): the driver asks before and after
    /// each handler and again when the node goes idle, and a role's answer walks its
    /// state. `None`: to be asked.
    due: Option<TickDue>,
    tick_ns: Time,
    /// Ticks fall at `tick_base + k * tick_ns` (k = 0, 1, ...) since the node started.
    /// The first `ticks_seen` of them are accounted for ([`World::account_ticks`]);
    /// `ticks_owed` ticks are the core's but not given to it yet (they go with its next
    /// handler: see [`World::start_next`]). The next tick is armed at `tick_at` (the
    /// earliest the core said a tick may act).
    tick_base: Time,
    ticks_seen: u64,
    ticks_owed: u64,
    tick_at: Option<Time>,
    /// The node has had nothing to run or wait for since this time (no handler, no
    /// input queued, not paused); `None` while it has.
    free_from: Option<Time>,
    /// This node's clock runs at `1 / (1 + clock_skew)` of virtual time (its ticks
    /// are that much longer).
    clock_skew: f64,
    disk: Disk,
    /// The newest durable replica checkpoint (what a restart recovers from).
    checkpoint: Option<(Instance, CheckpointBytes)>,
    /// The checkpoint being written (at most one at a time).
    checkpoint_saving: Option<(Instance, CheckpointBytes)>,
    pub acceptor: bool,
    pub replica: bool,
    pub coordinator: bool,
    /// Has the batcher role (standalone when neither acceptor nor replica).
    pub batcher: bool,
    /// The client-server baseline's server.
    pub server: bool,
    /// Virtual nanoseconds of CPU this node's handlers took, in total.
    pub busy_ns: u64,
    /// P-SMR worker threads, each on a CPU of its own: what each is running (the
    /// outputs it leaves when done), and the CPU each used in total.
    workers: Vec<Option<Vec<Emit>>>,
    pub worker_busy_ns: Vec<u64>,
}

impl SimNode {
    fn disk_stall(&self) -> f64 {
        self.disk.params().stall
    }
    fn up(&self) -> bool {
        self.core.is_some()
    }
    /// Ticks that fell by `now` since the node started.
    fn ticks_by(&self, now: Time) -> u64 {
        if now < self.tick_base {
            0
        } else {
            (now - self.tick_base) / self.tick_ns + 1
        }
    }
    fn idle(&self) -> bool {
        self.up() && self.paused.is_none() && !self.busy
    }
    /// The node's own clock at `now`, in milliseconds (what its ticks carry).
    fn clock_ms(&self, now: Time) -> u64 {
        (now as f64 / (1.0 + self.clock_skew) / 1e6) as u64
    }
}

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Install (once) a panic hook that keeps panics inside simulated cores off stderr and
/// remembers their message and location for the failure report; other panics go to the
/// previous hook as usual.
fn install_quiet_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(|q| q.get()) {
                LAST_PANIC.with(|l| *l.borrow_mut() = Some(info.to_string()));
            } else {
                previous(info);
            }
        }));
    });
}

/// Run `f`, turning a panic into its message.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    QUIET.with(|q| q.set(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(false));
    r.map_err(|payload| {
        LAST_PANIC
            .with(|l| l.borrow_mut().take())
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic with a non-string payload".to_string())
    })
}

/// Whether two consecutive sends carry the same message (the cores clone one message
/// for every destination), so that it is encoded once. Cheap: `Arc<Value>` equality
/// first compares pointers, and the clones share their values.
fn same_msg(a: &Msg, b: &Msg) -> bool {
    a == b
}

/// Encode a wire message as the runtime frames it, decode it back: (decoded, bytes on
/// the wire including the frame header).
fn roundtrip(w: &Wire) -> Result<(Wire, usize), String> {
    let bytes = encode(w);
    let back: Wire = partita_types::decode(&bytes).map_err(|e| e.to_string())?;
    Ok((back, bytes.len() + partita_types::frame::FRAME_HEADER_BYTES))
}

/// [`roundtrip`] of a peer message, which comes back too (no copy to frame it).
fn roundtrip_peer(msg: Msg) -> Result<(Msg, Wire, usize), String> {
    let w = Wire::Peer(msg);
    let r = roundtrip(&w);
    let Wire::Peer(msg) = w else {
        unreachable!("framed as a peer message")
    };
    r.map(|(back, bytes)| (msg, back, bytes))
}

/// In a benchmark, cores' invariants are checked after one handler in `clients /
/// INVARIANT_CLIENTS` (every handler with fewer clients).
pub const INVARIANT_CLIENTS: u64 = 64;

pub struct World {
    p: SeedParams,
    cost: CostTable,
    check_max_states: u64,
    /// Cores' invariants are checked after one handler in this many (1: after every
    /// handler, as the swarm does), and handlers run so far.
    invariants_every: u64,
    handlers: u64,
    /// The cluster's tick period in milliseconds of a node's clock.
    tick_ms: u64,
    /// Deliver every tick, and fail when one acts before its node said one would
    /// (`--tick-check`); else a node's ticks before its due are skipped.
    tick_check: bool,
    events_max: u64,
    q: EventQueue<Ev>,
    nodes: Vec<SimNode>,
    clients: Vec<SimClient>,
    net: Network,
    rng_net: ChaCha8Rng,
    rng_disk: ChaCha8Rng,
    rng_faults: ChaCha8Rng,
    rng_clients: ChaCha8Rng,
    trace: Trace,
    agreement: Agreement,
    /// State partitioning: which replicas hold which key range.
    layout: PartitionLayout,
    failure: Option<Failure>,
    phase: Phase,
    healed_at: Option<Time>,
    finished_at: Option<Time>,
    probing: bool,
    clients_done: usize,
    done_flags: Vec<bool>,
    invoked: u64,
    partitions: BTreeMap<u64, Vec<(Endpoint, Endpoint)>>,
    next_fault_id: u64,
    /// Counted by name on every message: a hash map (the report sorts them).
    counters: FxHashMap<&'static str, u64>,
    out_buf: Vec<Output>,
    actions_buf: Vec<ClientAction>,
    bench: Option<BenchState>,
    /// The cluster file's `[wan]` matrix in words (`None`: no regions).
    wan: Option<String>,
    /// Per client, the name of its region (`[wan] clients`; empty without one).
    client_regions: Vec<Option<Arc<str>>>,
    /// Seeds that change their replicas: the operator's script.
    script: Option<members::MemberScript>,
}

impl World {
    /// Build the world of `p` (nothing runs yet).
    pub fn new(p: SeedParams, opts: &SimOptions) -> World {
        let cluster = p.cluster();
        Self::build(p, cluster, opts, None)
    }

    /// The world of an experiment point (see [`crate::bench`]); nothing runs yet.
    pub fn new_bench(spec: BenchSpec) -> World {
        let cluster = spec
            .cluster
            .with_batchers(spec.batchers)
            .unwrap_or_else(|e| panic!("experiment spec: {e}"));
        let n = cluster.nodes.len();
        let timing = LinkTiming {
            latency_ns: spec.net.latency_ns,
            latency_spread: 1.0,
            jitter_ns: spec.net.jitter_ns,
            bandwidth_bytes_per_s: spec.net.link_bytes_per_s.max(1),
        };
        let d = &spec.cost.disk;
        let p = SeedParams {
            seed: spec.seed,
            service: cluster.cluster.service.clone(),
            protocol: cluster.ordering.paxos_protocol(),
            ring_decision: cluster.ordering.ring_decision(),
            speculative: cluster.execution.is_speculative(),
            partitions: cluster.partitioning.partitions,
            key_space: cluster.partitioning.key_space,
            early_replies: cluster.execution.early_replies(),
            session_lease_ms: cluster.sessions.lease_ms,
            psmr_threads: cluster.execution.threads(),
            psmr_optimistic: cluster.execution.optimistic(),
            member_changes: false,
            // The bench world runs the spec's cluster file as it is (rings included).
            rings: 0,
            ring_m: 1,
            ring_delta_ms: 5,
            batchers: {
                let m = cluster.membership();
                match m.standalone_batchers().count() {
                    0 if m.batchers.is_empty() => swarm::Batchers::None,
                    0 => swarm::Batchers::OnAcceptors,
                    n => swarm::Batchers::Standalone(n as u32),
                }
            },
            batcher_interval_ms: cluster.batching.batcher_interval_ms,
            value_interval_ms: cluster.batching.value_interval_ms,
            acceptors: cluster.membership().acceptors.len(),
            replicas: cluster.executors().len(),
            window_instances_max: cluster.batching.window_instances_max,
            batch_bytes_max: cluster.batching.batch_bytes_max,
            batch_delay_ms: cluster.batching.batch_delay_ms,
            checkpoint_instances: cluster.storage.checkpoint_instances,
            clients: spec.clients.max(1),
            ops: u64::MAX,
            client: ClientParams {
                think_ns_max: spec.think_ms * MILLIS,
                timeout_ns: spec.client_timeout_ns.max(1),
                give_up_ns: u64::MAX,
                refused_retry_ns: 50 * MILLIS,
                // A geo cluster's clients draw from the keys its tree or map starts with.
                keys: match cluster.ordering.geo_keys() {
                    Some(k) if k > 0 && spec.preload == 0 => k,
                    _ => bm::key_space(spec.preload),
                },
            },
            net: NetParams {
                peer: timing.clone(),
                client: timing,
                peer_faults: LinkFaults::none(),
                client_faults: LinkFaults::none(),
                nic: spec.net.nic.clone(),
            },
            disk: DiskParams {
                write_ns: d.write_ns,
                write_byte_ps: d.write_byte_ps,
                fsync_ns: if spec.fsync { d.fsync_ns } else { 0 },
                stall: 0.0,
                stall_ns_max: 0,
                unsynced_survive: 0.0,
            },
            clock_skew: vec![0.0; n],
            faults: FaultParams {
                classes: Vec::new(),
                partition_per_s: 0.0,
                partition_ns_max: 0,
                crash_per_s: 0.0,
                down_ns_max: 0,
                pause_per_s: 0.0,
                pause_ns_max: 0,
            },
            safety_ops: u64::MAX,
            safety_ns_max: u64::MAX,
            liveness_ns_max: u64::MAX,
            bugs: Default::default(),
            bug_names: Vec::new(),
            flags: "experiment".into(),
            dssmr: spec.dssmr.clone(),
            geo: None,
        };
        let opts = SimOptions {
            cost: spec.cost,
            events_max: u64::MAX,
            ..SimOptions::default()
        };
        let duration_ns = spec.duration_ns.max(1);
        let trim = spec.trim.clamp(0.0, 0.99);
        let trim_end = spec.trim_end.unwrap_or(spec.trim).clamp(0.0, 0.99 - trim);
        let window = (
            (duration_ns as f64 * trim) as Time,
            (duration_ns as f64 * (1.0 - trim_end)) as Time,
        );
        let bench = BenchState {
            workload: spec.workload,
            think_ms: spec.think_ms,
            preload: spec.preload,
            fsync: spec.fsync,
            image: spec.replica_image,
            duration_ns,
            window,
            marks: Vec::new(),
        };
        let clients = u64::from(p.clients);
        let mut w = Self::build(p, cluster, &opts, Some(bench));
        for c in &mut w.clients {
            c.set_give_up_allowed(false);
        }
        // A core's invariants walk its whole state, which grows with the commands in
        // flight, that is with the clients: checked after every handler, 16,200
        // clients would spend the run in them.
        w.invariants_every = (clients / INVARIANT_CLIENTS).max(1);
        w
    }

    fn build(
        p: SeedParams,
        cluster: ClusterConfig,
        opts: &SimOptions,
        bench: Option<BenchState>,
    ) -> World {
        install_quiet_hook();
        let ids: Vec<NodeId> = cluster.nodes.iter().map(|n| n.id).collect();
        let membership = cluster.membership();
        let replicas = cluster.executors();
        let acceptors = membership.acceptors.clone();
        // Partitioned, a replica that joins is in no partition of the file's: the
        // checks place it in the one it joins.
        let mut layout = cluster.partition_layout();
        for n in cluster.nodes.iter().filter(|n| n.join) {
            let part = n
                .partition
                .and_then(|p| layout.replicas.get_mut(p as usize));
            if let (Some(r), true) = (part, n.roles.contains(&partita_config::Role::Replica)) {
                r.push(n.id);
                r.sort_unstable();
            }
        }
        let agreement = Agreement::partitioned(
            layout.map,
            layout
                .replicas
                .iter()
                .flatten()
                .filter(|r| !acceptors.contains(r))
                .filter_map(|&r| Some((r, layout.partition_of_replica(r)?)))
                .collect(),
        );
        // Seeds that change their replicas: the operator's script, for the node
        // marked `join = true`.
        let script =
            cluster.nodes.iter().find(|n| n.join).map(|n| {
                members::MemberScript::new(p.seed, n.id, cluster.clone(), p.clients as usize)
            });
        let tick_ns = cluster.cluster.tick_ms * MILLIS;
        let graph = p
            .dssmr
            .as_ref()
            .filter(|_| p.service == "chirper")
            .map(|d| Arc::new(partita_dssmr::chirper::Graph::generate(&d.graph)));
        let planted = partita_dssmr::server::Planted {
            locality_at_consult: p.bugs.ds_locality_at_consult,
            oracle_ignores_moves: p.bugs.ds_oracle_ignores_moves,
            no_signals: p.bugs.ds_no_signals,
        };
        let service = match (&p.dssmr, &graph) {
            // The key-value store: keys hashed to partitions, none loaded.
            (Some(d), _) if p.service == "kv" => {
                partita_dssmr::replica::factory_planted::<partita_dssmr::kv::KvObjects>(
                    d.scheme,
                    d.static_map,
                    Arc::new(Vec::new),
                    planted,
                )
            }
            (Some(d), Some(g)) => {
                let g = g.clone();
                partita_dssmr::replica::factory_planted::<partita_dssmr::chirper::Chirper>(
                    d.scheme,
                    d.static_map,
                    Arc::new(move || g.objects()),
                    planted,
                )
            }
            _ => partita_config::services::factory(&cluster)
                .unwrap_or_else(partita_smr::service::<BPlusTree>),
        };
        let nodes: Vec<SimNode> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                let setup = cluster.node_setup(id, service.clone());
                SimNode {
                    id,
                    joining: cluster.node(id).is_some_and(|n| n.join),
                    gone: false,
                    acceptor: setup.acceptor,
                    replica: setup.replica,
                    coordinator: setup.is_coordinator(),
                    batcher: setup.batcher,
                    server: setup.mode == Mode::Cs,
                    busy_ns: 0,
                    workers: Vec::new(),
                    worker_busy_ns: Vec::new(),
                    setup,
                    core: None,
                    inc: 0,
                    paused: None,
                    busy: false,
                    quiet_until: None,
                    stalled: false,
                    emits: Vec::new(),
                    inbox: VecDeque::new(),
                    tick_pending: false,
                    due: None,
                    tick_ns: ((tick_ns as f64) * (1.0 + p.clock_skew[i])).max(1.0) as Time,
                    tick_base: 0,
                    ticks_seen: 0,
                    ticks_owed: 0,
                    tick_at: None,
                    free_from: None,
                    clock_skew: p.clock_skew[i],
                    disk: Disk::new(p.disk.clone()),
                    checkpoint: None,
                    checkpoint_saving: None,
                }
            })
            .collect();
        let mut rng_links = swarm::stream(p.seed, swarm::STREAM_LINKS);
        let mut net = Network::new(&ids, p.clients, p.net.clone(), &mut rng_links);
        // The cluster file's regions: links between them take the matrix's one-way
        // delay, as the real processes' drivers delay them.
        let wan = cluster.wan();
        let client_regions: Vec<_> = (0..p.clients)
            .map(|c| cluster.client_region(u64::from(c)))
            .collect();
        if let Some(w) = &wan {
            let regions: Vec<_> = ids
                .iter()
                .map(|&id| cluster.node_region(id))
                .chain(client_regions.iter().copied())
                .collect();
            net.apply_wan(w, &regions);
        }
        let read_direct = p.bugs.unordered_query;
        let clients = (0..p.clients)
            .map(|c| {
                let ops =
                    p.ops / p.clients as u64 + u64::from((c as u64) < p.ops % p.clients as u64);
                let replica = replicas[c as usize % replicas.len()];
                // GeoPaxos, GeoPaxos+ and EPaxos: a client talks to its nearest replica (client
                // `c` is in region `c mod 3`, that of replica `c mod 3`), the origin of
                // its requests, as `partita-client` does.
                let entry = if cluster.ordering.is_geo() {
                    replica
                } else {
                    cluster.first_entry(replica, c as u64)
                };
                // Clients enter at the coordinator (the server), or spread over the
                // batchers (at their own replica if it batches, as real clients do),
                // and rotate over the batchers, then the acceptors.
                let topology = cluster.client_topology();
                if let (Some(d), "kv") = (&p.dssmr, p.service.as_str()) {
                    let n = layout.replicas.len().max(1);
                    let data = partita_dssmr::replica::data_partitions(n, d.scheme) as u32;
                    return SimClient::new_ds_kv(
                        c,
                        entry,
                        topology,
                        replica,
                        p.client.clone(),
                        d,
                        data,
                        ops,
                    );
                }
                if let (Some(d), Some(g)) = (&p.dssmr, &graph) {
                    let n = layout.replicas.len().max(1);
                    let data = partita_dssmr::replica::data_partitions(n, d.scheme) as u32;
                    return SimClient::new_ds(
                        c,
                        entry,
                        topology,
                        replica,
                        p.client.clone(),
                        d,
                        data,
                        g.clone(),
                        ops,
                    );
                }
                let bugs = ClientBugs {
                    independent_partitions: p.bugs.independent_partitions,
                    keep_session_after_give_up: p.bugs.keep_session_after_give_up,
                    read_direct,
                };
                if p.service == "kv" && bench.is_none() {
                    return SimClient::new_kv(
                        c,
                        entry,
                        topology,
                        replica,
                        p.client.clone(),
                        ops,
                        bugs,
                    );
                }
                let client =
                    SimClient::new(c, entry, topology, replica, p.client.clone(), ops, bugs);
                match (&bench, &p.geo) {
                    (Some(b), _) => client.for_bench(b.workload, p.client.keys, MILLIS),
                    (None, Some(g)) => {
                        client.for_geo(g.workload.clone(), (c as usize % replicas.len()) as u64)
                    }
                    (None, None) => client,
                }
            })
            .collect();
        World {
            rng_net: swarm::stream(p.seed, swarm::STREAM_NET),
            rng_disk: swarm::stream(p.seed, swarm::STREAM_DISK),
            rng_faults: swarm::stream(p.seed, swarm::STREAM_FAULTS),
            rng_clients: swarm::stream(p.seed, swarm::STREAM_CLIENTS),
            cost: opts.cost.clone(),
            check_max_states: opts.check_max_states,
            invariants_every: 1,
            handlers: 0,
            tick_ms: cluster.cluster.tick_ms.max(1),
            tick_check: opts.tick_check,
            events_max: opts.events_max,
            q: EventQueue::new(),
            nodes,
            clients,
            net,
            client_regions: client_regions
                .iter()
                .map(|r| Some(Arc::from(wan.as_ref()?.name((*r)?))))
                .collect(),
            wan: wan.map(|w| w.describe()),
            trace: Trace::new(opts.trace_tail),
            agreement,
            layout: layout.clone(),
            failure: None,
            phase: Phase::Safety,
            healed_at: None,
            finished_at: None,
            probing: false,
            clients_done: 0,
            done_flags: vec![false; p.clients as usize],
            invoked: 0,
            partitions: BTreeMap::new(),
            next_fault_id: 1,
            counters: FxHashMap::default(),
            out_buf: Vec::new(),
            actions_buf: Vec::new(),
            script,
            bench,
            p,
        }
    }

    fn count(&mut self, what: &'static str) {
        *self.counters.entry(what).or_default() += 1;
    }

    fn now(&self) -> Time {
        self.q.now()
    }

    fn fail(&mut self, check: Check, message: String) {
        if self.failure.is_some() {
            return;
        }
        self.failure = Some(Failure {
            check,
            time_ns: self.now(),
            message,
            trace_tail: self.trace.tail().map(|e| e.to_string()).collect(),
        });
    }

    fn node_index(&self, id: NodeId) -> usize {
        // Node ids are 1..=N in order (see `SeedParams::cluster`).
        let i = id as usize - 1;
        debug_assert_eq!(self.nodes[i].id, id);
        i
    }

    /// Run to the end and check. Consumes the world.
    pub fn run(mut self) -> SeedReport {
        self.start();
        self.run_loop();
        self.finish()
    }

    /// Process events until a failure or the end.
    fn run_loop(&mut self) {
        while self.failure.is_none() && self.finished_at.is_none() {
            let Some((_, ev)) = self.q.pop() else {
                self.fail(Check::Simulator, "the event queue ran dry".into());
                break;
            };
            if self.trace.events() >= self.events_max {
                self.fail(
                    Check::Simulator,
                    format!("event budget of {} exhausted", self.events_max),
                );
                break;
            }
            self.handle(ev);
        }
    }

    fn start(&mut self) {
        for ni in 0..self.nodes.len() {
            self.boot(ni, true);
        }
        for c in 0..self.clients.len() {
            let mut out = std::mem::take(&mut self.actions_buf);
            self.clients[c].start(0, &mut self.rng_clients, &mut out);
            self.client_actions(c as u32, out);
        }
        let f = &self.p.faults;
        let partitions = f.has(FaultClass::Partition);
        let crashes = f.has(FaultClass::CrashAcceptor)
            || f.has(FaultClass::CrashReplica)
            || f.has(FaultClass::CrashCoordinator);
        let pauses = f.has(FaultClass::Pause);
        if partitions {
            self.schedule_fault(FaultKind::Partition);
        }
        if crashes {
            self.schedule_fault(FaultKind::Crash);
        }
        if pauses {
            self.schedule_fault(FaultKind::Pause);
        }
        match &self.bench {
            Some(b) => {
                let (lo, hi, end) = (b.window.0, b.window.1, b.duration_ns);
                self.q.push(lo, Ev::BenchMark);
                self.q.push(hi, Ev::BenchMark);
                self.q.push(end, Ev::BenchEnd);
            }
            None => self.q.push(self.p.safety_ns_max, Ev::Heal),
        }
        if let Some(first) = self.script.as_ref().map(|s| s.first) {
            self.q.push(first, Ev::MemberStep);
        }
    }

    fn schedule_fault(&mut self, kind: FaultKind) {
        let rate = match kind {
            FaultKind::Partition => self.p.faults.partition_per_s,
            FaultKind::Crash => self.p.faults.crash_per_s,
            FaultKind::Pause => self.p.faults.pause_per_s,
        };
        let u: f64 = self.rng_faults.gen_range(f64::MIN_POSITIVE..1.0);
        let wait = (-u.ln() / rate * SECONDS as f64) as Time;
        self.q.push(self.now() + wait.max(1), Ev::Fault(kind));
    }

    fn handle(&mut self, ev: Ev) {
        let now = self.now();
        match ev {
            Ev::Arrive {
                from,
                to,
                payload,
                bytes,
            } => {
                self.trace
                    .record(now, to, payload.kind(), Detail::Peer(from));
                self.arrive(from, to, payload, bytes);
            }
            Ev::NodeDone { node, inc } => {
                self.trace.record(
                    now,
                    Endpoint::Node(self.nodes[node].id),
                    "done",
                    Detail::None,
                );
                self.node_done(node, inc);
            }
            Ev::WorkerDone { node, thread, inc } => {
                let n = &self.nodes[node];
                if n.inc != inc || !n.up() {
                    return;
                }
                if n.paused.is_some() {
                    // A stopped process stops all its threads: look again later.
                    self.q
                        .push(now + MILLIS, Ev::WorkerDone { node, thread, inc });
                    return;
                }
                self.trace.record(
                    now,
                    Endpoint::Node(n.id),
                    "worker-done",
                    Detail::Num(thread as u64),
                );
                let emits = self.nodes[node].workers[thread]
                    .take()
                    .expect("a worker that was running");
                if !self.emit(node, inc, emits) {
                    return;
                }
                self.start_workers(node);
            }
            Ev::Tick { node, inc } => {
                let n = &self.nodes[node];
                if n.inc != inc || !n.up() {
                    return;
                }
                self.trace
                    .record(now, Endpoint::Node(n.id), "tick", Detail::None);
                let n = &mut self.nodes[node];
                n.tick_at = None;
                if self.tick_check {
                    // Every tick, as the runtime's timer does.
                    let at = now + n.tick_ns;
                    n.tick_at = Some(at);
                    self.q.set_timer(node, at, Ev::Tick { node, inc });
                }
                // A node running a handler (or paused) takes its tick when that ends,
                // before what is queued; a free one takes it now.
                self.account_ticks(node, now);
                self.start_next(node);
                self.arm_tick(node);
            }
            Ev::DiskDone { node, inc, job } => {
                if self.nodes[node].inc != inc {
                    return;
                }
                let done = self.nodes[node].disk.complete(now, job, &mut self.rng_disk);
                let (tokens, next) = match done {
                    Ok(d) => d,
                    Err(m) => {
                        let id = self.nodes[node].id;
                        self.fail(Check::Invariants, format!("node {id}: {m}"));
                        return;
                    }
                };
                self.trace.record(
                    now,
                    Endpoint::Node(self.nodes[node].id),
                    "fsync",
                    Detail::Num(tokens.len() as u64),
                );
                if let Some((job, at)) = next {
                    self.q.push(at, Ev::DiskDone { node, inc, job });
                }
                if !tokens.is_empty() {
                    self.nodes[node].inbox.push_back(Input::Persisted(tokens));
                    self.start_next(node);
                }
            }
            Ev::CheckpointDone {
                node,
                inc,
                instance,
            } => {
                let n = &mut self.nodes[node];
                if n.inc != inc {
                    return;
                }
                let id = n.id;
                match n.checkpoint_saving.take() {
                    Some((i, bytes)) if i == instance => n.checkpoint = Some((i, bytes)),
                    other => {
                        n.checkpoint_saving = other;
                        self.fail(
                            Check::Simulator,
                            format!("node {id}: checkpoint {instance} completed but was not being written"),
                        );
                        return;
                    }
                }
                self.count("checkpoints_saved");
                self.trace
                    .record(now, Endpoint::Node(id), "checkpoint", Detail::Num(instance));
                self.nodes[node]
                    .inbox
                    .push_back(Input::CheckpointSaved(instance));
                self.start_next(node);
            }
            Ev::ClientTimer { client, gen } => {
                self.trace
                    .record(now, Endpoint::Client(client), "timer", Detail::Num(gen));
                let mut out = std::mem::take(&mut self.actions_buf);
                self.clients[client as usize].on_timer(now, gen, &mut self.rng_clients, &mut out);
                self.client_actions(client, out);
                self.client_follows(client as usize);
            }
            Ev::Fault(kind) => {
                if self.phase != Phase::Safety {
                    return;
                }
                match kind {
                    FaultKind::Partition => self.partition(),
                    FaultKind::Crash => self.crash_some(),
                    FaultKind::Pause => self.pause_some(),
                }
                self.schedule_fault(kind);
            }
            Ev::Restart { node, inc } => {
                if self.nodes[node].inc == inc && !self.nodes[node].up() {
                    self.boot(node, false);
                }
            }
            Ev::Resume { node, inc, pause } => {
                if self.nodes[node].inc == inc && self.nodes[node].paused == Some(pause) {
                    self.resume(node);
                }
            }
            Ev::Unpartition { id } => {
                if let Some(cuts) = self.partitions.remove(&id) {
                    self.trace
                        .record(now, Endpoint::Node(0), "partition-healed", Detail::Num(id));
                    for (a, b) in cuts {
                        self.net.uncut(a, b);
                    }
                }
            }
            Ev::Heal => self.heal(),
            Ev::MemberStep => self.member_step(),
            Ev::Probe => {
                self.trace
                    .record(now, Endpoint::Node(0), "probe", Detail::None);
                if self.quiescent() {
                    self.finished_at = Some(now);
                } else {
                    self.q.push(now + 2 * MILLIS, Ev::Probe);
                }
            }
            Ev::BenchMark => {
                let m = self.mark();
                if let Some(b) = self.bench.as_mut() {
                    b.marks.push(m);
                }
            }
            Ev::BenchEnd => self.finished_at = Some(now),
            Ev::Deadline => {
                if self.finished_at.is_none() {
                    let reason = self.liveness_report();
                    match self.idle_apart() {
                        // Nothing left to do anywhere, yet the replicas stand at
                        // different points of the order: a divergence, not a hang.
                        Some(apart) => self.fail(Check::Convergence, format!("{apart}\n{reason}")),
                        None => self.fail(Check::Liveness, reason),
                    }
                }
            }
        }
    }

    // ---------------------------------------------------------------- nodes

    /// Start (or restart) node `ni` from its durable records.
    fn boot(&mut self, ni: usize, first: bool) {
        if self.nodes[ni].gone {
            return;
        }
        let now = self.now();
        let n = &mut self.nodes[ni];
        debug_assert!(!n.up());
        let recovered = n.disk.recover();
        let records = recovered.len();
        let (id, replica, server) = (n.id, n.replica, n.server);
        // Experiment mode: a replica's first boot loads the preloaded image.
        let image = match &self.bench {
            Some(b) if first && replica && !server && b.preload > 0 => Some(b.image.clone()),
            _ => None,
        };
        let checkpoint = match image {
            Some(Some(image)) => Some((image.0)(id)),
            Some(None) => {
                self.fail(
                    Check::Simulator,
                    format!("replica {id}: a preload needs a replica image"),
                );
                return;
            }
            None => self.nodes[ni]
                .checkpoint
                .as_ref()
                .map(|(_, b)| b.0.as_ref().clone()),
        };
        let n = &mut self.nodes[ni];
        let setup = n.setup.clone();
        let bugs = self.p.bugs.clone();
        let mut out = std::mem::take(&mut self.out_buf);
        out.clear();
        let id = n.id;
        self.trace.record(
            now,
            Endpoint::Node(id),
            if first { "start" } else { "restart" },
            Detail::Num(records as u64),
        );
        let core = guarded(|| {
            let mut core = NodeCore::recover(setup, recovered, checkpoint, bugs, &mut out);
            if let Ok(c) = &mut core {
                // P-SMR worker threads get CPUs of their own (`start_workers`).
                c.set_inline_workers(false);
                c.invariants();
            }
            core.map_err(|e| e.to_string())
        });
        let core = match core {
            Ok(Ok(c)) => c,
            Ok(Err(m)) => {
                self.fail(
                    Check::Invariants,
                    format!("node {id} refused its own durable checkpoint at restart: {m}"),
                );
                return;
            }
            Err(m) => {
                self.fail(
                    Check::Invariants,
                    format!("node {id} panicked while starting from {records} records: {m}"),
                );
                return;
            }
        };
        if !first {
            self.count("restarts");
        }
        let inc = self.nodes[ni].inc;
        self.nodes[ni].core = Some(core);
        self.nodes[ni].due = None;
        // Ticks start at a random phase of the period.
        let tick_ns = self.nodes[ni].tick_ns;
        let phase = self.rng_faults.gen_range(0..tick_ns);
        let n = &mut self.nodes[ni];
        n.tick_base = now + phase + 1;
        n.ticks_seen = 0;
        n.ticks_owed = 0;
        n.free_from = None;
        n.tick_at = Some(n.tick_base);
        self.q
            .set_timer(ni, n.tick_base, Ev::Tick { node: ni, inc });
        let mut work = Work::default();
        let leader = self.nodes[ni].core.as_ref().and_then(|c| c.leader());
        let Some(emits) = self.prepare(id, leader, &mut out, &mut work) else {
            return;
        };
        self.out_buf = out;
        let cost = self.cost.restart_cost(records) + self.cost.cost(InputKind::Persisted(0), &work)
            - self.cost.cost(InputKind::Persisted(0), &Work::default());
        let n = &mut self.nodes[ni];
        n.emits = emits;
        n.busy = true;
        n.busy_ns += cost;
        self.q.push(now + cost, Ev::NodeDone { node: ni, inc });
    }

    /// Run the next handler of an idle node: its deferred work (speculative execution,
    /// [`NodeCore::on_continue`]) if the previous handler left some, which thus runs
    /// after that handler's outputs left and before any new input, else its next input.
    fn start_next(&mut self, ni: usize) {
        if !self.nodes[ni].idle() || self.failure.is_some() {
            return;
        }
        if let Some(until) = self.nodes[ni].quiet_until {
            let now = self.now();
            let n = &mut self.nodes[ni];
            if now < until {
                // The quiet handler still runs: the next input (or a tick that fell
                // meanwhile) starts when it ends.
                if !n.inbox.is_empty() || n.tick_pending {
                    n.quiet_until = None;
                    n.free_from = None;
                    n.busy = true;
                    let inc = n.inc;
                    self.q.push(until, Ev::NodeDone { node: ni, inc });
                }
                return;
            }
            n.quiet_until = None;
        }
        let now = self.now();
        self.account_ticks(ni, now);
        let deferred = self.nodes[ni]
            .core
            .as_ref()
            .is_some_and(|c| c.has_deferred_work());
        let n = &mut self.nodes[ni];
        // The node's own clock, in milliseconds (what its values are stamped with).
        let clock_ms = n.clock_ms(now);
        // Deferred work first, then the timer, then what is queued (the runtime's event
        // loop takes a due tick before new messages). The core's ticks not given yet go
        // first in the handler, in one call (the skipped ones did nothing by the node's
        // own word). A tick that would not act either runs no handler of its own: its
        // count waits for the next, as the skipped ones do.
        let input = if deferred {
            None
        } else {
            n.ticks_owed += u64::from(std::mem::take(&mut n.tick_pending));
            let core = n.core.as_ref().expect("an idle node is up");
            let acts = n.ticks_owed > 0
                && (self.tick_check || {
                    let due = *n.due.get_or_insert_with(|| core.tick_due());
                    core.ticks() + n.ticks_owed >= due.tick || clock_ms >= due.clock_ms
                });
            if acts {
                Some(Input::Tick)
            } else if let Some(input) = n.inbox.pop_front() {
                Some(input)
            } else {
                n.free_from.get_or_insert(now);
                self.arm_tick(ni);
                return;
            }
        };
        let n = &mut self.nodes[ni];
        n.free_from = None;
        n.due = None;
        let owed = std::mem::take(&mut n.ticks_owed);
        let id = n.id;
        let inc = n.inc;
        let server = n.server;
        if deferred {
            self.trace
                .record(now, Endpoint::Node(id), "continue", Detail::None);
        }
        let core = n.core.as_mut().expect("an idle node is up");
        let work_before = core.replica().map(|r| r.stats().work).unwrap_or_default();
        // Who takes a client command or a batch: the coordinator of a leading node,
        // else the node's batcher (see `cpu`).
        let leading = core.leads().is_some();
        let batching = !leading && core.batches();
        let forwarded_commands = match &input {
            Some(Input::Peer {
                msg: Msg::ForwardBatch { cmds, .. },
                ..
            }) if leading => cmds.len() as u64,
            _ => 0,
        };
        let mut out = std::mem::take(&mut self.out_buf);
        out.clear();
        let (what, bytes_in): (&'static str, usize) = match &input {
            None => ("continue", 0),
            Some(Input::Peer { msg, bytes, .. }) => (msg.kind(), *bytes),
            Some(Input::Request { bytes, .. }) => ("request", *bytes),
            Some(Input::Tick) => ("tick", 0),
            Some(Input::Persisted(_)) => ("persisted", 0),
            Some(Input::CheckpointSaved(_)) => ("checkpoint-saved", 0),
            Some(Input::Member { .. }) => ("member", 0),
        };
        let mut persisted = 0;
        self.handlers += 1;
        let check = self.handlers.is_multiple_of(self.invariants_every);
        let tick_check = self.tick_check;
        let mut acted_early = None;
        let r = guarded(|| {
            if owed > 0 {
                // The tick delivered now comes before the node's due: it must not act.
                let early = tick_check
                    .then(|| core.tick_due())
                    .filter(|d| core.ticks() + owed < d.tick && clock_ms < d.clock_ms);
                core.on_ticks(owed, clock_ms, &mut out);
                if let Some(due) = early.filter(|_| !out.is_empty()) {
                    let mut first = format!("{:?}", out[0]);
                    first.truncate(160);
                    acted_early = Some((due, out.len(), first));
                }
            }
            match input {
                None => core.on_continue(&mut out),
                Some(Input::Peer { from, msg, .. }) => core.on_peer(from, msg, &mut out),
                Some(Input::Request { cmd, .. }) => core.on_request(cmd, &mut out),
                // Its ticks went to the core above, with any others owed.
                Some(Input::Tick) => {}
                Some(Input::Persisted(tokens)) => {
                    persisted = tokens.len();
                    core.on_persisted(&tokens, &mut out)
                }
                Some(Input::CheckpointSaved(instance)) => {
                    core.on_checkpoint_saved(instance, &mut out)
                }
                Some(Input::Member { request, change }) => {
                    core.on_member_request(request, change, &mut out)
                }
            }
            if check {
                core.invariants();
            }
        });
        if let Err(m) = r {
            self.fail(
                Check::Invariants,
                format!("node {id} panicked handling {what}: {m}"),
            );
            return;
        }
        if let Some((due, outputs, first)) = acted_early {
            self.fail(
                Check::Invariants,
                format!(
                    "node {id}: a tick acted ({outputs} outputs, the first {first}), though \
                     the node said none would before its tick {} or clock {} ms",
                    due.tick, due.clock_ms
                ),
            );
            return;
        }
        self.arm_tick(ni);
        // An ordering drops a decision (or commit) that contradicts one it knows (it does
        // not die of a faulty peer); in the simulator every peer is correct, so that is a
        // bug.
        let conflicts = self.nodes[ni]
            .core
            .as_ref()
            .and_then(|c| c.ordering())
            .map_or(0, |o| o.conflicting_decisions());
        if conflicts > 0 {
            self.fail(
                Check::Agreement,
                format!(
                    "node {id} learned two different decisions for one instance (handling {what})"
                ),
            );
            return;
        }
        // Execution is charged where it ran, from the replica's work counters (never
        // rewound: a rolled-back speculation did run). A state transfer replaces the
        // replica (and its counters): count nothing then.
        let executed = self.nodes[ni]
            .core
            .as_ref()
            .and_then(|c| c.replica())
            .map(|r| r.stats().work.since(&work_before))
            .unwrap_or_default();
        let mut work = Work {
            bytes_in,
            forwarded_commands,
            ..self.execution_work(&executed)
        };
        if let Some(c) = self.cost.codec_of(what) {
            work.codec_ns += c.decode(bytes_in);
            work.bytes_in = 0;
        }
        let leader = self.nodes[ni].core.as_ref().and_then(|c| c.leader());
        let Some(emits) = self.prepare(id, leader, &mut out, &mut work) else {
            return;
        };
        self.out_buf = out;
        let kind = match what {
            "request" | "member" if server => InputKind::ServerRequest,
            "member" => InputKind::Request,
            "request" if batching => InputKind::BatcherRequest,
            "request" => InputKind::Request,
            "tick" => InputKind::Tick,
            "persisted" => InputKind::Persisted(persisted),
            "checkpoint-saved" => InputKind::Persisted(0),
            "continue" => InputKind::Continue,
            k => InputKind::Peer(k),
        };
        let cost = self.cost.cost(kind, &work).max(1);
        let n = &mut self.nodes[ni];
        n.busy_ns += cost;
        // A handler that emitted nothing, with nothing queued, pending or deferred
        // behind it, no worker threads to start and no removal to act on, needs no
        // `NodeDone`: the node stays busy until `now + cost` all the same
        // (`quiet_until`).
        let quiet = emits.is_empty()
            && n.inbox.is_empty()
            && !n.tick_pending
            && n.core.as_ref().is_some_and(|c| {
                !c.has_deferred_work() && c.worker_threads() == 0 && c.removed().is_none()
            });
        if quiet {
            n.quiet_until = Some(now + cost);
            n.free_from = Some(now + cost);
            return;
        }
        n.emits = emits;
        n.busy = true;
        self.q.push(now + cost, Ev::NodeDone { node: ni, inc });
    }

    /// Arm node `ni`'s tick timer for the earliest tick its core says may act, unless
    /// an earlier one is armed or a tick is pending (it goes first when the running
    /// handler ends, and that handler arms the next). With `--tick-check` every tick
    /// is armed already.
    fn arm_tick(&mut self, ni: usize) {
        let now = self.now();
        let n = &mut self.nodes[ni];
        if self.tick_check || n.tick_pending {
            return;
        }
        let Some(core) = n.core.as_ref() else {
            return;
        };
        // Counted from the last tick accounted for, each one a tick of the core's if the
        // node stays free (a busy node's come later, and its timer early: harmless).
        let clock_ms = n.clock_ms(now);
        let due = *n.due.get_or_insert_with(|| core.tick_due());
        let due = core.ticks_until(due, n.ticks_owed, clock_ms, self.tick_ms);
        let at = n.tick_base.saturating_add(
            n.ticks_seen
                .max(n.ticks_by(now))
                .saturating_add(due - 1)
                .saturating_mul(n.tick_ns),
        );
        if n.tick_at.is_some_and(|t| t <= at) || at == Time::MAX {
            return;
        }
        n.tick_at = Some(at);
        let inc = n.inc;
        self.q.set_timer(ni, at, Ev::Tick { node: ni, inc });
    }

    /// Account for node `ni`'s ticks that fell since it last did, as the runtime gives
    /// them: its timer skips missed ticks (tokio's `MissedTickBehavior::Skip`) and its
    /// event loop takes a due tick before new messages (`biased`). A tick that falls
    /// while the node runs a handler (or is paused) waits for it to end and then goes
    /// first (`tick_pending`), and the ticks that fall while it waits add nothing; a
    /// tick that falls while the node is free is one tick of the core's (owed, and by
    /// the node's own word one that does nothing: its due tick has a timer).
    fn account_ticks(&mut self, ni: usize, now: Time) {
        let n = &mut self.nodes[ni];
        let by = n.ticks_by(now);
        if by <= n.ticks_seen {
            return;
        }
        // Ticks up to `busy_to` fell while the node was occupied.
        let busy_to = match n.free_from {
            None => by,
            Some(f) => n.ticks_by(f.saturating_sub(1)).clamp(n.ticks_seen, by),
        };
        if busy_to > n.ticks_seen {
            n.tick_pending = true;
        }
        n.ticks_owed += by - busy_to;
        n.ticks_seen = by;
    }

    /// The work of executing commands (the replica's counters over one step), for
    /// costing: B+tree operations (by kind where the table has kinds) and commands.
    fn execution_work(&self, executed: &partita_smr::ExecutionWork) -> Work {
        Work {
            btree_ops: executed.ops,
            commands: executed.commands,
            btree: self.cost.btree_by_kind().then_some(BtreeWork {
                ops: executed.ops,
                known: executed.by_kind,
                query_entries: executed.query_entries,
            }),
            ..Work::default()
        }
    }

    /// Encode every output as the runtime would, decode it back, and account the work.
    /// `None` (and a codec failure) if something does not survive the round trip.
    fn prepare(
        &mut self,
        from: NodeId,
        leader: Option<NodeId>,
        out: &mut Vec<Output>,
        work: &mut Work,
    ) -> Option<Vec<Emit>> {
        let mut emits = Vec::with_capacity(out.len());
        let mut prev: Option<(Msg, Msg, usize)> = None;
        for o in out.drain(..) {
            let r: Result<Emit, String> = match o {
                Output::Send { to, msg } => {
                    let cached = match &prev {
                        Some((orig, decoded, bytes)) if same_msg(orig, &msg) => {
                            Some((decoded.clone(), *bytes))
                        }
                        _ => None,
                    };
                    let fresh = cached.is_none();
                    let r = match cached {
                        Some(c) => Ok(c),
                        None => match roundtrip_peer(msg) {
                            Ok((msg, Wire::Peer(decoded), bytes)) => {
                                prev = Some((msg, decoded.clone(), bytes));
                                Ok((decoded, bytes))
                            }
                            Ok(_) => Err("a peer message decoded as another wire message".into()),
                            Err(e) => Err(e),
                        },
                    };
                    let multicast = self.net.multicast();
                    r.map(|(msg, bytes)| {
                        // With IP multicast a group send is one send.
                        if fresh || !multicast {
                            work.sends += 1;
                        }
                        // A kind with a codec line is encoded once per distinct message
                        // (as the runtime does); otherwise per send, per byte.
                        match self.cost.codec_of(msg.kind()) {
                            Some(c) if fresh => work.codec_ns += c.encode(bytes),
                            Some(_) => {}
                            None => work.bytes_out += bytes,
                        }
                        Emit::Peer {
                            to,
                            msg,
                            bytes,
                            copy: !fresh,
                        }
                    })
                }
                Output::Persist { token, record } => {
                    let bytes = encode(&record);
                    match partita_types::decode::<AcceptorRecord>(&bytes) {
                        Ok(record) => {
                            work.persists += 1;
                            match self.cost.codec_of("record") {
                                Some(c) => work.codec_ns += c.encode(bytes.len()),
                                None => work.bytes_out += bytes.len(),
                            }
                            Ok(Emit::Persist {
                                token,
                                record,
                                bytes: bytes.len(),
                            })
                        }
                        Err(e) => Err(format!("a WAL record does not decode: {e}")),
                    }
                }
                Output::Reply(reply) => match roundtrip(&Wire::Reply { reply, leader }) {
                    Ok((Wire::Reply { reply, leader }, bytes)) => {
                        work.replies += 1;
                        match self.cost.codec_of("reply") {
                            Some(c) => work.codec_ns += c.encode(bytes),
                            None => work.bytes_out += bytes,
                        }
                        self.client_of(reply.client).map(|to| Emit::Client {
                            to,
                            payload: Payload::Reply(reply, leader),
                            bytes,
                        })
                    }
                    Ok(_) => Err("a reply decoded as another wire message".into()),
                    Err(e) => Err(e),
                },
                Output::Early(e) => match roundtrip(&Wire::Early(e)) {
                    Ok((Wire::Early(e), bytes)) => {
                        work.replies += 1;
                        match self.cost.codec_of("reply") {
                            Some(c) => work.codec_ns += c.encode(bytes),
                            None => work.bytes_out += bytes,
                        }
                        self.client_of(e.client()).map(|to| Emit::Client {
                            to,
                            payload: Payload::Early(e),
                            bytes,
                        })
                    }
                    Ok(_) => Err("an early reply decoded as another wire message".into()),
                    Err(e) => Err(e),
                },
                Output::Refused {
                    client,
                    seq,
                    reason,
                } => match roundtrip(&Wire::Refused {
                    client,
                    seq,
                    reason,
                    leader,
                }) {
                    Ok((
                        Wire::Refused {
                            client,
                            seq,
                            leader,
                            ..
                        },
                        bytes,
                    )) => {
                        work.replies += 1;
                        match self.cost.codec_of("refused") {
                            Some(c) => work.codec_ns += c.encode(bytes),
                            None => work.bytes_out += bytes,
                        }
                        self.client_of(client).map(|to| Emit::Client {
                            to,
                            payload: Payload::Refused {
                                client,
                                seq,
                                leader,
                            },
                            bytes,
                        })
                    }
                    Ok(_) => Err("a refusal decoded as another wire message".into()),
                    Err(e) => Err(e),
                },
                Output::SaveCheckpoint { instance, bytes } => {
                    work.persists += 1;
                    work.bytes_out += bytes.0.len();
                    Ok(Emit::Checkpoint { instance, bytes })
                }
                Output::TruncateLog { below_token } => Ok(Emit::Truncate { below_token }),
                Output::MemberDone { request, result } => {
                    match roundtrip(&Wire::MemberReply(result)) {
                        Ok((Wire::MemberReply(result), _)) => Ok(members::emit_of(request, result)),
                        Ok(_) => Err("a membership answer decoded as another wire message".into()),
                        Err(e) => Err(e),
                    }
                }
            };
            match r {
                Ok(e) => emits.push(e),
                Err(m) => {
                    self.fail(Check::Codec, format!("node {from}: {m}"));
                    return None;
                }
            }
        }
        Some(emits)
    }

    /// Experiment mode: the server of the client-server baseline executes the preload
    /// (keys 0, 2, …, value = key) as batches of 1000 inserts, outside virtual time:
    /// it cannot boot from a checkpoint as a replica does.
    /// The session that preloads a client-server cluster: below 2^62 (ids from 2^62
    /// are DS-SMR movers', from 2^63 the ordering's own, refused from clients) and far
    /// above the simulated clients'.
    const PRELOAD_CLIENT: ClientId = (1 << 62) - 1;

    fn preload_servers(&mut self) {
        let n = self.bench.as_ref().map_or(0, |b| b.preload);
        if n == 0 {
            return;
        }
        const PER_COMMAND: u64 = 1000;
        let mut out = Vec::new();
        for node in &mut self.nodes {
            let (id, server) = (node.id, node.server);
            let Some(core) = node.core.as_mut().filter(|_| server) else {
                continue;
            };
            node.due = None;
            // The preloading client's session first.
            core.on_request(Command::open(Self::PRELOAD_CLIENT, id, 1), &mut out);
            let session = out
                .iter()
                .find_map(|o| match o {
                    Output::Reply(r) if r.seq == 0 => r
                        .result
                        .as_ref()
                        .ok()
                        .and_then(|p| partita_types::session_of_reply(p)),
                    _ => None,
                })
                .expect("a server opens a session at once");
            out.clear();
            for (chunk, lo) in (0..n).step_by(PER_COMMAND as usize).enumerate() {
                let hi = (lo + PER_COMMAND).min(n);
                let ops = (lo..hi)
                    .map(|i| BatchOp::Insert {
                        key: i * bm::PRELOAD_STRIDE,
                        value: i * bm::PRELOAD_STRIDE,
                    })
                    .collect();
                let mut cmd = partita_btree::service::command(
                    Self::PRELOAD_CLIENT,
                    chunk as u64 + 1,
                    id,
                    &Op::Batch(ops),
                );
                cmd.session = session;
                core.on_request(cmd, &mut out);
                out.clear();
            }
        }
    }

    /// The simulated client of client id `id` (a DS-SMR client's moves session is
    /// its client's: `crate::client::MOVER_BIT`).
    fn client_of(&self, id: u64) -> Result<u32, String> {
        let idx = (id & !crate::client::MOVER_BIT).wrapping_sub(1);
        if idx < self.clients.len() as u64 {
            Ok(idx as u32)
        } else {
            Err(format!("a reply for client {id}, which does not exist"))
        }
    }

    /// The handler of node `ni` finished: its outputs leave, then the next input runs.
    fn node_done(&mut self, ni: usize, inc: u32) {
        let n = &mut self.nodes[ni];
        if n.inc != inc || !n.up() {
            return;
        }
        if n.paused.is_some() {
            n.stalled = true;
            return;
        }
        let emits = std::mem::take(&mut n.emits);
        n.busy = false;
        if !self.emit(ni, inc, emits) {
            return;
        }
        if let Some(at) = self.nodes[ni].core.as_ref().and_then(|c| c.removed()) {
            // Removed from the cluster: it stops for good, as `partita node` does.
            let id = self.nodes[ni].id;
            self.trace
                .record(self.now(), Endpoint::Node(id), "removed", Detail::Num(at));
            self.count("replicas_stopped_removed");
            self.crash(ni, SECONDS);
            self.nodes[ni].gone = true;
            return;
        }
        self.start_workers(ni);
        self.start_next(ni);
    }

    /// Send, write and hand over what a handler or a worker thread produced. `false`
    /// if that failed the run.
    fn emit(&mut self, ni: usize, inc: u32, emits: Vec<Emit>) -> bool {
        let id = self.nodes[ni].id;
        let now = self.now();
        for e in emits {
            match e {
                Emit::Peer {
                    to,
                    msg,
                    bytes,
                    copy,
                } => {
                    if self.bench.is_none() && (!copy || self.agreement.observes_copies()) {
                        if let Err(m) = self.agreement.observe(id, to, &msg) {
                            self.fail(Check::Agreement, m);
                            return false;
                        }
                    }
                    self.send(
                        Endpoint::Node(id),
                        Endpoint::Node(to),
                        Payload::Peer(msg),
                        bytes,
                        copy,
                    );
                }
                Emit::Persist {
                    token,
                    record,
                    bytes,
                } => {
                    let n = &mut self.nodes[ni];
                    if let Some((job, at)) =
                        n.disk.submit(now, token, record, bytes, &mut self.rng_disk)
                    {
                        self.q.push(at, Ev::DiskDone { node: ni, inc, job });
                    }
                }
                Emit::Client { to, payload, bytes } => self.send(
                    Endpoint::Node(id),
                    Endpoint::Client(to),
                    payload,
                    bytes,
                    false,
                ),
                Emit::Member { request, result } => self.member_answer(request, result),
                Emit::Truncate { below_token } => {
                    self.nodes[ni].disk.truncate_below(below_token);
                    self.count("log_truncations");
                    if let Err(m) = self.durability_of(ni) {
                        self.fail(Check::Durability, m);
                    }
                }
                Emit::Checkpoint { instance, bytes } => {
                    // A separate file, written on its own thread: write every byte,
                    // then one fsync (which may stall like any other).
                    let d = &self.p.disk;
                    let stalled = self.rng_disk.gen::<f64>() < self.nodes[ni].disk_stall();
                    let stall = self.rng_disk.gen_range(0..=d.stall_ns_max);
                    let at = now
                        + d.write_ns
                        + bytes.0.len() as u64 * d.write_byte_ps / 1000
                        + d.fsync_ns
                        + if stalled { stall } else { 0 };
                    let n = &mut self.nodes[ni];
                    if n.checkpoint_saving.is_some() {
                        self.fail(
                            Check::Invariants,
                            format!("node {id} asked for a checkpoint while one was being written"),
                        );
                        return false;
                    }
                    n.checkpoint_saving = Some((instance, bytes));
                    self.q.push(
                        at,
                        Ev::CheckpointDone {
                            node: ni,
                            inc,
                            instance,
                        },
                    );
                }
            }
        }
        true
    }

    /// P-SMR: start every idle worker thread of node `ni` that can run (each on a CPU
    /// of its own); its outputs leave when its command's cost has elapsed.
    fn start_workers(&mut self, ni: usize) {
        let now = self.now();
        let n = &self.nodes[ni];
        if !n.up() || n.paused.is_some() || self.failure.is_some() {
            return;
        }
        let k = n.core.as_ref().map_or(0, |c| c.worker_threads());
        if k == 0 {
            return;
        }
        if self.nodes[ni].workers.len() != k {
            self.nodes[ni].workers = (0..k).map(|_| None).collect();
            self.nodes[ni].worker_busy_ns.resize(k, 0);
        }
        for t in 0..k {
            let n = &mut self.nodes[ni];
            if n.workers[t].is_some() {
                continue;
            }
            let core = n.core.as_mut().expect("up");
            if !core.worker_runnable(t) {
                continue;
            }
            n.due = None;
            let (id, inc) = (n.id, n.inc);
            let before = core
                .replica()
                .map(|r| (r.stats().work, r.stats().psmr_synchronous));
            let mut out = std::mem::take(&mut self.out_buf);
            out.clear();
            self.handlers += 1;
            let check = self.handlers.is_multiple_of(self.invariants_every);
            let r = guarded(|| {
                core.on_worker(t, &mut out);
                if check {
                    core.invariants();
                }
            });
            if let Err(m) = r {
                self.fail(
                    Check::Invariants,
                    format!("node {id} panicked in worker thread {t}: {m}"),
                );
                return;
            }
            self.arm_tick(ni);
            let core = self.nodes[ni].core.as_ref().expect("up");
            let (executed, synchronous) = match (core.replica(), before) {
                (Some(r), Some((work, sync))) => (
                    r.stats().work.since(&work),
                    r.stats().psmr_synchronous > sync,
                ),
                _ => Default::default(),
            };
            let mut work = self.execution_work(&executed);
            let leader = core.leader();
            let Some(emits) = self.prepare(id, leader, &mut out, &mut work) else {
                return;
            };
            self.out_buf = out;
            let signals = if synchronous {
                2 * (k as u64 - 1) * self.cost.psmr_signal_ns
            } else {
                0
            };
            let cost = (self.cost.cost(InputKind::Continue, &work) + signals).max(1);
            let n = &mut self.nodes[ni];
            n.workers[t] = Some(emits);
            n.worker_busy_ns[t] += cost;
            self.trace
                .record(now, Endpoint::Node(id), "worker", Detail::Num(t as u64));
            self.q.push(
                now + cost,
                Ev::WorkerDone {
                    node: ni,
                    thread: t,
                    inc,
                },
            );
        }
    }

    fn send(&mut self, from: Endpoint, to: Endpoint, payload: Payload, bytes: usize, copy: bool) {
        self.count("messages_sent");
        let now = self.now();
        match self.net.send(now, from, to, bytes, copy, &mut self.rng_net) {
            Fate::Dropped(r) => self.count(r.name()),
            Fate::Arrives(at, dup) => {
                if let Some(again) = dup {
                    self.count("net_duplicated");
                    self.q.push(
                        again,
                        Ev::Arrive {
                            from,
                            to,
                            payload: payload.clone(),
                            bytes,
                        },
                    );
                }
                self.q.push(
                    at,
                    Ev::Arrive {
                        from,
                        to,
                        payload,
                        bytes,
                    },
                );
            }
        }
    }

    fn arrive(&mut self, from: Endpoint, to: Endpoint, payload: Payload, bytes: usize) {
        if self.net.is_cut(from, to) {
            self.count("net_dropped_cut_in_flight");
            return;
        }
        let now = self.now();
        match to {
            Endpoint::Node(id) => {
                let ni = self.node_index(id);
                if !self.nodes[ni].up() {
                    self.count("net_dropped_node_down");
                    return;
                }
                let input = match (from, payload) {
                    (Endpoint::Node(from), Payload::Peer(msg)) => Input::Peer { from, msg, bytes },
                    (Endpoint::Client(_), Payload::Request(cmd)) => Input::Request { cmd, bytes },
                    (from, p) => {
                        self.fail(
                            Check::Simulator,
                            format!("{from} sent a {} to node {id}", p.kind()),
                        );
                        return;
                    }
                };
                self.nodes[ni].inbox.push_back(input);
                self.start_next(ni);
            }
            Endpoint::Client(c) => {
                let mut out = std::mem::take(&mut self.actions_buf);
                let client = &mut self.clients[c as usize];
                let from = match from {
                    Endpoint::Node(n) => n,
                    Endpoint::Client(_) => 0,
                };
                match payload {
                    Payload::Reply(r, leader) => {
                        client.on_reply(now, from, &r, leader, &mut self.rng_clients, &mut out)
                    }
                    Payload::Refused {
                        client: id,
                        seq,
                        leader,
                    } => client.on_refused(now, id, seq, leader, &mut self.rng_clients, &mut out),
                    Payload::Early(e) => {
                        client.on_early(now, from, &e, &mut self.rng_clients, &mut out)
                    }
                    p => {
                        self.fail(
                            Check::Simulator,
                            format!("client {c} received a {}", p.kind()),
                        );
                        return;
                    }
                }
                self.client_actions(c, out);
            }
        }
    }

    // ---------------------------------------------------------------- clients

    fn client_actions(&mut self, c: u32, mut out: Vec<ClientAction>) {
        let now = self.now();
        for a in out.drain(..) {
            match a {
                ClientAction::Send { to, cmd, first } => {
                    if first {
                        self.invoked += 1;
                        self.trace
                            .record(now, Endpoint::Client(c), "invoke", Detail::Num(cmd.seq));
                    }
                    match roundtrip(&Wire::Request(cmd)) {
                        Ok((Wire::Request(cmd), bytes)) => self.send(
                            Endpoint::Client(c),
                            Endpoint::Node(to),
                            Payload::Request(cmd),
                            bytes,
                            false,
                        ),
                        Ok(_) => self.fail(
                            Check::Codec,
                            "a request decoded as another wire message".into(),
                        ),
                        Err(e) => {
                            self.fail(Check::Codec, format!("a request does not decode: {e}"))
                        }
                    }
                }
                ClientAction::Timer { at, gen } => {
                    self.q.push(at, Ev::ClientTimer { client: c, gen })
                }
            }
        }
        self.actions_buf = out;
        if self.clients[c as usize].is_done() && !self.done_flags[c as usize] {
            self.done_flags[c as usize] = true;
            self.clients_done += 1;
            self.trace
                .record(now, Endpoint::Client(c), "client-done", Detail::None);
            self.maybe_probe();
        }
        if self.phase == Phase::Safety && self.invoked >= self.p.safety_ops {
            self.heal();
        }
    }

    /// Once every client is done (and the run healed), look for quiescence.
    fn maybe_probe(&mut self) {
        if self.clients_done == self.clients.len() && !self.probing && self.phase == Phase::Liveness
        {
            self.probing = true;
            self.q.push(self.now(), Ev::Probe);
        }
    }

    // ---------------------------------------------------------------- faults

    fn endpoints(&self) -> Vec<Endpoint> {
        self.nodes
            .iter()
            .map(|n| Endpoint::Node(n.id))
            .chain((0..self.clients.len() as u32).map(Endpoint::Client))
            .collect()
    }

    fn partition(&mut self) {
        let now = self.now();
        let one_way = self.p.faults.has(FaultClass::OneWay);
        let client_net = self.p.faults.has(FaultClass::ClientNet);
        let shapes: Vec<&'static str> = ["isolate", "split"]
            .into_iter()
            .chain(one_way.then_some("one-way-out"))
            .chain(one_way.then_some("one-way-in"))
            .chain(client_net.then_some("client"))
            .collect();
        let shape = shapes[self.rng_faults.gen_range(0..shapes.len())];
        let ids: Vec<NodeId> = self.nodes.iter().map(|n| n.id).collect();
        let victim = ids[self.rng_faults.gen_range(0..ids.len())];
        let v = Endpoint::Node(victim);
        let mut cuts = Vec::new();
        let text = match shape {
            "isolate" => {
                for e in self.endpoints() {
                    if e != v {
                        cuts.push((v, e));
                        cuts.push((e, v));
                    }
                }
                format!("isolate node {victim}")
            }
            "split" => {
                let mut side: Vec<bool> =
                    ids.iter().map(|_| self.rng_faults.gen_bool(0.5)).collect();
                if side.iter().all(|&s| s) || side.iter().all(|&s| !s) {
                    side[0] = !side[0];
                }
                for (i, &a) in ids.iter().enumerate() {
                    for (j, &b) in ids.iter().enumerate() {
                        if side[i] && !side[j] {
                            cuts.push((Endpoint::Node(a), Endpoint::Node(b)));
                            cuts.push((Endpoint::Node(b), Endpoint::Node(a)));
                        }
                    }
                }
                let left: Vec<String> = ids
                    .iter()
                    .zip(&side)
                    .filter(|(_, &s)| s)
                    .map(|(id, _)| id.to_string())
                    .collect();
                format!("split nodes {{{}}} from the others", left.join(","))
            }
            "one-way-out" => {
                for &b in &ids {
                    if b != victim {
                        cuts.push((v, Endpoint::Node(b)));
                    }
                }
                format!("node {victim} cannot send to other nodes")
            }
            "one-way-in" => {
                for &b in &ids {
                    if b != victim {
                        cuts.push((Endpoint::Node(b), v));
                    }
                }
                format!("node {victim} cannot hear other nodes")
            }
            _ => {
                let c = Endpoint::Client(self.rng_faults.gen_range(0..self.clients.len() as u32));
                match self.rng_faults.gen_range(0..3) {
                    0 => cuts.push((c, v)),
                    1 => cuts.push((v, c)),
                    _ => {
                        cuts.push((c, v));
                        cuts.push((v, c));
                    }
                }
                format!("cut {c} from node {victim}")
            }
        };
        for &(a, b) in &cuts {
            self.net.cut(a, b);
        }
        let id = self.next_fault_id;
        self.next_fault_id += 1;
        let d = self
            .rng_faults
            .gen_range(MILLIS..=self.p.faults.partition_ns_max.max(MILLIS));
        self.partitions.insert(id, cuts);
        self.count("partitions");
        self.trace.record(
            now,
            Endpoint::Node(0),
            "partition",
            Detail::Text(format!("#{id}: {text} for {:.1} ms", d as f64 / 1e6)),
        );
        self.q.push(now + d, Ev::Unpartition { id });
    }

    fn crash_some(&mut self) {
        let f = &self.p.faults;
        // Over the acceptors of the current configuration (the membership script
        // changes them).
        let now: Vec<bool> = (0..self.nodes.len())
            .map(|i| self.acceptor_now(i))
            .collect();
        let acceptors = now.iter().filter(|&&a| a).count();
        let minority = (acceptors - 1) / 2;
        let acceptors_down = (0..self.nodes.len())
            .filter(|&i| now[i] && !self.nodes[i].up())
            .count();
        let replicas_up = self.nodes.iter().filter(|n| n.replica && n.up()).count();
        let eligible: Vec<usize> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.up())
            .filter(|(_, n)| {
                let class_on = if n.coordinator {
                    f.has(FaultClass::CrashCoordinator)
                } else if n.acceptor {
                    f.has(FaultClass::CrashAcceptor)
                } else {
                    // Replicas and standalone batchers: nothing durable but state
                    // their peers can rebuild.
                    (n.replica || n.batcher) && f.has(FaultClass::CrashReplica)
                };
                let acceptor_ok = !n.acceptor || acceptors_down < minority;
                // Crashes end: a configuration a change makes meanwhile with fewer
                // of its acceptors up waits for them.
                let replica_ok = !n.replica || replicas_up > 1;
                class_on && acceptor_ok && replica_ok
            })
            .map(|(i, _)| i)
            .collect();
        if eligible.is_empty() {
            self.count("crashes_skipped");
            return;
        }
        let ni = eligible[self.rng_faults.gen_range(0..eligible.len())];
        let down = self
            .rng_faults
            .gen_range(MILLIS..=self.p.faults.down_ns_max.max(MILLIS));
        self.crash(ni, down);
    }

    /// Power loss at node `ni`; it restarts after `down`.
    fn crash(&mut self, ni: usize, down: Time) {
        let now = self.now();
        let n = &mut self.nodes[ni];
        n.core = None;
        n.due = None;
        n.inc += 1;
        n.paused = None;
        n.busy = false;
        n.quiet_until = None;
        n.stalled = false;
        n.emits.clear();
        n.inbox.clear();
        n.tick_pending = false;
        n.ticks_owed = 0;
        n.free_from = None;
        n.tick_at = None;
        n.checkpoint_saving = None;
        n.workers.iter_mut().for_each(|w| *w = None);
        let loss = n.disk.crash(now, &mut self.rng_disk);
        let (id, inc) = (n.id, n.inc);
        self.count("crashes");
        *self.counters.entry("records_lost_in_crashes").or_default() += loss.lost as u64;
        *self
            .counters
            .entry("unsynced_records_survived")
            .or_default() += loss.survived as u64;
        if loss.torn {
            self.count("torn_records");
        }
        self.trace.record(
            now,
            Endpoint::Node(id),
            "crash",
            Detail::Text(format!(
                "(lost {} unsynced records, {} survived{}; down {:.1} ms)",
                loss.lost,
                loss.survived,
                if loss.torn { ", one torn" } else { "" },
                down as f64 / 1e6
            )),
        );
        self.q.push(now + down, Ev::Restart { node: ni, inc });
    }

    fn pause_some(&mut self) {
        let eligible: Vec<usize> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.up() && n.paused.is_none())
            .map(|(i, _)| i)
            .collect();
        if eligible.is_empty() {
            return;
        }
        let ni = eligible[self.rng_faults.gen_range(0..eligible.len())];
        let d = self
            .rng_faults
            .gen_range(MILLIS..=self.p.faults.pause_ns_max.max(MILLIS));
        let now = self.now();
        let pause = self.next_fault_id;
        self.next_fault_id += 1;
        self.account_ticks(ni, now);
        let n = &mut self.nodes[ni];
        n.free_from = None;
        n.paused = Some(pause);
        let (id, inc) = (n.id, n.inc);
        self.count("pauses");
        self.trace.record(
            now,
            Endpoint::Node(id),
            "pause",
            Detail::Text(format!("for {:.1} ms", d as f64 / 1e6)),
        );
        self.q.push(
            now + d,
            Ev::Resume {
                node: ni,
                inc,
                pause,
            },
        );
    }

    fn resume(&mut self, ni: usize) {
        let now = self.now();
        let n = &mut self.nodes[ni];
        n.paused = None;
        // A stopped process misses the ticks of its pause: it gets one on waking (the
        // runtime's timer skips missed ticks).
        self.account_ticks(ni, now);
        let n = &self.nodes[ni];
        let (id, inc) = (n.id, n.inc);
        self.trace
            .record(now, Endpoint::Node(id), "resume", Detail::None);
        if std::mem::take(&mut self.nodes[ni].stalled) {
            self.node_done(ni, inc);
        } else {
            self.start_next(ni);
            self.start_workers(ni);
        }
    }

    /// End of the safety phase: every fault is repaired and stays off.
    fn heal(&mut self) {
        if self.phase != Phase::Safety {
            return;
        }
        let now = self.now();
        self.phase = Phase::Liveness;
        self.healed_at = Some(now);
        self.trace
            .record(now, Endpoint::Node(0), "heal", Detail::None);
        self.net.heal_all();
        self.partitions.clear();
        self.net.set_faults(LinkFaults::none(), LinkFaults::none());
        let calm = DiskParams {
            stall: 0.0,
            unsynced_survive: 0.0,
            ..self.p.disk.clone()
        };
        for ni in 0..self.nodes.len() {
            self.nodes[ni].disk.set_params(calm.clone());
            if !self.nodes[ni].up() {
                self.boot(ni, false);
            } else if self.nodes[ni].paused.is_some() {
                self.resume(ni);
            }
        }
        for c in &mut self.clients {
            c.set_give_up_allowed(false);
        }
        self.q.push(now + self.p.liveness_ns_max, Ev::Deadline);
        self.maybe_probe();
    }

    // ---------------------------------------------------------------- the end

    /// The node that leads now: of the running leaders, the one with the highest
    /// ballot (a deposed one steps down when it hears of a higher ballot).
    fn coordinator(&self) -> Option<&NodeCore> {
        self.nodes
            .iter()
            .filter_map(|n| n.core.as_ref())
            .filter(|c| c.leads().is_some())
            .max_by_key(|c| c.leads())
    }

    /// Every client done, nothing left to order, every replica caught up, whatever the
    /// ordering: every replica up and running, every node idle (nothing queued, in
    /// flight, held back or known and not delivered), every stream that has a leader
    /// led, with every learner of it at what its highest-ballot leader decided, and the
    /// learners of a leaderless stream (EPaxos's commits, a merged sequence) agreeing.
    /// Whether the replicas then executed alike is the convergence check's question,
    /// not this one's: a divergence is a violation, not a hang. (With DOPs the first
    /// GeoPaxos+ replica submits one every interval: quiescence is a moment between
    /// two of them.)
    fn quiescent(&self) -> bool {
        let mut reports = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            // A removed replica is gone, and one that joins counts once it was added.
            let replica = self.counts_as_replica(i);
            match n.core.as_ref() {
                Some(c) if n.paused.is_none() => {
                    if replica && !c.quiescent() {
                        return false;
                    }
                    reports.push((replica, c.ordering_report()));
                }
                _ if replica => return false,
                _ => {}
            }
        }
        // Per stream: whether it is led, and its highest-ballot leader (with what it
        // decided, and which report is its).
        type Leader = (partita_types::Ballot, Instance, usize);
        let mut streams: BTreeMap<u32, (bool, Option<Leader>)> = BTreeMap::new();
        for (i, (_, r)) in reports.iter().enumerate() {
            for s in &r.streams {
                let e = streams.entry(s.stream).or_insert((s.led, None));
                e.0 |= s.led;
                if let Some((b, d)) = s.leads {
                    if e.1.is_none_or(|(eb, _, _)| b > eb) {
                        e.1 = Some((b, d, i));
                    }
                }
            }
        }
        // Replicas and the leaders that count are idle (a deposed leader that has not
        // heard of its successor yet may still hold commands: they are not ordered).
        let mut must_idle: Vec<bool> = reports.iter().map(|(replica, _)| *replica).collect();
        for (_, leader) in streams.values() {
            if let Some((_, _, i)) = leader {
                must_idle[*i] = true;
            }
        }
        if reports
            .iter()
            .zip(&must_idle)
            .any(|((_, r), must)| *must && !r.idle)
        {
            return false;
        }
        for (stream, (led, leader)) in streams {
            let mut delivered = reports
                .iter()
                .filter(|(replica, _)| *replica)
                .flat_map(|(_, r)| r.streams.iter())
                .filter(|s| s.stream == stream)
                .filter_map(|s| s.delivered);
            if led {
                let Some((_, decided, _)) = leader else {
                    return false;
                };
                if delivered.any(|d| d != decided) {
                    return false;
                }
            } else {
                let first = delivered.next();
                if delivered.any(|x| Some(x) != first) {
                    return false;
                }
            }
        }
        !reports.is_empty()
    }

    /// At the deadline: every client done and every replica up, unpaused and idle
    /// (nothing queued, in flight or known and not delivered), yet the replicas
    /// delivered different numbers of commands of a leaderless stream. Nothing will
    /// bring them together: the replicas diverged.
    fn idle_apart(&self) -> Option<String> {
        if self.clients_done < self.clients.len() {
            return None;
        }
        let mut delivered: BTreeMap<u32, Vec<(NodeId, Instance)>> = BTreeMap::new();
        let replicas = (0..self.nodes.len()).filter(|&i| self.counts_as_replica(i));
        for n in replicas.map(|i| &self.nodes[i]) {
            let c = n.core.as_ref().filter(|_| n.paused.is_none())?;
            let r = c.ordering_report();
            if !c.quiescent() || !r.idle {
                return None;
            }
            for s in r.streams.iter().filter(|s| !s.led && s.leads.is_none()) {
                if let Some(d) = s.delivered {
                    delivered.entry(s.stream).or_default().push((c.id(), d));
                }
            }
        }
        delivered.into_iter().find_map(|(stream, at)| {
            let first = at.first()?.1;
            at.iter().any(|&(_, d)| d != first).then(|| {
                let at: Vec<String> = at.iter().map(|(n, d)| format!("node {n}: {d}")).collect();
                format!(
                    "every replica idle with every client done, yet they delivered different \
                     numbers of commands of stream {stream}: {}",
                    at.join(", ")
                )
            })
        })
    }

    /// Why the run is not done: for the liveness failure.
    fn liveness_report(&self) -> String {
        let mut parts = Vec::new();
        let stuck: Vec<String> = self
            .clients
            .iter()
            .filter_map(|c| {
                c.outstanding().map(|(seq, op, at, sends)| {
                    format!(
                        "client {} waits for seq {seq} {} (invoked at {:.1} ms, sent {sends} times, replica {})",
                        c.index,
                        op,
                        at as f64 / 1e6,
                        c.replica()
                    )
                })
            })
            .collect();
        let healed = self.healed_at.unwrap_or(0);
        parts.push(format!(
            "{:.1} s after healing (at {:.3} s): {} of {} clients done",
            self.p.liveness_ns_max as f64 / 1e9,
            healed as f64 / 1e9,
            self.clients_done,
            self.clients.len()
        ));
        if !stuck.is_empty() {
            let shown = stuck.len().min(5);
            parts.push(format!(
                "{} commands outstanding: {}{}",
                stuck.len(),
                stuck[..shown].join("; "),
                if stuck.len() > shown { "; ..." } else { "" }
            ));
        }
        match self.coordinator() {
            Some(c) => parts.push(format!(
                "leader: node {} (ballot {:?}, decided up to {:?})",
                c.id(),
                c.leads(),
                c.ordering_report().decided_up_to
            )),
            None => parts.push("no node leads a stream".into()),
        }
        for n in &self.nodes {
            let state = match &n.core {
                None => "down".to_string(),
                Some(core) => {
                    let mut s = core
                        .ordering()
                        .map_or_else(|| "no ordering".to_string(), |o| o.describe());
                    let drops: Vec<String> = core
                        .counters()
                        .iter()
                        .filter(|(k, _)| k.starts_with("dropped"))
                        .map(|(k, v)| format!("{k} {v}"))
                        .collect();
                    if !drops.is_empty() {
                        s += &format!("; drops: {}", drops.join(", "));
                    }
                    if let Some(r) = core.replica() {
                        s += &ds_state::<partita_dssmr::chirper::Chirper>(r);
                        s += &ds_state::<partita_dssmr::kv::KvObjects>(r);
                    }
                    if n.paused.is_some() {
                        s += ", paused";
                    }
                    s
                }
            };
            parts.push(format!("node {}: {state}", n.id));
        }
        parts.join("\n  ")
    }

    fn replica_ends(&self) -> Vec<ReplicaEnd> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|&(i, _)| self.counts_as_replica(i))
            .filter_map(|(_, n)| {
                let r = n.core.as_ref()?.replica()?;
                Some(ReplicaEnd {
                    node: n.id,
                    partition: self.layout.partition_of_replica(n.id).unwrap_or(0),
                    executed_up_to: r.last_instance(),
                    digest: r.digest(),
                    entries: r.len() as usize,
                })
            })
            .collect()
    }

    /// Everything a running node truncated is held by the durable checkpoints of a
    /// majority of the replicas (those down included: their disks keep them).
    fn durability(&self) -> Result<(), String> {
        (0..self.nodes.len()).try_for_each(|ni| self.durability_of(ni))
    }

    /// What node `ni` truncated is held by the durable checkpoints of a majority of
    /// the replicas (checked whenever a node cuts its log, and at the end).
    ///
    /// Partitioned on one stream, a replica holds only its partition's state: a
    /// majority of each partition's replicas, as the truncating node knows them
    /// (replicas join and leave partitions at run time).
    fn durability_of(&self, ni: usize) -> Result<(), String> {
        let n = &self.nodes[ni];
        let Some(core) = n.core.as_ref() else {
            return Ok(());
        };
        // (Multi-Ring Paxos: rings carry some partitions, as the whole check does.)
        let by_partition = self.layout.map.is_partitioned() && self.p.rings == 0;
        let groups: Vec<Vec<&SimNode>> = match by_partition {
            false => vec![self.nodes.iter().filter(|n| n.replica).collect()],
            true => core
                .members()
                .layout(&core.setup().membership.partitions, false)
                .replicas
                .iter()
                .map(|ids| {
                    ids.iter()
                        .filter_map(|&id| self.nodes.iter().find(|n| n.id == id))
                        .collect()
                })
                .collect(),
        };
        for replicas in groups.iter().filter(|g| !g.is_empty()) {
            let majority = replicas.len() / 2 + 1;
            let Some(o) = core.ordering() else {
                return Ok(());
            };
            let Some(t) = o.truncation() else {
                return Ok(());
            };
            let covering: Vec<NodeId> = replicas
                .iter()
                .filter(|r| {
                    // What the replica's disk holds (a node down keeps it too).
                    let Some((_, bytes)) = &r.checkpoint else {
                        return false;
                    };
                    let Ok(info) = partita_smr::verify_checkpoint(bytes) else {
                        return false;
                    };
                    let position = partita_smr::checkpoint_ordering(bytes, &info);
                    !position.is_empty() && o.covers(position, &t)
                })
                .map(|r| r.id)
                .collect();
            if covering.len() < majority {
                return Err(format!(
                    "node {} truncated what only the durable checkpoints of {covering:?} \
                     hold (a majority is {majority} of {} replicas); {}",
                    n.id,
                    replicas.len(),
                    o.describe()
                ));
            }
        }
        Ok(())
    }

    /// A geo seed's replicas' counters, for a convergence failure (what each ran).
    fn geo_counts(&self) -> Option<String> {
        self.p.geo.as_ref()?;
        let lines: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|n| {
                let core = n.core.as_ref()?;
                let executed = core.replica().map_or(0, |r| r.last_instance());
                Some(format!(
                    "node {}: executed {executed}; {}",
                    n.id,
                    core.ordering()?.describe()
                ))
            })
            .collect();
        Some(lines.join("\n"))
    }

    /// A geo seed's final contents: the first replica's tree (the replicas
    /// converged), as the clients' `u64` values.
    fn geo_final_entries(&self) -> Vec<(u64, u64)> {
        for n in &self.nodes {
            let Some(core) = n.core.as_ref() else {
                continue;
            };
            let Some(r) = core.replica() else {
                continue;
            };
            // Paper 004's tree, the B+tree, or the B+tree placed by an object map.
            if let Some(g) = partita_smr::downcast::<partita_geo::GeoService>(r) {
                return g
                    .state()
                    .tree()
                    .entries()
                    .map(|(k, v)| (k, partita_geo::map_value(v)))
                    .collect();
            }
            if let Some(t) = partita_smr::downcast::<BPlusTree>(r) {
                return t.state().query(0, u64::MAX);
            }
            if let Some(p) = partita_smr::downcast::<partita_geo::Placed<BPlusTree>>(r) {
                return p.state().inner().query(0, u64::MAX);
            }
        }
        Vec::new()
    }

    /// The key-value clients' history, as lines of the key-value format, in order of
    /// invocation.
    fn kv_history(&self) -> Vec<String> {
        self.clients
            .iter()
            .flat_map(|c| c.kv_history().iter().cloned())
            .collect()
    }

    fn history(&self) -> Vec<Event> {
        let mut events: Vec<Event> = self
            .clients
            .iter()
            .flat_map(|c| c.history().iter().cloned())
            .collect();
        events.sort_by_key(|e| (e.call_ns, e.client));
        events
    }

    // ---------------------------------------------------------------- experiment mode

    /// Run an experiment point to its end (see [`crate::bench`]). Consumes the world.
    pub fn run_bench(mut self) -> BenchReport {
        self.start();
        self.preload_servers();
        self.run_loop();
        self.finish_bench()
    }

    /// [`World::run_bench`] of an S-SMR/DS-SMR world, with the client proxies'
    /// counters and the rate of moves over time.
    pub fn run_bench_dssmr(mut self) -> (BenchReport, crate::bench::DsBenchStats) {
        self.start();
        self.run_loop();
        let duration = self.bench.as_ref().map_or(1, |b| b.duration_ns);
        let mut s = crate::bench::DsBenchStats {
            moves_per_s: vec![0.0; 10],
            ..Default::default()
        };
        let tenth = (duration / 10).max(1);
        let seconds = (duration / 1_000_000_000) as usize;
        s.moves_each_second = vec![0; seconds];
        for c in &self.clients {
            if let Some(p) = c.proxy_stats() {
                s.objects_moved += p.objects_moved;
                s.move_commands += p.move_commands;
                s.retries += p.retries;
                s.fallbacks += p.fallbacks;
                s.consults += p.consults;
                s.cache_hits += p.cache_hits;
            }
            s.ahead_of_moves += c.ahead_of_moves();
            for &t in c.move_times() {
                let i = ((t / tenth) as usize).min(9);
                s.moves_per_s[i] += 1.0;
                if let Some(n) = s.moves_each_second.get_mut((t / 1_000_000_000) as usize) {
                    *n += 1;
                }
            }
        }
        let secs = tenth as f64 / 1e9;
        for m in &mut s.moves_per_s {
            *m /= secs;
        }
        (self.finish_bench(), s)
    }

    /// The load counters now.
    fn mark(&self) -> Mark {
        let psmr = self
            .nodes
            .iter()
            .filter(|n| n.replica)
            .find_map(|n| n.core.as_ref()?.replica().map(|r| r.stats().clone()))
            .map_or([0; 4], |s| {
                [
                    s.psmr_parallel,
                    s.psmr_synchronous,
                    s.psmr_passed,
                    s.psmr_failed,
                ]
            });
        Mark {
            worker_busy_ns: self
                .nodes
                .iter()
                .map(|n| n.worker_busy_ns.iter().sum())
                .collect(),
            psmr,
            busy_ns: self.nodes.iter().map(|n| n.busy_ns).collect(),
            egress_ns: self
                .nodes
                .iter()
                .map(|n| self.net.egress_busy_ns[self.net.card(Endpoint::Node(n.id))])
                .collect(),
            syncs: self.nodes.iter().map(|n| n.disk.syncs).collect(),
            decided: self
                .coordinator()
                .and_then(|c| c.ordering_report().decided_up_to)
                .unwrap_or(0),
        }
    }

    fn finish_bench(mut self) -> BenchReport {
        let b = self.bench.take().expect("experiment mode");
        let (lo, hi) = b.window;
        let mut lat: Vec<u64> = Vec::new();
        let (mut commands, mut ops) = (0u64, 0u64);
        // opt-PSMR: latency of the commands resubmitted after a failed safety check,
        // and of the others.
        let (mut failed_ns, mut failed_n, mut passed_ns) = (0u128, 0u64, 0u128);
        let mut by_region: BTreeMap<Arc<str>, (u32, Vec<u64>)> = BTreeMap::new();
        for (i, c) in self.clients.iter().enumerate() {
            let mut region = self.client_regions.get(i).cloned().flatten().map(|r| {
                let e = by_region.entry(r).or_default();
                e.0 += 1;
                e
            });
            for s in c.samples() {
                if s.call_ns >= lo && s.ret_ns <= hi {
                    commands += 1;
                    ops += s.ops as u64;
                    lat.push(s.ret_ns - s.call_ns);
                    if let Some((_, l)) = region.as_mut() {
                        l.push(s.ret_ns - s.call_ns);
                    }
                    if s.psmr_resubmitted {
                        failed_n += 1;
                        failed_ns += u128::from(s.ret_ns - s.call_ns);
                    } else {
                        passed_ns += u128::from(s.ret_ns - s.call_ns);
                    }
                }
            }
        }
        lat.sort_unstable();
        let measured_s = (hi - lo) as f64 / 1e9;
        let ms = |ns: u64| ns as f64 / 1e6;
        let mean_ms = |l: &[u64]| {
            if l.is_empty() {
                0.0
            } else {
                l.iter().map(|&x| x as f64).sum::<f64>() / l.len() as f64 / 1e6
            }
        };
        let regions = by_region
            .into_iter()
            .map(|(region, (clients, mut l))| {
                l.sort_unstable();
                crate::bench::RegionLatency {
                    region: region.to_string(),
                    clients,
                    commands: l.len() as u64,
                    throughput_cmds_per_s: l.len() as f64 / measured_s.max(1e-9),
                    latency_ms_mean: mean_ms(&l),
                    latency_ms_p50: ms(bm::percentile(&l, 0.5)),
                    latency_ms_p95: ms(bm::percentile(&l, 0.95)),
                }
            })
            .collect();
        let window = (hi - lo).max(1) as f64;
        let (first, last) = match (b.marks.first(), b.marks.get(1)) {
            (Some(a), Some(z)) => (a.clone(), z.clone()),
            _ => {
                let m = self.mark();
                (m.clone(), m)
            }
        };
        let nodes: Vec<NodeLoad> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| NodeLoad {
                node: n.id,
                role: if n.server {
                    "server"
                } else if n.coordinator {
                    "coordinator"
                } else if n.acceptor {
                    "acceptor"
                } else if n.replica {
                    "replica"
                } else {
                    "batcher"
                }
                .to_string(),
                cpu: (last.busy_ns[i] - first.busy_ns[i]) as f64 / window,
                nic_out: (last.egress_ns[i] - first.egress_ns[i]) as f64 / window,
                fsyncs: last.syncs[i] - first.syncs[i],
            })
            .collect();
        let instances = last.decided.saturating_sub(first.decided);
        let server = self.nodes.iter().any(|n| n.server);
        let threads = self
            .nodes
            .iter()
            .filter_map(|n| n.core.as_ref())
            .map(|c| c.worker_threads())
            .max()
            .unwrap_or(0);
        let psmr = (threads > 0).then(|| {
            let d = |i: usize| last.psmr[i].saturating_sub(first.psmr[i]);
            let replicas: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].replica)
                .collect();
            let worker_cpu = replicas
                .iter()
                .map(|&i| (last.worker_busy_ns[i] - first.worker_busy_ns[i]) as f64 / window)
                .sum::<f64>()
                / replicas.len().max(1) as f64;
            let mean_ms = |ns: u128, n: u64| {
                if n == 0 {
                    0.0
                } else {
                    ns as f64 / n as f64 / 1e6
                }
            };
            crate::bench::PsmrLoad {
                threads,
                parallel: d(0),
                synchronous: d(1),
                passed: d(2),
                failed: d(3),
                worker_cpu,
                latency_ms_failed: mean_ms(failed_ns, failed_n),
                latency_ms_passed: mean_ms(passed_ns, commands - failed_n),
                commands_failed: failed_n,
            }
        });
        BenchReport {
            mode: if server { "cs" } else { "smr" }.into(),
            protocol: if server {
                "none (client-server)".into()
            } else {
                self.p.protocol.to_string()
            },
            workload: b.workload,
            clients: self.clients.len() as u32,
            think_ms: b.think_ms,
            preload: b.preload,
            acceptors: self.nodes.iter().filter(|n| n.acceptor).count(),
            replicas: self.nodes.iter().filter(|n| n.replica).count(),
            batch_bytes_max: self.p.batch_bytes_max,
            window_instances_max: self.p.window_instances_max,
            fsync: b.fsync,
            duration_s: b.duration_ns as f64 / 1e9,
            measured_s,
            commands,
            ops,
            throughput_cmds_per_s: commands as f64 / measured_s.max(1e-9),
            throughput_ops_per_s: ops as f64 / measured_s.max(1e-9),
            latency_ms_p50: ms(bm::percentile(&lat, 0.5)),
            latency_ms_p90: ms(bm::percentile(&lat, 0.9)),
            latency_ms_p99: ms(bm::percentile(&lat, 0.99)),
            latency_ms_max: ms(lat.last().copied().unwrap_or(0)),
            latency_ms_mean: mean_ms(&lat),
            regions,
            resubmissions: self.clients.iter().map(|c| c.stats().resubmissions).sum(),
            instances,
            commands_per_instance: if instances > 0 {
                commands as f64 / instances as f64
            } else {
                0.0
            },
            nodes,
            psmr,
            wan: self.wan.clone(),
            events: self.trace.events(),
            trace_hash: self.trace.hash(),
            virtual_ns: self.q.now(),
            failure: self
                .failure
                .take()
                .map(|f| format!("{}: {}", f.check, f.message)),
        }
    }

    /// The checks of an S-SMR/DS-SMR Chirper seed once the run is over: what the
    /// clients saw go wrong, where the users are (one partition each, the oracle's map
    /// right), and the history, with a read of every timeline of the final state,
    /// judged by the checker's Chirper model. Returns (operations, ok, info) and the
    /// history judged.
    fn check_dssmr(&mut self) -> ((u64, u64, u64), Vec<partita_checker::chirper::ChirperEvent>) {
        use partita_dssmr::chirper::Chirper;
        let mut events: Vec<partita_checker::chirper::ChirperEvent> = self
            .clients
            .iter()
            .flat_map(|c| c.ds_history().iter().cloned())
            .collect();
        events.sort_by_key(|e| (e.invoked, e.client));
        let ok = events.iter().filter(|e| e.result.is_some()).count() as u64;
        let mut counts = (events.len() as u64, ok, events.len() as u64 - ok);
        if self.p.service == "kv" {
            let kv: Vec<bool> = self
                .clients
                .iter()
                .flat_map(|c| c.ds_kv_events().iter().map(|e| e.reply.is_some()))
                .collect();
            let ok = kv.iter().filter(|k| **k).count() as u64;
            counts = (kv.len() as u64, ok, kv.len() as u64 - ok);
        }
        let mut totals = partita_dssmr::client::ProxyStats::default();
        for s in self.clients.iter().filter_map(|c| c.proxy_stats()) {
            totals += s;
        }
        for (k, v) in [
            ("ds_consults", totals.consults),
            ("ds_cache_hits", totals.cache_hits),
            ("ds_move_commands", totals.move_commands),
            ("ds_objects_moved", totals.objects_moved),
            ("ds_retries", totals.retries),
            ("ds_fallbacks", totals.fallbacks),
        ] {
            self.counters.insert(k, v);
        }
        if self.failure.is_some() {
            return (counts, events);
        }
        if let Some((c, f)) = self
            .clients
            .iter()
            .find_map(|c| c.ds_failures().first().map(|f| (c.index, f.clone())))
        {
            self.fail(Check::Invariants, format!("client {c}: {f}"));
            return (counts, events);
        }
        if self.p.service == "kv" {
            self.check_ds_kv();
            return (counts, events);
        }
        let (data, oracle) = self.ds_servers::<Chirper>();
        let d = self.p.dssmr.as_ref().expect("an S-SMR/DS-SMR seed");
        let placement = crate::ds::check_placement(&data, oracle, d.static_map, data.len());
        let graph = partita_dssmr::chirper::Graph::generate(
            &self.p.dssmr.as_ref().expect("a Chirper seed").graph,
        );
        let finals = crate::ds::final_reads(
            &data,
            &crate::ds::universe(&graph),
            u64::MAX / 2,
            self.q.now() + 1,
        );
        if let Err(m) = placement {
            self.fail(Check::FinalState, m);
            return (counts, events);
        }
        events.extend(finals);
        let opts = partita_checker::chirper::ChirperCheckOptions {
            max_configurations: self.check_max_states,
        };
        use partita_checker::chirper::ChirperCheckError as E;
        match partita_checker::chirper::check_chirper(
            &events,
            &crate::ds::initial_of(&graph),
            &opts,
        ) {
            Ok(s) => {
                self.counters
                    .insert("chirper_check_configurations", s.configurations);
            }
            Err(E::Violation(v)) => self.fail(Check::Linearizability, v.to_string()),
            Err(E::Unknown(u)) => self.fail(Check::Inconclusive, u.to_string()),
            Err(E::Malformed(m)) => self.fail(
                Check::Simulator,
                format!("the simulator recorded an invalid Chirper history: {m}"),
            ),
        }
        (counts, events)
    }

    /// One server per member of an S-SMR/DS-SMR seed running `S`, each from the
    /// replica that executed most (they converged): the data partitions in order,
    /// and the oracle's.
    #[allow(clippy::type_complexity)]
    fn ds_servers<S: partita_dssmr::ObjectService>(
        &self,
    ) -> (
        Vec<(u16, &partita_dssmr::server::Server<S>)>,
        Option<&partita_dssmr::server::Server<S>>,
    ) {
        use partita_dssmr::replica::DsReplica;
        use partita_dssmr::Member;
        let mut best: BTreeMap<u32, (u64, usize)> = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate().filter(|(_, n)| n.replica) {
            let Some(r) = n.core.as_ref().and_then(|c| c.replica()) else {
                continue;
            };
            let p = self.layout.partition_of_replica(n.id).unwrap_or(0);
            let e = best.entry(p).or_insert((r.last_instance(), i));
            if r.last_instance() > e.0 {
                *e = (r.last_instance(), i);
            }
        }
        let mut data = Vec::new();
        let mut oracle = None;
        for (_, i) in best.values() {
            let r = self.nodes[*i]
                .core
                .as_ref()
                .and_then(|c| c.replica())
                .expect("a replica");
            let r = r
                .as_any()
                .downcast_ref::<DsReplica<S>>()
                .expect("the seed's service on S-SMR/DS-SMR replicas");
            match r.server().member() {
                Member::Partition(p) => data.push((p, r.server())),
                Member::Oracle => oracle = Some(r.server()),
            }
        }
        data.sort_by_key(|(p, _)| *p);
        (data, oracle)
    }

    /// The key-value store on S-SMR/DS-SMR (`check_dssmr` did the clients' part): where
    /// the keys are (one partition each, the oracle's map right), and the history,
    /// with a read of every key of the final state, judged by the key-value checker
    /// (revisions renumbered: see [`crate::ds::kv_lines`]).
    fn check_ds_kv(&mut self) {
        use partita_dssmr::kv::KvObjects;
        let d = self.p.dssmr.as_ref().expect("an S-SMR/DS-SMR seed");
        let static_map = d.static_map;
        let (data, oracle) = self.ds_servers::<KvObjects>();
        let placement = crate::ds::check_placement(&data, oracle, static_map, data.len());
        let keys: Vec<partita_kv::KeyValue> = {
            let mut k: Vec<_> = data
                .iter()
                .flat_map(|(_, s)| s.objects().values().flat_map(|o| o.keys.iter().cloned()))
                .collect();
            k.sort_by(|a, b| a.key.cmp(&b.key));
            k
        };
        if let Err(m) = placement {
            self.fail(Check::FinalState, m);
            return;
        }
        let mut events: Vec<crate::ds::KvEvent> = self
            .clients
            .iter()
            .flat_map(|c| c.ds_kv_events().iter().cloned())
            .collect();
        events.sort_by_key(|e| (e.invoked, e.client));
        let lines = match crate::ds::kv_lines(&events, keys, self.q.now() + 1) {
            Ok(l) => l,
            Err(m) => {
                self.fail(Check::Linearizability, m);
                return;
            }
        };
        match check::kv_history(&lines, self.check_max_states) {
            Ok(s) => {
                self.counters.insert("kv_checked_ops", s.events as u64);
                self.counters.insert("kv_checked_writes", s.writes as u64);
            }
            Err((c, m)) => self.fail(c, m),
        }
    }

    fn finish(mut self) -> SeedReport {
        let replicas = self.replica_ends();
        let history = self.history();
        let mut check_summary = None;
        if self.failure.is_none() {
            if let Some(c) = self.clients.iter().find(|c| c.stats().merge_errors > 0) {
                let m = format!(
                    "client {} received sub-results of a partitioned command that do not merge ({} times)",
                    c.index,
                    c.stats().merge_errors
                );
                self.fail(Check::Simulator, m);
            }
        }
        if self.failure.is_none() {
            if let Err(m) = self.durability() {
                self.fail(Check::Durability, m);
            }
        }
        if self.failure.is_none() {
            if let Err(m) = check::convergence(&replicas) {
                let m = match self.geo_counts() {
                    // The orderings' executed counts are counts, not instances.
                    Some(counts) => format!(
                        "{}\n{counts}",
                        m.replace(
                            "replicas executed different prefixes",
                            "replicas executed different numbers of commands",
                        )
                        .replace(" up to ", " ")
                    ),
                    None => m,
                };
                self.fail(Check::Convergence, m);
            }
        }
        if self.failure.is_none() {
            if let Err(m) = self.members_agree() {
                self.fail(Check::Convergence, m);
            }
        }
        let mut ds_ops = None;
        let mut ds_history = Vec::new();
        let kv_history = self.kv_history();
        if self.p.dssmr.is_some() {
            let (counts, events) = self.check_dssmr();
            ds_ops = Some(counts);
            ds_history = events;
        } else if self.p.service == "kv" {
            if self.failure.is_none() {
                match check::kv_history(&kv_history, self.check_max_states) {
                    Ok(s) => {
                        self.counters.insert("kv_checked_ops", s.events as u64);
                        self.counters.insert("kv_checked_writes", s.writes as u64);
                    }
                    Err((c, m)) => self.fail(c, m),
                }
            }
        } else if let (Some(g), None) = (&self.p.geo, &self.failure) {
            // The tree every replica started from: keys 0..K, each its own value.
            let initial = partita_checker::Initial::Preload {
                count: g.keys,
                stride: 1,
            };
            let final_entries = self.geo_final_entries();
            match check::history(&history, initial, &final_entries, self.check_max_states) {
                Ok(s) => check_summary = Some(s),
                Err((c, m)) => self.fail(c, m),
            }
        } else if self.failure.is_none() {
            // One replica of each partition (partitions hold disjoint key ranges, in
            // order): together, the service's contents.
            let mut seen = Vec::new();
            let mut final_entries = Vec::new();
            for n in self.nodes.iter().filter(|n| n.replica) {
                let p = self.layout.partition_of_replica(n.id).unwrap_or(0);
                if seen.contains(&p) {
                    continue;
                }
                if let Some(r) = n.core.as_ref().and_then(|c| c.replica()) {
                    seen.push(p);
                    let tree = partita_smr::downcast::<BPlusTree>(r)
                        .expect("the simulator runs the B+tree")
                        .state();
                    final_entries.push((p, tree.query(0, u64::MAX)));
                }
            }
            final_entries.sort_by_key(|(p, _)| *p);
            let final_entries: Vec<(u64, u64)> =
                final_entries.into_iter().flat_map(|(_, e)| e).collect();
            match check::history(
                &history,
                partita_checker::Initial::Empty,
                &final_entries,
                self.check_max_states,
            ) {
                Ok(s) => check_summary = Some(s),
                Err((c, m)) => self.fail(c, m),
            }
        }
        let mut counters: BTreeMap<String, u64> = self
            .counters
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        let syncs: u64 = self.nodes.iter().map(|n| n.disk.syncs).sum();
        let stalls: u64 = self.nodes.iter().map(|n| n.disk.stalls).sum();
        counters.insert("fsyncs".into(), syncs);
        counters.insert("fsync_stalls".into(), stalls);
        let truncated: u64 = self.nodes.iter().map(|n| n.disk.truncated).sum();
        counters.insert("log_records_truncated".into(), truncated);
        let confirmed = self.clients.iter().map(|c| c.stats().confirmed).sum();
        counters.insert("ops_confirmed_early".into(), confirmed);
        // Batchers (the running incarnations: a restart starts a batcher over).
        for n in &self.nodes {
            let Some(c) = n.core.as_ref() else {
                continue;
            };
            for (k, v) in c.ordering_report().role_counters {
                let summed = k.starts_with("batcher_")
                    && !k.starts_with("batcher_dropped_")
                    && k != "batcher_mean_batch_commands_x100"
                    && k != "batcher_buffered";
                if summed {
                    *counters.entry(k).or_default() += v;
                }
            }
        }
        // P-SMR: commands run by one worker thread alone and with every thread
        // stopped, summed over the replicas' running incarnations.
        if self.p.psmr_threads > 0 {
            for r in self.nodes.iter().filter_map(|n| n.core.as_ref()?.replica()) {
                let st = r.stats();
                *counters.entry("psmr_parallel".into()).or_default() += st.psmr_parallel;
                *counters.entry("psmr_synchronous".into()).or_default() += st.psmr_synchronous;
            }
        }
        // GeoPaxos+ and EPaxos: the orderings' counters (EPaxos's recoveries and
        // GeoPaxos+'s leads taken back home among them), summed over the nodes'
        // running incarnations (a restart starts them over).
        if self.p.geo.is_some() {
            for n in &self.nodes {
                let Some(core) = n.core.as_ref() else {
                    continue;
                };
                for (k, v) in core.counters() {
                    if k.starts_with("geo_") || k.starts_with("epaxos_") || k == "leader_reclaims" {
                        *counters.entry(k.to_string()).or_default() += v;
                    }
                }
                // What the replicas decided of GeoPaxos+'s placement, and the copies
                // of writes the session table answered.
                if let Some(r) = core.replica() {
                    let st = r.stats();
                    for (k, v) in [
                        ("geo_resubmit_decisions", st.resubmit_decisions),
                        ("geo_resubmitted", st.resubmitted),
                        ("geo_executed_multi", st.executed_multi),
                        ("geo_dops_executed", st.reconfigurations),
                        ("geo_deduplicated", st.duplicates_answered),
                    ] {
                        *counters.entry(k.to_string()).or_default() += v;
                    }
                }
            }
        }
        let resubmissions = self.clients.iter().map(|c| c.stats().resubmissions).sum();
        SeedReport {
            seed: self.p.seed,
            passed: self.failure.is_none(),
            failure: self.failure,
            virtual_ns: self.q.now(),
            healed_at_ns: self.healed_at,
            finished_at_ns: self.finished_at,
            events: self.trace.events(),
            trace_hash: self.trace.hash(),
            ops_invoked: ds_ops.map_or(0, |(all, _, _)| all)
                + history.len() as u64
                + kv_history.len() as u64
                + self
                    .clients
                    .iter()
                    .filter(|c| c.outstanding().is_some())
                    .count() as u64,
            ops_ok: ds_ops.map_or(0, |(_, ok, _)| ok)
                + kv_with_status(&kv_history, "ok")
                + history
                    .iter()
                    .filter(|e| e.status == partita_checker::Status::Ok)
                    .count() as u64,
            ops_info: ds_ops.map_or(0, |(_, _, info)| info)
                + kv_with_status(&kv_history, "info")
                + history
                    .iter()
                    .filter(|e| e.status == partita_checker::Status::Info)
                    .count() as u64,
            resubmissions,
            instances_decided: self.agreement.instances() as u64,
            replicas,
            check: check_summary,
            counters,
            params: self.p,
            history: Vec::new(),
            ds_history,
            kv_history,
        }
        .with_history(history)
    }
}

/// Lines of a key-value history (`partita_kv::history::event_line`'s, which writes
/// `"status"` exactly so) that ended with `status`.
fn kv_with_status(lines: &[String], status: &str) -> u64 {
    let field = format!("\"status\":\"{status}\"");
    lines.iter().filter(|l| l.contains(&field)).count() as u64
}

/// What an S-SMR/DS-SMR replica of service `S` is doing, for liveness reports (empty
/// for any other replica).
fn ds_state<S: partita_dssmr::ObjectService>(r: &dyn partita_smr::Replica) -> String {
    let Some(d) = r
        .as_any()
        .downcast_ref::<partita_dssmr::replica::DsReplica<S>>()
    else {
        return String::new();
    };
    format!(
        "; {:?} executed up to {}, {} waiting, head {:?}, missing {:?}, {:?}",
        d.server().member(),
        partita_smr::Replica::last_instance(d),
        d.server().waiting(),
        d.server().blocked_on(),
        d.server().missing(),
        d.counters()
    )
}
