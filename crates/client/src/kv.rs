//! A client of the key-value service (`partita_kv`) whatever executes it: one
//! replicated store ([`Client`] of `KvStore`), or its keys as objects that S-SMR or
//! DS-SMR partitions (`partita_dssmr::kv`, through [`ObjectClient`]). `partita kv` and
//! the etcd gateway use it, so that both serve the store on every execution model
//! alike.

use crate::objects::ObjectClient;
use crate::{Client, ClientError, ClientOptions};
use partita_config::ClusterConfig;
use partita_dssmr::client::Outcome;
use partita_dssmr::kv::KvObjects;
use partita_kv::{KvCommand, KvReply, KvStore};

/// One session of the key-value service, one command at a time.
pub enum KvClient {
    Store(Box<Client<KvStore>>),
    Objects(Box<ObjectClient<KvObjects>>),
}

/// Why `cluster`'s store does not serve `cmd` (a lease on S-SMR/DS-SMR, say), if it
/// does not: to refuse it before anything is sent.
pub fn unsupported(cluster: &ClusterConfig, cmd: &KvCommand) -> Option<String> {
    if !cluster.execution.is_ssmr() {
        return None;
    }
    partita_dssmr::kv::supported(cmd)
        .err()
        .map(|why| refusal(cluster, &why))
}

/// How a refusal of the store on S-SMR/DS-SMR reads: what `cluster` runs, and `why`.
pub fn refusal(cluster: &ClusterConfig, why: &str) -> String {
    format!(
        "this cluster runs the key-value store on S-SMR/DS-SMR ([execution] model = \
         \"{}\"), which refuses {why}",
        cluster.execution.model()
    )
}

impl KvClient {
    /// A session of `cluster`'s key-value service, as its execution model serves it.
    pub async fn connect(
        cluster: &ClusterConfig,
        opts: ClientOptions,
    ) -> Result<KvClient, ClientError> {
        if !cluster.execution.is_ssmr() {
            let c = Client::<KvStore>::connect(cluster.clone(), opts).await?;
            return Ok(KvClient::Store(Box::new(c)));
        }
        let c = ObjectClient::connect(
            cluster,
            opts,
            partita_dssmr::StaticMap::Hashed,
            rand::random(),
        )
        .await?;
        Ok(KvClient::Objects(Box::new(c)))
    }

    /// Run `cmd` to its end (a store's refusal is its reply, [`KvReply::Error`]).
    pub async fn execute(&mut self, cmd: KvCommand) -> Result<KvReply, ClientError> {
        match self {
            KvClient::Store(c) => c.execute(cmd).await,
            KvClient::Objects(c) => match c.run(cmd).await? {
                Outcome::Done(r) => Ok(r),
                Outcome::Failed(why) => Err(ClientError::Rejected(why)),
                other => Err(ClientError::BadReply(format!(
                    "the store's keys are implicit objects, yet the cluster answered {other:?}"
                ))),
            },
        }
    }
}
