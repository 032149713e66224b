//! `partita dashboard` in a real browser: a local cluster of real `partita node`
//! processes, the dashboard as a real process on a free port, and headless Chromium
//! loading the page (`--dump-dom` once its JavaScript has run, within a virtual time
//! budget). The page must show every node as up and the leader, and the throughput it
//! shows must rise under load from the benchmark driver; a replica killed shows as
//! down. A screenshot of the loaded
//! page is kept at `target/test-artifacts/dashboard.png`.
//!
//! Chromium comes from Debian (`scripts/install-test-deps` installs it when missing).
//! Every process the test starts is stopped by its pid before it ends.

use partita_config::ClusterConfig;
use partita_harness::bench::{self, BenchConfig, Workload};
use partita_harness::launch::{pick_base_port, LocalCluster};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A child process stopped (SIGTERM, then SIGKILL) when dropped.
struct Proc(Child);

impl Proc {
    /// SIGTERM, and the exit status if it exits within `grace` (killed otherwise).
    fn stop(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        if let Ok(Some(st)) = self.0.try_wait() {
            return Some(st);
        }
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.0.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
    }
}

fn chromium() -> PathBuf {
    let found = |name: &str| {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|f| f.is_file())
        })
    };
    if let Some(c) = found("chromium") {
        return c;
    }
    let st = Command::new("bash")
        .arg(repo().join("scripts/install-test-deps"))
        .args(["chromium", "chromium-driver"])
        .status()
        .expect("running scripts/install-test-deps");
    assert!(st.success(), "scripts/install-test-deps failed ({st})");
    found("chromium").expect("chromium is installed by scripts/install-test-deps")
}

/// Run headless Chromium on `url` with `extra` arguments; its stdout. Killed (by pid)
/// if it takes longer than a minute.
fn run_chromium(browser: &Path, url: &str, extra: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting chromium");
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            _ if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium did not finish within a minute");
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    reader.join().unwrap()
}

/// The page's DOM after its script ran for a few (virtual) seconds.
fn dump_dom(browser: &Path, url: &str) -> String {
    run_chromium(
        browser,
        url,
        &[
            "--dump-dom",
            "--virtual-time-budget=3000",
            "--window-size=1280,1000",
        ],
    )
}

/// One HTTP GET on a fresh connection: (status line, body).
fn http_get(addr: SocketAddr, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    let (head, body) = r.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// The value of `attr` on the element whose `id` is `id`, in serialized HTML.
fn attr_of_id(dom: &str, id: &str, attr: &str) -> Option<String> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let tag_end = at + dom[at..].find('>')?;
    let tag = &dom[at..tag_end];
    let key = format!("{attr}=\"");
    let v = tag.find(&key)? + key.len();
    Some(tag[v..v + tag[v..].find('"')?].to_string())
}

/// (node, alive) for every node row of the page.
fn node_rows(dom: &str) -> Vec<(u32, String)> {
    let mut rows = Vec::new();
    let mut rest = dom;
    while let Some(i) = rest.find("data-node=\"") {
        rest = &rest[i + "data-node=\"".len()..];
        let id: u32 = rest[..rest.find('"').unwrap()].parse().unwrap();
        let tag = &rest[..rest.find('>').unwrap()];
        let alive = tag
            .split("data-alive=\"")
            .nth(1)
            .map(|a| a[..a.find('"').unwrap()].to_string())
            .unwrap_or_default();
        rows.push((id, alive));
    }
    rows
}

/// A number the page shows (`tput-now`: the last poll's throughput; `tput-max`: the
/// peak over the window).
fn shown(dom: &str, id: &str) -> f64 {
    attr_of_id(dom, id, "data-value")
        .filter(|v| !v.is_empty())
        .map(|v| v.parse().unwrap())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_every_node_and_throughput_rising_under_load() {
    let browser = chromium();
    let dir = tempfile::tempdir().unwrap();
    let cfg = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1);
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    let mut lc = LocalCluster::start_with(&exe(), &file, &cfg, dir.path(), &[], None).unwrap();
    lc.wait_ready(Duration::from_secs(30)).await.unwrap();

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let log = std::fs::File::create(dir.path().join("dashboard.log")).unwrap();
    let mut dash = Proc(
        Command::new(exe())
            .arg("dashboard")
            .arg("--cluster")
            .arg(&file)
            .arg("--addr")
            .arg(addr.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let url = format!("http://{addr}/");

    // Wait until the dashboard has polled every node as up and has a throughput (the
    // probe client's own commands, about one per second, at idle).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some((status, body)) = http_get(addr, "/api/state") {
            assert_eq!(status, "HTTP/1.1 200 OK");
            let j: serde_json::Value = serde_json::from_str(&body).unwrap();
            let nodes = j["nodes"].as_array().unwrap();
            let tput = j["series"]["throughput"].as_array().unwrap();
            if nodes.iter().all(|n| n["alive"] == true)
                && tput.iter().any(|t| !t.is_null())
                && j["probe"]["ok"].as_u64().unwrap_or(0) > 0
            {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the dashboard did not see every node up within 30 s; its log:\n{}",
            std::fs::read_to_string(dir.path().join("dashboard.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A malformed request gets 400 and the dashboard goes on serving.
    {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"BLAH\x00\x01\r\n\r\n").unwrap();
        let mut r = String::new();
        let _ = s.read_to_string(&mut r);
        assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
    }

    let idle_dom = tokio::task::spawn_blocking({
        let (b, u) = (browser.clone(), url.clone());
        move || dump_dom(&b, &u)
    })
    .await
    .unwrap();
    assert!(idle_dom.contains("Partita cluster"), "{idle_dom}");
    let rows = node_rows(&idle_dom);
    let mut ids: Vec<u32> = rows.iter().map(|r| r.0).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        cfg.nodes.iter().map(|n| n.id).collect::<Vec<_>>(),
        "every node has a row: {rows:?}"
    );
    assert!(rows.iter().all(|r| r.1 == "yes"), "every node up: {rows:?}");
    assert!(idle_dom.contains("leader: node 1"), "the leader is shown");
    let idle = shown(&idle_dom, "tput-max");

    // Load: closed-loop clients for 12 s; look at the page in the middle of it.
    let bench_cluster = cfg.clone();
    let load = tokio::spawn(async move {
        let bc = BenchConfig {
            give_up: None,
            workload: Workload::Update,
            clients: 8,
            duration: Duration::from_secs(12),
            think_ms: 0,
            preload: 0,
            seed: 11,
            trim: 0.1,
            progress: false,
            key_space: Some(10_000),
        };
        bench::run(&bench_cluster, &bc).await.map(|r| r.0)
    });
    tokio::time::sleep(Duration::from_secs(6)).await;
    let busy_dom = tokio::task::spawn_blocking({
        let (b, u) = (browser.clone(), url.clone());
        move || dump_dom(&b, &u)
    })
    .await
    .unwrap();
    // The peak over the window, not only the last second: this VM's disk sometimes
    // stalls an fsync for seconds, and a stalled second shows (rightly) no progress.
    let busy = shown(&busy_dom, "tput-max");
    let busy_now = shown(&busy_dom, "tput-now");
    let artifacts = repo().join("target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let png = artifacts.join("dashboard.png");
    let _ = std::fs::remove_file(&png);
    tokio::task::spawn_blocking({
        let (b, u, p) = (browser.clone(), url.clone(), png.clone());
        move || {
            run_chromium(
                &b,
                &u,
                &[
                    &format!("--screenshot={}", p.display()),
                    "--window-size=1280,1500",
                    "--virtual-time-budget=3000",
                ],
            )
        }
    })
    .await
    .unwrap();
    let result = load.await.unwrap().expect("the load ran");
    eprintln!(
        "dashboard: idle peak {idle:.1} cmd/s, under load peak {busy:.1} cmd/s and last {busy_now:.1} cmd/s shown; the bench measured {:.1} cmd/s",
        result.throughput_cmds_per_s
    );
    assert!(
        busy >= 50.0 && busy > 3.0 * idle.max(1.0),
        "the shown throughput rises under load: idle {idle}, under load {busy} (bench: {})",
        result.throughput_cmds_per_s
    );
    assert!(
        node_rows(&busy_dom).iter().all(|r| r.1 == "yes"),
        "every node still up"
    );
    assert!(
        std::fs::metadata(&png)
            .map(|m| m.len() > 10_000)
            .unwrap_or(false),
        "a screenshot at {}",
        png.display()
    );

    // A replica killed: the page shows it down, the others up.
    let (_, victim) = lc
        .children
        .iter_mut()
        .find(|(id, _)| *id == 5)
        .expect("node 5 runs");
    victim.kill().unwrap();
    victim.wait().unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let dead_dom = tokio::task::spawn_blocking({
        let (b, u) = (browser.clone(), url.clone());
        move || dump_dom(&b, &u)
    })
    .await
    .unwrap();
    let rows = node_rows(&dead_dom);
    assert!(
        rows.iter().all(|(id, alive)| (*id == 5) == (alive == "no")),
        "node 5 down, the others up: {rows:?}"
    );

    // SIGTERM stops the dashboard cleanly.
    let st = dash.stop(Duration::from_secs(5));
    assert!(
        st.is_some_and(|s| s.success()),
        "the dashboard exits 0 on SIGTERM: {st:?}"
    );
    lc.stop(Duration::from_secs(10));
}
