//! EPaxos (`partita_consensus::epaxos`): scripted exchanges with the exact actions out,
//! and seeded swarms in a small deterministic simulated network (random delays hence
//! reordering, loss and duplication with retransmission on ticks, disks that lose
//! unsynced writes on a crash, crashes and restarts of replicas including command
//! leaders with instances in flight), with a safety phase under faults and a liveness
//! phase after healing. Checks: one commit per instance everywhere; interfering
//! commands executed in the same relative order by every replica (every incarnation);
//! each command saw the same interfering commands before it in every log that executed
//! it; each instance and each command executed at most once per incarnation; each
//! `Cut` position is exactly what its log executed, and the k-th cuts of all logs
//! executed the same non-no-op instances; after healing, every replica executed the
//! same instances, its position says so, and every command of a leader that did not
//! crash afterwards is executed everywhere. The planted bug
//! (`skip_slow_path_when_deps_differ`) must be caught as an order divergence (with its
//! consequences on predecessors and cuts), and nothing else.
//!
//! The swarms `*_with_checkpoints` add checkpoints (at cuts and at random positions),
//! truncation at the frontier of f + 1 durable checkpoints, the driver deleting the log
//! prefix `TruncateLog` names, restarts from the own checkpoint and what remains of the
//! log (`recover_at`), and state transfer from a peer's checkpoint on `NeedState`
//! (`restore`); a log's history then starts from the checkpoint's. Scripted tests of
//! these features are in `tests/epaxos_checkpoints.rs`.
//!
//! `EPAXOS_SEEDS=n` runs n seeds per swarm instead of the default;
//! `CHECKPOINTS=1` makes `debug_one_seed` run the checkpoint swarm.

use partita_consensus::epaxos::{
    truncation_frontier, Attrs, Epaxos, EpaxosAction, EpaxosBugs, EpaxosCommand, EpaxosConfig,
    EpaxosMsg, EpaxosOutbox, EpaxosRecord, EpaxosStats, ExecPosition, Held, InstanceId, KeyAccess,
    Status, CONFLICTING_COMMIT, SLOT_MAX,
};
use partita_consensus::ROUND_MAX;
use partita_types::{Ballot, Command, NodeId, Payload};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

// ---- Helpers ---------------------------------------------------------------------------

fn cmd(id: u64, keys: &[(u64, bool)], conflicts_all: bool) -> EpaxosCommand {
    EpaxosCommand::new(
        Command::single(id, 1, 0, Payload::copy_from_slice(&id.to_le_bytes())),
        keys.iter().map(|&(key, write)| KeyAccess { key, write }),
        conflicts_all,
    )
}

fn cmd_id(c: &Option<EpaxosCommand>) -> Option<u64> {
    c.as_ref().map(|c| c.commands[0].client)
}

fn config(n: usize) -> EpaxosConfig {
    EpaxosConfig::new((1..=n as NodeId).collect())
}

fn sends(out: &EpaxosOutbox) -> Vec<(NodeId, EpaxosMsg)> {
    out.iter()
        .filter_map(|a| match a {
            EpaxosAction::Send { to, msg } => Some((*to, msg.clone())),
            _ => None,
        })
        .collect()
}

fn persist_tokens(out: &EpaxosOutbox) -> Vec<u64> {
    out.iter()
        .filter_map(|a| match a {
            EpaxosAction::Persist { token, .. } => Some(*token),
            _ => None,
        })
        .collect()
}

fn executed(out: &EpaxosOutbox) -> Vec<(InstanceId, Option<u64>)> {
    out.iter()
        .filter_map(|a| match a {
            EpaxosAction::Execute {
                instance, command, ..
            } => Some((*instance, cmd_id(command))),
            _ => None,
        })
        .collect()
}

fn i(replica: NodeId, slot: u64) -> InstanceId {
    InstanceId { replica, slot }
}

// ---- Scripted exchanges ----------------------------------------------------------------

#[test]
fn fast_path_with_three_replicas() {
    let cfg = config(3);
    assert_eq!((cfg.majority(), cfg.fast_quorum()), (2, 2));
    assert_eq!(config(5).fast_quorum(), 3);
    assert_eq!(config(7).fast_quorum(), 5);
    let mut a = Epaxos::new(1, cfg.clone());
    let mut b = Epaxos::new(2, cfg.clone());
    let mut out = Vec::new();
    let x = a.propose(cmd(7, &[(1, true)], false), &mut out).unwrap();
    assert_eq!(x, i(1, 1));
    assert_eq!(persist_tokens(&out), vec![1]);
    assert!(
        sends(&out).is_empty(),
        "nothing leaves before the record is durable"
    );
    out.clear();
    a.on_persisted(1, &mut out);
    let s = sends(&out);
    assert_eq!(s.iter().map(|(to, _)| *to).collect::<Vec<_>>(), vec![2, 3]);
    let EpaxosMsg::PreAccept {
        ballot, ref attrs, ..
    } = s[0].1
    else {
        panic!("{s:?}")
    };
    assert_eq!(ballot, Ballot::ZERO);
    assert_eq!(
        *attrs,
        Attrs {
            seq: 1,
            deps: vec![0, 0, 0]
        }
    );
    out.clear();
    b.on_message(1, s[0].1.clone(), &mut out);
    assert_eq!(persist_tokens(&out), vec![1]);
    assert!(sends(&out).is_empty(), "the answer waits for the write");
    out.clear();
    b.on_persisted(1, &mut out);
    let reply = sends(&out);
    assert_eq!(reply.len(), 1);
    assert!(matches!(reply[0], (1, EpaxosMsg::PreAcceptOk { .. })));
    out.clear();
    a.on_message(2, reply[0].1.clone(), &mut out);
    assert_eq!(a.stats().fast_commits, 1);
    assert_eq!(persist_tokens(&out), vec![2], "the commit is written first");
    assert!(sends(&out).is_empty() && executed(&out).is_empty());
    out.clear();
    a.on_persisted(2, &mut out);
    assert_eq!(executed(&out), vec![(x, Some(7))]);
    let commits: Vec<NodeId> = sends(&out)
        .iter()
        .filter(|(_, m)| matches!(m, EpaxosMsg::Commit { .. }))
        .map(|(to, _)| *to)
        .collect();
    assert_eq!(commits, vec![2, 3]);
    a.invariants_full();
    b.invariants_full();
}

/// Drive a set of cores to completion with instant, lossless delivery and instant
/// disks. Returns the execution order of each.
fn settle(cores: &mut [Epaxos], mut inflight: VecDeque<(NodeId, NodeId, EpaxosMsg)>) {
    let mut rounds = 0;
    while let Some((from, to, msg)) = inflight.pop_front() {
        rounds += 1;
        assert!(rounds < 100_000);
        let k = cores.iter().position(|c| c.id() == to).unwrap();
        let mut out = Vec::new();
        cores[k].on_message(from, msg, &mut out);
        drain(cores, k, out, &mut inflight);
    }
}

fn drain(
    cores: &mut [Epaxos],
    k: usize,
    mut out: EpaxosOutbox,
    inflight: &mut VecDeque<(NodeId, NodeId, EpaxosMsg)>,
) {
    loop {
        let mut last = None;
        for a in out.drain(..) {
            match a {
                EpaxosAction::Send { to, msg } => inflight.push_back((cores[k].id(), to, msg)),
                EpaxosAction::Persist { token, .. } => last = Some(token),
                EpaxosAction::Execute { .. }
                | EpaxosAction::Cut { .. }
                | EpaxosAction::TruncateLog { .. }
                | EpaxosAction::NeedState { .. } => {}
            }
        }
        cores[k].invariants();
        match last {
            Some(t) => cores[k].on_persisted(t, &mut out),
            None => break,
        }
    }
}

#[test]
fn slow_path_when_a_replica_knows_an_interfering_command() {
    let cfg = config(3);
    let mut cores: Vec<Epaxos> = (1..=3).map(|id| Epaxos::new(id, cfg.clone())).collect();
    // Replica 3 proposes a write of key 5 and replica 2 hears of it only.
    let mut out = Vec::new();
    let y = cores[2]
        .propose(cmd(30, &[(5, true)], false), &mut out)
        .unwrap();
    let mut net = VecDeque::new();
    drain(&mut cores, 2, out, &mut net);
    let to_2: Vec<_> = net.drain(..).filter(|(_, to, _)| *to == 2).collect();
    let mut out = Vec::new();
    cores[1].on_message(3, to_2[0].2.clone(), &mut out);
    let mut ignored = VecDeque::new();
    drain(&mut cores, 1, out, &mut ignored);
    // Replica 1 proposes a read of key 5 and hears from replica 2 first: different
    // deps, so the slow path.
    let mut out = Vec::new();
    let x = cores[0]
        .propose(cmd(10, &[(5, false)], false), &mut out)
        .unwrap();
    let mut net = VecDeque::new();
    drain(&mut cores, 0, out, &mut net);
    let mut replies = VecDeque::new();
    for (_, to, m) in net {
        let k = (to - 1) as usize;
        let mut out = Vec::new();
        cores[k].on_message(1, m, &mut out);
        drain(&mut cores, k, out, &mut replies);
    }
    let (_, _, ok) = replies.pop_front().unwrap();
    let EpaxosMsg::PreAcceptOk { ref attrs, .. } = ok else {
        panic!("{ok:?}")
    };
    assert_eq!(attrs.deps, vec![0, 0, y.slot], "replica 2 adds 3.1");
    let mut out = Vec::new();
    cores[0].on_message(2, ok, &mut out);
    assert!(
        sends(&out).is_empty(),
        "one answer differs, the other may still agree: wait for it"
    );
    let (_, _, ok) = replies.pop_front().unwrap();
    let mut out = Vec::new();
    cores[0].on_message(3, ok, &mut out);
    let accepts = sends(&out)
        .into_iter()
        .filter(|(_, m)| matches!(m, EpaxosMsg::Accept { .. }))
        .count();
    assert_eq!(
        accepts, 2,
        "Accept to both peers (and itself through loopback)"
    );
    let mut net = VecDeque::new();
    drain(&mut cores, 0, out, &mut net);
    settle(&mut cores, net);
    assert_eq!(cores[0].stats().slow_commits, 1);
    assert_eq!(cores[0].stats().fast_commits, 0);
    let h = cores[0].held(x).unwrap();
    assert_eq!(h.status, Status::Committed);
    assert_eq!(h.attrs.deps, vec![0, 0, 1]);
    for c in &cores {
        c.invariants_full();
    }
}

#[test]
fn a_cycle_executes_by_seq_then_instance_at_every_replica() {
    // Two interfering commands that each depend on the other: one component,
    // executed by (seq, instance id) whichever commit arrives first.
    let cfg = config(3);
    let a = cmd(1, &[(9, true)], false);
    let b = cmd(2, &[(9, true)], false);
    let attrs = Attrs {
        seq: 1,
        deps: vec![1, 1, 0],
    };
    let orders: Vec<Vec<(InstanceId, Option<u64>)>> = [false, true]
        .iter()
        .map(|&b_first| {
            let mut r = Epaxos::new(3, cfg.clone());
            let mut out = Vec::new();
            let ca = EpaxosMsg::Commit {
                instance: i(1, 1),
                command: Some(a.clone()),
                attrs: attrs.clone(),
            };
            let cb = EpaxosMsg::Commit {
                instance: i(2, 1),
                command: Some(b.clone()),
                attrs: attrs.clone(),
            };
            let msgs = if b_first {
                [(2, cb), (1, ca)]
            } else {
                [(1, ca), (2, cb)]
            };
            for (from, m) in msgs {
                r.on_message(from, m, &mut out);
            }
            for t in persist_tokens(&out) {
                r.on_persisted(t, &mut out);
            }
            r.invariants_full();
            executed(&out)
        })
        .collect();
    assert_eq!(orders[0], vec![(i(1, 1), Some(1)), (i(2, 1), Some(2))]);
    assert_eq!(orders[0], orders[1]);
}

#[test]
fn what_no_correct_peer_sends_is_dropped_and_counted() {
    let cfg = config(3);
    let mut r = Epaxos::new(2, cfg);
    let mut out = Vec::new();
    let good = Attrs {
        seq: 1,
        deps: vec![0, 0, 0],
    };
    let pre = |instance, ballot, attrs: Attrs| EpaxosMsg::PreAccept {
        instance,
        ballot,
        command: Some(cmd(1, &[(1, true)], false)),
        attrs,
    };
    let bad = vec![
        (9, pre(i(1, 1), Ballot::ZERO, good.clone())),
        (2, pre(i(1, 1), Ballot::ZERO, good.clone())),
        (1, pre(i(9, 1), Ballot::ZERO, good.clone())),
        (1, pre(i(1, 0), Ballot::ZERO, good.clone())),
        (1, pre(i(1, SLOT_MAX + 1), Ballot::ZERO, good.clone())),
        (3, pre(i(1, 1), Ballot::ZERO, good.clone())),
        (3, pre(i(1, 1), Ballot::new(2, 1), good.clone())),
        (1, pre(i(1, 1), Ballot::new(ROUND_MAX + 1, 1), good.clone())),
        (1, pre(i(1, 1), Ballot::new(0, 1), good.clone())),
        (
            1,
            pre(
                i(1, 1),
                Ballot::ZERO,
                Attrs {
                    seq: 1,
                    deps: vec![0, 0],
                },
            ),
        ),
        (
            1,
            pre(
                i(1, 1),
                Ballot::ZERO,
                Attrs {
                    seq: 1,
                    deps: vec![0, u64::MAX, 0],
                },
            ),
        ),
        (
            1,
            EpaxosMsg::PreAccept {
                instance: i(1, 1),
                ballot: Ballot::ZERO,
                command: Some(EpaxosCommand {
                    keys: vec![
                        KeyAccess {
                            key: 3,
                            write: true,
                        },
                        KeyAccess {
                            key: 1,
                            write: true,
                        },
                    ],
                    ..cmd(1, &[], false)
                }),
                attrs: good.clone(),
            },
        ),
        (
            3,
            EpaxosMsg::Prepare {
                instance: i(1, 1),
                ballot: Ballot::new(1, 1),
            },
        ),
        (
            3,
            EpaxosMsg::Prepare {
                instance: i(2, 5),
                ballot: Ballot::new(1, 3),
            },
        ),
        (
            1,
            EpaxosMsg::Heartbeat {
                committed: vec![1, 2],
                truncated: vec![0, 0, 0],
            },
        ),
        (
            1,
            EpaxosMsg::Heartbeat {
                committed: vec![1, 2, 3],
                truncated: vec![0, SLOT_MAX + 1, 0],
            },
        ),
        (
            1,
            EpaxosMsg::Truncated {
                frontier: vec![0, 0],
            },
        ),
        (
            1,
            EpaxosMsg::CommitRequest {
                instances: vec![i(1, 1); 1000],
            },
        ),
    ];
    let count = bad.len() as u64;
    for (from, m) in bad {
        r.on_message(from, m, &mut out);
        r.invariants_full();
    }
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(r.drops().total(), count, "{:?}", r.drops());
}

#[test]
fn a_crashed_leaders_instance_is_recovered_and_a_restart_reexecutes() {
    let cfg = config(3);
    let mut a = Epaxos::new(1, cfg.clone());
    let mut b = Epaxos::new(2, cfg.clone());
    let mut c = Epaxos::new(3, cfg.clone());
    let mut out = Vec::new();
    let x = a.propose(cmd(5, &[(1, true)], false), &mut out).unwrap();
    a.on_persisted(1, &mut out);
    let pre = sends(&out).into_iter().find(|(to, _)| *to == 2).unwrap().1;
    // Replica 2 pre-accepts; replica 1 crashes before any answer arrives.
    let mut out = Vec::new();
    b.on_message(1, pre, &mut out);
    b.on_persisted(1, &mut out);
    let mut log_b = Vec::new();
    let mut net: VecDeque<(NodeId, NodeId, EpaxosMsg)> = VecDeque::new();
    let mut b_records = Vec::new();
    let mut now = 0;
    // Ticks until replica 2 recovers 1.1; replica 3 answers; replica 1 is down.
    let mut b_out = Vec::new();
    while b.held(x).map(|h| h.status) != Some(Status::Committed) || !b.is_quiescent() {
        now += 1;
        assert!(now < 2_000, "no recovery");
        b.on_tick(now, &mut b_out);
        c.on_tick(now, &mut Vec::new());
        loop {
            let mut last = None;
            for act in b_out.drain(..) {
                match act {
                    EpaxosAction::Send { to, msg } => net.push_back((2, to, msg)),
                    EpaxosAction::Persist { token, record } => {
                        b_records.push(record);
                        last = Some(token)
                    }
                    EpaxosAction::Execute {
                        instance, command, ..
                    } => log_b.push((instance, cmd_id(&command))),
                    other => panic!("{other:?}"),
                }
            }
            if let Some(t) = last {
                b.on_persisted(t, &mut b_out);
                continue;
            }
            let Some((from, to, msg)) = net.pop_front() else {
                break;
            };
            match to {
                2 => b.on_message(from, msg, &mut b_out),
                3 => {
                    let mut o = Vec::new();
                    c.on_message(from, msg, &mut o);
                    for t in persist_tokens(&o) {
                        c.on_persisted(t, &mut o);
                    }
                    for (to, m) in sends(&o) {
                        net.push_back((3, to, m));
                    }
                }
                _ => {}
            }
        }
        b.invariants();
    }
    let s = b.stats();
    assert_eq!(s.recoveries_started, 1, "{s:?}");
    assert_eq!((s.recovered_foreign, s.recovered_commands), (1, 1), "{s:?}");
    assert_eq!(log_b, vec![(x, Some(5))]);
    // Replica 2 restarts from its records and executes 1.1 again, once.
    let mut b2 = Epaxos::recover(2, cfg, b_records.clone());
    b2.invariants_full();
    let mut out = Vec::new();
    b2.on_tick(now + 1, &mut out);
    assert_eq!(executed(&out), vec![(x, Some(5))]);
    b2.invariants_full();
    assert!(matches!(
        b_records.last(),
        Some(EpaxosRecord::Instance {
            held: Held {
                status: Status::Committed,
                ..
            },
            ..
        })
    ));
}

fn about(m: &EpaxosMsg) -> Option<InstanceId> {
    match m {
        EpaxosMsg::PreAccept { instance, .. }
        | EpaxosMsg::PreAcceptOk { instance, .. }
        | EpaxosMsg::Accept { instance, .. }
        | EpaxosMsg::AcceptOk { instance, .. }
        | EpaxosMsg::Commit { instance, .. }
        | EpaxosMsg::Prepare { instance, .. }
        | EpaxosMsg::PrepareOk { instance, .. }
        | EpaxosMsg::Nack { instance, .. } => Some(*instance),
        _ => None,
    }
}

// ---- The simulated network ---------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Faults {
    drop_per_mille: u32,
    dup_per_mille: u32,
    delay_ticks_max: u64,
    disk_ticks_max: u64,
    /// Per tick, per mille: crash a random replica (at most F down at once).
    crash_per_mille: u32,
    /// Per proposal, per mille: crash its leader within a few ticks.
    leader_crash_per_mille: u32,
}

const CALM: Faults = Faults {
    drop_per_mille: 0,
    dup_per_mille: 0,
    delay_ticks_max: 10,
    disk_ticks_max: 3,
    crash_per_mille: 0,
    leader_crash_per_mille: 0,
};

const STORMY: Faults = Faults {
    drop_per_mille: 50,
    dup_per_mille: 20,
    delay_ticks_max: 12,
    disk_ticks_max: 6,
    crash_per_mille: 2,
    leader_crash_per_mille: 25,
};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Violation {
    /// Two commits of one instance differ.
    CommitMismatch(InstanceId),
    /// Two interfering commands executed in different orders by two incarnations.
    OrderDivergence {
        key: u64,
        first: u64,
        second: u64,
    },
    DuplicateExecution(InstanceId),
    DuplicateCommand(u64),
    /// A message names a slot of its sender's own column that is not durable there:
    /// a crash could let the sender reuse a slot its peers already depend on.
    PhantomSlot(InstanceId),
    ConflictingCommitDropped,
    /// The k-th cut of two logs holds different non-no-op instances.
    CutMismatch {
        cut: usize,
    },
    /// A cut's position is not the set its log executed before it.
    CutPosition {
        cut: usize,
    },
    /// At the end, a replica's position is not the set its log executed.
    FinalPosition(NodeId),
    /// A command saw different interfering commands before it in two logs.
    PredecessorMismatch {
        key: u64,
        command: u64,
    },
    Liveness(String),
    /// A tick before the core's `tick_due` acted.
    TickBeforeDue {
        node: NodeId,
        tick: u64,
        due: u64,
    },
}

#[derive(Clone, Debug)]
struct CmdInfo {
    keys: Vec<KeyAccess>,
    conflicts_all: bool,
    node: usize,
    at: u64,
    instance: InstanceId,
}

/// A durable checkpoint: the position of a cut, and the service state there (the log of
/// executions that led to it, which is what the checks look at).
#[derive(Clone)]
struct Checkpoint {
    position: ExecPosition,
    log: Log,
}

struct Node {
    core: Option<Epaxos>,
    /// Durable records with the tokens of the running incarnation.
    durable: Vec<(u64, EpaxosRecord)>,
    /// The newest durable checkpoint (checkpoint mode).
    checkpoint: Option<Checkpoint>,
    pending: VecDeque<(u64, u64, EpaxosRecord)>,
    log: usize,
    down_until: u64,
    last_crash: Option<u64>,
    /// The highest slot of its own column in a durable record.
    durable_own_slot: u64,
}

#[derive(Clone)]
struct Log {
    entries: Vec<(InstanceId, Option<u64>)>,
    instances: BTreeSet<InstanceId>,
    commands: BTreeSet<u64>,
    /// Each `Cut`: how many entries preceded it, and its position.
    cuts: Vec<(usize, ExecPosition)>,
}

#[derive(Default, Clone, Debug)]
struct Totals {
    runs: u64,
    proposed: u64,
    fast: u64,
    slow: u64,
    recoveries: u64,
    recovered_foreign: u64,
    recovered_commands: u64,
    recovered_noops: u64,
    recovered_committed: u64,
    ambiguous: u64,
    crashes: u64,
    messages: u64,
    executed: u64,
    cuts: u64,
    truncations: u64,
    dropped: u64,
    truncated_sent: u64,
    need_states: u64,
    restores: u64,
    restore_unexecuted: u64,
    /// Ticks the cores were given before their `tick_due` (each must do nothing).
    ticks_before_due: u64,
}

impl Totals {
    fn add(&mut self, s: &EpaxosStats) {
        self.cuts += s.cuts;
        self.truncations += s.truncations;
        self.dropped += s.instances_dropped;
        self.truncated_sent += s.truncated_sent;
        self.need_states += s.need_states;
        self.restores += s.restores;
        self.restore_unexecuted += s.restore_unexecuted;
        self.fast += s.fast_commits;
        self.slow += s.slow_commits;
        self.recoveries += s.recoveries_started;
        self.recovered_foreign += s.recovered_foreign;
        self.recovered_commands += s.recovered_commands;
        self.recovered_noops += s.recovered_noops;
        self.recovered_committed += s.recovered_committed;
        self.ambiguous += s.ambiguous_waits;
    }
}

struct Sim {
    rng: ChaCha8Rng,
    ids: Vec<NodeId>,
    cfg: EpaxosConfig,
    bugs: EpaxosBugs,
    faults: Faults,
    nodes: Vec<Node>,
    now: u64,
    net: BinaryHeap<Reverse<(u64, u64)>>,
    msgs: BTreeMap<u64, (NodeId, NodeId, EpaxosMsg)>,
    msg_seq: u64,
    logs: Vec<Log>,
    commits: BTreeMap<InstanceId, (Option<u64>, Attrs)>,
    commands: BTreeMap<u64, CmdInfo>,
    scheduled_crashes: Vec<(u64, usize)>,
    violations: Vec<Violation>,
    totals: Totals,
    next_cmd: u64,
    /// Keys of the contended pool.
    hot_keys: u64,
    /// Print every message about this instance (debugging a seed).
    trace: Option<InstanceId>,
    /// Checkpoint mode: checkpoints at cuts, truncation at the frontier of f + 1
    /// durable checkpoints every `truncate_every_ticks`, state transfer on `NeedState`
    /// from a peer's checkpoint, restarts from the own checkpoint.
    checkpoints: bool,
    truncate_every_ticks: u64,
    /// Per cent of commands that conflict with everything.
    barrier_per_cent: u32,
    /// Per tick, per mille: a replica also checkpoints at its current position, not at
    /// a cut (any position is a correct one to restore at; cuts only make checkpoints
    /// comparable), which gives positions with exceptions above gaps.
    free_checkpoint_per_mille: u32,
    /// State transfers due: (tick, node).
    transfers: Vec<(u64, usize)>,
    /// Ticks added to every core's `tick_due` before the check that a tick before it
    /// does nothing (0; the check's control makes the dues late).
    tick_due_late: u64,
}

impl Sim {
    fn new(seed: u64, n: usize, bugs: EpaxosBugs, faults: Faults) -> Sim {
        let ids: Vec<NodeId> = (1..=n as NodeId).collect();
        let cfg = EpaxosConfig::new(ids.clone());
        let mut sim = Sim {
            rng: ChaCha8Rng::seed_from_u64(seed),
            ids: ids.clone(),
            cfg: cfg.clone(),
            bugs,
            faults,
            nodes: Vec::new(),
            now: 0,
            net: BinaryHeap::new(),
            msgs: BTreeMap::new(),
            msg_seq: 0,
            logs: Vec::new(),
            commits: BTreeMap::new(),
            commands: BTreeMap::new(),
            scheduled_crashes: Vec::new(),
            violations: Vec::new(),
            totals: Totals::default(),
            next_cmd: 1,
            hot_keys: 4,
            trace: None,
            checkpoints: false,
            truncate_every_ticks: 97,
            barrier_per_cent: 2,
            free_checkpoint_per_mille: 0,
            transfers: Vec::new(),
            tick_due_late: 0,
        };
        for &id in &ids {
            let mut core = Epaxos::new(id, cfg.clone());
            core.set_bugs(bugs);
            let log = sim.new_log();
            sim.nodes.push(Node {
                core: Some(core),
                durable: Vec::new(),
                checkpoint: None,
                pending: VecDeque::new(),
                log,
                down_until: 0,
                last_crash: None,
                durable_own_slot: 0,
            });
        }
        sim
    }

    fn new_log(&mut self) -> usize {
        self.logs.push(Log {
            entries: Vec::new(),
            instances: BTreeSet::new(),
            commands: BTreeSet::new(),
            cuts: Vec::new(),
        });
        self.logs.len() - 1
    }

    /// The sim in checkpoint mode, with more barriers (so more cuts).
    fn with_checkpoints(mut self) -> Sim {
        self.checkpoints = true;
        self.barrier_per_cent = 6;
        self
    }

    fn violation(&mut self, v: Violation) {
        if self.violations.len() < 20 {
            self.violations.push(v);
        }
    }

    fn apply(&mut self, k: usize, out: EpaxosOutbox) {
        for a in out {
            match a {
                EpaxosAction::Send { to, msg } => {
                    self.check_own_slots(k, &msg);
                    self.transmit(self.ids[k], to, msg)
                }
                EpaxosAction::Persist { token, record } => {
                    let d = self.rng.gen_range(1..=self.faults.disk_ticks_max);
                    let node = &mut self.nodes[k];
                    let done = node.pending.back().map_or(0, |p| p.0).max(self.now + d);
                    node.pending.push_back((done, token, record));
                }
                EpaxosAction::Execute {
                    instance,
                    command,
                    attrs,
                } => self.on_execute(k, instance, command, attrs),
                EpaxosAction::Cut { position } => {
                    let log = &mut self.logs[self.nodes[k].log];
                    log.cuts.push((log.entries.len(), position.clone()));
                    if self.checkpoints {
                        // Checkpoints are durable at once here; a real node would
                        // report them only once written.
                        let log = log.clone();
                        self.nodes[k].checkpoint = Some(Checkpoint { position, log });
                    }
                }
                EpaxosAction::TruncateLog { below_token } => {
                    assert!(self.checkpoints, "truncation in checkpoint mode only");
                    self.nodes[k].durable.retain(|(t, _)| *t >= below_token);
                }
                EpaxosAction::NeedState { .. } => {
                    assert!(self.checkpoints, "nothing truncated, nothing to fetch");
                    if !self.transfers.iter().any(|&(_, j)| j == k) {
                        let at = self.now + self.rng.gen_range(1..=20);
                        self.transfers.push((at, k));
                    }
                }
            }
        }
        if let Some(core) = &self.nodes[k].core {
            core.invariants();
        }
    }

    fn note_commit(&mut self, instance: InstanceId, id: Option<u64>, attrs: &Attrs) {
        match self.commits.get(&instance) {
            None => {
                self.commits.insert(instance, (id, attrs.clone()));
            }
            Some((cid, cattrs)) => {
                if *cid != id || cattrs != attrs {
                    self.violation(Violation::CommitMismatch(instance));
                }
            }
        }
    }

    fn on_execute(
        &mut self,
        k: usize,
        instance: InstanceId,
        command: Option<EpaxosCommand>,
        attrs: Attrs,
    ) {
        let id = cmd_id(&command);
        self.note_commit(instance, id, &attrs);
        let log = &mut self.logs[self.nodes[k].log];
        let dup_instance = !log.instances.insert(instance);
        let dup_command = id.is_some_and(|c| !log.commands.insert(c));
        log.entries.push((instance, id));
        if dup_instance {
            self.violation(Violation::DuplicateExecution(instance));
        }
        if dup_command {
            self.violation(Violation::DuplicateCommand(id.unwrap()));
        }
        self.totals.executed += 1;
    }

    fn check_own_slots(&mut self, k: usize, msg: &EpaxosMsg) {
        let me = self.ids[k];
        let durable = self.nodes[k].durable_own_slot;
        let named = match msg {
            EpaxosMsg::PreAccept { attrs, .. }
            | EpaxosMsg::PreAcceptOk { attrs, .. }
            | EpaxosMsg::Accept { attrs, .. }
            | EpaxosMsg::Commit { attrs, .. } => attrs.deps[k],
            EpaxosMsg::PrepareOk { held: Some(h), .. } => h.attrs.deps[k],
            _ => 0,
        };
        let own = about(msg).filter(|i| i.replica == me).map_or(0, |i| i.slot);
        let top = named.max(own);
        if top > durable {
            self.violation(Violation::PhantomSlot(InstanceId {
                replica: me,
                slot: top,
            }));
        }
    }

    fn transmit(&mut self, from: NodeId, to: NodeId, msg: EpaxosMsg) {
        self.totals.messages += 1;
        if self.rng.gen_range(0..1000) < self.faults.drop_per_mille {
            return;
        }
        let copies = if self.rng.gen_range(0..1000) < self.faults.dup_per_mille {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let at = self.now + self.rng.gen_range(1..=self.faults.delay_ticks_max);
            self.msg_seq += 1;
            self.net.push(Reverse((at, self.msg_seq)));
            self.msgs.insert(self.msg_seq, (from, to, msg.clone()));
        }
    }

    fn down(&self) -> usize {
        self.nodes.iter().filter(|n| n.core.is_none()).count()
    }

    fn crash(&mut self, k: usize) {
        if self.nodes[k].core.is_none() || self.down() >= self.cfg.f() {
            return;
        }
        if self.trace.is_some() {
            eprintln!("t={} crash node {}", self.now, self.ids[k]);
        }
        let core = self.nodes[k].core.take().unwrap();
        self.totals.add(core.stats());
        self.totals.crashes += 1;
        let downtime = self.rng.gen_range(50..400);
        let node = &mut self.nodes[k];
        node.pending.clear(); // unsynced writes are lost
        node.down_until = self.now + downtime;
        node.last_crash = Some(self.now);
    }

    fn restart(&mut self, k: usize) {
        // The log's records are numbered afresh by the new incarnation.
        let node = &mut self.nodes[k];
        let records: Vec<EpaxosRecord> = node.durable.drain(..).map(|(_, r)| r).collect();
        node.durable = records
            .iter()
            .cloned()
            .zip(1..)
            .map(|(r, t)| (t, r))
            .collect();
        let checkpoint = node.checkpoint.clone();
        let mut core = Epaxos::recover_at(
            self.ids[k],
            self.cfg.clone(),
            checkpoint.as_ref().map(|c| c.position.clone()),
            records,
        );
        core.invariants_full();
        core.set_bugs(self.bugs);
        self.nodes[k].core = Some(core);
        self.nodes[k].log = match checkpoint {
            Some(c) => {
                self.logs.push(c.log);
                self.logs.len() - 1
            }
            None => self.new_log(),
        };
    }

    /// Every `truncate_every_ticks`: each live replica truncates at the frontier of
    /// f + 1 durable checkpoints, capped by its own (so that its own restart never
    /// needs a peer's checkpoint).
    fn truncate(&mut self) {
        let positions: Vec<ExecPosition> = self
            .nodes
            .iter()
            .filter_map(|n| Some(n.checkpoint.as_ref()?.position.clone()))
            .collect();
        let Some(frontier) = truncation_frontier(&positions, self.cfg.f()) else {
            return;
        };
        for k in 0..self.nodes.len() {
            let Some(own) = self.nodes[k].checkpoint.as_ref() else {
                continue;
            };
            let capped: Vec<u64> = frontier
                .iter()
                .zip(&own.position.prefix)
                .map(|(&f, &p)| f.min(p))
                .collect();
            if let Some(core) = self.nodes[k].core.as_mut() {
                let mut out = Vec::new();
                core.truncate_below(&capped, &mut out);
                self.apply(k, out);
            }
        }
    }

    /// State transfer: the newest checkpoint of a peer that covers what is needed
    /// becomes this replica's state and its own durable checkpoint.
    fn transfer(&mut self, k: usize) {
        let Some(needed) = self.nodes[k]
            .core
            .as_ref()
            .and_then(|c| c.state_needed().map(|s| s.to_vec()))
        else {
            return;
        };
        let donor = (0..self.nodes.len())
            .filter(|&j| j != k)
            .filter_map(|j| self.nodes[j].checkpoint.clone())
            .filter(|c| c.position.covers(&needed))
            .max_by_key(|c| c.position.prefix.iter().sum::<u64>());
        let Some(c) = donor else {
            // None yet: `NeedState` comes again after a recovery timeout.
            return;
        };
        self.logs.push(c.log.clone());
        self.nodes[k].log = self.logs.len() - 1;
        self.nodes[k].checkpoint = Some(c.clone());
        let mut out = Vec::new();
        self.nodes[k]
            .core
            .as_mut()
            .unwrap()
            .restore(&c.position, &mut out);
        self.apply(k, out);
    }

    fn propose(&mut self) {
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&k| self.nodes[k].core.is_some())
            .collect();
        let k = live[self.rng.gen_range(0..live.len())];
        let id = self.next_cmd;
        self.next_cmd += 1;
        let roll = self.rng.gen_range(0..100);
        let (keys, all): (Vec<(u64, bool)>, bool) = if roll < self.barrier_per_cent {
            (Vec::new(), true)
        } else if roll < 25 {
            (vec![(1_000_000 + id, true)], false)
        } else {
            let count = self.rng.gen_range(1..=2);
            let keys = (0..count)
                .map(|_| (self.rng.gen_range(0..self.hot_keys), self.rng.gen_bool(0.5)))
                .collect();
            (keys, false)
        };
        let c = cmd(id, &keys, all);
        let (keys, conflicts_all) = (c.keys.clone(), all);
        let mut out = Vec::new();
        let r = self.nodes[k].core.as_mut().unwrap().propose(c, &mut out);
        let instance = r.expect("the window is large enough for the test's load");
        let info = CmdInfo {
            keys,
            conflicts_all,
            node: k,
            at: self.now,
            instance,
        };
        self.commands.insert(id, info);
        self.apply(k, out);
        if self.rng.gen_range(0..1000) < self.faults.leader_crash_per_mille {
            let at = self.now + self.rng.gen_range(0..8);
            self.scheduled_crashes.push((at, k));
        }
    }

    fn step(&mut self, propose_per_mille: u32) {
        self.now += 1;
        // Messages due.
        while let Some(&Reverse((at, seq))) = self.net.peek() {
            if at > self.now {
                break;
            }
            self.net.pop();
            let (from, to, msg) = self.msgs.remove(&seq).unwrap();
            let k = (to - 1) as usize;
            if self.trace.is_some() && self.trace == about(&msg) {
                let up = self.nodes[k].core.is_some();
                eprintln!("t={} {from}->{to} (up {up}) {msg:?}", self.now);
            }
            if let Some(core) = self.nodes[k].core.as_mut() {
                let mut out = Vec::new();
                core.on_message(from, msg, &mut out);
                self.apply(k, out);
            }
        }
        // Disks.
        for k in 0..self.nodes.len() {
            let mut last = None;
            while let Some(&(done, token, _)) = self.nodes[k].pending.front() {
                if done > self.now {
                    break;
                }
                let (_, _, record) = self.nodes[k].pending.pop_front().unwrap();
                let me = self.ids[k];
                if let EpaxosRecord::Instance { instance, .. }
                | EpaxosRecord::Promise { instance, .. } = &record
                {
                    if instance.replica == me {
                        let n = &mut self.nodes[k];
                        n.durable_own_slot = n.durable_own_slot.max(instance.slot);
                    }
                }
                self.nodes[k].durable.push((token, record));
                last = Some(token);
            }
            if let (Some(t), Some(core)) = (last, self.nodes[k].core.as_mut()) {
                let mut out = Vec::new();
                core.on_persisted(t, &mut out);
                self.apply(k, out);
            }
        }
        // Ticks.
        for k in 0..self.nodes.len() {
            if let Some(core) = self.nodes[k].core.as_mut() {
                let mut out = Vec::new();
                let due = core.tick_due().tick.saturating_add(self.tick_due_late);
                core.on_tick(self.now, &mut out);
                if self.now < due {
                    self.totals.ticks_before_due += 1;
                    if !out.is_empty() {
                        self.violations.push(Violation::TickBeforeDue {
                            node: self.ids[k],
                            tick: self.now,
                            due,
                        });
                    }
                }
                self.apply(k, out);
            }
        }
        // Checkpoints: free ones, truncation, state transfers.
        if self.checkpoints && self.rng.gen_range(0..1000) < self.free_checkpoint_per_mille {
            let k = self.rng.gen_range(0..self.nodes.len());
            if let Some(core) = self.nodes[k].core.as_ref() {
                let position = core.position();
                let log = self.logs[self.nodes[k].log].clone();
                self.nodes[k].checkpoint = Some(Checkpoint { position, log });
            }
        }
        if self.checkpoints && self.now.is_multiple_of(self.truncate_every_ticks) {
            self.truncate();
        }
        let now = self.now;
        let due: Vec<usize> = self
            .transfers
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, k)| *k)
            .collect();
        self.transfers.retain(|(at, _)| *at > now);
        for k in due {
            if self.nodes[k].core.is_some() {
                self.transfer(k);
            }
        }
        // Faults: restarts, random crashes, crashes of leaders that just proposed.
        for k in 0..self.nodes.len() {
            if self.nodes[k].core.is_none() && self.now >= self.nodes[k].down_until {
                self.restart(k);
            }
        }
        if self.rng.gen_range(0..1000) < self.faults.crash_per_mille {
            let k = self.rng.gen_range(0..self.nodes.len());
            self.crash(k);
        }
        let now = self.now;
        let due: Vec<usize> = self
            .scheduled_crashes
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, k)| *k)
            .collect();
        self.scheduled_crashes.retain(|(at, _)| *at > now);
        for k in due {
            self.crash(k);
        }
        // Clients.
        if self.rng.gen_range(0..1000) < propose_per_mille {
            self.propose();
        }
    }

    /// Heal: no more loss or crashes, everyone up.
    fn heal(&mut self) {
        self.faults.drop_per_mille = 0;
        self.faults.dup_per_mille = 0;
        self.faults.crash_per_mille = 0;
        self.faults.leader_crash_per_mille = 0;
        self.scheduled_crashes.clear();
        for k in 0..self.nodes.len() {
            if self.nodes[k].core.is_none() {
                self.restart(k);
            }
        }
    }

    fn settled(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| n.pending.is_empty() && n.core.as_ref().is_some_and(|c| c.is_quiescent()))
            && {
                let first = &self.logs[self.nodes[0].log].instances;
                self.nodes
                    .iter()
                    .all(|n| self.logs[n.log].instances == *first)
            }
    }

    /// The whole run: a safety phase under faults, then healing and a liveness phase.
    fn run(&mut self, safety_ticks: u64, propose_per_mille: u32) {
        for _ in 0..safety_ticks {
            self.step(propose_per_mille);
        }
        self.heal();
        for _ in 0..300 {
            self.step(propose_per_mille);
        }
        // No new commands: everything must settle, and stay settled for a while (a
        // heartbeat may still reveal a missed commit).
        let deadline = self.now + 20_000;
        let mut stable_since = None;
        while self.now < deadline {
            self.step(0);
            if self.settled() {
                let since = *stable_since.get_or_insert(self.now);
                if self.now >= since + 300 {
                    break;
                }
            } else {
                stable_since = None;
            }
        }
        if !self.settled() {
            let v = Violation::Liveness(format!("not settled by tick {}", self.now));
            self.violation(v);
        }
        self.finish();
    }

    fn finish(&mut self) {
        for k in 0..self.nodes.len() {
            let Some(core) = self.nodes[k].core.as_ref() else {
                continue;
            };
            core.invariants_full();
            let s = core.stats().clone();
            let conflicting = core.drops().0.get(CONFLICTING_COMMIT).copied().unwrap_or(0);
            let committed: Vec<(InstanceId, Option<u64>, Attrs)> = core
                .committed()
                .map(|(i, h)| (i, cmd_id(&h.command), h.attrs.clone()))
                .collect();
            if conflicting > 0 {
                self.violation(Violation::ConflictingCommitDropped);
            }
            for (i, id, attrs) in committed {
                self.note_commit(i, id, &attrs);
            }
            self.totals.add(&s);
        }
        self.totals.runs += 1;
        self.totals.proposed += self.commands.len() as u64;
        self.check_order();
        self.check_predecessors();
        self.check_cuts();
        self.check_positions();
        self.check_liveness();
    }

    /// Every cut's position is exactly the set its log executed before it, and the
    /// k-th cuts of all logs executed the same non-no-op instances.
    fn check_cuts(&mut self) {
        let replicas = self.ids.clone();
        let mut found = Vec::new();
        let mut kth: BTreeMap<usize, BTreeSet<InstanceId>> = BTreeMap::new();
        for log in &self.logs {
            for (c, (len, position)) in log.cuts.iter().enumerate() {
                let before = &log.entries[..*len];
                let size = position.prefix.iter().sum::<u64>() + position.above.len() as u64;
                if size != before.len() as u64
                    || !before.iter().all(|(i, _)| position.contains(&replicas, *i))
                {
                    found.push(Violation::CutPosition { cut: c });
                }
                let real: BTreeSet<InstanceId> = before
                    .iter()
                    .filter(|(_, id)| id.is_some())
                    .map(|(i, _)| *i)
                    .collect();
                match kth.get(&c) {
                    None => {
                        kth.insert(c, real);
                    }
                    Some(first) if *first != real => found.push(Violation::CutMismatch { cut: c }),
                    Some(_) => {}
                }
            }
        }
        for v in found.into_iter().take(3) {
            self.violation(v);
        }
    }

    /// At the end, each replica's position is the set its (last) log executed.
    fn check_positions(&mut self) {
        let mut found = Vec::new();
        for (k, node) in self.nodes.iter().enumerate() {
            let Some(core) = node.core.as_ref() else {
                continue;
            };
            let position = core.position();
            let log = &self.logs[node.log];
            let size = position.prefix.iter().sum::<u64>() + position.above.len() as u64;
            if size != log.instances.len() as u64
                || !log
                    .instances
                    .iter()
                    .all(|&i| position.contains(&self.ids, i))
            {
                found.push(Violation::FinalPosition(self.ids[k]));
            }
        }
        for v in found {
            self.violation(v);
        }
    }

    /// A command sees the same interfering commands before it in every log that
    /// executed it: per key, the same writes before a read, the same accesses before a
    /// write (a command conflicting with everything writes every key). The order check
    /// below compares only commands both logs hold; this one also catches a log in
    /// which an interfering command is missing before it (a state later replaced by a
    /// restore still answered clients). Sets are compared by a commutative fingerprint.
    fn check_predecessors(&mut self) {
        const ALL: u64 = u64::MAX;
        let mix = |id: u64| id.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) | 1;
        let mut seen: BTreeMap<(u64, u64), u64> = BTreeMap::new();
        let mut found = None;
        'logs: for log in &self.logs {
            // Per key: fingerprint of the writes so far, and of all accesses so far.
            let mut writes: BTreeMap<u64, u64> = BTreeMap::new();
            let mut accesses: BTreeMap<u64, u64> = BTreeMap::new();
            let mut barriers = 0u64;
            let mut everything = 0u64;
            for &(_, id) in &log.entries {
                let Some(id) = id else { continue };
                let info = &self.commands[&id];
                let mut sight: Vec<(u64, u64)> = Vec::new();
                if info.conflicts_all {
                    sight.push((ALL, everything));
                } else {
                    sight.push((ALL, barriers));
                    for k in &info.keys {
                        let w = writes.get(&k.key).copied().unwrap_or(0);
                        let a = accesses.get(&k.key).copied().unwrap_or(0);
                        sight.push((k.key, if k.write { a } else { w }));
                    }
                }
                for (key, print) in sight {
                    match seen.get(&(id, key)) {
                        None => {
                            seen.insert((id, key), print);
                        }
                        Some(&p) if p != print => {
                            found = Some(Violation::PredecessorMismatch { key, command: id });
                            break 'logs;
                        }
                        Some(_) => {}
                    }
                }
                let m = mix(id);
                everything = everything.wrapping_add(m);
                if info.conflicts_all {
                    barriers = barriers.wrapping_add(m);
                    // A barrier writes every key: it is among the writes and accesses
                    // every later command sees through `barriers`.
                } else {
                    for k in &info.keys {
                        let a = accesses.entry(k.key).or_default();
                        *a = a.wrapping_add(m);
                        if k.write {
                            let w = writes.entry(k.key).or_default();
                            *w = w.wrapping_add(m);
                        }
                    }
                }
            }
        }
        if let Some(v) = found {
            self.violation(v);
        }
    }

    /// Every pair of interfering commands in the same relative order in every pair of
    /// logs. Per key, in log A's order: a write must come after everything before it
    /// in B too, a read after the last write before it.
    fn check_order(&mut self) {
        const ALL: u64 = u64::MAX;
        let mut per_key: Vec<BTreeMap<u64, Vec<(u64, bool)>>> = Vec::new();
        for log in &self.logs {
            let mut m: BTreeMap<u64, Vec<(u64, bool)>> = BTreeMap::new();
            for &(_, id) in &log.entries {
                let Some(id) = id else { continue };
                let info = &self.commands[&id];
                m.entry(ALL).or_default().push((id, info.conflicts_all));
                for k in &info.keys {
                    m.entry(k.key).or_default().push((id, k.write));
                }
            }
            per_key.push(m);
        }
        let positions: Vec<BTreeMap<u64, usize>> = self
            .logs
            .iter()
            .map(|l| {
                l.entries
                    .iter()
                    .enumerate()
                    .filter_map(|(p, &(_, id))| Some((id?, p)))
                    .collect()
            })
            .collect();
        let mut found = None;
        'pairs: for (a, keys_a) in per_key.iter().enumerate() {
            for (b, positions_b) in positions.iter().enumerate() {
                if a == b {
                    continue;
                }
                for (&key, seq) in keys_a {
                    let mut max_all: Option<(usize, u64)> = None;
                    let mut last_write: Option<(usize, u64)> = None;
                    for &(id, write) in seq {
                        let Some(&pb) = positions_b.get(&id) else {
                            continue;
                        };
                        let bound = if write { max_all } else { last_write };
                        if let Some((p, other)) = bound {
                            if pb < p {
                                found = Some(Violation::OrderDivergence {
                                    key,
                                    first: other,
                                    second: id,
                                });
                                break 'pairs;
                            }
                        }
                        if max_all.is_none_or(|(p, _)| pb > p) {
                            max_all = Some((pb, id));
                        }
                        if write {
                            last_write = Some((pb, id));
                        }
                    }
                }
            }
        }
        if let Some(v) = found {
            self.violation(v);
        }
    }

    fn check_liveness(&mut self) {
        if self.nodes.iter().any(|n| n.core.is_none()) {
            return;
        }
        let finals: Vec<&Log> = self.nodes.iter().map(|n| &self.logs[n.log]).collect();
        let mut problems = Vec::new();
        for (&id, info) in &self.commands {
            let everywhere = finals.iter().all(|l| l.commands.contains(&id));
            let nowhere = finals.iter().all(|l| !l.commands.contains(&id));
            let leader_survived = self.nodes[info.node].last_crash.is_none_or(|t| t < info.at);
            if leader_survived && !everywhere {
                problems.push(format!(
                    "command {id} of a live leader not executed everywhere"
                ));
            } else if !everywhere && !nowhere {
                problems.push(format!("command {id} executed at some replicas only"));
            }
        }
        for p in problems.into_iter().take(3) {
            self.violation(Violation::Liveness(p));
        }
    }
}

fn seeds(default: u64) -> u64 {
    std::env::var("EPAXOS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A swarm run: each seed draws its own weather (loss, duplication, delays, disk
/// latency, crash rates) and contention (hot keys, proposal rate per mille of ticks).
fn swarm_sim(seed: u64, n: usize, checkpoints: bool, trace: Option<InstanceId>) -> (Sim, u32) {
    let mut dice = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_e9a0);
    let faults = Faults {
        drop_per_mille: dice.gen_range(0..=150),
        dup_per_mille: dice.gen_range(0..=50),
        delay_ticks_max: dice.gen_range(2..=30),
        disk_ticks_max: dice.gen_range(1..=10),
        crash_per_mille: dice.gen_range(0..=5),
        leader_crash_per_mille: dice.gen_range(0..=60),
    };
    let mut sim = Sim::new(seed, n, EpaxosBugs::default(), faults);
    if checkpoints {
        sim = sim.with_checkpoints();
        sim.truncate_every_ticks = dice.gen_range(20..=200);
        sim.free_checkpoint_per_mille = if dice.gen_bool(0.5) {
            dice.gen_range(5..=100)
        } else {
            0
        };
    }
    sim.hot_keys = if checkpoints && dice.gen_bool(0.5) {
        dice.gen_range(16..=64)
    } else {
        dice.gen_range(1..=8)
    };
    sim.trace = trace;
    (sim, dice.gen_range(30..=150))
}

fn swarm(n: usize, seed_count: u64, seed_base: u64, checkpoints: bool) -> Totals {
    let mut totals = Totals::default();
    for seed in seed_base..seed_base + seed_count {
        let (mut sim, rate) = swarm_sim(seed, n, checkpoints, None);
        sim.run(2_000, rate);
        assert!(
            sim.violations.is_empty(),
            "n={n} seed={seed}: {:?} (totals {:?})",
            sim.violations,
            sim.totals
        );
        let t = &sim.totals;
        totals.runs += t.runs;
        totals.proposed += t.proposed;
        totals.fast += t.fast;
        totals.slow += t.slow;
        totals.recoveries += t.recoveries;
        totals.recovered_foreign += t.recovered_foreign;
        totals.recovered_commands += t.recovered_commands;
        totals.recovered_noops += t.recovered_noops;
        totals.recovered_committed += t.recovered_committed;
        totals.ambiguous += t.ambiguous;
        totals.crashes += t.crashes;
        totals.messages += t.messages;
        totals.executed += t.executed;
        totals.cuts += t.cuts;
        totals.truncations += t.truncations;
        totals.dropped += t.dropped;
        totals.truncated_sent += t.truncated_sent;
        totals.need_states += t.need_states;
        totals.restores += t.restores;
        totals.restore_unexecuted += t.restore_unexecuted;
        totals.ticks_before_due += t.ticks_before_due;
    }
    eprintln!(
        "epaxos swarm n={n}, seeds {seed_base}..{}, checkpoints {checkpoints}: {totals:?}",
        seed_base + seed_count
    );
    assert!(totals.cuts > 0, "barriers make cuts: {totals:?}");
    if checkpoints {
        assert!(
            totals.truncations > 0 && totals.dropped > 0,
            "truncation happens: {totals:?}"
        );
        assert!(
            totals.need_states > 0 && totals.restores > 0,
            "replicas fall behind a truncation and catch up by state transfer: {totals:?}"
        );
    }
    assert!(
        totals.fast > 0 && totals.slow > 0,
        "both paths taken: {totals:?}"
    );
    assert!(totals.crashes > 0, "{totals:?}");
    assert!(
        totals.ticks_before_due > 0,
        "ticks before the cores' due were given, and each did nothing: {totals:?}"
    );
    assert!(
        totals.recovered_foreign > 0,
        "crashed leaders' instances recovered by others: {totals:?}"
    );
    totals
}

#[test]
fn swarm_three_replicas() {
    swarm(3, seeds(24), 0, false);
}

#[test]
fn swarm_five_replicas() {
    swarm(5, seeds(12), 1_000, false);
}

/// The swarm with checkpoints at cuts, truncation at the frontier of f + 1 durable
/// checkpoints, restarts from the replica's own checkpoint and state transfer from a
/// peer's on `NeedState`. Besides the swarm's checks: each cut's position is exactly
/// what its log executed, the k-th cuts of all logs (every incarnation, every restored
/// state) executed the same non-no-op instances, and no restored replica executes an
/// instance twice or misses one.
#[test]
fn swarm_three_replicas_with_checkpoints() {
    swarm(3, seeds(24), 2_000, true);
}

#[test]
fn swarm_five_replicas_with_checkpoints() {
    swarm(5, seeds(12), 3_000, true);
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let run = |seed| {
        let mut sim = Sim::new(seed, 3, EpaxosBugs::default(), STORMY);
        sim.run(1_000, 80);
        let logs: Vec<Vec<(InstanceId, Option<u64>)>> =
            sim.logs.iter().map(|l| l.entries.clone()).collect();
        (logs, sim.now, sim.totals.messages)
    };
    assert_eq!(run(7), run(7));
}

/// The swarm's check of the cores' `tick_due` catches a due that comes late: with every
/// due 20 ticks later than the core says, a tick the check takes for one before the due
/// acts (a retransmission, a recovery, a heartbeat), and nothing else goes wrong.
#[test]
fn a_late_tick_due_is_caught() {
    let (mut sim, rate) = swarm_sim(0, 3, false, None);
    sim.tick_due_late = 20;
    sim.run(2_000, rate);
    assert!(
        !sim.violations.is_empty()
            && sim
                .violations
                .iter()
                .all(|v| matches!(v, Violation::TickBeforeDue { .. })),
        "{:?}",
        sim.violations
    );
    let (mut sim, rate) = swarm_sim(0, 3, false, None);
    sim.run(2_000, rate);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
}

/// Some seed of a calm three-replica run on two hot keys must make `bug` show as two
/// replicas executing two interfering commands in different orders, and that must be
/// the only kind of violation found (with, possibly, its consequences: a command that
/// saw different interfering commands before it, a command ordered on both sides of a
/// barrier); the same seeds without the bug are clean. Returns the seed.
fn caught_as_an_order_divergence(bug: EpaxosBugs) -> u64 {
    let mut caught = None;
    for seed in 0..40 {
        let mut sim = Sim::new(seed, 3, bug, CALM);
        sim.hot_keys = 2;
        sim.run(600, 300);
        if sim.violations.is_empty() {
            continue;
        }
        assert!(
            sim.violations.iter().all(|v| matches!(
                v,
                Violation::OrderDivergence { .. }
                    | Violation::PredecessorMismatch { .. }
                    | Violation::CutMismatch { .. }
            )) && sim
                .violations
                .iter()
                .any(|v| matches!(v, Violation::OrderDivergence { .. })),
            "seed {seed}: {:?}",
            sim.violations
        );
        caught = Some(seed);
        break;
    }
    let seed = caught.unwrap_or_else(|| panic!("{bug:?} must cause an order divergence"));
    for s in 0..=seed {
        let mut sim = Sim::new(s, 3, EpaxosBugs::default(), CALM);
        sim.hot_keys = 2;
        sim.run(600, 300);
        assert!(
            sim.violations.is_empty(),
            "control seed {s}: {:?}",
            sim.violations
        );
    }
    seed
}

/// The planted bug: the fast path taken although the answers differ.
#[test]
fn planted_bug_skip_slow_path_is_caught_as_an_order_divergence() {
    let seed = caught_as_an_order_divergence(EpaxosBugs {
        skip_slow_path_when_deps_differ: true,
        ..EpaxosBugs::default()
    });
    eprintln!("planted bug caught at seed {seed}");
}

/// The planted executor bug: the walk forgets the lowlinks its stack gives (the part of
/// an instance's dependency ranges it steps over because it visited them already), so
/// a cycle of interfering commands executes as separate components in the order each
/// replica's walk met them.
#[test]
fn planted_bug_executor_forgets_the_stack_is_caught_as_an_order_divergence() {
    let seed = caught_as_an_order_divergence(EpaxosBugs {
        executor_forgets_the_stack: true,
        ..EpaxosBugs::default()
    });
    eprintln!("planted executor bug caught at seed {seed}");
}

/// A committed command depends on an instance of a crashed replica that nobody else
/// ever held: after the timeouts, a survivor recovers it as a no-op, and the command
/// then executes.
#[test]
fn an_instance_nobody_holds_is_recovered_as_a_noop() {
    let cfg = config(3);
    let mut cores: Vec<Epaxos> = (1..=3).map(|id| Epaxos::new(id, cfg.clone())).collect();
    let c = cmd(8, &[(4, true)], false);
    let attrs = Attrs {
        seq: 2,
        deps: vec![1, 0, 0],
    };
    let mut out = Vec::new();
    cores[1].on_message(
        3,
        EpaxosMsg::Commit {
            instance: i(3, 1),
            command: Some(c),
            attrs,
        },
        &mut out,
    );
    let mut net = VecDeque::new();
    drain(&mut cores, 1, out.clone(), &mut net);
    assert!(executed(&out).is_empty());
    let mut log = Vec::new();
    for now in 1..2_000 {
        let mut out = Vec::new();
        cores[1].on_tick(now, &mut out);
        log.extend(executed(&out));
        drain(&mut cores, 1, out, &mut net);
        let mut o3 = Vec::new();
        cores[2].on_tick(now, &mut o3);
        drain(&mut cores, 2, o3, &mut net);
        // Replica 1 is down: its messages vanish.
        while let Some((from, to, m)) = net.pop_front() {
            if to == 1 {
                continue;
            }
            let k = (to - 1) as usize;
            let mut out = Vec::new();
            cores[k].on_message(from, m, &mut out);
            if k == 1 {
                log.extend(executed(&out));
            }
            let mut more = VecDeque::new();
            let mut tokens = persist_tokens(&out);
            let mut pending = out;
            // Persist and collect executions of replica 2 as they happen.
            while let Some(t) = tokens.pop() {
                let mut o = Vec::new();
                for a in pending.drain(..) {
                    if let EpaxosAction::Send { to, msg } = a {
                        more.push_back((cores[k].id(), to, msg));
                    }
                }
                cores[k].on_persisted(t, &mut o);
                if k == 1 {
                    log.extend(executed(&o));
                }
                tokens = persist_tokens(&o);
                pending = o;
            }
            for a in pending {
                if let EpaxosAction::Send { to, msg } = a {
                    more.push_back((cores[k].id(), to, msg));
                }
            }
            net.extend(more);
        }
        if log.len() == 2 {
            break;
        }
    }
    assert_eq!(log, vec![(i(1, 1), None), (i(3, 1), Some(8))]);
    let s = cores[1].stats().clone();
    let s3 = cores[2].stats().clone();
    assert_eq!(s.recovered_noops + s3.recovered_noops, 1, "{s:?} {s3:?}");
    for c in &cores[1..] {
        c.invariants_full();
    }
}

/// Reproduce one swarm run and show what went wrong:
/// `SEED=316 N=3 TRACE=1.29 cargo test -p partita-consensus --test it epaxos::debug_one_seed
/// -- --ignored --nocapture` (TRACE, optional, prints every message about an instance
/// and the committed instances that depend on it).
#[test]
#[ignore]
fn debug_one_seed() {
    let var = |name: &str| std::env::var(name).ok();
    let seed: u64 = var("SEED").and_then(|s| s.parse().ok()).unwrap_or(0);
    let n: usize = var("N").and_then(|s| s.parse().ok()).unwrap_or(3);
    let trace = var("TRACE").and_then(|t| {
        let (r, s) = t.split_once('.')?;
        Some(i(r.parse().ok()?, s.parse().ok()?))
    });
    let checkpoints = var("CHECKPOINTS").is_some();
    let (mut sim, rate) = swarm_sim(seed, n, checkpoints, trace);
    sim.run(2_000, rate);
    eprintln!("violations: {:?}", sim.violations);
    for (id, info) in &sim.commands {
        let named = format!("command {id} ");
        if sim
            .violations
            .iter()
            .any(|v| matches!(v, Violation::Liveness(s) if s.contains(&named)))
        {
            eprintln!(
                "command {id}: {info:?}, its node last crashed at {:?}, commit {:?}",
                sim.nodes[info.node].last_crash,
                sim.commits.get(&info.instance)
            );
        }
    }
    for (k, node) in sim.nodes.iter().enumerate() {
        let Some(core) = node.core.as_ref() else {
            continue;
        };
        eprintln!("replica {}: {:?}", sim.ids[k], core.stats());
        if let Some(t) = sim.trace {
            let q = (t.replica - 1) as usize;
            for (ins, h) in core.committed() {
                if h.attrs.deps[q] >= t.slot && ins != t {
                    eprintln!("  {ins} depends on it: {:?}", h.attrs);
                }
            }
        }
    }
}
