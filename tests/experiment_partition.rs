//! The partitioning experiments (`crates/experiments/src/experiment_partition.rs`) as tiny simulated
//! sweeps: every configuration and client count is a point with the right cluster and
//! workload, the report is labelled simulated with its configuration, the JSON and the
//! figures hold every curve. No timing or target number is asserted.

use partita_experiments::experiment_partition::{
    configs, figures, run_sim, sim_point, speculation_gains, table, write, PartExperiment,
    PartOptions,
};
use partita_harness::bench::Workload;

fn tiny() -> PartOptions {
    PartOptions {
        jobs: 2,
        ..PartOptions::tiny()
    }
}

#[test]
fn partitioning_sweep_has_every_configuration_and_ratio() {
    let o = tiny();
    let r = run_sim(PartExperiment::Partitioning, &o).expect("the sweep runs");
    assert!(r.simulated);
    assert!(
        r.configuration.starts_with("SIMULATED"),
        "{}",
        r.configuration
    );
    assert_eq!(r.points.len(), 2 * 3 * o.clients.len());
    for w in [Workload::Query, Workload::Batch] {
        for (series, parts) in [("SMR", 1), ("2 P", 2), ("4 P", 4)] {
            let pts: Vec<_> = r
                .points
                .iter()
                .filter(|p| p.config.workload == w && p.config.series == series)
                .collect();
            assert_eq!(pts.len(), o.clients.len(), "{w:?} {series}");
            for p in pts {
                assert_eq!(p.config.partitions, parts);
                assert_eq!(p.result.replicas, 2 * parts as usize);
                assert!(p.result.commands > 0, "{w:?} {series} completed commands");
                assert_eq!(p.result.resubmissions, 0);
                let d = p.sim.as_ref().expect("simulated detail");
                let replicas = d.nodes.iter().filter(|n| n.role == "replica").count();
                assert_eq!(replicas, 2 * parts as usize);
            }
        }
        let ratios: Vec<_> = r.ratios.iter().filter(|x| x.workload == w).collect();
        assert_eq!(ratios.len(), 3);
        assert_eq!(ratios[0].series, "SMR");
        assert!((ratios[0].ratio - 1.0).abs() < 1e-9);
    }
    assert_eq!(r.targets.len(), 2, "the simulated targets are reported");
    let figs = figures(&r);
    assert_eq!(figs.len(), 1);
    let (name, fig) = &figs[0];
    assert_eq!(name, "fig9");
    let svg = figure_text(&fig.svg().unwrap());
    assert!(svg.contains("(simulated)"));
    for s in [" SMR ", " 2 P ", " 4 P "] {
        assert!(svg.contains(s), "{s} in the figure: {svg}");
    }
    let t = table(&r);
    assert!(t.contains("SIMULATED") && t.contains("peak throughput against classic SMR"));
}

#[test]
fn cross_partition_and_speculation_sweeps_write_their_figures() {
    let o = tiny();
    let dir = tempfile::tempdir().expect("temp dir");

    let r = run_sim(PartExperiment::CrossPartition, &o).expect("the sweep runs");
    assert_eq!(r.points.len(), o.cross_percents.len() * o.clients.len());
    for p in &r.points {
        assert_eq!(p.config.partitions, 2);
        assert!(p.config.series.ends_with("% cross"));
        assert!(p.result.commands > 0);
    }
    let files = write(&r, &dir.path().join("cross.json")).expect("written");
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "cross.json",
            "cross-fig10.svg",
            "cross-fig10.png",
            "cross-fig11.svg",
            "cross-fig11.png"
        ]
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(json["simulated"], true);
    assert_eq!(json["name"], "cross-partition");
    assert_eq!(json["points"][0]["cross_percent"], 0);
    let fig11 = figure_text(&std::fs::read_to_string(&files[3]).unwrap());
    assert!(fig11.contains("replica CPU") && fig11.contains(" 100% cross"));

    let r = run_sim(PartExperiment::SpeculationPartitioning, &o).expect("the sweep runs");
    assert_eq!(r.points.len(), 2 * o.cross_percents.len() * o.clients.len());
    assert_eq!(
        r.points.iter().filter(|p| p.config.speculative).count(),
        r.points.len() / 2
    );
    let gains = speculation_gains(&r.points);
    assert_eq!(gains.len(), o.cross_percents.len() * o.clients.len());
    let files = write(&r, &dir.path().join("spec.json")).expect("written");
    assert!(files[1].to_string_lossy().ends_with("spec-fig12.svg"));
    let fig12 = figure_text(&std::fs::read_to_string(&files[1]).unwrap());
    assert!(fig12.contains("% cross-partition queries") && fig12.contains("(simulated)"));
}

/// The IP-multicast what-if (`--multicast`): a group send leaves the coordinator's card
/// once. With 4 partitions of 2 replicas a value leaves it as 2 whole copies (the other
/// acceptors) plus 8 quarter parts over TCP, against 1 whole copy plus 4 parts with
/// multicast: about half the payload bytes per command (less card time still in this
/// tiny run, where small values make each copy's headers count).
#[test]
fn multicast_halves_what_the_coordinators_card_sends_per_command() {
    let cfg = configs(PartExperiment::Partitioning, &tiny())
        .into_iter()
        .find(|c| c.workload == Workload::Batch && c.partitions == 4)
        .expect("a 4-partition batch curve");
    let per_command = |multicast| {
        let o = PartOptions {
            multicast,
            ..tiny()
        };
        let p = sim_point(&o, &cfg, 8).expect("the point runs");
        let d = p.sim.expect("simulated detail");
        let card = d
            .nodes
            .iter()
            .find(|n| n.role == "coordinator")
            .expect("a coordinator")
            .nic_out;
        assert!(p.result.commands > 0);
        card / p.result.throughput_cmds_per_s
    };
    let (tcp, multicast) = (per_command(false), per_command(true));
    eprintln!("coordinator card time per command: TCP {tcp:e}, multicast {multicast:e}");
    assert!(
        multicast < 0.7 * tcp,
        "card time per command: {multicast:e} with multicast, {tcp:e} with TCP copies"
    );
}

/// `--batchers 2 --workloads batch`: only the batch curves, every cluster with two
/// standalone batchers that carry the clients' commands, and the coordinator's CPU per
/// command lower than without them (it receives one message per batch). With the
/// calibrated cost table, where taking a message off a connection (`recv_ns`) is most
/// of a small request's cost.
#[test]
fn batchers_take_the_clients_and_unload_the_coordinator() {
    let calibrated = partita_sim::CostTable::from_toml(include_str!(
        "../crates/sim/calibration/this-machine.toml"
    ))
    .expect("the calibrated table loads");
    let cfg = configs(
        PartExperiment::Partitioning,
        &PartOptions {
            workloads: vec![Workload::Batch],
            ..tiny()
        },
    );
    assert_eq!(cfg.len(), 3);
    assert!(cfg.iter().all(|c| c.workload == Workload::Batch));
    let smr = &cfg[0];
    let coordinator_per_command = |batchers| {
        let o = PartOptions {
            batchers,
            cost: calibrated.clone(),
            ..tiny()
        };
        let p = sim_point(&o, smr, 16).expect("the point runs");
        let d = p.sim.expect("simulated detail");
        let b: Vec<_> = d.nodes.iter().filter(|n| n.role == "batcher").collect();
        assert_eq!(b.len(), batchers as usize);
        assert!(b.iter().all(|n| n.cpu > 0.0), "every batcher works: {b:?}");
        let c = d.nodes.iter().find(|n| n.role == "coordinator").unwrap();
        assert!(p.result.commands > 0);
        c.cpu / p.result.throughput_cmds_per_s
    };
    let (direct, batched) = (coordinator_per_command(0), coordinator_per_command(2));
    eprintln!("coordinator CPU per command: direct {direct:e}, with batchers {batched:e}");
    assert!(
        batched < direct,
        "coordinator CPU per command: {batched:e} with batchers, {direct:e} without"
    );
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
