//! In-process clusters for the runtime's integration tests: every node is
//! `run_node_until` on a task of the test's tokio runtime, on 127.0.0.1 with free
//! ports and a temporary data directory; a node is stopped (its listener and WAL
//! closed) and restarted on the same directory at will. A minimal client speaks the
//! wire protocol directly.
#![allow(dead_code)]

use partita_btree::Op;
use partita_config::ClusterConfig;
use partita_net::FrameReader;
use partita_runtime::NodeOptions;
use partita_types::{ClientId, Command, NodeId, Reply};
use partita_wire::to_frame;
use partita_wire::{NodeStatus, Wire};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// `n` free ports on 127.0.0.1, below the kernel's ephemeral range: a port `bind(0)`
/// handed out may become the local end of a reconnecting peer's connection while its
/// node is down, and the restart would then fail with `Address already in use`.
pub fn free_ports(n: usize) -> Vec<u16> {
    let base = partita_net::free_port_block(n as u16).expect("free ports");
    (0..n as u16).map(|i| base + i).collect()
}

/// The default local cluster (3 acceptors, 2 replicas) on free ports.
pub fn local_config(cluster_id: u64) -> ClusterConfig {
    let mut cfg = ClusterConfig::default_local(7100, cluster_id);
    for (n, port) in cfg.nodes.iter_mut().zip(free_ports(5)) {
        n.addr = format!("127.0.0.1:{port}");
    }
    cfg
}

pub struct TestCluster {
    pub cfg: ClusterConfig,
    pub data: PathBuf,
    running: BTreeMap<NodeId, (oneshot::Sender<()>, JoinHandle<anyhow::Result<()>>)>,
}

impl TestCluster {
    pub fn new(cfg: ClusterConfig, data: &Path) -> TestCluster {
        TestCluster {
            cfg,
            data: data.to_path_buf(),
            running: BTreeMap::new(),
        }
    }

    pub fn node_dir(&self, id: NodeId) -> PathBuf {
        self.data.join(format!("node-{id}"))
    }

    pub fn start(&mut self, id: NodeId) {
        let (tx, rx) = oneshot::channel::<()>();
        let opts = NodeOptions {
            service: partita_smr::service::<partita_btree::BPlusTree>(),
            cluster: self.cfg.clone(),
            id,
            data_dir: self.data.clone(),
            unsafe_bugs: Vec::new(),
            io_thread: false,
        };
        let handle = tokio::spawn(partita_runtime::run_node_until(opts, async move {
            let _ = rx.await;
        }));
        self.running.insert(id, (tx, handle));
    }

    pub fn start_all(&mut self) {
        let ids: Vec<NodeId> = self.cfg.nodes.iter().map(|n| n.id).collect();
        for id in ids {
            self.start(id);
        }
    }

    /// Stop a node and wait until its listener and WAL are closed.
    pub async fn stop(&mut self, id: NodeId) {
        let (tx, handle) = self.running.remove(&id).expect("node is running");
        let _ = tx.send(());
        handle
            .await
            .expect("node task")
            .unwrap_or_else(|e| panic!("node {id} failed: {e:#}"));
    }

    pub async fn stop_all(&mut self) {
        let ids: Vec<NodeId> = self.running.keys().copied().collect();
        for id in ids {
            self.stop(id).await;
        }
    }

    pub async fn status(&self, id: NodeId) -> Option<NodeStatus> {
        status(self.cfg.addr(id)).await
    }

    /// Poll node `id`'s status until `pred` holds (panics after `secs` seconds).
    pub async fn wait_for(
        &mut self,
        id: NodeId,
        secs: u64,
        what: &str,
        pred: impl Fn(&NodeStatus) -> bool,
    ) -> NodeStatus {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut last = None;
        loop {
            if let Some(s) = self.status(id).await {
                if pred(&s) {
                    return s;
                }
                last = Some(s);
            }
            if self.running.get(&id).is_some_and(|(_, h)| h.is_finished()) {
                let (_, handle) = self.running.remove(&id).expect("node is running");
                let why = match handle.await {
                    Ok(Ok(())) => "it returned without an error".to_string(),
                    Ok(Err(e)) => format!("{e:#}"),
                    Err(e) => format!("its task failed: {e}"),
                };
                panic!("node {id} exited while waiting for {what} ({why}); last status {last:?}");
            }
            assert!(
                Instant::now() < deadline,
                "node {id}: {what} not reached in {secs} s; last status {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

pub fn counter(s: &NodeStatus, name: &str) -> u64 {
    s.counters
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| *v)
        .sum()
}

pub async fn status(addr: std::net::SocketAddr) -> Option<NodeStatus> {
    let fut = async {
        let stream = TcpStream::connect(addr).await.ok()?;
        let (rd, mut wr) = stream.into_split();
        wr.write_all(&to_frame(&Wire::StatusRequest)).await.ok()?;
        let mut reader = FrameReader::new(rd);
        match reader.next().await {
            Ok(Wire::Status(s)) => Some(*s),
            _ => None,
        }
    };
    tokio::time::timeout(Duration::from_secs(1), fut)
        .await
        .ok()
        .flatten()
}

/// A client session on one replica's connection: requests go there (and are
/// forwarded to the leader), replies come back on it. Resubmits on silence.
pub struct TestClient {
    pub id: ClientId,
    pub replica: NodeId,
    pub seq: u64,
    /// The instance this client's session was opened at (0: not open).
    pub session: u64,
    reader: FrameReader,
    wr: OwnedWriteHalf,
}

impl TestClient {
    pub async fn connect(cfg: &ClusterConfig, replica: NodeId, id: ClientId) -> TestClient {
        let stream = TcpStream::connect(cfg.addr(replica)).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (rd, mut wr) = stream.into_split();
        wr.write_all(&to_frame(&Wire::ClientHello { client: id }))
            .await
            .unwrap();
        let mut reader = FrameReader::new(rd);
        match reader.next().await {
            Ok(Wire::ClientWelcome { node }) => assert_eq!(node, replica),
            other => panic!("node {replica} did not welcome the client: {other:?}"),
        }
        TestClient {
            id,
            replica,
            seq: 0,
            session: 0,
            reader,
            wr,
        }
    }

    /// Submit `cmd` (resubmitting every 500 ms) until its reply arrives.
    pub async fn submit(&mut self, cmd: Command) -> Reply {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            self.wr
                .write_all(&to_frame(&Wire::Request(cmd.clone())))
                .await
                .unwrap();
            let wait = tokio::time::timeout(Duration::from_millis(500), async {
                loop {
                    match self.reader.next().await {
                        Ok(Wire::Reply { reply, .. }) if reply.seq == cmd.seq => return reply,
                        Ok(_) => continue,
                        Err(e) => panic!("client connection failed: {e}"),
                    }
                }
            });
            if let Ok(r) = wait.await {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "command {} of client {} never answered",
                cmd.seq,
                self.id
            );
        }
    }

    /// The B+tree result a reply carries.
    pub fn result(r: &Reply) -> partita_btree::OpResult {
        partita_smr::reply_of::<partita_btree::BPlusTree>(&r.result)
    }

    /// Open this client's session: the open (sequence number 0) until its reply
    /// names the instance the session opened at, which later commands carry.
    pub async fn open_session(&mut self) {
        let open = Command::open(self.id, self.replica, 1);
        let reply = self.submit(open).await;
        let payload = reply.result.expect("an open is never refused");
        self.session = partita_types::session_of_reply(&payload).expect("an instance");
    }

    /// Command `seq` of this session carrying `op`.
    pub fn command(&self, seq: u64, op: &Op) -> Command {
        let mut c = partita_btree::service::command(self.id, seq, self.replica, op);
        c.session = self.session;
        c
    }

    /// Write raw frames on the connection.
    pub async fn write(&mut self, bytes: &[u8]) {
        self.wr.write_all(bytes).await.unwrap();
    }

    /// The next reply on the connection, if one comes within `wait`.
    pub async fn next_reply(&mut self, wait: Duration) -> Option<Reply> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.reader.next()).await {
                Ok(Ok(Wire::Reply { reply, .. })) => return Some(reply),
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => panic!("client connection failed: {e}"),
                Err(_) => return None,
            }
        }
    }

    /// The next command of this session, answered by this client's replica (the
    /// session is opened first if it is not).
    pub async fn execute(&mut self, op: Op) -> Reply {
        if self.session == 0 {
            self.open_session().await;
        }
        self.seq += 1;
        let cmd = self.command(self.seq, &op);
        self.submit(cmd).await
    }
}
