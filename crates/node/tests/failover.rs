//! Failover, scripted on node cores wired by a tiny in-memory network: the leader
//! crashes, the next acceptor takes over through Phase 1, commands forwarded through
//! any acceptor keep being decided, a crashed Ring Paxos acceptor is left out of the
//! ring, and a restarted former leader follows instead of fighting. The simulator
//! (crates/sim) covers the same ground under random faults; these show each step.

use crate::common;

use common::{insert, setup, Cluster};
use partita_consensus::Protocol;
use partita_node::UnsafeBugs;

fn cluster(protocol: Protocol) -> Cluster {
    Cluster::new(setup(protocol, &[4, 5]), UnsafeBugs::default())
}

fn failover(protocol: Protocol) {
    let mut c = cluster(protocol);
    c.tick(3);
    for seq in 1..=5 {
        c.submit(1, insert(seq, 4));
        c.tick(2);
        assert!(c.answered(seq), "{protocol}: command {seq} not answered");
    }

    // The leader dies. A command sent meanwhile through node 2 is forwarded to the dead
    // leader and lost; the client resubmits after the election.
    c.crash(1);
    c.submit(2, insert(6, 4));
    let ticks = c.tick_until_leader(2, 25);
    assert!(
        ticks >= 15,
        "{protocol}: campaigned after only {ticks} ticks"
    );
    assert_eq!(c.leader_count(), 1);
    c.tick(20);
    c.submit(2, insert(6, 4));
    c.tick(5);
    assert!(c.answered(6), "{protocol}: no decision after failover");
    c.submit(3, insert(7, 4)); // through a follower: forwarded to the new leader
    c.tick(5);
    assert!(
        c.answered(7),
        "{protocol}: forwarding to the new leader failed"
    );

    // The old leader comes back from its log: it follows, it does not take over.
    c.start(1);
    c.tick(30);
    assert!(
        c.nodes[&1].leads().is_none(),
        "{protocol}: old leader fought back"
    );
    assert_eq!(c.nodes[&1].leader(), Some(2));
    c.submit(1, insert(8, 4));
    c.tick(5);
    assert!(
        c.answered(8),
        "{protocol}: command via the restarted node lost"
    );

    // Every command executed once, in the same order, on both replicas.
    c.tick(20);
    c.digests_agree();
    let tree = c.replica(5).state();
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
    let mut c = cluster(Protocol::RingPaxos);
    c.tick(3);
    c.submit(1, insert(1, 4));
    c.tick(2);
    assert!(c.answered(1));
    // Acceptor 2 is first in the ring (2, 3, 1): with it down no vote starts until
    // the leader lays out a ring without it.
    c.crash(2);
    c.submit(1, insert(2, 4));
    c.tick(40);
    assert!(
        c.answered(2),
        "the ring was not laid out again without acceptor 2"
    );
    let mask = c.nodes[&1]
        .paxos_roles()
        .and_then(|p| p.coordinator())
        .unwrap()
        .ring_mask();
    assert_eq!(mask, 0b101, "ring should be acceptors 1 and 3");
    c.start(2);
    c.tick(20);
    let mask = c.nodes[&1]
        .paxos_roles()
        .and_then(|p| p.coordinator())
        .unwrap()
        .ring_mask();
    assert_eq!(mask, 0b111, "acceptor 2 was not taken back into the ring");
    c.submit(1, insert(3, 4));
    c.tick(3);
    assert!(c.answered(3));
    c.tick(20);
    c.digests_agree();
}
