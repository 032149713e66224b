//! P-SMR over the key-value store (paper 002 §III-F for a service other than the
//! B+tree): reads run on the worker threads, everything that writes (and the lease
//! reads, which read ordered time) with every thread stopped, and ordered time reaches
//! the store as a step of every thread only where a lease may expire. Whatever order
//! the threads run in, one by one or on OS threads, the replies, the digest and the
//! checkpoint are the sequential replica's, leases expired at the same positions
//! included. The control: a thread that runs a write without waiting for the others
//! is caught by the same comparison.

use crate::speculation::timed;
use partita_consensus::Value;
use partita_kv::{KvCommand, KvStore, TxnRequest};
use partita_service::{ServiceCodec, StateMachine};
use partita_smr::{PsmrOptions, ReplicaStats, SequentialReplica, ThreadLayout};
use partita_types::{Command, NodeId, PartitionMap, Reply};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use std::sync::Arc;

const ME: NodeId = 1;

fn layout(threads: usize) -> ThreadLayout {
    ThreadLayout::new(threads, u64::MAX).unwrap()
}

fn kv_op() -> impl Strategy<Value = KvCommand> {
    let key = (0u8..6).prop_map(|k| format!("k{k}"));
    let lease = 1i64..4;
    prop_oneof![
        (key.clone(), lease.clone()).prop_map(|(k, l)| KvCommand::put_leased(k, "v", l)),
        key.clone().prop_map(|k| KvCommand::put(k, "w")),
        key.clone().prop_map(KvCommand::get),
        key.clone().prop_map(KvCommand::get),
        key.clone().prop_map(KvCommand::get),
        Just(KvCommand::prefix("k")),
        (key.clone(), key.clone())
            .prop_map(|(a, b)| KvCommand::Batch(vec![KvCommand::get(a), KvCommand::get(b)])),
        key.clone().prop_map(|k| KvCommand::Txn(TxnRequest {
            compare: Vec::new(),
            success: vec![partita_kv::RequestOp::Range(partita_kv::RangeRequest::get(
                k
            ))],
            failure: Vec::new(),
        })),
        key.prop_map(KvCommand::delete),
        (lease.clone(), 2i64..4).prop_map(|(l, ttl)| KvCommand::lease_grant(l, ttl)),
        lease.clone().prop_map(KvCommand::lease_keep_alive),
        lease.clone().prop_map(KvCommand::lease_revoke),
        lease.prop_map(|l| KvCommand::lease_time_to_live(l, true)),
    ]
}

/// Values of commands by a few clients, each with the next sequence number of its
/// client, 0 to 1.5 s apart in ordered time (leases of 2 to 3 s expire often).
fn values() -> impl Strategy<Value = Vec<Arc<Value>>> {
    let cmds = proptest::collection::vec((1u64..6, kv_op()), 0..6);
    proptest::collection::vec((cmds, 0u64..1500), 1..40).prop_map(|raw| {
        let mut seqs = std::collections::BTreeMap::<u64, u64>::new();
        let mut t = 0;
        raw.into_iter()
            .enumerate()
            .map(|(i, (cmds, step))| {
                t += step;
                let cmds: Vec<Command> = cmds
                    .into_iter()
                    .map(|(client, op)| {
                        let seq = seqs.entry(client).or_insert(0);
                        *seq += 1;
                        partita_service::envelope::<KvStore>(
                            client,
                            *seq,
                            ME,
                            &op,
                            &PartitionMap::single(),
                        )
                        .expect("a checked command")
                    })
                    .collect();
                timed(0, i as u64 + 1, cmds, t)
            })
            .collect()
    })
}

/// What a run left: every reply in order of (client, seq, instance), the digest, the
/// checkpoint (state, ordered time and reply cache).
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    replies: Vec<Reply>,
    digest: u64,
    checkpoint: Vec<u8>,
}

fn outcome(r: &SequentialReplica<KvStore>, mut replies: Vec<Reply>) -> Outcome {
    replies.sort_by_key(|x| (x.client, x.seq, x.instance));
    Outcome {
        replies,
        digest: r.digest(),
        checkpoint: r.checkpoint(),
    }
}

fn sequential(values: &[Arc<Value>]) -> Outcome {
    let mut r = SequentialReplica::new(ME, KvStore::new());
    let mut replies = Vec::new();
    for (i, v) in values.iter().enumerate() {
        r.execute(i as u64 + 1, v, &mut replies);
    }
    outcome(&r, replies)
}

fn psmr_replica(threads: usize, no_barrier: bool) -> SequentialReplica<KvStore> {
    let mut r = SequentialReplica::new(ME, KvStore::new());
    r.set_psmr(PsmrOptions {
        layout: layout(threads),
        unsafe_no_barrier: no_barrier,
        unsafe_check_passes: false,
    });
    r
}

/// Deliver every value, interleaving thread runs: `picks` chooses when to deliver and
/// which runnable thread runs next.
fn scheduled(threads: usize, values: &[Arc<Value>], picks: &[usize], no_barrier: bool) -> Outcome {
    let mut r = psmr_replica(threads, no_barrier);
    let (mut replies, mut step, mut delivered) = (Vec::new(), 0, 0);
    loop {
        let runnable: Vec<usize> = (0..threads).filter(|&t| r.thread_runnable(t)).collect();
        let pick = picks.get(step).copied().unwrap_or(0);
        if delivered < values.len() && (runnable.is_empty() || pick % 3 == 0) {
            let mut out = Vec::new();
            r.execute(delivered as u64 + 1, &values[delivered], &mut out);
            assert!(out.is_empty(), "P-SMR replies only when a thread runs");
            delivered += 1;
        } else if runnable.is_empty() {
            break;
        } else {
            r.run_thread(runnable[pick % runnable.len()], &mut replies);
        }
        r.invariants();
        step += 1;
    }
    assert!(r.quiescent());
    outcome(&r, replies)
}

/// The same on OS threads, `chunks` saying how many values arrive between rounds.
fn on_os_threads(
    threads: usize,
    values: &[Arc<Value>],
    chunks: &[usize],
) -> (Outcome, ReplicaStats) {
    let mut r = psmr_replica(threads, false);
    r.set_thread_runner(Arc::new(partita_gang::Gang::new(
        threads,
        "test",
        std::time::Duration::from_micros(25),
    )));
    let (mut replies, mut delivered, mut step) = (Vec::new(), 0, 0);
    while delivered < values.len() {
        let n = chunks.get(step).map_or(1, |c| 1 + c % 5);
        step += 1;
        for _ in 0..n.min(values.len() - delivered) {
            let mut out = Vec::new();
            r.execute(delivered as u64 + 1, &values[delivered], &mut out);
            delivered += 1;
        }
        r.run_threads(&mut replies);
        r.invariants();
        assert!(r.quiescent(), "run_threads runs everything it can");
    }
    let stats = r.stats().clone();
    (outcome(&r, replies), stats)
}

fn agree(
    threads: usize,
    values: &[Arc<Value>],
    picks: &[usize],
    no_barrier: bool,
) -> Result<(), TestCaseError> {
    let want = sequential(values);
    let got = scheduled(threads, values, picks, no_barrier);
    prop_assert_eq!(
        &got.replies,
        &want.replies,
        "replies differ from the sequential replica's"
    );
    prop_assert_eq!(
        got.digest,
        want.digest,
        "state differs from the sequential replica's"
    );
    prop_assert_eq!(
        got.checkpoint,
        want.checkpoint,
        "checkpoint differs from the sequential replica's"
    );
    Ok(())
}

proptest! {
    #![proptest_config(Config { cases: 256, ..Config::default() })]

    #[test]
    fn any_schedule_of_the_threads_equals_the_sequential_replica(
        threads in 1usize..=4,
        values in values(),
        picks in proptest::collection::vec(0usize..64, 0..400),
    ) {
        agree(threads, &values, &picks, false)?;
    }

    #[test]
    fn os_threads_equal_the_sequential_replica(
        threads in 2usize..=3,
        values in values(),
        chunks in proptest::collection::vec(0usize..64, 0..40),
    ) {
        let want = sequential(&values);
        let (got, _) = on_os_threads(threads, &values, &chunks);
        prop_assert_eq!(got, want);
    }
}

/// The mapping: a read goes to one thread (by its first key), a write, a lease command
/// and a batch with a write to every thread, under CC-G and OC-G alike; no write passes
/// the safety check; only a lease's expiry makes time change the store.
#[test]
fn reads_to_threads_writes_to_every_thread() {
    let l = layout(4);
    let group = |c: &KvCommand| {
        (
            KvStore::thread_group(c, &l, false),
            KvStore::thread_group(c, &l, true),
        )
    };
    let threads: std::collections::BTreeSet<usize> = (0..64)
        .filter_map(|k| group(&KvCommand::get(format!("key{k}"))).0)
        .collect();
    assert_eq!(
        threads.len(),
        4,
        "gets spread over every thread: {threads:?}"
    );
    let get = group(&KvCommand::get("a"));
    assert!(get.0.is_some() && get.0 == get.1);
    assert!(group(&KvCommand::prefix("a")).0.is_some());
    for write in [
        KvCommand::put("a", "1"),
        KvCommand::delete("a"),
        KvCommand::lease_grant(1, 5),
        KvCommand::lease_time_to_live(1, false),
        KvCommand::Batch(vec![KvCommand::get("a"), KvCommand::put("b", "2")]),
    ] {
        assert_eq!(group(&write), (None, None), "{write:?}");
    }
    let mut s = KvStore::new();
    assert!(s.thread_check(&KvCommand::put("a", "1"), 0, &l).is_err());
    assert!(!s.time_changes(1_000_000), "no lease: time changes nothing");
    s.execute(&KvCommand::lease_grant(7, 2));
    assert!(!s.time_changes(1_999));
    assert!(s.time_changes(2_000), "the lease expires at 2 s");
}

/// Reads really run on the threads: many clients' gets of a key each, delivered in
/// values of many commands between puts, run in rounds at the same time (none had to
/// run alone), with the sequential replica's outcome.
#[test]
fn os_threads_run_reads_at_the_same_time() {
    let mut values = Vec::new();
    let mut seqs = vec![0u64; 65];
    for i in 0..40u64 {
        let cmds = (1..=64u64)
            .map(|client| {
                seqs[client as usize] += 1;
                let op = if (client + i) % 16 == 0 {
                    KvCommand::put(format!("k{}", client % 8), format!("{i}"))
                } else {
                    // A client's reads, one thread's (else its next read waits for
                    // its previous one at every thread).
                    KvCommand::get(format!("k{}", client % 8))
                };
                partita_service::envelope::<KvStore>(
                    client,
                    seqs[client as usize],
                    ME,
                    &op,
                    &PartitionMap::single(),
                )
                .unwrap()
            })
            .collect();
        values.push(timed(0, i + 1, cmds, i * 10));
    }
    let (got, stats) = on_os_threads(3, &values, &[4; 40]);
    assert_eq!(got, sequential(&values));
    assert!(stats.psmr_parallel >= 2_000, "{stats:?}");
    assert!(stats.psmr_synchronous >= 100, "{stats:?}");
    assert_eq!(stats.psmr_alone, 0, "{stats:?}");
}

/// Control: a thread that runs a write as soon as it reaches it, without waiting for
/// the other threads' earlier reads, is caught: some schedule's replies differ.
#[test]
fn control_a_write_run_without_the_barrier_is_caught() {
    let mut runner = TestRunner::new(Config {
        cases: 512,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        2usize..=4,
        values(),
        proptest::collection::vec(0usize..64, 0..400),
    );
    match runner.run(&strategy, |(threads, values, picks)| {
        agree(threads, &values, &picks, true)
    }) {
        Err(TestError::Fail(why, _)) => assert!(
            why.message().contains("differ"),
            "caught for another reason: {why}"
        ),
        other => panic!("the missing barrier was not caught: {other:?}"),
    }
}
