//! Partition your own service dynamically (DS-SMR, paper 003): bank accounts that move
//! to where they are used. `service.rs` is the whole service: its objects, where they
//! start, and a transfer that spans two of them. `accounts node ...` runs one node of a
//! cluster of it; `cargo run --example accounts -- demo` starts one (two partitions of
//! accounts and the oracle's, each with 2 replicas, and 3 acceptors) and trades.

mod service;

use partita_client::objects::ObjectClient;
use partita_client::ClientOptions;
use partita_config::{ClusterConfig, ExecutionModel, ExecutionSection};
use partita_dssmr::client::Scheme;
use partita_dssmr::StaticMap;
use partita_harness::launch::{pick_base_port, LocalCluster};
use service::{Accounts, Cmd};
use std::time::Duration;

/// Where accounts start: every node and client of a cluster uses the same map.
pub const START: StaticMap = StaticMap::Service;

/// A cluster of `data` partitions of accounts (and the oracle's), 2 replicas each.
pub fn cluster(base_port: u16, id: u64, data: u32) -> anyhow::Result<ClusterConfig> {
    let mut c = ClusterConfig::default_local(base_port, id)
        .with_partitions(data + 1, 2, 1 << 32)
        .map_err(anyhow::Error::msg)?;
    c.cluster.service = "accounts".into();
    c.execution = ExecutionSection::Dssmr(Default::default());
    Ok(c)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |flag: &str| {
        let at = args.iter().position(|a| a == flag);
        at.and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_default()
    };
    if args.first().is_some_and(|a| a == "node") {
        // As a local cluster starts its nodes: node --cluster FILE --id N --data-dir DIR.
        let cluster = ClusterConfig::load(arg("--cluster").as_ref())?;
        let scheme = match cluster.execution.model() {
            ExecutionModel::Ssmr => Scheme::Ssmr,
            _ => Scheme::Dssmr,
        };
        let no_accounts = std::sync::Arc::new(Vec::new);
        return partita_runtime::run_node(partita_runtime::NodeOptions {
            cluster,
            id: arg("--id").parse()?,
            data_dir: arg("--data-dir").into(),
            service: partita_dssmr::replica::factory::<Accounts>(scheme, START, no_accounts),
            unsafe_bugs: Vec::new(),
            io_thread: false,
        })
        .await;
    }
    let dir = std::env::temp_dir().join(format!("partita-accounts-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let c = cluster(pick_base_port(), 7, 2)?;
    let file = dir.join("cluster.toml");
    std::fs::write(&file, c.to_toml())?;
    let exe = std::env::current_exe()?;
    let mut nodes = LocalCluster::start_with(&exe, &file, &c, &dir, &[], None)?;
    nodes.wait_ready(Duration::from_secs(20)).await?;
    let mut client =
        ObjectClient::<Accounts>::connect(&c, ClientOptions::default(), START, 1).await?;
    for account in 0..4 {
        client.run(Cmd::Open { account }).await?;
        client
            .run(Cmd::Deposit {
                account,
                amount: 100,
            })
            .await?;
    }
    // Accounts 0 and 1 trade, and so do 2 and 3: each pair ends up in one partition.
    for i in 0..20 {
        let (from, to) = [(0, 1), (1, 0), (2, 3), (3, 2)][i % 4];
        let t = Cmd::Transfer {
            from,
            to,
            amount: 5,
        };
        println!("transfer 5 from {from} to {to}: {:?}", client.run(t).await?);
    }
    println!("proxy: {:?}", client.stats());
    nodes.stop(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
