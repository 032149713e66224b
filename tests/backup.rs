//! Backups on real processes: `partita snapshot save` from a live replica while clients
//! write, `partita snapshot restore` into a new directory, `partita up` of it. The
//! restored cluster holds exactly what the original held at the saved position (the
//! store's revision R; the original read at R from its history, the restored one now),
//! at revision R, and goes on from there. `etcdctl snapshot save` through a gateway
//! gives the same backup, which restores too. A damaged file and a directory that
//! already holds a cluster are refused and change nothing.

use crate::etcd::{exe, json, ok, revision_of, start_kv};
use partita_client::{Client, ClientOptions};
use partita_config::{ClusterConfig, Durability};
use partita_harness::launch::pick_base_port;
use partita_kv::{KvCommand, KvStore, PutRequest};
use partita_smr::SequentialReplica;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn partita(args: &[&str]) -> Output {
    Command::new(exe()).args(args).output().unwrap()
}

fn succeeds(args: &[&str]) -> String {
    let o = partita(args);
    assert!(
        o.status.success(),
        "partita {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fails(args: &[&str]) -> String {
    let o = partita(args);
    assert!(!o.status.success(), "partita {args:?} succeeded");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every pair under the empty prefix as etcdctl prints it in JSON (at `rev`, 0: now):
/// key, value, create and mod revision, version.
fn pairs(ep: &str, rev: i64) -> Vec<(String, String, i64, i64, i64)> {
    let rev = format!("--rev={rev}");
    let j = json(&ok(ep, &["get", "", "--prefix", "-w", "json", &rev]));
    j["kvs"]
        .as_array()
        .map(|kvs| {
            kvs.iter()
                .map(|kv| {
                    (
                        kv["key"].as_str().unwrap().to_string(),
                        kv["value"].as_str().unwrap().to_string(),
                        kv["create_revision"].as_i64().unwrap(),
                        kv["mod_revision"].as_i64().unwrap(),
                        kv["version"].as_i64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `partita up` of a restored directory, stopped (SIGTERM to its pid, which stops its
/// nodes) when dropped.
struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        partita_harness::launch::terminate(&mut self.0);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `partita up --data-dir dir` and wait for etcd's API at `ep`.
async fn up(dir: &Path, ep: &str) -> Up {
    let log = std::fs::File::create(dir.with_extension("up.log")).unwrap();
    let child = Command::new(exe())
        .args(["up", "--data-dir", dir.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let up = Up(child);
    let deadline = Instant::now() + Duration::from_secs(40);
    while !crate::etcd::ctl(ep, &["endpoint", "status"], None)
        .status
        .success()
    {
        if Instant::now() > deadline {
            let logs: String = (1..=5)
                .map(|n| {
                    let f = dir.join(format!("node-{n}.log"));
                    format!(
                        "node {n}: {}\n",
                        std::fs::read_to_string(f).unwrap_or_default()
                    )
                })
                .collect();
            panic!(
                "the restored cluster never answered at {ep}: {}\n{logs}",
                std::fs::read_to_string(dir.with_extension("up.log")).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    up
}

/// Restore `file` into `dir` (a new default kv cluster on fresh ports): its first
/// etcd endpoint.
fn restore(file: &Path, dir: &Path) -> String {
    let base = pick_base_port();
    let etcd_port = base + 14;
    let out = succeeds(&[
        "snapshot",
        "restore",
        file.to_str().unwrap(),
        "--data-dir",
        dir.to_str().unwrap(),
        "--base-port",
        &base.to_string(),
        "--etcd-port",
        &etcd_port.to_string(),
    ]);
    assert!(
        out.contains("restored") && out.contains("service kv"),
        "{out}"
    );
    format!("127.0.0.1:{etcd_port}")
}

/// The store revision a backup file holds (a partita checkpoint, or etcdctl's file
/// around one).
fn revision_in(file: &Path) -> u64 {
    let bytes = std::fs::read(file).unwrap();
    let body = match partita_etcd::convert::snapshot_in_file(&bytes) {
        Ok(inner) => inner.to_vec(),
        Err(_) => bytes,
    };
    SequentialReplica::<KvStore>::restore(&body)
        .unwrap()
        .state()
        .revision()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_saved_under_load_restores_into_a_new_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, eps) = start_kv(dir.path(), Durability::Fsync, &[]).await;
    let a = eps[0].as_str();
    let cluster_file = dir.path().join("cluster.toml");
    let cluster = ClusterConfig::load(&cluster_file).unwrap();

    // Writers: four sessions putting k/<writer>/<n> until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for w in 0..4u64 {
        let (stop, written, cluster) = (stop.clone(), written.clone(), cluster.clone());
        writers.push(tokio::spawn(async move {
            let mut c = Client::<KvStore>::connect(cluster, ClientOptions::default())
                .await
                .unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let put = KvCommand::Put(PutRequest {
                    key: format!("k/{w}/{}", n % 50).into_bytes(),
                    value: format!("v{n}").into_bytes(),
                    prev_kv: false,
                    lease: 0,
                });
                c.execute(put).await.unwrap();
                n += 1;
                written.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    while written.load(Ordering::Relaxed) < 200 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Saved while the writers write.
    let file = dir.path().join("backup.snap");
    let cf = cluster_file.to_str().unwrap();
    let saved = succeeds(&["snapshot", "save", file.to_str().unwrap(), "--cluster", cf]);
    assert!(
        saved.contains("from node 4") && saved.contains("service kv"),
        "{saved}"
    );
    let at_save = written.load(Ordering::Relaxed);
    while written.load(Ordering::Relaxed) < at_save + 100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let status = succeeds(&["snapshot", "status", file.to_str().unwrap(), "--json"]);
    let status = json(&status);
    assert_eq!(status["service"], "kv");
    assert!(status["objects"].as_u64().unwrap() > 0, "{status}");

    // The saved position: the original went on past it.
    let rev = revision_in(&file);
    let now = revision_of(a);
    assert!(
        rev > 1 && (rev as i64) < now,
        "saved at {rev}, the original is at {now}"
    );
    let then = pairs(a, rev as i64);
    assert!(!then.is_empty());

    // etcdctl's snapshot through the gateway: the same kind of backup.
    let etcd_file = dir.path().join("etcdctl.db");
    let out = ok(a, &["snapshot", "save", etcd_file.to_str().unwrap()]);
    assert!(out.contains("Snapshot saved at"), "{out}");
    let etcd_rev = revision_in(&etcd_file);
    assert_eq!(
        etcd_rev as i64,
        revision_of(a),
        "node 4 executed every write its gateway acknowledged"
    );
    let etcd_then = pairs(a, 0);

    // Damage is refused and leaves no cluster behind.
    let mut bad = std::fs::read(&file).unwrap();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x40;
    let bad_file = dir.path().join("bad.snap");
    std::fs::write(&bad_file, &bad).unwrap();
    let e = fails(&["snapshot", "status", bad_file.to_str().unwrap()]);
    assert!(e.contains("not a usable snapshot"), "{e}");
    let bad_dir = dir.path().join("restored-bad");
    let e = fails(&[
        "snapshot",
        "restore",
        bad_file.to_str().unwrap(),
        "--data-dir",
        bad_dir.to_str().unwrap(),
    ]);
    assert!(e.contains("not a usable snapshot"), "{e}");
    assert!(!bad_dir.join("cluster.toml").exists());
    lc.stop(Duration::from_secs(10));

    // Restored, started with `partita up`: the pairs at the saved revision, at it.
    let restored = dir.path().join("restored");
    let ep = restore(&file, &restored);
    let e = fails(&[
        "snapshot",
        "restore",
        file.to_str().unwrap(),
        "--data-dir",
        restored.to_str().unwrap(),
    ]);
    assert!(e.contains("already holds a cluster"), "{e}");
    {
        let _up = up(&restored, &ep).await;
        assert_eq!(revision_of(&ep), rev as i64);
        assert_eq!(
            pairs(&ep, 0),
            then,
            "the restored cluster holds the saved pairs"
        );
        assert_eq!(ok(&ep, &["put", "after", "restore"]), "OK\n");
        assert_eq!(
            revision_of(&ep),
            rev as i64 + 1,
            "it goes on from the saved revision"
        );
    }

    // And etcdctl's file, restored the same way.
    let restored = dir.path().join("restored-etcdctl");
    let ep = restore(&etcd_file, &restored);
    let _up = up(&restored, &ep).await;
    assert_eq!(revision_of(&ep), etcd_rev as i64);
    assert_eq!(pairs(&ep, 0), etcd_then);
}
