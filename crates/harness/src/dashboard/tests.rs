use super::*;
use partita_config::ClusterConfig;

fn status(node: NodeId, pid: u32, executed: Option<u64>) -> NodeStatus {
    NodeStatus {
        node,
        cluster_id: 7,
        service: "btree".into(),
        roles: vec!["replica".into()],
        mode: "smr".into(),
        protocol: "ring-paxos".into(),
        durability: "fsync".into(),
        coordinator: false,
        ballot: None,
        decided_up_to: None,
        executed_up_to: executed.map(|e| e / 10),
        digest: None,
        entries: None,
        promised: None,
        accepted: None,
        accepted_max_instance: None,
        counters: executed
            .map(|e| vec![("commands_executed".to_string(), e)])
            .unwrap_or_default(),
        pid,
        delivered_ballots: Vec::new(),
        wal_stall: None,
        members: None,
        replica_state: None,
    }
}

fn acceptor(node: NodeId, coordinator: bool) -> NodeStatus {
    let mut s = status(node, 100 + node, None);
    s.roles = vec!["acceptor".into()];
    s.promised = Some("3.1".into());
    if coordinator {
        s.coordinator = true;
        s.ballot = Some("3.1".into());
        s.decided_up_to = Some(42);
    }
    s
}

/// Default local cluster: nodes 1-3 acceptors (1 coordinates), 4 and 5 replicas.
fn cluster() -> ClusterConfig {
    ClusterConfig::default_local(27_000, 7)
}

fn all(replica4: Option<NodeStatus>, replica5: Option<NodeStatus>) -> Vec<Option<NodeStatus>> {
    vec![
        Some(acceptor(1, true)),
        Some(acceptor(2, false)),
        Some(acceptor(3, false)),
        replica4,
        replica5,
    ]
}

#[test]
fn throughput_comes_from_counter_deltas() {
    let mut st = State::new(cluster(), 10);
    st.record(
        10_000,
        all(Some(status(4, 44, Some(0))), Some(status(5, 55, Some(0)))),
    );
    assert_eq!(
        st.rounds()[0].throughput,
        None,
        "one answer gives no rate yet"
    );
    st.record(
        11_000,
        all(
            Some(status(4, 44, Some(100))),
            Some(status(5, 55, Some(90))),
        ),
    );
    let r = &st.rounds()[1];
    assert_eq!(r.nodes[3].rate, Some(100.0));
    assert_eq!(r.nodes[4].rate, Some(90.0));
    assert_eq!(r.nodes[0].rate, None, "an acceptor executes nothing");
    // One partition: the fastest replica, not the sum of copies of the same commands.
    assert_eq!(r.throughput, Some(100.0));
    // Half a second later, 50 more: still 100/s.
    st.record(
        11_500,
        all(
            Some(status(4, 44, Some(150))),
            Some(status(5, 55, Some(140))),
        ),
    );
    assert_eq!(st.rounds()[2].throughput, Some(100.0));
    let j = st.to_json();
    assert_eq!(j["series"]["throughput"], json!([null, 100.0, 100.0]));
    assert_eq!(j["nodes"][3]["throughput"], json!(100.0));
    assert_eq!(j["nodes"][3]["commands_executed"], json!(150));
    assert_eq!(j["now_ms"], json!(11_500));
}

#[test]
fn a_restarted_node_gives_a_gap_not_a_negative_rate() {
    let mut st = State::new(cluster(), 10);
    st.record(
        0,
        all(
            Some(status(4, 44, Some(1000))),
            Some(status(5, 55, Some(1000))),
        ),
    );
    st.record(
        1000,
        all(
            Some(status(4, 44, Some(1200))),
            Some(status(5, 55, Some(1200))),
        ),
    );
    // Node 4 restarted: a new process whose counter starts again from a small number.
    st.record(
        2000,
        all(
            Some(status(4, 46, Some(30))),
            Some(status(5, 55, Some(1400))),
        ),
    );
    let r = &st.rounds()[2];
    assert_eq!(r.nodes[3].rate, None);
    assert_eq!(r.nodes[4].rate, Some(200.0));
    assert_eq!(r.throughput, Some(200.0));
    // A counter that went back in the same process (it should not happen) counts too.
    st.record(
        3000,
        all(
            Some(status(4, 46, Some(130))),
            Some(status(5, 55, Some(1300))),
        ),
    );
    let r = &st.rounds()[3];
    assert_eq!(
        r.nodes[3].rate,
        Some(100.0),
        "rates resume from the new process"
    );
    assert_eq!(r.nodes[4].rate, None);
    let j = st.to_json();
    assert_eq!(j["nodes"][3]["restarts"], json!(1));
    assert_eq!(j["nodes"][4]["restarts"], json!(1));
}

#[test]
fn a_dead_node_is_down_and_keeps_its_configured_roles() {
    let mut st = State::new(cluster(), 10);
    st.record(
        0,
        all(Some(status(4, 44, Some(0))), Some(status(5, 55, Some(0)))),
    );
    st.record(1000, all(Some(status(4, 44, Some(50))), None));
    let mut statuses = all(Some(status(4, 44, Some(100))), None);
    statuses[0] = None; // the coordinator too
    st.record(2000, statuses);
    let r = &st.rounds()[2];
    assert!(!r.nodes[4].alive && r.nodes[4].rate.is_none());
    assert_eq!(r.throughput, Some(50.0));
    let j = st.to_json();
    assert_eq!(j["nodes"][4]["alive"], json!(false));
    assert_eq!(j["nodes"][4]["roles"], json!(["replica"]));
    assert_eq!(j["nodes"][4]["last_seen_ms"], json!(0));
    assert_eq!(j["nodes"][0]["alive"], json!(false));
    assert_eq!(j["leader"], Value::Null, "no answering node coordinates");
    assert_eq!(
        j["series"]["nodes"]["5"]["alive"],
        json!([true, false, false])
    );
    // Every node dead: no throughput at all (a gap, not zero).
    st.record(3000, vec![None, None, None, None, None]);
    assert_eq!(st.rounds()[3].throughput, None);
}

#[test]
fn the_history_is_a_bounded_ring() {
    let mut st = State::new(cluster(), 3);
    for i in 0..5u64 {
        st.record(i * 1000, all(Some(status(4, 44, Some(i * 10))), None));
    }
    let t: Vec<u64> = st.rounds().iter().map(|r| r.t_ms).collect();
    assert_eq!(t, vec![2000, 3000, 4000]);
    assert_eq!(st.to_json()["series"]["t_ms"], json!([2000, 3000, 4000]));
}

#[test]
fn partitions_add_up_and_leaders_come_from_ballots() {
    // Nodes 1-3 acceptors, 4 and 5 in partition 0, 6 and 7 in partition 1.
    let c = cluster().with_partitions(2, 2, 1000).unwrap();
    let mut st = State::new(c, 10);
    let round = |e: u64| {
        let mut v = vec![Some(acceptor(1, true)), Some(acceptor(2, false)), None];
        for (n, k) in [(4, 1), (5, 2), (6, 3), (7, 4)] {
            let mut s = status(n, 40 + n, Some(e * k));
            s.delivered_ballots = vec![partita_wire::DeliveredBallot {
                ballot: partita_types::Ballot::new(3, 1),
                unix_ms: 0,
                instance: 1,
            }];
            v.push(Some(s));
        }
        v
    };
    st.record(0, round(0));
    st.record(1000, round(10));
    // Partition 0: max(10, 20); partition 1: max(30, 40).
    assert_eq!(st.rounds()[1].throughput, Some(60.0));
    let j = st.to_json();
    assert_eq!(j["leader"], json!({"node": 1, "ballot": "3.1"}));
    assert_eq!(j["nodes"][1]["believed_leader"], json!(1));
    assert_eq!(
        j["nodes"][1]["leader_source"],
        json!("promised ballot (acceptor)")
    );
    assert_eq!(j["nodes"][5]["believed_leader"], json!(1));
    assert_eq!(j["partitions"][0]["lo"], json!("0"));
    assert_eq!(j["partitions"][0]["hi"], json!("499"));
    assert_eq!(j["partitions"][1]["hi"], json!(u64::MAX.to_string()));
    assert_eq!(j["partitions"][1]["replicas"], json!([6, 7]));
    assert_eq!(j["partitions"][1]["believed_leaders"], json!([1]));
    assert_eq!(j["partitions"][1]["throughput"], json!(40.0));
    assert_eq!(ballot_node("0.0"), None);
    assert_eq!(ballot_node("7.3"), Some(3));
    assert_eq!(ballot_node("junk"), None);
}

#[test]
fn probe_latencies_go_into_the_next_round() {
    let mut st = State::new(cluster(), 10);
    st.set_probe("read");
    st.record_probe(Ok(Duration::from_millis(2)));
    st.record_probe(Ok(Duration::from_millis(4)));
    st.record_probe(Err("no leader".into()));
    st.record(0, all(None, None));
    st.record(1000, all(None, None));
    assert_eq!(st.rounds()[0].probe_latency_ms, Some(3.0));
    assert_eq!(st.rounds()[1].probe_latency_ms, None);
    let j = st.to_json();
    assert_eq!(j["probe"]["ok"], json!(2));
    assert_eq!(j["probe"]["failed"], json!(1));
    assert_eq!(j["probe"]["last_error"], json!("no leader"));
}

#[test]
fn request_heads_are_parsed_strictly() {
    let ok = |h: &str| parse_head(h.as_bytes());
    assert_eq!(
        ok("GET /api/state?x=1 HTTP/1.1\r\nHost: a\r\n").unwrap(),
        ("GET".to_string(), "/api/state".to_string())
    );
    assert!(ok("GET / HTTP/1.0").is_ok());
    for bad in [
        "",
        "GET",
        "GET /",
        "GET / HTTP/2",
        "get / HTTP/1.1",
        "GET  / HTTP/1.1",
        "GET index HTTP/1.1",
        "GET / HTTP/1.1 extra",
        "GET / HTTP/1.1\r\nno colon here",
        "GET / HTTP/1.1\r\n: empty name",
        "\u{1}\u{2}garbage",
    ] {
        assert!(ok(bad).is_err(), "{bad:?} should be refused");
    }
    assert!(parse_head(&[0xff, 0xfe, b' ', b'/']).is_err());
}

async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("the server answers and closes")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn bad_requests_get_400_and_the_server_keeps_serving() {
    // Nodes on ports nobody listens on: every node is down, which the page must show.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state: Shared = Arc::new(Mutex::new(State::new(cluster(), 10)));
    state.lock().unwrap().record(5, vec![None; 5]);
    let server = tokio::spawn(serve_http(listener, state));

    let r = exchange(addr, b"\x00\x01\x02 garbage\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
    let r = exchange(addr, b"GET / HTTP/1.1\r\nbroken header\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
    let huge = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(HEAD_MAX * 2));
    let r = exchange(addr, huge.as_bytes()).await;
    assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
    // A client that hangs up half-way does not hurt either.
    drop(TcpStream::connect(addr).await.unwrap());
    let r = exchange(addr, b"POST /api/state HTTP/1.1\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 405 "), "{r}");
    let r = exchange(addr, b"GET /nope HTTP/1.1\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 404 "), "{r}");

    let r = exchange(addr, b"GET /api/state HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    let body = r.split_once("\r\n\r\n").unwrap().1;
    let j: Value = serde_json::from_str(body).unwrap();
    assert_eq!(j["nodes"].as_array().unwrap().len(), 5);
    assert!(j["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["alive"] == json!(false)));
    let r = exchange(addr, b"GET / HTTP/1.1\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.contains("<title>Partita cluster</title>"));
    assert!(
        !r.contains("http://") || !r.contains("src=\"http"),
        "no external assets"
    );
    server.abort();
}

/// The configuration a node reports (after `partita member` changes) is in the state:
/// the newest epoch among the answering nodes, with the acceptors and their epoch.
#[test]
fn the_newest_configuration_is_shown() {
    use partita_types::members::{Initial, MemberChange, Members};
    let mut st = State::new(cluster(), 10);
    assert_eq!(st.to_json()["configuration"], json!(null));
    let mut m = Members::default();
    let ini = Initial {
        replicas: &[(4, 0), (5, 0)],
        acceptors: &[1, 2, 3],
        others: &[1, 2, 3],
    };
    m.apply(ini, &MemberChange::Remove { node: 5 }, 30).unwrap();
    let older = m.clone();
    let add = MemberChange::AddAcceptor {
        node: 6,
        addr: "127.0.0.1:27006".into(),
    };
    m.apply(ini, &add, 40).unwrap();
    let mut s4 = status(4, 44, Some(100));
    s4.members = Some(m);
    s4.replica_state = Some("serving".into());
    let mut s5 = status(5, 55, Some(100));
    s5.members = Some(older);
    st.record(1_000, all(Some(s4), Some(s5)));
    let j = st.to_json();
    let c = &j["configuration"];
    assert_eq!(c["epoch"], json!(2), "{c}");
    assert_eq!(c["changed_at"], json!(40));
    assert_eq!(c["replicas"], json!([4]));
    assert_eq!(c["removed"], json!([5]));
    assert_eq!(c["ordering_epoch"], json!(1));
    assert_eq!(c["acceptors"], json!([1, 2, 3, 6]));
    assert_eq!(c["acceptors_from"], json!(41));
    assert_eq!(j["nodes"][3]["replica_state"], json!("serving"));
}

/// Nodes added at run time (a replica and an acceptor the newest configuration names,
/// with their addresses) are polled from the next round on: the state's cluster lists
/// them, a round answers one status per node including theirs, and their rates come
/// from their counters like any replica's.
#[test]
fn nodes_added_at_run_time_are_tracked_from_the_next_round() {
    use partita_types::members::{Initial, MemberChange, Members};
    let mut st = State::new(cluster(), 10);
    let ini = Initial {
        replicas: &[(4, 0), (5, 0)],
        acceptors: &[1, 2, 3],
        others: &[1, 2, 3],
    };
    let mut m = Members::default();
    let add = MemberChange::Add {
        node: 7,
        addr: "127.0.0.1:27007".into(),
        partition: 0,
        promote: true,
    };
    m.apply(ini, &add, 30).unwrap();
    let acceptor6 = MemberChange::AddAcceptor {
        node: 6,
        addr: "127.0.0.1:27006".into(),
    };
    m.apply(ini, &acceptor6, 40).unwrap();
    let mut s4 = status(4, 44, Some(100));
    s4.members = Some(m);
    st.record(1_000, all(Some(s4.clone()), Some(status(5, 55, Some(100)))));
    let ids: Vec<NodeId> = st.cluster().nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5, 7, 6]);
    assert_eq!(st.cluster().node(7).unwrap().addr, "127.0.0.1:27007");
    assert_eq!(st.cluster().node(6).unwrap().roles, vec![Role::Acceptor]);
    // The next round polls seven nodes; replica 7's counter gives it a rate.
    let mut next = all(Some(s4.clone()), Some(status(5, 55, Some(200))));
    next.push(Some(status(7, 77, Some(50))));
    next.push(Some(acceptor(6, false)));
    st.record(2_000, next);
    let mut third = all(Some(s4), Some(status(5, 55, Some(300))));
    third.push(Some(status(7, 77, Some(150))));
    third.push(None);
    st.record(3_000, third);
    let j = st.to_json();
    let node = |id: u64| {
        j["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(node(7)["throughput"], json!(100.0), "{j}");
    assert_eq!(node(7)["alive"], json!(true));
    assert_eq!(node(6)["alive"], json!(false));
    assert_eq!(node(6)["roles"], json!(["acceptor"]), "{j}");
}
