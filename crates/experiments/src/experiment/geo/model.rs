//! The discrete-event, virtual-time model of one point: N replicas in their regions,
//! closed-loop clients at every replica, the emulated network (one-way delay = RTT / 2
//! between regions, `lan_one_way_ns` inside one), a CPU per replica
//! ([`super::cpu::Cpu`]) charged from a calibrated table ([`Costs`]), and the REAL
//! protocol cores on top:
//!
//! - **GeoPaxos+, GeoPaxos, Multi-Paxos**: one [`GeoReplica`] per replica (psite, the
//!   timestamp merge of the serializers' logs, the delivery decision, resubmission,
//!   execution on the geo B+tree). They differ only in the tree's initial serializers
//!   (see [`System`]). Replica g hosts serializer g's leader. Each serializer is a
//!   Paxos group of three acceptors (the leader's replica and two others; with three
//!   replicas, one per region, as §VI-A deploys them) **modelled, not run**: the leader
//!   appends the entry to the serializer's decided log at once (with its Lamport hint,
//!   [`GeoReplica::hint`]), sends a Phase 2a to the two other acceptors, and the entry
//!   is decided when the first Phase 2b comes back (a majority with its own vote): a
//!   round trip to its nearest acceptor plus the CPU each hop costs. The leader then
//!   sends the decision to every replica, which learns each log in order on a learner
//!   thread of its own (one per serializer, as §V describes).
//! - **EPaxos**: one real [`Epaxos`] core per replica (PreAccept, fast and slow paths,
//!   dependencies, recovery timers, SCC execution), its messages carried by the model's
//!   network with the same delays; every write it asks for is durable at once (no disk
//!   is modelled, for any system); the commands it executes run on a geo B+tree copy
//!   of the replica (the same code the GeoPaxos family executes on).
//!
//! Nothing is lost, duplicated or crashed: this is a performance model. Correctness is
//! still judged at the end of every point: every replica's tree digest must be equal,
//! and when a history is recorded it can be checked for linearizability.

use super::cpu::Cpu;
use super::workload::{KeyGen, WorkloadSpec};
use partita_btree::{Op as MapOp, OpResult};
use partita_checker::{Event as HEvent, Status};
use partita_consensus::epaxos::{
    Epaxos, EpaxosAction, EpaxosBugs, EpaxosCommand, EpaxosConfig, EpaxosMsg, KeyAccess,
};
use partita_consensus::geopaxos::{Entry, SerializerId};
use partita_geo::replica::{GeoAction, GeoBugs, GeoReplica, GeoValue, OpId};
use partita_geo::{GeoBTree, Op, Reply, Topology};
use partita_types::{Command, NodeId, Payload};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::time::Instant;

/// The bytes of every written value (§VI-A: "100-byte objects").
pub const VALUE_BYTES: usize = 100;

/// A value of [`VALUE_BYTES`] bytes carrying `v` in its first 8.
pub fn value_of(v: u64) -> Vec<u8> {
    let mut b = vec![0u8; VALUE_BYTES];
    b[..8].copy_from_slice(&v.to_le_bytes());
    b
}

pub fn u64_of(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("values hold at least 8 bytes"))
}

/// The replication protocols compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum System {
    /// GeoPaxos+ after the optimizer (DBT_a): serializers from a DOP over a warm-up
    /// window of the point's own workload.
    GeoPaxosPlus,
    /// GeoPaxos+ before it (DBT_b): every node's serializers drawn uniformly among the
    /// 2^N − 1 configurations.
    GeoPaxosPlusBefore,
    /// GeoPaxos: one serializer per node, drawn uniformly, and no optimizer.
    GeoPaxos,
    /// Multi-Paxos: every node serialized by the one serializer of replica `leader`. A
    /// single Paxos log's timestamp order is its log order (timestamps grow along a
    /// log), so the merge executes the log in order: Multi-Paxos with its leader there.
    MultiPaxos { leader: usize },
    /// EPaxos, the real core.
    Epaxos,
}

impl System {
    pub fn label(self) -> &'static str {
        match self {
            System::GeoPaxosPlus => "GeoPaxos+ DBT_a",
            System::GeoPaxosPlusBefore => "GeoPaxos+ DBT_b",
            System::GeoPaxos => "GeoPaxos",
            System::MultiPaxos { .. } => "Multi-Paxos",
            System::Epaxos => "EPaxos",
        }
    }

    pub fn is_geo(self) -> bool {
        !matches!(self, System::Epaxos)
    }
}

/// CPU service times, in ns. The socket and Paxos-acceptor costs come from this
/// machine's `partita calibrate` table; the protocol cores' costs are timed here
/// ([`super::calibrate`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Costs {
    /// Taking one message or request off a connection.
    pub recv_ns: u64,
    /// Handing one message to the network.
    pub send_ns: u64,
    /// Sending one reply to a client.
    pub reply_ns: u64,
    /// An acceptor's Phase 2a, and the leader's handling of a Phase 2b (Multi-Paxos
    /// cores, measured by `partita calibrate`); a serializer leader's proposal is
    /// charged one Phase 2a too.
    pub phase2a_ns: u64,
    pub phase2b_ns: u64,
    /// `GeoReplica::submit` (psite and the serialization requests).
    pub geo_submit_ns: u64,
    /// `GeoReplica::on_decided` per entry, besides the executions it releases.
    pub geo_entry_ns: u64,
    /// One B+tree operation executed (`GeoBTree::execute`: READ or INSERT of 100
    /// bytes, the mean of the two), in `on_decided` and in EPaxos's executor.
    pub exec_ns: u64,
    /// The DOP, per node of the tree.
    pub dop_node_ns: u64,
    /// EPaxos handlers: `propose`, `on_message` by message kind, `on_persisted`,
    /// `on_tick` (each including the execution ordering it triggers: the SCCs).
    pub ep_propose_ns: u64,
    pub ep_message_ns: BTreeMap<String, u64>,
    pub ep_persisted_ns: u64,
    pub ep_tick_ns: u64,
}

impl Costs {
    fn ep_message(&self, kind: &str) -> u64 {
        self.ep_message_ns
            .get(kind)
            .or_else(|| self.ep_message_ns.get("other"))
            .copied()
            .unwrap_or(500)
    }
}

/// The name of an `on_message` call by message kind, for the report.
fn ep_call(kind: &str) -> &'static str {
    match kind {
        "preaccept" => "epaxos.on_message(preaccept)",
        "preacceptok" => "epaxos.on_message(preacceptok)",
        "accept" => "epaxos.on_message(accept)",
        "acceptok" => "epaxos.on_message(acceptok)",
        "commit" => "epaxos.on_message(commit)",
        _ => "epaxos.on_message(other)",
    }
}

/// The kind of an EPaxos message, as the cost table names it.
pub fn ep_kind(m: &EpaxosMsg) -> &'static str {
    match m {
        EpaxosMsg::PreAccept { .. } => "preaccept",
        EpaxosMsg::PreAcceptOk { .. } => "preacceptok",
        EpaxosMsg::Accept { .. } => "accept",
        EpaxosMsg::AcceptOk { .. } => "acceptok",
        EpaxosMsg::Commit { .. } => "commit",
        EpaxosMsg::Prepare { .. } => "prepare",
        EpaxosMsg::PrepareOk { .. } => "prepareok",
        EpaxosMsg::Nack { .. } => "nack",
        EpaxosMsg::CommitRequest { .. } => "commitrequest",
        EpaxosMsg::Heartbeat { .. } => "heartbeat",
        EpaxosMsg::Truncated { .. } => "truncated",
    }
}

/// Where a handler's core CPU time comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum CostMode {
    /// The calibrated table's constants ([`Costs`]): deterministic, but blind to costs
    /// that grow with the cores' state (the merge's pending operations, EPaxos's
    /// dependency graph).
    Table,
    /// The real core call's own CPU time, measured around every call with the thread's
    /// CPU clock (`CLOCK_THREAD_CPUTIME_ID`, so that time the thread spends preempted
    /// by other work on this machine is not counted); the socket and Paxos-acceptor
    /// costs still come from the table. A core whose work grows with contention then
    /// saturates the model's CPU as it would a real one. Not bit-for-bit reproducible.
    Measured,
}

/// This thread's CPU time in ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID is available on Linux");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `(value, ns)`: the expression's thread CPU time when measuring, else `table`.
macro_rules! timed {
    ($mode:expr, $table:expr, $e:expr) => {{
        if $mode == CostMode::Measured {
            let t0 = thread_cpu_ns();
            let v = $e;
            (v, thread_cpu_ns().saturating_sub(t0))
        } else {
            ($e, $table)
        }
    }};
}

/// Planted bugs (tests only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bugs {
    pub geo: GeoBugs,
    pub epaxos: EpaxosBugs,
}

/// Everything one point needs.
#[derive(Clone)]
pub struct PointSpec {
    pub system: System,
    pub topology: Topology,
    /// One-way delay between a client and its replica, and inside a region.
    pub lan_one_way_ns: u64,
    /// Cores per replica, and worker threads (taking client requests) per replica.
    pub cores: u32,
    pub workers: u32,
    pub clients: usize,
    pub workload: WorkloadSpec,
    /// Every replica starts from this tree (already preloaded and configured).
    pub tree: GeoBTree,
    /// Clients start within `start_spread_ns`; the measured window is
    /// `[warmup_ns, warmup_ns + measure_ns)`; clients stop issuing at its end.
    pub start_spread_ns: u64,
    pub warmup_ns: u64,
    pub measure_ns: u64,
    /// After the window: finish what is in flight (at most `drain_max_ns` more) and
    /// compare the replicas' digests, or stop at the window's end.
    pub drain: bool,
    pub drain_max_ns: u64,
    /// GeoPaxos: how often serializer leaders check for a wanted clock entry. EPaxos:
    /// the tick of its timers.
    pub geo_tick_ns: u64,
    pub ep_tick_ns: u64,
    /// GeoPaxos+: a DOP submitted by replica 0 this often (None: no DOP in the run).
    pub dop_every_ns: Option<u64>,
    pub costs: Costs,
    pub cost_mode: CostMode,
    pub seed: u64,
    pub record_history: bool,
    pub bugs: Bugs,
}

/// Latency of one region's clients.
#[derive(Clone, Debug, Serialize)]
pub struct RegionLatency {
    pub region: String,
    pub ops: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
}

/// What one point measured.
#[derive(Clone, Debug, Serialize)]
pub struct PointResult {
    /// Requests answered inside the window, and per second.
    pub ops: u64,
    pub throughput_ops_per_s: f64,
    pub latency_ms_mean: f64,
    pub latency_ms_p95: f64,
    pub regions: Vec<RegionLatency>,
    /// Per replica: core time used / (cores × window), and its busiest thread with the
    /// share of the window it was busy (a learner, the EPaxos core, ... at 1.0 is the
    /// bottleneck).
    pub cpu_utilization: Vec<f64>,
    pub busiest_thread: Vec<(String, f64)>,
    /// Every replica's tree digest equal after the drain (None: not drained, not
    /// compared).
    pub digests_equal: Option<bool>,
    /// Everything in flight finished within `drain_max_ns` after the window (None: the
    /// point stopped at the window's end).
    pub drained: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub geo: Option<GeoCounters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epaxos: Option<EpCounters>,
    /// The core calls of the run, by kind: how many, and the mean CPU time charged
    /// for one (measured, or the table's).
    pub core_calls: BTreeMap<String, CoreCalls>,
    /// Virtual time at which the run ended (the window's end plus the drain).
    pub end_ms: f64,
    pub events: u64,
    pub wall_s: f64,
}

/// Calls of one kind into a core.
#[derive(Clone, Debug, Serialize)]
pub struct CoreCalls {
    pub calls: u64,
    pub mean_ns: f64,
}

/// GeoPaxos family counters (replica 0's, equal everywhere for the decisions).
#[derive(Clone, Debug, Serialize)]
pub struct GeoCounters {
    pub executed: u64,
    pub executed_multi_serializer: u64,
    pub resubmit_decisions: u64,
    pub dops: u64,
    pub op_entries: u64,
    pub clock_entries: u64,
}

/// EPaxos counters, summed over the replicas.
#[derive(Clone, Debug, Serialize)]
pub struct EpCounters {
    pub proposed: u64,
    pub fast_commits: u64,
    pub slow_commits: u64,
    pub recoveries_started: u64,
    pub commit_requests_sent: u64,
    /// Slow commits / (fast + slow).
    pub slow_path_share: f64,
}

/// A point's result, its history (if recorded) and every replica's digest.
pub struct Outcome {
    pub result: PointResult,
    pub history: Vec<HEvent>,
    pub digests: Vec<u64>,
}

// ------------------------------------------------------------------ events and work

/// Work a replica's thread does.
enum Work {
    /// A client's request reaches its replica (worker pool).
    Request { client: usize, no: u64, op: Op },
    /// GeoPaxos: serializer `g`'s leader orders an entry (`remote`: it came over the
    /// network).
    Serialize {
        g: usize,
        remote: bool,
        entry: Entry<OpId, GeoValue>,
    },
    /// GeoPaxos: an acceptor of serializer `g` votes for `position`.
    Phase2a { g: usize, position: u64 },
    /// GeoPaxos: serializer `g`'s leader receives a vote for `position`.
    Phase2b { g: usize, position: u64 },
    /// GeoPaxos: the replica learns serializer `g`'s decided `position`.
    Learn {
        g: usize,
        position: u64,
        remote: bool,
    },
    /// EPaxos: the core proposes a client's command.
    Propose { client: usize, no: u64, op: Op },
    /// EPaxos: a message from replica `from`.
    Message { from: usize, msg: EpaxosMsg },
    /// EPaxos: a timer tick.
    Tick,
    /// EPaxos: execute a committed command (None: a no-op).
    Execute { command: Option<EpaxosCommand> },
}

/// What a finished handler releases.
enum Effect {
    /// A message to replica `to` (after the network's delay from `from`).
    Net { from: usize, to: usize, work: Work },
    /// Work handed to another thread of the same replica.
    Local { to: usize, work: Work },
    Reply {
        client: usize,
        no: u64,
        reply: Reply,
    },
}

enum Ev {
    Issue {
        client: usize,
    },
    Arrive {
        replica: usize,
        work: Work,
    },
    Done {
        replica: usize,
        thread: usize,
        effects: Vec<Effect>,
    },
    ClientReply {
        client: usize,
        no: u64,
        reply: Reply,
    },
    GeoTick,
    EpTick,
    Dop,
}

struct Sched {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Sched {
    fn eq(&self, o: &Sched) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Sched {}
impl PartialOrd for Sched {
    fn partial_cmp(&self, o: &Sched) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Sched {
    fn cmp(&self, o: &Sched) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

struct Outstanding {
    no: u64,
    hop: MapOp,
    call_ns: u64,
}

struct Client {
    home: usize,
    issued: u64,
    outstanding: Option<Outstanding>,
}

/// A serializer's decided log, truncated once every replica learned a prefix.
struct Log {
    base: u64,
    entries: VecDeque<(Entry<OpId, GeoValue>, u8)>,
}

impl Log {
    fn len(&self) -> u64 {
        self.base + self.entries.len() as u64
    }
    fn get(&self, p: u64) -> &(Entry<OpId, GeoValue>, u8) {
        &self.entries[(p - self.base) as usize]
    }
    fn get_mut(&mut self, p: u64) -> &mut (Entry<OpId, GeoValue>, u8) {
        &mut self.entries[(p - self.base) as usize]
    }
}

struct GeoNodes {
    replicas: Vec<GeoReplica>,
    logs: Vec<Log>,
    /// Per serializer: its two other acceptors.
    acceptors: Vec<[usize; 2]>,
    /// Per (replica, serializer): the next position to learn and what came early.
    learned: Vec<Vec<u64>>,
    early: Vec<Vec<BTreeSet<u64>>>,
    clock_in_flight: Vec<bool>,
    /// Thread indices: paxos[g], learner[g].
    paxos_thread: Vec<usize>,
    learner_thread: Vec<usize>,
}

struct EpNodes {
    cores: Vec<Epaxos>,
    trees: Vec<GeoBTree>,
    core_thread: usize,
    exec_thread: usize,
}

enum Nodes {
    Geo(GeoNodes),
    Ep(EpNodes),
}

const WORKER: usize = 0;

struct World {
    spec: PointSpec,
    n: usize,
    now: u64,
    seq: u64,
    heap: BinaryHeap<Reverse<Sched>>,
    /// Events in the heap other than the periodic ticks and DOPs.
    in_flight: u64,
    rng: StdRng,
    keygen: KeyGen,
    clients: Vec<Client>,
    cpus: Vec<Cpu<Work>>,
    nodes: Nodes,
    latencies_us: Vec<Vec<u32>>,
    window_ops: u64,
    history: Vec<HEvent>,
    events: u64,
    end_issue: u64,
    ticking: bool,
    /// Per call kind: calls and CPU ns charged.
    core_ns: BTreeMap<&'static str, (u64, u64)>,
}

fn note(core_ns: &mut BTreeMap<&'static str, (u64, u64)>, kind: &'static str, calls: u64, ns: u64) {
    let e = core_ns.entry(kind).or_default();
    e.0 += calls;
    e.1 += ns;
}

fn encode(op: &Op) -> Payload {
    let mut b = Vec::with_capacity(9 + VALUE_BYTES);
    match op {
        Op::Read { key } => {
            b.push(0);
            b.extend_from_slice(&key.to_le_bytes());
        }
        Op::Insert { key, value } => {
            b.push(1);
            b.extend_from_slice(&key.to_le_bytes());
            b.extend_from_slice(value);
        }
        other => unreachable!(
            "the model issues READ and INSERT only, not {}",
            other.name()
        ),
    }
    Payload::from(b)
}

fn decode(p: &[u8]) -> Op {
    let key = u64::from_le_bytes(p[1..9].try_into().expect("9 bytes of header"));
    match p[0] {
        0 => Op::Read { key },
        1 => Op::Insert {
            key,
            value: p[9..].to_vec(),
        },
        k => unreachable!("op kind {k}"),
    }
}

impl World {
    fn new(spec: PointSpec) -> World {
        let n = spec.topology.n();
        assert_eq!(spec.tree.n(), n, "the tree's topology");
        assert!(n >= 3, "three acceptors per serializer need three replicas");
        let mut cpus: Vec<Cpu<Work>> = (0..n).map(|_| Cpu::new(spec.cores)).collect();
        for c in cpus.iter_mut() {
            let w = c.add_thread("worker".into(), spec.workers.max(1));
            assert_eq!(w, WORKER);
        }
        let nodes = if spec.system.is_geo() {
            let mut paxos_thread = Vec::new();
            let mut learner_thread = Vec::new();
            for g in 0..n {
                paxos_thread.push(0);
                learner_thread.push(0);
                for c in cpus.iter_mut() {
                    paxos_thread[g] = c.add_thread(format!("paxos-{g}"), 1);
                    learner_thread[g] = c.add_thread(format!("learner-{g}"), 1);
                }
            }
            let replicas = (0..n)
                .map(|r| {
                    GeoReplica::new(r, spec.tree.clone())
                        .expect("a valid merge")
                        .with_bugs(spec.bugs.geo)
                })
                .collect();
            // Serializer g's acceptors: its replica and the two nearest others (all
            // three regions with three replicas).
            let acceptors = (0..n)
                .map(|g| {
                    let mut others: Vec<usize> = (0..n).filter(|h| *h != g).collect();
                    others.sort_by_key(|h| (spec.topology.rtt_us(g, *h), (*h + n - g) % n));
                    [others[0], others[1]]
                })
                .collect();
            Nodes::Geo(GeoNodes {
                replicas,
                logs: (0..n)
                    .map(|_| Log {
                        base: 0,
                        entries: VecDeque::new(),
                    })
                    .collect(),
                acceptors,
                learned: vec![vec![0; n]; n],
                early: vec![vec![BTreeSet::new(); n]; n],
                clock_in_flight: vec![false; n],
                paxos_thread,
                learner_thread,
            })
        } else {
            let mut core_thread = 0;
            let mut exec_thread = 0;
            for c in cpus.iter_mut() {
                core_thread = c.add_thread("epaxos".into(), 1);
                exec_thread = c.add_thread("executor".into(), 1);
            }
            let mut config = EpaxosConfig::new((1..=n as NodeId).collect());
            // Every client may have a request in flight at its replica.
            config.proposals_in_flight_max = spec.clients + 16;
            config.waiting_max = 1 << 20;
            let cores = (0..n)
                .map(|r| {
                    let mut e = Epaxos::new(r as NodeId + 1, config.clone());
                    e.set_bugs(spec.bugs.epaxos);
                    e
                })
                .collect();
            Nodes::Ep(EpNodes {
                cores,
                trees: vec![spec.tree.clone(); n],
                core_thread,
                exec_thread,
            })
        };
        let clients = (0..spec.clients)
            .map(|i| Client {
                home: i % n,
                issued: 0,
                outstanding: None,
            })
            .collect();
        let end_issue = spec.warmup_ns + spec.measure_ns;
        World {
            keygen: KeyGen::new(spec.workload, n),
            rng: StdRng::seed_from_u64(spec.seed),
            n,
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            in_flight: 0,
            clients,
            cpus,
            nodes,
            latencies_us: vec![Vec::new(); n],
            window_ops: 0,
            history: Vec::new(),
            events: 0,
            end_issue,
            ticking: true,
            core_ns: BTreeMap::new(),
            spec,
        }
    }

    fn one_way(&self, a: usize, b: usize) -> u64 {
        if a == b {
            0
        } else {
            (u64::from(self.spec.topology.rtt_us(a, b)) * 1000 / 2).max(self.spec.lan_one_way_ns)
        }
    }

    fn at(&mut self, delay: u64, ev: Ev) {
        if !matches!(ev, Ev::GeoTick | Ev::EpTick | Ev::Dop) {
            self.in_flight += 1;
        }
        self.seq += 1;
        self.heap.push(Reverse(Sched {
            at: self.now + delay,
            seq: self.seq,
            ev,
        }));
    }

    fn in_window(&self) -> bool {
        self.now >= self.spec.warmup_ns && self.now < self.end_issue
    }

    // ---------------------------------------------------------------- clients

    fn issue(&mut self, client: usize) {
        if self.now >= self.end_issue {
            return;
        }
        let home = self.clients[client].home;
        let key = self.keygen.key(&mut self.rng, home);
        let (op, hop) = if self.keygen.is_read(&mut self.rng) {
            (Op::Read { key }, MapOp::Read { key })
        } else {
            let v = self.rng.gen_range(0..1u64 << 40);
            (
                Op::Insert {
                    key,
                    value: value_of(v),
                },
                MapOp::Insert { key, value: v },
            )
        };
        let c = &mut self.clients[client];
        let no = c.issued;
        c.issued += 1;
        c.outstanding = Some(Outstanding {
            no,
            hop,
            call_ns: self.now,
        });
        let d = self.spec.lan_one_way_ns;
        self.at(
            d,
            Ev::Arrive {
                replica: home,
                work: Work::Request { client, no, op },
            },
        );
    }

    fn client_reply(&mut self, client: usize, no: u64, reply: Reply) {
        let Some(o) = self.clients[client].outstanding.take_if(|o| o.no == no) else {
            panic!("client {client}: a reply to {no}, which is not outstanding");
        };
        if self.in_window() {
            self.window_ops += 1;
            let home = self.clients[client].home;
            let us = ((self.now - o.call_ns) / 1000).min(u64::from(u32::MAX)) as u32;
            self.latencies_us[home].push(us);
        }
        if self.spec.record_history {
            let result = match reply {
                Reply::Value(v) => OpResult::Value(v.map(|b| u64_of(&b))),
                Reply::Inserted(b) => OpResult::Inserted(b),
                other => panic!("a reply {other:?} to a READ or INSERT"),
            };
            self.history.push(HEvent::new(
                client as u64,
                &o.hop,
                o.call_ns,
                self.now,
                Status::Ok,
                Some(&result),
            ));
        }
        self.issue(client);
    }

    // ---------------------------------------------------------------- the CPU

    fn thread_of(&self, work: &Work) -> usize {
        match (&self.nodes, work) {
            (_, Work::Request { .. }) => WORKER,
            (Nodes::Geo(g), Work::Serialize { g: s, .. })
            | (Nodes::Geo(g), Work::Phase2a { g: s, .. })
            | (Nodes::Geo(g), Work::Phase2b { g: s, .. }) => g.paxos_thread[*s],
            (Nodes::Geo(g), Work::Learn { g: s, .. }) => g.learner_thread[*s],
            (Nodes::Ep(e), Work::Propose { .. } | Work::Message { .. } | Work::Tick) => {
                e.core_thread
            }
            (Nodes::Ep(e), Work::Execute { .. }) => e.exec_thread,
            _ => unreachable!("work for another system"),
        }
    }

    fn enqueue(&mut self, replica: usize, thread: usize, work: Work) {
        self.cpus[replica].push(thread, work);
        self.dispatch(replica);
    }

    fn dispatch(&mut self, replica: usize) {
        while let Some((thread, work)) = self.cpus[replica].start_next() {
            let (cost, effects) = self.run(replica, work);
            let cost = cost.max(1);
            if self.in_window() {
                let left = self.end_issue - self.now;
                self.cpus[replica].charge(thread, cost.min(left));
            }
            self.at(
                cost,
                Ev::Done {
                    replica,
                    thread,
                    effects,
                },
            );
        }
    }

    fn release(&mut self, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::Net { from, to, work } => {
                    let d = self.one_way(from, to);
                    self.at(d, Ev::Arrive { replica: to, work });
                }
                Effect::Local { to, work } => {
                    let t = self.thread_of(&work);
                    self.enqueue(to, t, work);
                }
                Effect::Reply { client, no, reply } => {
                    let d = self.spec.lan_one_way_ns;
                    self.at(d, Ev::ClientReply { client, no, reply });
                }
            }
        }
    }

    /// Runs `work` at `r` now: what it costs and what it releases when done.
    fn run(&mut self, r: usize, work: Work) -> (u64, Vec<Effect>) {
        if matches!(self.nodes, Nodes::Geo(_)) {
            self.run_geo(r, work)
        } else {
            self.run_ep(r, work)
        }
    }

    // ---------------------------------------------------------------- GeoPaxos

    fn geo_actions(&self, r: usize, out: Vec<GeoAction>, effects: &mut Vec<Effect>) -> u64 {
        let c = &self.spec.costs;
        let mut cost = 0;
        for a in out {
            match a {
                GeoAction::Serialize {
                    serializer,
                    op,
                    dst,
                    value,
                } => {
                    let g = serializer as usize;
                    let entry = Entry::Op {
                        op,
                        dst,
                        hint: 0,
                        value,
                    };
                    if g == r {
                        effects.push(Effect::Local {
                            to: r,
                            work: Work::Serialize {
                                g,
                                remote: false,
                                entry,
                            },
                        });
                    } else {
                        cost += c.send_ns;
                        effects.push(Effect::Net {
                            from: r,
                            to: g,
                            work: Work::Serialize {
                                g,
                                remote: true,
                                entry,
                            },
                        });
                    }
                }
                GeoAction::Reply { request, reply } => {
                    if request == u64::MAX {
                        continue; // a DOP
                    }
                    cost += c.reply_ns;
                    effects.push(Effect::Reply {
                        client: (request >> 32) as usize,
                        no: request & 0xffff_ffff,
                        reply,
                    });
                }
                GeoAction::Refused { request, reason } => {
                    panic!("request {request} refused: {reason}")
                }
            }
        }
        cost
    }

    fn run_geo(&mut self, r: usize, work: Work) -> (u64, Vec<Effect>) {
        let costs = self.spec.costs.clone();
        let mode = self.spec.cost_mode;
        let n = self.n;
        let mut effects = Vec::new();
        let Nodes::Geo(geo) = &mut self.nodes else {
            unreachable!()
        };
        let cost = match work {
            Work::Request { client, no, op } => {
                let mut out = Vec::new();
                let (res, ns) = timed!(
                    mode,
                    costs.geo_submit_ns,
                    geo.replicas[r].submit((client as u64) << 32 | no, op, &mut out)
                );
                res.expect("100-byte values fit");
                note(&mut self.core_ns, "geo.submit", 1, ns);
                costs.recv_ns + ns + self.geo_actions(r, out, &mut effects)
            }
            Work::Serialize {
                g,
                remote,
                mut entry,
            } => {
                assert_eq!(g, r, "serializer {g}'s leader is replica {g}");
                let hint = geo.replicas[g].hint();
                match &mut entry {
                    Entry::Op { hint: h, .. } => *h = hint,
                    Entry::Clock { hint: h } => *h = (*h).max(hint),
                }
                let log = &mut geo.logs[g];
                let position = log.len();
                log.entries.push_back((entry, 1));
                for a in geo.acceptors[g] {
                    effects.push(Effect::Net {
                        from: g,
                        to: a,
                        work: Work::Phase2a { g, position },
                    });
                }
                (if remote { costs.recv_ns } else { 0 }) + costs.phase2a_ns + 2 * costs.send_ns
            }
            Work::Phase2a { g, position } => {
                effects.push(Effect::Net {
                    from: r,
                    to: g,
                    work: Work::Phase2b { g, position },
                });
                costs.recv_ns + costs.phase2a_ns + costs.send_ns
            }
            Work::Phase2b { g, position } => {
                let mut cost = costs.recv_ns + costs.phase2b_ns;
                // The third vote may come after every replica learned the entry and the
                // log dropped it: nothing to do then.
                let decided_now = position >= geo.logs[g].base && {
                    let votes = &mut geo.logs[g].get_mut(position).1;
                    *votes += 1;
                    *votes == 2
                };
                if decided_now {
                    // A majority of three: decided. Tell every learner.
                    for to in 0..n {
                        if to == g {
                            effects.push(Effect::Local {
                                to,
                                work: Work::Learn {
                                    g,
                                    position,
                                    remote: false,
                                },
                            });
                        } else {
                            cost += costs.send_ns;
                            effects.push(Effect::Net {
                                from: g,
                                to,
                                work: Work::Learn {
                                    g,
                                    position,
                                    remote: true,
                                },
                            });
                        }
                    }
                }
                cost
            }
            Work::Learn {
                g,
                position,
                remote,
            } => {
                let mut cost = if remote { costs.recv_ns } else { 0 };
                geo.early[r][g].insert(position);
                let mut out = Vec::new();
                let before = geo.replicas[r].stats().clone();
                let (mut measured, mut entries) = (0, 0);
                while geo.early[r][g].remove(&geo.learned[r][g]) {
                    let p = geo.learned[r][g];
                    geo.learned[r][g] += 1;
                    let entry = geo.logs[g].get(p).0.clone();
                    if r == g && matches!(entry, Entry::Clock { .. }) {
                        geo.clock_in_flight[g] = false;
                    }
                    let (res, ns) = timed!(
                        mode,
                        0,
                        geo.replicas[r].on_decided(g as SerializerId, p, entry, &mut out)
                    );
                    res.expect("entries in order");
                    measured += ns;
                    entries += 1;
                }
                let after = geo.replicas[r].stats();
                let core = if mode == CostMode::Measured {
                    measured
                } else {
                    entries * costs.geo_entry_ns
                        + (after.executed - before.executed) * costs.exec_ns
                        + (after.dops - before.dops)
                            * costs.dop_node_ns
                            * geo.replicas[r].tree().node_count() as u64
                };
                if entries > 0 {
                    note(&mut self.core_ns, "geo.on_decided", entries, core);
                }
                cost += core;
                if cfg!(debug_assertions) {
                    geo.replicas[r].invariants();
                }
                // Truncate what every replica learned.
                let low = (0..n).map(|x| geo.learned[x][g]).min().unwrap_or(0);
                let log = &mut geo.logs[g];
                while log.base < low && !log.entries.is_empty() {
                    log.entries.pop_front();
                    log.base += 1;
                }
                cost + self.geo_actions(r, out, &mut effects)
            }
            _ => unreachable!("EPaxos work at a GeoPaxos replica"),
        };
        (cost, effects)
    }

    fn geo_tick(&mut self) {
        let Nodes::Geo(geo) = &mut self.nodes else {
            unreachable!()
        };
        let mut wanted = Vec::new();
        for g in 0..self.n {
            if geo.clock_in_flight[g] {
                continue;
            }
            if let Some(c) = geo.replicas[g].wanted_clock(g as SerializerId) {
                geo.clock_in_flight[g] = true;
                wanted.push((g, c));
            }
        }
        for (g, c) in wanted {
            let t = self.thread_of(&Work::Phase2a { g, position: 0 });
            self.enqueue(
                g,
                t,
                Work::Serialize {
                    g,
                    remote: false,
                    entry: Entry::Clock { hint: c + 1 },
                },
            );
        }
    }

    fn dop(&mut self) {
        let mut out = Vec::new();
        let Nodes::Geo(geo) = &mut self.nodes else {
            unreachable!()
        };
        geo.replicas[0]
            .submit(u64::MAX, Op::Dop, &mut out)
            .expect("a DOP has no value");
        let mut effects = Vec::new();
        self.geo_actions(0, out, &mut effects);
        self.release(effects);
    }

    // ---------------------------------------------------------------- EPaxos

    fn ep_drain(&mut self, r: usize, mut out: Vec<EpaxosAction>, effects: &mut Vec<Effect>) -> u64 {
        let costs = &self.spec.costs;
        let mode = self.spec.cost_mode;
        let Nodes::Ep(ep) = &mut self.nodes else {
            unreachable!()
        };
        let mut cost = 0;
        loop {
            let mut last = None;
            for a in out.drain(..) {
                match a {
                    EpaxosAction::Send { to, msg } => {
                        cost += costs.send_ns;
                        effects.push(Effect::Net {
                            from: r,
                            to: to as usize - 1,
                            work: Work::Message { from: r, msg },
                        });
                    }
                    EpaxosAction::Persist { token, .. } => last = Some(token),
                    EpaxosAction::Execute { command, .. } => effects.push(Effect::Local {
                        to: r,
                        work: Work::Execute { command },
                    }),
                    // The model neither checkpoints nor truncates.
                    EpaxosAction::Cut { .. }
                    | EpaxosAction::TruncateLog { .. }
                    | EpaxosAction::NeedState { .. } => {}
                }
            }
            if cfg!(debug_assertions) {
                ep.cores[r].invariants();
            }
            match last {
                // Writes are durable at once (no disk is modelled).
                Some(t) => {
                    let ((), ns) = timed!(
                        mode,
                        costs.ep_persisted_ns,
                        ep.cores[r].on_persisted(t, &mut out)
                    );
                    note(&mut self.core_ns, "epaxos.on_persisted", 1, ns);
                    cost += ns;
                }
                None => break,
            }
        }
        cost
    }

    fn run_ep(&mut self, r: usize, work: Work) -> (u64, Vec<Effect>) {
        let costs = self.spec.costs.clone();
        let mode = self.spec.cost_mode;
        let mut effects = Vec::new();
        let mut out = Vec::new();
        let Nodes::Ep(ep) = &mut self.nodes else {
            unreachable!()
        };
        let cost = match work {
            Work::Request { client, no, op } => {
                effects.push(Effect::Local {
                    to: r,
                    work: Work::Propose { client, no, op },
                });
                costs.recv_ns
            }
            Work::Propose { client, no, op } => {
                let (key, write) = match &op {
                    Op::Read { key } => (*key, false),
                    Op::Insert { key, .. } => (*key, true),
                    _ => unreachable!(),
                };
                let cmd = EpaxosCommand::new(
                    Command::single(client as u64, no, r as NodeId + 1, encode(&op)),
                    [KeyAccess { key, write }],
                    false,
                );
                let (res, ns) = timed!(
                    mode,
                    costs.ep_propose_ns,
                    ep.cores[r].propose(cmd, &mut out)
                );
                res.expect("room for every client's request");
                note(&mut self.core_ns, "epaxos.propose", 1, ns);
                ns + self.ep_drain(r, out, &mut effects)
            }
            Work::Message { from, msg } => {
                let kind = ep_kind(&msg);
                let ((), ns) = timed!(
                    mode,
                    costs.ep_message(kind),
                    ep.cores[r].on_message(from as NodeId + 1, msg, &mut out)
                );
                note(&mut self.core_ns, ep_call(kind), 1, ns);
                costs.recv_ns + ns + self.ep_drain(r, out, &mut effects)
            }
            Work::Tick => {
                let tick = self.now / self.spec.ep_tick_ns;
                let ((), ns) = timed!(mode, costs.ep_tick_ns, ep.cores[r].on_tick(tick, &mut out));
                note(&mut self.core_ns, "epaxos.on_tick", 1, ns);
                ns + self.ep_drain(r, out, &mut effects)
            }
            Work::Execute { command } => {
                let Some(cmd) = command else {
                    return (1, effects); // a no-op
                };
                let op = decode(cmd.command.body.payload_for(0).expect("group 0"));
                let from = cmd.command.reply_to as usize - 1;
                let (reply, ns) = timed!(mode, costs.exec_ns, ep.trees[r].execute(&op, from));
                let reply = reply.expect("100-byte values fit");
                note(&mut self.core_ns, "epaxos.execute (B+tree)", 1, ns);
                let mut cost = ns;
                if from == r {
                    cost += costs.reply_ns;
                    effects.push(Effect::Reply {
                        client: cmd.command.client as usize,
                        no: cmd.command.seq,
                        reply,
                    });
                }
                cost
            }
            _ => unreachable!("GeoPaxos work at an EPaxos replica"),
        };
        (cost, effects)
    }

    // ---------------------------------------------------------------- the loop

    fn quiet(&self) -> bool {
        if self.now < self.end_issue
            || self.in_flight > 0
            || self.clients.iter().any(|c| c.outstanding.is_some())
            || self.cpus.iter().any(|c| !c.is_idle())
        {
            return false;
        }
        match &self.nodes {
            Nodes::Geo(g) => g.replicas.iter().all(|r| r.merge().pending_len() == 0),
            Nodes::Ep(e) => e.cores.iter().all(|c| c.is_quiescent()),
        }
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Issue { client } => self.issue(client),
            Ev::Arrive { replica, work } => {
                let t = self.thread_of(&work);
                self.enqueue(replica, t, work);
            }
            Ev::Done {
                replica,
                thread,
                effects,
            } => {
                self.release(effects);
                self.cpus[replica].done(thread);
                self.dispatch(replica);
            }
            Ev::ClientReply { client, no, reply } => self.client_reply(client, no, reply),
            Ev::GeoTick => {
                if self.quiet() {
                    self.ticking = false;
                    return;
                }
                self.geo_tick();
                self.at(self.spec.geo_tick_ns, Ev::GeoTick);
            }
            Ev::EpTick => {
                if self.quiet() {
                    self.ticking = false;
                    return;
                }
                for r in 0..self.n {
                    let t = self.thread_of(&Work::Tick);
                    self.enqueue(r, t, Work::Tick);
                }
                self.at(self.spec.ep_tick_ns, Ev::EpTick);
            }
            Ev::Dop => {
                if self.now < self.end_issue {
                    self.dop();
                    if let Some(every) = self.spec.dop_every_ns {
                        self.at(every, Ev::Dop);
                    }
                }
            }
        }
    }

    fn run_all(&mut self) -> bool {
        for c in 0..self.clients.len() {
            let d = self.rng.gen_range(0..self.spec.start_spread_ns.max(1));
            self.at(d, Ev::Issue { client: c });
        }
        if matches!(self.nodes, Nodes::Geo(_)) {
            self.at(self.spec.geo_tick_ns, Ev::GeoTick);
            if let Some(every) = self.spec.dop_every_ns {
                self.at(every, Ev::Dop);
            }
        } else {
            self.at(self.spec.ep_tick_ns, Ev::EpTick);
        }
        let deadline = if self.spec.drain {
            self.end_issue + self.spec.drain_max_ns
        } else {
            self.end_issue
        };
        while let Some(Reverse(s)) = self.heap.pop() {
            self.now = s.at;
            if !matches!(s.ev, Ev::GeoTick | Ev::EpTick | Ev::Dop) {
                self.in_flight -= 1;
            }
            self.events += 1;
            self.step(s.ev);
            if self.now > deadline {
                return false;
            }
        }
        !self.ticking && self.quiet()
    }
}

/// A digest of a tree's entries only. EPaxos orders only interfering commands (same
/// key, one of them a write), so its replicas may insert different keys into a leaf in
/// different orders and split it at different points: equal contents, different
/// layouts. The GeoPaxos family orders everything on a node alike, so its replicas
/// are compared with the full digest (keys, values, layout, serializers, counters).
pub fn content_digest(t: &GeoBTree) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for (k, v) in t.entries() {
        eat(&k.to_le_bytes());
        eat(&(v.len() as u64).to_le_bytes());
        eat(v);
    }
    h
}

fn percentile_ms(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let i = ((sorted_us.len() as f64 * q).ceil() as usize).clamp(1, sorted_us.len()) - 1;
    sorted_us[i] as f64 / 1e3
}

fn mean_ms(v: &[u32]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64 / 1e3
}

/// Runs one point.
pub fn run_point(spec: PointSpec) -> Outcome {
    let started = Instant::now();
    let mut w = World::new(spec);
    let drained = w.run_all();
    let window_s = w.spec.measure_ns as f64 / 1e9;
    let mut all: Vec<u32> = Vec::new();
    let mut regions = Vec::new();
    for (r, lat) in w.latencies_us.iter_mut().enumerate() {
        lat.sort_unstable();
        all.extend_from_slice(lat);
        regions.push(RegionLatency {
            region: w.spec.topology.name(r).to_string(),
            ops: lat.len() as u64,
            mean_ms: mean_ms(lat),
            p50_ms: percentile_ms(lat, 0.50),
            p95_ms: percentile_ms(lat, 0.95),
            p99_ms: percentile_ms(lat, 0.99),
        });
    }
    all.sort_unstable();
    let window_ns = w.spec.measure_ns as f64;
    let cpu_utilization = w
        .cpus
        .iter()
        .map(|c| c.busy_ns as f64 / (window_ns * c.cores() as f64))
        .collect();
    let busiest_thread = w
        .cpus
        .iter()
        .map(|c| {
            let (name, ns, limit) = c.busiest();
            (name.to_string(), ns as f64 / (window_ns * limit as f64))
        })
        .collect();
    let (digests, geo, epaxos) = match &w.nodes {
        Nodes::Geo(g) => {
            let s = g.replicas[0].stats();
            let m = g.replicas[0].merge().stats();
            (
                g.replicas.iter().map(|r| r.digest()).collect::<Vec<_>>(),
                Some(GeoCounters {
                    executed: s.executed,
                    executed_multi_serializer: s.executed_multi,
                    resubmit_decisions: s.resubmit_decisions,
                    dops: s.dops,
                    op_entries: m.op_entries,
                    clock_entries: m.clock_entries,
                }),
                None,
            )
        }
        Nodes::Ep(e) => {
            let mut c = EpCounters {
                proposed: 0,
                fast_commits: 0,
                slow_commits: 0,
                recoveries_started: 0,
                commit_requests_sent: 0,
                slow_path_share: 0.0,
            };
            for core in &e.cores {
                let s = core.stats();
                c.proposed += s.proposed;
                c.fast_commits += s.fast_commits;
                c.slow_commits += s.slow_commits;
                c.recoveries_started += s.recoveries_started;
                c.commit_requests_sent += s.commit_requests_sent;
            }
            c.slow_path_share =
                c.slow_commits as f64 / (c.fast_commits + c.slow_commits).max(1) as f64;
            (
                e.trees.iter().map(content_digest).collect::<Vec<_>>(),
                None,
                Some(c),
            )
        }
    };
    let digests_equal = digests.iter().all(|d| *d == digests[0]);
    let core_calls = w
        .core_ns
        .iter()
        .map(|(k, (calls, ns))| {
            (
                k.to_string(),
                CoreCalls {
                    calls: *calls,
                    mean_ns: *ns as f64 / (*calls).max(1) as f64,
                },
            )
        })
        .collect();
    let result = PointResult {
        ops: w.window_ops,
        throughput_ops_per_s: w.window_ops as f64 / window_s,
        latency_ms_mean: mean_ms(&all),
        latency_ms_p95: percentile_ms(&all, 0.95),
        regions,
        cpu_utilization,
        busiest_thread,
        digests_equal: w.spec.drain.then_some(digests_equal),
        drained: w.spec.drain.then_some(drained),
        geo,
        epaxos,
        core_calls,
        end_ms: w.now as f64 / 1e6,
        events: w.events,
        wall_s: started.elapsed().as_secs_f64(),
    };
    Outcome {
        result,
        history: std::mem::take(&mut w.history),
        digests,
    }
}
