//! The one experiment framework: a sweep of points in series, each point run by a
//! driver, real or simulated, and one path for reports and figures.
//!
//! - A [`PointSpec`] says what to measure: the curve it belongs to, its position on
//!   the x axis, the cluster file, and the closed-loop load ([`BenchConfig`]).
//! - A [`Driver`] measures it: [`RealDriver`] starts a fresh local cluster of real
//!   processes and runs `partita bench`'s clients against it; a simulated driver runs
//!   the same cluster file and load in the simulator's experiment mode. Both return a
//!   [`Measured`]: the benchmark's numbers, with what only the simulator knows.
//! - [`run_sweep`] runs every point of a sweep in order (interleaved rounds are the
//!   order the experiment gives), reporting progress.
//! - [`figure`] builds a figure (`partita-plot`), and [`write_report`] writes a report
//!   as JSON with every figure beside it as SVG and PNG (`FILE.json` →
//!   `FILE-SUFFIX.svg`, `FILE-SUFFIX.png`).
//!
//! A new experiment is one file: build its points, pick the driver, run the sweep,
//! turn the measured points into a report and its figures.

use anyhow::Context;
use partita_config::ClusterConfig;
use partita_harness::bench::{BenchConfig, BenchResult};
use partita_plot::{Figure, Panel};
use serde::Serialize;
use std::path::{Path, PathBuf};

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

/// What a driver measured of a point.
#[derive(Clone, Debug)]
pub struct Measured {
    pub result: BenchResult,
    /// Simulated points: where the time went.
    pub sim: Option<crate::experiment::SimDetail>,
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
}

/// Real points: each on a fresh local cluster of `partita node` processes (the
/// binary `exe`), optionally each node process within a CPU budget.
pub struct RealDriver {
    pub exe: PathBuf,
    pub node_cpu: Option<f64>,
    node_cpu_label: Option<String>,
}

impl RealDriver {
    pub fn new(exe: &Path, node_cpu: Option<f64>) -> anyhow::Result<RealDriver> {
        Ok(RealDriver {
            exe: exe.to_path_buf(),
            node_cpu,
            node_cpu_label: crate::experiment::node_cpu_label(node_cpu)?,
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
        let result =
            crate::experiment::run_point(&self.exe, &p.cluster, &p.bench, self.node_cpu).await?;
        Ok(Measured { result, sim: None })
    }
}

/// Run every point with `driver`, in order; `progress` prints one line per point.
pub async fn run_sweep<D: Driver>(
    points: &[PointSpec],
    driver: &mut D,
    progress: bool,
) -> anyhow::Result<Vec<Measured>> {
    let mut out = Vec::with_capacity(points.len());
    for (i, p) in points.iter().enumerate() {
        let m = driver.run(p).await.with_context(|| {
            format!(
                "{}, {:?}, {} = {}",
                p.series, p.bench.workload, p.x_name, p.x
            )
        })?;
        if progress {
            eprintln!(
                "  [{}/{}] {:?} {:<22} {} {:>5}: {:>9.0} cmd/s  p50 {:.2} ms",
                i + 1,
                points.len(),
                p.bench.workload,
                p.series,
                p.x_name,
                p.x,
                m.result.throughput_cmds_per_s,
                m.result.latency_ms_p50
            );
        }
        out.push(m);
    }
    Ok(out)
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
    std::fs::write(json, serde_json::to_string_pretty(report)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let mut files = vec![json.to_path_buf()];
    let stem = json.with_extension("");
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
