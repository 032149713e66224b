//! EPaxos checkpoints at cuts, restore at a position and log truncation
//! (`partita_consensus::epaxos`, spec `partial-order-checkpoints.md`), in scripted
//! clusters: instant disks, a network that delivers in a seeded random order, replicas
//! cut off at will. A replica's service state is the log of what it executed, and its
//! projection per key (the ids of the commands that wrote the key, barriers writing
//! every key) is what two replicas must agree on.
//!
//! - cuts: every replica emits a `Cut` after each barrier, and at the k-th cut all
//!   replicas executed the same commands, which the position describes exactly;
//! - restore: a replica recovered at a peer's cut (`recover_at`), or restored at run
//!   time at an older position (`restore`), executes exactly what the position lacks;
//! - truncation: memory, conflict index and log shrink, `TruncateLog` names the oldest
//!   record still needed, `Prepare`/`CommitRequest` for a forgotten instance get
//!   `Truncated`, a restart keeps answering so, and a replica cut off while the others
//!   truncated asks for state (`NeedState`) instead of recovering no-ops, then catches
//!   up after `restore`;
//! - controls: truncating above the own prefix is clamped and counted, and the planted
//!   bug `truncated_as_empty` makes recovery replace a committed command by a no-op,
//!   which the checker here catches.
//!
//! The seeded swarm with checkpoints (faults, crashes, restarts from checkpoints, state
//! transfer) is in `tests/epaxos.rs`.

use partita_consensus::epaxos::{
    truncation_frontier, Epaxos, EpaxosAction, EpaxosCommand, EpaxosConfig, EpaxosMsg,
    EpaxosOutbox, EpaxosRecord, ExecPosition, InstanceId, KeyAccess, Slot, Status,
};
use partita_types::{Ballot, Command, NodeId, Payload};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};

// ---- Helpers ---------------------------------------------------------------------------

/// Keys of the contended pool; a barrier writes all of them.
const KEYS: u64 = 4;

fn cmd(id: u64, keys: &[(u64, bool)], conflicts_all: bool) -> EpaxosCommand {
    EpaxosCommand::new(
        Command::single(id, 1, 0, Payload::copy_from_slice(&id.to_le_bytes())),
        keys.iter().map(|&(key, write)| KeyAccess { key, write }),
        conflicts_all,
    )
}

fn i(replica: NodeId, slot: Slot) -> InstanceId {
    InstanceId { replica, slot }
}

/// What a replica executed, in order: the instance and its command id (`None`: no-op).
type Log = Vec<(InstanceId, Option<u64>)>;

/// A service state: per key, the ids of the commands that wrote it, in order.
fn state(
    log: &[(InstanceId, Option<u64>)],
    commands: &BTreeMap<u64, EpaxosCommand>,
) -> Vec<Vec<u64>> {
    let mut s = vec![Vec::new(); KEYS as usize];
    for &(_, id) in log {
        let Some(id) = id else { continue };
        let c = &commands[&id];
        for (key, list) in s.iter_mut().enumerate() {
            let writes = c.conflicts_all || c.keys.iter().any(|k| k.key == key as u64 && k.write);
            if writes {
                list.push(id);
            }
        }
    }
    s
}

fn instances(log: &[(InstanceId, Option<u64>)]) -> BTreeSet<InstanceId> {
    log.iter().map(|(i, _)| *i).collect()
}

fn real_instances(log: &[(InstanceId, Option<u64>)]) -> BTreeSet<InstanceId> {
    log.iter()
        .filter(|(_, c)| c.is_some())
        .map(|(i, _)| *i)
        .collect()
}

/// Whether `position` is exactly the set of instances `log` executed.
fn describes(
    position: &ExecPosition,
    replicas: &[NodeId],
    log: &[(InstanceId, Option<u64>)],
) -> bool {
    let size = position.prefix.iter().sum::<u64>() + position.above.len() as u64;
    size == log.len() as u64 && log.iter().all(|(i, _)| position.contains(replicas, *i))
}

/// The checker of the planted-bug control: every instance executed by two logs ran the
/// same command in both (a committed command replaced by a no-op, or two different
/// commits, is caught here), and no log executed an instance twice.
fn execution_violations(logs: &[&Log]) -> Vec<String> {
    let mut found = Vec::new();
    let mut first: BTreeMap<InstanceId, Option<u64>> = BTreeMap::new();
    for (n, log) in logs.iter().enumerate() {
        let mut seen = BTreeSet::new();
        for &(i, c) in log.iter() {
            if !seen.insert(i) {
                found.push(format!("log {n} executed {i} twice"));
            }
            match first.get(&i) {
                None => {
                    first.insert(i, c);
                }
                Some(&f) if f != c => {
                    found.push(format!("{i} executed as {f:?} and as {c:?} (log {n})"))
                }
                Some(_) => {}
            }
        }
    }
    found
}

/// A cluster with instant disks and a network that delivers in a seeded random order.
struct Cluster {
    ids: Vec<NodeId>,
    cfg: EpaxosConfig,
    cores: Vec<Epaxos>,
    rng: ChaCha8Rng,
    net: Vec<(NodeId, NodeId, EpaxosMsg)>,
    /// Replicas cut off: messages to and from them vanish.
    isolated: BTreeSet<NodeId>,
    /// Per replica: what it executed (its service state), its cuts (entries before,
    /// position), its durable log (token, record), its `TruncateLog` and `NeedState`
    /// actions.
    logs: Vec<Log>,
    cuts: Vec<Vec<(usize, ExecPosition)>>,
    records: Vec<Vec<(u64, EpaxosRecord)>>,
    truncate_log: Vec<Vec<u64>>,
    need_state: Vec<Vec<Vec<Slot>>>,
    commands: BTreeMap<u64, EpaxosCommand>,
    next_id: u64,
    now: u64,
}

impl Cluster {
    fn new(n: usize, seed: u64) -> Cluster {
        let ids: Vec<NodeId> = (1..=n as NodeId).collect();
        let cfg = EpaxosConfig::new(ids.clone());
        Cluster {
            cores: ids.iter().map(|&id| Epaxos::new(id, cfg.clone())).collect(),
            ids,
            cfg,
            rng: ChaCha8Rng::seed_from_u64(seed),
            net: Vec::new(),
            isolated: BTreeSet::new(),
            logs: vec![Vec::new(); n],
            cuts: vec![Vec::new(); n],
            records: vec![Vec::new(); n],
            truncate_log: vec![Vec::new(); n],
            need_state: vec![Vec::new(); n],
            commands: BTreeMap::new(),
            next_id: 1,
            now: 0,
        }
    }

    fn up(&self) -> Vec<usize> {
        (0..self.ids.len())
            .filter(|&k| !self.isolated.contains(&self.ids[k]))
            .collect()
    }

    /// Carry out a core's actions (disks are instant: every write completes at once).
    fn absorb(&mut self, k: usize, mut out: EpaxosOutbox) {
        loop {
            let mut last = None;
            for a in out.drain(..) {
                match a {
                    EpaxosAction::Send { to, msg } => {
                        let from = self.ids[k];
                        if !self.isolated.contains(&from) && !self.isolated.contains(&to) {
                            self.net.push((from, to, msg));
                        }
                    }
                    EpaxosAction::Persist { token, record } => {
                        self.records[k].push((token, record));
                        last = Some(token);
                    }
                    EpaxosAction::Execute {
                        instance, command, ..
                    } => self.logs[k].push((instance, command.map(|c| c.commands[0].client))),
                    EpaxosAction::Cut { position } => {
                        self.cuts[k].push((self.logs[k].len(), position))
                    }
                    EpaxosAction::TruncateLog { below_token } => {
                        self.truncate_log[k].push(below_token);
                        self.records[k].retain(|(t, _)| *t >= below_token);
                    }
                    EpaxosAction::NeedState { frontier } => self.need_state[k].push(frontier),
                }
            }
            self.cores[k].invariants();
            match last {
                Some(t) => self.cores[k].on_persisted(t, &mut out),
                None => break,
            }
        }
    }

    fn propose(&mut self, k: usize, keys: &[(u64, bool)], all: bool) -> (u64, InstanceId) {
        let id = self.next_id;
        self.next_id += 1;
        let c = cmd(id, keys, all);
        self.commands.insert(id, c.clone());
        let mut out = Vec::new();
        let instance = self.cores[k].propose(c, &mut out).expect("room to propose");
        self.absorb(k, out);
        (id, instance)
    }

    /// A command on one or two random keys of the pool, from a random live replica.
    fn propose_random(&mut self) -> (u64, InstanceId) {
        let up = self.up();
        let k = up[self.rng.gen_range(0..up.len())];
        let count = self.rng.gen_range(1..=2);
        let keys: Vec<(u64, bool)> = (0..count)
            .map(|_| (self.rng.gen_range(0..KEYS), self.rng.gen_bool(0.6)))
            .collect();
        self.propose(k, &keys, false)
    }

    fn deliver(&mut self, from: NodeId, to: NodeId, msg: EpaxosMsg) {
        if self.isolated.contains(&from) || self.isolated.contains(&to) {
            return;
        }
        let k = self.ids.iter().position(|&r| r == to).unwrap();
        let mut out = Vec::new();
        self.cores[k].on_message(from, msg, &mut out);
        self.absorb(k, out);
    }

    /// Deliver up to `count` messages in flight, each picked at random.
    fn deliver_some(&mut self, count: usize) {
        for _ in 0..count {
            if self.net.is_empty() {
                return;
            }
            let pick = self.rng.gen_range(0..self.net.len());
            let (from, to, msg) = self.net.swap_remove(pick);
            self.deliver(from, to, msg);
        }
    }

    fn deliver_all(&mut self) {
        let mut rounds = 0;
        while !self.net.is_empty() {
            rounds += 1;
            assert!(rounds < 1_000_000, "the network does not drain");
            self.deliver_some(1);
        }
    }

    fn tick(&mut self, nodes: &[usize]) {
        self.now += 1;
        for &k in nodes {
            let mut out = Vec::new();
            self.cores[k].on_tick(self.now, &mut out);
            self.absorb(k, out);
        }
    }

    /// Deliver and tick the live replicas until they are all quiescent.
    fn settle(&mut self) {
        for _ in 0..20_000 {
            self.deliver_all();
            let up = self.up();
            if up.iter().all(|&k| self.cores[k].is_quiescent()) {
                for k in 0..self.cores.len() {
                    self.cores[k].invariants_full();
                }
                return;
            }
            self.tick(&up);
        }
        panic!("the cluster does not settle");
    }

    /// Replica `k` restarts from its durable log and a checkpoint: the position, and
    /// the state there (a log of executions).
    fn restart(&mut self, k: usize, position: Option<ExecPosition>, state: Log) {
        let records: Vec<EpaxosRecord> = self.records[k].drain(..).map(|(_, r)| r).collect();
        self.records[k] = records
            .iter()
            .cloned()
            .zip(1..)
            .map(|(r, t)| (t, r))
            .collect();
        self.cores[k] = Epaxos::recover_at(self.ids[k], self.cfg.clone(), position, records);
        self.cores[k].invariants_full();
        self.logs[k] = state;
        self.cuts[k].clear();
    }

    fn truncate(&mut self, k: usize, frontier: &[Slot]) {
        let mut out = Vec::new();
        self.cores[k].truncate_below(frontier, &mut out);
        self.absorb(k, out);
        self.cores[k].invariants_full();
    }

    fn state(&self, k: usize) -> Vec<Vec<u64>> {
        state(&self.logs[k], &self.commands)
    }

    /// Rounds of concurrent commands, each with one barrier among them, delivered in a
    /// random order, the cluster settling after each round (so that no two barriers
    /// share a strongly connected component, while commands may share the barrier's).
    fn rounds(&mut self, rounds: usize) -> usize {
        for _ in 0..rounds {
            for _ in 0..self.rng.gen_range(3..=10) {
                self.propose_random();
                let burst = self.rng.gen_range(0..=8);
                self.deliver_some(burst);
            }
            let up = self.up();
            let k = up[self.rng.gen_range(0..up.len())];
            self.propose(k, &[], true);
            for _ in 0..self.rng.gen_range(0..=5) {
                self.propose_random();
                let burst = self.rng.gen_range(0..=8);
                self.deliver_some(burst);
            }
            self.settle();
        }
        rounds
    }
}

// ---- Positions and frontiers -----------------------------------------------------------

#[test]
fn positions_contain_meet_and_cover() {
    let replicas = [1, 2, 3];
    let a = ExecPosition {
        prefix: vec![3, 1, 0],
        above: vec![i(2, 3), i(3, 2)],
    };
    let b = ExecPosition {
        prefix: vec![1, 3, 2],
        above: vec![i(1, 3)],
    };
    assert!(a.is_well_formed(&replicas) && b.is_well_formed(&replicas));
    assert!(a.contains(&replicas, i(1, 3)) && !a.contains(&replicas, i(1, 4)));
    assert!(a.contains(&replicas, i(2, 3)) && !a.contains(&replicas, i(2, 2)));
    assert!(!a.contains(&replicas, i(9, 1)), "an unknown replica");
    let m = a.meet(&b, &replicas);
    assert_eq!(
        m,
        ExecPosition {
            prefix: vec![1, 1, 0],
            above: vec![i(1, 3), i(2, 3), i(3, 2)],
        }
    );
    for s in 1..=5 {
        for r in replicas {
            let x = i(r, s);
            assert_eq!(
                m.contains(&replicas, x),
                a.contains(&replicas, x) && b.contains(&replicas, x),
                "{x}"
            );
        }
    }
    assert!(a.covers(&[3, 1, 0]) && !a.covers(&[3, 2, 0]) && !a.covers(&[0, 0]));
    let unsorted = ExecPosition {
        prefix: vec![0, 0, 0],
        above: vec![i(2, 1), i(1, 1)],
    };
    let below = ExecPosition {
        prefix: vec![2, 0, 0],
        above: vec![i(1, 2)],
    };
    assert!(!unsorted.is_well_formed(&replicas) && !below.is_well_formed(&replicas));
    assert!(!ExecPosition::zero(2).is_well_formed(&replicas));
    let bytes = bincode::serialize(&a).unwrap();
    assert_eq!(bincode::deserialize::<ExecPosition>(&bytes).unwrap(), a);
}

/// Spec rule 5's counter-example: n = 5, f = 2, checkpoints (9,1), (8,2), (1,9), (2,8)
/// and (5,5). The third-highest value per column, (5,5), is covered by one replica
/// only; the frontier of one chosen set of f + 1 checkpoints is covered by f + 1.
#[test]
fn the_truncation_frontier_is_covered_by_f_plus_one_checkpoints() {
    let p = |a, b| ExecPosition {
        prefix: vec![a, b],
        above: Vec::new(),
    };
    let positions = [p(9, 1), p(8, 2), p(1, 9), p(2, 8), p(5, 5)];
    let f = truncation_frontier(&positions, 2).unwrap();
    let covering = positions.iter().filter(|c| c.covers(&f)).count();
    assert!(covering >= 3, "{f:?} covered by {covering}");
    assert_eq!(
        f,
        vec![5, 1],
        "ties of the prefix sums broken by the prefixes"
    );
    let quantile = [5, 5];
    assert_eq!(positions.iter().filter(|c| c.covers(&quantile)).count(), 1);
    assert_eq!(
        truncation_frontier(&positions[..2], 2),
        None,
        "fewer than f + 1"
    );
    assert_eq!(truncation_frontier(&[], 0), None);
    assert_eq!(
        truncation_frontier(&[p(1, 1), ExecPosition::zero(3)], 0),
        None,
        "positions of different clusters"
    );
    assert_eq!(truncation_frontier(&[p(4, 7)], 0), Some(vec![4, 7]));
}

// ---- Cuts ------------------------------------------------------------------------------

/// Three replicas, commands on a few keys interleaved with barriers, random delivery:
/// every replica cuts once per barrier, right after it; at the k-th cut every replica
/// executed the same non-no-op instances, reached the same state, and the cut's
/// position is exactly what it executed.
#[test]
fn every_replica_cuts_after_each_barrier_with_the_same_commands() {
    for seed in 0..30 {
        let mut c = Cluster::new(3, seed);
        let barriers = c.rounds(6);
        for k in 0..3 {
            assert_eq!(c.cuts[k].len(), barriers, "seed {seed} replica {k}");
            let mut before = 0;
            for (n, (len, position)) in c.cuts[k].iter().enumerate() {
                let log = &c.logs[k][..*len];
                let barrier_here = c.logs[k][before..*len]
                    .iter()
                    .filter(|(_, id)| id.is_some_and(|id| c.commands[&id].conflicts_all))
                    .count();
                assert_eq!(
                    barrier_here, 1,
                    "seed {seed}: cut {n} of {k} follows its barrier"
                );
                assert!(
                    describes(position, &c.ids, log),
                    "seed {seed}: cut {n} of {k}"
                );
                before = *len;
            }
        }
        for n in 0..barriers {
            let views: Vec<(BTreeSet<InstanceId>, Vec<Vec<u64>>)> = (0..3)
                .map(|k| {
                    let log = &c.logs[k][..c.cuts[k][n].0];
                    (real_instances(log), state(log, &c.commands))
                })
                .collect();
            assert!(
                views.windows(2).all(|w| w[0] == w[1]),
                "seed {seed}: cut {n} differs: {views:?}"
            );
        }
        assert_eq!(c.state(0), c.state(1));
        assert_eq!(c.state(0), c.state(2));
        assert!(execution_violations(&[&c.logs[0], &c.logs[1], &c.logs[2]]).is_empty());
        let s = c.cores[0].stats();
        assert_eq!(s.cuts, barriers as u64);
    }
}

// ---- Restore ---------------------------------------------------------------------------

/// A replica restarted at a peer's cut (its checkpoint: the peer's position and state)
/// executes exactly the instances the position lacks, and ends in the others' state.
#[test]
fn a_replica_recovered_at_a_peers_cut_executes_exactly_the_rest() {
    for seed in 0..20 {
        let mut c = Cluster::new(3, 100 + seed);
        c.rounds(2);
        let (len, position) = c.cuts[0][1].clone();
        let snapshot: Log = c.logs[0][..len].to_vec();
        c.rounds(3);
        for _ in 0..4 {
            c.propose_random();
        }
        c.settle();
        // Replica 3 restarts from its own log and replica 1's second checkpoint.
        c.restart(2, Some(position.clone()), snapshot.clone());
        c.tick(&[0, 1, 2]);
        c.settle();
        let rest: Vec<InstanceId> = c.logs[2][len..].iter().map(|(i, _)| *i).collect();
        let expected: BTreeSet<InstanceId> = instances(&c.logs[0])
            .into_iter()
            .filter(|&x| !position.contains(&c.ids, x))
            .collect();
        assert_eq!(rest.len(), expected.len(), "seed {seed}: each once");
        assert_eq!(
            rest.iter().copied().collect::<BTreeSet<_>>(),
            expected,
            "seed {seed}"
        );
        assert_eq!(c.state(2), c.state(0), "seed {seed}");
        assert_eq!(c.state(2), c.state(1), "seed {seed}");
        assert!(describes(&c.cores[2].position(), &c.ids, &c.logs[2]));
        assert!(execution_violations(&[&c.logs[0], &c.logs[1], &c.logs[2]]).is_empty());
    }
}

/// `restore` at run time at an older position (a peer's earlier checkpoint): what this
/// replica executed since that the position lacks runs again, once, and the state ends
/// equal to the others'.
#[test]
fn restore_at_an_older_position_runs_again_what_it_lacks() {
    for seed in 0..20 {
        let mut c = Cluster::new(3, 200 + seed);
        c.rounds(2);
        let (len, position) = c.cuts[1][0].clone();
        let snapshot: Log = c.logs[1][..len].to_vec();
        c.rounds(2);
        let before = instances(&c.logs[2]);
        c.logs[2] = snapshot;
        let mut out = Vec::new();
        c.cores[2].restore(&position, &mut out);
        c.absorb(2, out);
        c.settle();
        let again: BTreeSet<InstanceId> = instances(&c.logs[2][len..]);
        let lacked: BTreeSet<InstanceId> = before
            .iter()
            .copied()
            .filter(|&x| !position.contains(&c.ids, x))
            .collect();
        assert!(!lacked.is_empty(), "seed {seed}: the position is older");
        assert_eq!(again, lacked, "seed {seed}");
        assert_eq!(c.cores[2].stats().restore_unexecuted, lacked.len() as u64);
        assert_eq!(c.state(2), c.state(0), "seed {seed}");
        assert!(execution_violations(&[&c.logs[0], &c.logs[2]]).is_empty());
    }
}

// ---- Truncation ------------------------------------------------------------------------

/// The oldest record a restart needs, computed from the durable log: per instance
/// above the frontier its newest `Instance` record (or newest `Promise` if it has
/// none), and the newest `Truncated` record.
fn oldest_needed(records: &[(u64, EpaxosRecord)], replicas: &[NodeId], frontier: &[Slot]) -> u64 {
    let mut newest: BTreeMap<InstanceId, (u64, u64)> = BTreeMap::new();
    let mut truncated = 0;
    for (t, r) in records {
        match r {
            EpaxosRecord::Instance { instance, .. } => newest.entry(*instance).or_default().0 = *t,
            EpaxosRecord::Promise { instance, .. } => newest.entry(*instance).or_default().1 = *t,
            EpaxosRecord::Truncated { .. } => truncated = *t,
        }
    }
    let q = |x: &InstanceId| replicas.iter().position(|&r| r == x.replica).unwrap();
    newest
        .iter()
        .filter(|(x, _)| x.slot > frontier[q(x)])
        .map(|(_, &(inst, prom))| if inst > 0 { inst } else { prom })
        .chain([truncated])
        .min()
        .unwrap()
}

#[test]
fn truncation_forgets_answers_truncated_and_names_the_obsolete_log_prefix() {
    let mut c = Cluster::new(3, 7);
    c.rounds(3);
    // Checkpoints where the replicas are now (any position is one to checkpoint at;
    // a cut only makes them comparable): every instance so far is below the frontier.
    let positions: Vec<ExecPosition> = (0..3).map(|k| c.cores[k].position()).collect();
    let checkpoint = (positions[0].clone(), c.logs[0].clone());
    let frontier = truncation_frontier(&positions, 1).unwrap();
    assert!(positions
        .iter()
        .all(|p| p.above.is_empty() && p.prefix == frontier));
    // More commands after the last barrier, on key 0 only: they stay in memory.
    let mut extra = Vec::new();
    for k in [0, 1, 2, 0] {
        extra.push(c.propose(k, &[(0, true)], false).1);
    }
    c.settle();
    let live = |x: &InstanceId| x.slot > frontier[(x.replica - 1) as usize];
    let held_before: Vec<InstanceId> = c.cores[0].committed().map(|(x, _)| x).collect();
    assert!(held_before.iter().any(|x| !live(x)) && extra.iter().all(live));
    assert_eq!(c.cores[0].conflict_keys(), KEYS as usize);
    let records_before = c.records[0].clone();
    c.truncate(0, &frontier);
    let r = &c.cores[0];
    assert_eq!(r.truncated(), &frontier[..]);
    assert_eq!(r.stats().truncations, 1);
    for &x in &held_before {
        assert_eq!(r.held(x).is_some(), live(&x), "{x}");
    }
    assert_eq!(
        r.instances_in_memory(),
        held_before.iter().filter(|x| live(x)).count()
    );
    assert_eq!(
        r.stats().instances_dropped,
        held_before.iter().filter(|x| !live(x)).count() as u64
    );
    assert_eq!(
        r.conflict_keys(),
        1,
        "only key 0 has instances above the frontier"
    );
    // The truncation record is written, then the obsolete prefix named.
    let (t_token, last) = c.records[0].last().cloned().unwrap();
    assert_eq!(
        last,
        EpaxosRecord::Truncated {
            frontier: frontier.clone()
        }
    );
    let mut all_records = records_before;
    all_records.push((t_token, last));
    let expected = oldest_needed(&all_records, &c.ids, &frontier);
    assert!(expected > 1);
    assert_eq!(c.truncate_log[0], vec![expected]);
    assert!(c.records[0].iter().all(|(t, _)| *t >= expected));
    // Truncating again at the same frontier changes nothing.
    c.truncate(0, &frontier);
    assert_eq!(
        (c.truncate_log[0].len(), c.cores[0].stats().truncations),
        (1, 1)
    );

    // A Prepare for a forgotten instance: `Truncated`, never "I hold nothing".
    let gone = *held_before.iter().find(|x| !live(x)).unwrap();
    let mut out = Vec::new();
    c.cores[0].on_message(
        2,
        EpaxosMsg::Prepare {
            instance: gone,
            ballot: Ballot::new(1, 2),
        },
        &mut out,
    );
    assert_eq!(
        out,
        vec![EpaxosAction::Send {
            to: 2,
            msg: EpaxosMsg::Truncated {
                frontier: frontier.clone()
            }
        }]
    );
    assert!(c.cores[0].held(gone).is_none(), "no promise kept for it");
    // A CommitRequest: the commits it still has, and `Truncated` for the rest.
    let mut out = Vec::new();
    let ask = EpaxosMsg::CommitRequest {
        instances: vec![gone, extra[0]],
    };
    c.cores[0].on_message(3, ask, &mut out);
    let answers: Vec<&EpaxosMsg> = out
        .iter()
        .map(|a| match a {
            EpaxosAction::Send { to: 3, msg } => msg,
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(matches!(answers[0], EpaxosMsg::Commit { instance, .. } if *instance == extra[0]));
    assert_eq!(
        answers[1],
        &EpaxosMsg::Truncated {
            frontier: frontier.clone()
        }
    );
    // Phase messages about it are dropped and counted.
    let mut out = Vec::new();
    let commit = EpaxosMsg::Commit {
        instance: gone,
        command: None,
        attrs: partita_consensus::epaxos::Attrs {
            seq: 1,
            deps: vec![0, 0, 0],
        },
    };
    c.cores[0].on_message(gone.replica.max(2), commit, &mut out);
    assert!(out.is_empty());
    let s = c.cores[0].stats();
    assert_eq!(
        (s.truncated_sent, c.cores[0].drops().0["epaxos_truncated"]),
        (2, 3)
    );
    c.cores[0].invariants_full();

    // A restart from what the log still holds and the last checkpoint: the truncation
    // survives, the next own slot is above every slot used, and only what the
    // checkpoint lacks runs again.
    let (position, snapshot) = checkpoint;
    let len = snapshot.len();
    let own_max = c.logs[0]
        .iter()
        .filter(|(x, _)| x.replica == 1)
        .map(|(x, _)| x.slot)
        .max()
        .unwrap();
    c.restart(0, Some(position.clone()), snapshot);
    assert_eq!(c.cores[0].truncated(), &frontier[..]);
    c.tick(&[0]);
    let again: Vec<InstanceId> = c.logs[0][len..].iter().map(|(x, _)| *x).collect();
    assert_eq!(
        again.iter().copied().collect::<BTreeSet<_>>(),
        extra
            .iter()
            .copied()
            .filter(|&x| !position.contains(&c.ids, x))
            .collect()
    );
    let mut out = Vec::new();
    c.cores[0].on_message(
        2,
        EpaxosMsg::Prepare {
            instance: gone,
            ballot: Ballot::new(2, 2),
        },
        &mut out,
    );
    assert!(matches!(
        &out[..],
        [EpaxosAction::Send {
            msg: EpaxosMsg::Truncated { .. },
            ..
        }]
    ));
    let (_, next) = c.propose(0, &[(1, true)], false);
    assert_eq!(next.slot, own_max + 1);
    c.settle();
    assert_eq!(c.state(0), c.state(1));
}

/// Replica 3 is cut off while 1 and 2 commit, execute and truncate; it then learns of
/// a command that depends on what they forgot. Returns the cluster, replica 1's cut
/// (position, state) and the instances forgotten.
fn lagging(bug: bool) -> (Cluster, (ExecPosition, Log), Vec<InstanceId>) {
    let mut c = Cluster::new(3, 11);
    for k in 0..2 {
        c.cores[k].plant_truncated_as_empty(bug);
    }
    c.isolated.insert(3);
    let (_, x) = c.propose(0, &[(1, true)], false);
    let (_, z) = c.propose(1, &[(2, true)], false);
    c.settle();
    let (_, w) = c.propose(0, &[], true);
    c.settle();
    let (len, position) = c.cuts[0][0].clone();
    let snapshot = c.logs[0][..len].to_vec();
    let frontier =
        truncation_frontier(&[c.cuts[0][0].1.clone(), c.cuts[1][0].1.clone()], 1).unwrap();
    assert_eq!(frontier, vec![2, 1, 0]);
    c.truncate(0, &frontier);
    c.truncate(1, &frontier);
    // A new command on key 1: the raised barrier makes it depend on all of 1.1 ..= 1.2
    // and 2.1, which only a checkpoint can give replica 3 now.
    let (_, y) = c.propose(0, &[(1, true)], false);
    c.settle();
    let h = c.cores[0].held(y).unwrap().clone();
    assert_eq!(h.attrs.deps, vec![2, 1, 0]);
    c.isolated.clear();
    let commit = EpaxosMsg::Commit {
        instance: y,
        command: h.command,
        attrs: h.attrs,
    };
    c.deliver(1, 3, commit);
    // Only replica 3's clock runs (no heartbeat from the others tells it of their
    // truncation): it asks for the commits, and would recover what it cannot get.
    for _ in 0..2_000 {
        c.tick(&[2]);
        c.deliver_all();
    }
    (c, (position, snapshot), vec![x, z, w])
}

#[test]
fn a_lagging_replica_fetches_state_instead_of_recovering_forgotten_instances() {
    let (mut c, (position, snapshot), gone) = lagging(false);
    let s = c.cores[2].stats().clone();
    assert!(s.truncated_received > 0, "{s:?}");
    assert_eq!((s.recovered_noops, s.recoveries_started), (0, 0), "{s:?}");
    assert!(c.logs[2].is_empty(), "nothing can execute yet");
    for &x in &gone {
        assert!(c.cores[2]
            .held(x)
            .is_none_or(|h| h.status != Status::Committed));
    }
    // NeedState, repeated at most once per recovery timeout while the need lasts.
    let needs = &c.need_state[2];
    assert!(!needs.is_empty() && needs.iter().all(|f| f == &vec![2, 1, 0]));
    assert!(needs.len() as u64 <= 2_000 / c.cfg.recovery_timeout_ticks + 1);
    assert_eq!(s.need_states, needs.len() as u64);
    assert_eq!(c.cores[2].state_needed(), Some(&[2, 1, 0][..]));
    assert!(!c.cores[2].is_quiescent());
    // State transfer: replica 1's checkpoint at its cut covers the frontier.
    assert!(position.covers(&[2, 1, 0]));
    c.logs[2] = snapshot;
    let mut out = Vec::new();
    c.cores[2].restore(&position, &mut out);
    c.absorb(2, out);
    c.settle();
    assert_eq!(c.cores[2].state_needed(), None);
    assert_eq!(c.state(2), c.state(0));
    assert_eq!(c.state(2), c.state(1));
    assert_eq!(
        c.logs[2].len(),
        4,
        "the three in the checkpoint, then the new command"
    );
    let count = c.need_state[2].len();
    for _ in 0..500 {
        c.tick(&[0, 1, 2]);
        c.deliver_all();
    }
    assert_eq!(c.need_state[2].len(), count, "no NeedState once caught up");
    assert!(execution_violations(&[&c.logs[0], &c.logs[1], &c.logs[2]]).is_empty());
}

/// The planted-bug control: peers that answer "I hold nothing" for what they truncated
/// let the lagging replica recover the forgotten instances as no-ops, replacing
/// committed commands; the checker catches it, and the correct core above does not.
#[test]
fn planted_bug_truncated_as_empty_replaces_a_committed_command_by_a_noop() {
    let (c, _, gone) = lagging(true);
    let s = c.cores[2].stats();
    assert!(s.recovered_noops > 0, "{s:?}");
    let violations = execution_violations(&[&c.logs[0], &c.logs[1], &c.logs[2]]);
    assert!(
        violations
            .iter()
            .any(|v| v.contains(&gone[0].to_string()) && v.contains("None")),
        "{violations:?}"
    );
    let (fine, _, _) = lagging(false);
    assert!(execution_violations(&[&fine.logs[0], &fine.logs[1], &fine.logs[2]]).is_empty());
}

/// With heartbeats, a replica behind a peer's truncation learns it needs state even
/// when nothing it holds depends on what it missed.
#[test]
fn a_heartbeat_tells_a_replica_behind_a_truncation_to_fetch_state() {
    let mut c = Cluster::new(3, 5);
    c.isolated.insert(3);
    c.rounds(2);
    let (len, position) = c.cuts[0][1].clone();
    let snapshot = c.logs[0][..len].to_vec();
    let frontier = truncation_frontier(&[position.clone(), c.cuts[1][1].1.clone()], 1).unwrap();
    c.truncate(0, &frontier);
    c.truncate(1, &frontier);
    c.isolated.clear();
    for _ in 0..(2 * c.cfg.heartbeat_ticks) {
        c.tick(&[0, 1, 2]);
        c.deliver_all();
    }
    assert_eq!(c.need_state[2], vec![frontier.clone()]);
    assert_eq!(c.cores[2].stats().recoveries_started, 0);
    c.logs[2] = snapshot;
    let mut out = Vec::new();
    c.cores[2].restore(&position, &mut out);
    c.absorb(2, out);
    c.settle();
    assert_eq!(c.state(2), c.state(0));
    assert!(c.cores[2].is_quiescent());
}

/// Truncating above the own execution prefix (a frontier from positions this replica
/// has not reached, e.g. one that ignores the f + 1 rule) is clamped and counted, and
/// forgets nothing unexecuted.
#[test]
fn truncating_above_the_own_prefix_is_clamped_and_counted() {
    let mut c = Cluster::new(3, 3);
    c.isolated.insert(1);
    c.rounds(2);
    let ahead = c.cores[1].exec_prefix().to_vec();
    assert!(ahead[1] > 0 && c.cores[0].exec_prefix() == [0, 0, 0]);
    c.truncate(0, &ahead);
    let s = c.cores[0].stats();
    assert_eq!(
        (s.truncations_clamped, s.truncations, s.instances_dropped),
        (1, 0, 0)
    );
    assert_eq!(c.cores[0].truncated(), &[0, 0, 0]);
    assert!(c.records[0].is_empty() && c.truncate_log[0].is_empty());
    // Partly clamped: replica 2 truncates where it is, asked for one more slot of 3.
    let mut asked = ahead.clone();
    asked[2] += 1;
    c.truncate(1, &asked);
    let s = c.cores[1].stats();
    assert_eq!((s.truncations_clamped, s.truncations), (1, 1));
    assert_eq!(c.cores[1].truncated(), &ahead[..]);
}

/// `TruncateLog` names the newest *durable* record of a live instance: a newer record
/// still in flight when the truncation record completes does not count (a crash would
/// lose it, and recovery needs the one it replaces).
#[test]
fn the_obsolete_log_prefix_keeps_the_record_a_pending_write_replaces() {
    let mut c = Cluster::new(3, 9);
    c.rounds(1);
    let frontier = c.cores[0].exec_prefix().to_vec();
    // Replica 2 proposes; replica 1 pre-accepts it (record r1, durable at once).
    let (_, y) = c.propose(1, &[(0, true)], false);
    let pre = c.net.iter().position(|(_, to, _)| *to == 1).unwrap();
    let (from, _, msg) = c.net.remove(pre);
    c.net.clear();
    c.deliver(from, 1, msg.clone());
    let r1 = c.records[0].last().unwrap().0;
    assert!(
        matches!(&c.records[0].last().unwrap().1, EpaxosRecord::Instance { instance, .. } if *instance == y)
    );
    // Now by hand: the truncation record T is written but not yet durable, and an
    // Accept for the same instance writes r2 after it.
    let a = &mut c.cores[0];
    let mut out = Vec::new();
    a.truncate_below(&frontier, &mut out);
    let t = match &out[..] {
        [EpaxosAction::Persist {
            token,
            record: EpaxosRecord::Truncated { .. },
        }] => *token,
        other => panic!("{other:?}"),
    };
    let EpaxosMsg::PreAccept { command, attrs, .. } = msg else {
        panic!("{msg:?}")
    };
    let mut out = Vec::new();
    let accept = EpaxosMsg::Accept {
        instance: y,
        ballot: Ballot::ZERO,
        command,
        attrs,
    };
    a.on_message(2, accept, &mut out);
    let r2 = match &out[..] {
        [EpaxosAction::Persist { token, .. }] => *token,
        other => panic!("{other:?}"),
    };
    assert!(r1 < t && t < r2);
    let mut out = Vec::new();
    a.on_persisted(t, &mut out);
    assert_eq!(out, vec![EpaxosAction::TruncateLog { below_token: r1 }]);
    a.invariants_full();
    let mut out = Vec::new();
    a.on_persisted(r2, &mut out);
    assert!(out
        .iter()
        .all(|x| !matches!(x, EpaxosAction::TruncateLog { .. })));
    a.invariants_full();
}

/// A replica that truncated above its own durable checkpoint (the driver did not cap
/// the frontier by it) and restarts from that checkpoint has a gap only a peer's
/// checkpoint fills: it keeps answering `Truncated`, asks for state at its first
/// handler, recovers nothing, and catches up after `restore`.
#[test]
fn a_restart_from_a_checkpoint_older_than_the_truncation_needs_state() {
    let mut c = Cluster::new(3, 13);
    c.rounds(1);
    let (len, old) = c.cuts[0][0].clone();
    let old_state = c.logs[0][..len].to_vec();
    c.rounds(2);
    let frontier =
        truncation_frontier(&[c.cuts[1][2].1.clone(), c.cuts[2][2].1.clone()], 1).unwrap();
    assert!(!old.covers(&frontier));
    c.truncate(0, &frontier);
    assert!(!c.truncate_log[0].is_empty());
    c.restart(0, Some(old.clone()), old_state);
    let r = &c.cores[0];
    assert_eq!(
        (r.truncated(), r.exec_prefix()),
        (&frontier[..], &old.prefix[..])
    );
    assert_eq!(r.state_needed(), Some(&frontier[..]));
    // Its first handler: NeedState, and nothing executed from the truncated gap.
    c.tick(&[0]);
    assert_eq!(c.need_state[0], vec![frontier.clone()]);
    let gone = i(2, frontier[1]);
    let mut out = Vec::new();
    c.cores[0].on_message(
        3,
        EpaxosMsg::Prepare {
            instance: gone,
            ballot: Ballot::new(1, 3),
        },
        &mut out,
    );
    assert!(matches!(
        &out[..],
        [EpaxosAction::Send {
            msg: EpaxosMsg::Truncated { .. },
            ..
        }]
    ));
    for _ in 0..300 {
        c.tick(&[0, 1, 2]);
        c.deliver_all();
    }
    assert_eq!(c.cores[0].stats().recoveries_started, 0);
    assert!(c.need_state[0].len() >= 2, "repeated while needed");
    // State transfer from replica 2's newest checkpoint.
    let (len, position) = c.cuts[1][2].clone();
    c.logs[0] = c.logs[1][..len].to_vec();
    let mut out = Vec::new();
    c.cores[0].restore(&position, &mut out);
    c.absorb(0, out);
    c.settle();
    assert_eq!(c.cores[0].state_needed(), None);
    assert_eq!(c.state(0), c.state(1));
    assert!(execution_violations(&[&c.logs[0], &c.logs[1], &c.logs[2]]).is_empty());
}
