//! `partita experiment` at tiny sizes. cost-of-replication on real processes: every
//! point is measured on its own fresh cluster, the report keeps each point's
//! configuration, and the figures draw every curve.

use partita_experiments::experiment::{self, CostOptions};
use partita_harness::bench::Workload;
use std::path::PathBuf;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_of_replication_small_sweep() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_partita"));
    let opts = CostOptions {
        workloads: vec![Workload::Batch],
        clients: vec![4],
        replicas: vec![1, 2],
        duration: Duration::from_secs(1),
        preload: 1000,
        ..CostOptions::quick()
    };
    let r = experiment::cost_of_replication(&exe, &opts).await.unwrap();
    // CS and SMR against clients, then SMR against 1 and 2 servers.
    assert_eq!(r.points.len(), 4, "{}", experiment::table(&r));
    for p in &r.points {
        assert!(p.result.commands > 10, "{}", experiment::table(&r));
        assert_eq!(p.result.workload, Workload::Batch);
    }
    let servers: Vec<usize> = r
        .points
        .iter()
        .filter(|p| p.x_name == "servers")
        .map(|p| p.result.replicas)
        .collect();
    assert_eq!(servers, vec![1, 2], "replica counts not applied");
    let cs = r.points.iter().find(|p| p.series == "CS").unwrap();
    assert_eq!(cs.result.mode, "cs");
    let dir = tempfile::tempdir().unwrap();
    let files = experiment::write(&r, &dir.path().join("cost.json")).unwrap();
    assert_eq!(files.len(), 5, "the report, and two figures as SVG and PNG");
    let fig5 = figure_text(&std::fs::read_to_string(&files[1]).unwrap());
    assert!(
        fig5.contains(" CS ") && fig5.contains(" SMR ring-paxos "),
        "{fig5}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(json["points"].as_array().unwrap().len(), 4);
    assert_eq!(json["simulated"], false);
}

/// `partita experiment speculation` on real processes, at a tiny size: one classic and
/// one speculative point, measured back to back, each on its own cluster; the
/// speculative cluster really speculated (the replicas' counters), the classic one
/// did not, and the report pairs them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speculation_small_real_pair() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_partita"));
    let opts = experiment::SpecOptions {
        workloads: vec![Workload::Batch],
        clients: vec![4],
        replicas: vec![2],
        repeat: 1,
        duration: Duration::from_secs(1),
        preload: 1000,
        ..experiment::SpecOptions::quick()
    };
    let r = experiment::speculation(&exe, &opts).await.unwrap();
    assert_eq!(r.points.len(), 2, "{}", experiment::table(&r));
    assert_eq!(r.comparisons.len(), 1);
    let c = &r.comparisons[0];
    let (a, b) = (&r.points[c.classic], &r.points[c.speculative]);
    assert_eq!(a.series, experiment::CLASSIC);
    assert_eq!(b.series, experiment::SPECULATIVE);
    assert_eq!(c.first, "classic", "the first pair runs classic first");
    for p in [a, b] {
        assert!(p.result.commands > 10, "{}", experiment::table(&r));
        assert_eq!(p.result.replicas, 2);
        assert_eq!(p.latency_mean_from.as_deref(), Some("exact"));
        assert!(p.latency_ms_mean.unwrap() > 0.0);
    }
    assert!(a.speculation_counters.is_none());
    let s = b.speculation_counters.as_ref().unwrap();
    assert!(s.speculated > 0 && s.confirmed > 0, "{s:?}");
    assert_eq!(s.rolled_back, 0, "no leader change, no rollback");
    assert!(b.result.ordering.contains("speculative"));
    let dir = tempfile::tempdir().unwrap();
    let files = experiment::write(&r, &dir.path().join("spec.json")).unwrap();
    assert_eq!(
        files.len(),
        3,
        "the report and one figure (2 replicas), SVG and PNG"
    );
    assert!(files[1].ends_with("spec-spec-2-replicas.svg"), "{files:?}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(json["simulated"], false);
    assert_eq!(json["comparisons"].as_array().unwrap().len(), 1);
}

/// `partita experiment speculation --sim` at a tiny size: both workloads, classic and
/// speculative points for every client count, labelled as simulated, with figures
/// for the paper's replica counts (Figure 7: 4 replicas, Figure 8: 8).
#[test]
fn speculation_tiny_simulated_sweep() {
    let o = experiment::SimSpecOptions {
        clients: vec![1, 4],
        replicas: vec![4, 8],
        duration: Duration::from_millis(200),
        jobs: 2,
        ..experiment::SimSpecOptions::quick()
    };
    let r = experiment::speculation_sim(&o).unwrap();
    assert!(r.simulated);
    assert_eq!(r.points.len(), 2 * 2 * 2 * 2, "{}", experiment::table(&r));
    assert_eq!(r.comparisons.len(), 2 * 2 * 2);
    for w in [Workload::Query, Workload::Batch] {
        for n in [4, 8] {
            for clients in [1, 4] {
                for series in [experiment::CLASSIC, experiment::SPECULATIVE] {
                    let p = r
                        .points
                        .iter()
                        .find(|p| {
                            p.workload == w
                                && p.result.replicas == n
                                && p.result.clients == clients
                                && p.series == series
                        })
                        .unwrap_or_else(|| panic!("{w:?} {n} {clients} {series} missing"));
                    assert!(p.result.commands > 0);
                    assert!(p.sim.is_some());
                }
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let files = experiment::write(&r, &dir.path().join("sim.json")).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        vec![
            "sim.json",
            "sim-fig7.svg",
            "sim-fig7.png",
            "sim-fig8.svg",
            "sim-fig8.png"
        ]
    );
    let fig7 = figure_text(&std::fs::read_to_string(&files[1]).unwrap());
    assert!(fig7.contains("Figure 7") && fig7.contains("(simulated)"));
    assert!(fig7.contains("queries (mean)") && fig7.contains("batched updates (mean)"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(json["simulated"], true);
    assert_eq!(json["name"], "speculation");
    let execs: Vec<&str> = json["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["execution"].as_str().unwrap())
        .collect();
    assert!(execs.contains(&"classic") && execs.contains(&"speculative"));
}

/// The words a figure shows: every text element's content, joined by spaces (long
/// titles and footnotes wrap over several elements).
fn figure_text(svg: &str) -> String {
    let mut words = Vec::new();
    for part in svg.split("<text").skip(1) {
        let body = part.split_once('>').map_or("", |x| x.1);
        let body = body.split("</text>").next().unwrap_or("");
        words.push(
            body.trim()
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&"),
        );
    }
    words.join(" ")
}

/// `partita experiment psmr` on real processes, at a tiny size: SMR, P-SMR and
/// opt-PSMR at 100% dependent with 2 worker threads on OS threads, each on its own
/// cluster; the replicas' counters show the threads at work (opt-PSMR's checks passed,
/// P-SMR's inserts and deletes in synchronous mode), and the report says it is real.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psmr_small_real_sweep() {
    use partita_experiments::experiment::psmr;
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_partita"));
    let opts = psmr::PsmrOptions {
        threads: 2,
        percents: vec![100],
        thread_counts: vec![],
        fig3_clients: vec![],
        clients: 8,
        batchers: 0,
        duration: Duration::from_secs(1),
        preload: 2_000,
        ..psmr::PsmrOptions::quick()
    };
    // The paper's window of 50: the 8 sessions are one client machine's, over one
    // connection to each node.
    assert_eq!(opts.window, Some(psmr::PAPER_WINDOW));
    let r = psmr::psmr_real(&opts, &exe).await.unwrap();
    let table = psmr::psmr_table(&r);
    assert!(!r.simulated);
    assert!(r.configuration.starts_with("REAL"), "{}", r.configuration);
    assert!(
        r.configuration
            .contains("8 clients in windows of 50 (at most 1 client machine, each sending and receiving its window's commands over one connection to each node)"),
        "{}",
        r.configuration
    );
    assert_eq!(r.points.len(), 3, "{table}");
    for p in &r.points {
        assert!(p.result.commands > 10, "{table}");
        assert!(p.latency_ms_mean.is_some_and(|m| m > 0.0), "{table}");
        assert_eq!(p.result.client_connections, Some(1), "{table}");
    }
    let by = |s: &str| r.points.iter().find(|p| p.series == s).unwrap();
    assert!(by(psmr::SMR).psmr.is_none(), "SMR has no worker threads");
    let p = by(psmr::PSMR).psmr.clone().expect("P-SMR counters");
    assert!(p.synchronous > 10 && p.passed == 0, "{p:?}");
    let o = by(psmr::OPT).psmr.clone().expect("opt-PSMR counters");
    assert!(o.passed > 10 && o.parallel > 10, "{o:?}");
    // Latency by outcome, from the clients: every measured command resubmitted after
    // a failed check was one the first replica refused (its count covers the whole
    // load), and each kind has a latency when it has commands.
    let outcomes = by(psmr::OPT)
        .result
        .psmr_outcomes
        .clone()
        .expect("opt-PSMR outcomes");
    assert!(by(psmr::PSMR).result.psmr_outcomes.is_none());
    assert!(o.commands_failed <= o.failed, "{o:?}");
    assert!(outcomes.latency_ms_passed > 0.0, "{outcomes:?}");
    assert_eq!(
        outcomes.commands_failed > 0,
        outcomes.latency_ms_failed > 0.0,
        "{outcomes:?}"
    );
}

/// The geo experiment's point selection: `--clients 0` leaves out the WAN points and
/// `--replicas 0` the LAN points; both at once leave nothing, which is refused with a
/// message that says so (and so is a WAN count no client set can have).
#[test]
fn geo_refuses_a_sweep_with_no_point() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_partita"));
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&exe)
            .args(["experiment", "geo", "--sim", "--json", "/dev/null"])
            .args(args)
            .output()
            .expect("run partita");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = run(&["--clients", "0", "--replicas", "0"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no point to run"), "{err}");
    let (code, err) = run(&["--clients", "0,54"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("or 0 for no WAN point"), "{err}");
}

/// `partita experiment all --sim --quick`: every experiment of the four papers runs
/// (at the smallest sizes that still compute everything), and the page it writes has a
/// section per experiment with the paper's findings, the command, a verdict for every
/// target and links to every figure, each of which exists. Whether targets are met at
/// these sizes is not the question here.
#[test]
fn all_quick_writes_every_figure_and_target_and_the_page() {
    use partita_experiments::reproduction::ENTRIES;
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_partita"));
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(&exe)
        .args(["experiment", "all", "--sim", "--quick", "--out"])
        .arg(dir.path())
        .output()
        .expect("run partita");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(dir.path().join("reproduction.md")).unwrap();
    // Every experiment has its section, with the paper's findings and its command.
    for e in &ENTRIES {
        assert!(
            page.contains(&format!("\n### {} (", e.name)),
            "no section for {}:\n{page}",
            e.name
        );
        assert!(page.contains(e.paper_reports), "{}", e.name);
        assert!(
            page.contains(&format!("`partita experiment {} ", e.name)),
            "{}",
            e.name
        );
    }
    assert!(!page.contains("**Failed:**"), "{page}");
    // Every figure each experiment draws, linked from the page and on disk.
    let results = dir.path().join("results/all-sim-quick");
    let figures = [
        "cost-of-replication-sim-fig5",
        "cost-of-replication-sim-fig6",
        "speculation-sim-spec-2-replicas",
        "partitioning-sim-fig9",
        "cross-partition-sim-fig10",
        "cross-partition-sim-fig11",
        "speculation-partitioning-sim-fig12",
        "psmr-sim-fig2",
        "psmr-sim-fig3",
        "psmr-sim-fig4",
        "psmr-sim-fig5",
        "dssmr-sim-figure4",
        "dssmr-sim-moves",
        "optimizer-fig8",
        "geo-sim-fig5a",
        "geo-sim-fig5b",
        "geo-sim-fig6",
        "geo-sim-fig7",
    ];
    for f in figures {
        for ext in ["svg", "png"] {
            let path = results.join(format!("{f}.{ext}"));
            assert!(
                std::fs::metadata(&path).is_ok_and(|m| m.len() > 1000),
                "{} missing or empty",
                path.display()
            );
            assert!(
                page.contains(&format!("(results/all-sim-quick/{f}.{ext})")),
                "{f}.{ext} not linked"
            );
        }
    }
    // Every link on the page leads to a file.
    for link in page.split("](").skip(1) {
        let target = &link[..link.find(')').unwrap()];
        if !target.starts_with('#') {
            assert!(dir.path().join(target).exists(), "dead link {target}");
        }
    }
    // The targets of every experiment that sets them, each with a verdict.
    let section = |name: &str| {
        let start = page.find(&format!("\n### {name} (")).unwrap();
        let rest = &page[start + 1..];
        rest[..rest.find("\n### ").unwrap_or(rest.len())].to_string()
    };
    for (name, at_least) in [
        ("speculation", 2),
        ("partitioning", 1),
        ("psmr", 4),
        ("dssmr", 3),
        ("optimizer", 1),
        ("geo", 4),
    ] {
        let s = section(name);
        let verdicts = s
            .lines()
            .filter(|l| l.ends_with("| met |") || l.ends_with("| **not met** |"))
            .count();
        assert!(verdicts >= at_least, "{name}: {verdicts} verdicts\n{s}");
    }
    let total = page.matches("| met |").count() + page.matches("| **not met** |").count();
    assert!(
        page.contains(&format!(
            "**{} of {total} targets met**",
            page.matches("| met |").count()
        )),
        "the summary counts every verdict"
    );
}

/// `all` takes only the options every experiment shares; an experiment's own options
/// are refused before anything runs.
#[test]
fn all_refuses_an_experiments_own_options() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_partita"));
    let out = std::process::Command::new(&exe)
        .args(["experiment", "all", "--sim", "--quick", "--clients", "8"])
        .args(["--out", "/nonexistent/never"])
        .output()
        .expect("run partita");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("takes --sim, --quick, --out"), "{err}");
    let out = std::process::Command::new(&exe)
        .args(["experiment", "psmr", "--out", "/tmp"])
        .output()
        .expect("run partita");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--out is for `partita experiment all`"),
        "{err}"
    );
}
