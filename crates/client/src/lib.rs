//! The Partita client library.
//!
//! A [`Client`] is one session: a random 64-bit id and a sequence number per command. It
//! sends each command to the entry node (the coordinator, or one of the cluster's
//! batchers when it has some; the server in client-server mode) and waits for the reply from the replica it chose (paper 001 §IV: only that
//! replica replies). After `timeout` without a reply it resubmits the *same* command
//! (same sequence number), so the replicas' reply cache answers a command that was
//! already executed instead of executing it twice. Each further timeout of the same
//! command waits twice as long, up to 4 × `timeout` ([`partita_types::timeout_backoff`]),
//! so that an overloaded cluster is not flooded with copies. After `give_up` it returns
//! [`ClientError::Timeout`]: the outcome is then unknown (an `info` entry in a history).
//!
//! Early replies (`[execution] early_replies`, paper 001 §VII): the replica may answer
//! with a tentative result, computed by speculative execution, and confirm it later.
//! A tentative result is never returned: [`Client::execute`] returns a result only once
//! a confirmation names that very result ([`partita_types::early::EarlyWait`]), or
//! when a final reply arrives. [`Client::last_tentative_after`] tells how long the
//! first tentative reply of the last command took (for the bench).

use partita_config::{ClusterConfig, Mode};
use partita_net::{spawn_writer, FrameReader};
use partita_types::early::EarlyWait;
use partita_types::{
    ClientId, Command, Instance, NodeId, Op, OpResult, PartitionId, PartitionLayout, Reply,
};
use partita_wire::Wire;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no node answers at {addr} (node {node}): {error}. Is the cluster running? (`partita up`)"
    )]
    Unreachable {
        node: NodeId,
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("no reply within {0:?}; the command may or may not have been applied")]
    Timeout(Duration),
    #[error("node {node} at {addr} did not welcome this client: {reason}")]
    Handshake {
        node: NodeId,
        addr: SocketAddr,
        reason: String,
    },
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
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            timeout: Duration::from_millis(1000),
            give_up: Duration::from_secs(10),
            replica: None,
            entry_index: None,
        }
    }
}

enum Incoming {
    Refused {
        seq: u64,
        reason: String,
    },
    Closed,
    /// Partitioned clusters: a reply read from replica `from`'s connection.
    Reply {
        from: NodeId,
        reply: Reply,
    },
    /// Partitioned clusters with early replies: a tentative reply or a confirmation
    /// read from replica `from`'s connection.
    Early {
        from: NodeId,
        early: partita_types::early::EarlyReply,
    },
    /// Partitioned clusters: replica `from`'s connection closed.
    ReplyClosed {
        from: NodeId,
    },
}

/// A connection whose frames this client writes directly (no writer task: one task
/// wakeup less per command).
struct Conn {
    wr: OwnedWriteHalf,
    broken: bool,
}

impl Conn {
    async fn send(&mut self, frame: &[u8]) {
        if self.wr.write_all(frame).await.is_err() {
            self.broken = true;
        }
    }
}

pub struct Client {
    id: ClientId,
    seq: u64,
    cluster: ClusterConfig,
    opts: ClientOptions,
    replica: NodeId,
    /// The node commands go to: a batcher (without batchers the initial coordinator;
    /// the server in cs mode) at first; after a timeout or a connection failure the
    /// next batcher, then the acceptors (`Membership::next_entry`), which forward to
    /// whichever node leads now.
    entry_node: NodeId,
    /// Where commands go.
    entry: Option<Conn>,
    /// The task watching the entry connection for refusals.
    entry_watch: Option<tokio::task::AbortHandle>,
    /// Where replies come from (the chosen replica). When the entry node is also the
    /// replica (cs mode), replies arrive on the entry connection and this holds its
    /// reading half.
    replies: Option<FrameReader>,
    reply_conn: Option<Conn>,
    /// Out-of-band news from the entry connection (refusals, closing).
    rx: mpsc::UnboundedReceiver<Incoming>,
    tx: mpsc::UnboundedSender<Incoming>,
    resubmissions: u64,
    /// State partitioning (paper 001 §III-C): which replicas hold which key range. A
    /// command goes out once, as one command, whatever partitions it addresses; the
    /// client waits for the answerer of each of them (the replica of its rank there,
    /// see [`PartitionLayout::answerer`]) and merges the sub-results.
    layout: PartitionLayout,
    /// Partitioned clusters: reply connections by replica, each read by a task that
    /// forwards to `rx`.
    answer_conns: HashMap<NodeId, (Conn, tokio::task::AbortHandle)>,
    /// Early replies: time from the call to the first tentative reply of the last
    /// command, if one came.
    last_tentative_after: Option<Duration>,
}

impl Client {
    pub async fn connect(
        cluster: ClusterConfig,
        opts: ClientOptions,
    ) -> Result<Client, ClientError> {
        let id = rand::random::<u64>() | 1;
        let executors = cluster.executors();
        let replica = opts
            .replica
            .unwrap_or_else(|| executors[(id >> 8) as usize % executors.len()]);
        let (tx, rx) = mpsc::unbounded_channel();
        let entry_node = match cluster.cluster.mode {
            Mode::Cs => cluster.entry_node(),
            Mode::Smr => cluster
                .membership()
                .client_entry(opts.entry_index.unwrap_or(id >> 16)),
        };
        let mut c = Client {
            id,
            seq: 0,
            cluster,
            opts,
            replica,
            entry_node,
            entry: None,
            entry_watch: None,
            replies: None,
            reply_conn: None,
            rx,
            tx,
            resubmissions: 0,
            layout: PartitionLayout::default(),
            answer_conns: HashMap::new(),
            last_tentative_after: None,
        };
        c.layout = c.cluster.partition_layout();
        c.ensure_connected().await?;
        Ok(c)
    }

    pub fn id(&self) -> ClientId {
        self.id
    }
    pub fn replica(&self) -> NodeId {
        self.replica
    }
    pub fn resubmissions(&self) -> u64 {
        self.resubmissions
    }
    /// Early replies: how long after the call of the last command its first tentative
    /// reply arrived (`None`: no tentative reply, e.g. without early replies).
    pub fn last_tentative_after(&self) -> Option<Duration> {
        self.last_tentative_after
    }

    async fn open(&self, node: NodeId) -> Result<(Conn, FrameReader), ClientError> {
        let addr = self.cluster.addr(node);
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|error| ClientError::Unreachable { node, addr, error })?;
        let _ = stream.set_nodelay(true);
        let (rd, wr) = stream.into_split();
        let mut conn = Conn { wr, broken: false };
        conn.send(&partita_wire::to_frame(&Wire::ClientHello {
            client: self.id,
        }))
        .await;
        // Wait until the node has registered this connection (see
        // `Wire::ClientWelcome`): a reply racing ahead of the registration is lost.
        let mut reader = FrameReader::new(rd);
        let handshake = |reason: String| ClientError::Handshake { node, addr, reason };
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
        Ok((conn, reader))
    }

    fn replies_on_entry(&self) -> bool {
        !self.partitioned()
            && (self.cluster.cluster.mode == Mode::Cs || self.entry_node == self.replica)
    }

    fn partitioned(&self) -> bool {
        self.layout.map.is_partitioned()
    }

    /// Partitioned clusters: open (or keep) a reply connection to the answerer of
    /// every partition `op` addresses, each read by a task feeding `rx`.
    async fn ensure_answerers(&mut self, op: &Op) -> Result<(), ClientError> {
        self.answer_conns.retain(|_, (c, _)| !c.broken);
        for p in self.layout.map.partitions_of(op) {
            let Some(node) = self.layout.answerer(self.replica, p) else {
                continue;
            };
            if self.answer_conns.contains_key(&node) {
                continue;
            }
            let (conn, reader) = self.open(node).await?;
            let events = self.tx.clone();
            let task = tokio::spawn(async move {
                let mut reader = reader;
                loop {
                    match reader.next().await {
                        Ok(Wire::Reply(reply)) => {
                            let _ = events.send(Incoming::Reply { from: node, reply });
                        }
                        Ok(Wire::Early(early)) => {
                            let _ = events.send(Incoming::Early { from: node, early });
                        }
                        Ok(_) => {}
                        Err(_) => {
                            let _ = events.send(Incoming::ReplyClosed { from: node });
                            return;
                        }
                    }
                }
            });
            self.answer_conns.insert(node, (conn, task.abort_handle()));
        }
        Ok(())
    }

    /// The node commands currently go to.
    pub fn entry_node(&self) -> NodeId {
        self.entry_node
    }

    /// Send commands to the next entry node from now on: the next batcher, then the
    /// acceptors (smr mode; a no-op in cs mode).
    fn rotate_entry(&mut self) {
        if self.cluster.cluster.mode == Mode::Cs {
            return;
        }
        self.entry_node = self.cluster.membership().next_entry(self.entry_node);
        self.drop_entry();
    }

    fn drop_entry(&mut self) {
        self.entry = None;
        if let Some(w) = self.entry_watch.take() {
            w.abort();
        }
        if self.replies_on_entry() {
            self.replies = None;
        }
    }

    /// Wait for replies from the next replica from now on.
    fn rotate_replica(&mut self) {
        let executors = self.cluster.executors();
        if executors.len() < 2 {
            return;
        }
        let at = executors.iter().position(|&r| r == self.replica);
        self.replica = executors[at.map_or(0, |i| (i + 1) % executors.len())];
        self.reply_conn = None;
        self.replies = None;
        if self.replies_on_entry() {
            self.drop_entry();
        }
    }

    async fn ensure_connected(&mut self) -> Result<(), ClientError> {
        let entry_node = self.entry_node;
        let same = self.replies_on_entry();
        if self.entry.as_ref().is_none_or(|c| c.broken) {
            let (conn, reader) = self.open(entry_node).await?;
            self.entry = Some(conn);
            if same {
                self.replies = Some(reader);
            } else {
                // Only refusals come back on the entry connection: watch it in a task.
                let events = self.tx.clone();
                let task = tokio::spawn(async move {
                    let mut reader = reader;
                    loop {
                        match reader.next().await {
                            Ok(Wire::Refused { seq, reason, .. }) => {
                                let _ = events.send(Incoming::Refused { seq, reason });
                            }
                            Ok(_) => {}
                            Err(_) => {
                                let _ = events.send(Incoming::Closed);
                                return;
                            }
                        }
                    }
                });
                self.entry_watch = Some(task.abort_handle());
            }
        }
        if !same
            && !self.partitioned()
            && (self.reply_conn.as_ref().is_none_or(|c| c.broken) || self.replies.is_none())
        {
            let (conn, reader) = self.open(self.replica).await?;
            self.reply_conn = Some(conn);
            self.replies = Some(reader);
        }
        Ok(())
    }

    /// How long to wait for a reply after `timeouts` timeouts of the same command:
    /// the timeout, backed off (`partita_types::timeout_backoff`).
    fn timeout(&self, timeouts: u32) -> Duration {
        self.opts.timeout * partita_types::timeout_backoff(u64::from(timeouts))
    }

    /// Execute one operation, exactly once, resubmitting on timeouts.
    pub async fn execute(&mut self, op: Op) -> Result<OpResult, ClientError> {
        if self.partitioned() {
            return self.execute_partitioned(op).await;
        }
        self.seq += 1;
        let mut cmd = Command {
            client: self.id,
            seq: self.seq,
            reply_to: self.replica,
            op,
        };
        let mut frame = partita_wire::to_frame(&Wire::Request(cmd.clone()));
        let started = Instant::now();
        let mut first = true;
        let mut timeouts = 0u32;
        // Tentative results and confirmations for this command, across resubmissions.
        let mut early = EarlyWait::default();
        self.last_tentative_after = None;
        loop {
            if cmd.reply_to != self.replica {
                // Same (client, seq): whichever replica answers, the command runs once.
                cmd.reply_to = self.replica;
                frame = partita_wire::to_frame(&Wire::Request(cmd.clone()));
            }
            if started.elapsed() >= self.opts.give_up {
                return Err(ClientError::Timeout(self.opts.give_up));
            }
            if !first {
                self.resubmissions += 1;
            }
            first = false;
            // A broken connection is reopened; if no node answers we keep trying until
            // give_up, since a restarting node may come back.
            match self.ensure_connected().await {
                Ok(()) => {
                    if let Some(e) = self.entry.as_mut() {
                        e.send(&frame).await;
                    }
                }
                Err(e) => {
                    tracing::debug!("connecting: {e}");
                    if started.elapsed() + self.opts.timeout >= self.opts.give_up {
                        return Err(e);
                    }
                    // Try another node: the next acceptor forwards to the leader, the
                    // next replica answers from the same replicated state.
                    if let ClientError::Unreachable { node, .. } = &e {
                        if *node == self.entry_node {
                            self.rotate_entry();
                        } else if *node == self.replica {
                            self.rotate_replica();
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
            let deadline = tokio::time::Instant::now() + self.timeout(timeouts);
            while let Some(reader) = self.replies.as_mut() {
                tokio::select! {
                    r = tokio::time::timeout_at(deadline, reader.next()) => match r {
                        Ok(Ok(Wire::Reply(r))) if r.seq == self.seq && r.client == self.id => return Ok(r.result),
                        Ok(Ok(Wire::Early(e))) if e.seq() == self.seq && e.client() == self.id => {
                            if matches!(e, partita_types::early::EarlyReply::Tentative(_)) {
                                self.last_tentative_after.get_or_insert(started.elapsed());
                            }
                            if let Some(result) = early.on_early(&e) {
                                return Ok(result);
                            }
                        }
                        Ok(Ok(Wire::Refused { seq, reason, .. })) if seq == self.seq => {
                            tracing::debug!("command refused: {reason}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            break;
                        }
                        Ok(Ok(_)) => continue, // a late reply to an earlier command
                        Ok(Err(_)) => {
                            // The reply connection broke: reopen it and resubmit.
                            self.replies = None;
                            if self.replies_on_entry() {
                                if let Some(e) = self.entry.as_mut() { e.broken = true; }
                            } else if let Some(c) = self.reply_conn.as_mut() {
                                c.broken = true;
                            }
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            break;
                        }
                        Err(_) => {
                            // Timeout: resubmit through the next acceptor, and every
                            // second time also wait on the next replica.
                            timeouts += 1;
                            self.rotate_entry();
                            if timeouts.is_multiple_of(2) {
                                self.rotate_replica();
                            }
                            break;
                        }
                    },
                    ev = self.rx.recv() => match ev {
                        Some(Incoming::Refused { seq, reason }) if seq == self.seq => {
                            tracing::debug!("command refused: {reason}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            break;
                        }
                        Some(Incoming::Refused { .. })
                        | Some(Incoming::Reply { .. })
                        | Some(Incoming::Early { .. })
                        | Some(Incoming::ReplyClosed { .. }) => continue,
                        Some(Incoming::Closed) => {
                            if let Some(e) = self.entry.as_mut() { e.broken = true; }
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            break;
                        }
                        None => unreachable!("the client holds a sender"),
                    },
                }
            }
        }
    }
}

impl Client {
    /// [`Client::execute`] on a partitioned cluster: the command is sent once to the
    /// entry node; the client waits for one sub-result per addressed partition, all
    /// from the same instance (a resubmission may be ordered again, and only the
    /// sub-results of one execution merge into a linearizable result), and merges them.
    async fn execute_partitioned(&mut self, op: Op) -> Result<OpResult, ClientError> {
        self.seq += 1;
        let need = self.layout.map.mask(&op).count_ones() as usize;
        let mut cmd = Command {
            client: self.id,
            seq: self.seq,
            reply_to: self.replica,
            op,
        };
        let mut parts: BTreeMap<Instance, Vec<(PartitionId, OpResult)>> = BTreeMap::new();
        // Early replies: per partition, the tentative sub-results and confirmations
        // (each partition's answerer confirms its own sub-result).
        let mut early: BTreeMap<PartitionId, EarlyWait> = BTreeMap::new();
        self.last_tentative_after = None;
        let started = Instant::now();
        let mut first = true;
        let mut timeouts = 0u32;
        loop {
            cmd.reply_to = self.replica;
            if started.elapsed() >= self.opts.give_up {
                return Err(ClientError::Timeout(self.opts.give_up));
            }
            if !first {
                self.resubmissions += 1;
            }
            first = false;
            let connected = match self.ensure_connected().await {
                Ok(()) => self.ensure_answerers(&cmd.op).await,
                Err(e) => Err(e),
            };
            if let Err(e) = connected {
                tracing::debug!("{e}");
                if started.elapsed() + self.opts.timeout >= self.opts.give_up {
                    return Err(e);
                }
                if let ClientError::Unreachable { node, .. } = &e {
                    if *node == self.entry_node {
                        self.rotate_entry();
                    } else {
                        self.rotate_replica();
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            let frame = partita_wire::to_frame(&Wire::Request(cmd.clone()));
            if let Some(e) = self.entry.as_mut() {
                e.send(&frame).await;
            }
            let deadline = tokio::time::Instant::now() + self.timeout(timeouts);
            loop {
                let ev = match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                    Ok(ev) => ev.expect("the client holds a sender"),
                    Err(_) => {
                        tracing::debug!(
                            "no reply to command {} within {:?}",
                            self.seq,
                            self.timeout(timeouts)
                        );
                        timeouts += 1;
                        self.rotate_entry();
                        if timeouts.is_multiple_of(2) {
                            self.rotate_replica();
                        }
                        break;
                    }
                };
                // A final sub-result (partition, instance, result), if this event is one.
                let part = match ev {
                    Incoming::Reply { from, reply } => {
                        if reply.seq != self.seq || reply.client != self.id {
                            continue; // a late reply to an earlier command
                        }
                        let Some(p) = self.layout.partition_of_replica(from) else {
                            continue;
                        };
                        (p, reply.instance, reply.result)
                    }
                    Incoming::Early { from, early: e } => {
                        if e.seq() != self.seq || e.client() != self.id {
                            continue;
                        }
                        let Some(p) = self.layout.partition_of_replica(from) else {
                            continue;
                        };
                        if matches!(e, partita_types::early::EarlyReply::Tentative(_)) {
                            self.last_tentative_after.get_or_insert(started.elapsed());
                        }
                        match early.entry(p).or_default().on_early_at(&e) {
                            Some((instance, result)) => (p, instance, result),
                            None => continue,
                        }
                    }
                    Incoming::ReplyClosed { from } => {
                        tracing::debug!("reply connection to node {from} closed");
                        if let Some((c, _)) = self.answer_conns.get_mut(&from) {
                            c.broken = true;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        break;
                    }
                    Incoming::Refused { seq, reason } if seq == self.seq => {
                        tracing::debug!("command refused: {reason}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        break;
                    }
                    Incoming::Refused { .. } => continue,
                    Incoming::Closed => {
                        tracing::debug!("entry connection closed");
                        if let Some(e) = self.entry.as_mut() {
                            e.broken = true;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        break;
                    }
                };
                let (p, instance, result) = part;
                let got = parts.entry(instance).or_default();
                if got.iter().any(|(q, _)| *q == p) {
                    continue;
                }
                got.push((p, result));
                if got.len() == need {
                    let got = parts.remove(&instance).expect("just filled");
                    match self.layout.map.merge(&cmd.op, &got) {
                        Ok(r) => return Ok(r),
                        Err(m) => tracing::warn!("sub-results do not merge: {m}"),
                    }
                }
            }
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        for (_, (_, task)) in self.answer_conns.drain() {
            task.abort();
        }
        if let Some(w) = self.entry_watch.take() {
            w.abort();
        }
    }
}

/// Ask one node for its status (one-shot connection).
pub async fn node_status(addr: SocketAddr, timeout: Duration) -> Option<partita_wire::NodeStatus> {
    let fut = async {
        let stream = TcpStream::connect(addr).await.ok()?;
        let (rd, wr) = stream.into_split();
        let tx = spawn_writer(wr);
        tx.send(Arc::new(partita_wire::to_frame(&Wire::StatusRequest)))
            .await
            .ok()?;
        let mut reader = FrameReader::new(rd);
        match reader.next().await {
            Ok(Wire::Status(s)) => Some(*s),
            _ => None,
        }
    };
    tokio::time::timeout(timeout, fut).await.ok().flatten()
}
