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

/// etcd's API on the key-value store on DS-SMR (2 data partitions, an etcd endpoint on
/// a replica of each): `etcdctl` puts, reads a prefix whose keys the hash spreads over
/// both partitions, runs a transaction across two keys, reads at past revisions and
/// watches from a past revision and from now (the objects' histories), and deletes;
/// what DS-SMR does not serve (leases, compaction, hashes, snapshots) is refused with
/// the reason, and the gateway carries on. Then 3
/// concurrent etcdctl clients record a history that, with a final read of every key
/// and the revisions renumbered (`partita_sim::ds::kv_lines`), the key-value checker
/// must judge linearizable; the control: one read changed to a value nobody wrote is
/// caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_works_on_the_store_on_dssmr() {
    use crate::etcd::{launch, ok, ok_in, refused};
    let dir = tempfile::tempdir().unwrap();
    let (cfg, eps) = dssmr_etcd(Durability::Memory);
    let mut lc = launch(dir.path(), &cfg, &eps).await;
    let (a, b) = (eps[0].as_str(), eps[1].as_str());

    let keys: Vec<String> = (0..6).map(|i| format!("acct-{i}")).collect();
    let homes: std::collections::BTreeSet<u16> = keys
        .iter()
        .map(|k| partita_dssmr::StaticMap::hashed(partita_dssmr::kv::key_object(k.as_bytes()), 2))
        .collect();
    assert_eq!(homes.len(), 2, "the keys start in both partitions");
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(ok([a, b][i % 2], &["put", k, &format!("{i}")]), "OK\n");
    }
    let all: String = keys
        .iter()
        .enumerate()
        .map(|(i, k)| format!("{k}\n{i}\n"))
        .collect();
    assert_eq!(ok(b, &["get", "--prefix", "acct-"]), all);
    assert_eq!(
        ok(a, &["get", "--prefix", "acct-", "--limit", "2"]),
        "acct-0\n0\nacct-1\n1\n"
    );
    let j = crate::etcd::json(&ok(a, &["get", "acct-0", "-w", "json"]));
    let created = j["kvs"][0]["create_revision"].as_i64().unwrap();
    assert_eq!(j["kvs"][0]["mod_revision"], created);
    assert!(j["header"]["revision"].as_i64().unwrap() >= created);
    // A transaction over two keys (moved together by DS-SMR): both branches.
    let txn = "value(\"acct-0\") = \"0\"\nvalue(\"acct-1\") = \"1\"\n\nput acct-0 10\nput acct-1 11\n\nget acct-0\n\n";
    assert_eq!(ok_in(a, &["txn"], Some(txn)), "SUCCESS\n\nOK\n\nOK\n");
    assert_eq!(ok_in(b, &["txn"], Some(txn)), "FAILURE\n\nacct-0\n10\n");
    let j = crate::etcd::json(&ok(b, &["get", "acct-0", "-w", "json"]));
    assert_eq!(j["kvs"][0]["version"], 2);
    let txn_rev = j["kvs"][0]["mod_revision"].as_i64().unwrap();
    assert!(txn_rev > created);

    // Reads at past revisions, from the objects' histories, in both partitions.
    let from = created.to_string();
    assert_eq!(ok(b, &["get", "acct-0", "--rev", &from]), "acct-0\n0\n");
    let before = (txn_rev - 1).to_string();
    assert_eq!(ok(a, &["get", "--prefix", "acct-", "--rev", &before]), all);
    // A watch from a past revision over both partitions: every put in revision
    // order (the transaction's two in one revision).
    let lines = crate::etcd::watch_lines(b, &["--prefix", "acct-", "--rev", &from], 24, || {});
    let mut expected: Vec<String> = (0..6)
        .flat_map(|i| ["PUT".into(), format!("acct-{i}"), format!("{i}")])
        .collect();
    assert_eq!(lines.len(), 24, "{lines:?}");
    assert_eq!(lines[..18], expected[..], "the six puts in order");
    let mut txn_events: Vec<&[String]> = lines[18..].chunks(3).collect();
    txn_events.sort();
    expected = ["PUT", "acct-0", "10", "PUT", "acct-1", "11"]
        .map(String::from)
        .to_vec();
    assert_eq!(txn_events.concat(), expected, "the transaction's two puts");
    // A watch from now: puts and a delete of keys homed in both partitions.
    let lines = crate::etcd::watch_lines(a, &["--prefix", "acct-"], 8, || {
        std::thread::sleep(Duration::from_millis(1000));
        assert_eq!(ok(b, &["put", "acct-2", "x"]), "OK\n");
        assert_eq!(ok(a, &["put", "acct-3", "y"]), "OK\n");
        assert_eq!(ok(b, &["del", "acct-2"]), "1\n");
    });
    assert_eq!(
        lines,
        ["PUT", "acct-2", "x", "PUT", "acct-3", "y", "DELETE", "acct-2"].map(String::from),
        "the watch from now"
    );
    assert_eq!(ok(b, &["del", "--prefix", "acct-"]), "5\n");
    assert_eq!(ok(a, &["get", "--prefix", "acct-"]), "");
    let st = ok(a, &["endpoint", "status"]);
    assert!(st.starts_with(&format!("{a}, ")), "{st}");

    // Leases: a lease is an object, its keys in both partitions.
    let id = crate::etcd_leases::granted(&ok(a, &["lease", "grant", "30"]));
    let lease = format!("--lease={id}");
    let leased: Vec<String> = (0..4).map(|i| format!("lease/{i}")).collect();
    let homes: std::collections::BTreeSet<u16> = leased
        .iter()
        .map(|k| partita_dssmr::StaticMap::hashed(partita_dssmr::kv::key_object(k.as_bytes()), 2))
        .collect();
    assert_eq!(homes.len(), 2, "the leased keys start in both partitions");
    for (i, k) in leased.iter().enumerate() {
        assert_eq!(ok([a, b][i % 2], &["put", k, "x", &lease]), "OK\n");
    }
    let ttl = ok(b, &["lease", "timetolive", &id, "--keys"]);
    assert!(
        ttl.contains(&format!("lease {id} granted with TTL(30s)"))
            && ttl.contains("attached keys([lease/0 lease/1 lease/2 lease/3])"),
        "{ttl}"
    );
    assert!(ok(a, &["lease", "list"]).contains(&id));
    let kept = ok(b, &["lease", "keep-alive", "--once", &id]);
    assert_eq!(kept, format!("lease {id} keepalived with TTL(30)\n"));
    assert_eq!(
        ok(a, &["lease", "revoke", &id]),
        format!("lease {id} revoked\n")
    );
    assert_eq!(ok(b, &["get", "--prefix", "lease/"]), "");
    for args in [
        &["lease", "keep-alive", "--once", id.as_str()][..],
        &["lease", "revoke", &id],
        &["put", "lease/9", "z", &lease],
    ] {
        let err = refused(a, args);
        assert!(err.contains("requested lease not found"), "{args:?}: {err}");
    }
    // Expiry: no partition holds every lease, so the endpoints find it expired and
    // order its revocation; a watcher sees both keys deleted, in both partitions, no
    // sooner than the TTL.
    let t0 = std::time::Instant::now();
    let id = crate::etcd_leases::granted(&ok(a, &["lease", "grant", "2"]));
    let lease = format!("--lease={id}");
    for (i, k) in leased.iter().enumerate() {
        assert_eq!(ok([a, b][i % 2], &["put", k, "y", &lease]), "OK\n");
    }
    let all_four = ok(b, &["get", "--prefix", "lease/", "--keys-only"]);
    if t0.elapsed() < Duration::from_millis(1800) {
        assert_eq!(
            all_four.lines().filter(|l| !l.is_empty()).count(),
            4,
            "expired early: {all_four}"
        );
    }
    // (The watch waits up to 15 s for the deletes once it is under way.)
    let lines = crate::etcd::watch_lines(b, &["--prefix", "lease/"], 8, || {
        std::thread::sleep(Duration::from_millis(500))
    });
    let mut deleted: Vec<&[String]> = lines.chunks(2).collect();
    deleted.sort();
    let expected: Vec<String> = leased
        .iter()
        .flat_map(|k| ["DELETE".into(), k.clone()])
        .collect();
    assert_eq!(deleted.concat(), expected, "the expiry's deletes");
    assert_eq!(ok(a, &["get", "--prefix", "lease/"]), "");
    // What etcd's recipes build on leases.
    crate::etcd_leases::lock_is_exclusive(dir.path(), a, b);
    crate::etcd_leases::election_hands_over(a, b);
    // Bob's campaign key stays until his lease ends; the history below starts empty.
    ok(a, &["del", "", "--from-key"]);
    assert_eq!(ok(b, &["get", "", "--from-key"]), "");

    // A store-wide compaction: every partition trims its objects' histories, a read
    // below it of keys changed before it is refused, and so is a compaction at or
    // below it.
    let before_txn = (txn_rev - 1).to_string();
    assert_eq!(
        ok(a, &["compaction", &before_txn]),
        format!("compacted revision {before_txn}\n")
    );
    for args in [
        &["get", "acct-0", "--rev", &from][..],
        &["get", "--prefix", "acct-", "--rev", &from],
        &["compaction", &from],
    ] {
        let err = refused(b, args);
        assert!(
            err.contains("required revision has been compacted"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(
        ok(b, &["get", "acct-0", "--rev", &txn_rev.to_string()]),
        "acct-0\n10\n"
    );

    // Refused with the reason, never ignored; the gateway carries on.
    for args in [
        &["endpoint", "hashkv"][..],
        &["snapshot", "save", "/dev/null"],
    ] {
        let err = refused(a, args);
        assert!(
            err.contains("runs the key-value store on S-SMR/DS-SMR"),
            "{args:?}: {err}"
        );
    }

    // Concurrent clients, judged by the checker.
    let events = etcdctl_events(&eps, 3, 3.0);
    let finals = partita_harness::objects::read_all_kv(&cfg).await.unwrap();
    for (id, c) in &mut lc.children {
        assert!(c.try_wait().unwrap().is_none(), "node {id} exited");
    }
    lc.stop(Duration::from_secs(10));
    let acked = events.iter().filter(|e| e.reply.is_some()).count();
    eprintln!("{} etcdctl operations, {acked} acknowledged", events.len());
    assert!(
        acked > 20,
        "only {acked} etcdctl operations acknowledged in 3 s"
    );
    // The final read after everything (the etcdctl clients' clock starts at zero).
    let at = events
        .iter()
        .map(|e| e.returned.unwrap_or(e.invoked))
        .max()
        .unwrap()
        + 1_000_000_000;
    let lines = partita_sim::ds::kv_lines(&events, finals.clone(), at).unwrap();
    if let Err((check, e)) = partita_sim::check::kv_history(&lines, 2_000_000) {
        panic!("{check:?}: {e}");
    }
    // The control: a read that saw a value nobody wrote.
    let mut tampered = events.clone();
    let read = tampered
        .iter_mut()
        .find_map(|e| match &mut e.reply {
            Some(KvReply::Range(r)) if !r.kvs.is_empty() => Some(r),
            _ => None,
        })
        .expect("a read that found its key");
    read.kvs[0].value = b"nobody wrote this".to_vec();
    let lines = partita_sim::ds::kv_lines(&tampered, finals, at).unwrap();
    let (check, err) = partita_sim::check::kv_history(&lines, 2_000_000).unwrap_err();
    assert_eq!(check, partita_sim::check::Check::Linearizability, "{err}");
}

/// The key-value store on DS-SMR with durability `durability` (2 data partitions and
/// the oracle's, 3 replicas each), an etcd endpoint on a replica of each data
/// partition (the endpoints returned).
pub(crate) fn dssmr_etcd(durability: Durability) -> (ClusterConfig, Vec<String>) {
    let base = pick_base_port();
    let mut cfg = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    cfg.cluster.service = "kv".into();
    cfg.cluster.durability = durability;
    cfg.execution = ExecutionSection::Dssmr(Default::default());
    let mut cfg = cfg.with_partitions(3, 2, 1 << 32).unwrap();
    let mut eps = Vec::new();
    for p in 0..2 {
        let ep = format!("127.0.0.1:{}", base + 18 + p);
        let n = cfg
            .nodes
            .iter_mut()
            .find(|n| n.partition == Some(p as u32))
            .unwrap();
        n.etcd_addr = Some(ep.clone());
        eps.push(ep);
    }
    (cfg, eps)
}

/// [`crate::etcd::etcdctl_ops`] as the simulator's S-SMR/DS-SMR key-value events.
fn etcdctl_events(eps: &[String], clients: u64, secs: f64) -> Vec<partita_sim::ds::KvEvent> {
    crate::etcd::etcdctl_ops(eps, clients, secs)
        .into_iter()
        .map(|op| partita_sim::ds::KvEvent {
            client: op.client,
            cmd: op.cmd,
            invoked: op.invoked,
            returned: op.reply.as_ref().map(|_| op.returned),
            reply: op.reply,
        })
        .collect()
}
