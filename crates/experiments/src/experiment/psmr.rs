//! Paper 002 §IV-A and §V, Figures 2 to 5: P-SMR and opt-PSMR against SMR, in the
//! simulator (`partita experiment psmr --sim`).
//!
//! Every point is a cluster of 3 acceptors and 2 replicas (Ring Paxos, fsync) whose
//! replicas run the B+tree sequentially (SMR), on K worker threads with CC-G (P-SMR),
//! or on K threads with clients mapping by OC-G (opt-PSMR), under the `dependent-P`
//! workload: P% inserts and deletes (half each; dependent under CC-G), the rest reads,
//! keys uniform over a tree filled in random order. Each worker thread has a simulated
//! CPU of its own beside the node's event loop (`partita_sim::cpu`); a g_all command
//! runs in synchronous mode on the lowest thread and costs it a signal from and to
//! every other thread.
//!
//! - Figure 2: SMR and P-SMR throughput against the share of dependent commands.
//! - Figure 3: opt-PSMR at 100% dependent against the load (clients): fail rate and
//!   count against throughput; latency of all, failed and passed commands.
//! - Figure 4: SMR, P-SMR and opt-PSMR over 0, 1, 25, 50, 75 and 100% dependent:
//!   throughput, share of commands failed, mean latency.
//! - Figure 5: 100% dependent, 1 to 8 threads: throughput, throughput per thread
//!   (normalized by one thread's), fail rate and latency, worker CPU.
//!
//! The report lists the targets, each a ratio of this run's points with what it
//! must reach and whether it does.
//!
//! With `partitions` (`partita experiment psmr --sim --partition-counts P`), the sweep
//! is another one, which the papers did not run: paper 001's state partitioning and
//! paper 002's threads combined. SMR is P partitions of 2 sequential replicas each,
//! P-SMR the same partitions whose replicas run K threads over their partition's keys
//! (CC-G; opt-PSMR is not built inside partitions), over Figure 2's dependent shares
//! (keys uniform over every partition, so every command is one partition's). Only
//! Figure 2 is drawn, and there are no paper targets.

use super::*;
use partita_sim::bench::PsmrLoad;

/// The sweep.
#[derive(Clone, Debug)]
pub struct PsmrOptions {
    /// Worker threads of P-SMR and opt-PSMR in Figures 2 to 4 (the paper: 8).
    pub threads: usize,
    /// Shares of dependent commands (Figures 2 and 4).
    pub percents: Vec<u32>,
    /// Thread counts of Figure 5.
    pub thread_counts: Vec<usize>,
    /// Client counts of Figure 3 (opt-PSMR's load).
    pub fig3_clients: Vec<usize>,
    /// Clients of every other point (enough to saturate the replicas).
    pub clients: usize,
    /// Standalone batchers in front of the leader, so that ordering (one receive per
    /// client command at the coordinator otherwise) is not what bounds the replicas.
    pub batchers: u32,
    /// Order by Multi-Ring Paxos (paper 002 §V-B, the paper's setup): P-SMR and
    /// opt-PSMR with K threads on a ring per thread's group and one for g_all; SMR on
    /// as many rings as Figure 4's P-SMR, each carrying the whole state (clients
    /// spread over them). No batchers then (they do not combine with rings).
    pub rings: bool,
    /// A what-if: IP multicast on the simulated LAN (paper 002's Multi-Ring Paxos, like
    /// paper 001's Ring Paxos, multicasts its values; the runtime sends a TCP copy per
    /// receiver).
    pub multicast: bool,
    /// Each client machine keeps this many commands outstanding, a session each (paper
    /// 002 §V-B: "a window of outstanding requests that can contain up to 50
    /// commands"); `clients` counts the sessions, so `clients / window` machines. In
    /// the simulator a machine's sessions share its network card; on real processes
    /// its connection to each node (`partita bench --connections`). `None`: a machine
    /// per session. Paper 002's sweep only: P-SMR inside partitions, which the papers
    /// did not run, keeps a machine per session, as it was measured
    /// ([`PsmrOptions::client_window`]).
    pub window: Option<usize>,
    /// Virtual time per point (10% trimmed at each end).
    pub duration: Duration,
    pub preload: u64,
    pub think_ms: u64,
    pub cost: CostTable,
    pub cost_source: String,
    pub seed: u64,
    pub jobs: usize,
    pub progress: bool,
    /// P-SMR inside this many partitions against the partitions alone (see the module
    /// doc); `None`: paper 002's sweep.
    pub partitions: Option<u32>,
}

impl PsmrOptions {
    /// The paper's sizes: 8 threads, 10 million keys, the x points of Figure 4.
    pub fn full() -> PsmrOptions {
        PsmrOptions {
            threads: 8,
            percents: vec![0, 1, 25, 50, 75, 100],
            thread_counts: vec![1, 2, 4, 8],
            fig3_clients: vec![25, 50, 100, 200, 400, 800],
            clients: 800,
            batchers: 4,
            rings: false,
            multicast: false,
            window: Some(PAPER_WINDOW),
            duration: Duration::from_secs(2),
            preload: 10_000_000,
            think_ms: 0,
            cost: CostTable::default(),
            cost_source: "built-in defaults".into(),
            seed: 1,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            progress: true,
            partitions: None,
        }
    }

    /// A small sweep for tests and a first look.
    pub fn quick() -> PsmrOptions {
        PsmrOptions {
            threads: 4,
            percents: vec![0, 50, 100],
            thread_counts: vec![1, 4],
            fig3_clients: vec![20, 80],
            clients: 80,
            duration: Duration::from_millis(300),
            preload: 20_000,
            progress: false,
            ..PsmrOptions::full()
        }
    }

    /// The simulated sweep as paper 002 ran it (§V-B): every point on Multi-Ring Paxos,
    /// no batchers, clients keeping windows of 50 commands outstanding (as every sweep's
    /// do unless told otherwise). At full size,
    /// 6,400 outstanding commands (128 client machines) for every point but Figure 3's
    /// loads (100 to 6,400): 9 rings' coordinators order far more than one ring, and
    /// the paper sized its load "to reach maximum performance".
    pub fn as_paper_ran(mut self, quick: bool) -> PsmrOptions {
        self.rings = true;
        self.batchers = 0;
        self.window = Some(PAPER_WINDOW);
        if !quick {
            self.clients = 6_400;
            self.fig3_clients = vec![100, 400, 1_600, 6_400];
        }
        self
    }

    fn driver(&self) -> SimDriver {
        SimDriver {
            cost: self.cost.clone(),
            cost_source: self.cost_source.clone(),
            jobs: self.jobs,
            multicast: self.multicast,
            window: self.client_window(),
        }
    }

    /// The window the sweep's clients keep (see [`PsmrOptions::window`]).
    pub fn client_window(&self) -> Option<usize> {
        self.window.filter(|_| self.partitions.is_none())
    }

    /// The clients in words: sessions, and the machines they share (`simulated`: their
    /// cards; on real processes their connections).
    fn clients_words(&self, simulated: bool) -> String {
        let over = if simulated {
            "through one card"
        } else {
            "over one connection to each node"
        };
        match (
            self.client_window(),
            framework::client_machines(self.clients, self.client_window()),
        ) {
            (Some(w), Some(m)) if w > 1 => format!(
                "{} clients in windows of {w} (at most {m} client machine{}, each sending and \
                 receiving its window's commands {over})",
                self.clients,
                if m == 1 { "" } else { "s" }
            ),
            _ => format!("{} clients", self.clients),
        }
    }
}

/// Paper 002's clients' window of outstanding commands (§V-B).
pub const PAPER_WINDOW: usize = 50;

/// The three execution models.
pub const SMR: &str = "SMR";
pub const PSMR: &str = "P-SMR";
pub const OPT: &str = "opt-PSMR";

/// The cluster of a point: SMR (`threads` 0), P-SMR, or opt-PSMR (`optimistic`).
pub fn psmr_cluster(
    threads: usize,
    optimistic: bool,
    preload: u64,
    batchers: u32,
) -> ClusterConfig {
    let c = sim_smr_cluster(2, Protocol::RingPaxos, Durability::Fsync)
        .with_batchers(batchers)
        .expect("batchers on the simulated cluster");
    with_execution(c, threads, optimistic, preload)
}

/// A real cluster of `partita up`'s kind: 3 acceptors and 2 replicas (Ring Paxos,
/// fsync), as [`psmr_cluster`] configures its execution.
pub fn psmr_real_cluster(
    threads: usize,
    optimistic: bool,
    preload: u64,
    batchers: u32,
) -> ClusterConfig {
    let c = smr_cluster(2, Protocol::RingPaxos, Durability::Fsync)
        .with_batchers(batchers)
        .expect("batchers on a local cluster");
    with_execution(c, threads, optimistic, preload)
}

/// `c`'s replicas with `threads` worker threads (0: SMR), optimistic or not, the
/// threads splitting the workload's keys, 0..2N.
fn with_execution(
    c: ClusterConfig,
    threads: usize,
    optimistic: bool,
    preload: u64,
) -> ClusterConfig {
    let key_max = bench::key_space(preload).max(threads as u64) - 1;
    c.with_psmr(threads, optimistic, key_max)
        .unwrap_or_else(|e| panic!("the experiment's P-SMR: {e}"))
}

/// `c` ordered by Multi-Ring Paxos when `smr_threads` says so: with P-SMR worker
/// threads, a ring per thread's group and one for g_all; sequential replicas (SMR) on
/// `smr_threads + 1` rings, each carrying the whole state.
fn with_rings(c: ClusterConfig, smr_threads: Option<usize>) -> ClusterConfig {
    let Some(k) = smr_threads else {
        return c;
    };
    let rings = match c.execution.threads() {
        0 => k + 1,
        t => t,
    };
    c.with_multiring(rings as u32, 1)
        .unwrap_or_else(|e| panic!("the experiment's rings: {e}"))
}

/// Every point, in report order.
pub fn points(o: &PsmrOptions) -> Vec<PointSpec> {
    match o.partitions {
        Some(parts) => partitioned_points(o, parts),
        None => points_with(o, psmr_cluster),
    }
}

/// The `dependent-percent` workload of every point, with `clients` clients.
fn dependent_load(o: &PsmrOptions, percent: u32, clients: usize) -> BenchConfig {
    BenchConfig {
        give_up: None,
        workload: Workload::Dependent { percent },
        clients,
        duration: o.duration,
        think_ms: o.think_ms,
        preload: o.preload,
        seed: o.seed,
        trim: 0.1,
        progress: false,
        key_space: None,
    }
}

/// The simulated cluster of a partitioned point: `partitions` partitions of 2
/// replicas over the workload's keys, each replica sequential (`threads` 0) or with
/// `threads` P-SMR worker threads over its partition's keys.
pub fn psmr_partitioned_cluster(
    threads: usize,
    preload: u64,
    batchers: u32,
    partitions: u32,
) -> ClusterConfig {
    let key_space = bench::key_space(preload).max(partitions as u64 * threads.max(1) as u64);
    // Partitions first: the simulator numbers nodes 1..=N, and the partitions' replicas
    // replace the cluster's.
    let c = sim_smr_cluster(2, Protocol::RingPaxos, Durability::Fsync)
        .with_partitions(partitions, 2, key_space)
        .and_then(|c| c.with_batchers(batchers))
        .unwrap_or_else(|e| panic!("the experiment's partitions: {e}"));
    c.with_psmr(threads, false, key_space - 1)
        .unwrap_or_else(|e| panic!("the experiment's P-SMR inside partitions: {e}"))
}

/// P-SMR inside `partitions` partitions against the partitions alone, at every
/// dependent share.
fn partitioned_points(o: &PsmrOptions, partitions: u32) -> Vec<PointSpec> {
    let mut v = Vec::new();
    for &percent in &o.percents {
        for (series, threads) in [(SMR, 0), (PSMR, o.threads)] {
            v.push(PointSpec {
                series: series.into(),
                x_name: "dependent %".into(),
                x: percent as f64,
                cluster: psmr_partitioned_cluster(threads, o.preload, o.batchers, partitions),
                bench: dependent_load(o, percent, o.clients),
            });
        }
    }
    v
}

/// Every point, each cluster from `cluster(threads, optimistic, preload, batchers)`.
fn points_with(
    o: &PsmrOptions,
    cluster: fn(usize, bool, u64, u32) -> ClusterConfig,
) -> Vec<PointSpec> {
    let load = |percent: u32, clients: usize| dependent_load(o, percent, clients);
    // A point of a model (SMR with 0 threads; P-SMR; opt-PSMR when optimistic).
    let point =
        |(series, threads, optimistic): (&str, usize, bool), x_name: &str, x, bench| PointSpec {
            series: series.into(),
            x_name: x_name.into(),
            x,
            cluster: with_rings(
                cluster(
                    threads,
                    optimistic,
                    o.preload,
                    if o.rings { 0 } else { o.batchers },
                ),
                o.rings.then_some(o.threads),
            ),
            bench,
        };
    let (smr, psmr, opt) = (
        (SMR, 0, false),
        (PSMR, o.threads, false),
        (OPT, o.threads, true),
    );
    let mut v = Vec::new();
    for &p in &o.percents {
        for model in [smr, psmr, opt] {
            v.push(point(model, "dependent %", p as f64, load(p, o.clients)));
        }
    }
    for &c in &o.fig3_clients {
        v.push(point(opt, "clients", c as f64, load(100, c)));
    }
    for &k in &o.thread_counts {
        for model in [(PSMR, k, false), (OPT, k, true)] {
            v.push(point(model, "threads", k as f64, load(100, o.clients)));
        }
    }
    v
}

/// A target of the issue, checked on this run's points.
#[derive(Clone, Debug, Serialize)]
pub struct PsmrTarget {
    pub what: String,
    /// The measured ratio.
    pub ratio: f64,
    /// The condition it must meet, in words ("≥ 2.4").
    pub required: String,
    pub met: bool,
    /// The points behind the ratio.
    pub evidence: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct PsmrReport {
    pub name: String,
    pub simulated: bool,
    pub machine: String,
    /// What every point shares, in words (also the figures' footnote).
    pub configuration: String,
    pub points: Vec<Point>,
    pub targets: Vec<PsmrTarget>,
    /// P-SMR inside this many partitions against the partitions alone (no paper
    /// targets); absent: paper 002's sweep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u32>,
}

fn find<'a>(r: &'a [Point], series: &str, x_name: &str, x: f64) -> Option<&'a Point> {
    r.iter()
        .find(|p| p.series == series && p.x_name == x_name && p.x == x)
}

fn tp(p: &Point) -> f64 {
    p.result.throughput_cmds_per_s
}

fn psmr_of(p: &Point) -> PsmrLoad {
    p.sim
        .as_ref()
        .and_then(|s| s.psmr.clone())
        .or_else(|| p.psmr.clone())
        .unwrap_or_default()
}

/// The targets (paper 002's shapes), from the report's points.
pub fn targets(points: &[Point], threads: usize) -> Vec<PsmrTarget> {
    let mut v = Vec::new();
    let dep = "dependent %";
    let at = |s: &str, x: f64| find(points, s, dep, x);
    // opt-PSMR ≥ 2.4× P-SMR at 100% dependent.
    if let (Some(o), Some(p)) = (at(OPT, 100.0), at(PSMR, 100.0)) {
        let ratio = tp(o) / tp(p).max(1e-9);
        v.push(PsmrTarget {
            what: format!(
                "opt-PSMR over P-SMR, {threads} threads, 100% dependent (the paper: 2.4x)"
            ),
            ratio,
            required: "≥ 2.4".into(),
            met: ratio >= 2.4,
            evidence: format!("{:.0} against {:.0} commands/s", tp(o), tp(p)),
        });
    }
    // opt-PSMR ≥ SMR at every mix.
    let xs: Vec<f64> = points
        .iter()
        .filter(|p| p.series == OPT && p.x_name == dep)
        .map(|p| p.x)
        .collect();
    let mut worst: Option<(f64, f64)> = None;
    for &x in &xs {
        if let (Some(o), Some(s)) = (at(OPT, x), at(SMR, x)) {
            let r = tp(o) / tp(s).max(1e-9);
            if worst.is_none_or(|(w, _)| r < w) {
                worst = Some((r, x));
            }
        }
    }
    if let Some((ratio, x)) = worst {
        v.push(PsmrTarget {
            what: "opt-PSMR over SMR at every mix of Figure 4 (the lowest ratio)".into(),
            ratio,
            required: "≥ 1".into(),
            met: ratio >= 1.0,
            evidence: format!("lowest at {x}% dependent"),
        });
    }
    // P-SMR above SMR at 0%, below it past about 50%.
    if let (Some(p), Some(s)) = (at(PSMR, 0.0), at(SMR, 0.0)) {
        let ratio = tp(p) / tp(s).max(1e-9);
        v.push(PsmrTarget {
            what: "P-SMR over SMR at 0% dependent (above it by more than run-to-run noise; the paper: \"largely outperforms\")".into(),
            ratio,
            required: "≥ 1.1".into(),
            met: ratio >= 1.1,
            evidence: format!("{:.0} against {:.0} commands/s", tp(p), tp(s)),
        });
    }
    let past: Vec<(f64, f64)> = xs
        .iter()
        .filter(|&&x| x > 50.0)
        .filter_map(|&x| Some((x, tp(at(PSMR, x)?) / tp(at(SMR, x)?).max(1e-9))))
        .collect();
    if let Some(&(x, ratio)) = past.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
        // And where it crosses: the first mix at which P-SMR falls below SMR.
        let cross = xs
            .iter()
            .find(|&&x| matches!((at(PSMR, x), at(SMR, x)), (Some(p), Some(s)) if tp(p) < tp(s)));
        v.push(PsmrTarget {
            what: "P-SMR over SMR past 50% dependent (the highest ratio)".into(),
            ratio,
            required: "< 1".into(),
            met: ratio < 1.0,
            evidence: format!(
                "highest at {x}%; P-SMR first below SMR at {}",
                cross.map_or("no mix".into(), |c| format!("{c}%"))
            ),
        });
        // Where the P-SMR/SMR ratio crosses 1, interpolated linearly between the last
        // mix above it and the first below (the mixes are far apart).
        let ratio_at = |x: f64| Some(tp(at(PSMR, x)?) / tp(at(SMR, x)?).max(1e-9));
        let crossing = xs.windows(2).find_map(|w| {
            let (a, b) = (ratio_at(w[0])?, ratio_at(w[1])?);
            (a >= 1.0 && b < 1.0).then(|| w[0] + (a - 1.0) / (a - b) * (w[1] - w[0]))
        });
        if let Some(c) = crossing {
            v.push(PsmrTarget {
                what: "the share of dependent commands where P-SMR falls below SMR, interpolated (the paper: slightly under 50%)".into(),
                ratio: c,
                required: "25 to 50 (%)".into(),
                met: (25.0..=50.0).contains(&c),
                evidence: format!("P-SMR/SMR crosses 1 at about {c:.1}% between the measured mixes"),
            });
        }
    }
    // Failed commands' latency about twice the passed ones' (Figure 3's points).
    let fig3: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.series == OPT && p.x_name == "clients")
        .map(|p| {
            let l = psmr_of(p);
            (p.x, l.latency_ms_failed / l.latency_ms_passed.max(1e-9))
        })
        .filter(|(_, r)| r.is_finite() && *r > 0.0)
        .collect();
    if !fig3.is_empty() {
        let mut rs: Vec<f64> = fig3.iter().map(|x| x.1).collect();
        rs.sort_by(f64::total_cmp);
        let ratio = rs[(rs.len() - 1) / 2];
        v.push(PsmrTarget {
            what: "failed over passed commands' latency, opt-PSMR at 100% dependent (median over Figure 3's loads; the paper: about 2)".into(),
            ratio,
            required: "1.5 to 2.5".into(),
            met: (1.5..=2.5).contains(&ratio),
            evidence: fig3
                .iter()
                .map(|(c, r)| format!("{c} clients: {r:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    v
}

/// How a point's commands are ordered, in words.
fn ordering_words(o: &PsmrOptions) -> String {
    if o.rings {
        let skips = partita_consensus::multiring::SkipConfig::default();
        format!(
            "Multi-Ring Paxos (3 acceptors a ring; P-SMR and opt-PSMR: a ring per thread's \
             group and one for g_all; SMR: {} rings, each carrying everything; M 1, lambda \
             {}/s, delta {} ms), no batchers",
            o.threads + 1,
            skips.lambda_per_s,
            skips.delta_ms
        )
    } else {
        format!("{} batchers, Ring Paxos", o.batchers)
    }
}

/// Paper 002's experiments in the simulator.
pub fn psmr_sim(o: &PsmrOptions) -> anyhow::Result<PsmrReport> {
    let driver = o.driver();
    let measured = run_sim_sweep(&points(o), &driver, o.progress)?;
    let points = framework::points(measured);
    // Paper 002's sweep, or P-SMR inside partitions (see the module doc).
    let (replicas, threads, fill) = match o.partitions {
        Some(p) => (
            format!("{p} partitions of 2 replicas"),
            format!(
                "SMR: sequential replicas, P-SMR: {} threads per replica over its partition's \
                 keys (CC-G)",
                o.threads
            ),
            "",
        ),
        None => (
            "2 replicas".to_string(),
            format!("{} threads (Figures 2-4)", o.threads),
            " in random order",
        ),
    };
    let configuration = format!(
        "SIMULATED{} ({}); 3 acceptors, {replicas}, {}, fsync; {threads}; {} keys preloaded\
         {fill}; {}, think time 0..={} ms; {:.1} s virtual runs; signal between \
         threads {} ns",
        if o.multicast {
            " with IP multicast (what-if: group sends leave a card once)"
        } else {
            ""
        },
        driver.machine(),
        ordering_words(o),
        o.preload,
        o.clients_words(true),
        o.think_ms,
        o.duration.as_secs_f64(),
        o.cost.psmr_signal_ns
    );
    Ok(PsmrReport {
        name: "psmr".into(),
        simulated: true,
        machine: driver.machine(),
        // The papers ran no partitioned sweep: no targets for one.
        targets: match o.partitions {
            Some(_) => Vec::new(),
            None => targets(&points, o.threads),
        },
        configuration,
        points,
        partitions: o.partitions,
    })
}

/// The sweep on real processes on this machine: every point a fresh cluster of real
/// `partita node` processes (the binary `exe`) whose replicas run their worker threads
/// on OS threads, with `partita bench`'s clients. Thread counts above this machine's
/// cores are left out (`o.threads` is capped to them).
pub async fn psmr_real(o: &PsmrOptions, exe: &Path) -> anyhow::Result<PsmrReport> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut o = o.clone();
    o.threads = o.threads.min(cores);
    o.thread_counts.retain(|&k| k <= cores);
    let mut driver = framework::RealDriver::new(exe, None)?;
    driver.window = o.client_window();
    let measured =
        framework::run_sweep(&points_with(&o, psmr_real_cluster), &mut driver, o.progress).await?;
    let points: Vec<Point> = measured
        .into_iter()
        .map(|m| {
            let mut p = m.point;
            p.latency_ms_mean = p.result.latency_ms_mean;
            // The first replica's counters over the load (the preload's left out).
            let first = m.replica_status.first();
            let before =
                first.and_then(|f| m.replica_status_before.iter().find(|b| b.node == f.node));
            let counter = |s: Option<&partita_wire::NodeStatus>, name: &str| {
                s.and_then(|s| s.counter(name)).unwrap_or(0)
            };
            let c = |name: &str| counter(first, name).saturating_sub(counter(before, name));
            if first.is_some_and(|s| s.counter("psmr_parallel").is_some()) {
                // Latency by outcome from the clients (opt-PSMR only).
                let outcomes = p.result.psmr_outcomes.clone();
                p.psmr = Some(PsmrLoad {
                    threads: 0,
                    parallel: c("psmr_parallel"),
                    synchronous: c("psmr_synchronous"),
                    passed: c("psmr_checks_passed"),
                    failed: c("psmr_checks_failed"),
                    latency_ms_failed: outcomes.as_ref().map_or(0.0, |o| o.latency_ms_failed),
                    latency_ms_passed: outcomes.as_ref().map_or(0.0, |o| o.latency_ms_passed),
                    commands_failed: outcomes.as_ref().map_or(0, |o| o.commands_failed),
                    ..PsmrLoad::default()
                });
            }
            p
        })
        .collect();
    let configuration = format!(
        "REAL processes on this machine ({}); 3 acceptors, 2 replicas, {}, \
         fsync; {} worker threads on OS threads (Figures 2-4); {} keys preloaded in random \
         order; {}, think time 0..={} ms; {:.1} s runs. Every process of the \
         cluster and the clients share this machine's {cores} cores; P-SMR counters are \
         the first replica's over the load, opt-PSMR's latency by outcome the clients' \
         (worker CPU is not measured here)",
        driver.machine(),
        ordering_words(&o),
        o.threads,
        o.preload,
        o.clients_words(false),
        o.think_ms,
        o.duration.as_secs_f64(),
    );
    Ok(PsmrReport {
        name: "psmr".into(),
        simulated: false,
        machine: driver.machine(),
        targets: targets(&points, o.threads),
        configuration,
        points,
        partitions: None,
    })
}

fn curve(r: &PsmrReport, series: &str, x_name: &str, y: impl Fn(&Point) -> f64) -> Vec<(f64, f64)> {
    r.points
        .iter()
        .filter(|p| p.series == series && p.x_name == x_name)
        .map(|p| (p.x, y(p)))
        .collect()
}

/// Figures 2 to 5.
pub fn psmr_figures(r: &PsmrReport) -> Vec<(String, partita_plot::Figure)> {
    let dep = "dependent %";
    let kcps = |p: &Point| tp(p) / 1000.0;
    let mean = |p: &Point| p.latency_ms_mean.unwrap_or(p.result.latency_ms_p50);
    let kind = if r.simulated {
        "simulated"
    } else {
        "real processes"
    };
    let failed_pct = |p: &Point| {
        let l = psmr_of(p);
        100.0 * l.failed as f64 / (l.parallel + l.synchronous).max(1) as f64
    };
    let title = match r.partitions {
        Some(p) => format!(
            "P-SMR inside {p} partitions against the {p} partitions alone, against dependent \
             commands ({kind})"
        ),
        None => format!("Paper 002 Figure 2: P-SMR and SMR against dependent commands ({kind})"),
    };
    let fig2 = framework::figure(
        &title,
        &r.configuration,
        &[panel(
            "throughput",
            "inserts and deletes (%)",
            "Kcps",
            vec![
                line(SMR, curve(r, SMR, dep, kcps)),
                line(PSMR, curve(r, PSMR, dep, kcps)),
            ],
        )],
        1,
    );
    if r.partitions.is_some() {
        return vec![("fig2".into(), fig2)];
    }
    let fig3_points: Vec<&Point> = r
        .points
        .iter()
        .filter(|p| p.series == OPT && p.x_name == "clients")
        .collect();
    let fig3 = framework::figure(
        &format!("Paper 002 Figure 3: opt-PSMR, every command optimistic ({kind})"),
        &r.configuration,
        &[
            panel(
                "fail rate against throughput",
                "Kcps",
                "failed (% of optimistic)",
                vec![line(
                    "fail rate",
                    fig3_points
                        .iter()
                        .map(|p| (kcps(p), 100.0 * psmr_of(p).fail_rate()))
                        .collect(),
                )],
            ),
            panel(
                "failed commands against throughput",
                "Kcps",
                "failed per second",
                vec![line(
                    "failed/s",
                    fig3_points
                        .iter()
                        .map(|p| {
                            (
                                kcps(p),
                                psmr_of(p).failed as f64 / p.result.measured_s.max(1e-9),
                            )
                        })
                        .collect(),
                )],
            ),
            panel(
                "latency",
                "clients",
                "ms",
                vec![
                    line("all", fig3_points.iter().map(|p| (p.x, mean(p))).collect()),
                    line(
                        "failed",
                        fig3_points
                            .iter()
                            .map(|p| (p.x, psmr_of(p).latency_ms_failed))
                            .collect(),
                    ),
                    line(
                        "passed",
                        fig3_points
                            .iter()
                            .map(|p| (p.x, psmr_of(p).latency_ms_passed))
                            .collect(),
                    ),
                ],
            ),
        ],
        3,
    );
    let fig4 = framework::figure(
        &format!("Paper 002 Figure 4: SMR, P-SMR and opt-PSMR ({kind})"),
        &r.configuration,
        &[
            panel(
                "maximum throughput",
                "dependent commands (%)",
                "Kcps",
                vec![
                    line(SMR, curve(r, SMR, dep, kcps)),
                    line(PSMR, curve(r, PSMR, dep, kcps)),
                    line(OPT, curve(r, OPT, dep, kcps)),
                ],
            ),
            panel(
                "failed",
                "dependent commands (%)",
                "% of commands",
                vec![line(OPT, curve(r, OPT, dep, failed_pct))],
            ),
            panel(
                "latency",
                "dependent commands (%)",
                "mean ms",
                vec![
                    line(SMR, curve(r, SMR, dep, mean)),
                    line(PSMR, curve(r, PSMR, dep, mean)),
                    line(OPT, curve(r, OPT, dep, mean)),
                ],
            ),
        ],
        3,
    );
    let per_thread = |series: &str| -> Vec<(f64, f64)> {
        let c = curve(r, series, "threads", tp);
        let one = c.iter().find(|(k, _)| *k == 1.0).map(|x| x.1);
        c.iter()
            .map(|&(k, t)| (k, one.map_or(0.0, |o| t / o.max(1e-9) / k)))
            .collect()
    };
    let fig5 = framework::figure(
        &format!("Paper 002 Figure 5: 100% dependent commands against threads ({kind})"),
        &r.configuration,
        &[
            panel(
                "throughput",
                "threads",
                "Kcps",
                vec![
                    line(PSMR, curve(r, PSMR, "threads", kcps)),
                    line(OPT, curve(r, OPT, "threads", kcps)),
                ],
            ),
            panel(
                "throughput per thread (normalized)",
                "threads",
                "of one thread's",
                vec![line(PSMR, per_thread(PSMR)), line(OPT, per_thread(OPT))],
            ),
            panel(
                "fail rate and latency",
                "threads",
                "% failed / mean ms",
                vec![
                    line(
                        "opt-PSMR failed %",
                        curve(r, OPT, "threads", |p| 100.0 * psmr_of(p).fail_rate()),
                    ),
                    line("P-SMR ms", curve(r, PSMR, "threads", mean)),
                    line("opt-PSMR ms", curve(r, OPT, "threads", mean)),
                ],
            ),
            panel(
                "worker CPU (one replica)",
                "threads",
                "cores busy",
                vec![
                    line(PSMR, curve(r, PSMR, "threads", |p| psmr_of(p).worker_cpu)),
                    line(OPT, curve(r, OPT, "threads", |p| psmr_of(p).worker_cpu)),
                ],
            ),
        ],
        2,
    );
    vec![
        ("fig2".into(), fig2),
        ("fig3".into(), fig3),
        ("fig4".into(), fig4),
        ("fig5".into(), fig5),
    ]
}

/// The report as a table: one line per point, then the targets.
pub fn psmr_table(r: &PsmrReport) -> String {
    let mut s = format!("{}\n", r.configuration);
    s += &format!(
        "{:<9} {:>12} {:>6} {:>10} {:>9} {:>9} {:>8} {:>9} {:>9}\n",
        "series", "x", "value", "cmd/s", "mean ms", "p99 ms", "failed%", "fail ms", "pass ms"
    );
    for p in &r.points {
        let l = psmr_of(p);
        s += &format!(
            "{:<9} {:>12} {:>6} {:>10.0} {:>9.2} {:>9.2} {:>8.1} {:>9.2} {:>9.2}\n",
            p.series,
            p.x_name,
            p.x,
            tp(p),
            p.latency_ms_mean.unwrap_or(0.0),
            p.result.latency_ms_p99,
            100.0 * l.fail_rate(),
            l.latency_ms_failed,
            l.latency_ms_passed
        );
    }
    s += "targets:\n";
    for t in &r.targets {
        s += &format!(
            "  {} {}: {:.2} (required {}; {})\n",
            if t.met { "MET    " } else { "NOT MET" },
            t.what,
            t.ratio,
            t.required,
            t.evidence
        );
    }
    s
}

/// Write the report and its figures (`FILE-fig2.svg` to `FILE-fig5.svg`).
pub fn write_psmr(r: &PsmrReport, json: &Path) -> anyhow::Result<Vec<PathBuf>> {
    framework::write_report(r, psmr_figures(r), json)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny sweep end to end: every model runs, opt-PSMR checks commands (some
    /// pass), P-SMR runs inserts and deletes in synchronous mode, the targets are
    /// computed from the points, and the figures are written.
    #[test]
    fn a_tiny_sweep_runs_every_model_and_writes_its_figures() {
        let o = PsmrOptions {
            percents: vec![0, 100],
            thread_counts: vec![1, 2],
            fig3_clients: vec![10],
            clients: 20,
            threads: 2,
            duration: Duration::from_millis(200),
            preload: 2_000,
            jobs: 2,
            ..PsmrOptions::quick()
        };
        let r = psmr_sim(&o).unwrap();
        assert_eq!(r.points.len(), 2 * 3 + 1 + 2 * 2);
        for p in &r.points {
            assert!(
                tp(p) > 0.0,
                "{} {} {}: no throughput",
                p.series,
                p.x_name,
                p.x
            );
        }
        let opt = find(&r.points, OPT, "dependent %", 100.0).unwrap();
        let l = psmr_of(opt);
        assert!(l.passed > 0, "opt-PSMR passed no check: {l:?}");
        let psmr = psmr_of(find(&r.points, PSMR, "dependent %", 100.0).unwrap());
        assert!(
            psmr.synchronous > 0 && psmr.passed == 0 && psmr.failed == 0,
            "{psmr:?}"
        );
        let smr = find(&r.points, SMR, "dependent %", 0.0).unwrap();
        assert!(smr.sim.as_ref().unwrap().psmr.is_none());
        assert!(r.targets.iter().any(|t| t.what.contains("2.4x")));
        let dir = tempfile::tempdir().unwrap();
        let files = write_psmr(&r, &dir.path().join("psmr.json")).unwrap();
        assert_eq!(files.len(), 1 + 4 * 2);
    }

    /// P-SMR inside partitions: every point has 2 partitions, P-SMR's replicas ran
    /// commands on their threads alone (reads of their partition's keys), SMR's have no
    /// threads, and only Figure 2 is drawn.
    #[test]
    fn a_tiny_partitioned_sweep_compares_psmr_inside_partitions_with_the_partitions() {
        let o = PsmrOptions {
            percents: vec![0, 50],
            clients: 40,
            threads: 2,
            duration: Duration::from_millis(200),
            preload: 2_000,
            jobs: 2,
            partitions: Some(2),
            ..PsmrOptions::quick()
        };
        // Not the paper's sweep: a machine per client, whatever the window.
        assert_eq!((o.window, o.client_window()), (Some(PAPER_WINDOW), None));
        let specs = points(&o);
        assert_eq!(specs.len(), 2 * 2);
        assert!(specs.iter().all(|p| p.cluster.partitioning.partitions == 2));
        let r = psmr_sim(&o).unwrap();
        assert_eq!(r.partitions, Some(2));
        assert!(r.targets.is_empty());
        for p in &r.points {
            assert!(tp(p) > 0.0, "{} {}: no throughput", p.series, p.x);
        }
        let psmr = psmr_of(find(&r.points, PSMR, "dependent %", 0.0).unwrap());
        assert!(psmr.parallel > 0, "{psmr:?}");
        assert!(find(&r.points, SMR, "dependent %", 0.0)
            .unwrap()
            .sim
            .as_ref()
            .unwrap()
            .psmr
            .is_none());
        let dir = tempfile::tempdir().unwrap();
        let files = write_psmr(&r, &dir.path().join("psmr.json")).unwrap();
        assert_eq!(files.len(), 1 + 2, "the report and Figure 2: {files:?}");
    }

    /// As the paper ran it (the simulated default): every point on Multi-Ring Paxos,
    /// P-SMR's on a ring per thread's group and one for g_all, SMR's on as many rings,
    /// clients in windows of 50; commands run alone on their threads at 0% dependent
    /// (their groups' rings carried them).
    #[test]
    fn a_tiny_sweep_on_rings() {
        let o = PsmrOptions {
            percents: vec![0],
            thread_counts: vec![],
            fig3_clients: vec![],
            clients: 20,
            threads: 2,
            duration: Duration::from_millis(200),
            preload: 2_000,
            jobs: 2,
            ..PsmrOptions::quick().as_paper_ran(true)
        };
        assert!(o.rings && o.window == Some(PAPER_WINDOW) && o.batchers == 0);
        let specs = points(&o);
        for p in &specs {
            let mr = p.cluster.ordering.multiring().expect("rings");
            assert_eq!(mr.rings.len(), 3, "{}", p.series);
            assert!(p
                .cluster
                .with_role(partita_config::Role::Batcher)
                .is_empty());
        }
        let r = psmr_sim(&o).unwrap();
        assert!(
            r.configuration.contains("Multi-Ring Paxos")
                && r.configuration
                    .contains("20 clients in windows of 50 (at most 1 client machine,"),
            "{}",
            r.configuration
        );
        for series in [SMR, PSMR, OPT] {
            let p = find(&r.points, series, "dependent %", 0.0).unwrap();
            assert!(tp(p) > 0.0, "{series}: no throughput");
        }
        let psmr = psmr_of(find(&r.points, PSMR, "dependent %", 0.0).unwrap());
        assert!(psmr.parallel > 0, "{psmr:?}");
    }
}
