//! Planted-bug controls: every check must be able to fail. For each bug of
//! `partita_node::UnsafeBugs`, a small range of seeds must contain one whose run
//! violates a *safety* check with the bug planted, and passes without it (so the bug,
//! not something else, is what the checks caught).
//!
//! Which faults make each bug visible:
//! - `lose-acked-writes` (every 5th mutation undone after its reply): any run; reads,
//!   the final state and later writes contradict the acknowledged write.
//! - `reexecute-duplicates`: resubmissions, i.e. timeouts (lost replies, crashes,
//!   partitions); a command executed twice returns or leaves what no single execution can.
//! - `unordered-query` (replicas answer reads at once): a replica that lags behind
//!   (latency, loss, pauses, crashes) returns stale reads.
//! - `vote-before-durable`: an acceptor votes, then crashes and loses the write it voted
//!   for; a later leader (after a failover caused by a partition or pause of the
//!   leader) does not find the chosen value in its Phase 1 quorum and decides another
//!   one in that instance. Found by the agreement oracle.
//! - `forget-promise`: needs competing ballots: an acceptor that promised a new leader's
//!   ballot restarts before accepting anything under it, forgets the promise, and then
//!   accepts the deposed (paused or partitioned) leader's proposals, while the new leader
//!   decides another value in the same instance. Rare: about 1 seed in 750 of the fault
//!   mix pause + acceptor crashes + partitions + reordering, so the control scans a
//!   fixed range known to hold one (the agreement oracle catches it).
//! - `skip-phase1`: a leader elected after a failover proposes over values an earlier
//!   leader had chosen (coordinator crashes, partitions or pauses): agreement oracle.
//! - `restore-without-reply-cache`: replica restarts from a checkpoint or state
//!   transfer; the replica's invariant (reply cache against its high-water mark) or a
//!   resubmission executed twice.
//! - `independent-partitions` (clients send a multi-partition command's sub-commands as
//!   commands of their own): paper 001's Figure 4; two partitions, any faults or none:
//!   a range query, next or prev across the border sees one partition before and the
//!   other after a concurrent write (linearizability).
//! - `speculative-no-rollback` (a replica confirms speculated commands without checking
//!   the decided value): Ring Paxos with speculative execution, where a failover or a
//!   lost proposal decides another value than the one speculated; the replica keeps the
//!   wrong state and answers from it (linearizability, digests).
//! - `unconfirmed-replies` (a replica with early replies sends its speculative results
//!   as final): Ring Paxos with speculation and early replies, where a failover or a
//!   lost proposal rolls a speculation back after its tentative reply left; the client
//!   records a result the decided order never gave (linearizability); once without
//!   and once with 2 partitions (each partition confirms its own sub-result).
//! - `expired-sessions-reopen` (a replica runs a command whose session it does not
//!   know as if the session were new): short session leases, so that a client whose
//!   reply was lost (loss, partitions, crashes) resubmits after its session expired;
//!   the copy runs a second time against an empty reply cache and returns what no
//!   single execution gives (linearizability).

use partita_sim::{
    run_seed, FaultClass, FaultSelection, PartitionChoice, ProtocolChoice, SimOptions,
    SpeculationChoice,
};
use partita_sim::{EarlyRepliesChoice, MembersChoice, PsmrChoice, RingsChoice, ServiceChoice};

/// Scan `seeds` with `bug` planted; return the first seed that fails a safety check
/// with the bug and passes without it, with the failed check and message.
fn control(
    bug: &str,
    faults: FaultSelection,
    coordinator_crashes: bool,
    seeds: std::ops::Range<u64>,
) -> (u64, String) {
    control_ops(bug, faults, coordinator_crashes, seeds, 2000)
}

fn control_ops(
    bug: &str,
    faults: FaultSelection,
    coordinator_crashes: bool,
    seeds: std::ops::Range<u64>,
    ops: u64,
) -> (u64, String) {
    let clean = SimOptions {
        ops,
        faults,
        coordinator_crashes,
        // The seed ranges below were found without partitioning, on the B+tree;
        // partitioned seeds and the key-value store have their own controls.
        partitioning: PartitionChoice::Fixed(1),
        service: ServiceChoice::Btree,
        trace_tail: 0,
        ..SimOptions::default()
    };
    control_opts(bug, clean, seeds)
}

fn control_opts(bug: &str, clean: SimOptions, seeds: std::ops::Range<u64>) -> (u64, String) {
    match partita_sim::first_caught(bug, &clean, seeds.clone(), |c| c.is_safety()) {
        Ok((seed, f)) => (seed, format!("{}: {}", f.check, f.message)),
        Err(seen) => panic!(
            "planted bug `{bug}` went unnoticed in seeds {seeds:?}; the checks cannot see it.\n{}",
            seen.join("\n")
        ),
    }
}

#[test]
fn lose_acked_writes_is_caught() {
    let (seed, what) = control("lose-acked-writes", FaultSelection::Swarm, false, 0..50);
    eprintln!("lose-acked-writes caught at seed {seed}: {what}");
}

#[test]
fn reexecute_duplicates_is_caught() {
    let (seed, what) = control("reexecute-duplicates", FaultSelection::Swarm, false, 0..50);
    eprintln!("reexecute-duplicates caught at seed {seed}: {what}");
}

#[test]
fn unordered_query_is_caught() {
    let (seed, what) = control("unordered-query", FaultSelection::Swarm, false, 0..50);
    eprintln!("unordered-query caught at seed {seed}: {what}");
}

#[test]
fn vote_before_durable_is_caught() {
    // Failover (not coordinator crashes) is enough: the leader is partitioned or paused,
    // another acceptor takes over and runs Phase 1.
    let faults = FaultSelection::Only(vec![
        FaultClass::Partition,
        FaultClass::CrashAcceptor,
        FaultClass::Pause,
        FaultClass::DiskStall,
    ]);
    let (seed, what) = control("vote-before-durable", faults, false, 0..50);
    eprintln!("vote-before-durable caught at seed {seed}: {what}");
}

#[test]
fn forget_promise_is_caught() {
    // Two live leaders: the old one paused or cut off by a partition while another
    // acceptor takes over; an acceptor that promised the new ballot restarts, forgets
    // it and accepts the old leader's proposal, which the new leader also decides over.
    // About 1 seed in 1000 of this fault mix shows it (seeds 778, 1156 and 3403 of
    // 0..4000 since clients open sessions; any change to message sizes or timing moves
    // them: rescan with `partita sim --seeds 0..4000 --ops 1000 --partitions 1
    // --unsafe forget-promise --faults pause,crash-acceptor,partition,one-way,reorder`);
    // the range below holds the first. Ticks on demand moved them again: 1156, 1808 and
    // 2365 of 0..3000 (the same rescan, `--members off`); the range holds the first.
    // Those seeds were found with the ring decided at
    // the coordinator (the only layout then); the bug is the same wherever the ring
    // decides, but the timing that shows it is not, so each layout has its range.
    let faults = FaultSelection::Only(vec![
        FaultClass::Pause,
        FaultClass::CrashAcceptor,
        FaultClass::Partition,
        FaultClass::OneWay,
        FaultClass::Reorder,
    ]);
    let clean = SimOptions {
        ops: 1000,
        faults,
        coordinator_crashes: true,
        partitioning: PartitionChoice::Fixed(1),
        ring_decision: Some(partita_consensus::RingDecision::Coordinator),
        trace_tail: 0,
        ..SimOptions::default()
    };
    let (seed, what) = control_opts("forget-promise", clean.clone(), 1156..1157);
    eprintln!("forget-promise caught at seed {seed}: {what}");
    // The default layout, the ring decided at an acceptor: seeds 129, 517, 1156, 1385
    // and 3905 of 0..4000 (`partita sim --seeds 0..4000 --ops 1000 --partitions 1
    // --protocol ring-paxos --ring-decision acceptor --unsafe forget-promise --faults
    // pause,crash-acceptor,partition,one-way,reorder`).
    let acceptor = SimOptions {
        protocol: ProtocolChoice::RingPaxos,
        ring_decision: Some(partita_consensus::RingDecision::Acceptor),
        ..clean
    };
    let (seed, what) = control_opts("forget-promise", acceptor, 125..135);
    eprintln!("forget-promise (ring decided at an acceptor) caught at seed {seed}: {what}");
}

#[test]
fn skip_phase1_is_caught() {
    // A coordinator elected after a failover proposes without Phase 1 and overwrites
    // values an earlier leader already had chosen: the agreement oracle sees an
    // instance decided twice.
    let (seed, what) = control("skip-phase1", FaultSelection::Swarm, true, 0..50);
    eprintln!("skip-phase1 caught at seed {seed}: {what}");
}

#[test]
fn restore_without_reply_cache_is_caught() {
    // A replica restoring a checkpoint (restart or state transfer) without the reply
    // cache: the replica's own invariant (cache against its high-water mark) or, when
    // a resubmission arrives, a command executed twice.
    let (seed, what) = control(
        "restore-without-reply-cache",
        FaultSelection::Swarm,
        true,
        0..50,
    );
    eprintln!("restore-without-reply-cache caught at seed {seed}: {what}");
}

#[test]
fn speculative_no_rollback_is_caught() {
    // Every seed Ring Paxos with speculation, the ring decided at an acceptor (the
    // default); failovers and lost proposals make replicas speculate values that are
    // not decided. About 1 seed in 35 shows it (17, 32, 64, 193, 203, 214, 232, 314, 324,
    // 338, 339, 379 of 0..400; rescan
    // with `partita sim --seeds 0..400 --protocol ring-paxos --speculation on
    // --early-replies off --partitions 1 --ring-decision acceptor --unsafe
    // speculative-no-rollback`); the range below holds several.
    let clean = SimOptions {
        protocol: ProtocolChoice::RingPaxos,
        ring_decision: Some(partita_consensus::RingDecision::Acceptor),
        speculation: SpeculationChoice::On,
        early_replies: EarlyRepliesChoice::Off,
        partitioning: PartitionChoice::Fixed(1),
        trace_tail: 0,
        ..SimOptions::default()
    };
    let (seed, what) = control_opts("speculative-no-rollback", clean, 0..70);
    eprintln!("speculative-no-rollback caught at seed {seed}: {what}");
}

#[test]
fn independent_partitions_is_caught() {
    // Paper 001, Figure 4: sub-trees ordered independently. With the one ordering
    // instance the same seeds pass (checked by `control_opts`).
    let clean = SimOptions {
        ops: 500,
        partitioning: PartitionChoice::Fixed(2),
        trace_tail: 0,
        ..SimOptions::default()
    };
    let (seed, what) = control_opts("independent-partitions", clean, 0..20);
    eprintln!("independent-partitions caught at seed {seed}: {what}");
}

#[test]
fn keep_session_after_give_up_is_caught() {
    // Two partitions on Multi-Ring Paxos (a ring each, one across), heavy loss,
    // partitions, crashes and pauses: a client gives up on a command for both
    // partitions and goes on in the same session at one of them; the late command
    // then runs at the other only. The soak first found it at swarm seed 7457 (and
    // 4439, with three partitions); since learners subscribe to their own rings
    // nothing gives up there, and this configuration, which the soak's seed 7457 drew,
    // caught it in 5 of 1,000 seeds (222, 396, 911, 918, 945). Skips on demand changed
    // every multi-ring run's timing: the first of seeds 0..1,000 that catches it now is
    // 496, which passes without the bug (`first_caught` checks), on the B+tree. Ticks on
    // demand moved them again: 859, 882 and 918 of 0..1,000; with a busy node's ticks
    // given as the runtime gives them, 496 is the first again (`partita sim --seeds
    // 0..1000 --service btree --partitions 2 --rings 2 --faults
    // loss,reorder,partition,crash-acceptor,crash-coordinator,pause,torn-tail --unsafe
    // keep-session-after-give-up --members off`).
    let clean = SimOptions {
        service: ServiceChoice::Btree,
        partitioning: PartitionChoice::Fixed(2),
        rings: RingsChoice::Fixed(2),
        faults: FaultSelection::Only(vec![
            FaultClass::Loss,
            FaultClass::Reorder,
            FaultClass::Partition,
            FaultClass::CrashAcceptor,
            FaultClass::CrashCoordinator,
            FaultClass::Pause,
            FaultClass::TornTail,
        ]),
        trace_tail: 0,
        ..SimOptions::default()
    };
    let (seed, what) = control_opts("keep-session-after-give-up", clean, 496..497);
    eprintln!("keep-session-after-give-up caught at seed {seed}: {what}");
}

#[test]
fn unconfirmed_replies_is_caught() {
    // Every seed Ring Paxos with speculation and early replies: a speculation rolled
    // back after its tentative reply left gives a client a result the decided order
    // never gave, if the client takes it as final.
    let clean = SimOptions {
        protocol: ProtocolChoice::RingPaxos,
        speculation: SpeculationChoice::On,
        early_replies: EarlyRepliesChoice::On,
        partitioning: PartitionChoice::Fixed(1),
        trace_tail: 0,
        ..SimOptions::default()
    };
    let (seed, what) = control_opts("unconfirmed-replies", clean, 0..50);
    eprintln!("unconfirmed-replies caught at seed {seed}: {what}");
}

#[test]
fn unconfirmed_replies_is_caught_with_partitions() {
    // The same with 2 partitions: each partition's answerer replies early and
    // confirms its own sub-result; a client that merged unconfirmed sub-results would
    // record a result the decided order never gave.
    let clean = SimOptions {
        protocol: ProtocolChoice::RingPaxos,
        speculation: SpeculationChoice::On,
        early_replies: EarlyRepliesChoice::On,
        partitioning: PartitionChoice::Fixed(2),
        trace_tail: 0,
        ..SimOptions::default()
    };
    let (seed, what) = control_opts("unconfirmed-replies", clean, 0..30);
    eprintln!("unconfirmed-replies (2 partitions) caught at seed {seed}: {what}");
}

#[test]
fn expired_sessions_reopen_is_caught() {
    // Leases of 300 ms, shorter than most clients' timeouts: resubmissions meet
    // expired sessions, which a correct replica refuses (the clients record an unknown
    // outcome) and the planted one runs again. (Seeds 0 to 7 are left out: with leases
    // this short, the 144 unknown outcomes of seed 7 exhaust the checker's budget, which
    // takes minutes; the first seed after them that shows the bug is 10.)
    let clean = SimOptions {
        session_lease_ms: Some(300),
        partitioning: PartitionChoice::Fixed(1),
        trace_tail: 0,
        ..SimOptions::default()
    };
    let (seed, what) = control_opts("expired-sessions-reopen", clean, 8..60);
    eprintln!("expired-sessions-reopen caught at seed {seed}: {what}");
}

/// P-SMR's options for the two controls below: 3 worker threads, no speculation, one
/// partition, a short run.
fn psmr(optimistic: bool) -> SimOptions {
    SimOptions {
        ops: 600,
        speculation: SpeculationChoice::Off,
        partitioning: PartitionChoice::Fixed(1),
        psmr: PsmrChoice::Fixed {
            threads: 3,
            optimistic,
        },
        trace_tail: 0,
        ..SimOptions::default()
    }
}

#[test]
fn psmr_no_barrier_is_caught() {
    // A thread runs a g_all command (an insert, a delete, a range read across threads)
    // as soon as it reaches it, while other threads still have earlier commands: it
    // reads or writes what those commands change out of order. The replicas' threads
    // interleave differently, so results contradict the order (linearizability) or
    // the replicas diverge.
    let (seed, what) = control_opts("psmr-no-barrier", psmr(false), 0..20);
    assert!(
        what.starts_with("linearizability") || what.starts_with("convergence"),
        "caught by another check: {what}"
    );
    eprintln!("psmr-no-barrier caught at seed {seed}: {what}");
}

/// The same inside partitions (paper 001's partitions, each replica running 3 worker
/// threads over its partition's keys): the missing barrier is caught there too (in 7
/// of seeds 0..100 since ticks went on demand, the first 23: `partita sim --seeds
/// 0..100 --ops 600 --speculation off --partitions 2 --threads 3 --unsafe
/// psmr-no-barrier --members off`).
#[test]
fn psmr_no_barrier_inside_partitions_is_caught() {
    let clean = SimOptions {
        partitioning: PartitionChoice::Fixed(2),
        ..psmr(false)
    };
    let (seed, what) = control_opts("psmr-no-barrier", clean, 20..36);
    assert!(
        what.starts_with("linearizability") || what.starts_with("convergence"),
        "caught by another check: {what}"
    );
    eprintln!("psmr-no-barrier (2 partitions) caught at seed {seed}: {what}");
}

/// P-SMR inside partitions on the B+tree and the key-value store, with the swarm's
/// faults: every seed passes every check, and the replicas' threads ran commands
/// alone (reads and updates of their partition's keys; the store's reads) as well as
/// with every thread stopped.
#[test]
fn psmr_inside_partitions_seeds_pass() {
    for service in [ServiceChoice::Btree, ServiceChoice::Kv] {
        let o = SimOptions {
            ops: 400,
            service,
            partitioning: PartitionChoice::Fixed(2),
            ..psmr(false)
        };
        let (mut alone, mut synchronous) = (0, 0);
        for seed in 0..10 {
            let r = run_seed(seed, &o);
            assert!(r.passed, "{service:?} seed {seed}: {}", r.one_line());
            assert_eq!(r.params.partitions, 2);
            alone += r.counters.get("psmr_parallel").copied().unwrap_or(0);
            synchronous += r.counters.get("psmr_synchronous").copied().unwrap_or(0);
        }
        eprintln!("{service:?}: P-SMR {alone} alone, {synchronous} synchronous");
        assert!(
            alone > 500 && synchronous > 100,
            "{service:?}: {alone}, {synchronous}"
        );
    }
}

#[test]
fn psmr_check_passes_is_caught() {
    // opt-PSMR with a safety check that always passes: a thread alone splits or merges
    // a node of the shared tree; the replica's race check sees the shape change.
    let (seed, what) = control_opts("psmr-check-passes", psmr(true), 0..20);
    assert!(
        what.contains("P-SMR race check") && what.contains("changed the shape"),
        "caught for another reason: {what}"
    );
    eprintln!("psmr-check-passes caught at seed {seed}: {what}");
}

/// Multi-Ring Paxos seeds: two or three rings over one state, with the swarm's
/// faults (ring coordinators crash and pause, skips arrive late, clients load the
/// rings unevenly).
fn rings(n: u32) -> SimOptions {
    SimOptions {
        ops: 600,
        speculation: SpeculationChoice::Off,
        partitioning: PartitionChoice::Fixed(1),
        rings: RingsChoice::Fixed(n),
        trace_tail: 0,
        ..SimOptions::default()
    }
}

#[test]
fn multi_ring_paxos_seeds_pass() {
    for (n, seeds) in [(2, 0..6u64), (3, 6..10)] {
        for seed in seeds {
            let r = run_seed(seed, &rings(n));
            assert!(r.passed, "{n} rings, seed {seed}: {}", r.one_line());
        }
    }
}

/// Multi-Ring Paxos over partitioned state (a ring per partition and one across
/// them), each replica merging only its own partition's rings, with the swarm's faults
/// (and, on some seeds, short session leases): every check passes, and the replicas
/// of one partition agree while the partitions' sequences differ in length (each
/// merges other rings). That no replica is sent anything of a ring it does not merge
/// is `crates/node/tests/multiring.rs`'s to show, message by message.
#[test]
fn partitioned_multi_ring_paxos_seeds_pass() {
    let mut lengths_differ = false;
    for (partitions, seeds) in [(2, 0..3u64), (3, 3..5)] {
        let opts = SimOptions {
            partitioning: PartitionChoice::Fixed(partitions),
            ..rings(2)
        };
        for seed in seeds {
            let r = run_seed(seed, &opts);
            assert_eq!(
                r.params.rings, partitions,
                "seed {seed}: a ring per partition"
            );
            assert!(
                r.passed,
                "{partitions} partitions, seed {seed}: {}",
                r.one_line()
            );
            let ends = |p| r.replicas.iter().filter(move |e| e.partition == p);
            lengths_differ |= ends(0).next().map(|e| e.executed_up_to)
                != ends(1).next().map(|e| e.executed_up_to);
        }
    }
    assert!(
        lengths_differ,
        "every partition delivered as many values: one merge?"
    );
}

#[test]
fn merge_order_is_caught() {
    // Replicas with odd ids merge their rings in descending order: two replicas of one
    // state execute commands of different rings in different orders, so their states
    // diverge or their answers contradict one order.
    let (seed, what) = control_opts("merge-order", rings(2), 0..20);
    assert!(
        what.starts_with("linearizability") || what.starts_with("convergence"),
        "caught by another check: {what}"
    );
    eprintln!("merge-order caught at seed {seed}: {what}");
}

/// P-SMR over Multi-Ring Paxos (paper 002 §V-B): a ring per worker thread's group and
/// one for g_all, clients sending each command to its group's ring, under the
/// swarm's faults.
fn psmr_rings(optimistic: bool) -> SimOptions {
    SimOptions {
        rings: RingsChoice::Fixed(1),
        ..psmr(optimistic)
    }
}

#[test]
fn psmr_on_multi_ring_paxos_seeds_pass() {
    for seed in 0..6u64 {
        let optimistic = seed % 2 == 1;
        let r = run_seed(seed, &psmr_rings(optimistic));
        assert_eq!(
            (r.params.psmr_threads, r.params.rings),
            (3, 3),
            "seed {seed}"
        );
        assert!(
            r.passed,
            "optimistic {optimistic}, seed {seed}: {}",
            r.one_line()
        );
    }
}

#[test]
fn psmr_controls_are_caught_on_multi_ring_paxos() {
    // A learner that merges its rings in another order (the thread rings' commands
    // and g_all's reach the threads in different orders at different replicas), and a
    // safety check that always passes: each caught over rings too, for the reason it
    // is caught on one stream. (A thread that runs a g_all command without waiting is
    // the same code over rings as over one stream: `psmr_no_barrier_is_caught`; over
    // rings the first seed that shows it is 15, 50 s of this suite.) The reversed
    // merge shows where commands it reorders conflict; since replicas name values
    // alike whatever order they merged them in (execution names), the first seed
    // that shows it is 20 (it was 1 before), so the scan starts there (seeds 0..20,
    // 70 s of this suite, show nothing: rescan with `partita sim --seeds 0..40
    // --ops 600 --threads 3 --rings 1 --speculation off --partitions 1 --unsafe
    // merge-order` when the draws change).
    let (seed, what) = control_opts("merge-order", psmr_rings(false), 20..40);
    assert!(
        what.starts_with("linearizability") || what.starts_with("convergence"),
        "merge-order caught by another check: {what}"
    );
    eprintln!("merge-order (P-SMR on rings) caught at seed {seed}: {what}");
    let (seed, what) = control_opts("psmr-check-passes", psmr_rings(true), 0..20);
    assert!(
        what.contains("P-SMR race check") && what.contains("changed the shape"),
        "psmr-check-passes caught for another reason: {what}"
    );
    eprintln!("psmr-check-passes (on rings) caught at seed {seed}: {what}");
}

/// The swarm's clusters with the key-value store's clients (`--service kv`: puts,
/// gets, ranges, deletes and transactions on a few keys) and every fault: histories
/// checked by the key-value checker pass, and replicas converge.
#[test]
fn key_value_seeds_pass() {
    let o = SimOptions {
        ops: 300,
        service: ServiceChoice::Kv,
        trace_tail: 0,
        ..SimOptions::default()
    };
    for seed in 0..8 {
        let r = run_seed(seed, &o);
        assert_eq!(r.params.service, "kv");
        assert!(r.passed, "seed {seed}: {}", r.one_line());
        let checked = r.counters.get("kv_checked_ops").copied().unwrap_or(0);
        assert!(checked >= 250, "seed {seed}: {checked} operations checked");
    }
}

/// The key-value path's control: a replica that loses acknowledged writes is caught
/// by the key-value checker (linearizability), not by anything else.
#[test]
fn lose_acked_writes_on_key_value_seeds_is_caught() {
    let clean = SimOptions {
        ops: 300,
        service: ServiceChoice::Kv,
        trace_tail: 0,
        ..SimOptions::default()
    };
    let caught = partita_sim::first_caught("lose-acked-writes", &clean, 0..6, |c| {
        c == partita_sim::Check::Linearizability
    });
    match caught {
        Ok((seed, f)) => eprintln!(
            "lose-acked-writes on kv caught at seed {seed}: {}",
            f.message
        ),
        Err(seen) => panic!(
            "lose-acked-writes went unnoticed on kv seeds:\n{}",
            seen.join("\n")
        ),
    }
}

/// Seeds that change their replicas (`--members on`: a replica joins under load,
/// catches up and is promoted, then an initial replica is removed) with every fault:
/// they pass, the joiner was added and a replica removed in most of them, and the
/// replicas agree on the replicas.
fn members(ops: u64) -> SimOptions {
    SimOptions {
        ops,
        members: MembersChoice::On,
        partitioning: PartitionChoice::Fixed(1),
        rings: RingsChoice::Fixed(0),
        trace_tail: 0,
        ..SimOptions::default()
    }
}

#[test]
fn membership_change_seeds_pass() {
    let o = members(1200);
    let (mut added, mut removed) = (0, 0);
    let (mut acceptor_added, mut acceptor_removed) = (0, 0);
    for seed in 0..10 {
        let r = run_seed(seed, &o);
        assert!(r.params.member_changes, "seed {seed} changes its replicas");
        assert!(r.passed, "seed {seed}: {}", r.one_line());
        let n = |k: &str| r.counters.get(k).copied().unwrap_or(0);
        added += n("member_added");
        removed += n("replicas_stopped_removed");
        acceptor_added += n("acceptor_added");
        acceptor_removed += n("acceptor_removed");
    }
    assert!(added >= 7, "the joiner was added in {added} of 10 seeds");
    assert!(
        removed >= 5,
        "a replica was removed in {removed} of 10 seeds"
    );
    assert!(
        acceptor_added >= 5 && acceptor_removed >= 5,
        "acceptors added in {acceptor_added}, removed in {acceptor_removed} of 10 seeds"
    );
}

/// Partitioned seeds change their replicas too: the joiner joins one partition (by the
/// seed), catches up on that partition's state and answers its commands, and one of
/// that partition's initial replicas is removed; clients that time out follow the new
/// configuration. They pass, and the changes happened in most of them.
#[test]
fn membership_change_partitioned_seeds_pass() {
    let (mut added, mut removed, mut followed) = (0, 0, 0);
    for seed in 0..8 {
        let o = SimOptions {
            partitioning: PartitionChoice::Fixed(2 + (seed as u32 % 2)),
            ..members(1200)
        };
        let r = run_seed(seed, &o);
        assert!(r.params.member_changes, "seed {seed} changes its replicas");
        assert!(r.passed, "seed {seed}: {}", r.one_line());
        let n = |k: &str| r.counters.get(k).copied().unwrap_or(0);
        added += n("member_added");
        removed += n("member_removed");
        followed += n("clients_followed").min(1);
    }
    assert!(added >= 6, "the joiner was added in {added} of 8 seeds");
    assert!(
        removed >= 4,
        "a replica was removed in {removed} of 8 seeds"
    );
    assert!(
        followed >= 4,
        "clients followed a change in {followed} of 8 seeds"
    );
}

/// Multi-Ring Paxos seeds change their replicas (never the rings' acceptors): the
/// change is ordered on the ring across every partition, the joiner learns its
/// partition's rings and signals with the others, and one of its partition's initial
/// replicas leaves. Seeds 186 and 262 (unpartitioned, two rings) are regressions: a
/// joiner restored a checkpoint whose merge position counted two values its state
/// lacked (taken while the values a resumed ring let through waited to run). (The
/// swarm draws such seeds too, partitioned ones among them.)
#[test]
fn membership_change_multiring_seeds_pass() {
    let (mut added, mut removed) = (0, 0);
    let runs = [(186, None, 2000), (262, None, 2000), (0, Some(2), 1000)];
    for (seed, partitions, ops) in runs {
        let o = SimOptions {
            ops,
            members: MembersChoice::On,
            rings: RingsChoice::Fixed(2),
            partitioning: partitions.map_or(PartitionChoice::Swarm, PartitionChoice::Fixed),
            trace_tail: 0,
            ..SimOptions::default()
        };
        let r = run_seed(seed, &o);
        assert!(r.params.member_changes && r.params.rings > 0, "seed {seed}");
        assert!(r.passed, "seed {seed}: {}", r.one_line());
        let n = |k: &str| r.counters.get(k).copied().unwrap_or(0);
        let acceptor_changes = n("acceptor_added") + n("acceptor_removed");
        assert_eq!(acceptor_changes, 0, "seed {seed}");
        added += n("member_added");
        removed += n("member_removed");
    }
    assert!(
        added == 3 && removed == 3,
        "added in {added}, removed in {removed} of 3 seeds"
    );
}

/// `member-apply-late` (replicas with odd ids apply a change one value late): the
/// replicas end at the same position disagreeing on where the changes took effect,
/// or, when the change was of acceptors, a late replica executed a decision of the
/// old epoch above the change that the others never execute, and a client read what
/// no linearization allows.
#[test]
fn member_apply_late_is_caught() {
    let (seed, what) = control_opts("member-apply-late", members(1200), 0..20);
    assert!(
        what.contains("disagree on the replicas") || what.contains("no linearization allows"),
        "member-apply-late caught for another reason: {what}"
    );
    eprintln!("member-apply-late caught at seed {seed}: {what}");
}

/// `member-old-epoch-decisions` (learners take an old configuration's decisions
/// above the change that replaced its acceptors): a learner holds two decisions for
/// one instance, the old epoch's and the new one's, or replicas execute different
/// values there.
#[test]
fn member_old_epoch_decisions_is_caught() {
    let (seed, what) = control_opts("member-old-epoch-decisions", members(1200), 0..30);
    assert!(
        what.contains("two different decisions for one instance")
            || what.contains("different prefixes")
            || what.contains("diverged"),
        "member-old-epoch-decisions caught for another reason: {what}"
    );
    eprintln!("member-old-epoch-decisions caught at seed {seed}: {what}");
}

/// `member-mixed-quorum` (quorums counted with the cluster file's majority after the
/// acceptors changed): while the joiner makes four acceptors, two of them are a
/// quorum, and two leaders on either side of a partition each get a value chosen for
/// one instance of one ordering epoch (the agreement oracle sees it decided twice).
#[test]
fn member_mixed_quorum_is_caught() {
    let (seed, what) = control_opts("member-mixed-quorum", members(1200), 0..60);
    assert!(
        what.contains("decided twice")
            || what.contains("two different decisions for one instance")
            || what.contains("different prefixes")
            || what.contains("diverged"),
        "member-mixed-quorum caught for another reason: {what}"
    );
    eprintln!("member-mixed-quorum caught at seed {seed}: {what}");
}

/// `member-join-without-transfer` (a joining replica that finds the log truncated
/// skips ahead with its empty state): it ends with a state no other replica has.
#[test]
fn member_join_without_transfer_is_caught() {
    let (seed, what) = control_opts("member-join-without-transfer", members(1200), 0..30);
    assert!(
        what.contains("replicas diverged") || what.contains("different prefixes"),
        "member-join-without-transfer caught for another reason: {what}"
    );
    eprintln!("member-join-without-transfer caught at seed {seed}: {what}");
}

/// Skipped ticks: a node's ticks before the one its core says may act
/// (`NodeCore::tick_due`) are skipped and delivered at once with its next handler.
/// With `--tick-check` every tick is delivered, as the runtime does, and a tick that
/// acts before the node's word fails the run: the swarm's clusters (Multi-Ring Paxos,
/// partitions, P-SMR, the key-value store's idle values, batchers) keep their word,
/// and a core that answers 20 ticks late (`tick-due-late`) is caught by that check.
#[test]
fn tick_dues_hold_and_a_late_due_is_caught() {
    let clean = SimOptions {
        ops: 400,
        tick_check: true,
        trace_tail: 0,
        ..SimOptions::default()
    };
    for seed in 0..6 {
        let r = run_seed(seed, &clean);
        assert!(r.passed, "seed {seed}: {}", r.one_line());
    }
    let (seed, what) = control_opts("tick-due-late", clean, 0..6);
    assert!(
        what.starts_with("invariants: ") && what.contains("a tick acted"),
        "seed {seed}: {what}"
    );
    assert!(
        what.contains("though the node said none would before"),
        "{what}"
    );
}
