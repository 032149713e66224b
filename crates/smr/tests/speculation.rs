//! Speculative execution (paper 001 §III-B) against the plain sequential replica:
//! whatever proposals arrive ahead of the decisions (right ones, wrong ones, a new
//! leader's replacements, in any order), the replies released, the digest, the reply
//! cache and the checkpoint are exactly those of executing the decided sequence; also
//! with session leases, so that opens, renewals and expiries are rolled back exactly.

use partita_btree::BPlusTree;
use partita_btree::{BatchOp, Op, OpResult};
use partita_consensus::{Value, Vid};
use partita_smr::SequentialReplica;
use partita_types::{Ballot, Command, NodeId, Reply};
use proptest::prelude::*;
use std::sync::Arc;

const ME: NodeId = 1;

fn value(round: u32, seq: u64, cmds: Vec<Command>) -> Arc<Value> {
    timed(round, seq, cmds, 0)
}

/// A value of ballot round `round` with ordered time `time_ms`.
pub(crate) fn timed(round: u32, seq: u64, cmds: Vec<Command>, time_ms: u64) -> Arc<Value> {
    Arc::new(Value {
        vid: Vid {
            ballot: Ballot::new(round.into(), 1),
            seq,
        },
        commands: cmds,
        parts: Vec::new(),
        time_ms,
        skip: 0,
    })
}

fn cmd(client: u64, seq: u64, reply_to: NodeId, op: Op) -> Command {
    partita_btree::service::command(client, seq, reply_to, &op)
}

/// The B+tree result a reply carries.
fn res(r: &Reply) -> OpResult {
    partita_smr::reply_of::<BPlusTree>(&r.result)
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u64..12;
    prop_oneof![
        (k.clone(), 0u64..100).prop_map(|(key, value)| Op::Insert { key, value }),
        k.clone().prop_map(|key| Op::Delete { key }),
        (k.clone(), 0u64..100).prop_map(|(key, value)| Op::Update { key, value }),
        k.clone().prop_map(|key| Op::Read { key }),
        (k.clone(), 0u64..6).prop_map(|(min, w)| Op::Query { min, max: min + w }),
        proptest::collection::vec(
            prop_oneof![
                (k.clone(), 0u64..100).prop_map(|(key, value)| BatchOp::Insert { key, value }),
                k.clone().prop_map(|key| BatchOp::Delete { key }),
            ],
            1..4
        )
        .prop_map(Op::Batch),
    ]
}

fn commands() -> impl Strategy<Value = Vec<Command>> {
    // Few clients and small sequence numbers: plenty of duplicates and stale
    // resubmissions for the reply cache. Sessions named by small instances, and opens
    // and renewals (sequence number 0) among the commands, for the lease variant.
    let command = (
        1u64..4,
        1u64..7,
        0u64..6,
        prop_oneof![Just(ME), Just(2)],
        op(),
    )
        .prop_map(|(c, s, session, to, op)| Command {
            session,
            ..cmd(c, s, to, op)
        });
    let open = (1u64..4, 0u64..6, prop_oneof![Just(ME), Just(2)])
        .prop_map(|(c, session, to)| Command::renew(c, session, to, 1));
    proptest::collection::vec(prop_oneof![4 => command, 1 => open], 0..4)
}

/// One instance: the decided commands, whether (and how early) its right proposal
/// arrives, and wrong proposals (round, commands, how early).
#[derive(Clone, Debug)]
struct Inst {
    decided: Vec<Command>,
    decided_round: u32,
    right_early: Option<u8>,
    wrong: Vec<(u32, Vec<Command>, u8)>,
}

fn inst() -> impl Strategy<Value = Inst> {
    (
        commands(),
        0u32..3,
        proptest::option::weighted(0.8, 0u8..4),
        proptest::collection::vec((0u32..3, commands(), 0u8..4), 0..3),
    )
        .prop_map(|(decided, decided_round, right_early, wrong)| Inst {
            decided,
            decided_round,
            right_early,
            wrong,
        })
}

enum Ev {
    Propose(u64, Arc<Value>),
    Decide(u64, Arc<Value>),
    Checkpoint,
}

fn schedule(insts: &[Inst], checkpoint_every: u64, order_seed: u64) -> Vec<Ev> {
    // Proposals for instance i arrive right before the decision of instance
    // i - early (at least 1); wrong ones interleaved with the right one in an order
    // drawn from the seed.
    let n = insts.len() as u64;
    let mut before: Vec<Vec<(u64, u64, Arc<Value>)>> = vec![Vec::new(); n as usize + 1];
    let mut salt = order_seed;
    let mut next = || {
        salt = salt
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        salt >> 33
    };
    for (idx, x) in insts.iter().enumerate() {
        let i = idx as u64 + 1;
        let at = |early: u8| i.saturating_sub(early as u64).max(1);
        // Ordered time: 10 ms per instance (a wrong proposal a little later).
        if let Some(e) = x.right_early {
            let v = timed(x.decided_round, i * 10, x.decided.clone(), i * 10);
            before[at(e) as usize].push((next(), i, v));
        }
        for (k, (round, cmds, e)) in x.wrong.iter().enumerate() {
            let v = timed(*round, i * 10 + 1 + k as u64, cmds.clone(), i * 10 + 3);
            before[at(*e) as usize].push((next(), i, v));
        }
    }
    let mut evs = Vec::new();
    for (idx, x) in insts.iter().enumerate() {
        let i = idx as u64 + 1;
        let mut props = std::mem::take(&mut before[i as usize]);
        props.sort_by_key(|p| p.0);
        evs.extend(props.into_iter().map(|(_, j, v)| Ev::Propose(j, v)));
        evs.push(Ev::Decide(
            i,
            timed(x.decided_round, i * 10, x.decided.clone(), i * 10),
        ));
        if checkpoint_every > 0 && i.is_multiple_of(checkpoint_every) {
            evs.push(Ev::Checkpoint);
        }
    }
    evs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn speculation_gives_the_replies_and_state_of_the_decided_sequence(
        insts in proptest::collection::vec(inst(), 1..25),
        checkpoint_every in 0u64..6,
        order_seed in any::<u64>(),
        lease in prop_oneof![Just(None), (15u64..60).prop_map(Some)],
    ) {
        let mut plain = SequentialReplica::<BPlusTree>::new(ME, BPlusTree::new());
        let mut spec = SequentialReplica::<BPlusTree>::new(ME, BPlusTree::new());
        plain.set_session_lease(lease);
        spec.set_session_lease(lease);
        let (mut want, mut got): (Vec<Reply>, Vec<Reply>) = (Vec::new(), Vec::new());
        for ev in schedule(&insts, checkpoint_every, order_seed) {
            match ev {
                Ev::Propose(i, v) => spec.propose(i, v),
                Ev::Decide(i, v) => {
                    plain.execute(i, &v, &mut want);
                    spec.execute(i, &v, &mut got);
                    prop_assert_eq!(spec.last_instance(), i);
                    prop_assert_eq!(spec.digest(), plain.digest(), "decided digest at {}", i);
                    prop_assert_eq!(&got, &want, "replies released by instance {}", i);
                }
                Ev::Checkpoint => {
                    let speculated = spec.speculated();
                    spec.rollback_speculation();
                    prop_assert_eq!(spec.checkpoint(), plain.checkpoint());
                    spec.speculate();
                    prop_assert_eq!(spec.speculated(), speculated);
                }
            }
            spec.invariants();
        }
        prop_assert_eq!(spec.speculated(), 0);
        prop_assert_eq!(spec.pending_proposals(), 0);
        prop_assert_eq!(spec.state().digest(), plain.state().digest());
        prop_assert!(spec.state().iter().eq(plain.state().iter()));
        for c in 1..4 {
            prop_assert_eq!(spec.cached_reply(c), plain.cached_reply(c));
        }
        prop_assert_eq!(spec.checkpoint(), plain.checkpoint());
        let s = spec.stats();
        // Speculations set aside for a checkpoint are neither confirmed nor counted as
        // rolled back (they are speculated again, and counted again).
        prop_assert!(s.speculated >= s.speculation_confirmed + s.speculation_rolled_back);
        let p = plain.stats();
        prop_assert_eq!(
            (s.commands_executed, s.duplicates_answered, s.stale_ignored, s.reads_skipped),
            (p.commands_executed, p.duplicates_answered, p.stale_ignored, p.reads_skipped)
        );
        prop_assert_eq!(
            (s.sessions_opened, s.sessions_renewed, s.session_refusals),
            (p.sessions_opened, p.sessions_renewed, p.session_refusals)
        );
        prop_assert_eq!(spec.sessions().len(), plain.sessions().len());
    }
}

fn v(round: u32, seq: u64, cmds: Vec<Command>) -> Arc<Value> {
    value(round, seq, cmds)
}

#[test]
fn a_confirmed_speculation_releases_its_held_replies() {
    let mut r = SequentialReplica::<BPlusTree>::new(ME, BPlusTree::new());
    let a = v(0, 1, vec![cmd(7, 1, ME, Op::Insert { key: 1, value: 10 })]);
    let b = v(0, 2, vec![cmd(8, 1, ME, Op::Read { key: 1 })]);
    r.propose(1, a.clone());
    r.propose(2, b.clone());
    assert_eq!(r.speculated(), 2);
    assert_eq!(r.last_instance(), 0);
    assert_eq!(
        r.digest(),
        BPlusTree::new().digest(),
        "digest is the decided state"
    );
    assert_eq!(
        r.state().read(1),
        Some(10),
        "the tree holds the speculated suffix"
    );
    let mut out = Vec::new();
    r.execute(1, &a, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(res(&out[0]), OpResult::Inserted(true));
    r.execute(2, &b, &mut out);
    assert_eq!(res(&out[1]), OpResult::Value(Some(10)));
    assert_eq!(r.stats().speculation_confirmed, 2);
    assert_eq!(r.stats().speculation_rolled_back, 0);
    r.invariants();
}

#[test]
fn another_decided_value_rolls_back_and_respeculates() {
    let mut r = SequentialReplica::<BPlusTree>::new(ME, BPlusTree::new());
    let wrong = v(0, 1, vec![cmd(7, 1, ME, Op::Insert { key: 1, value: 10 })]);
    let right = v(1, 2, vec![cmd(9, 1, ME, Op::Insert { key: 1, value: 99 })]);
    let later = v(1, 3, vec![cmd(8, 1, ME, Op::Read { key: 1 })]);
    r.propose(1, wrong);
    r.propose(2, later.clone());
    assert_eq!(r.speculated(), 2);
    let mut out = Vec::new();
    r.execute(1, &right, &mut out);
    // Client 7's speculated write never happened: no reply for it, no cache entry.
    assert_eq!(
        out,
        vec![Reply {
            client: 9,
            seq: 1,
            instance: 1,
            result: Ok(<BPlusTree as partita_smr::ServiceCodec>::encode_reply(
                &OpResult::Inserted(true)
            ))
        }]
    );
    assert!(r.cached_reply(7).is_none());
    assert_eq!(r.stats().speculation_rolled_back, 2);
    assert_eq!(r.speculated(), 1, "instance 2 speculated again");
    r.execute(2, &later, &mut out);
    assert_eq!(res(&out[1]), OpResult::Value(Some(99)), "read recomputed");
    r.invariants();
}

#[test]
fn a_new_leaders_proposal_replaces_a_speculation_and_an_old_one_does_not() {
    let mut r = SequentialReplica::<BPlusTree>::new(ME, BPlusTree::new());
    let old = v(0, 1, vec![cmd(7, 1, ME, Op::Insert { key: 1, value: 10 })]);
    let new = v(2, 1, vec![cmd(7, 1, ME, Op::Insert { key: 1, value: 20 })]);
    r.propose(1, old.clone());
    r.propose(1, new.clone());
    assert_eq!(r.state().read(1), Some(20));
    assert_eq!(r.stats().speculation_rolled_back, 1);
    r.propose(1, old); // late, lower ballot: ignored
    assert_eq!(r.state().read(1), Some(20));
    let mut out = Vec::new();
    r.execute(1, &new, &mut out);
    assert_eq!(out[0].instance, 1);
    assert_eq!(r.stats().speculation_confirmed, 1);
}

#[test]
fn planted_bug_keeps_a_wrong_speculation() {
    let mut r = SequentialReplica::<BPlusTree>::new(ME, BPlusTree::new());
    r.set_unsafe_confirm_unchecked(true);
    let wrong = v(0, 1, vec![cmd(7, 1, ME, Op::Insert { key: 1, value: 10 })]);
    let right = v(1, 2, vec![cmd(9, 1, ME, Op::Insert { key: 1, value: 99 })]);
    r.propose(1, wrong);
    let mut out = Vec::new();
    r.execute(1, &right, &mut out);
    assert_eq!(out[0].client, 7, "the wrong value's reply went out");
    assert_eq!(r.state().read(1), Some(10));
}

#[test]
#[should_panic(expected = "speculated instances")]
fn no_checkpoint_while_speculating() {
    let mut r = SequentialReplica::<BPlusTree>::new(ME, BPlusTree::new());
    r.propose(1, v(0, 1, vec![]));
    r.checkpoint();
}

/// Early replies (paper 001 §VII): what a client takes as final (final replies, and
/// tentative replies once a confirmation names them) is exactly what the held replies
/// would have been, in the same order; every confirmation names a tentative reply
/// that was sent; setting speculation aside for a checkpoint sends nothing again.
fn early_finals(
    spec: &mut SequentialReplica<BPlusTree>,
    sent: &mut Vec<Reply>,
    finals: &mut Vec<Reply>,
) -> Result<(), TestCaseError> {
    use partita_types::early::{result_digest, EarlyReply};
    for e in spec.take_early() {
        match e {
            EarlyReply::Tentative(r) => sent.push(r),
            EarlyReply::Confirm(c) => {
                let r = sent.iter().rev().find(|r| {
                    (r.client, r.seq, r.instance, result_digest(&r.result))
                        == (c.client, c.seq, c.instance, c.result_digest)
                });
                prop_assert!(r.is_some(), "confirmation {:?} of nothing sent", c);
                finals.push(r.expect("checked").clone());
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn early_replies_confirm_exactly_the_replies_of_the_decided_sequence(
        insts in proptest::collection::vec(inst(), 1..25),
        checkpoint_every in 0u64..6,
        order_seed in any::<u64>(),
    ) {
        let mut plain = SequentialReplica::<BPlusTree>::new(ME, BPlusTree::new());
        let mut spec = SequentialReplica::<BPlusTree>::new(ME, BPlusTree::new());
        spec.set_early_replies(true);
        let mut want = Vec::new();
        let (mut sent, mut finals) = (Vec::new(), Vec::new());
        for ev in schedule(&insts, checkpoint_every, order_seed) {
            match ev {
                Ev::Propose(i, v) => {
                    spec.propose(i, v);
                    early_finals(&mut spec, &mut sent, &mut finals)?;
                }
                Ev::Decide(i, v) => {
                    plain.execute(i, &v, &mut want);
                    spec.execute(i, &v, &mut finals);
                    early_finals(&mut spec, &mut sent, &mut finals)?;
                    prop_assert_eq!(&finals, &want, "final results by instance {}", i);
                }
                Ev::Checkpoint => {
                    spec.rollback_speculation();
                    prop_assert_eq!(spec.checkpoint(), plain.checkpoint());
                    spec.speculate();
                    prop_assert_eq!(spec.take_early(), vec![], "re-sent after a checkpoint");
                }
            }
            spec.invariants();
        }
        prop_assert_eq!(spec.digest(), plain.digest());
    }
}

#[test]
fn without_early_replies_nothing_early_is_produced() {
    let mut r = SequentialReplica::<BPlusTree>::new(ME, BPlusTree::new());
    let a = v(0, 1, vec![cmd(7, 1, ME, Op::Insert { key: 1, value: 10 })]);
    r.propose(1, a.clone());
    r.execute(1, &a, &mut Vec::new());
    assert_eq!(r.early_pending(), 0);
    r.set_early_replies(true);
    let b = v(0, 2, vec![cmd(7, 2, ME, Op::Delete { key: 1 })]);
    r.propose(2, b.clone());
    assert_eq!(r.early_pending(), 1, "a tentative reply at once");
    let mut out = Vec::new();
    r.execute(2, &b, &mut out);
    assert!(out.is_empty(), "confirmed, not replied again");
    assert_eq!(r.take_early().len(), 2);
}
