//! Speculative execution (paper 001 §III-B) across a leader change, scripted on node
//! cores wired by an in-memory network that can drop chosen messages.
//!
//! The leader proposes client 7's write; its Phase 2A reaches the replicas (which
//! execute it speculatively and hold the reply) but no other acceptor, so it is never
//! decided. The leader crashes; the next one decides another value in that instance
//! (client 9's write of the same key), and the replicas learn that decision without
//! seeing its proposal. They must roll client 7's write back, execute client 9's, and
//! answer only what the decided order says: exactly the replies and state of the same
//! script run without speculation. The planted bug `speculative-no-rollback` (confirm
//! without checking the decided value id) must be caught.

use crate::common;

use common::{cmd, res, setup, Cluster, ACCEPTORS};
use partita_btree::{Op, OpResult};
use partita_consensus::{Msg, Protocol};
use partita_node::UnsafeBugs;
use partita_types::NodeId;

const REPLICAS: [NodeId; 2] = [4, 5];

fn cluster(speculative: bool, bugs: UnsafeBugs) -> Cluster {
    let mut s = setup(Protocol::RingPaxos, &REPLICAS);
    s.speculative = speculative;
    Cluster::new(s, bugs)
}

/// The leader's proposals reach the replicas but no other acceptor.
fn leader_isolated_from_acceptors(from: NodeId, to: NodeId, msg: &Msg) -> bool {
    from == 1 && ACCEPTORS.contains(&to) && matches!(msg, Msg::Phase2A { .. })
}

/// The new leader's proposals never reach the replicas: they learn decisions only.
fn replicas_miss_new_proposals(from: NodeId, to: NodeId, msg: &Msg) -> bool {
    from == 2 && REPLICAS.contains(&to) && matches!(msg, Msg::Phase2A { .. })
}

/// Run the script; returns the cluster at the end.
fn script(speculative: bool, bugs: UnsafeBugs, replicas_see_new_proposals: bool) -> Cluster {
    let mut c = cluster(speculative, bugs);
    c.tick(3);
    c.submit(1, cmd(1, 4, Op::Insert { key: 100, value: 1 }));
    c.tick(3);
    assert_eq!(c.replies_of(1).len(), 1, "warm-up write answered");

    // Client 7's write: proposed, seen by the replicas, never decided.
    c.lose(leader_isolated_from_acceptors);
    c.submit(1, cmd(7, 4, Op::Insert { key: 1, value: 10 }));
    let at = c.replica(4).last_instance() + 1;
    if speculative {
        for r in REPLICAS {
            assert_eq!(c.replica(r).speculated(), 1, "replica {r} speculates");
            assert_eq!(c.replica(r).state().read(1), Some(10));
        }
    }
    assert!(
        c.replies_of(7).is_empty(),
        "nothing decided, nothing answered"
    );

    // The leader dies; node 2 takes over.
    c.crash(1);
    if !replicas_see_new_proposals {
        c.lose(replicas_miss_new_proposals);
    } else {
        c.lose_nothing();
    }
    c.tick_until_leader(2, 25);
    c.tick(20);
    // Client 9 writes the same key through the new leader: decided in the instance
    // client 7's write was speculated in.
    c.submit(2, cmd(9, 4, Op::Insert { key: 1, value: 99 }));
    c.tick(40);
    c.lose_nothing();
    c.submit(2, cmd(8, 5, Op::Read { key: 1 }));
    c.tick(40);
    for r in REPLICAS {
        assert!(c.replica(r).last_instance() >= at, "replica {r} stuck");
    }
    c
}

fn replies(c: &Cluster) -> Vec<(u64, u64, OpResult)> {
    let mut v: Vec<_> = c.replies().map(|r| (r.client, r.seq, res(r))).collect();
    v.sort_by_key(|r| (r.0, r.1));
    v.dedup();
    v
}

fn check(c: &Cluster, reference: &Cluster) {
    // Only replies the decided order gives, the same as without speculation.
    assert_eq!(replies(c), replies(reference));
    assert!(
        c.replies_of(7).is_empty(),
        "client 7's write was never decided"
    );
    assert_eq!(
        c.replies_of(9).first().map(|r| res(r)),
        Some(OpResult::Inserted(true))
    );
    assert_eq!(
        c.replies_of(8).first().map(|r| res(r)),
        Some(OpResult::Value(Some(99)))
    );
    // Replicas converge on the decided state.
    for r in REPLICAS {
        let replica = c.replica(r);
        assert_eq!(
            replica.digest(),
            reference.replica(r).digest(),
            "replica {r}"
        );
        assert_eq!(
            replica.state().digest(),
            replica.digest(),
            "nothing left speculated"
        );
        assert_eq!(replica.state().read(1), Some(99));
        assert!(
            replica.cached_reply(7).is_none(),
            "replica {r} cached client 7"
        );
        assert!(replica.stats().speculation_rolled_back >= 1, "replica {r}");
        assert!(replica.stats().speculation_confirmed >= 1, "replica {r}");
    }
}

#[test]
fn a_leader_change_rolls_back_a_speculation_decided_otherwise() {
    let reference = script(false, UnsafeBugs::default(), false);
    let c = script(true, UnsafeBugs::default(), false);
    check(&c, &reference);
}

#[test]
fn a_new_leaders_proposal_replaces_the_speculation_before_the_decision() {
    let reference = script(false, UnsafeBugs::default(), true);
    let c = script(true, UnsafeBugs::default(), true);
    check(&c, &reference);
}

#[test]
fn speculation_off_never_speculates() {
    let c = script(false, UnsafeBugs::default(), false);
    for r in REPLICAS {
        assert_eq!(c.replica(r).stats().speculated, 0);
        assert_eq!(c.replica(r).pending_proposals(), 0);
    }
}

/// Control: with the planted bug, the scripted leader change is caught.
#[test]
fn planted_speculative_no_rollback_is_caught() {
    let reference = script(false, UnsafeBugs::default(), false);
    let mut bugs = UnsafeBugs::default();
    bugs.enable("speculative-no-rollback").unwrap();
    let c = script(true, bugs, false);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&c, &reference)));
    assert!(caught.is_err(), "the check missed the planted bug");
    assert!(
        !c.replies_of(7).is_empty(),
        "the bug answers client 7's undecided write"
    );
}

/// Paper 001 §III-B: speculation hides execution, it must not delay replies. When the
/// decision of instance i rides on the Phase 2A of instance i+1, the replica releases
/// i's replies in that handler and speculates i+1 only afterwards
/// (`NodeCore::on_continue`), once the driver sent them.
#[test]
fn replies_of_a_piggybacked_decision_leave_before_the_next_speculation() {
    // Decisions ride on Phase 2A to the learners when the coordinator decides (with
    // the ring decided at an acceptor, the learners hear it from that acceptor first).
    let mut s = setup(Protocol::RingPaxos, &REPLICAS);
    s.speculative = true;
    s.membership.ring_decision = partita_consensus::RingDecision::Coordinator;
    let mut c = Cluster::new(s, UnsafeBugs::default());
    c.tick(3);
    c.submit(1, cmd(1, 4, Op::Insert { key: 100, value: 1 }));
    c.tick(3);
    c.steps.clear();
    // A stream of writes, each submitted while the previous ones are in flight.
    for k in 0..40u64 {
        let reply_to = REPLICAS[(k % 2) as usize];
        c.request(1, cmd(10 + k, reply_to, Op::Insert { key: k, value: k }));
        for _ in 0..(k % 7) {
            c.step();
        }
    }
    c.settle();
    c.tick(10);
    for k in 0..40u64 {
        assert_eq!(c.replies_of(10 + k).len(), 1, "client {} answered", 10 + k);
    }
    assert!(
        c.steps.iter().all(|&(_, _, speculated, _)| speculated == 0),
        "a peer message's handler speculated: {:?}",
        c.steps
    );
    let overlapped = c
        .steps
        .iter()
        .filter(|&&(piggyback, replies, _, deferred)| piggyback && replies > 0 && deferred)
        .count();
    assert!(
        overlapped > 0,
        "no Phase 2A both released replies and left a proposal to speculate: {:?}",
        c.steps
    );
    for r in REPLICAS {
        assert!(c.replica(r).stats().speculation_confirmed > 0);
        assert_eq!(c.replica(r).speculated(), 0);
    }
}
