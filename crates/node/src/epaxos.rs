//! EPaxos behind the atomic-multicast seam: paper 004's leaderless baseline
//! (`partita_consensus::epaxos`) on the same service and clients as GeoPaxos+.
//!
//! - **Who.** Every replica of a cluster with `[ordering] protocol = "epaxos"` is an
//!   EPaxos replica: it leads the instances of its own column and proposes there the
//!   requests of the clients that chose it (their nearest replica, as with GeoPaxos+).
//!   Messages travel as [`Msg::Epaxos`]; the core's records go to the node's one
//!   write-ahead log as [`AcceptorRecord::Epaxos`], with the node's tokens (the log
//!   holds nothing else, so the core's token numbering is the log's).
//! - **The service.** The geo B+tree's operations (read, insert, update, next, prev)
//!   on paper 001's B+tree (`partita_btree::BPlusTree`), which starts with keys
//!   `0..keys`, each its own value, as the geo tree does. Values are the client's
//!   `u64`s (the geo tree pads them to 100 bytes; only 5% of paper 004's operations
//!   carry one). Delete, range queries and batches are answered as rejected, as on
//!   GeoPaxos+.
//! - **Conflicts.** Two commands interfere when they share a key and one writes it
//!   (`EpaxosCommand`). READ reads its key; UPDATE and INSERT write theirs. NEXT and
//!   PREV read every key from theirs to the neighbour this replica's tree holds when it
//!   proposes them: a command that could change their answer inserts a key in that
//!   range or updates the neighbour, so it interferes and is ordered with them
//!   everywhere; keys outside cannot change it because no operation deletes keys.
//!   Without a neighbour, or with more than [`NEIGHBOUR_SPAN_MAX`] keys between, the
//!   command interferes with everything.
//! - **Execution.** The core emits committed commands in its execution order
//!   (dependencies first, strongly connected components by `(seq, instance)`); they
//!   run here on the tree, and the replica that proposed a client's request answers it
//!   ([`AtomicMulticast::take_replies`]). Replicas execute interfering commands in
//!   one order, and the others commute, so every tree ends with the same contents
//!   (the digest is over the contents).
//! - **Exactly once.** A client resubmits an unanswered request with the same
//!   sequence number, possibly through another replica, so one request may be
//!   proposed twice. Copies of a write write the same key, so they interfere and run
//!   in the same order everywhere: the first runs, later ones are answered from a
//!   per-client window of the last [`DEDUP_PER_CLIENT`] writes' results, alike at every
//!   replica. (A copy committed after its client issued that many later writes would
//!   run again; a crash of its proposer and a recovery that slow is the window's
//!   limit, as GeoPaxos+'s window has one.) Reads run again harmlessly. A request
//!   already executed here is answered at once from the window.
//! - **Sessions.** None, as on GeoPaxos+: a session open is answered at once.
//! - **Restarts.** A restarted replica rebuilds its instances from its log and runs
//!   every committed command again from the start on a fresh tree; there are no
//!   checkpoints and no log truncation (the core has none yet).
//!
//! The node core sees an ordering that delivers nothing (`delivered_up_to` is `None`).

use partita_btree::{BPlusTree, Op};
use partita_consensus::epaxos::{
    Epaxos, EpaxosAction, EpaxosBugs, EpaxosCommand, EpaxosConfig, EpaxosOutbox, KeyAccess,
};
use partita_consensus::{AcceptorRecord, Action, Msg, Outbox, PersistToken};
use partita_service::StateMachine;
use partita_types::{ClientId, Command, FieldError, Instance, NodeId, Refusal, Reply};
use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};

use crate::geo::{decode_geo_command, GeoSetup};
use crate::ordering::AtomicMulticast;
use crate::{NodeSetup, UnsafeBugs};

/// NEXT and PREV read at most this many keys up to their neighbour; further apart,
/// they interfere with everything.
pub const NEIGHBOUR_SPAN_MAX: u64 = 64;

/// Writes remembered per client for deduplication (see the module doc).
pub const DEDUP_PER_CLIENT: usize = 64;

/// The results of a client's last writes, by sequence number.
type ClientWrites = BTreeMap<u64, Result<partita_types::Payload, Refusal>>;

/// EPaxos for a node: its core, the tree it executes on, and the requests it answers.
pub struct EpaxosOrdering {
    id: NodeId,
    core: Epaxos,
    tree: BPlusTree,
    /// Requests this node proposed and must answer once they run here.
    pending: BTreeSet<(ClientId, u64)>,
    writes: BTreeMap<ClientId, ClientWrites>,
    replies: Vec<Reply>,
    /// Commands executed here (no-ops excluded), deduplicated copies included.
    executed: u64,
    /// The log's last token handed out (the core's own numbering).
    last_token: PersistToken,
    counters: BTreeMap<&'static str, u64>,
}

impl EpaxosOrdering {
    /// Node `setup.id`'s EPaxos replica, recovered from `recovered` (the node's whole
    /// log).
    pub fn new(
        setup: &NodeSetup,
        geo: &GeoSetup,
        recovered: Vec<AcceptorRecord>,
        bugs: &UnsafeBugs,
        out: &mut Outbox,
    ) -> Result<EpaxosOrdering, FieldError> {
        let id = setup.id;
        if !geo.replicas.contains(&id) {
            return Err(FieldError::new(
                "geopaxos",
                format!("node {id} is not a replica"),
            ));
        }
        let config = epaxos_config(geo);
        config
            .validate()
            .map_err(|e| FieldError::new("geopaxos.ordering", format!("EPaxos: {e}")))?;
        let mut records = Vec::with_capacity(recovered.len());
        for r in recovered {
            match r {
                AcceptorRecord::Epaxos(r) => records.push(*r),
                other => {
                    return Err(FieldError::new(
                        "geopaxos.ordering",
                        format!(
                            "node {id}'s log holds a record that is not EPaxos's \
                             ({other:?}): it was written by another configuration"
                        ),
                    ))
                }
            }
        }
        let last_token = records.len() as PersistToken;
        let mut core = Epaxos::recover(id, config, records);
        core.set_bugs(EpaxosBugs {
            skip_slow_path_when_deps_differ: bugs.epaxos_skip_slow_path,
        });
        let mut tree = BPlusTree::new();
        for key in 0..geo.keys {
            tree.apply(&Op::Insert { key, value: key });
        }
        let mut o = EpaxosOrdering {
            id,
            core,
            tree,
            pending: BTreeSet::new(),
            writes: BTreeMap::new(),
            replies: Vec::new(),
            executed: 0,
            last_token,
            counters: BTreeMap::new(),
        };
        // Committed instances of an earlier life run again at the first handler call.
        let mut acts = Vec::new();
        o.core.on_tick(0, &mut acts);
        o.absorb(acts, out);
        Ok(o)
    }

    /// The tree this replica executes on.
    pub fn tree(&self) -> &BPlusTree {
        &self.tree
    }

    /// The EPaxos core (for status and tests).
    pub fn core(&self) -> &Epaxos {
        &self.core
    }

    /// Commands executed here.
    pub fn executed(&self) -> u64 {
        self.executed
    }

    /// Nothing in flight here: no phase driven, no instance awaited or left to run.
    pub fn quiescent(&self) -> bool {
        self.core.is_quiescent()
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
                EpaxosAction::Execute { command, .. } => match command {
                    Some(c) => self.execute(&c.command),
                    None => self.count("epaxos_noops_executed"),
                },
            }
        }
    }

    /// Run a committed client command; answer it if this node proposed it.
    fn execute(&mut self, cmd: &Command) {
        self.executed += 1;
        let op = match decode_geo_command(cmd) {
            Ok(op) => op,
            Err(_) => {
                // Only checked commands are proposed; the same bytes everywhere.
                self.count("epaxos_commands_undecodable");
                return;
            }
        };
        let key = (cmd.client, cmd.seq);
        let write = !<BPlusTree as StateMachine>::is_read_only(&op);
        let result = if let Some(r) = write
            .then(|| self.writes.get(&cmd.client)?.get(&cmd.seq).cloned())
            .flatten()
        {
            self.count("epaxos_duplicates_skipped");
            r
        } else {
            let r = Ok(<BPlusTree as StateMachine>::encode_reply(
                &self.tree.apply(&op),
            ));
            if write {
                let w = self.writes.entry(cmd.client).or_default();
                w.insert(cmd.seq, r.clone());
                while w.len() > DEDUP_PER_CLIENT {
                    w.pop_first();
                }
            }
            r
        };
        if self.pending.remove(&key) {
            self.replies.push(Reply {
                client: cmd.client,
                seq: cmd.seq,
                instance: self.executed,
                result,
            });
        }
    }

    /// What `op` reads and writes, as EPaxos compares commands (see the module doc).
    fn conflicts(&self, op: &Op) -> (Vec<KeyAccess>, bool) {
        let read = |key| KeyAccess { key, write: false };
        let span = |lo: u64, hi: u64| -> Option<Vec<KeyAccess>> {
            (hi - lo <= NEIGHBOUR_SPAN_MAX).then(|| (lo..=hi).map(read).collect())
        };
        match *op {
            Op::Read { key } => (vec![read(key)], false),
            Op::Update { key, .. } | Op::Insert { key, .. } => {
                (vec![KeyAccess { key, write: true }], false)
            }
            Op::Next { key } => match self.tree.get_next(key) {
                Some((n, _)) if n > key => match span(key, n) {
                    Some(keys) => (keys, false),
                    None => (Vec::new(), true),
                },
                _ => (Vec::new(), true),
            },
            Op::Prev { key } => match self.tree.get_prev(key) {
                Some((p, _)) if p < key => match span(p, key) {
                    Some(keys) => (keys, false),
                    None => (Vec::new(), true),
                },
                _ => (Vec::new(), true),
            },
            Op::Delete { .. } | Op::Query { .. } | Op::Batch(_) => (Vec::new(), true),
        }
    }

    fn reply_now(&mut self, cmd: &Command, result: Result<partita_types::Payload, Refusal>) {
        self.replies.push(Reply {
            client: cmd.client,
            seq: cmd.seq,
            instance: self.executed,
            result,
        });
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
    fn multicast(&mut self, cmd: Command, out: &mut Outbox) -> Result<(), String> {
        if cmd.is_open() {
            // No sessions (see the module doc): answered at once.
            self.reply_now(&cmd, Ok(partita_types::session_reply(1)));
            return Ok(());
        }
        let op = match decode_geo_command(&cmd) {
            Ok(op) => op,
            Err(why) => {
                self.count("epaxos_requests_rejected");
                self.reply_now(&cmd, Err(Refusal::Rejected(why)));
                return Ok(());
            }
        };
        if let Some(r) = self
            .writes
            .get(&cmd.client)
            .and_then(|w| w.get(&cmd.seq))
            .cloned()
        {
            // Executed here already: committed, so its result stands.
            self.count("epaxos_answered_from_window");
            self.reply_now(&cmd, r);
            return Ok(());
        }
        let key = (cmd.client, cmd.seq);
        if self.pending.contains(&key) {
            // Proposed already; it answers when it runs.
            self.count("epaxos_resubmissions_in_flight");
            return Ok(());
        }
        let (keys, all) = self.conflicts(&op);
        let ecmd = EpaxosCommand::new(cmd, keys, all);
        let mut acts = Vec::new();
        match self.core.propose(ecmd, &mut acts) {
            Ok(_) => {
                self.pending.insert(key);
                if all {
                    self.count("epaxos_proposed_conflicting_all");
                }
                self.absorb(acts, out);
                Ok(())
            }
            Err(e) => {
                self.absorb(acts, out);
                Err(format!("node {}: {e}; retry", self.id))
            }
        }
    }

    fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut Outbox) -> bool {
        let Msg::Epaxos(msg) = msg else {
            self.count("dropped_not_epaxos");
            return false;
        };
        let mut acts = Vec::new();
        self.core.on_message(from, *msg, &mut acts);
        self.absorb(acts, out);
        true
    }

    fn on_tick(&mut self, tick: u64, _now_ms: u64, out: &mut Outbox) {
        let mut acts = Vec::new();
        self.core.on_tick(tick, &mut acts);
        self.absorb(acts, out);
    }

    fn on_persisted(&mut self, tokens: &[PersistToken], out: &mut Outbox) {
        // Writes complete in order, and every token is the core's.
        if let Some(&last) = tokens.iter().max() {
            let mut acts = Vec::new();
            self.core.on_persisted(last, &mut acts);
            self.absorb(acts, out);
        }
    }

    fn delivered_up_to(&self) -> Option<Instance> {
        None
    }

    fn skip_to(&mut self, _next: Instance, _position: &[u8], _out: &mut Outbox) {}

    fn announce_checkpoint(&mut self, _instance: Instance, _position: &[u8], _out: &mut Outbox) {}

    fn leader(&self) -> Option<NodeId> {
        // Leaderless: clients stay with their nearest replica.
        None
    }

    fn leads(&self) -> Option<partita_types::Ballot> {
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

    /// One leaderless stream, the commits: settled when every replica knows the same
    /// number of them and nothing is in flight (then each committed everything any
    /// committed).
    fn report(&self) -> crate::OrderingReport {
        crate::OrderingReport {
            streams: vec![crate::StreamReport {
                stream: 0,
                led: false,
                leads: None,
                delivered: Some(self.core.committed().count() as u64),
            }],
            idle: self.quiescent(),
            ..Default::default()
        }
    }

    fn describe(&self) -> String {
        let st = self.core.stats();
        format!(
            "EPaxos: executed {}, {} committed known, {} proposed ({} fast, {} slow commits), quiescent {}",
            self.executed,
            self.core.committed().count(),
            st.proposed,
            st.fast_commits,
            st.slow_commits,
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
            ("epaxos_executed", self.executed),
            ("epaxos_pending", self.pending.len() as u64),
        ] {
            *into.entry(k).or_default() += v;
        }
    }

    fn executes(&self) -> Option<crate::ordering::Executed> {
        Some(crate::ordering::Executed {
            executed: self.executed,
            digest: <BPlusTree as StateMachine>::digest(&self.tree),
            entries: <BPlusTree as StateMachine>::len(&self.tree),
        })
    }

    fn take_replies(&mut self, out: &mut Vec<Reply>) {
        out.append(&mut self.replies);
    }

    fn invariants(&self) {
        self.core.invariants();
        assert!(self.replies.is_empty(), "replies left here");
    }

    fn executing_ordering(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
