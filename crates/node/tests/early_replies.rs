//! Early replies (paper 001 §VII) on scripted node cores: Ring Paxos with speculative
//! execution, an in-memory network that drops chosen messages, and the client-side
//! rule ([`EarlyWait`]) applied to what the replicas send.
//!
//! - The chosen replica answers a speculated command with a tentative reply before
//!   the decision, and confirms it once decided; nothing else goes to the client.
//! - A leader change rolls a speculation back: the replica sends a new tentative reply
//!   with the re-executed (different) result, and only that one is confirmed. A client
//!   that received both, in any order and duplicated, returns the confirmed result.
//! - The planted bug `unconfirmed-replies` sends speculative results as final.

use crate::common;

use common::{cmd, res, setup, Cluster, Got, ACCEPTORS};
use partita_btree::{BPlusTree, Op, OpResult};
use partita_consensus::{Msg, Protocol};
use partita_node::UnsafeBugs;
use partita_types::early::{result_digest, EarlyReply, EarlyWait};
use partita_types::{Instance, NodeId, Reply};

const REPLICAS: [NodeId; 2] = [4, 5];

/// Ring Paxos with speculating replicas, with or without early replies.
fn cluster(early: bool, bugs: UnsafeBugs) -> Cluster {
    let mut s = setup(Protocol::RingPaxos, &REPLICAS);
    s.speculative = true;
    s.early_replies = early;
    Cluster::new(s, bugs)
}

/// What a client library returns from `got` (delivered in this order): the first final
/// reply or confirmed tentative result, if any.
fn client_result(got: &[Got]) -> Option<OpResult> {
    let mut w = EarlyWait::default();
    for g in got {
        let done = match g {
            Got::Final(r) => Some(r.result.clone()),
            Got::Early(e) => w.on_early(e),
        };
        if let Some(outcome) = done {
            return Some(partita_smr::reply_of::<BPlusTree>(&outcome));
        }
    }
    None
}

/// The outcome of a B+tree result, as a reply carries it.
fn outcome(r: &OpResult) -> partita_types::Outcome {
    Ok(<BPlusTree as partita_service::ServiceCodec>::encode_reply(
        r,
    ))
}

fn tentative(g: &Got) -> Option<&Reply> {
    match g {
        Got::Early(EarlyReply::Tentative(r)) => Some(r),
        _ => None,
    }
}

/// Nobody decides anything: no vote leaves its acceptor (the ring's first vote carries
/// too few bits to decide, wherever the ring decides).
fn no_decisions(_: NodeId, _to: NodeId, msg: &Msg) -> bool {
    matches!(msg, Msg::RingVote { .. } | Msg::Phase2B { .. })
}

#[test]
fn a_tentative_reply_leaves_before_the_decision_and_a_confirmation_after() {
    let mut c = cluster(true, UnsafeBugs::default());
    c.tick(3);
    c.submit(1, cmd(1, 4, Op::Insert { key: 100, value: 1 }));
    c.tick(3);
    let warm = c.got_by(1);
    assert!(
        matches!(
            warm.as_slice(),
            [
                Got::Early(EarlyReply::Tentative(_)),
                Got::Early(EarlyReply::Confirm(_))
            ]
        ),
        "a tentative reply then its confirmation, nothing else: {warm:?}"
    );
    assert_eq!(client_result(&warm), Some(OpResult::Inserted(true)));

    // Client 7's write is proposed and speculated, but not decided.
    c.lose(no_decisions);
    let decided = c.replica(4).last_instance();
    c.submit(1, cmd(7, 4, Op::Insert { key: 1, value: 10 }));
    assert_eq!(c.replica(4).last_instance(), decided, "nothing decided");
    assert_eq!(c.replica(4).speculated(), 1);
    let before = c.got_by(7);
    assert_eq!(before.len(), 1, "{before:?}");
    let t = tentative(&before[0]).expect("a tentative reply");
    assert_eq!(
        (t.instance, &t.result),
        (decided + 1, &outcome(&OpResult::Inserted(true)))
    );
    assert_eq!(
        client_result(&before),
        None,
        "not final before the decision"
    );
    // Only the chosen replica answers.
    assert!(c.got.iter().all(|(from, _)| *from == 4));

    // The votes get through on the leader's retransmission: the decision confirms it.
    c.lose_nothing();
    c.tick(40);
    let after = c.got_by(7);
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(
        after[1],
        Got::Early(EarlyReply::confirm(t)),
        "the confirmation names the tentative result"
    );
    assert_eq!(client_result(&after), Some(OpResult::Inserted(true)));
    assert_eq!(c.replica(4).stats().speculation_confirmed, 2);
    assert!(
        !c.got.iter().any(|(_, g)| matches!(g, Got::Final(_))),
        "speculated commands get no final reply"
    );
}

/// The old leader's proposal for `at` (client 7's write) reaches only the replicas;
/// the one for `at + 1` (client 8's read) also reaches the acceptors, but no vote
/// reaches the leader. The leader crashes; node 2 takes over, finds client 8's read
/// at `at + 1` and re-proposes it (same value id), fills `at` with a no-op. Replicas
/// roll back both speculations and speculate the read again: another result.
fn rollback_script(
    early: bool,
    bugs: UnsafeBugs,
    replicas_see_new_proposals: bool,
) -> (Cluster, Instance) {
    let mut c = cluster(early, bugs);
    c.tick(3);
    c.submit(1, cmd(1, 4, Op::Insert { key: 100, value: 1 }));
    c.tick(3);
    let at = c.replica(4).last_instance() + 1;
    c.lose(move |from, to, msg| {
        no_decisions(from, to, msg)
            || (from == 1
                && ACCEPTORS.contains(&to)
                && matches!(msg, Msg::Phase2A { instance, .. } if *instance == at))
    });
    c.submit(1, cmd(7, 4, Op::Insert { key: 1, value: 10 }));
    c.tick(2);
    c.submit(1, cmd(8, 4, Op::Read { key: 1 }));
    c.tick(2);
    for r in REPLICAS {
        assert_eq!(c.replica(r).speculated(), 2, "replica {r} speculates both");
    }
    c.crash(1);
    if replicas_see_new_proposals {
        c.lose_nothing();
    } else {
        c.lose(|from, to, msg| {
            from == 2 && REPLICAS.contains(&to) && matches!(msg, Msg::Phase2A { .. })
        });
    }
    c.tick_until_leader(2, 25);
    c.tick(60);
    for r in REPLICAS {
        assert!(c.replica(r).last_instance() > at, "replica {r} stuck");
        assert_eq!(c.replica(r).speculated(), 0);
        assert!(c.replica(r).stats().speculation_rolled_back >= 2);
        assert_eq!(
            c.replica(r).state().read(1),
            None,
            "client 7's write undone"
        );
    }
    (c, at)
}

fn check_rollback(replicas_see_new_proposals: bool) {
    let (c, at) = rollback_script(true, UnsafeBugs::default(), replicas_see_new_proposals);
    // Client 7's write was never decided: a tentative reply, never confirmed.
    let g7 = c.got_by(7);
    assert_eq!(g7.len(), 1, "{g7:?}");
    assert!(tentative(&g7[0]).is_some());
    assert_eq!(
        client_result(&g7),
        None,
        "an undecided write is never final"
    );
    let g8 = c.got_by(8);
    if !replicas_see_new_proposals {
        // The replicas learn both decisions (client 7's write replaced, client 8's
        // read kept) in one step: the rollback leaves the read to the decided
        // execution, whose final reply follows the stale tentative one; speculation
        // is deferred to after the step, so nothing is speculated again in between.
        assert_eq!(g8.len(), 2, "{g8:?}");
        let stale = tentative(&g8[0]).expect("tentative").clone();
        assert_eq!(res(&stale), OpResult::Value(Some(10)));
        let Got::Final(fin) = &g8[1] else {
            panic!("a final reply last: {g8:?}");
        };
        assert_eq!(
            (fin.instance, &fin.result),
            (at + 1, &outcome(&OpResult::Value(None)))
        );
        for seq in [[0, 1], [1, 0]] {
            let got: Vec<Got> = seq.iter().map(|&i| g8[i].clone()).collect();
            assert_eq!(client_result(&got), Some(OpResult::Value(None)), "{seq:?}");
        }
        let (reference, _) = rollback_script(false, UnsafeBugs::default(), false);
        for client in [1, 7, 8] {
            assert_eq!(
                client_result(&c.got_by(client)),
                client_result(&reference.got_by(client))
            );
        }
        for r in REPLICAS {
            assert_eq!(c.replica(r).digest(), reference.replica(r).digest());
        }
        return;
    }
    // Client 8: the stale tentative read (it saw client 7's write), the new one after
    // the rollback, and the confirmation of the new one only.
    assert_eq!(g8.len(), 3, "{g8:?}");
    let stale = tentative(&g8[0]).expect("tentative").clone();
    let fresh = tentative(&g8[1]).expect("tentative").clone();
    assert_eq!(res(&stale), OpResult::Value(Some(10)));
    assert_eq!(res(&fresh), OpResult::Value(None));
    assert_eq!(
        (stale.instance, fresh.instance),
        (at + 1, at + 1),
        "same instance"
    );
    let Got::Early(EarlyReply::Confirm(confirm)) = &g8[2] else {
        panic!("a confirmation last: {g8:?}");
    };
    assert_eq!(confirm.instance, at + 1);
    assert_eq!(
        confirm.result_digest,
        result_digest(&outcome(&OpResult::Value(None)))
    );
    assert_ne!(confirm.result_digest, result_digest(&stale.result));
    // Whatever order and duplication the network delivers them in, the client returns
    // the confirmed result, never the stale one; without the new tentative reply it
    // returns nothing.
    let msgs = [g8[0].clone(), g8[1].clone(), g8[2].clone()];
    for order in [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ] {
        let mut seq: Vec<Got> = order.iter().map(|&i| msgs[i].clone()).collect();
        seq.insert(0, msgs[0].clone());
        seq.push(msgs[0].clone());
        assert_eq!(
            client_result(&seq),
            Some(OpResult::Value(None)),
            "{order:?}"
        );
    }
    assert_eq!(
        client_result(&[msgs[0].clone(), msgs[2].clone(), msgs[0].clone()]),
        None
    );
    assert!(
        !c.got
            .iter()
            .any(|(_, g)| matches!(g, Got::Final(r) if r.client == 8)),
        "client 8's read was confirmed, not answered again"
    );
    // The same final results as classic speculation (held replies).
    let (reference, _) = rollback_script(false, UnsafeBugs::default(), replicas_see_new_proposals);
    for client in [1, 7, 8] {
        assert_eq!(
            client_result(&c.got_by(client)),
            client_result(&reference.got_by(client))
        );
    }
    for r in REPLICAS {
        assert_eq!(c.replica(r).digest(), reference.replica(r).digest());
    }
}

#[test]
fn a_rollback_sends_a_new_tentative_reply_and_only_it_is_confirmed() {
    check_rollback(true);
}

#[test]
fn a_rollback_by_a_decision_alone_ends_in_a_final_reply() {
    check_rollback(false);
}

#[test]
fn without_early_replies_nothing_tentative_leaves() {
    let (c, _) = rollback_script(false, UnsafeBugs::default(), true);
    assert!(c.got.iter().all(|(_, g)| matches!(g, Got::Final(_))));
    assert_eq!(client_result(&c.got_by(8)), Some(OpResult::Value(None)));
}

/// Control: with the planted bug the client takes client 7's undecided write and
/// client 8's stale read as final.
#[test]
fn planted_unconfirmed_replies_is_caught() {
    let mut bugs = UnsafeBugs::default();
    bugs.enable("unconfirmed-replies").unwrap();
    let (c, _) = rollback_script(true, bugs, true);
    assert_eq!(client_result(&c.got_by(7)), Some(OpResult::Inserted(true)));
    assert_eq!(client_result(&c.got_by(8)), Some(OpResult::Value(Some(10))));
}
