//! Swarm testing: every seed draws its own cluster shape, timing and *set of fault
//! classes* with their parameters, so that a range of seeds covers both gentle and
//! brutal runs, and combinations of faults no hand-written test would try.
//!
//! Input: a seed and the user's [`SimOptions`]. Output: [`SeedParams`], everything a run
//! needs besides the code. The draw uses its own random stream, so it does not depend
//! on what the run later does; switching a fault class off (`--without`) or forcing a set
//! (`--faults`) changes only that class's parameters, not the other draws.
//!
//! Fault classes (names as on the command line):
//!
//! | class | what it does in the safety phase |
//! | --- | --- |
//! | `loss` | each message between nodes is lost with probability 0–30% |
//! | `dup` | each message between nodes is delivered twice with probability 0–20% |
//! | `reorder` | with probability 0–30% a message gets an extra delay of up to 20 ms |
//! | `client-net` | the same three faults on client↔node links |
//! | `partition` | from time to time: a node isolated, or the nodes split in two, then healed |
//! | `one-way` | partitions may cut one direction only (a node that can send but not hear, or the reverse) |
//! | `crash-acceptor` | acceptors other than the coordinator's node crash (losing unsynced writes) and restart from their durable log; never more than a minority at once |
//! | `crash-replica` | replicas crash and restart empty, relearning from acceptors and the coordinator; at least one stays up; standalone batchers crash and restart empty too |
//! | `crash-coordinator` | node 1 (coordinator and acceptor) crashes and restarts; off unless `--coordinator-crashes` (no failover yet) |
//! | `pause` | a node stops (like SIGSTOP) and resumes; its inputs queue meanwhile |
//! | `disk-stall` | some fsyncs take up to 300 ms |
//! | `torn-tail` | a crash may keep a prefix of written-but-unsynced records, tearing the one being written |

use crate::client::ClientParams;
use crate::cpu::CostTable;
use crate::disk::DiskParams;
use crate::net::{LinkFaults, LinkTiming, NetParams};
use crate::queue::{Time, MICROS, MILLIS, SECONDS};
use partita_config::NodeSection;
use partita_config::{ClusterConfig, ExecutionSection, OrderingSection, Role};
use partita_consensus::{Protocol, RingDecision};
use partita_node::UnsafeBugs;
use partita_types::NodeId;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// A class of faults the swarm can switch on for a seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultClass {
    Loss,
    Dup,
    Reorder,
    ClientNet,
    Partition,
    OneWay,
    CrashAcceptor,
    CrashReplica,
    CrashCoordinator,
    Pause,
    DiskStall,
    TornTail,
}

impl FaultClass {
    pub const ALL: [FaultClass; 12] = [
        FaultClass::Loss,
        FaultClass::Dup,
        FaultClass::Reorder,
        FaultClass::ClientNet,
        FaultClass::Partition,
        FaultClass::OneWay,
        FaultClass::CrashAcceptor,
        FaultClass::CrashReplica,
        FaultClass::CrashCoordinator,
        FaultClass::Pause,
        FaultClass::DiskStall,
        FaultClass::TornTail,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultClass::Loss => "loss",
            FaultClass::Dup => "dup",
            FaultClass::Reorder => "reorder",
            FaultClass::ClientNet => "client-net",
            FaultClass::Partition => "partition",
            FaultClass::OneWay => "one-way",
            FaultClass::CrashAcceptor => "crash-acceptor",
            FaultClass::CrashReplica => "crash-replica",
            FaultClass::CrashCoordinator => "crash-coordinator",
            FaultClass::Pause => "pause",
            FaultClass::DiskStall => "disk-stall",
            FaultClass::TornTail => "torn-tail",
        }
    }

    pub fn parse(name: &str) -> Result<FaultClass, String> {
        FaultClass::ALL
            .iter()
            .copied()
            .find(|c| c.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = FaultClass::ALL.iter().map(|c| c.name()).collect();
                format!("unknown fault class `{name}` (known: {})", names.join(", "))
            })
    }
}

/// Which ordering protocol a seed runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProtocolChoice {
    RingPaxos,
    MultiPaxos,
    /// Ring Paxos for even seeds, Multi-Paxos for odd ones.
    Alternate,
}

/// Whether Ring Paxos seeds run with speculative execution (`[execution] speculative`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpeculationChoice {
    /// Each Ring Paxos seed draws it (probability 1/2) from its own random stream, so
    /// that turning speculation on or off never shifts any other draw of the seed.
    Swarm,
    /// Every Ring Paxos seed speculates (Multi-Paxos seeds never do: it sends no
    /// proposals to learners).
    On,
    Off,
}

/// Whether a seed's replicas run P-SMR worker threads (paper 002 §III-F, `[execution]
/// threads`), and whether its clients map commands optimistically (opt-PSMR).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PsmrChoice {
    /// Each seed without speculation or partitioning draws it from its own random
    /// stream: a third of them run 1 to 4 threads, half of those optimistically.
    Swarm,
    /// Every such seed runs this many threads (0: none), optimistically or not.
    Fixed { threads: usize, optimistic: bool },
}

/// Whether a seed changes its replicas while it runs (`partita member`): a node
/// marked `join = true` is added under load, catches up and is promoted, then one of
/// the initial replicas is removed. Only seeds that can (Ring Paxos or Multi-Paxos, one
/// stream, unpartitioned, the swarm's B+tree or key-value store).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MembersChoice {
    /// No seed changes its replicas (and none draws from the members stream).
    Off,
    /// A quarter of the seeds that can, drawn from a stream of their own.
    Swarm,
    /// Every seed that can.
    On,
}

/// Whether a seed is ordered by Multi-Ring Paxos (paper 002 §V-B, `[ordering] protocol = "multi-ring"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RingsChoice {
    /// Each seed without speculation or batchers draws it from its own random
    /// stream: a third of them run 2 or 3 rings (partitioned: a ring per partition and
    /// one across them; P-SMR: a ring per thread's group and one for g_all).
    Swarm,
    /// Every seed runs this many rings (0: one stream; partitioned: a ring per
    /// partition and one across them; P-SMR: a ring per thread and one for g_all);
    /// speculation and batchers are off on such seeds.
    Fixed(u32),
}

/// How many partitions (paper 001 §III-C) a seed's state is cut into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PartitionChoice {
    /// Each seed draws it from its own random stream: one partition (classic SMR) half
    /// of the time, else 2 to 4 partitions of 1 to 2 replicas each.
    Swarm,
    /// Exactly this many (1: classic SMR), with the drawn replicas per partition.
    Fixed(u32),
}

/// Whether speculative seeds reply early (`[execution] early_replies`, paper 001 §VII).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EarlyRepliesChoice {
    /// Each speculative seed draws it (probability 1/2) from its own random stream, so
    /// that turning early replies on or off never shifts any other draw of the seed.
    Swarm,
    /// Every speculative seed replies early (seeds without speculation never do).
    On,
    Off,
}

/// Which batchers a seed's cluster has (clients then enter through them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BatcherChoice {
    /// Each seed draws its batchers from its own random stream, so that seeds without
    /// batchers run exactly as they did before batchers existed: none (half of the
    /// seeds), 1 or 2 standalone batchers (a quarter), or the batcher role on every
    /// acceptor but node 1 (a quarter).
    Swarm,
    /// Exactly this many standalone batchers (0: none).
    Standalone(u32),
}

/// The batchers of one seed's cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Batchers {
    None,
    /// Batcher-only nodes, with ids after the replicas.
    Standalone(u32),
    /// The batcher role on every acceptor but node 1 (the initial coordinator).
    OnAcceptors,
}

impl Batchers {
    /// Standalone batcher nodes (extra nodes of the cluster).
    pub fn standalone(self) -> usize {
        match self {
            Batchers::Standalone(n) => n as usize,
            _ => 0,
        }
    }
}

impl std::fmt::Display for Batchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Batchers::None => f.write_str("none"),
            Batchers::Standalone(n) => write!(f, "{n} standalone"),
            Batchers::OnAcceptors => f.write_str("on the acceptors but node 1"),
        }
    }
}

/// Which fault classes a seed may use.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum FaultSelection {
    /// Each class on with probability 1/2 (swarm testing), minus `without`.
    Swarm,
    /// Exactly these classes, all on (to shrink a failure: one class at a time).
    Only(Vec<FaultClass>),
    /// No faults at all (latency, jitter, bandwidth and clock skew remain).
    None,
}

/// S-SMR/DS-SMR Chirper seeds (paper 003) instead of the B+tree.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum DssmrChoice {
    /// B+tree seeds (the default).
    #[default]
    Off,
    /// Every seed runs Chirper, the scheme drawn per seed (DS-SMR three times in four).
    Swarm,
    /// Every seed runs Chirper under this scheme.
    Fixed(partita_dssmr::client::Scheme),
}

/// The service the clients use (S-SMR/DS-SMR seeds always run Chirper).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceChoice {
    /// The swarm's: on the swarm's clusters the key-value store in a quarter of the
    /// seeds (a stream of its own, so the rest of a seed's draw is the same whichever
    /// service it runs), the B+tree in the others; on GeoPaxos+ and EPaxos seeds the
    /// key-value store in a third of the seeds, the geo B+tree in the others.
    #[default]
    Swarm,
    /// The B+tree (on GeoPaxos+ seeds placed by an object map, key by key).
    Btree,
    /// Paper 004's geo B+tree (GeoPaxos+ and EPaxos seeds only: it places its own
    /// nodes on the serializers).
    GeoBtree,
    /// The key-value store (etcd's data model), on every seed.
    Kv,
}

/// GeoPaxos+ and EPaxos seeds (paper 004) instead of the swarm's clusters: the
/// paper's three emulated regions, the geo B+tree's operations.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GeoChoice {
    /// The swarm's clusters (the default): no seed runs GeoPaxos+ or EPaxos.
    #[default]
    Off,
    /// Every seed runs GeoPaxos+.
    GeoPaxosPlus,
    /// Every seed runs GeoPaxos (one serializer per object, no DOPs).
    GeoPaxos,
    /// Every seed runs EPaxos.
    Epaxos,
    /// GeoPaxos+ on even seeds, EPaxos on odd ones.
    Alternate,
}

impl GeoChoice {
    /// The name `partita sim --geo` takes (`None`: off).
    pub fn flag(self) -> Option<&'static str> {
        match self {
            GeoChoice::Off => None,
            GeoChoice::GeoPaxosPlus => Some("geopaxos+"),
            GeoChoice::GeoPaxos => Some("geopaxos"),
            GeoChoice::Epaxos => Some("epaxos"),
            GeoChoice::Alternate => Some("both"),
        }
    }
}

/// Which of paper 004's orderings a geo seed runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GeoOrdering {
    /// GeoPaxos+: one serializer (a Multi-Paxos group) per replica, the timestamp
    /// merge, the optimizer (`partita_node::geo`).
    GeoPaxosPlus,
    /// GeoPaxos: GeoPaxos+'s serializers with one serializer per object, never moved.
    GeoPaxos,
    /// EPaxos, the leaderless baseline, on paper 001's B+tree (`partita_node::epaxos`).
    Epaxos,
}

impl std::fmt::Display for GeoOrdering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GeoOrdering::GeoPaxosPlus => "GeoPaxos+",
            GeoOrdering::GeoPaxos => "GeoPaxos",
            GeoOrdering::Epaxos => "EPaxos",
        })
    }
}

/// What a GeoPaxos+ or EPaxos seed drew (from a stream of its own, only when
/// [`SimOptions::geo`] is on): the tree, and what the clients do with it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GeoParams {
    pub ordering: GeoOrdering,
    /// Keys `0..keys` present at the start, each with its own key as value; their
    /// leaves placed by key range on the three replicas (California's first).
    pub keys: u64,
    /// The geo tree's order (most keys per node): small, so that inserts split nodes.
    pub order: usize,
    /// GeoPaxos+: a DOP that often (0: never). Always 0 with EPaxos.
    pub dop_interval_ms: u64,
    /// GeoPaxos+'s optimizer: brute force, or hot replicas with the LRU cache.
    pub brute_force: bool,
    /// Bytes of every value in the geo tree (the client's `u64` is the first 8).
    pub value_bytes: usize,
    /// Seeds the geo tree's initial configurations of nodes created by splits.
    pub tree_seed: u64,
    /// What the clients do.
    pub workload: crate::client::GeoWorkload,
}

/// What the user chooses; everything else is drawn from the seed.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// Commands per seed, across all clients.
    pub ops: u64,
    pub protocol: ProtocolChoice,
    /// Where Ring Paxos seeds decide (`None`: each Ring Paxos seed draws it).
    pub ring_decision: Option<RingDecision>,
    pub speculation: SpeculationChoice,
    pub partitioning: PartitionChoice,
    /// Early replies on speculative seeds.
    pub early_replies: EarlyRepliesChoice,
    pub batchers: BatcherChoice,
    /// Client session leases for every seed (ms; `None`: drawn per seed).
    pub session_lease_ms: Option<u64>,
    /// P-SMR worker threads.
    pub psmr: PsmrChoice,
    /// Replicas added and removed while the seed runs.
    pub members: MembersChoice,
    /// Multi-Ring Paxos.
    pub rings: RingsChoice,
    /// S-SMR/DS-SMR Chirper seeds.
    pub dssmr: DssmrChoice,
    /// GeoPaxos+ and EPaxos seeds (off by default: then no seed draws from the geo
    /// stream, and every seed runs as it did before geo seeds existed).
    pub geo: GeoChoice,
    pub service: ServiceChoice,
    pub bugs: UnsafeBugs,
    pub faults: FaultSelection,
    /// Classes removed from the selection.
    pub without: Vec<FaultClass>,
    /// Allow the `crash-coordinator` class (on by default: failover must cope).
    pub coordinator_crashes: bool,
    /// Deliver every tick to every node and fail when one acts before its node said a
    /// tick would (`--tick-check`); by default ticks before that are skipped.
    pub tick_check: bool,
    pub cost: CostTable,
    /// Events kept for the failure report.
    pub trace_tail: usize,
    /// Linearizability checker budget (search states).
    pub check_max_states: u64,
    /// Stop at this many processed events (a runaway guard, reported as a failure).
    pub events_max: u64,
}

impl SimOptions {
    /// The command-line flags that reproduce these options (besides the seed).
    pub fn flags(&self) -> String {
        let mut f = format!("--ops {}", self.ops);
        match self.protocol {
            ProtocolChoice::RingPaxos => f += " --protocol ring-paxos",
            ProtocolChoice::MultiPaxos => f += " --protocol multi-paxos",
            ProtocolChoice::Alternate => {}
        }
        if let Some(d) = self.ring_decision {
            f += &format!(" --ring-decision {d}");
        }
        match self.speculation {
            SpeculationChoice::Swarm => {}
            SpeculationChoice::On => f += " --speculation on",
            SpeculationChoice::Off => f += " --speculation off",
        }
        if let PartitionChoice::Fixed(n) = self.partitioning {
            f += &format!(" --partitions {n}");
        }
        match self.early_replies {
            EarlyRepliesChoice::Swarm => {}
            EarlyRepliesChoice::On => f += " --early-replies on",
            EarlyRepliesChoice::Off => f += " --early-replies off",
        }
        if let BatcherChoice::Standalone(n) = self.batchers {
            f += &format!(" --batchers {n}");
        }
        if let Some(l) = self.session_lease_ms {
            f += &format!(" --session-lease-ms {l}");
        }
        if let PsmrChoice::Fixed {
            threads,
            optimistic,
        } = self.psmr
        {
            f += &format!(" --threads {threads}");
            if optimistic {
                f += " --optimistic";
            }
        }
        if let RingsChoice::Fixed(n) = self.rings {
            f += &format!(" --rings {n}");
        }
        match self.members {
            MembersChoice::Off => {}
            MembersChoice::Swarm => f += " --members swarm",
            MembersChoice::On => f += " --members on",
        }
        match self.dssmr {
            DssmrChoice::Off => {}
            DssmrChoice::Swarm => f += " --dssmr swarm",
            DssmrChoice::Fixed(partita_dssmr::client::Scheme::Ssmr) => f += " --dssmr ssmr",
            DssmrChoice::Fixed(partita_dssmr::client::Scheme::Dssmr) => f += " --dssmr dssmr",
        }
        if let Some(g) = self.geo.flag() {
            f += &format!(" --geo {g}");
        }
        match self.service {
            ServiceChoice::Swarm => {}
            ServiceChoice::Btree => f += " --service btree",
            ServiceChoice::GeoBtree => f += " --service geo-btree",
            ServiceChoice::Kv => f += " --service kv",
        }
        for b in UnsafeBugs::NAMES {
            if bug_on(&self.bugs, b) {
                f += &format!(" --unsafe {b}");
            }
        }
        match &self.faults {
            FaultSelection::Swarm => {}
            FaultSelection::None => f += " --no-faults",
            FaultSelection::Only(list) => {
                let names: Vec<&str> = list.iter().map(|c| c.name()).collect();
                f += &format!(" --faults {}", names.join(","));
            }
        }
        if !self.without.is_empty() {
            let names: Vec<&str> = self.without.iter().map(|c| c.name()).collect();
            f += &format!(" --without {}", names.join(","));
        }
        if !self.coordinator_crashes {
            f += " --no-coordinator-crashes";
        }
        if self.tick_check {
            f += " --tick-check";
        }
        f
    }
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            ops: 2000,
            protocol: ProtocolChoice::Alternate,
            ring_decision: None,
            speculation: SpeculationChoice::Swarm,
            partitioning: PartitionChoice::Swarm,
            early_replies: EarlyRepliesChoice::Swarm,
            batchers: BatcherChoice::Swarm,
            session_lease_ms: None,
            psmr: PsmrChoice::Swarm,
            members: MembersChoice::Off,
            rings: RingsChoice::Swarm,
            dssmr: DssmrChoice::Off,
            geo: GeoChoice::Off,
            service: ServiceChoice::Swarm,
            bugs: UnsafeBugs::default(),
            faults: FaultSelection::Swarm,
            without: Vec::new(),
            coordinator_crashes: true,
            tick_check: false,
            cost: CostTable::default(),
            trace_tail: 40,
            check_max_states: 2_000_000,
            events_max: 50_000_000,
        }
    }
}

/// Fault parameters of the safety phase that the network and disk do not hold.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultParams {
    pub classes: Vec<FaultClass>,
    /// Mean partitions per second, and the longest one.
    pub partition_per_s: f64,
    pub partition_ns_max: Time,
    pub crash_per_s: f64,
    /// Longest time a crashed node stays down.
    pub down_ns_max: Time,
    pub pause_per_s: f64,
    pub pause_ns_max: Time,
}

impl FaultParams {
    pub fn has(&self, c: FaultClass) -> bool {
        self.classes.contains(&c)
    }
}

/// Everything a run needs besides the code: drawn from the seed by [`draw`].
#[derive(Clone, Debug, Serialize)]
pub struct SeedParams {
    pub seed: u64,
    pub protocol: Protocol,
    /// Ring Paxos: where an instance is decided (`None`: the cluster file leaves it
    /// unset; Multi-Paxos). Drawn from a stream of its own, half of Ring Paxos seeds
    /// each way.
    pub ring_decision: Option<RingDecision>,
    /// Replicas execute proposals speculatively (Ring Paxos only).
    pub speculative: bool,
    /// State partitioning: this many equal key ranges over `0..key_space`, the
    /// `replicas` split evenly among them (1: classic SMR).
    pub partitions: u32,
    pub key_space: u64,
    /// Replicas reply early to speculated commands (speculative seeds only).
    pub early_replies: bool,
    pub batchers: Batchers,
    /// Batchers: the least time between two batches that are not full (0: Nagle's rule
    /// alone). Drawn only for seeds with batchers, from a stream of its own.
    pub batcher_interval_ms: u64,
    /// The coordinator's least time between two values that are not full (0: off).
    /// Drawn from a stream of its own.
    pub value_interval_ms: u64,
    /// Client session leases (ms of ordered time): short in about a third of the
    /// seeds (a few times the clients' timeout, so the sessions of clients that wait
    /// long expire and late copies of their commands meet expired sessions), the
    /// default otherwise.
    /// Drawn from a stream of its own.
    pub session_lease_ms: u64,
    /// P-SMR worker threads per replica (0: sequential execution), and whether the
    /// clients map optimistically (opt-PSMR). Drawn from a stream of its own, only for
    /// seeds without speculation or partitioning.
    pub psmr_threads: usize,
    pub psmr_optimistic: bool,
    /// Replicas change while it runs: one more node, marked `join = true` (the last
    /// id; partitioned, of partition `seed % partitions`), is added under load, then
    /// one of the initial replicas (of its partition) is removed (`crate::world`'s
    /// membership script; over Multi-Ring Paxos, whose rings' acceptors stay, it joins
    /// as a replica only). Drawn from a stream of its own, for seeds without DS-SMR.
    pub member_changes: bool,
    /// Multi-Ring Paxos: rings (0: one stream; partitioned: one per partition, plus
    /// one across them; P-SMR: one per thread, plus one for g_all), `M`, and Δ of the
    /// skip rule.
    pub rings: u32,
    pub ring_m: u64,
    pub ring_delta_ms: u64,
    pub acceptors: usize,
    pub replicas: usize,
    pub window_instances_max: usize,
    pub batch_bytes_max: usize,
    pub batch_delay_ms: u64,
    /// Replicas checkpoint every this many instances (acceptors then truncate).
    pub checkpoint_instances: u64,
    pub clients: u32,
    pub ops: u64,
    pub client: ClientParams,
    pub net: NetParams,
    pub disk: DiskParams,
    /// Per node (in id order, standalone batchers last): its clock runs at `1 + skew`
    /// times real speed.
    pub clock_skew: Vec<f64>,
    pub faults: FaultParams,
    /// The safety phase ends when this many operations were invoked...
    pub safety_ops: u64,
    /// ...or at this virtual time, whichever comes first.
    pub safety_ns_max: Time,
    /// After healing, everything must be done within this long.
    pub liveness_ns_max: Time,
    #[serde(skip)]
    pub bugs: UnsafeBugs,
    pub bug_names: Vec<&'static str>,
    /// Command-line flags that reproduce the options this seed ran with.
    pub flags: String,
    /// S-SMR/DS-SMR (paper 003): Chirper over the cluster's partitions (with DS-SMR
    /// the last is the oracle), replicas `partita_dssmr::replica::DsReplica`, clients
    /// the client proxy. Experiment mode only for now.
    pub dssmr: Option<DsParams>,
    /// GeoPaxos+ or EPaxos (paper 004) in the paper's three emulated regions: three
    /// nodes, each an acceptor and a replica (`acceptors` and `replicas` both count
    /// them), clients in every region (`None`: the swarm's clusters).
    pub geo: Option<GeoParams>,
    /// The service's name in the cluster file: `btree`, `kv` (clients of
    /// `partita_kv::mix`, checked by the key-value checker), `geo-btree` (geo seeds)
    /// or `chirper` (S-SMR/DS-SMR seeds).
    pub service: String,
}

/// S-SMR/DS-SMR runs: the scheme, the social graph every member loads, the workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DsParams {
    pub scheme: partita_dssmr::client::Scheme,
    pub graph: partita_dssmr::chirper::GraphSpec,
    pub workload: partita_dssmr::chirper::Workload,
    /// Where an access's objects are gathered: at random among the partitions
    /// involved (the paper's default), or where most of them are.
    pub gather_where_most: bool,
    /// Whether clients wait for a command's moves before its access, on one session
    /// (`false`, the paper's Algorithm 2: the moves go at once on a session of their
    /// own whose answers nobody waits for, and an access ordered before its moves is
    /// answered retry; see `crate::client::DsClient`).
    pub await_moves: bool,
    /// Where users start (DS-SMR) and stay (S-SMR), and where new ones are created:
    /// hashed to partitions (the paper's runs) or by community (Chirper's own
    /// placement, an optimised static map).
    pub static_map: partita_dssmr::StaticMap,
    /// The key-value store's clients (`service = "kv"`): 0 for the swarm's mix, else
    /// transactions over this many pairs of keys (`partita_kv::mix::pair_puts`, the
    /// workload of `partita bench --kv-pairs`).
    pub kv_pairs: u64,
    /// Swarm seeds: clients draw the swarm's mix ([`crate::ds::swarm_command`]: every
    /// command kind, creates and deletes too, peers from anywhere half of the time)
    /// and record a history, instead of `workload`'s samples.
    pub swarm: bool,
}

impl SeedParams {
    /// The cluster file of this seed: `acceptors` acceptor nodes (ids 1..=A, node 1
    /// coordinates), `replicas` replica nodes after them and standalone batchers after
    /// those, as `partita up` would write it (addresses are never used by the
    /// simulator).
    pub fn cluster(&self) -> ClusterConfig {
        if let Some(g) = &self.geo {
            return self.geo_cluster(g);
        }
        let mut c = ClusterConfig::default_local(7100, 0x5151_0000 ^ self.seed);
        c.cluster.service = self.service.clone();
        if let Some(d) = &self.dssmr {
            // Chirper's graph and the execution model as a cluster file states them
            // (the simulated replicas and clients take them from the seed's parameters);
            // the key-value store needs no section of its own.
            c.chirper = (self.service == "chirper").then(|| partita_config::ChirperSection {
                users: d.graph.users,
                communities: d.graph.communities,
                mean_followers: d.graph.mean_followers.round() as u32,
                p_local_percent: (d.graph.p_local * 100.0).round() as u32,
                seed: d.graph.seed & ((1 << 62) - 1),
                placement: d.static_map.name().into(),
            });
            c.execution = match d.scheme {
                partita_dssmr::client::Scheme::Ssmr => ExecutionSection::Ssmr,
                partita_dssmr::client::Scheme::Dssmr => {
                    ExecutionSection::Dssmr(partita_config::DssmrSettings {
                        await_moves: d.await_moves,
                        gather_where_most: d.gather_where_most,
                    })
                }
            };
        }
        c.ordering = OrderingSection::paxos(self.protocol);
        if let (OrderingSection::RingPaxos(r), Some(d)) = (&mut c.ordering, self.ring_decision) {
            r.ring_decision = Some(d);
        }
        c.batching.window_instances_max = self.window_instances_max;
        c.batching.batch_bytes_max = self.batch_bytes_max;
        c.batching.batch_delay_ms = self.batch_delay_ms;
        c.batching.batcher_interval_ms = self.batcher_interval_ms;
        c.batching.value_interval_ms = self.value_interval_ms;
        c.storage.checkpoint_instances = self.checkpoint_instances;
        c.sessions.lease_ms = self.session_lease_ms;
        if self.speculative {
            c.execution = ExecutionSection::speculative(self.early_replies);
        } else if self.psmr_threads > 0 {
            // The threads split the keys the clients use.
            let key_max = self.client.keys.max(self.psmr_threads as u64) - 1;
            c.execution =
                ExecutionSection::psmr(self.psmr_threads, self.psmr_optimistic, Some(key_max));
        }
        c.partitioning.partitions = self.partitions;
        c.partitioning.key_space = self.key_space;
        let acceptors = self.acceptors;
        let replicas = self.replicas;
        let partitions = self.partitions as usize;
        c.nodes = (1..=(acceptors + replicas) as NodeId)
            .map(|id| {
                let replica = id as usize > acceptors;
                NodeSection {
                    id,
                    addr: format!("127.0.0.1:{}", 7100 + id),
                    roles: vec![if replica {
                        Role::Replica
                    } else {
                        Role::Acceptor
                    }],
                    // Replicas in id order, partition by partition.
                    partition: (replica && partitions > 1)
                        .then(|| ((id as usize - acceptors - 1) * partitions / replicas) as u32),
                    etcd_addr: None,
                    region: None,
                    join: false,
                }
            })
            .collect();
        match self.batchers {
            Batchers::None => {}
            Batchers::Standalone(n) => {
                c = c
                    .with_batchers(n)
                    .unwrap_or_else(|e| panic!("the simulator's batchers: {e}"))
            }
            Batchers::OnAcceptors => {
                for n in c
                    .nodes
                    .iter_mut()
                    .filter(|n| (2..=acceptors as NodeId).contains(&n.id))
                {
                    n.roles.push(Role::Batcher);
                }
            }
        }
        if self.rings > 0 {
            // Ring acceptors after every other node (the clocks drawn for them last).
            c = c
                .with_multiring(self.rings, self.ring_m)
                .unwrap_or_else(|e| panic!("the simulator's rings: {e}"));
            if let Some(mr) = c.ordering.multiring_mut() {
                mr.delta_ms = self.ring_delta_ms;
            }
        }
        if self.member_changes {
            // The node that joins: after every other one, outside the initial
            // membership until the membership script adds it.
            // It joins as a replica, then as an acceptor too (not over Multi-Ring
            // Paxos, whose rings' acceptors stay).
            let id = c.nodes.iter().map(|n| n.id).max().unwrap_or(0) + 1;
            let mut joiner = NodeSection::joining_replica(id, format!("127.0.0.1:{}", 7100 + id));
            if self.rings == 0 {
                joiner.roles.push(Role::Acceptor);
            }
            // Partitioned: it joins one of the partitions, by the seed.
            joiner.partition =
                (self.partitions > 1).then(|| (self.seed % u64::from(self.partitions)) as u32);
            c.nodes.push(joiner);
        }
        // Round-trip through the cluster-file parser so that a simulated cluster is
        // always one the real loader accepts.
        ClusterConfig::parse(&c.to_toml(), "simulated cluster")
            .unwrap_or_else(|e| panic!("the simulator built an invalid cluster file: {e}"))
    }
}

impl SeedParams {
    /// The cluster file of a GeoPaxos+ or EPaxos seed: the paper's deployment
    /// (`ClusterConfig::paper_geo_local`: nodes 1, 2, 3 in California, Virginia and
    /// Europe, each an acceptor and a replica, `[wan] preset = "paper"`), the drawn
    /// tree and batching, and client `i` in region `i mod 3` (so at the replica of its
    /// index).
    fn geo_cluster(&self, g: &GeoParams) -> ClusterConfig {
        let mut c = ClusterConfig::paper_geo_local(7100, 0x5151_0000 ^ self.seed, g.keys);
        c.batching.window_instances_max = self.window_instances_max;
        c.batching.batch_bytes_max = self.batch_bytes_max;
        c.batching.batch_delay_ms = self.batch_delay_ms;
        c.batching.value_interval_ms = self.value_interval_ms;
        // EPaxos replicas checkpoint at cuts, truncate and transfer state as any
        // replica does (GeoPaxos+ executes inside its ordering: none yet).
        c.storage.checkpoint_instances = self.checkpoint_instances;
        c.sessions.lease_ms = self.session_lease_ms;
        // The geo B+tree starts with keys `0..keys`; the key-value store empty.
        let kv = self.service == "kv";
        c.cluster.service = self.service.clone();
        let keys = if kv { 0 } else { g.keys };
        match g.ordering {
            GeoOrdering::Epaxos => {
                // The seed's window, so that batches form (windows of 1 and 2 are
                // drawn) as they do at the paper's loads.
                c.ordering = OrderingSection::Epaxos(partita_config::EpaxosSection {
                    window_instances_max: self.window_instances_max,
                    ..partita_config::EpaxosSection::with_keys(keys)
                })
            }
            GeoOrdering::GeoPaxos => {
                c.ordering = OrderingSection::GeoPaxos(partita_config::GeoSection::geopaxos(keys))
            }
            GeoOrdering::GeoPaxosPlus => {}
        }
        if let Some(s) = c.ordering.geo_mut() {
            s.keys = keys;
            s.order = g.order;
            s.value_bytes = g.value_bytes;
            s.seed = g.tree_seed;
            // DOPs and the optimizer are GeoPaxos+'s; GeoPaxos fixes them.
            if g.ordering == GeoOrdering::GeoPaxosPlus {
                s.dop_interval_ms = g.dop_interval_ms;
                s.optimizer = if g.brute_force {
                    "brute-force"
                } else {
                    "hot-lru"
                }
                .into();
            }
        }
        c.wan
            .as_mut()
            .expect("the paper's deployment has [wan]")
            .clients = partita_config::wan::PAPER_REGIONS
            .iter()
            .map(|r| r.to_string())
            .collect();
        ClusterConfig::parse(&c.to_toml(), "simulated cluster")
            .unwrap_or_else(|e| panic!("the simulator built an invalid geo cluster file: {e}"))
    }

    /// How the seed's state and execution are laid out, when not one partition on
    /// one stream executed sequentially: partitions, P-SMR threads, rings, DS-SMR,
    /// GeoPaxos+ or EPaxos.
    pub fn layout(&self) -> Option<String> {
        if let Some(g) = &self.geo {
            let w = &g.workload;
            let mut focus = String::new();
            if w.local_percent > 0 {
                focus += &format!(", {}% in their region's range", w.local_percent);
            }
            if w.hot_percent > 0 {
                focus += &format!(
                    ", {}% on hot keys {}..{}",
                    w.hot_percent,
                    w.hot_lo,
                    w.hot_lo + w.hot_len
                );
            }
            return Some(format!(
                "{} in 3 emulated regions (California, Virginia, Europe; one node each, \
                 acceptor and replica); geo tree of keys 0..{} (value = key), order {}, \
                 {}-byte values{}; clients on keys 0..{}: {}% reads, {}% of writes \
                 inserts{focus}",
                g.ordering,
                g.keys,
                g.order,
                g.value_bytes,
                match (g.ordering, g.dop_interval_ms) {
                    (GeoOrdering::Epaxos, _) => String::new(),
                    (_, 0) => ", no DOPs".to_string(),
                    (_, d) => format!(
                        ", a DOP every {d} ms ({} optimizer)",
                        if g.brute_force {
                            "brute-force"
                        } else {
                            "hot-lru"
                        }
                    ),
                },
                w.key_space,
                w.read_percent,
                w.insert_percent,
            ));
        }
        let mut layout = Vec::new();
        if let Some(d) = &self.dssmr {
            let scheme = match d.scheme {
                partita_dssmr::client::Scheme::Ssmr => "S-SMR",
                partita_dssmr::client::Scheme::Dssmr => "DS-SMR",
            };
            layout.push(match self.service.as_str() {
                "kv" => format!("the key-value store on {scheme}"),
                _ => format!("Chirper ({scheme})"),
            });
        } else if self.service == "kv" {
            layout.push("the key-value store".to_string());
        }
        if self.partitions > 1 {
            layout.push(format!("{} partitions", self.partitions));
        }
        if self.psmr_threads > 0 {
            layout.push(format!(
                "{} P-SMR worker threads{}",
                self.psmr_threads,
                if self.psmr_optimistic {
                    ", clients optimistic (opt-PSMR)"
                } else {
                    ""
                }
            ));
        }
        if self.member_changes {
            layout.push(
                "membership changes: a replica joins under load (added, caught up, \
                 promoted), then an initial replica is removed"
                    .to_string(),
            );
        }
        if self.rings > 0 {
            let extra = self.partitions > 1 || self.psmr_threads > 0;
            layout.push(format!(
                "Multi-Ring Paxos: {} rings{}, M {}, delta {} ms",
                self.rings + u32::from(extra),
                if extra {
                    " (one per group, one across)"
                } else {
                    ""
                },
                self.ring_m,
                self.ring_delta_ms
            ));
        }
        (!layout.is_empty()).then(|| layout.join("; "))
    }
}

/// A random stream of the seed: `stream` separates the draws of independent models.
pub fn stream(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

pub const STREAM_PARAMS: u64 = 1;
pub const STREAM_NET: u64 = 2;
pub const STREAM_DISK: u64 = 3;
pub const STREAM_FAULTS: u64 = 4;
pub const STREAM_CLIENTS: u64 = 5;
pub const STREAM_LINKS: u64 = 6;
pub const STREAM_SPECULATION: u64 = 7;
pub const STREAM_PARTITIONS: u64 = 8;
pub const STREAM_EARLY_REPLIES: u64 = 9;
pub const STREAM_BATCHERS: u64 = 10;
pub const STREAM_BATCHER_INTERVAL: u64 = 11;
pub const STREAM_VALUE_INTERVAL: u64 = 12;
pub const STREAM_SESSIONS: u64 = 13;
pub const STREAM_PSMR: u64 = 14;
pub const STREAM_RINGS: u64 = 15;
pub const STREAM_DSSMR: u64 = 16;
pub const STREAM_RING_DECISION: u64 = 17;
pub const STREAM_GEO: u64 = 18;
pub const STREAM_SERVICE: u64 = 19;
pub const STREAM_MEMBERS: u64 = 20;

fn log_uniform(rng: &mut impl Rng, lo: f64, hi: f64) -> f64 {
    (rng.gen_range(lo.ln()..=hi.ln())).exp()
}

/// Draw the parameters of `seed`.
pub fn draw(seed: u64, opts: &SimOptions) -> SeedParams {
    let mut rng = stream(seed, STREAM_PARAMS);
    let protocol = match opts.protocol {
        ProtocolChoice::RingPaxos => Protocol::RingPaxos,
        ProtocolChoice::MultiPaxos => Protocol::MultiPaxos,
        ProtocolChoice::Alternate if seed.is_multiple_of(2) => Protocol::RingPaxos,
        ProtocolChoice::Alternate => Protocol::MultiPaxos,
    };
    let acceptors = if rng.gen_bool(0.3) { 5 } else { 3 };
    let replicas = if rng.gen_bool(0.4) { 3 } else { 2 };
    let window_instances_max = *[1, 2, 4, 16, 16, 16].choose(&mut rng).expect("non-empty");
    let batch_bytes_max = *[64, 512, 8192, 8192].choose(&mut rng).expect("non-empty");
    let batch_delay_ms = rng.gen_range(0..=2);
    // Frequent checkpoints exercise log truncation and state transfer within a run.
    let checkpoint_instances = *[20, 100, 500, 50_000].choose(&mut rng).expect("non-empty");
    let clients = rng.gen_range(2..=10u32).min(opts.ops.max(1) as u32);
    let client = ClientParams {
        think_ns_max: rng.gen_range(0..=10) * MILLIS,
        timeout_ns: rng.gen_range(150..=1000) * MILLIS,
        give_up_ns: rng.gen_range(5000..=15000) * MILLIS,
        refused_retry_ns: 50 * MILLIS,
        keys: rng.gen_range(4..=32),
    };
    let peer = LinkTiming {
        latency_ns: (log_uniform(&mut rng, 20.0, 2000.0) * MICROS as f64) as u64,
        latency_spread: rng.gen_range(1.0..=3.0),
        jitter_ns: rng.gen_range(0..=500) * MICROS,
        bandwidth_bytes_per_s: (log_uniform(&mut rng, 12.5e6, 1.25e9)) as u64,
    };
    let client_timing = LinkTiming {
        latency_ns: (log_uniform(&mut rng, 20.0, 2000.0) * MICROS as f64) as u64,
        latency_spread: rng.gen_range(1.0..=2.0),
        jitter_ns: rng.gen_range(0..=500) * MICROS,
        bandwidth_bytes_per_s: (log_uniform(&mut rng, 12.5e6, 1.25e9)) as u64,
    };
    let nodes = acceptors + replicas;
    let skew_max = rng.gen_range(0.0..=0.05);
    let clock_skew: Vec<f64> = (0..nodes)
        .map(|_| rng.gen_range(-skew_max..=skew_max))
        .collect();

    // Which classes are on.
    let mut classes: Vec<FaultClass> = match &opts.faults {
        FaultSelection::None => Vec::new(),
        FaultSelection::Only(list) => list.clone(),
        FaultSelection::Swarm => FaultClass::ALL
            .iter()
            .copied()
            .filter(|_| rng.gen_bool(0.5))
            .collect(),
    };
    // `--no-coordinator-crashes` spares node 1.
    if !opts.coordinator_crashes {
        classes.retain(|&c| c != FaultClass::CrashCoordinator);
    }
    classes.retain(|c| !opts.without.contains(c));
    classes.sort();
    classes.dedup();
    let on = |c: FaultClass| classes.contains(&c);

    // Parameters of every class, drawn whether or not the class is on.
    let loss = rng.gen_range(0.0..=0.30);
    let dup = rng.gen_range(0.0..=0.20);
    let reorder = rng.gen_range(0.0..=0.30);
    let reorder_ns_max = rng.gen_range(1..=20) * MILLIS;
    let client_loss = rng.gen_range(0.0..=0.20);
    let client_dup = rng.gen_range(0.0..=0.10);
    let client_reorder = rng.gen_range(0.0..=0.20);
    let peer_faults = LinkFaults {
        loss: if on(FaultClass::Loss) { loss } else { 0.0 },
        dup: if on(FaultClass::Dup) { dup } else { 0.0 },
        reorder: if on(FaultClass::Reorder) {
            reorder
        } else {
            0.0
        },
        reorder_ns_max,
    };
    let client_faults = if on(FaultClass::ClientNet) {
        LinkFaults {
            loss: client_loss,
            dup: client_dup,
            reorder: client_reorder,
            reorder_ns_max,
        }
    } else {
        LinkFaults::none()
    };
    let partition_per_s = rng.gen_range(0.5..=4.0);
    let partition_ns_max = rng.gen_range(20..=1500) * MILLIS;
    let crash_per_s = rng.gen_range(0.5..=5.0);
    let down_ns_max = rng.gen_range(5..=800) * MILLIS;
    let pause_per_s = rng.gen_range(0.5..=5.0);
    let pause_ns_max = rng.gen_range(5..=500) * MILLIS;
    let disk = DiskParams {
        write_ns: rng.gen_range(2..=50) * MICROS,
        write_byte_ps: rng.gen_range(100..=2000),
        fsync_ns: (log_uniform(&mut rng, 50.0, 5000.0) * MICROS as f64) as u64,
        stall: if on(FaultClass::DiskStall) {
            rng.gen_range(0.01..=0.10)
        } else {
            0.0
        },
        stall_ns_max: rng.gen_range(20..=300) * MILLIS,
        unsynced_survive: if on(FaultClass::TornTail) { 0.5 } else { 0.0 },
    };
    let speculative = protocol == Protocol::RingPaxos
        && match opts.speculation {
            SpeculationChoice::Swarm => stream(seed, STREAM_SPECULATION).gen_bool(0.5),
            SpeculationChoice::On => true,
            SpeculationChoice::Off => false,
        };
    // Partitioning draws from its own stream: a seed of one partition runs exactly as
    // it did before partitioning existed.
    let mut prng = stream(seed, STREAM_PARTITIONS);
    let partitions = match opts.partitioning {
        PartitionChoice::Swarm if prng.gen_bool(0.5) => 1,
        PartitionChoice::Swarm => prng.gen_range(2..=4u32),
        PartitionChoice::Fixed(n) => n.max(1),
    };
    // S-SMR/DS-SMR: its own stream. 1 to 8 data partitions (`--partitions` fixes
    // them), and with DS-SMR the oracle's partition after them.
    let (ds, partitions) = match draw_dssmr(seed, opts) {
        None => (None, partitions),
        Some((d, data)) => {
            let members = data + u32::from(d.scheme == partita_dssmr::client::Scheme::Dssmr);
            (Some(d), members)
        }
    };
    // Neither speculation nor P-SMR runs DS-SMR's replicas.
    let speculative = speculative && ds.is_none();
    let (replicas, key_space, client) = if partitions > 1 {
        let per = prng.gen_range(1..=2usize);
        // At least two keys per partition, so that ranges, next and prev cross borders.
        let keys = client.keys.max(2 * partitions as u64);
        (
            per * partitions as usize,
            keys,
            ClientParams { keys, ..client },
        )
    } else {
        (replicas, 1 << 32, client)
    };
    // One clock per node: partitioning may have changed the number of replicas.
    let mut clock_skew = clock_skew;
    clock_skew.truncate(acceptors + replicas);
    while clock_skew.len() < acceptors + replicas {
        clock_skew.push(prng.gen_range(-skew_max..=skew_max));
    }
    let early_replies = speculative
        && match opts.early_replies {
            EarlyRepliesChoice::Swarm => stream(seed, STREAM_EARLY_REPLIES).gen_bool(0.5),
            EarlyRepliesChoice::On => true,
            EarlyRepliesChoice::Off => false,
        };
    // Batchers draw from their own stream too (and so do the clocks of standalone
    // ones): a seed without batchers runs exactly as it did before they existed.
    let mut brng = stream(seed, STREAM_BATCHERS);
    let batchers = match opts.batchers {
        BatcherChoice::Swarm => match brng.gen_range(0..4) {
            0 | 1 => Batchers::None,
            2 => Batchers::Standalone(brng.gen_range(1..=2)),
            _ => Batchers::OnAcceptors,
        },
        BatcherChoice::Standalone(0) => Batchers::None,
        BatcherChoice::Standalone(n) => Batchers::Standalone(n),
    };
    for _ in 0..batchers.standalone() {
        clock_skew.push(brng.gen_range(-skew_max..=skew_max));
    }
    // The batchers' interval has a stream of its own too, so the draws above (and every
    // seed that drew batchers before the interval existed) are unchanged.
    let batcher_interval_ms = match batchers {
        Batchers::None => 0,
        _ => {
            let mut irng = stream(seed, STREAM_BATCHER_INTERVAL);
            if irng.gen_bool(0.5) {
                0
            } else {
                irng.gen_range(1..=5)
            }
        }
    };
    // The coordinator's value interval: its own stream, off for about half the seeds.
    let value_interval_ms = {
        let mut vrng = stream(seed, STREAM_VALUE_INTERVAL);
        if vrng.gen_bool(0.5) {
            0
        } else {
            vrng.gen_range(1..=5)
        }
    };
    // Session leases: their own stream; short (four to sixteen times the clients'
    // timeout: sessions of clients cut off by a partition or a long outage expire,
    // and their late copies meet expired sessions) in about a third of the seeds.
    // Shorter leases make most resubmissions end as unknown outcomes, which weakens
    // the linearizability check and can exhaust its search (two to eight times gave
    // 3 inconclusive seeds in 1,800; the controls use short leases on purpose).
    //
    // Not for the key-value store on S-SMR/DS-SMR: its revisions are positions, which
    // the key-value checker takes renumbered, and that is exact only when every
    // outcome is known (see `crate::ds::kv_lines`); with the default lease its clients
    // (which never give up) learn every outcome.
    let service = draw_service(seed, opts, ds.is_some());
    let ds_kv = ds.is_some() && service == "kv";
    let session_lease_ms = opts.session_lease_ms.unwrap_or_else(|| {
        let mut srng = stream(seed, STREAM_SESSIONS);
        if srng.gen_bool(1.0 / 3.0) && !ds_kv {
            let timeout_ms = client.timeout_ns / MILLIS;
            srng.gen_range(timeout_ms * 4..=timeout_ms * 16)
        } else {
            partita_config::SessionsSection::default().lease_ms
        }
    });
    // P-SMR: its own stream, so that seeds without it run as they did before.
    let mut trng = stream(seed, STREAM_PSMR);
    // Inside partitions: P-SMR (each partition's replicas split its keys), not
    // opt-PSMR, and not with fixed rings (rings serve partitions or threads, not both).
    let alone = partitions == 1;
    let rings_fixed = matches!(opts.rings, RingsChoice::Fixed(n) if n > 0);
    let (psmr_threads, psmr_optimistic) = if speculative || ds.is_some() || !alone && rings_fixed {
        (0, false)
    } else {
        match opts.psmr {
            PsmrChoice::Swarm => {
                if trng.gen_bool(1.0 / 3.0) {
                    (trng.gen_range(1..=4usize), trng.gen_bool(0.5) && alone)
                } else {
                    (0, false)
                }
            }
            PsmrChoice::Fixed {
                threads,
                optimistic,
            } => (threads, optimistic && threads > 0 && alone),
        }
    };
    // With P-SMR, more keys than a B+tree node holds (30), so that inserts and deletes
    // split and merge nodes, and leaves straddle the threads' ranges (the partitions
    // then cut the same keys).
    let (client, key_space) = if psmr_threads > 0 {
        let keys = trng.gen_range(40..=120);
        let key_space = if alone { key_space } else { keys };
        (ClientParams { keys, ..client }, key_space)
    } else {
        (client, key_space)
    };
    // Multi-Ring Paxos: its own stream, so that seeds without it run as they did
    // before. Fixed rings turn off what does not combine with them.
    let mut rrng = stream(seed, STREAM_RINGS);
    let ring_draw = rrng.gen_bool(1.0 / 3.0);
    let (rings, ring_m, ring_delta_ms) = {
        let m = rrng.gen_range(1..=3u64);
        let delta = rrng.gen_range(1..=5u64);
        // A ring per partition, or per P-SMR thread (its group g_i), and one across
        // them; else the number drawn or asked for.
        let per_partition_or = |n: u32| {
            if partitions > 1 {
                partitions
            } else if psmr_threads > 0 {
                psmr_threads as u32
            } else {
                n
            }
        };
        match opts.rings {
            // Chirper seeds of more than 4 partitions run one stream (a ring per
            // partition would be dozens of acceptors).
            _ if ds.is_some() && partitions > 4 => (0, 1, 5),
            // The key-value store on S-SMR/DS-SMR takes its revisions from one
            // stream's positions (the cluster-file check refuses it on Multi-Ring
            // Paxos).
            _ if ds_kv => (0, 1, 5),
            RingsChoice::Swarm
                if ring_draw
                    && !speculative
                    && batchers == Batchers::None
                    && (alone || psmr_threads == 0) =>
            {
                (per_partition_or(rrng.gen_range(2..=3)), m, delta)
            }
            RingsChoice::Fixed(n) if n > 0 => (per_partition_or(n), m, delta),
            _ => (0, 1, 5),
        }
    };
    let fixed_rings = rings > 0 && matches!(opts.rings, RingsChoice::Fixed(_));
    let (speculative, early_replies, batchers, batcher_interval_ms) = if fixed_rings {
        (false, false, Batchers::None, 0)
    } else {
        (speculative, early_replies, batchers, batcher_interval_ms)
    };
    if rings > 0 {
        // A clock for every acceptor of the rings after the first. Ring coordinators
        // pace their skips by their own clocks, so a ring whose clock runs fast gets
        // ahead in the merge and its values wait longer and longer (the paper's and
        // URingPaxos's rate rule assumes clocks that run at one rate): acceptors'
        // clocks here differ in rate by at most 20 ppm, as real clocks do, not by the
        // swarm's percent.
        let total = if partitions > 1 || psmr_threads > 0 {
            rings + 1
        } else {
            rings
        };
        clock_skew.truncate(acceptors + replicas);
        clock_skew.extend(std::iter::repeat_n(0.0, (total as usize - 1) * acceptors));
        for (i, s) in clock_skew.iter_mut().enumerate() {
            let acceptor = i < acceptors || i >= acceptors + replicas;
            if acceptor {
                *s = rrng.gen_range(-20e-6..=20e-6);
            }
        }
    }
    let safety_ops = opts.ops * 3 / 4;
    let bug_names = UnsafeBugs::NAMES
        .iter()
        .copied()
        .filter(|n| bug_on(&opts.bugs, n))
        .collect();
    let ring_decision = (protocol == Protocol::RingPaxos).then(|| {
        if let Some(d) = opts.ring_decision {
            d
        } else if stream(seed, STREAM_RING_DECISION).gen_bool(0.5) {
            RingDecision::Acceptor
        } else {
            RingDecision::Coordinator
        }
    });
    // Membership changes: their own stream, so that seeds without them run as before.
    let member_changes = ds.is_none()
        && match opts.members {
            MembersChoice::Off => false,
            MembersChoice::On => true,
            MembersChoice::Swarm => stream(seed, STREAM_MEMBERS).gen_bool(0.25),
        };
    if member_changes {
        // The joining node's clock, after every other node's.
        let skew = stream(seed, STREAM_MEMBERS).gen_range(-skew_max..=skew_max);
        clock_skew.push(skew);
    }
    let params = SeedParams {
        seed,
        protocol,
        ring_decision,
        speculative,
        partitions,
        key_space,
        early_replies,
        batchers,
        batcher_interval_ms,
        value_interval_ms,
        session_lease_ms,
        psmr_threads,
        psmr_optimistic,
        member_changes,
        rings,
        ring_m,
        ring_delta_ms,
        acceptors,
        replicas,
        window_instances_max,
        batch_bytes_max,
        batch_delay_ms,
        checkpoint_instances,
        clients,
        ops: opts.ops,
        client,
        net: NetParams {
            peer,
            client: client_timing,
            peer_faults,
            client_faults,
            nic: None,
        },
        disk,
        clock_skew,
        faults: FaultParams {
            classes,
            partition_per_s,
            partition_ns_max,
            crash_per_s,
            down_ns_max,
            pause_per_s,
            pause_ns_max,
        },
        safety_ops,
        safety_ns_max: 30 * SECONDS,
        liveness_ns_max: 60 * SECONDS,
        bugs: opts.bugs.clone(),
        bug_names,
        flags: opts.flags(),
        service: service.into(),
        dssmr: ds,
        geo: None,
    };
    match draw_geo(seed, opts) {
        None => params,
        Some((geo, clients, timeout_ns)) => {
            let service = match opts.service {
                ServiceChoice::Swarm if stream(seed, STREAM_SERVICE).gen_bool(1.0 / 3.0) => "kv",
                ServiceChoice::Swarm | ServiceChoice::GeoBtree => "geo-btree",
                ServiceChoice::Btree => "btree",
                ServiceChoice::Kv => "kv",
            };
            let mut p = geo_seed(params, geo, clients, timeout_ns);
            p.service = service.into();
            p
        }
    }
}

/// The service of a seed that is not a GeoPaxos+ or EPaxos one (`ds`: an S-SMR/DS-SMR
/// seed), from a stream of its own: the key-value store in a quarter of the swarm's.
fn draw_service(seed: u64, opts: &SimOptions, ds: bool) -> &'static str {
    match (ds, opts.service) {
        (_, ServiceChoice::Kv) => "kv",
        (_, ServiceChoice::Swarm) if stream(seed, STREAM_SERVICE).gen_bool(0.25) => "kv",
        (true, _) => "chirper",
        (false, ServiceChoice::GeoBtree) => "geo-btree",
        (false, _) => "btree",
    }
}

/// The GeoPaxos+ or EPaxos part of a seed (`None` unless [`SimOptions::geo`] is on),
/// from a stream of its own, and the seed's clients and their timeout. Every value is
/// drawn whichever ordering the seed runs, so an even seed draws alike under `--geo
/// both` and `--geo geopaxos+` (an odd one under `both` and `epaxos`).
fn draw_geo(seed: u64, opts: &SimOptions) -> Option<(GeoParams, u32, Time)> {
    let ordering = match opts.geo {
        GeoChoice::Off => return None,
        GeoChoice::GeoPaxosPlus => GeoOrdering::GeoPaxosPlus,
        GeoChoice::GeoPaxos => GeoOrdering::GeoPaxos,
        GeoChoice::Epaxos => GeoOrdering::Epaxos,
        GeoChoice::Alternate if seed.is_multiple_of(2) => GeoOrdering::GeoPaxosPlus,
        GeoChoice::Alternate => GeoOrdering::Epaxos,
    };
    let mut g = stream(seed, STREAM_GEO);
    let keys = g.gen_range(50..=400u64);
    let order = g.gen_range(4..=8usize);
    // DOPs in half of the GeoPaxos+ seeds, a few hundred milliseconds apart (a DOP
    // takes a round of every serializer: about two of the widest round trips).
    let dop = if g.gen_bool(0.5) {
        0
    } else {
        g.gen_range(6..=15u64) * 100
    };
    let brute_force = g.gen_bool(0.5);
    let value_bytes = *[8usize, 16, 100].choose(&mut g).expect("non-empty");
    // TOML integers are signed.
    let tree_seed = g.gen_range(0..1u64 << 62);
    // Clients write beyond the initial keys too, so that inserts add keys and split.
    let key_space = keys + g.gen_range(keys / 4..=keys);
    let read_percent = g.gen_range(20..=80);
    let insert_percent = g.gen_range(10..=50);
    let local_percent = if g.gen_bool(0.5) {
        g.gen_range(30..=90)
    } else {
        0
    };
    // Hot keys (every region's clients on a few keys) make conflicting commands
    // concurrent, which is what the planted ordering bugs need to show.
    let hot_percent = if g.gen_bool(0.5) {
        g.gen_range(20..=60)
    } else {
        0
    };
    let hot_len = g.gen_range(2..=12u64);
    let hot_lo = g.gen_range(0..key_space - hot_len);
    // At least one client per region; timeouts of a few wide-area round trips.
    let clients = g.gen_range(3..=9u32).min(opts.ops.max(1) as u32);
    let timeout_ns = g.gen_range(300..=1500) * MILLIS;
    let geo = GeoParams {
        ordering,
        keys,
        order,
        dop_interval_ms: if ordering == GeoOrdering::GeoPaxosPlus {
            dop
        } else {
            0
        },
        brute_force,
        value_bytes,
        tree_seed,
        workload: crate::client::GeoWorkload {
            keys,
            key_space,
            regions: 3,
            read_percent,
            insert_percent,
            local_percent,
            hot_percent,
            hot_lo,
            hot_len,
        },
    };
    Some((geo, clients, timeout_ns))
}

/// A seed's parameters made a geo seed's: the paper's three nodes (each an acceptor
/// and a replica), Multi-Paxos serializers (GeoPaxos+) or EPaxos, nothing the geo
/// orderings do not combine with (partitions, speculation, batchers, P-SMR, rings,
/// Chirper), the geo clients. The timing, disk, network and fault draws stay the
/// seed's.
fn geo_seed(p: SeedParams, geo: GeoParams, clients: u32, timeout_ns: Time) -> SeedParams {
    let op_budget_ns = match p.window_instances_max == 1 && p.batch_bytes_max <= 64 {
        true => 3 * SECONDS,
        false => SECONDS,
    };
    let mut clock_skew = p.clock_skew.clone();
    clock_skew.truncate(3);
    SeedParams {
        protocol: Protocol::MultiPaxos,
        ring_decision: None,
        speculative: false,
        partitions: 1,
        key_space: 1 << 32,
        early_replies: false,
        batchers: Batchers::None,
        batcher_interval_ms: 0,
        session_lease_ms: partita_config::SessionsSection::default().lease_ms,
        psmr_threads: 0,
        psmr_optimistic: false,
        member_changes: false,
        rings: 0,
        ring_m: 1,
        ring_delta_ms: 5,
        acceptors: 3,
        replicas: 3,
        clients,
        client: ClientParams {
            timeout_ns,
            keys: geo.workload.key_space,
            ..p.client.clone()
        },
        clock_skew,
        // Operations cross the emulated WAN (a few hundred milliseconds each, more
        // for inserts that split and for DOPs): after healing, every client's
        // remaining operations get a second each on top of the swarm's minute. A
        // serializer with one value in flight and values of one command (64 bytes)
        // decides one command per wide-area round trip, and an operation takes
        // several (an entry in each of its serializers, clock entries, orders again
        // after DOPs): such seeds ran at 2.0-2.3 s per operation per client from
        // their first healthy second on (seeds 5 and 152 of `partita sim --ops 2000
        // --geo geopaxos+`, every operation answered, none stuck), so they get three.
        liveness_ns_max: p.liveness_ns_max + (p.ops / u64::from(clients.max(1)) + 1) * op_budget_ns,
        dssmr: None,
        geo: Some(geo),
        ..p
    }
}

/// The S-SMR/DS-SMR part of a Chirper seed (`None` for B+tree seeds), from a stream
/// of its own: the data partitions, the scheme, a small social graph (so that
/// commands contend) with few or many followers across communities, and the
/// gathering rule.
fn draw_dssmr(seed: u64, opts: &SimOptions) -> Option<(DsParams, u32)> {
    use partita_dssmr::client::Scheme;
    let mut rng = stream(seed, STREAM_DSSMR);
    let data = match opts.partitioning {
        PartitionChoice::Fixed(n) => n.clamp(1, 8),
        PartitionChoice::Swarm => rng.gen_range(1..=8u32),
    };
    let scheme = match opts.dssmr {
        DssmrChoice::Off => return None,
        DssmrChoice::Fixed(s) => s,
        DssmrChoice::Swarm if rng.gen_bool(0.75) => Scheme::Dssmr,
        DssmrChoice::Swarm => Scheme::Ssmr,
    };
    let communities = rng.gen_range(1..=8u32);
    let per = rng.gen_range(2..=6u32);
    let graph = partita_dssmr::chirper::GraphSpec {
        users: communities * per,
        communities,
        mean_followers: rng.gen_range(1.0..=4.0),
        p_local: rng.gen_range(0.3..=0.95),
        seed,
        scattered: false,
    };
    let d = DsParams {
        scheme,
        graph,
        workload: partita_dssmr::chirper::Workload::Mix,
        gather_where_most: rng.gen_bool(0.5),
        // From the seed, not the stream: a draw here would change every later draw
        // of the seed's parameters.
        await_moves: (seed >> 7) & 1 == 1,
        static_map: if (seed >> 1) & 1 == 1 {
            partita_dssmr::StaticMap::Hashed
        } else {
            partita_dssmr::StaticMap::Service
        },
        kv_pairs: 0,
        swarm: true,
    };
    Some((d, data))
}

fn bug_on(b: &UnsafeBugs, name: &str) -> bool {
    b.is_on(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_a_function_of_the_seed() {
        let o = SimOptions::default();
        let a = draw(17, &o);
        let b = draw(17, &o);
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert_ne!(format!("{a:?}"), format!("{:?}", draw(18, &o)));
    }

    #[test]
    fn protocols_alternate_and_clusters_are_valid() {
        let o = SimOptions::default();
        for seed in 0..40 {
            let p = draw(seed, &o);
            let expect = if seed % 2 == 0 {
                Protocol::RingPaxos
            } else {
                Protocol::MultiPaxos
            };
            assert_eq!(p.protocol, expect);
            let c = p.cluster();
            // Multi-Ring Paxos: every ring has acceptors of its own.
            let rings = match p.rings {
                0 => 1,
                n if p.partitions > 1 || p.psmr_threads > 0 => n as usize + 1,
                n => n as usize,
            };
            assert_eq!(c.membership().acceptors.len(), p.acceptors * rings);
            assert_eq!(c.executors().len(), p.replicas);
            assert_eq!(c.entry_node(), 1);
        }
        // The initial coordinator crashes in some seeds, unless spared.
        assert!((0..40).any(|s| draw(s, &o).faults.has(FaultClass::CrashCoordinator)));
        let spared = SimOptions {
            coordinator_crashes: false,
            ..SimOptions::default()
        };
        assert!((0..40).all(|s| !draw(s, &spared).faults.has(FaultClass::CrashCoordinator)));
    }

    #[test]
    fn switching_a_class_off_keeps_the_other_draws() {
        let mut o = SimOptions {
            faults: FaultSelection::Only(vec![FaultClass::Loss, FaultClass::Dup]),
            ..SimOptions::default()
        };
        let both = draw(5, &o);
        o.without = vec![FaultClass::Loss];
        let one = draw(5, &o);
        assert_eq!(one.net.peer_faults.loss, 0.0);
        assert!(both.net.peer_faults.loss > 0.0);
        assert_eq!(one.net.peer_faults.dup, both.net.peer_faults.dup);
        assert_eq!(one.net.peer, both.net.peer);
        assert_eq!(one.disk, both.disk);
        o.faults = FaultSelection::None;
        assert!(draw(5, &o).faults.classes.is_empty());
    }

    #[test]
    fn early_replies_draw_their_own_stream() {
        let o = SimOptions {
            protocol: ProtocolChoice::RingPaxos,
            speculation: SpeculationChoice::On,
            ..SimOptions::default()
        };
        let drawn: Vec<bool> = (0..40).map(|s| draw(s, &o).early_replies).collect();
        assert!(drawn.iter().any(|&e| e) && drawn.iter().any(|&e| !e));
        for seed in 0..40 {
            let swarm = draw(seed, &o);
            for choice in [EarlyRepliesChoice::On, EarlyRepliesChoice::Off] {
                let fixed = draw(
                    seed,
                    &SimOptions {
                        early_replies: choice,
                        ..o.clone()
                    },
                );
                assert_eq!(fixed.early_replies, choice == EarlyRepliesChoice::On);
                // Nothing else moves.
                assert_eq!(fixed.net, swarm.net);
                assert_eq!(fixed.disk, swarm.disk);
                assert_eq!(fixed.faults, swarm.faults);
                assert_eq!(fixed.client, swarm.client);
            }
        }
        // Never without speculation.
        let off = SimOptions {
            speculation: SpeculationChoice::Off,
            early_replies: EarlyRepliesChoice::On,
            ..o
        };
        assert!((0..40).all(|s| !draw(s, &off).early_replies));
    }

    #[test]
    fn batchers_draw_their_own_stream() {
        let o = SimOptions::default();
        let drawn: Vec<Batchers> = (0..200).map(|s| draw(s, &o).batchers).collect();
        let none = drawn.iter().filter(|b| **b == Batchers::None).count();
        assert!(
            (70..130).contains(&none),
            "{none} of 200 seeds without batchers"
        );
        assert!(drawn.contains(&Batchers::Standalone(1)));
        assert!(drawn.contains(&Batchers::Standalone(2)));
        assert!(drawn.contains(&Batchers::OnAcceptors));
        // The interval: only with batchers, off for about half of those seeds, and
        // into the cluster file.
        let params: Vec<SeedParams> = (0..200).map(|s| draw(s, &o)).collect();
        assert!(params
            .iter()
            .all(|p| p.batchers != Batchers::None || p.batcher_interval_ms == 0));
        let with: Vec<&SeedParams> = params
            .iter()
            .filter(|p| p.batchers != Batchers::None)
            .collect();
        let on = with.iter().filter(|p| p.batcher_interval_ms > 0).count();
        assert!(
            on * 4 > with.len() && on * 4 < with.len() * 3,
            "{on} of {}",
            with.len()
        );
        assert!(with.iter().all(|p| p.batcher_interval_ms <= 5
            && p.cluster().batching.batcher_interval_ms == p.batcher_interval_ms));
        // The coordinator's value interval: any seed, off for about half.
        let on = params.iter().filter(|p| p.value_interval_ms > 0).count();
        assert!((60..140).contains(&on), "{on} of 200");
        assert!(params.iter().all(|p| p.value_interval_ms <= 5
            && p.cluster().coordinator_config().value_interval_ticks == p.value_interval_ms));
        for seed in 0..40 {
            let swarm = draw(seed, &o);
            if swarm.rings > 0 {
                // Batchers turn rings off, and with them the rings' clocks.
                continue;
            }
            let forced = draw(
                seed,
                &SimOptions {
                    batchers: BatcherChoice::Standalone(2),
                    ..o.clone()
                },
            );
            assert_eq!(forced.batchers, Batchers::Standalone(2));
            // Nothing else moves, and the standalone batchers' clocks come last.
            assert_eq!(forced.net, swarm.net);
            assert_eq!(forced.faults, swarm.faults);
            assert_eq!(forced.client, swarm.client);
            let nodes = swarm.acceptors + swarm.replicas;
            assert_eq!(forced.clock_skew[..nodes], swarm.clock_skew[..nodes]);
            assert_eq!(forced.clock_skew.len(), nodes + 2);
            let m = forced.cluster().membership();
            assert_eq!(m.batchers.len(), 2);
            assert!(m.batchers.iter().all(|&b| b as usize > nodes));
            let on = SeedParams {
                batchers: Batchers::OnAcceptors,
                ..swarm.clone()
            };
            let m = on.cluster().membership();
            assert_eq!(
                m.batchers,
                (2..=swarm.acceptors as NodeId).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn fault_names_parse_back() {
        for c in FaultClass::ALL {
            assert_eq!(FaultClass::parse(c.name()), Ok(c));
        }
        assert!(FaultClass::parse("meteor")
            .unwrap_err()
            .contains("torn-tail"));
    }
}
