//! GeoPaxos+ in the node core (`partita_node::geo`), scripted on the in-memory
//! harness: three nodes, each an acceptor of every serializer's group and a replica
//! (node `i` hosting serializer `i - 1`), clients at every node, the ordering
//! delivering in its merge's order to the common replica (here paper 001's B+tree,
//! which places nothing itself: every command goes to every serializer, the slow but
//! correct default). Checked: every request answered once with the B+tree's result,
//! every replica's state the same, a write resubmitted through another replica
//! executed once (the session table), checkpoints at cuts with one state per count,
//! the serializers' logs truncated below what a majority of checkpoints covers, a
//! restart replaying only its log's tail, a replica that fell behind the truncation
//! caught up by state transfer, and a serializer's leader crashed and restarted.

use crate::common;

use common::{res, three_region_setup, Cluster, GEO_NODES as NODES};
use partita_btree::{Op, OpResult};
use partita_node::{NodeCore, UnsafeBugs};
use partita_types::{Command, NodeId};

/// A B+tree command of `client` (sequence `seq`) that node `via` answers.
fn cmd(client: u64, seq: u64, via: NodeId, op: Op) -> Command {
    partita_btree::service::command(client, seq, via, &op)
}

/// Three GeoPaxos+ replicas with keys `0..keys`, booted until a barrier ran everywhere
/// (a node takes client commands once ordered time is known); with
/// `checkpoint_every`, replicas checkpoint that often (at the next cut).
fn cluster_with(keys: u64, bugs: UnsafeBugs, checkpoint_every: u64) -> Cluster {
    let mut s = three_region_setup(keys, false);
    s.checkpoint.interval_instances = checkpoint_every;
    s.checkpoint.announce_ticks = 20;
    let mut c = Cluster::new(s, bugs);
    c.checkpointing = checkpoint_every > 0;
    c.tick(5);
    settle(&mut c);
    c.tick(5);
    settle(&mut c);
    c
}

fn cluster(keys: u64) -> Cluster {
    cluster_with(keys, UnsafeBugs::default(), 0)
}

fn quiet(n: &NodeCore) -> bool {
    n.ordering_report().idle
}

fn live(c: &Cluster) -> Vec<NodeId> {
    NODES
        .iter()
        .copied()
        .filter(|id| !c.down.contains(id))
        .collect()
}

fn digests(c: &Cluster) -> Vec<u64> {
    live(c).iter().map(|&id| c.replica(id).digest()).collect()
}

fn same(d: &[u64]) -> bool {
    d.windows(2).all(|w| w[0] == w[1])
}

fn settle(c: &mut Cluster) {
    for _ in 0..800 {
        c.tick(1);
        if c.nodes
            .iter()
            .all(|(id, n)| c.down.contains(id) || quiet(n))
            && c.msgs.is_empty()
        {
            return;
        }
    }
    panic!("GeoPaxos+ never went quiet");
}

#[test]
fn requests_at_every_replica_run_once_and_replicas_agree() {
    let mut c = cluster(30);
    // Writes at each replica, then reads of every key from every replica, and inserts.
    let mut sent = 0;
    for (i, &n) in NODES.iter().enumerate() {
        for k in (i as u64 * 10)..(i as u64 * 10 + 10) {
            sent += 1;
            let op = Op::Update {
                key: k,
                value: k + 1000,
            };
            c.request(n, cmd(1000 + k, 1, n, op));
        }
    }
    settle(&mut c);
    for &n in &NODES {
        for k in 0..30u64 {
            sent += 1;
            c.request(n, cmd(2000 + 100 * n as u64 + k, 1, n, Op::Read { key: k }));
        }
        for k in 0..10u64 {
            sent += 1;
            let insert = Op::Insert {
                key: 100 + 10 * n as u64 + k,
                value: k,
            };
            c.request(n, cmd(3000 + 100 * n as u64 + k, 1, n, insert));
        }
    }
    settle(&mut c);
    let replies: Vec<_> = c.replies().cloned().collect();
    assert_eq!(replies.len() as u64, sent, "every request answered once");
    for r in replies.iter().filter(|r| (2000..3000).contains(&r.client)) {
        let key = (r.client - 2000) % 100;
        assert_eq!(res(r), OpResult::Value(Some(key + 1000)), "{r:?}");
    }
    assert!(same(&digests(&c)), "{:?}", digests(&c));
    for &n in &NODES {
        assert_eq!(c.replica(n).state().len(), 60, "30 keys and 30 inserts");
    }
}

/// Exactly once from the common session table: every mutation of a client is ordered
/// by its session's home serializer too, so replicas run them in one order and
/// recognise a late copy.
#[test]
fn a_write_resubmitted_through_another_replica_runs_once() {
    let mut c = cluster(30);
    c.request(1, cmd(9, 1, 1, Op::Update { key: 5, value: 1 }));
    c.request(3, cmd(9, 1, 3, Op::Update { key: 5, value: 1 }));
    settle(&mut c);
    c.request(2, cmd(8, 1, 2, Op::Update { key: 5, value: 2 }));
    settle(&mut c);
    // A third copy, after another client's overwrite: node 3 ran the command, so it
    // answers from the session's cached reply at once, without ordering it again.
    c.request(3, cmd(9, 1, 3, Op::Update { key: 5, value: 1 }));
    settle(&mut c);
    for &n in &NODES {
        assert_eq!(
            c.replica(n).stats().duplicates_answered,
            1,
            "the second copy, ordered, answered from the cache at every replica"
        );
    }
    assert_eq!(c.counter(3, "requests_answered_from_sessions"), 1);
    let copies = c.replies_of(9);
    assert_eq!(copies.len(), 3, "every copy answered by its replica");
    for r in copies {
        assert_eq!(res(r), OpResult::Old(Some(5)));
    }
    c.request(1, cmd(7, 1, 1, Op::Read { key: 5 }));
    settle(&mut c);
    assert_eq!(res(c.replies_of(7)[0]), OpResult::Value(Some(2)));
}

/// Inserts of new keys `from..to` (each written once, so a lost one stays lost).
fn inserts(c: &mut Cluster, from: u64, to: u64) {
    let up = live(c);
    for i in from..to {
        let n = up[i as usize % up.len()];
        c.request(n, cmd(9000 + i, 1, n, Op::Insert { key: i, value: i }));
        if i % 6 == 5 {
            c.settle();
        }
    }
    settle(c);
    // A barrier runs once the interval passed, and with it the checkpoints due.
    c.tick(150);
    settle(c);
}

#[test]
fn replicas_checkpoint_at_cuts_truncate_and_restart_from_the_tail() {
    let mut c = cluster_with(0, UnsafeBugs::default(), 20);
    inserts(&mut c, 1, 150);
    for &n in &NODES {
        assert!(c.node(n).checkpoint_durable() > 0, "node {n} checkpointed");
        assert!(
            c.node(n)
                .ordering_report()
                .acceptor
                .expect("an acceptor")
                .truncated_below
                > 1,
            "node {n}'s serializers truncated"
        );
    }
    let mut at: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    for (&n, bytes) in &c.checkpoints {
        let r = partita_smr::service::<partita_btree::BPlusTree>()
            .restore(bytes, c.setup.cluster_id, n)
            .expect("a checkpoint of this cluster");
        at.entry(r.last_instance()).or_default().push(r.digest());
    }
    assert!(at.values().all(|d| same(d)), "{at:?}");
    let log = &c.logs[&2];
    assert!(
        (log.records.len() as u64) < log.written / 2,
        "{} of {} records kept",
        log.records.len(),
        log.written
    );
    let ckpt = c.node(2).checkpoint_durable();
    c.crash(2);
    c.start(2);
    assert_eq!(c.replica(2).last_instance(), ckpt, "restored, not replayed");
    settle(&mut c);
    inserts(&mut c, 150, 190);
    assert!(same(&digests(&c)), "{:?}", digests(&c));
    let executed: Vec<u64> = NODES
        .iter()
        .map(|&n| c.replica(n).last_instance())
        .collect();
    assert!(same(&executed), "{executed:?}");
    assert_eq!(c.replica(1).state().len(), 189);
}

#[test]
fn a_replica_behind_the_truncation_catches_up_by_state_transfer() {
    let mut c = cluster_with(0, UnsafeBugs::default(), 20);
    inserts(&mut c, 1, 30);
    c.crash(3);
    inserts(&mut c, 30, 220);
    c.start(3);
    for _ in 0..40 {
        c.tick(20);
        settle(&mut c);
        if c.counter(3, "state_transfers_completed") > 0 {
            break;
        }
    }
    assert!(
        c.counter(3, "state_transfers_completed") >= 1,
        "node 3 fetched a checkpoint: {:?}",
        c.node(3).counters()
    );
    inserts(&mut c, 220, 240);
    assert!(same(&digests(&c)), "{:?}", digests(&c));
    c.request(3, cmd(5000, 1, 3, Op::Read { key: 7 }));
    settle(&mut c);
    assert_eq!(res(c.replies_of(5000)[0]), OpResult::Value(Some(7)));
}

#[test]
fn a_serializer_leader_crash_and_restart_lose_nothing() {
    let mut c = cluster(30);
    for k in 0..30 {
        let n = NODES[k as usize % 3];
        c.request(n, cmd(50 + k, 1, n, Op::Update { key: k, value: 7 }));
    }
    settle(&mut c);
    // Node 1 (serializer 0's leader) crashes; the others go on: serializer 0 elects
    // another leader among the acceptors and orders what still needs it.
    c.crash(1);
    for k in 0..10 {
        let n = NODES[1 + k as usize % 2];
        c.request(n, cmd(100 + k, 1, n, Op::Update { key: k, value: 8 }));
    }
    for _ in 0..2000 {
        c.tick(1);
        if (100..110).all(|cl| !c.replies_of(cl).is_empty()) {
            break;
        }
    }
    assert!(
        (100..110).all(|cl| !c.replies_of(cl).is_empty()),
        "two replicas of three go on"
    );
    c.start(1);
    settle(&mut c);
    c.tick(200);
    settle(&mut c);
    assert!(same(&digests(&c)), "{:?}", digests(&c));
    for &n in &NODES {
        for k in 0..10 {
            assert_eq!(c.replica(n).state().read(k), Some(8), "node {n} key {k}");
        }
    }
}
