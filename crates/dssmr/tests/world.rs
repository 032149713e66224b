//! S-SMR and DS-SMR cores in a small deterministic world: one atomic-multicast
//! sequence (every member delivers the commands addressed to it in that order, each
//! replica at its own pace), exchanges and replies delivered in random order with
//! duplicates from every replica, client proxies with caches, moves, retries and
//! fallbacks, creates and deletes. Every run is judged three ways:
//!
//! - equivalence: executing the commands that took effect, in the sequence, on one
//!   unpartitioned Chirper gives the same replies, and the same users at the end
//!   (each in exactly one partition), with the oracle's map where the users are;
//! - execution atomicity: no answer leaves a member before every destination of its
//!   command delivered it;
//! - termination: every client's every command finishes (the fallback), and replicas
//!   of a member agree on every answer and on their state.
//!
//! The planted bugs of the server proxies are each caught by the check they break.

use partita_dssmr::chirper::*;
use partita_dssmr::client::*;
use partita_dssmr::server::*;
use partita_dssmr::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};

struct Entry {
    at: CmdRef,
    dests: Dests,
    cmd: DsCommand<ChirperCommand>,
}

struct Replica {
    member: Member,
    rank: usize,
    server: Server<Chirper>,
    next: usize,
}

struct Client {
    proxy: ClientProxy<Chirper>,
    waiting: Option<CmdRef>,
    finished: u64,
    posts: u64,
}

#[derive(Clone, Debug)]
struct Setup {
    scheme: Scheme,
    partitions: usize,
    replicas: usize,
    clients: usize,
    commands: u64,
    workload: Workload,
    planted: Planted,
    creates: bool,
    /// Share of exchanges lost (then asked for again).
    loss: f64,
    /// Where users start and are created (every member and client alike).
    static_map: StaticMap,
}

struct World {
    setup: Setup,
    rng: ChaCha8Rng,
    graph: Graph,
    log: Vec<Entry>,
    by_member: BTreeMap<Member, Vec<usize>>,
    replicas: Vec<Replica>,
    exchanges: Vec<(usize, Exchange)>,
    replies: Vec<(usize, CmdRef, DsReply<ChirperReply>)>,
    /// Every member's reply to every command.
    answers: BTreeMap<(CmdRef, Member), DsReply<ChirperReply>>,
    waiter: BTreeMap<CmdRef, usize>,
    delivered: BTreeSet<(CmdRef, Member)>,
    clients: Vec<Client>,
    violations: Vec<String>,
    next_user: u32,
}

impl World {
    fn new(setup: Setup, seed: u64) -> World {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let communities = rng.gen_range(2..=6);
        let graph = Graph::generate(&GraphSpec {
            users: communities * rng.gen_range(3..=8),
            communities,
            mean_followers: rng.gen_range(1.0..6.0),
            p_local: 0.8,
            seed,
            scattered: false,
        });
        let objects = graph.objects();
        let mut members: Vec<Member> = (0..setup.partitions as u16)
            .map(Member::Partition)
            .collect();
        if setup.scheme == Scheme::Dssmr {
            members.push(Member::Oracle);
        }
        let mut replicas = Vec::new();
        for m in &members {
            for rank in 0..setup.replicas {
                let mut server = Server::<Chirper>::new(*m, setup.partitions, setup.static_map);
                server.set_planted(setup.planted);
                server.load(objects.iter().cloned());
                replicas.push(Replica {
                    member: *m,
                    rank,
                    server,
                    next: 0,
                });
            }
        }
        let clients = (0..setup.clients)
            .map(|c| {
                let mut cfg = ProxyConfig::new(setup.scheme, setup.partitions);
                cfg.retries_max = rng.gen_range(1..=3);
                cfg.static_map = setup.static_map;
                let mut proxy = ClientProxy::new(cfg, seed * 100 + c as u64);
                if c % 2 == 0 {
                    proxy.prefetch_initial(objects.iter().map(|(u, _)| *u));
                }
                if c % 3 == 1 {
                    proxy.set_placement(Box::new(MostObjectsPlacement));
                }
                Client {
                    proxy,
                    waiting: None,
                    finished: 0,
                    posts: 0,
                }
            })
            .collect();
        World {
            setup,
            rng,
            graph,
            log: Vec::new(),
            by_member: members.into_iter().map(|m| (m, Vec::new())).collect(),
            replicas,
            exchanges: Vec::new(),
            replies: Vec::new(),
            answers: BTreeMap::new(),
            waiter: BTreeMap::new(),
            delivered: BTreeSet::new(),
            clients,
            violations: Vec::new(),
            next_user: 1000,
        }
    }

    /// The sequencer: the multicast joins the one sequence.
    fn multicast(&mut self, client: usize, m: Multicast<ChirperCommand>) {
        // Consecutive commands share an instance now and then (a batch): members run
        // them in delivery order, which is not the order of their names.
        let prev = self.log.last().map_or(0, |e| e.at.instance);
        let instance = if prev > 0 && self.rng.gen_bool(0.3) {
            prev
        } else {
            prev + 1
        };
        let at = CmdRef {
            instance,
            client: self.rng.gen_range(0..1000),
            seq: self.log.len() as u64 + 1,
        };
        for member in m.dests.members() {
            self.by_member
                .get_mut(&member)
                .unwrap_or_else(|| panic!("a multicast to {member:?}, which this deployment lacks"))
                .push(self.log.len());
        }
        if m.answered {
            assert!(
                self.clients[client].waiting.is_none(),
                "two answered commands in flight"
            );
            self.clients[client].waiting = Some(at);
            self.waiter.insert(at, client);
        }
        self.log.push(Entry {
            at,
            dests: m.dests,
            cmd: m.cmd,
        });
    }

    fn client_command(&mut self, c: usize) -> ChirperCommand {
        let r: f64 = self.rng.gen();
        if self.setup.creates && r < 0.03 {
            let community = self.rng.gen_range(0..self.graph.communities);
            let user = user_id(community, self.next_user);
            self.next_user += 1;
            return ChirperCommand::CreateUser { user };
        }
        if self.setup.creates && r < 0.05 {
            return ChirperCommand::DeleteUser {
                user: self.graph.random_user(&mut self.rng),
            };
        }
        let cl = &mut self.clients[c];
        cl.posts += 1;
        let id = ((c as u64) << 32) | cl.posts;
        self.setup.workload.next(&self.graph, id, &mut self.rng)
    }

    /// One random step; false when nothing is left to do.
    fn step(&mut self) -> bool {
        let mut choices = Vec::new();
        let pending: Vec<usize> = (0..self.replicas.len())
            .filter(|&i| self.replicas[i].next < self.by_member[&self.replicas[i].member].len())
            .collect();
        if !pending.is_empty() {
            choices.push(0);
        }
        if !self.exchanges.is_empty() {
            choices.push(1);
        }
        if !self.replies.is_empty() {
            choices.push(2);
        }
        let idle: Vec<usize> = (0..self.clients.len())
            .filter(|&c| {
                !self.clients[c].proxy.busy() && self.clients[c].finished < self.setup.commands
            })
            .collect();
        if !idle.is_empty() {
            choices.push(3);
        }
        let stalled: Vec<usize> = (0..self.replicas.len())
            .filter(|&i| self.replicas[i].server.missing().is_some())
            .collect();
        if choices.is_empty() && !stalled.is_empty() {
            // Nothing else can happen: the lost exchanges are asked for again.
            choices.push(4);
        } else if !stalled.is_empty() && self.rng.gen_bool(0.02) {
            choices.push(4);
        }
        if choices.is_empty() {
            return false;
        }
        match choices[self.rng.gen_range(0..choices.len())] {
            0 => {
                let i = pending[self.rng.gen_range(0..pending.len())];
                self.deliver(i);
            }
            1 => {
                let k = self.rng.gen_range(0..self.exchanges.len());
                let (i, x) = self.exchanges.swap_remove(k);
                if self.rng.gen_bool(self.setup.loss) {
                    return true;
                }
                let mut out = Vec::new();
                self.replicas[i].server.on_exchange(x, &mut out);
                self.outputs(i, out);
            }
            4 => {
                let i = stalled[self.rng.gen_range(0..stalled.len())];
                let (at, from) = self.replicas[i].server.missing().expect("stalled");
                for j in 0..self.replicas.len() {
                    if from.contains(self.replicas[j].member) {
                        if let Some(x) = self.replicas[j].server.resend(at) {
                            self.exchanges.push((i, x.clone()));
                        }
                    }
                }
            }
            2 => {
                let k = self.rng.gen_range(0..self.replies.len());
                let (c, at, reply) = self.replies.swap_remove(k);
                self.reply(c, at, reply);
            }
            _ => {
                let c = idle[self.rng.gen_range(0..idle.len())];
                let cmd = self.client_command(c);
                let mut out = Vec::new();
                self.clients[c].proxy.submit(cmd, &mut out);
                for m in out {
                    self.multicast(c, m);
                }
            }
        }
        true
    }

    fn deliver(&mut self, i: usize) {
        let r = &mut self.replicas[i];
        let e = &self.log[self.by_member[&r.member][r.next]];
        r.next += 1;
        self.delivered.insert((e.at, r.member));
        let mut out = Vec::new();
        r.server
            .deliver(e.at, e.at.instance, e.dests, e.cmd.clone(), &mut out);
        self.outputs(i, out);
    }

    fn outputs(&mut self, i: usize, out: Vec<Output<ChirperReply>>) {
        self.replicas[i].server.invariants();
        let member = self.replicas[i].member;
        for o in out {
            match o {
                Output::Exchange { to, msg } => {
                    for j in 0..self.replicas.len() {
                        if to.contains(self.replicas[j].member) {
                            self.exchanges.push((j, msg.clone()));
                        }
                    }
                }
                Output::Reply { at, reply } => {
                    let dests = self.log[at.seq as usize - 1].dests;
                    for m in dests.members() {
                        if !self.delivered.contains(&(at, m)) {
                            self.violations.push(format!(
                                "execution atomicity: {member:?} answered {at:?} (to {dests:?}) before {m:?} delivered it"
                            ));
                        }
                    }
                    match self.answers.get(&(at, member)) {
                        Some(prev) if *prev != reply => self.violations.push(format!(
                            "replicas of {member:?} disagree on {at:?}: {prev:?} and {reply:?}"
                        )),
                        Some(_) => {}
                        None => {
                            self.answers.insert((at, member), reply.clone());
                        }
                    }
                    if self.replicas[i].rank == 0 && !reply.is_signal() {
                        if let Some(c) = self.waiter.get(&at) {
                            self.replies.push((*c, at, reply));
                        }
                    }
                }
            }
        }
    }

    fn reply(&mut self, c: usize, at: CmdRef, reply: DsReply<ChirperReply>) {
        if self.clients[c].waiting != Some(at) {
            return;
        }
        self.clients[c].waiting = None;
        let mut out = Vec::new();
        if self.clients[c].proxy.on_reply(reply, &mut out).is_some() {
            self.clients[c].finished += 1;
        }
        for m in out {
            self.multicast(c, m);
        }
    }

    fn run(&mut self) {
        let mut steps = 0u64;
        while self.step() {
            steps += 1;
            if steps > 5_000_000 {
                self.violations.push("no progress after 5M steps".into());
                return;
            }
        }
        for (c, cl) in self.clients.iter().enumerate() {
            if cl.finished < self.setup.commands {
                self.violations.push(format!(
                    "client {c} finished {} of {} commands",
                    cl.finished, self.setup.commands
                ));
            }
        }
        self.judge();
    }

    /// Equivalence with one unpartitioned Chirper run in the sequence's order.
    fn judge(&mut self) {
        let mut reference = Reference::<Chirper>::default();
        reference.load(self.graph.objects());
        for e in &self.log {
            let replies: Vec<&DsReply<ChirperReply>> = e
                .dests
                .members()
                .filter_map(|m| self.answers.get(&(e.at, m)))
                .collect();
            if replies.len() != e.dests.count() {
                self.violations.push(format!(
                    "{:?}: {} of {} destinations replied",
                    e.at,
                    replies.len(),
                    e.dests.count()
                ));
            }
            let answers: Vec<_> = replies.into_iter().filter(|r| !r.is_signal()).collect();
            let answer = match answers.len() {
                0 if matches!(e.cmd, DsCommand::Move { .. }) => continue,
                1 => Some(answers[0]),
                0 => None,
                _ => {
                    self.violations.push(format!(
                        "{:?}: {} answers {answers:?}",
                        e.at,
                        answers.len()
                    ));
                    continue;
                }
            };
            if let Some(DsReply::Invalid(why)) = answer {
                self.violations.push(format!("{:?} refused: {why}", e.at));
                continue;
            }
            let cmd = match &e.cmd {
                DsCommand::Access { cmd, .. } | DsCommand::Global { cmd } => cmd,
                DsCommand::Create { cmd, .. } | DsCommand::Delete { cmd } => cmd,
                DsCommand::Consult { .. } => continue,
                DsCommand::Move { .. } => {
                    self.violations.push(format!("{:?}: a move answered", e.at));
                    continue;
                }
            };
            match (Chirper::kind(cmd), answer) {
                (_, None) => self
                    .violations
                    .push(format!("{:?} ({:?}) never answered", e.at, e.cmd)),
                (_, Some(DsReply::Retry(_))) => {}
                (Kind::Access(_), Some(DsReply::Done(r))) => {
                    let want = reference.execute(cmd);
                    if *r != want {
                        self.violations.push(format!(
                            "{:?} {cmd:?}: answered {r:?}, one unpartitioned Chirper says {want:?}",
                            e.at
                        ));
                    }
                }
                (Kind::Create(v), Some(DsReply::Created(b))) => {
                    let want = reference.create(v, cmd);
                    if *b != want {
                        self.violations
                            .push(format!("{:?} create {v}: {b}, reference {want}", e.at));
                    }
                }
                (Kind::Delete(v), Some(DsReply::Deleted(b))) => {
                    let want = reference.objects.contains_key(&v);
                    if *b != want {
                        self.violations
                            .push(format!("{:?} delete {v}: {b}, reference {want}", e.at));
                    }
                    reference.delete(v);
                }
                (_, Some(other)) => self
                    .violations
                    .push(format!("{:?} {cmd:?}: unexpected answer {other:?}", e.at)),
            }
        }
        // The state at the end.
        let mut located: BTreeMap<ObjectId, u16> = BTreeMap::new();
        for r in self.replicas.iter().filter(|r| r.rank == 0) {
            if let Member::Partition(p) = r.member {
                for (id, u) in r.server.objects() {
                    if let Some(q) = located.insert(*id, p) {
                        self.violations
                            .push(format!("user {id} in partitions {q} and {p}"));
                    }
                    if reference.objects.get(id) != Some(u) {
                        self.violations.push(format!(
                            "user {id} at partition {p} differs from the reference's"
                        ));
                    }
                }
            }
        }
        for id in reference.objects.keys() {
            if !located.contains_key(id) {
                self.violations
                    .push(format!("user {id} is in no partition"));
            }
        }
        for r in &self.replicas {
            if r.member == Member::Oracle {
                let map: BTreeMap<ObjectId, u16> =
                    r.server.map().iter().map(|(k, v)| (*k, *v)).collect();
                if map != located {
                    let stale = map
                        .iter()
                        .filter(|(k, v)| located.get(k) != Some(v))
                        .count();
                    self.violations.push(format!(
                        "the oracle's map is wrong about {stale} users (replica {})",
                        r.rank
                    ));
                }
            }
            let first = self
                .replicas
                .iter()
                .find(|q| q.member == r.member && q.rank == 0)
                .unwrap();
            if r.server.digest() != first.server.digest() {
                self.violations
                    .push(format!("replicas of {:?} diverged", r.member));
            }
            if r.server.waiting() == 0 {
                match Server::<Chirper>::restore(&r.server.snapshot(), self.setup.static_map) {
                    Ok(back) if back.digest() == r.server.digest() => {}
                    Ok(_) => self
                        .violations
                        .push(format!("{:?}: restored state differs", r.member)),
                    Err(e) => self
                        .violations
                        .push(format!("{:?}: restore: {e}", r.member)),
                }
            }
            if r.server.waiting() > 0 {
                self.violations.push(format!(
                    "{:?} still blocked on {:?}",
                    r.member,
                    r.server.blocked_on()
                ));
            }
        }
    }

    fn stats(&self) -> (ProxyStats, u64) {
        let mut s = ProxyStats::default();
        for c in &self.clients {
            s += c.proxy.stats();
        }
        let multi = self
            .replicas
            .iter()
            .filter(|r| r.rank == 0)
            .map(|r| r.server.stats().multi)
            .sum();
        (s, multi)
    }
}

fn setup(seed: u64, scheme: Scheme) -> Setup {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    Setup {
        scheme,
        partitions: rng.gen_range(1..=8),
        replicas: rng.gen_range(1..=2),
        clients: rng.gen_range(1..=6),
        commands: 40,
        workload: Workload::ALL[rng.gen_range(0..4)],
        planted: Planted::default(),
        creates: scheme == Scheme::Dssmr && rng.gen_bool(0.5),
        loss: if rng.gen_bool(0.3) { 0.1 } else { 0.0 },
        // From the seed, not the stream (a draw would change every later one).
        static_map: if seed & 2 == 0 {
            StaticMap::Service
        } else {
            StaticMap::Hashed
        },
    }
}

fn run(setup: Setup, seed: u64) -> World {
    let mut w = World::new(setup, seed);
    w.run();
    w
}

#[test]
fn dssmr_runs_are_equivalent_to_one_chirper() {
    let mut totals = ProxyStats::default();
    for seed in 0..400 {
        let s = setup(seed, Scheme::Dssmr);
        let w = run(s.clone(), seed);
        assert!(
            w.violations.is_empty(),
            "seed {seed} {s:?}: {:#?}",
            &w.violations[..w.violations.len().min(8)]
        );
        let (st, _) = w.stats();
        totals.move_commands += st.move_commands;
        totals.retries += st.retries;
        totals.fallbacks += st.fallbacks;
        totals.cache_hits += st.cache_hits;
    }
    // The runs exercised what they are meant to.
    assert!(totals.move_commands > 100, "{totals:?}");
    assert!(totals.retries > 20, "{totals:?}");
    assert!(totals.fallbacks > 0, "{totals:?}");
    assert!(totals.cache_hits > 100, "{totals:?}");
}

#[test]
fn ssmr_runs_are_equivalent_to_one_chirper() {
    let mut multi = 0;
    for seed in 0..400 {
        let s = setup(seed, Scheme::Ssmr);
        let w = run(s.clone(), seed);
        assert!(
            w.violations.is_empty(),
            "seed {seed} {s:?}: {:#?}",
            &w.violations[..w.violations.len().min(8)]
        );
        let (st, m) = w.stats();
        assert_eq!(st.move_commands + st.retries + st.consults, 0);
        multi += m;
    }
    assert!(multi > 500, "multi-partition commands: {multi}");
}

/// Runs of a planted bug until one shows the violation `wanted` names.
fn caught(planted: Planted, scheme: Scheme, wanted: &str) -> (u64, String) {
    for seed in 0..300 {
        let mut s = setup(seed, scheme);
        s.planted = planted;
        s.partitions = s.partitions.max(2);
        let w = run(s, seed);
        if let Some(v) = w.violations.iter().find(|v| v.contains(wanted)) {
            return (seed, v.clone());
        }
    }
    panic!("{planted:?} never showed a violation naming `{wanted}` in 300 seeds");
}

#[test]
fn locality_judged_at_consult_is_caught() {
    let (seed, v) = caught(
        Planted {
            locality_at_consult: true,
            ..Planted::default()
        },
        Scheme::Dssmr,
        "one unpartitioned Chirper says",
    );
    eprintln!("seed {seed}: {v}");
}

#[test]
fn a_move_the_oracle_never_learns_is_caught() {
    let (seed, v) = caught(
        Planted {
            oracle_ignores_moves: true,
            ..Planted::default()
        },
        Scheme::Dssmr,
        "the oracle's map is wrong",
    );
    eprintln!("seed {seed}: {v}");
}

#[test]
fn a_fallback_without_signals_is_caught() {
    let (seed, v) = caught(
        Planted {
            no_signals: true,
            ..Planted::default()
        },
        Scheme::Ssmr,
        "execution atomicity",
    );
    eprintln!("seed {seed}: {v}");
}
