//! The one experiment framework: a sweep of points in series, each point run by a
//! driver, real or simulated, and one path for reports and figures.
//!
//! - A [`PointSpec`] says what to measure: the curve it belongs to, its position on
//!   the x axis, the cluster file, and the closed-loop load ([`BenchConfig`]: workload,
//!   clients, duration, think time, preload, seed).
//! - A [`Driver`] measures it: [`RealDriver`] starts a fresh local cluster of real
//!   processes and runs `partita bench`'s clients against it; [`SimDriver`] runs the
//!   same cluster file and load in the simulator's experiment mode (virtual time, a
//!   cost table), several points at once on threads. Both return a [`Measured`]: the
//!   reported [`Point`], with what only real runs keep (every command, the replicas'
//!   counters) or what only the simulator knows (each node's load, the trace hash).
//! - [`run_sweep`] runs every point of a sweep, in the order the experiment gives
//!   (interleaved rounds are an order), reporting progress, and returns them in order.
//! - [`figure`] builds a figure (`partita-plot`), and [`write_report`] writes a report
//!   as JSON with every figure beside it as SVG and PNG (`FILE.json` →
//!   `FILE-SUFFIX.svg`, `FILE-SUFFIX.png`).
//!
//! A new experiment is one file: build its points, take a driver, run the sweep, turn
//! the measured points into a report and its figures (`experiment/cost.rs` is the
//! example: the same points run real or simulated).

use crate::experiment::Point;
use anyhow::Context;
use partita_config::ClusterConfig;
use partita_harness::bench::{self, BenchConfig};
use partita_plot::{Figure, Panel};
use partita_sim::CostTable;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One point to measure.
#[derive(Clone, Debug)]
pub struct PointSpec {
    /// The curve it belongs to ("CS", "SMR ring-paxos", ...).
    pub series: String,
    /// What the sweep varies ("clients", "servers") and its value here.
    pub x_name: String,
    pub x: f64,
    pub cluster: ClusterConfig,
    pub bench: BenchConfig,
}

impl PointSpec {
    /// The point's name in progress lines and errors.
    pub fn name(&self) -> String {
        format!(
            "{} {}, {} = {}",
            self.bench.workload, self.series, self.x_name, self.x
        )
    }
}

/// What a driver measured of a point.
#[derive(Clone, Debug)]
pub struct Measured {
    /// As reported: the benchmark's numbers, and for simulated points where the time
    /// went ([`Point::sim`]).
    pub point: Point,
    /// Real points: every command of the run (statistics the bench result does not
    /// keep). Empty for simulated points.
    pub records: Vec<bench::Record>,
    /// Real points: each replica's status right after the load (its counters).
    pub replica_status: Vec<partita_wire::NodeStatus>,
    /// Real points: the same right before the load (after the preload).
    pub replica_status_before: Vec<partita_wire::NodeStatus>,
}

/// Runs points: real processes here, or the simulator.
#[allow(async_fn_in_trait)]
pub trait Driver {
    /// Whether its numbers come from the simulator (figures and reports say so).
    fn simulated(&self) -> bool;
    /// The machine the numbers were measured on, in words (or the simulated one's).
    fn machine(&self) -> String;
    /// Measure one point.
    async fn run(&mut self, point: &PointSpec) -> anyhow::Result<Measured>;
    /// Measure every point, returned in order (by default one after the other).
    async fn run_all(
        &mut self,
        points: &[PointSpec],
        progress: bool,
    ) -> anyhow::Result<Vec<Measured>> {
        let mut out = Vec::with_capacity(points.len());
        let bar = progress
            .then(|| partita_harness::progress::bar(points.len() as u64, "sweep"))
            .flatten();
        for (i, p) in points.iter().enumerate() {
            if let Some(b) = &bar {
                b.set_message(p.name());
            }
            let m = self.run(p).await.with_context(|| p.name())?;
            if progress {
                partita_harness::progress::line(
                    bar.as_ref(),
                    &format!("  [{}/{}] {}", i + 1, points.len(), progress_line(p, &m)),
                );
            }
            if let Some(b) = &bar {
                b.inc(1);
            }
            out.push(m);
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        Ok(out)
    }
}

fn progress_line(p: &PointSpec, m: &Measured) -> String {
    let r = &m.point.result;
    let mut line = format!(
        "{:<40} {:>9.0} cmd/s  p50 {:.2} ms",
        p.name(),
        r.throughput_cmds_per_s,
        r.latency_ms_p50
    );
    if let Some(d) = &m.point.sim {
        if let Some(n) = d
            .nodes
            .iter()
            .max_by(|a, b| a.cpu.max(a.nic_out).total_cmp(&b.cpu.max(b.nic_out)))
        {
            line += &format!(
                "  (busiest: n{} {} cpu {:.0}% nic {:.0}%; {:.1} s wall)",
                n.node,
                n.role,
                n.cpu * 100.0,
                n.nic_out * 100.0,
                d.wall_s
            );
        }
    } else if let Some(cpu) = r.cpu_us_per_cmd {
        line += &format!("  {cpu:.1} µs CPU/cmd");
    }
    line
}

/// The client machines of `clients` sessions in windows of `window` (the last one may
/// hold fewer); `None` without a window: a machine per session.
pub fn client_machines(clients: usize, window: Option<usize>) -> Option<usize> {
    window.map(|w| clients.div_ceil(w.max(1)).max(1))
}

/// Real points: each on a fresh local cluster of `partita node` processes (the
/// binary `exe`), optionally each node process within a CPU budget.
pub struct RealDriver {
    pub exe: PathBuf,
    pub node_cpu: Option<f64>,
    node_cpu_label: Option<String>,
    /// Each client machine keeps this many commands outstanding, one per session,
    /// all over its one connection to each node (`partita bench --connections`, with
    /// `clients / window` connections); `None`: every session its own connections.
    pub window: Option<usize>,
}

impl RealDriver {
    pub fn new(exe: &Path, node_cpu: Option<f64>) -> anyhow::Result<RealDriver> {
        Ok(RealDriver {
            exe: exe.to_path_buf(),
            node_cpu,
            node_cpu_label: crate::experiment::node_cpu_label(node_cpu)?,
            window: None,
        })
    }
}

impl Driver for RealDriver {
    fn simulated(&self) -> bool {
        false
    }
    fn machine(&self) -> String {
        crate::experiment::machine_with(self.node_cpu_label.as_deref())
    }
    async fn run(&mut self, p: &PointSpec) -> anyhow::Result<Measured> {
        let connections = client_machines(p.bench.clients, self.window);
        let rp = crate::experiment::run_point_detailed(
            &self.exe,
            &p.cluster,
            &p.bench,
            self.node_cpu,
            connections,
        )
        .await?;
        Ok(Measured {
            point: Point::new(
                p.series.clone(),
                p.bench.workload,
                &p.x_name,
                p.x,
                rp.result,
            ),
            records: rp.records,
            replica_status: rp.replica_status,
            replica_status_before: rp.replica_status_before,
        })
    }
}

/// Simulated points: the point's cluster file and load in the simulator's experiment
/// mode (one simulated CPU per node, the cost table's CPU and disk costs, a gigabit
/// LAN), `jobs` points at once on threads. The virtual duration, preload, think time
/// and seed are the point's [`BenchConfig`]'s; durability is its cluster's.
pub struct SimDriver {
    pub cost: CostTable,
    /// Where the cost table came from (a file, or the built-in defaults).
    pub cost_source: String,
    pub jobs: usize,
    /// A what-if: IP multicast on the simulated LAN (a group send leaves a card once).
    pub multicast: bool,
    /// Each client machine keeps this many commands outstanding, one per session, all
    /// through its one network card (paper 002's clients keep a window of 50); `None`:
    /// a machine per session.
    pub window: Option<usize>,
}

impl SimDriver {
    /// Measure one point (synchronously: the simulator waits on nothing).
    pub fn run_now(&self, p: &PointSpec) -> anyhow::Result<Measured> {
        let params = crate::experiment::SimParams {
            duration: p.bench.duration,
            preload: p.bench.preload,
            think_ms: p.bench.think_ms,
            durability: p.cluster.cluster.durability,
            cost: self.cost.clone(),
            seed: p.bench.seed,
            multicast: self.multicast,
            window: self.window,
        };
        let spec = crate::experiment::SimPointSpec {
            series: p.series.clone(),
            workload: p.bench.workload,
            x_name: p.x_name.clone(),
            x: p.x,
            cluster: p.cluster.clone(),
            clients: p.bench.clients,
        };
        Ok(Measured {
            point: crate::experiment::sim_point(&params, &spec)?,
            records: Vec::new(),
            replica_status: Vec::new(),
            replica_status_before: Vec::new(),
        })
    }

    /// Measure every point, `jobs` at a time, returned in order.
    pub fn run_all_now(
        &self,
        points: &[PointSpec],
        progress: bool,
    ) -> anyhow::Result<Vec<Measured>> {
        let bar = progress
            .then(|| partita_harness::progress::bar(points.len() as u64, "sweep"))
            .flatten();
        let results = map_jobs(points, self.jobs, |p| {
            let r = self
                .run_now(p)
                .with_context(|| format!("simulated {}", p.name()));
            if progress {
                let text = match &r {
                    Ok(m) => format!("  {}", progress_line(p, m)),
                    Err(e) => format!("  {}: {e:#}", p.name()),
                };
                partita_harness::progress::line(bar.as_ref(), &text);
            }
            if let Some(b) = &bar {
                b.inc(1);
            }
            r
        });
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        results.into_iter().collect()
    }
}

/// `f` of every item, `jobs` items at once on threads (each takes the next item
/// left), returned in the items' order: simulated points are independent and
/// deterministic, so the results do not depend on `jobs`.
pub fn map_jobs<T: Sync, R: Send>(items: &[T], jobs: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                results.lock().expect("results lock")[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .expect("results lock")
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}

impl Driver for SimDriver {
    fn simulated(&self) -> bool {
        true
    }
    fn machine(&self) -> String {
        crate::experiment::sim_machine(&self.cost_source)
    }
    async fn run(&mut self, p: &PointSpec) -> anyhow::Result<Measured> {
        self.run_now(p)
    }
    async fn run_all(
        &mut self,
        points: &[PointSpec],
        progress: bool,
    ) -> anyhow::Result<Vec<Measured>> {
        self.run_all_now(points, progress)
    }
}

/// Run every point with `driver`; `progress` prints one line per point (and, on a
/// terminal, a bar over the sweep). The points come back in the order given.
pub async fn run_sweep<D: Driver>(
    points: &[PointSpec],
    driver: &mut D,
    progress: bool,
) -> anyhow::Result<Vec<Measured>> {
    driver.run_all(points, progress).await
}

/// A sweep in the simulator, without an async runtime (the simulator waits on nothing).
pub fn run_sim_sweep(
    points: &[PointSpec],
    driver: &SimDriver,
    progress: bool,
) -> anyhow::Result<Vec<Measured>> {
    driver.run_all_now(points, progress)
}

/// The reported points of a sweep.
pub fn points(measured: Vec<Measured>) -> Vec<Point> {
    measured.into_iter().map(|m| m.point).collect()
}

/// A figure: `panels` in rows of `cols`, a title, and a footnote (the configuration
/// the numbers were measured with).
pub fn figure(title: &str, footnote: &str, panels: &[Panel], cols: usize) -> Figure {
    Figure {
        title: title.to_string(),
        footnote: footnote.to_string(),
        panels: panels.to_vec(),
        cols,
    }
}

/// Write `report` as JSON to `json`, and each figure beside it as
/// `STEM-SUFFIX.svg` and `STEM-SUFFIX.png`. Returns every file written.
pub fn write_report<R: Serialize>(
    report: &R,
    figures: Vec<(String, Figure)>,
    json: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    if let Some(dir) = json.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(json, serde_json::to_string_pretty(report)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let mut files = vec![json.to_path_buf()];
    files.extend(write_figures(figures, &json.with_extension(""))?);
    Ok(files)
}

/// Write each figure as `STEM-SUFFIX.svg` and `STEM-SUFFIX.png`. Returns every file
/// written.
pub fn write_figures(figures: Vec<(String, Figure)>, stem: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for (suffix, fig) in figures {
        let at = PathBuf::from(format!("{}-{suffix}", stem.display()));
        files.extend(
            fig.write(&at)
                .with_context(|| format!("drawing {}", at.display()))?,
        );
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_plot::Series;

    #[test]
    fn reports_and_figures_land_beside_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let panel = Panel {
            title: "t".into(),
            x_label: "clients".into(),
            y_label: "cmd/s".into(),
            log_x: false,
            log_y: false,
            series: vec![Series {
                label: "SMR".into(),
                points: vec![(1.0, 10.0), (2.0, 20.0)],
            }],
        };
        let figs = vec![("fig1".to_string(), figure("Fig", "note", &[panel], 1))];
        let files = write_report(&serde_json::json!({"a": 1}), figs, &json).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().to_string())
            .collect();
        assert_eq!(names, vec!["r.json", "r-fig1.svg", "r-fig1.png"]);
        for f in files {
            assert!(std::fs::metadata(&f).unwrap().len() > 10, "{}", f.display());
        }
    }
}
