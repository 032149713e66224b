//! Paper 001's state-partitioning experiments (§V-D, §V-E) as `partita experiment`
//! names, in the simulator (`--sim`, the paper's sizes) and on real processes (this
//! machine's sizes):
//!
//! - `partitioning` (Figure 9): classic SMR (one partition, 2 replicas) against 2 and 4
//!   partitions of 2 replicas each, under queries of 1000 keys inside one partition and
//!   batches of 7 inserts/deletes inside one partition; throughput and response time
//!   against clients, and each configuration's peak throughput as a ratio to SMR's.
//! - `cross-partition` (Figures 10 and 11): 2 partitions, queries with 0, 25, 50, 75
//!   and 100% cross-partition queries (a range straddling the partition border, so it
//!   accesses exactly two partitions); throughput and response time against clients,
//!   and CPU use: each simulated node's CPU and network card, or each real process's
//!   CPU (`/proc/PID/stat` utime + stime over the measured window).
//! - `speculation-partitioning` (Figure 12): speculative against classic execution,
//!   both Ring Paxos with 2 partitions, for the same cross-partition percentages: the
//!   relative improvement in throughput and response time.
//!
//! Every workload comes from `partita_sim::bench::random_op`
//! (`Workload::PartitionedQuery` / `PartitionedBatch`), so the real clients and the
//! simulated ones draw the same operations. The partition map's key space is the
//! bench's key space (twice the preload), so "inside one partition" means the same
//! thing to the generator and to the cluster.
//!
//! Reports carry every point's full bench result, say whether they are simulated, and
//! print the configuration beside the numbers; figures are titled "(simulated)" or
//! "(real, this machine)". Results and the comparison with the paper:
//! `docs/experiments.md` (state-partitioning section).

use crate::experiment::{sim_bench_result, sim_machine, sim_smr_cluster, SimDetail};
use anyhow::Context;
use hdrhistogram::Histogram;
use partita_config::{ClusterConfig, Durability, Role};
use partita_consensus::Protocol;
use partita_harness::bench::{BenchResult, Workload};
use partita_plot::{Panel, Series};
use partita_sim::bench::{self as simbench, BenchSpec, ReplicaImage};
use partita_sim::CostTable;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The three experiments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PartExperiment {
    /// Figure 9.
    Partitioning,
    /// Figures 10 and 11.
    CrossPartition,
    /// Figure 12.
    SpeculationPartitioning,
}

impl PartExperiment {
    pub fn name(self) -> &'static str {
        match self {
            PartExperiment::Partitioning => "partitioning",
            PartExperiment::CrossPartition => "cross-partition",
            PartExperiment::SpeculationPartitioning => "speculation-partitioning",
        }
    }
}

/// One configuration of a sweep (a curve).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PartConfig {
    /// "SMR", "2 P", "4 P", "25% cross", "speculative 25% cross", ...
    pub series: String,
    pub workload: Workload,
    pub partitions: u32,
    pub replicas_per_partition: usize,
    pub cross_percent: u32,
    pub speculative: bool,
    /// Multi-Ring Paxos: a ring per partition and one across them (paper 002).
    pub rings: bool,
}

/// CPU use of one real process over the measured window (fraction of one core).
#[derive(Clone, Debug, Serialize)]
pub struct ProcCpu {
    /// "node 4 (replica, partition 1)", or "bench clients".
    pub process: String,
    pub node: Option<u32>,
    pub role: String,
    pub partition: Option<u32>,
    pub cpu: f64,
    /// With `--node-cpu`: the process's budget (fraction of one core), and the share of
    /// its active CFS periods in the window in which it used up its quota and waited
    /// (from its cgroup's `cpu.stat`), in percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_cores: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttled_periods_pct: Option<f64>,
}

impl ProcCpu {
    /// CPU used as a share of what the process may use: its budget, or one core.
    pub fn load(&self) -> f64 {
        self.cpu / self.budget_cores.unwrap_or(1.0)
    }

    /// "n4 replica p1", "n1 coordinator", "clients".
    fn short(&self) -> String {
        match (self.node, self.partition) {
            (Some(n), Some(p)) => format!("n{n} {} p{p}", self.role),
            (Some(n), None) => format!("n{n} {}", self.role),
            _ => self.role.clone(),
        }
    }
}

/// One measured point.
#[derive(Clone, Debug, Serialize)]
pub struct PartPoint {
    #[serde(flatten)]
    pub config: PartConfig,
    pub clients: usize,
    /// Which round of the sweep measured it (1-based; `--rounds`).
    pub round: u32,
    pub result: BenchResult,
    /// Mean response time: measured on real runs; in the simulator (which reports
    /// percentiles only) derived from Little's law for a closed loop,
    /// clients / throughput − mean think time.
    pub latency_ms_mean: f64,
    pub latency_mean_source: String,
    /// Simulated points: each node's CPU and network card.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimDetail>,
    /// Real points: each process's CPU over the measured window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Vec<ProcCpu>>,
}

/// A target of the issue, checked on the report's own points.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    pub what: String,
    pub ratio: f64,
    pub required: f64,
    pub met: bool,
    /// Where the limiting resource was, at the compared peaks.
    pub evidence: String,
    /// With several rounds: the ratio in each round, in round order (`ratio` is their
    /// median, the lower one of an even count), and how many rounds met `required`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub round_ratios: Vec<f64>,
    pub rounds_met: usize,
    /// The round of the median (the evidence's and the figure's).
    pub round: u32,
}

impl Target {
    /// A target judged on one ratio per round: `ratio` is their median (the lower one
    /// of an even count) and `round` its round (from 1); met when the median reaches
    /// `required`. `None` without rounds.
    pub fn of_rounds(
        what: String,
        round_ratios: Vec<f64>,
        required: f64,
        evidence: String,
    ) -> Option<Target> {
        let mut idx: Vec<usize> = (0..round_ratios.len()).collect();
        idx.sort_by(|&a, &b| round_ratios[a].total_cmp(&round_ratios[b]));
        let i = *idx.get(round_ratios.len().checked_sub(1)? / 2)?;
        let ratio = round_ratios[i];
        Some(Target {
            what,
            ratio,
            required,
            met: ratio >= required,
            evidence,
            rounds_met: round_ratios.iter().filter(|x| **x >= required).count(),
            round_ratios,
            round: i as u32 + 1,
        })
    }

    /// The target in a report's text: ratio (with `decimals`), every round's, the
    /// verdict and the evidence.
    pub fn summary(&self, decimals: usize) -> String {
        let rounds: Vec<String> = self
            .round_ratios
            .iter()
            .map(|x| format!("{x:.decimals$}x"))
            .collect();
        format!(
            "target {}: {:.decimals$}x (rounds: {}; {} of {} at or above {:.0}x), required {:.0}x: {}\n  evidence: {}\n",
            self.what,
            self.ratio,
            rounds.join(" "),
            self.rounds_met,
            self.round_ratios.len(),
            self.required,
            self.required,
            if self.met { "MET" } else { "NOT MET" },
            self.evidence
        )
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct PartReport {
    pub name: String,
    pub simulated: bool,
    pub machine: String,
    /// The configuration every point shares, in words (also the figures' footnote).
    pub configuration: String,
    pub points: Vec<PartPoint>,
    /// Rounds of the sweep (`--rounds`): every point was measured once per round, the
    /// rounds one after the other, so slow drift of the machine hits every series alike.
    pub rounds: u32,
    /// Peak throughput ratios against classic SMR (`partitioning`), and the targets.
    /// With several rounds: for each series, the round with the median ratio.
    pub ratios: Vec<Ratio>,
    pub targets: Vec<Target>,
}

/// Peak throughput of a configuration against classic SMR's (same workload).
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    pub workload: Workload,
    pub series: String,
    pub peak_cmds_per_s: f64,
    pub peak_clients: usize,
    pub smr_peak_cmds_per_s: f64,
    pub ratio: f64,
    /// The round both peaks come from.
    pub round: u32,
}

/// The sweep's knobs.
#[derive(Clone, Debug)]
pub struct PartOptions {
    pub clients: Vec<usize>,
    /// Clients of the batch points of `partitioning` (batches need more load to
    /// saturate); `None`: `clients`.
    pub batch_clients: Option<Vec<usize>>,
    /// Virtual (simulated) or wall (real) seconds per point; 10% trimmed at each end.
    pub duration: Duration,
    pub preload: u64,
    pub think_ms: u64,
    pub cross_percents: Vec<u32>,
    pub durability: Durability,
    pub cost: CostTable,
    pub cost_source: String,
    pub seed: u64,
    pub jobs: usize,
    pub progress: bool,
    /// Simulated runs: IP multicast on the LAN (a what-if: paper 001's Ring Paxos
    /// multicast its values; the runtime sends one TCP copy per receiver).
    pub multicast: bool,
    /// Standalone batchers added to every cluster (0: clients send to the coordinator).
    pub batchers: u32,
    /// The workloads of `partitioning` (queries and batches by default).
    pub workloads: Vec<Workload>,
    /// Real runs: each node process limited to this fraction of one core (`--node-cpu`).
    pub node_cpu: Option<f64>,
    /// The coordinator's batching delay: with instances in flight, a value that is not
    /// full waits up to this long for more commands (`[batching] batch_delay_ms`).
    pub batch_delay_ms: u64,
    /// The largest value the coordinator proposes and the largest batch a batcher
    /// forwards, in bytes (`[batching] batch_bytes_max`; the paper's 8 KB by default).
    pub batch_bytes_max: usize,
    /// Batchers: the least time between two batches that are not full
    /// (`[batching] batcher_interval_ms`; 0: Nagle's rule alone).
    pub batcher_interval_ms: u64,
    /// The coordinator: the least time between two values that are not full
    /// (`[batching] value_interval_ms`; 0: off).
    pub value_interval_ms: u64,
    /// Real runs: measure the whole sweep this many times, round after round; ratios and
    /// targets are the median over rounds (`--rounds`).
    pub rounds: u32,
    /// `partitioning`: also 2 and 4 partitions on Multi-Ring Paxos, a ring per
    /// partition and one across them (`--rings`).
    pub rings: bool,
}

impl PartOptions {
    /// The paper's sizes in the simulator: 12 million entries, think time 0–10 ms, 2
    /// virtual seconds per point (bounded so the sweep takes minutes on a shared 2-core
    /// machine). Queries saturate 8 replicas' network cards by about 800 clients,
    /// batches the coordinator's card by 1600 (see docs/experiments.md), so the client
    /// counts stop there.
    pub fn sim_full() -> PartOptions {
        PartOptions {
            clients: vec![100, 400, 800],
            batch_clients: Some(vec![800, 1600, 3200]),
            duration: Duration::from_secs(2),
            preload: 12_000_000,
            think_ms: 10,
            cross_percents: vec![0, 25, 50, 75, 100],
            durability: Durability::Fsync,
            cost: CostTable::default(),
            cost_source: "built-in defaults".into(),
            seed: 1,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            progress: true,
            multicast: false,
            batchers: 0,
            workloads: vec![Workload::Query, Workload::Batch],
            node_cpu: None,
            batch_delay_ms: partita_config::BatchingSection::default().batch_delay_ms,
            batch_bytes_max: partita_config::BatchingSection::default().batch_bytes_max,
            batcher_interval_ms: 0,
            value_interval_ms: 0,
            rounds: 1,
            rings: false,
        }
    }

    /// This machine's sizes for real processes (also `--sim --quick`): 100,000
    /// entries, no think time, 3 s per point.
    pub fn real() -> PartOptions {
        PartOptions {
            clients: vec![4, 16],
            batch_clients: None,
            duration: Duration::from_secs(3),
            preload: 100_000,
            think_ms: 0,
            ..PartOptions::sim_full()
        }
    }

    /// A tiny sweep for tests.
    pub fn tiny() -> PartOptions {
        PartOptions {
            clients: vec![2, 8],
            batch_clients: None,
            duration: Duration::from_millis(300),
            preload: 4_000,
            think_ms: 0,
            cross_percents: vec![0, 100],
            progress: false,
            ..PartOptions::sim_full()
        }
    }
}

// ------------------------------------------------------------------ configurations

/// The curves of an experiment, in report order.
pub fn configs(e: PartExperiment, o: &PartOptions) -> Vec<PartConfig> {
    let c = |series: String, workload, partitions, cross_percent, speculative| PartConfig {
        series,
        workload,
        partitions,
        replicas_per_partition: 2,
        cross_percent,
        speculative,
        rings: false,
    };
    match e {
        PartExperiment::Partitioning => {
            let mut v = Vec::new();
            for &w in &o.workloads {
                v.push(c("SMR".into(), w, 1, 0, false));
                v.push(c("2 P".into(), w, 2, 0, false));
                v.push(c("4 P".into(), w, 4, 0, false));
                if o.rings {
                    for n in [2, 4] {
                        v.push(PartConfig {
                            rings: true,
                            ..c(format!("{n} P {n} rings"), w, n, 0, false)
                        });
                    }
                }
            }
            v
        }
        PartExperiment::CrossPartition => o
            .cross_percents
            .iter()
            .map(|&x| c(format!("{x}% cross"), Workload::Query, 2, x, false))
            .collect(),
        PartExperiment::SpeculationPartitioning => o
            .cross_percents
            .iter()
            .flat_map(|&x| {
                [
                    c(format!("classic {x}%"), Workload::Query, 2, x, false),
                    c(format!("speculative {x}%"), Workload::Query, 2, x, true),
                ]
            })
            .collect(),
    }
}

fn clients_of(o: &PartOptions, cfg: &PartConfig) -> Vec<usize> {
    match (&o.batch_clients, cfg.workload) {
        (Some(b), Workload::Batch) => b.clone(),
        _ => o.clients.clone(),
    }
}

/// Make `c` (3 acceptors, node 1 coordinating, replicas from node 4 on) a cluster of
/// `partitions` partitions with consecutive pairs of replicas in each, over the bench's
/// key space for `preload`, speculative or not, with `o.batchers` standalone batchers
/// after the replicas.
pub fn partition_cluster(c: ClusterConfig, cfg: &PartConfig, o: &PartOptions) -> ClusterConfig {
    let mut c = c
        .with_batchers(o.batchers)
        .expect("the partitioning experiments run smr clusters");
    let preload = o.preload;
    if cfg.partitions > 1 {
        c.partitioning.partitions = cfg.partitions;
        c.partitioning.key_space = simbench::key_space(preload);
        let mut i = 0usize;
        for n in &mut c.nodes {
            if n.roles.contains(&Role::Replica) {
                n.partition = Some((i / cfg.replicas_per_partition) as u32);
                i += 1;
            }
        }
    }
    if cfg.rings {
        c = c
            .with_multiring(cfg.partitions, 1)
            .expect("a ring per partition (the rings series run without batchers)");
    }
    if cfg.speculative {
        c.execution = partita_config::ExecutionSection::speculative(false);
    }
    c.batching.batch_delay_ms = o.batch_delay_ms;
    c.batching.batch_bytes_max = o.batch_bytes_max;
    c.batching.batcher_interval_ms = o.batcher_interval_ms;
    c.batching.value_interval_ms = o.value_interval_ms;
    c
}

/// The configuration sentence beside the numbers (`machine`: where real runs ran,
/// with the per-node CPU budget if any).
fn configuration(e: PartExperiment, o: &PartOptions, simulated: bool, machine: &str) -> String {
    let what = match e {
        PartExperiment::Partitioning => {
            "SMR = 1 partition, 2 replicas; 2 P / 4 P = 2 or 4 partitions, 2 replicas each; queries and batches inside one partition"
        }
        PartExperiment::CrossPartition => {
            "2 partitions, 2 replicas each; queries of 1000 keys, a cross-partition query straddles the border (2 partitions)"
        }
        PartExperiment::SpeculationPartitioning => {
            "2 partitions, 2 replicas each, speculative vs classic execution; queries of 1000 keys"
        }
    };
    let kind = if simulated && o.multicast {
        "SIMULATED with IP multicast (what-if: group sends leave a card once)".to_string()
    } else if simulated {
        "SIMULATED".to_string()
    } else {
        format!("REAL on {machine}")
    };
    let rings = if o.rings && e == PartExperiment::Partitioning {
        "; N P N rings = N partitions on Multi-Ring Paxos, a ring of 3 acceptors per partition and one across them (M = 1, lambda = 20000/s, delta = 5 ms), clients sending to their partition's ring"
    } else {
        ""
    };
    let batchers = match (o.batchers, o.batcher_interval_ms) {
        (0, _) => String::new(),
        (n, 0) => format!(", {n} standalone batchers (clients spread over them)"),
        (n, i) => format!(
            ", {n} standalone batchers (clients spread over them; at least {i} ms between batches that are not full)"
        ),
    };
    format!(
        "{kind}; {what}{rings}; Ring Paxos, 3 acceptors (node 1 coordinates){batchers}, durability {}, batching {} B / {} ms{} / window 16, think time 0..={} ms, preload {} entries (key space {}), {:.1} s {}per point, 10% trimmed at each end",
        o.durability,
        o.batch_bytes_max,
        o.batch_delay_ms,
        match o.value_interval_ms {
            0 => String::new(),
            i => format!(" / values at least {i} ms apart unless full"),
        },
        o.think_ms,
        o.preload,
        simbench::key_space(o.preload),
        o.duration.as_secs_f64(),
        if simulated { "virtual " } else { "" }
    )
}

// ------------------------------------------------------------------ in the simulator

type Images = (u64, u64, u32, Arc<Vec<Vec<u8>>>);
static IMAGES: Mutex<Option<Images>> = Mutex::new(None);

/// The preloaded state of each partition's replicas (keys 0, 2, …, 2(N−1) that fall in
/// the partition, value = key) as checkpoints of instance 0, bulk-loaded once per
/// process and stamped with each replica's id as it boots. A replica of partition p
/// holds only partition p's keys, as it would after loading through consensus.
pub fn partition_images(cluster: &ClusterConfig, preload: u64) -> anyhow::Result<ReplicaImage> {
    let parts = cluster.partitioning.partitions.max(1);
    let id = cluster.cluster.id;
    let keys = simbench::key_space(preload);
    let images = {
        let mut cache = IMAGES.lock().expect("image cache lock");
        match cache.as_ref() {
            Some((n, c, p, b)) if *n == preload && *c == id && *p == parts => b.clone(),
            _ => {
                *cache = None;
                let mut v = Vec::new();
                for p in 0..parts {
                    let (lo, hi) = if parts == 1 {
                        (0, u64::MAX)
                    } else {
                        simbench::partition_keys(parts, keys, p)
                    };
                    let first = lo.div_ceil(simbench::PRELOAD_STRIDE);
                    let last = (hi / simbench::PRELOAD_STRIDE).min(preload.saturating_sub(1));
                    let tree = partita_btree::BPlusTree::bulk_load(
                        (first..=last)
                            .map(|i| (i * simbench::PRELOAD_STRIDE, i * simbench::PRELOAD_STRIDE)),
                    )
                    .map_err(|e| anyhow::anyhow!("bulk load: {e}"))?;
                    let mut r = partita_smr::SequentialReplica::new(0, tree);
                    r.set_cluster_id(id);
                    v.push(r.checkpoint());
                }
                let b = Arc::new(v);
                *cache = Some((preload, id, parts, b.clone()));
                b
            }
        }
    };
    let layout = cluster.partition_layout();
    Ok(ReplicaImage(Arc::new(move |node| {
        let p = layout.partition_of_replica(node).unwrap_or(0) as usize;
        let mut b = images[p.min(images.len() - 1)].clone();
        partita_smr::restamp_checkpoint(&mut b, node).expect("a checkpoint this process wrote");
        b
    })))
}

fn little_mean_ms(clients: usize, cmds_per_s: f64, think_ms: u64) -> f64 {
    if cmds_per_s <= 0.0 {
        return f64::NAN;
    }
    (clients as f64 / cmds_per_s * 1000.0 - think_ms as f64 / 2.0).max(0.0)
}

/// Simulate one point.
pub fn sim_point(o: &PartOptions, cfg: &PartConfig, clients: usize) -> anyhow::Result<PartPoint> {
    let started = Instant::now();
    let cluster = partition_cluster(
        sim_smr_cluster(
            cfg.partitions as usize * cfg.replicas_per_partition,
            Protocol::RingPaxos,
            o.durability,
        ),
        cfg,
        o,
    );
    let mut spec = BenchSpec::new(
        cluster.clone(),
        cfg.workload.partitioned(cfg.partitions, cfg.cross_percent),
        clients as u32,
    );
    spec.think_ms = o.think_ms;
    spec.preload = o.preload;
    spec.duration_ns = o.duration.as_nanos() as u64;
    spec.seed = o.seed;
    spec.cost = o.cost.clone();
    spec.fsync = o.durability == Durability::Fsync;
    if let Some(nic) = spec.net.nic.as_mut() {
        nic.multicast = o.multicast;
    }
    if o.preload > 0 {
        spec.replica_image = Some(partition_images(&cluster, o.preload)?);
    }
    let r = simbench::run(spec);
    if let Some(f) = &r.failure {
        anyhow::bail!("simulated {} with {clients} clients: {f}", cfg.series);
    }
    let result = sim_bench_result(&r, cfg.workload, &o.cost);
    Ok(PartPoint {
        config: cfg.clone(),
        clients,
        round: 1,
        latency_ms_mean: little_mean_ms(clients, result.throughput_cmds_per_s, o.think_ms),
        latency_mean_source: "Little's law: clients / throughput - mean think time".into(),
        result,
        sim: Some(SimDetail {
            nodes: r.nodes.clone(),
            instances: r.instances,
            commands_per_instance: r.commands_per_instance,
            events: r.events,
            wall_s: started.elapsed().as_secs_f64(),
            trace_hash: r.trace_hash,
            psmr: None,
        }),
        cpu: None,
    })
}

/// The busiest resource of a simulated point ("node 4 replica p1: NIC 100%").
fn bottleneck(p: &PartPoint) -> String {
    let Some(d) = &p.sim else {
        return match &p.cpu {
            Some(c) => real_bottleneck(c),
            None => String::new(),
        };
    };
    d.nodes
        .iter()
        .max_by(|a, b| a.cpu.max(a.nic_out).total_cmp(&b.cpu.max(b.nic_out)))
        .map(|n| {
            let (what, v) = if n.nic_out > n.cpu {
                ("NIC", n.nic_out)
            } else {
                ("CPU", n.cpu)
            };
            format!("n{} {} {what} {:.0}%", n.node, n.role, v * 100.0)
        })
        .unwrap_or_default()
}

/// The most loaded node process of a real point against what it may use (its budget,
/// or one core), and all processes' CPU together: "n1 coordinator 98% of its 0.15
/// budget (throttled in 90% of periods); all processes 118% of one core (2 cores here)".
fn real_bottleneck(c: &[ProcCpu]) -> String {
    let total: f64 = c.iter().map(|x| x.cpu).sum();
    let all = format!(
        "all processes {:.0}% of one core ({} cores here)",
        total * 100.0,
        partita_harness::node_cpu::cores()
    );
    let Some(b) = c
        .iter()
        .filter(|x| x.node.is_some() && x.cpu.is_finite())
        .max_by(|a, b| a.load().total_cmp(&b.load()))
    else {
        return all;
    };
    let mine = match b.budget_cores {
        Some(budget) => format!(
            "{} {:.0}% of its {} budget{}",
            b.short(),
            100.0 * b.load(),
            partita_harness::node_cpu::fmt_fraction(budget),
            b.throttled_periods_pct
                .map(|t| format!(" (throttled in {t:.0}% of periods)"))
                .unwrap_or_default()
        ),
        None => format!("{} {:.0}% of a core", b.short(), 100.0 * b.cpu),
    };
    format!("{mine}; {all}")
}

/// Every process's CPU of a real point on one line: against the budget with
/// `--node-cpu` (and how often each was throttled), else in % of one core.
fn cpu_line(c: &[ProcCpu]) -> String {
    let budget = c.iter().find_map(|x| x.budget_cores);
    let each: Vec<String> = c
        .iter()
        .map(|x| match (x.budget_cores, x.throttled_periods_pct) {
            (Some(_), Some(t)) => format!("{} {:.0} (thr {t:.0})", x.short(), 100.0 * x.load()),
            _ => format!("{} {:.0}", x.short(), 100.0 * x.load()),
        })
        .collect();
    match budget {
        Some(b) => format!(
            "CPU, % of each node's {} budget (throttled, % of periods; clients: % of one core): {}",
            partita_harness::node_cpu::fmt_fraction(b),
            each.join(", ")
        ),
        None => format!("CPU, % of one core: {}", each.join(", ")),
    }
}

/// Run an experiment in the simulator, `jobs` points at a time.
pub fn run_sim(e: PartExperiment, o: &PartOptions) -> anyhow::Result<PartReport> {
    let specs: Vec<(PartConfig, usize)> = configs(e, o)
        .into_iter()
        .flat_map(|c| clients_of(o, &c).into_iter().map(move |n| (c.clone(), n)))
        .collect();
    // The heaviest points (most clients) first, so the jobs finish together.
    let mut order: Vec<usize> = (0..specs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(specs[i].1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Mutex<Vec<Option<anyhow::Result<PartPoint>>>> =
        Mutex::new((0..specs.len()).map(|_| None).collect());
    let jobs = o.jobs.clamp(1, specs.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&i) = order.get(k) else {
                    break;
                };
                let (cfg, n) = &specs[i];
                let r = sim_point(o, cfg, *n);
                if o.progress {
                    match &r {
                        Ok(p) => eprintln!(
                            "  {:<6} {:<18} clients {:>5}: {:>9.0} cmd/s  p50 {:>7.2} ms  ({}; {:.1} s wall)",
                            format!("{:?}", cfg.workload).to_lowercase(),
                            cfg.series,
                            n,
                            p.result.throughput_cmds_per_s,
                            p.result.latency_ms_p50,
                            bottleneck(p),
                            p.sim.as_ref().map_or(0.0, |d| d.wall_s)
                        ),
                        Err(err) => eprintln!("  {} clients {n}: {err:#}", cfg.series),
                    }
                }
                results.lock().expect("results lock")[i] = Some(r);
            });
        }
    });
    let mut points = Vec::new();
    for r in results.into_inner().expect("results lock") {
        points.push(r.expect("every point ran")?);
    }
    Ok(finish(e, o, true, sim_machine(&o.cost_source), points))
}

fn finish(
    e: PartExperiment,
    o: &PartOptions,
    simulated: bool,
    machine: String,
    points: Vec<PartPoint>,
) -> PartReport {
    let mut r = PartReport {
        name: e.name().into(),
        simulated,
        configuration: configuration(e, o, simulated, &machine),
        machine,
        rounds: points.iter().map(|p| p.round).max().unwrap_or(1),
        points,
        ratios: Vec::new(),
        targets: Vec::new(),
    };
    if e == PartExperiment::Partitioning {
        let by_round = ratios_by_round(&r.points);
        r.ratios = median_ratios(&by_round);
        r.targets = targets(&r, &by_round, simulated);
    }
    r
}

/// The rounds the points come from, in order.
fn rounds_of(points: &[PartPoint]) -> Vec<u32> {
    let mut v: Vec<u32> = points.iter().map(|p| p.round).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Each round's [`ratios`], in round order.
fn ratios_by_round(points: &[PartPoint]) -> Vec<Vec<Ratio>> {
    rounds_of(points)
        .into_iter()
        .map(|round| {
            let of_round: Vec<PartPoint> = points
                .iter()
                .filter(|p| p.round == round)
                .cloned()
                .collect();
            ratios(&of_round)
        })
        .collect()
}

/// For each (workload, series), the round whose ratio is the median (the lower of the
/// two middle ones for an even count: the conservative choice), from
/// [`ratios_by_round`]. One round: its ratios.
fn median_ratios(by_round: &[Vec<Ratio>]) -> Vec<Ratio> {
    let Some(first) = by_round.first() else {
        return Vec::new();
    };
    first
        .iter()
        .filter_map(|x| {
            let mut all: Vec<&Ratio> = by_round
                .iter()
                .filter_map(|rs| {
                    rs.iter()
                        .find(|y| y.workload == x.workload && y.series == x.series)
                })
                .collect();
            all.sort_by(|a, b| a.ratio.total_cmp(&b.ratio));
            all.get((all.len() - 1) / 2).map(|m| (*m).clone())
        })
        .collect()
}

/// The point of `series` (and workload) with the highest throughput.
fn peak<'a>(points: &'a [PartPoint], w: Workload, series: &str) -> Option<&'a PartPoint> {
    points
        .iter()
        .filter(|p| p.config.workload == w && p.config.series == series)
        .max_by(|a, b| {
            a.result
                .throughput_cmds_per_s
                .total_cmp(&b.result.throughput_cmds_per_s)
        })
}

/// Each configuration's peak throughput against classic SMR's, per workload.
pub fn ratios(points: &[PartPoint]) -> Vec<Ratio> {
    let mut v = Vec::new();
    for w in [Workload::Query, Workload::Batch] {
        let Some(smr) = peak(points, w, "SMR") else {
            continue;
        };
        let mut names: Vec<&str> = Vec::new();
        for p in points.iter().filter(|p| p.config.workload == w) {
            if !names.contains(&p.config.series.as_str()) {
                names.push(&p.config.series);
            }
        }
        for s in names {
            let p = peak(points, w, s).expect("a point of the series");
            v.push(Ratio {
                workload: w,
                series: s.into(),
                peak_cmds_per_s: p.result.throughput_cmds_per_s,
                peak_clients: p.clients,
                smr_peak_cmds_per_s: smr.result.throughput_cmds_per_s,
                ratio: p.result.throughput_cmds_per_s / smr.result.throughput_cmds_per_s,
                round: p.round,
            });
        }
    }
    v
}

/// The targets: simulated, 4 P ≥ 3.9× SMR for queries and ≥ 2.6× for batches;
/// real, 2 P ≥ 1.5× SMR for queries.
fn targets(r: &PartReport, by_round: &[Vec<Ratio>], simulated: bool) -> Vec<Target> {
    let wanted: &[(Workload, &str, f64)] = if simulated {
        &[
            (Workload::Query, "4 P", 3.9),
            (Workload::Batch, "4 P", 2.6),
            // Paper 002's Multi-Ring Paxos (with `--rings`).
            (Workload::Batch, "4 P 4 rings", 3.5),
        ]
    } else {
        &[(Workload::Query, "2 P", 1.5)]
    };
    let mut v = Vec::new();
    if !simulated {
        // Paper 002 on real processes (with `--rings`): 4 partitions on 4 rings at or
        // above 2 on 2 (one coordinator no longer bounds them).
        for w in [Workload::Batch, Workload::Query] {
            let find = |s: &str| r.ratios.iter().find(|x| x.workload == w && x.series == s);
            if let (Some(four), Some(two)) = (find("4 P 4 rings"), find("2 P 2 rings")) {
                let ratio = four.peak_cmds_per_s / two.peak_cmds_per_s;
                v.push(Target {
                    what: format!(
                        "{}: 4 P 4 rings / 2 P 2 rings peak throughput (real)",
                        w.partitioned(1, 0).label()
                    ),
                    ratio,
                    required: 1.0,
                    met: ratio >= 1.0,
                    evidence: format!(
                        "4 P 4 rings {:.0} cmd/s at {} clients (round {}), 2 P 2 rings {:.0} cmd/s at {} clients (round {})",
                        four.peak_cmds_per_s,
                        four.peak_clients,
                        four.round,
                        two.peak_cmds_per_s,
                        two.peak_clients,
                        two.round
                    ),
                    round_ratios: Vec::new(),
                    rounds_met: usize::from(ratio >= 1.0),
                    round: four.round,
                });
            }
        }
    }
    for &(w, s, req) in wanted {
        let Some(x) = r.ratios.iter().find(|x| x.workload == w && x.series == s) else {
            continue;
        };
        let of_round: Vec<PartPoint> = r
            .points
            .iter()
            .filter(|p| p.round == x.round)
            .cloned()
            .collect();
        let ev = |series: &str| {
            peak(&of_round, w, series).map_or(String::new(), |p| {
                format!("{series} peak at {} clients: {}", p.clients, bottleneck(p))
            })
        };
        let all: Vec<f64> = by_round
            .iter()
            .filter_map(|rs| rs.iter().find(|y| y.workload == w && y.series == s))
            .map(|y| y.ratio)
            .collect();
        let rounds_met = all.iter().filter(|&&y| y >= req).count();
        v.push(Target {
            what: format!(
                "{}: {s} / SMR peak throughput ({}{})",
                w.partitioned(1, 0).label(),
                if simulated { "simulated" } else { "real" },
                if all.len() > 1 {
                    format!(", median of {} rounds", all.len())
                } else {
                    String::new()
                }
            ),
            ratio: x.ratio,
            required: req,
            met: x.ratio >= req,
            evidence: format!(
                "{}{}; {}",
                if all.len() > 1 {
                    format!("median round {}: ", x.round)
                } else {
                    String::new()
                },
                ev("SMR"),
                ev(s)
            ),
            round_ratios: if all.len() > 1 { all } else { Vec::new() },
            rounds_met,
            round: x.round,
        });
    }
    v
}

// ------------------------------------------------------------------ real processes

fn proc_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; fields after the closing parenthesis.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line (11 and 12 here, 0-based).
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The unit of utime and stime in `/proc/PID/stat`.
fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions and only reads a constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// A process to watch: (name, node, role, partition, pid).
type ProcId = (String, Option<u32>, String, Option<u32>, u32);

/// The real client loop of `partita bench` with this module's generator: closed-loop
/// sessions drawing from `workload`, with the CPU of every process (and, with a
/// per-node CPU budget, each node's cgroup `cpu.stat`) sampled at the edges of the
/// measured window.
async fn bench_real(
    cluster: &ClusterConfig,
    workload: Workload,
    clients: usize,
    o: &PartOptions,
    pids: Vec<ProcId>,
    groups: Option<&partita_harness::node_cpu::CpuGroups>,
) -> anyhow::Result<(BenchResult, f64, Vec<ProcCpu>)> {
    use partita_client::{Client, ClientOptions};
    use rand::{Rng, SeedableRng};
    let keys = simbench::key_space(o.preload).max(2);
    let base = Instant::now();
    let end = base + o.duration;
    let mut tasks = Vec::new();
    for i in 0..clients {
        let cluster = cluster.clone();
        let think_ms = o.think_ms;
        let seed = o.seed;
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(
                seed.wrapping_mul(1_000_003).wrapping_add(i as u64),
            );
            let opts = ClientOptions {
                entry_index: Some(i as u64),
                ..ClientOptions::default()
            };
            let mut client = Client::<partita_btree::BPlusTree>::connect(cluster, opts).await?;
            let mut records: Vec<(u64, u64, u32, bool)> = Vec::new();
            while Instant::now() < end {
                if think_ms > 0 {
                    let ms = rng.gen_range(0..=think_ms);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                let op = simbench::random_op(workload, &mut rng, keys, 0);
                let ops = op.btree_ops() as u32;
                let call = base.elapsed().as_nanos() as u64;
                let ok = client.execute(op).await.is_ok();
                let ret = base.elapsed().as_nanos() as u64;
                records.push((call, ret, ops, ok));
            }
            anyhow::Ok((records, client.resubmissions()))
        }));
    }
    let lo = (o.duration.as_nanos() as f64 * 0.1) as u64;
    let hi = (o.duration.as_nanos() as f64 * 0.9) as u64;
    let mut self_pids = pids;
    self_pids.push((
        "bench clients (this process)".into(),
        None,
        "clients".into(),
        None,
        std::process::id(),
    ));
    let group_stat = |node: &Option<u32>| {
        groups
            .zip(*node)
            .and_then(|(g, n)| g.stat(&format!("node-{n}")))
    };
    tokio::time::sleep_until((base + Duration::from_nanos(lo)).into()).await;
    let t0: Vec<Option<u64>> = self_pids.iter().map(|p| proc_ticks(p.4)).collect();
    let s0: Vec<_> = self_pids.iter().map(|p| group_stat(&p.1)).collect();
    let w0 = Instant::now();
    tokio::time::sleep_until((base + Duration::from_nanos(hi)).into()).await;
    let t1: Vec<Option<u64>> = self_pids.iter().map(|p| proc_ticks(p.4)).collect();
    let s1: Vec<_> = self_pids.iter().map(|p| group_stat(&p.1)).collect();
    let window_s = w0.elapsed().as_secs_f64();
    let hz = clock_ticks_per_s();
    let cpu = self_pids
        .iter()
        .enumerate()
        .map(|(i, (name, node, role, part, _))| ProcCpu {
            process: name.clone(),
            node: *node,
            role: role.clone(),
            partition: *part,
            cpu: match (t0[i], t1[i]) {
                (Some(a), Some(b)) => b.saturating_sub(a) as f64 / hz / window_s,
                _ => f64::NAN,
            },
            budget_cores: groups.filter(|_| node.is_some()).map(|g| g.budget.fraction),
            throttled_periods_pct: match (&s0[i], &s1[i]) {
                (Some(a), Some(b)) => b.throttled_pct_since(a),
                _ => None,
            },
        })
        .collect();
    let mut records = Vec::new();
    let mut resubmissions = 0;
    for t in tasks {
        let (r, rs) = t.await??;
        records.extend(r);
        resubmissions += rs;
    }
    let total = base.elapsed();
    let measured_s = (hi - lo) as f64 / 1e9;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram");
    let (mut commands, mut ops, mut timeouts, mut sum_us) = (0u64, 0u64, 0u64, 0u64);
    for &(call, ret, n, ok) in &records {
        if !ok {
            timeouts += 1;
        }
        if call >= lo && ret <= hi && ok {
            commands += 1;
            ops += n as u64;
            let us = (ret - call) / 1000;
            sum_us += us;
            hist.saturating_record(us);
        }
    }
    let ms = |us: u64| us as f64 / 1000.0;
    let result = BenchResult {
        workload: workload.base(),
        mode: "smr".into(),
        ordering: cluster.ordering.protocol().to_string(),
        durability: cluster.cluster.durability.to_string(),
        replicas: cluster.executors().len(),
        acceptors: cluster.membership().acceptors.len(),
        batch_bytes_max: cluster.batching.batch_bytes_max,
        window_instances_max: cluster.batching.window_instances_max,
        clients,
        think_ms: o.think_ms,
        preload: o.preload,
        duration_s: total.as_secs_f64(),
        measured_s,
        commands,
        throughput_cmds_per_s: commands as f64 / measured_s,
        throughput_ops_per_s: ops as f64 / measured_s,
        latency_ms_p50: ms(hist.value_at_quantile(0.5)),
        latency_ms_p90: ms(hist.value_at_quantile(0.9)),
        latency_ms_p99: ms(hist.value_at_quantile(0.99)),
        latency_ms_max: ms(hist.max()),
        latency_ms_mean: Some(hist.mean() / 1000.0),
        timeouts,
        resubmissions,
        tentative_ms_p50_p90: None,
        psmr_outcomes: None,
        node_cpu: None,
        node_runtime_threads: None,
        node_io_thread: false,
        client_connections: None,
        cpu_us_per_cmd: None,
        cpu_user_us_per_cmd: None,
        cpu_system_us_per_cmd: None,
        cpu_processes: 0,
        client_cpu_us_per_cmd: 0.0,
        wal_bytes: Vec::new(),
        restart_ms: Vec::new(),
    };
    let mean = if commands > 0 {
        sum_us as f64 / commands as f64 / 1000.0
    } else {
        f64::NAN
    };
    Ok((result, mean, cpu))
}

/// One real point on a fresh local cluster.
pub async fn real_point(
    exe: &Path,
    o: &PartOptions,
    cfg: &PartConfig,
    clients: usize,
) -> anyhow::Result<PartPoint> {
    let cluster = partition_cluster(
        crate::experiment::smr_cluster(
            cfg.partitions as usize * cfg.replicas_per_partition,
            Protocol::RingPaxos,
            o.durability,
        ),
        cfg,
        o,
    );
    ClusterConfig::parse(&cluster.to_toml(), "partitioned cluster")?;
    let dir = std::env::temp_dir().join(format!(
        "partita-exp-part-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir)?;
    let cluster = partita_harness::netns::place_for_run(&cluster, &dir)?;
    let file = dir.join("cluster.toml");
    std::fs::write(&file, cluster.to_toml())?;
    let result = async {
        let mut lc = partita_harness::launch::LocalCluster::start_with(
            exe,
            &file,
            &cluster,
            &dir,
            &[],
            o.node_cpu,
        )?;
        let run = async {
            lc.wait_ready(Duration::from_secs(30)).await?;
            partita_harness::bench::preload(&cluster, o.preload, false).await?;
            let pids = lc
                .children
                .iter()
                .map(|(id, child)| {
                    let n = cluster.nodes.iter().find(|n| n.id == *id);
                    let role = match n {
                        Some(n) if n.roles.contains(&Role::Replica) => "replica",
                        Some(_) if Some(*id) == cluster.cluster.coordinator => "coordinator",
                        Some(n) if n.roles.contains(&Role::Acceptor) => "acceptor",
                        Some(_) => "batcher",
                        None => "?",
                    };
                    let part = n.and_then(|n| n.partition);
                    let name = match part {
                        Some(p) => format!("node {id} ({role}, partition {p})"),
                        None => format!("node {id} ({role})"),
                    };
                    (name, Some(*id), role.to_string(), part, child.id())
                })
                .collect();
            let (mut result, mean, cpu) = bench_real(
                &cluster,
                cfg.workload.partitioned(cfg.partitions, cfg.cross_percent),
                clients,
                o,
                pids,
                lc.cpu.as_ref(),
            )
            .await?;
            result.node_cpu = lc.cpu_label();
            anyhow::Ok((result, mean, cpu))
        }
        .await;
        lc.stop(Duration::from_secs(10));
        run
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    let (result, mean, cpu) = result?;
    Ok(PartPoint {
        config: cfg.clone(),
        clients,
        round: 1,
        result,
        latency_ms_mean: mean,
        latency_mean_source: "measured".into(),
        sim: None,
        cpu: Some(cpu),
    })
}

/// Run an experiment on real processes, one point after the other.
pub async fn run_real(
    exe: &Path,
    e: PartExperiment,
    o: &PartOptions,
) -> anyhow::Result<PartReport> {
    let node_cpu_label = crate::experiment::node_cpu_label(o.node_cpu)?;
    let mut points = Vec::new();
    let rounds = o.rounds.max(1);
    for round in 1..=rounds {
        for cfg in configs(e, o) {
            for n in clients_of(o, &cfg) {
                let mut p = real_point(exe, o, &cfg, n)
                    .await
                    .with_context(|| format!("{} with {n} clients (round {round})", cfg.series))?;
                p.round = round;
                if o.progress {
                    eprintln!(
                        "  {}{:<6} {:<18} clients {:>4}: {:>8.0} cmd/s  p50 {:>6.2} ms  mean {:>6.2} ms  ({})",
                        if rounds > 1 { format!("round {round}/{rounds}  ") } else { String::new() },
                        format!("{:?}", cfg.workload).to_lowercase(),
                        cfg.series,
                        n,
                        p.result.throughput_cmds_per_s,
                        p.result.latency_ms_p50,
                        p.latency_ms_mean,
                        bottleneck(&p)
                    );
                }
                points.push(p);
            }
        }
    }
    Ok(finish(
        e,
        o,
        false,
        crate::experiment::machine_with(node_cpu_label.as_deref()),
        points,
    ))
}

// ------------------------------------------------------------------ output

/// Mean CPU (or NIC) use of the replicas of a point, in percent: simulated nodes'
/// CPU and card, or real replica processes' CPU (NaN for the card).
fn replica_use(p: &PartPoint) -> (f64, f64) {
    let mean = |v: Vec<f64>| {
        if v.is_empty() {
            f64::NAN
        } else {
            100.0 * v.iter().sum::<f64>() / v.len() as f64
        }
    };
    if let Some(d) = &p.sim {
        let r: Vec<_> = d.nodes.iter().filter(|n| n.role == "replica").collect();
        (
            mean(r.iter().map(|n| n.cpu).collect()),
            mean(r.iter().map(|n| n.nic_out).collect()),
        )
    } else if let Some(c) = &p.cpu {
        (
            mean(
                c.iter()
                    .filter(|x| x.role == "replica")
                    .map(|x| x.cpu)
                    .collect(),
            ),
            f64::NAN,
        )
    } else {
        (f64::NAN, f64::NAN)
    }
}

/// CPU of the ordering layer (coordinator node), in percent.
fn coordinator_cpu(p: &PartPoint) -> f64 {
    if let Some(d) = &p.sim {
        d.nodes
            .iter()
            .find(|n| n.role == "coordinator")
            .map_or(f64::NAN, |n| n.cpu * 100.0)
    } else if let Some(c) = &p.cpu {
        c.iter()
            .find(|x| x.role == "coordinator")
            .map_or(f64::NAN, |x| x.cpu * 100.0)
    } else {
        f64::NAN
    }
}

fn curves(
    points: &[PartPoint],
    keep: impl Fn(&PartPoint) -> bool,
    y: impl Fn(&PartPoint) -> f64,
) -> Vec<Series> {
    let mut names: Vec<String> = Vec::new();
    for p in points.iter().filter(|p| keep(p)) {
        if !names.contains(&p.config.series) {
            names.push(p.config.series.clone());
        }
    }
    names
        .into_iter()
        .map(|name| {
            let mut pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| keep(p) && p.config.series == name)
                .map(|p| (p.clients as f64, y(p)))
                .filter(|(_, v)| v.is_finite())
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series {
                label: name,
                points: pts,
            }
        })
        .collect()
}

fn panel(title: String, y_label: &str, log_x: bool, series: Vec<Series>) -> Panel {
    Panel {
        title,
        x_label: "clients".into(),
        y_label: y_label.into(),
        log_x,
        log_y: false,
        series,
    }
}

/// (cross %, clients, throughput +%, p50 response time −%, mean response time −%).
pub type Gain = (u32, usize, f64, f64, f64);

/// The relative improvement of speculative over classic execution, per cross
/// percentage and client count: (cross %, clients, throughput %, p50 %, mean %).
pub fn speculation_gains(points: &[PartPoint]) -> Vec<Gain> {
    let mut v = Vec::new();
    for s in points.iter().filter(|p| p.config.speculative) {
        let Some(c) = points.iter().find(|c| {
            !c.config.speculative
                && c.config.cross_percent == s.config.cross_percent
                && c.clients == s.clients
        }) else {
            continue;
        };
        v.push((
            s.config.cross_percent,
            s.clients,
            100.0 * (s.result.throughput_cmds_per_s / c.result.throughput_cmds_per_s - 1.0),
            100.0 * (1.0 - s.result.latency_ms_p50 / c.result.latency_ms_p50),
            100.0 * (1.0 - s.latency_ms_mean / c.latency_ms_mean),
        ));
    }
    v.sort_by_key(|x| (x.0, x.1));
    v
}

/// The figures of a report: (file suffix, SVG).
pub fn figures(r: &PartReport) -> Vec<(String, partita_plot::Figure)> {
    let title = |t: &str| {
        if r.simulated {
            format!("{t} (simulated)")
        } else {
            format!("{t} (real, this machine)")
        }
    };
    let log_x = r.simulated;
    let foot = &r.configuration;
    let mut out = Vec::new();
    match r.name.as_str() {
        "partitioning" => {
            // With several rounds, the figure draws one: the round of the first
            // target's median (or of the first ratio's), named in the title.
            let drawn = r
                .targets
                .first()
                .map(|t| t.round)
                .or_else(|| r.ratios.first().map(|x| x.round))
                .unwrap_or(1);
            let points: Vec<PartPoint> = if r.rounds > 1 {
                r.points
                    .iter()
                    .filter(|p| p.round == drawn)
                    .cloned()
                    .collect()
            } else {
                r.points.clone()
            };
            let mut panels = Vec::new();
            for w in [Workload::Query, Workload::Batch] {
                let keep = |p: &PartPoint| p.config.workload == w;
                if !points.iter().any(keep) {
                    continue;
                }
                panels.push(panel(
                    format!("{}: throughput", w.partitioned(1, 0).label()),
                    "commands/s",
                    log_x,
                    curves(&points, keep, |p| p.result.throughput_cmds_per_s),
                ));
                panels.push(panel(
                    format!("{}: response time (p50)", w.partitioned(1, 0).label()),
                    "ms",
                    log_x,
                    curves(&points, keep, |p| p.result.latency_ms_p50),
                ));
            }
            let name = if r.rounds > 1 {
                format!(
                    "Figure 9: state partitioning vs classic SMR, round {drawn} of {} (the median)",
                    r.rounds
                )
            } else {
                "Figure 9: state partitioning vs classic SMR".to_string()
            };
            out.push((
                "fig9".to_string(),
                crate::framework::figure(&title(&name), foot, &panels, 2),
            ));
        }
        "cross-partition" => {
            let all = |_: &PartPoint| true;
            let panels = vec![
                panel(
                    "throughput".into(),
                    "commands/s",
                    log_x,
                    curves(&r.points, all, |p| p.result.throughput_cmds_per_s),
                ),
                panel(
                    "response time (p50)".into(),
                    "ms",
                    log_x,
                    curves(&r.points, all, |p| p.result.latency_ms_p50),
                ),
            ];
            out.push((
                "fig10".to_string(),
                crate::framework::figure(
                    &title("Figure 10: cross-partition queries, 2 partitions"),
                    foot,
                    &panels,
                    2,
                ),
            ));
            let mut panels = vec![panel(
                if r.simulated {
                    "replica CPU (mean of 4 replicas; execution + replies, one event loop)".into()
                } else {
                    "replica process CPU (mean of 4; all threads)".into()
                },
                "% of one core",
                log_x,
                curves(&r.points, all, |p| replica_use(p).0),
            )];
            if r.simulated {
                panels.push(panel(
                    "replica network card, sending (replies)".into(),
                    "% busy",
                    log_x,
                    curves(&r.points, all, |p| replica_use(p).1),
                ));
            }
            panels.push(panel(
                "coordinator CPU".into(),
                "% of one core",
                log_x,
                curves(&r.points, all, coordinator_cpu),
            ));
            out.push((
                "fig11".to_string(),
                crate::framework::figure(
                    &title("Figure 11: CPU use with cross-partition queries"),
                    foot,
                    &panels,
                    2,
                ),
            ));
        }
        _ => {
            let gains = speculation_gains(&r.points);
            let mut clients: Vec<usize> = gains.iter().map(|g| g.1).collect();
            clients.dedup();
            clients.sort();
            clients.dedup();
            let series = |f: &dyn Fn(&Gain) -> f64| {
                clients
                    .iter()
                    .map(|&c| Series {
                        label: format!("{c} clients"),
                        points: gains
                            .iter()
                            .filter(|g| g.1 == c)
                            .map(|g| (g.0 as f64, f(g)))
                            .filter(|(_, v)| v.is_finite())
                            .collect(),
                    })
                    .collect::<Vec<_>>()
            };
            let mk = |t: &str, s| Panel {
                title: t.into(),
                x_label: "% cross-partition queries".into(),
                y_label: "improvement %".into(),
                log_x: false,
                log_y: false,
                series: s,
            };
            let panels = vec![
                mk("throughput improvement", series(&|g| g.2)),
                mk("response time improvement (p50)", series(&|g| g.3)),
                mk("response time improvement (mean)", series(&|g| g.4)),
            ];
            out.push((
                "fig12".to_string(),
                crate::framework::figure(
                    &title("Figure 12: speculative execution with 2 partitions"),
                    foot,
                    &panels,
                    3,
                ),
            ));
        }
    }
    out
}

/// Write the report as JSON and its figures next to it (`FILE.json` → `FILE-fig9.svg`).
pub fn write(r: &PartReport, json: &Path) -> anyhow::Result<Vec<PathBuf>> {
    crate::framework::write_report(r, figures(r), json)
}

/// A readable table: the configuration, every point, then ratios, targets or gains.
pub fn table(r: &PartReport) -> String {
    let mut s = format!(
        "{} ({})\nconfiguration: {}\nmachine: {}\n",
        r.name,
        if r.simulated { "SIMULATED" } else { "REAL" },
        r.configuration,
        r.machine
    );
    s += &format!(
        "{:<6} {:<18} {:>7} {:>11} {:>12} {:>8} {:>8} {:>8} {:>7} {:>7}  {}\n",
        "wkld",
        "series",
        "clients",
        "cmd/s",
        "ops/s",
        "p50 ms",
        "mean ms",
        "p99 ms",
        "repCPU%",
        "coCPU%",
        "busiest"
    );
    let mut sorted: Vec<&PartPoint> = r.points.iter().collect();
    let order: BTreeMap<String, usize> = r
        .points
        .iter()
        .enumerate()
        .rev()
        .map(|(i, p)| (format!("{:?}{}", p.config.workload, p.config.series), i))
        .collect();
    sorted.sort_by_key(|p| {
        (
            p.round,
            order[&format!("{:?}{}", p.config.workload, p.config.series)],
            p.clients,
        )
    });
    let mut round = 0;
    for p in sorted {
        if r.rounds > 1 && p.round != round {
            round = p.round;
            s += &format!("round {round} of {}\n", r.rounds);
        }
        s += &format!(
            "{:<6} {:<18} {:>7} {:>11.0} {:>12.0} {:>8.2} {:>8.2} {:>8.2} {:>7.0} {:>7.0}  {}\n",
            format!("{:?}", p.config.workload).to_lowercase(),
            p.config.series,
            p.clients,
            p.result.throughput_cmds_per_s,
            p.result.throughput_ops_per_s,
            p.result.latency_ms_p50,
            p.latency_ms_mean,
            p.result.latency_ms_p99,
            replica_use(p).0,
            coordinator_cpu(p),
            bottleneck(p)
        );
        if let Some(c) = &p.cpu {
            s += &format!("{:>8}{}\n", "", cpu_line(c));
        }
    }
    if let Some(p) = r.points.first() {
        s += &format!("(mean response time: {})\n", p.latency_mean_source);
    }
    if !r.ratios.is_empty() {
        s += if r.rounds > 1 {
            "peak throughput against classic SMR (each series: its median round)\n"
        } else {
            "peak throughput against classic SMR\n"
        };
        for x in &r.ratios {
            s += &format!(
                "  {:<6} {:<5} {:>11.0} cmd/s ({} clients) / SMR {:>9.0} = {:.2}x{}\n",
                format!("{:?}", x.workload).to_lowercase(),
                x.series,
                x.peak_cmds_per_s,
                x.peak_clients,
                x.smr_peak_cmds_per_s,
                x.ratio,
                if r.rounds > 1 {
                    format!(" (round {})", x.round)
                } else {
                    String::new()
                }
            );
        }
    }
    for t in &r.targets {
        let rounds = if t.round_ratios.is_empty() {
            String::new()
        } else {
            format!(
                " (rounds: {}; {} of {} at or above {:.1}x)",
                t.round_ratios
                    .iter()
                    .map(|x| format!("{x:.2}x"))
                    .collect::<Vec<_>>()
                    .join(" "),
                t.rounds_met,
                t.round_ratios.len(),
                t.required
            )
        };
        s += &format!(
            "target {}: {:.2}x{rounds}, required {:.1}x: {}\n  evidence: {}\n",
            t.what,
            t.ratio,
            t.required,
            if t.met { "MET" } else { "MISSED" },
            t.evidence
        );
    }
    let gains = speculation_gains(&r.points);
    if !gains.is_empty() {
        s += "speculative over classic (2 partitions): cross %, clients, throughput +%, p50 -%, mean -%\n";
        for g in gains {
            s += &format!(
                "  {:>3}% {:>6} {:>+8.1} {:>+8.1} {:>+8.1}\n",
                g.0, g.1, g.2, g.3, g.4
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real query point of `series` measured in `round` at `cmds` commands/s.
    fn point(series: &str, partitions: u32, round: u32, clients: usize, cmds: f64) -> PartPoint {
        PartPoint {
            config: PartConfig {
                series: series.into(),
                workload: Workload::Query,
                partitions,
                replicas_per_partition: 2,
                cross_percent: 0,
                speculative: false,
                rings: false,
            },
            clients,
            round,
            result: BenchResult {
                workload: Workload::Query,
                mode: "smr".into(),
                ordering: "ring-paxos".into(),
                durability: "memory".into(),
                replicas: 2 * partitions as usize,
                acceptors: 3,
                batch_bytes_max: 8192,
                window_instances_max: 16,
                clients,
                think_ms: 0,
                preload: 1000,
                duration_s: 1.0,
                measured_s: 0.8,
                commands: (cmds * 0.8) as u64,
                throughput_cmds_per_s: cmds,
                throughput_ops_per_s: cmds,
                latency_ms_p50: 1.0,
                latency_ms_p90: 2.0,
                latency_ms_p99: 3.0,
                latency_ms_max: 4.0,
                latency_ms_mean: None,
                timeouts: 0,
                resubmissions: 0,
                tentative_ms_p50_p90: None,
                psmr_outcomes: None,
                node_cpu: None,
                node_runtime_threads: None,
                node_io_thread: false,
                client_connections: None,
                cpu_us_per_cmd: None,
                cpu_user_us_per_cmd: None,
                cpu_system_us_per_cmd: None,
                cpu_processes: 0,
                client_cpu_us_per_cmd: 0.0,
                wal_bytes: Vec::new(),
                restart_ms: Vec::new(),
            },
            latency_ms_mean: 1.0,
            latency_mean_source: "measured".into(),
            sim: None,
            cpu: None,
        }
    }

    /// Rounds of SMR and 2 P, each at two client counts, with these 2 P / SMR peak
    /// ratios (SMR's peak is 10,000 in every round).
    fn rounds_with(ratios: &[f64]) -> Vec<PartPoint> {
        let mut v = Vec::new();
        for (i, r) in ratios.iter().enumerate() {
            let round = i as u32 + 1;
            v.push(point("SMR", 1, round, 8, 9_000.0));
            v.push(point("SMR", 1, round, 16, 10_000.0));
            v.push(point("2 P", 2, round, 8, 10_000.0 * r - 500.0));
            v.push(point("2 P", 2, round, 16, 10_000.0 * r));
        }
        v
    }

    #[test]
    fn several_rounds_give_the_median_ratio_and_every_round_beside_it() {
        let o = PartOptions::real();
        let r = finish(
            PartExperiment::Partitioning,
            &o,
            false,
            "test".into(),
            rounds_with(&[1.2, 1.9, 1.6]),
        );
        assert_eq!(r.rounds, 3);
        let t = &r.targets[0];
        assert!((t.ratio - 1.6).abs() < 1e-9, "{t:?}");
        assert_eq!(t.round, 3);
        assert!(t.met);
        assert_eq!(t.rounds_met, 2);
        assert_eq!(t.round_ratios.len(), 3);
        assert!((t.round_ratios[0] - 1.2).abs() < 1e-9);
        let two_p = r.ratios.iter().find(|x| x.series == "2 P").unwrap();
        assert_eq!((two_p.round, two_p.peak_clients), (3, 16));
        let text = table(&r);
        assert!(text.contains("median of 3 rounds"), "{text}");
        assert!(text.contains("2 of 3 at or above 1.5x"), "{text}");
        assert!(text.contains("round 2 of 3"), "{text}");
        let fig = figures(&r)[0].1.svg().unwrap();
        assert!(
            fig.contains("round 3 of 3"),
            "the figure draws the median round"
        );

        // An even count takes the lower middle: 1.2 and 1.9 give 1.2, missed.
        let even = finish(
            PartExperiment::Partitioning,
            &o,
            false,
            "test".into(),
            rounds_with(&[1.9, 1.2]),
        );
        let t = &even.targets[0];
        assert!(
            (t.ratio - 1.2).abs() < 1e-9 && !t.met && t.rounds_met == 1,
            "{t:?}"
        );
        assert_eq!(t.round, 2);

        // One round: no round list, and the table does not mention rounds.
        let one = finish(
            PartExperiment::Partitioning,
            &o,
            false,
            "test".into(),
            rounds_with(&[1.7]),
        );
        assert!(one.targets[0].round_ratios.is_empty() && one.targets[0].met);
        assert!(!table(&one).contains("round"), "{}", table(&one));
    }

    #[test]
    fn clusters_cut_the_bench_key_space_in_pairs_of_replicas() {
        let cfg = PartConfig {
            series: "4 P".into(),
            workload: Workload::Query,
            partitions: 4,
            replicas_per_partition: 2,
            cross_percent: 0,
            speculative: true,
            rings: false,
        };
        let o = PartOptions {
            preload: 1000,
            batchers: 2,
            batch_delay_ms: 5,
            batch_bytes_max: 32768,
            batcher_interval_ms: 3,
            value_interval_ms: 2,
            ..PartOptions::tiny()
        };
        let c = partition_cluster(
            sim_smr_cluster(8, Protocol::RingPaxos, Durability::Fsync),
            &cfg,
            &o,
        );
        ClusterConfig::parse(&c.to_toml(), "test").expect("a valid cluster file");
        let l = c.partition_layout();
        assert_eq!(l.map.count(), 4);
        assert_eq!(l.map.key_space(), 2000);
        assert!(l.replicas.iter().all(|r| r.len() == 2), "{l:?}");
        assert!(c.execution.is_speculative());
        assert_eq!(c.membership().batchers, vec![12, 13]);
        assert_eq!(c.batching.batch_delay_ms, 5);
        assert_eq!(c.batching.batch_bytes_max, 32768);
        assert_eq!(c.batching.batcher_interval_ms, 3);
        assert_eq!(c.batching.value_interval_ms, 2);
        let sentence = configuration(PartExperiment::Partitioning, &o, true, "");
        assert!(
            sentence.contains(
                "batching 32768 B / 5 ms / values at least 2 ms apart unless full / window 16"
            ),
            "{sentence}"
        );
        assert!(
            sentence.contains("at least 3 ms between batches"),
            "{sentence}"
        );
    }
}
