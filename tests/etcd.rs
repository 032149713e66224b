//! etcd's v3 API on a real cluster, driven by a real client nobody here wrote: Debian's
//! `etcdctl` (package `etcd-client`, etcd 3.4; installed by `scripts/install-test-deps`
//! when missing). A `service = "kv"` cluster of `partita node` processes serves the API
//! on both replicas; the tests run `etcdctl` processes against it and check their
//! output: put, get (prefix, limit, JSON), del, txn from stdin (both branches), watch
//! (a background watch of a prefix, then puts and a delete; a watch from a past
//! revision; a watch below a compaction, refused as compacted), compact, and the
//! refusals (alarms, auth, snapshots) with their messages (leases, locks, elections
//! and past revisions: `etcd_leases.rs`). A second test records
//! concurrent `etcdctl` puts, gets, deletes and transactions as a key-value history
//! (DESIGN.md §2), which the checker must judge linearizable, and which, tampered with
//! (a read that returns a value nobody wrote), it must reject.

use partita_config::{ClusterConfig, Durability};
use partita_harness::launch::{pick_base_port, LocalCluster};
use partita_kv::history::Outcome;
use partita_kv::*;
use serde_json::Value;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub(crate) fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

/// `etcdctl`, installed by `scripts/install-test-deps` if it is not on PATH.
pub(crate) fn etcdctl() -> &'static str {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let found = Command::new("etcdctl")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            install("etcd-client");
        }
    });
    "etcdctl"
}

/// Install a Debian package with `scripts/install-test-deps` (root and apt).
pub(crate) fn install(package: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-test-deps");
    let st = Command::new("bash").arg(&script).arg(package).status();
    assert!(
        st.is_ok_and(|s| s.success()),
        "{} could not install Debian's {package} (needs root and apt)",
        script.display()
    );
}

/// A kv cluster (3 acceptors, 2 replicas) whose replicas serve etcd's API; returns it
/// with the two endpoints once etcdctl gets an answer from both.
pub(crate) async fn start(dir: &Path) -> (LocalCluster, Vec<String>) {
    start_kv(dir, Durability::Memory, &[]).await
}

/// [`start`] with `durability`, the nodes started with `node_args`.
pub(crate) async fn start_kv(
    dir: &Path,
    durability: Durability,
    node_args: &[String],
) -> (LocalCluster, Vec<String>) {
    let base = pick_base_port();
    let mut cfg = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    cfg.cluster.service = "kv".into();
    cfg.cluster.durability = durability;
    let eps = vec![
        format!("127.0.0.1:{}", base + 14),
        format!("127.0.0.1:{}", base + 15),
    ];
    cfg.nodes[3].etcd_addr = Some(eps[0].clone());
    cfg.nodes[4].etcd_addr = Some(eps[1].clone());
    let lc = launch_with(dir, &cfg, &eps, node_args).await;
    (lc, eps)
}

/// Start `cfg`'s nodes in `dir` and wait until etcdctl gets an answer from every
/// endpoint of `eps`.
pub(crate) async fn launch(dir: &Path, cfg: &ClusterConfig, eps: &[String]) -> LocalCluster {
    launch_with(dir, cfg, eps, &[]).await
}

/// [`launch`], the nodes started with `node_args`.
pub(crate) async fn launch_with(
    dir: &Path,
    cfg: &ClusterConfig,
    eps: &[String],
    node_args: &[String],
) -> LocalCluster {
    let file = dir.join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    let mut lc = LocalCluster::start_with(&exe(), &file, cfg, dir, node_args, None).unwrap();
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    for ep in eps {
        loop {
            let o = ctl(ep, &["endpoint", "status"], None);
            if o.status.success() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "etcd endpoint {ep} does not answer: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    lc
}

pub(crate) fn command(ep: &str, args: &[&str]) -> Command {
    let mut c = Command::new(etcdctl());
    c.env("ETCDCTL_API", "3")
        .args(["--endpoints", ep, "--command-timeout=10s"])
        .args(args);
    c
}

/// Run etcdctl to completion, `stdin` fed to it.
pub(crate) fn ctl(ep: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = command(ep, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run etcdctl");
    let mut input = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

/// Run etcdctl; it must succeed; its standard output.
pub(crate) fn ok(ep: &str, args: &[&str]) -> String {
    ok_in(ep, args, None)
}

pub(crate) fn ok_in(ep: &str, args: &[&str], stdin: Option<&str>) -> String {
    let o = ctl(ep, args, stdin);
    assert!(
        o.status.success(),
        "etcdctl {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Run etcdctl; it must fail; its standard error.
pub(crate) fn refused(ep: &str, args: &[&str]) -> String {
    let o = ctl(ep, args, None);
    assert!(!o.status.success(), "etcdctl {args:?} should fail");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub(crate) fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

/// A background `etcdctl watch`: its output lines, until `n` non-empty ones arrived
/// (or 15 s passed); the process is killed by pid afterwards.
pub(crate) fn watch_lines(ep: &str, args: &[&str], n: usize, during: impl FnOnce()) -> Vec<String> {
    let mut child = command(ep, &[&["watch"], args].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run etcdctl watch");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    during();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut lines = Vec::new();
    while lines.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.is_empty() => {}
            Ok(l) => lines.push(l),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    lines
}

pub(crate) fn revision_of(ep: &str) -> i64 {
    json(&ok(ep, &["get", "any", "-w", "json"]))["header"]["revision"]
        .as_i64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_works_against_a_partita_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, eps) = start(dir.path()).await;
    let (a, b) = (eps[0].as_str(), eps[1].as_str());

    // put, get, prefixes, limits, on either endpoint.
    assert_eq!(ok(a, &["put", "foo", "bar"]), "OK\n");
    assert_eq!(ok(b, &["get", "foo"]), "foo\nbar\n");
    assert_eq!(ok(a, &["put", "foo2", "baz"]), "OK\n");
    assert_eq!(ok(a, &["get", "--prefix", "foo"]), "foo\nbar\nfoo2\nbaz\n");
    assert_eq!(
        ok(a, &["get", "--prefix", "foo", "--limit", "1"]),
        "foo\nbar\n"
    );
    assert_eq!(ok(a, &["get", "nothing"]), "");
    let j = json(&ok(a, &["get", "--prefix", "foo", "-w", "json"]));
    assert_eq!(j["count"], 2);
    assert_eq!(j["kvs"][0]["key"], "Zm9v", "base64 of foo");
    assert_eq!(j["kvs"][0]["version"], 1);
    assert_eq!(j["header"]["member_id"], 4);
    let created = j["kvs"][0]["create_revision"].as_i64().unwrap();
    assert_eq!(j["kvs"][0]["mod_revision"], created);
    let j = json(&ok(a, &["put", "foo", "bar1", "--prev-kv", "-w", "json"]));
    assert_eq!(j["prev_kv"]["value"], "YmFy", "base64 of bar");
    assert_eq!(j["header"]["revision"].as_i64().unwrap(), created + 2);

    // del
    assert_eq!(ok(a, &["del", "foo2"]), "1\n");
    assert_eq!(ok(a, &["del", "foo2"]), "0\n");
    assert_eq!(ok(b, &["get", "--prefix", "foo"]), "foo\nbar1\n");

    // txn from stdin: compares, then the success or the failure branch.
    let txn = "value(\"foo\") = \"bar1\"\n\nput foo bar2\n\nget foo\n\n";
    assert_eq!(ok_in(a, &["txn"], Some(txn)), "SUCCESS\n\nOK\n");
    assert_eq!(ok_in(a, &["txn"], Some(txn)), "FAILURE\n\nfoo\nbar2\n");
    let j = json(&ok_in(
        b,
        &["txn", "-w", "json"],
        Some("version(\"foo\") > \"2\"\n\ndel foo\n\n\n"),
    ));
    assert_eq!(j["succeeded"], true);
    assert_eq!(
        j["responses"][0]["Response"]["ResponseDeleteRange"]["deleted"],
        1
    );
    assert_eq!(ok(a, &["get", "foo"]), "");

    // watch: a background watch of a prefix from the next revision, then writes.
    let next = (revision_of(a) + 1).to_string();
    let lines = watch_lines(b, &["--prefix", "w/", "--rev", &next], 9, || {
        assert_eq!(ok(a, &["put", "w/1", "a"]), "OK\n");
        assert_eq!(ok(a, &["put", "other", "x"]), "OK\n");
        assert_eq!(ok(a, &["put", "w/2", "b"]), "OK\n");
        assert_eq!(ok(a, &["del", "w/1"]), "1\n");
    });
    assert_eq!(
        lines,
        ["PUT", "w/1", "a", "PUT", "w/2", "b", "DELETE", "w/1"].map(String::from),
        "watch output"
    );
    // A watch from the present (etcdctl prints nothing on creation: the put waits a
    // second for it to be registered).
    let lines = watch_lines(a, &["now"], 3, || {
        std::thread::sleep(Duration::from_millis(1000));
        assert_eq!(ok(b, &["put", "now", "1"]), "OK\n");
    });
    assert_eq!(lines, ["PUT", "now", "1"].map(String::from));
    // From a past revision: the history replays, with previous values on request.
    let from = created.to_string();
    let lines = watch_lines(a, &["foo", "--rev", &from, "--prev-kv"], 8, || {});
    assert_eq!(
        lines,
        ["PUT", "foo", "bar", "PUT", "foo", "bar", "foo", "bar1"].map(String::from),
        "the first two puts of foo, the second with its previous pair first"
    );

    // compact: a watch below it is refused as compacted.
    let rev = revision_of(a).to_string();
    assert_eq!(
        ok(a, &["compact", &rev]),
        format!("compacted revision {rev}\n")
    );
    let err = refused(a, &["compact", &rev]);
    assert!(
        err.contains("required revision has been compacted"),
        "{err}"
    );
    let mut child = command(b, &["watch", "foo", "--rev", &from])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    assert!(
        !o.status.success(),
        "a watch below the compaction ends in an error"
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        all.contains("required revision has been compacted"),
        "{all}"
    );

    // Status and members, as clients use them to connect.
    let st = ok(a, &["endpoint", "status"]);
    assert!(st.starts_with(&format!("{a}, 4, 3.4.0")), "{st}");
    let members = ok(a, &["member", "list"]);
    assert!(members.contains(&format!("http://{a}")) && members.contains(&format!("http://{b}")));

    // Refused, with Partita's message, never ignored.
    for args in [
        &["user", "list"][..],
        &["member", "update", "4", "--peer-urls", "http://127.0.0.1:1"],
    ] {
        let err = refused(a, args);
        assert!(err.contains("Partita does not support"), "{args:?}: {err}");
    }
    // Bad input gets an error, and the node carries on.
    let err = refused(a, &["put", "", "v"]);
    assert!(err.contains("key is not provided"), "{err}");
    assert_eq!(ok(a, &["put", "after", "1"]), "OK\n");
    for (id, c) in &mut lc.children {
        assert!(c.try_wait().unwrap().is_none(), "node {id} exited");
    }
    lc.stop(Duration::from_secs(10));
}

// ---------------------------------------------------------------------------------------
// Histories of concurrent etcdctl clients.

fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {s}"),
    };
    let digits: Vec<u8> = s.bytes().filter(|&c| c != b'=').map(val).collect();
    let mut out = Vec::new();
    for chunk in digits.chunks(4) {
        let mut n = 0u32;
        for (i, d) in chunk.iter().enumerate() {
            n |= u32::from(*d) << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len().saturating_sub(1)]);
    }
    out
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn kvs(v: &Value) -> Vec<KeyValue> {
    v["kvs"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|kv| KeyValue {
                    key: base64(kv["key"].as_str().unwrap()),
                    value: kv["value"].as_str().map(base64).unwrap_or_default(),
                    create_revision: num(&kv["create_revision"]),
                    mod_revision: num(&kv["mod_revision"]),
                    version: num(&kv["version"]),
                    lease: 0,
                })
                .collect()
        })
        .unwrap_or_default()
}

fn range_reply(v: &Value) -> RangeResponse {
    RangeResponse {
        kvs: kvs(v),
        count: num(&v["count"]),
        more: v["more"].as_bool().unwrap_or(false),
        revision: num(&v["header"]["revision"]),
    }
}

/// One random etcdctl operation on keys k0..k3: the arguments and stdin, the command
/// it is, and how to read its JSON output as the store's reply.
fn random_op(
    rng: &mut impl rand::Rng,
    client: u64,
    n: u64,
) -> (Vec<String>, Option<String>, KvCommand) {
    let k = format!("k{}", rng.gen_range(0..4));
    let v = format!("c{client}-{n}");
    match rng.gen_range(0..100) {
        0..35 => (
            vec!["put".into(), k.clone(), v.clone()],
            None,
            KvCommand::put(k, v),
        ),
        35..65 => (vec!["get".into(), k.clone()], None, KvCommand::get(k)),
        65..75 => (vec!["del".into(), k.clone()], None, KvCommand::delete(k)),
        _ => {
            let stdin = format!("version(\"{k}\") > \"0\"\n\nput {k} {v}\n\nget {k}\n\n");
            (
                vec!["txn".into()],
                Some(stdin),
                partita_kv::mix::overwrite_or_read(k, v),
            )
        }
    }
}

fn reply_of(cmd: &KvCommand, v: &Value) -> KvReply {
    let revision = num(&v["header"]["revision"]);
    match cmd {
        KvCommand::Put(_) => KvReply::Put(PutResponse {
            revision,
            prev_kv: None,
        }),
        KvCommand::Range(_) => KvReply::Range(range_reply(v)),
        KvCommand::DeleteRange(_) => KvReply::DeleteRange(DeleteRangeResponse {
            deleted: num(&v["deleted"]),
            prev_kvs: vec![],
            revision,
        }),
        KvCommand::Txn(_) => {
            let responses = v["responses"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    // etcdctl 3.4 spells the oneof's members `ResponsePut` and
                    // `ResponseRange`; etcd's Go client 3.6 `response_put` and
                    // `response_range`.
                    let r = &r["Response"];
                    if let Some(p) = r.get("ResponsePut").or_else(|| r.get("response_put")) {
                        ResponseOp::Put(PutResponse {
                            revision: num(&p["header"]["revision"]),
                            prev_kv: None,
                        })
                    } else if let Some(g) =
                        r.get("ResponseRange").or_else(|| r.get("response_range"))
                    {
                        ResponseOp::Range(range_reply(g))
                    } else {
                        panic!("a transaction response of neither kind: {r}")
                    }
                })
                .collect();
            KvReply::Txn(TxnResponse {
                succeeded: v["succeeded"].as_bool().unwrap_or(false),
                responses,
                revision,
            })
        }
        other => panic!("not generated: {other:?}"),
    }
}

/// One etcdctl operation of [`etcdctl_ops`]: its client (from 1), command, times (ns
/// from the load's start) and reply (`None`: etcdctl failed, so the outcome is
/// unknown).
pub(crate) struct EtcdctlOp {
    pub client: u64,
    pub cmd: KvCommand,
    pub invoked: u64,
    pub returned: u64,
    pub reply: Option<KvReply>,
}

/// `clients` threads, each running random etcdctl operations ([`random_op`]) one
/// after the other for `secs` seconds, at the endpoints in turn.
pub(crate) fn etcdctl_ops(eps: &[String], clients: u64, secs: f64) -> Vec<EtcdctlOp> {
    use rand::SeedableRng;
    let base = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|c| {
            let ep = eps[c as usize % eps.len()].clone();
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(c);
                let mut ops = Vec::new();
                let mut n = 0;
                while base.elapsed().as_secs_f64() < secs {
                    n += 1;
                    let (args, stdin, cmd) = random_op(&mut rng, c, n);
                    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
                    args.extend(["-w", "json"]);
                    let invoked = base.elapsed().as_nanos() as u64;
                    let o = ctl(&ep, &args, stdin.as_deref());
                    let returned = base.elapsed().as_nanos() as u64;
                    let reply = o
                        .status
                        .success()
                        .then(|| serde_json::from_slice::<Value>(&o.stdout).ok())
                        .flatten()
                        .map(|v| reply_of(&cmd, &v));
                    ops.push(EtcdctlOp {
                        client: c + 1,
                        cmd,
                        invoked,
                        returned,
                        reply,
                    });
                }
                ops
            })
        })
        .collect();
    workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect()
}

/// [`etcdctl_ops`] recorded as a history in `path`; the number of operations.
fn load(eps: &[String], clients: u64, secs: f64, path: &Path) -> usize {
    let ops = etcdctl_ops(eps, clients, secs);
    let mut f = std::fs::File::create(path).unwrap();
    for op in &ops {
        // A failed etcdctl may or may not have applied its command.
        let outcome = match &op.reply {
            Some(r) => Outcome::Ok(r),
            None => Outcome::Info,
        };
        let line =
            partita_kv::history::event_line(op.client, &op.cmd, op.invoked, op.returned, outcome);
        writeln!(f, "{line}").unwrap();
    }
    ops.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_etcdctl_histories_are_linearizable_and_tampering_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, eps) = start(dir.path()).await;
    let history = dir.path().join("etcd.jsonl");
    let ops = load(&eps, 4, 6.0, &history);
    lc.stop(Duration::from_secs(10));
    assert!(ops > 40, "only {ops} etcdctl operations in 6 s");
    let report = partita_checker::check_history_file(&history, &Default::default()).unwrap();
    assert!(report.is_linearizable(), "{report}");
    tampering_is_caught(&history, dir.path());
}

/// The control: the history with one read changed to return a value nobody wrote must
/// be judged not linearizable.
fn tampering_is_caught(history: &Path, dir: &Path) {
    let mut text = String::new();
    std::fs::File::open(history)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    let mut tampered = false;
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if !tampered
                && v["op"] == "get"
                && v["status"] == "ok"
                && !v["result"]["value"].is_null()
            {
                v["result"]["value"] = "never-written".into();
                tampered = true;
            }
            v.to_string()
        })
        .collect();
    assert!(tampered, "no read returned a value: nothing to tamper with");
    let bad = dir.join("tampered.jsonl");
    std::fs::write(&bad, lines.join("\n") + "\n").unwrap();
    let report = partita_checker::check_history_file(&bad, &Default::default()).unwrap();
    let partita_checker::ServiceReport::Kv(r) = &report else {
        panic!("a key-value history: {report}")
    };
    assert!(
        matches!(r.verdict, partita_checker::KvVerdict::NotLinearizable(_)),
        "a read of a value nobody wrote must be a violation: {report}"
    );
}

/// The Go toolchain: `go` on PATH, the one these machines carry in /usr/local/go, or
/// Debian's `golang-go` installed by `scripts/install-test-deps`.
pub(crate) fn go() -> String {
    let works = |c: &str| {
        Command::new(c)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    for c in ["go", "/usr/local/go/bin/go"] {
        if works(c) {
            return c.into();
        }
    }
    install("golang-go");
    assert!(
        works("go"),
        "Debian's golang-go installed, but `go version` fails"
    );
    "go".into()
}

/// etcd's own Go client (`go.etcd.io/etcd/client/v3`, in `tools/etcd-go`), built with
/// the machine's Go toolchain; returns the program.
pub(crate) fn etcd_go(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/etcd-go");
    let out = dir.join("etcd-go");
    let o = Command::new(go())
        .current_dir(&src)
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .output()
        .expect(
            "the `go` command (Go 1.26 or newer, which these machines carry) builds \
             tools/etcd-go, etcd's Go client",
        );
    assert!(
        o.status.success(),
        "go build tools/etcd-go: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// A line of `etcd-go history` as a history event: its command, and its reply read
/// from the Go client's response (an error: an unknown outcome).
fn go_event(line: &str) -> String {
    let v = json(line);
    let key = v["key"].as_str().unwrap().to_string();
    let value = v["value"].as_str().unwrap_or_default().to_string();
    let cmd = match v["op"].as_str().unwrap() {
        "put" => KvCommand::put(key, value),
        "get" => KvCommand::get(key),
        "del" => KvCommand::delete(key),
        "txn" => partita_kv::mix::overwrite_or_read(key, value),
        other => panic!("etcd-go printed an operation it does not run: {other}"),
    };
    let reply = v.get("resp").map(|r| reply_of(&cmd, r));
    let outcome = match &reply {
        Some(r) => Outcome::Ok(r),
        None => Outcome::Info,
    };
    partita_kv::history::event_line(
        num(&v["client"]),
        &cmd,
        num(&v["call"]),
        num(&v["ret"]),
        outcome,
    )
}

/// etcd's Go client's revision filters (etcdctl 3.4 has no flags for them), as
/// `concurrency.Mutex` uses them: the newest key created before one's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcds_go_client_reads_with_revision_filters() {
    let dir = tempfile::tempdir().unwrap();
    let go = etcd_go(dir.path());
    let (mut lc, eps) = start(dir.path()).await;
    let a = eps[0].as_str();
    let mut created = Vec::new();
    for k in ["l/a", "l/b", "l/c"] {
        assert_eq!(ok(a, &["put", k, "x"]), "OK\n");
        created.push(
            json(&ok(a, &["get", k, "-w", "json"]))["kvs"][0]["create_revision"]
                .as_i64()
                .unwrap(),
        );
    }
    assert_eq!(ok(a, &["put", "l/a", "y"]), "OK\n");
    let range = |args: &[&str]| {
        let o = Command::new(&go)
            .args(["range", "-endpoints", a, "-prefix", "l/"])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let before_c = (created[2] - 1).to_string();
    let got = (
        range(&["-max-create-rev", &before_c, "-last-create"]),
        range(&["-max-create-rev", &before_c]),
        range(&["-min-mod-rev", &created[2].to_string()]),
    );
    lc.stop(Duration::from_secs(10));
    assert_eq!(
        got.0, "l/b\ncount 3 more true\n",
        "the newest created before l/c"
    );
    assert_eq!(got.1, "l/a\nl/b\ncount 3 more false\n");
    assert_eq!(
        got.2, "l/a\nl/c\ncount 3 more false\n",
        "l/a was put again after l/c"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcds_go_client_histories_are_linearizable_and_tampering_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let go = etcd_go(dir.path());
    let (mut lc, eps) = start(dir.path()).await;
    let o = Command::new(&go)
        .args(["history", "-endpoints", &eps.join(","), "-clients", "8"])
        .args(["-seconds", "5", "-keys", "4", "-seed", "7"])
        .output()
        .unwrap();
    lc.stop(Duration::from_secs(10));
    assert!(
        o.status.success(),
        "etcd-go history: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<String> = text.lines().map(go_event).collect();
    let failed = text.lines().filter(|l| l.contains("\"err\"")).count();
    assert!(
        lines.len() > 200 && failed * 10 < lines.len(),
        "{} operations of etcd's Go client in 5 s, {failed} failed",
        lines.len()
    );
    let history = dir.path().join("etcd-go.jsonl");
    std::fs::write(&history, lines.join("\n") + "\n").unwrap();
    let report = partita_checker::check_history_file(&history, &Default::default()).unwrap();
    assert!(report.is_linearizable(), "{report}");
    tampering_is_caught(&history, dir.path());
}

/// A key-value cluster ordered by `ordering` (GeoPaxos+ or EPaxos) in paper 004's three
/// emulated regions (node 1 California, 2 Virginia, 3 Europe; each an acceptor and a
/// replica, the paper's round trips between them), every node serving etcd's API
/// (endpoint `i` is node `i + 1`'s); DOPs every half second under GeoPaxos+. Returned
/// once etcdctl gets an answer from every endpoint.
async fn start_wan(
    dir: &Path,
    ordering: partita_config::OrderingProtocol,
) -> (LocalCluster, ClusterConfig, Vec<String>) {
    let base = pick_base_port();
    let mut cfg = ClusterConfig::paper_wan_local(base, rand::random::<u64>() >> 1);
    cfg.cluster.service = "kv".into();
    cfg.cluster.durability = Durability::Memory;
    let mut cfg = cfg.with_ordering(ordering, 3).unwrap();
    if let Some(g) = cfg.ordering.geo_mut() {
        g.dop_interval_ms = 500;
    }
    let eps: Vec<String> = (0..3)
        .map(|i| format!("127.0.0.1:{}", base + 11 + i))
        .collect();
    for (n, ep) in cfg.nodes.iter_mut().zip(&eps) {
        n.etcd_addr = Some(ep.clone());
    }
    let lc = launch(dir, &cfg, &eps).await;
    (lc, cfg, eps)
}

/// Node `id`'s counter `name` (0 when it has none).
async fn counter(cfg: &ClusterConfig, id: u32, name: &str) -> u64 {
    let s = partita_client::node_status(cfg.addr(id), Duration::from_secs(2))
        .await
        .unwrap_or_else(|| panic!("node {id} does not answer its status"));
    s.counters
        .iter()
        .find(|(k, _)| k == name)
        .map_or(0, |(_, v)| *v)
}

/// Every replica took the same number of commands and holds one digest (within 30 s).
async fn same_digest_everywhere(cfg: &ClusterConfig) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut seen = Vec::new();
        for n in &cfg.nodes {
            if let Some(s) =
                partita_client::node_status(cfg.addr(n.id), Duration::from_secs(2)).await
            {
                seen.push((s.executed_up_to.unwrap_or(0), s.digest.unwrap_or(0)));
            }
        }
        if seen.len() == cfg.nodes.len() && seen.windows(2).all(|w| w[0] == w[1]) {
            return seen[0];
        }
        assert!(Instant::now() < deadline, "replicas apart: {seen:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// etcd's API geo-replicated by GeoPaxos+ (paper 004 over the key-value store, its
/// objects the keys and the store-wide revision, placed by the object map): etcdctl
/// clients at all three endpoints at once record a history that must be linearizable;
/// then etcdctl in Europe writes a few keys, and once DOPs have placed what only Europe writes on Europe's
/// serializer, every put, get and transaction there is ordered by that serializer
/// alone (Europe's node submits one entry per request and none to several
/// serializers: a local round of Europe's Multi-Paxos group, never a wide-area
/// multi-serializer order), and California and Virginia read what Europe wrote.
/// The replicas converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_in_europe_puts_and_reads_locally_over_geopaxos_plus() {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, cfg, eps) =
        start_wan(dir.path(), partita_config::OrderingProtocol::GeoPaxosPlus).await;
    let (california, virginia, europe) = (eps[0].as_str(), eps[1].as_str(), eps[2].as_str());
    // First a history from a fresh store (the checker starts at revision 1).
    let history = dir.path().join("etcd.jsonl");
    let ops = load(&eps, 3, 5.0, &history);
    assert!(ops > 15, "only {ops} etcdctl operations in 5 s");
    let report = partita_checker::check_history_file(&history, &Default::default()).unwrap();
    assert!(report.is_linearizable(), "{report}");
    let keys: Vec<String> = (0..4).map(|i| format!("eu/{i}")).collect();
    for k in &keys {
        assert_eq!(ok(europe, &["put", k, "first"]), "OK\n");
    }
    // Two DOPs after those writes: the first that ran after all of them moved them.
    let dops = counter(&cfg, 3, "geo_dops_delivered").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while counter(&cfg, 3, "geo_dops_delivered").await < dops + 2 {
        assert!(Instant::now() < deadline, "no DOP ran in 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let submitted = counter(&cfg, 3, "geo_submitted").await;
    let multi = counter(&cfg, 3, "geo_submitted_multi").await;
    let mut requests = 0;
    for (i, k) in keys.iter().enumerate() {
        let v = format!("second-{i}");
        assert_eq!(ok(europe, &["put", k, &v]), "OK\n");
        assert_eq!(ok(europe, &["get", k]), format!("{k}\n{v}\n"));
        requests += 2;
    }
    let txn = "value(\"eu/0\") = \"second-0\"\n\nput eu/0 third\n\nget eu/0\n\n";
    assert_eq!(ok_in(europe, &["txn"], Some(txn)), "SUCCESS\n\nOK\n");
    requests += 1;
    assert_eq!(
        counter(&cfg, 3, "geo_submitted_multi").await,
        multi,
        "a request in Europe went to several serializers"
    );
    assert!(counter(&cfg, 3, "geo_submitted").await >= submitted + requests);
    assert_eq!(ok(california, &["get", "eu/0"]), "eu/0\nthird\n");
    assert_eq!(ok(virginia, &["get", "eu/3"]), "eu/3\nsecond-3\n");
    let (executed, digest) = same_digest_everywhere(&cfg).await;
    eprintln!(
        "{ops} operations checked; every replica took {executed} commands, digest {digest:#x}"
    );
    lc.stop(Duration::from_secs(10));
}

/// etcd's API over EPaxos (paper 004's baseline, ordering for the common replica):
/// concurrent etcdctl clients at all three endpoints record a history that must be
/// linearizable; puts at every endpoint are read at every other; the replicas converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_works_over_epaxos() {
    let dir = tempfile::tempdir().unwrap();
    let (mut lc, cfg, eps) = start_wan(dir.path(), partita_config::OrderingProtocol::Epaxos).await;
    let history = dir.path().join("etcd.jsonl");
    let ops = load(&eps, 3, 5.0, &history);
    assert!(ops > 15, "only {ops} etcdctl operations in 5 s");
    let report = partita_checker::check_history_file(&history, &Default::default()).unwrap();
    assert!(report.is_linearizable(), "{report}");
    for (i, ep) in eps.iter().enumerate() {
        assert_eq!(
            ok(ep, &["put", &format!("p/{i}"), &format!("v{i}")]),
            "OK\n"
        );
    }
    for ep in &eps {
        assert_eq!(
            ok(ep, &["get", "--prefix", "p/"]),
            "p/0\nv0\np/1\nv1\np/2\nv2\n"
        );
    }
    same_digest_everywhere(&cfg).await;
    lc.stop(Duration::from_secs(10));
}
