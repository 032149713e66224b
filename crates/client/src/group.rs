//! Many sessions over shared connections: [`ClientGroup`].
//!
//! A [`Client`](crate::Client) is one session with connections of its own. A group
//! runs `n` sessions (one [`ClientCore`] each, with the ids, entries and replicas
//! that `n` separate clients would have) over **one connection per node**: each
//! connection registers every session of the group with a `ClientHello` per session
//! (the node answers each with a welcome and sends replies for any of them on it),
//! requests of all sessions share its writer, and replies of all sessions share its
//! reader. The writer coalesces whatever is queued into one write
//! ([`partita_net::spawn_writer`]), and a node does the same with replies, so under
//! load one segment carries the requests or replies of several sessions: what etcd's
//! clients get from gRPC streams multiplexed over a few HTTP/2 connections. Each
//! session still has at most one command outstanding, with the core's timeouts,
//! resubmissions and exactly-once reply matching, so a group's history is judged like
//! separate clients'.
//!
//! Not supported: the emulated WAN, GeoPaxos+ clients and speculation's early replies
//! (refused at [`ClientGroup::connect`]).

use crate::{ClientError, ClientOptions};
use partita_client_core::{Action, ClientCore, SubmitError};
use partita_config::ClusterConfig;
use partita_net::{spawn_writer, FrameBytes, FrameReader};
use partita_service::ServiceCodec;
use partita_types::{ClientId, NodeId};
use partita_wire::Wire;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// Sessions one group may hold (a node accepts as many registrations per connection).
pub const GROUP_SESSIONS_MAX: usize = 4096;

/// What a connection's reader task hands the group: a frame, or `None` when the
/// connection closed. Tagged with the connection's generation, so that a late frame of
/// a replaced connection is not mistaken for the new one's close.
type Incoming = (NodeId, u64, Option<Wire>);

struct Conn {
    tx: mpsc::Sender<FrameBytes>,
    gen: u64,
}

/// `n` sessions of service `S` over one connection per node (see the module docs).
pub struct ClientGroup<S: ServiceCodec> {
    cores: Vec<ClientCore<S>>,
    by_id: HashMap<ClientId, usize>,
    cluster: ClusterConfig,
    opts: ClientOptions,
    conns: BTreeMap<NodeId, Conn>,
    next_gen: u64,
    incoming_tx: mpsc::Sender<Incoming>,
    incoming: mpsc::Receiver<Incoming>,
    /// Frames that arrived while a new connection waited for its welcomes.
    stash: VecDeque<(NodeId, Wire)>,
    /// Completed commands not yet handed out.
    done: VecDeque<(usize, Result<S::Reply, ClientError>)>,
    /// opt-PSMR: per session, whether its last completed command was resubmitted
    /// conservatively (its optimistic thread refused it).
    psmr_resubmitted: Vec<bool>,
    epoch: Instant,
    tls: Option<Arc<partita_net::tls::rustls::ClientConfig>>,
}

impl<S: ServiceCodec> ClientGroup<S> {
    /// Open `n` sessions; session `k` enters as a client of index `first_index + k`
    /// would ([`ClientOptions::entry_index`]). Connects to the sessions' first entry
    /// nodes before returning.
    pub async fn connect(
        cluster: ClusterConfig,
        opts: ClientOptions,
        n: usize,
        first_index: u64,
    ) -> Result<ClientGroup<S>, ClientError> {
        crate::check_service::<S>(&cluster)?;
        if n == 0 || n > GROUP_SESSIONS_MAX {
            return Err(ClientError::Rejected(format!(
                "a group holds 1 to {GROUP_SESSIONS_MAX} sessions, not {n}"
            )));
        }
        if cluster.wan.is_some() || cluster.ordering.is_geo() || opts.region.is_some() {
            return Err(ClientError::Rejected(
                "sessions sharing connections do not emulate a WAN and do not speak to \
                 GeoPaxos+ clusters; use one connection per client there"
                    .into(),
            ));
        }
        if cluster.execution.early_replies() {
            return Err(ClientError::Rejected(
                "sessions sharing connections do not take early replies; use one \
                 connection per client with early replies"
                    .into(),
            ));
        }
        let topo = cluster.client_topology();
        let cfg = crate::core_config(&opts);
        let mut cores = Vec::with_capacity(n);
        let mut by_id = HashMap::with_capacity(n);
        for k in 0..n {
            let mut id = (rand::random::<u64>() >> 1) | 1;
            while by_id.contains_key(&id) {
                id = (rand::random::<u64>() >> 1) | 1;
            }
            let (entry, replica) =
                crate::placement(&cluster, &topo, &opts, id, first_index + k as u64);
            by_id.insert(id, k);
            cores.push(ClientCore::new(
                id,
                topo.clone(),
                cfg.clone(),
                entry,
                replica,
            ));
        }
        let (incoming_tx, incoming) = mpsc::channel(4096);
        let tls = crate::client_tls(&cluster)?;
        let mut g = ClientGroup {
            cores,
            by_id,
            cluster,
            opts,
            conns: BTreeMap::new(),
            next_gen: 0,
            incoming_tx,
            incoming,
            stash: VecDeque::new(),
            done: VecDeque::new(),
            psmr_resubmitted: Vec::new(),
            epoch: Instant::now(),
            tls,
        };
        let entries: Vec<NodeId> = g.cores.iter().map(|c| c.entry()).collect();
        for e in entries {
            g.ensure(e).await?;
        }
        Ok(g)
    }

    pub fn len(&self) -> usize {
        self.cores.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cores.is_empty()
    }

    /// Whether session `k` has a command outstanding.
    pub fn is_busy(&self, k: usize) -> bool {
        self.cores[k].is_busy()
    }

    /// Resubmissions over every session.
    pub fn resubmissions(&self) -> u64 {
        self.cores.iter().map(|c| c.stats().resubmissions).sum()
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Submit `cmd` on session `k`, which must be idle; its outcome comes out of
    /// [`ClientGroup::next_done`].
    pub async fn submit(&mut self, k: usize, cmd: S::Command) {
        let mut actions = Vec::new();
        let now = self.now();
        match self.cores[k].submit(cmd, now, &mut actions) {
            Ok(()) => {}
            Err(SubmitError::Split(e)) => {
                self.done
                    .push_back((k, Err(ClientError::Rejected(e.to_string()))));
                return;
            }
            Err(SubmitError::Busy) => panic!("session {k} has a command outstanding"),
        }
        self.act(k, actions).await;
        self.collect(k);
    }

    /// Drive every session until one completes a command: its index and outcome.
    /// `None` when no session has a command outstanding.
    pub async fn next_done(&mut self) -> Option<(usize, Result<S::Reply, ClientError>)> {
        loop {
            if let Some(d) = self.done.pop_front() {
                return Some(d);
            }
            let deadline = self.cores.iter().filter_map(|c| c.deadline()).min()?;
            let got = match self.stash.pop_front() {
                Some((node, w)) => Some((node, None, Some(w))),
                None => {
                    let wake =
                        tokio::time::Instant::from_std(self.epoch + Duration::from_nanos(deadline));
                    match tokio::time::timeout_at(wake, self.incoming.recv()).await {
                        Ok(Some((node, gen, w))) => Some((node, Some(gen), w)),
                        Ok(None) => unreachable!("the group holds a sender"),
                        Err(_) => None,
                    }
                }
            };
            let now = self.now();
            match got {
                Some((node, _, Some(w))) => self.on_frame(node, w, now).await,
                Some((node, Some(gen), None))
                    if self.conns.get(&node).is_some_and(|c| c.gen == gen) =>
                {
                    tracing::debug!("connection to node {node} closed");
                    self.conns.remove(&node);
                    for c in &mut self.cores {
                        c.on_disconnected(node, now);
                    }
                }
                // A close of a connection already replaced, or the deadline.
                Some((_, _, None)) | None => {}
            }
            // Timeouts: every session whose deadline passed (none did unless the
            // earliest one, taken above, did).
            if deadline > now {
                continue;
            }
            for k in 0..self.cores.len() {
                if self.cores[k].deadline().is_some_and(|d| d <= now) {
                    let mut actions = Vec::new();
                    self.cores[k].on_timer(now, &mut actions);
                    self.act(k, actions).await;
                    self.collect(k);
                }
            }
        }
    }

    /// Hand one frame to the session it is for.
    async fn on_frame(&mut self, from: NodeId, w: Wire, now: u64) {
        let client = match &w {
            Wire::Reply { reply, .. } => reply.client,
            Wire::Early(e) => e.client(),
            Wire::Refused { client, .. } => *client,
            // Welcomes of a reconnection that raced past its handshake; anything else
            // is not for a client.
            _ => return,
        };
        let Some(&k) = self.by_id.get(&client) else {
            tracing::debug!("node {from} answered client {client}, not of this group");
            return;
        };
        let mut actions = Vec::new();
        let core = &mut self.cores[k];
        match w {
            Wire::Reply { reply, leader } => core.on_reply(from, &reply, leader, now, &mut actions),
            Wire::Early(e) => core.on_early(from, &e, now, &mut actions),
            Wire::Refused {
                seq,
                reason,
                leader,
                ..
            } => {
                tracing::debug!("node {from} refused command {seq} of client {client}: {reason}");
                core.on_refused(seq, leader, now);
            }
            _ => {}
        }
        core.on_timer(now, &mut actions);
        self.act(k, actions).await;
        self.collect(k);
    }

    /// opt-PSMR: whether session `k`'s last command handed out by
    /// [`ClientGroup::next_done`] was resubmitted conservatively (a replica's thread
    /// refused its optimistic mapping: a failed safety check).
    pub fn psmr_resubmitted(&self, k: usize) -> bool {
        self.psmr_resubmitted.get(k).copied().unwrap_or(false)
    }

    fn collect(&mut self, k: usize) {
        if let Some(d) = self.cores[k].take_done() {
            if self.psmr_resubmitted.len() <= k {
                self.psmr_resubmitted
                    .resize(self.cores.len().max(k + 1), false);
            }
            self.psmr_resubmitted[k] = d.psmr_resubmitted;
            self.done
                .push_back((k, d.result.map_err(crate::from_core_error)));
        }
    }

    /// Carry out session `k`'s actions: connections to the nodes its replies come
    /// from and to the destination, then the request.
    async fn act(&mut self, k: usize, actions: Vec<Action>) {
        for Action::Send { to, cmd, .. } in actions {
            let nodes: Vec<NodeId> = self.cores[k].reply_nodes().chain([to]).collect();
            let mut reachable = true;
            for n in nodes {
                if self.conns.contains_key(&n) {
                    continue;
                }
                if let Err(e) = self.ensure(n).await {
                    tracing::debug!("{e}");
                    let now = self.now();
                    for c in &mut self.cores {
                        c.on_disconnected(n, now);
                    }
                    reachable = false;
                }
            }
            if !reachable {
                continue;
            }
            let frame: FrameBytes = Arc::new(partita_wire::to_frame(&Wire::Request(cmd)));
            let closed = match self.conns.get(&to) {
                Some(c) => c.tx.send(frame).await.is_err(),
                None => true,
            };
            if closed {
                self.conns.remove(&to);
                let now = self.now();
                self.cores[k].on_disconnected(to, now);
            }
        }
    }

    /// Open the connection to `node` unless one is open: a hello for every session,
    /// then every welcome, then a reader task and a writer task.
    async fn ensure(&mut self, node: NodeId) -> Result<(), ClientError> {
        if self.conns.contains_key(&node) {
            return Ok(());
        }
        let addr = self.cluster.dial_addr(node).to_string();
        let handshake = |reason: String| ClientError::Handshake {
            node,
            addr: addr.clone(),
            reason,
        };
        let (rd, mut wr) = crate::open_connection(&self.cluster, node, self.tls.as_ref()).await?;
        let mut hellos = Vec::new();
        for c in &self.cores {
            hellos.extend(partita_wire::to_frame(&Wire::ClientHello {
                client: c.id(),
            }));
        }
        wr.write_all(&hellos)
            .await
            .map_err(|e| handshake(e.to_string()))?;
        wr.flush().await.map_err(|e| handshake(e.to_string()))?;
        let mut reader = FrameReader::new(rd);
        let mut welcomed = 0;
        let until = tokio::time::Instant::now() + self.opts.timeout;
        while welcomed < self.cores.len() {
            match tokio::time::timeout_at(until, reader.next()).await {
                Ok(Ok(Wire::ClientWelcome { node: n })) if n == node => welcomed += 1,
                Ok(Ok(Wire::ClientWelcome { node: n })) => {
                    return Err(handshake(format!("it says it is node {n}")))
                }
                // A reply for a session registered here a moment ago: keep it.
                Ok(Ok(w)) => self.stash.push_back((node, w)),
                Ok(Err(e)) => return Err(handshake(format!("{e}"))),
                Err(_) => {
                    return Err(handshake(format!(
                        "{welcomed} of {} welcomes within {:?}",
                        self.cores.len(),
                        self.opts.timeout
                    )))
                }
            }
        }
        self.next_gen += 1;
        let gen = self.next_gen;
        let tx = self.incoming_tx.clone();
        tokio::spawn(async move {
            loop {
                match reader.next().await {
                    Ok(w) => {
                        if tx.send((node, gen, Some(w))).await.is_err() {
                            return;
                        }
                    }
                    Err(_) => {
                        let _ = tx.send((node, gen, None)).await;
                        return;
                    }
                }
            }
        });
        self.conns.insert(
            node,
            Conn {
                tx: spawn_writer(wr),
                gen,
            },
        );
        Ok(())
    }
}
