//! Leases in ordered time: grant, keep-alive, time to live, revoke, expiry deleting
//! the keys in one revision, undo, and the errors etcd gives.

use partita_kv::{
    check, EventKind, EventsRequest, KvCommand, KvError, KvReply, KvStore, LeaseGrantResponse,
    LeaseKeepAliveResponse, LeaseTimeToLiveResponse, RequestOp, TxnRequest, LEASE_TTL_MAX,
    LEASE_TTL_MIN,
};

fn run(s: &mut KvStore, cmd: KvCommand) -> KvReply {
    check(&cmd).unwrap();
    s.execute(&cmd).0
}

fn grant(s: &mut KvStore, id: i64, ttl: i64) -> LeaseGrantResponse {
    match run(s, KvCommand::lease_grant(id, ttl)) {
        KvReply::LeaseGrant(g) => g,
        other => panic!("{other:?}"),
    }
}

fn ttl(s: &mut KvStore, id: i64) -> LeaseTimeToLiveResponse {
    match run(s, KvCommand::lease_time_to_live(id, true)) {
        KvReply::LeaseTimeToLive(t) => t,
        other => panic!("{other:?}"),
    }
}

fn error(r: KvReply) -> KvError {
    match r {
        KvReply::Error(e) => e.error,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn a_lease_expires_in_ordered_time_and_deletes_its_keys_in_one_revision() {
    let mut s = KvStore::new();
    s.advance_time(1_000);
    let g = grant(&mut s, 0, 5);
    assert!(g.id > 0 && g.ttl == 5);
    run(&mut s, KvCommand::put_leased("b", "1", g.id));
    run(&mut s, KvCommand::put_leased("a", "1", g.id));
    run(&mut s, KvCommand::put("c", "free"));
    let before = s.revision();
    let t = ttl(&mut s, g.id);
    assert_eq!((t.ttl, t.granted_ttl), (5, 5));
    assert_eq!(t.keys, [b"a".to_vec(), b"b".to_vec()]);
    // Just before the deadline (granted at 1,000 ms for 5 s): still there.
    assert_eq!(ttl(&mut s, g.id).ttl, 5);
    s.advance_time(5_999);
    assert_eq!(ttl(&mut s, g.id).ttl, 0, "under a second left, truncated");
    assert_eq!(s.revision(), before);
    // At the deadline: gone, with both keys, in one revision.
    assert!(s.advance_time(6_000).is_some());
    assert_eq!(s.revision(), before + 1);
    assert!(s.get(b"a").is_none() && s.get(b"b").is_none() && s.get(b"c").is_some());
    assert_eq!(ttl(&mut s, g.id).ttl, -1);
    let KvReply::Events(ev) = run(
        &mut s,
        KvCommand::Events(EventsRequest {
            key: b"a".to_vec(),
            end: vec![0],
            start_revision: before + 1,
            limit: 0,
        }),
    ) else {
        panic!()
    };
    let deletes: Vec<(Vec<u8>, u64)> = ev
        .events
        .iter()
        .map(|e| {
            assert_eq!(e.kind, EventKind::Delete);
            (e.kv.key.clone(), e.kv.mod_revision)
        })
        .collect();
    assert_eq!(
        deletes,
        [(b"a".to_vec(), before + 1), (b"b".to_vec(), before + 1)]
    );
    // A keep-alive after expiry does not revive it.
    let KvReply::LeaseKeepAlive(k) = run(&mut s, KvCommand::lease_keep_alive(g.id)) else {
        panic!()
    };
    assert_eq!(k.ttl, 0);
    assert_eq!(ttl(&mut s, g.id).ttl, -1);
    // Time never goes back.
    assert!(s.advance_time(10).is_none());
    assert_eq!(s.now_ms(), 6_000);
}

#[test]
fn keep_alives_renew_from_the_time_they_run() {
    let mut s = KvStore::new();
    s.advance_time(10_000);
    let g = grant(&mut s, 42, 3);
    assert_eq!(g.id, 42);
    s.advance_time(12_500);
    let KvReply::LeaseKeepAlive(k) = run(&mut s, KvCommand::lease_keep_alive(42)) else {
        panic!()
    };
    assert_eq!(
        k,
        LeaseKeepAliveResponse {
            id: 42,
            ttl: 3,
            revision: s.revision()
        }
    );
    s.advance_time(15_499);
    assert_eq!(ttl(&mut s, 42).ttl, 0);
    assert_eq!(s.lease_count(), 1, "renewed to 15,500");
    s.advance_time(15_500);
    assert_eq!(s.lease_count(), 0);
}

#[test]
fn grants_follow_etcd() {
    let mut s = KvStore::new();
    // Below the minimum: raised silently.
    let g = grant(&mut s, 0, 1);
    assert_eq!(g.ttl, LEASE_TTL_MIN);
    // Too long, or an id held: refused with etcd's errors.
    assert_eq!(
        error(run(&mut s, KvCommand::lease_grant(0, LEASE_TTL_MAX + 1))),
        KvError::LeaseTtlTooLarge(LEASE_TTL_MAX + 1)
    );
    assert_eq!(
        error(run(&mut s, KvCommand::lease_grant(g.id, 10))),
        KvError::LeaseExists(g.id)
    );
    // Picked ids never repeat, even once revoked.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let g = grant(&mut s, 0, 10);
        assert!(g.id > 0 && seen.insert(g.id));
        run(&mut s, KvCommand::lease_revoke(g.id));
    }
    // A negative id is refused before it is ordered.
    assert!(check(&KvCommand::lease_grant(-1, 10)).is_err());
    assert!(check(&KvCommand::lease_keep_alive(0)).is_err());
    assert!(check(&KvCommand::put_leased("k", "v", -3)).is_err());
}

#[test]
fn puts_need_their_lease_and_move_keys_between_leases() {
    let mut s = KvStore::new();
    let a = grant(&mut s, 1, 10).id;
    let b = grant(&mut s, 2, 10).id;
    let rev = s.revision();
    assert_eq!(
        error(run(&mut s, KvCommand::put_leased("k", "v", 99))),
        KvError::LeaseNotFound(99)
    );
    assert_eq!(s.revision(), rev, "a refused put changes nothing");
    run(&mut s, KvCommand::put_leased("k", "v", a));
    assert_eq!(s.get(b"k").unwrap().lease, a);
    run(&mut s, KvCommand::put_leased("k", "v", b));
    assert!(ttl(&mut s, a).keys.is_empty());
    assert_eq!(ttl(&mut s, b).keys, [b"k".to_vec()]);
    // A put without a lease detaches it; revoking the lease leaves the key.
    run(&mut s, KvCommand::put("k", "w"));
    assert!(ttl(&mut s, b).keys.is_empty());
    run(&mut s, KvCommand::put_leased("j", "v", b));
    run(&mut s, KvCommand::delete("j"));
    let rev = s.revision();
    let KvReply::LeaseRevoke(r) = run(&mut s, KvCommand::lease_revoke(b)) else {
        panic!()
    };
    assert_eq!(
        r.revision, rev,
        "a lease without keys is revoked in no revision"
    );
    assert!(s.get(b"k").is_some());
    assert_eq!(
        error(run(&mut s, KvCommand::lease_revoke(b))),
        KvError::LeaseNotFound(b)
    );
    // A transaction whose branch puts with an unknown lease fails whole.
    let txn = KvCommand::Txn(TxnRequest {
        compare: vec![],
        success: vec![
            RequestOp::Put(match KvCommand::put("x", "1") {
                KvCommand::Put(p) => p,
                _ => unreachable!(),
            }),
            RequestOp::Put(match KvCommand::put_leased("y", "1", 77) {
                KvCommand::Put(p) => p,
                _ => unreachable!(),
            }),
        ],
        failure: vec![],
    });
    assert_eq!(error(run(&mut s, txn)), KvError::LeaseNotFound(77));
    assert!(s.get(b"x").is_none());
}

/// Speculation's contract: undoing time and what it expired restores the store
/// exactly, digest included.
#[test]
fn expiry_and_lease_commands_undo_exactly() {
    let mut s = KvStore::new();
    s.advance_time(1_000);
    let g = grant(&mut s, 0, 2);
    run(&mut s, KvCommand::put_leased("a", "1", g.id));
    run(&mut s, KvCommand::put_leased("b", "1", g.id));
    let before = s.clone();
    let digest = s.digest();
    let u1 = s.advance_time(9_000).unwrap();
    assert!(s.get(b"a").is_none());
    let (_, u2) = s.execute(&KvCommand::lease_grant(0, 5));
    let (_, u3) = s.execute(&KvCommand::put_leased("c", "1", 1));
    s.undo(u3);
    s.undo(u2);
    s.undo(u1);
    assert_eq!(s, before);
    assert_eq!(s.digest(), digest);
    // The same again picks the same id (the allocator was undone too).
    let again = s.clone();
    let mut t = again.clone();
    t.advance_time(9_000);
    s.advance_time(9_000);
    assert_eq!(
        s.execute(&KvCommand::lease_grant(0, 5)).0,
        t.execute(&KvCommand::lease_grant(0, 5)).0
    );
    // Leases enter the digest: a renewed lease is a different state.
    let mut x = again.clone();
    let mut y = again;
    x.advance_time(1_500);
    y.advance_time(1_500);
    x.execute(&KvCommand::lease_keep_alive(g.id));
    assert_ne!(x.digest(), y.digest());
}

#[test]
fn lease_commands_are_one_per_partition_and_merge() {
    use partita_service::ServiceCodec;
    use partita_types::PartitionMap;
    let map = PartitionMap::new(2, u64::MAX).unwrap();
    let parts = <KvStore as ServiceCodec>::split(&KvCommand::lease_grant(0, 5), &map).unwrap();
    assert_eq!(parts.len(), 2, "every partition holds every lease");
    let mut stores = [KvStore::new(), KvStore::new()];
    let replies: Vec<_> = stores
        .iter_mut()
        .enumerate()
        .map(|(p, s)| (p as u32, s.execute(&KvCommand::lease_grant(0, 5)).0))
        .collect();
    let merged =
        <KvStore as ServiceCodec>::merge(&KvCommand::lease_grant(0, 5), replies, &map).unwrap();
    let KvReply::LeaseGrant(g) = merged else {
        panic!()
    };
    // A key of each partition, attached to it; the time to live lists both.
    stores[0].execute(&KvCommand::put_leased(vec![0x10], "v", g.id));
    stores[1].execute(&KvCommand::put_leased(vec![0xf0], "v", g.id));
    let ttl = KvCommand::lease_time_to_live(g.id, true);
    let replies: Vec<_> = stores
        .iter_mut()
        .enumerate()
        .map(|(p, s)| (p as u32, s.execute(&ttl).0))
        .collect();
    let KvReply::LeaseTimeToLive(t) =
        <KvStore as ServiceCodec>::merge(&ttl, replies, &map).unwrap()
    else {
        panic!()
    };
    assert_eq!(t.keys, [vec![0x10], vec![0xf0]]);
}

/// Reads at a past revision, from the event history, until it is compacted.
#[test]
fn ranges_at_past_revisions_until_compacted() {
    use partita_kv::{CompactRequest, RangeRequest};
    let mut s = KvStore::new();
    run(&mut s, KvCommand::put("a", "1")); // 2
    run(&mut s, KvCommand::put("b", "1")); // 3
    run(&mut s, KvCommand::put("a", "2")); // 4
    run(&mut s, KvCommand::delete("b")); // 5
    run(&mut s, KvCommand::put("c", "1")); // 6
    let at = |s: &mut KvStore, rev: u64| -> Result<Vec<(String, String, u64)>, KvError> {
        let mut r = RangeRequest::new("a", vec![0]);
        r.revision = rev;
        match run(s, KvCommand::Range(r)) {
            KvReply::Range(r) => {
                assert_eq!(r.revision, 6, "the header is the store's revision");
                Ok(r.kvs
                    .iter()
                    .map(|kv| {
                        (
                            String::from_utf8(kv.key.clone()).unwrap(),
                            String::from_utf8(kv.value.clone()).unwrap(),
                            kv.mod_revision,
                        )
                    })
                    .collect())
            }
            KvReply::Error(e) => Err(e.error),
            other => panic!("{other:?}"),
        }
    };
    let kv = |k: &str, v: &str, m: u64| (k.to_string(), v.to_string(), m);
    assert_eq!(at(&mut s, 1), Ok(vec![]));
    assert_eq!(at(&mut s, 2), Ok(vec![kv("a", "1", 2)]));
    assert_eq!(at(&mut s, 3), Ok(vec![kv("a", "1", 2), kv("b", "1", 3)]));
    assert_eq!(at(&mut s, 4), Ok(vec![kv("a", "2", 4), kv("b", "1", 3)]));
    assert_eq!(at(&mut s, 5), Ok(vec![kv("a", "2", 4)]));
    assert_eq!(at(&mut s, 6), Ok(vec![kv("a", "2", 4), kv("c", "1", 6)]));
    assert_eq!(at(&mut s, 7), Err(KvError::FutureRevision(6)));
    run(&mut s, KvCommand::Compact(CompactRequest { revision: 4 }));
    assert_eq!(at(&mut s, 3), Err(KvError::Compacted(4)));
    assert_eq!(at(&mut s, 4), Ok(vec![kv("a", "2", 4), kv("b", "1", 3)]));
    // In a transaction: refused whole, before anything is written.
    let mut old = RangeRequest::get("a");
    old.revision = 2;
    let txn = KvCommand::Txn(TxnRequest {
        compare: vec![],
        success: vec![
            RequestOp::Put(match KvCommand::put("x", "1") {
                KvCommand::Put(p) => p,
                _ => unreachable!(),
            }),
            RequestOp::Range(old),
        ],
        failure: vec![],
    });
    assert_eq!(error(run(&mut s, txn)), KvError::Compacted(4));
    assert!(s.get(b"x").is_none());
}
