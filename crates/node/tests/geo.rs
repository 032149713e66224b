//! GeoPaxos+ in the node core (`partita_node::geo`), scripted on the in-memory
//! harness: three nodes, each an acceptor of every serializer's group and a replica
//! (node `i` hosting serializer `i - 1`), clients at every node. Checked: every request
//! answered once with the B+tree's result, every replica's tree the same, writes
//! resubmitted through another replica executed once, a serializer's leader crashed
//! and restarted (its replica relearns every log), and the planted bugs visible where
//! they should be.

mod common;

use common::{res, three_region_setup, three_regions, Cluster, GEO_NODES as NODES};
use partita_btree::{Op, OpResult};
use partita_node::{NodeCore, UnsafeBugs};
use partita_types::NodeId;

use common::geo_cmd as cmd;

fn cluster(keys: u64, bugs: UnsafeBugs) -> Cluster {
    // Let every serializer's first leader finish Phase 1 and the boot records land.
    three_regions(keys, false, bugs, 5)
}

fn geo(n: &NodeCore) -> &partita_node::GeoOrdering {
    n.geo().expect("a GeoPaxos+ node")
}

fn digests(c: &Cluster) -> Vec<u64> {
    c.nodes
        .values()
        .map(|n| geo(n).replica().digest())
        .collect()
}

fn settle_geo(c: &mut Cluster) {
    for _ in 0..200 {
        c.tick(1);
        if c.nodes.values().all(|n| geo(n).quiescent()) {
            return;
        }
    }
    panic!("GeoPaxos+ never went quiet");
}

#[test]
fn requests_at_every_replica_run_once_and_replicas_agree() {
    let mut c = cluster(30, UnsafeBugs::default());
    // Local writes at each replica (keys 0..10 are node 1's, 10..20 node 2's, …), then
    // reads of every key from every replica, and inserts that split leaves.
    let mut seq = 0;
    for (i, &n) in NODES.iter().enumerate() {
        for k in (i as u64 * 10)..(i as u64 * 10 + 10) {
            seq += 1;
            c.request(
                n,
                cmd(
                    100 + n as u64,
                    seq,
                    Op::Update {
                        key: k,
                        value: k + 1000,
                    },
                ),
            );
        }
    }
    settle_geo(&mut c);
    for &n in &NODES {
        for k in 100..110 {
            seq += 1;
            c.request(
                n,
                cmd(
                    200 + n as u64,
                    seq,
                    Op::Insert {
                        key: k * 3 + n as u64,
                        value: k,
                    },
                ),
            );
        }
    }
    settle_geo(&mut c);
    for &n in &NODES {
        for k in 0..30 {
            seq += 1;
            c.request(n, cmd(300 + n as u64, seq, Op::Read { key: k }));
        }
    }
    settle_geo(&mut c);
    let replies: Vec<_> = c.replies().cloned().collect();
    assert_eq!(replies.len() as u64, seq, "every request answered once");
    for r in &replies {
        if let OpResult::Value(v) = res(r) {
            let k = r.seq - 61 - 30 * (r.client - 301);
            assert_eq!(v, Some(k + 1000), "read of key {k} saw the update");
        }
    }
    let d = digests(&c);
    assert!(d.windows(2).all(|w| w[0] == w[1]), "digests differ: {d:?}");
    for n in c.nodes.values() {
        let s = geo(n).replica().stats();
        assert_eq!(
            s.executed,
            seq - 90 + 90,
            "every replica executed everything"
        );
        assert!(geo(n).replica().tree().len() == 60);
    }
    // Local updates (one serializer each) ran without any other serializer.
    assert!(c.counter(1, "geo_executed_multi") < seq);
}

#[test]
fn a_write_resubmitted_through_another_replica_runs_once() {
    let mut c = cluster(30, UnsafeBugs::default());
    // The client's update reaches node 1, times out (say), and is sent again, same
    // sequence number, to node 3; then a second write overwrites it.
    c.request(1, cmd(9, 1, Op::Update { key: 5, value: 1 }));
    c.request(3, cmd(9, 1, Op::Update { key: 5, value: 1 }));
    settle_geo(&mut c);
    c.request(2, cmd(8, 1, Op::Update { key: 5, value: 2 }));
    settle_geo(&mut c);
    c.request(3, cmd(9, 1, Op::Update { key: 5, value: 1 }));
    settle_geo(&mut c);
    for n in c.nodes.values() {
        assert_eq!(
            geo(n).replica().stats().deduplicated,
            2,
            "two copies dropped"
        );
    }
    let late = c.replies_of(9);
    assert_eq!(late.len(), 3, "every copy answered");
    for r in late {
        assert_eq!(
            res(r),
            OpResult::Old(Some(5)),
            "with the first copy's result"
        );
    }
    c.request(1, cmd(7, 1, Op::Read { key: 5 }));
    settle_geo(&mut c);
    assert_eq!(res(c.replies_of(7)[0]), OpResult::Value(Some(2)));
}

#[test]
fn a_serializer_leader_crash_and_restart_lose_nothing() {
    let mut c = cluster(30, UnsafeBugs::default());
    for k in 0..30 {
        c.request(
            1 + (k % 3) as NodeId,
            cmd(50, k + 1, Op::Update { key: k, value: 7 }),
        );
    }
    settle_geo(&mut c);
    // Node 1 leads serializer 0 and replicates keys 0..10: it crashes, node 2 takes
    // serializer 0 over, and writes of node 1's keys go on through nodes 2 and 3.
    c.crash(1);
    let mut seq = 100;
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
    assert_eq!(
        c.replies_of(51).len(),
        10,
        "serializer 0 ordered again without node 1"
    );
    c.start(1);
    settle_geo(&mut c);
    for _ in 0..50 {
        c.tick(1);
    }
    let d = digests(&c);
    assert!(d.windows(2).all(|w| w[0] == w[1]), "digests differ: {d:?}");
    for n in c.nodes.values() {
        let t = geo(n).replica().tree();
        for k in 0..10 {
            assert_eq!(partita_node::geo::map_value(t.get(k).unwrap()), 8);
        }
    }
    // The restarted replica is a new incarnation and answers requests again.
    c.request(1, cmd(52, 1, Op::Read { key: 3 }));
    settle_geo(&mut c);
    assert_eq!(res(c.replies_of(52)[0]), OpResult::Value(Some(8)));
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
    assert_eq!(c.counter(2, "geo_submitted"), 0);
}

/// The planted bug `geo-write-one-serializer`, caught by what it breaks: a write to a
/// node that two serializers replicate (a DOP placed key 5's leaf at replicas 2 and 3,
/// which read it) is ordered by its origin's serializer only. Replica 3, cut off from
/// serializer 1's messages, then answers a read of key 5 (ordered by its own
/// serializer) with the value from before a write that was already acknowledged: a
/// stale read. Without the bug the write is in serializer 2's log too, so the read
/// waits for it and returns the new value.
fn stale_read(bug: bool) -> OpResult {
    let mut bugs = UnsafeBugs::default();
    if bug {
        bugs.enable("geo-write-one-serializer").unwrap();
    }
    let mut s = three_region_setup(30, false);
    let partita_node::OrderingSetup::GeoPaxosPlus(g) = &mut s.ordering else {
        panic!("a geo setup")
    };
    g.dop_interval_ms = 100;
    let mut c = Cluster::new(s, bugs);
    c.tick(5);
    for i in 0..20 {
        c.request(2, cmd(60, i + 1, Op::Read { key: 5 }));
        c.request(3, cmd(61, i + 1, Op::Read { key: 5 }));
    }
    settle_geo(&mut c);
    // The first DOP (node 1, after 200 ms of its clock) moves the leaf.
    c.tick(300);
    let t = geo(&c.nodes[&3]).replica().tree();
    let reps = t.node(t.find_leaf(5)).reps();
    assert!(
        reps.contains(1) && reps.contains(2),
        "the DOP put key 5's leaf at replicas 2 and 3 (serializers 1 and 2): {reps}"
    );
    // Node 3 hears nothing of serializer 1 from now on.
    c.lose(|_, to, m| to == 3 && matches!(m, partita_consensus::Msg::OnRing { ring: 1, .. }));
    c.request(2, cmd(70, 1, Op::Update { key: 5, value: 99 }));
    for _ in 0..100 {
        c.tick(1);
        if !c.replies_of(70).is_empty() {
            break;
        }
    }
    assert_eq!(
        res(c.replies_of(70)[0]),
        OpResult::Old(Some(5)),
        "the write was acknowledged"
    );
    c.request(3, cmd(71, 1, Op::Read { key: 5 }));
    for _ in 0..100 {
        c.tick(1);
    }
    if let Some(r) = c.replies_of(71).first() {
        return res(r);
    }
    // Correct: the read waits for the write it must follow; it comes once node 3
    // hears serializer 1 again.
    c.lose_nothing();
    for _ in 0..300 {
        c.tick(1);
        if let Some(r) = c.replies_of(71).first() {
            return res(r);
        }
    }
    panic!("the read was never answered");
}

#[test]
fn a_read_after_an_acknowledged_write_sees_it() {
    assert_eq!(stale_read(false), OpResult::Value(Some(99)));
}

#[test]
fn control_a_write_ordered_by_one_serializer_is_read_stale() {
    assert_eq!(
        stale_read(true),
        OpResult::Value(Some(5)),
        "the planted bug must make the read miss the acknowledged write"
    );
}
