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
use partita_kv::{KvCommand, KvError, KvReply, KvStore};

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
    if matches!(cmd, KvCommand::LeaseGrant(g) if g.id == 0) {
        // [`KvClient::execute`] picks the id.
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
    ///
    /// On S-SMR/DS-SMR a lease is the object its id names, so a grant must name its
    /// id: for a grant of id 0 (the store's pick elsewhere) this session picks one at
    /// random, and another if that one is taken.
    pub async fn execute(&mut self, cmd: KvCommand) -> Result<KvReply, ClientError> {
        match (self, cmd) {
            (KvClient::Store(c), cmd) => c.execute(cmd).await,
            (KvClient::Objects(c), KvCommand::LeaseGrant(g)) if g.id == 0 => {
                let mut tries = 0;
                loop {
                    // A positive 63-bit id, as etcd's are.
                    let id = (rand::random::<u64>() >> 1).max(1) as i64;
                    let r = run(c, KvCommand::lease_grant(id, g.ttl)).await?;
                    tries += 1;
                    match r {
                        KvReply::Error(e) if e.error == KvError::LeaseExists(id) && tries < 8 => {}
                        r => return Ok(r),
                    }
                }
            }
            (KvClient::Objects(c), cmd) => run(c, cmd).await,
        }
    }
}

async fn run(c: &mut ObjectClient<KvObjects>, cmd: KvCommand) -> Result<KvReply, ClientError> {
    match c.run(cmd).await? {
        Outcome::Done(r) => Ok(r),
        Outcome::Failed(why) => Err(ClientError::Rejected(why)),
        other => Err(ClientError::BadReply(format!(
            "the store's keys are implicit objects, yet the cluster answered {other:?}"
        ))),
    }
}
