//! The Partita client library.
//!
//! A [`Client`] is one session: a random 64-bit id and a sequence number per command. It
//! sends each command to the entry node (the coordinator; the server in client-server
//! mode) and waits for the reply from the replica it chose (paper 001 §IV: only that
//! replica replies). After `timeout` without a reply it resubmits the *same* command
//! (same sequence number), so the replicas' reply cache answers a command that was
//! already executed instead of executing it twice. After `give_up` it returns
//! [`ClientError::Timeout`]: the outcome is then unknown (an `info` entry in a history).

use partita_runtime::net::{spawn_writer, FrameBytes, FrameReader};
use partita_runtime::{ClusterConfig, Mode, Wire};
use partita_types::{ClientId, Command, NodeId, Op, OpResult, Reply};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no node answers at {addr} (node {node}): {source}. Is the cluster running? (`partita up`)"
    )]
    Unreachable {
        node: NodeId,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("no reply within {0:?}; the command may or may not have been applied")]
    Timeout(Duration),
}

#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Resubmit after this long without a reply.
    pub timeout: Duration,
    /// Give up (outcome unknown) after this long.
    pub give_up: Duration,
    /// The replica that must reply; `None` picks one at random.
    pub replica: Option<NodeId>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            timeout: Duration::from_millis(1000),
            give_up: Duration::from_secs(10),
            replica: None,
        }
    }
}

enum Incoming {
    Reply(Reply),
    Refused { seq: u64, reason: String },
    Closed,
}

struct Conn {
    tx: mpsc::Sender<FrameBytes>,
}

pub struct Client {
    id: ClientId,
    seq: u64,
    cluster: ClusterConfig,
    opts: ClientOptions,
    replica: NodeId,
    entry: Option<Conn>,
    reply_conn: Option<Conn>,
    rx: mpsc::UnboundedReceiver<Incoming>,
    tx: mpsc::UnboundedSender<Incoming>,
    resubmissions: u64,
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
        let mut c = Client {
            id,
            seq: 0,
            cluster,
            opts,
            replica,
            entry: None,
            reply_conn: None,
            rx,
            tx,
            resubmissions: 0,
        };
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

    async fn open(&self, node: NodeId) -> Result<Conn, ClientError> {
        let addr = self.cluster.addr(node);
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| ClientError::Unreachable { node, addr, source })?;
        let _ = stream.set_nodelay(true);
        let (rd, wr) = stream.into_split();
        let tx = spawn_writer(wr);
        let _ = tx
            .send(Arc::new(partita_runtime::wire::to_frame(
                &Wire::ClientHello { client: self.id },
            )))
            .await;
        let events = self.tx.clone();
        tokio::spawn(async move {
            let mut reader = FrameReader::new(rd);
            loop {
                match reader.next().await {
                    Ok(Wire::Reply(r)) => {
                        if events.send(Incoming::Reply(r)).is_err() {
                            return;
                        }
                    }
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
        Ok(Conn { tx })
    }

    async fn ensure_connected(&mut self) -> Result<(), ClientError> {
        let entry_node = self.cluster.entry_node();
        let same = self.cluster.cluster.mode == Mode::Cs || entry_node == self.replica;
        if self.entry.as_ref().is_none_or(|c| c.tx.is_closed()) {
            self.entry = Some(self.open(entry_node).await?);
        }
        if !same && self.reply_conn.as_ref().is_none_or(|c| c.tx.is_closed()) {
            self.reply_conn = Some(self.open(self.replica).await?);
        }
        Ok(())
    }

    /// Execute one operation, exactly once, resubmitting on timeouts.
    pub async fn execute(&mut self, op: Op) -> Result<OpResult, ClientError> {
        self.seq += 1;
        let cmd = Command {
            client: self.id,
            seq: self.seq,
            reply_to: self.replica,
            op,
        };
        let frame = Arc::new(partita_runtime::wire::to_frame(&Wire::Request(cmd)));
        let started = Instant::now();
        let mut first = true;
        loop {
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
                    if let Some(e) = &self.entry {
                        let _ = e.tx.send(frame.clone()).await;
                    }
                }
                Err(e) => {
                    if started.elapsed() + self.opts.timeout >= self.opts.give_up {
                        return Err(e);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
            let deadline = tokio::time::Instant::now() + self.opts.timeout;
            loop {
                match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                    Ok(Some(Incoming::Reply(r))) if r.seq == self.seq && r.client == self.id => {
                        return Ok(r.result)
                    }
                    Ok(Some(Incoming::Reply(_))) => continue, // a late reply to an earlier command
                    Ok(Some(Incoming::Refused { seq, reason })) if seq == self.seq => {
                        tracing::debug!("command refused: {reason}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        break;
                    }
                    Ok(Some(Incoming::Refused { .. })) => continue,
                    Ok(Some(Incoming::Closed)) => {
                        // Let ensure_connected notice which one closed.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        break;
                    }
                    Ok(None) => unreachable!("the client holds a sender"),
                    Err(_) => break, // timeout: resubmit
                }
            }
        }
    }
}

/// Ask one node for its status (one-shot connection).
pub async fn node_status(
    addr: SocketAddr,
    timeout: Duration,
) -> Option<partita_runtime::NodeStatus> {
    let fut = async {
        let stream = TcpStream::connect(addr).await.ok()?;
        let (rd, wr) = stream.into_split();
        let tx = spawn_writer(wr);
        tx.send(Arc::new(partita_runtime::wire::to_frame(
            &Wire::StatusRequest,
        )))
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
