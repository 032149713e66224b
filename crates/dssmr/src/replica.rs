//! A member's replica as the node core drives it: [`DsReplica`] implements the
//! execution-model trait `partita_smr::Replica` over a [`Server`], so that a Partita
//! node of a partitioned cluster runs S-SMR or DS-SMR by configuration.
//!
//! - **Members are partitions.** The cluster's partitions are the data partitions, and
//!   with DS-SMR one more, the last, is the oracle. A client's multicast is a command
//!   whose body is addressed to its destinations (`Body::Whole`, the encoded
//!   [`DsCommand`]); the ordering delivers it to every destination's replicas in one
//!   order. The destinations are taken from what the ordering delivered to, never
//!   from the payload.
//! - **Exactly once.** Sessions and the reply cache are `partita_smr`'s, per member: a
//!   client's commands are sequential, so the first copy of a command runs at every
//!   destination and later copies are duplicates everywhere (answered from the cache,
//!   or ignored while the first still waits).
//! - **Exchanges** travel as `Msg::Exec` between replicas: a member's replicas each send
//!   theirs to every replica of the other destinations, the first copy counts. A
//!   member whose head command waited for [`ASK_AFTER_TICKS`] ticks asks the missing
//!   members to send again ([`ExecMsg::Ask`]).
//! - **Replies**: every destination replies (the answer, or a signal); the client
//!   takes the answer once every destination's reply came from the same instance.

use crate::client::Scheme;
use crate::server::{Output, Server};
use crate::{
    decode, encode, CmdRef, Dests, DsCommand, Exchange, Member, ObjectId, ObjectService, StaticMap,
};
use partita_consensus::Value;
use partita_smr::sessions::{Admission, Sessions};
use partita_smr::{
    read_checkpoint, session_step, verify_checkpoint_of, write_checkpoint, CheckpointError,
    CheckpointParts, PartitionExchange, Replica, ReplicaOptions, ReplicaStats, ServiceFactory,
};
use partita_types::{
    Body, Command, DetHashMap, Instance, NodeId, PartitionId, PartitionLayout, Refusal, Reply,
};
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

/// Ticks a head command waits for other members before this replica asks them again.
pub const ASK_AFTER_TICKS: u64 = 20;

/// What replicas of different members send each other (inside `Msg::Exec`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ExecMsg {
    Exchange(Exchange),
    /// Send your exchange for `at` again.
    Ask {
        at: CmdRef,
    },
    /// The answer to an ask when the sender's member never takes the command at `at`
    /// with the asker among its destinations (a client named destinations to one
    /// partition that it did not multicast to): the asker ends the command.
    NotTaken {
        at: CmdRef,
    },
}

/// The initial objects every member loads (the same at every replica).
pub type Initial<O> = Arc<dyn Fn() -> Vec<(ObjectId, O)> + Send + Sync>;

/// The member of partition `p`: a data partition, or (DS-SMR) the oracle, the last.
pub fn member_of(p: PartitionId, partitions: usize, scheme: Scheme) -> Member {
    match scheme {
        Scheme::Dssmr if p as usize + 1 == partitions => Member::Oracle,
        _ => Member::Partition(p as u16),
    }
}

/// The data partitions of a cluster of `partitions` partitions.
pub fn data_partitions(partitions: usize, scheme: Scheme) -> usize {
    match scheme {
        Scheme::Dssmr => partitions - 1,
        Scheme::Ssmr => partitions,
    }
}

/// Destinations as the cluster's partition mask (the oracle is the last partition).
pub fn dests_to_groups(d: Dests, data: usize) -> u64 {
    let mut g = d.0 & ((1u64 << data) - 1);
    if d.contains(Member::Oracle) {
        g |= 1 << data;
    }
    g
}

/// The cluster's partition mask as destinations.
pub fn groups_to_dests(groups: u64, data: usize, scheme: Scheme) -> Dests {
    let mut d = Dests(groups & ((1u64 << data) - 1));
    if scheme == Scheme::Dssmr && groups & (1 << data) != 0 {
        d = d.with(Member::Oracle);
    }
    d
}

/// A command's bytes on the wire: the multicast to `dests` as a Partita command body.
/// The payload names the destinations too: a partition's replicas receive only their
/// projection of what was ordered, which names their own partition alone. A client
/// that names destinations it did not multicast to gets its command ended
/// ([`ExecMsg::NotTaken`]), never a member stuck waiting.
pub fn body<C: Serialize>(dests: Dests, data: usize, cmd: &DsCommand<C>) -> Body {
    Body::Whole {
        groups: dests_to_groups(dests, data),
        payload: encode(&(dests, cmd)).into(),
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DsCounters {
    pub exec_received: u64,
    pub exec_dropped: u64,
    pub asks_sent: u64,
    pub resent: u64,
    pub not_taken: u64,
}

pub struct DsReplica<S: ObjectService> {
    id: NodeId,
    cluster_id: u64,
    scheme: Scheme,
    static_map: StaticMap,
    layout: Option<PartitionLayout>,
    partition: PartitionId,
    initial: Initial<S::Object>,
    server: Server<S>,
    sessions: Sessions,
    last_instance: Instance,
    /// The highest execution name delivered (what `CmdRef`s carry; see
    /// `execute_named`).
    last_name: Instance,
    /// Commands the server holds: (client, seq) → who to answer and at which instance.
    pending: DetHashMap<(u64, u64), (NodeId, CmdRef)>,
    exec_out: Vec<(NodeId, Vec<u8>)>,
    waited: (Option<CmdRef>, u64),
    stats: ReplicaStats,
    counters: DsCounters,
    planted: crate::server::Planted,
}

impl<S: ObjectService> DsReplica<S> {
    pub fn new(
        id: NodeId,
        scheme: Scheme,
        static_map: StaticMap,
        initial: Initial<S::Object>,
    ) -> DsReplica<S> {
        DsReplica {
            id,
            cluster_id: 0,
            scheme,
            static_map,
            layout: None,
            partition: 0,
            server: Server::new(Member::Partition(0), 1, static_map),
            initial,
            sessions: Sessions::new(None),
            last_instance: 0,
            last_name: 0,
            pending: DetHashMap::default(),
            exec_out: Vec::new(),
            waited: (None, 0),
            stats: ReplicaStats::default(),
            counters: DsCounters::default(),
            planted: crate::server::Planted::default(),
        }
    }

    /// Deliberate bugs for the checks' controls (never outside tests).
    pub fn with_planted(mut self, p: crate::server::Planted) -> DsReplica<S> {
        self.planted = p;
        self.server.set_planted(p);
        self
    }

    pub fn server(&self) -> &Server<S> {
        &self.server
    }
    pub fn counters(&self) -> &DsCounters {
        &self.counters
    }

    fn data(&self) -> usize {
        let n = self.layout.as_ref().map_or(1, |l| l.replicas.len().max(1));
        data_partitions(n, self.scheme)
    }

    fn member_partition(&self, m: Member) -> PartitionId {
        match m {
            Member::Partition(p) => PartitionId::from(p),
            Member::Oracle => self.data() as PartitionId,
        }
    }

    fn replicas_of(&self, m: Member) -> Vec<NodeId> {
        let p = self.member_partition(m) as usize;
        self.layout
            .as_ref()
            .and_then(|l| l.replicas.get(p).cloned())
            .unwrap_or_default()
    }

    fn answers(&self, reply_to: NodeId) -> bool {
        match &self.layout {
            // An unpartitioned cluster (S-SMR on one partition) lists no replicas.
            Some(l) if !l.replicas.is_empty() => {
                l.answerer(reply_to, self.partition) == Some(self.id)
            }
            _ => reply_to == self.id,
        }
    }

    fn send(&mut self, to: Dests, msg: &ExecMsg) {
        let bytes = encode(msg);
        for m in to.members() {
            for n in self.replicas_of(m) {
                self.exec_out.push((n, bytes.clone()));
            }
        }
    }

    /// The work counters the simulator charges: a command per command run, an
    /// operation per object touched ("read" kind) or written ("update").
    fn account(&mut self) {
        let s = self.server.stats();
        let w = &mut self.stats.work;
        w.commands = s.executed;
        w.ops = s.objects_touched + s.objects_written;
        w.by_kind[3] = s.objects_touched;
        w.by_kind[2] = s.objects_written;
        self.stats.ops = w.ops;
    }

    fn outputs(&mut self, outs: Vec<Output<S::Reply>>, replies_out: &mut Vec<Reply>) {
        self.account();
        for o in outs {
            match o {
                Output::Exchange { to, msg } => self.send(to, &ExecMsg::Exchange(msg)),
                Output::Reply { at, reply } => {
                    self.stats.commands_executed += 1;
                    let Some((reply_to, _)) = self.pending.remove(&(at.client, at.seq)) else {
                        continue;
                    };
                    let r = Reply {
                        client: at.client,
                        seq: at.seq,
                        instance: at.instance,
                        result: Ok(encode(&reply).into()),
                    };
                    self.sessions.cache(at.client, r.clone(), None);
                    if self.answers(reply_to) {
                        replies_out.push(r);
                    }
                }
            }
        }
    }

    fn run_command(
        &mut self,
        instance: Instance,
        time_ms: u64,
        cmd: &Command,
        replies_out: &mut Vec<Reply>,
    ) {
        let Some(payload) = cmd.body.payload_for(self.partition) else {
            return;
        };
        let mine = self.answers(cmd.reply_to);
        let refuse = |why: Refusal| Reply {
            client: cmd.client,
            seq: cmd.seq,
            instance,
            result: Err(why),
        };
        if cmd.is_open() {
            let reply = session_step(
                &mut self.sessions,
                &mut self.stats,
                cmd,
                instance,
                payload,
                0,
                None,
            );
            if mine {
                replies_out.push(reply);
            }
            return;
        }
        let Some((dests, dcmd)) = decode::<(Dests, DsCommand<S::Command>)>(payload) else {
            self.stats.refused += 1;
            if mine {
                let why = format!("a {} DS-SMR command that does not decode", S::NAME);
                replies_out.push(refuse(Refusal::Rejected(why)));
            }
            return;
        };
        let last_seq = match self.sessions.admit(cmd, 0, None) {
            Admission::Run { last_seq } => last_seq,
            Admission::Refuse(why) => {
                self.stats.session_refusals += 1;
                if mine {
                    replies_out.push(refuse(why));
                }
                return;
            }
        };
        if self.pending.contains_key(&(cmd.client, cmd.seq)) {
            // A copy of a command still waiting here: the first answers.
            self.stats.duplicates_answered += 1;
            return;
        }
        if let Some(last) = last_seq {
            if cmd.seq < last {
                self.stats.stale_ignored += 1;
                return;
            }
            if cmd.seq == last {
                self.stats.duplicates_answered += 1;
                if mine {
                    let cached = self.sessions.get(cmd.client).and_then(|s| s.last.clone());
                    replies_out.extend(cached);
                }
                return;
            }
        }
        let at = CmdRef {
            instance,
            client: cmd.client,
            seq: cmd.seq,
        };
        self.pending
            .insert((cmd.client, cmd.seq), (cmd.reply_to, at));
        let mut outs = Vec::new();
        self.server.deliver(at, time_ms, dests, dcmd, &mut outs);
        self.outputs(outs, replies_out);
    }
}

impl<S: ObjectService> Replica for DsReplica<S> {
    fn service(&self) -> &'static str {
        S::NAME
    }
    fn id(&self) -> NodeId {
        self.id
    }
    fn configure(&mut self, o: &ReplicaOptions) {
        self.cluster_id = o.cluster_id;
        self.sessions.set_lease(o.session_lease_ms);
        if let Some((layout, p)) = &o.partition {
            let n = layout.replicas.len().max(1);
            let member = member_of(*p, n, self.scheme);
            let data = data_partitions(n, self.scheme);
            if self.layout.is_none() && self.server.is_empty() && self.last_instance == 0 {
                let mut s = Server::new(member, data, self.static_map);
                s.set_planted(self.planted);
                s.load((self.initial)());
                self.server = s;
            }
            self.layout = Some(layout.clone());
            self.partition = *p;
        }
    }

    /// The members' replicas changed: who answers and who exchanges with whom follow
    /// (the partitions stay).
    fn set_answerers(&mut self, layout: PartitionLayout) {
        if let Some(l) = self.layout.as_mut() {
            if l.replicas.len() == layout.replicas.len() {
                *l = layout;
            }
        }
    }
    /// Commands are named by the execution's `name`, not the instance: members of
    /// different partitions of a Multi-Ring Paxos cluster merge different rings and
    /// number their deliveries differently, but name each value alike, and names grow
    /// along every member's delivery as instances do on one stream (`CmdRef`s are
    /// compared by it).
    fn execute_named(
        &mut self,
        instance: Instance,
        name: Instance,
        value: &Value,
        replies_out: &mut Vec<Reply>,
    ) {
        assert_eq!(instance, self.last_instance + 1, "instances in order, once");
        self.last_instance = instance;
        self.last_name = self.last_name.max(name);
        self.stats.sessions_expired += self.sessions.advance(value.time_ms, None);
        for cmd in &value.commands {
            self.run_command(name, value.time_ms, cmd, replies_out);
        }
    }
    fn checkpoint(&self, ordering: &[u8]) -> Vec<u8> {
        write_checkpoint(
            CheckpointParts {
                node_id: self.id,
                cluster_id: self.cluster_id,
                instance: self.last_instance,
                name: self.last_name,
                digest: self.server.digest(),
                entries: self.server.len(),
                service: S::NAME,
                sessions: &self.sessions,
                ordering,
            },
            self.server.snapshot(),
        )
    }
    fn last_instance(&self) -> Instance {
        self.last_instance
    }
    fn digest(&self) -> u64 {
        self.server.digest()
    }
    fn len(&self) -> u64 {
        self.server.len()
    }
    fn stats(&self) -> &ReplicaStats {
        &self.stats
    }
    fn cached_clients(&self) -> usize {
        self.sessions.len()
    }
    fn invariants(&self) {
        self.server.invariants();
        assert_eq!(
            self.pending.len(),
            self.server.waiting(),
            "pending commands"
        );
    }
    /// S-SMR and DS-SMR run over totally ordered streams only (the cluster file
    /// refuses them with EPaxos and GeoPaxos+): every command conflicts.
    fn access(&self, _cmd: &Command) -> partita_smr::Access {
        partita_smr::Access::everything()
    }
    fn quiescent(&self) -> bool {
        self.server.waiting() == 0
    }
    fn exchange(&self) -> Option<&dyn PartitionExchange> {
        Some(self)
    }
    fn exchange_mut(&mut self) -> Option<&mut dyn PartitionExchange> {
        Some(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl<S: ObjectService> PartitionExchange for DsReplica<S> {
    fn on_exec(&mut self, from: NodeId, data: &[u8], replies_out: &mut Vec<Reply>) {
        let Some(layout) = &self.layout else {
            self.counters.exec_dropped += 1;
            return;
        };
        let Some(from_p) = layout.partition_of_replica(from) else {
            self.counters.exec_dropped += 1;
            return;
        };
        let n = layout.replicas.len();
        let from_member = member_of(from_p, n, self.scheme);
        match decode::<ExecMsg>(data) {
            Some(ExecMsg::Exchange(x)) if x.from == from_member => {
                self.counters.exec_received += 1;
                let mut outs = Vec::new();
                self.server.on_exchange(x, &mut outs);
                self.outputs(outs, replies_out);
            }
            Some(ExecMsg::Ask { at }) => {
                match self.server.answer(at, from_member, self.last_name) {
                    Some(Some(x)) => {
                        self.counters.resent += 1;
                        self.exec_out
                            .push((from, encode(&ExecMsg::Exchange(x.clone()))));
                    }
                    Some(None) => {
                        self.counters.not_taken += 1;
                        self.exec_out
                            .push((from, encode(&ExecMsg::NotTaken { at })));
                    }
                    None => {}
                }
            }
            Some(ExecMsg::NotTaken { at }) => {
                let mut outs = Vec::new();
                self.server.not_taken(at, from_member, &mut outs);
                self.outputs(outs, replies_out);
            }
            _ => self.counters.exec_dropped += 1,
        }
    }
    fn take_exec(&mut self) -> Vec<(NodeId, Vec<u8>)> {
        std::mem::take(&mut self.exec_out)
    }
    fn exec_tick_due(&self) -> bool {
        // While a signal is missing, every tick counts toward asking again.
        self.server.missing().is_some()
    }

    fn exec_tick(&mut self) {
        let missing = self.server.missing();
        let head = missing.map(|(at, _)| at);
        if head != self.waited.0 {
            self.waited = (head, 0);
            return;
        }
        self.waited.1 += 1;
        if let Some((at, from)) = missing {
            if self.waited.1.is_multiple_of(ASK_AFTER_TICKS) {
                self.counters.asks_sent += 1;
                self.send(from, &ExecMsg::Ask { at });
            }
        }
    }
}

/// Builds [`DsReplica`]s of service `S` for a node: the scheme and the initial objects
/// (every replica loads the same).
pub struct DsFactory<S: ObjectService> {
    scheme: Scheme,
    static_map: StaticMap,
    initial: Initial<S::Object>,
    planted: crate::server::Planted,
    _s: PhantomData<fn() -> S>,
}

/// The factory a node of an S-SMR or DS-SMR cluster of `S` is built with.
pub fn factory<S: ObjectService>(
    scheme: Scheme,
    static_map: StaticMap,
    initial: Initial<S::Object>,
) -> Arc<dyn ServiceFactory> {
    factory_planted::<S>(
        scheme,
        static_map,
        initial,
        crate::server::Planted::default(),
    )
}

/// [`factory`] with deliberate bugs in every replica it builds (the checks' controls).
pub fn factory_planted<S: ObjectService>(
    scheme: Scheme,
    static_map: StaticMap,
    initial: Initial<S::Object>,
    planted: crate::server::Planted,
) -> Arc<dyn ServiceFactory> {
    Arc::new(DsFactory::<S> {
        scheme,
        static_map,
        initial,
        planted,
        _s: PhantomData,
    })
}

impl<S: ObjectService> ServiceFactory for DsFactory<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }
    fn fresh(&self, id: NodeId) -> Box<dyn Replica> {
        Box::new(
            DsReplica::<S>::new(id, self.scheme, self.static_map, self.initial.clone())
                .with_planted(self.planted),
        )
    }
    fn restore(
        &self,
        bytes: &[u8],
        cluster_id: u64,
        node_id: NodeId,
    ) -> Result<Box<dyn Replica>, CheckpointError> {
        let info = verify_checkpoint_of(bytes, cluster_id)?;
        let (sessions, state) = read_checkpoint(bytes, &info, S::NAME)?;
        let server =
            Server::<S>::restore(state, self.static_map).map_err(CheckpointError::State)?;
        if server.digest() != info.digest || server.len() != info.entries {
            return Err(CheckpointError::Contents {
                header_entries: info.entries,
                header_digest: info.digest,
                entries: server.len(),
                digest: server.digest(),
            });
        }
        let mut r =
            DsReplica::<S>::new(node_id, self.scheme, self.static_map, self.initial.clone())
                .with_planted(self.planted);
        r.cluster_id = info.cluster_id;
        r.last_instance = info.instance;
        r.last_name = info.name;
        let mut server = server;
        server.set_planted(self.planted);
        r.server = server;
        r.sessions = Sessions::restore(sessions, info.time_ms, None);
        Ok(Box::new(r))
    }
}
