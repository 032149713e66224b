//! Scripted multi-node scenarios: every role of a 3-acceptor, 2-learner cluster in one
//! test, messages delivered by a seeded scheduler that reorders, delays and loses them,
//! and persist completions that arrive late. Checks agreement (learners deliver the same
//! values in the same order), validity (only submitted commands are delivered) and, once
//! losses stop, liveness (every command is delivered). Both protocols, and Ring Paxos
//! decided at the coordinator and at an acceptor.

use partita_btree::Op;
use partita_consensus::*;
use partita_types::{Ballot, Command, NodeId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

struct Cluster {
    membership: Membership,
    acceptors: Vec<(NodeId, Acceptor, VecDeque<PersistToken>)>,
    coordinator: Coordinator,
    learners: Vec<(NodeId, Learner, Vec<Command>)>,
    net: Vec<(NodeId, NodeId, Msg)>,
    rng: ChaCha8Rng,
    loss: f64,
}

impl Cluster {
    fn new(protocol: Protocol, ring_decision: RingDecision, seed: u64, loss: f64) -> Cluster {
        let membership = Membership {
            ring_decision,
            protocol,
            acceptors: vec![1, 2, 3],
            coordinator: 3,
            learners: vec![4, 5],
            partitions: Default::default(),
            batchers: Vec::new(),
            epoch: 0,
            epoch_from: 1,
            unsafe_quorum: None,
        };
        let acceptors = membership
            .acceptors
            .iter()
            .map(|&a| (a, Acceptor::new(a, membership.clone()), VecDeque::new()))
            .collect();
        let cfg = CoordinatorConfig {
            window_instances_max: 4,
            batch_bytes_max: 200,
            retransmit_ticks: 20,
            heartbeat_ticks: 10,
            phase1_range_instances: 8,
            ..Default::default()
        };
        let coordinator = Coordinator::new(3, membership.clone(), cfg, Ballot::ZERO, 1);
        let lcfg = LearnerConfig {
            gap_ticks: 5,
            ..Default::default()
        };
        let learners = membership
            .learners
            .iter()
            .map(|&l| {
                (
                    l,
                    Learner::new(l, membership.clone(), lcfg.clone(), 1),
                    Vec::new(),
                )
            })
            .collect();
        Cluster {
            membership,
            acceptors,
            coordinator,
            learners,
            net: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            loss,
        }
    }

    fn absorb(&mut self, from: NodeId, out: Outbox) {
        for a in out {
            match a {
                Action::Send { to, msg } => self.net.push((from, to, msg)),
                Action::Persist { token, .. } => {
                    let acc = self.acceptors.iter_mut().find(|x| x.0 == from).unwrap();
                    acc.2.push_back(token);
                }
                Action::Deliver { value, .. } => {
                    let l = self.learners.iter_mut().find(|x| x.0 == from).unwrap();
                    l.2.extend(value.commands.iter().cloned());
                }
                // No checkpoints in this scenario: nothing is ever truncated.
                Action::TruncateLog { .. } => unreachable!("no replica checkpoints here"),
                Action::Propose { .. } => unreachable!("no speculative learners here"),
                Action::Cut { .. } | Action::NeedCheckpoint => {
                    unreachable!("Paxos delivers a total order")
                }
            }
        }
    }

    fn deliver(&mut self, from: NodeId, to: NodeId, msg: Msg) {
        let mut out = Vec::new();
        let to_coordinator = matches!(
            msg,
            Msg::Phase1B { .. } | Msg::Nack { .. } | Msg::Phase2B { .. }
        ) || (to == self.membership.coordinator
            && matches!(msg, Msg::LearnRequest { .. })
            && self.rng.gen_bool(0.5));
        if to == self.membership.coordinator && to_coordinator {
            self.coordinator.on_message(from, msg, &mut out);
            self.coordinator.invariants();
        } else if let Some(acc) = self.acceptors.iter_mut().find(|x| x.0 == to) {
            acc.1.on_message(from, msg, &mut out);
            acc.1.invariants();
        } else if let Some(l) = self.learners.iter_mut().find(|x| x.0 == to) {
            l.1.on_message(from, msg, &mut out);
            l.1.invariants();
        }
        self.absorb(to, out);
    }

    /// One scheduling step: deliver a random message, complete a random acceptor's
    /// oldest write, or tick everyone.
    fn step(&mut self, tick: &mut u64) {
        let r = self.rng.gen_range(0..10);
        if r < 6 && !self.net.is_empty() {
            let i = self.rng.gen_range(0..self.net.len());
            let (from, to, msg) = self.net.swap_remove(i);
            if self.rng.gen_bool(self.loss) {
                return;
            }
            self.deliver(from, to, msg);
        } else if r < 9 {
            let k = self.rng.gen_range(0..self.acceptors.len());
            if let Some(token) = self.acceptors[k].2.pop_front() {
                let mut out = Vec::new();
                self.acceptors[k].1.on_persisted(token, &mut out);
                let id = self.acceptors[k].0;
                self.absorb(id, out);
            }
        } else {
            *tick += 1;
            let mut out = Vec::new();
            self.coordinator.on_tick(*tick, &mut out);
            self.absorb(3, out);
            for k in 0..self.learners.len() {
                let mut out = Vec::new();
                self.learners[k].1.on_tick(*tick, &mut out);
                let id = self.learners[k].0;
                self.absorb(id, out);
            }
        }
    }
}

fn run(protocol: Protocol, ring_decision: RingDecision, seed: u64) {
    let mut c = Cluster::new(protocol, ring_decision, seed, 0.1);
    let mut out = Vec::new();
    c.coordinator.start(&mut out);
    c.absorb(3, out);
    let total = 60u64;
    let mut submitted = 0u64;
    let mut tick = 0u64;
    for step in 0..200_000 {
        if submitted < total && c.rng.gen_bool(0.05) {
            submitted += 1;
            let mut out = Vec::new();
            let cmd = partita_btree::service::command(
                1,
                submitted,
                4,
                &Op::Insert {
                    key: submitted,
                    value: submitted,
                },
            );
            assert!(c.coordinator.on_command(cmd, &mut out));
            c.absorb(3, out);
        }
        if step == 100_000 {
            c.loss = 0.0; // heal: liveness phase
        }
        c.step(&mut tick);
        if submitted == total && c.learners.iter().all(|l| l.2.len() as u64 == total) {
            break;
        }
    }
    let a = &c.learners[0].2;
    let b = &c.learners[1].2;
    let common = a.len().min(b.len());
    assert_eq!(a[..common], b[..common], "seed {seed}: learners disagree");
    assert_eq!(
        a.len() as u64,
        total,
        "seed {seed}: learner 4 delivered {} of {total}",
        a.len()
    );
    assert_eq!(
        b.len() as u64,
        total,
        "seed {seed}: learner 5 delivered {} of {total}",
        b.len()
    );
    let mut seqs: Vec<u64> = a.iter().map(|c| c.seq).collect();
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (1..=total).collect::<Vec<_>>(),
        "seed {seed}: each command delivered exactly once"
    );
}

#[test]
fn ring_paxos_agreement_and_liveness_under_loss() {
    for seed in 0..40 {
        run(Protocol::RingPaxos, RingDecision::Coordinator, seed);
    }
}

#[test]
fn ring_paxos_decided_at_an_acceptor_agreement_and_liveness_under_loss() {
    for seed in 0..40 {
        run(Protocol::RingPaxos, RingDecision::Acceptor, seed);
    }
}

#[test]
fn multi_paxos_agreement_and_liveness_under_loss() {
    for seed in 0..40 {
        run(Protocol::MultiPaxos, RingDecision::Coordinator, seed);
    }
}
