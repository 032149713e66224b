//! etcd's leases and what applications build on them, on a real cluster, driven by
//! clients nobody here wrote: `etcdctl` (leases, `lock`, `elect`, reads at a past
//! revision), etcd's Go client with its `concurrency` package unchanged (Mutex,
//! Election, STM; `tools/etcd-go`), and python-etcd3 from PyPI (its leases and
//! `lock()`; installed into a virtual environment by `scripts/install-test-deps`).
//! Then lock holders under leader kills and pauses: no two may hold the lock at once
//! within their leases, and the counter the lock guards (fenced by the lock key's
//! revision) loses no increment; a planted gateway bug that acknowledges keep-alives
//! without ordering them must be caught.

use crate::etcd::{
    ctl, etcd_go, exe, install, json, launch, launch_with, ok, refused, revision_of, start,
    start_kv, watch_lines,
};
use partita_config::{ClusterConfig, Durability};
use partita_harness::launch::pick_base_port;
use partita_harness::nemesis::{self, Fault, NemesisConfig};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The id etcdctl prints for a lease it granted ("lease 694d... granted with TTL(5s)").
pub(crate) fn granted(out: &str) -> String {
    let id = out
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string();
    assert!(out.contains("granted with TTL"), "{out}");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_leases_locks_elections_past_revisions_and_maintenance() {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, eps) = start(dir.path()).await;
    let (a, b) = (eps[0].as_str(), eps[1].as_str());

    // A lease, keys on it, its time to live, keep-alive, revoke.
    let id = granted(&ok(a, &["lease", "grant", "30"]));
    let lease = format!("--lease={id}");
    assert_eq!(ok(a, &["put", "l/1", "x", &lease]), "OK\n");
    assert_eq!(ok(b, &["put", "l/2", "y", &lease]), "OK\n");
    let ttl = ok(b, &["lease", "timetolive", &id, "--keys"]);
    assert!(
        ttl.contains(&format!("lease {id} granted with TTL(30s)"))
            && ttl.contains("attached keys([l/1 l/2])"),
        "{ttl}"
    );
    assert!(ok(a, &["lease", "list"]).contains(&id));
    let j = json(&ok(a, &["get", "l/1", "-w", "json"]));
    assert_eq!(
        format!("{:016x}", j["kvs"][0]["lease"].as_i64().unwrap()),
        id
    );
    let kept = ok(b, &["lease", "keep-alive", "--once", &id]);
    assert_eq!(kept, format!("lease {id} keepalived with TTL(30)\n"));
    let before = revision_of(a);
    assert_eq!(
        ok(a, &["lease", "revoke", &id]),
        format!("lease {id} revoked\n")
    );
    assert_eq!(ok(a, &["get", "--prefix", "l/"]), "");
    // Both keys went in one revision.
    assert_eq!(revision_of(a), before + 1);
    // Gone: etcd's errors, and nothing else changes.
    for args in [
        &["lease", "keep-alive", "--once", id.as_str()][..],
        &["lease", "revoke", &id],
        &["put", "l/3", "z", &lease],
    ] {
        let err = refused(a, args);
        assert!(err.contains("requested lease not found"), "{args:?}: {err}");
    }
    assert_eq!(revision_of(a), before + 1);
    let ttl = ok(a, &["lease", "timetolive", &id]);
    assert_eq!(ttl, format!("lease {id} already expired\n"));

    // Expiry in an idle cluster, in one revision a watcher sees; the keys still read
    // at the revision before.
    let id = granted(&ok(a, &["lease", "grant", "2"]));
    let lease = format!("--lease={id}");
    assert_eq!(ok(a, &["put", "e/1", "x", &lease]), "OK\n");
    assert_eq!(ok(a, &["put", "e/2", "y", &lease]), "OK\n");
    let put_rev = revision_of(a);
    let t0 = Instant::now();
    let from = put_rev.to_string();
    let lines = watch_lines(b, &["--prefix", "e/", "--rev", &from], 8, || {
        std::thread::sleep(Duration::from_millis(3500))
    });
    assert_eq!(
        lines,
        ["PUT", "e/2", "y", "DELETE", "e/1", "DELETE", "e/2"].map(String::from)[..],
        "watch from the second put"
    );
    assert!(t0.elapsed() >= Duration::from_secs(2), "expired early");
    assert_eq!(ok(b, &["get", "--prefix", "e/"]), "");
    let j = json(&ok(b, &["get", "e/1", "-w", "json"]));
    let expired_rev = j["header"]["revision"].as_i64().unwrap();
    assert_eq!(expired_rev, put_rev + 1, "both keys in one revision");
    assert_eq!(
        ok(b, &["get", "--prefix", "e/", &format!("--rev={put_rev}")]),
        "e/1\nx\ne/2\ny\n"
    );
    let err = refused(b, &["get", "e/1", &format!("--rev={}", expired_rev + 100)]);
    assert!(
        err.contains("required revision is a future revision"),
        "{err}"
    );
    assert_eq!(
        ok(a, &["compaction", &expired_rev.to_string()]),
        format!("compacted revision {expired_rev}\n")
    );
    let err = refused(b, &["get", "e/1", &format!("--rev={put_rev}")]);
    assert!(
        err.contains("required revision has been compacted"),
        "{err}"
    );

    lock_is_exclusive(dir.path(), a, b);
    election_hands_over(a, b);

    // Maintenance: HashKV equal on both replicas at one revision (and at a past one),
    // sizes, no alarms, defragment, and a snapshot saved that restores to the store.
    assert_eq!(ok(a, &["put", "m/1", "one"]), "OK\n");
    let hashkv = |ep: &str, rev: i64| {
        let j = json(&ok(
            ep,
            &["endpoint", "hashkv", &format!("--rev={rev}"), "-w", "json"],
        ));
        (
            j[0]["HashKV"]["hash"].as_u64().unwrap(),
            j[0]["HashKV"]["compact_revision"].as_i64().unwrap_or(0),
        )
    };
    let now = revision_of(a);
    let (ha, hb) = (hashkv(a, now), hashkv(b, now));
    assert_eq!(ha, hb, "HashKV at revision {now} on both replicas");
    assert_eq!(ha.1, expired_rev, "the compaction");
    let before_put = hashkv(a, now - 1);
    assert_ne!(before_put.0, ha.0, "the put changed the hash");
    assert_eq!(ok(a, &["put", "m/2", "two"]), "OK\n");
    assert_eq!(hashkv(b, now), ha, "a past revision hashes alike later");
    let st = json(&ok(a, &["endpoint", "status", "-w", "json"]));
    assert!(st[0]["Status"]["dbSize"].as_i64().unwrap() > 0, "{st}");
    assert_eq!(ok(a, &["alarm", "list"]), "");
    assert!(ok(b, &["defrag"]).contains("Finished defragmenting etcd member"));
    let file = dir.path().join("backup.db");
    let saved = ok(b, &["snapshot", "save", file.to_str().unwrap()]);
    assert!(saved.contains("Snapshot saved at"), "{saved}");
    let bytes = std::fs::read(&file).unwrap();
    let body = partita_etcd::convert::snapshot_in_file(&bytes).unwrap();
    let replica = partita_smr::SequentialReplica::<partita_kv::KvStore>::restore(body).unwrap();
    assert_eq!(
        replica.state().get(b"m/2").map(|kv| kv.value),
        Some(b"two".to_vec()),
        "the snapshot holds the newest put"
    );

    for (id, c) in &mut lc.children {
        assert!(c.try_wait().unwrap().is_none(), "node {id} exited");
    }
    lc.stop(Duration::from_secs(10));
}

/// etcd's Go client and its concurrency package, unchanged: an election's campaign,
/// proclaim, observe and resign; STM transfers that keep the total (STM reads at a
/// past revision); mutexes guarding a counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcds_go_concurrency_package_works_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let go = etcd_go(dir.path());
    let (mut lc, eps) = start(dir.path()).await;
    let all = eps.join(",");
    let run = |args: &[&str]| {
        let o = Command::new(&go).args(args).output().unwrap();
        assert!(
            o.status.success(),
            "etcd-go {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let elect = run(&["elect", "-endpoints", &all]);
    let stm = run(&[
        "stm",
        "-endpoints",
        &all,
        "-workers",
        "3",
        "-transfers",
        "15",
    ]);
    let locks = run(&[
        "locks",
        "-endpoints",
        &all,
        "-workers",
        "3",
        "-seconds",
        "2",
        "-ttl",
        "5",
    ]);
    lc.stop(Duration::from_secs(10));
    assert_eq!(
        elect,
        "alice leads\nbob waits\nleader alice\nleader alice-2\nbob leads\nobserved bob\n\
         no leader\n"
    );
    assert_eq!(stm, "sum 400 failed 0\n");
    let sections = partita_checker::locks::parse(&locks).unwrap();
    let summary = partita_checker::locks::check(&sections).unwrap();
    assert!(
        summary.guarded_writes >= 10 && summary.fenced == 0,
        "{summary}"
    );
}

/// The virtual environment with python-etcd3 (`scripts/install-test-deps
/// python-etcd3`); its interpreter.
fn python_etcd3() -> PathBuf {
    install("python-etcd3");
    PathBuf::from("/var/cache/partita/python-etcd3/bin/python")
}

/// python-etcd3 from PyPI: a lease with keys, its refresh and time to live, its
/// revoke; `lock()` excludes a second holder until the first releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_etcd3_leases_and_locks() {
    let py = python_etcd3();
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, eps) = start(dir.path()).await;
    let (host, port) = eps[0].split_once(':').unwrap();
    let script = format!(
        r#"
import etcd3
c = etcd3.client(host="{host}", port={port})
c.put("py/plain", "é")
print("plain", c.get("py/plain")[0].decode())
l = c.lease(30)
c.put("py/leased", "v", lease=l)
print("ttl", l.granted_ttl, l.remaining_ttl > 25, sorted(k.decode() for k in l.keys))
l.refresh()
first = c.lock("res", ttl=10)
print("first", first.acquire(timeout=5))
second = c.lock("res", ttl=10)
print("second while held", second.acquire(timeout=1))
first.release()
print("second after release", second.acquire(timeout=5))
second.release()
l.revoke()
print("after revoke", c.get("py/leased")[0])
"#
    );
    let o = Command::new(&py).arg("-c").arg(&script).output().unwrap();
    lc.stop(Duration::from_secs(10));
    assert!(
        o.status.success(),
        "python-etcd3: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "plain é\nttl 30 True ['py/leased']\nfirst True\nsecond while held False\n\
         second after release True\nafter revoke None\n"
    );
}

/// Lock holders (`etcd-go locks`: 3 workers, sessions of `ttl` s, 50 ms sections) for
/// `secs`, with `faults` injected meanwhile; the checker's verdict on their sections.
/// On the one store, or with `dssmr` on the store on DS-SMR
/// ([`crate::kv_objects::dssmr_etcd`]).
async fn lock_run(
    dir: &Path,
    dssmr: bool,
    node_args: &[String],
    faults: Vec<Fault>,
    secs: u64,
    ttl: u64,
) -> Result<partita_checker::locks::LockSummary, String> {
    let go = etcd_go(dir);
    let (mut lc, eps) = match dssmr {
        false => start_kv(dir, Durability::Fsync, node_args).await,
        true => {
            let (cfg, eps) = crate::kv_objects::dssmr_etcd(Durability::Fsync);
            (launch_with(dir, &cfg, &eps, node_args).await, eps)
        }
    };
    let holders = Command::new(&go)
        .args(["locks", "-endpoints", &eps.join(","), "-workers", "3"])
        .args(["-seconds", &secs.to_string(), "-ttl", &ttl.to_string()])
        .args(["-hold-ms", "50"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if !faults.is_empty() {
        let cfg = NemesisConfig {
            faults,
            interval: Duration::from_millis(1500),
            down_for: Duration::from_millis(1000),
            bench: nemesis::default_bench(Duration::from_secs(secs), 1, 5),
            history: None,
            together: 1,
            seed: 5,
        };
        let injected =
            nemesis::inject_for(&mut lc, &exe(), node_args, &cfg, Duration::from_secs(secs))
                .await
                .unwrap();
        assert!(!injected.is_empty(), "no fault was injected");
        eprintln!(
            "lock holders: faults {:?}",
            injected
                .iter()
                .map(|i| format!("{:?}@{:.1}s", i.fault, i.at_s))
                .collect::<Vec<_>>()
        );
    }
    let o = holders.wait_with_output().unwrap();
    lc.stop(Duration::from_secs(10));
    assert!(
        o.status.success(),
        "etcd-go locks: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let sections = partita_checker::locks::parse(&String::from_utf8(o.stdout).unwrap())?;
    partita_checker::locks::check(&sections)
}

/// Lock holders under leader kills and pauses: mutual exclusion within the leases
/// and no lost increment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_locks_hold_under_leader_kills_and_pauses() {
    locks_hold_under_coordinator_faults(false).await;
}

/// The control: a gateway that acknowledges keep-alives without ordering them. The
/// holders believe their leases renewed; the cluster expires them on time, and the
/// lock goes from a holder inside its lease (its guarded write fenced off, or the next
/// waiter in while it holds). Sessions of 2 s, the shortest lease, so that each dies
/// two or three times in a run: a run misses the bug only if every death fell between
/// its holder's sections; three runs are allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unordered_keepalive_acks_are_caught() {
    planted_lock_bug_is_caught(false, "etcd-ack-keepalives-unordered").await;
}

/// The same holders on the key-value store on DS-SMR (2 data partitions), where a
/// lease is an object and the gateways expire leases by ordered checks
/// (`KvCommand::LeaseExpire`): a session's lease and its lock key are objects DS-SMR
/// moves together, the waiters' range and watch scan both partitions, and the
/// coordinator is killed and paused meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_locks_hold_on_dssmr_under_coordinator_kills() {
    locks_hold_under_coordinator_faults(true).await;
}

/// The control on DS-SMR: gateways that revoke a lease on their own reckoning of its
/// expiry (`--unsafe etcd-expire-leases-early`: 1.5 s before it, by a plain revoke
/// rather than an ordered check). A holder's session renews its 2 s lease every 2/3
/// s, later than the gateway's early deadline half a second after a renewal, so the
/// lock goes from a holder inside its lease; three runs are allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_lease_expiry_on_dssmr_is_caught() {
    planted_lock_bug_is_caught(true, "etcd-expire-leases-early").await;
}

/// 3 holders, 3 s sessions, 8 s, the coordinator killed and paused: the checker
/// passes, with enough guarded writes to mean something.
async fn locks_hold_under_coordinator_faults(dssmr: bool) {
    let dir = tempfile::tempdir().unwrap();
    let summary = lock_run(
        dir.path(),
        dssmr,
        &[],
        vec![Fault::KillCoordinator, Fault::PauseCoordinator],
        8,
        3,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("lock holders under faults (DS-SMR: {dssmr}): {summary}");
    assert!(summary.guarded_writes >= 10, "{summary}");
}

/// With the planted gateway bug `bug`, 2 s sessions for 6 s: the checker reports a
/// lock lost inside a lease, in one of three runs.
async fn planted_lock_bug_is_caught(dssmr: bool, bug: &str) {
    let args = ["--unsafe".to_string(), bug.to_string()];
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        match lock_run(dir.path(), dssmr, &args, vec![], 6, 2).await {
            Err(e) => {
                assert!(
                    e.contains("two held the lock at once within their leases")
                        || e.contains("lost the lock within its lease"),
                    "{e}"
                );
                eprintln!("{bug} caught in run {}: {e}", outcomes.len() + 1);
                return;
            }
            Ok(summary) => outcomes.push(summary.to_string()),
        }
    }
    panic!("the planted {bug} went unnoticed in three runs: {outcomes:?}");
}

/// etcd's `--auto-compaction-retention` as `[etcd] auto_compaction_retention = "2s"`:
/// the history older than the retention is compacted by the gateways on their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_compaction_keeps_the_retention() {
    let dir = tempfile::tempdir().unwrap();
    let base = pick_base_port();
    let mut cfg = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    cfg.cluster.service = "kv".into();
    cfg.cluster.durability = Durability::Memory;
    cfg.etcd.auto_compaction_retention = "2s".into();
    let eps = vec![format!("127.0.0.1:{}", base + 14)];
    cfg.nodes[3].etcd_addr = Some(eps[0].clone());
    let mut lc = launch(dir.path(), &cfg, &eps).await;
    let a = eps[0].as_str();
    assert_eq!(ok(a, &["put", "k", "1"]), "OK\n");
    let old = revision_of(a);
    assert_eq!(ok(a, &["put", "k", "2"]), "OK\n");
    let t0 = Instant::now();
    assert_eq!(ok(a, &["get", "k", &format!("--rev={old}")]), "k\n1\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = loop {
        let o = ctl(a, &["get", "k", &format!("--rev={old}")], None);
        if !o.status.success() {
            break String::from_utf8_lossy(&o.stderr).into_owned();
        }
        assert!(Instant::now() < deadline, "nothing compacted in 10 s");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let after = t0.elapsed();
    lc.stop(Duration::from_secs(10));
    assert!(
        err.contains("required revision has been compacted"),
        "{err}"
    );
    assert!(
        after >= Duration::from_secs(2),
        "compacted {after:?} after the newer put, within the retention"
    );
}

/// `etcdctl lock` on endpoints `a` and `b`: the second holder gets the lock only once
/// the first let go, at a larger revision, and the lock key goes with its holder.
pub(crate) fn lock_is_exclusive(dir: &Path, a: &str, b: &str) {
    // etcdctl lock: the second holder gets the lock only once the first let go.
    let mark = dir.join("lock.log");
    let script = |name: &str, hold: f64| {
        format!(
            "echo \"{name} in $ETCD_LOCK_KEY $ETCD_LOCK_REV\" >> {m}; sleep {hold}; \
             echo \"{name} out\" >> {m}",
            m = mark.display()
        )
    };
    let first = crate::etcd::command(a, &["lock", "mutex", "sh", "--", "-c", &script("A", 1.5)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // (etcdctl passes the command's arguments through; `sh -c` needs its `--`
    // guard, or etcdctl reads `-c` as its own flag.)
    std::thread::sleep(Duration::from_millis(500));
    let second = ctl(
        b,
        &["lock", "mutex", "sh", "--", "-c", &script("B", 0.0)],
        None,
    );
    let mut first = first;
    let _ = first.wait();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let log = std::fs::read_to_string(&mark).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 4, "{log}");
    assert!(
        lines[0].starts_with("A in mutex/") && lines[1] == "A out",
        "{log}"
    );
    assert!(
        lines[2].starts_with("B in mutex/") && lines[3] == "B out",
        "{log}"
    );
    let rev = |l: &str| l.rsplit(' ').next().unwrap().parse::<i64>().unwrap();
    assert!(
        rev(lines[2]) > rev(lines[0]),
        "lock revisions increase: {log}"
    );
    assert_eq!(ok(a, &["get", "--prefix", "mutex/"]), "", "unlocked");
}

/// `etcdctl elect` on endpoints `a` and `b`: alice leads, bob waits; alice's session
/// ends (SIGINT: she resigns and revokes her lease); bob leads.
pub(crate) fn election_hands_over(a: &str, b: &str) {
    // etcdctl elect: alice leads, bob waits; alice's session ends; bob leads.
    let mut alice = crate::etcd::command(a, &["elect", "office", "alice"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let mut bob = crate::etcd::command(b, &["elect", "office", "bob"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let leader = |ep: &str| {
        let o = crate::etcd::command(ep, &["elect", "-l", "office"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut o = o;
        let mut out = String::new();
        let mut stdout = o.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 256];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        while out.lines().count() < 2 && Instant::now() < deadline {
            if let Ok(b) = rx.recv_timeout(Duration::from_millis(200)) {
                out.push_str(&String::from_utf8_lossy(&b));
            }
        }
        let _ = o.kill();
        let _ = o.wait();
        out.lines().nth(1).unwrap_or_default().to_string()
    };
    assert_eq!(leader(b), "alice");
    // SIGINT: etcdctl resigns and closes its session (its lease revoked).
    let st = Command::new("kill")
        .args(["-INT", &alice.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let _ = alice.wait();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut now = leader(a);
    while now != "bob" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        now = leader(a);
    }
    assert_eq!(now, "bob", "bob leads once alice's session ended");
    let _ = bob.kill();
    let _ = bob.wait();
}
