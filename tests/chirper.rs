//! Chirper (paper 003) on real processes: a `partita node` cluster of 3 acceptors and
//! 2 replicas per partition, on DS-SMR (2 data partitions and the oracle's) and on
//! S-SMR (2 partitions), driven by the client proxy over `partita-client`. A follow
//! across communities moves a user (DS-SMR), a post reaches its followers' timelines,
//! and concurrent clients running the Mix workload finish every command.

use partita_config::{ClusterConfig, DssmrSection, Durability};
use partita_dssmr::chirper::{user_id, ChirperCommand as C, ChirperReply as R, Graph, Workload};
use partita_dssmr::client::Outcome;
use partita_harness::chirper::ChirperClient;
use partita_harness::launch::{pick_base_port, LocalCluster};
use partita_harness::services::chirper_params;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

async fn start(dir: &std::path::Path, scheme: &str) -> (LocalCluster, ClusterConfig) {
    let base = pick_base_port();
    let mut cfg = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    cfg.cluster.service = "chirper".into();
    cfg.cluster.durability = Durability::Memory;
    cfg.dssmr = Some(DssmrSection {
        scheme: scheme.into(),
        users: 200,
        communities: 4,
        ..Default::default()
    });
    let partitions = if scheme == "dssmr" { 3 } else { 2 };
    let cfg = cfg.with_partitions(partitions, 2, 1 << 32).unwrap();
    let file = dir.join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    let mut lc = LocalCluster::start_with(&exe(), &file, &cfg, dir, &[], None).unwrap();
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    (lc, cfg)
}

async fn client(cfg: &ClusterConfig, seed: u64) -> ChirperClient {
    let opts = partita_client::ClientOptions {
        give_up: Duration::from_secs(20),
        ..Default::default()
    };
    let mut c = ChirperClient::connect(cfg, opts, seed).await.unwrap();
    let (_, spec) = chirper_params(cfg).unwrap();
    c.prefetch(Graph::generate(&spec).users());
    c
}

async fn scenario(scheme: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, cfg) = start(dir.path(), scheme).await;
    let (a, b) = (user_id(0, 1), user_id(1, 2));
    let mut c = client(&cfg, 1).await;
    let followed = c.run(C::Follow { user: a, whom: b }).await.unwrap();
    assert!(
        matches!(followed, Outcome::Done(R::Followed(_))),
        "{followed:?}"
    );
    if scheme == "dssmr" {
        assert!(
            c.stats().objects_moved > 0,
            "a follow across communities moves a user"
        );
    }
    let posted = c
        .run(C::Post {
            user: b,
            id: 42,
            text: "hello".into(),
        })
        .await
        .unwrap();
    let Outcome::Done(R::Posted(n)) = posted else {
        panic!("{posted:?}")
    };
    assert!(n >= 1);
    let Outcome::Done(R::Timeline(t)) = c.run(C::GetTimeline { user: a }).await.unwrap() else {
        panic!("a timeline")
    };
    assert!(t.iter().any(|p| p.id == 42 && p.author == b), "{t:?}");
    // Concurrent clients on the Mix workload: every command finishes.
    let (_, spec) = chirper_params(&cfg).unwrap();
    let graph = std::sync::Arc::new(Graph::generate(&spec));
    let mut tasks = Vec::new();
    for i in 0..4u64 {
        let cfg = cfg.clone();
        let graph = graph.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = client(&cfg, 10 + i).await;
            let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(i);
            let until = Instant::now() + Duration::from_secs(3);
            let mut n = 0u64;
            while Instant::now() < until {
                n += 1;
                let cmd = Workload::Mix.next(&graph, (i << 32) | n, &mut rng);
                c.run(cmd).await.expect("a Mix command finishes");
            }
            (n, c.stats().clone())
        }));
    }
    let mut total = 0;
    for t in tasks {
        let (n, _) = t.await.unwrap();
        total += n;
    }
    lc.stop(Duration::from_secs(10));
    assert!(total > 40, "{total} Mix commands in 3 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chirper_on_dssmr_real_processes() {
    scenario("dssmr").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chirper_on_ssmr_real_processes() {
    scenario("ssmr").await;
}
