//! The combination matrix (ARCHITECTURE.md, `partita_config::matrix`): every ordering ×
//! execution model × built-in service. Every cell the cluster-file check accepts runs
//! as a short seeded simulation with the swarm's faults and must pass every check
//! (linearizable history, replicas converged, liveness after healing); every refused
//! cell is refused naming one of the cell's own settings. A cell the check accepts but
//! the simulator cannot run fails here: nothing is accepted untested.

use partita_config::matrix::{cluster_of, Cell, ExecutionModel};
use partita_config::ordering::OrderingProtocol;
use partita_sim::{
    run_seed, swarm, DssmrChoice, GeoChoice, PartitionChoice, ProtocolChoice, PsmrChoice,
    RingsChoice, ServiceChoice, SimOptions, SpeculationChoice,
};

/// The simulator's options that run `cell`.
fn options_of(cell: &Cell) -> SimOptions {
    let mut o = SimOptions {
        ops: 200,
        trace_tail: 0,
        speculation: SpeculationChoice::Off,
        partitioning: PartitionChoice::Fixed(1),
        psmr: PsmrChoice::Fixed {
            threads: 0,
            optimistic: false,
        },
        rings: RingsChoice::Fixed(0),
        ..SimOptions::default()
    };
    match cell.ordering {
        OrderingProtocol::RingPaxos => o.protocol = ProtocolChoice::RingPaxos,
        OrderingProtocol::MultiPaxos => o.protocol = ProtocolChoice::MultiPaxos,
        OrderingProtocol::MultiRing => o.rings = RingsChoice::Fixed(2),
        OrderingProtocol::GeoPaxosPlus => o.geo = GeoChoice::GeoPaxosPlus,
        OrderingProtocol::Epaxos => o.geo = GeoChoice::Epaxos,
        OrderingProtocol::GeoPaxos => o.geo = GeoChoice::GeoPaxos,
    }
    match cell.execution {
        ExecutionModel::Sequential => {}
        ExecutionModel::Speculative => o.speculation = SpeculationChoice::On,
        ExecutionModel::Psmr | ExecutionModel::OptPsmr => {
            o.psmr = PsmrChoice::Fixed {
                threads: 2,
                optimistic: cell.execution == ExecutionModel::OptPsmr,
            }
        }
        ExecutionModel::Ssmr => {
            o.dssmr = DssmrChoice::Fixed(partita_dssmr::client::Scheme::Ssmr);
            o.partitioning = PartitionChoice::Fixed(3);
        }
        ExecutionModel::Dssmr => {
            o.dssmr = DssmrChoice::Fixed(partita_dssmr::client::Scheme::Dssmr);
            o.partitioning = PartitionChoice::Fixed(3);
        }
    }
    o.service = match cell.service {
        "kv" => ServiceChoice::Kv,
        "geo-btree" => ServiceChoice::GeoBtree,
        _ => ServiceChoice::Btree,
    };
    o
}

#[test]
fn every_accepted_cell_runs_and_every_refused_one_names_its_setting() {
    let mut ran = Vec::new();
    for (i, cell) in Cell::all().iter().enumerate() {
        let Ok(file) = cluster_of(cell) else {
            let r = cluster_of(cell).unwrap_err();
            assert!(
                cell.fields().contains(&r.field.as_str()),
                "{cell}: refused naming `{}`, not one of its settings: {}",
                r.field,
                r.message
            );
            assert!(!r.message.is_empty(), "{cell}: refused without a reason");
            continue;
        };
        // The seed the simulator draws for the cell runs what the cell says.
        let o = options_of(cell);
        let seed = i as u64;
        let p = swarm::draw(seed, &o);
        let c = p.cluster();
        assert_eq!(c.ordering.protocol(), cell.ordering, "{cell}");
        assert_eq!(c.cluster.service, cell.service, "{cell}");
        assert_eq!(file.ordering.protocol(), cell.ordering, "{cell}");
        // The seed runs the cell's model, as its cluster file states it.
        assert_eq!(c.execution.model(), cell.execution, "{cell}");
        assert_eq!(file.execution.model(), cell.execution, "{cell}");
        assert_eq!(c.chirper.is_some(), cell.service == "chirper", "{cell}");
        let r = run_seed(seed, &o);
        assert!(
            r.passed,
            "{cell} (seed {seed}, {}): {}",
            o.flags(),
            r.one_line()
        );
        ran.push(cell.to_string());
    }
    eprintln!("{} cells ran: {}", ran.len(), ran.join("; "));
    assert!(ran.len() >= 30, "{} cells ran", ran.len());
}
