//! Replicas added and removed at run time (`partita member`), scripted on node cores
//! wired by the in-memory network and disk of `common`: a replica joins a cluster
//! whose acceptors truncated their logs, catches up by state transfer as a learner
//! that refuses clients, promotes itself once caught up and then serves; a replica is
//! removed and stops, and truncation goes on without it; changes that cannot be are
//! refused with etcd's reasons; a restarted replica takes the replicas from its
//! checkpoint, not from its setup.

use crate::common;

use common::{insert, setup, Cluster};
use partita_consensus::Protocol;
use partita_node::{CheckpointConfig, UnsafeBugs};
use partita_types::members::MemberChange;
use partita_types::NodeId;

const INTERVAL: u64 = 10;

fn cluster(protocol: Protocol) -> Cluster {
    let mut s = setup(protocol, &[4, 5]);
    s.coordinator_config.phase1_range_instances = 40;
    s.learner_config.learn_batch_instances_max = 8;
    s.checkpoint = CheckpointConfig {
        interval_instances: INTERVAL,
        announce_ticks: 5,
        chunk_bytes: 256,
        transfer_window_chunks: 3,
        transfer_timeout_ticks: 10,
        ..CheckpointConfig::default()
    };
    let mut c = Cluster::new(s, UnsafeBugs::default());
    c.checkpointing = true;
    c.tick(3);
    c
}

/// Inserts `seqs`, answered by `reply_to`, each through the leader, then a few ticks.
fn load(c: &mut Cluster, seqs: std::ops::RangeInclusive<u64>, reply_to: NodeId) {
    for seq in seqs {
        c.submit(1, insert(seq, reply_to));
    }
    c.tick(12);
}

/// Ask `via` for `change`; tick until it answers. Returns the outcome.
fn member(c: &mut Cluster, via: NodeId, change: MemberChange) -> Result<u64, String> {
    c.member(via, change)
}

fn truncated_below(c: &Cluster, acceptor: NodeId) -> u64 {
    c.node(acceptor)
        .ordering_report()
        .acceptor
        .expect("an acceptor")
        .truncated_below
}

fn add(node: NodeId) -> MemberChange {
    MemberChange::Add {
        node,
        addr: format!("127.0.0.1:{}", 7100 + node),
        partition: 0,
        promote: true,
    }
}

fn join_serve_and_leave(protocol: Protocol) {
    let mut c = cluster(protocol);
    load(&mut c, 1..=40, 4);
    assert!(
        truncated_below(&c, 2) > 1,
        "{protocol}: acceptors truncated (so the new replica needs a state transfer)"
    );

    // Node 6 runs before anything adds it: nobody talks to it, and it refuses clients.
    c.joining.insert(6);
    c.start(6);
    c.tick(10);
    c.request(6, insert(41, 6));
    c.settle();
    let (_, _, _, why) = c.refused.last().expect("refused");
    assert!(why.contains("not a replica of this cluster"), "{why}");
    assert_eq!(c.replica(6).last_instance(), 0);

    assert_eq!(
        member(&mut c, 4, add(6)),
        Ok(1),
        "{protocol}: the add applied"
    );
    // While it catches up the cluster keeps taking commands.
    load(&mut c, 42..=60, 4);
    tick_until(&mut c, 400, "node 6 never promoted itself", |c| {
        c.node(6).serves()
    });
    assert!(
        c.counter(6, "state_transfers_completed") >= 1,
        "{protocol}: node 6 caught up by state transfer"
    );
    assert_eq!(c.counter(6, "member_promotions_proposed"), 1);
    assert_eq!(c.node(4).members().epoch, 2, "add, then promote");

    // Node 6 serves: it answers its own clients, and holds what the others hold.
    load(&mut c, 61..=70, 6);
    assert!(
        (61..=70).all(|s| c.replies_to(s).iter().any(|r| r.client == 77)),
        "{protocol}: node 6 answered its clients"
    );
    assert!(c.got.iter().any(|(n, _)| *n == 6));
    c.converge(100);
    let d4 = c.replica(4).digest();
    assert_eq!(
        c.replica(6).digest(),
        d4,
        "{protocol}: node 6 holds the state"
    );
    assert_eq!(c.replica(6).last_instance(), c.replica(4).last_instance());

    // Changes that cannot be are refused, the same at every replica.
    let e = member(&mut c, 4, add(6)).unwrap_err();
    assert!(e.contains("already exists"), "{e}");
    let e = member(&mut c, 4, MemberChange::Remove { node: 2 }).unwrap_err();
    assert!(e.contains("is an acceptor too"), "{e}");
    let e = member(&mut c, 5, MemberChange::Promote { node: 6 }).unwrap_err();
    assert!(e.contains("ask node 6 itself"), "{e}");

    // Node 5 leaves: it stops at its removal, and truncation goes on without it.
    assert_eq!(
        member(&mut c, 4, MemberChange::Remove { node: 5 }),
        Ok(3),
        "{protocol}"
    );
    c.tick(2);
    let at = c.node(5).removed().expect("node 5 knows it was removed");
    c.crash(5);
    let before = truncated_below(&c, 2);
    load(&mut c, 71..=110, 6);
    c.tick(20);
    assert!(
        truncated_below(&c, 2) > before.max(at),
        "{protocol}: acceptors truncate below what replicas 4 and 6 checkpointed \
         ({before} before, {} after)",
        truncated_below(&c, 2)
    );
    let e = member(&mut c, 4, add(5)).unwrap_err();
    assert!(e.contains("removed before"), "{e}");

    // A restarted replica takes the replicas from its checkpoint, not its setup.
    c.crash(4);
    c.start(4);
    c.tick(30);
    let m = c.node(4).members();
    assert_eq!(
        m.epoch,
        5 - 2,
        "{protocol}: add, promote, remove (refusals change nothing)"
    );
    assert!(m.serves(&[4, 5], 6) && !m.is_replica(&[4, 5], 5));
    load(&mut c, 111..=115, 4);
    c.converge(100);
    assert_eq!(c.replica(4).digest(), c.replica(6).digest());
}

#[test]
fn multipaxos_replica_joins_serves_and_another_leaves() {
    join_serve_and_leave(Protocol::MultiPaxos);
}

#[test]
fn ringpaxos_replica_joins_serves_and_another_leaves() {
    join_serve_and_leave(Protocol::RingPaxos);
}

fn add_acceptor(node: NodeId) -> MemberChange {
    MemberChange::AddAcceptor {
        node,
        addr: format!("127.0.0.1:{}", 7100 + node),
    }
}

/// The ordering epoch node `id` knows (its replica's, or what a replica told it).
fn ordering_epoch(c: &Cluster, id: NodeId) -> u64 {
    c.node(id).members().ordering_epoch
}

/// Inserts `seqs` through replica `node`, which answers them, then a few ticks.
fn via(c: &mut Cluster, seqs: std::ops::RangeInclusive<u64>, node: NodeId) {
    for seq in seqs {
        c.submit(node, insert(seq, node));
    }
    c.tick(12);
}

/// Tick until `done`; fail with `what` after `ticks_max` ticks.
fn tick_until(c: &mut Cluster, ticks_max: usize, what: &str, done: impl Fn(&Cluster) -> bool) {
    let mut ticks = 0;
    while !done(c) {
        c.tick(1);
        ticks += 1;
        assert!(ticks < ticks_max, "{}: {what}", c.protocol());
    }
}

/// Every one of `seqs` answered once at least, and replicas 4 and 5 agree.
fn all_answered(c: &mut Cluster, seqs: std::ops::RangeInclusive<u64>, what: &str) {
    let mut ticks = 0;
    while !seqs.clone().all(|s| c.answered(s)) {
        c.tick(1);
        ticks += 1;
        let missing: Vec<u64> = seqs.clone().filter(|&s| !c.answered(s)).collect();
        assert!(ticks < 600, "{what}: never answered {missing:?}");
    }
}

/// Acceptors grow from 3 to 5 under load, two of the old ones crash and are replaced
/// (removed), a survivor restarts and learns the epoch from the replicas, every node
/// stops and the acceptors restart alone (they take the epoch from their logs), and a
/// removed acceptor that restarts learns it was removed and stops. Every command is
/// answered, the replicas agree, and no decision conflicts.
fn acceptors_grow_and_replace(protocol: Protocol) {
    let mut c = cluster(protocol);
    load(&mut c, 1..=20, 4);
    for id in [6, 7] {
        c.joining_acceptors.insert(id);
        c.start(id);
    }
    c.tick(5);
    assert!(
        c.node(6).ordering_report().acceptor.is_none(),
        "{protocol}: a joining acceptor votes only once added"
    );
    assert_eq!(member(&mut c, 4, add_acceptor(6)), Ok(1), "{protocol}");
    // Commands keep flowing while the second change is ordered.
    for seq in 21..=30 {
        c.submit(1, insert(seq, 4));
    }
    assert_eq!(member(&mut c, 5, add_acceptor(7)), Ok(2), "{protocol}");
    load(&mut c, 31..=40, 4);
    all_answered(&mut c, 1..=40, "five acceptors");
    c.tick(10);
    for id in [1, 2, 3, 4, 5, 6, 7] {
        assert_eq!(
            ordering_epoch(&c, id),
            2,
            "{protocol}: node {id} knows epoch 2"
        );
    }
    // The old leader led the new epochs on (one start per epoch): no other acceptor
    // campaigned.
    let campaigns: u64 = [2, 3, 6, 7]
        .iter()
        .map(|&n| c.counter(n, "campaigns"))
        .sum();
    assert_eq!(
        campaigns, 0,
        "{protocol}: an acceptor change is no election"
    );
    assert_eq!(c.counter(1, "campaigns"), 2, "{protocol}");
    let leaders: Vec<_> = c.nodes.values().filter_map(|n| n.leads()).collect();
    assert!(
        leaders.len() == 1 && leaders[0].epoch() == 2,
        "{protocol}: one leader, with a ballot of epoch 2: {leaders:?}"
    );
    // (Its log may be truncated whole by now: replicas checkpoint at every change.)
    let votes = c.nodes[&6]
        .paxos_roles()
        .and_then(|p| p.acceptor())
        .map_or(0, |a| a.votes_cast());
    assert!(
        c.counter(6, "acceptor_joined") == 1 && votes > 0,
        "{protocol}: node 6 votes"
    );

    // Two of the original acceptors (the leader among them) die: 3 of 5 go on.
    c.crash(1);
    c.crash(2);
    for seq in 41..=50 {
        c.submit(4, insert(seq, 4));
    }
    all_answered(&mut c, 41..=50, "after two acceptors died");
    // ... and are replaced: removed, the cluster is back to three acceptors.
    for node in [1, 2] {
        assert!(
            member(&mut c, 4, MemberChange::RemoveAcceptor { node }).is_ok(),
            "{protocol}: remove acceptor {node}"
        );
    }
    via(&mut c, 51..=60, 4);
    all_answered(&mut c, 51..=60, "three acceptors again");
    assert_eq!(ordering_epoch(&c, 4), 4);
    let leaders: Vec<_> = c.nodes.values().filter_map(|n| n.leads()).collect();
    assert!(
        leaders.len() == 1 && leaders[0].epoch() == 4,
        "{protocol}: {leaders:?}"
    );
    let e = member(&mut c, 4, add_acceptor(1)).unwrap_err();
    assert!(e.contains("removed before"), "{e}");

    // A survivor restarts: its file names the old acceptors, the replicas tell it the
    // new ones, and it votes again (the other two alone would be a majority too, so
    // crash one of them after it is back).
    c.crash(3);
    c.start(3);
    c.tick(30);
    assert_eq!(
        ordering_epoch(&c, 3),
        4,
        "{protocol}: node 3 learned epoch 4"
    );
    c.crash(7);
    via(&mut c, 61..=70, 4);
    all_answered(&mut c, 61..=70, "with node 3 restarted and node 7 down");
    c.start(7);

    // Every node stops; the acceptors restart while the replicas are down, so nobody
    // can tell them the configuration: they take it from their own logs, and elect a
    // leader of epoch 4 among themselves.
    for id in [3, 4, 5, 6, 7] {
        c.crash(id);
    }
    for id in [3, 6, 7] {
        c.start(id);
        assert_eq!(
            ordering_epoch(&c, id),
            4,
            "{protocol}: node {id} recorded the configuration in its log"
        );
    }
    tick_until(&mut c, 300, "no leader of epoch 4 among 3, 6, 7", |c| {
        c.nodes
            .values()
            .any(|n| n.leads().is_some_and(|b| b.epoch() == 4))
    });
    c.start(4);
    c.start(5);
    via(&mut c, 71..=80, 4);
    all_answered(&mut c, 71..=80, "after a restart of everything");

    // A removed acceptor that restarts learns it was removed, and stops.
    c.start(1);
    c.tick(60);
    assert!(
        c.node(1).removed().is_some(),
        "{protocol}: node 1 learned it was removed"
    );
    c.converge(200);
    c.digests_agree();
    for id in [3, 4, 5, 6, 7] {
        assert_eq!(
            c.counter(id, partita_consensus::CONFLICTING_DECISION),
            0,
            "{protocol}: node {id}"
        );
    }
}

#[test]
fn multipaxos_acceptors_grow_from_three_to_five_and_dead_ones_are_replaced() {
    acceptors_grow_and_replace(Protocol::MultiPaxos);
}

#[test]
fn ringpaxos_acceptors_grow_from_three_to_five_and_dead_ones_are_replaced() {
    acceptors_grow_and_replace(Protocol::RingPaxos);
}

/// Acceptors 6, 7 and 8 join and are added, then 1, 2 and 3 removed, through replica 4.
fn replace_every_acceptor(c: &mut Cluster, protocol: Protocol) {
    for id in [6, 7, 8] {
        c.joining_acceptors.insert(id);
        c.start(id);
        assert!(member(c, 4, add_acceptor(id)).is_ok(), "{protocol}");
    }
    for node in [1, 2, 3] {
        assert!(
            member(c, 4, MemberChange::RemoveAcceptor { node }).is_ok(),
            "{protocol}: remove acceptor {node}"
        );
    }
}

/// Every acceptor is replaced (6, 7 and 8 added, 1, 2 and 3 removed) while no replica
/// checkpoint is durable (both replicas' disks stall them). The removed acceptors hold
/// the only copies of the decisions before the changes, so they keep running (no
/// replica tells them of their removal before a checkpoint covers it). Both replicas
/// then restart from nothing: their setup names only the old acceptors, which tell
/// them the configuration (so they take what the new ones send), and they replay
/// everything. Once checkpoints are written again, the removed acceptors hear of
/// their removal and stop.
fn acceptors_keep_the_history_until_a_checkpoint_covers_their_removal(protocol: Protocol) {
    let mut c = cluster(protocol);
    c.stalled_checkpoints.extend([4, 5]);
    load(&mut c, 1..=20, 4);
    replace_every_acceptor(&mut c, protocol);
    via(&mut c, 21..=30, 4);
    all_answered(&mut c, 21..=30, "acceptors 6, 7 and 8");
    c.tick(30);
    for id in [1, 2, 3] {
        assert!(
            c.node(id).removed().is_none(),
            "{protocol}: acceptor {id} stopped while no checkpoint covers its removal"
        );
    }

    // The replicas lose everything and restart knowing only acceptors 1, 2 and 3.
    for id in [4, 5] {
        c.crash(id);
        c.logs.remove(&id);
        c.checkpoints.remove(&id);
    }
    for id in [4, 5] {
        c.start(id);
    }
    tick_until(
        &mut c,
        600,
        "the restarted replicas never learned the acceptors",
        |c| [4, 5].iter().all(|&r| ordering_epoch(c, r) >= 6) && c.replica(4).last_instance() > 0,
    );
    c.converge(600);
    via(&mut c, 31..=40, 4);
    all_answered(&mut c, 31..=40, "after the replicas replayed everything");
    c.converge(200);
    c.digests_agree();
    let tree = c.replica(4).state();
    for seq in 1..=40 {
        assert_eq!(tree.read(seq), Some(seq * 10), "{protocol}: key {seq}");
    }

    // Checkpoints are written again (the replicas restart on disks that work): one
    // covers the changes, and the removed acceptors are told, and stop.
    c.stalled_checkpoints.clear();
    for id in [4, 5] {
        c.crash(id);
        c.start(id);
    }
    c.converge(600);
    via(&mut c, 41..=50, 4);
    all_answered(&mut c, 41..=50, "with checkpoints again");
    let mut ticks = 0;
    while [1, 2, 3].iter().any(|&a| c.node(a).removed().is_none()) {
        c.tick(1);
        ticks += 1;
        assert!(
            ticks < 600,
            "{protocol}: removed acceptors never stopped (replica 4's durable checkpoint: {})",
            c.node(4).checkpoint_durable()
        );
    }
    assert!(c.node(4).checkpoint_durable() >= c.node(4).members().acceptor_change_at());
}

#[test]
fn multipaxos_acceptors_keep_the_history_until_a_checkpoint_covers_their_removal() {
    acceptors_keep_the_history_until_a_checkpoint_covers_their_removal(Protocol::MultiPaxos);
}

#[test]
fn ringpaxos_acceptors_keep_the_history_until_a_checkpoint_covers_their_removal() {
    acceptors_keep_the_history_until_a_checkpoint_covers_their_removal(Protocol::RingPaxos);
}

/// A partitioned cluster on one stream: node 6, whose file entry says partition 0, is
/// added to partition 1 by an `Add` that skipped the operator tools' check. It stops
/// with the reason (it would otherwise learn partition 1's commands onto partition
/// 0's state and serve once caught up); the other replicas go on, and it is removed.
#[test]
fn a_replica_added_to_another_partition_than_its_entry_stops() {
    let mut s = setup(Protocol::RingPaxos, &[4, 5]);
    s.membership.partitions = partita_types::PartitionLayout {
        map: partita_types::PartitionMap::new(2, 99).expect("a valid map"),
        replicas: vec![vec![4], vec![5]],
    };
    let mut c = Cluster::new(s, UnsafeBugs::default());
    c.tick(3);
    c.joining.insert(6);
    c.joining_partitions.insert(6, 0);
    c.start(6);
    c.tick(5);
    let add = MemberChange::Add {
        node: 6,
        addr: "127.0.0.1:7106".into(),
        partition: 1,
        promote: true,
    };
    assert_eq!(member(&mut c, 4, add), Ok(1));
    c.tick(20);
    assert!(c.node(6).removed().is_some(), "node 6 stopped");
    let why = c.node(6).stop_reason().expect("a reason").to_string();
    assert!(
        why.contains("added to partition 1") && why.contains("says partition 0"),
        "{why}"
    );
    assert!(!c.node(6).serves());
    assert!(c.node(5).members().is_learner(6));
    assert_eq!(member(&mut c, 5, MemberChange::Remove { node: 6 }), Ok(2));
}

/// A node that is a replica and an acceptor (node 3) keeps its acceptor, in the epoch
/// before, after a change removes it, until its replica's durable checkpoint covers
/// the change: its log may hold the only copies of the decisions below it. Here the
/// acceptors are all replaced while both replicas' checkpoint writes stall, the other
/// removed acceptors' logs are lost, and replica 4 restarts from nothing: it replays
/// everything from node 3's retiring acceptor. Node 3, removed as a replica too,
/// keeps running until its checkpoint is written, then stops.
fn a_replicas_acceptor_retires_once_a_checkpoint_covers_its_removal(protocol: Protocol) {
    let mut s = setup(protocol, &[3, 4]);
    s.checkpoint = CheckpointConfig {
        interval_instances: INTERVAL,
        announce_ticks: 5,
        ..CheckpointConfig::default()
    };
    let mut c = Cluster::new(s, UnsafeBugs::default());
    c.checkpointing = true;
    c.tick(3);
    c.stalled_checkpoints.extend([3, 4]);
    via(&mut c, 1..=20, 4);
    all_answered(&mut c, 1..=20, "the first inserts");
    replace_every_acceptor(&mut c, protocol);
    assert_eq!(c.counter(3, "acceptor_retiring"), 1, "{protocol}");
    assert!(c.node(3).paxos_roles().unwrap().acceptor().is_some());
    assert!(member(&mut c, 4, MemberChange::Remove { node: 3 }).is_ok());
    via(&mut c, 21..=30, 4);
    all_answered(&mut c, 21..=30, "acceptors 6, 7 and 8");
    c.tick(20);
    assert!(
        c.node(3).removed().is_none(),
        "{protocol}: node 3 stopped while no checkpoint covers its acceptor's removal"
    );

    // Acceptors 1 and 2 are lost with their logs; replica 4 loses everything.
    for id in [1, 2, 4] {
        c.crash(id);
        c.logs.remove(&id);
        c.checkpoints.remove(&id);
    }
    c.start(4);
    tick_until(&mut c, 600, "replica 4 never replayed the history", |c| {
        c.replica(4).last_instance() > 0 && ordering_epoch(c, 4) >= 6
    });
    via(&mut c, 31..=35, 4);
    all_answered(&mut c, 31..=35, "after replica 4 replayed everything");
    let tree = c.replica(4).state();
    for seq in 1..=35 {
        assert_eq!(tree.read(seq), Some(seq * 10), "{protocol}: key {seq}");
    }

    // Replica 4's disk works again (a stalled write never completes: it restarts,
    // and replays from node 3 again). It writes a checkpoint that covers the changes
    // and tells node 3, whose own checkpoint write still stalls, that it was removed:
    // node 3's acceptor retires and it stops.
    c.stalled_checkpoints.remove(&4);
    c.crash(4);
    c.start(4);
    assert!(
        c.node(3).removed().is_none(),
        "node 3 stopped before it was told"
    );
    tick_until(
        &mut c,
        600,
        "replica 4 never replayed the history again",
        |c| c.replica(4).last_instance() > 0 && ordering_epoch(c, 4) >= 6,
    );
    via(&mut c, 36..=50, 4);
    all_answered(&mut c, 36..=50, "with checkpoints again");
    tick_until(&mut c, 600, "node 3 never stopped", |c| {
        c.node(3).removed().is_some()
    });
    assert_eq!(c.counter(3, "acceptor_retired"), 1, "{protocol}");
}

#[test]
fn multipaxos_a_replicas_acceptor_retires_once_a_checkpoint_covers_its_removal() {
    a_replicas_acceptor_retires_once_a_checkpoint_covers_its_removal(Protocol::MultiPaxos);
}

#[test]
fn ringpaxos_a_replicas_acceptor_retires_once_a_checkpoint_covers_its_removal() {
    a_replicas_acceptor_retires_once_a_checkpoint_covers_its_removal(Protocol::RingPaxos);
}
