//! `partita experiment geo --sim` (paper 004 §VI-B, §VI-C; Figures 5, 6 and 7, and
//! DBT_a against DBT_b): GeoPaxos+, GeoPaxos, Multi-Paxos and EPaxos in a
//! discrete-event, virtual-time model at the paper's scale (3 to 9 replicas, up to
//! 16,200 closed-loop clients), **simulated with an emulated WAN model**, never
//! measured on real processes (`partita experiment geo` without `--sim` refuses: real
//! processes are not yet supported by this experiment).
//!
//! # What is real and what is modelled
//!
//! Real (the project's cores, called in-process by the model): `GeoReplica` (psite,
//! the timestamp merge of the serializers' logs, execution in timestamp order, the
//! delivery decision and resubmission, the geo B+tree with its counters, the DOP with
//! the optimizer), and `Epaxos` (PreAccept, fast and slow paths, dependencies, commit,
//! recovery timers, SCC execution), executing on a geo B+tree.
//!
//! Modelled ([`model`]): the network (one-way delay = RTT / 2 between regions, the
//! paper's 70 / 90 / 150 ms; 0.05 ms inside a region and in the LAN, where every RTT
//! is 0.1 ms; no bandwidth limit, no loss); **each serializer's Paxos group**, which
//! is not run: its leader appends to the decided log at once, sends Phase 2a to its two
//! other acceptors and decides on the first Phase 2b, so an entry is decided after a
//! round trip to its nearest acceptor (a majority of three with the leader), plus the
//! CPU each hop costs; durability (every write is durable at once, for every system);
//! and each replica's CPU ([`cpu`]): `cores` cores shared by a pool of worker threads
//! (client requests), one Paxos thread and one learner thread per serializer (§V: "a
//! learner for each Paxos instance is executed as an independent thread"), or for
//! EPaxos one thread running the core and one executing commands. Throughput
//! saturates when a thread or the cores are busy all the time (the report gives each
//! replica's utilization and its busiest thread).
//!
//! Service times ([`model::CostMode`]): by default (`Measured`) every call into a core
//! is charged its own CPU time, measured around the call with the thread's CPU clock
//! while the model runs; socket sends and receives, replies and the serializers'
//! Paxos Phase 2a / 2b come from this machine's `partita calibrate` table
//! (`crates/sim/calibration/this-machine.toml`). [`calibrate::measure`] also times the
//! cores on an uncontended workload before the sweep (the `costs` of the report):
//! that table (`Table` mode, used by the tests) is deterministic but cannot see that
//! both cores' work per call grows with contention, which decides the results: under
//! load, `TimestampMerge::pop_ready` scans every complete operation each time it is
//! asked (one scan per delivered entry, so a learner's work per entry grows with the
//! operations waiting behind a multi-serializer one), and EPaxos's `on_persisted`
//! retries execution over its dependency graph; each point reports the mean CPU time
//! of every kind of core call (`core_calls`).
//!
//! The systems ([`model::System`]): GeoPaxos+ DBT_a (serializers from the optimizer
//! after a warm-up window of the point's workload, then a DOP every second of the run),
//! GeoPaxos+ DBT_b (random configurations, §VI-A), GeoPaxos (one random serializer per
//! node, no optimizer), Multi-Paxos (every node serialized by replica 0's serializer:
//! one Paxos log, whose timestamp order is its log order) and EPaxos.
//!
//! # The sweeps
//!
//! - Figure 5 (LAN, 8 cores per replica as §VI-A's Xeon L5420): peak throughput with
//!   `lan_clients_per_replica` clients per replica against 3 and 5 replicas for every
//!   system (5(a)), and 3 to 9 replicas for GeoPaxos+ DBT_a (5(b)), for locality,
//!   uniform and skewed access and 50%, 95% and 100% reads.
//! - Figures 6 and 7 (WAN, the paper's three regions, 2 cores per replica as an EC2
//!   m3.large): 54, 5,400 and 16,200 clients spread equally over the regions; the
//!   Europe clients' mean and p95 latency (Figure 6) and the throughput, whose highest
//!   value over the three loads is the peak (Figure 7), for 95% and 100% reads.
//! - Rounds: every WAN point of the targets runs in `rounds` rounds with different
//!   seeds, the systems interleaved within a round; the rest runs once (round 1).
//! - Convergence: the points with the lightest load (`drain_clients_max`, 54 clients)
//!   finish everything in flight after the window and compare every replica's digest
//!   (GeoPaxos family: the full tree digest; EPaxos: the entries, since it orders only
//!   interfering commands and its replicas may lay out leaves differently); a
//!   disagreement fails the run. The heavier points stop at the window's end. The
//!   tests (`tests/geo.rs`) also check linearizability.
//!
//! # Targets
//!
//! - GeoPaxos+ (DBT_a) ≥ 3× EPaxos's WAN peak throughput at 95% reads, skewed.
//! - DBT_a ≥ 2× DBT_b WAN peak throughput, read-only, for each access pattern (§VI-E:
//!   "more than twofold in read-only scenarios, no matter the workload").
//!
//! Each target is the median over the rounds of the per-round ratio, with every
//! round's numbers. A target not met is reported as not met, with what was found.

pub mod calibrate;
pub mod cpu;
pub mod model;
pub mod workload;

use super::{line, panel};
use crate::experiment_partition::Target;
use crate::framework;
use anyhow::Context;
use model::{run_point, Bugs, CostMode, Costs, PointResult, PointSpec, System};
use partita_geo::{Config, GeoBTree, Op, Topology};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use workload::{Access, KeyGen, WorkloadSpec};

/// The experiment's settings.
#[derive(Clone, Debug, Serialize)]
pub struct GeoSimOptions {
    /// The key space; the tree is preloaded with its even keys (value = key).
    pub keys: u64,
    /// Keys per tree node.
    pub order: usize,
    /// Figure 5(a): replica counts run for every system.
    pub lan_replicas: Vec<usize>,
    /// Figure 5(b): further replica counts run for GeoPaxos+ DBT_a only.
    pub lan_replicas_more: Vec<usize>,
    pub lan_read_percents: Vec<u32>,
    /// Clients per replica in the LAN (enough to saturate a replica).
    pub lan_clients_per_replica: usize,
    pub lan_cores: u32,
    pub lan_warmup_ms: u64,
    pub lan_measure_ms: u64,
    pub wan_read_percents: Vec<u32>,
    /// Client counts in the WAN (spread equally over the three regions).
    pub wan_clients: Vec<usize>,
    pub wan_cores: u32,
    pub wan_warmup_ms: u64,
    pub wan_measure_ms: u64,
    /// Worker threads per replica (client requests).
    pub workers: u32,
    /// Locality: requests on the client's own key range, in percent.
    pub local_percent: u32,
    pub zipf_s: f64,
    /// DBT_a: requests of the warm-up window the optimizer sees before the run; 0
    /// means 100 per leaf of the preloaded tree, so that every leaf's counters hold a
    /// representative sample (with a sparse window, a leaf that happened to see a
    /// remote read and no write gets that region as a serializer for free, Equation 1
    /// charging nothing for it, and the run's writes to it then span serializers).
    pub warmup_window_ops: u64,
    /// DBT_a: a DOP every this often during a point (0: none; the reading aid's
    /// procedure is warm-up, DOP, reset, measure).
    pub dop_every_ms: u64,
    /// Rounds of the targets' points.
    pub rounds: u32,
    /// Points with at most this many clients drain after the window and compare every
    /// replica's digest (the others stop at the window's end).
    pub drain_clients_max: usize,
    /// Systems in the WAN sweep (every system runs in the LAN).
    pub wan_systems: Vec<System>,
    pub seed: u64,
    /// Points simulated at once.
    pub jobs: usize,
    /// Time the cores now for the table (true) or use the recorded one.
    pub measure_costs: bool,
    /// Charge the cores' measured CPU time per call, or the table's constants.
    pub cost_mode: CostMode,
    #[serde(skip)]
    pub progress: bool,
}

impl GeoSimOptions {
    /// The paper's scale.
    pub fn full() -> GeoSimOptions {
        GeoSimOptions {
            keys: 200_000,
            order: partita_geo::ORDER_DEFAULT,
            lan_replicas: vec![3, 5],
            lan_replicas_more: vec![7, 9],
            lan_read_percents: vec![50, 95, 100],
            lan_clients_per_replica: 300,
            lan_cores: 8,
            lan_warmup_ms: 50,
            lan_measure_ms: 100,
            wan_read_percents: vec![95, 100],
            wan_clients: vec![54, 5_400, 16_200],
            wan_cores: 2,
            wan_warmup_ms: 600,
            wan_measure_ms: 700,
            workers: 2,
            local_percent: 90,
            zipf_s: 0.99,
            warmup_window_ops: 0,
            dop_every_ms: 0,
            rounds: 3,
            drain_clients_max: 54,
            wan_systems: vec![
                System::GeoPaxosPlus,
                System::GeoPaxosPlusBefore,
                System::Epaxos,
            ],
            seed: 0x0000_46e0,
            jobs: 2,
            measure_costs: true,
            cost_mode: CostMode::Measured,
            progress: false,
        }
    }

    /// A run of a minute or two: a smaller tree, fewer and shorter points, a tenth of
    /// the WAN clients.
    pub fn quick() -> GeoSimOptions {
        GeoSimOptions {
            keys: 40_000,
            lan_replicas: vec![3, 5],
            lan_replicas_more: vec![],
            lan_read_percents: vec![50, 100],
            lan_clients_per_replica: 150,
            lan_warmup_ms: 30,
            lan_measure_ms: 50,
            wan_clients: vec![54, 540, 1_620],
            wan_warmup_ms: 500,
            wan_measure_ms: 500,
            ..GeoSimOptions::full()
        }
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.keys >= 1_000, "keys: at least 1000");
        anyhow::ensure!(self.rounds >= 1, "rounds: at least 1");
        anyhow::ensure!(
            self.lan_replicas
                .iter()
                .chain(&self.lan_replicas_more)
                .all(|n| (3..=16).contains(n)),
            "replicas: 3 to 16"
        );
        anyhow::ensure!(
            self.lan_read_percents
                .iter()
                .chain(&self.wan_read_percents)
                .all(|p| *p <= 100),
            "read shares are percentages"
        );
        anyhow::ensure!(self.jobs >= 1, "jobs: at least 1");
        Ok(())
    }
}

/// One simulated point.
#[derive(Clone, Debug, Serialize)]
pub struct GeoPoint {
    /// "5" (LAN) or "6-7" (WAN).
    pub figure: String,
    pub network: String,
    pub system: String,
    pub replicas: usize,
    pub access: Access,
    pub read_percent: u32,
    pub clients: usize,
    pub round: u32,
    pub seed: u64,
    pub result: PointResult,
}

#[derive(Clone, Debug, Serialize)]
pub struct GeoSimReport {
    pub name: String,
    /// Always true: these numbers come from a model, not from real processes.
    pub simulated: bool,
    pub note: String,
    /// What is the real code, what is modelled, and how.
    pub model: Vec<String>,
    pub machine: String,
    pub options: GeoSimOptions,
    pub costs: Costs,
    pub costs_source: String,
    pub points: Vec<GeoPoint>,
    pub targets: Vec<Target>,
    pub wall_s: f64,
}

const NOTE: &str = "simulated with an emulated WAN model (virtual time; the real GeoReplica and Epaxos cores driven by a discrete-event model of the network, the serializers' Paxos groups and each replica's CPU); not measured on real processes";

fn model_lines(o: &GeoSimOptions) -> Vec<String> {
    vec![
        "real: partita_geo::replica::GeoReplica (psite, TimestampMerge, delivery decision, resubmission, geo B+tree, DOP with the optimizer) for GeoPaxos+, GeoPaxos and Multi-Paxos; partita_consensus::epaxos::Epaxos (fast/slow path, dependencies, recovery timers, SCC execution) for EPaxos, executing on a geo B+tree".into(),
        "modelled: each serializer's Paxos group (3 acceptors: the leader's replica and its two nearest; the leader appends at once, decides on the first Phase 2b: one round trip to its nearest acceptor, plus CPU per hop); no disk (every write durable at once, every system)".into(),
        "modelled: network one-way delay = RTT/2 between regions (California-Virginia 70 ms, Virginia-Europe 90 ms, California-Europe 150 ms RTT), 0.05 ms between a client and its replica and in the LAN (0.1 ms RTT); no bandwidth limit, no loss".into(),
        format!("modelled: per-replica CPU, {} cores in the LAN and {} in the WAN, shared by {} worker threads (client requests), one Paxos and one learner thread per serializer (GeoPaxos family), or one EPaxos core thread and one executor thread; service times calibrated on the real cores (see costs)", o.lan_cores, o.wan_cores, o.workers),
        "Multi-Paxos: every node serialized by replica 0's serializer; a single Paxos log's timestamp order is its log order, so its replicas execute the log in order".into(),
        format!(
            "GeoPaxos+ DBT_a: serializers from a brute-force DOP over a warm-up window of {} requests of the point's own workload executed on the tree (the tree keeps the window's inserts); {}; DBT_b: random configurations; GeoPaxos: one random serializer per node, no DOP",
            if o.warmup_window_ops == 0 { "100 per leaf".to_string() } else { o.warmup_window_ops.to_string() },
            if o.dop_every_ms == 0 { "no DOP during the point (warm-up, DOP, reset, measure)".to_string() } else { format!("then a DOP every {} ms during the point", o.dop_every_ms) }
        ),
        format!("CPU time of the core calls: {:?} ({})", o.cost_mode, match o.cost_mode {
            CostMode::Measured => "each call's own thread CPU time, measured in this process during the run; socket and Paxos-acceptor costs from the table",
            CostMode::Table => "the calibrated table's constants",
        }),
        format!("workload: READ or INSERT of a 100-byte value; key space {} (even keys preloaded); locality {}% local, skewed Zipf {}", o.keys, o.local_percent, o.zipf_s),
    ]
}

pub fn machine() -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!(
        "simulated (virtual time) on {cores} cores of this machine, {} build",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    )
}

// ------------------------------------------------------------------ topologies and trees

/// The WAN: the paper's three regions (0 California, 1 Europe, 2 Virginia).
pub fn wan_topology() -> Topology {
    Topology::paper_three_regions()
}

/// The LAN: `n` replicas, 0.1 ms between any two.
pub fn lan_topology(n: usize) -> Topology {
    let names = (0..n).map(|i| format!("r{i}")).collect();
    let rtt = (0..n)
        .map(|a| (0..n).map(|b| if a == b { 0 } else { 100 }).collect())
        .collect();
    Topology::from_rtt_us(names, rtt).expect("a valid LAN matrix")
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

type TreeKey = (String, usize, System, Access, u32, u64);

/// Trees already built (preloads and DBT_a's optimizations are the slow part).
#[derive(Default)]
pub struct Trees {
    preloads: Mutex<BTreeMap<(String, usize, u64), Arc<GeoBTree>>>,
    configured: Mutex<BTreeMap<TreeKey, Arc<GeoBTree>>>,
}

impl Trees {
    fn preload(&self, net: &str, topology: &Topology, keys: u64, order: usize) -> Arc<GeoBTree> {
        let k = (net.to_string(), topology.n(), keys);
        if let Some(t) = self.preloads.lock().expect("tree lock").get(&k) {
            return t.clone();
        }
        let t = Arc::new(calibrate::preloaded_tree(topology, keys, order, 7));
        self.preloads
            .lock()
            .expect("tree lock")
            .insert(k, t.clone());
        t
    }

    /// The tree every replica of a point starts from.
    #[allow(clippy::too_many_arguments)]
    pub fn tree(
        &self,
        net: &str,
        topology: &Topology,
        system: System,
        w: WorkloadSpec,
        order: usize,
        warmup_window_ops: u64,
        seed: u64,
    ) -> Arc<GeoBTree> {
        let key = (
            net.to_string(),
            topology.n(),
            system,
            w.access,
            w.read_percent,
            seed,
        );
        if let Some(t) = self.configured.lock().expect("tree lock").get(&key) {
            return t.clone();
        }
        let n = topology.n();
        let mut t = (*self.preload(net, topology, w.keys, order)).clone();
        match system {
            System::GeoPaxosPlusBefore => t.randomize_reps(seed),
            System::GeoPaxosPlus => {
                t.randomize_reps(seed);
                // The warm-up window, executed on the tree (counts every access), then
                // the DOP that computes DBT_a and resets the counters.
                let gen = KeyGen::new(w, n);
                let mut rng = StdRng::seed_from_u64(seed ^ 0x3a);
                let window = if warmup_window_ops == 0 {
                    100 * t.nodes().filter(|(_, x)| x.is_leaf()).count() as u64
                } else {
                    warmup_window_ops
                };
                for i in 0..window {
                    let from = (i % n as u64) as usize;
                    let key = gen.key(&mut rng, from);
                    let op = if gen.is_read(&mut rng) {
                        Op::Read { key }
                    } else {
                        Op::Insert {
                            key,
                            value: model::value_of(key),
                        }
                    };
                    t.execute(&op, from).expect("100-byte values fit");
                }
                t.dop();
            }
            System::GeoPaxos => t.initialize_reps(|_, node| {
                Config::single((splitmix(seed ^ node.uid()) % n as u64) as usize)
            }),
            System::MultiPaxos { leader } => t.initialize_reps(|_, _| Config::single(leader)),
            System::Epaxos => {}
        }
        let t = Arc::new(t);
        self.configured
            .lock()
            .expect("tree lock")
            .insert(key, t.clone());
        t
    }
}

// ------------------------------------------------------------------ the sweep

#[derive(Clone, Debug)]
struct Job {
    figure: &'static str,
    wan: bool,
    system: System,
    replicas: usize,
    access: Access,
    read_percent: u32,
    clients: usize,
    round: u32,
}

fn seed_of(o: &GeoSimOptions, j: &Job) -> u64 {
    // The same seed for every system of a configuration in a round: the systems see
    // the same client start times and key draws as far as their runs coincide.
    splitmix(
        o.seed
            ^ (j.round as u64) << 48
            ^ (j.replicas as u64) << 40
            ^ (j.read_percent as u64) << 32
            ^ (j.access as u64) << 24
            ^ j.clients as u64
            ^ if j.wan { 1 << 60 } else { 0 },
    )
}

fn is_target_point(j: &Job) -> bool {
    j.wan
        && ((j.access == Access::Skewed
            && j.read_percent == 95
            && matches!(j.system, System::GeoPaxosPlus | System::Epaxos))
            || (j.read_percent == 100
                && matches!(j.system, System::GeoPaxosPlus | System::GeoPaxosPlusBefore)))
}

fn jobs(o: &GeoSimOptions) -> Vec<Job> {
    let lan_systems = [
        System::GeoPaxosPlus,
        System::GeoPaxosPlusBefore,
        System::GeoPaxos,
        System::MultiPaxos { leader: 0 },
        System::Epaxos,
    ];
    let mut v = Vec::new();
    for round in 1..=o.rounds {
        // WAN first (the targets' points, every round), systems interleaved.
        for &clients in &o.wan_clients {
            for &read_percent in &o.wan_read_percents {
                for access in Access::ALL {
                    for &system in &o.wan_systems {
                        let j = Job {
                            figure: "6-7",
                            wan: true,
                            system,
                            replicas: 3,
                            access,
                            read_percent,
                            clients,
                            round,
                        };
                        if round == 1 || is_target_point(&j) {
                            v.push(j);
                        }
                    }
                }
            }
        }
        if round != 1 {
            continue;
        }
        for &n in o.lan_replicas.iter().chain(&o.lan_replicas_more) {
            for &read_percent in &o.lan_read_percents {
                for access in Access::ALL {
                    for system in lan_systems {
                        if !o.lan_replicas.contains(&n) && system != System::GeoPaxosPlus {
                            continue;
                        }
                        v.push(Job {
                            figure: "5",
                            wan: false,
                            system,
                            replicas: n,
                            access,
                            read_percent,
                            clients: o.lan_clients_per_replica * n,
                            round,
                        });
                    }
                }
            }
        }
    }
    v
}

/// The spec of one point.
#[allow(clippy::too_many_arguments)]
pub fn point_spec(
    o: &GeoSimOptions,
    trees: &Trees,
    costs: &Costs,
    system: System,
    wan: bool,
    replicas: usize,
    workload: WorkloadSpec,
    clients: usize,
    seed: u64,
) -> PointSpec {
    let (net, topology) = if wan {
        ("wan", wan_topology())
    } else {
        ("lan", lan_topology(replicas))
    };
    let tree = trees.tree(
        net,
        &topology,
        system,
        workload,
        o.order,
        o.warmup_window_ops,
        // Trees depend on the round's seed through the workload's warm-up only.
        seed,
    );
    let (warmup_ms, measure_ms, cores) = if wan {
        (o.wan_warmup_ms, o.wan_measure_ms, o.wan_cores)
    } else {
        (o.lan_warmup_ms, o.lan_measure_ms, o.lan_cores)
    };
    PointSpec {
        system,
        topology,
        lan_one_way_ns: 50_000,
        cores,
        workers: o.workers,
        clients,
        workload,
        tree: (*tree).clone(),
        start_spread_ns: (warmup_ms * 1_000_000 / 5).max(1_000_000),
        warmup_ns: warmup_ms * 1_000_000,
        measure_ns: measure_ms * 1_000_000,
        // The lightest load of each configuration drains and compares the replicas'
        // digests; the heavier ones stop at the window's end (draining thousands of
        // requests through a saturated core costs minutes of this machine's time).
        drain: clients <= o.drain_clients_max,
        drain_max_ns: 60_000_000_000,
        geo_tick_ns: if wan { 5_000_000 } else { 500_000 },
        ep_tick_ns: 10_000_000,
        dop_every_ns: (system == System::GeoPaxosPlus && o.dop_every_ms > 0)
            .then_some(o.dop_every_ms * 1_000_000),
        costs: costs.clone(),
        cost_mode: o.cost_mode,
        seed,
        record_history: false,
        bugs: Bugs::default(),
    }
}

fn workload(o: &GeoSimOptions, access: Access, read_percent: u32) -> WorkloadSpec {
    WorkloadSpec {
        access,
        read_percent,
        local_percent: o.local_percent,
        zipf_s: o.zipf_s,
        keys: o.keys,
    }
}

/// Runs the whole experiment.
pub fn run(o: &GeoSimOptions) -> anyhow::Result<GeoSimReport> {
    o.validate()?;
    let started = Instant::now();
    let (costs, costs_source) = if o.measure_costs {
        if o.progress {
            eprintln!("timing the real cores in this process (calibration)...");
        }
        (
            calibrate::measure(o.keys, 20_000, o.seed),
            format!(
                "cores timed in this process just now ({} build, see calibrate.rs); socket and Paxos-acceptor costs from crates/sim/calibration/this-machine.toml (partita calibrate)",
                if cfg!(debug_assertions) { "debug" } else { "release" }
            ),
        )
    } else {
        (
            calibrate::recorded(),
            "the recorded table (calibrate::recorded); socket and Paxos-acceptor costs from crates/sim/calibration/this-machine.toml".into(),
        )
    };
    if o.progress {
        eprintln!("costs (ns): {}", serde_json::to_string(&costs)?);
    }
    let jobs = jobs(o);
    let total = jobs.len();
    let trees = Trees::default();
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Option<GeoPoint>>> = Mutex::new(vec![None; total]);
    let failure: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..o.jobs.min(total.max(1)) {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().expect("job lock");
                    if *n >= total || failure.lock().expect("failure lock").is_some() {
                        return;
                    }
                    *n += 1;
                    *n - 1
                };
                let j = &jobs[i];
                let seed = seed_of(o, j);
                let w = workload(o, j.access, j.read_percent);
                let spec = point_spec(
                    o, &trees, &costs, j.system, j.wan, j.replicas, w, j.clients, seed,
                );
                let out = run_point(spec);
                let r = out.result;
                if r.digests_equal == Some(false) || r.drained == Some(false) {
                    *failure.lock().expect("failure lock") = Some(format!(
                        "{} {} {} {}% reads, {} clients, round {}: digests equal {:?}, drained {:?}",
                        if j.wan { "WAN" } else { "LAN" },
                        j.system.label(),
                        j.access.name(),
                        j.read_percent,
                        j.clients,
                        j.round,
                        r.digests_equal,
                        r.drained
                    ));
                }
                if o.progress {
                    let eu = r.regions.get(1).map(|x| x.mean_ms).unwrap_or(0.0);
                    eprintln!(
                        "[{:>3}/{total}] round {} {} n={} {:<8} {:>3}% reads {:>6} clients {:<16} {:>9.0} ops/s  mean {:>7.1} ms{}  cpu max {:.2} ({} {:.2})  {:.1} s wall",
                        i + 1,
                        j.round,
                        if j.wan { "WAN" } else { "LAN" },
                        j.replicas,
                        j.access.name(),
                        j.read_percent,
                        j.clients,
                        j.system.label(),
                        r.throughput_ops_per_s,
                        r.latency_ms_mean,
                        if j.wan { format!(" (Europe {eu:.1})") } else { String::new() },
                        r.cpu_utilization.iter().cloned().fold(0.0, f64::max),
                        r.busiest_thread.iter().max_by(|a, b| a.1.total_cmp(&b.1)).map(|t| t.0.as_str()).unwrap_or(""),
                        r.busiest_thread.iter().map(|t| t.1).fold(0.0, f64::max),
                        r.wall_s
                    );
                }
                results.lock().expect("results lock")[i] = Some(GeoPoint {
                    figure: j.figure.into(),
                    network: if j.wan { "WAN" } else { "LAN" }.into(),
                    system: j.system.label().into(),
                    replicas: j.replicas,
                    access: j.access,
                    read_percent: j.read_percent,
                    clients: j.clients,
                    round: j.round,
                    seed,
                    result: r,
                });
            });
        }
    });
    if let Some(f) = failure.into_inner().expect("failure lock") {
        anyhow::bail!("a point ended with replicas that disagree or work left over: {f}");
    }
    let points: Vec<GeoPoint> = results
        .into_inner()
        .expect("results lock")
        .into_iter()
        .map(|p| p.expect("every job ran"))
        .collect();
    let mut r = GeoSimReport {
        name: "geo-sim".into(),
        simulated: true,
        note: NOTE.into(),
        model: model_lines(o),
        machine: machine(),
        options: o.clone(),
        costs,
        costs_source,
        points,
        targets: Vec::new(),
        wall_s: 0.0,
    };
    r.targets = targets(&r);
    r.wall_s = started.elapsed().as_secs_f64();
    Ok(r)
}

// ------------------------------------------------------------------ targets

/// The WAN peak throughput (the highest over the client counts) of `system` in `round`,
/// and the client count it was reached at.
fn wan_peak<'a>(
    r: &'a GeoSimReport,
    system: &str,
    access: Access,
    reads: u32,
    round: u32,
) -> Option<(f64, &'a GeoPoint)> {
    r.points
        .iter()
        .filter(|p| {
            p.network == "WAN"
                && p.system == system
                && p.access == access
                && p.read_percent == reads
                && p.round == round
        })
        .max_by(|a, b| {
            a.result
                .throughput_ops_per_s
                .total_cmp(&b.result.throughput_ops_per_s)
        })
        .map(|p| (p.result.throughput_ops_per_s, p))
}

fn describe(p: &GeoPoint) -> String {
    let r = &p.result;
    let busiest = r
        .busiest_thread
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|t| format!("{} {:.2}", t.0, t.1))
        .unwrap_or_default();
    let mut s = format!(
        "{} {:.0} ops/s at {} clients, mean {:.1} ms, p95 {:.1} ms, busiest thread {busiest}",
        p.system, r.throughput_ops_per_s, p.clients, r.latency_ms_mean, r.latency_ms_p95
    );
    if let Some(e) = &r.epaxos {
        s += &format!(
            ", slow path {:.1}%, recoveries {}",
            100.0 * e.slow_path_share,
            e.recoveries_started
        );
    }
    if let Some(g) = &r.geo {
        s += &format!(
            ", multi-serializer {} of {} executed",
            g.executed_multi_serializer, g.executed
        );
    }
    s
}

fn ratio_target(
    r: &GeoSimReport,
    what: String,
    num: &str,
    den: &str,
    access: Access,
    reads: u32,
    required: f64,
) -> Option<Target> {
    let mut ratios = Vec::new();
    let mut evidence = Vec::new();
    for round in 1..=r.options.rounds {
        let (Some((a, pa)), Some((b, pb))) = (
            wan_peak(r, num, access, reads, round),
            wan_peak(r, den, access, reads, round),
        ) else {
            continue;
        };
        let ratio = a / b.max(f64::MIN_POSITIVE);
        ratios.push(ratio);
        evidence.push(format!(
            "round {round}: {:.2}x = {} / {}",
            ratio,
            describe(pa),
            describe(pb)
        ));
    }
    Target::of_rounds(what, ratios, required, evidence.join("; "))
}

fn targets(r: &GeoSimReport) -> Vec<Target> {
    let mut v = Vec::new();
    let scale = if r.options.wan_clients.iter().max() == Some(&16_200) {
        "the paper's client counts"
    } else {
        "NOT the paper's client counts (a --quick run)"
    };
    v.extend(ratio_target(
        r,
        format!("GeoPaxos+ (DBT_a) / EPaxos WAN peak throughput, skewed, 95% reads (simulated with an emulated WAN model; {scale}; median of the rounds)"),
        System::GeoPaxosPlus.label(),
        System::Epaxos.label(),
        Access::Skewed,
        95,
        3.0,
    ));
    for access in Access::ALL {
        v.extend(ratio_target(
            r,
            format!(
                "DBT_a / DBT_b WAN peak throughput, read-only, {} (simulated with an emulated WAN model; {scale}; median of the rounds)",
                access.name()
            ),
            System::GeoPaxosPlus.label(),
            System::GeoPaxosPlusBefore.label(),
            access,
            100,
            2.0,
        ));
    }
    v
}

// ------------------------------------------------------------------ output

/// A readable table of every point and the targets.
pub fn table(r: &GeoSimReport) -> String {
    let mut s = format!("{} ({})\n{}\n", r.name, r.note, r.machine);
    s += &format!("costs: {}\n", r.costs_source);
    s += &format!(
        "{:<4} {:>2} {:>2} {:<8} {:>4} {:>6} {:<16} {:>10} {:>8} {:>8} {:>8} {:>8} {:>6} {:<22}\n",
        "net",
        "rd",
        "n",
        "access",
        "read",
        "client",
        "system",
        "ops/s",
        "mean ms",
        "p95 ms",
        "EU mean",
        "EU p95",
        "cpu",
        "busiest thread"
    );
    for p in &r.points {
        let x = &p.result;
        let (eu_mean, eu_p95) = if p.network == "WAN" {
            x.regions
                .get(1)
                .map(|e| (e.mean_ms, e.p95_ms))
                .unwrap_or((0.0, 0.0))
        } else {
            (f64::NAN, f64::NAN)
        };
        let busiest = x
            .busiest_thread
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|t| format!("{} {:.2}", t.0, t.1))
            .unwrap_or_default();
        s += &format!(
            "{:<4} {:>2} {:>2} {:<8} {:>3}% {:>6} {:<16} {:>10.0} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>6.2} {:<22}\n",
            p.network,
            p.round,
            p.replicas,
            p.access.name(),
            p.read_percent,
            p.clients,
            p.system,
            x.throughput_ops_per_s,
            x.latency_ms_mean,
            x.latency_ms_p95,
            eu_mean,
            eu_p95,
            x.cpu_utilization.iter().cloned().fold(0.0, f64::max),
            busiest
        );
    }
    for t in &r.targets {
        s += &t.summary(2);
    }
    s
}

fn curve(
    r: &GeoSimReport,
    keep: impl Fn(&GeoPoint) -> bool,
    x: impl Fn(&GeoPoint) -> f64,
    y: impl Fn(&GeoPoint) -> f64,
) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = r
        .points
        .iter()
        .filter(|p| p.round == 1 && keep(p))
        .map(|p| (x(p), y(p)))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

fn systems_in(r: &GeoSimReport, network: &str) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for p in &r.points {
        if p.network == network && !v.contains(&p.system) {
            v.push(p.system.clone());
        }
    }
    v
}

/// Figures 5(a), 5(b), 6 and 7 (round 1's points).
pub fn figures(r: &GeoSimReport) -> Vec<(String, partita_plot::Figure)> {
    let kops = |p: &GeoPoint| p.result.throughput_ops_per_s / 1e3;
    let foot = format!("{}. {}", NOTE, r.model.join(". "));
    let mut figs = Vec::new();
    // Figure 5(a): LAN peak throughput against replicas, every system.
    let mut panels = Vec::new();
    let lan_systems = systems_in(r, "LAN");
    for &reads in &r.options.lan_read_percents {
        for access in Access::ALL {
            let series = lan_systems
                .iter()
                .map(|sys| {
                    line(
                        sys,
                        curve(
                            r,
                            |p| {
                                p.network == "LAN"
                                    && &p.system == sys
                                    && p.access == access
                                    && p.read_percent == reads
                                    && r.options.lan_replicas.contains(&p.replicas)
                            },
                            |p| p.replicas as f64,
                            kops,
                        ),
                    )
                })
                .collect();
            panels.push(panel(
                &format!("{}, {reads}% reads", access.name()),
                "replicas",
                "Kops/s",
                series,
            ));
        }
    }
    figs.push((
        "fig5a".to_string(),
        framework::figure(
            "Paper 004 Figure 5(a): peak throughput in a LAN (simulated)",
            &foot,
            &panels,
            3,
        ),
    ));
    // Figure 5(b): GeoPaxos+ up to 9 replicas, one curve per read share.
    let mut panels = Vec::new();
    for access in Access::ALL {
        let series = r
            .options
            .lan_read_percents
            .iter()
            .map(|&reads| {
                line(
                    &format!("{reads}% reads"),
                    curve(
                        r,
                        |p| {
                            p.network == "LAN"
                                && p.system == System::GeoPaxosPlus.label()
                                && p.access == access
                                && p.read_percent == reads
                        },
                        |p| p.replicas as f64,
                        kops,
                    ),
                )
            })
            .collect();
        panels.push(panel(access.name(), "replicas", "Kops/s", series));
    }
    figs.push((
        "fig5b".to_string(),
        framework::figure(
            "Paper 004 Figure 5(b): GeoPaxos+ (DBT_a) with up to 9 replicas in a LAN (simulated)",
            &foot,
            &panels,
            3,
        ),
    ));
    // Figure 6: Europe clients' latency against clients, mean and p95.
    let wan_systems = systems_in(r, "WAN");
    let mut panels = Vec::new();
    for &reads in &r.options.wan_read_percents {
        for access in Access::ALL {
            let mut series = Vec::new();
            for sys in &wan_systems {
                let keep = |p: &GeoPoint| {
                    p.network == "WAN"
                        && &p.system == sys
                        && p.access == access
                        && p.read_percent == reads
                };
                series.push(line(
                    &format!("{sys} mean"),
                    curve(
                        r,
                        keep,
                        |p| p.clients as f64,
                        |p| p.result.regions[1].mean_ms,
                    ),
                ));
                series.push(line(
                    &format!("{sys} p95"),
                    curve(
                        r,
                        keep,
                        |p| p.clients as f64,
                        |p| p.result.regions[1].p95_ms,
                    ),
                ));
            }
            let mut pnl = panel(
                &format!("{}, {reads}% reads", access.name()),
                "clients (all regions)",
                "Europe latency (ms)",
                series,
            );
            pnl.log_x = true;
            pnl.log_y = true;
            panels.push(pnl);
        }
    }
    figs.push((
        "fig6".to_string(),
        framework::figure(
            "Paper 004 Figure 6: latency of the Europe clients in the WAN, mean and p95 (simulated)",
            &foot,
            &panels,
            3,
        ),
    ));
    // Figure 7: WAN peak throughput per access pattern (x: 1 locality, 2 uniform,
    // 3 skewed), one panel per read share.
    let mut panels = Vec::new();
    for &reads in &r.options.wan_read_percents {
        let series = wan_systems
            .iter()
            .map(|sys| {
                let pts = Access::ALL
                    .iter()
                    .enumerate()
                    .filter_map(|(i, &a)| {
                        wan_peak(r, sys, a, reads, 1).map(|(t, _)| (i as f64 + 1.0, t / 1e3))
                    })
                    .collect();
                line(sys, pts)
            })
            .collect();
        panels.push(panel(
            &format!("{reads}% reads"),
            "1 locality, 2 uniform, 3 skewed",
            "peak Kops/s",
            series,
        ));
    }
    figs.push((
        "fig7".to_string(),
        framework::figure(
            "Paper 004 Figure 7: peak throughput in the WAN, DBT_a and DBT_b (simulated)",
            &foot,
            &panels,
            2,
        ),
    ));
    figs
}

/// Writes the report to `json` and the figures to `figures_dir` (beside the report
/// when None) as `STEM-fig5a.svg`, ... Returns every file written.
pub fn write(
    r: &GeoSimReport,
    json: &Path,
    figures_dir: Option<&Path>,
) -> anyhow::Result<Vec<PathBuf>> {
    if let Some(dir) = json.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(json, serde_json::to_string_pretty(r)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let mut files = vec![json.to_path_buf()];
    let stem = json
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "geo-sim".into());
    let dir = figures_dir
        .map(Path::to_path_buf)
        .or_else(|| json.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    if !dir.as_os_str().is_empty() {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for (suffix, fig) in figures(r) {
        let at = dir.join(format!("{stem}-{suffix}"));
        files.extend(
            fig.write(&at)
                .with_context(|| format!("drawing {}", at.display()))?,
        );
    }
    Ok(files)
}
