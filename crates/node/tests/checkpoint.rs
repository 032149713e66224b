//! Checkpoints, log truncation and state transfer, scripted on node cores wired by an
//! in-memory network and disk (the harness in `common`, with checkpoints enabled):
//! replicas checkpoint, acceptors truncate below what a majority of replicas
//! checkpointed (memory and log), a restarted acceptor keeps its promise and the values
//! above the truncation point, a restarted replica restores its checkpoint and learns
//! only the suffix, and a replica that was down while the acceptors truncated catches
//! up by fetching a peer's checkpoint in chunks. Exactly-once holds across all of it: a
//! resubmission after a restore is answered from the cache.

use crate::common;

use common::{insert, res, setup, Cluster, ACCEPTORS};
use partita_btree::OpResult;
use partita_consensus::{AcceptorRecord, Msg, Protocol};
use partita_node::{CheckpointConfig, NodeCore, RecoverError, UnsafeBugs};
use partita_types::{NodeId, Reply};

const REPLICAS: [NodeId; 3] = [4, 5, 6];
const CLUSTER: u64 = 0xC0FFEE;
const INTERVAL: u64 = 10;

/// Replicas checkpoint every `INTERVAL` instances, in small chunks; replicas speculate
/// (Ring Paxos only) if `speculative`.
fn cluster_with(protocol: Protocol, bugs: UnsafeBugs, speculative: bool) -> Cluster {
    let mut s = setup(protocol, &REPLICAS);
    s.cluster_id = CLUSTER;
    s.coordinator_config.phase1_range_instances = 40;
    s.learner_config.learn_batch_instances_max = 8;
    s.checkpoint = CheckpointConfig {
        interval_instances: INTERVAL,
        announce_ticks: 5,
        // Small chunks, so that even these small checkpoints take several.
        chunk_bytes: 256,
        transfer_window_chunks: 3,
        transfer_timeout_ticks: 10,
        ..CheckpointConfig::default()
    };
    s.speculative = speculative;
    let mut c = Cluster::new(s, bugs);
    c.checkpointing = true;
    c.tick(3);
    c
}

fn cluster(protocol: Protocol, bugs: UnsafeBugs) -> Cluster {
    cluster_with(protocol, bugs, false)
}

/// Lose every `n`-th state-transfer message delivered.
fn lose_every_nth_transfer_msg(n: u64) -> impl FnMut(NodeId, NodeId, &Msg) -> bool {
    let mut seen = 0u64;
    move |_, _, msg| {
        if !matches!(
            msg,
            Msg::CheckpointRequest { .. } | Msg::CheckpointChunk { .. }
        ) {
            return false;
        }
        seen += 1;
        seen.is_multiple_of(n)
    }
}

/// Commands 1..=n through the leader, answered by replica 4, one instance each.
fn load(c: &mut Cluster, seqs: std::ops::RangeInclusive<u64>) {
    for seq in seqs {
        c.submit(1, insert(seq, 4));
        c.tick(1);
        assert_eq!(
            c.replies_to(seq).len(),
            1,
            "command {seq} not answered exactly once"
        );
    }
}

fn state_transfer(protocol: Protocol, bugs: UnsafeBugs, lose_every: u64) -> Cluster {
    state_transfer_with(cluster(protocol, bugs), lose_every)
}

fn state_transfer_with(mut c: Cluster, lose_every: u64) -> Cluster {
    let protocol = c.protocol();
    if lose_every > 0 {
        c.lose_on_delivery(lose_every_nth_transfer_msg(lose_every));
    }
    load(&mut c, 1..=5);
    c.tick(10);
    assert_eq!(c.replica(6).last_instance(), c.replica(4).last_instance());

    // Replica 6 goes down; the others go on, checkpoint, and the acceptors truncate
    // below what both of them (a majority of three) have checkpointed.
    c.crash(6);
    load(&mut c, 6..=80);
    c.tick(20);
    let executed = c.replica(4).last_instance();
    for a in ACCEPTORS {
        let acc = c.nodes[&a]
            .paxos_roles()
            .and_then(|p| p.acceptor())
            .unwrap();
        assert!(
            acc.truncated_below() > executed - 2 * INTERVAL,
            "{protocol}: acceptor {a} truncated below {} only, {executed} executed",
            acc.truncated_below()
        );
        let log = &c.logs[&a];
        assert!(
            (log.records.len() as u64) < log.written / 2,
            "{protocol}: acceptor {a}'s log kept {} of {} records",
            log.records.len(),
            log.written
        );
    }

    // Replica 6 comes back with nothing: the instances it needs are gone from every
    // acceptor, so it fetches a checkpoint from another replica, then the suffix.
    c.checkpoints.remove(&6);
    c.start(6);
    c.converge(400);
    c.digests_agree();
    assert_eq!(c.counter(6, "state_transfers_completed"), 1, "{protocol}");
    if lose_every > 0 {
        assert!(c.counter(6, "state_transfer_retransmits") > 0);
    }
    assert!(c.chunks >= 3, "{protocol}: only {} chunks", c.chunks);
    assert!(c.chunk_bytes_max <= 256);
    let tree = c.replica(6).state();
    for seq in 1..=80 {
        assert_eq!(tree.read(seq), Some(seq * 10), "{protocol}: key {seq}");
    }
    // It saved the transferred checkpoint as its own: a restart needs no transfer.
    assert!(c.nodes[&6].checkpoint_durable() > 0);
    c
}

#[test]
fn multipaxos_lagging_replica_catches_up_by_state_transfer() {
    let mut c = state_transfer(Protocol::MultiPaxos, UnsafeBugs::default(), 0);
    exactly_once_after_transfer(&mut c, true);
}

#[test]
fn ringpaxos_lagging_replica_catches_up_by_state_transfer() {
    let mut c = state_transfer(Protocol::RingPaxos, UnsafeBugs::default(), 0);
    exactly_once_after_transfer(&mut c, true);
}

/// Checkpoints, truncation and state transfer with speculating replicas: checkpoints
/// are taken with the speculation set aside, so everything above holds unchanged.
#[test]
fn ringpaxos_speculating_replicas_checkpoint_and_transfer_state() {
    let c = cluster_with(Protocol::RingPaxos, UnsafeBugs::default(), true);
    let mut c = state_transfer_with(c, 0);
    assert!(c.replica(4).stats().speculated > 0);
    assert!(c.replica(4).stats().speculation_confirmed > 0);
    exactly_once_after_transfer(&mut c, true);
}

#[test]
fn state_transfer_survives_lost_chunks_and_requests() {
    let mut c = state_transfer(Protocol::RingPaxos, UnsafeBugs::default(), 3);
    exactly_once_after_transfer(&mut c, true);
}

#[test]
fn planted_reexecution_is_caught_after_state_transfer() {
    let bugs = UnsafeBugs {
        reexecute_duplicates: true,
        ..UnsafeBugs::default()
    };
    let mut c = state_transfer(Protocol::RingPaxos, bugs, 0);
    exactly_once_after_transfer(&mut c, false);
}

/// Command 80 was executed (and answered by replica 4) while replica 6 was down. Its
/// client never saw the answer and resubmits, now to replica 6, which holds that
/// command's effect only through the transferred checkpoint.
fn exactly_once_after_transfer(c: &mut Cluster, correct: bool) {
    let first = c.replies_to(80)[0].clone();
    c.submit(2, insert(80, 6));
    c.tick(5);
    let again: Vec<Reply> = c
        .replies_to(80)
        .into_iter()
        .filter(|r| **r != first)
        .cloned()
        .collect();
    if correct {
        assert_eq!(
            c.replies_to(80).len(),
            2,
            "the resubmission was not answered"
        );
        assert!(again.is_empty(), "answered differently: {again:?}");
        c.digests_agree();
    } else {
        // Control: the planted bug executes the resubmission again, visibly.
        assert_eq!(again.len(), 1, "the planted bug went unnoticed");
        assert_eq!(res(&again[0]), OpResult::Inserted(false));
    }
}

#[test]
fn restarted_replica_restores_its_checkpoint_and_learns_only_the_suffix() {
    let mut c = cluster(Protocol::RingPaxos, UnsafeBugs::default());
    load(&mut c, 1..=34);
    c.tick(10);
    let ckpt = c.nodes[&5].checkpoint_durable();
    assert!(ckpt >= 30, "replica 5 checkpointed up to {ckpt} only");
    let executed = c.replica(5).last_instance();
    assert!(executed > ckpt);

    c.crash(5);
    load(&mut c, 35..=36);
    c.start(5);
    assert_eq!(c.replica(5).last_instance(), ckpt, "restored, not replayed");
    assert_eq!(
        c.nodes[&5]
            .paxos_roles()
            .and_then(|p| p.learner())
            .unwrap()
            .delivered_up_to(),
        ckpt
    );
    c.converge(100);
    c.digests_agree();
    let learner = c.nodes[&5].paxos_roles().and_then(|p| p.learner()).unwrap();
    assert_eq!(
        learner.stats().delivered,
        c.replica(4).last_instance() - ckpt,
        "only the suffix is learned"
    );
    assert_eq!(c.counter(5, "state_transfers_started"), 0);

    // The client of command 36 resubmits to replica 5: answered from the cache
    // restored from the checkpoint plus the suffix, not executed again.
    let first = c.replies_to(36)[0].clone();
    c.submit(3, insert(36, 5));
    c.tick(5);
    let all = c.replies_to(36);
    assert_eq!(all.len(), 2);
    assert_eq!(*all[1], first);

    // Command 30 lies inside the checkpoint: a client resubmitting it now (it is
    // older than the client's latest, 36) is stale and ignored, as without restarts.
    c.submit(3, insert(30, 5));
    c.tick(5);
    assert_eq!(c.replies_to(30).len(), 1);
    c.digests_agree();
}

#[test]
fn restarted_acceptor_keeps_its_promise_and_the_values_above_the_truncation() {
    let mut c = cluster(Protocol::MultiPaxos, UnsafeBugs::default());
    load(&mut c, 1..=47);
    c.tick(20);
    let before = c.nodes[&2]
        .paxos_roles()
        .and_then(|p| p.acceptor())
        .unwrap();
    let (promised, truncated) = (before.promised(), before.truncated_below());
    assert!(truncated > 30, "truncated below {truncated} only");
    let kept: Vec<(u64, _)> = (truncated..=before.max_accepted_instance())
        .filter_map(|i| before.accepted(i).map(|(b, v)| (i, (b, v.vid))))
        .collect();
    assert!(!kept.is_empty());
    let first_record = &c.logs[&2].records[0];
    assert!(
        !matches!(first_record, AcceptorRecord::Promise { .. }),
        "the log still starts with its first promise"
    );

    c.crash(2);
    c.start(2);
    let after = c.nodes[&2]
        .paxos_roles()
        .and_then(|p| p.acceptor())
        .unwrap();
    assert_eq!(after.promised(), promised);
    assert_eq!(after.truncated_below(), truncated);
    for (i, (b, vid)) in &kept {
        let (b2, v2) = after
            .accepted(*i)
            .expect("value above the truncation point");
        assert_eq!((b2, v2.vid), (*b, *vid), "instance {i}");
    }
    assert!(after.accepted(truncated - 1).is_none());

    // The cluster goes on, with acceptor 2 voting again.
    c.crash(3);
    load(&mut c, 48..=50);
    c.start(3);
    c.converge(100);
    c.digests_agree();
}

#[test]
fn a_foreign_checkpoint_is_refused() {
    let mut c = cluster(Protocol::RingPaxos, UnsafeBugs::default());
    load(&mut c, 1..=12);
    c.tick(5);
    let ckpt = c.checkpoints[&4].clone();
    let setup = c.node_setup(5);
    let mut out = Vec::new();
    match NodeCore::recover(
        setup.clone(),
        vec![],
        Some(ckpt.clone()),
        UnsafeBugs::default(),
        &mut out,
    ) {
        Err(RecoverError::Checkpoint(e)) => {
            assert!(e.to_string().contains("node 4"), "{e}")
        }
        Err(e) => panic!("unexpected {e}"),
        Ok(_) => panic!("replica 5 adopted replica 4's checkpoint"),
    }
    let mut damaged = ckpt;
    let at = damaged.len() / 2;
    damaged[at] ^= 0x10;
    let setup4 = c.node_setup(4);
    assert!(NodeCore::recover(
        setup4,
        vec![],
        Some(damaged),
        UnsafeBugs::default(),
        &mut out
    )
    .is_err());
    assert!(out.is_empty(), "a refused recovery emitted {out:?}");
}
