//! A service that keeps time (the key-value store's leases) under speculative
//! execution: whatever proposals arrive ahead of the decisions, with times of their
//! own, the replies released, the digest and the checkpoint are exactly those of
//! executing the decided sequence, leases expired at the same positions included.

use crate::speculation::timed;
use partita_kv::{KvCommand, KvStore};
use partita_smr::SequentialReplica;
use partita_types::{Command, NodeId, PartitionMap, Reply};
use proptest::prelude::*;

const ME: NodeId = 1;

fn kv_op() -> impl Strategy<Value = KvCommand> {
    let key = (0u8..4).prop_map(|k| format!("k{k}"));
    let lease = 1i64..4;
    prop_oneof![
        (key.clone(), lease.clone()).prop_map(|(k, l)| KvCommand::put_leased(k, "v", l)),
        key.clone().prop_map(|k| KvCommand::put(k, "w")),
        key.clone().prop_map(KvCommand::get),
        key.prop_map(KvCommand::delete),
        (lease.clone(), 2i64..4).prop_map(|(l, ttl)| KvCommand::lease_grant(l, ttl)),
        (0i64..1).prop_map(|_| KvCommand::lease_grant(0, 2)),
        lease.clone().prop_map(KvCommand::lease_keep_alive),
        lease.clone().prop_map(KvCommand::lease_revoke),
        lease.prop_map(|l| KvCommand::lease_time_to_live(l, true)),
    ]
}

fn commands() -> impl Strategy<Value = Vec<Command>> {
    let one = (1u64..4, 1u64..9, prop_oneof![Just(ME), Just(2)], kv_op()).prop_map(
        |(client, seq, to, op)| {
            partita_service::envelope::<KvStore>(client, seq, to, &op, &PartitionMap::single())
                .expect("a checked command")
        },
    );
    proptest::collection::vec(one, 0..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Instances are 0 to 1.5 s apart in ordered time (leases of 2 to 3 s expire
    /// often); a wrong proposal carries a later time than the decided value, so a
    /// speculation may expire a lease the decided sequence still holds.
    #[test]
    fn speculation_expires_leases_as_the_decided_sequence_does(
        insts in proptest::collection::vec(
            (commands(), 0u64..1500, proptest::option::of((commands(), 1u64..2000)), 0u8..3),
            1..30,
        ),
    ) {
        let mut plain = SequentialReplica::<KvStore>::new(ME, KvStore::new());
        let mut spec = SequentialReplica::<KvStore>::new(ME, KvStore::new());
        let (mut want, mut got): (Vec<Reply>, Vec<Reply>) = (Vec::new(), Vec::new());
        let mut t = 0u64;
        let mut decided = Vec::new();
        for (i, (cmds, step, _, _)) in insts.iter().enumerate() {
            t += step;
            decided.push(timed(0, i as u64 + 1, cmds.clone(), t));
        }
        for (idx, (_, _, _, early)) in insts.iter().enumerate() {
            let i = idx as u64 + 1;
            // Proposals for the next few instances: the wrong one first (if any),
            // then the right one, ahead of their decisions.
            let ahead = u64::from(*early);
            for j in i..=(i + ahead).min(insts.len() as u64) {
                let d = &decided[j as usize - 1];
                if let (Some((w, later)), true) = (&insts[j as usize - 1].2, j == i + ahead) {
                    spec.propose(j, timed(0, 10_000 + j, w.clone(), d.time_ms + later));
                }
                spec.propose(j, d.clone());
            }
            let d = decided[idx].clone();
            plain.execute(i, &d, &mut want);
            spec.execute(i, &d, &mut got);
            prop_assert_eq!(spec.digest(), plain.digest(), "decided digest at {}", i);
            prop_assert_eq!(&got, &want, "replies released by instance {}", i);
            spec.invariants();
        }
        prop_assert_eq!(spec.speculated(), 0);
        prop_assert_eq!(spec.state(), plain.state());
        prop_assert_eq!(spec.checkpoint(), plain.checkpoint());
    }
}

/// A replica restored from a checkpoint expires the same leases at the same times.
#[test]
fn a_restored_replica_expires_leases_alike() {
    let env = |seq, op: KvCommand| {
        partita_service::envelope::<KvStore>(7, seq, ME, &op, &PartitionMap::single()).unwrap()
    };
    let mut a = SequentialReplica::<KvStore>::new(ME, KvStore::new());
    let mut out = Vec::new();
    a.execute(
        1,
        &timed(0, 1, vec![env(1, KvCommand::lease_grant(5, 2))], 1_000),
        &mut out,
    );
    a.execute(
        2,
        &timed(
            0,
            2,
            vec![env(2, KvCommand::put_leased("k", "v", 5))],
            1_200,
        ),
        &mut out,
    );
    let bytes = a.checkpoint();
    let mut b = SequentialReplica::<KvStore>::restore(&bytes).unwrap();
    for r in [&mut a, &mut b] {
        r.execute(3, &timed(0, 3, vec![], 2_999), &mut out);
        assert!(r.state().get(b"k").is_some(), "not before its deadline");
        r.execute(4, &timed(0, 4, vec![], 3_000), &mut out);
        assert!(r.state().get(b"k").is_none(), "expired at its deadline");
    }
    assert_eq!(a.digest(), b.digest());
}

/// A backup restored into a new cluster (a checkpoint seeded at instance 0) gives every
/// lease its whole TTL again from the new cluster's first value: the old deadlines are
/// in the old cluster's ordered time, which the new one does not continue. The same
/// checkpoint restored in its own cluster keeps them. Speculation over the first value
/// undoes the re-arming with the rest.
#[test]
fn a_restored_backup_gives_every_lease_its_whole_ttl_again() {
    use partita_smr::seed_checkpoint;
    let cmd = |seq: u64, c: &KvCommand| {
        partita_service::envelope::<KvStore>(7, seq, ME, c, &PartitionMap::single()).unwrap()
    };
    let mut a = SequentialReplica::<KvStore>::new(ME, KvStore::new());
    a.set_cluster_id(0xC1);
    let mut out = Vec::new();
    a.execute(
        1,
        &timed(0, 1, vec![cmd(1, &KvCommand::lease_grant(42, 10))], 1_000),
        &mut out,
    );
    let put = KvCommand::put_leased("k", "v", 42);
    a.execute(2, &timed(0, 2, vec![cmd(2, &put)], 2_000), &mut out);
    let bytes = a.checkpoint();
    let has_k = |r: &SequentialReplica<KvStore>| r.state().get(b"k").is_some();

    // The new cluster's ordered time starts an hour later.
    let later = 3_600_000;
    let seeded = seed_checkpoint(&bytes, 0xD2, 4).unwrap();
    let mut b = SequentialReplica::<KvStore>::restore(&seeded).unwrap();
    // A wrong proposal for instance 1 (much later) speculated, then undone.
    b.propose(1, timed(0, 99, Vec::new(), later + 60_000));
    b.execute(1, &timed(0, 1, Vec::new(), later), &mut out);
    assert!(has_k(&b), "the lease starts over at the first value");
    b.execute(2, &timed(0, 2, Vec::new(), later + 9_999), &mut out);
    assert!(has_k(&b), "its whole TTL of 10 s");
    b.execute(3, &timed(0, 3, Vec::new(), later + 10_000), &mut out);
    assert!(!has_k(&b), "and no more");
    b.invariants();

    // In its own cluster the deadline (11,000 ms) stands: the next value expires it.
    let mut c = SequentialReplica::<KvStore>::restore(&bytes).unwrap();
    c.execute(3, &timed(0, 3, Vec::new(), later), &mut out);
    assert!(!has_k(&c), "the old deadline passed");
}
