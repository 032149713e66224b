//! Batchers on scripted node cores: commands entered at a standalone batcher (node 6)
//! and at a batcher co-located with acceptor 2 are batched to the leader, decided and
//! answered exactly once; the leader acknowledges each batch; a node that does not lead
//! drops batches; and when the leader dies with batches outstanding, the batchers learn
//! the new leader (from its heartbeats, or their node's elector) and resend, so every
//! command is still answered without any client resubmitting.

use crate::common;

use common::{res, setup, Cluster};
use partita_btree::{Op, OpResult};
use partita_consensus::{Msg, Protocol};
use partita_node::UnsafeBugs;
use partita_types::{Command, NodeId};

const STANDALONE: NodeId = 6;
const CO_LOCATED: NodeId = 2;

fn cluster(protocol: Protocol) -> Cluster {
    let mut s = setup(protocol, &[4, 5]);
    s.membership.batchers = vec![STANDALONE, CO_LOCATED];
    let mut c = Cluster::new(s, UnsafeBugs::default());
    c.tick(3);
    c
}

fn batcher_stats(c: &Cluster, id: NodeId) -> partita_consensus::BatcherStats {
    c.nodes[&id]
        .paxos_roles()
        .and_then(|p| p.batcher())
        .expect("a batcher")
        .stats()
        .clone()
}

/// Command `n`: the first command of client `1000 + n`, inserting key `n` with value
/// `n * 10`, answered by replica 4. One client per command, as many clients batch
/// together (a client has one command outstanding at a time).
fn insert(n: u64, reply_to: NodeId) -> Command {
    partita_btree::service::command(
        1000 + n,
        1,
        reply_to,
        &Op::Insert {
            key: n,
            value: n * 10,
        },
    )
}

/// Every command in `ns` answered exactly once, as a new key, by replica 4, and both
/// replicas hold it.
fn answered_once(c: &Cluster, ns: std::ops::RangeInclusive<u64>) {
    for n in ns {
        let replies = c.replies_of(1000 + n);
        assert_eq!(replies.len(), 1, "command {n}: {replies:?}");
        assert_eq!(res(replies[0]), OpResult::Inserted(true), "command {n}");
        for r in [4, 5] {
            assert_eq!(c.replica(r).state().read(n), Some(n * 10), "key {n} on {r}");
        }
    }
}

fn batched_commands_are_decided_once(protocol: Protocol) {
    let mut c = cluster(protocol);
    // Ten commands arrive at each batcher before anything is delivered: the first
    // leaves at once, the other nine wait for its acknowledgement and leave together.
    for seq in 1..=10 {
        c.request(STANDALONE, insert(seq, 4));
    }
    for seq in 11..=20 {
        c.request(CO_LOCATED, insert(seq, 4));
    }
    c.settle();
    c.tick(3);
    answered_once(&c, 1..=20);
    for id in [STANDALONE, CO_LOCATED] {
        let s = batcher_stats(&c, id);
        assert_eq!(
            (s.commands_forwarded, s.batches_sent, s.acks, s.resends),
            (10, 2, 2, 0),
            "{protocol}: node {id}: {s:?}"
        );
        assert_eq!(c.counter(id, "requests_batched"), 10);
    }
    assert_eq!(c.counter(1, "forward_batches_received"), 4);
    assert_eq!(c.counter(1, "forward_batch_commands"), 20);
    // A command at the leader goes straight to its coordinator.
    c.submit(1, insert(21, 4));
    c.tick(2);
    answered_once(&c, 21..=21);
    assert_eq!(c.counter(1, "forward_batches_received"), 4);
    c.digests_agree();
}

#[test]
fn multipaxos_batched_commands_are_decided_once() {
    batched_commands_are_decided_once(Protocol::MultiPaxos);
}

#[test]
fn ringpaxos_batched_commands_are_decided_once() {
    batched_commands_are_decided_once(Protocol::RingPaxos);
}

#[test]
fn a_node_that_does_not_lead_drops_batches() {
    let mut c = cluster(Protocol::RingPaxos);
    let batch = Msg::ForwardBatch {
        seq: 7,
        cmds: vec![insert(1, 4)],
    };
    let mut out = Vec::new();
    c.nodes
        .get_mut(&3)
        .unwrap()
        .on_peer(STANDALONE, batch, &mut out);
    assert!(out.is_empty(), "no acknowledgement, no forwarding: {out:?}");
    assert_eq!(c.counter(3, "dropped_forward_batch_not_leader"), 1);
    // A stranger's batch is dropped at the gate.
    c.nodes.get_mut(&1).unwrap().on_peer(
        9,
        Msg::ForwardBatch {
            seq: 1,
            cmds: vec![insert(1, 4)],
        },
        &mut out,
    );
    assert!(out.is_empty());
    assert_eq!(c.counter(1, "dropped_peer_not_a_member"), 1);
}

fn leader_change_with_batches_outstanding(protocol: Protocol) {
    let mut c = cluster(protocol);
    c.submit(STANDALONE, insert(1, 4));
    c.tick(2);
    answered_once(&c, 1..=1);
    // The leader dies; batches sent to it meanwhile are lost.
    c.crash(1);
    for seq in 2..=6 {
        c.request(STANDALONE, insert(seq, 4));
    }
    for seq in 7..=11 {
        c.request(CO_LOCATED, insert(seq, 4));
    }
    c.settle();
    assert_eq!(
        c.nodes[&STANDALONE]
            .paxos_roles()
            .and_then(|p| p.batcher())
            .unwrap()
            .outstanding(),
        1
    );
    assert!(c.replies_of(1002).is_empty());
    // Node 2 takes over; the batchers hear of it (node 6 from its heartbeats, node 2
    // from its own coordinator) and resend what was never acknowledged. Nobody
    // resubmits: the batchers alone carry the commands over the failover.
    c.tick_until_leader(2, 60);
    c.tick(60);
    answered_once(&c, 2..=11);
    for id in [STANDALONE, CO_LOCATED] {
        let s = batcher_stats(&c, id);
        assert!(s.resends >= 1, "{protocol}: node {id} never resent: {s:?}");
        assert_eq!(s.batches_abandoned, 0, "{protocol}: node {id}: {s:?}");
        assert_eq!(s.commands_forwarded, if id == STANDALONE { 6 } else { 5 });
    }
    assert_eq!(c.nodes[&STANDALONE].leader(), Some(2));
    // The old leader returns and follows; its batchers' traffic keeps flowing.
    c.start(1);
    c.tick(30);
    c.submit(STANDALONE, insert(12, 4));
    c.tick(5);
    answered_once(&c, 12..=12);
    c.digests_agree();
}

#[test]
fn multipaxos_leader_change_with_batches_outstanding() {
    leader_change_with_batches_outstanding(Protocol::MultiPaxos);
}

#[test]
fn ringpaxos_leader_change_with_batches_outstanding() {
    leader_change_with_batches_outstanding(Protocol::RingPaxos);
}

#[test]
fn a_restarted_standalone_batcher_starts_over() {
    let mut c = cluster(Protocol::MultiPaxos);
    c.submit(STANDALONE, insert(1, 4));
    c.tick(2);
    c.crash(STANDALONE);
    c.start(STANDALONE);
    // Nothing durable: a fresh batcher, numbering its batches from 1 again.
    assert_eq!(batcher_stats(&c, STANDALONE).batches_sent, 0);
    c.submit(STANDALONE, insert(2, 4));
    c.tick(2);
    answered_once(&c, 1..=2);
    assert_eq!(batcher_stats(&c, STANDALONE).acks, 1);
}
