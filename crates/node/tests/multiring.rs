//! Multi-Ring Paxos with state partitioning, scripted on node cores (the harness in
//! `common`): two partitions, a ring each and a ring that spans both, every replica
//! merging only the rings of its own partition (paper 002 §V-B; paper 003 §2.2).
//!
//! - A partition's replica receives nothing of the other partition's ring: no message
//!   of that ring is ever sent to it, and it has no learner there.
//! - A command for both partitions, and a session open, are named alike at both
//!   partitions (what a client matches their replies by), though the partitions
//!   number their deliveries differently.
//! - The merged stream's time moves with the spanning ring's values only, so both
//!   partitions expire sessions at the same points of the commands they share.
//! - A command for both partitions runs at neither until both merges reached it
//!   (signals, as S-SMR's).
//! - Each ring's acceptors truncate below what a majority of the ring's own learners
//!   checkpointed (the other partition, which never reports on the ring, holds
//!   nothing back), and a replica restarted from its checkpoint resumes its merge.
//! - A replica joins a partition at run time (the change ordered on the spanning
//!   ring), catches up by state transfer, learns only its partition's rings, serves,
//!   and signals with the other partition; another replica of it leaves; acceptor
//!   changes are refused.

use crate::common;

use common::{res, setup, Cluster};
use partita_btree::{BPlusTree, BatchOp, Op, OpResult};
use partita_consensus::multiring::SkipConfig;
use partita_consensus::{Msg, Protocol};
use partita_node::{CheckpointConfig, MultiRingSetup, OrderingSetup, RingSpec, UnsafeBugs};
use partita_types::{Command, NodeId, PartitionLayout, PartitionMap, Reply};
use std::cell::RefCell;
use std::rc::Rc;

/// Partition 0's replicas, and partition 1's.
const P0: [NodeId; 2] = [4, 5];
const P1: [NodeId; 2] = [6, 7];
/// Ring 1 carries partition 0, ring 2 partition 1, ring 3 both.
const RINGS: [(u32, [NodeId; 3], u64); 3] = [
    (1, [1, 2, 3], 0b01),
    (2, [11, 12, 13], 0b10),
    (3, [21, 22, 23], 0b11),
];
/// Keys below this are partition 0's.
const KEY_SPLIT: u64 = 50;

fn cluster() -> Cluster {
    let replicas: Vec<NodeId> = P0.iter().chain(&P1).copied().collect();
    let mut s = setup(Protocol::RingPaxos, &replicas);
    s.membership.acceptors = RINGS.iter().flat_map(|r| r.1).collect();
    s.membership.partitions = PartitionLayout {
        map: PartitionMap::new(2, 2 * KEY_SPLIT - 1).expect("a valid map"),
        replicas: vec![P0.to_vec(), P1.to_vec()],
    };
    s.ordering = OrderingSetup::MultiRing(MultiRingSetup {
        rings: RINGS
            .iter()
            .map(|&(id, acceptors, groups)| RingSpec {
                id,
                acceptors: acceptors.to_vec(),
                coordinator: acceptors[0],
                groups,
            })
            .collect(),
        m: 1,
        skips: SkipConfig {
            lambda_per_s: 1000,
            delta_ms: 5,
        },
        psmr_threads: 0,
    });
    s.checkpoint = CheckpointConfig {
        interval_instances: 4,
        announce_ticks: 5,
        ..CheckpointConfig::default()
    };
    let mut c = Cluster::new(s, UnsafeBugs::default());
    c.checkpointing = true;
    c.tick(10);
    c
}

/// `client`'s command `seq`, split for the two partitions, answered by replica 4 (and
/// by its rank's replica, 6, at partition 1).
fn command(client: u64, seq: u64, op: &Op) -> Command {
    let map = PartitionMap::new(2, 2 * KEY_SPLIT - 1).unwrap();
    partita_service::envelope::<BPlusTree>(client, seq, 4, op, &map).expect("an envelope")
}

/// The final replies to `client`'s command `seq`, by the replica that sent them.
fn replies(c: &Cluster, client: u64, seq: u64) -> Vec<(NodeId, Reply)> {
    c.got
        .iter()
        .filter_map(|(from, g)| match g {
            common::Got::Final(r) if r.client == client && r.seq == seq => Some((*from, r.clone())),
            _ => None,
        })
        .collect()
}

/// Every ring message sent to a replica, as (ring, replica), recorded as it is sent.
fn watch(c: &mut Cluster) -> Rc<RefCell<Vec<(u32, NodeId)>>> {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let log = seen.clone();
    c.lose(move |_, to, msg| {
        if let Msg::OnRing { ring, .. } = msg {
            if P0.contains(&to) || P1.contains(&to) {
                log.borrow_mut().push((*ring, to));
            }
        }
        false
    });
    seen
}

#[test]
fn a_partition_learns_only_its_own_rings() {
    let mut c = cluster();
    let seen = watch(&mut c);
    // Traffic on every ring: each partition's own commands (more of partition 0's),
    // and a command for both.
    for seq in 1..=6 {
        let key = seq;
        c.submit(1, command(1, seq, &Op::Insert { key, value: seq }));
        if seq <= 2 {
            let key = KEY_SPLIT + seq;
            c.submit(11, command(2, seq, &Op::Insert { key, value: seq }));
        }
        c.tick(3);
    }
    let both = Op::Batch(vec![
        BatchOp::Insert { key: 9, value: 90 },
        BatchOp::Insert {
            key: KEY_SPLIT + 9,
            value: 90,
        },
    ]);
    c.submit(21, command(3, 1, &both));
    c.tick(20);
    for seq in 1..=6 {
        assert_eq!(replies(&c, 1, seq).len(), 1, "partition 0's command {seq}");
    }
    for seq in 1..=2 {
        assert_eq!(replies(&c, 2, seq).len(), 1, "partition 1's command {seq}");
    }
    let seen = seen.borrow();
    let foreign: Vec<_> = seen
        .iter()
        .filter(|(ring, to)| (*ring == 1 && P1.contains(to)) || (*ring == 2 && P0.contains(to)))
        .collect();
    assert!(
        foreign.is_empty(),
        "another partition's ring reached a replica: {foreign:?}"
    );
    for (ring, replicas) in [(1, P0), (2, P1), (3, P0), (3, P1)] {
        for r in replicas {
            assert!(
                seen.contains(&(ring, r)),
                "replica {r} heard nothing of ring {ring}: the check would see nothing"
            );
        }
    }
    for n in c.nodes.keys() {
        assert_eq!(c.counter(*n, "dropped_ring_not_subscribed"), 0, "node {n}");
        assert_eq!(c.counter(*n, "dropped_signal_not_a_peer"), 0, "node {n}");
    }
    // The partitions signalled each other about the ring they share.
    for r in P0.iter().chain(&P1) {
        assert!(c.counter(*r, "merge_signals_received") > 0, "replica {r}");
    }
    // The command for both partitions: one name at both, though each partition
    // numbers its own sequence.
    let got = replies(&c, 3, 1);
    assert_eq!(got.len(), 2, "{got:?}");
    let (a, b) = (&got[0].1, &got[1].1);
    assert_eq!(
        a.instance, b.instance,
        "one name at both partitions: {got:?}"
    );
    assert_eq!(
        [got[0].0, got[1].0]
            .iter()
            .filter(|n| P0.contains(n))
            .count(),
        1,
        "one reply per partition: {got:?}"
    );
    assert_ne!(
        c.replica(4).last_instance(),
        c.replica(6).last_instance(),
        "the partitions' sequences differ in length (else names and instances could agree by chance)"
    );
    assert!(matches!(res(a), OpResult::Batch(_)), "{:?}", res(a));
    c.converge_partitions();
}

#[test]
fn a_session_opens_under_one_name_and_time_moves_with_the_spanning_ring() {
    let mut c = cluster();
    c.submit(21, Command::reopen(9, 0, 4, 0b11));
    c.tick(5);
    let got = replies(&c, 9, 0);
    assert_eq!(got.len(), 2, "{got:?}");
    let opened: Vec<u64> = got
        .iter()
        .map(|(_, r)| {
            let payload = r.result.as_ref().expect("an open succeeds");
            partita_types::session_of_reply(payload).expect("a session reply")
        })
        .collect();
    assert_eq!(opened[0], opened[1], "one session at both partitions");
    assert_eq!(got[0].1.instance, got[1].1.instance);
    assert_eq!(
        opened[0], got[0].1.instance,
        "named after the open's execution"
    );
    for r in P0.iter().chain(&P1) {
        let s = c.replica(*r).sessions().get(9).expect("the session");
        assert_eq!(s.opened_at, opened[0], "replica {r}");
    }
    // Partition 0 alone is busy for a while: its values are newer than the open, but
    // only the spanning ring moves the time its replicas expire sessions by.
    let opened_ms = c.replica(4).sessions().now_ms();
    assert_eq!(c.replica(6).sessions().now_ms(), opened_ms);
    for seq in 1..=5 {
        c.tick(10);
        c.submit(1, command(1, seq, &Op::Insert { key: seq, value: 1 }));
    }
    c.tick(5);
    assert_eq!(replies(&c, 1, 5).len(), 1);
    assert!(c.ticks >= opened_ms + 40, "time passed");
    assert_eq!(
        c.replica(4).sessions().now_ms(),
        opened_ms,
        "partition 0's own values moved its session time"
    );
    // A command for both partitions moves both alike.
    let both = Op::Query {
        min: 0,
        max: 2 * KEY_SPLIT,
    };
    c.submit(21, command(3, 1, &both));
    c.tick(5);
    assert_eq!(replies(&c, 3, 1).len(), 2);
    let t = c.replica(4).sessions().now_ms();
    assert!(t > opened_ms);
    for r in P0.iter().chain(&P1) {
        assert_eq!(c.replica(*r).sessions().now_ms(), t, "replica {r}");
    }
}

/// Inserts `seqs` at each partition (clients 1 and 2, through each partition's ring
/// leader), then ticks until the rings have truncated.
fn insert_at_both(c: &mut Cluster, seqs: std::ops::RangeInclusive<u64>) {
    for seq in seqs {
        c.submit(1, command(1, seq, &Op::Insert { key: seq, value: 1 }));
        let key = KEY_SPLIT + seq;
        c.submit(11, command(2, seq, &Op::Insert { key, value: 1 }));
        c.tick(2);
    }
    c.tick(40);
}

#[test]
fn rings_truncate_by_their_own_learners_and_restarts_resume_the_merge() {
    let mut c = cluster();
    insert_at_both(&mut c, 1..=12);
    // Ring 1 (partition 0's) truncated below what partition 0's replicas hold, ring 2
    // below partition 1's: the replicas of one partition never tell the other's ring
    // anything. The spanning ring, below what both hold.
    for (acceptor, ring) in [(1, 1), (11, 2), (21, 3)] {
        let a = c
            .node(acceptor)
            .ordering_report()
            .acceptor
            .expect("an acceptor");
        assert!(
            a.truncated_below > 1,
            "ring {ring}'s acceptor {acceptor} never truncated: {a:?}"
        );
    }
    // A replica restarted from its checkpoint resumes its partition's merge.
    let before = c.replica(5).last_instance();
    c.crash(5);
    c.start(5);
    assert!(c.node(5).checkpoint_instance() > 0, "restored a checkpoint");
    for seq in 13..=16 {
        c.submit(1, command(1, seq, &Op::Insert { key: seq, value: 1 }));
        c.tick(2);
    }
    c.tick(20);
    assert!(c.replica(5).last_instance() > before);
    c.converge_partitions();
}

/// Signals (paper 003 §3.2): partition 0's ring cannot decide anything for a while,
/// so partition 0's merge stands before a command for both partitions; partition 1,
/// whose own rings run, must not run the command (a client that saw its effect there
/// could then send partition 0 a command that lands before it on partition 0's ring).
/// Once partition 0's ring runs again, both run it, under one name.
#[test]
fn a_command_for_two_partitions_waits_until_both_merges_reached_it() {
    let mut c = cluster();
    // Partition 0's ring falls silent: its acceptors hear nothing of each other and
    // tell its learners nothing.
    c.lose(|from, _, msg| [1, 2, 3].contains(&from) && matches!(msg, Msg::OnRing { ring: 1, .. }));
    c.tick(5);
    let both = Op::Batch(vec![
        BatchOp::Insert { key: 7, value: 70 },
        BatchOp::Insert {
            key: KEY_SPLIT + 7,
            value: 70,
        },
    ]);
    // Partition 1's own ring keeps deciding (a command of its own, ordered before the
    // command for both: anything of partition 1 merged after that waits behind it),
    // and time passes.
    c.submit(
        11,
        command(
            2,
            1,
            &Op::Insert {
                key: KEY_SPLIT + 1,
                value: 1,
            },
        ),
    );
    c.tick(5);
    c.submit(21, command(3, 1, &both));
    c.tick(60);
    assert_eq!(
        replies(&c, 2, 1).len(),
        1,
        "partition 1 runs its own commands"
    );
    assert!(
        replies(&c, 3, 1).is_empty(),
        "partition 1 ran the command for both before partition 0's merge reached it: {:?}",
        replies(&c, 3, 1)
    );
    assert!(c.counter(6, "merge_waits_for_signals") > 0);
    assert!(
        c.counter(6, "merge_signal_asks_sent") > 0,
        "it asks again while it waits"
    );
    c.lose_nothing();
    c.tick(40);
    let got = replies(&c, 3, 1);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].1.instance, got[1].1.instance);
    c.converge_partitions();
}

impl PartitionedCluster for Cluster {
    /// Replicas of one partition executed the same sequence and hold the same state.
    fn converge_partitions(&mut self) {
        for part in [P0, P1] {
            for _ in 0..200 {
                let [a, b] = part.map(|r| self.replica(r).last_instance());
                if a == b {
                    break;
                }
                self.tick(1);
            }
            let [a, b] = part.map(|r| (self.replica(r).last_instance(), self.replica(r).digest()));
            assert_eq!(a, b, "partition of replicas {part:?}");
        }
    }
}

trait PartitionedCluster {
    fn converge_partitions(&mut self);
}

/// Membership change over Multi-Ring Paxos: node 8 joins partition 1 while the rings
/// have truncated (so it needs a state transfer), learns only rings 2 and 3, promotes
/// itself and serves; replica 7 leaves; ring 2 then truncates by replicas 6 and 8;
/// with 6 down too, a command for both partitions runs at partition 0 only once node
/// 8 said its merge reached it, and node 8 runs it once partition 0 said so: the
/// signal peers follow the change at both partitions.
#[test]
fn a_replica_joins_a_partition_signals_and_another_leaves() {
    let mut c = cluster();
    let seen = watch(&mut c);
    insert_at_both(&mut c, 1..=12);
    let truncated = |c: &Cluster, a: NodeId| {
        c.node(a)
            .ordering_report()
            .acceptor
            .unwrap()
            .truncated_below
    };
    assert!(
        truncated(&c, 11) > 1 && truncated(&c, 21) > 1,
        "rings 2 and 3 truncated"
    );

    let add = |node| partita_types::members::MemberChange::Add {
        node,
        addr: format!("127.0.0.1:{}", 7100 + node),
        partition: 1,
        promote: true,
    };
    c.joining.insert(8);
    c.joining_partitions.insert(8, 1);
    c.start(8);
    c.tick(5);
    assert_eq!(c.member(4, add(8)), Ok(1), "the add applied");
    for seq in 13..=20 {
        let key = KEY_SPLIT + seq;
        c.submit(11, command(2, seq, &Op::Insert { key, value: 1 }));
        c.tick(2);
    }
    for _ in 0..400 {
        if c.node(8).serves() {
            break;
        }
        c.tick(1);
    }
    assert!(c.node(8).serves(), "node 8 never promoted itself");
    assert!(
        c.counter(8, "state_transfers_completed") >= 1,
        "node 8 caught up by state transfer"
    );
    assert_eq!(
        c.node(6).members().epoch,
        2,
        "add, then promote, at partition 1"
    );
    assert_eq!(
        c.node(4).members(),
        c.node(6).members(),
        "both partitions hold the same members"
    );
    assert!(
        seen.borrow().iter().all(|&(ring, to)| to != 8 || ring != 1),
        "node 8 was sent something of partition 0's ring"
    );

    // Acceptors of a ring do not change; a replica of partition 1 leaves.
    let e = c
        .member(
            4,
            partita_types::members::MemberChange::AddAcceptor {
                node: 9,
                addr: "127.0.0.1:7109".into(),
            },
        )
        .unwrap_err();
    assert!(e.contains("Multi-Ring Paxos"), "{e}");
    assert_eq!(
        c.member(4, partita_types::members::MemberChange::Remove { node: 7 }),
        Ok(3)
    );
    c.tick(2);
    assert!(c.node(7).removed().is_some(), "node 7 knows it was removed");
    c.crash(7);
    let before = truncated(&c, 11);
    for seq in 21..=40 {
        let key = KEY_SPLIT + seq;
        c.submit(11, command(2, seq, &Op::Insert { key, value: 1 }));
        c.tick(2);
    }
    c.tick(40);
    assert!(
        truncated(&c, 11) > before,
        "ring 2 truncates by replicas 6 and 8 ({before} before, {} after)",
        truncated(&c, 11)
    );

    // Partition 1 is node 8 alone now: signals go both ways with it.
    c.crash(6);
    let both = Op::Batch(vec![
        BatchOp::Insert { key: 8, value: 80 },
        BatchOp::Insert {
            key: KEY_SPLIT + 8,
            value: 80,
        },
    ]);
    let at8 = c.replica(8).last_instance();
    c.submit(21, command(3, 1, &both));
    c.tick(80);
    assert_eq!(
        replies(&c, 3, 1).len(),
        1,
        "partition 0 ran the command for both: {:?}",
        replies(&c, 3, 1)
    );
    assert!(c.replica(8).last_instance() > at8, "node 8 ran it");
    c.start(6);
    c.tick(40);
    for _ in 0..200 {
        if c.replica(6).last_instance() == c.replica(8).last_instance() {
            break;
        }
        c.tick(1);
    }
    assert_eq!(
        (c.replica(6).last_instance(), c.replica(6).digest()),
        (c.replica(8).last_instance(), c.replica(8).digest()),
        "partition 1's replicas converge"
    );
}

/// A replica added to a partition other than its file entry's (an `Add` sent by
/// something other than `partita member add` or etcd's MemberAdd, which refuse it)
/// stops with the reason instead of learning one partition's values onto another's
/// state; it never serves, and removing it works.
#[test]
fn a_replica_added_to_another_partition_than_its_entry_stops_with_the_reason() {
    use partita_types::members::MemberChange;
    let mut c = cluster();
    c.joining.insert(9);
    c.joining_partitions.insert(9, 0);
    c.start(9);
    c.tick(5);
    let add = MemberChange::Add {
        node: 9,
        addr: "127.0.0.1:7109".into(),
        partition: 1,
        promote: true,
    };
    assert_eq!(c.member(4, add), Ok(1));
    c.tick(20);
    assert!(c.node(9).removed().is_some(), "node 9 stopped");
    let why = c.node(9).stop_reason().expect("a reason").to_string();
    assert!(
        why.contains("added to partition 1") && why.contains("says partition 0"),
        "{why}"
    );
    assert!(!c.node(9).serves());
    assert_eq!(c.counter(9, "member_added_to_another_partition"), 1);
    assert_eq!(c.counter(4, "member_added_to_another_partition"), 0);
    assert!(c.node(6).members().is_learner(9));
    assert_eq!(c.member(6, MemberChange::Remove { node: 9 }), Ok(2));
}
