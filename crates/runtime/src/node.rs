//! One node process: the roles of the cluster file on real TCP and a real WAL.
//!
//! A single task owns every core of the node (acceptor, coordinator, learner, replica
//! or the client-server baseline) and handles one event at a time: a peer message, a
//! client request, a tick, or a batch of completed WAL writes. Actions the cores emit are
//! carried out in order: sends go to per-peer queues (messages to itself are handled
//! locally, without a socket), persists go to the WAL's group-commit thread, deliveries
//! go to the replica, whose replies go to the client's connection.

use crate::config::{ClusterConfig, Durability, Mode, Role};
use crate::net::{spawn_writer, FrameBytes, FrameReader};
use crate::wire::{to_frame, NodeStatus, Wire};
use anyhow::{bail, Context};
use partita_btree::BPlusTree;
use partita_consensus::{
    Acceptor, AcceptorRecord, Action, Coordinator, Learner, Msg, Outbox, Value, Vid,
};
use partita_smr::SequentialReplica;
use partita_types::{Ballot, ClientId, Command, NodeId, Reply};
use std::collections::{BTreeMap, HashMap, VecDeque};
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
    pub data_dir: PathBuf,
    /// Planted bugs, for tests that show the checks can fail: `lose-acked-writes`
    /// (replicas undo every 5th mutation after acknowledging it) and
    /// `reexecute-duplicates` (resubmitted commands execute again).
    pub unsafe_bugs: Vec<String>,
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
        conn: u64,
        cmd: Command,
    },
    Status {
        tx: mpsc::Sender<FrameBytes>,
    },
    Closed {
        conn: u64,
    },
    Persisted {
        tokens: Vec<u64>,
    },
    WalFailed {
        error: String,
    },
}

/// The identity file that ties a data directory to one node of one cluster.
fn check_identity(dir: &Path, cluster_id: u64, node: NodeId) -> anyhow::Result<()> {
    let path = dir.join("identity");
    let expect = format!("cluster_id = {cluster_id}\nnode_id = {node}\n");
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
    acceptor: Option<Acceptor>,
    coordinator: Option<Coordinator>,
    learner: Option<Learner>,
    replica: Option<SequentialReplica>,
    /// cs mode: the unreplicated server's instance counter.
    cs_instance: u64,
    peers: HashMap<NodeId, mpsc::Sender<FrameBytes>>,
    clients: HashMap<ClientId, (u64, mpsc::Sender<FrameBytes>)>,
    wal: Option<partita_wal::GroupCommit>,
    local: VecDeque<(NodeId, Msg)>,
    counters: BTreeMap<&'static str, u64>,
    tick: u64,
    replies: Vec<Reply>,
}

impl Node {
    fn count(&mut self, what: &'static str) {
        *self.counters.entry(what).or_default() += 1;
    }

    fn send_peer(&mut self, to: NodeId, frame: FrameBytes) {
        match self.peers.get(&to) {
            Some(tx) => {
                if tx.try_send(frame).is_err() {
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

    fn run(&mut self, out: Outbox) {
        let mut out = out;
        loop {
            // Encode each distinct message once even when it goes to several peers.
            let mut prev: Option<(Msg, FrameBytes)> = None;
            for a in out.drain(..) {
                match a {
                    Action::Send { to, msg } if to == self.id => {
                        self.local.push_back((self.id, msg))
                    }
                    Action::Send { to, msg } => {
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
                    Action::Persist { token, record } => {
                        let bytes = partita_types::encode(&record);
                        match &self.wal {
                            Some(w) => {
                                // Blocks only if the disk falls 4096 records behind, far
                                // beyond what the window of instances can queue.
                                if let Err(e) = w.submit(bytes, token) {
                                    error!("WAL refused a record: {e}");
                                }
                            }
                            None => panic!("persist on a node without a WAL"),
                        }
                    }
                    Action::Deliver { instance, value } => self.execute(instance, &value),
                }
            }
            let Some((from, msg)) = self.local.pop_front() else {
                break;
            };
            out = self.dispatch(from, msg);
        }
        self.flush_replies();
    }

    fn execute(&mut self, instance: u64, value: &Value) {
        let Some(r) = self.replica.as_mut() else {
            self.count("dropped_deliver_without_replica");
            return;
        };
        r.execute(instance, value, &mut self.replies);
    }

    fn flush_replies(&mut self) {
        for reply in std::mem::take(&mut self.replies) {
            match self.clients.get(&reply.client) {
                Some((_, tx)) => {
                    let f = Arc::new(to_frame(&Wire::Reply(reply)));
                    if tx.try_send(f).is_err() {
                        *self.counters.entry("dropped_reply_queue_full").or_default() += 1;
                    }
                }
                None => {
                    *self
                        .counters
                        .entry("dropped_reply_client_gone")
                        .or_default() += 1
                }
            }
        }
    }

    fn dispatch(&mut self, from: NodeId, msg: Msg) -> Outbox {
        let mut out = Vec::new();
        let mut handled = false;
        match &msg {
            Msg::Phase1B { .. } | Msg::Nack { .. } | Msg::Phase2B { .. } => {
                if let Some(c) = self.coordinator.as_mut() {
                    c.on_message(from, msg, &mut out);
                    c.invariants();
                    handled = true;
                }
            }
            Msg::Phase1A { .. } | Msg::RingVote { .. } => {
                if let Some(a) = self.acceptor.as_mut() {
                    a.on_message(from, msg, &mut out);
                    handled = true;
                }
            }
            Msg::Phase2A { .. } | Msg::Decide { .. } | Msg::DecideValue { .. } => {
                if let Some(l) = self.learner.as_mut() {
                    l.on_message(from, msg.clone(), &mut out);
                    handled = true;
                }
                if let Some(a) = self.acceptor.as_mut() {
                    a.on_message(from, msg, &mut out);
                    handled = true;
                }
            }
            Msg::Heartbeat { .. } | Msg::LearnReply { .. } => {
                if let Some(l) = self.learner.as_mut() {
                    l.on_message(from, msg, &mut out);
                    handled = true;
                }
            }
            Msg::LearnRequest { .. } => {
                if let Some(c) = self.coordinator.as_mut() {
                    c.on_message(from, msg.clone(), &mut out);
                    handled = true;
                }
                if let Some(a) = self.acceptor.as_mut() {
                    a.on_message(from, msg, &mut out);
                    handled = true;
                }
            }
        }
        if !handled {
            self.count("dropped_not_for_this_node");
        }
        out
    }

    fn on_request(&mut self, conn: u64, cmd: Command) {
        if self.cfg.cluster.mode == Mode::Cs {
            let Some(r) = self.replica.as_mut() else {
                unreachable!("cs server has a replica")
            };
            self.cs_instance += 1;
            let value = Value {
                vid: Vid {
                    ballot: Ballot::ZERO,
                    seq: self.cs_instance,
                },
                commands: vec![cmd],
            };
            r.execute(self.cs_instance, &value, &mut self.replies);
            self.flush_replies();
            return;
        }
        let (client, seq) = (cmd.client, cmd.seq);
        let refused = match self.coordinator.as_mut() {
            Some(c) => {
                let mut out = Vec::new();
                if c.on_command(cmd, &mut out) {
                    self.run(out);
                    None
                } else {
                    Some("coordinator queue full".to_string())
                }
            }
            None => Some(format!(
                "node {} does not coordinate; send commands to node {}",
                self.id,
                self.cfg.entry_node()
            )),
        };
        if let Some(reason) = refused {
            self.count("requests_refused");
            if let Some((_, tx)) = self.clients.get(&client) {
                let _ = tx.try_send(Arc::new(to_frame(&Wire::Refused {
                    client,
                    seq,
                    reason,
                })));
            } else {
                debug!(conn, "refused request from a connection without hello");
            }
        }
    }

    fn on_tick(&mut self) {
        self.tick += 1;
        let mut out = Vec::new();
        if let Some(c) = self.coordinator.as_mut() {
            c.on_tick(self.tick, &mut out);
        }
        if let Some(l) = self.learner.as_mut() {
            l.on_tick(self.tick, &mut out);
        }
        if !out.is_empty() {
            self.run(out);
        }
    }

    fn on_persisted(&mut self, tokens: Vec<u64>) {
        let mut out = Vec::new();
        let a = self
            .acceptor
            .as_mut()
            .expect("persist completions go to the acceptor");
        for t in tokens {
            a.on_persisted(t, &mut out);
        }
        a.invariants();
        self.run(out);
    }

    fn status(&self) -> NodeStatus {
        let node = self.cfg.node(self.id).expect("own node");
        let mut counters: Vec<(String, u64)> = self
            .counters
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        if let Some(c) = &self.coordinator {
            let s = c.stats();
            counters.push(("commands_received".into(), s.commands_received));
            counters.push(("values_proposed".into(), s.values_proposed));
            counters.push(("retransmits".into(), s.retransmits));
        }
        if let Some(r) = &self.replica {
            counters.push(("commands_executed".into(), r.stats().commands_executed));
        }
        NodeStatus {
            node: self.id,
            cluster_id: self.cfg.cluster.id,
            roles: node
                .roles
                .iter()
                .map(|r| format!("{r:?}").to_lowercase())
                .chain(self.coordinator.as_ref().map(|_| "coordinator".to_string()))
                .collect(),
            mode: format!("{:?}", self.cfg.cluster.mode).to_lowercase(),
            protocol: self.cfg.cluster.protocol.to_string(),
            durability: self.cfg.cluster.durability.to_string(),
            coordinator: self.coordinator.is_some(),
            ballot: self.coordinator.as_ref().map(|c| c.ballot().to_string()),
            decided_up_to: self.coordinator.as_ref().map(|c| c.decided_up_to()),
            executed_up_to: self.replica.as_ref().map(|r| r.last_instance()),
            digest: self.replica.as_ref().map(|r| r.digest()),
            entries: self.replica.as_ref().map(|r| r.tree().len() as u64),
            promised: self.acceptor.as_ref().map(|a| a.promised().to_string()),
            accepted: self.acceptor.as_ref().map(|a| a.accepted_count() as u64),
            accepted_max_instance: self.acceptor.as_ref().map(|a| a.max_accepted_instance()),
            counters,
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
            },
            Msg::Phase2A {
                ballot: b2,
                instance: i2,
                value: v2,
                decided: d2,
            },
        ) => b1 == b2 && i1 == i2 && Arc::ptr_eq(v1, v2) && d1 == d2,
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
        (Msg::Phase1B { .. }, _) | (Msg::LearnReply { .. }, _) => false,
        _ => a == b,
    }
}

/// Keep a link to one peer: connect (and reconnect), announce ourselves, then write
/// whatever the node queues for it, coalescing queued frames into one write.
fn spawn_peer_link(
    me: NodeId,
    cluster_id: u64,
    addr: std::net::SocketAddr,
    mut rx: mpsc::Receiver<FrameBytes>,
) {
    use tokio::io::AsyncWriteExt;
    tokio::spawn(async move {
        let hello = to_frame(&Wire::PeerHello {
            from: me,
            cluster_id,
        });
        let mut buf: Vec<u8> = Vec::with_capacity(256 * 1024);
        loop {
            let mut stream = match TcpStream::connect(addr).await {
                Ok(s) => s,
                Err(_) => {
                    // Drop what queued up while the peer was unreachable: consensus
                    // retransmits what matters, and stale messages only cost work.
                    while rx.try_recv().is_ok() {}
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    if rx.is_closed() {
                        return;
                    }
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            buf.clear();
            buf.extend_from_slice(&hello);
            loop {
                while buf.len() < 1 << 20 {
                    match rx.try_recv() {
                        Ok(f) => buf.extend_from_slice(&f),
                        Err(_) => break,
                    }
                }
                if !buf.is_empty() {
                    if stream.write_all(&buf).await.is_err() {
                        break;
                    }
                    buf.clear();
                }
                match rx.recv().await {
                    Some(f) => buf.extend_from_slice(&f),
                    None => return,
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
}

/// Serve one accepted connection: the first frame says who it is.
async fn serve_conn(
    stream: TcpStream,
    conn: u64,
    cluster_id: u64,
    events: mpsc::UnboundedSender<Event>,
) {
    let _ = stream.set_nodelay(true);
    let peer_addr = stream.peer_addr().ok();
    let (rd, wr) = stream.into_split();
    let mut reader = FrameReader::new(rd);
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
            drop(wr);
            loop {
                match reader.next().await {
                    Ok(Wire::Peer(msg)) => {
                        if events.send(Event::Peer { from, msg }).is_err() {
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
                    Err(crate::net::ReadError::Closed) => return,
                    Err(e) => {
                        warn!(from, "closing peer connection: {e}");
                        return;
                    }
                }
            }
        }
        Wire::ClientHello { client } => {
            let tx = spawn_writer(wr);
            if events
                .send(Event::ClientHello { conn, client, tx })
                .is_err()
            {
                return;
            }
            loop {
                match reader.next().await {
                    Ok(Wire::Request(cmd)) => {
                        if cmd.client != client {
                            warn!(
                                client,
                                "request for another client id on this connection; closing"
                            );
                            break;
                        }
                        if events.send(Event::Request { conn, cmd }).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {
                        warn!(client, "unexpected message on a client connection; closing");
                        break;
                    }
                    Err(crate::net::ReadError::Closed) => break,
                    Err(e) => {
                        warn!(client, "closing client connection: {e}");
                        break;
                    }
                }
            }
            let _ = events.send(Event::Closed { conn });
        }
        Wire::StatusRequest => {
            let tx = spawn_writer(wr);
            let _ = events.send(Event::Status { tx });
        }
        _ => warn!(?peer_addr, "connection did not start with a hello; closing"),
    }
}

/// Run a node until SIGINT/SIGTERM (or a fatal error).
pub async fn run_node(opts: NodeOptions) -> anyhow::Result<()> {
    let cfg = opts.cluster.clone();
    let id = opts.id;
    let Some(me) = cfg.node(id).cloned() else {
        bail!("node {id} is not in the cluster file")
    };
    let dir = opts.data_dir.join(format!("node-{id}"));
    std::fs::create_dir_all(&opts.data_dir)
        .with_context(|| format!("creating {}", opts.data_dir.display()))?;
    check_identity(&dir, cfg.cluster.id, id)?;
    let membership = cfg.membership();
    for bug in &opts.unsafe_bugs {
        if !["lose-acked-writes", "reexecute-duplicates"].contains(&bug.as_str()) {
            bail!("unknown --unsafe bug `{bug}` (known: lose-acked-writes, reexecute-duplicates)");
        }
        warn!("PLANTED BUG ENABLED: {bug}; this node is deliberately incorrect");
    }
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<Event>();

    let mut node = Node {
        id,
        cfg: cfg.clone(),
        acceptor: None,
        coordinator: None,
        learner: None,
        replica: None,
        cs_instance: 0,
        peers: HashMap::new(),
        clients: HashMap::new(),
        wal: None,
        local: VecDeque::new(),
        counters: BTreeMap::new(),
        tick: 0,
        replies: Vec::new(),
    };

    let mut start_out = Vec::new();
    match cfg.cluster.mode {
        Mode::Cs => {
            node.replica = Some(SequentialReplica::new(id, BPlusTree::new()));
        }
        Mode::Smr => {
            if me.roles.contains(&Role::Acceptor) {
                let durability = match cfg.cluster.durability {
                    Durability::Fsync => partita_wal::Durability::Fsync,
                    Durability::Memory => partita_wal::Durability::Memory,
                };
                let mut wopts = partita_wal::WalOptions::new(cfg.cluster.id, id);
                wopts.durability = durability;
                let (wal, recovered) = partita_wal::Wal::open(dir.join("wal"), wopts)
                    .with_context(|| format!("opening the WAL in {}", dir.display()))?;
                let mut records = Vec::with_capacity(recovered.len());
                for r in recovered.iter() {
                    let rec: AcceptorRecord = partita_types::decode(&r.payload)
                        .with_context(|| format!("WAL record {} does not decode", r.lsn))?;
                    records.push(rec);
                }
                let n = records.len();
                let acceptor = Acceptor::recover(id, membership.clone(), records);
                info!(records = n, promised = %acceptor.promised(), accepted = acceptor.accepted_count(), "acceptor recovered from its WAL");
                let tx = ev_tx.clone();
                let gc = partita_wal::GroupCommit::spawn(
                    wal,
                    partita_wal::GroupCommitOptions::default(),
                    move |c: partita_wal::Completion| match c {
                        partita_wal::Completion::Durable { tokens, .. } => {
                            let _ = tx.send(Event::Persisted { tokens });
                        }
                        partita_wal::Completion::Failed { error, .. } => {
                            let _ = tx.send(Event::WalFailed {
                                error: error.to_string(),
                            });
                        }
                    },
                )?;
                node.wal = Some(gc);
                if cfg.cluster.coordinator == Some(id) {
                    let mut c = Coordinator::new(
                        id,
                        membership.clone(),
                        cfg.coordinator_config(),
                        acceptor.promised(),
                    );
                    c.start(&mut start_out);
                    node.coordinator = Some(c);
                }
                node.acceptor = Some(acceptor);
            }
            if me.roles.contains(&Role::Replica) {
                node.learner = Some(Learner::new(
                    id,
                    membership.clone(),
                    cfg.learner_config(),
                    1,
                ));
                node.replica = Some(SequentialReplica::new(id, BPlusTree::new()));
            }
            for n in &cfg.nodes {
                if n.id == id {
                    continue;
                }
                let (tx, rx) = mpsc::channel(crate::net::SEND_QUEUE_FRAMES_MAX);
                spawn_peer_link(id, cfg.cluster.id, cfg.addr(n.id), rx);
                node.peers.insert(n.id, tx);
            }
        }
    }

    let listener = TcpListener::bind(cfg.addr(id))
        .await
        .with_context(|| format!("binding {}", cfg.addr(id)))?;
    info!(node = id, addr = %cfg.addr(id), mode = ?cfg.cluster.mode, protocol = %cfg.cluster.protocol, durability = %cfg.cluster.durability, "node listening");
    {
        let ev = ev_tx.clone();
        let cluster_id = cfg.cluster.id;
        tokio::spawn(async move {
            let mut conn = 0u64;
            loop {
                match listener.accept().await {
                    Ok((s, _)) => {
                        conn += 1;
                        tokio::spawn(serve_conn(s, conn, cluster_id, ev.clone()));
                    }
                    Err(e) => {
                        warn!("accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                }
            }
        });
    }
    if let Some(r) = node.replica.as_mut() {
        if opts.unsafe_bugs.iter().any(|b| b == "lose-acked-writes") {
            r.set_unsafe_lose_every(5);
        }
        if opts.unsafe_bugs.iter().any(|b| b == "reexecute-duplicates") {
            r.set_unsafe_reexecute_duplicates(true);
        }
    }
    node.run(start_out);

    let mut tick = tokio::time::interval(std::time::Duration::from_millis(cfg.cluster.tick_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            ev = ev_rx.recv() => {
                let Some(ev) = ev else { break };
                match ev {
                    Event::Peer { from, msg } => {
                        let out = node.dispatch(from, msg);
                        node.run(out);
                    }
                    Event::ClientHello { conn, client, tx } => { node.clients.insert(client, (conn, tx)); }
                    Event::Request { conn, cmd } => node.on_request(conn, cmd),
                    Event::Status { tx } => { let _ = tx.try_send(Arc::new(to_frame(&Wire::Status(Box::new(node.status()))))); }
                    Event::Closed { conn } => node.clients.retain(|_, (c, _)| *c != conn),
                    Event::Persisted { tokens } => node.on_persisted(tokens),
                    Event::WalFailed { error } => {
                        error!("WAL failure, stopping the node: {error}");
                        bail!("WAL failure: {error}");
                    }
                }
            }
            _ = tick.tick() => node.on_tick(),
            _ = tokio::signal::ctrl_c() => { info!("interrupted; stopping"); break; }
            _ = sigterm.recv() => { info!("terminated; stopping"); break; }
        }
    }
    if let Some(w) = node.wal.take() {
        let _ = w.shutdown();
    }
    Ok(())
}
