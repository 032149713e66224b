//! Paper 001 §V-C, Figures 7 and 8: speculative execution against classic SMR.
//!
//! Ring Paxos SMR (3 acceptors, `replicas` replicas) with `[execution] speculative =
//! true` (replicas execute each value when its Phase 2A arrives and release the
//! replies when the decision confirms it) against the same cluster executing only
//! decided values, under the queries and batched-updates workloads, against the number
//! of clients, for each replica count (the paper: 4 replicas in Figure 7, 8 in Figure
//! 8). Each classic point and its speculative twin are measured back to back in the
//! same run (for real: on two fresh clusters, the order alternating from pair to pair
//! so that a drift of the machine's load does not favour one side; simulated: with the
//! same seed, so both see the same clients' commands and think times), and the report
//! keeps, besides every point, one [`Comparison`] per pair: the throughput improvement
//! and the response-time improvement (p50, p99 and mean) of speculation.

use super::*;

/// Series of the classic (execute after the decision) points.
pub const CLASSIC: &str = "classic SMR";
/// Series of the speculative points.
pub const SPECULATIVE: &str = "speculative SMR";

/// The replicas' speculation counters after a real run (summed over replicas).
#[derive(Clone, Debug, Default, Serialize)]
pub struct SpeculationCounters {
    pub speculated: u64,
    pub confirmed: u64,
    pub rolled_back: u64,
}

/// A speculative point against its classic twin. Improvements are positive when
/// speculation is better: throughput `spec / classic - 1`, response time
/// `1 - spec / classic`, in percent.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub workload: Workload,
    pub replicas: usize,
    pub clients: usize,
    /// Repetition of the pair (0-based).
    pub rep: u32,
    /// Indices in `points`.
    pub classic: usize,
    pub speculative: usize,
    /// Which of the two ran first ("classic" or "speculative"; simulated: "same seed").
    pub first: String,
    pub throughput_improvement_pct: f64,
    pub latency_p50_improvement_pct: f64,
    pub latency_p99_improvement_pct: f64,
    pub latency_mean_improvement_pct: f64,
    /// Simulated pairs: the execution that speculation can overlap with ordering
    /// (paper 001 §III-B: the gain is at most min(Δo, Δe)), estimated from the cost
    /// table: B+tree operations and per-command work of one replica for one decided
    /// value (`commands_per_instance` of the classic point), in ms, and that as a
    /// share of the classic mean response time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_ms_per_value: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_share_of_response_pct: Option<f64>,
}

/// The real sweep.
#[derive(Clone, Debug)]
pub struct SpecOptions {
    pub workloads: Vec<Workload>,
    pub clients: Vec<usize>,
    pub replicas: Vec<usize>,
    /// Pairs per configuration (the order of the two alternates).
    pub repeat: u32,
    pub duration: Duration,
    pub preload: u64,
    pub think_ms: u64,
    pub durability: Durability,
    /// Each node limited to this fraction of one core (`--node-cpu`).
    pub node_cpu: Option<f64>,
    pub progress: bool,
}

impl SpecOptions {
    /// What this 2-core machine holds: 2 and 4 replicas (5 and 7 node processes plus
    /// the clients), 1 to 32 clients, two pairs per point (several minutes).
    pub fn full() -> SpecOptions {
        SpecOptions {
            workloads: vec![Workload::Query, Workload::Batch],
            clients: vec![1, 8, 32],
            replicas: vec![2, 4],
            repeat: 2,
            duration: Duration::from_secs(5),
            preload: 100_000,
            think_ms: 0,
            durability: Durability::Fsync,
            node_cpu: None,
            progress: true,
        }
    }

    /// A small sweep for tests and a first look.
    pub fn quick() -> SpecOptions {
        SpecOptions {
            clients: vec![1, 8],
            replicas: vec![2],
            repeat: 1,
            duration: Duration::from_secs(2),
            preload: 2_000,
            progress: false,
            ..SpecOptions::full()
        }
    }
}

/// A Ring Paxos cluster of 3 acceptors and `replicas` replicas, speculating or not.
pub fn spec_cluster(replicas: usize, speculative: bool, durability: Durability) -> ClusterConfig {
    let mut c = smr_cluster(replicas, Protocol::RingPaxos, durability);
    if speculative {
        c.execution = partita_config::ExecutionSection::speculative(false);
    }
    c
}

fn label(speculative: bool) -> (&'static str, &'static str) {
    if speculative {
        (SPECULATIVE, "speculative")
    } else {
        (CLASSIC, "classic")
    }
}

/// Paper 001 §V-C on real processes: every point on a fresh cluster.
pub async fn speculation(exe: &Path, o: &SpecOptions) -> anyhow::Result<ExperimentReport> {
    let mut driver = RealDriver::new(exe, o.node_cpu)?;
    // Classic and speculative twins, one after the other, the first of each pair
    // alternating: (index of the classic point, of the speculative one, repetition,
    // which went first).
    let mut specs = Vec::new();
    let mut pairs = Vec::new();
    for &w in &o.workloads {
        for &n in &o.replicas {
            for &c in &o.clients {
                for rep in 0..o.repeat {
                    let spec_first = pairs.len() % 2 == 1;
                    let mut idx = [0usize; 2];
                    for speculative in [spec_first, !spec_first] {
                        idx[speculative as usize] = specs.len();
                        specs.push(PointSpec {
                            series: label(speculative).0.into(),
                            x_name: "clients".into(),
                            x: c as f64,
                            cluster: spec_cluster(n, speculative, o.durability),
                            bench: BenchConfig {
                                give_up: None,
                                workload: w,
                                clients: c,
                                duration: o.duration,
                                think_ms: o.think_ms,
                                preload: o.preload,
                                seed: 1 + rep as u64,
                                trim: 0.1,
                                progress: false,
                                key_space: None,
                            },
                        });
                    }
                    pairs.push((idx, rep, spec_first));
                }
            }
        }
    }
    let measured = run_sweep(&specs, &mut driver, o.progress).await?;
    let points: Vec<Point> = measured
        .into_iter()
        .zip(&specs)
        .map(|(m, p)| real_point(label(p.series == SPECULATIVE).1, &p.bench, m))
        .collect();
    let comparisons = pairs
        .into_iter()
        .map(|(idx, rep, spec_first)| {
            compare(
                &points,
                idx[0],
                idx[1],
                rep,
                if spec_first { "speculative" } else { "classic" },
                None,
            )
        })
        .collect();
    Ok(ExperimentReport {
        name: "speculation".into(),
        simulated: driver.simulated(),
        machine: driver.machine(),
        points,
        comparisons,
    })
}

/// A real point with its exact mean response time (over the commands `partita bench`
/// counts: invoked after the first 10%, completed before the last 10%, answered) and
/// the replicas' speculation counters.
fn real_point(execution: &str, cfg: &BenchConfig, m: Measured) -> Point {
    let lo = (cfg.duration.as_nanos() as f64 * cfg.trim) as u64;
    let hi = (cfg.duration.as_nanos() as f64 * (1.0 - cfg.trim)) as u64;
    let (mut n, mut sum) = (0u64, 0u128);
    for r in &m.records {
        if r.call_ns >= lo && r.ret_ns <= hi && r.result.is_some() {
            n += 1;
            sum += (r.ret_ns - r.call_ns) as u128;
        }
    }
    let mut p = m.point;
    if execution == "speculative" {
        p.result.ordering += ", speculative execution";
    }
    p.execution = Some(execution.into());
    p.latency_ms_mean = Some(if n > 0 {
        sum as f64 / n as f64 / 1e6
    } else {
        0.0
    });
    p.latency_mean_from = Some("exact".into());
    let mut counters = SpeculationCounters::default();
    for s in &m.replica_status {
        for (k, v) in &s.counters {
            match k.as_str() {
                "speculated" => counters.speculated += v,
                "speculation_confirmed" => counters.confirmed += v,
                "speculation_rolled_back" => counters.rolled_back += v,
                _ => {}
            }
        }
    }
    if execution == "speculative" {
        p.speculation_counters = Some(counters);
    }
    p
}

fn improvement_lower_is_better(classic: f64, spec: f64) -> f64 {
    if classic > 0.0 {
        (1.0 - spec / classic) * 100.0
    } else {
        0.0
    }
}

fn compare(
    points: &[Point],
    classic: usize,
    speculative: usize,
    rep: u32,
    first: &str,
    execution_ms_per_value: Option<f64>,
) -> Comparison {
    let (a, b) = (&points[classic], &points[speculative]);
    let (ra, rb) = (&a.result, &b.result);
    let mean_a = a.latency_ms_mean.unwrap_or(0.0);
    Comparison {
        workload: a.workload,
        replicas: ra.replicas,
        clients: ra.clients,
        rep,
        classic,
        speculative,
        first: first.into(),
        throughput_improvement_pct: if ra.throughput_cmds_per_s > 0.0 {
            (rb.throughput_cmds_per_s / ra.throughput_cmds_per_s - 1.0) * 100.0
        } else {
            0.0
        },
        latency_p50_improvement_pct: improvement_lower_is_better(
            ra.latency_ms_p50,
            rb.latency_ms_p50,
        ),
        latency_p99_improvement_pct: improvement_lower_is_better(
            ra.latency_ms_p99,
            rb.latency_ms_p99,
        ),
        latency_mean_improvement_pct: improvement_lower_is_better(
            mean_a,
            b.latency_ms_mean.unwrap_or(0.0),
        ),
        execution_ms_per_value,
        execution_share_of_response_pct: execution_ms_per_value
            .filter(|_| mean_a > 0.0)
            .map(|e| e / mean_a * 100.0),
    }
}

// ------------------------------------------------------------------ in the simulator

/// The speculation sweep in the simulator.
#[derive(Clone, Debug)]
pub struct SimSpecOptions {
    pub workloads: Vec<Workload>,
    pub clients: Vec<usize>,
    pub replicas: Vec<usize>,
    pub duration: Duration,
    pub preload: u64,
    pub think_ms: u64,
    pub durability: Durability,
    pub cost: CostTable,
    pub cost_source: String,
    pub seed: u64,
    pub jobs: usize,
    pub progress: bool,
}

impl SimSpecOptions {
    /// The driver of its points.
    pub fn driver(&self) -> SimDriver {
        SimDriver {
            cost: self.cost.clone(),
            cost_source: self.cost_source.clone(),
            jobs: self.jobs,
            multicast: false,
            window: None,
        }
    }

    /// The paper's setup (§V-A, §V-C): 12 million entries, think time 0–10 ms, 4 and
    /// 8 replicas, queries and batched updates, clients from light load to the
    /// saturation of the cost-of-replication sweep; 4 virtual seconds per point.
    pub fn full() -> SimSpecOptions {
        SimSpecOptions {
            workloads: vec![Workload::Query, Workload::Batch],
            clients: vec![1, 100, 200, 400, 800, 1600],
            replicas: vec![4, 8],
            duration: Duration::from_secs(4),
            preload: 12_000_000,
            think_ms: 10,
            durability: Durability::Fsync,
            cost: CostTable::default(),
            cost_source: "built-in defaults".into(),
            seed: 1,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            progress: true,
        }
    }

    /// The real `--quick` sweep's sizes.
    pub fn quick() -> SimSpecOptions {
        let q = SpecOptions::quick();
        SimSpecOptions {
            clients: q.clients,
            replicas: q.replicas,
            duration: q.duration,
            preload: q.preload,
            think_ms: q.think_ms,
            progress: false,
            ..SimSpecOptions::full()
        }
    }
}

/// The simulated cluster: [`sim_smr_cluster`] with Ring Paxos, speculating or not.
pub fn sim_spec_cluster(
    replicas: usize,
    speculative: bool,
    durability: Durability,
) -> ClusterConfig {
    let mut c = sim_smr_cluster(replicas, Protocol::RingPaxos, durability);
    if speculative {
        c.execution = partita_config::ExecutionSection::speculative(false);
    }
    c
}

/// One replica's execution of one command of `w` by the cost table (what
/// speculation overlaps with ordering): B+tree operations plus the per-command work;
/// a query only on the one replica in `replicas` that the client chose.
pub fn execution_ns_per_command(cost: &CostTable, w: Workload, replicas: usize) -> f64 {
    let kind = |k: &str| {
        cost.btree_kind_ns
            .get(k)
            .copied()
            .unwrap_or(cost.btree_op_ns) as f64
    };
    let mutation = (kind("insert") + kind("delete")) / 2.0;
    match w {
        Workload::Batch | Workload::PartitionedBatch { .. } => {
            7.0 * mutation + cost.command_ns as f64
        }
        Workload::Update => mutation + cost.command_ns as f64,
        Workload::Query | Workload::PartitionedQuery { .. } => {
            let q = kind("query")
                + 1000.0 * cost.btree_query_entry_ps as f64 / 1000.0
                + cost.command_ns as f64;
            q / replicas.max(1) as f64
        }
        Workload::Mixed | Workload::Dependent { .. } | Workload::Geo { .. } => {
            mutation + cost.command_ns as f64
        }
    }
}

/// Paper 001 §V-C in the simulator: every pair with the same seed, `jobs` points at
/// a time.
pub fn speculation_sim(o: &SimSpecOptions) -> anyhow::Result<ExperimentReport> {
    let mut specs = Vec::new();
    for &w in &o.workloads {
        for &n in &o.replicas {
            for &c in &o.clients {
                for speculative in [false, true] {
                    specs.push(PointSpec {
                        series: label(speculative).0.into(),
                        x_name: "clients".into(),
                        x: c as f64,
                        cluster: sim_spec_cluster(n, speculative, o.durability),
                        bench: BenchConfig {
                            give_up: None,
                            workload: w,
                            clients: c,
                            duration: o.duration,
                            think_ms: o.think_ms,
                            preload: o.preload,
                            seed: o.seed,
                            trim: 0.1,
                            progress: false,
                            key_space: None,
                        },
                    });
                }
            }
        }
    }
    let driver = o.driver();
    let mut points = framework::points(run_sim_sweep(&specs, &driver, o.progress)?);
    for p in &mut points {
        let speculative = p.series == SPECULATIVE;
        p.execution = Some(label(speculative).1.into());
        if speculative {
            p.result.ordering += ", speculative execution";
        }
        // Little's law for a closed loop: clients = throughput x (response + think).
        let x = p.result.throughput_cmds_per_s;
        if x > 0.0 {
            p.latency_ms_mean = Some(p.result.clients as f64 / x * 1e3 - o.think_ms as f64 / 2.0);
            p.latency_mean_from = Some("little".into());
        }
    }
    let mut comparisons = Vec::new();
    for i in (0..points.len()).step_by(2) {
        let (w, n) = (points[i].workload, points[i].result.replicas);
        let cpi = points[i]
            .sim
            .as_ref()
            .map_or(0.0, |d| d.commands_per_instance);
        let exec_ms = cpi * execution_ns_per_command(&o.cost, w, n) / 1e6;
        comparisons.push(compare(&points, i, i + 1, 0, "same seed", Some(exec_ms)));
    }
    Ok(ExperimentReport {
        name: "speculation".into(),
        simulated: driver.simulated(),
        machine: driver.machine(),
        points,
        comparisons,
    })
}

/// The comparisons as a table.
pub fn comparison_table(r: &ExperimentReport) -> String {
    let mut s = format!(
        "\nspeculative against classic SMR ({}): improvement = speculation better\n{:<6} {:>4} {:>7} {:>3} {:>10} {:>10} {:>7} {:>8} {:>8} {:>7} {:>8} {:>8} {:>7} {:>8} {:>8} {:>7}{}\n",
        if r.simulated { "simulated" } else { "measured" },
        "work",
        "repl",
        "clients",
        "rep",
        "classic/s",
        "spec/s",
        "tput%",
        "p50 c",
        "p50 s",
        "p50%",
        "p99 c",
        "p99 s",
        "p99%",
        "mean c",
        "mean s",
        "mean%",
        if r.simulated { "  exec/value ms (share)" } else { "" }
    );
    for c in &r.comparisons {
        let (a, b) = (&r.points[c.classic], &r.points[c.speculative]);
        s += &format!(
            "{:<6} {:>4} {:>7} {:>3} {:>10.0} {:>10.0} {:>+7.1} {:>8.3} {:>8.3} {:>+7.1} {:>8.3} {:>8.3} {:>+7.1} {:>8.3} {:>8.3} {:>+7.1}{}\n",
            format!("{:?}", c.workload).to_lowercase(),
            c.replicas,
            c.clients,
            c.rep,
            a.result.throughput_cmds_per_s,
            b.result.throughput_cmds_per_s,
            c.throughput_improvement_pct,
            a.result.latency_ms_p50,
            b.result.latency_ms_p50,
            c.latency_p50_improvement_pct,
            a.result.latency_ms_p99,
            b.result.latency_ms_p99,
            c.latency_p99_improvement_pct,
            a.latency_ms_mean.unwrap_or(0.0),
            b.latency_ms_mean.unwrap_or(0.0),
            c.latency_mean_improvement_pct,
            match (c.execution_ms_per_value, c.execution_share_of_response_pct) {
                (Some(e), Some(sh)) => format!("  {e:.3} ({sh:.1}%)"),
                _ => String::new(),
            }
        );
    }
    s
}

fn workload_name(w: Workload) -> &'static str {
    match w {
        Workload::Query | Workload::PartitionedQuery { .. } => "queries",
        Workload::Batch | Workload::PartitionedBatch { .. } => "batched updates",
        Workload::Update => "single updates",
        Workload::Mixed => "mixed",
        Workload::Dependent { .. } => "reads, inserts and deletes",
        Workload::Geo { .. } => "geo B+tree reads and writes",
    }
}

/// The comparisons of `(workload, replicas)`, averaged over repetitions, by clients:
/// `(clients, f(comparisons of that client count))`.
fn by_clients(
    r: &ExperimentReport,
    w: Workload,
    n: usize,
    f: impl Fn(&Comparison) -> f64,
) -> Vec<(f64, f64)> {
    let mut xs: Vec<usize> = Vec::new();
    for c in &r.comparisons {
        if c.workload == w && c.replicas == n && !xs.contains(&c.clients) {
            xs.push(c.clients);
        }
    }
    xs.sort_unstable();
    xs.into_iter()
        .map(|x| {
            let v: Vec<f64> = r
                .comparisons
                .iter()
                .filter(|c| c.workload == w && c.replicas == n && c.clients == x)
                .map(&f)
                .collect();
            (x as f64, v.iter().sum::<f64>() / v.len().max(1) as f64)
        })
        .collect()
}

/// Figures 7 (4 replicas) and 8 (8 replicas) of paper 001, one figure per replica
/// count of the report: throughput and response-time improvement of speculation
/// against clients, one curve per workload, beside the absolute numbers.
pub fn speculation_figures(r: &ExperimentReport) -> Vec<(String, partita_plot::Figure)> {
    let mut replicas: Vec<usize> = Vec::new();
    let mut workloads: Vec<Workload> = Vec::new();
    for c in &r.comparisons {
        if !replicas.contains(&c.replicas) {
            replicas.push(c.replicas);
        }
        if !workloads.contains(&c.workload) {
            workloads.push(c.workload);
        }
    }
    replicas.sort_unstable();
    let first = r.points.first().map(|p| &p.result);
    let foot = match first {
        Some(b) => format!(
            "{} ({}); Ring Paxos, durability {}, {} acceptors, batching {} B, think time 0..={} ms, preload {} entries, {:.1} s {}runs; each classic/speculative pair measured back to back; mean response time {}",
            if r.simulated { "SIMULATED" } else { "measured" },
            r.machine,
            b.durability,
            b.acceptors,
            b.batch_bytes_max,
            b.think_ms,
            b.preload,
            b.duration_s,
            if r.simulated { "virtual " } else { "" },
            if r.simulated {
                "by Little's law"
            } else {
                "exact"
            }
        ),
        None => String::new(),
    };
    let mut out = Vec::new();
    for &n in &replicas {
        let imp = |f: &dyn Fn(&Comparison) -> f64, what: &str| -> Vec<Series> {
            workloads
                .iter()
                .map(|&w| Series {
                    label: format!("{} ({what})", workload_name(w)),
                    points: by_clients(r, w, n, f),
                })
                .collect()
        };
        let mut rt = imp(&|c| c.latency_mean_improvement_pct, "mean");
        rt.extend(imp(&|c| c.latency_p50_improvement_pct, "p50"));
        let abs = |y: &dyn Fn(&Point) -> f64| -> Vec<Series> {
            let mut v = Vec::new();
            for &w in &workloads {
                for (pick, name) in [(true, "classic"), (false, "speculative")] {
                    v.push(Series {
                        label: format!("{} {name}", workload_name(w)),
                        points: by_clients(r, w, n, |c| {
                            y(&r.points[if pick { c.classic } else { c.speculative }])
                        }),
                    });
                }
            }
            v
        };
        let panels = vec![
            Panel {
                title: "throughput improvement".into(),
                x_label: "clients".into(),
                y_label: "speculative vs classic (%)".into(),
                log_x: false,
                log_y: false,
                series: imp(&|c| c.throughput_improvement_pct, "throughput"),
            },
            Panel {
                title: "response time improvement".into(),
                x_label: "clients".into(),
                y_label: "reduction (%)".into(),
                log_x: false,
                log_y: false,
                series: rt,
            },
            Panel {
                title: "throughput".into(),
                x_label: "clients".into(),
                y_label: "commands/s".into(),
                log_x: false,
                log_y: true,
                series: abs(&|p| p.result.throughput_cmds_per_s),
            },
            Panel {
                title: "mean response time".into(),
                x_label: "clients".into(),
                y_label: "ms".into(),
                log_x: false,
                log_y: false,
                series: abs(&|p| p.latency_ms_mean.unwrap_or(0.0)),
            },
        ];
        let (suffix, title) = match n {
            4 => (
                "fig7".to_string(),
                "Paper 001 Figure 7: speculative execution, 4 replicas".to_string(),
            ),
            8 => (
                "fig8".to_string(),
                "Paper 001 Figure 8: speculative execution, 8 replicas".to_string(),
            ),
            n => (
                format!("spec-{n}-replicas"),
                format!("Speculative execution, {n} replicas (as paper 001 Figures 7 and 8)"),
            ),
        };
        let title = if r.simulated {
            format!("{title} (simulated)")
        } else {
            title
        };
        out.push((suffix, crate::framework::figure(&title, &foot, &panels, 2)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny simulated sweep: both workloads, 2 replicas, 1 and 8 clients.
    #[test]
    fn a_tiny_simulated_speculation_sweep_pairs_labelled_points() {
        let mut o = SimSpecOptions::quick();
        o.duration = Duration::from_millis(300);
        o.jobs = 2;
        let r = speculation_sim(&o).unwrap();
        assert!(r.simulated && r.machine.starts_with("simulated"));
        assert_eq!(r.name, "speculation");
        assert_eq!(r.points.len(), 2 * 2 * 2);
        assert_eq!(r.comparisons.len(), 2 * 2);
        for c in &r.comparisons {
            let (a, b) = (&r.points[c.classic], &r.points[c.speculative]);
            assert_eq!(a.series, CLASSIC);
            assert_eq!(b.series, SPECULATIVE);
            assert_eq!(a.execution.as_deref(), Some("classic"));
            assert_eq!(b.execution.as_deref(), Some("speculative"));
            assert!(b.result.ordering.contains("speculative"));
            assert!(!a.result.ordering.contains("speculative"));
            for p in [a, b] {
                assert_eq!(p.workload, c.workload);
                assert_eq!(p.result.clients, c.clients);
                assert_eq!(p.result.replicas, 2);
                assert!(p.result.commands > 0, "{}", table(&r));
                assert_eq!(p.latency_mean_from.as_deref(), Some("little"));
            }
            assert!(c.execution_ms_per_value.unwrap() > 0.0);
        }
    }

    /// Speculation changes the run (the replicas execute at another time): the
    /// twins are different simulations, each deterministic.
    #[test]
    fn speculative_twins_differ_and_replay() {
        let mut o = SimSpecOptions::quick();
        o.duration = Duration::from_millis(300);
        o.workloads = vec![Workload::Batch];
        o.clients = vec![8];
        o.jobs = 1;
        let a = speculation_sim(&o).unwrap();
        let b = speculation_sim(&o).unwrap();
        let hash = |r: &ExperimentReport, i: usize| r.points[i].sim.as_ref().unwrap().trace_hash;
        assert_eq!(hash(&a, 0), hash(&b, 0));
        assert_eq!(hash(&a, 1), hash(&b, 1));
        assert_ne!(hash(&a, 0), hash(&a, 1));
    }

    #[test]
    fn figures_name_the_papers_figures_by_replicas() {
        let mut o = SimSpecOptions::quick();
        o.duration = Duration::from_millis(200);
        o.workloads = vec![Workload::Batch];
        o.clients = vec![4];
        o.replicas = vec![4, 3];
        let r = speculation_sim(&o).unwrap();
        let figs = speculation_figures(&r);
        let names: Vec<&str> = figs.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(names, vec!["spec-3-replicas", "fig7"]);
        for (_, fig) in &figs {
            let svg = fig.svg().unwrap();
            assert!(svg.contains("(simulated)") && svg.contains("SIMULATED"));
            assert!(svg.contains("batched updates classic"));
            assert!(svg.contains("batched updates speculative"));
            assert!(svg.contains("response time improvement"));
        }
        assert!(table(&r).contains("speculative against classic SMR"));
    }
}
