//! A peer's message at a node's entry: whatever decodes as a consensus message is fed
//! to a real node core (an acceptor that coordinates, and a replica), from a member or a
//! stranger, between clock ticks. No handler may panic and every invariant must hold
//! (a node never dies from what a peer sent).
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_consensus::{
    BatcherConfig, CoordinatorConfig, LearnerConfig, Membership, Msg, Protocol,
};
use partita_node::{CheckpointConfig, Mode, NodeCore, NodeSetup, UnsafeBugs};

fn setup(id: u32, protocol: Protocol) -> NodeSetup {
    NodeSetup {
        id,
        service: partita_smr::service::<partita_btree::BPlusTree>(),
        session_lease_ms: Some(1000),
        cluster_id: 1,
        mode: Mode::Smr,
        membership: Membership {
            protocol,
            acceptors: vec![1, 2, 3],
            coordinator: 1,
            learners: vec![4, 5],
            partitions: Default::default(),
            batchers: Vec::new(),
        },
        acceptor: id <= 3,
        replica: id >= 4,
        batcher: false,
        coordinator_config: CoordinatorConfig {
            election_timeout_ticks: 20,
            heartbeat_ticks: 5,
            ..CoordinatorConfig::default()
        },
        learner_config: LearnerConfig::default(),
        batcher_config: BatcherConfig::default(),
        checkpoint: CheckpointConfig::default(),
        early_replies: false,
        speculative: id == 5,
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let protocol = if data[0] & 1 == 0 {
        Protocol::RingPaxos
    } else {
        Protocol::MultiPaxos
    };
    let from = [1, 2, 3, 4, 5, 0, 99, u32::MAX][(data[0] >> 1) as usize % 8];
    // The rest: messages, each preceded by a one-byte length (0: the rest).
    let mut msgs = Vec::new();
    let mut at = 1;
    while at < data.len() {
        let n = data[at] as usize;
        at += 1;
        let end = if n == 0 {
            data.len()
        } else {
            (at + n).min(data.len())
        };
        if let Ok(m) = partita_types::decode::<Msg>(&data[at..end]) {
            msgs.push(m);
        }
        at = end;
    }
    if msgs.is_empty() {
        return;
    }
    for id in [1, 4, 5] {
        let mut out = Vec::new();
        let mut node = NodeCore::new(
            setup(id, protocol),
            Vec::new(),
            UnsafeBugs::default(),
            &mut out,
        );
        let mut now = 1_000;
        for m in &msgs {
            out.clear();
            node.on_peer(from, m.clone(), &mut out);
            node.invariants();
            now += 3;
            node.on_tick(now, &mut out);
            node.invariants();
        }
    }
});
