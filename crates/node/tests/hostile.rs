//! A node never dies from what a peer or a client sent. A cluster of node cores (3
//! acceptors, 2 replicas per partition, a batcher on acceptor 3 and a standalone one;
//! Ring Paxos and Multi-Paxos, speculation on and off, with and without state
//! partitioning) serves clients while every node is also fed
//! random, well-formed but meaningless peer messages: every message kind, from members,
//! from itself and from strangers, with ballots, instances, ranges, vote and ring masks,
//! value ids and checkpoint offsets drawn around the cluster's real state and at the
//! edges of their types (0, 2^62, `u64::MAX`, ranges that end before they start). No
//! handler may panic, and every core's `invariants()` must hold after every step (the
//! harness checks it); a handler that allocated in proportion to a range or an offset it
//! was sent would exhaust memory and fail the run. Clients send random commands too: any
//! operation, keys at the edges, backwards ranges, empty and long batches, any sequence
//! number, answers wanted from any node.
//!
//! Safety is not asserted under hostile peers: a member that forges votes can make
//! replicas diverge in any Paxos. What a peer cannot do is crash a node. Among correct
//! peers, hostile clients must not break convergence either (`client_barrage`).

use crate::common;

use common::{cmd, Cluster, ACCEPTORS};
use partita_btree::{BPlusTree, BatchOp, Op};
use partita_consensus::{Msg, Protocol, Value, Vid, INSTANCE_MAX};
use partita_node::UnsafeBugs;
use partita_service::ServiceCodec;
use partita_types::{
    Ballot, Body, Command, Instance, NodeId, PartitionLayout, PartitionMap, Payload,
};
use std::sync::Arc;

/// splitmix64: the test's own deterministic randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
    /// A number near the cluster's state, or at an edge: 0, a large power of two, the
    /// largest a peer may name, and now and then one no correct peer sends (the node
    /// must drop those at its gate).
    fn num(&mut self, near: u64) -> u64 {
        if self.below(30) == 0 {
            return u64::MAX - self.below(3);
        }
        match self.below(6) {
            0 => 0,
            1 => 1 << self.below(62),
            2 => INSTANCE_MAX - self.below(2),
            _ => near.saturating_add(self.below(8)).saturating_sub(3),
        }
    }
    fn ballot(&mut self, near: Ballot) -> Ballot {
        match self.below(4) {
            0 => Ballot::ZERO,
            1 => near,
            2 => Ballot::new(near.round + 1, self.pick(&[1, 2, 3, 4, 5, 99])),
            _ => Ballot::new(self.num(near.round), self.pick(&[0, 1, 2, 3, 99])),
        }
    }
    fn vid(&mut self, near: Ballot) -> Vid {
        Vid {
            ballot: self.ballot(near),
            seq: self.num(5),
        }
    }
    fn value(&mut self, near: Ballot) -> Arc<Value> {
        let n = self.below(4);
        let commands = (0..n)
            .map(|_| {
                partita_btree::service::command(
                    self.pick(&[7, 8, 9]),
                    self.num(2),
                    self.pick(&[4, 5, 99]),
                    &self.op(),
                )
            })
            .collect();
        Arc::new(Value {
            vid: self.vid(near),
            commands,
            parts: Vec::new(),
            time_ms: 0,
            skip: 0,
        })
    }
    /// Any operation, with keys at the edges too (`u64::MAX`, ranges that end before
    /// they start, empty and long batches).
    fn op(&mut self) -> Op {
        let key = |r: &mut Rng| match r.below(5) {
            0 => u64::MAX - r.below(2),
            1 => 0,
            _ => r.below(64),
        };
        match self.below(8) {
            0 => Op::Insert {
                key: key(self),
                value: self.next(),
            },
            1 => Op::Delete { key: key(self) },
            2 => Op::Read { key: key(self) },
            3 => Op::Update {
                key: key(self),
                value: self.next(),
            },
            4 => Op::Query {
                min: key(self),
                max: key(self),
            },
            5 => Op::Next { key: key(self) },
            6 => Op::Prev { key: key(self) },
            _ => Op::Batch(
                (0..self.pick(&[0, 1, 7, 300]))
                    .map(|_| match self.below(2) {
                        0 => BatchOp::Insert {
                            key: key(self),
                            value: 1,
                        },
                        _ => BatchOp::Delete { key: key(self) },
                    })
                    .collect(),
            ),
        }
    }

    /// A client's command with anything in it, sequence numbers around `seq`: most
    /// are real envelopes for the cluster's partitions (`map`), the others carry
    /// payloads that do not decode, or bodies that are malformed (no group, the wrong
    /// number of payloads, partitions the cluster does not have).
    fn command(&mut self, seq: u64, map: &PartitionMap) -> Command {
        let client = self.pick(&[42, 43, 0, u64::MAX]);
        let seq = self.num(seq);
        let reply_to = self.pick(&[4, 5, 1, 0, 99]) as NodeId;
        let garbage = |r: &mut Rng| {
            Payload::from(
                (0..r.below(12))
                    .map(|_| r.next() as u8)
                    .collect::<Vec<u8>>(),
            )
        };
        let body = match self.below(10) {
            0 => Body::single(garbage(self)),
            1 => Body::Whole {
                groups: self.pick(&[0, 1 << 63, 0b100]),
                payload: BPlusTree::encode_command(&self.op()),
            },
            2 => Body::Split {
                groups: self.pick(&[0b11, 0b1]),
                payloads: (0..self.below(4)).map(|_| garbage(self)).collect(),
            },
            _ => {
                match partita_service::envelope::<BPlusTree>(client, seq, reply_to, &self.op(), map)
                {
                    Ok(c) => c.body,
                    Err(_) => Body::single(garbage(self)),
                }
            }
        };
        Command {
            client,
            seq,
            session: self.pick(&[0, 1, 5]),
            reply_to,
            body,
            route: self.pick(&[0, 0, 1, 2, 3, u64::MAX]),
        }
    }

    fn decided(&mut self, near: Ballot, at: Instance) -> Vec<(Instance, Vid)> {
        (0..self.below(3))
            .map(|_| (self.num(at), self.vid(near)))
            .collect()
    }
    fn accepted(&mut self, near: Ballot, at: Instance) -> Vec<(Instance, Ballot, Arc<Value>)> {
        (0..self.below(3))
            .map(|_| (self.num(at), self.ballot(near), self.value(near)))
            .collect()
    }

    /// A random message of any kind, around ballot `b` and instance `at`.
    fn msg(&mut self, b: Ballot, at: Instance) -> Msg {
        match self.below(23) {
            0 => Msg::Phase1A {
                ballot: self.ballot(b),
                from: self.num(at),
                to: self.num(at),
            },
            1 => Msg::Phase1B {
                ballot: self.ballot(b),
                from: self.num(at),
                to: self.num(at),
                accepted: self.accepted(b, at),
                truncated_below: self.num(at),
            },
            2 => Msg::Nack {
                ballot: self.ballot(b),
                promised: self.ballot(b),
            },
            3 => Msg::Phase2A {
                ballot: self.ballot(b),
                instance: self.num(at),
                value: self.value(b),
                decided: self.decided(b, at),
                ring: self.num(7),
                part: None,
            },
            4 => Msg::RingVote {
                ballot: self.ballot(b),
                instance: self.num(at),
                vid: self.vid(b),
                votes: self.num(3),
                ring: self.num(7),
            },
            5 => Msg::Phase2B {
                ballot: self.ballot(b),
                instance: self.num(at),
                vid: self.vid(b),
                votes: self.num(3),
            },
            6 => Msg::Decide {
                decided: self.decided(b, at),
            },
            7 => Msg::DecideValue {
                instance: self.num(at),
                value: self.value(b),
            },
            8 => Msg::Heartbeat {
                ballot: self.ballot(b),
                decided_up_to: self.num(at),
            },
            9 => Msg::Alive {
                ballot: self.ballot(b),
            },
            10 => Msg::Forward {
                cmd: self.value(b).commands.first().cloned().unwrap_or(cmd(
                    7,
                    4,
                    Op::Read { key: 1 },
                )),
            },
            11 => Msg::LearnRequest {
                from: self.num(at),
                to: self.num(at),
            },
            12 => Msg::LearnReply {
                decided: (0..self.below(3))
                    .map(|_| (self.num(at), self.value(b)))
                    .collect(),
            },
            13 => Msg::ReadAccepted {
                from: self.num(at),
                to: self.num(at),
            },
            14 => Msg::AcceptedValues {
                from: self.num(at),
                to: self.num(at),
                accepted: self.accepted(b, at),
            },
            15 => Msg::Checkpointed {
                instance: self.num(at),
            },
            16 => Msg::Truncated {
                below: self.num(at),
            },
            17 => Msg::CheckpointRequest {
                instance: self.num(at),
                min_instance: self.num(at),
                offset: self.num(0),
                len: self.num(1 << 20),
            },
            18 => Msg::ForwardBatch {
                seq: self.num(1),
                cmds: (0..self.below(4))
                    .map(|_| self.command(1, &PartitionMap::new(2, 64).unwrap()))
                    .collect(),
            },
            19 => Msg::ForwardAck { seq: self.num(1) },
            20 => Msg::Exec {
                data: (0..self.below(64)).map(|_| self.next() as u8).collect(),
            },
            21 => Msg::SkipRequest {
                to: self.pick(&[0, 1, at, u64::MAX]),
            },
            _ => Msg::CheckpointChunk {
                instance: self.num(at),
                offset: self.num(0),
                total: self.num(100),
                crc32c: self.next() as u32,
                data: vec![0xab; self.below(64) as usize],
            },
        }
    }
}

/// Run `f`; if a node dies in it, fail naming the run and what it was just given.
fn survive(run: &str, what: String, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        panic!("{run}: a node died after {what}");
    }
}

/// Replicas per partition.
const PER: usize = 2;

/// A standalone batcher (acceptor 3 is one too).
const BATCHER: NodeId = 20;

/// Acceptors 1-3 and `PER` replicas per partition (4, 5, ...), node 1 coordinating;
/// batchers on acceptor 3 and [`BATCHER`] alone.
fn cluster(
    protocol: Protocol,
    speculative: bool,
    partitions: u32,
    bugs: UnsafeBugs,
) -> (Cluster, Vec<NodeId>) {
    cluster_with_threads(protocol, speculative, partitions, bugs, 0)
}

/// [`cluster`], its replicas running `threads` P-SMR worker threads (0: none) over the
/// keys 0..=63.
fn cluster_with_threads(
    protocol: Protocol,
    speculative: bool,
    partitions: u32,
    bugs: UnsafeBugs,
    threads: usize,
) -> (Cluster, Vec<NodeId>) {
    let replicas: Vec<NodeId> = (4..4 + PER as NodeId * partitions).collect();
    let mut setup = common::setup(protocol, &replicas);
    setup.speculative = speculative;
    setup.psmr =
        (threads > 0).then(|| partita_smr::ThreadLayout::new(threads, 63).expect("a valid layout"));
    setup.membership.batchers = vec![3, BATCHER];
    if partitions > 1 {
        setup.membership.partitions = PartitionLayout {
            map: PartitionMap::new(partitions, 64).expect("a valid map"),
            replicas: replicas.chunks(PER).map(|r| r.to_vec()).collect(),
        };
    }
    (Cluster::new(setup, bugs), replicas)
}

/// Every node of a [`cluster`] with these replicas.
fn members(replicas: &[NodeId]) -> Vec<NodeId> {
    ACCEPTORS
        .iter()
        .chain(replicas)
        .copied()
        .chain([BATCHER])
        .collect()
}

/// Serve clients while every node is fed `hostile` random messages, interleaved.
fn barrage(
    protocol: Protocol,
    speculative: bool,
    partitions: u32,
    seed: u64,
    hostile: usize,
    bugs: UnsafeBugs,
) {
    let run =
        format!("{protocol} (speculative {speculative}, {partitions} partitions, seed {seed})");
    let checked = !bugs.unchecked_peer_input;
    let (mut c, replicas) = cluster(protocol, speculative, partitions, bugs);
    // Forged `Checkpointed` messages make acceptors truncate their logs.
    c.checkpointing = true;
    c.tick_until_leader(1, 25);
    let mut rng = Rng(seed);
    let members = members(&replicas);
    let mut client_seq = 0;
    for i in 0..hostile {
        if i % 8 == 0 {
            client_seq += 1;
            let op = match rng.below(3) {
                0 => Op::Insert {
                    key: rng.below(64),
                    value: client_seq,
                },
                1 => Op::Query {
                    min: rng.below(64),
                    max: rng.below(64),
                },
                _ => Op::Delete { key: rng.below(64) },
            };
            let mut command = cmd(42, rng.pick(&[4, 5]), op);
            command.seq = client_seq;
            c.request(rng.pick(&ACCEPTORS), command);
        }
        if i % 8 == 4 {
            // A client sending anything at all, to any node.
            let command = rng.command(client_seq, &c.setup.membership.partitions.map.clone());
            let via = rng.pick(&members);
            let what = format!("message {i}: node {via} got request {command:?}");
            survive(&run, what, || c.request(via, command));
        }
        let to = rng.pick(&members);
        // Mostly members (itself included), now and then a stranger.
        let from = match rng.below(12) {
            0 => rng.pick(&[0, 99]),
            _ => rng.pick(&members),
        };
        let Some(node) = c.nodes.get_mut(&to) else {
            continue;
        };
        let ballot = node.leads().unwrap_or(Ballot::new(1, 1));
        let at = c.nodes[&4]
            .replica()
            .map_or(1, |r| r.last_instance().saturating_add(1));
        let msg = rng.msg(ballot, at);
        let what = format!("message {i}: node {to} got {msg:?} from {from}");
        let legit = rng.below(6);
        survive(&run, what, || {
            let mut out = Vec::new();
            c.nodes.get_mut(&to).unwrap().on_peer(from, msg, &mut out);
            c.take(to, out);
            // Let some legitimate traffic through, and time pass.
            for _ in 0..legit {
                c.step();
            }
            if i % 50 == 0 {
                c.tick(1);
            }
        });
    }
    // A good part of the barrage must have reached the roles' handlers, not only the
    // gate (members' messages to themselves, strangers and out-of-range fields stop
    // there: about 40%).
    let gated: u64 = c
        .nodes
        .values()
        .flat_map(|n| n.counters().into_iter())
        .filter(|(k, _)| k.starts_with("dropped_peer_"))
        .map(|(_, v)| v)
        .sum();
    assert!(
        !checked || gated < hostile as u64 * 2 / 3,
        "{gated} of {hostile} messages stopped at the gate"
    );
}

/// Only clients misbehave, among correct peers: every node survives any command, the
/// replicas converge, and a well-formed command afterwards is answered.
fn client_barrage(protocol: Protocol, speculative: bool, partitions: u32, seed: u64) {
    client_barrage_threads(protocol, speculative, partitions, seed, 0)
}

fn client_barrage_threads(
    protocol: Protocol,
    speculative: bool,
    partitions: u32,
    seed: u64,
    threads: usize,
) {
    let run = format!(
        "{protocol} (speculative {speculative}, {partitions} partitions, {threads} threads, seed {seed})"
    );
    let (mut c, replicas) = cluster_with_threads(
        protocol,
        speculative,
        partitions,
        UnsafeBugs::default(),
        threads,
    );
    c.tick_until_leader(1, 25);
    let mut rng = Rng(seed);
    let members = members(&replicas);
    let map = c.setup.membership.partitions.map;
    for i in 0..150 {
        let command = rng.command(i, &map);
        let via = rng.pick(&members);
        let what = format!("request {i}: node {via} got {command:?}");
        survive(&run, what, || {
            c.request(via, command);
            if i % 4 == 0 {
                c.settle();
            }
        });
    }
    c.settle();
    c.tick(3);
    // Every command was ordered and handled: executed, skipped (a read another replica
    // answers), answered from the reply cache, ignored as older than the client's
    // last (random sequence numbers make most of them stale), refused, or an open (a
    // sequence number of 0).
    // (Per partition, its part; a command for both partitions counts in each.)
    let handled: u64 = replicas
        .chunks(PER)
        .map(|group| {
            group
                .iter()
                .map(|r| {
                    let st = c.replica(*r).stats();
                    st.commands_executed
                        + st.reads_skipped
                        + st.duplicates_answered
                        + st.stale_ignored
                        + st.refused
                        + st.sessions_opened
                        + st.sessions_renewed
                        + st.session_refusals
                })
                .max()
                .unwrap_or(0)
        })
        .sum();
    // Malformed bodies are refused where they enter, before ordering.
    let malformed: u64 = c
        .nodes
        .values()
        .map(|n| n.counters().get("requests_malformed").copied().unwrap_or(0))
        .sum();
    assert!(malformed > 0, "the barrage sent no malformed body");
    assert!(
        handled + malformed >= 140,
        "only {handled} + {malformed} of 150 commands handled"
    );
    let mut last = cmd(7, 4, Op::Insert { key: 3, value: 33 });
    last.seq = 1;
    c.submit(1, last);
    assert!(
        c.replies_of(7).iter().any(|r| r.seq == 1),
        "a well-formed command afterwards was not answered"
    );
    // Each partition's replicas hold the same state.
    for group in replicas.chunks(PER) {
        let d: Vec<(NodeId, u64)> = group.iter().map(|r| (*r, c.replica(*r).digest())).collect();
        assert!(
            d.windows(2).all(|w| w[0].1 == w[1].1),
            "replicas diverge: {d:?}"
        );
    }
}

/// Seeds per test: `PARTITA_HOSTILE_SEEDS` (default 8) for a longer search.
fn seeds(base: u64) -> std::ops::Range<u64> {
    let n = std::env::var("PARTITA_HOSTILE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    base..base + n
}

#[test]
fn ring_paxos_nodes_survive_hostile_peers() {
    for seed in seeds(0) {
        barrage(
            Protocol::RingPaxos,
            false,
            1,
            seed,
            600,
            UnsafeBugs::default(),
        );
    }
}

#[test]
fn speculating_ring_paxos_nodes_survive_hostile_peers() {
    for seed in seeds(1 << 20) {
        barrage(
            Protocol::RingPaxos,
            true,
            1,
            seed,
            600,
            UnsafeBugs::default(),
        );
    }
}

#[test]
fn multi_paxos_nodes_survive_hostile_peers() {
    for seed in seeds(2 << 20) {
        barrage(
            Protocol::MultiPaxos,
            false,
            1,
            seed,
            600,
            UnsafeBugs::default(),
        );
    }
}

#[test]
fn partitioned_nodes_survive_hostile_peers() {
    for seed in seeds(3 << 20) {
        barrage(
            Protocol::RingPaxos,
            seed % 2 == 0,
            2,
            seed,
            600,
            UnsafeBugs::default(),
        );
    }
}

/// Control: without the gate (`unchecked-peer-input`), the same barrage kills a node
/// (a backwards range, an instance at `u64::MAX`, ...) within a few seeds.
#[test]
fn planted_unchecked_peer_input_is_caught() {
    let bugs = UnsafeBugs {
        unchecked_peer_input: true,
        ..UnsafeBugs::default()
    };
    let died = (0..8).find(|&seed| {
        std::panic::catch_unwind(|| barrage(Protocol::RingPaxos, false, 1, seed, 600, bugs.clone()))
            .is_err()
    });
    let seed = died.expect("a node without its gate survived 8 hostile barrages");
    eprintln!("unchecked-peer-input caught at seed {seed}");
}

#[test]
fn nodes_survive_any_client_command() {
    for seed in seeds(4 << 20) {
        client_barrage(Protocol::RingPaxos, false, 1, seed);
        client_barrage(Protocol::RingPaxos, true, 1, seed);
        client_barrage(Protocol::MultiPaxos, false, 1, seed);
        client_barrage(Protocol::RingPaxos, seed % 2 == 0, 2, seed);
        // P-SMR replicas: commands name any thread mask (none, one of the threads, one
        // beyond them, several, all bits).
        client_barrage_threads(Protocol::RingPaxos, false, 1, seed, 3);
    }
}
