//! The sans-IO client: one session of a Partita service, driven by the tokio client
//! (`partita-client`) and by the simulator alike, so that the simulator's swarm tests
//! the client users run.
//!
//! A [`ClientCore`] is one session (a client id, a sequence number per command) with at
//! most one command outstanding. [`ClientCore::submit`] turns a service command into
//! its multicast envelope ([`partita_service::envelope`]: split into the sub-command of
//! every partition it addresses) and sends it to the entry node: a batcher when the
//! cluster has some, the leader as far as the client knows otherwise, the server in
//! client-server mode. It then waits for the reply of the replica it chose (paper 001
//! §IV: only that replica replies), or with state partitioning for the reply of that
//! replica's rank in every addressed partition ([`PartitionLayout::answerer`]), and
//! merges the sub-replies ([`ServiceCodec::merge`]) only when they come from one
//! execution: a resubmission may be ordered again, and sub-replies of two executions
//! would not merge into a linearizable result. A reply names its execution
//! ([`Reply::instance`]): the instance that ordered it on one stream; with Multi-Ring
//! Paxos, whose partitions merge different rings and number their sequences
//! differently, the place of the value that carried it among every ring's (the same
//! at every partition, and growing along every partition's sequence as instances do;
//! see `partita_node::multiring`). The client compares names only for equality, and
//! its sessions' for order (below).
//!
//! Retries. Without an answer after `timeout_ns` the *same* command (same client id and
//! sequence number) is resubmitted, so the replicas' reply cache answers one that was
//! executed already instead of executing it twice; each timeout moves the client to
//! the next entry node of the cluster's rotation (batchers, then acceptors:
//! `Membership::entry_rotation`), every second one also to the next replica, and each
//! resubmission of one command waits twice as long as the one before, up to 4 ×
//! `timeout_ns` ([`partita_types::timeout_backoff`]). A refusal by an entry node (a full
//! queue, no leader known) is retried at the same node after `refused_retry_ns`. With
//! `give_up_ns`, a command unanswered that long after it was submitted ends as
//! [`ClientError::Timeout`]: its outcome is unknown (an `info` entry in a history).
//!
//! Leader hints. Replies and refusals name the node their sender believes leads; a
//! client without batchers sends its next commands there, so a client that entered at
//! a follower stops paying the forwarding hop.
//!
//! Early replies (paper 001 §VII). A tentative reply is never taken as the result: a
//! command ends on a tentative result only once a confirmation names that very result
//! ([`EarlyWait`]), or when a final reply arrives.
//!
//! Refusals by replicas. A command the service refused (it did not decode, or its
//! `check` failed) was executed nowhere: it ends as [`ClientError::Rejected`] (a `fail`
//! entry in a history).
//!
//! Sessions. Before its first command a client opens its session: a command with
//! sequence number 0 to every partition, whose reply names the execution the session
//! was opened at (every partition must name the same, or the answers do not count).
//! Every later command names it ([`Command::session`]), so that after the session
//! expires (the cluster's lease ran out without traffic) no late copy of one of its
//! commands runs again. A later open names the newest session the client had, so that
//! a late copy of an older open cannot end a newer session (names of one client's
//! opens grow in the order they ran, at every partition alike). A command refused
//! because its session expired ends as [`ClientError::SessionExpired`]: its outcome is
//! unknown (an earlier copy may have run before the expiry), and the next command
//! opens a new session.
//! The open belongs to the first command's invocation (its time counts in the
//! command's latency); if no session can be opened in time, the command ends as
//! [`ClientError::NoSession`], not applied. A client that gives up on a command for
//! several partitions also leaves its session: with a stream per partition (Multi-Ring
//! Paxos) the late command and the session's next one could reach one partition in
//! one order and be seen alone at another, which would then run the late command
//! while the first drops it as old; an open is ordered alike with the late command at
//! every partition, so it runs everywhere or is refused everywhere.
//!
//! Inputs: [`ClientCore::submit`], [`ClientCore::on_reply`], [`ClientCore::on_early`],
//! [`ClientCore::on_refused`], [`ClientCore::on_disconnected`] and
//! [`ClientCore::on_timer`] (the driver calls it once [`ClientCore::deadline`] has
//! passed); time arrives with every input as nanoseconds on the driver's clock.
//! Outputs: [`Action::Send`]; a finished command is taken with [`ClientCore::take_done`].
//! Invariants ([`ClientCore::invariants`]): at most one command outstanding; a deadline
//! exactly while one is; the sequence number never goes back.

use partita_service::{envelope, MergeError, ServiceCodec, SplitError, ThreadLayout};
use partita_types::early::{EarlyReply, EarlyWait};
use partita_types::{
    ClientId, Command, Instance, NodeId, PartitionId, PartitionLayout, Refusal, Reply,
};
use std::collections::BTreeMap;

/// What a client needs to know of the cluster (from its cluster file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Where commands enter, in the order a client moves through them after timeouts
    /// (batchers, then acceptors; the server alone in client-server mode).
    pub entries: Vec<NodeId>,
    /// Whether the cluster has batchers (then clients keep entering through them and
    /// ignore leader hints).
    pub batchers: bool,
    /// The nodes that execute and reply (replicas, or the server).
    pub replicas: Vec<NodeId>,
    /// State partitioning: the key ranges and their replicas.
    pub layout: PartitionLayout,
    /// The cluster's session lease (`None`: sessions never expire): a client renews
    /// its session once half of it has passed.
    pub session_lease_ms: Option<u64>,
    /// P-SMR (paper 002): the replicas' worker threads, and whether this client's
    /// proxy maps commands optimistically (OC-G, opt-PSMR: each command to one thread,
    /// resubmitted conservatively when a replica answers that the thread may not run
    /// it). Without it, or not optimistic, commands leave the mapping to the replicas
    /// (CC-G).
    pub psmr: Option<PsmrClient>,
    /// Multi-Ring Paxos (paper 002): each ring's groups (partitions, one bit each) and
    /// acceptors, its initial coordinator first. A command enters at the ring that
    /// carries all its groups with the fewest (among equals, by client id: the rule
    /// the nodes use), at its coordinator, and after timeouts at its other acceptors;
    /// empty: commands enter at `entries`.
    pub rings: Vec<(u64, Vec<NodeId>)>,
}

/// Multi-Ring Paxos: where `cmd` enters (see [`Topology::rings`]) after `timeouts`
/// timeouts; `None` without rings, with batchers, or when no ring carries its groups
/// (the entry node refuses it with the reason).
fn ring_entry(t: &Topology, cmd: &Command, timeouts: u64) -> Option<NodeId> {
    if t.rings.is_empty() || t.batchers {
        return None;
    }
    let groups = cmd.multicast_groups(t.psmr.map_or(0, |p| p.layout.threads));
    let carriers = || t.rings.iter().filter(|(g, _)| g & groups == groups);
    let fewest = carriers().map(|(g, _)| g.count_ones()).min()?;
    let best = || carriers().filter(move |(g, _)| g.count_ones() == fewest);
    let n = best().count() as u64;
    let (_, acceptors) = best().nth((cmd.client % n) as usize)?;
    acceptors
        .get((timeouts % acceptors.len().max(1) as u64) as usize)
        .copied()
}

/// A client's P-SMR settings ([`Topology::psmr`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PsmrClient {
    pub layout: ThreadLayout,
    pub optimistic: bool,
}

/// How a client waits and retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// Resubmit after this long without an answer (backed off on further timeouts).
    pub timeout_ns: u64,
    /// End a command as [`ClientError::Timeout`] this long after it was submitted
    /// (`None`: never give up).
    pub give_up_ns: Option<u64>,
    /// After a refusal by an entry node, resubmit after this long.
    pub refused_retry_ns: u64,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            timeout_ns: 1_000_000_000,
            give_up_ns: Some(10_000_000_000),
            refused_retry_ns: 50_000_000,
        }
    }
}

/// Planted client-side bugs, for the checks' controls. Never on in service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientBugs {
    /// A multi-partition command's sub-commands go out as commands of their own, each
    /// ordered on its own (paper 001 Figure 4: "sub-trees replicated independently"),
    /// and their replies are merged.
    pub independent_partitions: bool,
    /// The client keeps its session after giving up on a command for several
    /// partitions (see [`ClientCore::on_timer`]).
    pub keep_session_after_give_up: bool,
    /// Read-only commands go straight to the replica (which, with the node's
    /// `unordered-query` bug, answers without ordering them).
    pub read_direct: bool,
}

/// Why a command did not end with a result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("no reply within {after_ns} ns; the command may or may not have been applied")]
    Timeout { after_ns: u64 },
    #[error("the service refused the command, which was not applied: {0}")]
    Rejected(String),
    #[error("a reply that does not decode ({0}); the command may or may not have been applied")]
    BadReply(String),
    #[error(
        "the client's session expired (no traffic for longer than the cluster's lease); the \
         command may or may not have been applied"
    )]
    SessionExpired,
    #[error("no session could be opened within {after_ns} ns; the command was not sent")]
    NoSession { after_ns: u64 },
}

impl ClientError {
    /// Whether the command certainly was not applied (a `fail` in a history; otherwise
    /// `info`).
    pub fn not_applied(&self) -> bool {
        matches!(
            self,
            ClientError::Rejected(_) | ClientError::NoSession { .. }
        )
    }
}

/// Why [`ClientCore::submit`] did not take a command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("a command is already outstanding (one at a time per client)")]
    Busy,
    #[error(transparent)]
    Split(#[from] SplitError),
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send `cmd` to node `to` (after making sure replies can come back: see
    /// [`ClientCore::reply_nodes`]); `first` for the first send of a command.
    Send {
        to: NodeId,
        cmd: Command,
        first: bool,
    },
}

/// A command that ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Done<S: ServiceCodec> {
    pub cmd: S::Command,
    pub seq: u64,
    pub result: Result<S::Reply, ClientError>,
    pub call_ns: u64,
    pub ret_ns: u64,
    /// Early replies: when the first tentative reply arrived.
    pub tentative_ns: Option<u64>,
    /// How many times it was sent (1: no resubmission).
    pub sends: u64,
    /// Whether it ended on a confirmed tentative reply.
    pub confirmed_early: bool,
    /// opt-PSMR: whether a replica answered that the thread it was mapped to may not
    /// run it, so that it was resubmitted conservatively (a failed safety check).
    pub psmr_resubmitted: bool,
}

/// Counters of one session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    pub submitted: u64,
    pub resubmissions: u64,
    pub refusals: u64,
    /// Replies for another command (earlier, duplicated) or from a stranger.
    pub late_replies: u64,
    pub gave_up: u64,
    /// Sub-replies that did not merge (a bug if ever non-zero).
    pub merge_errors: u64,
    /// Commands that ended on a confirmed tentative reply.
    pub confirmed: u64,
    /// Leader hints that moved the entry node.
    pub leader_hints_taken: u64,
    /// Sessions opened and renewed, and commands refused because the session had
    /// expired.
    pub sessions_opened: u64,
    pub sessions_renewed: u64,
    pub sessions_expired: u64,
    /// Sessions left after giving up on a command for several partitions (the next
    /// command opens a new one).
    pub sessions_abandoned: u64,
    /// opt-PSMR: commands a replica answered "resubmit conservatively" (the optimistic
    /// thread's safety check failed), each resubmitted through g_all.
    pub psmr_resubmitted: u64,
    /// Membership changes followed ([`ClientCore::set_topology`]).
    pub topologies_followed: u64,
}

struct Outstanding<S: ServiceCodec> {
    cmd: S::Command,
    seq: u64,
    /// opt-PSMR: resubmitted conservatively after a failed safety check.
    psmr_resubmitted: bool,
    /// Opening the session first: what is sent is the open, and `command` waits.
    opening: bool,
    /// Whether anything of this invocation was sent yet.
    announced: bool,
    /// Whether the command itself (not just an open or a renewal) was sent: if so, a
    /// later open would let a copy of it run twice, so a session lost after this ends
    /// the command as unknown instead.
    command_sent: bool,
    /// The command's envelope (sent once the session is open).
    command: Command,
    /// What is sent now: the open, or the command.
    envelope: Command,
    call_ns: u64,
    sends: u64,
    deadline_ns: u64,
    /// The pending deadline is the retry after a refusal, not a timeout.
    refused_pending: bool,
    /// The partitions that answer, in order (one, partition 0, without partitioning).
    partitions: Vec<PartitionId>,
    /// Sub-replies received, per execution that ran the command (its name,
    /// [`Reply::instance`]).
    parts: BTreeMap<Instance, Vec<(PartitionId, S::Reply)>>,
    /// The open's answers, per execution that ran it: (partition, opened at).
    opens: BTreeMap<Instance, Vec<(PartitionId, Instance)>>,
    early: BTreeMap<PartitionId, EarlyWait>,
    tentative_ns: Option<u64>,
    /// The planted `independent-partitions` bug: the sub-commands sent as commands of
    /// their own (sequence numbers `seq..`), and their replies.
    subs: Vec<(PartitionId, Command, Option<S::Reply>)>,
}

pub struct ClientCore<S: ServiceCodec> {
    id: ClientId,
    seq: u64,
    /// The execution the current session was opened at (its name; `None`: not open).
    session: Option<Instance>,
    /// The newest session it ever had (0: none): its opens name it, so a copy of an
    /// old open cannot replace a newer session.
    last_session: Instance,
    /// When (this client's clock) the session was last opened or renewed: the
    /// earliest the replicas can have started its lease.
    sessioned_ns: u64,
    topology: Topology,
    cfg: ClientConfig,
    bugs: ClientBugs,
    entry: NodeId,
    replica: NodeId,
    timeouts: u64,
    outstanding: Option<Outstanding<S>>,
    done: Option<Done<S>>,
    stats: ClientStats,
}

impl<S: ServiceCodec> ClientCore<S> {
    /// A session with id `id` entering at `entry` and answered by `replica` (one of
    /// the topology's).
    pub fn new(
        id: ClientId,
        topology: Topology,
        cfg: ClientConfig,
        entry: NodeId,
        replica: NodeId,
    ) -> ClientCore<S> {
        assert!(!topology.entries.is_empty(), "a cluster has an entry node");
        assert!(
            topology.replicas.contains(&replica),
            "replica {replica} is not one of {:?}",
            topology.replicas
        );
        ClientCore {
            id,
            seq: 0,
            session: None,
            last_session: 0,
            sessioned_ns: 0,
            topology,
            cfg,
            bugs: ClientBugs::default(),
            entry,
            replica,
            timeouts: 0,
            outstanding: None,
            done: None,
            stats: ClientStats::default(),
        }
    }

    /// Plant client-side bugs (tests and controls only).
    pub fn with_bugs(mut self, bugs: ClientBugs) -> ClientCore<S> {
        self.bugs = bugs;
        self
    }

    pub fn id(&self) -> ClientId {
        self.id
    }

    /// The cluster's membership changed (the client learned the nodes it has now):
    /// enter and be answered where `topology` says from the next send on, keeping the
    /// session and any command under way (its resubmissions go to the new nodes). An
    /// entry or replica that is gone is replaced by the first entry, and by a replica
    /// chosen by the client id.
    pub fn set_topology(&mut self, topology: Topology) {
        assert!(!topology.entries.is_empty(), "a cluster has an entry node");
        assert!(!topology.replicas.is_empty(), "a cluster has a replica");
        if !topology.entries.contains(&self.entry) {
            self.entry = topology.entries[0];
        }
        if !topology.replicas.contains(&self.replica) {
            let r = &topology.replicas;
            self.replica = r[(self.id % r.len() as u64) as usize];
        }
        self.topology = topology;
        self.stats.topologies_followed += 1;
    }

    pub fn entry(&self) -> NodeId {
        self.entry
    }
    pub fn replica(&self) -> NodeId {
        self.replica
    }
    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }
    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }
    pub fn set_config(&mut self, cfg: ClientConfig) {
        self.cfg = cfg;
    }
    pub fn is_busy(&self) -> bool {
        self.outstanding.is_some()
    }

    /// The command outstanding: (sequence number, command, submitted at, sends).
    pub fn outstanding(&self) -> Option<(u64, &S::Command, u64, u64)> {
        self.outstanding
            .as_ref()
            .map(|o| (o.seq, &o.cmd, o.call_ns, o.sends))
    }

    /// When the driver must call [`ClientCore::on_timer`] (while a command is
    /// outstanding).
    pub fn deadline(&self) -> Option<u64> {
        self.outstanding.as_ref().map(|o| o.deadline_ns)
    }

    /// The nodes replies to the outstanding command come from: the driver keeps a
    /// connection to each (registered before it sends).
    pub fn reply_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        let idle = self.outstanding.is_none().then_some(self.replica);
        let parts = self.outstanding.iter().flat_map(|o| o.partitions.iter());
        idle.into_iter()
            .chain(parts.filter_map(|&p| self.answerer(p)))
    }

    fn partitioned(&self) -> bool {
        self.topology.layout.map.is_partitioned()
    }

    /// Who answers for partition `p` (the chosen replica itself without partitioning).
    fn answerer(&self, p: PartitionId) -> Option<NodeId> {
        if self.partitioned() {
            self.topology.layout.answerer(self.replica, p)
        } else {
            Some(self.replica)
        }
    }

    /// The finished command, if one ended since the last call.
    pub fn take_done(&mut self) -> Option<Done<S>> {
        self.done.take()
    }

    pub fn invariants(&self) {
        assert_eq!(
            self.outstanding.is_some(),
            self.deadline().is_some(),
            "a deadline exactly while a command is outstanding"
        );
        if let Some(o) = &self.outstanding {
            assert!(o.seq <= self.seq && o.seq >= 1, "sequence numbers in order");
            assert!(o.sends >= 1, "an outstanding command was sent");
            assert!(!o.partitions.is_empty(), "a command addresses a partition");
        }
        assert!(
            self.topology.replicas.contains(&self.replica),
            "the replica is one of the cluster's"
        );
    }

    /// Start a command: its envelope goes to the entry node.
    pub fn submit(
        &mut self,
        cmd: S::Command,
        now: u64,
        out: &mut Vec<Action>,
    ) -> Result<(), SubmitError> {
        if self.outstanding.is_some() {
            return Err(SubmitError::Busy);
        }
        let map = self.topology.layout.map;
        let mut env = envelope::<S>(self.id, self.seq + 1, self.replica, &cmd, &map)?;
        env.session = self.session.unwrap_or(0);
        if let Some(p) = self.topology.psmr {
            // OC-G: one thread, or g_all where even the optimistic mapping finds none.
            // CC-G is the replicas' (the command leaves with no thread named), except
            // over Multi-Ring Paxos, where the thread's group names the ring the
            // command goes to (paper 002 §V-B): the proxy maps it then, as the paper's
            // client proxies do. A thread the proxy chose by CC-G always passes the
            // replica's check.
            if p.optimistic || !self.topology.rings.is_empty() {
                env.route = S::thread_group(&cmd, &p.layout, p.optimistic)
                    .filter(|&t| t < p.layout.threads)
                    .map_or(p.layout.all(), |t| 1u64 << t);
            }
        }
        self.seq += 1;
        let partitions: Vec<PartitionId> = partita_types::mask_partitions(env.body.groups());
        let subs = if self.bugs.independent_partitions && partitions.len() > 1 {
            // Each sub-command is a command of its own, with a sequence number of its
            // own (so the reply cache keeps them apart).
            let mut subs = Vec::new();
            for (i, &p) in partitions.iter().enumerate() {
                let mut sub = env.clone();
                sub.seq = self.seq + i as u64;
                sub.body = env.body.project(p).expect("an addressed partition");
                subs.push((p, sub, None));
            }
            self.seq += partitions.len() as u64 - 1;
            subs
        } else {
            Vec::new()
        };
        self.stats.submitted += 1;
        // Open a session first, or renew it once half its lease has passed.
        let renew_ns = self.topology.session_lease_ms.map(|l| l * 500_000);
        let step = match self.session {
            None => Some(Command::reopen(
                self.id,
                self.last_session,
                self.replica,
                map.all(),
            )),
            Some(at) if renew_ns.is_some_and(|r| now.saturating_sub(self.sessioned_ns) >= r) => {
                Some(Command::renew(self.id, at, self.replica, map.all()))
            }
            Some(_) => None,
        };
        let opening = step.is_some();
        let (envelope, partitions) = match step {
            Some(step) => {
                self.sessioned_ns = now;
                (step, partita_types::mask_partitions(map.all()))
            }
            None => (env.clone(), partitions),
        };
        self.outstanding = Some(Outstanding {
            cmd,
            seq: env.seq,
            opening,
            announced: false,
            command_sent: false,
            command: env,
            envelope,
            call_ns: now,
            sends: 0,
            deadline_ns: now,
            refused_pending: false,
            partitions,
            parts: BTreeMap::new(),
            opens: BTreeMap::new(),
            early: BTreeMap::new(),
            tentative_ns: None,
            subs,
            psmr_resubmitted: false,
        });
        self.send(now, out);
        Ok(())
    }

    /// The session opened (or renewed) at `opened_at`: the command that waited goes
    /// out.
    fn opened(&mut self, opened_at: Instance, now: u64, out: &mut Vec<Action>) {
        let renewed = self.session == Some(opened_at);
        if renewed {
            self.stats.sessions_renewed += 1;
        } else {
            self.stats.sessions_opened += 1;
        }
        self.session = Some(opened_at);
        self.last_session = self.last_session.max(opened_at);
        if !renewed && self.outstanding.as_ref().is_some_and(|o| o.command_sent) {
            // Another session than the one the command went out in (the answer to a
            // duplicate of an earlier open): its replies are not cached there, so
            // sending it again could run it twice. Its outcome is unknown; the new
            // session serves the next command.
            self.stats.sessions_expired += 1;
            return self.finish(now, Err(ClientError::SessionExpired), false);
        }
        let o = self.outstanding.as_mut().expect("an open is outstanding");
        o.opening = false;
        o.command.session = opened_at;
        for (_, sub, _) in &mut o.subs {
            sub.session = opened_at;
        }
        o.envelope = o.command.clone();
        o.partitions = partita_types::mask_partitions(o.command.body.groups());
        o.parts.clear();
        o.opens.clear();
        o.early.clear();
        o.refused_pending = false;
        o.sends = 0;
        self.send(now, out);
    }

    /// Send (or resend) the outstanding command and set its deadline.
    fn send(&mut self, now: u64, out: &mut Vec<Action>) {
        let (entry, replica) = (self.entry, self.replica);
        let read_direct = self.bugs.read_direct;
        let timeout_ns = self.cfg.timeout_ns;
        let Some(o) = self.outstanding.as_mut() else {
            return;
        };
        o.sends += 1;
        // The first send of the invocation (the open's, when a session is opened
        // first).
        let first = !o.announced;
        o.announced = true;
        o.command_sent |= !o.opening;
        if o.sends > 1 {
            self.stats.resubmissions += 1;
        }
        o.envelope.reply_to = replica;
        o.command.reply_to = replica;
        if !o.subs.is_empty() && !o.opening {
            for (_, sub, done) in &mut o.subs {
                sub.reply_to = replica;
                if done.is_none() {
                    out.push(Action::Send {
                        to: entry,
                        cmd: sub.clone(),
                        first,
                    });
                }
            }
        } else {
            let to = if read_direct && !o.opening && S::is_read_only(&o.cmd) {
                replica
            } else {
                ring_entry(&self.topology, &o.envelope, self.timeouts).unwrap_or(entry)
            };
            out.push(Action::Send {
                to,
                cmd: o.envelope.clone(),
                first,
            });
        }
        o.deadline_ns = now + timeout_ns * u64::from(partita_types::timeout_backoff(o.sends - 1));
    }

    /// After a timeout: the next entry node of the rotation (and the next acceptor of
    /// each ring) and, every second time, the next replica.
    fn rotate(&mut self) {
        self.timeouts += 1;
        let e = &self.topology.entries;
        let at = e.iter().position(|&n| n == self.entry);
        self.entry = e[at.map_or(0, |i| (i + 1) % e.len())];
        if self.timeouts.is_multiple_of(2) {
            let r = &self.topology.replicas;
            if let Some(i) = r.iter().position(|&n| n == self.replica) {
                self.replica = r[(i + 1) % r.len()];
            }
        }
    }

    /// The deadline passed: give up, or resubmit.
    pub fn on_timer(&mut self, now: u64, out: &mut Vec<Action>) {
        let Some(o) = self.outstanding.as_mut() else {
            return;
        };
        if now < o.deadline_ns {
            return;
        }
        if let Some(g) = self.cfg.give_up_ns {
            if now.saturating_sub(o.call_ns) >= g {
                self.stats.gave_up += 1;
                // Gave up opening a session: the command never went out (unless it
                // did before a renewal, and then its outcome is unknown).
                let why = if o.opening && !o.command_sent {
                    ClientError::NoSession { after_ns: g }
                } else {
                    ClientError::Timeout { after_ns: g }
                };
                if o.command_sent && o.partitions.len() > 1 && !self.bugs.keep_session_after_give_up
                {
                    // A command for several partitions may still be ordered later.
                    // With a stream per partition (Multi-Ring Paxos), this session's
                    // next command could reach one of them first, which would then
                    // drop the late one as old while the others run it. A new
                    // session, opened at every partition in the order all of them
                    // share with the late command, makes them agree: it runs at
                    // every one before the open, or is refused at every one after.
                    self.session = None;
                    self.stats.sessions_abandoned += 1;
                }
                self.finish(now, Err(why), false);
                return;
            }
        }
        if !std::mem::take(&mut o.refused_pending) {
            self.rotate();
        }
        // A command retried for half a lease renews the session before it goes out
        // again: its own copies cannot renew it (a renewal reaches every partition, a
        // command only its own), and the session must outlive the retries.
        let renew_due = self
            .topology
            .session_lease_ms
            .is_some_and(|l| now.saturating_sub(self.sessioned_ns) >= l * 500_000);
        let opening = self.outstanding.as_ref().is_some_and(|o| o.opening);
        if let (true, Some(at)) = (renew_due && !opening, self.session) {
            let all = self.topology.layout.map.all();
            let renew = Command::renew(self.id, at, self.replica, all);
            let o = self.outstanding.as_mut().expect("checked above");
            o.envelope = renew;
            o.partitions = partita_types::mask_partitions(all);
            o.opening = true;
            o.parts.clear();
            o.opens.clear();
            o.early.clear();
            self.sessioned_ns = now;
        }
        self.send(now, out);
    }

    /// A leader hint: without batchers, enter at the leader from now on.
    fn hint(&mut self, leader: Option<NodeId>) {
        if let Some(l) = leader {
            if !self.topology.batchers && l != self.entry && self.topology.entries.contains(&l) {
                self.entry = l;
                self.stats.leader_hints_taken += 1;
            }
        }
    }

    /// A final reply from node `from` (possibly late, for an earlier command, or
    /// duplicated), with its sender's leader hint.
    pub fn on_reply(
        &mut self,
        from: NodeId,
        reply: &Reply,
        leader: Option<NodeId>,
        now: u64,
        out: &mut Vec<Action>,
    ) {
        self.hint(leader);
        let Some(o) = self.outstanding.as_mut() else {
            self.stats.late_replies += 1;
            return;
        };
        if reply.client != self.id {
            self.stats.late_replies += 1;
            return;
        }
        if !o.subs.is_empty() && !o.opening {
            self.on_sub_reply(reply, now);
            return;
        }
        if reply.seq != o.envelope.seq {
            self.stats.late_replies += 1;
            return;
        }
        let p = match self.partition_of(from) {
            Some(p) => p,
            None => {
                self.stats.late_replies += 1;
                return;
            }
        };
        self.on_part(p, reply.instance, &reply.result, now, false, out);
    }

    /// Which partition's answer a message from `from` is (0 without partitioning).
    fn partition_of(&self, from: NodeId) -> Option<PartitionId> {
        if self.partitioned() {
            self.topology.layout.partition_of_replica(from)
        } else {
            Some(0)
        }
    }

    /// Partition `p`'s final sub-result, computed by the execution named `instance`.
    fn on_part(
        &mut self,
        p: PartitionId,
        instance: Instance,
        outcome: &partita_types::Outcome,
        now: u64,
        early: bool,
        out: &mut Vec<Action>,
    ) {
        let opening = self.outstanding.as_ref().is_some_and(|o| o.opening);
        let reply = match outcome {
            Err(Refusal::Rejected(why)) => {
                // Refused by the service: executed nowhere.
                return self.finish(now, Err(ClientError::Rejected(why.clone())), early);
            }
            Err(Refusal::Resubmit(_))
                if !opening
                    && self
                        .outstanding
                        .as_ref()
                        .is_some_and(|o| o.command.route != 0) =>
            {
                // opt-PSMR: the thread it was sent to may not run it (and it ran
                // nowhere); again, conservatively (CC-G at the replicas), the same
                // sequence number.
                self.stats.psmr_resubmitted += 1;
                let o = self.outstanding.as_mut().expect("checked");
                o.psmr_resubmitted = true;
                o.command.route = 0;
                o.envelope.route = 0;
                o.sends = 0;
                o.parts.clear();
                o.early.clear();
                return self.send(now, out);
            }
            Err(Refusal::Resubmit(_)) => {
                // Resubmitted conservatively already: the answer to an earlier,
                // optimistic copy (a replica never refuses a conservative one).
                self.stats.late_replies += 1;
                return;
            }
            Err(Refusal::SessionExpired)
                if opening && !self.outstanding.as_ref().is_some_and(|o| o.command_sent) =>
            {
                // A renewal came too late, before the command went out: open a new
                // session; the command waits on.
                self.session = None;
                self.stats.sessions_expired += 1;
                return self.reopen(now, out);
            }
            Err(Refusal::SessionExpired) => {
                // This copy ran nowhere; an earlier one may have, before the expiry.
                self.session = None;
                self.stats.sessions_expired += 1;
                return self.finish(now, Err(ClientError::SessionExpired), early);
            }
            Ok(bytes) if opening => {
                return match partita_types::session_of_reply(bytes) {
                    Some(opened_at) => self.on_open_part(p, instance, opened_at, now, out),
                    None => self.finish(
                        now,
                        Err(ClientError::BadReply(
                            "an open's reply is not an instance".into(),
                        )),
                        early,
                    ),
                };
            }
            Ok(bytes) => match S::decode_reply(bytes) {
                Ok(r) => r,
                Err(e) => {
                    return self.finish(now, Err(ClientError::BadReply(e.to_string())), early)
                }
            },
        };
        let o = self.outstanding.as_mut().expect("checked by the callers");
        if !o.partitions.contains(&p) {
            self.stats.late_replies += 1;
            return;
        }
        let got = if o.partitions.len() == 1 {
            // The common case, one partition: nothing to collect.
            vec![(p, reply)]
        } else {
            let got = o.parts.entry(instance).or_default();
            if got.iter().any(|(q, _)| *q == p) {
                self.stats.late_replies += 1;
                return;
            }
            got.push((p, reply));
            if got.len() < o.partitions.len() {
                return;
            }
            o.parts.remove(&instance).expect("just filled")
        };
        match S::merge(&o.cmd, got, &self.topology.layout.map) {
            Ok(r) => self.finish(now, Ok(r), early),
            Err(MergeError(_)) => self.stats.merge_errors += 1,
        }
    }

    /// The session is gone before the command was sent: open a new one first.
    fn reopen(&mut self, now: u64, out: &mut Vec<Action>) {
        let all = self.topology.layout.map.all();
        let open = Command::reopen(self.id, self.last_session, self.replica, all);
        self.sessioned_ns = now;
        let o = self.outstanding.as_mut().expect("a renewal is outstanding");
        o.envelope = open;
        o.partitions = partita_types::mask_partitions(all);
        o.parts.clear();
        o.opens.clear();
        o.early.clear();
        o.refused_pending = false;
        o.sends = 0;
        self.send(now, out);
    }

    /// Partition `p` opened the session at `opened_at` (the open's execution named
    /// `instance`): once every partition's answer for one execution is in, the
    /// session is open.
    fn on_open_part(
        &mut self,
        p: PartitionId,
        instance: Instance,
        opened_at: Instance,
        now: u64,
        out: &mut Vec<Action>,
    ) {
        let o = self.outstanding.as_mut().expect("checked by the callers");
        if !o.partitions.contains(&p) {
            self.stats.late_replies += 1;
            return;
        }
        let got = o.opens.entry(instance).or_default();
        if got.iter().any(|(q, _)| *q == p) {
            self.stats.late_replies += 1;
            return;
        }
        got.push((p, opened_at));
        if got.len() < o.partitions.len() {
            return;
        }
        let got = o.opens.remove(&instance).expect("just filled");
        // Every partition ran the open in one execution: they agree on when the
        // session opened (a resubmitted open of a live session names the first).
        if got.iter().any(|(_, at)| *at != got[0].1) {
            self.stats.merge_errors += 1;
            return;
        }
        self.opened(got[0].1, now, out);
    }

    /// The planted `independent-partitions` bug: each sub-command's reply counts,
    /// whenever it was ordered.
    fn on_sub_reply(&mut self, reply: &Reply, now: u64) {
        let o = self.outstanding.as_mut().expect("checked");
        let Some(slot) = o.subs.iter_mut().find(|(_, c, _)| c.seq == reply.seq) else {
            self.stats.late_replies += 1;
            return;
        };
        if slot.2.is_some() {
            self.stats.late_replies += 1;
            return;
        }
        match reply.result.as_ref().map(|b| S::decode_reply(b)) {
            Ok(Ok(r)) => slot.2 = Some(r),
            _ => {
                self.stats.late_replies += 1;
                return;
            }
        }
        if o.subs.iter().any(|(_, _, d)| d.is_none()) {
            return;
        }
        let parts = o
            .subs
            .iter()
            .map(|(p, _, d)| (*p, d.clone().expect("every sub-reply")))
            .collect();
        match S::merge(&o.cmd, parts, &self.topology.layout.map) {
            Ok(r) => self.finish(now, Ok(r), false),
            Err(_) => self.stats.merge_errors += 1,
        }
    }

    /// A tentative reply or a confirmation from replica `from` (early replies).
    pub fn on_early(&mut self, from: NodeId, e: &EarlyReply, now: u64, out: &mut Vec<Action>) {
        let Some(o) = self.outstanding.as_mut() else {
            self.stats.late_replies += 1;
            return;
        };
        if e.client() != self.id || e.seq() != o.envelope.seq || (!o.subs.is_empty() && !o.opening)
        {
            self.stats.late_replies += 1;
            return;
        }
        if let EarlyReply::Tentative(_) = e {
            o.tentative_ns.get_or_insert(now);
        }
        let Some(p) = self.partition_of(from) else {
            self.stats.late_replies += 1;
            return;
        };
        let o = self.outstanding.as_mut().expect("checked");
        let Some((instance, outcome)) = o.early.entry(p).or_default().on_early_at(e) else {
            return;
        };
        self.on_part(p, instance, &outcome, now, true, out);
    }

    /// An entry node (or a replica, with the planted `read_direct`) refused the
    /// command: resubmit it a little later, at the leader it names if any.
    pub fn on_refused(&mut self, seq: u64, leader: Option<NodeId>, now: u64) {
        self.hint(leader);
        let retry = self.cfg.refused_retry_ns;
        let Some(o) = self.outstanding.as_mut() else {
            return;
        };
        // The envelope may be a session open or renewal, numbered apart from the command.
        let ours =
            o.seq == seq || o.envelope.seq == seq || o.subs.iter().any(|(_, c, _)| c.seq == seq);
        if !ours {
            return;
        }
        self.stats.refusals += 1;
        o.refused_pending = true;
        o.deadline_ns = o.deadline_ns.min(now + retry);
    }

    /// The connection to `node` broke, or `node` cannot be reached: if the outstanding
    /// command depends on it, move on (the next entry node, or the next replica) and
    /// resubmit after the refusal delay.
    pub fn on_disconnected(&mut self, node: NodeId, now: u64) {
        let entry_lost = node == self.entry;
        let replies_lost = self.reply_nodes().any(|n| n == node);
        if entry_lost {
            let e = &self.topology.entries;
            let at = e.iter().position(|&n| n == self.entry);
            self.entry = e[at.map_or(0, |i| (i + 1) % e.len())];
        }
        if replies_lost {
            let r = &self.topology.replicas;
            if let Some(i) = r.iter().position(|&n| n == self.replica) {
                self.replica = r[(i + 1) % r.len()];
            }
        }
        let retry = self.cfg.refused_retry_ns;
        if let Some(o) = self.outstanding.as_mut() {
            if entry_lost || replies_lost {
                o.refused_pending = true;
                o.deadline_ns = o.deadline_ns.min(now + retry);
            }
        }
    }

    fn finish(&mut self, now: u64, result: Result<S::Reply, ClientError>, early: bool) {
        let o = self.outstanding.take().expect("a command to finish");
        if early && result.is_ok() {
            self.stats.confirmed += 1;
        }
        self.done = Some(Done {
            cmd: o.cmd,
            seq: o.seq,
            result,
            call_ns: o.call_ns,
            ret_ns: now,
            tentative_ns: o.tentative_ns,
            sends: o.sends,
            confirmed_early: early,
            psmr_resubmitted: o.psmr_resubmitted,
        });
    }
}

#[cfg(test)]
mod tests;
