//! Failover, scripted on node cores wired by a tiny in-memory network: the leader
//! crashes, the next acceptor takes over through Phase 1, commands forwarded through
//! any acceptor keep being decided, a crashed Ring Paxos acceptor is left out of the
//! ring, and a restarted former leader follows instead of fighting. The simulator
//! (crates/sim) covers the same ground under random faults; these show each step.

use partita_consensus::{AcceptorRecord, CoordinatorConfig, LearnerConfig, Membership, Protocol};
use partita_node::{CheckpointConfig, Mode, NodeCore, NodeSetup, Output, UnsafeBugs};
use partita_types::{Command, NodeId, Op, OpResult, Reply};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

const ACCEPTORS: [NodeId; 3] = [1, 2, 3];
const REPLICAS: [NodeId; 2] = [4, 5];

struct Cluster {
    protocol: Protocol,
    speculative: bool,
    nodes: BTreeMap<NodeId, NodeCore>,
    down: BTreeSet<NodeId>,
    msgs: VecDeque<(NodeId, NodeId, partita_consensus::Msg)>,
    persists: VecDeque<(NodeId, u64, AcceptorRecord)>,
    /// Durable log per node: what a restart recovers from.
    disk: BTreeMap<NodeId, Vec<AcceptorRecord>>,
    replies: Vec<Reply>,
}

impl Cluster {
    fn setup(&self, id: NodeId) -> NodeSetup {
        NodeSetup {
            id,
            cluster_id: 1,
            mode: Mode::Smr,
            membership: Membership {
                protocol: self.protocol,
                acceptors: ACCEPTORS.to_vec(),
                coordinator: 1,
                learners: REPLICAS.to_vec(),
                partitions: Default::default(),
            },
            acceptor: ACCEPTORS.contains(&id),
            replica: REPLICAS.contains(&id),
            coordinator_config: CoordinatorConfig {
                election_timeout_ticks: 20,
                suspect_ticks: 12,
                heartbeat_ticks: 5,
                retransmit_ticks: 30,
                ..CoordinatorConfig::default()
            },
            learner_config: LearnerConfig {
                gap_ticks: 5,
                ..LearnerConfig::default()
            },
            checkpoint: CheckpointConfig::default(),
            early_replies: false,
            speculative: self.speculative,
        }
    }

    fn new(protocol: Protocol) -> Cluster {
        let mut c = Cluster {
            protocol,
            speculative: false,
            nodes: BTreeMap::new(),
            down: BTreeSet::new(),
            msgs: VecDeque::new(),
            persists: VecDeque::new(),
            disk: BTreeMap::new(),
            replies: Vec::new(),
        };
        for id in ACCEPTORS.iter().chain(&REPLICAS) {
            c.start(*id);
        }
        c
    }

    fn start(&mut self, id: NodeId) {
        let mut out = Vec::new();
        let records = self.disk.get(&id).cloned().unwrap_or_default();
        let core = NodeCore::new(self.setup(id), records, UnsafeBugs::default(), &mut out);
        self.nodes.insert(id, core);
        self.down.remove(&id);
        self.take(id, out);
    }

    fn crash(&mut self, id: NodeId) {
        self.nodes.remove(&id);
        self.down.insert(id);
        self.persists.retain(|(n, _, _)| *n != id);
    }

    fn take(&mut self, from: NodeId, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Send { to, msg } => self.msgs.push_back((from, to, msg)),
                Output::Persist { token, record } => self.persists.push_back((from, token, record)),
                Output::Reply(r) => self.replies.push(r),
                Output::Refused { .. } | Output::Early(_) => {}
                // Too few instances here for the default checkpoint interval.
                Output::SaveCheckpoint { .. } | Output::TruncateLog { .. } => {
                    unreachable!("no checkpoints in these scenarios")
                }
            }
        }
        if let Some(n) = self.nodes.get(&from) {
            n.invariants();
        }
    }

    /// Deliver everything until quiet (messages to or from crashed nodes are lost).
    fn settle(&mut self) {
        for _ in 0..100_000 {
            if let Some((from, to, msg)) = self.msgs.pop_front() {
                if self.down.contains(&from) || self.down.contains(&to) {
                    continue;
                }
                let mut out = Vec::new();
                self.nodes
                    .get_mut(&to)
                    .unwrap()
                    .on_peer(from, msg, &mut out);
                self.take(to, out);
            } else if let Some((node, token, record)) = self.persists.pop_front() {
                self.disk.entry(node).or_default().push(record);
                let mut out = Vec::new();
                self.nodes
                    .get_mut(&node)
                    .unwrap()
                    .on_persisted(&[token], &mut out);
                self.take(node, out);
            } else {
                return;
            }
        }
        panic!("the cluster never went quiet");
    }

    fn tick(&mut self, n: usize) {
        for _ in 0..n {
            let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
            for id in ids {
                let mut out = Vec::new();
                self.nodes.get_mut(&id).unwrap().on_tick(&mut out);
                self.take(id, out);
            }
            self.settle();
        }
    }

    fn submit(&mut self, via: NodeId, seq: u64) {
        let cmd = Command {
            client: 77,
            seq,
            reply_to: 4,
            op: Op::Insert {
                key: seq,
                value: seq * 10,
            },
        };
        let mut out = Vec::new();
        self.nodes.get_mut(&via).unwrap().on_request(cmd, &mut out);
        self.take(via, out);
        self.settle();
    }

    fn answered(&self, seq: u64) -> bool {
        self.replies
            .iter()
            .any(|r| r.seq == seq && r.result == OpResult::Inserted(true))
    }

    fn leader_count(&self) -> usize {
        self.nodes
            .values()
            .filter(|n| n.coordinator().is_some())
            .count()
    }

    fn replicas_agree(&self) {
        let d: Vec<u64> = REPLICAS
            .iter()
            .filter_map(|r| self.nodes.get(r))
            .map(|n| n.replica().unwrap().digest())
            .collect();
        assert!(d.windows(2).all(|w| w[0] == w[1]), "replicas diverge");
    }
}

fn failover(protocol: Protocol) {
    let mut c = Cluster::new(protocol);
    c.tick(3);
    for seq in 1..=5 {
        c.submit(1, seq);
        c.tick(2);
        assert!(c.answered(seq), "{protocol}: command {seq} not answered");
    }

    // The leader dies. A command sent meanwhile through node 2 is forwarded to the dead
    // leader and lost; the client resubmits after the election.
    c.crash(1);
    c.submit(2, 6);
    let mut ticks = 0;
    while c.nodes[&2].coordinator().is_none() {
        c.tick(1);
        ticks += 1;
        assert!(ticks <= 25, "{protocol}: node 2 never campaigned");
    }
    assert!(
        ticks >= 15,
        "{protocol}: campaigned after only {ticks} ticks"
    );
    assert_eq!(c.leader_count(), 1);
    c.tick(20);
    c.submit(2, 6);
    c.tick(5);
    assert!(c.answered(6), "{protocol}: no decision after failover");
    c.submit(3, 7); // through a follower: forwarded to the new leader
    c.tick(5);
    assert!(
        c.answered(7),
        "{protocol}: forwarding to the new leader failed"
    );

    // The old leader comes back from its log: it follows, it does not take over.
    c.start(1);
    c.tick(30);
    assert!(
        c.nodes[&1].coordinator().is_none(),
        "{protocol}: old leader fought back"
    );
    assert_eq!(c.nodes[&1].leader(), Some(2));
    c.submit(1, 8);
    c.tick(5);
    assert!(
        c.answered(8),
        "{protocol}: command via the restarted node lost"
    );

    // Every command executed once, in the same order, on both replicas.
    c.tick(20);
    c.replicas_agree();
    let tree = c.nodes[&5].replica().unwrap().tree();
    for seq in 1..=8 {
        assert_eq!(tree.read(seq), Some(seq * 10), "{protocol}: key {seq}");
    }
}

#[test]
fn multipaxos_leader_failover() {
    failover(Protocol::MultiPaxos);
}

#[test]
fn ringpaxos_leader_failover() {
    failover(Protocol::RingPaxos);
}

#[test]
fn ring_leaves_out_a_crashed_acceptor_and_takes_it_back() {
    let mut c = Cluster::new(Protocol::RingPaxos);
    c.tick(3);
    c.submit(1, 1);
    c.tick(2);
    assert!(c.answered(1));
    // Acceptor 2 is first in the ring (2, 3, 1): with it down no vote starts until
    // the leader lays out a ring without it.
    c.crash(2);
    c.submit(1, 2);
    c.tick(40);
    assert!(
        c.answered(2),
        "the ring was not laid out again without acceptor 2"
    );
    let mask = c.nodes[&1].coordinator().unwrap().ring_mask();
    assert_eq!(mask, 0b101, "ring should be acceptors 1 and 3");
    c.start(2);
    c.tick(20);
    let mask = c.nodes[&1].coordinator().unwrap().ring_mask();
    assert_eq!(mask, 0b111, "acceptor 2 was not taken back into the ring");
    c.submit(1, 3);
    c.tick(3);
    assert!(c.answered(3));
    c.tick(20);
    c.replicas_agree();
}
