//! Closed-loop clients of the key-value service with a recorded history: the random
//! mix of `partita_kv::mix` (puts, gets, prefix ranges, deletes and overwrite-or-read
//! transactions on a few contended keys), each client with its own seeded stream, each
//! operation written as one line of the key-value history format (DESIGN.md §2) that
//! `partita check` and `partita_checker::check_history_file` judge. Used by the
//! key-value nemesis and the key-value tests alike.

use partita_client::{Client, ClientOptions};
use partita_config::ClusterConfig;
use partita_kv::history::Outcome;
use partita_kv::{KvCommand, KvReply, KvStore};
use rand::SeedableRng;
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the clients do.
#[derive(Clone, Debug)]
pub struct KvLoad {
    pub clients: u64,
    pub duration: Duration,
    /// Distinct keys the mix draws from (few, so that operations contend).
    pub keys: u64,
    pub seed: u64,
    pub timeout: Duration,
    pub give_up: Duration,
}

impl KvLoad {
    /// `clients` clients for `duration` on 6 keys, resubmitting after 500 ms (a few
    /// wide-area round trips) and giving up after 10 s.
    pub fn new(clients: u64, duration: Duration, seed: u64) -> KvLoad {
        KvLoad {
            clients,
            duration,
            keys: 6,
            seed,
            timeout: Duration::from_millis(500),
            give_up: Duration::from_secs(10),
        }
    }
}

/// What the clients did: the history's lines (every client's in its own order) and
/// their outcomes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct KvLoadResult {
    #[serde(skip)]
    pub lines: Vec<String>,
    pub operations: usize,
    pub ok: usize,
    /// Refused before it could take effect.
    pub failed: usize,
    /// Outcome unknown (gave up).
    pub unknown: usize,
    pub ops_per_s: f64,
}

impl std::fmt::Display for KvLoadResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "key-value load: {} operations ({} ok, {} refused, {} unknown), {:.0} ops/s",
            self.operations, self.ok, self.failed, self.unknown, self.ops_per_s
        )
    }
}

/// Run `load` against `cluster`; every client connects first (a client that cannot is
/// an error).
pub async fn run(cluster: &ClusterConfig, load: &KvLoad) -> anyhow::Result<KvLoadResult> {
    let base = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..load.clients {
        let cluster = cluster.clone();
        let load = load.clone();
        tasks.push(tokio::spawn(async move {
            let opts = ClientOptions {
                entry_index: Some(c),
                timeout: load.timeout,
                give_up: load.give_up,
                ..ClientOptions::default()
            };
            let mut client = Client::<KvStore>::connect(cluster, opts).await?;
            let mut rng = rand::rngs::StdRng::seed_from_u64(load.seed ^ (c << 32));
            let mut part = KvLoadResult::default();
            let mut n = 0;
            while base.elapsed() < load.duration {
                n += 1;
                let cmd = partita_kv::mix::random_command(&mut rng, load.keys, c, n);
                let call = base.elapsed().as_nanos() as u64;
                let r = client.execute(cmd.clone()).await;
                let ret = base.elapsed().as_nanos() as u64;
                let outcome = match &r {
                    Ok(reply) => {
                        part.ok += 1;
                        Outcome::Ok(reply)
                    }
                    Err(e) if e.not_applied() => {
                        part.failed += 1;
                        Outcome::Fail
                    }
                    Err(_) => {
                        part.unknown += 1;
                        Outcome::Info
                    }
                };
                part.lines.push(partita_kv::history::event_line(
                    c + 1,
                    &cmd,
                    call,
                    ret,
                    outcome,
                ));
            }
            anyhow::Ok(part)
        }));
    }
    let mut out = KvLoadResult::default();
    for t in tasks {
        let part = t.await??;
        out.ok += part.ok;
        out.failed += part.failed;
        out.unknown += part.unknown;
        out.lines.extend(part.lines);
    }
    out.operations = out.lines.len();
    out.ops_per_s = out.operations as f64 / base.elapsed().as_secs_f64().max(1e-9);
    Ok(out)
}

/// Write the history to `path` (one event per line).
pub fn write_history(path: &Path, result: &KvLoadResult) -> anyhow::Result<()> {
    let mut text = result.lines.join("\n");
    text.push('\n');
    std::fs::write(path, text)
        .map_err(|e| anyhow::anyhow!("writing the history {}: {e}", path.display()))
}

/// Every key and its value, read through the replicated path (one range over every
/// key).
pub async fn contents(cluster: &ClusterConfig) -> anyhow::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let opts = ClientOptions {
        timeout: Duration::from_secs(1),
        give_up: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let mut client = Client::<KvStore>::connect(cluster.clone(), opts).await?;
    // etcd's "every key": from the smallest key (one zero byte) to the end.
    match client.execute(KvCommand::range(vec![0], vec![0])).await {
        Ok(KvReply::Range(r)) => Ok(r.kvs.into_iter().map(|kv| (kv.key, kv.value)).collect()),
        Ok(other) => anyhow::bail!("a range answered {other:?}"),
        Err(e) => anyhow::bail!("reading every key: {e}"),
    }
}
