//! Replicate your own state machine: a bank on a real Partita cluster. `service.rs` is
//! the whole service; `bank node ...` runs one node of a cluster of it (on S-SMR or
//! DS-SMR too, when the cluster file's `[execution] model` says so), and
//! `cargo run --example bank -- demo` starts five nodes and moves some money.

mod service;

use partita_client::{Client, ClientOptions};
use partita_config::ClusterConfig;
use partita_harness::launch::{pick_base_port, LocalCluster};
use service::{Bank, BankCmd};
use std::time::Duration;

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
        // The cluster file's execution model: any of the common replica's, or S-SMR and
        // DS-SMR over the bank's accounts as objects (`service.rs`).
        let service = match cluster.execution.model() {
            partita_config::ExecutionModel::Ssmr | partita_config::ExecutionModel::Dssmr => {
                let scheme = match cluster.execution.model() {
                    partita_config::ExecutionModel::Ssmr => partita_dssmr::client::Scheme::Ssmr,
                    _ => partita_dssmr::client::Scheme::Dssmr,
                };
                partita_dssmr::replica::factory::<Bank>(
                    scheme,
                    partita_dssmr::StaticMap::Hashed,
                    std::sync::Arc::new(Vec::new),
                )
            }
            _ => partita_smr::service::<Bank>(),
        };
        return partita_runtime::run_node(partita_runtime::NodeOptions {
            cluster,
            id: arg("--id").parse()?,
            data_dir: arg("--data-dir").into(),
            service,
            unsafe_bugs: Vec::new(),
            io_thread: false,
        })
        .await;
    }
    let dir = std::env::temp_dir().join(format!("partita-bank-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut cluster = ClusterConfig::default_local(pick_base_port(), 7);
    cluster.cluster.service = "bank".into();
    let file = dir.join("cluster.toml");
    std::fs::write(&file, cluster.to_toml())?;
    let exe = std::env::current_exe()?;
    let mut nodes = LocalCluster::start_with(&exe, &file, &cluster, &dir, &[], None)?;
    nodes.wait_ready(Duration::from_secs(20)).await?;
    let mut c = Client::<Bank>::connect(cluster, ClientOptions::default()).await?;
    let (alice, bob) = ("alice".to_string(), "bob".to_string());
    let deposit = BankCmd::Deposit {
        account: alice.clone(),
        amount: 100,
    };
    println!("deposit 100 to alice: {:?}", c.execute(deposit).await?);
    for amount in [30, 80] {
        let t = BankCmd::Transfer {
            from: alice.clone(),
            to: bob.clone(),
            amount,
        };
        println!("transfer {amount} alice -> bob: {:?}", c.execute(t).await?);
    }
    println!(
        "bob: {:?}",
        c.execute(BankCmd::Balance { account: bob }).await?
    );
    nodes.stop(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
