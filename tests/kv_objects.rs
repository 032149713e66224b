//! The key-value store on S-SMR and DS-SMR (`partita_dssmr::kv`) on real processes:
//! a `partita node` cluster of 3 acceptors and 2 replicas per partition (2 data
//! partitions, and with DS-SMR the oracle's), driven by the generic object client.
//! Accounts are keys; concurrent clients transfer between pairs of them with etcd's
//! optimistic recipe (read both, then a transaction that compares both mod
//! revisions and puts both), so every transfer spans two keys that the hash puts in
//! different partitions about half the time: DS-SMR moves them together, S-SMR runs
//! the transaction at both. At the end a range over every account (which runs at
//! every partition) must show the money conserved and exactly two more versions per
//! acknowledged transfer, and `partita kv` must read the same.

use partita_client::objects::ObjectClient;
use partita_config::{ClusterConfig, Durability, ExecutionSection};
use partita_dssmr::client::Outcome;
use partita_dssmr::kv::KvObjects;
use partita_dssmr::StaticMap;
use partita_harness::launch::{pick_base_port, LocalCluster};
use partita_kv::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const ACCOUNTS: u64 = 8;
const START: u64 = 100;

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

fn account(i: u64) -> Vec<u8> {
    format!("acct/{i}").into_bytes()
}

async fn client(cfg: &ClusterConfig, seed: u64) -> ObjectClient<KvObjects> {
    let opts = partita_client::ClientOptions {
        give_up: Duration::from_secs(20),
        ..Default::default()
    };
    ObjectClient::connect(cfg, opts, StaticMap::Hashed, seed)
        .await
        .unwrap()
}

async fn run(c: &mut ObjectClient<KvObjects>, cmd: KvCommand) -> KvReply {
    match c.run(cmd.clone()).await.unwrap() {
        Outcome::Done(r) => r,
        other => panic!("{cmd:?}: {other:?}"),
    }
}

fn put(key: Vec<u8>, value: u64) -> PutRequest {
    PutRequest {
        key,
        value: value.to_string().into_bytes(),
        prev_kv: false,
        lease: 0,
    }
}

/// A transfer of 1 from `a` to `b` if neither changed since read: whether it ran.
async fn transfer(c: &mut ObjectClient<KvObjects>, a: u64, b: u64) -> bool {
    let get = |i| RequestOp::Range(RangeRequest::new(account(i), Vec::new()));
    let read = KvCommand::Txn(TxnRequest {
        compare: vec![],
        success: vec![get(a), get(b)],
        failure: vec![],
    });
    let KvReply::Txn(t) = run(c, read).await else {
        panic!("a transaction's reply")
    };
    let kv = |i: usize| match &t.responses[i] {
        ResponseOp::Range(r) => r.kvs[0].clone(),
        other => panic!("{other:?}"),
    };
    let (ka, kb) = (kv(0), kv(1));
    let balance = |k: &KeyValue| -> u64 { String::from_utf8_lossy(&k.value).parse().unwrap() };
    if balance(&ka) == 0 {
        return false;
    }
    let same = |k: &KeyValue| Compare {
        key: k.key.clone(),
        op: CompareOp::Equal,
        target: CompareTarget::ModRevision(k.mod_revision),
    };
    let write = KvCommand::Txn(TxnRequest {
        compare: vec![same(&ka), same(&kb)],
        success: vec![
            RequestOp::Put(put(account(a), balance(&ka) - 1)),
            RequestOp::Put(put(account(b), balance(&kb) + 1)),
        ],
        failure: vec![],
    });
    let KvReply::Txn(t) = run(c, write).await else {
        panic!("a transaction's reply")
    };
    t.succeeded
}

async fn scenario(scheme: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1);
    cfg.cluster.service = "kv".into();
    cfg.cluster.durability = Durability::Memory;
    cfg.execution = match scheme {
        "ssmr" => ExecutionSection::Ssmr,
        _ => ExecutionSection::Dssmr(Default::default()),
    };
    let partitions = if scheme == "dssmr" { 3 } else { 2 };
    let cfg = cfg.with_partitions(partitions, 2, 1 << 32).unwrap();
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    let mut lc = LocalCluster::start_with(&exe(), &file, &cfg, dir.path(), &[], None).unwrap();
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();

    let mut c = client(&cfg, 1).await;
    for i in 0..ACCOUNTS {
        run(&mut c, KvCommand::Put(put(account(i), START))).await;
    }
    let mut tasks = Vec::new();
    for t in 0..4u64 {
        let cfg = cfg.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = client(&cfg, 10 + t).await;
            let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(t);
            let until = Instant::now() + Duration::from_secs(3);
            let (mut tried, mut done) = (0u64, 0u64);
            while Instant::now() < until {
                let a = rand::Rng::gen_range(&mut rng, 0..ACCOUNTS);
                let b = (a + rand::Rng::gen_range(&mut rng, 1..ACCOUNTS)) % ACCOUNTS;
                tried += 1;
                done += u64::from(transfer(&mut c, a, b).await);
            }
            (tried, done, c.stats().objects_moved)
        }));
    }
    let (mut tried, mut done, mut moved) = (0, 0, 0);
    for t in tasks {
        let (a, b, m) = t.await.unwrap();
        tried += a;
        done += b;
        moved += m;
    }
    // Every account, read by one range that runs at every partition.
    let all = KvCommand::Range(RangeRequest::new(b"acct/".to_vec(), b"acct0".to_vec()));
    let KvReply::Range(r) = run(&mut c, all.clone()).await else {
        panic!("a range's reply")
    };
    let sum: u64 = r
        .kvs
        .iter()
        .map(|k| String::from_utf8_lossy(&k.value).parse::<u64>().unwrap())
        .sum();
    let versions: u64 = r.kvs.iter().map(|k| k.version).sum();
    // The same through the command line.
    let out = std::process::Command::new(exe())
        .args(["kv", "--cluster"])
        .arg(&file)
        .args(["range", "acct/", "--prefix"])
        .output()
        .unwrap();
    lc.stop(Duration::from_secs(10));
    eprintln!("{scheme}: {done} of {tried} transfers ran, {moved} objects moved");
    assert_eq!(r.count, ACCOUNTS, "{r:?}");
    assert_eq!(sum, ACCOUNTS * START, "money conserved: {r:?}");
    assert_eq!(
        versions,
        ACCOUNTS + 2 * done,
        "two puts per acknowledged transfer, none of a refused one: {r:?}"
    );
    assert!(done > 10, "{done} transfers in 3 s");
    if scheme == "dssmr" {
        assert!(moved > 0, "transfers across partitions moved accounts");
    }
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for k in &r.kvs {
        let line = format!(
            "\"{}\" = \"{}\"",
            String::from_utf8_lossy(&k.key),
            String::from_utf8_lossy(&k.value)
        );
        assert!(text.contains(&line), "{line} in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_transfers_on_dssmr_real_processes() {
    scenario("dssmr").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_transfers_on_ssmr_real_processes() {
    scenario("ssmr").await;
}

/// `partita bench --up --kv-pairs` on DS-SMR: every command completes, keys move, and
/// the JSON says so.
#[test]
fn bench_runs_the_pairs_on_dssmr() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("pairs.json");
    let out = std::process::Command::new(exe())
        .args([
            "bench",
            "--up",
            "--kv-pairs",
            "100",
            "--execution",
            "dssmr",
            "--partitions",
            "2",
            "--clients",
            "4",
            "--think-ms",
            "0",
            "--duration",
            "2",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let load = &v["load"];
    assert_eq!(load["scheme"], "DS-SMR", "{v}");
    assert!(load["commands"].as_u64().unwrap() > 0, "{v}");
    assert!(load["objects_moved"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(load["unknown"].as_u64().unwrap(), 0, "{v}");
    // Refused where it does not apply, with the reason.
    let out = std::process::Command::new(exe())
        .args(["bench", "--up", "--kv-pairs", "10", "--duration", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--execution ssmr or dssmr"), "{err}");
}

/// The nemesis on the key-value store on DS-SMR at 2 partitions (kills and restarts of
/// the coordinator, acceptors and replicas of the partitions and the oracle, pauses)
/// with moves under way: the history with a final read of every key linearizable
/// under the key-value checker, the replicas converged, every key the same after a
/// full restart; and its control, partitions that run an access over whatever is
/// local, caught by the linearizability check itself.
async fn nemesis_run(args: &[String], secs: u64) -> partita_harness::nemesis::NemesisReport {
    use partita_harness::nemesis;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1);
    cfg.cluster.service = "kv".into();
    cfg.cluster.durability = Durability::Fsync;
    cfg.execution = ExecutionSection::Dssmr(Default::default());
    let cfg = cfg.with_partitions(3, 2, 1 << 32).unwrap();
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
    let shape = partita_harness::objects::LoadShape {
        clients: 4,
        duration: Duration::from_secs(secs),
        think_ms: 2,
        seed: 5,
        trim: 0.1,
        give_up: Duration::from_secs(60),
    };
    let report = nemesis::run_kv_objects(&mut lc, &exe(), args, &ncfg, &shape)
        .await
        .unwrap();
    lc.stop(Duration::from_secs(5));
    eprintln!("{report}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_on_dssmr_survives_the_nemesis_with_moves_under_way() {
    let r = nemesis_run(&[], 10).await;
    assert!(r.passed(), "{r}");
    let partita_harness::nemesis::LoadResult::Objects(load) = &r.load else {
        panic!("an object load")
    };
    assert!(load.move_commands > 0, "no move under way: {r}");
    assert!(r.injected.len() >= 3, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nemesis_catches_locality_judged_at_consult_time_on_kv() {
    let args = vec!["--unsafe".to_string(), "ds-locality-at-consult".to_string()];
    let r = nemesis_run(&args, 8).await;
    assert!(
        matches!(
            r.linearizable,
            Err(partita_harness::nemesis::Failed::Violation(_))
        ),
        "the linearizability check did not find the bug: {r}"
    );
}
