//! One node process: the roles of the cluster file on real TCP and a real WAL.
//!
//! A single task owns every core of the node (acceptor, coordinator, learner, replica
//! or the client-server baseline) and handles one event at a time: a peer message, a
//! client request, a tick, or a batch of completed WAL writes. Actions the cores emit are
//! carried out in order: sends go to per-peer queues (messages to itself are handled
//! locally, without a socket), persists go to the WAL's group-commit thread, deliveries
//! go to the replica, whose replies go to the client's connection.
//!
//! Checkpoints: the core serializes a replica checkpoint inside the event loop (one
//! pass over the tree); writing it (file, fsync, rename, directory fsync, pruning) runs
//! on a blocking thread, and its completion comes back as an event. A failed checkpoint
//! write stops the node, like a failed WAL fsync, except on a full disk: then the
//! checkpoint is abandoned and a later one tried (the WAL holds everything it covers),
//! and the WAL holds its writes back until space returns (the node stops voting and its
//! status says why). Log truncation: the core names the
//! oldest acceptor record still needed by its persist token; tokens are positions in
//! the log since the records recovered at start, so token `t` is LSN
//! `t + lsn_offset`, with the offset fixed at start and checked against every WAL
//! completion.
//!
//! The emulated WAN (cluster file `[wan]`): a frame to a peer in another region is
//! stamped with its release time (now + the one-way delay between the regions) when
//! the event loop queues it, and the peer's link task writes it no earlier than that
//! (see [`spawn_peer_link`]). The core never sees the delay; frames to clients are not
//! delayed here (the client delays its own side).
//!
//! Transport security (cluster file `[tls]`, `partita_net::tls`): with TLS every
//! accepted connection must complete a mutual-TLS handshake with a certificate of the
//! cluster's CA, and the identity it proves must match its hello (a `PeerHello` from
//! node `n` needs node `n`'s certificate, a `ClientHello` a client certificate); peer
//! links verify that the peer they dial is the node they meant. A refused connection
//! is logged with its reason and counted (`connections_refused`); the node serves
//! everyone else. Without `[tls]` the node listens only on loopback
//! (`partita_config::tls::check_plain_bind`).

use crate::checkpoint::CheckpointStore;
use anyhow::{bail, Context};
use partita_config::{ClusterConfig, Durability, Mode, Role};
use partita_consensus::{AcceptorRecord, Msg};
use partita_net::tls::{NodeTls, PeerIdentity};
use partita_net::{spawn_writer, BoxWrite, FrameBytes, FrameReader};
use partita_node::{CheckpointBytes, NodeCore, Output, UnsafeBugs};
use partita_types::{Ballot, ClientId, Command, NodeId};
use partita_wire::{to_frame, NodeStatus, Wire};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

/// Options of `partita node`.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub cluster: ClusterConfig,
    pub id: NodeId,
    /// The service the replica runs; its name must be the cluster file's `service`.
    pub service: std::sync::Arc<dyn partita_smr::ServiceFactory>,
    pub data_dir: PathBuf,
    /// Planted bugs, for tests that show the checks can fail: `lose-acked-writes`
    /// (replicas undo every 5th mutation after acknowledging it) and
    /// `reexecute-duplicates` (resubmitted commands execute again).
    pub unsafe_bugs: Vec<String>,
    /// A thread per role: every connection (accepting, reading and decoding frames,
    /// TLS, encoding and writing) on a thread of its own, the event loop (ordering,
    /// execution, replies) on the caller's. The WAL's fsync has its own thread either
    /// way. Off: everything on the caller's runtime.
    pub io_thread: bool,
}

/// The thread the connections run on when [`NodeOptions::io_thread`] says so: a
/// single-threaded runtime of its own, stopped (and with it every connection) when
/// this is dropped.
struct IoThread {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl IoThread {
    fn start(node: NodeId) -> anyhow::Result<IoThread> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building the connections' runtime")?;
        let handle = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("node-{node}-io"))
            .spawn(move || {
                rt.block_on(async {
                    let _ = stopped.await;
                });
                // Dropping the runtime drops every connection task and its socket.
                drop(rt);
            })
            .context("starting the connections' thread")?;
        Ok(IoThread {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for IoThread {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

enum Event {
    Peer {
        from: NodeId,
        msg: Msg,
    },
    ClientHello {
        conn: u64,
        client: ClientId,
        tx: mpsc::Sender<FrameBytes>,
    },
    Request {
        cmd: Command,
    },
    Status {
        tx: mpsc::Sender<FrameBytes>,
    },
    /// `partita snapshot save`: a checkpoint goes back on `tx` in chunks.
    Snapshot {
        tx: mpsc::Sender<FrameBytes>,
    },
    /// `partita member`: the change's outcome goes back on `tx`.
    Member {
        change: partita_types::members::MemberChange,
        tx: mpsc::Sender<FrameBytes>,
    },
    Closed {
        conn: u64,
    },
    Persisted {
        tokens: Vec<u64>,
        first_lsn: u64,
        elapsed: std::time::Duration,
    },
    /// `GET /metrics`: the text goes back on `tx`.
    Metrics {
        tx: tokio::sync::oneshot::Sender<String>,
    },
    CheckpointSaved {
        instance: u64,
        /// The error and whether it was a full disk (not fatal: the WAL still holds
        /// everything the checkpoint would have covered).
        result: Result<PathBuf, (String, bool)>,
    },
    WalFailed {
        error: String,
    },
}

/// What the identity file of node `node` of cluster `cluster_id` says.
fn identity_text(cluster_id: u64, node: NodeId) -> String {
    format!("cluster_id = {cluster_id}\nnode_id = {node}\n")
}

/// Prepare replica `node`'s data directory under `data_dir` (`partita node
/// --data-dir`) for a new cluster `cluster_id`, holding `checkpoint` (one of that
/// node's, as `partita_smr::seed_checkpoint` writes them) as its newest: the node
/// restores it when it starts. The directory must not exist yet, or be empty.
pub fn seed_replica_dir(
    data_dir: &Path,
    cluster_id: u64,
    node: NodeId,
    checkpoint: &[u8],
    fsync: bool,
) -> anyhow::Result<PathBuf> {
    let dir = data_dir.join(format!("node-{node}"));
    if std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()) {
        bail!("{} already holds a node's data", dir.display());
    }
    let info = partita_smr::verify_checkpoint(checkpoint)?;
    if (info.cluster_id, info.node_id) != (cluster_id, node) {
        bail!(
            "the checkpoint is node {} of cluster {}, not node {node} of cluster {cluster_id}",
            info.node_id,
            info.cluster_id
        );
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    CheckpointStore::new(dir.join("checkpoint"), fsync).save(info.instance, checkpoint)?;
    let path = dir.join("identity");
    std::fs::write(&path, identity_text(cluster_id, node))
        .with_context(|| format!("writing {}", path.display()))?;
    if fsync {
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("syncing {}", dir.display()))?;
    }
    Ok(dir)
}

/// The identity file that ties a data directory to one node of one cluster.
fn check_identity(dir: &Path, cluster_id: u64, node: NodeId) -> anyhow::Result<()> {
    let path = dir.join("identity");
    let expect = identity_text(cluster_id, node);
    match std::fs::read_to_string(&path) {
        Ok(text) if text == expect => Ok(()),
        Ok(text) => bail!(
            "data directory {} belongs to another cluster or node:\n{}expected:\n{}refusing to start; nothing was changed",
            dir.display(),
            text,
            expect
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let nonempty = std::fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(false);
            if nonempty {
                bail!("data directory {} has files but no identity file; refusing to start", dir.display());
            }
            std::fs::create_dir_all(dir)?;
            std::fs::write(&path, expect)?;
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

struct Node {
    id: NodeId,
    cfg: ClusterConfig,
    core: NodeCore,
    peers: HashMap<NodeId, PeerQueue>,
    clients: HashMap<ClientId, (u64, mpsc::Sender<FrameBytes>)>,
    wal: Option<partita_wal::GroupCommit>,
    /// Records the WAL's queue had no room for (it is full only when the disk stalls
    /// or is full), in order, handed over as room returns: the event loop never
    /// blocks on the disk, so a node with a full disk still answers status probes and
    /// says why it does not vote.
    wal_backlog: VecDeque<(Vec<u8>, u64)>,
    /// LSN of the record with persist token `t` is `t + lsn_offset`; `None` once a
    /// completion contradicted it (then the log is never truncated).
    lsn_offset: Option<u64>,
    checkpoints: Option<CheckpointStore>,
    events: mpsc::UnboundedSender<Event>,
    counters: BTreeMap<&'static str, u64>,
    out: Vec<Output>,
    /// How often a connection waited for room in the bounded inbox.
    inbox_full_waits: Arc<std::sync::atomic::AtomicU64>,
    /// Connections refused for their credentials (TLS handshake or identity).
    connections_refused: Arc<std::sync::atomic::AtomicU64>,
    /// When this replica first delivered a value of each new ballot (the newest
    /// `DELIVERED_BALLOTS_KEPT`), stamped right after the step that delivered it.
    delivered_ballots: VecDeque<partita_wire::DeliveredBallot>,
    metrics: crate::metrics::NodeMetrics,
    /// Drained from the core after each step for the metrics (kept to reuse its room).
    observed: Vec<partita_consensus::Observation>,
    /// IP multicast for Phase 2A (`[multicast]`), when the cluster file asks for it.
    mcast: Option<crate::multicast::Multicast>,
    /// While the event loop drains the connections' inbox, requests are stepped
    /// without carrying out their outputs; one [`Node::perform`] follows the drain.
    deferring: bool,
    /// Membership requests waiting for their outcome, by request number.
    member_requests: HashMap<u64, mpsc::Sender<FrameBytes>>,
    member_request_seq: u64,
    /// What a link to a replica added at run time needs: TLS, and the runtime the
    /// connections run on.
    link_tls: Option<Arc<partita_net::tls::rustls::ClientConfig>>,
    /// With TLS, the nodes whose certificates identify them (the ones added at run
    /// time join as their addresses arrive).
    node_tls: Option<Arc<NodeTls>>,
    io_handle: tokio::runtime::Handle,
    /// The membership epoch the peer links were last brought up to.
    links_epoch: u64,
}

/// At most this many more events taken from the connections' inbox after the one the
/// loop woke for, before the outputs of their requests are carried out together (the
/// replies of a drain leave in one write per connection).
const INBOX_DRAIN_MAX: usize = 256;

impl Node {
    /// Note a new ballot in the decided stream (cheap: one comparison per step).
    fn note_delivered_ballot(&mut self) {
        self.core.drain_observations(&mut self.observed);
        if !self.observed.is_empty() {
            self.metrics
                .observe(&self.observed, std::time::Instant::now());
            self.observed.clear();
        }
        let b = self.core.delivered_ballot();
        if self.delivered_ballots.back().is_none_or(|d| d.ballot < b) && b != Ballot::ZERO {
            self.metrics.leader_changes.inc();
            if self.delivered_ballots.len() == partita_wire::DELIVERED_BALLOTS_KEPT {
                self.delivered_ballots.pop_front();
            }
            let instance = self.core.replica().map_or(0, |r| r.last_instance());
            self.delivered_ballots
                .push_back(partita_wire::DeliveredBallot {
                    ballot: b,
                    unix_ms: wall_clock_ms(),
                    instance,
                });
        }
    }

    fn count(&mut self, what: &'static str) {
        *self.counters.entry(what).or_default() += 1;
    }

    fn send_peer(&mut self, to: NodeId, frame: FrameBytes) {
        match self.peers.get(&to) {
            Some(PeerQueue { tx, delay }) => {
                // The emulated WAN: the link writes the frame no earlier than this.
                let release = (!delay.is_zero()).then(|| tokio::time::Instant::now() + *delay);
                if tx.try_send((frame, release)).is_err() {
                    self.count("dropped_send_queue_full");
                    debug!(to, "peer queue full or closed: message dropped");
                }
            }
            None => {
                self.count("dropped_unknown_peer");
                warn!(to, "message for an unknown peer dropped");
            }
        }
    }

    /// Links to the replicas and acceptors added at run time that have none yet (their
    /// addresses come with the change), and the stop of a node that was removed.
    fn sync_members(&mut self) {
        let epoch = self.core.members_epoch();
        if epoch == self.links_epoch {
            return;
        }
        self.links_epoch = epoch;
        for (peer, addr) in self.core.added_addresses() {
            if let Some(t) = &self.node_tls {
                // Its certificate names a node of the cluster now: its connections
                // are taken as node `peer`'s.
                t.add_node(peer);
            }
            if peer == self.id || self.peers.contains_key(&peer) {
                continue;
            }
            info!(peer, %addr, "a node joined: linking to it");
            let (tx, rx) = mpsc::channel(partita_net::SEND_QUEUE_FRAMES_MAX);
            {
                let _on = self.io_handle.enter();
                spawn_peer_link(
                    self.id,
                    self.cfg.cluster.id,
                    peer,
                    addr,
                    self.link_tls.clone(),
                    rx,
                );
            }
            self.peers.insert(
                peer,
                PeerQueue {
                    tx,
                    delay: std::time::Duration::ZERO,
                },
            );
        }
    }

    /// Carry out what the core asked for, in order.
    fn perform(&mut self) {
        self.sync_members();
        let mut out = std::mem::take(&mut self.out);
        // Encode each distinct message once even when it goes to several peers.
        let mut prev: Option<(Msg, FrameBytes)> = None;
        let mut it = out.drain(..).peekable();
        while let Some(o) = it.next() {
            match o {
                Output::Send { to, msg }
                    if self.mcast.is_some() && matches!(msg, Msg::Phase2A { .. }) =>
                {
                    // The run of identical sends: one datagram if they address exactly
                    // a group's other members, else TCP as below.
                    let mut dests = vec![to];
                    while let Some(Output::Send { msg: next, .. }) = it.peek() {
                        if !same_msg(next, &msg) {
                            break;
                        }
                        if let Some(Output::Send { to, .. }) = it.next() {
                            dests.push(to);
                        }
                    }
                    let frame = Arc::new(to_frame(&Wire::Peer(msg.clone())));
                    let mut sorted = dests.clone();
                    sorted.sort_unstable();
                    sorted.dedup();
                    let sent = self
                        .mcast
                        .as_ref()
                        .and_then(|m| m.group_for(&msg, &sorted).map(|g| m.send(g, &frame)));
                    match sent {
                        Some(true) => self.count("multicast_sent"),
                        Some(false) => {
                            self.count("multicast_fallback_tcp");
                            dests.iter().for_each(|&t| self.send_peer(t, frame.clone()));
                        }
                        None => dests.iter().for_each(|&t| self.send_peer(t, frame.clone())),
                    }
                    prev = Some((msg, frame));
                }
                Output::Send { to, msg } => {
                    let frame = match &prev {
                        Some((p, f)) if same_msg(p, &msg) => f.clone(),
                        _ => {
                            let f = Arc::new(to_frame(&Wire::Peer(msg.clone())));
                            prev = Some((msg, f.clone()));
                            f
                        }
                    };
                    self.send_peer(to, frame);
                }
                Output::Persist { token, record } => {
                    let bytes = partita_types::encode(&record);
                    assert!(self.wal.is_some(), "persist on a node without a WAL");
                    self.wal_backlog.push_back((bytes, token));
                    self.submit_backlog();
                }
                Output::Reply(reply) => {
                    let client = reply.client;
                    let leader = self.core.leader();
                    self.send_client(client, || Wire::Reply { reply, leader }, "dropped_reply");
                }
                Output::Early(e) => {
                    let client = e.client();
                    self.send_client(client, || Wire::Early(e), "dropped_early_reply");
                }
                Output::Refused {
                    client,
                    seq,
                    reason,
                } => {
                    let leader = self.core.leader();
                    self.send_client(
                        client,
                        || Wire::Refused {
                            client,
                            seq,
                            reason,
                            leader,
                        },
                        "dropped_refusal",
                    )
                }
                Output::SaveCheckpoint { instance, bytes } => {
                    let Some(store) = self.checkpoints.clone() else {
                        panic!("checkpoint from a node without a replica");
                    };
                    let events = self.events.clone();
                    self.count("checkpoint_writes");
                    tokio::task::spawn_blocking(move || {
                        let started = std::time::Instant::now();
                        let result = store
                            .save(instance, &bytes)
                            .map_err(|e| (format!("{e:#}"), crate::checkpoint::is_no_space(&e)));
                        if result.is_ok() {
                            info!(
                                instance,
                                bytes = bytes.len(),
                                write_ms = started.elapsed().as_millis() as u64,
                                "checkpoint written"
                            );
                        }
                        let _ = events.send(Event::CheckpointSaved { instance, result });
                    });
                }
                Output::MemberDone { request, result } => {
                    match &result {
                        Ok(m) => info!(epoch = m.epoch, at = m.at, "membership change applied"),
                        Err(why) => warn!(%why, "membership change refused"),
                    }
                    if let Some(tx) = self.member_requests.remove(&request) {
                        let _ = tx.try_send(Arc::new(to_frame(&Wire::MemberReply(result))));
                    }
                }
                Output::TruncateLog { below_token } => {
                    let what = match (&self.wal, self.lsn_offset) {
                        (Some(w), Some(offset)) => {
                            debug!(
                                below_token,
                                below_lsn = below_token + offset,
                                "WAL prefix truncation"
                            );
                            w.request_truncate_prefix(below_token + offset);
                            "wal_truncations_requested"
                        }
                        _ => "wal_truncations_skipped",
                    };
                    self.count(what);
                }
            }
        }
        drop(it);
        self.out = out;
        self.core.invariants();
    }

    /// Hand the WAL what its queue has room for, in order.
    fn submit_backlog(&mut self) {
        let Some(w) = &self.wal else { return };
        while let Some((bytes, token)) = self.wal_backlog.pop_front() {
            match w.try_submit(bytes, token) {
                Ok(()) => {}
                Err(partita_wal::SubmitError::Full { payload, token }) => {
                    self.wal_backlog.push_front((payload, token));
                    *self.counters.entry("wal_queue_full").or_default() += 1;
                    return;
                }
                // Stopped: the failure is on its way as an event and stops the node.
                Err(e) => {
                    error!("WAL refused a record: {e}");
                    return;
                }
            }
        }
    }

    fn send_client(&mut self, client: ClientId, wire: impl FnOnce() -> Wire, what: &'static str) {
        match self.clients.get(&client) {
            Some((_, tx)) => {
                if tx.try_send(Arc::new(to_frame(&wire()))).is_err() {
                    self.count(what);
                }
            }
            None => self.count("dropped_client_gone"),
        }
    }

    fn status(&self) -> NodeStatus {
        let node = self.cfg.node(self.id).expect("own node");
        let core_counters = self.core.counters();
        let mut counters: Vec<(String, u64)> = self
            .counters
            .iter()
            .chain(core_counters.iter())
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        counters.push((
            "inbox_full_waits".into(),
            self.inbox_full_waits
                .load(std::sync::atomic::Ordering::Relaxed),
        ));
        counters.push((
            "connections_refused".into(),
            self.connections_refused
                .load(std::sync::atomic::Ordering::Relaxed),
        ));
        if let Some(m) = &self.mcast {
            let load =
                |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
            counters.push(("multicast_received".into(), load(&m.received)));
            counters.push(("multicast_refused".into(), load(&m.refused)));
        }
        let report = self.core.ordering_report();
        let leads = self.core.leads();
        let acceptor = report.acceptor;
        let replica = self.core.replica();
        counters.extend(report.role_counters);
        if let Some(w) = &self.wal {
            let st = w.stats();
            counters.push(("wal_no_space_stalls".into(), st.no_space_stalls));
            counters.push(("wal_no_space_retries".into(), st.no_space_retries));
            counters.push(("wal_backlog".into(), self.wal_backlog.len() as u64));
        }
        if let Some(r) = replica {
            let st = r.stats();
            counters.push(("commands_executed".into(), st.commands_executed));
            counters.push(("reply_cache_clients".into(), r.cached_clients() as u64));
            if self.cfg.execution.is_speculative() {
                counters.push(("speculated".into(), st.speculated));
                counters.push(("speculation_confirmed".into(), st.speculation_confirmed));
                counters.push(("speculation_rolled_back".into(), st.speculation_rolled_back));
            }
            if self.cfg.execution.threads() > 0 {
                counters.push(("psmr_parallel".into(), st.psmr_parallel));
                counters.push(("psmr_synchronous".into(), st.psmr_synchronous));
                counters.push(("psmr_checks_passed".into(), st.psmr_passed));
                counters.push(("psmr_checks_failed".into(), st.psmr_failed));
                counters.push(("psmr_alone".into(), st.psmr_alone));
            }
        }
        NodeStatus {
            node: self.id,
            cluster_id: self.cfg.cluster.id,
            service: self.cfg.cluster.service.clone(),
            roles: node
                .roles
                .iter()
                .map(|r| format!("{r:?}").to_lowercase())
                .chain(leads.map(|_| "coordinator".to_string()))
                .collect(),
            mode: format!("{:?}", self.cfg.cluster.mode).to_lowercase(),
            protocol: self.cfg.ordering.protocol().to_string(),
            durability: self.cfg.cluster.durability.to_string(),
            coordinator: leads.is_some(),
            ballot: leads.map(|b| b.to_string()),
            decided_up_to: report.decided_up_to,
            executed_up_to: replica.map(|r| r.last_instance()),
            digest: replica.map(|r| r.digest()),
            entries: replica.map(|r| r.len()),
            promised: acceptor.map(|a| a.promised.to_string()),
            accepted: acceptor.map(|a| a.accepted),
            accepted_max_instance: acceptor.map(|a| a.accepted_max_instance),
            counters: {
                if let Some(a) = acceptor {
                    counters.push(("truncated_below".into(), a.truncated_below));
                }
                if replica.is_some() {
                    counters.push(("checkpoint_instance".into(), self.core.checkpoint_durable()));
                    if let Some((got, total)) = self.core.transfer_progress() {
                        counters.push(("state_transfer_bytes_received".into(), got));
                        counters.push(("state_transfer_bytes_total".into(), total));
                    }
                }
                counters
            },
            pid: std::process::id(),
            delivered_ballots: self.delivered_ballots.iter().copied().collect(),
            wal_stall: self.wal.as_ref().and_then(|w| w.stalled()),
            members: self
                .core
                .ordering()
                .and_then(|o| o.members())
                .map(|_| self.core.members().clone()),
            replica_state: replica.map(|_| {
                let members = self.core.members();
                match () {
                    _ if self.core.removed().is_some() => "removed",
                    _ if self.core.serves() => "serving",
                    _ if members.is_learner(self.id) => "learner",
                    _ => "joining",
                }
                .to_string()
            }),
        }
    }
}

/// Whether two messages encode the same; cheap for values (pointer equality), since
/// `send_all` clones one message for every destination.
fn same_msg(a: &Msg, b: &Msg) -> bool {
    match (a, b) {
        (
            Msg::Phase2A {
                ballot: b1,
                instance: i1,
                value: v1,
                decided: d1,
                ring: r1,
                part: p1,
            },
            Msg::Phase2A {
                ballot: b2,
                instance: i2,
                value: v2,
                decided: d2,
                ring: r2,
                part: p2,
            },
        ) => b1 == b2 && i1 == i2 && Arc::ptr_eq(v1, v2) && d1 == d2 && r1 == r2 && p1 == p2,
        (
            Msg::DecideValue {
                instance: i1,
                value: v1,
            },
            Msg::DecideValue {
                instance: i2,
                value: v2,
            },
        ) => i1 == i2 && Arc::ptr_eq(v1, v2),
        // Never sent twice in a row to several peers; comparing them costs more.
        (Msg::Phase1B { .. }, _) | (Msg::LearnReply { .. }, _) | (Msg::ForwardBatch { .. }, _) => {
            false
        }
        _ => a == b,
    }
}

/// A frame queued for a peer, with the time its link may write it (the emulated WAN;
/// `None`: at once).
type Queued = (FrameBytes, Option<tokio::time::Instant>);

/// The event loop's side of a peer link: its bounded queue and the one-way delay of
/// the emulated WAN between this node's region and the peer's (zero within a region
/// and without `[wan]`).
struct PeerQueue {
    tx: mpsc::Sender<Queued>,
    delay: std::time::Duration,
}

/// Keep a link to one peer: connect (and reconnect), announce ourselves, then write
/// whatever the node queues for it, coalescing queued frames into one write.
///
/// The emulated WAN: a frame with a release time is written no earlier than that.
/// The delay is the same for every frame of the link, so release times never
/// decrease along the queue and holding the head holds everything behind it: FIFO is
/// kept, and the frames in flight are those in the link's bounded queue
/// ([`partita_net::SEND_QUEUE_FRAMES_MAX`]; a full queue drops and counts, as without
/// delay). The task sleeps until the head's release time; the event loop never waits.
///
/// With TLS the link verifies that the server it reached holds `peer`'s certificate
/// from the cluster's CA, and presents its own. A link whose connections fail or break
/// at once (a refused handshake, a peer that closes on our hello) backs off, doubling
/// up to [`LINK_BACKOFF_MAX`], and logs the first failure and every 20th, so that a
/// misconfigured peer does not flood either log.
fn spawn_peer_link(
    me: NodeId,
    cluster_id: u64,
    peer: NodeId,
    // ip:port or name:port: a name is resolved at every connection attempt.
    addr: String,
    tls: Option<Arc<partita_net::tls::rustls::ClientConfig>>,
    mut rx: mpsc::Receiver<Queued>,
) {
    use tokio::io::AsyncWriteExt;
    tokio::spawn(async move {
        let mut backoff = std::time::Duration::from_millis(20);
        let mut tls_failures = 0u64;
        let hello = to_frame(&Wire::PeerHello {
            from: me,
            cluster_id,
        });
        let mut buf: Vec<u8> = Vec::with_capacity(256 * 1024);
        // A frame taken from the queue before its release time: the head of the line.
        let mut held: Option<Queued> = None;
        loop {
            let stream = match TcpStream::connect(addr.as_str()).await {
                Ok(s) => s,
                Err(_) => {
                    // Drop what queued up while the peer was unreachable: consensus
                    // retransmits what matters, and stale messages only cost work.
                    held = None;
                    while rx.try_recv().is_ok() {}
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    if rx.is_closed() {
                        return;
                    }
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let (mut rd, mut stream): (partita_net::BoxRead, BoxWrite) = match &tls {
                None => {
                    let (r, w) = stream.into_split();
                    (Box::new(r), Box::new(w))
                }
                Some(cfg) => match partita_net::tls::connect(cfg, peer, stream).await {
                    Ok(s) => partita_net::split_boxed(s),
                    Err(e) => {
                        if tls_failures.is_multiple_of(20) {
                            warn!(peer, %addr, failures = tls_failures + 1, "TLS link to node {peer} failed: {e}");
                        }
                        tls_failures += 1;
                        held = None;
                        while rx.try_recv().is_ok() {}
                        backoff = (backoff * 2).min(LINK_BACKOFF_MAX);
                        tokio::time::sleep(backoff).await;
                        if rx.is_closed() {
                            return;
                        }
                        continue;
                    }
                },
            };
            let opened = tokio::time::Instant::now();
            buf.clear();
            buf.extend_from_slice(&hello);
            loop {
                // Everything released by now, in order, up to 1 MiB per write.
                let now = tokio::time::Instant::now();
                while buf.len() < 1 << 20 {
                    let Some((f, release)) = held.take().or_else(|| rx.try_recv().ok()) else {
                        break;
                    };
                    if release.is_some_and(|r| r > now) {
                        held = Some((f, release));
                        break;
                    }
                    buf.extend_from_slice(&f);
                }
                if !buf.is_empty() {
                    // (Flushing is a no-op on TCP; TLS may hold the last record.)
                    if stream.write_all(&buf).await.is_err() || stream.flush().await.is_err() {
                        break;
                    }
                    buf.clear();
                }
                let (f, release) = match held.take() {
                    Some(q) => q,
                    // While idle, watch the connection too: a peer that died or
                    // restarted closed it, and the first frame written into a closed
                    // connection can vanish without an error (the kernel takes it
                    // before the reset comes back). Reconnecting as soon as the peer
                    // closes means the next message, however late (a new leader's
                    // Phase 1A to an acceptor this node has not written to since that
                    // acceptor restarted), goes out on a live connection.
                    None => tokio::select! {
                        q = rx.recv() => match q {
                            Some(q) => q,
                            None => return,
                        },
                        () = peer_closed(&mut rd) => break,
                    },
                };
                if let Some(r) = release {
                    tokio::time::sleep_until(r).await;
                }
                debug_assert!(release.is_none_or(|r| r <= tokio::time::Instant::now()));
                buf.extend_from_slice(&f);
            }
            // A connection that broke within a second: back off (see above).
            backoff = if opened.elapsed() < std::time::Duration::from_secs(1) {
                (backoff * 2).min(LINK_BACKOFF_MAX)
            } else {
                std::time::Duration::from_millis(20)
            };
            if opened.elapsed() >= std::time::Duration::from_secs(1) {
                tls_failures = 0;
            }
            tokio::time::sleep(backoff).await;
        }
    });
}

/// Returns when the peer closes (or breaks) an outgoing link's connection; peers send
/// nothing on it, and whatever they might is read and ignored.
async fn peer_closed(rd: &mut partita_net::BoxRead) {
    use tokio::io::AsyncReadExt;
    let mut scratch = [0u8; 512];
    loop {
        match rd.read(&mut scratch).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Sessions one client connection may register (`partita_client::ClientGroup`).
const CLIENTS_PER_CONNECTION_MAX: usize = 4096;

/// The longest a peer link waits between attempts when its connections keep failing.
const LINK_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// The node's inbox for what connections bring (peer messages, client requests,
/// hellos, closings): bounded, so a flood of input cannot grow the node's memory. A
/// connection task whose event does not fit waits, and while it waits it reads nothing
/// from its socket: TCP flow control then pushes back on the sender (a peer link's
/// bounded send queue fills and drops, which Paxos retransmission covers; a client
/// waits). How often a connection had to wait is counted (`inbox_full_waits`).
#[derive(Clone)]
struct Inbox {
    tx: mpsc::Sender<Event>,
    full_waits: Arc<std::sync::atomic::AtomicU64>,
    /// Connections refused for their credentials.
    refused: Arc<std::sync::atomic::AtomicU64>,
}

impl Inbox {
    /// Queue `ev`, waiting while the inbox is full. Err: the node is stopping.
    async fn send(&self, ev: Event) -> Result<(), ()> {
        match self.tx.try_send(ev) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(ev)) => {
                self.full_waits
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.tx.send(ev).await.map_err(|_| ())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
        }
    }

    fn count_refused(&self) {
        self.refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Serve one accepted connection: the first frame says who it is (or, if it starts
/// with `GET `, it is an HTTP request: `/metrics`). With TLS, the handshake comes first
/// and the hello must match the identity the certificate proved (the module doc).
async fn serve_conn(
    stream: TcpStream,
    conn: u64,
    cluster_id: u64,
    events: Inbox,
    tls: Option<Arc<NodeTls>>,
) {
    use tokio::io::AsyncReadExt;
    let _ = stream.set_nodelay(true);
    let peer_addr = stream.peer_addr().ok();
    let Some(tls) = tls else {
        let mut head = [0u8; 4];
        if let Ok(Ok(4)) =
            tokio::time::timeout(std::time::Duration::from_secs(10), stream.peek(&mut head)).await
        {
            if &head == b"GET " {
                serve_http(stream, Vec::new(), events).await;
                return;
            }
        }
        let (rd, wr) = stream.into_split();
        let reader = FrameReader::new(rd);
        serve_framed(
            reader,
            Box::new(wr),
            None,
            peer_addr,
            conn,
            cluster_id,
            events,
        )
        .await;
        return;
    };
    let mut stream = match partita_net::tls::accept(&tls.server, stream).await {
        Ok(s) => s,
        Err(e) => {
            events.count_refused();
            let why = partita_net::tls::explain(&e);
            warn!(?peer_addr, "TLS handshake refused: {e}{why}");
            return;
        }
    };
    let identity = tls.peer_identity(&stream);
    // What the connection is, from its first bytes (read, not peeked: they are
    // inside TLS), then handed on with the rest.
    let mut head = [0u8; 4];
    match tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_exact(&mut head),
    )
    .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            warn!(?peer_addr, %identity, "TLS connection closed before its hello: {e}");
            return;
        }
        Err(_) => {
            warn!(?peer_addr, %identity, "TLS connection sent no hello within 10 s; closing");
            return;
        }
    }
    if &head == b"GET " {
        serve_http(stream, head.to_vec(), events).await;
        return;
    }
    let (rd, wr) = partita_net::split_boxed(stream);
    let reader = FrameReader::with_prefix(rd, &head);
    serve_framed(
        reader,
        wr,
        Some(identity),
        peer_addr,
        conn,
        cluster_id,
        events,
    )
    .await;
}

/// The framed protocol on an accepted connection, from its hello on. `identity`: what
/// the TLS certificate proved (`None`: plain TCP, nothing proved).
async fn serve_framed(
    mut reader: FrameReader,
    wr: BoxWrite,
    identity: Option<PeerIdentity>,
    peer_addr: Option<std::net::SocketAddr>,
    conn: u64,
    cluster_id: u64,
    events: Inbox,
) {
    let first = match reader.next().await {
        Ok(w) => w,
        Err(e) => {
            warn!(?peer_addr, "connection closed before hello: {e}");
            return;
        }
    };
    match first {
        Wire::PeerHello {
            from,
            cluster_id: cid,
        } => {
            if cid != cluster_id {
                warn!(from, cid, "peer of another cluster refused");
                return;
            }
            if let Some(id) = identity.filter(|&id| id != PeerIdentity::Node(from)) {
                events.count_refused();
                let why = match id {
                    PeerIdentity::Client => "; a client certificate cannot be used as a peer",
                    _ => "",
                };
                warn!(?peer_addr, from, "peer connection refused: the hello says node {from}, but the certificate is {id}{why}");
                return;
            }
            // Nothing is written back on a peer link, but the write half stays open:
            // the dialing node takes the connection's close for its peer's death and
            // reconnects at once (see `spawn_peer_link`), so a half-close would
            // look like one.
            let _open = wr;
            loop {
                match reader.next().await {
                    Ok(Wire::Peer(msg)) => {
                        if events.send(Event::Peer { from, msg }).await.is_err() {
                            return;
                        }
                    }
                    Ok(other) => {
                        warn!(
                            from,
                            "unexpected message on a peer connection: {:?}; closing",
                            std::mem::discriminant(&other)
                        );
                        return;
                    }
                    Err(partita_net::ReadError::Closed) => return,
                    Err(e) => {
                        warn!(from, "closing peer connection: {e}");
                        return;
                    }
                }
            }
        }
        Wire::ClientHello { client } => {
            if let Some(id) = identity.filter(|&id| id != PeerIdentity::Client) {
                events.count_refused();
                warn!(?peer_addr, client, "client connection refused: the certificate is {id}, not a client certificate; a node's certificate cannot be used as a client");
                return;
            }
            let tx = spawn_writer(wr);
            if events
                .send(Event::ClientHello {
                    conn,
                    client,
                    tx: tx.clone(),
                })
                .await
                .is_err()
            {
                return;
            }
            // Several sessions may share the connection (`partita_client::ClientGroup`):
            // each registers with a hello of its own, is welcomed, and gets its replies
            // here; a request must come from one of them.
            let mut clients: HashSet<ClientId> = HashSet::new();
            clients.insert(client);
            loop {
                match reader.next().await {
                    Ok(Wire::Request(cmd)) => {
                        if !clients.contains(&cmd.client) {
                            warn!(
                                client = cmd.client,
                                "request from a client not registered on this connection; closing"
                            );
                            break;
                        }
                        if events.send(Event::Request { cmd }).await.is_err() {
                            return;
                        }
                    }
                    Ok(Wire::ClientHello { client: more }) => {
                        if clients.len() >= CLIENTS_PER_CONNECTION_MAX && !clients.contains(&more) {
                            warn!(
                                client = more,
                                "more than {CLIENTS_PER_CONNECTION_MAX} clients on one connection; closing"
                            );
                            break;
                        }
                        clients.insert(more);
                        if events
                            .send(Event::ClientHello {
                                conn,
                                client: more,
                                tx: tx.clone(),
                            })
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    Ok(_) => {
                        warn!(client, "unexpected message on a client connection; closing");
                        break;
                    }
                    Err(partita_net::ReadError::Closed) => break,
                    Err(e) => {
                        warn!(client, "closing client connection: {e}");
                        break;
                    }
                }
            }
            let _ = events.send(Event::Closed { conn }).await;
        }
        // One-shot requests: answered on this connection, then it closes.
        w @ (Wire::StatusRequest | Wire::SnapshotRequest | Wire::MemberRequest(_)) => {
            let what = match w {
                Wire::StatusRequest => "status",
                Wire::SnapshotRequest => "snapshot",
                _ => "membership",
            };
            if identity == Some(PeerIdentity::Unnamed) {
                events.count_refused();
                warn!(?peer_addr, "{what} request refused: the certificate names no node of this cluster and no client");
                return;
            }
            let tx = spawn_writer(wr);
            let _ = match w {
                Wire::StatusRequest => events.send(Event::Status { tx }).await,
                Wire::MemberRequest(change) => events.send(Event::Member { change, tx }).await,
                _ => events.send(Event::Snapshot { tx }).await,
            };
        }
        _ => warn!(?peer_addr, "connection did not start with a hello; closing"),
    }
}

/// Bytes of checkpoint per [`Wire::SnapshotChunk`].
const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;

/// Send a checkpoint in chunks on a one-shot connection; the connection's writer
/// closes it when the last is out.
async fn send_snapshot(tx: mpsc::Sender<FrameBytes>, instance: u64, bytes: CheckpointBytes) {
    let total = bytes.len();
    let mut offset = 0;
    loop {
        let end = (offset + SNAPSHOT_CHUNK_BYTES).min(total);
        let chunk = Wire::SnapshotChunk {
            instance,
            total: total as u64,
            offset: offset as u64,
            bytes: bytes[offset..end].to_vec(),
        };
        if tx.send(Arc::new(to_frame(&chunk))).await.is_err() {
            return;
        }
        offset = end;
        if offset >= total {
            return;
        }
    }
}

/// One HTTP/1.1 request on a connection, then close it: `GET /metrics` answers the
/// node's metrics, any other path 404. The request head is bounded (8 KiB, 5 s).
/// `buf`: what was already read of the request (over TLS, the bytes read to tell it
/// is HTTP).
async fn serve_http<S>(mut stream: S, mut buf: Vec<u8>, events: Inbox)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let read_head = async {
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            if buf.len() > 8192 {
                return false;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        true
    };
    if !matches!(
        tokio::time::timeout(std::time::Duration::from_secs(5), read_head).await,
        Ok(true)
    ) {
        return;
    }
    let line = buf.split(|&b| b == b'\r').next().unwrap_or_default();
    let path = line.split(|&b| b == b' ').nth(1).unwrap_or_default();
    let (status, content_type, body) = if path == b"/metrics" {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if events.send(Event::Metrics { tx }).await.is_err() {
            return;
        }
        match rx.await {
            Ok(text) => ("200 OK", crate::metrics::CONTENT_TYPE, text),
            Err(_) => return,
        }
    } else {
        (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: this node serves GET /metrics\n".to_string(),
        )
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Run a node until SIGINT/SIGTERM (or a fatal error).
pub async fn run_node(opts: NodeOptions) -> anyhow::Result<()> {
    run_node_until(opts, std::future::pending()).await
}

/// Run a node until `stop` completes, SIGINT/SIGTERM, or a fatal error; then close
/// its listener and WAL (in-process tests stop and restart nodes this way).
pub async fn run_node_until(
    opts: NodeOptions,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let cfg = opts.cluster.clone();
    let id = opts.id;
    let Some(me) = cfg.node(id).cloned() else {
        bail!("node {id} is not in the cluster file")
    };
    if opts.service.name() != cfg.cluster.service {
        bail!(
            "the cluster file says service = \"{}\", but this node runs `{}`; refusing to start",
            cfg.cluster.service,
            opts.service.name()
        );
    }
    // Transport security, before anything on disk is touched: credentials that cannot
    // be used, or plain TCP off loopback, stop the node here with the reason.
    let transport = cfg.transport();
    let tls = match (&cfg.tls, transport) {
        (Some(section), partita_config::Transport::Tls) => {
            let files = section.node_files(id).map_err(|e| {
                anyhow::anyhow!(
                    "cluster file: field `{}`: {}; refusing to start",
                    e.field,
                    e.message
                )
            })?;
            let nodes = cfg.nodes.iter().map(|n| n.id).collect();
            let t = NodeTls::load(&files, nodes).with_context(|| {
                format!("node {id}: TLS credentials unusable; refusing to start")
            })?;
            info!(node = id, ca = %files.ca.display(), cert = %files.cert.display(), "mutual TLS on: peers and clients must present a certificate of the cluster CA");
            Some(Arc::new(t))
        }
        _ => None,
    };
    // Our own address: a name is resolved once, here, to the address we listen on
    // (peers resolve it again at every connection).
    let bind_addr = cfg.resolve(id).with_context(|| {
        format!(
            "node {id}: resolving its own address `{}`; refusing to start",
            cfg.dial_addr(id)
        )
    })?;
    if let Err(why) = partita_config::tls::check_plain_bind(bind_addr, transport) {
        bail!("node {id}: {why}");
    }
    if transport == partita_config::Transport::Insecure {
        warn!(
            node = id,
            "[tls] insecure = true: plain TCP, unauthenticated and unencrypted, on {bind_addr}"
        );
    }
    let dir = opts.data_dir.join(format!("node-{id}"));
    std::fs::create_dir_all(&opts.data_dir)
        .with_context(|| format!("creating {}", opts.data_dir.display()))?;
    check_identity(&dir, cfg.cluster.id, id)?;
    // Two inboxes: what the node's own threads report (WAL completions and failures,
    // checkpoint writes; bounded by the writes outstanding, which the window bounds),
    // and what connections bring (bounded: see `Inbox`).
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<Event>();
    let (net_tx, mut net_rx) = mpsc::channel::<Event>(cfg.runtime.inbox_events_max);
    let inbox = Inbox {
        tx: net_tx,
        full_waits: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        refused: Arc::new(std::sync::atomic::AtomicU64::new(0)),
    };
    let mut bugs = UnsafeBugs::default();
    for bug in &opts.unsafe_bugs {
        if let Err(e) = bugs.enable(bug) {
            bail!("{e}");
        }
        warn!("PLANTED BUG ENABLED: {bug}; this node is deliberately incorrect");
    }

    // Checkpoints before the WAL: a foreign checkpoint must be refused before anything
    // in the data directory is touched (opening the WAL may cut a torn tail).
    let mut checkpoints = None;
    let mut checkpoint = None;
    if cfg.cluster.mode == Mode::Smr && me.roles.contains(&Role::Replica) {
        let store = CheckpointStore::new(
            dir.join("checkpoint"),
            cfg.cluster.durability == Durability::Fsync,
        );
        checkpoint = store.load_newest(cfg.cluster.id, id)?;
        checkpoints = Some(store);
    }

    let mut wal = None;
    let mut recovered = Vec::new();
    let mut lsn_offset = None;
    if cfg.cluster.mode == Mode::Smr && me.roles.contains(&Role::Acceptor) {
        let mut wopts = partita_wal::WalOptions::new(cfg.cluster.id, id);
        wopts.durability = cfg.cluster.durability;
        wopts.segment_bytes_max = cfg.storage.wal_segment_bytes_max;
        wopts.preallocate_bytes = cfg.storage.wal_preallocate_bytes;
        let (w, records) = partita_wal::Wal::open(dir.join("wal"), wopts)
            .with_context(|| format!("opening the WAL in {}", dir.display()))?;
        for r in records.iter() {
            let rec: AcceptorRecord = partita_types::decode(&r.payload).with_context(|| {
                format!(
                    "WAL record {} in {} does not decode",
                    r.lsn,
                    w.dir().display()
                )
            })?;
            recovered.push(rec);
        }
        // The core numbers the recovered records 1..=n and continues from there.
        let first_lsn = records.records.first().map_or(w.next_lsn(), |r| r.lsn);
        lsn_offset = Some(first_lsn - 1);
        let tx = ev_tx.clone();
        let gc = partita_wal::GroupCommit::spawn(
            w,
            partita_wal::GroupCommitOptions::default(),
            move |c: partita_wal::Completion| match c {
                partita_wal::Completion::Durable {
                    tokens,
                    first_lsn,
                    elapsed,
                    ..
                } => {
                    let _ = tx.send(Event::Persisted {
                        tokens,
                        first_lsn,
                        elapsed,
                    });
                }
                partita_wal::Completion::Failed { error, .. } => {
                    let _ = tx.send(Event::WalFailed {
                        error: error.to_string(),
                    });
                }
            },
        )?;
        wal = Some(gc);
    }
    let n_recovered = recovered.len();
    let mut out = Vec::new();
    let (checkpoint_path, checkpoint_bytes) = match checkpoint {
        Some(l) => (Some(l.path), Some(l.bytes)),
        None => (None, None),
    };
    let mut setup = cfg.node_setup(id, opts.service.clone());
    // Proposals and decisions are noted for the commit-latency and batch-size metrics.
    setup.coordinator_config.observe = true;
    let psmr = setup.psmr;
    let mut core =
        NodeCore::recover(setup, recovered, checkpoint_bytes, bugs, &mut out).map_err(|e| {
            anyhow::anyhow!(
                "{}: {e}; refusing to start",
                checkpoint_path
                    .as_ref()
                    .map_or("checkpoint".into(), |p| p.display().to_string())
            )
        })?;
    if let Some(layout) = psmr {
        // P-SMR: the replica's worker threads on OS threads of their own.
        core.set_thread_runner(std::sync::Arc::new(partita_gang::Gang::new(
            layout.threads,
            "psmr",
            cfg.execution.spin(),
        )));
    }
    if let (Some(path), Some(r)) = (&checkpoint_path, core.replica()) {
        info!(path = %path.display(), instance = r.last_instance(), entries = r.len(), digest = r.digest(), "replica restored from its checkpoint");
    }
    if let Some(a) = core.ordering_report().acceptor {
        info!(records = n_recovered, promised = %a.promised, accepted = a.accepted, "acceptor recovered from its WAL");
    }
    let mut node = Node {
        id,
        cfg: cfg.clone(),
        core,
        peers: HashMap::new(),
        clients: HashMap::new(),
        wal,
        wal_backlog: VecDeque::new(),
        lsn_offset,
        checkpoints,
        events: ev_tx.clone(),
        counters: BTreeMap::new(),
        out,
        inbox_full_waits: inbox.full_waits.clone(),
        connections_refused: inbox.refused.clone(),
        delivered_ballots: VecDeque::new(),
        metrics: crate::metrics::NodeMetrics::new(),
        observed: Vec::new(),
        mcast: None,
        deferring: false,
        member_requests: HashMap::new(),
        member_request_seq: 0,
        link_tls: tls.as_ref().map(|t| t.client.clone()),
        node_tls: tls.clone(),
        io_handle: tokio::runtime::Handle::current(),
        links_epoch: 0,
    };
    if cfg.cluster.mode == Mode::Smr {
        // Datagrams join the connections' inbox; one that finds it full is dropped
        // (to Ring Paxos, a lost Phase 2A).
        let tx = inbox.tx.clone();
        node.mcast = crate::multicast::Multicast::open(&cfg, id, move |from, msg| {
            !matches!(
                tx.try_send(Event::Peer { from, msg }),
                Err(mpsc::error::TrySendError::Closed(_))
            )
        })
        .with_context(|| format!("node {id}: IP multicast ([multicast])"))?;
    }
    // With `io_thread`, connections (the peer links here, the accepted ones below)
    // are spawned on the connections' runtime; tasks they spawn stay there.
    let io = if opts.io_thread {
        Some(IoThread::start(id)?)
    } else {
        None
    };
    let io_handle = io
        .as_ref()
        .map_or_else(tokio::runtime::Handle::current, |t| t.handle.clone());
    node.io_handle = io_handle.clone();
    if cfg.cluster.mode == Mode::Smr {
        for n in &cfg.nodes {
            if n.id == id {
                continue;
            }
            let (tx, rx) = mpsc::channel(partita_net::SEND_QUEUE_FRAMES_MAX);
            let link_tls = tls.as_ref().map(|t| t.client.clone());
            {
                let _on = io_handle.enter();
                let addr = cfg.dial_addr(n.id).to_string();
                spawn_peer_link(id, cfg.cluster.id, n.id, addr, link_tls, rx);
            }
            let delay = cfg.node_delay(id, n.id);
            node.peers.insert(n.id, PeerQueue { tx, delay });
        }
    }
    if let Some(wan) = cfg.wan() {
        let region = me.region.as_deref().unwrap_or("?");
        let delays: Vec<String> = node
            .peers
            .iter()
            .map(|(p, q)| (*p, q.delay))
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .map(|(p, d)| format!("node {p} {} ms", d.as_secs_f64() * 1e3))
            .collect();
        info!(
            node = id,
            region,
            "WAN emulated in the driver: {}; frames to peers wait their one-way delay \
             before they are written ({}); clients delay their own side",
            wan.describe(),
            delays.join(", ")
        );
    }

    // Bound on the runtime that serves it (tokio's bind, with SO_REUSEADDR).
    let listener = io_handle
        .spawn(async move { TcpListener::bind(bind_addr).await })
        .await
        .context("the connections' runtime stopped")?
        .with_context(|| format!("binding {bind_addr}"))?;
    info!(node = id, addr = %cfg.dial_addr(id), %bind_addr, ?transport, mode = ?cfg.cluster.mode, protocol = %cfg.ordering.protocol(), durability = %cfg.cluster.durability, io_thread = opts.io_thread, "node listening");
    let accept_task = {
        let ev = inbox.clone();
        let cluster_id = cfg.cluster.id;
        let tls = tls.clone();
        io_handle.spawn(async move {
            let mut conn = 0u64;
            loop {
                match listener.accept().await {
                    Ok((s, _)) => {
                        conn += 1;
                        tokio::spawn(serve_conn(s, conn, cluster_id, ev.clone(), tls.clone()));
                    }
                    Err(e) => {
                        warn!("accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                }
            }
        })
    };
    node.perform();
    drop(inbox);
    let result = event_loop(&mut node, &mut ev_rx, &mut net_rx, &cfg, stop).await;
    // Abort is asynchronous: wait until the accept task is gone, and with it the
    // listener, so that a node restarted in the same process can bind its port at once
    // (without this wait the runtime checkpoint test failed now and then with "Address
    // already in use").
    accept_task.abort();
    let _ = accept_task.await;
    // The connections' thread stops, and with it every connection.
    drop(io);
    if let Some(w) = node.wal.take() {
        let _ = w.shutdown();
    }
    result
}

async fn event_loop(
    node: &mut Node,
    ev_rx: &mut mpsc::UnboundedReceiver<Event>,
    net_rx: &mut mpsc::Receiver<Event>,
    cfg: &ClusterConfig,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    tokio::pin!(stop);

    let mut tick = tokio::time::interval(std::time::Duration::from_millis(cfg.cluster.tick_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        // Deferred work (speculative execution) runs right after the outputs of the
        // step that caused it, before any new input: first let the connection tasks
        // (this runtime is single-threaded) write what that step sent, so that the
        // replies a decision released do not wait for the speculation.
        node.note_delivered_ballot();
        if let Some(at) = node.core.removed() {
            if let Some(why) = node.core.stop_reason() {
                bail!("stopping at instance {at}: {why}");
            }
            info!(
                instance = at,
                "this node was permanently removed from the cluster at instance {at}; stopping"
            );
            break;
        }
        if node.core.has_deferred_work() {
            tokio::task::yield_now().await;
            node.core.on_continue(&mut node.out);
            node.perform();
            continue;
        }
        tokio::select! {
            // The timer first: a tick is cheap, and one that waited behind a queue that
            // never empties would hold back a loaded node's heartbeats, retransmissions
            // and batch timers (the simulator gives ticks the same place). Then the
            // node's own completions: they release votes and replies.
            biased;
            _ = tick.tick() => {
                node.submit_backlog();
                node.core.on_tick(ordered_clock_ms(), &mut node.out);
                if !node.out.is_empty() { node.perform(); }
            }
            ev = ev_rx.recv() => {
                let Some(ev) = ev else { break };
                node.handle(ev)?;
            }
            ev = net_rx.recv() => {
                let Some(ev) = ev else { break };
                // What else queued meanwhile, up to a bound: the requests' outputs
                // (their replies, with connections on another thread) go out together.
                node.deferring = true;
                let mut stepped = node.handle(ev);
                for _ in 0..INBOX_DRAIN_MAX {
                    if stepped.is_err() {
                        break;
                    }
                    match net_rx.try_recv() {
                        Ok(ev) => stepped = node.handle(ev),
                        Err(_) => break,
                    }
                }
                node.deferring = false;
                stepped?;
                node.perform();
            }
            _ = tokio::signal::ctrl_c() => { info!("interrupted; stopping"); break; }
            _ = sigterm.recv() => { info!("terminated; stopping"); break; }
            _ = &mut stop => { info!("stop requested; stopping"); break; }
        }
    }
    Ok(())
}

/// Milliseconds since the Unix epoch, as the system clock says (for people: when a
/// ballot was delivered).
fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The clock values are stamped with (ordered time: session leases): the wall clock
/// read once when the process starts, then advanced by the monotonic clock, so it
/// never jumps when the system clock is stepped (an NTP correction forward would
/// expire leases early; backward, hold ordered time still). Nodes' clocks need to agree
/// only roughly (a leader whose clock lags holds the ordered time still until it
/// catches up; see `Value::time_ms`).
fn ordered_clock_ms() -> u64 {
    static CLOCK: std::sync::OnceLock<AnchoredClock> = std::sync::OnceLock::new();
    CLOCK
        .get_or_init(|| AnchoredClock::new(wall_clock_ms(), std::time::Instant::now()))
        .at(std::time::Instant::now())
}

/// A wall-clock reading carried forward by a monotonic clock.
#[derive(Clone, Copy, Debug)]
struct AnchoredClock {
    wall_ms: u64,
    at: std::time::Instant,
}

impl AnchoredClock {
    fn new(wall_ms: u64, at: std::time::Instant) -> AnchoredClock {
        AnchoredClock { wall_ms, at }
    }
    /// Milliseconds at monotonic instant `now` (never before the anchor's reading).
    fn at(&self, now: std::time::Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.at).as_millis();
        self.wall_ms
            .saturating_add(u64::try_from(elapsed).unwrap_or(u64::MAX))
    }
}

impl Node {
    /// One event from an inbox. An error stops the node (a failed write).
    fn handle(&mut self, ev: Event) -> anyhow::Result<()> {
        let node = self;
        {
            {
                match ev {
                    Event::Peer { from, msg } => {
                        node.core.on_peer(from, msg, &mut node.out);
                        node.perform();
                    }
                    Event::ClientHello { conn, client, tx } => {
                        let _ =
                            tx.try_send(Arc::new(to_frame(&Wire::ClientWelcome { node: node.id })));
                        node.clients.insert(client, (conn, tx));
                    }
                    Event::Request { cmd } => {
                        node.core.on_request(cmd, &mut node.out);
                        if !node.deferring {
                            node.perform();
                        }
                    }
                    Event::Status { tx } => {
                        let _ =
                            tx.try_send(Arc::new(to_frame(&Wire::Status(Box::new(node.status())))));
                    }
                    Event::Member { change, tx } => {
                        node.member_request_seq += 1;
                        let request = node.member_request_seq;
                        info!(%change, "membership change requested");
                        node.member_requests.insert(request, tx);
                        node.core.on_member_request(request, change, &mut node.out);
                        node.perform();
                    }
                    Event::Snapshot { tx } => match node.core.backup_checkpoint() {
                        Some((instance, bytes)) => {
                            info!(
                                instance,
                                bytes = bytes.len(),
                                "sending a checkpoint for a backup"
                            );
                            tokio::spawn(send_snapshot(tx, instance, bytes));
                        }
                        None => {
                            let why = "this node has no replica of the service (ask a replica)";
                            let _ =
                                tx.try_send(Arc::new(to_frame(&Wire::SnapshotRefused(why.into()))));
                        }
                    },
                    Event::Closed { conn } => node.clients.retain(|_, (c, _)| *c != conn),
                    Event::Metrics { tx } => {
                        let status = node.status();
                        let _ = tx.send(node.metrics.render(&status));
                    }
                    Event::Persisted {
                        tokens,
                        first_lsn,
                        elapsed,
                    } => {
                        node.metrics.wal_sync_seconds.observe(elapsed.as_secs_f64());
                        node.metrics.wal_batch_records.observe(tokens.len() as f64);
                        if let (Some(offset), Some(&t)) = (node.lsn_offset, tokens.first()) {
                            if t + offset != first_lsn {
                                error!(token = t, first_lsn, offset, "WAL LSNs and persist tokens disagree; the log will not be truncated");
                                node.lsn_offset = None;
                            }
                        }
                        node.core.on_persisted(&tokens, &mut node.out);
                        node.perform();
                        node.submit_backlog();
                    }
                    Event::CheckpointSaved { instance, result } => match result {
                        Ok(_) => {
                            node.core.on_checkpoint_saved(instance, &mut node.out);
                            node.perform();
                        }
                        Err((e, true)) => {
                            // Nothing is lost: the log is truncated only below a saved
                            // checkpoint. A later one is tried after the next interval.
                            error!("disk full: checkpoint {instance} not written ({e}); the WAL keeps everything it covers, a later checkpoint will be tried");
                            node.count("checkpoint_no_space");
                            node.core.on_checkpoint_failed(instance);
                        }
                        Err((e, false)) => {
                            error!("writing checkpoint {instance} failed, stopping the node: {e}");
                            bail!("writing checkpoint {instance} failed: {e}");
                        }
                    },
                    Event::WalFailed { error } => {
                        error!("WAL failure, stopping the node: {error}");
                        bail!("WAL failure: {error}");
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::Instant;

    /// Ordered time follows the monotonic clock from the wall clock's reading at
    /// start: wherever the system clock is stepped afterwards, it advances exactly as
    /// much time as passed, and never goes back.
    #[test]
    fn ordered_time_follows_the_monotonic_clock_not_the_system_clock() {
        let t0 = std::time::Instant::now();
        let c = AnchoredClock::new(1_000_000, t0);
        assert_eq!(c.at(t0), 1_000_000);
        assert_eq!(c.at(t0 + Duration::from_millis(2_500)), 1_002_500);
        // An instant before the anchor (another thread's reading) is not earlier time.
        let before = t0.checked_sub(Duration::from_secs(1)).unwrap_or(t0);
        assert_eq!(c.at(before), 1_000_000);
        // The process's clock: never decreasing.
        let (a, b) = (ordered_clock_ms(), ordered_clock_ms());
        assert!(b >= a && a > 1_600_000_000_000, "{a} {b}");
    }

    /// A peer that closes the link's connection (it died) and comes back: the link
    /// reconnects on its own, and the first frame sent after that arrives. Before links
    /// watched their idle connections, that frame was written into the dead connection
    /// and lost without an error.
    #[tokio::test]
    async fn a_link_reconnects_when_its_peer_restarts_and_loses_no_frame() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::channel::<Queued>(64);
        spawn_peer_link(1, 7, 2, addr.to_string(), None, rx);
        let (first, _) = listener.accept().await.unwrap();
        let mut reader = FrameReader::new(first);
        assert!(matches!(
            reader.next().await.unwrap(),
            Wire::PeerHello { from: 1, .. }
        ));
        // The peer dies: its end of the connection closes.
        drop(reader);
        // It comes back: the link dials it again before anything is sent.
        let (second, _) = tokio::time::timeout(Duration::from_secs(2), listener.accept())
            .await
            .expect("the link reconnected by itself")
            .unwrap();
        let mut reader = FrameReader::new(second);
        assert!(matches!(
            reader.next().await.unwrap(),
            Wire::PeerHello { from: 1, .. }
        ));
        let frame = Arc::new(to_frame(&Wire::ClientHello { client: 42 }));
        tx.send((frame, None)).await.unwrap();
        match tokio::time::timeout(Duration::from_secs(2), reader.next()).await {
            Ok(Ok(Wire::ClientHello { client: 42 })) => {}
            other => panic!("the first frame after the restart was lost: {other:?}"),
        }
    }

    /// The emulated WAN on one link: every frame arrives no earlier than its release
    /// time, in the order it was queued, while frames without a delay pass at once.
    #[tokio::test]
    async fn a_delayed_link_holds_each_frame_for_its_delay_in_order() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::channel::<Queued>(64);
        spawn_peer_link(1, 7, 2, addr.to_string(), None, rx);
        let (stream, _) = listener.accept().await.unwrap();
        let (rd, _wr) = stream.into_split();
        let mut reader = FrameReader::new(rd);
        assert!(matches!(
            reader.next().await.unwrap(),
            Wire::PeerHello { from: 1, .. }
        ));
        let delay = Duration::from_millis(45);
        let frame = |client: u64| {
            Arc::new(to_frame(&Wire::ClientHello {
                client: client as ClientId,
            }))
        };
        let start = Instant::now();
        // Ten frames, 5 ms apart, each released 45 ms after it was queued.
        let mut queued_at = Vec::new();
        for i in 0..10u64 {
            let now = Instant::now();
            queued_at.push(now);
            tx.send((frame(i), Some(now + delay))).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for (i, &at) in queued_at.iter().enumerate() {
            match reader.next().await.unwrap() {
                Wire::ClientHello { client } => assert_eq!(client, i as ClientId),
                other => panic!("{other:?}"),
            }
            let waited = at.elapsed();
            assert!(
                waited >= delay,
                "frame {i} arrived after {waited:?} < {delay:?}"
            );
        }
        // The delay did not pile up: the last frame left about 45 ms after it was
        // queued, not 10 × 45 ms after the first.
        assert!(
            start.elapsed() < Duration::from_millis(45 * 5),
            "{:?}",
            start.elapsed()
        );
        // Without a release time a frame is written at once.
        let now = Instant::now();
        tx.send((frame(99), None)).await.unwrap();
        assert!(matches!(
            reader.next().await.unwrap(),
            Wire::ClientHello { .. }
        ));
        assert!(now.elapsed() < delay, "{:?}", now.elapsed());
    }
}
