//! A cluster file (`partita_config::ClusterConfig::parse`, what `partita node`, `up`,
//! `bench` and every client read first): any text. Never a panic: a file is taken or
//! refused with the field and the reason. A file that is taken is one the rest of the
//! system can use without panicking: its membership, client topology, partition
//! layout, per-node setup and role lists are computed (the validation is what lets them
//! assume their preconditions), and written back (`to_toml`) it parses to the same
//! configuration, whose text is then the same again.
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_config::ClusterConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let c = match ClusterConfig::parse(text, "fuzz.toml") {
        Ok(c) => c,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let _ = c.membership();
    let _ = c.client_topology();
    let _ = c.partition_layout();
    let _ = c.executors();
    let _ = c.entry_node();
    let _ = c.psmr_layout();
    let _ = c.coordinator_config();
    let _ = c.batcher_config();
    let _ = c.checkpoint_config();
    let _ = c.learner_config();
    let _ = c.multiring_setup();
    let _ = c.geo_setup();
    let _ = c.wan();
    let _ = c.wan_rtt_max_ms();
    let _ = c.skip_config();
    let _ = c.session_lease();
    let _ = c.etcd_endpoints();
    let _ = c.partition_map();
    for n in &c.nodes {
        let _ = c.node(n.id);
        let _ = c.addr(n.id);
        let _ = c.node_region(n.id);
        for m in &c.nodes {
            let _ = c.node_delay(n.id, m.id);
        }
    }
    for i in 0..4 {
        let _ = c.client_region(i);
    }
    let written = c.to_toml();
    let back = ClusterConfig::parse(&written, "written.toml")
        .unwrap_or_else(|e| panic!("a taken file, written back, is refused: {e}\n{written}"));
    assert_eq!(back.to_toml(), written, "written twice, the same text");
});
