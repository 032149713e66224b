//! EPaxos behind the atomic-multicast seam: paper 004's leaderless baseline
//! (`partita_consensus::epaxos`) ordering the commands of any service for the common
//! replica, which executes them (order, then execute, as every ordering does).
//!
//! - **Who.** Every replica of a cluster with `[ordering] protocol = "epaxos"` is an
//!   EPaxos replica: it leads the instances of its own column and proposes there the
//!   commands of the clients that chose it (their nearest replica). Messages travel as
//!   [`Msg::Epaxos`]; the core's records go to the node's one write-ahead log as
//!   [`AcceptorRecord::Epaxos`], with the node's tokens (the log holds nothing else, so
//!   the core's token numbering is the log's).
//! - **Conflicts.** What a command touches comes from the replica
//!   (`partita_smr::SequentialReplica::access`): the service's objects, read or
//!   written (`StateMachine::access`, e.g. the B+tree's next and prev up to their
//!   neighbour, the key-value store's keys and its store-wide revision), the client's
//!   session for a mutation (so every replica runs one client's mutations in one
//!   order: exactly-once), and everything for a session open.
//! - **Batches.** A replica has at most `window_instances_max` (the EPaxos section's,
//!   1,024 by default) instances of its own column in flight (proposed, not
//!   committed). A command that finds the window full waits (at most `[batching]
//!   pending_commands_max` of them; more are refused, and their clients retry), and
//!   what waits leaves packed into one instance when a commit frees a place, up to
//!   `[batching] batch_bytes_max`: the batching of EPaxos's reference implementation.
//!   An instance's accesses are the union of its commands'; a barrier is always alone.
//! - **Delivery.** The core emits committed instances in its execution order
//!   (dependencies first, strongly connected components by `(seq, instance)`); each
//!   instance's batch is delivered to the replica as one value, numbered 1, 2, … here,
//!   its commands run in the batch's order. No-ops are not delivered. Replicas
//!   execute conflicting commands in one order and the others commute, so every
//!   replica reaches the same state once it has run the same set; the numbering is
//!   the same at every replica only at a cut.
//! - **Barriers and cuts.** A command that conflicts with everything is ordered with
//!   every other one, so the set run before it is the same at every replica: a cut.
//!   This node proposes a barrier (an empty command carrying its clock) when one is
//!   needed ([`BarrierPolicy`]: a checkpoint interval's worth of commands ran, or,
//!   sessions expiring, `barrier_interval_ms` passed while commands run; the first
//!   replica in line, the next one if it stays silent), and session opens are
//!   barriers too. At a cut the core emits
//!   its exact position ([`partita_consensus::epaxos::ExecPosition`]), which this
//!   ordering hands the node core as [`Action::Cut`]: a replica checkpoints only
//!   there, so every checkpoint's count and state are the same at every replica that
//!   took one at that barrier.
//! - **Ordered time.** Sessions expire by the time of the values that run. Here a
//!   value's time is the newest barrier's (the time its proposer stamped, never going
//!   back): every command runs between the same two barriers at every replica, so it
//!   sees the same time everywhere, and sessions expire only at barriers. A node takes
//!   client commands only once a barrier ran here (time is known).
//! - **Checkpoints and truncation** (the spec's partial-order rules). The replica's
//!   durable checkpoint positions are announced to every replica
//!   ([`Msg::PositionCheckpointed`]); each replica truncates its instances and log at
//!   the componentwise minimum of one chosen set of `f + 1` of them
//!   ([`truncation_frontier`]). A replica that needs what peers truncated (they answer
//!   `Truncated`, never "unknown", so recovery cannot decide a no-op for a command
//!   that ran) asks the node core for a checkpoint ([`Action::NeedCheckpoint`]); one
//!   whose position covers the truncation frontier is restored, and the core resumes
//!   from its position ([`AtomicMulticast::skip_to`]). A restarted replica restores its
//!   newest checkpoint and replays only its log's tail.

use partita_consensus::epaxos::{
    truncation_frontier, Epaxos, EpaxosAction, EpaxosBugs, EpaxosCommand, EpaxosConfig,
    EpaxosOutbox, ExecPosition, InstanceId, KeyAccess, Slot,
};
use partita_consensus::{AcceptorRecord, Action, Msg, Outbox, PersistToken, TickDue, Value, Vid};
use partita_smr::Access;
use partita_types::{Ballot, Command, FieldError, Instance, NodeId, SystemOp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::geo::GeoSetup;
use crate::ordering::{AtomicMulticast, BarrierPolicy, OrderingReport, StreamReport};
use crate::{NodeSetup, UnsafeBugs};

/// The kind of EPaxos's system commands (see `Command::system`).
const BARRIER_KIND: u8 = 0xB;

/// What a checkpoint records of EPaxos ([`AtomicMulticast::position`]): the core's
/// executed set and the ordered time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Position {
    exec: ExecPosition,
    time_ms: u64,
}

fn decode_position(bytes: &[u8]) -> Result<Position, String> {
    partita_types::decode::<Position>(bytes).map_err(|e| format!("an EPaxos position: {e}"))
}

/// Whether `cmd` is a barrier, and its time.
fn barrier_time(cmd: &Command) -> Option<u64> {
    match cmd.system_op()? {
        SystemOp::Barrier { time_ms } => Some(time_ms),
        SystemOp::Reconfigure { .. } | SystemOp::Member { .. } => None,
    }
}

/// EPaxos for a node: its core, the numbering of what it delivered, ordered time, and
/// the checkpoint positions replicas announced.
pub struct EpaxosOrdering {
    id: NodeId,
    /// This node's place in the replica list (its column, and its turn for barriers).
    rank: usize,
    core: Epaxos,
    /// Client commands (and barriers) delivered here, numbered from 1.
    delivered: Instance,
    /// Ordered time: the newest barrier's.
    time_ms: u64,
    /// The driver's clock at the last tick, and when a barrier last ran here by it.
    clock_ms: u64,
    last_barrier_ms: u64,
    /// Commands delivered since the last barrier: a barrier is proposed only when
    /// something ran.
    since_barrier: u64,
    barrier_seq: u64,
    /// When this node last proposed a barrier (its clock), so it waits before another.
    barrier_proposed_ms: Option<u64>,
    barriers: BarrierPolicy,
    /// Each replica's newest announced durable checkpoint: (count, position).
    announced: BTreeMap<NodeId, (Instance, ExecPosition)>,
    /// What a state transfer must cover (from the core's `NeedState`).
    needed: Option<Vec<Slot>>,
    /// The log's last token handed out (the core's own numbering).
    last_token: PersistToken,
    /// Client commands waiting for room in this replica's window (its own instances
    /// not committed yet, at most the EPaxos section's `window_instances_max`), oldest
    /// first, with what they access; each time the window has room they leave packed into
    /// one instance, up to `batch_bytes_max` (see [`EpaxosOrdering::flush`]).
    pending: VecDeque<(Command, Access)>,
    /// A barrier due here, proposed before any waiting client command.
    barrier_due: Option<Command>,
    batch_bytes_max: usize,
    pending_commands_max: usize,
    /// Planted bugs (see [`UnsafeBugs`]).
    truncate_above_majority: bool,
    restore_wrong_frontier: bool,
    counters: BTreeMap<&'static str, u64>,
}

/// Planted bug `restore-wrong-frontier`: a position one command past `p` in every
/// column (`replicas`: the columns' owners).
fn wrong_frontier(mut p: ExecPosition, replicas: &[NodeId]) -> ExecPosition {
    for s in &mut p.prefix {
        *s += 1;
    }
    let prefix = p.prefix.clone();
    p.above.retain(|i| {
        let q = replicas.iter().position(|&r| r == i.replica);
        q.is_some_and(|q| i.slot > prefix[q])
    });
    p
}

impl EpaxosOrdering {
    /// Node `setup.id`'s EPaxos replica, recovered from `recovered` (its log) and the
    /// checkpoint `position` the node's replica was restored from (empty: none), the
    /// replica having run `next_deliver - 1` commands.
    pub fn new(
        setup: &NodeSetup,
        geo: &GeoSetup,
        recovered: Vec<AcceptorRecord>,
        next_deliver: Instance,
        position: &[u8],
        bugs: &UnsafeBugs,
        out: &mut Outbox,
    ) -> Result<EpaxosOrdering, FieldError> {
        let id = setup.id;
        let rank = geo.replicas.iter().position(|&r| r == id).ok_or_else(|| {
            FieldError::new("ordering", format!("node {id} is not an EPaxos replica"))
        })?;
        let mut config = epaxos_config(geo);
        config.proposals_in_flight_max = geo.epaxos_window;
        config
            .validate()
            .map_err(|e| FieldError::new("ordering", format!("EPaxos: {e}")))?;
        let mut records = Vec::with_capacity(recovered.len());
        for r in recovered {
            match r {
                AcceptorRecord::Epaxos(r) => records.push(*r),
                other => {
                    return Err(FieldError::new(
                        "ordering.protocol",
                        format!(
                            "node {id}'s log holds a record that is not EPaxos's \
                             ({other:?}): it was written by another configuration"
                        ),
                    ))
                }
            }
        }
        let restored = match position.is_empty() {
            true => None,
            false => Some(decode_position(position).map_err(|e| {
                FieldError::new("ordering", format!("node {id}'s checkpoint: {e}"))
            })?),
        };
        if let Some(p) = &restored {
            if !p.exec.is_well_formed(&config.replicas) {
                return Err(FieldError::new(
                    "ordering",
                    format!("node {id}'s checkpoint holds a position of another cluster"),
                ));
            }
        }
        let last_token = records.len() as PersistToken;
        let from = restored
            .as_ref()
            .map(|p| match bugs.restore_wrong_frontier {
                true => wrong_frontier(p.exec.clone(), &config.replicas),
                false => p.exec.clone(),
            });
        let mut core = Epaxos::recover_at(id, config, from, records);
        core.set_bugs(EpaxosBugs {
            skip_slow_path_when_deps_differ: bugs.epaxos_skip_slow_path,
            ..EpaxosBugs::default()
        });
        let mut o = EpaxosOrdering {
            id,
            rank,
            core,
            delivered: next_deliver.saturating_sub(1),
            time_ms: restored.as_ref().map_or(0, |p| p.time_ms),
            clock_ms: 0,
            last_barrier_ms: 0,
            since_barrier: 0,
            barrier_seq: 0,
            barrier_proposed_ms: None,
            barriers: BarrierPolicy::of(setup, geo.barrier_interval_ms),
            announced: BTreeMap::new(),
            needed: None,
            last_token,
            pending: VecDeque::new(),
            barrier_due: None,
            batch_bytes_max: setup.coordinator_config.batch_bytes_max,
            pending_commands_max: setup.coordinator_config.pending_commands_max,
            truncate_above_majority: bugs.truncate_above_majority,
            restore_wrong_frontier: bugs.restore_wrong_frontier,
            counters: BTreeMap::new(),
        };
        // Committed instances of the log's tail run again at the first handler call.
        let mut acts = Vec::new();
        o.core.on_tick(0, &mut acts);
        o.absorb(acts, out);
        Ok(o)
    }

    /// The EPaxos core (for status and tests).
    pub fn core(&self) -> &Epaxos {
        &self.core
    }

    /// Nothing in flight here: no phase driven, no instance awaited or left to run.
    pub fn quiescent(&self) -> bool {
        self.core.is_quiescent() && self.pending.is_empty() && self.barrier_due.is_none()
    }

    fn count(&mut self, what: &'static str) {
        *self.counters.entry(what).or_default() += 1;
    }

    /// The core's actions as this node's.
    fn absorb(&mut self, acts: EpaxosOutbox, out: &mut Outbox) {
        for a in acts {
            match a {
                EpaxosAction::Send { to, msg } => out.push(Action::Send {
                    to,
                    msg: Msg::Epaxos(Box::new(msg)),
                }),
                EpaxosAction::Persist { token, record } => {
                    assert_eq!(
                        token,
                        self.last_token + 1,
                        "the EPaxos core numbers its writes as the node's log does"
                    );
                    self.last_token = token;
                    out.push(Action::Persist {
                        token,
                        record: AcceptorRecord::Epaxos(Box::new(record)),
                    });
                }
                EpaxosAction::Execute {
                    instance, command, ..
                } => match command {
                    Some(c) => self.deliver(instance, c.commands, out),
                    None => self.count("epaxos_noops_executed"),
                },
                EpaxosAction::Cut { position } => {
                    self.count("epaxos_cuts");
                    let p = Position {
                        exec: position,
                        time_ms: self.time_ms,
                    };
                    out.push(Action::Cut {
                        position: partita_types::encode(&p),
                    });
                }
                EpaxosAction::TruncateLog { below_token } => {
                    out.push(Action::TruncateLog { below_token })
                }
                EpaxosAction::NeedState { frontier } => {
                    self.count("epaxos_state_transfers_asked");
                    self.needed = Some(frontier);
                    out.push(Action::NeedCheckpoint);
                }
            }
        }
    }

    /// A committed instance, in execution order: a barrier (always alone in its
    /// instance) moves ordered time and is delivered as an empty value (sessions expire
    /// there); a batch of client commands goes to the replica as one value, run in the
    /// batch's order at the newest barrier's time.
    fn deliver(&mut self, instance: InstanceId, mut commands: Vec<Command>, out: &mut Outbox) {
        self.delivered += 1;
        let vid = Vid {
            ballot: Ballot::new(0, instance.replica),
            seq: instance.slot,
        };
        match commands.first().and_then(barrier_time) {
            Some(t) => {
                self.time_ms = self.time_ms.max(t);
                self.since_barrier = 0;
                self.last_barrier_ms = self.clock_ms;
                self.barrier_proposed_ms = None;
                self.count("epaxos_barriers_run");
                commands.clear();
            }
            None => {
                self.since_barrier += commands.len() as u64;
            }
        };
        out.push(Action::Deliver {
            instance: self.delivered,
            name: self.delivered,
            value: Arc::new(Value {
                vid,
                commands,
                parts: Vec::new(),
                time_ms: self.time_ms,
                skip: 0,
            }),
        });
    }

    /// Propose a barrier when it is this node's turn ([`BarrierPolicy::due`]).
    fn maybe_barrier(&mut self, out: &mut Outbox) {
        let interval = self.barriers.interval_ms;
        let due = self.barriers.due(
            self.rank,
            self.time_ms,
            self.since_barrier,
            self.last_barrier_ms,
            self.clock_ms,
        );
        let waiting = self
            .barrier_proposed_ms
            .is_some_and(|t| self.clock_ms.saturating_sub(t) < interval);
        if !due || waiting || self.clock_ms == 0 || self.barrier_due.is_some() {
            return;
        }
        self.barrier_seq += 1;
        let cmd = Command::system(
            SystemOp::Barrier {
                time_ms: self.clock_ms,
            },
            self.id,
            BARRIER_KIND,
            self.barrier_seq,
        );
        self.barrier_due = Some(cmd);
        self.flush(out);
    }

    /// Propose what waits while the window has room: a due barrier first (alone: it
    /// conflicts with everything and moves ordered time), then the waiting client
    /// commands, as many per instance as fit in `batch_bytes_max` (one at least) and
    /// the core's key bound. Under a light load every command leaves at once in an
    /// instance of its own; once the window is full, what arrives meanwhile leaves
    /// together when a commit frees a place (the batching of EPaxos's reference
    /// implementation, which packs every proposal queued while it was busy).
    /// Called after every handler: what waits is checked first, so a replica with
    /// nothing waiting (the common case) does not count its window on every message.
    fn flush(&mut self, out: &mut Outbox) {
        while (self.barrier_due.is_some() || !self.pending.is_empty()) && self.core.can_propose() {
            let batch = if let Some(barrier) = self.barrier_due.take() {
                EpaxosCommand::new(barrier, Vec::new(), true)
            } else {
                let keys_max = self.core.config().keys_per_command_max;
                let (mut commands, mut keys, mut all, mut bytes) = (Vec::new(), 0, false, 0);
                let mut access = Vec::new();
                while let Some((c, a)) = self.pending.front() {
                    let b = partita_consensus::command_bytes(c);
                    if !commands.is_empty()
                        && (bytes + b > self.batch_bytes_max || keys + a.objects.len() > keys_max)
                    {
                        break;
                    }
                    let (c, a) = self.pending.pop_front().expect("a front");
                    bytes += b;
                    keys += a.objects.len();
                    all |= a.everything;
                    access.extend(
                        a.objects
                            .iter()
                            .map(|&(key, write)| KeyAccess { key, write }),
                    );
                    commands.push(c);
                }
                *self.counters.entry("epaxos_commands_proposed").or_default() +=
                    commands.len() as u64;
                self.count("epaxos_batches_proposed");
                EpaxosCommand::batch(commands, access, all)
            };
            let barrier = batch.commands.first().and_then(barrier_time).is_some();
            let mut acts = Vec::new();
            match self.core.propose(batch, &mut acts) {
                Ok(_) if barrier => {
                    self.barrier_proposed_ms = Some(self.clock_ms);
                    self.count("epaxos_barriers_proposed");
                }
                Ok(_) => {}
                // Room was checked and every command's keys were at `multicast`: the
                // core refuses nothing here. Were it to, the clients time out and
                // resubmit; the barrier is tried again at a later tick.
                Err(_) => self.count("epaxos_batches_refused"),
            }
            self.absorb(acts, out);
        }
    }

    /// Truncate at what one chosen majority of announced checkpoints covers.
    fn truncate(&mut self, out: &mut Outbox) {
        let positions: Vec<ExecPosition> =
            self.announced.values().map(|(_, p)| p.clone()).collect();
        let frontier = match self.truncate_above_majority {
            // Planted bug: the newest checkpoint anyone announced, column by column.
            true => positions.iter().fold(None, |m: Option<Vec<Slot>>, p| {
                Some(match m {
                    None => p.prefix.clone(),
                    Some(m) => m.iter().zip(&p.prefix).map(|(a, b)| *a.max(b)).collect(),
                })
            }),
            // At most this replica's own durable checkpoint, too: what a majority
            // covers is safe to forget, and what its own checkpoint covers it can
            // restart from without a peer's.
            false => match (
                truncation_frontier(&positions, self.core.config().f()),
                self.announced.get(&self.id),
            ) {
                (Some(f), Some((_, own))) => {
                    Some(f.iter().zip(&own.prefix).map(|(&a, &b)| a.min(b)).collect())
                }
                _ => None,
            },
        };
        let Some(frontier) = frontier else {
            return;
        };
        // The core never truncates above what it executed (it clamps): compare with
        // what it can take.
        let own = self.core.position().prefix;
        let reachable = frontier.iter().zip(&own).map(|(&f, &p)| f.min(p));
        if reachable.zip(self.core.truncated()).all(|(f, &t)| f <= t) {
            return;
        }
        let mut acts = Vec::new();
        self.core.truncate_below(&frontier, &mut acts);
        self.count("epaxos_truncations");
        self.absorb(acts, out);
    }
}

/// The core's tunables for this cluster: timeouts scaled to its widest round trip.
pub fn epaxos_config(geo: &GeoSetup) -> EpaxosConfig {
    let mut c = EpaxosConfig::new(geo.replicas.clone());
    // `clock_retry_ticks` is 200 ms or two of the widest round trips, in ticks.
    let rtt2 = geo.clock_retry_ticks.max(1);
    c.retransmit_ticks = rtt2;
    c.commit_request_ticks = 2 * rtt2;
    c.recovery_timeout_ticks = 6 * rtt2;
    c.recovery_stagger_ticks = 2 * rtt2;
    c.heartbeat_ticks = rtt2;
    c
}

impl AtomicMulticast for EpaxosOrdering {
    fn multicast(
        &mut self,
        cmd: Command,
        access: Option<Access>,
        out: &mut Outbox,
    ) -> Result<(), String> {
        if self.time_ms == 0 {
            return Err(format!(
                "node {} is starting (no barrier has run yet); retry",
                self.id
            ));
        }
        let access = access.unwrap_or_else(Access::everything);
        let keys_max = self.core.config().keys_per_command_max;
        if access.objects.len() > keys_max {
            return Err(format!(
                "node {}: the command touches {} objects, more than EPaxos orders in one \
                 instance ({keys_max})",
                self.id,
                access.objects.len()
            ));
        }
        if self.pending.len() >= self.pending_commands_max {
            return Err(format!(
                "node {}: {} commands wait for room in its window; retry",
                self.id,
                self.pending.len()
            ));
        }
        if access.everything {
            self.count("epaxos_proposed_conflicting_all");
        }
        self.pending.push_back((cmd, access));
        self.flush(out);
        Ok(())
    }

    fn wants_access(&self) -> bool {
        true
    }

    fn checkpoints_at_cuts(&self) -> bool {
        true
    }

    fn truncation(&self) -> Option<Vec<u8>> {
        let t = self.core.truncated();
        t.iter()
            .any(|&s| s > 0)
            .then(|| partita_types::encode(&t.to_vec()))
    }

    fn covers(&self, position: &[u8], truncation: &[u8]) -> bool {
        match (
            decode_position(position),
            partita_types::decode::<Vec<Slot>>(truncation),
        ) {
            (Ok(p), Ok(t)) => p.exec.covers(&t),
            _ => false,
        }
    }

    fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut Outbox) -> bool {
        match msg {
            Msg::Epaxos(msg) => {
                let mut acts = Vec::new();
                self.core.on_message(from, *msg, &mut acts);
                self.absorb(acts, out);
                self.flush(out);
                true
            }
            Msg::PositionCheckpointed { instance, position } => {
                let Ok(p) = decode_position(&position) else {
                    self.count("dropped_position_undecodable");
                    return true;
                };
                if !p.exec.is_well_formed(&self.core.config().replicas)
                    || !self.core.config().replicas.contains(&from)
                {
                    self.count("dropped_position_malformed");
                    return true;
                }
                let newer = self
                    .announced
                    .get(&from)
                    .is_none_or(|(i, _)| instance >= *i);
                if newer {
                    self.announced.insert(from, (instance, p.exec));
                    self.truncate(out);
                }
                true
            }
            _ => {
                self.count("dropped_not_epaxos");
                false
            }
        }
    }

    /// The core's due, or the next barrier's ([`BarrierPolicy::next_at`]); the next
    /// tick before the first (it starts the clock) or while something waits that a
    /// tick would propose.
    fn tick_due(&self) -> TickDue {
        let proposable = self.barrier_due.is_some() || !self.pending.is_empty();
        if self.clock_ms == 0 || (proposable && self.core.can_propose()) {
            return TickDue::NEXT;
        }
        self.core.tick_due().min(self.barriers.next_at(
            self.rank,
            self.time_ms,
            self.since_barrier,
            self.last_barrier_ms,
            self.barrier_proposed_ms,
        ))
    }

    fn on_tick(&mut self, tick: u64, now_ms: u64, out: &mut Outbox) {
        self.clock_ms = self.clock_ms.max(now_ms);
        let mut acts = Vec::new();
        self.core.on_tick(tick, &mut acts);
        self.absorb(acts, out);
        self.maybe_barrier(out);
        self.flush(out);
    }

    fn on_persisted(&mut self, tokens: &[PersistToken], out: &mut Outbox) {
        // Writes complete in order, and every token is the core's.
        if let Some(&last) = tokens.iter().max() {
            let mut acts = Vec::new();
            self.core.on_persisted(last, &mut acts);
            self.absorb(acts, out);
            self.flush(out);
        }
    }

    fn delivered_up_to(&self) -> Option<Instance> {
        Some(self.delivered)
    }

    fn position(&self) -> Vec<u8> {
        partita_types::encode(&Position {
            exec: self.core.position(),
            time_ms: self.time_ms,
        })
    }

    /// A peer's checkpoint is taken if it is of this cluster and covers what the core
    /// found truncated (when it asked for one).
    fn check_position(&self, position: &[u8]) -> Result<(), String> {
        let p = decode_position(position)?;
        if !p.exec.is_well_formed(&self.core.config().replicas) {
            return Err("a position of another cluster".into());
        }
        match &self.needed {
            Some(f) if !p.exec.covers(f) => Err(format!(
                "the checkpoint stands at {:?}, below the truncation frontier {f:?}",
                p.exec.prefix
            )),
            _ => Ok(()),
        }
    }

    fn skip_to(&mut self, next: Instance, position: &[u8], out: &mut Outbox) {
        let p = decode_position(position)
            .unwrap_or_else(|e| panic!("skip_to with a position check_position refuses: {e}"));
        self.delivered = next - 1;
        self.time_ms = self.time_ms.max(p.time_ms);
        self.needed = None;
        self.count("epaxos_restored");
        let exec = match self.restore_wrong_frontier {
            true => wrong_frontier(p.exec, &self.core.config().replicas),
            false => p.exec,
        };
        let mut acts = Vec::new();
        self.core.restore(&exec, &mut acts);
        self.absorb(acts, out);
    }

    fn announce_checkpoint(&mut self, instance: Instance, position: &[u8], out: &mut Outbox) {
        let Ok(p) = decode_position(position) else {
            return;
        };
        let own_newer = self
            .announced
            .get(&self.id)
            .is_none_or(|(i, _)| instance >= *i);
        if own_newer {
            self.announced.insert(self.id, (instance, p.exec));
            self.truncate(out);
        }
        for &r in &self.core.config().replicas {
            if r != self.id {
                out.push(Action::Send {
                    to: r,
                    msg: Msg::PositionCheckpointed {
                        instance,
                        position: position.to_vec(),
                    },
                });
            }
        }
    }

    fn leader(&self) -> Option<NodeId> {
        // Leaderless: clients stay with their nearest replica.
        None
    }

    fn leads(&self) -> Option<Ballot> {
        None
    }

    fn conflicting_decisions(&self) -> u64 {
        self.core
            .drops()
            .0
            .get(partita_consensus::epaxos::CONFLICTING_COMMIT)
            .copied()
            .unwrap_or(0)
    }

    /// One leaderless stream, what ran: settled when every replica delivered as many
    /// commands and nothing is in flight here (then each ran what any committed).
    fn report(&self) -> OrderingReport {
        OrderingReport {
            streams: vec![StreamReport {
                stream: 0,
                led: false,
                leads: None,
                delivered: Some(self.delivered),
            }],
            idle: self.quiescent(),
            ..Default::default()
        }
    }

    fn describe(&self) -> String {
        let st = self.core.stats();
        format!(
            "EPaxos: delivered {}, {} committed known, {} proposed ({} fast, {} slow commits), truncated at {:?}, time {} ms, quiescent {}",
            self.delivered,
            self.core.committed().count(),
            st.proposed,
            st.fast_commits,
            st.slow_commits,
            self.core.truncated(),
            self.time_ms,
            self.quiescent()
        )
    }

    fn add_counters(&self, into: &mut BTreeMap<&'static str, u64>) {
        for (k, v) in &self.counters {
            *into.entry(k).or_default() += v;
        }
        for (k, v) in &self.core.drops().0 {
            *into.entry(k).or_default() += v;
        }
        let s = self.core.stats();
        for (k, v) in [
            ("epaxos_proposed", s.proposed),
            ("epaxos_fast_commits", s.fast_commits),
            ("epaxos_slow_commits", s.slow_commits),
            ("epaxos_executed", s.executed),
            ("epaxos_recoveries_started", s.recoveries_started),
            ("epaxos_recovered_noops", s.recovered_noops),
        ] {
            *into.entry(k).or_default() += v;
        }
    }

    fn invariants(&self) {
        self.core.invariants();
        assert!(
            self.needed.is_none() || self.delivered > 0 || self.time_ms == 0,
            "a state transfer asked for before anything ran is only a restart's"
        );
    }
}
