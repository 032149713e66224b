//! A client of any service that S-SMR or DS-SMR partitions (paper 003): the client
//! proxy of `partita_dssmr::client` (Algorithm 2: oracle consults, the location cache,
//! moves sent with the access, retries, the fallback to S-SMR) over this crate's
//! sessions. The answered multicasts go one at a time on the client's session, the
//! moves at once on a second session that nobody waits for (or, with the cluster
//! file's `[execution] await_moves`, each on the first session before its access).
//! Chirper's clients are `ObjectClient<Chirper>`; a service of one's own implements
//! `partita_dssmr::ObjectService` and gets the same client (see `examples/accounts`).

use crate::{Client, ClientError, ClientOptions};
use partita_config::{ClusterConfig, ExecutionModel};
use partita_dssmr::client::{ClientProxy, Outcome, ProxyConfig, ProxyStats, Scheme};
use partita_dssmr::replica::data_partitions;
use partita_dssmr::wire::{DsWire, WireCommand};
use partita_dssmr::{ObjectId, ObjectService, StaticMap};

pub struct ObjectClient<S: ObjectService> {
    client: Client<DsWire<S>>,
    /// The moves' session, run by a task of its own: moves are sent to it and not
    /// waited for (`None`: `await_moves`, or S-SMR). The task is aborted with the
    /// client, moves still queued or in flight with it.
    mover: Option<(
        tokio::sync::mpsc::UnboundedSender<WireCommand<S::Command>>,
        tokio::task::AbortHandle,
    )>,
    proxy: ClientProxy<S>,
    data: u32,
}

impl<S: ObjectService> ObjectClient<S> {
    /// A client of `cluster` (`[execution] model = "ssmr"` or `"dssmr"`), whose
    /// objects start where `static_map` puts them (every node and client of a cluster
    /// must use the same map); `seed` drives the proxy's random choices.
    pub async fn connect(
        cluster: &ClusterConfig,
        opts: ClientOptions,
        static_map: StaticMap,
        seed: u64,
    ) -> Result<ObjectClient<S>, ClientError> {
        let scheme = match cluster.execution.model() {
            ExecutionModel::Ssmr => Scheme::Ssmr,
            ExecutionModel::Dssmr => Scheme::Dssmr,
            other => {
                return Err(ClientError::Rejected(format!(
                    "an object client needs [execution] model = \"ssmr\" or \"dssmr\", not \
                     \"{other}\""
                )))
            }
        };
        let partitions = cluster.partitioning.partitions.max(1) as usize;
        let data = data_partitions(partitions, scheme) as u32;
        let dssmr = cluster.execution.dssmr().cloned().unwrap_or_default();
        let mover = if dssmr.await_moves || scheme == Scheme::Ssmr {
            None
        } else {
            // A session of its own: one move at a time, each given up after the
            // client's give-up time at most (a lost move costs a retry, nothing more).
            let mut moves = Client::<DsWire<S>>::connect(cluster.clone(), opts.clone()).await?;
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let task = tokio::spawn(async move {
                while let Some(m) = rx.recv().await {
                    let _ = moves.execute(m).await;
                }
            });
            Some((tx, task.abort_handle()))
        };
        let client = Client::<DsWire<S>>::connect(cluster.clone(), opts).await?;
        let mut cfg = ProxyConfig::new(scheme, data as usize);
        cfg.static_map = static_map;
        let mut proxy = ClientProxy::new(cfg, seed);
        if dssmr.gather_where_most {
            proxy.set_placement(Box::new(partita_dssmr::client::MostObjectsPlacement));
        }
        Ok(ObjectClient {
            client,
            mover,
            proxy,
            data,
        })
    }

    /// Fill the location cache with where `objects` start (the paper's prefetch).
    pub fn prefetch(&mut self, objects: impl IntoIterator<Item = ObjectId>) {
        self.proxy.prefetch_initial(objects);
    }

    /// What the proxy did so far: consults, cache hits, moves, retries, fallbacks.
    pub fn stats(&self) -> &ProxyStats {
        self.proxy.stats()
    }

    /// Run one command of the service to its end.
    pub async fn run(&mut self, cmd: S::Command) -> Result<Outcome<S::Reply>, ClientError> {
        let mut queue = Vec::new();
        self.proxy.submit(cmd, &mut queue);
        let mut queue: std::collections::VecDeque<_> = queue.into();
        while let Some(m) = queue.pop_front() {
            let w = WireCommand {
                dests: m.dests,
                data: self.data,
                cmd: m.cmd,
            };
            if let (false, Some((mover, _))) = (m.answered, &self.mover) {
                // The moves' task lives as long as this client.
                let _ = mover.send(w);
                continue;
            }
            let reply = match self.client.execute(w).await {
                Ok(r) => r,
                Err(e) => {
                    self.proxy.abandon();
                    return Err(e);
                }
            };
            if !m.answered {
                continue;
            }
            let mut more = Vec::new();
            if let Some(outcome) = self.proxy.on_reply(reply, &mut more) {
                return Ok(outcome);
            }
            queue.extend(more);
        }
        self.proxy.abandon();
        Err(ClientError::BadReply(
            "the client proxy stopped without an outcome".into(),
        ))
    }
}

impl<S: ObjectService> Drop for ObjectClient<S> {
    fn drop(&mut self) {
        if let Some((_, task)) = &self.mover {
            task.abort();
        }
    }
}
