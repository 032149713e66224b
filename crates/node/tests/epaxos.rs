//! EPaxos in the node core (`partita_node::epaxos`), scripted on the in-memory
//! harness: three nodes, each an EPaxos replica executing the geo B+tree's operations,
//! clients at every node. Checked: every request answered once with the B+tree's
//! result, every replica's tree the same (contents digest), NEXT and PREV ordered with
//! the inserts that change their answer, a write resubmitted through another replica
//! executed once, a replica crashed and restarted (it runs its log again), operations
//! the service lacks rejected, and the planted bug (the fast path taken although the
//! dependencies differ) caught as diverging replicas.

mod common;

use common::{res, three_regions, Cluster, GEO_NODES as NODES};
use partita_btree::{Op, OpResult};
use partita_node::{NodeCore, UnsafeBugs};
use partita_types::NodeId;

use common::geo_cmd as cmd;

fn cluster(keys: u64, bugs: UnsafeBugs) -> Cluster {
    three_regions(keys, true, bugs, 2)
}

fn ep(n: &NodeCore) -> &partita_node::EpaxosOrdering {
    n.epaxos().expect("an EPaxos node")
}

fn digests(c: &Cluster) -> Vec<u64> {
    c.nodes
        .iter()
        .filter(|(id, _)| !c.down.contains(id))
        .map(|(_, n)| n.ordering_executed().expect("EPaxos executes").digest)
        .collect()
}

fn settle_ep(c: &mut Cluster) {
    for _ in 0..400 {
        c.tick(1);
        if c.nodes
            .iter()
            .all(|(id, n)| c.down.contains(id) || ep(n).quiescent())
        {
            return;
        }
    }
    panic!("EPaxos never went quiet");
}

fn same(d: &[u64]) -> bool {
    d.windows(2).all(|w| w[0] == w[1])
}

#[test]
fn concurrent_requests_at_every_replica_run_once_and_replicas_agree() {
    let mut c = cluster(30, UnsafeBugs::default());
    // Conflicting writes of the same keys from all three replicas at once, then
    // inserts between existing keys beside NEXT and PREV of their neighbours.
    let mut seq = 0;
    for round in 0..5u64 {
        for &n in &NODES {
            for k in 0..6u64 {
                seq += 1;
                c.request(
                    n,
                    cmd(
                        100 + n as u64,
                        seq,
                        Op::Update {
                            key: k,
                            value: round * 1000 + n as u64,
                        },
                    ),
                );
            }
        }
        c.settle();
    }
    settle_ep(&mut c);
    for &n in &NODES {
        for k in 0..10u64 {
            seq += 1;
            c.request(
                n,
                cmd(
                    200 + n as u64,
                    seq,
                    Op::Insert {
                        key: 100 + k * 4 + n as u64,
                        value: k,
                    },
                ),
            );
            seq += 1;
            c.request(n, cmd(300 + n as u64, seq, Op::Next { key: 100 + k * 4 }));
            seq += 1;
            c.request(n, cmd(400 + n as u64, seq, Op::Prev { key: 104 + k * 4 }));
        }
    }
    settle_ep(&mut c);
    let replies: Vec<_> = c.replies().cloned().collect();
    assert_eq!(replies.len() as u64, seq, "every request answered once");
    let d = digests(&c);
    assert!(same(&d), "digests differ: {d:?}");
    for n in c.nodes.values() {
        assert_eq!(ep(n).executed(), seq, "every replica executed everything");
        assert_eq!(ep(n).tree().len(), 60, "30 keys and 30 inserts");
    }
    // Each NEXT saw a key of its own gap, or none yet (then the first key after it).
    for r in replies.iter().filter(|r| (301..=303).contains(&r.client)) {
        let OpResult::Entry(Some((k, _))) = res(r) else {
            panic!("a next found nothing: {r:?}");
        };
        assert!((100..140).contains(&k), "next answered {k}");
    }
}

#[test]
fn next_is_ordered_with_the_insert_that_changes_its_answer() {
    let mut c = cluster(10, UnsafeBugs::default());
    // Keys 0..10 exist; insert 20 and 15 from two replicas while two others ask for the
    // key after 9 (local neighbour: none, so it conflicts with everything) and the key
    // before 16.
    c.request(1, cmd(1, 1, Op::Insert { key: 20, value: 1 }));
    c.request(2, cmd(2, 1, Op::Next { key: 9 }));
    c.request(3, cmd(3, 1, Op::Insert { key: 15, value: 1 }));
    settle_ep(&mut c);
    c.request(2, cmd(2, 2, Op::Prev { key: 16 }));
    c.request(1, cmd(1, 2, Op::Insert { key: 16, value: 1 }));
    c.request(3, cmd(3, 2, Op::Next { key: 15 }));
    settle_ep(&mut c);
    let d = digests(&c);
    assert!(same(&d), "digests differ: {d:?}");
    let next9 = res(c.replies_of(2)[0]);
    assert!(
        matches!(next9, OpResult::Entry(None | Some((15, _)) | Some((20, _)))),
        "{next9:?}"
    );
    assert_eq!(res(c.replies_of(2)[1]), OpResult::Entry(Some((15, 1))));
    let next15 = res(c.replies_of(3)[1]);
    assert!(
        matches!(
            next15,
            OpResult::Entry(Some((16, _))) | OpResult::Entry(Some((20, _)))
        ),
        "{next15:?}"
    );
    assert!(c.counter(2, "epaxos_proposed_conflicting_all") >= 1);
}

#[test]
fn a_write_resubmitted_through_another_replica_runs_once() {
    let mut c = cluster(30, UnsafeBugs::default());
    c.request(1, cmd(9, 1, Op::Update { key: 5, value: 1 }));
    c.request(3, cmd(9, 1, Op::Update { key: 5, value: 1 }));
    settle_ep(&mut c);
    c.request(2, cmd(8, 1, Op::Update { key: 5, value: 2 }));
    settle_ep(&mut c);
    // A third copy, after the overwrite: answered from the window, not run again.
    c.request(3, cmd(9, 1, Op::Update { key: 5, value: 1 }));
    settle_ep(&mut c);
    for n in c.nodes.values() {
        assert_eq!(
            n.counters()
                .get("epaxos_duplicates_skipped")
                .copied()
                .unwrap_or(0),
            1,
            "the second copy skipped at every replica"
        );
    }
    let copies = c.replies_of(9);
    assert_eq!(copies.len(), 3, "every copy answered");
    for r in copies {
        assert_eq!(
            res(r),
            OpResult::Old(Some(5)),
            "with the first copy's result"
        );
    }
    c.request(1, cmd(7, 1, Op::Read { key: 5 }));
    settle_ep(&mut c);
    assert_eq!(res(c.replies_of(7)[0]), OpResult::Value(Some(2)));
}

#[test]
fn a_replica_crash_and_restart_lose_nothing() {
    let mut c = cluster(30, UnsafeBugs::default());
    for k in 0..30 {
        c.request(
            1 + (k % 3) as NodeId,
            cmd(50, k + 1, Op::Update { key: k, value: 7 }),
        );
    }
    settle_ep(&mut c);
    // Node 1 crashes with a proposal of its own in flight (its PreAccepts lost): the
    // others recover that instance and go on without it.
    c.lose(|from, _, _| from == 1);
    c.request(1, cmd(51, 1, Op::Update { key: 3, value: 9 }));
    c.tick(1);
    c.crash(1);
    c.lose_nothing();
    let mut seq = 1;
    for k in 0..10 {
        seq += 1;
        c.request(
            2 + (k % 2) as NodeId,
            cmd(51, seq, Op::Update { key: k, value: 8 }),
        );
    }
    for _ in 0..600 {
        c.tick(1);
        if c.replies_of(51).len() == 10 {
            break;
        }
    }
    assert_eq!(c.replies_of(51).len(), 10, "two replicas of three go on");
    c.start(1);
    settle_ep(&mut c);
    let d = digests(&c);
    assert!(same(&d), "digests differ: {d:?}");
    let executed: Vec<u64> = c.nodes.values().map(|n| ep(n).executed()).collect();
    assert!(
        executed.windows(2).all(|w| w[0] == w[1]),
        "the restarted replica ran its log again: {executed:?}"
    );
    // The write node 1 took before it crashed is in its log: once back, node 1
    // recovers the instance and it commits after the others' writes (its client was
    // never answered, so it may take effect late), or it commits as a no-op.
    let key3 = ep(&c.nodes[&1]).tree().read(3);
    assert!(matches!(key3, Some(8 | 9)), "{key3:?}");
    for n in c.nodes.values() {
        for k in 0..10 {
            let want = if k == 3 { key3 } else { Some(8) };
            assert_eq!(ep(n).tree().read(k), want, "key {k}");
        }
    }
    c.request(1, cmd(52, 1, Op::Read { key: 3 }));
    settle_ep(&mut c);
    assert_eq!(res(c.replies_of(52)[0]), OpResult::Value(key3));
}

#[test]
fn operations_the_geo_tree_lacks_are_rejected_not_ordered() {
    let mut c = cluster(0, UnsafeBugs::default());
    c.request(2, cmd(5, 1, Op::Delete { key: 1 }));
    c.settle();
    let r = &c.replies_of(5)[0];
    let Err(partita_types::Refusal::Rejected(why)) = &r.result else {
        panic!("{r:?}");
    };
    assert!(why.contains("no delete"), "{why}");
    assert_eq!(c.counter(2, "epaxos_proposed"), 0);
}

/// Conflicting writes of one key proposed at every replica at once, many rounds: do
/// the replicas end with the same tree?
fn replicas_agree_under_contention(bug: bool) -> bool {
    let mut bugs = UnsafeBugs::default();
    if bug {
        bugs.enable("epaxos-skip-slow-path").unwrap();
    }
    let mut c = cluster(4, bugs);
    let mut seq = 0;
    for round in 0..20u64 {
        for &n in &NODES {
            seq += 1;
            c.request(
                n,
                cmd(
                    600 + n as u64,
                    seq,
                    Op::Update {
                        key: round % 2,
                        value: seq,
                    },
                ),
            );
        }
        c.settle();
    }
    settle_ep(&mut c);
    same(&digests(&c))
}

#[test]
fn contended_writes_leave_every_replica_with_one_tree() {
    assert!(replicas_agree_under_contention(false));
}

#[test]
fn control_the_fast_path_taken_although_dependencies_differ_diverges() {
    assert!(
        !replicas_agree_under_contention(true),
        "the planted bug must make replicas execute conflicting writes in different orders"
    );
}
