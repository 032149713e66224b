//! Prometheus metrics on real processes: every node of a local cluster answers
//! `GET /metrics` on its own address (the cluster file's `addr`) in the OpenMetrics
//! text format, while still speaking its framed protocol on the same port; and Debian's
//! Prometheus server, started by this test against the live cluster, scrapes them and
//! answers a rate through its HTTP API that matches the throughput the test's own
//! clients measured.
//!
//! Prometheus is Debian's package `prometheus`; `scripts/install-test-deps` installs it
//! when it is missing (as root), and the test fails with the reason if it cannot.

use partita_btree::{BPlusTree, Op};
use partita_client::{Client, ClientOptions};
use partita_config::ClusterConfig;
use partita_harness::launch::{pick_base_port, LocalCluster};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

/// One HTTP/1.1 GET to `addr`: (status code, body).
fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_string()))
}

/// The value of the sample `name` (exactly, labels included) in an exposition.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

fn start_cluster(dir: &Path) -> LocalCluster {
    let cfg = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1);
    let file = dir.join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    LocalCluster::start_with(&exe(), &file, &cfg, dir, &[], None).unwrap()
}

/// `clients` clients updating keys for `secs` seconds; the commands they completed.
async fn load(cluster: &ClusterConfig, clients: u64, secs: f64) -> u64 {
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let cluster = cluster.clone();
        tasks.push(tokio::spawn(async move {
            let opts = ClientOptions {
                entry_index: Some(c),
                give_up: Duration::from_secs(30),
                ..ClientOptions::default()
            };
            let mut client = Client::<BPlusTree>::connect(cluster, opts).await.unwrap();
            let mut done = 0;
            while Instant::now() < until {
                let key = c * 1_000 + done % 100;
                if client
                    .execute(Op::Update { key, value: done })
                    .await
                    .is_ok()
                {
                    done += 1;
                }
            }
            done
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_serves_its_metrics_on_its_own_address() {
    let dir = tempfile::tempdir().unwrap();
    let mut lc = start_cluster(dir.path());
    lc.wait_ready(Duration::from_secs(30)).await.unwrap();
    let cluster = lc.cluster.clone();
    let done = load(&cluster, 4, 2.0).await;
    assert!(done > 0, "the clients got nothing done");
    let addr = |id: u32| cluster.node(id).unwrap().addr.clone();

    // The coordinator timed its decisions and sized its values: node 1, the
    // configuration's, unless another acceptor took the lead (a slow start under a
    // loaded machine), so summed over the acceptors; each acceptor synced and voted.
    let (mut decided, mut values, mut commands) = (0.0, 0.0, 0.0);
    let mut texts = String::new();
    for id in [1, 2, 3] {
        let (code, text) = http_get(&addr(id), "/metrics").unwrap();
        assert_eq!(code, 200, "{text}");
        assert!(text.ends_with("# EOF\n"), "not OpenMetrics text:\n{text}");
        decided += sample(&text, "partita_commit_duration_seconds_count").unwrap();
        values += sample(&text, "partita_value_commands_count").unwrap();
        commands += sample(&text, "partita_value_commands_sum").unwrap();
        assert!(sample(&text, "partita_wal_sync_duration_seconds_count").unwrap() > 0.0);
        assert!(sample(&text, "partita_acceptor_votes_total").unwrap() > 0.0);
        texts += &format!("node {id}:\n{text}");
    }
    assert!(decided > 0.0, "no commit latency observed:\n{texts}");
    assert!(
        values > 0.0 && commands >= done as f64,
        "{values} values, {commands} commands for {done} done:\n{texts}"
    );
    // Each replica executed at least what the clients saw done (updates run at both).
    for id in [4, 5] {
        let (code, text) = http_get(&addr(id), "/metrics").unwrap();
        assert_eq!(code, 200);
        let executed = sample(&text, "partita_commands_executed_total").unwrap();
        assert!(executed >= done as f64, "node {id}: {executed} < {done}");
        assert!(sample(&text, "partita_reply_cache_clients").unwrap() >= 4.0);
    }
    // Any other path is a 404 with a hint, a garbage request changes nothing, and the
    // node still serves its metrics and its clients.
    let (code, body) = http_get(&addr(4), "/nope").unwrap();
    assert_eq!(code, 404);
    assert!(body.contains("/metrics"), "{body}");
    {
        let mut s = TcpStream::connect(addr(4)).unwrap();
        s.write_all(b"GET \x00\xff\r\n\r\n").unwrap();
        let mut sink = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.read_to_end(&mut sink);
    }
    assert_eq!(http_get(&addr(4), "/metrics").unwrap().0, 200);
    assert!(load(&cluster, 1, 0.3).await > 0, "clients still served");
    lc.stop(Duration::from_secs(5));
}

/// Debian's Prometheus, scraping this test's cluster every 500 ms.
struct Prometheus {
    child: Child,
    addr: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn prometheus_binary() -> PathBuf {
    let installer = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-test-deps");
    let out = Command::new("bash")
        .arg(&installer)
        .arg("prometheus")
        .output()
        .expect("running scripts/install-test-deps");
    assert!(
        out.status.success(),
        "cannot install Debian's prometheus (needed by this test):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from("/usr/bin/prometheus")
}

fn start_prometheus(dir: &Path, cluster: &ClusterConfig) -> Prometheus {
    let bin = prometheus_binary();
    let targets: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("'{}'", n.addr))
        .collect();
    let config = format!(
        "global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\nscrape_configs:\n  - job_name: partita\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let port = partita_net::free_port_block(1).expect("a free port");
    let addr = format!("127.0.0.1:{port}");
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(bin)
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("starting prometheus");
    let p = Prometheus { child, addr };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(http_get(&p.addr, "/-/ready"), Ok((200, _))) {
        assert!(
            Instant::now() < deadline,
            "prometheus not ready after 30 s:\n{}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    p
}

/// Percent-encode a PromQL query for a URL.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant query's single value (`None`: an empty result).
fn query(p: &Prometheus, q: &str) -> Option<f64> {
    let (code, body) = http_get(&p.addr, &format!("/api/v1/query?query={}", encode(q))).unwrap();
    assert_eq!(code, 200, "{q}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{q}: {body}");
    let result = v["data"]["result"].as_array().unwrap();
    let first = result.first()?;
    first["value"][1].as_str().unwrap().parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_cluster_and_its_rate_matches_the_clients() {
    let dir = tempfile::tempdir().unwrap();
    let mut lc = start_cluster(dir.path());
    lc.wait_ready(Duration::from_secs(30)).await.unwrap();
    let cluster = lc.cluster.clone();
    let prom = start_prometheus(dir.path(), &cluster);
    // Load long enough for several scrapes, then ask for the replicas' rate over the
    // load's middle (a window that ends before it, so every sample in it was loaded).
    let secs = 8.0;
    let started = Instant::now();
    let done = load(&cluster, 8, secs).await;
    let measured = done as f64 / started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(1200));
    let up = query(&prom, "sum(up{job=\"partita\"})").unwrap();
    assert_eq!(up as usize, cluster.nodes.len(), "every node scraped");
    // One replica's rate over the last 6 s of the load.
    let rate = query(
        &prom,
        "max(rate(partita_commands_executed_total{instance=~\".*\"}[6s] offset 1s))",
    )
    .expect("a rate");
    assert!(
        rate > 0.3 * measured && rate < 3.0 * measured,
        "Prometheus says {rate:.0} commands/s, the clients measured {measured:.0}/s"
    );
    // A metric the nodes do not export has no rate: the query can come back empty.
    assert_eq!(query(&prom, "rate(partita_no_such_metric_total[6s])"), None);
    drop(prom);
    lc.stop(Duration::from_secs(5));
}
