//! `partita experiment geo --sim` (paper 004 §VI-B, §VI-C; Figures 5, 6 and 7, and
//! DBT_a against DBT_b): GeoPaxos+, GeoPaxos, Multi-Paxos and EPaxos at the paper's
//! scale (3 to 9 replicas, up to 16,200 closed-loop clients), **simulated with an
//! emulated WAN**, in the one simulator every experiment uses (`partita_sim::bench`),
//! never measured on real processes (`partita experiment geo` without `--sim` runs the
//! real-process experiment, [`super::geo_real`]).
//!
//! # What runs
//!
//! Every point is a `partita_sim::bench` run of a cluster file the real loader accepts:
//! every node a real `NodeCore` (GeoPaxos+'s and GeoPaxos's serializers are real
//! Multi-Paxos groups, with their acceptors' write-ahead logs; EPaxos its real core;
//! Multi-Paxos the real protocol), every replica executing on the common replica,
//! each node one CPU charged from the cost table, every endpoint a 1 Gbit/s card, the
//! `[wan]` matrix's one-way delays between regions (RTT / 2 of the paper's 70, 90 and
//! 150 ms) and 0.05 ms inside one. Clients enter at their region's replica.
//!
//! # The systems
//!
//! - **GeoPaxos+ DBT_a**: `protocol = "geopaxos+"`, `placement = "random"`, a DOP
//!   every quarter of the run (the optimizer, hot+LRU, over the counters of the run's
//!   own workload); the measured window (60% to 74% of the run, for every system) lies
//!   between the first two DOPs, so what is measured is the optimized placement
//!   (warm-up, DOP, measure).
//! - **GeoPaxos+ DBT_b**: the same random placement, never a DOP (§VI-A).
//! - **GeoPaxos**: `protocol = "geopaxos"` (one serializer per object, never moved).
//! - **Multi-Paxos** (LAN only, as in the paper): `protocol = "multi-paxos"` over the
//!   B+tree preloaded with the same number of keys, node 1 leading.
//! - **EPaxos**: `protocol = "epaxos"` over the geo B+tree's key-value commands.
//!
//! # The sweeps
//!
//! - Figure 5 (LAN): `lan_clients_per_replica` clients per replica against 3 and 5
//!   replicas for every system (5(a)) and 3 to 9 replicas for DBT_a (5(b)), every node
//!   an acceptor and a replica, for locality, uniform and skewed access and each read
//!   share.
//! - Figures 6 and 7 (WAN, the paper's three regions, one node each): 54, 5,400 and
//!   16,200 clients spread equally over the regions; the Europe clients' mean and p95
//!   latency (Figure 6) and the throughput, whose highest value over the loads is the
//!   peak (Figure 7).
//! - Rounds: the WAN points of the targets run in `rounds` rounds with different seeds,
//!   the systems interleaved within a round; the rest run once (round 1).
//!
//! # Targets
//!
//! - GeoPaxos+ (DBT_a) ≥ 3× EPaxos's WAN peak throughput at 95% reads, skewed.
//! - DBT_a ≥ 2× DBT_b WAN peak throughput, read-only, for each access pattern (§VI-E).
//!
//! Each target is the median over the rounds of the per-round ratio, with every round's
//! numbers. A target not met is reported as not met.

use super::{line, panel};
use crate::experiment_partition::Target;
use crate::framework;
use anyhow::Context;
use partita_config::{ClusterConfig, EpaxosSection, GeoSection, OrderingSection, Role, WanSection};
use partita_consensus::Protocol;
use partita_geo::Placement;
use partita_sim::bench::{self, BenchReport, BenchSpec, GeoKeys, Workload};
use partita_sim::queue::MILLIS;
use partita_sim::CostTable;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// A system of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum System {
    /// GeoPaxos+ with the optimizer's placement (DBT_a).
    GeoPaxosPlus,
    /// GeoPaxos+ with its random initial placement and no DOP (DBT_b).
    GeoPaxosPlusBefore,
    GeoPaxos,
    MultiPaxos,
    Epaxos,
}

impl System {
    pub fn label(self) -> &'static str {
        match self {
            System::GeoPaxosPlus => "GeoPaxos+ DBT_a",
            System::GeoPaxosPlusBefore => "GeoPaxos+ DBT_b",
            System::GeoPaxos => "GeoPaxos",
            System::MultiPaxos => "Multi-Paxos",
            System::Epaxos => "EPaxos",
        }
    }
}

/// The paper's access patterns (§VI-A).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Access {
    Locality,
    Uniform,
    Skewed,
}

impl Access {
    pub const ALL: [Access; 3] = [Access::Locality, Access::Uniform, Access::Skewed];

    pub fn name(self) -> &'static str {
        match self {
            Access::Locality => "locality",
            Access::Uniform => "uniform",
            Access::Skewed => "skewed",
        }
    }
}

/// The experiment's settings.
#[derive(Clone, Debug, Serialize)]
pub struct GeoSimOptions {
    /// Keys `0..keys` every replica starts with.
    pub keys: u64,
    /// Keys per tree node.
    pub order: usize,
    /// Figure 5(a): replica counts run for every system.
    pub lan_replicas: Vec<usize>,
    /// Figure 5(b): further replica counts run for GeoPaxos+ DBT_a only.
    pub lan_replicas_more: Vec<usize>,
    pub lan_read_percents: Vec<u32>,
    pub lan_clients_per_replica: u32,
    /// Virtual duration of a LAN point (60% to 74% of it is measured).
    pub lan_ms: u64,
    pub wan_read_percents: Vec<u32>,
    /// Client counts in the WAN (spread equally over the three regions).
    pub wan_clients: Vec<u32>,
    /// Virtual duration of a WAN point (60% to 74% of it is measured).
    pub wan_ms: u64,
    /// Locality: requests on the client's own region's key range, in percent.
    pub local_percent: u32,
    /// Skew: the Zipf exponent, in hundredths.
    pub zipf_s_percent: u32,
    /// Instances in flight per Paxos group (each serializer's, Multi-Paxos's).
    pub window_instances: usize,
    /// Rounds of the targets' points.
    pub rounds: u32,
    /// Systems in the WAN sweep (every system runs in the LAN).
    pub wan_systems: Vec<System>,
    pub seed: u64,
    /// Points simulated at once.
    pub jobs: usize,
    /// The CPU cost table and where it came from.
    #[serde(skip)]
    pub cost: CostTable,
    pub cost_source: String,
    #[serde(skip)]
    pub progress: bool,
}

impl GeoSimOptions {
    /// The paper's scale.
    pub fn full() -> GeoSimOptions {
        GeoSimOptions {
            keys: 200_000,
            order: 32,
            lan_replicas: vec![3, 5],
            lan_replicas_more: vec![7, 9],
            lan_read_percents: vec![50, 95, 100],
            lan_clients_per_replica: 300,
            lan_ms: 1_600,
            wan_read_percents: vec![95, 100],
            wan_clients: vec![54, 5_400, 16_200],
            wan_ms: 8_000,
            local_percent: 90,
            zipf_s_percent: 99,
            window_instances: 256,
            rounds: 3,
            wan_systems: vec![
                System::GeoPaxosPlus,
                System::GeoPaxosPlusBefore,
                System::Epaxos,
            ],
            seed: 0x0000_46e0,
            jobs: 2,
            cost: this_machine(),
            cost_source:
                "this machine's table (crates/sim/calibration/this-machine.toml, partita calibrate)"
                    .into(),
            progress: false,
        }
    }

    /// A run of a minute or two: a smaller tree, fewer points, a tenth of the WAN
    /// clients.
    pub fn quick() -> GeoSimOptions {
        GeoSimOptions {
            keys: 30_000,
            lan_replicas: vec![3, 5],
            lan_replicas_more: vec![],
            lan_read_percents: vec![50, 100],
            lan_clients_per_replica: 100,
            wan_clients: vec![54, 540, 1_620],
            rounds: 2,
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
        anyhow::ensure!(
            !(self.lan_replicas.is_empty()
                && self.lan_replicas_more.is_empty()
                && self.wan_clients.is_empty()),
            "no point to run: no LAN replica count and no WAN client count"
        );
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
    pub clients: u32,
    pub round: u32,
    pub seed: u64,
    /// The workload as `partita bench --workload` spells it.
    pub workload: String,
    pub throughput_ops_per_s: f64,
    pub latency_ms_mean: f64,
    pub latency_ms_p99: f64,
    /// The Europe clients' (WAN), Figure 6's.
    pub europe_ms_mean: Option<f64>,
    pub europe_ms_p95: Option<f64>,
    /// The node whose CPU was busiest in the window, and how busy.
    pub busiest: String,
    /// Wall-clock seconds this machine took to simulate the point.
    pub wall_s: f64,
    pub report: BenchReport,
}

#[derive(Clone, Debug, Serialize)]
pub struct GeoSimReport {
    pub name: String,
    /// Always true: these numbers come from the simulator, not from real processes.
    pub simulated: bool,
    pub note: String,
    pub setup: Vec<String>,
    pub machine: String,
    pub options: GeoSimOptions,
    pub points: Vec<GeoPoint>,
    pub targets: Vec<Target>,
    pub wall_s: f64,
}

const NOTE: &str = "simulated with an emulated WAN (virtual time; every node a real NodeCore, GeoPaxos+'s serializers real Multi-Paxos groups, driven by the deterministic simulator); not measured on real processes";

fn setup_lines(o: &GeoSimOptions) -> Vec<String> {
    vec![
        "every node a real NodeCore: GeoPaxos+ and GeoPaxos (serializers: Multi-Paxos groups over the cluster's acceptors, the timestamp merge, the geo B+tree with its counters, DOPs with the optimizer), EPaxos, Multi-Paxos; execution on the common replica; write-ahead logs on a simulated disk with fsync".into(),
        "network: one-way delay = RTT/2 between regions (California-Virginia 70 ms, Virginia-Europe 90 ms, California-Europe 150 ms RTT), 0.05 ms (+ up to 0.01 ms jitter) inside a region and in the LAN; a 1 Gbit/s card per endpoint; clients enter at their region's replica".into(),
        format!("CPU: one per node, charged from {}", o.cost_source),
        format!(
            "DBT_a: random initial placement, a DOP (hot+LRU) every {} ms (LAN) / {} ms (WAN), measured between the first two; DBT_b: the same random placement, no DOP; GeoPaxos: one serializer per object; Multi-Paxos (LAN only): node 1 leads, the B+tree preloaded with {} keys",
            lan_dop_ms(o), wan_dop_ms(o), o.keys
        ),
        format!(
            "workload: paper 004's READ (one in ten GET-NEXT, one in ten GET-PREV) and UPDATE (one in ten INSERT) over keys 0..{}; locality: {}% of a client's keys in its region's range; skewed: Zipf {:.2}; {} instances in flight per Paxos group",
            o.keys, o.local_percent, o.zipf_s_percent as f64 / 100.0, o.window_instances
        ),
    ]
}

/// The measured window of every point: from 60% of the run to 74% of it.
const TRIM_START: f64 = 0.60;
const TRIM_END: f64 = 0.26;

/// A DOP every quarter of the run: the first replica takes its first look at the clock
/// as the first interval ends and submits the first DOP one interval later, at half
/// the run, and the second at three quarters, so the measured window starts a tenth of
/// the run after the first DOP was submitted (time to order it at every serializer)
/// and ends before the second.
fn wan_dop_ms(o: &GeoSimOptions) -> u64 {
    (o.wan_ms / 4).max(100)
}

fn lan_dop_ms(o: &GeoSimOptions) -> u64 {
    (o.lan_ms / 4).max(100)
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

/// The cost table `partita calibrate` measured on this machine, which the other
/// simulated experiments take with `--cost-table`.
pub fn this_machine() -> CostTable {
    CostTable::from_toml(include_str!("../../../sim/calibration/this-machine.toml"))
        .expect("the committed cost table parses")
}

// ------------------------------------------------------------------ clusters

/// Cluster id of every simulated cluster of this experiment.
const CLUSTER_ID: u64 = 0x6e0_0004;

/// The ordering section of `system` (`dop_ms`: DBT_a's DOP interval).
fn ordering(o: &GeoSimOptions, system: System, dop_ms: u64, seed: u64) -> OrderingSection {
    // A cluster file's integers are TOML's (63 bits).
    let seed = seed & (i64::MAX as u64);
    let geo = |placement, dop_interval_ms| GeoSection {
        keys: o.keys,
        order: o.order,
        placement,
        dop_interval_ms,
        seed,
        ..GeoSection::default()
    };
    match system {
        System::GeoPaxosPlus => OrderingSection::GeoPaxosPlus(geo(Placement::Random, dop_ms)),
        System::GeoPaxosPlusBefore => OrderingSection::GeoPaxosPlus(geo(Placement::Random, 0)),
        System::GeoPaxos => OrderingSection::GeoPaxos(GeoSection {
            order: o.order,
            seed,
            ..GeoSection::geopaxos(o.keys)
        }),
        System::MultiPaxos => OrderingSection::paxos(Protocol::MultiPaxos),
        // The serializers' window: EPaxos batches beyond as many instances in flight.
        System::Epaxos => OrderingSection::Epaxos(EpaxosSection {
            window_instances_max: o.window_instances,
            ..EpaxosSection::with_keys(o.keys)
        }),
    }
}

/// The cluster of one point: the paper's three regions with one node each (`wan`), or
/// `replicas` nodes in one LAN; every node an acceptor and a replica, node 1
/// coordinating where a protocol has a coordinator.
pub fn cluster(
    o: &GeoSimOptions,
    system: System,
    wan: bool,
    replicas: usize,
    seed: u64,
) -> anyhow::Result<ClusterConfig> {
    let mut c = ClusterConfig::paper_wan_local(7100, CLUSTER_ID);
    if wan {
        c.wan = Some(WanSection {
            clients: partita_config::wan::PAPER_REGIONS
                .iter()
                .map(|r| r.to_string())
                .collect(),
            ..WanSection::paper()
        });
    } else {
        c.wan = None;
        let template = c.nodes[0].clone();
        c.nodes.clear();
        for id in 1..=replicas as u32 {
            let mut n = template.clone();
            n.id = id;
            n.addr = format!("127.0.0.1:{}", 7100 + id);
            n.region = None;
            n.roles = vec![Role::Acceptor, Role::Replica];
            c.nodes.push(n);
        }
    }
    c.cluster.coordinator = Some(1);
    c.cluster.service = if system == System::MultiPaxos {
        "btree"
    } else {
        "geo-btree"
    }
    .into();
    c.storage.checkpoint_instances = 0;
    c.batching.window_instances_max = o.window_instances;
    let dop = if wan { wan_dop_ms(o) } else { lan_dop_ms(o) };
    c.ordering = ordering(o, system, dop, seed);
    // Through the loader's checks, as a cluster file would go.
    ClusterConfig::parse(&c.to_toml(), "geo experiment").map_err(|e| anyhow::anyhow!("{e}"))
}

fn workload(o: &GeoSimOptions, access: Access, read_percent: u32) -> Workload {
    let keys = match access {
        Access::Locality => GeoKeys::Local {
            percent: o.local_percent,
            regions: 3,
        },
        Access::Uniform => GeoKeys::UNIFORM,
        Access::Skewed => GeoKeys::Zipf {
            s_percent: o.zipf_s_percent,
        },
    };
    Workload::Geo { read_percent, keys }
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
    clients: u32,
    round: u32,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn seed_of(o: &GeoSimOptions, j: &Job) -> u64 {
    // The same seed for every system of a configuration in a round.
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
        System::MultiPaxos,
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
                            clients: o.lan_clients_per_replica * n as u32,
                            round,
                        });
                    }
                }
            }
        }
    }
    v
}

/// The bench spec of one point.
#[allow(clippy::too_many_arguments)]
pub fn point_spec(
    o: &GeoSimOptions,
    system: System,
    wan: bool,
    replicas: usize,
    access: Access,
    read_percent: u32,
    clients: u32,
    seed: u64,
) -> anyhow::Result<BenchSpec> {
    let c = cluster(o, system, wan, replicas, seed)?;
    let mut s = BenchSpec::new(c, workload(o, access, read_percent), clients);
    s.duration_ns = if wan { o.wan_ms } else { o.lan_ms } * MILLIS;
    s.trim = TRIM_START;
    s.trim_end = Some(TRIM_END);
    s.seed = seed;
    s.cost = o.cost.clone();
    s.fsync = true;
    if system == System::MultiPaxos {
        // The B+tree with as many keys as the geo tree starts with (keys 0, 2, …).
        s.preload = o.keys;
        s.replica_image = Some(super::replica_image(o.keys, CLUSTER_ID)?);
    }
    Ok(s)
}

/// Runs one point.
#[allow(clippy::too_many_arguments)]
pub fn run_point(
    o: &GeoSimOptions,
    system: System,
    wan: bool,
    replicas: usize,
    access: Access,
    read_percent: u32,
    clients: u32,
    seed: u64,
) -> anyhow::Result<(BenchReport, f64)> {
    let spec = point_spec(
        o,
        system,
        wan,
        replicas,
        access,
        read_percent,
        clients,
        seed,
    )?;
    let started = Instant::now();
    let r = bench::run(spec);
    if let Some(f) = &r.failure {
        anyhow::bail!(
            "{} {} {}% reads, {clients} clients: {f}",
            system.label(),
            access.name(),
            read_percent
        );
    }
    Ok((r, started.elapsed().as_secs_f64()))
}

fn point(j: &Job, seed: u64, r: BenchReport, wall_s: f64) -> GeoPoint {
    let europe = r.regions.iter().find(|x| x.region == "Europe");
    let busiest = r
        .busiest()
        .map(|n| format!("n{} {:.2}", n.node, n.cpu))
        .unwrap_or_default();
    GeoPoint {
        figure: j.figure.into(),
        network: if j.wan { "WAN" } else { "LAN" }.into(),
        system: j.system.label().into(),
        replicas: j.replicas,
        access: j.access,
        read_percent: j.read_percent,
        clients: j.clients,
        round: j.round,
        seed,
        workload: r.workload.name().to_string(),
        throughput_ops_per_s: r.throughput_ops_per_s,
        latency_ms_mean: r.latency_ms_mean,
        latency_ms_p99: r.latency_ms_p99,
        europe_ms_mean: europe.map(|e| e.latency_ms_mean),
        europe_ms_p95: europe.map(|e| e.latency_ms_p95),
        busiest,
        wall_s,
        report: r,
    }
}

/// Runs the whole experiment.
pub fn run(o: &GeoSimOptions) -> anyhow::Result<GeoSimReport> {
    o.validate()?;
    let started = Instant::now();
    let jobs = jobs(o);
    let total = jobs.len();
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Option<GeoPoint>>> = Mutex::new(vec![None; total]);
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
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
                let (r, wall_s) = match run_point(
                    o,
                    j.system,
                    j.wan,
                    j.replicas,
                    j.access,
                    j.read_percent,
                    j.clients,
                    seed,
                ) {
                    Ok(x) => x,
                    Err(e) => {
                        *failure.lock().expect("failure lock") = Some(e);
                        return;
                    }
                };
                let p = point(j, seed, r, wall_s);
                if o.progress {
                    eprintln!(
                        "[{:>3}/{total}] round {} {} n={} {:<8} {:>3}% reads {:>6} clients {:<16} {:>9.0} ops/s  mean {:>7.1} ms{}  busiest {}  {:.1} s wall",
                        i + 1,
                        j.round,
                        p.network,
                        j.replicas,
                        j.access.name(),
                        j.read_percent,
                        j.clients,
                        p.system,
                        p.throughput_ops_per_s,
                        p.latency_ms_mean,
                        p.europe_ms_mean.map(|e| format!(" (Europe {e:.1})")).unwrap_or_default(),
                        p.busiest,
                        wall_s
                    );
                }
                results.lock().expect("results lock")[i] = Some(p);
            });
        }
    });
    if let Some(e) = failure.into_inner().expect("failure lock") {
        return Err(e.context("a point failed a core's check"));
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
        setup: setup_lines(o),
        machine: machine(),
        options: o.clone(),
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
    wan_peak_among(r, system, access, reads, round, &|_| true)
}

/// As [`wan_peak`], over the client counts `keep` admits.
fn wan_peak_among<'a>(
    r: &'a GeoSimReport,
    system: &str,
    access: Access,
    reads: u32,
    round: u32,
    keep: &dyn Fn(u32) -> bool,
) -> Option<(f64, &'a GeoPoint)> {
    r.points
        .iter()
        .filter(|p| {
            p.network == "WAN"
                && p.system == system
                && p.access == access
                && p.read_percent == reads
                && p.round == round
                && keep(p.clients)
        })
        .max_by(|a, b| a.throughput_ops_per_s.total_cmp(&b.throughput_ops_per_s))
        .map(|p| (p.throughput_ops_per_s, p))
}

fn describe(p: &GeoPoint) -> String {
    format!(
        "{} {:.0} ops/s at {} clients, mean {:.1} ms, Europe mean {}, busiest CPU {}",
        p.system,
        p.throughput_ops_per_s,
        p.clients,
        p.latency_ms_mean,
        p.europe_ms_mean
            .map(|e| format!("{e:.1} ms"))
            .unwrap_or_else(|| "-".into()),
        p.busiest
    )
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
        // At the client counts both systems ran.
        let ran = |sys: &str, c: u32| {
            r.points.iter().any(|p| {
                p.network == "WAN"
                    && p.system == sys
                    && p.clients == c
                    && p.access == access
                    && p.read_percent == reads
                    && p.round == round
            })
        };
        let both = |c: u32| ran(num, c) && ran(den, c);
        let (Some((a, pa)), Some((b, pb))) = (
            wan_peak_among(r, num, access, reads, round, &both),
            wan_peak_among(r, den, access, reads, round, &both),
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
        "NOT the paper's client counts"
    };
    v.extend(ratio_target(
        r,
        format!("GeoPaxos+ (DBT_a) / EPaxos WAN peak throughput, skewed, 95% reads (simulated with an emulated WAN; {scale}; median of the rounds)"),
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
                "DBT_a / DBT_b WAN peak throughput, read-only, {} (simulated with an emulated WAN; {scale}; median of the rounds)",
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
    s +=
        &format!(
        "{:<4} {:>2} {:>2} {:<8} {:>4} {:>6} {:<16} {:>10} {:>8} {:>8} {:>8} {:>8} {:<10} {:>6}\n",
        "net", "rd", "n", "access", "read", "client", "system", "ops/s", "mean ms", "p99 ms",
        "EU mean", "EU p95", "busiest", "wall s"
    );
    for p in &r.points {
        s += &format!(
            "{:<4} {:>2} {:>2} {:<8} {:>3}% {:>6} {:<16} {:>10.0} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:<10} {:>6.1}\n",
            p.network,
            p.round,
            p.replicas,
            p.access.name(),
            p.read_percent,
            p.clients,
            p.system,
            p.throughput_ops_per_s,
            p.latency_ms_mean,
            p.latency_ms_p99,
            p.europe_ms_mean.unwrap_or(f64::NAN),
            p.europe_ms_p95.unwrap_or(f64::NAN),
            p.busiest,
            p.wall_s
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
    let kops = |p: &GeoPoint| p.throughput_ops_per_s / 1e3;
    let foot = format!("{}. {}", NOTE, r.setup.join(". "));
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
                        |p| f64::from(p.clients),
                        |p| p.europe_ms_mean.unwrap_or(f64::NAN),
                    ),
                ));
                series.push(line(
                    &format!("{sys} p95"),
                    curve(
                        r,
                        keep,
                        |p| f64::from(p.clients),
                        |p| p.europe_ms_p95.unwrap_or(f64::NAN),
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
