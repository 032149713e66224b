//! P-SMR and opt-PSMR (paper 002 §III-F, §IV) on the replica: whatever order the
//! driver runs the worker threads in (any runnable thread at any step), the state, the
//! reply cache and every reply are those of running the delivered commands one by one
//! in delivery order; with CC-G alone they are exactly the sequential replica's. The
//! controls: a thread that runs a g_all command without waiting for the others makes
//! some schedule diverge from delivery order, and a safety check that always passes
//! is caught by the replica's race check.

use partita_btree::{BPlusTree, BatchOp, Op};
use partita_consensus::{Value, Vid};
use partita_smr::{PsmrOptions, ReplicaStats, SequentialReplica, ThreadLayout};
use partita_types::{Ballot, Command, NodeId, Refusal, Reply};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

const ME: NodeId = 1;
const KEY_MAX: u64 = 47;

fn value(seq: u64, cmds: Vec<Command>) -> Value {
    timed(seq, cmds, 0)
}

fn timed(seq: u64, cmds: Vec<Command>, time_ms: u64) -> Value {
    Value {
        vid: Vid {
            ballot: Ballot::new(0, 1),
            seq,
        },
        commands: cmds,
        parts: Vec::new(),
        time_ms,
        skip: 0,
    }
}

/// How the client proxy maps a command.
#[derive(Clone, Copy, Debug)]
enum Mapping {
    /// Leaves it to the replica (CC-G).
    Replica,
    /// OC-G: one thread.
    Optimistic,
    /// A thread that may not be the command's (a client that maps wrongly).
    Thread(u8),
    /// g_all.
    All,
    /// Not the command: an open of the client's session (or a renewal of the session
    /// opened at instance `n`), with session leases on.
    Open(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u64..=KEY_MAX;
    prop_oneof![
        3 => (k.clone(), 0u64..100).prop_map(|(key, value)| Op::Insert { key, value }),
        2 => k.clone().prop_map(|key| Op::Delete { key }),
        3 => (k.clone(), 0u64..100).prop_map(|(key, value)| Op::Update { key, value }),
        2 => k.clone().prop_map(|key| Op::Read { key }),
        1 => (k.clone(), 0u64..8).prop_map(|(min, w)| Op::Query { min, max: min + w }),
        1 => k.clone().prop_map(|key| Op::Next { key }),
        1 => proptest::collection::vec(
            (k.clone(), 0u64..100).prop_map(|(key, value)| BatchOp::Insert { key, value }),
            1..3
        )
        .prop_map(Op::Batch),
    ]
}

fn mapping(optimistic_only: bool) -> BoxedStrategy<Mapping> {
    if optimistic_only {
        return Just(Mapping::Optimistic).boxed();
    }
    prop_oneof![
        3 => Just(Mapping::Replica),
        3 => Just(Mapping::Optimistic),
        1 => (0u8..4).prop_map(Mapping::Thread),
        1 => Just(Mapping::All),
    ]
    .boxed()
}

/// Values of commands by a few clients, each with increasing sequence numbers and
/// some resubmissions (the same number again).
fn values(optimistic_only: bool) -> impl Strategy<Value = Vec<Vec<(u64, Op, Mapping, bool)>>> {
    proptest::collection::vec(
        proptest::collection::vec(
            (1u64..6, op(), mapping(optimistic_only), any::<bool>()),
            1..6,
        ),
        1..24,
    )
}

struct Case {
    threads: usize,
    /// Session leases (ms of ordered time), with values 0..40 ms apart.
    lease_ms: Option<u64>,
    /// Delivered values (commands already numbered per client).
    values: Vec<Value>,
}

fn build(threads: usize, raw: &[Vec<(u64, Op, Mapping, bool)>]) -> Case {
    build_leased(threads, raw, None)
}

fn build_leased(
    threads: usize,
    raw: &[Vec<(u64, Op, Mapping, bool)>],
    lease_ms: Option<u64>,
) -> Case {
    let layout = ThreadLayout::new(threads, KEY_MAX).unwrap();
    let mut seqs = std::collections::BTreeMap::<u64, u64>::new();
    let mut values = Vec::new();
    for (i, cmds) in raw.iter().enumerate() {
        let mut out = Vec::new();
        for (client, op, mapping, resend) in cmds {
            let seq = seqs.entry(*client).or_insert(0);
            if !*resend || *seq == 0 {
                *seq += 1;
            }
            if let Mapping::Open(n) = mapping {
                out.push(match n % 3 {
                    0 => Command::open(*client, ME, 1),
                    n => Command::renew(*client, u64::from(n), ME, 1),
                });
                continue;
            }
            let mut c = partita_btree::service::command(*client, *seq, ME, op);
            // With leases, commands name the session opened at instance 1 or 2.
            c.session = lease_ms.map_or(0, |_| 1 + (*seq % 2));
            c.route = match mapping {
                Mapping::Open(_) => unreachable!(),
                Mapping::Replica => 0,
                Mapping::Optimistic => {
                    use partita_service::ServiceCodec;
                    BPlusTree::thread_group(op, &layout, true).map_or(layout.all(), |t| 1 << t)
                }
                Mapping::Thread(t) => 1 << (*t as usize % threads),
                Mapping::All => layout.all(),
            };
            out.push(c);
        }
        // Time moves 0..40 ms per value (a pseudo-random step from the commands).
        let time = lease_ms.map_or(0, |_| (i as u64) * 13 % 41 + i as u64 * 7);
        values.push(timed(i as u64 + 1, out, time));
    }
    Case {
        threads,
        lease_ms,
        values,
    }
}

fn replica(
    threads: usize,
    no_barrier: bool,
    check_passes: bool,
    lease_ms: Option<u64>,
) -> SequentialReplica<BPlusTree> {
    let mut r = SequentialReplica::new(ME, BPlusTree::with_node_keys(4));
    r.set_session_lease(lease_ms);
    r.set_psmr(PsmrOptions {
        layout: ThreadLayout::new(threads, KEY_MAX).unwrap(),
        unsafe_no_barrier: no_barrier,
        unsafe_check_passes: check_passes,
    });
    r
}

/// What a run left: every reply in order of (client, seq, instance), the digest, the
/// checkpoint (state and reply cache).
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    replies: Vec<Reply>,
    digest: u64,
    checkpoint: Vec<u8>,
}

/// Deliver every value, interleaving thread runs: `picks` chooses among the runnable
/// threads at each step (`None`: always the one whose command was delivered first,
/// i.e. delivery order).
fn run(case: &Case, picks: Option<&[usize]>, no_barrier: bool, check_passes: bool) -> Outcome {
    let mut r = replica(case.threads, no_barrier, check_passes, case.lease_ms);
    let mut replies = Vec::new();
    let mut step = 0;
    let mut delivered = 0;
    loop {
        let runnable: Vec<usize> = (0..case.threads)
            .filter(|&t| r.thread_runnable(t))
            .collect();
        // Deliver the next value now and then (a value every few steps), or when
        // nothing can run.
        let deliver_now = delivered < case.values.len()
            && (runnable.is_empty()
                || picks.is_some_and(|p| p.get(step).is_some_and(|x| x % 3 == 0)));
        if deliver_now {
            let mut out = Vec::new();
            r.execute(delivered as u64 + 1, &case.values[delivered], &mut out);
            assert!(out.is_empty(), "P-SMR replies only when a thread runs");
            delivered += 1;
            step += 1;
            continue;
        }
        if runnable.is_empty() {
            break;
        }
        let t = match picks {
            // Delivery order: the runnable thread whose head is oldest. With the
            // barrier, the oldest queued command is always at a runnable head.
            None => (0..case.threads)
                .filter(|&t| r.thread_runnable(t))
                .min_by_key(|&t| head_of(&r, t))
                .unwrap(),
            Some(p) => runnable[p.get(step).copied().unwrap_or(0) % runnable.len()],
        };
        r.run_thread(t, &mut replies);
        r.invariants();
        step += 1;
    }
    assert!(r.quiescent());
    replies.sort_by_key(|x| (x.client, x.seq, x.instance));
    Outcome {
        replies,
        digest: r.digest(),
        checkpoint: r.checkpoint(),
    }
}

/// The same values on OS threads (`run_threads`): delivered a few at a time (`chunks`
/// says how many before the threads run), the threads run at the same time.
fn run_os(case: &Case, chunks: &[usize], check_passes: bool) -> (Outcome, ReplicaStats) {
    let mut r = SequentialReplica::new(ME, BPlusTree::with_node_keys(4));
    r.set_session_lease(case.lease_ms);
    r.set_psmr(PsmrOptions {
        layout: ThreadLayout::new(case.threads, KEY_MAX).unwrap(),
        unsafe_no_barrier: false,
        unsafe_check_passes: check_passes,
    });
    r.set_thread_runner(std::sync::Arc::new(partita_gang::Gang::new(
        case.threads,
        "test",
        std::time::Duration::from_micros(25),
    )));
    let mut replies = Vec::new();
    let mut delivered = 0;
    let mut step = 0;
    while delivered < case.values.len() {
        let n = chunks.get(step).map_or(1, |c| 1 + c % 5);
        step += 1;
        for _ in 0..n.min(case.values.len() - delivered) {
            let mut out = Vec::new();
            r.execute(delivered as u64 + 1, &case.values[delivered], &mut out);
            assert!(out.is_empty(), "P-SMR replies only when a thread runs");
            delivered += 1;
        }
        r.run_threads(&mut replies);
        r.invariants();
        assert!(r.quiescent(), "run_threads runs everything it can");
    }
    replies.sort_by_key(|x| (x.client, x.seq, x.instance));
    let stats = r.stats().clone();
    let outcome = Outcome {
        replies,
        digest: r.digest(),
        checkpoint: r.checkpoint(),
    };
    (outcome, stats)
}

/// The delivery number at the head of thread `t` (test-only introspection through the
/// public API: run the thread on a clone is impossible, so rank by the queued count).
fn head_of(r: &SequentialReplica<BPlusTree>, t: usize) -> u64 {
    r.thread_head(t).expect("runnable")
}

/// The sequential replica's outcome of the same values.
fn sequential(case: &Case) -> Outcome {
    let mut seq = SequentialReplica::new(ME, BPlusTree::with_node_keys(4));
    seq.set_session_lease(case.lease_ms);
    let mut replies = Vec::new();
    for (i, v) in case.values.iter().enumerate() {
        seq.execute(i as u64 + 1, v, &mut replies);
    }
    replies.sort_by_key(|x| (x.client, x.seq, x.instance));
    Outcome {
        replies,
        digest: seq.digest(),
        checkpoint: seq.checkpoint(),
    }
}

fn agree(case: &Case, picks: &[usize], no_barrier: bool) -> Result<(), TestCaseError> {
    let canonical = run(case, None, false, false);
    let other = run(case, Some(picks), no_barrier, false);
    prop_assert_eq!(
        &other.replies,
        &canonical.replies,
        "replies differ from delivery order"
    );
    prop_assert_eq!(
        other.digest,
        canonical.digest,
        "state differs from delivery order"
    );
    prop_assert_eq!(
        other.checkpoint,
        canonical.checkpoint,
        "reply cache or state differs from delivery order"
    );
    Ok(())
}

proptest! {
    #![proptest_config(Config { cases: 256, ..Config::default() })]

    #[test]
    fn any_schedule_of_the_threads_equals_delivery_order(
        threads in 1usize..=4,
        raw in values(false),
        picks in proptest::collection::vec(0usize..64, 0..400),
    ) {
        let case = build(threads, &raw);
        agree(&case, &picks, false)?;
    }

    /// With session leases: opens, renewals and expiries happen where the sequential
    /// replica has them, whatever the schedule.
    #[test]
    fn with_session_leases_any_schedule_equals_delivery_order(
        threads in 1usize..=4,
        raw in values(false),
        opens in proptest::collection::vec((0usize..24, 0usize..6, 0u8..6), 0..12),
        picks in proptest::collection::vec(0usize..64, 0..400),
    ) {
        let mut raw = raw;
        for (v, c, n) in opens {
            if let Some(cmd) = raw.get_mut(v).and_then(|v| v.get_mut(c)) {
                cmd.2 = Mapping::Open(n);
            }
        }
        let case = build_leased(threads, &raw, Some(60));
        agree(&case, &picks, false)?;
        // And with CC-G alone, exactly the sequential replica's.
        let raw: Vec<Vec<_>> = raw
            .into_iter()
            .map(|v| {
                v.into_iter()
                    .map(|(c, op, m, r)| match m {
                        Mapping::Open(n) => (c, op, Mapping::Open(n), r),
                        _ => (c, op, Mapping::Replica, r),
                    })
                    .collect()
            })
            .collect();
        let case = build_leased(threads, &raw, Some(60));
        let expected = sequential(&case);
        let got = run(&case, Some(&picks), false, false);
        prop_assert_eq!(got, expected);
    }

    /// On OS threads at the same time (`run_threads`), the replies, state and reply
    /// cache of delivery order.
    #[test]
    fn os_threads_at_once_equal_delivery_order(
        threads in 1usize..=4,
        raw in values(false),
        opens in proptest::collection::vec((0usize..24, 0usize..6, 0u8..6), 0..6),
        leased in any::<bool>(),
        chunks in proptest::collection::vec(0usize..64, 0..40),
    ) {
        let mut raw = raw;
        if leased {
            for (v, c, n) in opens {
                if let Some(cmd) = raw.get_mut(v).and_then(|v| v.get_mut(c)) {
                    cmd.2 = Mapping::Open(n);
                }
            }
        }
        let case = build_leased(threads, &raw, leased.then_some(60));
        let canonical = run(&case, None, false, false);
        let (got, _) = run_os(&case, &chunks, false);
        prop_assert_eq!(got, canonical);
    }

    /// With CC-G alone (clients leave the mapping to the replica), P-SMR answers
    /// exactly as the sequential replica does.
    #[test]
    fn cc_g_alone_is_the_sequential_replica(
        threads in 1usize..=4,
        raw in values(false),
        picks in proptest::collection::vec(0usize..64, 0..400),
    ) {
        let raw: Vec<Vec<_>> = raw
            .into_iter()
            .map(|v| v.into_iter().map(|(c, op, _, r)| (c, op, Mapping::Replica, r)).collect())
            .collect();
        let case = build(threads, &raw);
        let expected = sequential(&case);
        let got = run(&case, Some(&picks), false, false);
        prop_assert_eq!(got, expected);
    }
}

#[test]
fn optimistic_commands_pass_or_fail_and_failures_change_nothing() {
    // Four threads over 0..=47 and nodes of 4 keys: inserts into a full leaf fail the
    // check, inserts into a leaf wholly inside their thread's range with room pass.
    let layout = ThreadLayout::new(4, KEY_MAX).unwrap();
    let mut r = replica(4, false, false, None);
    let mut inst = 0;
    let mut deliver = |r: &mut SequentialReplica<BPlusTree>, cmds: Vec<Command>| {
        inst += 1;
        r.execute(inst, &value(inst, cmds), &mut Vec::new());
        let mut replies = Vec::new();
        while let Some(t) = (0..4).find(|&t| r.thread_runnable(t)) {
            r.run_thread(t, &mut replies);
            r.invariants();
        }
        replies
    };
    // Build a tree with conservative inserts first.
    let keys: Vec<u64> = (0..=KEY_MAX).step_by(3).collect();
    let setup: Vec<Command> = keys
        .iter()
        .map(|&k| partita_btree::service::command(1, k + 1, ME, &Op::Insert { key: k, value: k }))
        .collect();
    let _ = deliver(&mut r, setup);
    let before = r.stats().clone();
    // Optimistic inserts of the missing keys, one per client.
    let opt: Vec<Command> = (0..=KEY_MAX)
        .filter(|k| k % 3 != 0)
        .map(|k| {
            let op = Op::Insert {
                key: k,
                value: 1000 + k,
            };
            let mut c = partita_btree::service::command(100 + k, 1, ME, &op);
            use partita_service::ServiceCodec;
            c.route = 1 << BPlusTree::thread_group(&op, &layout, true).unwrap();
            c
        })
        .collect();
    let n = opt.len() as u64;
    let replies = deliver(&mut r, opt);
    let passed = r.stats().psmr_passed - before.psmr_passed;
    let failed = r.stats().psmr_failed - before.psmr_failed;
    assert_eq!(passed + failed, n);
    assert!(passed > 0 && failed > 0, "passed {passed}, failed {failed}");
    let resubmit: Vec<&Reply> = replies
        .iter()
        .filter(|x| matches!(x.result, Err(Refusal::Resubmit(_))))
        .collect();
    assert_eq!(resubmit.len() as u64, failed);
    // A failed command left nothing: its key is absent; a passed one is present.
    for x in &replies {
        let key = x.client - 100;
        let present = r.state().read(key).is_some();
        assert_eq!(present, x.result.is_ok(), "key {key}: {:?}", x.result);
    }
    // Resubmitted conservatively (same sequence numbers, threads 0), they all run.
    let again: Vec<Command> = resubmit
        .iter()
        .map(|x| {
            let k = x.client - 100;
            partita_btree::service::command(
                x.client,
                1,
                ME,
                &Op::Insert {
                    key: k,
                    value: 1000 + k,
                },
            )
        })
        .collect();
    let replies = deliver(&mut r, again);
    assert!(replies.iter().all(|x| x.result.is_ok()));
    assert_eq!(r.state().len(), (KEY_MAX + 1) as usize);
}

/// Control: a thread that runs a g_all command as soon as it reaches it, without
/// waiting for the others, is caught: some schedule's replies or state differ from
/// delivery order.
#[test]
fn control_a_g_all_command_run_without_the_barrier_is_caught() {
    let mut runner = TestRunner::new(Config {
        cases: 512,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        2usize..=4,
        values(false),
        proptest::collection::vec(0usize..64, 0..400),
    );
    let result = runner.run(&strategy, |(threads, raw, picks)| {
        let case = build(threads, &raw);
        agree(&case, &picks, true)
    });
    match result {
        Err(TestError::Fail(why, _)) => assert!(
            why.message().contains("differ"),
            "caught for another reason: {why}"
        ),
        other => panic!("the missing barrier was not caught: {other:?}"),
    }
}

/// Four threads, every key inserted by a client of its own mapping optimistically: the
/// inserts that split a leaf must fail the safety check.
fn every_key_inserted_optimistically() -> Case {
    build(
        4,
        &[(0..=KEY_MAX)
            .map(|k| {
                (
                    k + 1,
                    Op::Insert { key: k, value: k },
                    Mapping::Optimistic,
                    false,
                )
            })
            .collect()],
    )
}

/// `f` must panic with the race check's report (the always-passing check caught).
fn assert_race_caught(f: impl FnOnce() + std::panic::UnwindSafe) {
    let message = match std::panic::catch_unwind(f) {
        Ok(()) => panic!("the always-passing check was not caught"),
        Err(p) => panic_message(p),
    };
    assert!(
        message.contains("P-SMR race check") && message.contains("changed the shape"),
        "caught for another reason: {message}"
    );
}

/// The message of a caught panic.
fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Control: a safety check that always passes is caught by the race check (a command
/// run by one thread alone changed the tree's shape).
#[test]
fn control_a_safety_check_that_always_passes_is_caught_by_the_race_check() {
    let case = every_key_inserted_optimistically();
    assert_race_caught(|| {
        run(&case, None, false, true);
    });
    // The same commands with the real check: no race.
    run(&case, None, false, false);
}

/// On OS threads, the same control: the always-passing check makes a thread run a
/// split alone; the shared view refuses to run it at the same time as the others (it
/// answers "alone"), the replica runs it with every thread stopped, and the race check
/// still reports it.
#[test]
fn control_on_os_threads_an_always_passing_check_is_caught_by_the_race_check() {
    let case = every_key_inserted_optimistically();
    assert_race_caught(|| {
        run_os(&case, &[], true);
    });
    let (_, stats) = run_os(&case, &[], false);
    assert_eq!(stats.psmr_alone, 0);
}

/// Threads really share the work: many clients' reads, updates and optimistic
/// inserts and deletes over a preloaded tree, delivered in values of many commands,
/// run in rounds at the same time; the outcome is the sequential replica's order's,
/// and no command had to run alone.
#[test]
fn os_threads_run_rounds_at_the_same_time() {
    let mut raw = vec![(0..=KEY_MAX)
        .step_by(2)
        .map(|k| {
            (
                1000 + k,
                Op::Insert { key: k, value: k },
                Mapping::Replica,
                false,
            )
        })
        .collect::<Vec<_>>()];
    let mut seqs = std::collections::BTreeMap::<u64, u64>::new();
    for v in 0..40u64 {
        let cmds = (0..12u64)
            .map(|c| {
                // Each client keeps to one thread's keys (else its commands queue
                // behind barriers, to run in its order).
                let range = (KEY_MAX + 1) / 4;
                let key = (c % 4) * range + (v * 7 + c * 5) % range;
                let op = match (v + c) % 4 {
                    0 => Op::Read { key },
                    1 => Op::Update { key, value: v },
                    2 => Op::Insert { key, value: v },
                    _ => Op::Delete { key },
                };
                let client = c + 1;
                *seqs.entry(client).or_default() += 1;
                (client, op, Mapping::Optimistic, false)
            })
            .collect();
        raw.push(cmds);
    }
    let case = build(4, &raw);
    let canonical = run(&case, None, false, false);
    let (got, stats) = run_os(&case, &[4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4], false);
    assert_eq!(got, canonical);
    assert_eq!(stats.psmr_alone, 0);
    assert!(stats.psmr_parallel > 300, "{}", stats.psmr_parallel);
    assert!(stats.psmr_passed > 0, "{stats:?}");
}
