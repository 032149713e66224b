//! GeoPaxos+ end to end in virtual time: three replicas in the paper's regions (one
//! serializer each), closed-loop clients at every replica issuing READ, GET-NEXT,
//! GET-PREV, UPDATE and INSERT on a small geo B+tree (order 4, so nodes split often),
//! periodic DOPs, lost serialization requests recovered by the serializers' leaders,
//! and the emulated WAN's latencies (one-way = RTT/2; a serializer decides after a
//! round trip to its nearest acceptor). Each serializer's Paxos group is modelled as
//! its decided log (the Paxos cores themselves are tested elsewhere); everything above
//! it is the real replica core: psite, the timestamp merge, the delivery decision and
//! resubmission.
//!
//! Judged: every replica's tree has the same digest (keys, values, structure and
//! serializers), nothing is left pending, and the clients' history is linearizable
//! (`partita_checker`). Controls: each planted bug is caught by the check it breaks.

use partita_btree::{Op as MapOp, OpResult};
use partita_checker::{check, CheckError, CheckOptions, Event as HEvent, Initial, Status};
use partita_consensus::geopaxos::{Entry, SerializerId};
use partita_geo::replica::{GeoAction, GeoBugs, GeoReplica, GeoValue, OpId};
use partita_geo::Topology;
use partita_geo::{GbTreeOptions, GeoBTree, Op, Reply};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

const N: usize = 3;
const LAN_US: u64 = 500;
const TICK_US: u64 = 5_000;
const STALL_CHECK_US: u64 = 100_000;
const DOP_EVERY_US: u64 = 400_000;
const VALUE_BYTES: usize = 100;

#[derive(Clone, Debug)]
enum Ev {
    /// A serialization request reaches replica `to`, which led serializer `g` when it
    /// was sent (lost if `to` no longer leads it or is down).
    AtLeader {
        g: SerializerId,
        to: usize,
        entry: Entry<OpId, GeoValue>,
    },
    /// Replica `r` learns serializer `g`'s entry at `position`.
    Learn {
        r: usize,
        g: SerializerId,
        position: u64,
    },
    /// A client issues its next request.
    Issue {
        client: usize,
    },
    /// A client's request reaches its replica.
    Submit {
        client: usize,
        op: Op,
    },
    Tick,
    StallCheck,
    Dop,
    /// Replica `r` crashes (its clients give up on what they had outstanding and go
    /// to another replica; the serializers it led elect another leader).
    Crash {
        r: usize,
    },
    /// Serializer `g` elects a new leader.
    Elect {
        g: SerializerId,
    },
    /// Replica `r` comes back: a new incarnation that learns every log again.
    Restart {
        r: usize,
    },
    /// A client gives up on request `no` if it is still outstanding.
    Timeout {
        client: usize,
        no: u64,
    },
}

struct Client {
    home: usize,
    /// Requests issued so far (the request id is `client << 32 | no`).
    issued: u64,
    /// The outstanding request: its number, its history operation and call time.
    outstanding: Option<(u64, MapOp, u64)>,
}

const CLIENT_TIMEOUT_US: u64 = 5_000_000;

struct World {
    rng: ChaCha8Rng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    events: Vec<Option<Ev>>,
    topology: Topology,
    replicas: Vec<GeoReplica>,
    logs: Vec<Vec<Entry<OpId, GeoValue>>>,
    /// Per (replica, serializer): the next position to learn, and what arrived early.
    learned: Vec<Vec<u64>>,
    early: Vec<Vec<BTreeSet<u64>>>,
    clock_in_flight: Vec<bool>,
    stalled_seen: Vec<BTreeSet<OpId>>,
    clients: Vec<Client>,
    /// request id (client index) → nothing; replies route by request = client.
    history: Vec<HEvent>,
    keys: u64,
    loss: f64,
    issuing_until: u64,
    lost: u64,
    recovered: u64,
    /// Who leads each serializer, which replicas are down, their incarnations.
    leader: Vec<usize>,
    down: Vec<bool>,
    incarnation: Vec<u32>,
    initial: GeoBTree,
    bugs: GeoBugs,
    crashes: u64,
    failovers: u64,
    gave_up: u64,
}

fn value_of(v: u64) -> Vec<u8> {
    let mut b = vec![0u8; VALUE_BYTES];
    b[..8].copy_from_slice(&v.to_le_bytes());
    b
}

fn u64_of(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

impl World {
    fn one_way(&self, a: usize, b: usize) -> u64 {
        if a == b {
            0
        } else {
            u64::from(self.topology.rtt_us(a, b)) / 2
        }
    }

    /// A serializer decides after a round trip to its nearest acceptor (a majority of
    /// three with the leader's own).
    fn commit(&self, g: usize) -> u64 {
        (0..N)
            .filter(|h| *h != g)
            .map(|h| u64::from(self.topology.rtt_us(g, h)))
            .min()
            .unwrap()
    }

    fn at(&mut self, delay: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Some(ev));
        self.queue
            .push(Reverse((self.now + delay, self.seq, self.events.len() - 1)));
    }

    fn act(&mut self, r: usize, out: Vec<GeoAction>) {
        for a in out {
            match a {
                GeoAction::Serialize {
                    serializer,
                    op,
                    dst,
                    value,
                } => {
                    let first = dst.iter().next() == Some(serializer);
                    if !first && self.rng.gen_bool(self.loss) {
                        self.lost += 1;
                        continue;
                    }
                    let to = self.leader[serializer as usize];
                    let d = self.one_way(r, to);
                    self.at(
                        d,
                        Ev::AtLeader {
                            g: serializer,
                            to,
                            entry: Entry::Op {
                                op,
                                dst,
                                hint: 0,
                                value,
                            },
                        },
                    );
                }
                GeoAction::Reply { request, reply } => {
                    if request == u64::MAX {
                        continue; // a DOP
                    }
                    let (client, no) = ((request >> 32) as usize, request & 0xffff_ffff);
                    let Some((_, op, call)) = self.clients[client]
                        .outstanding
                        .take_if(|(n, _, _)| *n == no)
                    else {
                        continue; // the client gave up on it
                    };
                    let result = match (&op, reply) {
                        (_, Reply::Value(v)) => OpResult::Value(v.map(|b| u64_of(&b))),
                        (_, Reply::Entry(e)) => OpResult::Entry(e.map(|(k, b)| (k, u64_of(&b)))),
                        (_, Reply::Old(v)) => OpResult::Old(v.map(|b| u64_of(&b))),
                        (_, Reply::Inserted(b)) => OpResult::Inserted(b),
                        (_, Reply::Dop(_)) => unreachable!("clients send no DOP"),
                    };
                    let ret = self.now + LAN_US;
                    self.history.push(HEvent::new(
                        client as u64,
                        &op,
                        call,
                        ret,
                        Status::Ok,
                        Some(&result),
                    ));
                    self.at(LAN_US, Ev::Issue { client });
                }
                GeoAction::Refused { request, reason } => {
                    panic!("request {request} refused: {reason}")
                }
            }
        }
    }

    fn append(&mut self, g: SerializerId, mut entry: Entry<OpId, GeoValue>) {
        let leader = self.leader[g as usize];
        let hint = self.replicas[leader].hint();
        match &mut entry {
            Entry::Op { hint: h, .. } => *h = hint,
            Entry::Clock { hint: h } => *h = (*h).max(hint),
        }
        let position = self.logs[g as usize].len() as u64;
        self.logs[g as usize].push(entry);
        let commit = self.commit(leader);
        for r in 0..N {
            let d = commit + self.one_way(leader, r);
            self.at(d, Ev::Learn { r, g, position });
        }
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::AtLeader { g, to, entry } => {
                if self.down[to] || self.leader[g as usize] != to {
                    self.lost += 1;
                } else {
                    self.append(g, entry);
                }
            }
            Ev::Learn { r, g, position } => {
                if self.down[r] {
                    return;
                }
                self.early[r][g as usize].insert(position);
                while self.early[r][g as usize].remove(&self.learned[r][g as usize]) {
                    let p = self.learned[r][g as usize];
                    self.learned[r][g as usize] += 1;
                    let entry = self.logs[g as usize][p as usize].clone();
                    if r == self.leader[g as usize] && matches!(entry, Entry::Clock { .. }) {
                        self.clock_in_flight[g as usize] = false;
                    }
                    let mut out = Vec::new();
                    self.replicas[r].on_decided(g, p, entry, &mut out).unwrap();
                    self.replicas[r].invariants();
                    self.act(r, out);
                }
            }
            Ev::Issue { client } => {
                if self.now >= self.issuing_until {
                    return;
                }
                let key = self.rng.gen_range(0..self.keys);
                let v = self.rng.gen_range(0..1_000_000u64);
                let (op, hop) = match self.rng.gen_range(0..10) {
                    0..=2 => (Op::Read { key }, MapOp::Read { key }),
                    3 => (Op::GetNext { key }, MapOp::Next { key }),
                    4 => (Op::GetPrev { key }, MapOp::Prev { key }),
                    5..=6 => (
                        Op::Update {
                            key,
                            value: value_of(v),
                        },
                        MapOp::Update { key, value: v },
                    ),
                    _ => (
                        Op::Insert {
                            key,
                            value: value_of(v),
                        },
                        MapOp::Insert { key, value: v },
                    ),
                };
                let no = self.clients[client].issued;
                self.clients[client].issued += 1;
                self.clients[client].outstanding = Some((no, hop, self.now));
                self.at(LAN_US, Ev::Submit { client, op });
                self.at(CLIENT_TIMEOUT_US, Ev::Timeout { client, no });
            }
            Ev::Submit { client, op } => {
                let r = self.clients[client].home;
                if self.down[r] {
                    return; // lost with the replica; the client times out
                }
                let no = self.clients[client].issued - 1;
                let mut out = Vec::new();
                self.replicas[r]
                    .submit((client as u64) << 32 | no, op, &mut out)
                    .unwrap();
                self.act(r, out);
            }
            Ev::Timeout { client, no } => {
                if self.clients[client]
                    .outstanding
                    .as_ref()
                    .is_some_and(|(n, _, _)| *n == no)
                {
                    self.give_up(client);
                    self.at(LAN_US, Ev::Issue { client });
                }
            }
            Ev::Crash { r } => {
                if self.down.iter().any(|d| *d) || self.now >= self.issuing_until {
                    return; // one replica down at a time
                }
                self.down[r] = true;
                self.crashes += 1;
                for c in 0..self.clients.len() {
                    if self.clients[c].home == r {
                        self.clients[c].home = (r + 1) % N;
                        if self.clients[c].outstanding.is_some() {
                            self.give_up(c);
                            self.at(LAN_US, Ev::Issue { client: c });
                        }
                    }
                }
                for g in 0..N as SerializerId {
                    if self.leader[g as usize] == r {
                        self.at(300_000, Ev::Elect { g });
                    }
                }
                self.at(1_000_000, Ev::Restart { r });
            }
            Ev::Elect { g } => {
                let old = self.leader[g as usize];
                let new = (1..=N)
                    .map(|i| (old + i) % N)
                    .find(|h| !self.down[*h])
                    .unwrap();
                self.leader[g as usize] = new;
                self.clock_in_flight[g as usize] = false;
                self.failovers += 1;
            }
            Ev::Restart { r } => {
                self.incarnation[r] += 1;
                self.replicas[r] = GeoReplica::new(r, self.initial.clone())
                    .unwrap()
                    .with_incarnation(self.incarnation[r])
                    .with_bugs(self.bugs);
                self.down[r] = false;
                for g in 0..N {
                    self.learned[r][g] = 0;
                    self.early[r][g].clear();
                    // Fetch the log so far from the serializer's acceptors.
                    let d = self.one_way(self.leader[g], r);
                    for position in 0..self.logs[g].len() as u64 {
                        self.at(
                            d,
                            Ev::Learn {
                                r,
                                g: g as SerializerId,
                                position,
                            },
                        );
                    }
                }
            }
            Ev::Tick => {
                for g in 0..N as SerializerId {
                    let leader = self.leader[g as usize];
                    if self.clock_in_flight[g as usize] || self.down[leader] {
                        continue;
                    }
                    if let Some(c) = self.replicas[leader].wanted_clock(g) {
                        self.clock_in_flight[g as usize] = true;
                        self.append(g, Entry::Clock { hint: c + 1 });
                    }
                }
                if !self.quiet() {
                    self.at(TICK_US, Ev::Tick);
                }
            }
            Ev::StallCheck => {
                for g in 0..N as SerializerId {
                    let leader = self.leader[g as usize];
                    if self.down[leader] {
                        continue;
                    }
                    let now: Vec<_> = self.replicas[leader].stalled_for(g);
                    let mut seen = BTreeSet::new();
                    for (op, dst, value) in now {
                        if self.stalled_seen[g as usize].contains(&op) {
                            self.recovered += 1;
                            self.append(
                                g,
                                Entry::Op {
                                    op,
                                    dst,
                                    hint: 0,
                                    value,
                                },
                            );
                        } else {
                            seen.insert(op);
                        }
                    }
                    self.stalled_seen[g as usize] = seen;
                }
                if !self.quiet() {
                    self.at(STALL_CHECK_US, Ev::StallCheck);
                }
            }
            Ev::Dop => {
                if self.now >= self.issuing_until {
                    return;
                }
                self.at(DOP_EVERY_US, Ev::Dop);
                if self.down[0] {
                    return;
                }
                let mut out = Vec::new();
                self.replicas[0]
                    .submit(u64::MAX, Op::Dop, &mut out)
                    .unwrap();
                self.act(0, out);
            }
        }
    }

    /// The client stops waiting for its outstanding request: it may take effect at any
    /// time after its invocation, or never.
    fn give_up(&mut self, client: usize) {
        if let Some((_, op, call)) = self.clients[client].outstanding.take() {
            self.gave_up += 1;
            self.history.push(HEvent::new(
                client as u64,
                &op,
                call,
                self.now,
                Status::Info,
                None,
            ));
        }
    }

    /// Nothing left to do but ticks.
    fn quiet(&self) -> bool {
        self.now >= self.issuing_until
            && self.clients.iter().all(|c| c.outstanding.is_none())
            && self.replicas.iter().all(|r| r.merge().pending_len() == 0)
            && self.queue.iter().all(|Reverse((_, _, i))| {
                matches!(
                    self.events[*i],
                    Some(Ev::Tick)
                        | Some(Ev::StallCheck)
                        | Some(Ev::Timeout { .. })
                        | Some(Ev::Crash { .. })
                        | None
                )
            })
    }
}

#[derive(Debug)]
struct Outcome {
    verdict: Result<(), Verdict>,
    ops: usize,
    resubmit_decisions: u64,
    multi: u64,
    dops: u64,
    nodes: usize,
    recovered: u64,
    crashes: u64,
    failovers: u64,
    gave_up: u64,
}

/// What a run broke (the fields are for the failure messages).
#[derive(Debug)]
#[allow(dead_code)]
enum Verdict {
    Divergence(Vec<u64>),
    NotLinearizable(String),
    Unknown(String),
    Stuck(String),
}

fn run(seed: u64, bugs: GeoBugs, loss: f64, crashes: bool) -> Outcome {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let topology = Topology::paper_three_regions();
    let mut opts = GbTreeOptions::new(4, seed);
    opts.value_bytes_max = VALUE_BYTES;
    let mut tree = GeoBTree::new(topology.clone(), opts).unwrap();
    let clients_per_replica = rng.gen_range(1..=4);
    let keys = rng.gen_range(8..=48);
    // Half of the seeds start from a tree holding every other key, its nodes on
    // serializers drawn at random (the paper's DBT_b, as the nemesis starts): inserts
    // of the other keys split nodes whose serializers differ from the start. The other
    // half start empty, every node growing from the root's serializers until DOPs
    // spread them.
    let mut preloaded = Vec::new();
    if seed % 4 >= 2 {
        for key in (0..keys).step_by(2) {
            let insert = Op::Insert {
                key,
                value: value_of(key),
            };
            tree.execute(&insert, 0).unwrap();
            preloaded.push((key, key));
        }
        tree.randomize_reps(seed);
    }
    let replicas: Vec<GeoReplica> = (0..N)
        .map(|r| GeoReplica::new(r, tree.clone()).unwrap().with_bugs(bugs))
        .collect();
    let mut w = World {
        rng,
        now: 0,
        seq: 0,
        queue: BinaryHeap::new(),
        events: Vec::new(),
        topology,
        replicas,
        logs: vec![Vec::new(); N],
        learned: vec![vec![0; N]; N],
        early: vec![vec![BTreeSet::new(); N]; N],
        clock_in_flight: vec![false; N],
        stalled_seen: vec![BTreeSet::new(); N],
        clients: (0..N * clients_per_replica)
            .map(|i| Client {
                home: i % N,
                issued: 0,
                outstanding: None,
            })
            .collect(),
        history: Vec::new(),
        keys,
        loss,
        issuing_until: 10_000_000,
        lost: 0,
        recovered: 0,
        leader: (0..N).collect(),
        down: vec![false; N],
        incarnation: vec![0; N],
        initial: tree,
        bugs,
        crashes: 0,
        failovers: 0,
        gave_up: 0,
    };
    if crashes {
        // Two crashes at random times, of random replicas (serializer leaders among
        // them: every replica leads its own serializer at first).
        for _ in 0..2 {
            let t = w.rng.gen_range(500_000..8_000_000);
            let r = w.rng.gen_range(0..N);
            w.at(t, Ev::Crash { r });
        }
    }
    for c in 0..w.clients.len() {
        let d = w.rng.gen_range(0..10_000);
        w.at(d, Ev::Issue { client: c });
    }
    w.at(TICK_US, Ev::Tick);
    w.at(STALL_CHECK_US, Ev::StallCheck);
    w.at(DOP_EVERY_US, Ev::Dop);
    let mut steps = 0u64;
    while let Some(Reverse((t, _, i))) = w.queue.pop() {
        w.now = t;
        let ev = w.events[i].take().unwrap();
        w.step(ev);
        steps += 1;
        if steps > 5_000_000 || w.now > 60_000_000 {
            break;
        }
    }
    let stats: Vec<_> = w.replicas.iter().map(|r| r.stats().clone()).collect();
    let outcome = |verdict| Outcome {
        verdict,
        ops: w.history.len(),
        resubmit_decisions: stats[0].resubmit_decisions,
        multi: stats[0].executed_multi,
        dops: stats[0].dops,
        nodes: w.replicas[0].tree().node_count(),
        recovered: w.recovered,
        crashes: w.crashes,
        failovers: w.failovers,
        gave_up: w.gave_up,
    };
    let digests: Vec<u64> = w.replicas.iter().map(|r| r.digest()).collect();
    if !w.quiet() {
        let pending: Vec<usize> = w.replicas.iter().map(|r| r.merge().pending_len()).collect();
        return outcome(Err(Verdict::Stuck(format!(
            "at {} µs: pending {pending:?}, outstanding {}",
            w.now,
            w.clients.iter().filter(|c| c.outstanding.is_some()).count()
        ))));
    }
    if digests.iter().any(|d| *d != digests[0]) {
        return outcome(Err(Verdict::Divergence(digests)));
    }
    let options = CheckOptions::with_initial(Initial::Entries(preloaded));
    let verdict = match check(&w.history, &options) {
        Ok(_) => Ok(()),
        Err(CheckError::NotLinearizable(v)) => Err(Verdict::NotLinearizable(v.to_string())),
        Err(e) => Err(Verdict::Unknown(e.to_string())),
    };
    outcome(verdict)
}

#[test]
fn geopaxos_plus_is_linearizable_and_converges() {
    let mut totals = BTreeMap::<&str, u64>::new();
    // 1,000 seeds: the divergence the nemesis found (counters that depended on the
    // order of requests sharing no serializer, e35a418) shows in 9 of them on the
    // code before that fix, the first at seed 553; 60 seeds missed it.
    for seed in 0..1000 {
        let loss = if seed % 3 == 0 { 0.05 } else { 0.0 };
        let o = run(seed, GeoBugs::default(), loss, seed % 2 == 1);
        assert!(o.verdict.is_ok(), "seed {seed}: {o:?}");
        assert!(o.ops > 20, "seed {seed}: only {} operations", o.ops);
        *totals.entry("ops").or_default() += o.ops as u64;
        *totals.entry("resubmit decisions").or_default() += o.resubmit_decisions;
        *totals.entry("multi-serializer").or_default() += o.multi;
        *totals.entry("dops").or_default() += o.dops;
        *totals.entry("nodes").or_default() += o.nodes as u64;
        *totals.entry("recovered").or_default() += o.recovered;
        *totals.entry("crashes").or_default() += o.crashes;
        *totals.entry("leader failovers").or_default() += o.failovers;
        *totals.entry("given up").or_default() += o.gave_up;
    }
    eprintln!("{totals:?}");
    // The run exercised what it claims to.
    assert!(totals["resubmit decisions"] > 0, "{totals:?}");
    assert!(totals["multi-serializer"] > 0, "{totals:?}");
    assert!(totals["dops"] >= 60, "{totals:?}");
    assert!(totals["recovered"] > 0, "{totals:?}");
    assert!(totals["leader failovers"] >= 30, "{totals:?}");
}

fn caught(bugs: GeoBugs, seeds: std::ops::Range<u64>, what: fn(&Verdict) -> bool) -> usize {
    seeds
        .filter(|s| match run(*s, bugs, 0.0, false).verdict {
            Err(v) => what(&v),
            Ok(()) => false,
        })
        .count()
}

fn report(bugs: GeoBugs, seeds: std::ops::Range<u64>) {
    for s in seeds {
        let o = run(s, bugs, 0.0, false);
        eprintln!(
            "seed {s}: {:?}",
            o.verdict
                .as_ref()
                .map_err(|v| format!("{v:?}").chars().take(150).collect::<String>())
        );
    }
}

#[test]
fn the_control_dop_not_ordered_with_everything_diverges() {
    let bugs = GeoBugs {
        dop_not_ordered_with_everything: true,
        ..GeoBugs::default()
    };
    let n = caught(bugs, 0..12, |v| {
        matches!(v, Verdict::Divergence(_) | Verdict::NotLinearizable(_))
    });
    eprintln!("{bugs:?}: caught in {n} of 12 seeds");
    if n < 3 {
        report(bugs, 0..12);
    }
    assert!(n >= 3, "caught in {n} of 12 seeds");
}

#[test]
fn the_control_write_ordered_by_one_serializer_is_caught() {
    let bugs = GeoBugs {
        write_ordered_by_one_serializer: true,
        ..GeoBugs::default()
    };
    let n = caught(bugs, 0..12, |v| {
        matches!(v, Verdict::Divergence(_) | Verdict::NotLinearizable(_))
    });
    eprintln!("{bugs:?}: caught in {n} of 12 seeds");
    assert!(n >= 3, "caught in {n} of 12 seeds");
}

#[test]
fn the_control_executing_before_a_timestamp_is_safe_is_caught() {
    let bugs = GeoBugs {
        execute_before_safe: true,
        ..GeoBugs::default()
    };
    let n = caught(bugs, 0..12, |v| {
        matches!(v, Verdict::Divergence(_) | Verdict::NotLinearizable(_))
    });
    eprintln!("{bugs:?}: caught in {n} of 12 seeds");
    assert!(n >= 3, "caught in {n} of 12 seeds");
}

/// Fuzzing finding 1: a decided operation whose id names an origin outside the
/// topology (no correct replica sends one, but a serializer's leader orders any entry
/// forwarded to it that decodes) panicked every replica that learned it. Now each
/// replica skips it, identically, and goes on.
#[test]
fn a_decided_operation_from_no_replica_is_skipped_everywhere() {
    let topology = Topology::paper_three_regions();
    let tree = GeoBTree::new(topology, GbTreeOptions::new(4, 1)).unwrap();
    let value = |request, key| GeoValue {
        op: Op::Update {
            key,
            value: value_of(request),
        },
        request,
    };
    let id = |from, seq| OpId {
        from,
        incarnation: 1,
        seq,
        attempt: 0,
    };
    let dst = partita_consensus::geopaxos::SerializerSet(0b111);
    let log = [
        Entry::Op {
            op: id(128, 0),
            dst,
            hint: 1,
            value: value(1, 0),
        },
        Entry::Op {
            op: id(N as u16, 1),
            dst,
            hint: 2,
            value: value(2, 1),
        },
        Entry::Op {
            op: id(1, 0),
            dst,
            hint: 3,
            value: value(3, 2),
        },
        // Every log past the last operation's final timestamp.
        Entry::Clock { hint: 4 },
    ];
    let mut digests = Vec::new();
    for r in 0..N {
        let mut replica = GeoReplica::new(r, tree.clone())
            .unwrap()
            .with_incarnation(1);
        let mut answers = Vec::new();
        for g in 0..N {
            for (position, e) in log.iter().enumerate() {
                let mut out = Vec::new();
                replica
                    .on_decided(g as SerializerId, position as u64, e.clone(), &mut out)
                    .unwrap();
                answers.extend(out);
            }
        }
        replica.invariants();
        assert_eq!(
            replica.stats().malformed,
            2,
            "both strangers' operations skipped"
        );
        assert_eq!(
            replica.stats().executed,
            1,
            "replica 1's write executed: {:?}",
            replica.stats()
        );
        // Replica 1 answers its own request; no one answers the strangers'.
        let requests: Vec<u64> = answers
            .iter()
            .map(|a| match a {
                GeoAction::Reply { request, .. } => *request,
                other => panic!("only a reply: {other:?}"),
            })
            .collect();
        assert_eq!(requests, if r == 1 { vec![3] } else { vec![] });
        digests.push(replica.digest());
    }
    assert!(
        digests.windows(2).all(|w| w[0] == w[1]),
        "the replicas agree"
    );
}
