//! The node's inbox is bounded and pushes back on its connections: a client that
//! writes thousands of requests at once (more than the inbox holds) makes the
//! connection tasks wait for room (`inbox_full_waits`), reading nothing from their
//! sockets meanwhile, and still every request is answered exactly once.

use crate::common;

use common::{counter, local_config, TestClient, TestCluster};
use partita_btree::{Op, OpResult};
use partita_config::Durability;
use partita_wire::{to_frame, Wire};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const REQUESTS: u64 = 3000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_requests_waits_for_room_and_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = local_config(0xBAC4);
    cfg.cluster.durability = Durability::Memory;
    cfg.runtime.inbox_events_max = 16;
    let mut c = TestCluster::new(cfg.clone(), dir.path());
    c.start_all();
    c.wait_for(1, 20, "leadership", |s| s.coordinator).await;
    let mut client = TestClient::connect(&cfg, 4, 0xF100D).await;
    client.open_session().await;
    // Warm up: one command end to end.
    let r = client.execute(Op::Insert { key: 0, value: 0 }).await;
    assert_eq!(TestClient::result(&r), OpResult::Inserted(true));
    // The flood: every request in one write, without reading a reply.
    let first = client.seq + 1;
    let mut frames = Vec::new();
    for i in 0..REQUESTS {
        let cmd = client.command(
            first + i,
            &Op::Insert {
                key: i + 1,
                value: i,
            },
        );
        frames.extend(to_frame(&Wire::Request(cmd)));
    }
    client.seq += REQUESTS;
    client.write(&frames).await;
    let mut answered = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (answered.len() as u64) < REQUESTS {
        assert!(
            Instant::now() < deadline,
            "only {} of {REQUESTS} answered",
            answered.len()
        );
        if let Some(reply) = client.next_reply(Duration::from_secs(5)).await {
            if reply.seq >= first {
                assert_eq!(TestClient::result(&reply), OpResult::Inserted(true));
                assert!(
                    answered.insert(reply.seq),
                    "seq {} answered twice",
                    reply.seq
                );
            }
        }
    }
    let mut waits = 0;
    for n in [1, 4] {
        let s = c.status(n).await.expect("the node answers");
        waits += counter(&s, "inbox_full_waits");
    }
    eprintln!("{} answered, inbox full waits: {waits}", answered.len());
    assert!(
        waits > 0,
        "3000 requests at once never filled an inbox of 16 (entry node 4 or leader 1)"
    );
    c.stop_all().await;
}
