//! A Chirper client of a real S-SMR/DS-SMR cluster: the client proxy (paper 003
//! Algorithm 2: consults, cache, moves, retries, fallback) over `partita-client`'s
//! sessions, one multicast at a time.

use crate::services::chirper_params;
use partita_client::{Client, ClientError, ClientOptions};
use partita_config::ClusterConfig;
use partita_dssmr::chirper::{Chirper, ChirperCommand, ChirperReply};
use partita_dssmr::client::{ClientProxy, Outcome, ProxyConfig, ProxyStats};
use partita_dssmr::replica::data_partitions;
use partita_dssmr::wire::{DsWire, WireCommand};
use partita_dssmr::ObjectService;

pub struct ChirperClient {
    client: Client<DsWire<Chirper>>,
    proxy: ClientProxy<Chirper>,
    data: u32,
}

impl ChirperClient {
    /// A client of the Chirper cluster `cluster`, its cache warm with the initial
    /// placement of `users` (none: it learns from the oracle).
    pub async fn connect(
        cluster: &ClusterConfig,
        opts: ClientOptions,
        seed: u64,
    ) -> Result<ChirperClient, ClientError> {
        let (scheme, _) =
            chirper_params(cluster).map_err(|e| ClientError::Rejected(e.to_string()))?;
        let partitions = cluster.partitioning.partitions.max(1) as usize;
        let data = data_partitions(partitions, scheme) as u32;
        let client = Client::<DsWire<Chirper>>::connect(cluster.clone(), opts).await?;
        let proxy = ClientProxy::new(ProxyConfig::new(scheme, data as usize), seed);
        Ok(ChirperClient {
            client,
            proxy,
            data,
        })
    }

    /// Fill the location cache with where `users` start (the paper's prefetch).
    pub fn prefetch(&mut self, users: impl IntoIterator<Item = u64>) {
        let data = self.data as usize;
        self.proxy
            .prefetch(users.into_iter().map(|u| (u, Chirper::placement(u, data))));
    }

    pub fn stats(&self) -> &ProxyStats {
        self.proxy.stats()
    }

    /// Run one Chirper command to its end.
    pub async fn run(&mut self, cmd: ChirperCommand) -> Result<Outcome<ChirperReply>, ClientError> {
        let mut queue = Vec::new();
        self.proxy.submit(cmd, &mut queue);
        let mut queue: std::collections::VecDeque<_> = queue.into();
        while let Some(m) = queue.pop_front() {
            let w = WireCommand {
                dests: m.dests,
                data: self.data,
                cmd: m.cmd,
            };
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
