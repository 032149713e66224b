//! The server and oracle proxies (paper 003 Algorithms 1, 3 and 4) of one member.

use crate::view::View;
use crate::{
    decode, encode, CmdRef, Dests, DsCommand, DsReply, Exchange, Kind, Locations, Member, ObjectId,
    ObjectService, Prophecy, StaticMap,
};
use partita_types::DetHashMap;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Deliberate bugs the checks must catch (never set outside tests and controls).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Planted {
    /// An access runs over whatever objects are local at delivery, trusting the
    /// consult that placed it, instead of answering retry when an object is missing.
    pub locality_at_consult: bool,
    /// The oracle does not apply moves: its map goes stale.
    pub oracle_ignores_moves: bool,
    /// A command with several destinations runs once the values it needs are in,
    /// without waiting for every destination's signal.
    pub no_signals: bool,
}

/// One delivered command waiting for its turn.
struct Pending<C> {
    at: CmdRef,
    /// The ordered time of the value that delivered it ([`View::now_ms`]).
    time_ms: u64,
    /// This member's place for it among its commands of the instance, once it
    /// reached the head of the queue.
    clock: u64,
    dests: Dests,
    cmd: DsCommand<C>,
    contributed: bool,
}

/// What a member's proxy asks its driver to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Output<R> {
    /// Send to every replica of every member in `to`.
    Exchange { to: Dests, msg: Exchange },
    /// The member's reply to the command at `at`: exactly one per delivered command at
    /// every member (every replica of it produces the same; the driver sends the
    /// chosen replica's). The answering member's is the answer, the others'
    /// [`DsReply::Signal`].
    Reply { at: CmdRef, reply: DsReply<R> },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub delivered: u64,
    pub executed: u64,
    /// Accesses answered retry.
    pub retries: u64,
    /// Commands of several destinations (signals and values exchanged).
    pub multi: u64,
    /// Objects this member received by moves (or the oracle recorded as moved).
    pub moved_in: u64,
    pub consults: u64,
    /// Objects executions touched (read or written), and wrote.
    pub objects_touched: u64,
    pub objects_written: u64,
    pub exchanges_sent: u64,
    /// Exchanges dropped: late (their command ran), duplicate, or from a member that
    /// is not a destination.
    pub exchanges_dropped: u64,
    /// Commands delivered that this member cannot act on (not a destination, or a kind
    /// this member does not run).
    pub malformed: u64,
}

/// Exchanges held for commands not delivered here yet (a peer member ran ahead); past
/// this, the newest are dropped (a correct peer is never this far ahead).
const HELD_MAX: usize = 1 << 16;

/// Exchanges this member sent, kept to send again when a destination asks (its copy
/// was lost, or it restarted from a checkpoint taken before the command); the oldest
/// go first. A destination that needs an older one catches up by state transfer from
/// its own member.
pub const SENT_KEPT: usize = 1 << 14;

/// The proxy of one member: a data partition, holding its objects, or the oracle,
/// holding the map of every object to its partition.
pub struct Server<S: ObjectService> {
    member: Member,
    partitions: usize,
    /// Where objects start and are created (every member of a deployment alike).
    static_map: StaticMap,
    objects: DetHashMap<ObjectId, S::Object>,
    /// Implicit objects ([`ObjectService::implicit`]) the static map puts here that
    /// moved away (an implicit object of this partition is here unless it is listed).
    departed: BTreeSet<ObjectId>,
    map: DetHashMap<ObjectId, u16>,
    queue: VecDeque<Pending<S::Command>>,
    held: BTreeMap<CmdRef, BTreeMap<Member, Exchange>>,
    held_count: usize,
    /// Exchanges sent (with their destinations), the newest [`SENT_KEPT`].
    sent: BTreeMap<CmdRef, (Dests, Exchange)>,
    /// Exchanges of instances below this may have been forgotten.
    sent_floor: u64,
    /// Commands another destination said it never took (it was not among the
    /// destinations its own copy named: a client that lied about them).
    refused: BTreeSet<CmdRef>,
    /// The newest instance that had commands run here, with those that ran (commands
    /// of one instance run in delivery order, which is not `CmdRef` order).
    ran: (u64, BTreeSet<CmdRef>),
    /// The last command delivered.
    last: Option<CmdRef>,
    /// The instance of the last command run and the next place in it ([`position`]).
    clock: (u64, u64),
    planted: Planted,
    stats: ServerStats,
}

impl<S: ObjectService> Server<S> {
    pub fn new(member: Member, partitions: usize, static_map: StaticMap) -> Server<S> {
        assert!((1..=crate::PARTITIONS_MAX).contains(&partitions));
        if let Member::Partition(p) = member {
            assert!(usize::from(p) < partitions, "partition {p} of {partitions}");
        }
        Server {
            member,
            partitions,
            static_map,
            objects: DetHashMap::default(),
            departed: BTreeSet::new(),
            map: DetHashMap::default(),
            queue: VecDeque::new(),
            held: BTreeMap::new(),
            held_count: 0,
            sent: BTreeMap::new(),
            sent_floor: 0,
            refused: BTreeSet::new(),
            ran: (0, BTreeSet::new()),
            last: None,
            clock: (0, 0),
            planted: Planted::default(),
            stats: ServerStats::default(),
        }
    }

    pub fn set_planted(&mut self, p: Planted) {
        self.planted = p;
    }

    /// Load the initial objects: a partition keeps those the static map puts in it, the
    /// oracle records where each is. Every member loads the same set.
    pub fn load(&mut self, objects: impl IntoIterator<Item = (ObjectId, S::Object)>) {
        for (id, o) in objects {
            let p = self.static_map.place::<S>(id, self.partitions);
            match self.member {
                Member::Oracle => {
                    self.map.insert(id, p);
                }
                Member::Partition(me) if me == p => {
                    self.objects.insert(id, o);
                }
                Member::Partition(_) => {}
            }
        }
    }

    pub fn member(&self) -> Member {
        self.member
    }
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }
    /// This partition's objects.
    pub fn objects(&self) -> &DetHashMap<ObjectId, S::Object> {
        &self.objects
    }
    /// The oracle's map.
    pub fn map(&self) -> &DetHashMap<ObjectId, u16> {
        &self.map
    }
    /// Commands delivered and not yet run (waiting for their turn or for exchanges).
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }
    /// The command at the head of the queue, when it waits for other members.
    pub fn blocked_on(&self) -> Option<(CmdRef, Dests)> {
        self.queue.front().map(|p| (p.at, p.dests))
    }

    /// The command at the head of the queue and the destinations whose exchanges
    /// have not arrived, when it waits for some: what to ask for again after a while.
    pub fn missing(&self) -> Option<(CmdRef, Dests)> {
        let head = self.queue.front()?;
        let got = self.held.get(&head.at);
        let mut d = Dests::none();
        for m in head.dests.members() {
            if m != self.member && !got.is_some_and(|g| g.contains_key(&m)) {
                d = d.with(m);
            }
        }
        (d.count() > 0).then_some((head.at, d))
    }

    /// The exchange this member sent for `at`, if it still keeps it (another member
    /// asks again).
    pub fn resend(&self, at: CmdRef) -> Option<&Exchange> {
        self.sent.get(&at).map(|(_, x)| x)
    }

    /// Member `asker` waits for this member's exchange for `at`: the exchange, if this
    /// member sent it to `asker` and keeps it; `Some(None)` if this member is sure it
    /// never will (it delivered everything of that instance, and `at` was not among
    /// its commands for `asker`); `None` if it cannot tell yet (or forgot).
    /// `delivered`: the newest instance the member's replica delivered (with or
    /// without commands for this member).
    pub fn answer(&self, at: CmdRef, asker: Member, delivered: u64) -> Option<Option<&Exchange>> {
        if let Some((to, x)) = self.sent.get(&at) {
            return Some(to.contains(asker).then_some(x));
        }
        let delivered_past =
            delivered >= at.instance || self.last.is_some_and(|l| l.instance >= at.instance);
        let queued = self.queue.iter().any(|p| p.at == at);
        (delivered_past && at.instance >= self.sent_floor && !queued).then_some(None)
    }

    /// Member `from` says it never takes the command at `at` (see
    /// [`Server::answer`]): when that command heads the queue, it ends with no effect
    /// and answers [`DsReply::Invalid`].
    pub fn not_taken(&mut self, at: CmdRef, from: Member, out: &mut Vec<Output<S::Reply>>) {
        let listed = self
            .queue
            .iter()
            .any(|p| p.at == at && p.dests.contains(from) && from != self.member);
        if listed {
            self.refused.insert(at);
            self.run(out);
        }
    }

    fn late(&self, at: CmdRef) -> bool {
        at.instance < self.ran.0 || (at.instance == self.ran.0 && self.ran.1.contains(&at))
    }

    /// The member's state for a checkpoint: its objects (a partition) or its map (the
    /// oracle), and where its delivery sequence stands. Only between commands (none
    /// waiting).
    pub fn snapshot(&self) -> Vec<u8> {
        assert!(self.queue.is_empty(), "a snapshot with commands waiting");
        let mut objects: Vec<(ObjectId, &S::Object)> =
            self.objects.iter().map(|(k, v)| (*k, v)).collect();
        objects.sort_unstable_by_key(|(k, _)| *k);
        let mut map: Vec<(ObjectId, u16)> = self.map.iter().map(|(k, v)| (*k, *v)).collect();
        map.sort_unstable();
        // The exchanges sent are kept too: a member that lags behind (a replica
        // restarted from an older checkpoint, the only one of its member) asks for them
        // long after this one ran the command, perhaps after this one restarted.
        let sent: Vec<(&CmdRef, &(Dests, Exchange))> = self.sent.iter().collect();
        encode(&(
            self.member,
            self.partitions as u64,
            self.last,
            objects,
            map,
            sent,
            self.sent_floor,
            &self.departed,
            self.clock,
        ))
    }

    /// A member restored from [`Server::snapshot`] bytes, in a deployment whose static
    /// map is `static_map` (the cluster file's, not the snapshot's).
    pub fn restore(bytes: &[u8], static_map: StaticMap) -> Result<Server<S>, String> {
        type Snap<O> = (
            Member,
            u64,
            Option<CmdRef>,
            Vec<(ObjectId, O)>,
            Vec<(ObjectId, u16)>,
            Vec<(CmdRef, (Dests, Exchange))>,
            u64,
            BTreeSet<ObjectId>,
            (u64, u64),
        );
        let (member, partitions, last, objects, map, sent, sent_floor, departed, clock): Snap<
            S::Object,
        > = decode(bytes).ok_or("a member snapshot that does not decode")?;
        if sent.len() > SENT_KEPT {
            return Err(format!(
                "a member snapshot with {} exchanges sent (at most {SENT_KEPT} are kept)",
                sent.len()
            ));
        }
        let partitions = usize::try_from(partitions).unwrap_or(usize::MAX);
        if !(1..=crate::PARTITIONS_MAX).contains(&partitions) {
            return Err(format!("a member snapshot of {partitions} partitions"));
        }
        if let Member::Partition(p) = member {
            if usize::from(p) >= partitions {
                return Err(format!("partition {p} of {partitions}"));
            }
        }
        let mut s = Server::new(member, partitions, static_map);
        s.objects = objects.into_iter().collect();
        s.departed = departed;
        s.clock = clock;
        s.map = map.into_iter().collect();
        s.last = last;
        s.sent = sent.into_iter().collect();
        s.sent_floor = sent_floor;
        if let Some(l) = last {
            // Everything up to `last` ran.
            s.ran = (l.instance + 1, BTreeSet::new());
        }
        Ok(s)
    }

    /// Objects held (a partition) or mapped (the oracle).
    pub fn len(&self) -> u64 {
        (self.objects.len() + self.map.len()) as u64
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A digest of the member's state (objects or map), equal at every replica of
    /// the member that ran the same commands.
    pub fn digest(&self) -> u64 {
        let mut h = Fnv::new();
        let mut ids: Vec<_> = self.objects.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            h.write(&id.to_le_bytes());
            h.write(&encode(&self.objects[&id]));
        }
        for id in &self.departed {
            h.write(&id.to_le_bytes());
        }
        let mut m: Vec<_> = self.map.iter().map(|(k, v)| (*k, *v)).collect();
        m.sort_unstable();
        for (k, v) in m {
            h.write(&k.to_le_bytes());
            h.write(&v.to_le_bytes());
        }
        h.0
    }

    /// A command delivered to this member at `at` (positions increase along the
    /// member's delivery sequence) in a value stamped `time_ms`, multicast to `dests`.
    pub fn deliver(
        &mut self,
        at: CmdRef,
        time_ms: u64,
        dests: Dests,
        cmd: DsCommand<S::Command>,
        out: &mut Vec<Output<S::Reply>>,
    ) {
        if self
            .last
            .is_some_and(|l| at.instance < l.instance || at == l)
        {
            // Delivered already (a driver bug or a replayed input): never twice.
            self.stats.malformed += 1;
            return;
        }
        self.last = Some(at);
        self.stats.delivered += 1;
        if !dests.valid(self.partitions) || !dests.contains(self.member) {
            self.stats.malformed += 1;
            let why = format!(
                "multicast to {dests:?}, which does not include {:?}",
                self.member
            );
            out.push(Output::Reply {
                at,
                reply: DsReply::Invalid(why),
            });
            return;
        }
        if dests.count() > 1 {
            self.stats.multi += 1;
        }
        self.queue.push_back(Pending {
            at,
            time_ms,
            clock: 0,
            dests,
            cmd,
            contributed: false,
        });
        self.run(out);
    }

    /// An exchange from another member (from any of its replicas).
    pub fn on_exchange(&mut self, msg: Exchange, out: &mut Vec<Output<S::Reply>>) {
        let late = self.late(msg.at);
        let from_member_dest = self
            .queue
            .iter()
            .find(|p| p.at == msg.at)
            .map(|p| p.dests.contains(msg.from));
        if late || msg.from == self.member || from_member_dest == Some(false) {
            self.stats.exchanges_dropped += 1;
            return;
        }
        let slot = self.held.entry(msg.at).or_default();
        if slot.contains_key(&msg.from) || self.held_count >= HELD_MAX {
            self.stats.exchanges_dropped += 1;
            return;
        }
        slot.insert(msg.from, msg);
        self.held_count += 1;
        self.run(out);
    }

    fn run(&mut self, out: &mut Vec<Output<S::Reply>>) {
        while let Some(head) = self.queue.front() {
            let at = head.at;
            let dests = head.dests;
            if !head.contributed {
                let ids = self.named_here(&self.queue[0].cmd);
                self.materialize(ids);
                let values_verdict = self.contribution(&self.queue[0].cmd, dests);
                let clock = match self.clock {
                    (name, next) if name == at.instance => next,
                    _ => 0,
                };
                self.queue[0].clock = clock;
                self.queue[0].contributed = true;
                let others = Dests(dests.0 & !Dests::of(self.member).0);
                if others.count() > 0 {
                    let (values, verdict) = values_verdict;
                    self.stats.exchanges_sent += 1;
                    let msg = Exchange {
                        at,
                        from: self.member,
                        values,
                        verdict,
                        clock,
                    };
                    self.sent.insert(at, (others, msg.clone()));
                    if self.sent.len() > SENT_KEPT {
                        if let Some((old, _)) = self.sent.pop_first() {
                            self.sent_floor = self.sent_floor.max(old.instance + 1);
                        }
                    }
                    out.push(Output::Exchange { to: others, msg });
                }
            }
            if !self.ready(at, dests) {
                return;
            }
            let p = self.queue.pop_front().expect("a head");
            let got = self.held.remove(&at).unwrap_or_default();
            self.held_count -= got.len();
            if at.instance > self.ran.0 {
                self.ran = (at.instance, BTreeSet::new());
            }
            self.ran.1.insert(at);
            if self.refused.remove(&at) {
                self.stats.malformed += 1;
                let reply = DsReply::Invalid("a destination never took this command".into());
                out.push(Output::Reply { at, reply });
                continue;
            }
            self.execute(p, got, out);
        }
    }

    /// The position of the command at the head, as it runs (every destination
    /// computes the same from the exchanges), and this member's clock past it.
    fn place(&mut self, p: &Pending<S::Command>, got: &BTreeMap<Member, Exchange>) -> u64 {
        let place = got
            .values()
            .map(|x| (x.clock, x.from))
            .chain([(p.clock, self.member)])
            .map(|(c, m)| position_in_instance(c, m))
            .max()
            .unwrap_or(0);
        self.clock = (p.at.instance, (place >> MEMBER_BITS) + 1);
        position(p.at.instance, place)
    }

    /// Whether every other destination has signalled (or, planted, whether the values
    /// this member needs are in).
    fn ready(&self, at: CmdRef, dests: Dests) -> bool {
        if self.refused.contains(&at) {
            return true;
        }
        let got = self.held.get(&at);
        let all = dests
            .members()
            .filter(|m| *m != self.member)
            .all(|m| got.is_some_and(|g| g.contains_key(&m)));
        if all || !self.planted.no_signals {
            return all;
        }
        // Planted: a global access goes ahead once every named object that is not
        // local has arrived; anything else still waits for every signal.
        let head = &self.queue[0];
        match &head.cmd {
            DsCommand::Global { cmd } => match S::kind(cmd) {
                Kind::Access(named) => named.iter().all(|o| {
                    self.objects.contains_key(o)
                        || got.is_some_and(|g| {
                            g.values().any(|x| x.values.iter().any(|(id, _)| id == o))
                        })
                }),
                _ => false,
            },
            _ => false,
        }
    }

    /// This member's part of the exchange for a command at the head of its queue.
    fn contribution(
        &self,
        cmd: &DsCommand<S::Command>,
        _dests: Dests,
    ) -> (Vec<(ObjectId, Vec<u8>)>, bool) {
        let mine = |ids: &mut dyn Iterator<Item = ObjectId>| -> Vec<(ObjectId, Vec<u8>)> {
            let mut seen = BTreeSet::new();
            ids.filter(|id| seen.insert(*id))
                .filter_map(|id| self.objects.get(&id).map(|o| (id, encode(o))))
                .collect()
        };
        // An object as a command reads it at another destination.
        let exchanged = |cmd: &S::Command, o: &S::Object| -> Vec<u8> {
            S::exchanged(cmd, o).map_or_else(|| encode(o), |part| encode(&part))
        };
        match (self.member, cmd) {
            (Member::Oracle, DsCommand::Create { cmd, .. }) => {
                let Kind::Create(v) = S::kind(cmd) else {
                    return (vec![], false);
                };
                (vec![], !self.map.contains_key(&v))
            }
            (Member::Oracle, DsCommand::Global { cmd }) => match S::kind(cmd) {
                Kind::Create(v) => (vec![], !self.map.contains_key(&v)),
                _ => (vec![], true),
            },
            (Member::Oracle, _) => (vec![], true),
            (Member::Partition(_), DsCommand::Global { cmd }) => match S::kind(cmd) {
                Kind::Access(named) => {
                    let mut seen = BTreeSet::new();
                    let mut values: Vec<(ObjectId, Vec<u8>)> = named
                        .into_iter()
                        .filter(|id| seen.insert(*id))
                        .filter_map(|id| self.objects.get(&id).map(|o| (id, exchanged(cmd, o))))
                        .collect();
                    if S::scans(cmd) {
                        let pick = S::scanner(cmd);
                        let mut scanned: Vec<(ObjectId, Vec<u8>)> = self
                            .objects
                            .iter()
                            .filter(|(id, o)| {
                                pick(**id, o) && !values.iter().any(|(v, _)| v == *id)
                            })
                            .map(|(id, o)| (*id, exchanged(cmd, o)))
                            .collect();
                        scanned.sort_unstable_by_key(|(id, _)| *id);
                        values.extend(scanned);
                    }
                    (values, true)
                }
                Kind::Create(v) | Kind::Delete(v) => (vec![], self.objects.contains_key(&v)),
            },
            (Member::Partition(me), DsCommand::Move { moves, to }) if me != *to => (
                mine(
                    &mut moves
                        .iter()
                        .filter(|(_, src)| *src == me)
                        .map(|(id, _)| *id),
                ),
                true,
            ),
            (Member::Partition(_), DsCommand::Delete { cmd }) => match S::kind(cmd) {
                Kind::Delete(v) => (vec![], self.objects.contains_key(&v)),
                _ => (vec![], false),
            },
            (Member::Partition(_), _) => (vec![], true),
        }
    }

    /// Whether this member answers a command sent to `dests`: the oracle for what
    /// involves it (consults, creates, deletes), otherwise the lowest partition.
    fn answers(&self, dests: Dests, oracle_answers: bool) -> bool {
        if oracle_answers {
            return self.member == Member::Oracle;
        }
        dests.partitions().next().map(Member::Partition) == Some(self.member)
    }

    /// Run the head command; exactly one reply comes out (the answer, or a signal).
    fn execute(
        &mut self,
        p: Pending<S::Command>,
        got: BTreeMap<Member, Exchange>,
        out: &mut Vec<Output<S::Reply>>,
    ) {
        let at = p.at;
        let before = out.len();
        self.execute_inner(p, got, out);
        let replies = out[before..]
            .iter()
            .filter(|o| matches!(o, Output::Reply { .. }))
            .count();
        debug_assert!(replies <= 1, "one reply per command");
        if replies == 0 {
            out.push(Output::Reply {
                at,
                reply: DsReply::Signal,
            });
        }
    }

    fn execute_inner(
        &mut self,
        p: Pending<S::Command>,
        got: BTreeMap<Member, Exchange>,
        out: &mut Vec<Output<S::Reply>>,
    ) {
        self.stats.executed += 1;
        let position = self.place(&p, &got);
        let at = p.at;
        let dests = p.dests;
        match p.cmd {
            DsCommand::Consult { cmd, extra } => {
                if self.member != Member::Oracle {
                    self.stats.malformed += 1;
                    let reply = DsReply::Invalid("a consult is the oracle's".into());
                    out.push(Output::Reply { at, reply });
                    return;
                }
                self.stats.consults += 1;
                let reply = DsReply::Prophecy(self.prophecy(&cmd, &extra));
                out.push(Output::Reply { at, reply });
            }
            DsCommand::Access { cmd, omega } => {
                let Member::Partition(_) = self.member else {
                    self.stats.malformed += 1;
                    let reply = DsReply::Invalid("an access runs at a partition".into());
                    out.push(Output::Reply { at, reply });
                    return;
                };
                let reply = self.access(&cmd, (position, p.time_ms), &omega, &got);
                if self.answers(dests, false) {
                    out.push(Output::Reply { at, reply });
                }
            }
            DsCommand::Global { cmd } => match S::kind(&cmd) {
                Kind::Access(_) => {
                    if self.member == Member::Oracle {
                        return;
                    }
                    let remote = remote_values::<S>(&got);
                    let reply = self.run_view(&cmd, (position, p.time_ms), &remote, false).0;
                    if self.answers(dests, false) {
                        out.push(Output::Reply {
                            at,
                            reply: DsReply::Done(reply),
                        });
                    }
                }
                Kind::Create(v) => {
                    let at_p = self.static_map.place::<S>(v, self.partitions);
                    self.create(at, dests, &cmd, v, at_p, &got, out);
                }
                Kind::Delete(v) => self.delete(at, dests, v, out),
            },
            DsCommand::Move { moves, to } => self.apply_moves(&moves, to, &got),
            DsCommand::Create { cmd, at: at_p } => match S::kind(&cmd) {
                Kind::Create(v) => self.create(at, dests, &cmd, v, at_p, &got, out),
                _ => self.stats.malformed += 1,
            },
            DsCommand::Delete { cmd } => match S::kind(&cmd) {
                Kind::Delete(v) => self.delete(at, dests, v, out),
                _ => self.stats.malformed += 1,
            },
        }
    }

    /// Where the oracle knows object `id` to be: its map, or for an implicit object
    /// that never moved, where the static map put it.
    fn locate(&self, id: ObjectId) -> Option<u16> {
        match self.map.get(&id) {
            Some(p) => Some(*p),
            None if S::implicit().is_some() => {
                Some(self.static_map.place::<S>(id, self.partitions))
            }
            None => None,
        }
    }

    /// The objects a command names that this partition may hold: what it reads, and
    /// a move's objects from here.
    fn named_here(&self, cmd: &DsCommand<S::Command>) -> Vec<ObjectId> {
        if S::implicit().is_none() {
            return Vec::new();
        }
        let Member::Partition(me) = self.member else {
            return Vec::new();
        };
        match cmd {
            DsCommand::Access { cmd, omega } => match S::kind(cmd) {
                Kind::Access(named) => named.into_iter().chain(omega.iter().copied()).collect(),
                _ => omega.clone(),
            },
            DsCommand::Global { cmd } | DsCommand::Consult { cmd, .. } => match S::kind(cmd) {
                Kind::Access(named) => named,
                _ => Vec::new(),
            },
            DsCommand::Move { moves, .. } => moves
                .iter()
                .filter(|(_, src)| *src == me)
                .map(|(id, _)| *id)
                .collect(),
            DsCommand::Create { .. } | DsCommand::Delete { .. } => Vec::new(),
        }
    }

    /// Give implicit objects that are here and were never written a value of their
    /// own, so that executions and moves find them like any other.
    fn materialize(&mut self, ids: Vec<ObjectId>) {
        let (Some(value), Member::Partition(me)) = (S::implicit(), self.member) else {
            return;
        };
        for id in ids {
            if !self.objects.contains_key(&id)
                && !self.departed.contains(&id)
                && self.static_map.place::<S>(id, self.partitions) == me
            {
                self.objects.insert(id, value.clone());
            }
        }
    }

    /// The oracle's prophecy for a consult (Algorithm 4): `Nok` when an object the
    /// command names does not exist; otherwise where each object is that exists (an
    /// object found through another, `extra`, may have been deleted: it is left out).
    fn prophecy(&self, cmd: &S::Command, extra: &[ObjectId]) -> Prophecy {
        match S::kind(cmd) {
            Kind::Access(named) => {
                if named.iter().any(|id| self.locate(*id).is_none()) {
                    return Prophecy::Nok;
                }
                let mut ids: Vec<ObjectId> =
                    named.into_iter().chain(extra.iter().copied()).collect();
                ids.sort_unstable();
                ids.dedup();
                let at: Locations = ids
                    .into_iter()
                    .filter_map(|id| Some((id, self.locate(id)?)))
                    .collect();
                Prophecy::At(at)
            }
            Kind::Create(v) => match self.map.contains_key(&v) {
                true => Prophecy::Nok,
                false => Prophecy::CreateAt(self.static_map.place::<S>(v, self.partitions)),
            },
            Kind::Delete(v) => match self.map.get(&v) {
                None => Prophecy::Nok,
                Some(p) => Prophecy::At(vec![(v, *p)]),
            },
        }
    }

    /// Run an access over a view; apply its writes unless it is discarded. Returns the
    /// reply, the objects touched and those missing.
    fn run_view(
        &mut self,
        cmd: &S::Command,
        (position, time_ms): (u64, u64),
        remote: &BTreeMap<ObjectId, S::Object>,
        strict: bool,
    ) -> (S::Reply, BTreeSet<ObjectId>, BTreeSet<ObjectId>) {
        let scanning = !strict && S::scans(cmd);
        let mut view =
            View::new(&self.objects, remote, strict, position, scanning).at_time(time_ms);
        let reply = S::execute(cmd, &mut view);
        let (writes, touched, missing) = view.finish();
        self.stats.objects_touched += touched.len() as u64;
        if missing.is_empty() {
            self.stats.objects_written += writes.len() as u64;
            self.objects.extend(writes);
        }
        (reply, touched, missing)
    }

    /// DS-SMR's access at its one partition (Algorithm 3): executed only if every
    /// object in `omega` and every object it touches is here at delivery.
    fn access(
        &mut self,
        cmd: &S::Command,
        position: (u64, u64),
        omega: &[ObjectId],
        got: &BTreeMap<Member, Exchange>,
    ) -> DsReply<S::Reply> {
        let empty = BTreeMap::new();
        if self.planted.locality_at_consult {
            let remote = remote_values::<S>(got);
            let remote = if got.is_empty() { &empty } else { &remote };
            let r = self.run_view(cmd, position, remote, false);
            return DsReply::Done(r.0);
        }
        let Kind::Access(named) = S::kind(cmd) else {
            self.stats.malformed += 1;
            return DsReply::Retry(omega.to_vec());
        };
        let mut need: BTreeSet<ObjectId> = omega.iter().copied().collect();
        need.extend(named.iter().copied());
        if need.iter().any(|o| !self.objects.contains_key(o)) {
            self.stats.retries += 1;
            return DsReply::Retry(need.into_iter().collect());
        }
        let (reply, touched, missing) = self.run_view(cmd, position, &empty, true);
        if missing.is_empty() {
            DsReply::Done(reply)
        } else {
            self.stats.retries += 1;
            need.extend(touched);
            DsReply::Retry(need.into_iter().collect())
        }
    }

    fn apply_moves(&mut self, moves: &Locations, to: u16, got: &BTreeMap<Member, Exchange>) {
        match self.member {
            Member::Oracle => {
                if self.planted.oracle_ignores_moves {
                    return;
                }
                for (id, src) in moves {
                    if self.locate(*id) == Some(*src) && *src != to {
                        let home = self.static_map.place::<S>(*id, self.partitions);
                        match S::implicit().is_some() && to == home {
                            true => self.map.remove(id),
                            false => self.map.insert(*id, to),
                        };
                        self.stats.moved_in += 1;
                    }
                }
            }
            Member::Partition(me) if me == to => {
                for (id, src) in moves {
                    if *src == to {
                        continue;
                    }
                    let from = got.get(&Member::Partition(*src));
                    let value = from.and_then(|x| x.values.iter().find(|(o, _)| o == id));
                    if let Some((_, bytes)) = value {
                        match decode::<S::Object>(bytes) {
                            Some(o) => {
                                self.objects.insert(*id, o);
                                self.departed.remove(id);
                                self.stats.moved_in += 1;
                            }
                            None => self.stats.malformed += 1,
                        }
                    }
                }
            }
            Member::Partition(me) => {
                for (id, src) in moves {
                    // An implicit object leaving its own partition is listed there.
                    if *src == me
                        && self.objects.remove(id).is_some()
                        && S::implicit().is_some()
                        && self.static_map.place::<S>(*id, self.partitions) == me
                    {
                        self.departed.insert(*id);
                    }
                }
            }
        }
    }

    /// A create at partition `at_p`. With the oracle among the destinations, the
    /// oracle decides (the object must not exist anywhere) and answers; without it
    /// (S-SMR: objects never move, so `at_p` is the only place the object can be),
    /// `at_p` decides and answers.
    #[allow(clippy::too_many_arguments)]
    fn create(
        &mut self,
        at: CmdRef,
        dests: Dests,
        cmd: &S::Command,
        v: ObjectId,
        at_p: u16,
        got: &BTreeMap<Member, Exchange>,
        out: &mut Vec<Output<S::Reply>>,
    ) {
        if !dests.contains(Member::Oracle) {
            if self.member == Member::Partition(at_p) {
                let ok = !self.objects.contains_key(&v);
                if ok {
                    self.objects.insert(v, S::create(cmd));
                }
                out.push(Output::Reply {
                    at,
                    reply: DsReply::Created(ok),
                });
            }
            return;
        }
        match self.member {
            Member::Oracle => {
                let ok = !self.map.contains_key(&v) && usize::from(at_p) < self.partitions;
                if ok {
                    self.map.insert(v, at_p);
                }
                out.push(Output::Reply {
                    at,
                    reply: DsReply::Created(ok),
                });
            }
            Member::Partition(me) if me == at_p => {
                let ok = got.get(&Member::Oracle).is_some_and(|x| x.verdict);
                if ok {
                    self.objects.insert(v, S::create(cmd));
                }
            }
            Member::Partition(_) => {}
        }
    }

    fn delete(&mut self, at: CmdRef, dests: Dests, v: ObjectId, out: &mut Vec<Output<S::Reply>>) {
        match self.member {
            Member::Oracle => {
                let reply = match self.map.get(&v) {
                    None => DsReply::Deleted(false),
                    Some(p) if dests.contains(Member::Partition(*p)) => {
                        self.map.remove(&v);
                        DsReply::Deleted(true)
                    }
                    Some(_) => DsReply::Retry(vec![v]),
                };
                out.push(Output::Reply { at, reply });
            }
            Member::Partition(_) => {
                let existed = self.objects.remove(&v).is_some();
                if !dests.contains(Member::Oracle) && self.answers(dests, false) {
                    out.push(Output::Reply {
                        at,
                        reply: DsReply::Deleted(existed),
                    });
                }
            }
        }
    }

    /// Cheap structural invariants (after every input).
    pub fn invariants(&self) {
        let mut prev = self.ran.0;
        for p in &self.queue {
            assert!(p.at.instance >= prev, "queue out of order");
            assert!(!self.late(p.at), "a queued command ran");
            prev = p.at.instance;
        }
        assert_eq!(
            self.held_count,
            self.held.values().map(|m| m.len()).sum::<usize>(),
            "held exchanges counted"
        );
        assert!(
            self.held.keys().all(|k| !self.late(*k)),
            "exchanges kept for commands that ran"
        );
        assert!(
            self.refused
                .iter()
                .all(|k| self.queue.iter().any(|p| p.at == *k)),
            "refusals of queued commands"
        );
    }
}

fn remote_values<S: ObjectService>(
    got: &BTreeMap<Member, Exchange>,
) -> BTreeMap<ObjectId, S::Object> {
    let mut m = BTreeMap::new();
    for x in got.values() {
        for (id, bytes) in &x.values {
            if let Some(o) = decode::<S::Object>(bytes) {
                m.insert(*id, o);
            }
        }
    }
    m
}

/// 64-bit FNV-1a.
struct Fnv(u64);
impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Bits of a place in an instance that name the member (partitions below 63, the
/// oracle 63).
const MEMBER_BITS: u32 = 6;
/// Bits of a position below the instance's name.
const PLACE_BITS: u32 = 24;

/// A member's place `clock` among its commands of an instance, with the member, as one
/// number: places of different members never collide.
fn position_in_instance(clock: u64, m: Member) -> u64 {
    let member = match m {
        Member::Partition(p) => u64::from(p),
        Member::Oracle => 63,
    };
    let clock = clock.min((1 << (PLACE_BITS - MEMBER_BITS)) - 1);
    (clock << MEMBER_BITS) | member
}

/// A command's position in the order (what [`View::position`] gives): its instance's
/// name, then its place in the instance. Every member numbers the commands it runs of
/// one instance 0, 1, 2, ... (its clock); a command of several destinations takes the
/// largest of their numbers (with the member, so that two members' numbers differ)
/// and each of them continues past it, as a Lamport clock does. So every destination
/// of a command gives it the same position, positions grow along every member's
/// delivery, and two commands never share one. Names stay below 2^39, and a member
/// runs fewer than 2^18 commands of one instance (a value's bytes are bounded);
/// saturates past them.
pub fn position(name: u64, place: u64) -> u64 {
    name.saturating_mul(1 << PLACE_BITS)
        .saturating_add(place.min((1 << PLACE_BITS) - 1))
}
