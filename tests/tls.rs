//! Mutual TLS on real processes: a cluster of `partita node` processes whose cluster
//! file has a `[tls]` section written by `partita certs`.
//!
//! - a TLS cluster serves concurrent clients a linearizable history, its replicas
//!   converge, and a plain-TCP status probe gets no answer from it;
//! - bad credentials, each presented on a connection of its own (another CA, expired,
//!   not yet valid, wrong node name, a name of no node, a client certificate used as a
//!   peer, no certificate, a truncated chain, a wrong key, a self-signed certificate, a
//!   node certificate used as a client, a certificate without `clientAuth`, plain TCP),
//!   are each refused with a log line that says why, while a client keeps executing
//!   commands; controls show that the same paths accept good credentials (a full
//!   intermediate chain, the real node and client certificates);
//! - a node refuses to start on unusable transport settings: plain TCP off loopback,
//!   a certificate file that is missing, a key that is not its certificate's;
//! - a node added at run time (named by `partita member add --addr` alone) is known by
//!   its certificate once the change names it, and serves.

use partita_btree::{Op, OpResult};
use partita_client::{node_status, node_status_of, Client, ClientOptions};
use partita_config::{ClusterConfig, Durability};
use partita_harness::bench::{self, BenchConfig, Workload};
use partita_harness::certs::{self, Ca, Leaf, Usage};
use partita_harness::launch::{pick_base_port, spawn_node, LocalCluster};
use partita_net::tls::rustls;
use partita_net::tls::tokio_rustls;
use partita_wire::Wire;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

/// A default local cluster (3 acceptors, 2 replicas, Ring Paxos) with certificates from
/// `partita certs` in `dir/certs` and the `[tls]` section in its file.
fn tls_cluster_file(dir: &Path) -> (PathBuf, ClusterConfig) {
    let mut cfg = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1);
    // Memory durability: this machine's disk stalls now and then, and TLS is what is
    // under test here.
    cfg.cluster.durability = Durability::Memory;
    let file = dir.join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    let (w, changed) = certs::certs_for_cluster_file(&dir.join("certs"), &file, 2, false).unwrap();
    assert!(changed && !w.ca_reused);
    let cfg = ClusterConfig::load(&file).unwrap();
    assert_eq!(cfg.transport(), partita_config::Transport::Tls);
    (file, cfg)
}

/// A cluster file for machines off loopback and without `[tls]` yet: refused as it
/// is (plain TCP would leave the host), yet `partita certs --cluster` reads it and
/// adds the section, after which it loads.
#[test]
fn certs_complete_a_file_with_addresses_off_loopback() {
    let dir = std::env::temp_dir().join(format!("partita-tls-offlo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cluster.toml");
    let text = ClusterConfig::default_local(7100, 1)
        .to_toml()
        .replace("127.0.0.1:", "10.0.0.1:");
    std::fs::write(&file, text).unwrap();
    let refused = ClusterConfig::load(&file).unwrap_err().to_string();
    assert!(
        refused.contains("node.addr") && refused.contains("[tls]"),
        "{refused}"
    );
    let (w, changed) = certs::certs_for_cluster_file(&dir.join("certs"), &file, 2, false).unwrap();
    assert!(changed, "the section is added");
    assert_eq!(w.nodes.len(), 5);
    let cfg = ClusterConfig::load(&file).unwrap();
    assert_eq!(cfg.transport(), partita_config::Transport::Tls);
    assert_eq!(cfg.addr(1).to_string(), "10.0.0.1:7101");
    // Run again: the section is there now, and stays as it is.
    let (_, changed) = certs::certs_for_cluster_file(&dir.join("certs"), &file, 2, true).unwrap();
    assert!(!changed);
    std::fs::remove_dir_all(&dir).unwrap();
}

async fn start(dir: &Path) -> LocalCluster {
    let (file, cfg) = tls_cluster_file(dir);
    let mut lc = LocalCluster::start_with(&exe(), &file, &cfg, dir, &[], None).unwrap();
    lc.wait_ready(Duration::from_secs(30)).await.unwrap();
    lc
}

fn log_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("node-{id}.log"))
}

fn log_len(dir: &Path, id: u32) -> usize {
    std::fs::read(log_path(dir, id)).map_or(0, |b| b.len())
}

/// Wait (5 s at most) for a line written to node `id`'s log after byte `from` that
/// contains every one of `needles`; the line.
async fn wait_log_line(dir: &Path, id: u32, from: usize, needles: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let bytes = std::fs::read(log_path(dir, id)).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes[from.min(bytes.len())..]).to_string();
        if let Some(line) = text.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
            return line.to_string();
        }
        if Instant::now() > deadline {
            panic!("node {id} logged no line with {needles:?}; its new log lines:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a node did with a connection.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Closed it (the reason as the client side saw it).
    Refused(String),
    /// Answered the hello (a client's welcome, a status).
    Answered,
    /// Kept it open without a word (what a node does with an accepted peer link).
    Open,
}

/// Credentials a test connection presents.
struct Creds {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Creds {
    fn from_pem(cert: &str, key: &str) -> Creds {
        Creds {
            chain: CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap(),
            key: PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
        }
    }

    fn from_files(cert: &Path, key: &Path) -> Creds {
        Creds::from_pem(
            &std::fs::read_to_string(cert).unwrap(),
            &std::fs::read_to_string(key).unwrap(),
        )
    }
}

/// Present whatever certificate and key it is given, unchecked (rustls's own builder
/// refuses a key that is not the certificate's; the node must refuse it too).
#[derive(Debug)]
struct Present(Arc<rustls::sign::CertifiedKey>);

impl rustls::client::ResolvesClientCert for Present {
    fn resolve(
        &self,
        _hints: &[&[u8]],
        _schemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }
    fn has_certs(&self) -> bool {
        true
    }
}

/// Open a connection to node `to` of `cfg` presenting `creds` (`None`: no client
/// certificate; `plain`: no TLS at all), send `hello`, and see what the node does.
/// The node's own certificate is verified with the cluster CA, as a client would.
async fn try_connect(
    cfg: &ClusterConfig,
    to: u32,
    creds: Option<Creds>,
    plain: bool,
    hello: Wire,
) -> Outcome {
    let tcp = tokio::net::TcpStream::connect(cfg.addr(to)).await.unwrap();
    let frame = partita_wire::to_frame(&hello);
    let mut stream: Box<dyn RW> = if plain {
        Box::new(tcp)
    } else {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        let ca = cfg.tls.as_ref().unwrap().ca.clone().unwrap();
        for c in CertificateDer::pem_file_iter(&ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots);
        let client = match creds {
            None => builder.with_no_client_auth(),
            Some(c) => {
                let key = provider.key_provider.load_private_key(c.key).unwrap();
                let certified = rustls::sign::CertifiedKey::new(c.chain, key);
                builder.with_client_cert_resolver(Arc::new(Present(Arc::new(certified))))
            }
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        match connector
            .connect(partita_net::tls::server_name(to), tcp)
            .await
        {
            Ok(s) => Box::new(s),
            Err(e) => return Outcome::Refused(format!("handshake: {e}")),
        }
    };
    if let Err(e) = stream.write_all(&frame).await {
        return Outcome::Refused(format!("write: {e}"));
    }
    if let Err(e) = stream.flush().await {
        return Outcome::Refused(format!("flush: {e}"));
    }
    let mut buf = [0u8; 64];
    match tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await {
        Err(_) => Outcome::Open,
        Ok(Ok(0)) => Outcome::Refused("closed".into()),
        // Over plain TCP, a TLS alert record (content type 21) is the node's refusal.
        Ok(Ok(_)) if plain && buf[0] == 21 => Outcome::Refused("a TLS alert".into()),
        Ok(Ok(_)) => Outcome::Answered,
        Ok(Err(e)) => Outcome::Refused(e.to_string()),
    }
}

trait RW: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> RW for T {}

/// Every node's `connections_refused`, summed.
async fn refused_total(cfg: &ClusterConfig) -> u64 {
    let mut total = 0;
    for n in &cfg.nodes {
        let s = node_status_of(cfg, n.id, Duration::from_secs(2))
            .await
            .unwrap_or_else(|| panic!("node {} does not answer its status", n.id));
        total += s
            .counters
            .iter()
            .find(|(k, _)| k == "connections_refused")
            .map_or(0, |(_, v)| *v);
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_a_linearizable_history() {
    let dir = tempfile::tempdir().unwrap();
    let mut lc = start(dir.path()).await;
    let cluster = lc.cluster.clone();
    wait_log_line(dir.path(), 1, 0, &["mutual TLS on"]).await;
    // Without TLS a node answers nothing, not even its status.
    assert!(node_status(cluster.addr(1), Duration::from_secs(1))
        .await
        .is_none());

    let preload = 100;
    bench::preload(&cluster, preload, false).await.unwrap();
    let cfg = BenchConfig {
        give_up: None,
        workload: Workload::Mixed,
        clients: 6,
        duration: Duration::from_secs(3),
        think_ms: 1,
        preload,
        seed: 11,
        trim: 0.1,
        progress: false,
        key_space: Some(2 * preload),
    };
    let (result, records) = bench::run(&cluster, &cfg).await.unwrap();
    assert!(result.commands > 100, "too little work to judge: {result}");
    let mut client = Client::<partita_btree::BPlusTree>::connect(
        cluster.clone(),
        ClientOptions {
            give_up: Duration::from_secs(60),
            ..ClientOptions::default()
        },
    )
    .await
    .unwrap();
    let OpResult::Entries(final_entries) = client
        .execute(Op::Query {
            min: 0,
            max: u64::MAX,
        })
        .await
        .unwrap()
    else {
        panic!("a query answers entries")
    };
    // Replicas converge: both executed what was decided, with the same digest.
    let deadline = Instant::now() + Duration::from_secs(20);
    let digests = loop {
        let mut st = Vec::new();
        for n in &cluster.nodes {
            st.push(node_status_of(&cluster, n.id, Duration::from_secs(1)).await);
        }
        let decided = st
            .iter()
            .flatten()
            .filter_map(|s| s.decided_up_to)
            .max()
            .unwrap_or(0);
        let replicas: Vec<_> = st
            .iter()
            .flatten()
            .filter(|s| s.executed_up_to.is_some())
            .collect();
        if replicas.len() == 2 && replicas.iter().all(|r| r.executed_up_to == Some(decided)) {
            break replicas
                .iter()
                .map(|r| (format!("node {}", r.node), r.digest.unwrap()))
                .collect::<Vec<_>>();
        }
        assert!(
            Instant::now() < deadline,
            "replicas did not catch up: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    lc.stop(Duration::from_secs(5));
    partita_checker::check_convergence(&digests).unwrap();
    let events: Vec<_> = records
        .iter()
        .map(partita_harness::history::to_event)
        .collect();
    let opts = partita_checker::CheckOptions {
        initial: partita_harness::history::preload_initial(preload),
        ..Default::default()
    };
    let summary = partita_checker::check_with_final_state(&events, &opts, &final_entries)
        .unwrap_or_else(|e| panic!("a TLS cluster's history: {e}"));
    eprintln!(
        "TLS: {} operations linearizable ({summary:?}); {result}",
        events.len()
    );
}

/// One bad credential: how to present it, and what the node must log.
struct Case {
    name: &'static str,
    to: u32,
    creds: Option<Creds>,
    plain: bool,
    hello: Wire,
    log: &'static [&'static str],
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_are_refused_while_the_cluster_serves() {
    let dir = tempfile::tempdir().unwrap();
    let lc = start(dir.path()).await;
    let cfg = lc.cluster.clone();
    let certs_dir = dir.path().join("certs");
    let cid = cfg.cluster.id;
    let peer = |from: u32| Wire::PeerHello {
        from,
        cluster_id: cid,
    };
    let client_hello = Wire::ClientHello { client: 77 };
    let file = |n: &str| certs_dir.join(n);
    let cluster_ca = Ca::load(&certs_dir).unwrap();
    let issue = |ca: &Ca, leaf: &Leaf| {
        let (c, k) = ca.issue(leaf).unwrap();
        Creds::from_pem(&c, &k)
    };
    let day = Duration::from_secs(86_400);
    let now = SystemTime::now();

    // A client that keeps executing commands while the bad credentials come and go.
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (cfg, ok, failed, stop) = (cfg.clone(), ok.clone(), failed.clone(), stop.clone());
        tokio::spawn(async move {
            let mut c = Client::<partita_btree::BPlusTree>::connect(cfg, ClientOptions::default())
                .await
                .unwrap();
            let mut key = 0u64;
            while !stop.load(Ordering::Relaxed) {
                key += 1;
                match c.execute(Op::Insert { key, value: key }).await {
                    Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        eprintln!("background client: {e}");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        })
    };

    // Controls: the same paths accept good credentials.
    let node2 = || Creds::from_files(&file("node-2.pem"), &file("node-2.key"));
    assert_eq!(
        try_connect(&cfg, 1, Some(node2()), false, peer(2)).await,
        Outcome::Open,
        "node 2's own certificate on a peer link"
    );
    assert_eq!(
        try_connect(
            &cfg,
            4,
            Some(Creds::from_files(&file("client.pem"), &file("client.key"))),
            false,
            client_hello.clone()
        )
        .await,
        Outcome::Answered,
        "the client certificate on a client connection"
    );
    let intermediate = cluster_ca.intermediate("Partita intermediate", 2).unwrap();
    let (leaf, leaf_key) = intermediate.issue(&Leaf::node(2, None, 2)).unwrap();
    let full_chain = format!("{leaf}{}", intermediate.cert_pem());
    assert_eq!(
        try_connect(
            &cfg,
            1,
            Some(Creds::from_pem(&full_chain, &leaf_key)),
            false,
            peer(2)
        )
        .await,
        Outcome::Open,
        "a node certificate with its whole chain through an intermediate"
    );
    assert_eq!(refused_total(&cfg).await, 0, "a control was refused");

    let other_ca = Ca::generate(certs::CA_COMMON_NAME, 2).unwrap();
    let mut expired = Leaf::node(2, None, 1);
    expired.not_before = now - 10 * day;
    expired.not_after = now - day;
    let mut not_yet = Leaf::node(2, None, 10);
    not_yet.not_before = now + day;
    let nobody = Leaf::new(
        "partita node 9",
        vec!["node-9.partita".into()],
        Usage::Node,
        2,
    );
    let mut server_only = Leaf::node(2, None, 2);
    server_only.usage = Usage::ServerOnly;
    let (self_signed, self_key) = Leaf::node(2, None, 2).self_signed().unwrap();
    let wrong_key = {
        let (_, other_key) = cluster_ca.issue(&Leaf::node(2, None, 2)).unwrap();
        Creds::from_pem(
            &std::fs::read_to_string(file("node-2.pem")).unwrap(),
            &other_key,
        )
    };

    let cases = vec![
        Case {
            name: "a certificate of another CA (same CA name)",
            to: 1,
            creds: Some(issue(&other_ca, &Leaf::node(2, None, 2))),
            plain: false,
            hello: peer(2),
            log: &["TLS handshake refused", "BadSignature", "another CA"],
        },
        Case {
            name: "an expired certificate",
            to: 1,
            creds: Some(issue(&cluster_ca, &expired)),
            plain: false,
            hello: peer(2),
            log: &["TLS handshake refused", "certificate expired"],
        },
        Case {
            name: "a certificate not yet valid",
            to: 2,
            creds: Some(issue(&cluster_ca, &not_yet)),
            plain: false,
            hello: peer(3),
            log: &["TLS handshake refused", "certificate not valid yet"],
        },
        Case {
            name: "another node's certificate (wrong node name)",
            to: 1,
            creds: Some(Creds::from_files(&file("node-3.pem"), &file("node-3.key"))),
            plain: false,
            hello: peer(2),
            log: &[
                "peer connection refused",
                "says node 2",
                "node 3's certificate",
            ],
        },
        Case {
            name: "a certificate naming no node of the cluster",
            to: 1,
            creds: Some(issue(&cluster_ca, &nobody)),
            plain: false,
            hello: peer(2),
            log: &["peer connection refused", "names no node of this cluster"],
        },
        Case {
            name: "a client certificate used as a peer",
            to: 2,
            creds: Some(Creds::from_files(&file("client.pem"), &file("client.key"))),
            plain: false,
            hello: peer(1),
            log: &[
                "peer connection refused",
                "client certificate cannot be used as a peer",
            ],
        },
        Case {
            name: "no certificate",
            to: 1,
            creds: None,
            plain: false,
            hello: peer(2),
            log: &["TLS handshake refused", "peer sent no certificates"],
        },
        Case {
            name: "a truncated chain (the intermediate left out)",
            to: 3,
            creds: Some(Creds::from_pem(&leaf, &leaf_key)),
            plain: false,
            hello: peer(2),
            log: &["TLS handshake refused", "UnknownIssuer"],
        },
        Case {
            name: "a wrong key (node 2's certificate, another key)",
            to: 1,
            creds: Some(wrong_key),
            plain: false,
            hello: peer(2),
            log: &["TLS handshake refused", "BadSignature", "key is not"],
        },
        Case {
            name: "a self-signed certificate",
            to: 1,
            creds: Some(Creds::from_pem(&self_signed, &self_key)),
            plain: false,
            hello: peer(2),
            log: &["TLS handshake refused", "UnknownIssuer"],
        },
        Case {
            name: "a node's certificate used as a client",
            to: 4,
            creds: Some(node2()),
            plain: false,
            hello: client_hello.clone(),
            log: &[
                "client connection refused",
                "node 2's certificate",
                "cannot be used as a client",
            ],
        },
        Case {
            name: "a certificate without clientAuth",
            to: 1,
            creds: Some(issue(&cluster_ca, &server_only)),
            plain: false,
            hello: peer(2),
            log: &[
                "TLS handshake refused",
                "extended key usage for client authentication",
            ],
        },
        Case {
            name: "plain TCP to a TLS node",
            to: 5,
            creds: None,
            plain: true,
            hello: client_hello.clone(),
            log: &["TLS handshake refused", "not TLS"],
        },
    ];
    let n_cases = cases.len() as u64;
    for case in cases {
        let from = log_len(dir.path(), case.to);
        let served_before = ok.load(Ordering::Relaxed);
        let outcome = try_connect(&cfg, case.to, case.creds, case.plain, case.hello).await;
        assert!(
            matches!(outcome, Outcome::Refused(_)),
            "{}: not refused ({outcome:?})",
            case.name
        );
        let line = wait_log_line(dir.path(), case.to, from, case.log).await;
        eprintln!(
            "{}: refused ({outcome:?}); node {} logged: {line}",
            case.name, case.to
        );
        // The cluster serves on: the background client completes more commands.
        let deadline = Instant::now() + Duration::from_secs(10);
        while ok.load(Ordering::Relaxed) < served_before + 5 {
            assert!(
                Instant::now() < deadline,
                "{}: the cluster stopped serving",
                case.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let refused = refused_total(&cfg).await;
    eprintln!(
        "{n_cases} bad credentials refused (connections_refused = {refused}); background client: {} ok, {} failed",
        ok.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    assert!(
        refused >= n_cases,
        "connections_refused {refused} < {n_cases} cases"
    );
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "the background client saw failures"
    );
    drop(lc);
}

/// Run `partita node` and expect it to refuse to start; its log.
fn refused_start(dir: &Path, file: &Path, id: u32) -> String {
    let mut child = spawn_node(&exe(), file, id, dir, &[]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "node {id} did not refuse to start: {}",
                std::fs::read_to_string(log_path(dir, id)).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    std::fs::read_to_string(log_path(dir, id)).unwrap()
}

#[test]
fn a_node_refuses_to_start_on_unusable_transport_settings() {
    // Plain TCP on 0.0.0.0 (every interface): refused, saying why. (The config check
    // of addresses lets 0.0.0.0 through; the node's own check stops it before it binds.)
    let dir = tempfile::tempdir().unwrap();
    let mut c = ClusterConfig::default_local(pick_base_port(), 5);
    c.nodes[0].addr = c.nodes[0].addr.replace("127.0.0.1", "0.0.0.0");
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, c.to_toml()).unwrap();
    let log = refused_start(dir.path(), &file, 1);
    assert!(
        log.contains("refusing to listen on 0.0.0.0")
            && log.contains("outside 127.0.0.0/8")
            && log.contains("insecure = true"),
        "{log}"
    );

    // A missing certificate: the field and the file are named.
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = tls_cluster_file(dir.path());
    std::fs::remove_file(dir.path().join("certs/node-3.pem")).unwrap();
    let log = refused_start(dir.path(), &file, 3);
    assert!(
        log.contains("tls.node_cert") && log.contains("node-3.pem"),
        "{log}"
    );
    // A key that is not the certificate's.
    std::fs::copy(
        dir.path().join("certs/node-2.key"),
        dir.path().join("certs/node-1.key"),
    )
    .unwrap();
    let log = refused_start(dir.path(), &file, 1);
    assert!(
        log.contains("TLS credentials unusable") && log.contains("node-1.key"),
        "{log}"
    );
    // A certificate file that holds no certificate.
    std::fs::write(dir.path().join("certs/node-4.pem"), "not PEM\n").unwrap();
    let log = refused_start(dir.path(), &file, 4);
    assert!(
        log.contains("node-4.pem") && log.contains("no PEM certificate"),
        "{log}"
    );
}

/// A node added at run time under mutual TLS, named only by `partita member add
/// --addr` (the other nodes' cluster file does not list it; its own copy does, with
/// `join = true`): its certificate, from the cluster's CA, is taken as node 6's once
/// the change names it, so its requests reach the others, it catches up (from the
/// acceptors' log or a peer's checkpoint) and serves, and a client reading through it
/// sees what was written before. (Controlled: with only the cluster file's nodes
/// recognised, node 6 stays a learner that executed nothing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_added_at_run_time_under_tls_is_recognised_by_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1);
    cfg.cluster.durability = Durability::Memory;
    cfg.storage.checkpoint_instances = 20;
    let addr6 = format!("127.0.0.1:{}", cfg.addr(1).port() + 5);
    cfg.nodes.push(partita_config::NodeSection::joining_replica(
        6,
        addr6.clone(),
    ));
    // Certificates for nodes 1 to 6 from one CA; node 6's own file lists it, the
    // others' does not.
    let own6 = dir.path().join("cluster-6.toml");
    std::fs::write(&own6, cfg.to_toml()).unwrap();
    certs::certs_for_cluster_file(&dir.path().join("certs"), &own6, 2, false).unwrap();
    let with6 = ClusterConfig::load(&own6).unwrap();
    let mut others = with6.clone();
    others.nodes.retain(|n| n.id != 6);
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, others.to_toml()).unwrap();
    let mut lc = LocalCluster::start_with(&exe(), &file, &others, dir.path(), &[], None).unwrap();
    lc.wait_ready(Duration::from_secs(30)).await.unwrap();
    let child = spawn_node(&exe(), &own6, 6, dir.path(), &[]).unwrap();
    lc.children.push((6, child));

    // Writes before node 6 joins, past a few checkpoints.
    let mut client = Client::<partita_btree::BPlusTree>::connect(
        others.clone(),
        ClientOptions {
            give_up: Duration::from_secs(30),
            ..ClientOptions::default()
        },
    )
    .await
    .unwrap();
    for key in 0..100 {
        client
            .execute(Op::Insert { key, value: key })
            .await
            .unwrap();
    }
    let o = std::process::Command::new(exe())
        .args(["member", "add", "6", "--addr", &addr6, "--cluster"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = node_status_of(&with6, 6, Duration::from_secs(1)).await;
        if s.as_ref().and_then(|s| s.replica_state.as_deref()) == Some("serving") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 6 does not serve: {:?}",
            s.map(|s| (s.replica_state, s.executed_up_to, s.counters))
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut via6 = with6.clone();
    via6.nodes.iter_mut().for_each(|n| n.join = false);
    let mut reader = Client::<partita_btree::BPlusTree>::connect(
        via6,
        ClientOptions {
            replica: Some(6),
            give_up: Duration::from_secs(30),
            ..ClientOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        reader.execute(Op::Read { key: 42 }).await.unwrap(),
        OpResult::Value(Some(42))
    );
    lc.stop(Duration::from_secs(5));
}
