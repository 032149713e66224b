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
