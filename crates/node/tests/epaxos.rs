//! EPaxos in the node core (`partita_node::epaxos`), scripted on the in-memory
//! harness: three nodes, each an EPaxos replica ordering for the common replica (the
//! B+tree, starting with the geo tree's keys), clients at every node. Checked: every
//! request answered once with the B+tree's result, every replica's state the same,
//! NEXT and PREV ordered with the inserts that change their answer, a write
//! resubmitted through another replica executed once (the session table), checkpoints
//! taken at cuts with the same state everywhere, logs truncated below what a majority
//! of checkpoints covers, a replica restarted from its checkpoint replaying only its
//! log's tail, a replica that fell behind the truncation caught up by state transfer,
//! and the planted bugs (the fast path taken although the dependencies differ;
//! truncation above what a majority holds; a checkpoint restored without its
//! exceptions) caught.

use crate::common;

use common::{res, three_region_setup, Cluster, GEO_NODES as NODES};
use partita_btree::{Op, OpResult};
use partita_node::{NodeCore, UnsafeBugs};
use partita_types::{Command, NodeId};

/// A B+tree command of `client` (sequence `seq`) that node `via` answers.
fn cmd(client: u64, seq: u64, via: NodeId, op: Op) -> Command {
    partita_btree::service::command(client, seq, via, &op)
}

/// Three EPaxos replicas with keys `0..keys`, booted until a barrier ran everywhere
/// (a node takes client commands only once ordered time is known); with
/// `checkpoint_every`, replicas checkpoint that often (at the next cut).
fn cluster_with(keys: u64, bugs: UnsafeBugs, checkpoint_every: u64) -> Cluster {
    let mut s = three_region_setup(keys, true);
    s.checkpoint.interval_instances = checkpoint_every;
    s.checkpoint.announce_ticks = 20;
    let mut c = Cluster::new(s, bugs);
    c.checkpointing = checkpoint_every > 0;
    settle_ep(&mut c);
    c.tick(5);
    settle_ep(&mut c);
    c
}

fn cluster(keys: u64, bugs: UnsafeBugs) -> Cluster {
    cluster_with(keys, bugs, 0)
}

/// Nothing in flight at `n`'s EPaxos replica: no phase driven, no instance awaited
/// or left to run.
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

fn settle_ep(c: &mut Cluster) {
    for _ in 0..600 {
        c.tick(1);
        if c.nodes
            .iter()
            .all(|(id, n)| c.down.contains(id) || quiet(n))
            && c.msgs.is_empty()
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
    let mut sent = 0;
    for round in 0..5u64 {
        for &n in &NODES {
            for k in 0..6u64 {
                seq += 1;
                sent += 1;
                let op = Op::Update {
                    key: k,
                    value: round * 1000 + n as u64,
                };
                c.request(n, cmd(100 + n as u64 * 10 + k, seq, n, op));
            }
        }
        c.settle();
    }
    settle_ep(&mut c);
    for &n in &NODES {
        for k in 0..10u64 {
            seq += 1;
            sent += 3;
            let insert = Op::Insert {
                key: 100 + k * 4 + n as u64,
                value: k,
            };
            // One command per client: a client has one outstanding at a time.
            let next = Op::Next { key: 100 + k * 4 };
            let prev = Op::Prev { key: 104 + k * 4 };
            c.request(n, cmd(20_000 + seq, 1, n, insert));
            c.request(n, cmd(30_000 + seq, 1, n, next));
            c.request(n, cmd(40_000 + seq, 1, n, prev));
        }
    }
    settle_ep(&mut c);
    let replies: Vec<_> = c.replies().cloned().collect();
    assert_eq!(replies.len() as u64, sent, "every request answered once");
    let d = digests(&c);
    assert!(same(&d), "digests differ: {d:?}");
    let executed: Vec<u64> = NODES
        .iter()
        .map(|&n| c.replica(n).stats().commands_executed)
        .collect();
    assert!(
        same(&executed),
        "every replica ran every write: {executed:?}"
    );
    for &n in &NODES {
        assert_eq!(c.replica(n).state().len(), 60, "30 keys and 30 inserts");
    }
    // Each NEXT saw a key of its own gap, or none yet (then the first key after it).
    for r in replies
        .iter()
        .filter(|r| (30_000..40_000).contains(&r.client))
    {
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
    c.request(1, cmd(1, 1, 1, Op::Insert { key: 20, value: 1 }));
    c.request(2, cmd(2, 1, 2, Op::Next { key: 9 }));
    c.request(3, cmd(3, 1, 3, Op::Insert { key: 15, value: 1 }));
    settle_ep(&mut c);
    c.request(2, cmd(2, 2, 2, Op::Prev { key: 16 }));
    c.request(1, cmd(1, 2, 1, Op::Insert { key: 16, value: 1 }));
    c.request(3, cmd(3, 2, 3, Op::Next { key: 15 }));
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

/// Exactly once comes from the common session table: a client's mutations share its
/// session object, so every replica runs them in one order and recognises a late copy.
#[test]
fn a_write_resubmitted_through_another_replica_runs_once() {
    let mut c = cluster(30, UnsafeBugs::default());
    c.request(1, cmd(9, 1, 1, Op::Update { key: 5, value: 1 }));
    c.request(3, cmd(9, 1, 3, Op::Update { key: 5, value: 1 }));
    settle_ep(&mut c);
    c.request(2, cmd(8, 1, 2, Op::Update { key: 5, value: 2 }));
    settle_ep(&mut c);
    // A third copy, after another client's overwrite: node 3 ran the command, so it
    // answers from the session's cached reply at once, without ordering it again.
    c.request(3, cmd(9, 1, 3, Op::Update { key: 5, value: 1 }));
    settle_ep(&mut c);
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
        assert_eq!(
            res(r),
            OpResult::Old(Some(5)),
            "with the first copy's result"
        );
    }
    c.request(1, cmd(7, 1, 1, Op::Read { key: 5 }));
    settle_ep(&mut c);
    assert_eq!(res(c.replies_of(7)[0]), OpResult::Value(Some(2)));
}

/// A session open conflicts with everything: it runs at the same instance at every
/// replica, so the session it names is known alike everywhere, and a command naming
/// it is admitted wherever it is proposed.
#[test]
fn a_session_opened_at_one_replica_is_the_same_session_at_every_replica() {
    let mut c = cluster(10, UnsafeBugs::default());
    c.request(1, Command::open(77, 1, 1));
    settle_ep(&mut c);
    let open = c.replies_of(77)[0].clone();
    let payload = open.result.as_ref().expect("the open ran");
    let opened_at = partita_types::session_of_reply(payload).expect("a session reply");
    for &n in &NODES {
        let s = c
            .replica(n)
            .sessions()
            .get(77)
            .expect("the session is known everywhere")
            .opened_at;
        assert_eq!(s, opened_at, "node {n}");
    }
    let mut w = cmd(77, 1, 3, Op::Update { key: 1, value: 5 });
    w.session = opened_at;
    c.request(3, w);
    settle_ep(&mut c);
    assert_eq!(res(c.replies_of(77)[1]), OpResult::Old(Some(1)));
    assert!(same(&digests(&c)));
}

/// Writes at every replica, checkpoints at cuts, truncation: returns the cluster.
fn load(c: &mut Cluster, from: u64, to: u64) {
    let up = live(c);
    for i in from..to {
        let n = up[i as usize % up.len()];
        c.request(
            n,
            cmd(
                1000 + i % 7,
                i,
                n,
                Op::Update {
                    key: i % 20,
                    value: i,
                },
            ),
        );
        if i % 6 == 5 {
            c.settle();
        }
    }
    settle_ep(c);
    // A barrier runs once the interval passed, and with it the checkpoints due.
    c.tick(150);
    settle_ep(c);
}

#[test]
fn replicas_checkpoint_at_cuts_truncate_and_restart_from_the_tail() {
    let mut c = cluster_with(20, UnsafeBugs::default(), 20);
    load(&mut c, 1, 120);
    for &n in &NODES {
        let node = c.node(n);
        assert!(node.checkpoint_durable() > 0, "node {n} checkpointed");
        assert!(c.counter(n, "epaxos_truncations") > 0, "node {n} truncated");
    }
    // Checkpoints at one cut hold one state: compare those taken at the same count.
    let mut at: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    for (&n, bytes) in &c.checkpoints {
        let r = partita_smr::service::<partita_btree::BPlusTree>()
            .restore(bytes, c.setup.cluster_id, n)
            .expect("a checkpoint of this cluster");
        at.entry(r.last_instance()).or_default().push(r.digest());
    }
    assert!(at.values().all(|d| same(d)), "{at:?}");
    // The logs were cut back: far fewer records than were written.
    let log = &c.logs[&2];
    assert!(
        (log.records.len() as u64) < log.written / 2,
        "{} of {} records kept",
        log.records.len(),
        log.written
    );
    // Node 2 restarts: its checkpoint, then the tail of its log.
    let ckpt = c.node(2).checkpoint_durable();
    c.crash(2);
    c.start(2);
    assert_eq!(c.replica(2).last_instance(), ckpt, "restored, not replayed");
    settle_ep(&mut c);
    load(&mut c, 120, 160);
    assert!(same(&digests(&c)), "{:?}", digests(&c));
    let executed: Vec<u64> = NODES
        .iter()
        .map(|&n| c.replica(n).last_instance())
        .collect();
    assert!(same(&executed), "{executed:?}");
}

#[test]
fn a_replica_behind_the_truncation_catches_up_by_state_transfer() {
    let mut c = cluster_with(20, UnsafeBugs::default(), 20);
    load(&mut c, 1, 30);
    // Node 3 stops; the others go on, checkpoint at cuts, and truncate what the two
    // of them (a majority of three) cover.
    c.crash(3);
    load(&mut c, 30, 200);
    assert!(c.counter(1, "epaxos_truncations") > 0);
    c.start(3);
    for _ in 0..40 {
        c.tick(20);
        settle_ep(&mut c);
        if c.counter(3, "state_transfers_completed") > 0 {
            break;
        }
    }
    assert!(
        c.counter(3, "state_transfers_completed") >= 1,
        "node 3 fetched a checkpoint: {:?}",
        c.node(3).counters()
    );
    load(&mut c, 200, 230);
    assert!(same(&digests(&c)), "{:?}", digests(&c));
    // It answers again, with the others' state.
    c.request(3, cmd(5000, 1, 3, Op::Read { key: 7 }));
    settle_ep(&mut c);
    let want = c.replica(1).state().read(7);
    assert_eq!(res(c.replies_of(5000)[0]), OpResult::Value(want));
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
            let op = Op::Update {
                key: round % 2,
                value: seq,
            };
            c.request(n, cmd(600 + seq, 1, n, op));
        }
        c.settle();
    }
    settle_ep(&mut c);
    same(&digests(&c))
}

#[test]
fn contended_writes_leave_every_replica_with_one_state() {
    assert!(replicas_agree_under_contention(false));
}

#[test]
fn control_the_fast_path_taken_although_dependencies_differ_diverges() {
    assert!(
        !replicas_agree_under_contention(true),
        "the planted bug must make replicas execute conflicting writes in different orders"
    );
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
    settle_ep(c);
    c.tick(150);
    settle_ep(c);
}

/// Node 2 restarts from its checkpoint while inserts go on: do the replicas end alike?
fn restart_keeps_replicas_alike(bugs: UnsafeBugs) -> bool {
    let mut c = cluster_with(0, bugs, 20);
    inserts(&mut c, 1, 80);
    assert!(c.node(2).checkpoint_durable() > 0);
    c.crash(2);
    inserts(&mut c, 80, 100);
    c.start(2);
    settle_ep(&mut c);
    inserts(&mut c, 100, 140);
    same(&digests(&c))
}

#[test]
fn control_a_checkpoint_restored_at_the_wrong_frontier_diverges() {
    assert!(restart_keeps_replicas_alike(UnsafeBugs::default()));
    let mut bugs = UnsafeBugs::default();
    bugs.enable("restore-wrong-frontier").unwrap();
    assert!(
        !restart_keeps_replicas_alike(bugs),
        "a replica that counts the command after its checkpoint's cut as run lacks it"
    );
}

/// Node 1's checkpoint writes stall (its newest durable checkpoint falls behind);
/// node 3 is down; node 2 goes on checkpointing. Then node 2 is lost for good (f = 1
/// of three: its disk with it) and nodes 1 and 3 restart. Is every acknowledged
/// insert still there? Returns what nodes 1 and 3 answer for the last key node 2
/// alone could have covered.
fn lost_replica_keeps_every_write(bugs: UnsafeBugs) -> Option<OpResult> {
    let mut c = cluster_with(0, bugs, 20);
    inserts(&mut c, 1, 60);
    c.crash(3);
    c.stalled_checkpoints.insert(1);
    inserts(&mut c, 60, 160);
    assert!(c.node(2).checkpoint_durable() > c.node(1).checkpoint_durable());
    c.crash(2);
    c.crash(1);
    c.stalled_checkpoints.clear();
    c.start(1);
    c.start(3);
    for _ in 0..20 {
        c.tick(50);
    }
    c.request(1, cmd(77_000, 1, 1, Op::Read { key: 159 }));
    for _ in 0..40 {
        c.tick(50);
    }
    c.replies_of(77_000).first().map(|r| res(r))
}

#[test]
fn control_truncation_above_what_a_majority_covers_loses_writes() {
    assert_eq!(
        lost_replica_keeps_every_write(UnsafeBugs::default()),
        Some(OpResult::Value(Some(159))),
        "with f = 1 of three, losing one replica loses no acknowledged write"
    );
    let mut bugs = UnsafeBugs::default();
    bugs.enable("truncate-above-majority").unwrap();
    let got = lost_replica_keeps_every_write(bugs);
    assert_ne!(
        got,
        Some(OpResult::Value(Some(159))),
        "the acknowledged insert lived only in the lost replica's checkpoint"
    );
}

/// Commands that find a replica's window full wait, and leave together in one
/// instance when a commit frees a place: one value at every replica, its commands run
/// in arrival order; beyond `pending_commands_max` waiting, a command is refused.
#[test]
fn a_full_window_packs_what_waits_into_one_instance() {
    let mut s = three_region_setup(30, true);
    if let partita_node::OrderingSetup::Epaxos(g) = &mut s.ordering {
        g.epaxos_window = 1;
    }
    s.coordinator_config.pending_commands_max = 8;
    let mut c = Cluster::new(s, UnsafeBugs::default());
    settle_ep(&mut c);
    c.tick(5);
    settle_ep(&mut c);
    let (batches, commands) = (
        c.counter(1, "epaxos_batches_proposed"),
        c.counter(1, "epaxos_commands_proposed"),
    );
    // Ten updates of key 3 by ten clients at once: the first leaves alone, eight wait,
    // the tenth finds the queue full.
    for k in 0..10u64 {
        let op = Op::Update {
            key: 3,
            value: 1000 + k,
        };
        c.request(1, cmd(500 + k, 1, 1, op));
    }
    assert_eq!(c.counter(1, "requests_refused"), 1, "the tenth is refused");
    settle_ep(&mut c);
    assert_eq!(c.counter(1, "epaxos_batches_proposed") - batches, 2);
    assert_eq!(c.counter(1, "epaxos_commands_proposed") - commands, 9);
    // Each update saw the one before it (the first, the key's own value).
    for k in 0..9u64 {
        let r = c.replies_of(500 + k);
        assert_eq!(r.len(), 1, "client {} answered once", 500 + k);
        let before = if k == 0 { 3 } else { 1000 + k - 1 };
        assert_eq!(res(r[0]), OpResult::Old(Some(before)), "update {k}");
    }
    assert!(c.replies_of(509).is_empty(), "the refused one ran nowhere");
    // The batch ran in arrival order everywhere: the last waiting update's value stays.
    let read = Op::Read { key: 3 };
    for &n in &NODES {
        c.submit(n, cmd(900 + n as u64, 1, n, read.clone()));
        settle_ep(&mut c);
        let r = c.replies_of(900 + n as u64);
        assert_eq!(res(r[0]), OpResult::Value(Some(1008)), "node {n}");
    }
    assert!(same(&digests(&c)), "replicas agree");
}
