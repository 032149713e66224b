//! The Partita client library: one session of a service over tokio TCP.
//!
//! [`Client<S>`] drives the sans-IO client core ([`partita_client_core::ClientCore`],
//! which the simulator drives too): the core decides what to send where, when to
//! resubmit, how to merge a partitioned command's sub-replies and when a tentative
//! reply is confirmed; this crate owns the sockets and the clock. Each node the client
//! talks to gets one connection, opened with a `ClientHello` and used only after the
//! node's `ClientWelcome` (a reply racing ahead of the registration would be lost);
//! frames are written directly on the connection and read by this task, with no
//! writer or reader task in between.
//!
//! **The emulated WAN** (cluster file `[wan]`): a client placed in a region
//! ([`ClientOptions::region`], or the file's `[wan] clients`) holds each request to a
//! node of another region for the one-way delay between the regions before writing
//! it, and each frame it reads from such a node for the same delay before the core
//! sees it, so a round trip costs the regions' round-trip time; the nodes do not delay
//! what they send clients. Held frames wait in two queues ordered by release time
//! (the delay is constant per node, so each connection stays FIFO), bounded by
//! [`HELD_FRAMES_MAX`]. The connection handshake and a closed connection are not
//! delayed.
//!
//! **Transport security** (cluster file `[tls]`): with TLS the client presents the
//! file's client certificate and verifies that each node it connects to holds that
//! node's certificate of the cluster CA (`partita_net::tls`); the frames above are the
//! same.
//!
//! See the core's documentation for retries, leader hints, early replies and what a
//! refusal means. [`ClientError::Timeout`] means the outcome is unknown (an `info`
//! entry in a history); [`ClientError::Rejected`] that the command was not applied.

pub use partita_client_core::{ClientBugs, ClientConfig, Topology};

mod group;
pub mod kv;
pub mod objects;
pub use group::{ClientGroup, GROUP_SESSIONS_MAX};

use futures_util::future::select_all;
use partita_client_core::{Action, ClientCore, SubmitError};
use partita_config::{ClusterConfig, Transport};
use partita_net::{spawn_writer, BoxWrite, FrameReader};
use partita_service::ServiceCodec;
use partita_types::members::Members;
use partita_types::{ClientId, NodeId};
use partita_wire::Wire;
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no node answers at {addr} (node {node}): {error}. Is the cluster running? (`partita up`)"
    )]
    Unreachable {
        node: NodeId,
        /// As the cluster file gives it (`ip:port` or `name:port`).
        addr: String,
        error: std::io::Error,
    },
    #[error("no reply within {0:?}; the command may or may not have been applied")]
    Timeout(Duration),
    #[error("node {node} at {addr} did not welcome this client: {reason}")]
    Handshake {
        node: NodeId,
        addr: String,
        reason: String,
    },
    /// The service refused the command (at the client, or every replica did): it was
    /// not applied.
    #[error("refused, not applied: {0}")]
    Rejected(String),
    #[error("a reply that does not decode ({0}); the command may or may not have been applied")]
    BadReply(String),
    #[error(
        "the session expired (no traffic for longer than the cluster's session lease); the \
         command may or may not have been applied; the next command opens a new session"
    )]
    SessionExpired,
    #[error("no session could be opened within {0:?}; the command was not sent")]
    NoSession(Duration),
    /// The cluster file's `[tls]` client credentials cannot be used (a missing file, a
    /// key that is not the certificate's): nothing was sent.
    #[error("TLS credentials: {0}")]
    Tls(String),
    /// [`ClientOptions::region`] names no region of the cluster file's `[wan]`, or the
    /// file has none.
    #[error("region `{region}`: {why}")]
    Region { region: String, why: String },
}

impl ClientError {
    /// Whether the command certainly was not applied (a `fail`, not an `info`).
    pub fn not_applied(&self) -> bool {
        matches!(
            self,
            ClientError::Rejected(_)
                | ClientError::NoSession(_)
                | ClientError::Region { .. }
                | ClientError::Tls(_)
        )
    }
}

#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Resubmit after this long without a reply (backed off on further timeouts of
    /// the same command).
    pub timeout: Duration,
    /// Give up (outcome unknown) after this long.
    pub give_up: Duration,
    /// The replica that must reply; `None` picks one at random.
    pub replica: Option<NodeId>,
    /// Spreads clients over the cluster's batchers: the client enters at batcher
    /// `entry_index % batchers` (`Membership::client_entry`). Give each client of a run
    /// its index for an even spread; `None`: derived from the client's random id.
    pub entry_index: Option<u64>,
    /// The region this client is in (a name of the cluster file's `[wan]`, ignoring
    /// case): requests to and replies from nodes of other regions wait the one-way
    /// delay (see the crate documentation). `None`: where the file's `[wan] clients`
    /// places client `entry_index` (0 without one), or in no region (no delay).
    pub region: Option<String>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            timeout: Duration::from_millis(1000),
            give_up: Duration::from_secs(10),
            replica: None,
            entry_index: None,
            region: None,
        }
    }
}

/// Frames held by the emulated WAN, per direction, at most (beyond that a frame is
/// dropped, as a full queue drops; the core's timeout resubmits). A client has one
/// command outstanding, so a handful is the norm.
pub const HELD_FRAMES_MAX: usize = 4096;

/// Frames the emulated WAN holds, in release order: since each node's delay is
/// constant, release times of one connection never decrease, and the earliest
/// release is found by a scan of a short queue.
struct Held<T> {
    frames: VecDeque<(Instant, NodeId, T)>,
}

impl<T> Default for Held<T> {
    fn default() -> Self {
        Held {
            frames: VecDeque::new(),
        }
    }
}

impl<T> Held<T> {
    /// Hold `frame` from or for `node` until `release`; false when full (dropped).
    fn push(&mut self, release: Instant, node: NodeId, frame: T) -> bool {
        if self.frames.len() >= HELD_FRAMES_MAX {
            return false;
        }
        debug_assert!(self
            .frames
            .iter()
            .filter(|(_, n, _)| *n == node)
            .all(|(r, _, _)| *r <= release));
        self.frames.push_back((release, node, frame));
        true
    }

    /// The earliest release time held.
    fn next_release(&self) -> Option<Instant> {
        self.frames.iter().map(|(r, _, _)| *r).min()
    }

    /// The frame released earliest, if its time has come by `now` (ties: the one held
    /// first, so a connection's frames leave in order).
    fn pop_ripe(&mut self, now: Instant) -> Option<(NodeId, T)> {
        let (i, _) = self
            .frames
            .iter()
            .enumerate()
            .filter(|(_, (r, _, _))| *r <= now)
            .min_by_key(|(i, (r, _, _))| (*r, *i))?;
        let (_, node, frame) = self.frames.remove(i).expect("index in range");
        Some((node, frame))
    }
}

/// A connection whose frames this client writes and reads itself.
struct Conn {
    wr: BoxWrite,
    rd: FrameReader,
}

/// One session of service `S`.
pub struct Client<S: ServiceCodec> {
    core: ClientCore<S>,
    cluster: ClusterConfig,
    opts: ClientOptions,
    conns: BTreeMap<NodeId, Conn>,
    /// The clock the core sees (nanoseconds since the session started).
    epoch: Instant,
    last_tentative_after: Option<Duration>,
    /// opt-PSMR: whether the last command was resubmitted conservatively.
    last_psmr_resubmitted: bool,
    /// The emulated WAN: the one-way delay to each node of another region (nodes of
    /// the client's own region, or every node without a region, are absent).
    delays: BTreeMap<NodeId, Duration>,
    /// Requests waiting for their delay, then written.
    held_requests: Held<Vec<u8>>,
    /// Frames read from nodes, waiting for their delay before the core sees them.
    held_replies: Held<Wire>,
    /// With `[tls]`: what this client presents and trusts.
    tls: Option<Arc<partita_net::tls::rustls::ClientConfig>>,
    /// Membership: the configuration epoch this client follows (0: its file's), when
    /// it last asked the nodes, and its resubmissions then (see
    /// [`Client::follow_members`]).
    members_epoch: u64,
    followed_at: Option<Instant>,
    followed_resubmissions: u64,
    /// The nodes being asked in the background, while commands go on.
    following: Option<tokio::task::JoinHandle<Option<Members>>>,
}

/// How often a client in trouble (resubmitting) asks the nodes for the configuration,
/// at most.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

impl<S: ServiceCodec> Client<S> {
    /// Open a session. Fails if the cluster file names another service, or if the
    /// first node cannot be reached.
    pub async fn connect(
        cluster: ClusterConfig,
        opts: ClientOptions,
    ) -> Result<Client<S>, ClientError> {
        check_service::<S>(&cluster)?;
        let id = (rand::random::<u64>() >> 1) | 1;
        let topo = cluster.client_topology();
        let (entry, replica) = placement(
            &cluster,
            &topo,
            &opts,
            id,
            opts.entry_index.unwrap_or(id >> 16),
        );
        let cfg = core_config(&opts);
        let delays = wan_delays(&cluster, &opts)?;
        let tls = client_tls(&cluster)?;
        // GeoPaxos+ (paper 004 §II-B): a client talks to its nearest replica, which
        // is its request's origin and answers it. Among equally near ones, spread by
        // index.
        let (entry, replica) = match cluster.ordering.is_geo() {
            true => {
                let nearest = |n: &NodeId| delays.get(n).copied().unwrap_or_default();
                let best = topo.replicas.iter().map(nearest).min().unwrap_or_default();
                let near: Vec<NodeId> = topo
                    .replicas
                    .iter()
                    .copied()
                    .filter(|n| nearest(n) == best)
                    .collect();
                let pick = opts.replica.unwrap_or_else(|| {
                    near[(opts.entry_index.unwrap_or(id >> 16) % near.len() as u64) as usize]
                });
                (pick, pick)
            }
            false => (entry, replica),
        };
        let mut c = Client {
            core: ClientCore::new(id, topo, cfg, entry, replica),
            cluster,
            opts,
            conns: BTreeMap::new(),
            epoch: Instant::now(),
            last_tentative_after: None,
            last_psmr_resubmitted: false,
            delays,
            held_requests: Held::default(),
            held_replies: Held::default(),
            tls,
            members_epoch: 0,
            followed_at: None,
            followed_resubmissions: 0,
            following: None,
        };
        if let Err(e) = c.ensure(entry).await {
            // Its file may name nodes removed since: ask the others for the nodes now.
            if !c.follow_members().await {
                return Err(e);
            }
            let entry = c.core.entry();
            c.ensure(entry).await?;
        }
        Ok(c)
    }

    /// Membership changes (`partita member`): ask every node this client knows for the
    /// configuration, and follow the newest one reported (new acceptors to enter at, new
    /// replicas to be answered by, removed nodes left). A client learns of changes so
    /// when its entry node cannot be reached at connect time (here, waiting for the
    /// answers), and when its commands need resubmitting (in the background, at most
    /// every [`FOLLOW_EVERY`]), so a long-lived client outlives every node its file
    /// named, as long as one it knows answers. Returns whether the configuration
    /// changed.
    pub async fn follow_members(&mut self) -> bool {
        if !self.ask_now() {
            return false;
        }
        let newest = newest_members(&self.cluster, self.opts.timeout).await;
        self.follow(newest)
    }

    /// Start asking the nodes in the background (unless that is under way, or this
    /// cluster's membership cannot change).
    fn start_following(&mut self) {
        if self.following.is_some() || !self.ask_now() {
            return;
        }
        let cluster = self.cluster.clone();
        let timeout = self.opts.timeout;
        self.following = Some(tokio::spawn(async move {
            newest_members(&cluster, timeout).await
        }));
    }

    /// Note that the nodes are asked now; whether this cluster's membership can change
    /// at all (else there is nothing to ask).
    fn ask_now(&mut self) -> bool {
        self.followed_at = Some(Instant::now());
        self.followed_resubmissions = self.core.stats().resubmissions;
        self.cluster.member_changes().is_ok()
    }

    /// If the background question was answered, follow the answer.
    fn finish_following(&mut self) {
        use futures_util::FutureExt;
        if !self.following.as_ref().is_some_and(|h| h.is_finished()) {
            return;
        }
        let Some(h) = self.following.take() else {
            return;
        };
        if let Some(Ok(newest)) = h.now_or_never() {
            self.follow(newest);
        }
    }

    /// Follow `newest` if it is newer than what this client follows.
    fn follow(&mut self, newest: Option<Members>) -> bool {
        let Some(m) = newest.filter(|m| m.epoch > self.members_epoch) else {
            return false;
        };
        self.members_epoch = m.epoch;
        if !self.cluster.follow_members(&m) {
            return false;
        }
        let topology = self.cluster.client_topology();
        if topology.entries.is_empty() || topology.replicas.is_empty() {
            return false;
        }
        tracing::debug!(
            "client {}: following configuration epoch {}: entries {:?}, replicas {:?}",
            self.core.id(),
            m.epoch,
            topology.entries,
            topology.replicas
        );
        self.conns
            .retain(|n, _| topology.entries.contains(n) || topology.replicas.contains(n));
        self.core.set_topology(topology);
        true
    }

    pub fn id(&self) -> ClientId {
        self.core.id()
    }
    pub fn replica(&self) -> NodeId {
        self.core.replica()
    }
    /// The node commands currently go to.
    pub fn entry_node(&self) -> NodeId {
        self.core.entry()
    }
    pub fn resubmissions(&self) -> u64 {
        self.core.stats().resubmissions
    }
    pub fn stats(&self) -> &partita_client_core::ClientStats {
        self.core.stats()
    }
    /// Early replies: how long after the call of the last command its first tentative
    /// reply arrived (`None`: no tentative reply, e.g. without early replies).
    pub fn last_tentative_after(&self) -> Option<Duration> {
        self.last_tentative_after
    }
    /// opt-PSMR: whether the last command was resubmitted conservatively (a replica's
    /// thread refused its optimistic mapping: a failed safety check).
    pub fn last_psmr_resubmitted(&self) -> bool {
        self.last_psmr_resubmitted
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The emulated WAN's one-way delay between this client and `node` (zero: none).
    pub fn delay_to(&self, node: NodeId) -> Duration {
        self.delays.get(&node).copied().unwrap_or_default()
    }

    /// Write `frame` to `to`; a failed write closes the connection.
    async fn write(&mut self, to: NodeId, frame: &[u8]) {
        let Some(conn) = self.conns.get_mut(&to) else {
            // Closed while the frame was held: the core already knows, and its
            // timeout resubmits.
            return;
        };
        if conn.wr.write_all(frame).await.is_err() || conn.wr.flush().await.is_err() {
            self.conns.remove(&to);
            let now = self.now();
            self.core.on_disconnected(to, now);
        }
    }

    /// Write every held request whose delay has run out, in release order.
    async fn release_requests(&mut self) {
        let now = Instant::now();
        while let Some((to, frame)) = self.held_requests.pop_ripe(now) {
            self.write(to, &frame).await;
        }
    }

    /// Hand one frame read from `from` to the core.
    fn on_frame(&mut self, from: NodeId, w: Wire, actions: &mut Vec<Action>) {
        let now = self.now();
        match w {
            Wire::Reply { reply, leader } => self.core.on_reply(from, &reply, leader, now, actions),
            Wire::Early(e) => self.core.on_early(from, &e, now, actions),
            Wire::Refused {
                seq,
                reason,
                leader,
                ..
            } => {
                tracing::debug!("node {from} refused command {seq}: {reason}");
                self.core.on_refused(seq, leader, now);
            }
            _ => {}
        }
    }

    /// Open a connection to `node` unless one is open: hello, then wait for the
    /// node's welcome.
    async fn ensure(&mut self, node: NodeId) -> Result<(), ClientError> {
        if self.conns.contains_key(&node) {
            return Ok(());
        }
        let Some(addr) = self.cluster.node(node).map(|n| n.addr.clone()) else {
            // Left the cluster since the core chose it (it follows the new nodes from
            // its next send on).
            return Err(ClientError::Handshake {
                node,
                addr: String::new(),
                reason: "no longer a member of the cluster".into(),
            });
        };
        let handshake = |reason: String| ClientError::Handshake {
            node,
            addr: addr.clone(),
            reason,
        };
        let (rd, mut wr) = open_connection(&self.cluster, node, self.tls.as_ref()).await?;
        let hello = partita_wire::to_frame(&Wire::ClientHello {
            client: self.core.id(),
        });
        wr.write_all(&hello)
            .await
            .map_err(|e| handshake(e.to_string()))?;
        wr.flush().await.map_err(|e| handshake(e.to_string()))?;
        let mut reader = FrameReader::new(rd);
        match tokio::time::timeout(self.opts.timeout, reader.next()).await {
            Ok(Ok(Wire::ClientWelcome { node: n })) if n == node => {}
            Ok(Ok(Wire::ClientWelcome { node: n })) => {
                return Err(handshake(format!("it says it is node {n}")))
            }
            Ok(Ok(other)) => {
                return Err(handshake(format!(
                    "it answered with {:?} instead of a welcome",
                    std::mem::discriminant(&other)
                )))
            }
            Ok(Err(e)) => return Err(handshake(format!("{e}"))),
            Err(_) => {
                return Err(handshake(format!(
                    "no welcome within {:?}",
                    self.opts.timeout
                )))
            }
        }
        self.conns.insert(node, Conn { wr, rd: reader });
        Ok(())
    }

    /// Carry out the core's actions: connections to every node replies come from,
    /// then the sends.
    async fn act(&mut self, actions: Vec<Action>) {
        for Action::Send { to, cmd, .. } in actions {
            let missing = |c: &Self| {
                let conns = &c.conns;
                !conns.contains_key(&to) || c.core.reply_nodes().any(|n| !conns.contains_key(&n))
            };
            let mut reachable = true;
            // (Usually every connection is open already: nothing to collect.)
            let nodes: Vec<NodeId> = if missing(self) {
                self.core.reply_nodes().chain([to]).collect()
            } else {
                Vec::new()
            };
            for n in nodes {
                if let Err(e) = self.ensure(n).await {
                    tracing::debug!("{e}");
                    let now = self.now();
                    self.core.on_disconnected(n, now);
                    reachable = false;
                }
            }
            if !reachable {
                continue;
            }
            let frame = partita_wire::to_frame(&Wire::Request(cmd));
            match self.delays.get(&to) {
                // The emulated WAN: the request leaves after the one-way delay.
                Some(&d) => {
                    if !self.held_requests.push(Instant::now() + d, to, frame) {
                        tracing::warn!("emulated WAN: held requests full, request dropped");
                    }
                }
                None => self.write(to, &frame).await,
            }
        }
    }

    /// Execute one command, exactly once, resubmitting on timeouts.
    pub async fn execute(&mut self, cmd: S::Command) -> Result<S::Reply, ClientError> {
        let mut actions = Vec::new();
        let now = self.now();
        match self.core.submit(cmd, now, &mut actions) {
            Ok(()) => {}
            Err(SubmitError::Split(e)) => return Err(ClientError::Rejected(e.to_string())),
            Err(SubmitError::Busy) => unreachable!("execute waits for each command"),
        }
        self.last_tentative_after = None;
        loop {
            self.act(std::mem::take(&mut actions)).await;
            // The emulated WAN: requests and replies whose delay has run out.
            self.release_requests().await;
            if let Some((from, w)) = self.held_replies.pop_ripe(Instant::now()) {
                self.on_frame(from, w, &mut actions);
                let now = self.now();
                self.core.on_timer(now, &mut actions);
                continue;
            }
            if let Some(done) = self.core.take_done() {
                self.last_tentative_after = done
                    .tentative_ns
                    .map(|t| Duration::from_nanos(t.saturating_sub(done.call_ns)));
                self.last_psmr_resubmitted = done.psmr_resubmitted;
                return done.result.map_err(from_core_error);
            }
            let deadline = self.core.deadline().expect("a command is outstanding");
            let held = [
                self.held_requests.next_release(),
                self.held_replies.next_release(),
            ];
            let wake = held
                .into_iter()
                .flatten()
                .fold(self.epoch + Duration::from_nanos(deadline), Instant::min);
            let wake = tokio::time::Instant::from_std(wake);
            // Read whichever connection has a frame first, until the deadline. One or
            // two connections (the entry node and the replica) are the common case and
            // are read without boxing a future per connection.
            let mut conns = self.conns.iter_mut();
            let got = match (conns.next(), conns.next(), conns.next()) {
                (None, ..) => {
                    tokio::time::sleep_until(wake).await;
                    None
                }
                (Some((&a, ca)), None, _) => tokio::time::timeout_at(wake, ca.rd.next())
                    .await
                    .ok()
                    .map(|r| (a, r)),
                (Some((&a, ca)), Some((&b, cb)), None) => {
                    let either = async {
                        tokio::select! {
                            biased;
                            r = ca.rd.next() => (a, r),
                            r = cb.rd.next() => (b, r),
                        }
                    };
                    tokio::time::timeout_at(wake, either).await.ok()
                }
                _ => {
                    let reads = select_all(
                        self.conns
                            .iter_mut()
                            .map(|(n, c)| Box::pin(async move { (*n, c.rd.next().await) })),
                    );
                    tokio::time::timeout_at(wake, reads).await.ok().map(|r| r.0)
                }
            };
            let now = self.now();
            // (The deadline passing is handled below, whatever woke us.)
            match got {
                None => {}
                Some((from, Ok(w))) => match self.delays.get(&from) {
                    // The emulated WAN: the core sees the frame after the delay.
                    Some(&d) => {
                        if !self.held_replies.push(Instant::now() + d, from, w) {
                            tracing::warn!("emulated WAN: held replies full, frame dropped");
                        }
                    }
                    None => self.on_frame(from, w, &mut actions),
                },
                Some((from, Err(e))) => {
                    tracing::debug!("connection to node {from}: {e}");
                    self.conns.remove(&from);
                    self.core.on_disconnected(from, now);
                }
            }
            self.core.on_timer(now, &mut actions);
            // Resubmitting: the nodes it knows may have been replaced.
            self.finish_following();
            if self.core.stats().resubmissions >= self.followed_resubmissions + 2
                && self.followed_at.is_none_or(|t| t.elapsed() >= FOLLOW_EVERY)
            {
                self.start_following();
            }
        }
    }
}

/// The one-way delay to every node of another region than the client's (see
/// [`ClientOptions::region`]); empty without a `[wan]` section or a region.
fn wan_delays(
    cluster: &ClusterConfig,
    opts: &ClientOptions,
) -> Result<BTreeMap<NodeId, Duration>, ClientError> {
    let wan = cluster.wan();
    let region = match (&opts.region, &wan) {
        (Some(name), Some(w)) => Some(w.region(name).ok_or_else(|| ClientError::Region {
            region: name.clone(),
            why: format!("not a region of the cluster file's [wan] ({})", w.names()),
        })?),
        (Some(name), None) => {
            return Err(ClientError::Region {
                region: name.clone(),
                why: "the cluster file has no [wan] section".into(),
            })
        }
        (None, _) => cluster.client_region(opts.entry_index.unwrap_or(0)),
    };
    let (Some(wan), Some(region)) = (wan, region) else {
        return Ok(BTreeMap::new());
    };
    Ok(cluster
        .nodes
        .iter()
        .filter_map(|n| {
            let d = wan.one_way(region, cluster.node_region(n.id)?);
            (!d.is_zero()).then_some((n.id, d))
        })
        .collect())
}

/// The client's TLS configuration from the cluster file (`None`: plain TCP).
pub fn client_tls(
    cluster: &ClusterConfig,
) -> Result<Option<Arc<partita_net::tls::rustls::ClientConfig>>, ClientError> {
    let Some(section) = cluster
        .tls
        .as_ref()
        .filter(|_| cluster.transport() == Transport::Tls)
    else {
        return Ok(None);
    };
    let files = section.client_files().map_err(|e| {
        ClientError::Tls(format!("cluster file: field `{}`: {}", e.field, e.message))
    })?;
    let cfg =
        partita_net::tls::client_config(&files).map_err(|e| ClientError::Tls(e.to_string()))?;
    Ok(Some(cfg))
}

/// Refuse a cluster that runs another service than `S`.
fn check_service<S: ServiceCodec>(cluster: &ClusterConfig) -> Result<(), ClientError> {
    if partita_config::services::speaks(&cluster.cluster.service) != S::NAME {
        return Err(ClientError::Rejected(format!(
            "the cluster runs service `{}`, this client speaks `{}`",
            cluster.cluster.service,
            S::NAME
        )));
    }
    Ok(())
}

/// The client core's settings for a session with these options.
fn core_config(opts: &ClientOptions) -> ClientConfig {
    ClientConfig {
        timeout_ns: opts.timeout.as_nanos() as u64,
        give_up_ns: Some(opts.give_up.as_nanos() as u64),
        ..ClientConfig::default()
    }
}

/// Where session `id` enters and which replica answers it: the options' replica or
/// one drawn from the id, and the cluster's first entry for it and `entry_index`.
fn placement(
    cluster: &ClusterConfig,
    topo: &Topology,
    opts: &ClientOptions,
    id: ClientId,
    entry_index: u64,
) -> (NodeId, NodeId) {
    let replica = opts
        .replica
        .unwrap_or_else(|| topo.replicas[(id >> 8) as usize % topo.replicas.len()]);
    (cluster.first_entry(replica, entry_index), replica)
}

/// The client library's error for the core's.
fn from_core_error(e: partita_client_core::ClientError) -> ClientError {
    match e {
        partita_client_core::ClientError::Timeout { after_ns } => {
            ClientError::Timeout(Duration::from_nanos(after_ns))
        }
        partita_client_core::ClientError::Rejected(r) => ClientError::Rejected(r),
        partita_client_core::ClientError::BadReply(r) => ClientError::BadReply(r),
        partita_client_core::ClientError::SessionExpired => ClientError::SessionExpired,
        partita_client_core::ClientError::NoSession { after_ns } => {
            ClientError::NoSession(Duration::from_nanos(after_ns))
        }
    }
}

/// A connection to `node` of `cluster` as a client opens one (TCP without Nagle; TLS
/// with the client certificate when the cluster file says so), as boxed halves, before
/// any hello: for tools and tests that speak the wire protocol themselves.
pub async fn connect_raw(
    cluster: &ClusterConfig,
    node: NodeId,
) -> Result<(partita_net::BoxRead, BoxWrite), ClientError> {
    let tls = client_tls(cluster)?;
    open_connection(cluster, node, tls.as_ref()).await
}

/// A new connection to `node` of `cluster` (TCP without Nagle, TLS when `tls` says so),
/// as boxed halves, before any hello.
async fn open_connection(
    cluster: &ClusterConfig,
    node: NodeId,
    tls: Option<&Arc<partita_net::tls::rustls::ClientConfig>>,
) -> Result<(partita_net::BoxRead, BoxWrite), ClientError> {
    let addr = cluster.dial_addr(node);
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|error| ClientError::Unreachable {
            node,
            addr: addr.to_string(),
            error,
        })?;
    let _ = stream.set_nodelay(true);
    split_stream(stream, node, tls)
        .await
        .map_err(|e| ClientError::Handshake {
            node,
            addr: addr.to_string(),
            reason: format!("TLS: {e}"),
        })
}

/// A connected stream to `node` as boxed halves: as is, or after a TLS handshake that
/// verifies the node's certificate.
async fn split_stream(
    stream: TcpStream,
    node: NodeId,
    tls: Option<&Arc<partita_net::tls::rustls::ClientConfig>>,
) -> std::io::Result<(partita_net::BoxRead, BoxWrite)> {
    match tls {
        None => {
            let (rd, wr) = stream.into_split();
            Ok((Box::new(rd), Box::new(wr)))
        }
        Some(cfg) => Ok(partita_net::split_boxed(
            partita_net::tls::connect(cfg, node, stream).await?,
        )),
    }
}

/// Ask node `id` of `cluster` for its status (one-shot connection), over TLS when the
/// cluster file says so (presenting the client certificate). `None`: no answer in
/// time, or the credentials cannot be used.
pub async fn node_status_of(
    cluster: &ClusterConfig,
    id: NodeId,
    timeout: Duration,
) -> Option<partita_wire::NodeStatus> {
    let tls = match client_tls(cluster) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("status of node {id}: {e}");
            return None;
        }
    };
    status_probe(cluster.dial_addr(id), id, tls.as_ref(), timeout).await
}

/// The newest configuration any node of `cluster` reports (every node asked at once,
/// each given at most `timeout`, and half a second at most).
async fn newest_members(cluster: &ClusterConfig, timeout: Duration) -> Option<Members> {
    let ask = timeout.min(Duration::from_millis(500));
    let asks = cluster
        .nodes
        .iter()
        .map(|n| node_status_of(cluster, n.id, ask));
    futures_util::future::join_all(asks)
        .await
        .into_iter()
        .filter_map(|s| s?.members)
        .max_by_key(|m| m.epoch)
}

/// Ask one node for its status (one-shot connection, plain TCP; a cluster with TLS
/// needs [`node_status_of`]).
pub async fn node_status(addr: SocketAddr, timeout: Duration) -> Option<partita_wire::NodeStatus> {
    status_probe(&addr.to_string(), 0, None, timeout).await
}

/// Ask node `id` (at `addr`) to order a change of the replicas (`partita member`):
/// the replicas after it, or why it was refused (by the node, or by the replicas where
/// it was ordered), or why no answer came within `timeout`.
pub async fn member_request(
    cluster: &ClusterConfig,
    id: NodeId,
    addr: &str,
    change: partita_types::members::MemberChange,
    timeout: Duration,
) -> Result<partita_types::members::Members, String> {
    let tls = client_tls(cluster).map_err(|e| e.to_string())?;
    let fut = async {
        let mut reader = one_shot(addr, id, tls.as_ref(), &Wire::MemberRequest(change))
            .await
            .map_err(|e| format!("node {id}: {e}"))?;
        match reader.next().await {
            Ok(Wire::MemberReply(r)) => r,
            Ok(_) => Err(format!("node {id} answered something else")),
            Err(e) => Err(format!("node {id}: {e}")),
        }
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| format!("node {id} did not answer within {timeout:?}"))?
}

/// A replica checkpoint of node `id` for a backup (`partita snapshot save`): the
/// instance it covers and its bytes, exactly as the node holds them (verify them with
/// `partita_smr::verify_checkpoint`). The node takes a fresh checkpoint when it can,
/// else gives its newest. Errors say why: no connection, a refusal (the node has no
/// replica), a broken stream, or `timeout` passing.
pub async fn fetch_snapshot(
    cluster: &ClusterConfig,
    id: NodeId,
    timeout: Duration,
) -> Result<(u64, Vec<u8>), String> {
    let tls = client_tls(cluster).map_err(|e| e.to_string())?;
    let fut = async {
        let mut reader = one_shot(
            cluster.dial_addr(id),
            id,
            tls.as_ref(),
            &Wire::SnapshotRequest,
        )
        .await
        .map_err(|e| format!("node {id}: {e}"))?;
        let mut out: Vec<u8> = Vec::new();
        let mut at = None;
        loop {
            match reader.next().await {
                Ok(Wire::SnapshotChunk {
                    instance,
                    total,
                    offset,
                    bytes,
                }) => {
                    if at.is_some_and(|a| a != instance) || offset != out.len() as u64 {
                        return Err(format!("node {id} sent a chunk out of order"));
                    }
                    if out.is_empty() {
                        out.reserve(usize::try_from(total).unwrap_or(0).min(1 << 30));
                    }
                    at = Some(instance);
                    out.extend_from_slice(&bytes);
                    if out.len() as u64 >= total {
                        return Ok((instance, out));
                    }
                }
                Ok(Wire::SnapshotRefused(why)) => return Err(format!("node {id}: {why}")),
                Ok(_) => return Err(format!("node {id} answered something else")),
                Err(e) => return Err(format!("node {id}: {e}")),
            }
        }
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| format!("node {id} sent no whole checkpoint within {timeout:?}"))?
}

async fn status_probe(
    addr: &str,
    id: NodeId,
    tls: Option<&Arc<partita_net::tls::rustls::ClientConfig>>,
    timeout: Duration,
) -> Option<partita_wire::NodeStatus> {
    let fut = async {
        let mut reader = one_shot(addr, id, tls, &Wire::StatusRequest).await.ok()?;
        match reader.next().await {
            Ok(Wire::Status(s)) => Some(*s),
            _ => None,
        }
    };
    tokio::time::timeout(timeout, fut).await.ok().flatten()
}

/// Open a one-shot connection to node `id` at `addr` (TLS when `tls`), send `request`
/// as its first frame, and return what reads the answer.
async fn one_shot(
    addr: &str,
    id: NodeId,
    tls: Option<&Arc<partita_net::tls::rustls::ClientConfig>>,
    request: &Wire,
) -> Result<FrameReader, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let (rd, wr) = split_stream(stream, id, tls)
        .await
        .map_err(|e| e.to_string())?;
    let tx = spawn_writer(wr);
    tx.send(Arc::new(partita_wire::to_frame(request)))
        .await
        .map_err(|_| "the connection closed".to_string())?;
    Ok(FrameReader::new(rd))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held frames leave in release order, each connection's in the order held, and
    /// none before its time.
    #[test]
    fn held_frames_leave_in_release_order() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut h = Held::default();
        // Node 1 is 75 ms away, node 2 45 ms: node 2's later frames overtake node 1's.
        assert!(h.push(ms(75), 1, "a"));
        assert!(h.push(ms(46), 2, "b"));
        assert!(h.push(ms(76), 1, "c"));
        assert!(h.push(ms(76), 2, "d"));
        assert_eq!(h.next_release(), Some(ms(46)));
        assert_eq!(h.pop_ripe(ms(45)), None);
        assert_eq!(h.pop_ripe(ms(100)), Some((2, "b")));
        assert_eq!(h.pop_ripe(ms(100)), Some((1, "a")));
        // A tie: the one held first.
        assert_eq!(h.pop_ripe(ms(100)), Some((1, "c")));
        assert_eq!(h.pop_ripe(ms(100)), Some((2, "d")));
        assert_eq!(h.pop_ripe(ms(100)), None);
        assert_eq!(h.next_release(), None);
        for i in 0..HELD_FRAMES_MAX {
            assert!(h.push(ms(i as u64), 1, "x"));
        }
        assert!(!h.push(ms(1 << 20), 1, "over the bound"));
    }
}
