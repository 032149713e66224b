//! Chirper (paper 003) on real processes: a `partita node` cluster of 3 acceptors and
//! 2 replicas per partition, on DS-SMR (2 data partitions and the oracle's) and on
//! S-SMR (2 partitions), driven by the client proxy over `partita-client`. A follow
//! across communities moves a user (DS-SMR), a post reaches its followers' timelines,
//! and concurrent clients running the Mix workload finish every command. Then the
//! nemesis on DS-SMR at 2 partitions with moves under way (and its control).

use partita_config::{ChirperSection, ClusterConfig, Durability, ExecutionSection};
use partita_dssmr::chirper::{user_id, ChirperCommand as C, ChirperReply as R, Graph, Workload};
use partita_dssmr::client::Outcome;
use partita_dssmr::StaticMap;
use partita_harness::chirper::{chirper_client, ChirperClient, ChirperLoad, ChirperMix};
use partita_harness::launch::{pick_base_port, LocalCluster};
use partita_harness::nemesis;
use partita_harness::services::chirper_params;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

/// `[execution]` for `"ssmr"` or `"dssmr"`.
fn chirper_model(scheme: &str) -> ExecutionSection {
    match scheme {
        "ssmr" => ExecutionSection::Ssmr,
        _ => ExecutionSection::Dssmr(Default::default()),
    }
}

async fn start(dir: &std::path::Path, scheme: &str) -> (LocalCluster, ClusterConfig) {
    let base = pick_base_port();
    let mut cfg = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    cfg.cluster.service = "chirper".into();
    cfg.cluster.durability = Durability::Memory;
    // Users hashed to partitions: every node and client must read the same map from
    // the cluster file, or commands reach partitions that do not hold their users.
    cfg.execution = chirper_model(scheme);
    cfg.chirper = Some(ChirperSection {
        users: 200,
        communities: 4,
        placement: "hashed".into(),
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
    let mut c = chirper_client(cfg, opts, seed).await.unwrap();
    let (_, _, spec) = chirper_params(cfg).unwrap();
    c.prefetch(Graph::generate(&spec).users());
    c
}

async fn scenario(scheme: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, cfg) = start(dir.path(), scheme).await;
    // Two users of one community that the hash puts in different partitions (of 2).
    let a = user_id(0, 1);
    let b = (2..50)
        .map(|i| user_id(0, i))
        .find(|&b| StaticMap::hashed(b, 2) != StaticMap::hashed(a, 2))
        .expect("the hash splits a community");
    let mut c = client(&cfg, 1).await;
    let followed = c.run(C::Follow { user: a, whom: b }).await.unwrap();
    assert!(
        matches!(followed, Outcome::Done(R::Followed(_))),
        "{followed:?}"
    );
    if scheme == "dssmr" {
        assert!(
            c.stats().objects_moved > 0,
            "a follow across partitions moves a user"
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
    let (_, _, spec) = chirper_params(&cfg).unwrap();
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

/// A DS-SMR (or S-SMR) cluster for the nemesis: 2 data partitions, 2 replicas each
/// (and the oracle's, DS-SMR), fsync, a small social graph so that commands contend
/// and users move.
fn nemesis_cluster(scheme: &str) -> ClusterConfig {
    let mut cfg = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1);
    cfg.cluster.service = "chirper".into();
    cfg.cluster.durability = Durability::Fsync;
    cfg.execution = chirper_model(scheme);
    cfg.chirper = Some(ChirperSection {
        users: 48,
        communities: 8,
        mean_followers: 3,
        p_local_percent: 60,
        ..Default::default()
    });
    let partitions = if scheme == "dssmr" { 3 } else { 2 };
    cfg.with_partitions(partitions, 2, 1 << 32).unwrap()
}

async fn nemesis_run(scheme: &str, args: &[String], secs: u64) -> nemesis::NemesisReport {
    let dir = tempfile::tempdir().unwrap();
    let cfg = nemesis_cluster(scheme);
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    let mut lc = LocalCluster::start_with(&exe(), &file, &cfg, dir.path(), args, None).unwrap();
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    let ncfg = nemesis::NemesisConfig {
        faults: nemesis::Fault::ALL.to_vec(),
        interval: Duration::from_millis(800),
        down_for: Duration::from_millis(1200),
        bench: nemesis::default_bench(Duration::from_secs(secs), 4, 5),
        history: Some(dir.path().join("history.jsonl")),
        together: 1,
        seed: 5,
    };
    let load = ChirperLoad {
        mix: ChirperMix::Swarm,
        shape: partita_harness::objects::LoadShape {
            clients: 4,
            duration: Duration::from_secs(secs),
            think_ms: 2,
            seed: 5,
            trim: 0.1,
            give_up: Duration::from_secs(10),
        },
    };
    let report = nemesis::run_chirper(&mut lc, &exe(), args, &ncfg, &load)
        .await
        .unwrap();
    lc.stop(Duration::from_secs(5));
    eprintln!("{scheme}:\n{report}");
    report
}

/// Paper 003's target: DS-SMR at 2 partitions stays linearizable under the nemesis
/// (kills and restarts of the coordinator, acceptors and replicas of the partitions
/// and the oracle, pauses) with moves under way; the replicas converge and every
/// timeline reads the same after a full restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dssmr_survives_the_nemesis_with_moves_under_way() {
    let r = nemesis_run("dssmr", &[], 14).await;
    assert!(r.passed(), "{r}");
    let nemesis::LoadResult::Chirper(load) = &r.load else {
        panic!("a Chirper load")
    };
    assert!(load.summary.move_commands > 0, "no move under way: {load}");
    assert!(r.injected.len() >= 3, "{r}");
}

/// Control: partitions that run an access over whatever is local (trusting the
/// consult or the cache instead of answering retry) must be caught by the
/// linearizability check itself: not a timeout, an undecided check or a cluster that
/// stopped answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nemesis_catches_locality_judged_at_consult_time() {
    let args = vec!["--unsafe".to_string(), "ds-locality-at-consult".to_string()];
    let r = nemesis_run("dssmr", &args, 8).await;
    assert!(
        matches!(r.linearizable, Err(nemesis::Failed::Violation(_))),
        "the linearizability check did not find the bug: {r}"
    );
}
