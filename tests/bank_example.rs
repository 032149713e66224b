//! The example service (`examples/bank`) on a real cluster: five processes of the
//! example's own program, each running the bank as its replicated state machine;
//! concurrent clients move money at random; afterwards no money was made or lost, the
//! replicas agree, and a transfer that would overdraw changed nothing. The example's
//! program is the one `cargo test` builds (examples are built, not run, by it).

#[path = "../examples/bank/service.rs"]
mod service;

use partita_client::{node_status, Client, ClientOptions};
use partita_config::{ClusterConfig, Durability};
use partita_harness::launch::{pick_base_port, LocalCluster};
use service::{Bank, BankCmd, BankReply};
use std::path::PathBuf;
use std::time::Duration;

/// `target/<profile>/examples/bank`, next to this test's own `deps` directory.
fn example_exe() -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let profile_dir = me.parent().and_then(|d| d.parent()).unwrap();
    let exe = profile_dir.join("examples").join("bank");
    assert!(
        exe.exists(),
        "{} is missing: `cargo test` builds examples; build it with `cargo build --example bank`",
        exe.display()
    );
    exe
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bank_example_conserves_money_on_a_real_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1);
    cluster.cluster.service = "bank".into();
    cluster.cluster.durability = Durability::Memory;
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, cluster.to_toml()).unwrap();
    let mut nodes =
        LocalCluster::start_with(&example_exe(), &file, &cluster, dir.path(), &[], None).unwrap();
    nodes.wait_ready(Duration::from_secs(20)).await.unwrap();

    let name = |i: u64| format!("acct-{i}");
    let mut c = Client::<Bank>::connect(cluster.clone(), ClientOptions::default())
        .await
        .unwrap();
    for i in 0..5 {
        let r = c
            .execute(BankCmd::Deposit {
                account: name(i),
                amount: 100,
            })
            .await;
        assert_eq!(r.unwrap(), BankReply::Balance(100));
    }
    let overdraw = BankCmd::Transfer {
        from: name(0),
        to: name(1),
        amount: 1000,
    };
    assert_eq!(c.execute(overdraw).await.unwrap(), BankReply::Insufficient);

    let mut tasks = Vec::new();
    for t in 0..4u64 {
        let cluster = cluster.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = Client::<Bank>::connect(cluster, ClientOptions::default())
                .await
                .unwrap();
            let mut moved = 0;
            for n in 0..40u64 {
                let (from, to) = ((t + n) % 5, (t * 3 + n * 7 + 1) % 5);
                if from == to {
                    continue;
                }
                let cmd = BankCmd::Transfer {
                    from: name(from),
                    to: name(to),
                    amount: 1 + n % 60,
                };
                if let BankReply::Balance(_) = c.execute(cmd).await.unwrap() {
                    moved += 1;
                }
            }
            moved
        }));
    }
    let mut moved = 0;
    for t in tasks {
        moved += t.await.unwrap();
    }
    assert!(moved > 20, "only {moved} transfers went through");
    let mut total = 0;
    for i in 0..5 {
        match c
            .execute(BankCmd::Balance { account: name(i) })
            .await
            .unwrap()
        {
            BankReply::Balance(b) => total += b,
            other => panic!("a balance: {other:?}"),
        }
    }
    assert_eq!(total, 500, "money was made or lost");

    // Both replicas hold the same bank.
    let mut digests = Vec::new();
    for _ in 0..100 {
        digests.clear();
        for id in cluster.executors() {
            let s = node_status(cluster.addr(id), Duration::from_secs(1))
                .await
                .unwrap();
            assert_eq!(s.service, "bank");
            digests.push((s.executed_up_to, s.digest));
        }
        if digests.windows(2).all(|w| w[0] == w[1]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        digests.windows(2).all(|w| w[0] == w[1]),
        "replicas disagree: {digests:?}"
    );
    nodes.stop(Duration::from_secs(10));
}

/// One command on an object client, to its answer.
async fn run(c: &mut partita_client::objects::ObjectClient<Bank>, cmd: BankCmd) -> BankReply {
    match c.run(cmd.clone()).await.unwrap() {
        partita_dssmr::client::Outcome::Done(r) => r,
        other => panic!("{cmd:?}: {other:?}"),
    }
}

/// The same bank on DS-SMR (paper 003), from the same program: 2 data partitions and
/// the oracle's, 2 replicas each, accounts hashed to partitions and opened by their
/// first deposit (implicit objects); 4 concurrent object clients transfer between
/// accounts, so transfers whose accounts are apart move them together. No money is
/// made or lost, an overdraw changes nothing, and accounts moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bank_example_runs_on_dssmr() {
    use partita_client::objects::ObjectClient;
    use partita_dssmr::client::Outcome;
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1);
    cluster.cluster.service = "bank".into();
    cluster.cluster.durability = Durability::Memory;
    cluster.execution = partita_config::ExecutionSection::Dssmr(Default::default());
    let cluster = cluster.with_partitions(3, 2, 1 << 32).unwrap();
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, cluster.to_toml()).unwrap();
    let mut nodes =
        LocalCluster::start_with(&example_exe(), &file, &cluster, dir.path(), &[], None).unwrap();
    nodes.wait_ready(Duration::from_secs(20)).await.unwrap();
    let client = |seed: u64| {
        let cluster = cluster.clone();
        async move {
            ObjectClient::<Bank>::connect(
                &cluster,
                ClientOptions::default(),
                partita_dssmr::StaticMap::Hashed,
                seed,
            )
            .await
            .unwrap()
        }
    };
    let name = |i: u64| format!("acct-{i}");
    let mut c = client(1).await;
    for i in 0..6 {
        let deposit = BankCmd::Deposit {
            account: name(i),
            amount: 100,
        };
        assert_eq!(run(&mut c, deposit).await, BankReply::Balance(100));
    }
    let overdraw = BankCmd::Transfer {
        from: name(0),
        to: name(1),
        amount: 1000,
    };
    assert_eq!(run(&mut c, overdraw).await, BankReply::Insufficient);
    let mut tasks = Vec::new();
    for t in 0..4u64 {
        let mut c = client(10 + t).await;
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            for n in 0..40u64 {
                let (from, to) = ((t + n) % 6, (t * 3 + n * 7 + 1) % 6);
                if from == to {
                    continue;
                }
                let cmd = BankCmd::Transfer {
                    from: format!("acct-{from}"),
                    to: format!("acct-{to}"),
                    amount: 1 + n % 60,
                };
                if let Outcome::Done(BankReply::Balance(_)) = c.run(cmd).await.unwrap() {
                    done += 1;
                }
            }
            (done, c.stats().objects_moved)
        }));
    }
    let (mut done, mut moved) = (0, 0);
    for t in tasks {
        let (d, m) = t.await.unwrap();
        done += d;
        moved += m;
    }
    let mut total = 0;
    for i in 0..6 {
        match run(&mut c, BankCmd::Balance { account: name(i) }).await {
            BankReply::Balance(b) => total += b,
            other => panic!("a balance: {other:?}"),
        }
    }
    nodes.stop(Duration::from_secs(10));
    eprintln!("DS-SMR: {done} transfers went through, {moved} accounts moved");
    assert!(done > 20, "only {done} transfers went through");
    assert!(moved > 0, "no account moved");
    assert_eq!(total, 600, "money was made or lost");
}
