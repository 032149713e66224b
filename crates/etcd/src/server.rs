//! The gateway: tonic services over a pool of Partita client sessions.

use crate::convert::{self, unsupported};
use crate::pb::etcdserverpb as pb;
use partita_client::kv::KvClient;
use partita_client::{ClientError, ClientOptions};
use partita_config::ClusterConfig;
use partita_kv::{KvCommand, KvReply};
use partita_types::members::{MemberChange, Members};
use partita_types::NodeId;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

/// Idle client sessions kept for reuse. A session runs one command at a time, so the
/// gateway needs as many as it has requests in flight: with fewer kept, every burst
/// above the pool opens sessions (an ordered command each) and drops them again (256
/// etcd clients against a pool of 32 ran at a tenth of the throughput).
const POOL_MAX: usize = 4096;
/// A watcher with nothing new polls again after this long at first, doubling up to
/// [`POLL_MAX`] while nothing happens.
const POLL_MIN: Duration = Duration::from_millis(5);
const POLL_MAX: Duration = Duration::from_millis(100);
/// A write through this gateway wakes its watchers of the keys it changed at once
/// ([`Gateway::wrote`]); this many writes may wait for watchers to look.
const WROTE_QUEUE: usize = 1024;
/// Events fetched per poll (whole revisions: a revision is never split).
const EVENTS_PER_FETCH: u64 = 1000;
/// With `progress_notify`, a watcher with nothing to send says how far it got after
/// this long.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// The etcd version this gateway answers as (the API it follows).
pub const ETCD_VERSION: &str = "3.4.0";
/// Batching: requests in flight together at one gateway are ordered as one
/// `KvCommand::Batch` (each executed as if alone, with its own revision), at most this
/// many per batch ...
const BATCH_REQUESTS_MAX: usize = 256;
/// ... of at most this many key and value bytes (a larger request goes alone) ...
const BATCH_BYTES_MAX: usize = 256 << 10;
/// ... with at most this many batches in flight: while they are, requests queue and
/// the next batch takes them all.
const BATCHES_IN_FLIGHT: usize = 8;

/// How much sooner a gateway with the planted `etcd-expire-leases-early` revokes a
/// lease than its own reckoning of the expiry.
const EARLY: Duration = Duration::from_millis(1_500);

/// Bugs planted in the gateway, for tests of the checks (`--unsafe NAME` of
/// `partita node`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Planted {
    /// `etcd-ack-keepalives-unordered`: a keep-alive is answered with the lease's TTL
    /// read in order, and never renewed.
    pub ack_keepalives_unordered: bool,
    /// `etcd-expire-leases-early`: on S-SMR/DS-SMR the gateway revokes a lease it
    /// finds within 1.5 s of its expiry with a plain revoke, trusting its own
    /// reckoning rather than ordering the check of the expiry
    /// ([`KvCommand::LeaseExpire`]): a lease renewed meanwhile loses its keys inside
    /// its TTL.
    pub expire_leases_early: bool,
}

/// A request waiting for the batcher.
struct Queued {
    cmd: KvCommand,
    bytes: usize,
    reply: tokio::sync::oneshot::Sender<Result<KvReply, Status>>,
}

/// The state shared by every service of one gateway.
pub struct Gateway {
    cluster: ClusterConfig,
    node: NodeId,
    /// The cluster runs the store on S-SMR or DS-SMR: its keys are objects of several
    /// partitions, each with its own history, leases are objects that the gateways
    /// expire, and there is no store-wide digest.
    objects: bool,
    /// Idle sessions, with when each was last used.
    pool: Mutex<Vec<(Instant, KvClient)>>,
    /// A pooled session idle this long is dropped rather than reused: the cluster
    /// forgets sessions idle for its lease, and a command on a forgotten session ends
    /// with an unknown outcome.
    idle_max: Duration,
    /// From the node's status: the round of the newest ballot its replica delivered
    /// under (our "raft term"), that ballot's leader, and the last executed instance.
    term: AtomicU64,
    leader: AtomicU64,
    applied: AtomicU64,
    /// The batcher's queue, once [`Gateway::start_batching`] started it.
    batcher: std::sync::OnceLock<mpsc::UnboundedSender<Queued>>,
    /// Batches ordered and the requests they carried.
    batches: AtomicU64,
    batched: AtomicU64,
    planted: std::sync::OnceLock<Planted>,
    /// NOSPACE alarms: (member, why), from the nodes' status (see
    /// [`Gateway::follow_status`]).
    alarms: Mutex<Vec<(u64, String)>>,
    /// On S-SMR/DS-SMR, the leases this gateway granted or renewed (or found listed),
    /// each with when it should have expired by this gateway's clock
    /// ([`Gateway::start_expiring`]).
    expiring: Mutex<HashMap<i64, Instant>>,
    /// Wakes the expirer when a lease's deadline comes sooner than it sleeps.
    expiring_changed: tokio::sync::Notify,
    /// What each write executed through this gateway changed ([`Changed`]): a
    /// watcher of those keys that backed off looks again at once, rather than after
    /// up to [`POLL_MAX`] (a lock's next holder, watching its predecessor's key, hears
    /// of the release that much sooner). Writes through other gateways are found by
    /// polling.
    wrote: tokio::sync::broadcast::Sender<Arc<Changed>>,
}

/// The keys a write changed, as etcd's (key, range end) pairs, or every key (a lease's
/// revocation deletes keys nobody named).
#[derive(Debug)]
enum Changed {
    Ranges(Vec<(Vec<u8>, Vec<u8>)>),
    Everything,
}

impl Changed {
    /// What `cmd` may change, if anything.
    fn by(cmd: &KvCommand) -> Option<Changed> {
        fn op(o: &partita_kv::RequestOp, out: &mut Vec<(Vec<u8>, Vec<u8>)>) {
            match o {
                partita_kv::RequestOp::Put(p) => out.push((p.key.clone(), Vec::new())),
                partita_kv::RequestOp::DeleteRange(d) => out.push((d.key.clone(), d.end.clone())),
                partita_kv::RequestOp::Range(_) => {}
            }
        }
        fn ranges(cmd: &KvCommand, out: &mut Vec<(Vec<u8>, Vec<u8>)>) -> bool {
            match cmd {
                KvCommand::Put(p) => out.push((p.key.clone(), Vec::new())),
                KvCommand::DeleteRange(d) => out.push((d.key.clone(), d.end.clone())),
                KvCommand::Txn(t) => t.success.iter().chain(&t.failure).for_each(|o| op(o, out)),
                KvCommand::Batch(cmds) => return cmds.iter().all(|c| ranges(c, out)),
                KvCommand::LeaseRevoke(_) | KvCommand::LeaseExpire(_) => return false,
                _ => {}
            }
            true
        }
        let mut out = Vec::new();
        match ranges(cmd, &mut out) {
            false => Some(Changed::Everything),
            true if out.is_empty() => None,
            true => Some(Changed::Ranges(out)),
        }
    }

    /// Whether it may have changed a key of the watch (`key`, `end`). Checked for
    /// every watcher on every write, so without copying a key.
    fn touches(&self, key: &[u8], end: &[u8]) -> bool {
        use partita_kv::KeyRange;
        // A range's lowest key, and whether a key is at or below its top.
        fn lo<'a>(r: &KeyRange<'a>) -> &'a [u8] {
            match *r {
                KeyRange::Single(k) | KeyRange::From(k) => k,
                KeyRange::Between(a, _) => a,
            }
        }
        fn under(k: &[u8], r: &KeyRange<'_>) -> bool {
            match *r {
                KeyRange::Single(top) => k <= top,
                KeyRange::From(_) => true,
                KeyRange::Between(_, end) => k < end,
            }
        }
        let w = KeyRange::new(key, end);
        match self {
            Changed::Everything => true,
            Changed::Ranges(rs) => rs.iter().any(|(k, e)| {
                let c = KeyRange::new(k, e);
                !c.is_empty() && !w.is_empty() && under(lo(&c), &w) && under(lo(&w), &c)
            }),
        }
    }
}

pub fn status_of(e: ClientError) -> Status {
    match e {
        ClientError::Rejected(m) => Status::invalid_argument(m),
        ClientError::BadReply(m) => Status::internal(format!("partita: {m}")),
        e @ (ClientError::Timeout(_) | ClientError::SessionExpired) => {
            Status::unavailable(format!("etcdserver: request timed out ({e})"))
        }
        e => Status::unavailable(e.to_string()),
    }
}

impl Gateway {
    pub fn new(cluster: ClusterConfig, node: NodeId) -> Arc<Gateway> {
        // Until a replica delivers a value under a new ballot, the leader is the
        // cluster's first coordinator, under ballot zero (round 0).
        let leader = cluster.cluster.coordinator.map_or(0, u64::from);
        let idle_max = match cluster.sessions.lease_ms {
            0 => Duration::MAX,
            ms => Duration::from_millis(ms / 2),
        };
        Arc::new(Gateway {
            objects: cluster.execution.is_ssmr(),
            cluster,
            node,
            pool: Mutex::new(Vec::new()),
            idle_max,
            term: AtomicU64::new(1),
            leader: AtomicU64::new(leader),
            applied: AtomicU64::new(0),
            batcher: std::sync::OnceLock::new(),
            batches: AtomicU64::new(0),
            batched: AtomicU64::new(0),
            planted: std::sync::OnceLock::new(),
            alarms: Mutex::new(Vec::new()),
            expiring: Mutex::new(HashMap::new()),
            expiring_changed: tokio::sync::Notify::new(),
            wrote: tokio::sync::broadcast::channel(WROTE_QUEUE).0,
        })
    }

    /// Plant bugs (tests of the checks only); once, before serving.
    pub fn plant(&self, planted: Planted) {
        let _ = self.planted.set(planted);
    }

    fn planted(&self) -> Planted {
        self.planted.get().copied().unwrap_or_default()
    }

    /// Order the requests in flight together as one command from now on (on a
    /// partitioned cluster a batch could span partitions, so it stays off there, and
    /// on S-SMR/DS-SMR, where a batch is refused). Returns whether batching is on.
    pub fn start_batching(self: &Arc<Self>) -> bool {
        if self.cluster.partitioning.partitions > 1 || self.objects {
            return false;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        if self.batcher.set(tx).is_ok() {
            tokio::spawn(self.clone().run_batcher(rx));
        }
        true
    }

    /// On S-SMR/DS-SMR, expire the leases: no partition holds every lease, so no
    /// replica expires them as it executes (the one store does, in ordered time).
    /// Instead each gateway keeps the deadlines of the leases it granted or renewed,
    /// by its own clock, and when one passes it orders a [`KvCommand::LeaseExpire`],
    /// which revokes the lease only if it has expired at its own place in the order,
    /// deleting its keys in every partition in one revision (etcd's leader does the
    /// same: its lessor finds a lease expired and proposes its revocation). If the
    /// lease lives on (renewed through another gateway, or ordered time behind), an
    /// ordered read of its time to live sets the next deadline. Every 30 s each gateway
    /// also lists every lease (a scan of every partition), to take on those nobody
    /// tracks (granted through a gateway that stopped). So keys outlive their lease by
    /// little while a gateway that renewed it runs, by up to 30 s otherwise, and
    /// forever on a cluster with no etcd endpoint; a holder's keys are never deleted
    /// before its TTL ends, which the ordered check guarantees whoever sends it,
    /// however late or often. Returns whether it started.
    pub fn start_expiring(self: &Arc<Self>) -> bool {
        if !self.objects {
            return false;
        }
        tokio::spawn(self.clone().expire_leases());
        true
    }

    async fn expire_leases(self: Arc<Self>) {
        const LIST_EVERY: Duration = Duration::from_secs(30);
        let mut listed: Option<Instant> = None;
        loop {
            if listed.is_none_or(|t| t.elapsed() >= LIST_EVERY) {
                listed = Some(Instant::now());
                match self.execute(KvCommand::LeaseLeases).await {
                    Ok(KvReply::LeaseLeases(l)) => {
                        let now = Instant::now();
                        let mut t = self.expiring.lock().expect("expiring");
                        for (&id, &left) in l.ids.iter().zip(&l.remaining_ms) {
                            t.entry(id).or_insert(now + Duration::from_millis(left));
                        }
                    }
                    Ok(other) => tracing::warn!(node = self.node, "listing leases: {other:?}"),
                    Err(e) => tracing::debug!(node = self.node, "listing leases: {e}"),
                }
            }
            let now = Instant::now();
            let due: Vec<i64> = {
                let t = self.expiring.lock().expect("expiring");
                t.iter()
                    .filter(|(_, at)| **at <= now)
                    .map(|(id, _)| *id)
                    .collect()
            };
            for id in due {
                self.expire_one(id).await;
            }
            let next = {
                let t = self.expiring.lock().expect("expiring");
                let list = listed.map_or(now, |l| l + LIST_EVERY);
                t.values().copied().min().map_or(list, |at| at.min(list))
            };
            tokio::select! {
                _ = tokio::time::sleep_until(next.max(Instant::now()).into()) => {}
                _ = self.expiring_changed.notified() => {}
            }
        }
    }

    /// Lease `id`'s deadline passed: order the check of its expiry, and if it lives
    /// on, set its next deadline from its ordered time to live.
    async fn expire_one(&self, id: i64) {
        let retry = |this: &Self, after: Duration| {
            let mut t = this.expiring.lock().expect("expiring");
            if let Some(at) = t.get_mut(&id) {
                *at = Instant::now() + after;
            }
        };
        let gone = |this: &Self| {
            this.expiring.lock().expect("expiring").remove(&id);
        };
        let cmd = match self.planted().expire_leases_early {
            // Planted: revoked on this gateway's reckoning.
            true => KvCommand::lease_revoke(id),
            false => KvCommand::lease_expire(id),
        };
        match self.execute(cmd).await {
            Err(e) if e.code() == tonic::Code::NotFound => return gone(self),
            Err(e) => {
                tracing::debug!(node = self.node, "expiring lease {id:x}: {e}");
                return retry(self, Duration::from_millis(500));
            }
            Ok(_) => {}
        }
        match self.execute(KvCommand::lease_time_to_live(id, false)).await {
            Ok(KvReply::LeaseTimeToLive(t)) if t.ttl < 0 => gone(self),
            // Whole seconds left, truncated: look again then, or soon.
            Ok(KvReply::LeaseTimeToLive(t)) => retry(
                self,
                Duration::from_secs(u64::try_from(t.ttl).unwrap_or(0))
                    .max(Duration::from_millis(250)),
            ),
            _ => retry(self, Duration::from_millis(500)),
        }
    }

    /// Batches ordered so far, and the requests they carried.
    pub fn batch_counts(&self) -> (u64, u64) {
        (
            self.batches.load(Ordering::Relaxed),
            self.batched.load(Ordering::Relaxed),
        )
    }

    async fn run_batcher(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<Queued>) {
        let permits = Arc::new(tokio::sync::Semaphore::new(BATCHES_IN_FLIGHT));
        let mut carried: Option<Queued> = None;
        // What batching did, logged every 10 s while it does something.
        let mut reported = (Instant::now(), 0u64, 0u64);
        loop {
            if reported.0.elapsed() >= Duration::from_secs(10) {
                let (b, r) = self.batch_counts();
                if b > reported.1 {
                    tracing::info!(
                        node = self.node,
                        "etcd gateway: {} batches carried {} requests in the last {:.0} s \
                         (mean {:.1} per batch)",
                        b - reported.1,
                        r - reported.2,
                        reported.0.elapsed().as_secs_f64(),
                        (r - reported.2) as f64 / (b - reported.1) as f64
                    );
                }
                reported = (Instant::now(), b, r);
            }
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let first = match carried.take() {
                Some(q) => q,
                None => match rx.recv().await {
                    Some(q) => q,
                    None => return,
                },
            };
            let mut bytes = first.bytes;
            let mut batch = vec![first];
            while batch.len() < BATCH_REQUESTS_MAX {
                match rx.try_recv() {
                    Ok(q) if bytes + q.bytes > BATCH_BYTES_MAX => {
                        carried = Some(q);
                        break;
                    }
                    Ok(q) => {
                        bytes += q.bytes;
                        batch.push(q);
                    }
                    Err(_) => break,
                }
            }
            let gw = self.clone();
            tokio::spawn(async move {
                let _permit = permit;
                if batch.len() == 1 {
                    let q = batch.pop().expect("one");
                    let r = gw.execute_one(q.cmd).await;
                    let _ = q.reply.send(r);
                    return;
                }
                gw.batches.fetch_add(1, Ordering::Relaxed);
                gw.batched.fetch_add(batch.len() as u64, Ordering::Relaxed);
                let (cmds, replies): (Vec<_>, Vec<_>) =
                    batch.into_iter().map(|q| (q.cmd, q.reply)).unzip();
                match gw.execute_one(KvCommand::Batch(cmds)).await {
                    Ok(KvReply::Batch(rs)) if rs.len() == replies.len() => {
                        for (tx, r) in replies.into_iter().zip(rs) {
                            let _ = tx.send(Ok(r));
                        }
                    }
                    Ok(other) => {
                        let e = mismatch(&other);
                        for tx in replies {
                            let _ = tx.send(Err(e.clone()));
                        }
                    }
                    // The outcome of the batch is that of every request in it.
                    Err(e) => {
                        for tx in replies {
                            let _ = tx.send(Err(e.clone()));
                        }
                    }
                }
            });
        }
    }

    /// Execute one request through the cluster (ordered, so linearizable): batched
    /// with the others in flight when batching is on, else alone. A request the store
    /// refused as it executed it ([`KvReply::Error`]) is etcd's error status.
    pub async fn execute(&self, cmd: KvCommand) -> Result<KvReply, Status> {
        let revoked = match &cmd {
            KvCommand::LeaseRevoke(l) => Some(l.id),
            _ => None,
        };
        let changed = match self.wrote.receiver_count() {
            0 => None,
            _ => Changed::by(&cmd),
        };
        match self.execute_raw(cmd).await? {
            KvReply::Error(e) => Err(convert::kv_error(&e.error)),
            r => {
                if self.objects {
                    self.track_lease(revoked, &r);
                }
                if let Some(c) = changed {
                    let _ = self.wrote.send(Arc::new(c));
                }
                Ok(r)
            }
        }
    }

    /// Note what a lease command's reply says of the lease's expiry (S-SMR/DS-SMR).
    fn track_lease(&self, revoked: Option<i64>, reply: &KvReply) {
        let (id, ttl) = match reply {
            KvReply::LeaseGrant(g) => (g.id, g.ttl),
            KvReply::LeaseKeepAlive(k) if k.ttl > 0 => (k.id, k.ttl),
            KvReply::LeaseRevoke(_) => {
                if let Some(id) = revoked {
                    self.expiring.lock().expect("expiring").remove(&id);
                }
                return;
            }
            _ => return,
        };
        // The renewal ran at an ordered time no later than now, and ordered time
        // runs no faster than real time: by this deadline it has usually expired.
        let mut at = Instant::now() + Duration::from_secs(u64::try_from(ttl).unwrap_or(0));
        if self.planted().expire_leases_early {
            at = at.checked_sub(EARLY).unwrap_or(at);
        }
        self.expiring.lock().expect("expiring").insert(id, at);
        self.expiring_changed.notify_one();
    }

    async fn execute_raw(&self, cmd: KvCommand) -> Result<KvReply, Status> {
        partita_kv::check(&cmd).map_err(Status::invalid_argument)?;
        if let Some(why) = partita_client::kv::unsupported(&self.cluster, &cmd) {
            return Err(Status::unimplemented(format!("partita: {why}")));
        }
        // Keep-alives ride in batches: many renewals, one ordered value and one fsync.
        let batchable = matches!(
            cmd,
            KvCommand::Put(_)
                | KvCommand::Range(_)
                | KvCommand::DeleteRange(_)
                | KvCommand::Txn(_)
                | KvCommand::LeaseKeepAlive(_)
        );
        if let (true, Some(batcher)) = (batchable, self.batcher.get()) {
            let (tx, rx) = tokio::sync::oneshot::channel();
            // Checked above, so this is its key and value bytes.
            let bytes = partita_kv::checked_bytes(&cmd).unwrap_or(0);
            if batcher
                .send(Queued {
                    cmd,
                    bytes,
                    reply: tx,
                })
                .is_ok()
            {
                return rx
                    .await
                    .unwrap_or_else(|_| Err(Status::unavailable("etcdserver: gateway stopped")));
            }
            return Err(Status::unavailable("etcdserver: gateway stopped"));
        }
        self.execute_one(cmd).await
    }

    /// Execute one command with a session from the pool.
    async fn execute_one(&self, cmd: KvCommand) -> Result<KvReply, Status> {
        let pooled = {
            let mut pool = self.pool.lock().expect("pool");
            pool.retain(|(used, _)| used.elapsed() < self.idle_max);
            pool.pop().map(|(_, c)| c)
        };
        let mut client = match pooled {
            Some(c) => c,
            None => {
                let opts = ClientOptions {
                    // This node's replica answers, when it is a replica (on S-SMR and
                    // DS-SMR a replica of each partition the command reaches does).
                    replica: (!self.objects
                        && self.cluster.client_topology().replicas.contains(&self.node))
                    .then_some(self.node),
                    ..ClientOptions::default()
                };
                KvClient::connect(&self.cluster, opts)
                    .await
                    .map_err(status_of)?
            }
        };
        let r = client.execute(cmd).await;
        // A reply, or a refusal that changed nothing: the session goes on.
        if matches!(r, Ok(_) | Err(ClientError::Rejected(_))) {
            let mut pool = self.pool.lock().expect("pool");
            if pool.len() < POOL_MAX {
                pool.push((Instant::now(), client));
            }
        }
        r.map_err(status_of)
    }

    pub fn header(&self, revision: u64) -> Option<pb::ResponseHeader> {
        Some(pb::ResponseHeader {
            cluster_id: self.cluster.cluster.id,
            member_id: u64::from(self.node),
            revision: convert::i64_of(revision),
            raft_term: self.term.load(Ordering::Relaxed),
        })
    }

    /// The store's current revision (an ordered read of no events). On S-SMR/DS-SMR,
    /// where revisions are positions in the order, the revision of an ordered read of
    /// one key: later than every write that finished before it.
    pub async fn revision(&self) -> Result<u64, Status> {
        if self.objects {
            return match self
                .execute(KvCommand::Range(partita_kv::RangeRequest::new(
                    vec![0],
                    Vec::new(),
                )))
                .await?
            {
                KvReply::Range(r) => Ok(r.revision),
                other => Err(mismatch(&other)),
            };
        }
        match self
            .execute(KvCommand::Events(partita_kv::EventsRequest {
                key: vec![0],
                end: vec![0],
                start_revision: 0,
                limit: 1,
            }))
            .await?
        {
            KvReply::Events(e) => Ok(e.revision),
            other => Err(mismatch(&other)),
        }
    }

    /// etcd's auto-compaction (`[etcd] auto_compaction_*`), for as long as the gateway
    /// runs. Every gateway runs it; a compaction another already made is refused as
    /// compacted and changes nothing. Periodic: the revision sampled every tenth of the
    /// retention (at most every hour), and the history compacted to the newest sample
    /// at least the retention old, as etcd's periodic compactor does. Revision: every
    /// 5 minutes, compacted to the last `n` revisions.
    pub async fn auto_compact(self: Arc<Self>, mode: partita_config::AutoCompaction) {
        use partita_config::AutoCompaction;
        match mode {
            AutoCompaction::Off => {}
            AutoCompaction::Periodic(keep) => {
                let every = (keep / 10)
                    .min(Duration::from_secs(3600))
                    .max(Duration::from_millis(100));
                let mut samples: std::collections::VecDeque<(Instant, u64)> =
                    std::collections::VecDeque::new();
                loop {
                    if let Ok(rev) = self.revision().await {
                        samples.push_back((Instant::now(), rev));
                    }
                    let mut due = None;
                    while samples.front().is_some_and(|(t, _)| t.elapsed() >= keep) {
                        due = samples.pop_front().map(|(_, r)| r);
                    }
                    if let Some(rev) = due {
                        self.compact_to(rev).await;
                    }
                    tokio::time::sleep(every).await;
                }
            }
            AutoCompaction::Revisions(n) => loop {
                tokio::time::sleep(Duration::from_secs(300)).await;
                if let Ok(rev) = self.revision().await {
                    self.compact_to(rev.saturating_sub(n)).await;
                }
            },
        }
    }

    async fn compact_to(&self, revision: u64) {
        if revision <= partita_kv::INITIAL_REVISION {
            return;
        }
        match self
            .execute(KvCommand::Compact(partita_kv::CompactRequest { revision }))
            .await
        {
            Ok(KvReply::Compact(r)) if r.error.is_none() => {
                tracing::info!(
                    node = self.node,
                    "etcd gateway: compacted below revision {revision}"
                )
            }
            _ => {}
        }
    }

    /// A hash of the store ([`partita_kv::HashRequest`]), read in order.
    pub async fn hash(
        &self,
        revision: u64,
        store: bool,
    ) -> Result<partita_kv::HashResponse, Status> {
        match self
            .execute(KvCommand::Hash(partita_kv::HashRequest { revision, store }))
            .await?
        {
            KvReply::Hash(h) => Ok(h),
            other => Err(mismatch(&other)),
        }
    }

    /// Refresh the term, leader and applied index from this node's status, every
    /// second, for as long as the gateway runs.
    /// Every node's status is read, at once, for etcd's NOSPACE alarms too: the members
    /// whose log writes nothing because the disk is full (`NodeStatus::wal_stall`).
    pub async fn follow_status(self: Arc<Self>) {
        loop {
            let mut probes = tokio::task::JoinSet::new();
            for n in &self.cluster.nodes {
                let (cluster, id) = (self.cluster.clone(), n.id);
                // Over TLS when the cluster file has it (the client certificate).
                probes.spawn(async move {
                    let s =
                        partita_client::node_status_of(&cluster, id, Duration::from_secs(1)).await;
                    (id, s)
                });
            }
            let mut mine = None;
            let mut alarms = Vec::new();
            while let Some(r) = probes.join_next().await {
                let Ok((id, Some(s))) = r else { continue };
                if let Some(why) = &s.wal_stall {
                    alarms.push((u64::from(id), why.clone()));
                }
                if id == self.node {
                    mine = Some(s);
                }
            }
            alarms.sort();
            *self.alarms.lock().expect("alarms") = alarms;
            if let Some(s) = mine {
                if let Some(b) = s.delivered_ballots.last() {
                    // Terms start at 1, as etcd's do: ballot zero (the first leader)
                    // is term 1, a ballot of round r is term r + 1.
                    self.term.store(b.ballot.round + 1, Ordering::Relaxed);
                    self.leader
                        .store(u64::from(b.ballot.node), Ordering::Relaxed);
                }
                if let Some(e) = s.executed_up_to {
                    self.applied.store(e, Ordering::Relaxed);
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

impl Gateway {
    /// The replicas as this gateway's node knows them now (its status; the cluster
    /// file's while it does not answer).
    async fn replicas_now(&self) -> Members {
        partita_client::node_status_of(&self.cluster, self.node, Duration::from_secs(2))
            .await
            .and_then(|s| s.members)
            .unwrap_or_default()
    }
}

fn mismatch(r: &KvReply) -> Status {
    Status::internal(format!(
        "partita: a reply of another kind than its command: {r:?}"
    ))
}

#[derive(Clone)]
pub struct Svc(pub Arc<Gateway>);

#[tonic::async_trait]
impl pb::kv_server::Kv for Svc {
    async fn range(
        &self,
        req: Request<pb::RangeRequest>,
    ) -> Result<Response<pb::RangeResponse>, Status> {
        // `serializable` reads are ordered like the others: linearizable is stronger.
        let range = convert::range_request(req.get_ref())?;
        match self.0.execute(KvCommand::Range(range.req.clone())).await? {
            KvReply::Range(r) => {
                let rev = r.revision;
                let mut resp = convert::range_response(&range, r);
                resp.header = self.0.header(rev);
                Ok(Response::new(resp))
            }
            other => Err(mismatch(&other)),
        }
    }

    async fn put(&self, req: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        let p = convert::put_request(req.get_ref())?;
        match self.0.execute(KvCommand::Put(p)).await? {
            KvReply::Put(r) => {
                let rev = r.revision;
                let mut resp = convert::put_response(r);
                resp.header = self.0.header(rev);
                Ok(Response::new(resp))
            }
            other => Err(mismatch(&other)),
        }
    }

    async fn delete_range(
        &self,
        req: Request<pb::DeleteRangeRequest>,
    ) -> Result<Response<pb::DeleteRangeResponse>, Status> {
        let d = convert::delete_request(req.get_ref())?;
        match self.0.execute(KvCommand::DeleteRange(d)).await? {
            KvReply::DeleteRange(r) => {
                let rev = r.revision;
                let mut resp = convert::delete_response(r);
                resp.header = self.0.header(rev);
                Ok(Response::new(resp))
            }
            other => Err(mismatch(&other)),
        }
    }

    async fn txn(&self, req: Request<pb::TxnRequest>) -> Result<Response<pb::TxnResponse>, Status> {
        let t = convert::txn_request(req.get_ref())?;
        match self.0.execute(KvCommand::Txn(t.req.clone())).await? {
            KvReply::Txn(r) => {
                let rev = r.revision;
                let mut resp = convert::txn_response(&t, r);
                resp.header = self.0.header(rev);
                Ok(Response::new(resp))
            }
            other => Err(mismatch(&other)),
        }
    }

    async fn compact(
        &self,
        req: Request<pb::CompactionRequest>,
    ) -> Result<Response<pb::CompactionResponse>, Status> {
        let c = convert::compact_request(req.get_ref())?;
        match self.0.execute(KvCommand::Compact(c)).await? {
            KvReply::Compact(r) => match r.error {
                Some(e) => Err(convert::compact_error(&e)),
                None => Ok(Response::new(pb::CompactionResponse {
                    header: self.0.header(r.revision),
                })),
            },
            other => Err(mismatch(&other)),
        }
    }
}

type WatchOut = mpsc::Sender<Result<pb::WatchResponse, Status>>;

/// One watcher: fetch events from `next` on, send them, back off while idle.
async fn run_watcher(
    gw: Arc<Gateway>,
    id: i64,
    spec: convert::WatchSpec,
    next: Arc<AtomicU64>,
    out: WatchOut,
) {
    let mut delay = POLL_MIN;
    let mut wrote = gw.wrote.subscribe();
    let mut created = false;
    let mut start = spec.start_revision;
    let mut last_sent = Instant::now();
    loop {
        let fetched = gw
            .execute(KvCommand::Events(partita_kv::EventsRequest {
                key: spec.key.clone(),
                end: spec.end.clone(),
                start_revision: start,
                limit: EVENTS_PER_FETCH,
            }))
            .await;
        let r = match fetched {
            Ok(KvReply::Events(r)) => r,
            Ok(other) => {
                tracing::warn!("watch {id}: {}", mismatch(&other).message());
                tokio::time::sleep(POLL_MAX).await;
                continue;
            }
            Err(e) => {
                tracing::debug!("watch {id}: fetching events: {}", e.message());
                tokio::time::sleep(POLL_MAX).await;
                continue;
            }
        };
        let mut responses = Vec::new();
        if !created {
            created = true;
            responses.push(pb::WatchResponse {
                header: gw.header(r.revision),
                watch_id: id,
                created: true,
                ..Default::default()
            });
        }
        if let Some(c) = r.compacted {
            responses.push(pb::WatchResponse {
                header: gw.header(r.revision),
                watch_id: id,
                canceled: true,
                compact_revision: convert::i64_of(c),
                cancel_reason: "etcdserver: mvcc: required revision has been compacted".into(),
                ..Default::default()
            });
            for resp in responses {
                let _ = out.send(Ok(resp)).await;
            }
            return;
        }
        // From here on, everything up to the store's revision (or the last event
        // fetched, when the limit cut) has been seen.
        let seen = match (r.more, r.events.last()) {
            (true, Some(e)) => e.revision(),
            _ => r.revision,
        };
        let events: Vec<_> = r
            .events
            .iter()
            .filter(|e| spec.wants(e))
            .map(|e| convert::event(e, spec.prev_kv))
            .collect();
        // One response per revision, as etcd sends them.
        let mut by_rev: Vec<pb::WatchResponse> = Vec::new();
        for (e, pe) in r.events.iter().filter(|e| spec.wants(e)).zip(events) {
            match by_rev.last_mut() {
                Some(last)
                    if last.header.as_ref().map(|h| h.revision)
                        == Some(convert::i64_of(e.revision())) =>
                {
                    last.events.push(pe)
                }
                _ => by_rev.push(pb::WatchResponse {
                    header: gw.header(e.revision()),
                    watch_id: id,
                    events: vec![pe],
                    ..Default::default()
                }),
            }
        }
        let had_events = !by_rev.is_empty();
        responses.extend(by_rev);
        if spec.progress_notify && responses.is_empty() && last_sent.elapsed() >= PROGRESS_EVERY {
            responses.push(pb::WatchResponse {
                header: gw.header(seen),
                watch_id: id,
                ..Default::default()
            });
        }
        if !responses.is_empty() {
            last_sent = Instant::now();
        }
        for resp in responses {
            if out.send(Ok(resp)).await.is_err() {
                return;
            }
        }
        start = seen + 1;
        next.store(start, Ordering::Relaxed);
        if r.more {
            delay = POLL_MIN;
            continue;
        }
        if had_events {
            delay = POLL_MIN;
        } else {
            delay = (delay * 2).min(POLL_MAX);
        }
        // Look again after the delay, or at once when a write through this gateway
        // may have changed a watched key.
        let until = tokio::time::Instant::now() + delay;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break,
                w = wrote.recv() => match w {
                    Ok(c) if !c.touches(&spec.key, &spec.end) => continue,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        tokio::time::sleep_until(until).await;
                        break;
                    }
                },
            }
        }
    }
}

struct Watcher {
    task: tokio::task::JoinHandle<()>,
    next: Arc<AtomicU64>,
}

/// One Watch stream: creations, cancellations and progress requests in, responses out.
async fn watch_session(gw: Arc<Gateway>, mut inbound: Streaming<pb::WatchRequest>, out: WatchOut) {
    use pb::watch_request::RequestUnion;
    let mut watchers: HashMap<i64, Watcher> = HashMap::new();
    let mut next_id: i64 = 0;
    loop {
        let msg = tokio::select! {
            m = inbound.message() => m,
            _ = out.closed() => break,
        };
        let req = match msg {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!("watch stream: {e}");
                break;
            }
        };
        watchers.retain(|_, w| !w.task.is_finished());
        match req.request_union {
            Some(RequestUnion::CreateRequest(c)) => {
                let id = if c.watch_id != 0 {
                    c.watch_id
                } else {
                    while watchers.contains_key(&next_id) {
                        next_id += 1;
                    }
                    next_id
                };
                let refuse = |reason: String| pb::WatchResponse {
                    header: gw.header(0),
                    watch_id: id,
                    created: true,
                    canceled: true,
                    cancel_reason: reason,
                    ..Default::default()
                };
                if watchers.contains_key(&id) {
                    let _ = out
                        .send(Ok(refuse("etcdserver: duplicate watch ID".into())))
                        .await;
                    continue;
                }
                match convert::watch_spec(&c) {
                    Err(reason) => {
                        let _ = out.send(Ok(refuse(reason))).await;
                    }
                    Ok(spec) => {
                        let next = Arc::new(AtomicU64::new(spec.start_revision));
                        let task = tokio::spawn(run_watcher(
                            gw.clone(),
                            id,
                            spec,
                            next.clone(),
                            out.clone(),
                        ));
                        watchers.insert(id, Watcher { task, next });
                    }
                }
            }
            Some(RequestUnion::CancelRequest(c)) => {
                if let Some(w) = watchers.remove(&c.watch_id) {
                    w.task.abort();
                    let rev = w.next.load(Ordering::Relaxed).saturating_sub(1);
                    let _ = out
                        .send(Ok(pb::WatchResponse {
                            header: gw.header(rev),
                            watch_id: c.watch_id,
                            canceled: true,
                            ..Default::default()
                        }))
                        .await;
                }
            }
            Some(RequestUnion::ProgressRequest(_)) => {
                // Every watcher of the stream has sent every event up to the revision
                // reported (etcd's guarantee for a progress response).
                let rev = match watchers
                    .values()
                    .map(|w| w.next.load(Ordering::Relaxed))
                    .min()
                {
                    Some(n) => n.saturating_sub(1),
                    None => match gw.revision().await {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = out.send(Err(e)).await;
                            continue;
                        }
                    },
                };
                let _ = out
                    .send(Ok(pb::WatchResponse {
                        header: gw.header(rev),
                        watch_id: -1,
                        ..Default::default()
                    }))
                    .await;
            }
            None => {
                let _ = out
                    .send(Err(Status::invalid_argument(
                        "a watch request with neither a create, a cancel nor a progress request",
                    )))
                    .await;
            }
        }
    }
    for (_, w) in watchers {
        w.task.abort();
    }
}

type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl pb::watch_server::Watch for Svc {
    type WatchStream = ResponseStream<pb::WatchResponse>;

    async fn watch(
        &self,
        req: Request<Streaming<pb::WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(watch_session(self.0.clone(), req.into_inner(), tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

impl Svc {
    /// etcd's members: the replicas that serve the API (an `etcd_addr` in the cluster
    /// file) and every replica added at run time (learners flagged), less the removed
    /// ones, as this node's status says now.
    async fn members(&self) -> Vec<pb::Member> {
        let m = self.0.replicas_now().await;
        let cluster = &self.0.cluster;
        let initial = cluster.with_role(partita_config::Role::Replica);
        let mut out: Vec<pb::Member> = cluster
            .nodes
            .iter()
            .filter(|n| n.etcd_addr.is_some() && m.is_replica(&initial, n.id))
            .map(|n| pb::Member {
                id: u64::from(n.id),
                name: format!("node-{}", n.id),
                peer_ur_ls: vec![format!("http://{}", n.addr)],
                client_ur_ls: n.etcd_addr.iter().map(|a| format!("http://{a}")).collect(),
                is_learner: m.is_learner(n.id),
            })
            .collect();
        for (id, addr) in m.added() {
            if out.iter().any(|o| o.id == u64::from(id)) {
                continue;
            }
            out.push(pb::Member {
                id: u64::from(id),
                name: format!("node-{id}"),
                peer_ur_ls: vec![format!("http://{addr}")],
                client_ur_ls: cluster
                    .node(id)
                    .and_then(|n| n.etcd_addr.clone())
                    .map(|a| format!("http://{a}"))
                    .into_iter()
                    .collect(),
                is_learner: m.is_learner(id),
            });
        }
        out.sort_by_key(|o| o.id);
        out
    }

    /// Order `change` through this gateway's node (`partita member`), with etcd's
    /// errors for its refusals.
    async fn change_members(&self, change: MemberChange) -> Result<(), Status> {
        let (id, addr) = match &change {
            // A learner promotes itself: ask it.
            MemberChange::Promote { node } => {
                let m = self.0.replicas_now().await;
                let Some(addr) = m.replicas.get(node).and_then(|r| r.addr.clone()) else {
                    return Err(Status::failed_precondition(
                        "etcdserver: can only promote a learner member",
                    ));
                };
                (*node, addr)
            }
            _ => (
                self.0.node,
                self.0.cluster.dial_addr(self.0.node).to_string(),
            ),
        };
        partita_client::member_request(&self.0.cluster, id, &addr, change, MEMBER_TIMEOUT)
            .await
            .map(|_| ())
            .map_err(|why| member_error(&why))
    }
}

/// How long a membership change may take to be ordered and applied.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(15);

/// etcd's status for a refused membership change (`api/v3rpc/rpctypes/error.go`).
fn member_error(why: &str) -> Status {
    let msg = format!("etcdserver: {why}");
    if why.contains("member not found") {
        Status::not_found(msg)
    } else if why.contains("did not answer") || why.contains("connecting") {
        Status::unavailable(msg)
    } else {
        Status::failed_precondition(msg)
    }
}

/// The host:port of an etcd peer URL (`http://host:port`).
fn peer_addr(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url);
    let rest = rest.trim_end_matches('/');
    (!rest.is_empty() && rest.contains(':')).then_some(rest)
}

#[tonic::async_trait]
impl pb::maintenance_server::Maintenance for Svc {
    async fn status(
        &self,
        _: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        // The store's revision and size, read in order (the size comes with a hash of
        // the keys, a pass over them without copying any). On S-SMR/DS-SMR the keys
        // are spread over partitions with no store-wide digest: the size is not known
        // there, and reported as zero.
        let (revision, size) = if self.0.objects {
            (self.0.revision().await?, 0)
        } else {
            let h = self.0.hash(0, false).await?;
            (h.revision, convert::i64_of(h.size))
        };
        let applied = self.0.applied.load(Ordering::Relaxed);
        Ok(Response::new(pb::StatusResponse {
            header: self.0.header(revision),
            version: ETCD_VERSION.into(),
            db_size: size,
            leader: self.0.leader.load(Ordering::Relaxed),
            raft_index: applied,
            raft_term: self.0.term.load(Ordering::Relaxed),
            raft_applied_index: applied,
            errors: self
                .0
                .alarms
                .lock()
                .expect("alarms")
                .iter()
                .map(|(m, why)| format!("memberID:{m} alarm:NOSPACE ({why})"))
                .collect(),
            db_size_in_use: size,
            is_learner: false,
        }))
    }

    type SnapshotStream = ResponseStream<pb::SnapshotResponse>;

    /// This member's backup (`partita snapshot save`'s: its replica's checkpoint, one
    /// state at one position with its checksum, taken now) as a snapshot file
    /// ([`convert::snapshot_file`]: padded to 512-byte sectors, SHA-256 appended as
    /// etcd appends it), in chunks of 1 MiB. Partita's checkpoint format, not etcd's
    /// bolt database: `etcdctl snapshot save` saves it and `partita snapshot restore`
    /// seeds a new cluster from the file; etcd cannot restore it.
    async fn snapshot(
        &self,
        _: Request<pb::SnapshotRequest>,
    ) -> Result<Response<Self::SnapshotStream>, Status> {
        let gw = &self.0;
        if gw.objects {
            let why =
                "a snapshot: a replica's checkpoint holds its partition's keys, not the store";
            return Err(Status::unimplemented(format!(
                "partita: {}",
                partita_client::kv::refusal(&gw.cluster, why)
            )));
        }
        let (_, checkpoint) =
            partita_client::fetch_snapshot(&gw.cluster, gw.node, Duration::from_secs(120))
                .await
                .map_err(|e| Status::unavailable(format!("etcdserver: snapshot: {e}")))?;
        let blob = convert::snapshot_file(&checkpoint);
        let header = gw.header(gw.revision().await?);
        let total = blob.len();
        let chunks: Vec<Result<pb::SnapshotResponse, Status>> = blob
            .chunks(1 << 20)
            .scan(total, |left, c| {
                *left -= c.len();
                Some(Ok(pb::SnapshotResponse {
                    header,
                    remaining_bytes: *left as u64,
                    blob: c.to_vec(),
                }))
            })
            .collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    /// NOSPACE for every member whose log writes nothing because its disk is full (it
    /// stops voting until space returns, then the alarm clears by itself): GET lists
    /// them; DEACTIVATE clears nothing (the alarm lasts as long as the full disk);
    /// ACTIVATE, which etcd keeps for its own server, is refused.
    async fn alarm(
        &self,
        req: Request<pb::AlarmRequest>,
    ) -> Result<Response<pb::AlarmResponse>, Status> {
        use pb::alarm_request::AlarmAction;
        match AlarmAction::try_from(req.get_ref().action) {
            Ok(action @ (AlarmAction::Get | AlarmAction::Deactivate)) => {
                let rev = self.0.revision().await?;
                let alarms = match action {
                    AlarmAction::Get => self
                        .0
                        .alarms
                        .lock()
                        .expect("alarms")
                        .iter()
                        .map(|(m, _)| pb::AlarmMember {
                            member_id: *m,
                            alarm: pb::AlarmType::Nospace as i32,
                        })
                        .collect(),
                    _ => vec![],
                };
                Ok(Response::new(pb::AlarmResponse {
                    header: self.0.header(rev),
                    alarms,
                }))
            }
            Ok(AlarmAction::Activate) => Err(unsupported("raising an alarm (Alarm ACTIVATE)")),
            Err(_) => Err(Status::invalid_argument(format!(
                "unknown alarm action {}",
                req.get_ref().action
            ))),
        }
    }

    /// Nothing to defragment: the store is in memory, its durable form the log and
    /// checkpoints, which truncation keeps compact. Answered as etcd answers a
    /// defragment that succeeded.
    async fn defragment(
        &self,
        _: Request<pb::DefragmentRequest>,
    ) -> Result<Response<pb::DefragmentResponse>, Status> {
        let rev = self.0.revision().await?;
        Ok(Response::new(pb::DefragmentResponse {
            header: self.0.header(rev),
        }))
    }

    async fn hash(
        &self,
        _: Request<pb::HashRequest>,
    ) -> Result<Response<pb::HashResponse>, Status> {
        let h = self.0.hash(0, true).await?;
        Ok(Response::new(pb::HashResponse {
            header: self.0.header(h.revision),
            hash: h.hash,
        }))
    }

    async fn hash_kv(
        &self,
        req: Request<pb::HashKvRequest>,
    ) -> Result<Response<pb::HashKvResponse>, Status> {
        let rev = u64::try_from(req.get_ref().revision).unwrap_or(0);
        let h = self.0.hash(rev, false).await?;
        Ok(Response::new(pb::HashKvResponse {
            header: self.0.header(h.revision),
            hash: h.hash,
            compact_revision: convert::i64_of(h.compact_revision),
            hash_revision: convert::i64_of(h.hash_revision),
        }))
    }
    async fn move_leader(
        &self,
        _: Request<pb::Unsupported>,
    ) -> Result<Response<pb::Unsupported>, Status> {
        Err(unsupported("Maintenance.MoveLeader"))
    }
    async fn downgrade(
        &self,
        _: Request<pb::Unsupported>,
    ) -> Result<Response<pb::Unsupported>, Status> {
        Err(unsupported("Maintenance.Downgrade"))
    }
}

#[tonic::async_trait]
impl pb::cluster_server::Cluster for Svc {
    async fn member_list(
        &self,
        _: Request<pb::MemberListRequest>,
    ) -> Result<Response<pb::MemberListResponse>, Status> {
        Ok(Response::new(pb::MemberListResponse {
            header: self.0.header(0),
            members: self.members().await,
        }))
    }

    /// A new replica at the request's peer URL: the id of its `join = true` entry in
    /// the cluster file, else one above every id ever used. It joins as a learner and,
    /// unless `isLearner`, promotes itself once caught up (etcd adds a voter at once;
    /// Partita's replicas do not vote, and serve only once caught up).
    async fn member_add(
        &self,
        req: Request<pb::MemberAddRequest>,
    ) -> Result<Response<pb::MemberAddResponse>, Status> {
        let req = req.into_inner();
        let [url] = req.peer_ur_ls.as_slice() else {
            return Err(Status::invalid_argument(
                "etcdserver: a new member needs exactly one peer URL (its partita address)",
            ));
        };
        let Some(addr) = peer_addr(url) else {
            return Err(Status::invalid_argument(format!(
                "etcdserver: `{url}` is not a peer URL (http://host:port)"
            )));
        };
        let cluster = &self.0.cluster;
        let m = self.0.replicas_now().await;
        let entry = cluster.nodes.iter().find(|n| n.join && n.addr == addr);
        // etcd's API names no partition: a partitioned cluster's new replica joins the
        // one its cluster-file entry says (which its process replicates).
        let partition = entry.and_then(|n| n.partition).unwrap_or(0);
        if cluster.partitioning.partitions > 1 && entry.and_then(|n| n.partition).is_none() {
            return Err(Status::invalid_argument(format!(
                "etcdserver: this cluster is partitioned: give the new member an entry with \
                 `join = true` and its `partition` at {addr} in the cluster file"
            )));
        }
        let id = match entry {
            Some(n) => n.id,
            None => cluster
                .nodes
                .iter()
                .map(|n| n.id)
                .chain(m.replicas.keys().copied())
                .chain(m.removed.iter().copied())
                .max()
                .unwrap_or(0)
                .saturating_add(1),
        };
        self.change_members(MemberChange::Add {
            node: id,
            addr: addr.to_string(),
            partition,
            promote: !req.is_learner,
        })
        .await?;
        let members = self.members().await;
        let member = members.iter().find(|x| x.id == u64::from(id)).cloned();
        Ok(Response::new(pb::MemberAddResponse {
            header: self.0.header(0),
            member,
            members,
        }))
    }

    async fn member_remove(
        &self,
        req: Request<pb::MemberRemoveRequest>,
    ) -> Result<Response<pb::MemberRemoveResponse>, Status> {
        let id = NodeId::try_from(req.get_ref().id)
            .map_err(|_| Status::not_found("etcdserver: member not found"))?;
        self.change_members(MemberChange::Remove { node: id })
            .await?;
        Ok(Response::new(pb::MemberRemoveResponse {
            header: self.0.header(0),
            members: self.members().await,
        }))
    }

    async fn member_update(
        &self,
        _: Request<pb::Unsupported>,
    ) -> Result<Response<pb::Unsupported>, Status> {
        Err(unsupported(
            "Cluster.MemberUpdate (a replica's address changes by remove and add, or under \
             its DNS name)",
        ))
    }

    async fn member_promote(
        &self,
        req: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        let id = NodeId::try_from(req.get_ref().id)
            .map_err(|_| Status::not_found("etcdserver: member not found"))?;
        self.change_members(MemberChange::Promote { node: id })
            .await?;
        Ok(Response::new(pb::MemberPromoteResponse {
            header: self.0.header(0),
            members: self.members().await,
        }))
    }
}

/// One keep-alive stream: each request renewed through the cluster, in order, each
/// answered once its renewal is decided (so the holder's deadline, counted from when
/// it sent the request, ends before the lease's in ordered time).
async fn keep_alive_session(
    gw: Arc<Gateway>,
    mut inbound: Streaming<pb::LeaseKeepAliveRequest>,
    out: mpsc::Sender<Result<pb::LeaseKeepAliveResponse, Status>>,
) {
    use tokio_stream::StreamExt;
    while let Some(req) = inbound.next().await {
        let resp = match req {
            Ok(r) if r.id <= 0 => Err(Status::not_found(
                partita_kv::KvError::LeaseNotFound(r.id).etcd_message(),
            )),
            Ok(r) if gw.planted().ack_keepalives_unordered => {
                // Planted: the TTL read in order, nothing renewed.
                match gw.execute(KvCommand::lease_time_to_live(r.id, false)).await {
                    Ok(KvReply::LeaseTimeToLive(t)) => Ok(pb::LeaseKeepAliveResponse {
                        header: gw.header(t.revision),
                        id: t.id,
                        ttl: t.granted_ttl,
                    }),
                    Ok(other) => Err(mismatch(&other)),
                    Err(e) => Err(e),
                }
            }
            Ok(r) => match gw.execute(KvCommand::lease_keep_alive(r.id)).await {
                Ok(KvReply::LeaseKeepAlive(k)) => Ok(pb::LeaseKeepAliveResponse {
                    header: gw.header(k.revision),
                    id: k.id,
                    ttl: k.ttl,
                }),
                Ok(other) => Err(mismatch(&other)),
                Err(e) => Err(e),
            },
            Err(_) => return,
        };
        let failed = resp.is_err();
        if out.send(resp).await.is_err() || failed {
            return;
        }
    }
}

#[tonic::async_trait]
impl pb::lease_server::Lease for Svc {
    async fn lease_grant(
        &self,
        req: Request<pb::LeaseGrantRequest>,
    ) -> Result<Response<pb::LeaseGrantResponse>, Status> {
        let r = req.get_ref();
        if r.id < 0 {
            return Err(Status::invalid_argument(format!(
                "lease id {} is negative",
                r.id
            )));
        }
        match self.0.execute(KvCommand::lease_grant(r.id, r.ttl)).await? {
            KvReply::LeaseGrant(g) => Ok(Response::new(pb::LeaseGrantResponse {
                header: self.0.header(g.revision),
                id: g.id,
                ttl: g.ttl,
                error: String::new(),
            })),
            other => Err(mismatch(&other)),
        }
    }

    async fn lease_revoke(
        &self,
        req: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        let id = req.get_ref().id;
        if id <= 0 {
            return Err(convert::kv_error(&partita_kv::KvError::LeaseNotFound(id)));
        }
        match self.0.execute(KvCommand::lease_revoke(id)).await? {
            KvReply::LeaseRevoke(r) => Ok(Response::new(pb::LeaseRevokeResponse {
                header: self.0.header(r.revision),
            })),
            other => Err(mismatch(&other)),
        }
    }

    type LeaseKeepAliveStream = ResponseStream<pb::LeaseKeepAliveResponse>;

    async fn lease_keep_alive(
        &self,
        req: Request<Streaming<pb::LeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(keep_alive_session(self.0.clone(), req.into_inner(), tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn lease_time_to_live(
        &self,
        req: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveResponse>, Status> {
        let r = req.get_ref();
        let reply = if r.id <= 0 {
            // No such lease, as for any id never granted: TTL -1.
            KvReply::LeaseTimeToLive(partita_kv::LeaseTimeToLiveResponse {
                id: r.id,
                ttl: -1,
                granted_ttl: 0,
                keys: Vec::new(),
                revision: self.0.revision().await?,
            })
        } else {
            self.0
                .execute(KvCommand::lease_time_to_live(r.id, r.keys))
                .await?
        };
        match reply {
            KvReply::LeaseTimeToLive(t) => Ok(Response::new(pb::LeaseTimeToLiveResponse {
                header: self.0.header(t.revision),
                id: t.id,
                ttl: t.ttl,
                granted_ttl: t.granted_ttl,
                keys: t.keys,
            })),
            other => Err(mismatch(&other)),
        }
    }

    async fn lease_leases(
        &self,
        _: Request<pb::LeaseLeasesRequest>,
    ) -> Result<Response<pb::LeaseLeasesResponse>, Status> {
        match self.0.execute(KvCommand::LeaseLeases).await? {
            KvReply::LeaseLeases(l) => Ok(Response::new(pb::LeaseLeasesResponse {
                header: self.0.header(l.revision),
                leases: l.ids.into_iter().map(|id| pb::LeaseStatus { id }).collect(),
            })),
            other => Err(mismatch(&other)),
        }
    }
}

macro_rules! auth_unsupported {
    ($($f:ident => $name:literal),* $(,)?) => {
        #[tonic::async_trait]
        impl pb::auth_server::Auth for Svc {
            $(
                async fn $f(&self, _: Request<pb::Unsupported>) -> Result<Response<pb::Unsupported>, Status> {
                    Err(unsupported(concat!("authentication (Auth.", $name, ")")))
                }
            )*
        }
    };
}

auth_unsupported! {
    auth_enable => "AuthEnable",
    auth_disable => "AuthDisable",
    auth_status => "AuthStatus",
    authenticate => "Authenticate",
    user_add => "UserAdd",
    user_get => "UserGet",
    user_list => "UserList",
    user_delete => "UserDelete",
    user_change_password => "UserChangePassword",
    user_grant_role => "UserGrantRole",
    user_revoke_role => "UserRevokeRole",
    role_add => "RoleAdd",
    role_get => "RoleGet",
    role_list => "RoleList",
    role_delete => "RoleDelete",
    role_grant_permission => "RoleGrantPermission",
    role_revoke_permission => "RoleRevokePermission",
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a write changed against what a watcher watches: single keys, prefixes
    /// (`[a, b)`), everything from a key on, transactions and batches by their
    /// writes, a lease's revocation everything, reads and grants nothing.
    #[test]
    fn a_write_wakes_only_the_watchers_of_what_it_changed() {
        let put = Changed::by(&KvCommand::put("lock/b", "x")).unwrap();
        assert!(put.touches(b"lock/b", b""));
        assert!(put.touches(b"lock/", b"lock0"));
        assert!(put.touches(b"lock/a", b"\0"));
        assert!(!put.touches(b"lock/a", b""));
        assert!(!put.touches(b"lock/c", b"\0"));
        assert!(!put.touches(b"lock/a", b"lock/b"), "the end is exclusive");
        let del = Changed::by(&KvCommand::delete_range("a", "c")).unwrap();
        assert!(del.touches(b"b", b""));
        assert!(del.touches(b"b", b"z"));
        assert!(!del.touches(b"c", b"\0"));
        let txn = KvCommand::Txn(partita_kv::TxnRequest {
            compare: Vec::new(),
            success: vec![partita_kv::RequestOp::Range(partita_kv::RangeRequest::get(
                "r",
            ))],
            failure: vec![partita_kv::RequestOp::Put(partita_kv::PutRequest {
                key: b"f".to_vec(),
                value: Vec::new(),
                prev_kv: false,
                lease: 0,
            })],
        });
        let txn = Changed::by(&txn).unwrap();
        assert!(txn.touches(b"f", b"") && !txn.touches(b"r", b""));
        assert!(Changed::by(&KvCommand::lease_revoke(7))
            .unwrap()
            .touches(b"k", b""));
        assert!(Changed::by(&KvCommand::get("k")).is_none());
        assert!(Changed::by(&KvCommand::lease_grant(7, 10)).is_none());
    }
}
