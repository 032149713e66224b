//! Simulated clients: closed loop, one command at a time, each a session of the real
//! client core (`partita-client-core`, which the tokio client drives too): what to
//! send where, resubmissions, partition merging and early replies are the code users
//! run. This module adds the workload (think times, random operations, a quota) and
//! records the history.
//!
//! A client thinks (uniform `0..=think_ns_max`), then invokes the next operation of its
//! quota: it sends the command to its entry node (at first the cluster's coordinator,
//! or with batchers batcher `index % batchers`: `Membership::client_entry`) with
//! `reply_to` set to its replica, and waits for that replica's reply. Without a reply
//! after `timeout_ns` it resubmits the *same* command (same client id and sequence
//! number), so the replicas' reply cache answers it if it was executed already. Like
//! `partita-client`, each timeout moves the client to the next entry node of the
//! cluster's rotation (the batchers, then the acceptors: `Membership::entry_rotation`;
//! a node that does not lead batches or forwards to the one it knows), and every second
//! timeout to the next replica (the command keeps its sequence number; only `reply_to`
//! changes). Each resubmission of one command waits twice as long as the one before,
//! up to 4 × `timeout_ns` (`partita_types::timeout_backoff`): an overloaded cluster
//! whose queueing delay exceeds the timeout is not flooded with copies of every command.
//! A refusal makes it resubmit after `refused_retry_ns`. While give-up is allowed (the safety phase), a
//! command still unanswered `give_up_ns` after its invocation is abandoned and recorded
//! as `info` (outcome unknown); in the liveness phase clients never give up.
//!
//! Early replies (`[execution] early_replies`): like `partita-client`, a tentative
//! reply ([`SimClient::on_early`]) is never recorded; the operation ends, with the
//! tentative result, only when a confirmation names that very result
//! ([`partita_types::early::EarlyWait`]), or when a final reply arrives. The response
//! time is until then; the first tentative reply's time is kept in the sample.
//!
//! With the planted `unordered-query` bug the client sends read-only commands straight
//! to its replica, which is how that bug manifests.
//!
//! In the experiment mode ([`SimClient::for_bench`]) a client draws the operations of a
//! `partita bench` workload instead, thinks in whole milliseconds as the bench does,
//! has no quota (the run ends at a fixed virtual time) and keeps only the call and
//! return times of each operation ([`Sample`]), not a history.
//!
//! The client is sans-IO like the node cores: inputs are [`SimClient::on_timer`],
//! [`SimClient::on_reply`] and [`SimClient::on_refused`]; outputs are [`ClientAction`]s;
//! completed operations are appended to its history in the checker's format.
//! Invariant: at most one command outstanding; the history holds exactly one event per
//! invoked operation, once it ended.

use crate::queue::Time;
use partita_dssmr::chirper::{Chirper, ChirperCommand, Graph, Workload as ChirperWorkload};
use partita_dssmr::client::{ClientProxy, Multicast, ProxyConfig};
use partita_dssmr::kv::KvObjects;
use partita_dssmr::wire::{DsWire, WireCommand};
use partita_dssmr::ObjectService;
use partita_kv::{KvCommand, KvReply};
use std::collections::VecDeque;
use std::sync::Arc;

const MILLIS_NS: u64 = 1_000_000;
/// Key-value clients draw keys `k0`..: at most this many.
pub const KV_KEYS_MAX: u64 = 8;
use partita_btree::{BPlusTree, BatchOp, Op};
use partita_checker::{Event, Status};
use partita_client_core::{Action, ClientConfig, ClientCore, Done};
pub use partita_client_core::{ClientBugs, Topology};
use partita_kv::KvStore;
use partita_types::early::EarlyReply;
use partita_types::{ClientId, Command, NodeId, Reply};
use rand::Rng;
use serde::Serialize;

/// The client id of a DS-SMR client's moves session: its own id with this bit set
/// (the world routes both to the one simulated client).
pub const MOVER_BIT: ClientId = 1 << 62;
/// Timers of the moves session carry this bit in their generation.
const MOVER_TIMER_BIT: u64 = 1 << 63;

/// How clients behave (drawn per seed).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClientParams {
    pub think_ns_max: u64,
    pub timeout_ns: u64,
    pub give_up_ns: u64,
    pub refused_retry_ns: u64,
    /// Keys are drawn from `0..keys`: small, so that operations contend.
    pub keys: u64,
}

/// What the world must do for a client.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientAction {
    /// Send `cmd` to node `to`; `first` for the first send of an invocation (not a
    /// resubmission).
    Send {
        to: NodeId,
        cmd: Command,
        first: bool,
    },
    /// Call `on_timer(gen)` at `at`.
    Timer { at: Time, gen: u64 },
}

/// One operation completed in the experiment mode: no result is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub call_ns: Time,
    pub ret_ns: Time,
    /// B+tree operations of the command (a batch of 7 counts 7).
    pub ops: u32,
    /// Early replies: when the first tentative reply arrived (`None`: none did).
    pub tentative_ns: Option<Time>,
    /// opt-PSMR: resubmitted conservatively after a failed safety check.
    pub psmr_resubmitted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Thinking,
    Waiting,
    Done,
}

/// The client core a simulated client drives: the B+tree's, the key-value store's, or an S-SMR/DS-SMR
/// client proxy over the multicast wire (boxed: rarer, and larger).
#[allow(clippy::large_enum_variant)]
enum Core {
    Btree(ClientCore<BPlusTree>),
    /// The key-value store's (etcd's data model): its history is recorded in the
    /// key-value format and checked by the key-value checker.
    Kv(ClientCore<KvStore>),
    Ds(Box<DsClient<Chirper>>),
    /// The key-value store on S-SMR/DS-SMR (`partita_dssmr::kv`).
    DsKv(Box<DsClient<KvObjects>>),
}

/// Run `$e` with `$d` bound to the S-SMR/DS-SMR client, whichever service it runs;
/// `$other` for the other cores.
macro_rules! with_ds {
    ($core:expr, $d:ident => $e:expr, $other:expr) => {
        match $core {
            Core::Ds($d) => $e,
            Core::DsKv($d) => $e,
            Core::Btree(_) | Core::Kv(_) => $other,
        }
    };
}

/// A service that simulated S-SMR/DS-SMR clients run: what they issue and how they
/// record what came back.
pub trait DsService: ObjectService {
    /// The application's part of a client: its workload and history.
    type App: Send;
    /// Command `n` of client `id` (`swarm`: the swarm's mix, with a history).
    fn next<R: Rng>(
        app: &mut Self::App,
        id: ClientId,
        n: u64,
        swarm: bool,
        rng: &mut R,
    ) -> Self::Command;
    /// A swarm seed's command ended with `outcome` (`None`: unknown); what no correct
    /// run shows goes to `failures`.
    #[allow(clippy::too_many_arguments)]
    fn record(
        app: &mut Self::App,
        client: ClientId,
        cmd: Self::Command,
        invoked: Time,
        now: Time,
        outcome: Option<&partita_dssmr::client::Outcome<Self::Reply>>,
        failures: &mut Vec<String>,
    );
}

/// A Chirper client's workload and history.
pub struct ChirperApp {
    graph: Arc<Graph>,
    workload: ChirperWorkload,
    history: Vec<partita_checker::chirper::ChirperEvent>,
}

impl DsService for Chirper {
    type App = ChirperApp;
    fn next<R: Rng>(
        app: &mut ChirperApp,
        id: ClientId,
        n: u64,
        swarm: bool,
        rng: &mut R,
    ) -> ChirperCommand {
        let post_id = (id << 32) | n;
        if swarm {
            crate::ds::swarm_command(&app.graph, post_id, rng)
        } else {
            app.workload.next(&app.graph, post_id, rng)
        }
    }
    fn record(
        app: &mut ChirperApp,
        client: ClientId,
        cmd: ChirperCommand,
        invoked: Time,
        now: Time,
        outcome: Option<&partita_dssmr::client::Outcome<partita_dssmr::chirper::ChirperReply>>,
        failures: &mut Vec<String>,
    ) {
        let result = match outcome.map(|o| crate::ds::result_of(&cmd, o)) {
            Some(Ok(r)) => Some(r),
            Some(Err(why)) => {
                failures.push(format!("{cmd:?} failed: a member refused it: {why}"));
                None
            }
            None => None,
        };
        app.history.push(partita_checker::chirper::ChirperEvent {
            client,
            op: crate::ds::op_of(&cmd),
            invoked,
            returned: result.as_ref().map(|_| now),
            result,
        });
    }
}

/// A key-value client's keys and history on S-SMR/DS-SMR.
pub struct KvApp {
    keys: u64,
    /// The pairs workload's pairs (0: the swarm's mix).
    pairs: u64,
    events: Vec<crate::ds::KvEvent>,
}

impl DsService for KvObjects {
    type App = KvApp;
    fn next<R: Rng>(app: &mut KvApp, id: ClientId, n: u64, _swarm: bool, rng: &mut R) -> KvCommand {
        match app.pairs {
            0 => partita_kv::mix::random_command_pairs(rng, app.keys, id, n),
            pairs => partita_kv::mix::pair_puts(rng.gen_range(0..pairs), format!("c{id}-{n}")),
        }
    }
    fn record(
        app: &mut KvApp,
        client: ClientId,
        cmd: KvCommand,
        invoked: Time,
        now: Time,
        outcome: Option<&partita_dssmr::client::Outcome<KvReply>>,
        failures: &mut Vec<String>,
    ) {
        use partita_dssmr::client::Outcome;
        let reply = match outcome {
            Some(Outcome::Done(KvReply::Error(e))) => {
                failures.push(format!("{cmd:?} was refused: {}", e.error));
                None
            }
            Some(Outcome::Done(r)) => Some(r.clone()),
            Some(other) => {
                failures.push(format!("{cmd:?} ended {other:?}"));
                None
            }
            None => None,
        };
        app.events.push(crate::ds::KvEvent {
            client,
            returned: reply.as_ref().map(|_| now),
            cmd,
            invoked,
            reply,
        });
    }
}

/// A Chirper client of an S-SMR or DS-SMR cluster: the client proxy (paper 003
/// Algorithm 2) turns each application command into multicasts. The answered ones
/// (consults, accesses, creates, deletes, fallbacks) go one after another on the
/// client's session; moves go at once on a session of their own ([`Mover`]), as the
/// paper's proxy sends them, or, with `DsParams::await_moves`, on the main session
/// each waited for before the access.
pub struct DsClient<S: DsService> {
    core: ClientCore<DsWire<S>>,
    /// The moves' session (`None`: moves are awaited on the main session).
    mover: Option<Mover<S>>,
    proxy: ClientProxy<S>,
    app: S::App,
    data: u32,
    queue: VecDeque<Multicast<S::Command>>,
    /// Whether the multicast in flight is answered (a move is not).
    answered: bool,
    call_ns: Time,
    /// Commands issued.
    issued: u64,
    /// When each move command went out.
    move_times: Vec<Time>,
    /// Multicasts sent on the main session while moves were queued or in flight on
    /// the moves session.
    ahead_of_moves: u64,
    /// Swarm seeds: the swarm's mix, and the history of the application commands.
    swarm: bool,
    current: Option<S::Command>,
    /// What went wrong that no correct run shows (a member refused a multicast, the
    /// proxy stopped without an outcome).
    failures: Vec<String>,
}

/// The session a DS-SMR client's moves go out on, one at a time, answers ignored: the
/// application command does not wait for them. Its id is the client's with
/// [`MOVER_BIT`]; its timers are the client's with `MOVER_TIMER_BIT`.
struct Mover<S: DsService> {
    core: ClientCore<DsWire<S>>,
    queue: VecDeque<Multicast<S::Command>>,
    gen: u64,
    timer_at: Option<Time>,
}

/// Run `$e` with `$c` bound to whichever client core the client has.
macro_rules! with_core {
    ($self:expr, $c:ident => $e:expr) => {
        match &$self.core {
            Core::Btree($c) => $e,
            Core::Kv($c) => $e,
            Core::Ds(d) => {
                let $c = &d.core;
                $e
            }
            Core::DsKv(d) => {
                let $c = &d.core;
                $e
            }
        }
    };
    (mut $self:expr, $c:ident => $e:expr) => {
        match &mut $self.core {
            Core::Btree($c) => $e,
            Core::Kv($c) => $e,
            Core::Ds(d) => {
                let $c = &mut d.core;
                $e
            }
            Core::DsKv(d) => {
                let $c = &mut d.core;
                $e
            }
        }
    };
}

pub struct SimClient {
    pub index: u32,
    pub id: ClientId,
    core: Core,
    params: ClientParams,
    ops_left: u64,
    state: State,
    gen: u64,
    /// The deadline a timer is set for (so a new one is set only when it moves).
    timer_at: Option<Time>,
    history: Vec<Event>,
    /// Key-value clients: their history's lines (see [`SimClient::kv_history`]).
    kv_history: Vec<String>,
    /// Experiment mode: the workload and key space, think-time granularity, samples.
    bench: Option<(crate::bench::Workload, u64)>,
    /// A geo seed's client: its workload and its region.
    geo: Option<(GeoWorkload, u64)>,
    think_step_ns: u64,
    samples: Vec<Sample>,
    pub invoked: u64,
}

impl SimClient {
    /// A client with a quota of `ops` operations, starting with entry node `entry` and
    /// `replica` (one of the topology's), with planted client bugs `bugs`.
    pub fn new(
        index: u32,
        entry: NodeId,
        topology: Topology,
        replica: NodeId,
        params: ClientParams,
        ops: u64,
        bugs: ClientBugs,
    ) -> SimClient {
        let core = Core::Btree(session(index, entry, topology, replica, &params, bugs));
        SimClient::with_core(index, core, params, ops)
    }

    /// A client of the key-value store (etcd's data model): [`SimClient::new`]'s
    /// session, with commands of `partita_kv::mix` on a few of `params.keys` keys
    /// (at most [`KV_KEYS_MAX`], so that they contend).
    pub fn new_kv(
        index: u32,
        entry: NodeId,
        topology: Topology,
        replica: NodeId,
        params: ClientParams,
        ops: u64,
        bugs: ClientBugs,
    ) -> SimClient {
        let core = Core::Kv(session(index, entry, topology, replica, &params, bugs));
        SimClient::with_core(index, core, params, ops)
    }

    fn with_core(index: u32, core: Core, params: ClientParams, ops: u64) -> SimClient {
        SimClient {
            index,
            id: index as ClientId + 1,
            core,
            params,
            ops_left: ops,
            state: State::Thinking,
            gen: 0,
            timer_at: None,
            history: Vec::new(),
            kv_history: Vec::new(),
            bench: None,
            geo: None,
            think_step_ns: 1,
            samples: Vec::new(),
            invoked: 0,
        }
    }

    /// The experiment mode: operations of `workload` over keys `0..keys`, think times
    /// in multiples of `think_step_ns`, samples instead of a history.
    pub fn for_bench(
        mut self,
        workload: crate::bench::Workload,
        keys: u64,
        think_step_ns: u64,
    ) -> SimClient {
        self.bench = Some((workload, keys));
        self.think_step_ns = think_step_ns.max(1);
        self
    }

    /// A GeoPaxos+ or EPaxos seed's client in region `region`: the geo tree's
    /// operations of `workload` instead of the swarm's mix.
    pub fn for_geo(mut self, workload: GeoWorkload, region: u64) -> SimClient {
        self.geo = Some((workload, region));
        self
    }

    /// An S-SMR/DS-SMR Chirper client: `scheme` and `data` partitions over `graph`.
    /// In the experiment mode (samples, no history) it runs `workload` with no quota;
    /// on swarm seeds (`ds.swarm`) the swarm's mix, `ops` commands, with a history.
    #[allow(clippy::too_many_arguments)]
    pub fn new_ds(
        index: u32,
        entry: NodeId,
        topology: Topology,
        replica: NodeId,
        params: ClientParams,
        ds: &crate::swarm::DsParams,
        data: u32,
        graph: Arc<Graph>,
        ops: u64,
    ) -> SimClient {
        let users: Vec<_> = graph.users().collect();
        let app = ChirperApp {
            graph,
            workload: ds.workload,
            history: Vec::new(),
        };
        let mut d = ds_client::<Chirper>(index, entry, topology, replica, &params, ds, data, app);
        // Clients start knowing the initial placement (the paper's cache, warm).
        d.proxy.prefetch_initial(users);
        SimClient::with_ds_core(index, Core::Ds(Box::new(d)), params, ds.swarm, ops)
    }

    /// An S-SMR/DS-SMR client around `core`: on swarm seeds a quota of `ops` commands
    /// and a history, like the B+tree's swarm clients; in the experiment mode no quota
    /// (the run ends at a fixed virtual time), thinking in whole milliseconds as the
    /// bench does.
    fn with_ds_core(
        index: u32,
        core: Core,
        params: ClientParams,
        swarm: bool,
        ops: u64,
    ) -> SimClient {
        if swarm {
            return SimClient::with_core(index, core, params, ops);
        }
        let mut c = SimClient::with_core(index, core, params, u64::MAX);
        c.think_step_ns = MILLIS_NS;
        c
    }

    /// A key-value client of an S-SMR/DS-SMR cluster (`partita_dssmr::kv`): on swarm
    /// seeds the key-value mix on `params.keys` keys, `ops` commands, with a history;
    /// in the experiment mode the pairs workload (`ds.kv_pairs`) with no quota.
    #[allow(clippy::too_many_arguments)]
    pub fn new_ds_kv(
        index: u32,
        entry: NodeId,
        topology: Topology,
        replica: NodeId,
        params: ClientParams,
        ds: &crate::swarm::DsParams,
        data: u32,
        ops: u64,
    ) -> SimClient {
        let app = KvApp {
            keys: params.keys.clamp(2, KV_KEYS_MAX),
            pairs: ds.kv_pairs,
            events: Vec::new(),
        };
        let mut d = ds_client::<KvObjects>(index, entry, topology, replica, &params, ds, data, app);
        // Clients start knowing where the pairs' keys are hashed (the cache, warm).
        d.proxy.prefetch_initial(
            (0..ds.kv_pairs)
                .flat_map(partita_kv::mix::pair_keys)
                .map(|k| partita_dssmr::kv::key_object(&k)),
        );
        SimClient::with_ds_core(index, Core::DsKv(Box::new(d)), params, ds.swarm, ops)
    }

    /// A key-value S-SMR/DS-SMR client's history (swarm seeds).
    pub fn ds_kv_events(&self) -> &[crate::ds::KvEvent] {
        match &self.core {
            Core::DsKv(d) => &d.app.events,
            _ => &[],
        }
    }

    /// The Chirper history of a swarm seed's client (S-SMR/DS-SMR).
    pub fn ds_history(&self) -> &[partita_checker::chirper::ChirperEvent] {
        match &self.core {
            Core::Ds(d) => &d.app.history,
            _ => &[],
        }
    }

    /// What went wrong in an S-SMR/DS-SMR client that no correct run shows.
    pub fn ds_failures(&self) -> &[String] {
        with_ds!(&self.core, d => &d.failures, &[])
    }

    /// Multicasts this client sent while its moves were queued or in flight
    /// (DS-SMR clients that do not await moves; 0 for the others).
    pub fn ahead_of_moves(&self) -> u64 {
        with_ds!(&self.core, d => d.ahead_of_moves, 0)
    }

    /// When this client sent each move command (S-SMR/DS-SMR clients).
    pub fn move_times(&self) -> &[Time] {
        with_ds!(&self.core, d => &d.move_times, &[])
    }

    /// The client proxy's counters (S-SMR/DS-SMR clients).
    pub fn proxy_stats(&self) -> Option<&partita_dssmr::client::ProxyStats> {
        with_ds!(&self.core, d => Some(d.proxy.stats()), None)
    }

    /// Completed operations (experiment mode).
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The session's counters (resubmissions, refusals, late replies, ...).
    pub fn stats(&self) -> &partita_client_core::ClientStats {
        with_core!(self, c => c.stats())
    }

    /// The cluster's membership changed: enter and be answered where `topology` says
    /// from the next send on (`ClientCore::set_topology`).
    pub fn follow(&mut self, topology: partita_client_core::Topology) {
        with_core!(mut self, c => c.set_topology(topology))
    }

    /// The replica that answers now.
    pub fn replica(&self) -> NodeId {
        with_core!(self, c => c.replica())
    }

    /// Start: think, then invoke the first operation.
    pub fn start(&mut self, now: Time, rng: &mut impl Rng, out: &mut Vec<ClientAction>) {
        self.think(now, rng, out);
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Whether the client may give up on a command (the safety phase). S-SMR/DS-SMR
    /// clients never do: an application command is several multicasts, so give-ups
    /// are frequent under faults, and each unknown outcome (a follow, a delete that
    /// may or may not have happened) multiplies what the Chirper checker must search
    /// (a seed with 22 of them in 300 commands exhausted 2 million configurations).
    pub fn set_give_up_allowed(&mut self, allowed: bool) {
        let allowed = allowed && matches!(self.core, Core::Btree(_) | Core::Kv(_));
        let cfg = ClientConfig {
            give_up_ns: allowed.then_some(self.params.give_up_ns),
            ..with_core!(self, c => c.config().clone())
        };
        with_core!(mut self, c => c.set_config(cfg));
    }

    pub fn history(&self) -> &[Event] {
        &self.history
    }

    /// The command outstanding, for liveness reports: (seq, op, invoked at, sends).
    pub fn outstanding(&self) -> Option<(u64, String, Time, u64)> {
        match &self.core {
            Core::Btree(c) => c
                .outstanding()
                .map(|(seq, op, at, sends)| (seq, partita_checker::fmt_op(op), at, sends)),
            Core::Kv(c) => c
                .outstanding()
                .map(|(seq, cmd, at, sends)| (seq, format!("{cmd:?}"), at, sends)),
            Core::Ds(_) | Core::DsKv(_) => None,
        }
    }

    /// A key-value client's history: one line per operation in the key-value format
    /// (`partita_kv::history`), in the order they ended.
    pub fn kv_history(&self) -> &[String] {
        &self.kv_history
    }

    pub fn ops_left(&self) -> u64 {
        self.ops_left
    }

    /// The node commands go to now.
    pub fn entry(&self) -> NodeId {
        with_core!(self, c => c.entry())
    }

    fn timer(&mut self, at: Time, out: &mut Vec<ClientAction>) {
        self.gen += 1;
        self.timer_at = Some(at);
        out.push(ClientAction::Timer { at, gen: self.gen });
    }

    fn think(&mut self, now: Time, rng: &mut impl Rng, out: &mut Vec<ClientAction>) {
        if self.ops_left == 0 {
            self.state = State::Done;
            self.gen += 1;
            self.timer_at = None;
            return;
        }
        self.state = State::Thinking;
        let step = self.think_step_ns;
        let t = rng.gen_range(0..=self.params.think_ns_max / step) * step;
        self.timer(now + t, out);
    }

    fn invoke(&mut self, now: Time, rng: &mut impl Rng, out: &mut Vec<ClientAction>) {
        assert!(self.ops_left > 0);
        self.ops_left -= 1;
        self.invoked += 1;
        self.state = State::Waiting;
        let mut actions = Vec::new();
        match &mut self.core {
            Core::Btree(core) => {
                let op = match (self.bench, &self.geo) {
                    (Some((w, keys)), _) => {
                        crate::bench::random_op(w, rng, keys, u64::from(self.index))
                    }
                    (None, Some((w, region))) => geo_op(w, *region, rng),
                    (None, None) => random_op(rng, self.params.keys),
                };
                core.submit(op, now, &mut actions)
                    .expect("the B+tree splits every command, and one is outstanding at a time");
            }
            Core::Kv(core) => {
                let keys = self.params.keys.clamp(2, KV_KEYS_MAX);
                let cmd = partita_kv::mix::random_command(rng, keys, self.id, self.invoked);
                core.submit(cmd, now, &mut actions).expect(
                    "the key-value store splits every command, and one is outstanding at a time",
                );
            }
            Core::Ds(d) => d.invoke(self.id, now, rng, &mut actions),
            Core::DsKv(d) => d.invoke(self.id, now, rng, &mut actions),
        }
        self.after(now, actions, rng, out);
    }

    /// After every input to the client: the main session's sends, a finished
    /// command, the timer; then the moves session's.
    fn after(
        &mut self,
        now: Time,
        actions: Vec<Action>,
        rng: &mut impl Rng,
        out: &mut Vec<ClientAction>,
    ) {
        self.after_main(now, actions, rng, out);
        self.after_mover(now, Vec::new(), out);
    }

    /// After an input to the moves session (or a move queued): its sends, the next
    /// move, its timer. Finished moves are dropped: nobody waits for them.
    fn after_mover(&mut self, now: Time, actions: Vec<Action>, out: &mut Vec<ClientAction>) {
        with_ds!(&mut self.core, d => d.after_mover(now, actions, out), ())
    }

    /// Whether `client` is this client's moves session (and so the input is its).
    fn is_mover(&self, client: ClientId) -> bool {
        client & MOVER_BIT != 0
            && with_ds!(&self.core, d => d.mover.as_ref().is_some_and(|m| m.core.id() == client), false)
    }

    /// The main session's part of [`SimClient::after`].
    fn after_main(
        &mut self,
        now: Time,
        actions: Vec<Action>,
        rng: &mut impl Rng,
        out: &mut Vec<ClientAction>,
    ) {
        let mut actions = actions;
        loop {
            for Action::Send { to, cmd, first } in actions.drain(..) {
                out.push(ClientAction::Send { to, cmd, first });
            }
            match &mut self.core {
                Core::Btree(core) => {
                    if let Some(done) = core.take_done() {
                        self.finish(done);
                        self.think(now, rng, out);
                        return;
                    }
                }
                Core::Kv(core) => {
                    if let Some(d) = core.take_done() {
                        let outcome = match &d.result {
                            Ok(r) => partita_kv::history::Outcome::Ok(r),
                            Err(e) if e.not_applied() => partita_kv::history::Outcome::Fail,
                            Err(_) => partita_kv::history::Outcome::Info,
                        };
                        self.kv_history.push(partita_kv::history::event_line(
                            self.index as u64,
                            &d.cmd,
                            d.call_ns,
                            d.ret_ns,
                            outcome,
                        ));
                        self.think(now, rng, out);
                        return;
                    }
                }
                Core::Ds(_) | Core::DsKv(_) => {
                    // `Some(Some(call))`: the command ended (`call`: when it was invoked,
                    // if it was answered); `Some(None)`: the next multicast went out;
                    // `None`: nothing finished.
                    let step = with_ds!(&mut self.core, d => d.core.take_done().map(|done| {
                        d.step(done, now, &mut actions).map(|ok| ok.then_some(d.call_ns))
                    }), None);
                    match step {
                        Some(Some(finished)) => {
                            if let Some(call_ns) = finished {
                                self.samples.push(Sample {
                                    call_ns,
                                    ret_ns: now,
                                    ops: 1,
                                    tentative_ns: None,
                                    psmr_resubmitted: false,
                                });
                            }
                            self.think(now, rng, out);
                            return;
                        }
                        // The next multicast went out: send it.
                        Some(None) => continue,
                        None => {}
                    }
                }
            }
            break;
        }
        if let Some(d) = with_core!(self, c => c.deadline()) {
            if self.timer_at != Some(d) {
                self.timer(d, out);
            }
        }
        with_core!(self, c => c.invariants());
    }

    fn finish(&mut self, d: Done<BPlusTree>) {
        let (status, result) = match &d.result {
            Ok(r) => (Status::Ok, Some(r)),
            Err(e) if e.not_applied() => (Status::Fail, None),
            Err(_) => (Status::Info, None),
        };
        if self.bench.is_some() {
            if status == Status::Ok {
                self.samples.push(Sample {
                    call_ns: d.call_ns,
                    ret_ns: d.ret_ns,
                    ops: d.cmd.btree_ops() as u32,
                    tentative_ns: d.tentative_ns,
                    psmr_resubmitted: d.psmr_resubmitted,
                });
            }
            return;
        }
        self.history.push(Event::new(
            self.index as u64,
            &d.cmd,
            d.call_ns,
            d.ret_ns,
            status,
            result,
        ));
    }

    /// A timer set earlier fired (stale generations are ignored).
    pub fn on_timer(
        &mut self,
        now: Time,
        gen: u64,
        rng: &mut impl Rng,
        out: &mut Vec<ClientAction>,
    ) {
        if gen & MOVER_TIMER_BIT != 0 {
            let mut actions = Vec::new();
            with_ds!(&mut self.core, d => {
                if let Some(mv) = d.mover.as_mut().filter(|m| MOVER_TIMER_BIT | m.gen == gen) {
                    mv.timer_at = None;
                    mv.core.on_timer(now, &mut actions);
                }
            }, ());
            self.after_mover(now, actions, out);
            return;
        }
        if gen != self.gen {
            return;
        }
        self.timer_at = None;
        match self.state {
            State::Thinking => self.invoke(now, rng, out),
            State::Done => {}
            State::Waiting => {
                let mut actions = Vec::new();
                with_core!(mut self, c => c.on_timer(now, &mut actions));
                self.after(now, actions, rng, out);
            }
        }
    }

    /// A reply arrived (possibly late, for an earlier command, or duplicated).
    /// `from`: the replica that sent it; `leader`: its leader hint.
    pub fn on_reply(
        &mut self,
        now: Time,
        from: NodeId,
        reply: &Reply,
        leader: Option<NodeId>,
        rng: &mut impl Rng,
        out: &mut Vec<ClientAction>,
    ) {
        let mut actions = Vec::new();
        if self.is_mover(reply.client) {
            with_ds!(&mut self.core, d => d.mover_core().on_reply(from, reply, leader, now, &mut actions), ());
            self.after_mover(now, actions, out);
            return;
        }
        with_core!(mut self, c => c.on_reply(from, reply, leader, now, &mut actions));
        if self.state == State::Waiting {
            self.after(now, actions, rng, out);
        }
    }

    /// A tentative reply or a confirmation arrived from replica `from`.
    pub fn on_early(
        &mut self,
        now: Time,
        from: NodeId,
        e: &EarlyReply,
        rng: &mut impl Rng,
        out: &mut Vec<ClientAction>,
    ) {
        let mut actions = Vec::new();
        if self.is_mover(e.client()) {
            with_ds!(&mut self.core, d => d.mover_core().on_early(from, e, now, &mut actions), ());
            self.after_mover(now, actions, out);
            return;
        }
        with_core!(mut self, c => c.on_early(from, e, now, &mut actions));
        if self.state == State::Waiting {
            self.after(now, actions, rng, out);
        }
    }

    /// The node refused the command: resubmit it a little later.
    pub fn on_refused(
        &mut self,
        now: Time,
        client: ClientId,
        seq: u64,
        leader: Option<NodeId>,
        rng: &mut impl Rng,
        out: &mut Vec<ClientAction>,
    ) {
        if self.is_mover(client) {
            with_ds!(&mut self.core, d => d.mover_core().on_refused(seq, leader, now), ());
            self.after_mover(now, Vec::new(), out);
            return;
        }
        with_core!(mut self, c => c.on_refused(seq, leader, now));
        if self.state == State::Waiting {
            self.after(now, Vec::new(), rng, out);
        }
    }
}

impl<S: DsService> DsClient<S> {
    /// Issue the client's next command.
    fn invoke<R: Rng>(&mut self, id: ClientId, now: Time, rng: &mut R, actions: &mut Vec<Action>) {
        self.issued += 1;
        let cmd = S::next(&mut self.app, id, self.issued, self.swarm, rng);
        if self.swarm {
            self.current = Some(cmd.clone());
        }
        let mut ms = Vec::new();
        self.proxy.submit(cmd, &mut ms);
        self.queue.extend(ms);
        self.call_ns = now;
        if !self.send_next(now, actions) {
            self.failures
                .push("the client proxy sent nothing for a command".into());
        }
    }

    /// After an input to the moves session (or a move queued): its sends, the next
    /// move, its timer. Finished moves are dropped: nobody waits for them.
    fn after_mover(&mut self, now: Time, mut actions: Vec<Action>, out: &mut Vec<ClientAction>) {
        let data = self.data;
        let d = self;
        let Some(mv) = d.mover.as_mut() else {
            return;
        };
        loop {
            let _ = mv.core.take_done();
            if mv.core.is_busy() {
                break;
            }
            let Some(m) = mv.queue.pop_front() else {
                break;
            };
            let w = WireCommand {
                dests: m.dests,
                data,
                cmd: m.cmd,
            };
            mv.core
                .submit(w, now, &mut actions)
                .expect("one move at a time, to the cluster's partitions");
        }
        for Action::Send { to, cmd, first } in actions.drain(..) {
            out.push(ClientAction::Send { to, cmd, first });
        }
        if let Some(at) = mv.core.deadline() {
            if mv.timer_at != Some(at) {
                mv.gen += 1;
                mv.timer_at = Some(at);
                out.push(ClientAction::Timer {
                    at,
                    gen: MOVER_TIMER_BIT | mv.gen,
                });
            }
        }
        mv.core.invariants();
    }

    fn mover_core(&mut self) -> &mut ClientCore<DsWire<S>> {
        &mut self.mover.as_mut().expect("a moves session").core
    }

    /// Hand the next queued multicast to the client core, and the moves before it to
    /// the moves session when it has one. Whether a multicast went to the client core.
    fn send_next(&mut self, now: Time, actions: &mut Vec<Action>) -> bool {
        let m = loop {
            let Some(m) = self.queue.pop_front() else {
                return false;
            };
            if matches!(m.cmd, partita_dssmr::DsCommand::Move { .. }) {
                self.move_times.push(now);
            }
            match self.mover.as_mut() {
                // Queued here; `SimClient::after_mover` sends it.
                Some(mv) if !m.answered => mv.queue.push_back(m),
                _ => break m,
            }
        };
        self.answered = m.answered;
        if self
            .mover
            .as_ref()
            .is_some_and(|mv| !mv.queue.is_empty() || mv.core.is_busy())
        {
            self.ahead_of_moves += 1;
        }
        let w = WireCommand {
            dests: m.dests,
            data: self.data,
            cmd: m.cmd,
        };
        self.core
            .submit(w, now, actions)
            .expect("one multicast at a time, to the cluster's partitions");
        true
    }

    /// A multicast finished: feed its answer to the proxy and send what comes next.
    /// `Some(true)`: the application command finished; `Some(false)`: it ended without
    /// an answer (an error of the client core); `None`: another multicast went out.
    fn step(
        &mut self,
        done: Done<DsWire<S>>,
        now: Time,
        actions: &mut Vec<Action>,
    ) -> Option<bool> {
        match done.result {
            Ok(reply) => {
                if self.answered {
                    let mut ms = Vec::new();
                    let outcome = self.proxy.on_reply(reply, &mut ms);
                    self.queue.extend(ms);
                    if let Some(o) = outcome {
                        self.queue.clear();
                        self.record(now, Some(&o));
                        return Some(true);
                    }
                }
            }
            Err(_) => {
                // Given up (or refused for good): the outcome is unknown.
                self.proxy.abandon();
                self.queue.clear();
                self.record(now, None);
                return Some(false);
            }
        }
        if !self.send_next(now, actions) {
            // The proxy waits for nothing more (cannot happen with a correct proxy).
            self.proxy.abandon();
            self.failures
                .push("the client proxy stopped without an outcome".into());
            self.record(now, None);
            return Some(false);
        }
        None
    }

    /// Swarm seeds: the command in flight ended with `outcome` (`None`: unknown).
    fn record(&mut self, now: Time, outcome: Option<&partita_dssmr::client::Outcome<S::Reply>>) {
        let Some(cmd) = self.current.take() else {
            return;
        };
        let client = self.core.id();
        S::record(
            &mut self.app,
            client,
            cmd,
            self.call_ns,
            now,
            outcome,
            &mut self.failures,
        );
    }
}

/// A simulated S-SMR/DS-SMR client of service `S`, before its application's part is
/// filled in (see [`SimClient::new_ds`]).
#[allow(clippy::too_many_arguments)]
fn ds_client<S: DsService>(
    index: u32,
    entry: NodeId,
    topology: Topology,
    replica: NodeId,
    params: &ClientParams,
    ds: &crate::swarm::DsParams,
    data: u32,
    app: S::App,
) -> DsClient<S> {
    let id = index as ClientId + 1;
    // Never giving up (see `set_give_up_allowed`).
    let cfg = ClientConfig {
        give_up_ns: None,
        ..core_config(params)
    };
    let mut pcfg = ProxyConfig::new(ds.scheme, data as usize);
    pcfg.static_map = ds.static_map;
    let mut proxy = ClientProxy::new(pcfg, index as u64 + 1);
    if ds.gather_where_most {
        proxy.set_placement(Box::new(partita_dssmr::client::MostObjectsPlacement));
    }
    // The moves' session gives up on a move after `give_up_ns` (a lost move costs a
    // retry, not a wrong answer), so it never stalls behind one.
    let mover = (!ds.await_moves).then(|| Mover {
        core: ClientCore::new(
            id | MOVER_BIT,
            topology.clone(),
            core_config(params),
            entry,
            replica,
        ),
        queue: VecDeque::new(),
        gen: 0,
        timer_at: None,
    });
    DsClient {
        core: ClientCore::new(id, topology, cfg, entry, replica),
        mover,
        proxy,
        app,
        data,
        queue: VecDeque::new(),
        answered: false,
        call_ns: 0,
        issued: 0,
        move_times: Vec::new(),
        ahead_of_moves: 0,
        swarm: ds.swarm,
        current: None,
        failures: Vec::new(),
    }
}

/// Client `index`'s session of the client core, for any service.
fn session<S: partita_service::StateMachine>(
    index: u32,
    entry: NodeId,
    topology: Topology,
    replica: NodeId,
    params: &ClientParams,
    bugs: ClientBugs,
) -> ClientCore<S> {
    let id = index as ClientId + 1;
    ClientCore::new(id, topology, core_config(params), entry, replica).with_bugs(bugs)
}

/// The client core's settings from the client's parameters.
fn core_config(params: &ClientParams) -> ClientConfig {
    ClientConfig {
        timeout_ns: params.timeout_ns,
        give_up_ns: Some(params.give_up_ns),
        refused_retry_ns: params.refused_retry_ns,
    }
}

/// What a GeoPaxos+ or EPaxos seed's clients do (paper 004's operations: read, next,
/// prev, update, insert; the geo B+tree has no delete, range or batch).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GeoWorkload {
    /// Keys `0..keys` present at the start, their leaves placed by key range on the
    /// regions' replicas (region `r` holds `r * keys / regions ..`).
    pub keys: u64,
    /// Keys are drawn from `0..key_space` (beyond `keys`: inserts add keys).
    pub key_space: u64,
    pub regions: u64,
    /// Reads (read, next, prev) among the operations, in percent.
    pub read_percent: u32,
    /// Inserts among the writes (the others update), in percent.
    pub insert_percent: u32,
    /// Operations on the initial keys of the client's own region (locality), in
    /// percent.
    pub local_percent: u32,
    /// Operations on the hot keys `hot_lo..hot_lo + hot_len`, in percent.
    pub hot_percent: u32,
    pub hot_lo: u64,
    pub hot_len: u64,
}

/// One operation of a geo seed's client in region `region` (see [`GeoWorkload`]).
pub fn geo_op(w: &GeoWorkload, region: u64, rng: &mut impl Rng) -> Op {
    let roll = rng.gen_range(0..100u32);
    let key = if roll < w.local_percent {
        let regions = w.regions.max(1);
        let r = region % regions;
        let lo = r * w.keys / regions;
        let hi = ((r + 1) * w.keys / regions).max(lo + 1);
        rng.gen_range(lo..hi)
    } else if roll < w.local_percent.saturating_add(w.hot_percent) {
        w.hot_lo + rng.gen_range(0..w.hot_len.max(1))
    } else {
        rng.gen_range(0..w.key_space.max(1))
    };
    // Values far above every initial value (each key's own), drawn from a large
    // range, so that a value identifies its write.
    let value = rng.gen_range(1_000_000..1_000_000_000u64);
    if rng.gen_range(0..100) < w.read_percent {
        match rng.gen_range(0..20) {
            0..3 => Op::Next { key },
            3..6 => Op::Prev { key },
            _ => Op::Read { key },
        }
    } else if rng.gen_range(0..100) < w.insert_percent {
        Op::Insert { key, value }
    } else {
        Op::Update { key, value }
    }
}

/// One operation of the mix: every B+tree operation, on keys `0..keys`.
pub fn random_op(rng: &mut impl Rng, keys: u64) -> Op {
    let keys = keys.max(1);
    let key = |rng: &mut dyn rand::RngCore| rng.gen_range(0..keys);
    // Values are drawn from a large range so that a value identifies its write: a
    // lost or duplicated write then shows up unambiguously in the history.
    let value = |rng: &mut dyn rand::RngCore| rng.gen_range(1..1_000_000_000u64);
    match rng.gen_range(0..100) {
        0..20 => Op::Read { key: key(rng) },
        20..40 => Op::Insert {
            key: key(rng),
            value: value(rng),
        },
        40..52 => Op::Delete { key: key(rng) },
        52..66 => Op::Update {
            key: key(rng),
            value: value(rng),
        },
        66..76 => {
            let min = key(rng);
            let span = rng.gen_range(0..=keys / 3);
            Op::Query {
                min,
                max: min + span,
            }
        }
        76..82 => Op::Next { key: key(rng) },
        82..88 => Op::Prev { key: key(rng) },
        _ => {
            let n = rng.gen_range(2..=4);
            Op::Batch(
                (0..n)
                    .map(|_| {
                        if rng.gen_bool(0.6) {
                            BatchOp::Insert {
                                key: key(rng),
                                value: value(rng),
                            }
                        } else {
                            BatchOp::Delete { key: key(rng) }
                        }
                    })
                    .collect(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_btree::OpResult;
    use partita_service::ServiceCodec;
    use partita_types::PartitionLayout;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn params() -> ClientParams {
        ClientParams {
            think_ns_max: 0,
            timeout_ns: 100,
            give_up_ns: 250,
            refused_retry_ns: 30,
            keys: 8,
        }
    }

    fn client(ops: u64) -> SimClient {
        let topology = Topology {
            entries: vec![1, 2, 3],
            batchers: false,
            replicas: vec![4, 5],
            layout: PartitionLayout::default(),
            session_lease_ms: None,
            psmr: None,
            rings: Vec::new(),
        };
        SimClient::new(0, 1, topology, 4, params(), ops, ClientBugs::default())
    }

    fn timer(out: &[ClientAction]) -> (Time, u64) {
        out.iter()
            .rev()
            .find_map(|a| match a {
                ClientAction::Timer { at, gen } => Some((*at, *gen)),
                _ => None,
            })
            .expect("a timer")
    }

    fn sent(out: &[ClientAction]) -> Command {
        out.iter()
            .find_map(|a| match a {
                ClientAction::Send { cmd, .. } => Some(cmd.clone()),
                _ => None,
            })
            .expect("a send")
    }

    /// The reply that opens `client`'s session at instance 1.
    fn opened(client: ClientId) -> Reply {
        Reply {
            client,
            seq: 0,
            instance: 1,
            result: Ok(partita_types::session_reply(1)),
        }
    }

    #[test]
    fn resubmits_the_same_command_then_gives_up_with_info() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut c = client(2);
        let mut out = Vec::new();
        c.start(0, &mut rng, &mut out);
        let (at, gen) = timer(&out);
        out.clear();
        c.on_timer(at, gen, &mut rng, &mut out);
        let open = sent(&out);
        assert!(open.is_open(), "the session opens first");
        out.clear();
        c.on_reply(1, 4, &opened(open.client), None, &mut rng, &mut out);
        let first = sent(&out);
        assert_eq!((first.seq, first.reply_to, first.session), (1, 4, 1));
        let (at, gen) = timer(&out);
        out.clear();
        c.on_timer(at, gen, &mut rng, &mut out);
        let again = sent(&out);
        assert_eq!((again.seq, &again.body), (first.seq, &first.body));
        assert_eq!(c.stats().resubmissions, 1);
        // Past give-up, the next timeout abandons it.
        let (at, gen) = timer(&out);
        out.clear();
        c.on_timer(at.max(300), gen, &mut rng, &mut out);
        assert_eq!(c.history().len(), 1);
        assert_eq!(c.history()[0].status, Status::Info);
        // A stale timer does nothing.
        let before = out.len();
        c.on_timer(301, gen, &mut rng, &mut out);
        assert_eq!(out.len(), before);
    }

    #[test]
    fn a_reply_ends_the_operation_in_the_history() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut c = client(1);
        let mut out = Vec::new();
        c.start(0, &mut rng, &mut out);
        let (at, gen) = timer(&out);
        out.clear();
        c.on_timer(at, gen, &mut rng, &mut out);
        let open = sent(&out);
        out.clear();
        c.on_reply(1, 4, &opened(open.client), None, &mut rng, &mut out);
        let cmd = sent(&out);
        let reply = |seq| Reply {
            client: cmd.client,
            seq,
            instance: 3,
            result: Ok(BPlusTree::encode_reply(&OpResult::Value(None))),
        };
        c.on_reply(5, 4, &reply(7), None, &mut rng, &mut out);
        assert_eq!(c.stats().late_replies, 1);
        assert!(c.history().is_empty());
        c.on_reply(6, 4, &reply(cmd.seq), None, &mut rng, &mut out);
        assert_eq!(c.history().len(), 1);
        assert_eq!(c.history()[0].ret_ns, 6);
        assert!(c.is_done(), "quota of one operation used");
    }

    #[test]
    fn the_mix_covers_every_operation() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..1000 {
            seen.insert(random_op(&mut rng, 8).name());
        }
        assert_eq!(seen.len(), 8, "{seen:?}");
    }
}
