//! The DS-SMR example (`examples/accounts`) on real processes: nine processes of the
//! example's own program (3 acceptors; two partitions of accounts and the oracle's,
//! 2 replicas each). Accounts start hashed to partitions, so most pairs start apart;
//! concurrent clients each trade between the two accounts of a pair of their own, and
//! now and then with any account, while DS-SMR moves accounts under them. Afterwards
//! no money was made or lost, accounts were moved, every transfer finished, and each
//! partition's replicas agree. The example's program is the one `cargo test` builds.

#[path = "../examples/accounts/service.rs"]
mod service;

use partita_client::objects::ObjectClient;
use partita_client::{node_status, ClientOptions};
use partita_config::{ClusterConfig, Durability, ExecutionSection};
use partita_dssmr::client::Outcome;
use partita_dssmr::StaticMap;
use partita_harness::launch::{pick_base_port, LocalCluster};
use rand::{Rng, SeedableRng};
use service::{Accounts, Cmd, Reply};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `target/<profile>/examples/accounts`, next to this test's own `deps` directory.
fn example_exe() -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let profile_dir = me.parent().and_then(|d| d.parent()).unwrap();
    let exe = profile_dir.join("examples").join("accounts");
    assert!(
        exe.exists(),
        "{} is missing: `cargo test` builds examples; build it with `cargo build --example accounts`",
        exe.display()
    );
    exe
}

const ACCOUNTS: u64 = 8;

async fn client(c: &ClusterConfig, seed: u64) -> ObjectClient<Accounts> {
    let opts = ClientOptions {
        give_up: Duration::from_secs(20),
        ..Default::default()
    };
    // The example's map (its `START`): the service's own placement, a hash.
    ObjectClient::connect(c, opts, StaticMap::Service, seed)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_accounts_example_moves_accounts_under_load_and_conserves_money() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1)
        .with_partitions(3, 2, 1 << 32)
        .unwrap();
    c.cluster.service = "accounts".into();
    c.cluster.durability = Durability::Memory;
    c.execution = ExecutionSection::Dssmr(Default::default());
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, c.to_toml()).unwrap();
    let c = ClusterConfig::load(&file).unwrap();
    let mut nodes =
        LocalCluster::start_with(&example_exe(), &file, &c, dir.path(), &[], None).unwrap();
    nodes.wait_ready(Duration::from_secs(20)).await.unwrap();

    let mut first = client(&c, 1).await;
    for account in 0..ACCOUNTS {
        assert_eq!(
            first.run(Cmd::Open { account }).await.unwrap(),
            Outcome::Created(true)
        );
        let d = Cmd::Deposit {
            account,
            amount: 100,
        };
        assert_eq!(
            first.run(d).await.unwrap(),
            Outcome::Done(Reply::Balance(100))
        );
    }
    let apart = (0..ACCOUNTS / 2)
        .filter(|p| StaticMap::hashed(2 * p, 2) != StaticMap::hashed(2 * p + 1, 2))
        .count();
    assert!(
        apart > 0,
        "the hash keeps every pair together; pick other accounts"
    );
    let overdraw = Cmd::Transfer {
        from: 0,
        to: 1,
        amount: 1_000,
    };
    assert_eq!(
        first.run(overdraw).await.unwrap(),
        Outcome::Done(Reply::Insufficient)
    );

    let mut tasks = Vec::new();
    for k in 0..ACCOUNTS / 2 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let mut cl = client(&c, 10 + k).await;
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(k);
            let until = Instant::now() + Duration::from_secs(3);
            let mut n = 0u64;
            while Instant::now() < until {
                n += 1;
                let (mut from, mut to) = (2 * k, 2 * k + 1);
                if n.is_multiple_of(2) {
                    std::mem::swap(&mut from, &mut to);
                }
                if n.is_multiple_of(5) {
                    to = rng.gen_range(0..ACCOUNTS);
                }
                let amount = rng.gen_range(1..=20);
                match cl.run(Cmd::Transfer { from, to, amount }).await.unwrap() {
                    Outcome::Done(Reply::Balance(_) | Reply::Insufficient) => {}
                    other => panic!("transfer {from} -> {to}: {other:?}"),
                }
            }
            (n, cl.stats().clone())
        }));
    }
    let (mut transfers, mut moved) = (0, 0);
    for t in tasks {
        let (n, stats) = t.await.unwrap();
        transfers += n;
        moved += stats.objects_moved;
    }
    eprintln!("{transfers} transfers, {moved} accounts moved");
    assert!(transfers > 20, "only {transfers} transfers in 3 s");
    assert!(moved > 0, "no account moved, although pairs started apart");

    let mut total = 0;
    for account in 0..ACCOUNTS {
        let Outcome::Done(Reply::Balance(b)) = first.run(Cmd::Balance { account }).await.unwrap()
        else {
            panic!("account {account} has no balance");
        };
        total += b;
    }
    assert_eq!(total, 100 * ACCOUNTS, "money made or lost");

    // Each partition's replicas agree once they executed the same commands.
    let layout = c.partition_layout();
    let deadline = Instant::now() + Duration::from_secs(20);
    for (p, members) in layout.replicas.iter().enumerate() {
        loop {
            let mut seen = Vec::new();
            for r in members {
                if let Some(s) = node_status(c.addr(*r), Duration::from_secs(1)).await {
                    seen.push((s.executed_up_to, s.digest));
                }
            }
            if seen.len() == members.len() && seen.windows(2).all(|w| w[0] == w[1]) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "partition {p} diverged: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    nodes.stop(Duration::from_secs(10));
}
