//! One input into the client core, the exact actions out.

use super::*;
use partita_btree::{BPlusTree, Op, OpResult};
use partita_types::{PartitionMap, Payload};

fn topology() -> Topology {
    Topology {
        entries: vec![1, 2, 3],
        batchers: false,
        replicas: vec![4, 5],
        layout: PartitionLayout::default(),
        session_lease_ms: None,
        psmr: None,
        rings: Vec::new(),
    }
}

fn cfg() -> ClientConfig {
    ClientConfig {
        timeout_ns: 100,
        give_up_ns: Some(250),
        refused_retry_ns: 30,
    }
}

fn client() -> ClientCore<BPlusTree> {
    ClientCore::new(9, topology(), cfg(), 1, 4)
}

fn encoded(r: &OpResult) -> partita_types::Outcome {
    Ok(BPlusTree::encode_reply(r))
}

fn reply(seq: u64, instance: Instance, r: &OpResult) -> Reply {
    Reply {
        client: 9,
        seq,
        instance,
        result: encoded(r),
    }
}

/// Submit `cmd` to a client without a session: the open goes first (to every
/// partition); answer it from each partition's answerer (`answerers`), opened at
/// instance 1. Leaves in `out` what follows the open: the command's send.
fn submit_opened(
    c: &mut ClientCore<BPlusTree>,
    cmd: Op,
    now: u64,
    answerers: &[NodeId],
    out: &mut Vec<Action>,
) {
    out.clear();
    c.submit(cmd, now, out).unwrap();
    let Some(Action::Send {
        cmd: open, first, ..
    }) = out.pop()
    else {
        panic!("nothing sent");
    };
    assert!(open.is_open() && first, "the session opens first: {open:?}");
    assert!(out.is_empty());
    for &a in answerers {
        let r = Reply {
            client: c.id(),
            seq: 0,
            instance: 1,
            result: Ok(partita_types::session_reply(1)),
        };
        c.on_reply(a, &r, None, now, out);
    }
    c.invariants();
}

fn sends(out: &[Action]) -> Vec<(NodeId, u64, NodeId, bool)> {
    out.iter()
        .map(|Action::Send { to, cmd, first }| (*to, cmd.seq, cmd.reply_to, *first))
        .collect()
}

#[test]
fn a_command_goes_to_the_entry_node_and_ends_on_its_reply() {
    let mut c = client();
    let mut out = Vec::new();
    submit_opened(&mut c, Op::Read { key: 3 }, 10, &[4], &mut out);
    assert_eq!(sends(&out), vec![(1, 1, 4, false)]);
    let Action::Send { cmd, .. } = &out[0];
    assert_eq!(cmd.session, 1, "the command names its session");
    assert_eq!(c.deadline(), Some(110));
    assert_eq!(c.reply_nodes().collect::<Vec<_>>(), vec![4]);
    assert_eq!(
        c.submit(Op::Read { key: 4 }, 11, &mut out),
        Err(SubmitError::Busy)
    );
    // A reply to another command is late; the right one ends it.
    c.on_reply(4, &reply(7, 3, &OpResult::Value(None)), None, 20, &mut out);
    assert_eq!(c.stats().late_replies, 1);
    assert!(c.take_done().is_none());
    c.on_reply(
        4,
        &reply(1, 3, &OpResult::Value(Some(8))),
        None,
        30,
        &mut out,
    );
    let d = c.take_done().expect("done");
    assert_eq!(d.result, Ok(OpResult::Value(Some(8))));
    assert_eq!((d.call_ns, d.ret_ns, d.sends, d.seq), (10, 30, 1, 1));
    // The next command needs no open.
    out.clear();
    assert_eq!(c.deadline(), None);
    c.submit(Op::Read { key: 4 }, 40, &mut out).unwrap();
    assert_eq!(sends(&out), vec![(1, 2, 4, true)]);
    c.invariants();
}

#[test]
fn resubmits_the_same_command_with_backoff_then_gives_up() {
    let mut c = client();
    c.set_config(ClientConfig {
        give_up_ns: Some(1500),
        ..cfg()
    });
    let mut out = Vec::new();
    submit_opened(&mut c, Op::Insert { key: 1, value: 2 }, 0, &[4], &mut out);
    let first = match &out[0] {
        Action::Send { cmd, .. } => cmd.clone(),
    };
    let mut waits = Vec::new();
    let mut at = c.deadline().unwrap();
    for _ in 0..4 {
        out.clear();
        c.on_timer(at, &mut out);
        let Action::Send { cmd, first: f, .. } = &out[0];
        assert!(!f);
        assert_eq!(
            (cmd.client, cmd.seq, &cmd.body),
            (first.client, 1, &first.body)
        );
        let next = c.deadline().unwrap();
        waits.push(next - at);
        at = next;
    }
    assert_eq!(waits, vec![200, 400, 400, 400]);
    assert_eq!(c.stats().resubmissions, 4);
    // Past give-up: the next deadline ends it with an unknown outcome.
    out.clear();
    assert_eq!(at, 1500);
    c.on_timer(at, &mut out);
    assert!(out.is_empty());
    let d = c.take_done().unwrap();
    assert_eq!(d.result, Err(ClientError::Timeout { after_ns: 1500 }));
    assert_eq!(c.stats().gave_up, 1);
}

#[test]
fn without_give_up_a_client_keeps_resubmitting() {
    let mut c = client();
    c.set_config(ClientConfig {
        give_up_ns: None,
        ..cfg()
    });
    let mut out = Vec::new();
    submit_opened(&mut c, Op::Read { key: 1 }, 0, &[4], &mut out);
    for _ in 0..20 {
        let at = c.deadline().unwrap();
        c.on_timer(at, &mut out);
    }
    assert!(c.take_done().is_none());
    assert_eq!(c.stats().resubmissions, 20);
}

#[test]
fn timeouts_rotate_the_entry_node_and_every_second_one_the_replica() {
    let mut c = client();
    c.set_config(ClientConfig {
        give_up_ns: None,
        ..cfg()
    });
    let mut out = Vec::new();
    submit_opened(&mut c, Op::Read { key: 1 }, 0, &[4], &mut out);
    for _ in 0..3 {
        let at = c.deadline().unwrap();
        c.on_timer(at, &mut out);
    }
    assert_eq!(
        sends(&out),
        vec![
            (1, 1, 4, false),
            (2, 1, 4, false),
            (3, 1, 5, false),
            (1, 1, 5, false)
        ]
    );
    // A refusal retries at the same node after the refusal delay.
    out.clear();
    let now = c.deadline().unwrap() - 50;
    c.on_refused(1, None, now);
    assert_eq!(c.deadline(), Some(now + 30));
    c.on_timer(now + 30, &mut out);
    assert_eq!(sends(&out), vec![(1, 1, 5, false)]);
    assert_eq!(c.stats().refusals, 1);
    // A refusal of another command changes nothing.
    let d = c.deadline();
    c.on_refused(99, None, now + 31);
    assert_eq!(c.deadline(), d);
}

#[test]
fn leader_hints_move_the_entry_node_without_batchers_only() {
    let mut c = client();
    let mut out = Vec::new();
    submit_opened(&mut c, Op::Read { key: 1 }, 0, &[4], &mut out);
    c.on_reply(
        4,
        &reply(1, 1, &OpResult::Value(None)),
        Some(2),
        5,
        &mut out,
    );
    assert_eq!(c.entry(), 2);
    assert_eq!(c.stats().leader_hints_taken, 1);
    out.clear();
    c.submit(Op::Read { key: 1 }, 6, &mut out).unwrap();
    assert_eq!(sends(&out), vec![(2, 2, 4, true)]);
    // A hint that is not an entry node (a stranger) is ignored.
    c.on_refused(2, Some(77), 7);
    assert_eq!(c.entry(), 2);

    let mut b = ClientCore::<BPlusTree>::new(
        9,
        Topology {
            batchers: true,
            entries: vec![8, 1, 2, 3],
            ..topology()
        },
        cfg(),
        8,
        4,
    );
    submit_opened(&mut b, Op::Read { key: 1 }, 0, &[4], &mut out);
    b.on_reply(
        4,
        &reply(1, 1, &OpResult::Value(None)),
        Some(2),
        5,
        &mut out,
    );
    assert_eq!(b.entry(), 8, "clients keep entering through their batcher");
}

#[test]
fn early_replies_end_a_command_only_when_confirmed() {
    let mut c = client();
    let mut out = Vec::new();
    submit_opened(&mut c, Op::Read { key: 1 }, 0, &[4], &mut out);
    let stale = reply(1, 3, &OpResult::Value(Some(1)));
    let fresh = reply(1, 3, &OpResult::Value(Some(2)));
    c.on_early(4, &EarlyReply::Tentative(stale.clone()), 5, &mut out);
    c.on_early(4, &EarlyReply::confirm(&fresh), 6, &mut out);
    let mut old = EarlyReply::confirm(&stale);
    if let EarlyReply::Confirm(x) = &mut old {
        x.seq = 0;
    }
    c.on_early(4, &old, 7, &mut out);
    assert_eq!(c.stats().late_replies, 1);
    assert!(c.take_done().is_none(), "nothing is final yet");
    c.on_early(4, &EarlyReply::Tentative(fresh), 8, &mut out);
    let d = c.take_done().unwrap();
    assert_eq!(d.result, Ok(OpResult::Value(Some(2))));
    assert_eq!(
        (d.ret_ns, d.tentative_ns, d.confirmed_early),
        (8, Some(5), true)
    );
    assert_eq!(c.stats().confirmed, 1);
    c.on_early(4, &EarlyReply::Tentative(stale), 9, &mut out);
    assert_eq!(c.stats().late_replies, 2);
}

#[test]
fn a_refusal_by_the_service_ends_the_command_as_not_applied() {
    let mut c = client();
    let mut out = Vec::new();
    submit_opened(&mut c, Op::Insert { key: 1, value: 1 }, 0, &[4], &mut out);
    let r = Reply {
        client: 9,
        seq: 1,
        instance: 2,
        result: Err(Refusal::Rejected("too big".into())),
    };
    c.on_reply(4, &r, None, 3, &mut out);
    assert_eq!(
        c.take_done().unwrap().result,
        Err(ClientError::Rejected("too big".into()))
    );
    // Bytes that do not decode end it with an unknown outcome.
    c.submit(Op::Insert { key: 1, value: 1 }, 4, &mut out)
        .unwrap();
    let r = Reply {
        client: 9,
        seq: 2,
        instance: 3,
        result: Ok(Payload::from_static(b"\xff")),
    };
    c.on_reply(4, &r, None, 5, &mut out);
    assert!(matches!(
        c.take_done().unwrap().result,
        Err(ClientError::BadReply(_))
    ));
}

/// A command refused because its session expired ends with an unknown outcome, and
/// the next command opens a new session first; commands name their session.
#[test]
fn an_expired_session_ends_the_command_and_the_next_one_reopens() {
    let mut c = client();
    let mut out = Vec::new();
    submit_opened(&mut c, Op::Insert { key: 1, value: 1 }, 0, &[4], &mut out);
    let expired = Reply {
        client: 9,
        seq: 1,
        instance: 40,
        result: Err(Refusal::SessionExpired),
    };
    c.on_reply(4, &expired, None, 3, &mut out);
    let d = c.take_done().unwrap();
    assert_eq!(d.result, Err(ClientError::SessionExpired));
    assert!(
        !ClientError::SessionExpired.not_applied(),
        "outcome unknown"
    );
    out.clear();
    c.submit(Op::Read { key: 1 }, 4, &mut out).unwrap();
    let Action::Send { cmd, .. } = &out[0];
    assert!(cmd.is_open(), "a new session opens first");
    let opened = Reply {
        client: 9,
        seq: 0,
        instance: 41,
        result: Ok(partita_types::session_reply(41)),
    };
    out.clear();
    c.on_reply(4, &opened, None, 5, &mut out);
    let Action::Send { cmd, .. } = &out[0];
    assert_eq!((cmd.session, cmd.seq), (41, 2));
    assert_eq!(c.stats().sessions_opened, 2);
}

/// A client that cannot open a session gives up with the command not applied.
#[test]
fn no_session_means_not_applied() {
    let mut c = client();
    let mut out = Vec::new();
    c.submit(Op::Insert { key: 1, value: 1 }, 0, &mut out)
        .unwrap();
    while c.take_done().is_none() {
        let at = c.deadline().unwrap();
        c.on_timer(at, &mut out);
    }
    assert!(out.iter().all(|Action::Send { cmd, .. }| cmd.is_open()));
    let err = ClientError::NoSession { after_ns: 250 };
    assert!(err.not_applied());
}

fn partitioned() -> ClientCore<BPlusTree> {
    ClientCore::new(
        9,
        Topology {
            entries: vec![1, 2, 3],
            batchers: false,
            replicas: vec![4, 5, 6, 7],
            layout: PartitionLayout {
                map: PartitionMap::new(2, 100).unwrap(),
                replicas: vec![vec![4, 5], vec![6, 7]],
            },
            session_lease_ms: None,
            psmr: None,
            rings: Vec::new(),
        },
        cfg(),
        1,
        5,
    )
}

#[test]
fn partitioned_commands_merge_only_sub_replies_of_one_instance() {
    let mut c = partitioned();
    let mut out = Vec::new();
    c.submit(Op::Query { min: 40, max: 60 }, 0, &mut out)
        .unwrap();
    assert_eq!(
        c.reply_nodes().collect::<Vec<_>>(),
        vec![5, 7],
        "the open goes to every partition"
    );
    let open = |inst| Reply {
        client: 9,
        seq: 0,
        instance: inst,
        result: Ok(partita_types::session_reply(inst)),
    };
    // The open answered by partition 0 at instance 1 and partition 1 at instance 2
    // (two copies ordered): not open until one instance is answered by both.
    out.clear();
    c.on_reply(5, &open(1), None, 0, &mut out);
    c.on_reply(7, &open(2), None, 0, &mut out);
    assert!(out.is_empty());
    c.on_reply(7, &open(1), None, 0, &mut out);
    assert_eq!(
        c.reply_nodes().collect::<Vec<_>>(),
        vec![5, 7],
        "the chosen replica's rank in each"
    );
    let Action::Send { cmd, .. } = &out[0];
    assert_eq!(cmd.body.groups(), 0b11);
    // Partition 0 answers at instance 3, partition 1 at instance 4 (a resubmission
    // ordered again): no merge; then partition 0 at instance 4 completes it.
    let q = |seq, inst, e: Vec<(u64, u64)>| Reply {
        client: 9,
        seq,
        instance: inst,
        result: encoded(&OpResult::Entries(e)),
    };
    c.on_reply(5, &q(1, 3, vec![(45, 1)]), None, 1, &mut out);
    c.on_reply(7, &q(1, 4, vec![(55, 2)]), None, 2, &mut out);
    assert!(c.take_done().is_none());
    c.on_reply(5, &q(1, 3, vec![(45, 1)]), None, 3, &mut out);
    assert_eq!(c.stats().late_replies, 1, "a duplicate sub-reply");
    c.on_reply(5, &q(1, 4, vec![(44, 9)]), None, 4, &mut out);
    assert_eq!(
        c.take_done().unwrap().result,
        Ok(OpResult::Entries(vec![(44, 9), (55, 2)]))
    );
    // A reply from a node of no partition is late.
    c.submit(Op::Read { key: 70 }, 5, &mut out).unwrap();
    c.on_reply(99, &reply(2, 5, &OpResult::Value(None)), None, 6, &mut out);
    assert_eq!(c.stats().late_replies, 2);
    c.on_reply(7, &reply(2, 5, &OpResult::Value(None)), None, 7, &mut out);
    assert!(c.take_done().is_some());
}

#[test]
fn the_planted_independent_partitions_bug_sends_sub_commands_alone() {
    let mut c = partitioned().with_bugs(ClientBugs {
        independent_partitions: true,
        ..ClientBugs::default()
    });
    let mut out = Vec::new();
    submit_opened(&mut c, Op::Query { min: 40, max: 60 }, 0, &[5, 7], &mut out);
    let sent: Vec<(u64, u64)> = out
        .iter()
        .map(|Action::Send { cmd, .. }| (cmd.seq, cmd.body.groups()))
        .collect();
    assert_eq!(sent, vec![(1, 0b01), (2, 0b10)]);
    // Each sub-reply counts whatever instance ordered it.
    let q = |seq, inst, e: Vec<(u64, u64)>| Reply {
        client: 9,
        seq,
        instance: inst,
        result: encoded(&OpResult::Entries(e)),
    };
    c.on_reply(7, &q(2, 8, vec![(55, 2)]), None, 1, &mut out);
    c.on_reply(5, &q(1, 3, vec![(45, 1)]), None, 2, &mut out);
    assert_eq!(
        c.take_done().unwrap().result,
        Ok(OpResult::Entries(vec![(45, 1), (55, 2)]))
    );
    // The next command continues after both sub-commands' sequence numbers.
    out.clear();
    c.submit(Op::Read { key: 1 }, 3, &mut out).unwrap();
    let Action::Send { cmd, .. } = &out[0];
    assert_eq!(cmd.seq, 3);
}

#[test]
fn a_lost_connection_moves_on_and_resubmits_soon() {
    let mut c = client();
    let mut out = Vec::new();
    submit_opened(&mut c, Op::Read { key: 1 }, 0, &[4], &mut out);
    c.on_disconnected(1, 10);
    assert_eq!(c.entry(), 2);
    assert_eq!(c.deadline(), Some(40));
    c.on_disconnected(4, 11);
    assert_eq!(c.replica(), 5);
    out.clear();
    c.on_timer(40, &mut out);
    assert_eq!(sends(&out), vec![(2, 1, 5, false)]);
    // A node the command does not depend on changes nothing.
    let d = c.deadline();
    c.on_disconnected(3, 41);
    assert_eq!((c.deadline(), c.entry()), (d, 2));
}

#[test]
fn commands_that_cannot_be_split_are_refused_before_sending() {
    let mut c = partitioned();
    let mut out = Vec::new();
    // The B+tree splits everything; the default split refuses a command spanning
    // partitions, which the service tests show. Here: the client is not left busy
    // by a refused command.
    submit_opened(&mut c, Op::Read { key: 1 }, 0, &[5, 7], &mut out);
    assert!(c.is_busy());
    c.on_reply(5, &reply(1, 1, &OpResult::Value(None)), None, 1, &mut out);
    assert!(!c.is_busy());
}

/// With a lease, a client renews its session once half the lease has passed since it
/// opened (or renewed) it, before the next command; a renewal refused because the
/// session expired is followed by an open, and the command still goes out.
#[test]
fn sessions_are_renewed_at_half_the_lease_and_reopened_if_gone() {
    let mut c = ClientCore::<BPlusTree>::new(
        9,
        Topology {
            session_lease_ms: Some(100),
            psmr: None,
            rings: Vec::new(),
            ..topology()
        },
        cfg(),
        1,
        4,
    );
    let mut out = Vec::new();
    submit_opened(&mut c, Op::Read { key: 1 }, 0, &[4], &mut out);
    c.on_reply(4, &reply(1, 2, &OpResult::Value(None)), None, 10, &mut out);
    c.take_done().unwrap();
    // 40 ms after the open: no renewal yet.
    out.clear();
    c.submit(Op::Read { key: 1 }, 40_000_000, &mut out).unwrap();
    assert_eq!(sends(&out), vec![(1, 2, 4, true)]);
    c.on_reply(
        4,
        &reply(2, 3, &OpResult::Value(None)),
        None,
        40_000_001,
        &mut out,
    );
    c.take_done().unwrap();
    // 60 ms after it: renew first.
    out.clear();
    let t = 60_000_000;
    c.submit(Op::Read { key: 1 }, t, &mut out).unwrap();
    let Action::Send { cmd, .. } = &out[0];
    assert!(
        cmd.is_open() && cmd.session == 1,
        "a renewal of session 1: {cmd:?}"
    );
    let renewed = Reply {
        client: 9,
        seq: 0,
        instance: 5,
        result: Ok(partita_types::session_reply(1)),
    };
    out.clear();
    c.on_reply(4, &renewed, None, t + 1, &mut out);
    assert_eq!(sends(&out), vec![(1, 3, 4, false)]);
    assert_eq!(c.stats().sessions_renewed, 1);
    c.on_reply(
        4,
        &reply(3, 6, &OpResult::Value(None)),
        None,
        t + 2,
        &mut out,
    );
    c.take_done().unwrap();
    // Much later: the renewal is refused (expired), an open follows, then the command.
    out.clear();
    let t = 500_000_000;
    c.submit(Op::Read { key: 1 }, t, &mut out).unwrap();
    let refused = Reply {
        client: 9,
        seq: 0,
        instance: 9,
        result: Err(Refusal::SessionExpired),
    };
    out.clear();
    c.on_reply(4, &refused, None, t + 1, &mut out);
    let Action::Send { cmd, .. } = &out[0];
    assert!(cmd.is_open() && cmd.session == 0, "an open: {cmd:?}");
    let opened = Reply {
        client: 9,
        seq: 0,
        instance: 10,
        result: Ok(partita_types::session_reply(10)),
    };
    out.clear();
    c.on_reply(4, &opened, None, t + 2, &mut out);
    let Action::Send { cmd, .. } = &out[0];
    assert_eq!((cmd.seq, cmd.session), (4, 10));
    assert!(
        c.take_done().is_none(),
        "the command is still outstanding, not failed"
    );
}

/// A client with a 100 ms lease and a 20 ms timeout that never gives up.
fn retrying_leased_client() -> ClientCore<BPlusTree> {
    ClientCore::new(
        9,
        Topology {
            session_lease_ms: Some(100),
            psmr: None,
            rings: Vec::new(),
            ..topology()
        },
        ClientConfig {
            timeout_ns: 20_000_000,
            give_up_ns: None,
            refused_retry_ns: 30,
        },
        1,
        4,
    )
}

/// A command retried for half a lease renews its session before the next copy goes
/// out; once the command went out, a session found gone ends it as unknown (a new
/// session could run it a second time), and the next open names the session it
/// replaces.
#[test]
fn a_retried_command_renews_its_session_and_never_reopens_under_itself() {
    let mut c = retrying_leased_client();
    let mut out = Vec::new();
    let renewal_after_retries = |c: &mut ClientCore<BPlusTree>, out: &mut Vec<Action>| loop {
        out.clear();
        let at = c.deadline().expect("a command is outstanding");
        c.on_timer(at, out);
        let Action::Send { cmd, .. } = &out[0];
        if cmd.is_open() {
            assert_eq!(cmd.session, 1, "a renewal of session 1: {cmd:?}");
            assert!(at >= 50_000_000, "renewed only after half the lease");
            return at;
        }
        assert_eq!((cmd.seq, cmd.session), (1, 1), "the command itself");
    };
    // First round: the renewal succeeds and the command goes out again.
    submit_opened(&mut c, Op::Insert { key: 1, value: 1 }, 0, &[4], &mut out);
    let at = renewal_after_retries(&mut c, &mut out);
    let renewed = Reply {
        client: 9,
        seq: 0,
        instance: 7,
        result: Ok(partita_types::session_reply(1)),
    };
    out.clear();
    c.on_reply(4, &renewed, None, at + 1, &mut out);
    let Action::Send { cmd, .. } = &out[0];
    assert_eq!((cmd.seq, cmd.session), (1, 1), "the command again");
    assert_eq!(c.stats().sessions_renewed, 1);
    // Second round: the renewal finds the session gone. The command is not sent
    // under a new session: it ends with an unknown outcome.
    let at = renewal_after_retries(&mut c, &mut out);
    let refused = Reply {
        client: 9,
        seq: 0,
        instance: 30,
        result: Err(Refusal::SessionExpired),
    };
    out.clear();
    c.on_reply(4, &refused, None, at + 1, &mut out);
    assert!(out.is_empty(), "nothing more sent: {out:?}");
    assert_eq!(
        c.take_done().unwrap().result,
        Err(ClientError::SessionExpired)
    );
    // The next command opens a session that replaces session 1.
    out.clear();
    c.submit(Op::Read { key: 1 }, at + 2, &mut out).unwrap();
    let Action::Send { cmd, .. } = &out[0];
    assert!(cmd.is_open() && cmd.session == 0, "an open: {cmd:?}");
    let partita_types::Body::Whole { payload, .. } = &cmd.body else {
        panic!("an open is whole: {cmd:?}");
    };
    assert_eq!(partita_types::open_replaces(payload), 1);
}

/// The answer to a copy of an earlier open (another session than the one the command
/// went out in) ends the command as unknown instead of sending it again.
#[test]
fn a_different_session_after_the_command_went_out_ends_it_as_unknown() {
    let mut c = retrying_leased_client();
    let mut out = Vec::new();
    submit_opened(&mut c, Op::Insert { key: 1, value: 1 }, 0, &[4], &mut out);
    // Retry until the renewal goes out, then answer it with another session.
    let at = loop {
        out.clear();
        let at = c.deadline().unwrap();
        c.on_timer(at, &mut out);
        let Action::Send { cmd, .. } = &out[0];
        if cmd.is_open() {
            break at;
        }
    };
    let other = Reply {
        client: 9,
        seq: 0,
        instance: 12,
        result: Ok(partita_types::session_reply(12)),
    };
    out.clear();
    c.on_reply(4, &other, None, at + 1, &mut out);
    assert!(
        out.is_empty(),
        "the command is not sent in session 12: {out:?}"
    );
    assert_eq!(
        c.take_done().unwrap().result,
        Err(ClientError::SessionExpired)
    );
    // Session 12 serves the next command.
    out.clear();
    c.submit(Op::Read { key: 1 }, at + 2, &mut out).unwrap();
    let Action::Send { cmd, .. } = &out[0];
    assert_eq!((cmd.seq, cmd.session), (2, 12));
}

/// A client that gives up on a command for several partitions opens a new session
/// before its next command (Multi-Ring Paxos: the late command must run at every
/// partition or at none, and the open is ordered alike with it everywhere); one that
/// gives up on a single partition's command keeps its session.
#[test]
fn giving_up_on_a_command_for_several_partitions_leaves_the_session() {
    let mut c = partitioned();
    let mut out = Vec::new();
    let open = |inst| Reply {
        client: 9,
        seq: 0,
        instance: inst,
        result: Ok(partita_types::session_reply(inst)),
    };
    c.submit(Op::Query { min: 40, max: 60 }, 0, &mut out)
        .unwrap();
    c.on_reply(5, &open(1), None, 0, &mut out);
    c.on_reply(7, &open(1), None, 0, &mut out);
    // The query for both partitions went out; nothing answers until give-up.
    while c.take_done().is_none() {
        let at = c.deadline().unwrap();
        c.on_timer(at, &mut out);
    }
    assert_eq!(c.stats().gave_up, 1);
    assert_eq!(c.stats().sessions_abandoned, 1);
    out.clear();
    c.submit(Op::Read { key: 70 }, 1000, &mut out).unwrap();
    let Action::Send { cmd, .. } = &out[0];
    assert!(cmd.is_open(), "a new session opens first: {cmd:?}");
    assert_eq!(cmd.body.groups(), 0b11, "at every partition");
    c.on_reply(5, &open(9), None, 1001, &mut out);
    out.clear();
    c.on_reply(7, &open(9), None, 1001, &mut out);
    let Action::Send { cmd, .. } = &out[0];
    assert_eq!((cmd.session, cmd.seq), (9, 2));
    // A single partition's command given up: the session stays.
    while c.take_done().is_none() {
        let at = c.deadline().unwrap();
        c.on_timer(at, &mut out);
    }
    out.clear();
    c.submit(Op::Read { key: 71 }, 3000, &mut out).unwrap();
    let Action::Send { cmd, .. } = &out[0];
    assert!(!cmd.is_open() && cmd.session == 9, "{cmd:?}");
    assert_eq!(c.stats().sessions_abandoned, 1);
    c.invariants();
}

/// P-SMR over Multi-Ring Paxos (paper 002 §V-B): the proxy maps every command to a
/// thread's group (CC-G, or OC-G when optimistic) and sends it to that group's ring,
/// g_all commands (and session opens) to the ring that carries every thread; an
/// optimistic command refused by its thread goes again, conservatively, to g_all's.
#[test]
fn psmr_commands_go_to_their_thread_groups_ring() {
    for optimistic in [false, true] {
        let layout = ThreadLayout::new(2, 99).unwrap();
        let t = Topology {
            psmr: Some(PsmrClient { layout, optimistic }),
            rings: vec![
                (0b01, vec![10, 11]),
                (0b10, vec![12, 13]),
                (0b11, vec![14, 15]),
            ],
            ..topology()
        };
        let mut c: ClientCore<BPlusTree> = ClientCore::new(9, t, cfg(), 1, 4);
        let mut out = Vec::new();
        // The session opens on g_all's ring.
        c.submit(Op::Read { key: 10 }, 0, &mut out).unwrap();
        let [Action::Send { to, cmd, .. }] = &out[..] else {
            panic!("{out:?}")
        };
        assert!(cmd.is_open());
        assert_eq!((*to, cmd.route), (14, 0));
        let opened = Reply {
            client: 9,
            seq: 0,
            instance: 1,
            result: Ok(partita_types::session_reply(1)),
        };
        out.clear();
        c.on_reply(4, &opened, None, 0, &mut out);
        // A read of thread 0's range: its ring, its group.
        let [Action::Send { to, cmd, .. }] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!((*to, cmd.route), (10, 0b01), "optimistic {optimistic}");
        out.clear();
        c.on_reply(4, &reply(1, 2, &OpResult::Value(None)), None, 1, &mut out);
        // An update of thread 1's range.
        c.submit(Op::Update { key: 80, value: 1 }, 2, &mut out)
            .unwrap();
        let [Action::Send { to, cmd, .. }] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!((*to, cmd.route), (12, 0b10));
        out.clear();
        c.on_reply(4, &reply(2, 3, &OpResult::Old(None)), None, 3, &mut out);
        // An insert: g_all under CC-G, one thread under OC-G.
        c.submit(Op::Insert { key: 70, value: 1 }, 4, &mut out)
            .unwrap();
        let [Action::Send { to, cmd, .. }] = &out[..] else {
            panic!("{out:?}")
        };
        if !optimistic {
            assert_eq!((*to, cmd.route), (14, 0b11));
            continue;
        }
        assert_eq!((*to, cmd.route), (12, 0b10));
        // Refused by that thread: again, conservatively, on g_all's ring.
        out.clear();
        let refused = Reply {
            client: 9,
            seq: 3,
            instance: 4,
            result: Err(partita_types::Refusal::Resubmit("the leaf splits".into())),
        };
        c.on_reply(4, &refused, None, 5, &mut out);
        let [Action::Send { to, cmd, .. }] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!((cmd.seq, *to, cmd.route), (3, 14, 0));
    }
}

/// A node not ready yet refuses a session open (numbered 0, apart from the command it
/// opens for): the client retries it at the same node after the refusal delay, and
/// does not wait out the timeout and move on (a geo client so moved stayed with a
/// replica in another region for the rest of its run).
#[test]
fn a_refused_session_open_is_retried_at_the_same_node() {
    let mut c = client();
    let mut out = Vec::new();
    c.submit(Op::Read { key: 1 }, 0, &mut out).unwrap();
    let Some(Action::Send { to, cmd, .. }) = out.pop() else {
        panic!("nothing sent");
    };
    assert!(cmd.is_open());
    assert_eq!((to, cmd.seq), (1, 0));
    c.on_refused(0, None, 5);
    assert_eq!(c.stats().refusals, 1);
    assert_eq!(c.deadline(), Some(5 + 30));
    c.on_timer(5 + 30, &mut out);
    let Some(Action::Send { to, cmd, .. }) = out.pop() else {
        panic!("the open was not retried");
    };
    assert!(cmd.is_open());
    assert_eq!(to, 1, "retried at the node that refused it");
}

/// A membership change followed while a command is under way: its resubmission enters
/// at an entry of the new topology and names a replica of it as the one to answer,
/// in the same session; the reply from there ends it.
#[test]
fn a_new_topology_takes_effect_at_the_next_send() {
    let mut c = client();
    let mut out = Vec::new();
    submit_opened(&mut c, Op::Read { key: 3 }, 10, &[4], &mut out);
    assert_eq!(sends(&out), vec![(1, 1, 4, false)]);
    // Acceptors 1-3 and replica 4 were replaced by 6-8 and 9.
    c.set_topology(Topology {
        entries: vec![6, 7, 8],
        replicas: vec![5, 9],
        ..topology()
    });
    assert_eq!((c.entry(), c.stats().topologies_followed), (6, 1));
    assert!([5, 9].contains(&c.replica()));
    let r = c.replica();
    out.clear();
    c.on_timer(110, &mut out);
    // (A timeout moves to the next entry of the rotation: the new one's second.)
    assert_eq!(sends(&out), vec![(7, 1, r, false)]);
    c.on_reply(r, &reply(1, 7, &OpResult::Value(None)), None, 120, &mut out);
    let done = c.take_done().expect("the command ended");
    assert!(done.result.is_ok());
}
