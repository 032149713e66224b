//! etcd's v3 gRPC API at Partita's gateway (`partita-etcd`): what an etcd client sends
//! is the protobuf body of a request (tonic hands it to prost), decoded here as the
//! request type of the method it calls, then taken through the gateway's own code
//! paths that need no network: `convert`'s mapping of a request to a key-value command
//! (and its refusals), the check `Gateway::execute` makes before anything is ordered
//! (`partita_kv::check`, `checked_bytes` for the batcher), the command through the
//! key-value service's codec and check as a replica decodes it, its execution by a
//! `KvStore` (the replicated state: transactions' compares are evaluated against what
//! earlier requests of the input wrote), and `convert`'s mapping of the reply back to
//! etcd's response. A watch creation goes through `watch_spec` and the event read its
//! watcher polls; `Cluster.MemberList` and refused methods run through the gateway's
//! tonic service itself (they answer without the cluster).
//!
//! What must hold: no panic; every decoded message re-encodes to what decodes equal
//! (and `encoded_len` is its length), responses too; a conversion gives a command or a
//! gRPC status with a code etcd uses for it (INVALID_ARGUMENT, UNIMPLEMENTED) and a
//! message; a command the gateway would send passes the service's codec and the same
//! check at the replica, and its reply is of its own kind (else the gateway answers
//! INTERNAL); a transaction succeeds exactly when etcd's compare semantics say so
//! against the store's state, its responses follow its branch's operations one for one
//! (ranges with their own sort); sorted ranges are sorted by their target, cut at the
//! limit, counted whole; the gateway's batches (requests in flight together, executed
//! as one `KvCommand::Batch`) give each request the reply it gets alone; an accepted
//! watch's poll is a command the store accepts (else the watcher polls an error
//! forever).
//!
//! Input: requests, each a tag byte (the method: `tag % 9`, see `request`) and a
//! 2-byte little-endian length, then that many bytes of protobuf; at most 16.
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_etcd::convert;
use partita_etcd::pb::etcdserverpb as pb;
use partita_etcd::pb::mvccpb;
use partita_kv::{self as kv, KvCommand, KvReply, KvStore};
use partita_service::ServiceCodec;
use prost::Message;
use std::future::Future;
use tonic::Code;

const REQUESTS_MAX: usize = 16;
/// What a watcher asks for per poll (`server.rs`'s `EVENTS_PER_FETCH`).
const EVENTS_PER_FETCH: u64 = 1000;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    let mut store = KvStore::new();
    // What the store executed, in order, with its reply (for the batching check).
    let mut executed: Vec<(KvCommand, KvReply)> = Vec::new();
    let mut n = 0;
    while let Some((&tag, tail)) = rest.split_first() {
        let len = match tail {
            [a, b, ..] => usize::from(u16::from_le_bytes([*a, *b])),
            _ => 0,
        };
        let tail = &tail[tail.len().min(2)..];
        let (bytes, after) = tail.split_at(len.min(tail.len()));
        rest = after;
        request(tag % 9, bytes, &mut store, &mut executed);
        n += 1;
        if n == REQUESTS_MAX {
            break;
        }
    }
    batched(&executed, &store);
});

/// Decoded as `T`, it re-encodes to what decodes equal, of its announced length.
fn decode<T: Message + Default + PartialEq>(bytes: &[u8]) -> Option<T> {
    let m = T::decode(bytes).ok()?;
    round_trip(&m);
    Some(m)
}

fn round_trip<T: Message + Default + PartialEq>(m: &T) {
    let again = m.encode_to_vec();
    assert_eq!(again.len(), m.encoded_len(), "encoded_len is the length");
    let back = T::decode(again.as_slice()).expect("what prost encoded decodes");
    assert!(back == *m, "a message round-trips: {:?}", m.encode_to_vec());
}

/// A refusal by `convert`: a code etcd uses for it, and a reason.
fn refused(s: &tonic::Status) {
    assert!(
        matches!(s.code(), Code::InvalidArgument | Code::Unimplemented),
        "a request refused with {:?}: {}",
        s.code(),
        s.message()
    );
    assert!(!s.message().is_empty(), "a refusal says why");
}

/// What `Gateway::execute` and then the replica do with a command: the gateway's check
/// (a refusal is INVALID_ARGUMENT with kv's reason), the service's codec and check as
/// the replica decodes it, the execution. `None`: refused before ordering.
fn execute(
    cmd: KvCommand,
    store: &mut KvStore,
    executed: &mut Vec<(KvCommand, KvReply)>,
) -> Option<KvReply> {
    if let Err(why) = kv::check(&cmd) {
        assert!(!why.is_empty(), "kv's check says why");
        assert!(
            <KvStore as ServiceCodec>::check(&cmd).is_err(),
            "the replica refuses it too"
        );
        return None;
    }
    // The batcher counts its bytes (server.rs: "checked above, so this is its key and
    // value bytes").
    assert!(
        kv::checked_bytes(&cmd).is_ok(),
        "a checked command has its bytes"
    );
    let payload = <KvStore as ServiceCodec>::encode_command(&cmd);
    let decoded = <KvStore as ServiceCodec>::decode_command(&payload)
        .expect("the gateway's command decodes at the replica");
    assert_eq!(decoded, cmd, "the command through the service's codec");
    <KvStore as ServiceCodec>::check(&decoded).expect("the replica's check agrees");
    let reply = store.execute(&decoded).0;
    let bytes = <KvStore as ServiceCodec>::encode_reply(&reply);
    assert_eq!(
        <KvStore as ServiceCodec>::decode_reply(&bytes).as_ref(),
        Ok(&reply),
        "the reply through the service's codec"
    );
    executed.push((decoded, reply.clone()));
    Some(reply)
}

fn request(
    method: u8,
    bytes: &[u8],
    store: &mut KvStore,
    executed: &mut Vec<(KvCommand, KvReply)>,
) {
    match method {
        // KV.Range
        0 => {
            let Some(r) = decode::<pb::RangeRequest>(bytes) else {
                return;
            };
            let range = match convert::range_request(&r) {
                Ok(range) => range,
                Err(s) => return refused(&s),
            };
            assert_eq!(range.req.key, r.key);
            if let Some(KvReply::Range(resp)) = reply_of(
                execute(KvCommand::Range(range.req.clone()), store, executed),
                "Range",
            ) {
                range_response(&range, resp);
            }
        }
        // KV.Put
        1 => {
            let Some(p) = decode::<pb::PutRequest>(bytes) else {
                return;
            };
            let req = match convert::put_request(&p) {
                Ok(req) => req,
                Err(s) => return refused(&s),
            };
            assert_eq!((&req.key, &req.value), (&p.key, &p.value));
            if let Some(KvReply::Put(r)) =
                reply_of(execute(KvCommand::Put(req), store, executed), "Put")
            {
                let resp = convert::put_response(r.clone());
                assert_eq!(header_revision(&resp.header), r.revision);
                round_trip(&resp);
            }
        }
        // KV.DeleteRange
        2 => {
            let Some(d) = decode::<pb::DeleteRangeRequest>(bytes) else {
                return;
            };
            let req = match convert::delete_request(&d) {
                Ok(req) => req,
                Err(s) => return refused(&s),
            };
            if let Some(KvReply::DeleteRange(r)) = reply_of(
                execute(KvCommand::DeleteRange(req), store, executed),
                "DeleteRange",
            ) {
                let resp = convert::delete_response(r.clone());
                assert_eq!(resp.deleted, convert::i64_of(r.deleted));
                assert_eq!(resp.prev_kvs.len(), r.prev_kvs.len());
                assert_eq!(header_revision(&resp.header), r.revision);
                round_trip(&resp);
            }
        }
        // KV.Txn
        3 => {
            let Some(t) = decode::<pb::TxnRequest>(bytes) else {
                return;
            };
            let txn = match convert::txn_request(&t) {
                Ok(txn) => txn,
                Err(s) => return refused(&s),
            };
            let ranges = |ops: &[kv::RequestOp]| {
                ops.iter()
                    .filter(|o| matches!(o, kv::RequestOp::Range(_)))
                    .count()
            };
            assert_eq!(txn.success_ranges.len(), ranges(&txn.req.success));
            assert_eq!(txn.failure_ranges.len(), ranges(&txn.req.failure));
            assert_eq!(txn.req.compare.len(), t.compare.len());
            // etcd's semantics, on the request as the client sent it, against the
            // state before the transaction.
            let expected = t.compare.iter().all(|c| etcd_compare(c, store));
            if let Some(KvReply::Txn(r)) = reply_of(
                execute(KvCommand::Txn(txn.req.clone()), store, executed),
                "Txn",
            ) {
                assert_eq!(
                    r.succeeded, expected,
                    "the compares decide the branch as etcd's"
                );
                let (ops, ranges) = if r.succeeded {
                    (&txn.req.success, &txn.success_ranges)
                } else {
                    (&txn.req.failure, &txn.failure_ranges)
                };
                let resp = convert::txn_response(&txn, r.clone());
                assert_eq!(resp.succeeded, r.succeeded);
                assert_eq!(
                    resp.responses.len(),
                    ops.len(),
                    "one response per operation"
                );
                let mut ranges = ranges.iter();
                for ((op, sub), resp) in ops.iter().zip(&r.responses).zip(&resp.responses) {
                    use pb::response_op::Response;
                    match (op, sub, &resp.response) {
                        (
                            kv::RequestOp::Put(_),
                            kv::ResponseOp::Put(_),
                            Some(Response::ResponsePut(_)),
                        ) => {}
                        (
                            kv::RequestOp::DeleteRange(_),
                            kv::ResponseOp::DeleteRange(_),
                            Some(Response::ResponseDeleteRange(_)),
                        ) => {}
                        (
                            kv::RequestOp::Range(q),
                            kv::ResponseOp::Range(rr),
                            Some(Response::ResponseRange(_)),
                        ) => {
                            let range = ranges.next().expect("a range per range operation");
                            assert_eq!(&range.req, q, "the range's own sort and limit");
                            range_response(range, rr.clone());
                        }
                        other => panic!("a response of another kind than its operation: {other:?}"),
                    }
                }
                round_trip(&resp);
            }
        }
        // KV.Compact
        4 => {
            let Some(c) = decode::<pb::CompactionRequest>(bytes) else {
                return;
            };
            let req = match convert::compact_request(&c) {
                Ok(req) => req,
                Err(s) => return refused(&s),
            };
            if let Some(KvReply::Compact(r)) =
                reply_of(execute(KvCommand::Compact(req), store, executed), "Compact")
            {
                if let Some(e) = &r.error {
                    let s = convert::compact_error(e);
                    assert_eq!(s.code(), Code::OutOfRange, "a refused compaction");
                }
            }
        }
        // Watch.Watch: one message of the stream.
        5 => {
            let Some(w) = decode::<pb::WatchRequest>(bytes) else {
                return;
            };
            let Some(pb::watch_request::RequestUnion::CreateRequest(c)) = &w.request_union else {
                return;
            };
            let spec = match convert::watch_spec(c) {
                Ok(spec) => spec,
                Err(reason) => {
                    assert!(!reason.is_empty(), "a refused watch says why");
                    return;
                }
            };
            assert_eq!((&spec.key, &spec.end), (&c.key, &c.range_end));
            // The watcher's first poll (server.rs `run_watcher`), then every later one
            // from a revision further on: the store must take them.
            let poll = |start_revision| {
                KvCommand::Events(kv::EventsRequest {
                    key: spec.key.clone(),
                    end: spec.end.clone(),
                    start_revision,
                    limit: EVENTS_PER_FETCH,
                })
            };
            assert!(
                kv::check(&poll(u64::MAX)).is_ok(),
                "a later poll of an accepted watch is accepted"
            );
            if let Some(KvReply::Events(r)) = reply_of(
                execute(poll(spec.start_revision), store, executed),
                "Events",
            ) {
                for e in r.events.iter().filter(|e| spec.wants(e)) {
                    let ev = convert::event(e, spec.prev_kv);
                    assert_eq!(ev.kv.as_ref().map(|k| &k.key), Some(&e.kv.key));
                    round_trip(&ev);
                }
            }
        }
        // Maintenance.Status: answered from the cluster (an ordered read); the body
        // only decodes.
        6 => {
            let _ = decode::<pb::StatusRequest>(bytes);
        }
        // Cluster.MemberList: through the gateway's tonic service.
        7 => {
            let Some(m) = decode::<pb::MemberListRequest>(bytes) else {
                return;
            };
            use pb::cluster_server::Cluster;
            let svc = svc();
            let resp = ready(svc.member_list(tonic::Request::new(m)))
                .expect("MemberList answers")
                .into_inner();
            let header = resp.header.as_ref().expect("a header");
            assert_eq!(header.member_id, u64::from(NODE));
            let mut ids: Vec<u64> = resp.members.iter().map(|m| m.id).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), resp.members.len(), "members listed once");
            assert!(resp.members.iter().all(|m| !m.client_ur_ls.is_empty()));
            round_trip(&resp);
        }
        // Everything the gateway refuses (auth, MoveLeader):
        // `etcdserverpb.Unsupported` bodies, answered UNIMPLEMENTED.
        _ => {
            let Some(u) = decode::<pb::Unsupported>(bytes) else {
                return;
            };
            use pb::auth_server::Auth;
            use pb::maintenance_server::Maintenance;
            let svc = svc();
            for r in [
                ready(svc.auth_enable(tonic::Request::new(u.clone()))),
                ready(svc.move_leader(tonic::Request::new(u))),
            ] {
                let e = r.expect_err("an unsupported method is refused");
                assert_eq!(e.code(), Code::Unimplemented);
                assert!(e.message().contains("Partita does not support"));
            }
        }
    }
}

/// The reply of a command the gateway sent: of its own kind, or the gateway would
/// answer INTERNAL ("a reply of another kind than its command").
fn reply_of(reply: Option<KvReply>, kind: &str) -> Option<KvReply> {
    let reply = reply?;
    // Refused as executed (a put naming a lease that does not exist, a past revision
    // compacted or in the future): the gateway answers etcd's status, and nothing
    // changed.
    if let KvReply::Error(e) = &reply {
        let status = convert::kv_error(&e.error);
        assert!(status.message().starts_with("etcdserver: "));
        return None;
    }
    let same = matches!(
        (&reply, kind),
        (KvReply::Range(_), "Range")
            | (KvReply::Put(_), "Put")
            | (KvReply::DeleteRange(_), "DeleteRange")
            | (KvReply::Txn(_), "Txn")
            | (KvReply::Compact(_), "Compact")
            | (KvReply::Events(_), "Events")
    );
    assert!(same, "a {kind} answered with {reply:?}");
    Some(reply)
}

fn header_revision(h: &Option<pb::ResponseHeader>) -> u64 {
    u64::try_from(h.as_ref().expect("a header").revision).expect("a revision")
}

/// The store's range reply as etcd's response: counted whole; neither sorted nor
/// filtered, the store's entries as they are; otherwise every entry read (no limit
/// asked of the store), the revision filters applied, sorted, then cut at the limit.
fn range_response(range: &convert::Range, r: kv::RangeResponse) {
    use pb::range_request::SortTarget;
    let keys = kv::KeyRange::new(&range.req.key, &range.req.end);
    assert!(
        r.kvs.iter().all(|e| keys.contains(&e.key)),
        "entries in the range"
    );
    let resp = convert::range_response(range, r.clone());
    assert_eq!(resp.count, convert::i64_of(r.count));
    assert_eq!(header_revision(&resp.header), r.revision);
    if range.sort.is_none() && range.filter.is_none() {
        let kvs: Vec<mvccpb::KeyValue> = r.kvs.iter().map(convert::key_value).collect();
        assert_eq!(resp.kvs, kvs);
        assert_eq!(resp.more, r.more);
    } else {
        // Sorted or filtered: every entry read (no limit asked of the store), the
        // filters applied, sorted, then cut at the limit.
        assert_eq!(
            range.req.limit, 0,
            "sorting and filtering read the whole range"
        );
        assert!(!r.more, "a read without a limit has no more");
        let n = r.kvs.iter().filter(|e| range.filter.keeps(e)).count() as u64;
        let want = if range.limit > 0 {
            n.min(range.limit)
        } else {
            n
        };
        assert_eq!(
            resp.kvs.len() as u64,
            want,
            "filtered, then cut at the limit"
        );
        assert_eq!(resp.more, range.limit > 0 && n > range.limit);
        for e in &resp.kvs {
            let read = r.kvs.iter().find(|k| k.key == e.key);
            assert!(
                read.is_some_and(|k| range.filter.keeps(k)),
                "an entry of the range that passes the filters"
            );
        }
        if let Some(sort) = range.sort {
            for w in resp.kvs.windows(2) {
                let (a, b) = (&w[0], &w[1]);
                let ord = match sort.target {
                    SortTarget::Key => a.key.cmp(&b.key),
                    SortTarget::Version => a.version.cmp(&b.version),
                    SortTarget::Create => a.create_revision.cmp(&b.create_revision),
                    SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
                    SortTarget::Value => a.value.cmp(&b.value),
                };
                let ord = if sort.descend { ord.reverse() } else { ord };
                assert_ne!(
                    ord,
                    std::cmp::Ordering::Greater,
                    "sorted by {:?}",
                    sort.target
                );
            }
        }
    }
    round_trip(&resp);
}

/// etcd's compare (`applyCompare`) on the request as sent: the stored field against the
/// operand; a missing key compares as zeros, except on its value (false).
fn etcd_compare(c: &pb::Compare, store: &KvStore) -> bool {
    use pb::compare::{CompareResult, CompareTarget, TargetUnion};
    use std::cmp::Ordering;
    let stored = store.get(&c.key);
    let int = |v: Option<i64>| v.map_or(0, |v| u64::try_from(v).expect("checked"));
    let u = &c.target_union;
    let ord = match CompareTarget::try_from(c.target).expect("converted") {
        CompareTarget::Value => {
            let Some(e) = &stored else {
                return false;
            };
            let operand = match u {
                Some(TargetUnion::Value(v)) => v.as_slice(),
                _ => &[],
            };
            e.value.as_slice().cmp(operand)
        }
        CompareTarget::Version => stored.as_ref().map_or(0, |e| e.version).cmp(&int(match u {
            Some(TargetUnion::Version(v)) => Some(*v),
            _ => None,
        })),
        CompareTarget::Create => {
            stored
                .as_ref()
                .map_or(0, |e| e.create_revision)
                .cmp(&int(match u {
                    Some(TargetUnion::CreateRevision(v)) => Some(*v),
                    _ => None,
                }))
        }
        CompareTarget::Mod => stored
            .as_ref()
            .map_or(0, |e| e.mod_revision)
            .cmp(&int(match u {
                Some(TargetUnion::ModRevision(v)) => Some(*v),
                _ => None,
            })),
        CompareTarget::Lease => stored
            .as_ref()
            .map_or(0, |e| e.lease as u64)
            .cmp(&int(match u {
                Some(TargetUnion::Lease(v)) => Some(*v),
                _ => None,
            })),
    };
    match CompareResult::try_from(c.result).expect("converted") {
        CompareResult::Equal => ord == Ordering::Equal,
        CompareResult::NotEqual => ord != Ordering::Equal,
        CompareResult::Less => ord == Ordering::Greater,
        CompareResult::Greater => ord == Ordering::Greater,
    }
}

/// The gateway's batching: requests in flight together (here, every run of batchable
/// requests of the input) are ordered as one `KvCommand::Batch`, executed request by
/// request as if alone; each must get the reply it got alone, and the store end the
/// same.
fn batched(executed: &[(KvCommand, KvReply)], alone: &KvStore) {
    let batchable = |c: &KvCommand| {
        matches!(
            c,
            KvCommand::Put(_) | KvCommand::Range(_) | KvCommand::DeleteRange(_) | KvCommand::Txn(_)
        )
    };
    let mut store = KvStore::new();
    let mut i = 0;
    while i < executed.len() {
        let j = (i..executed.len())
            .find(|&j| !batchable(&executed[j].0))
            .unwrap_or(executed.len());
        if j - i >= 2 {
            let cmds: Vec<KvCommand> = executed[i..j].iter().map(|(c, _)| c.clone()).collect();
            let batch = KvCommand::Batch(cmds);
            kv::check(&batch).expect("a batch of checked requests is checked");
            let KvReply::Batch(replies) = store.execute(&batch).0 else {
                panic!("a batch answered with another kind");
            };
            assert_eq!(replies.len(), j - i);
            for (r, (_, alone)) in replies.iter().zip(&executed[i..j]) {
                assert_eq!(r, alone, "a batched request gets the reply it gets alone");
            }
            i = j;
        } else {
            let (c, r) = &executed[i];
            assert_eq!(&store.execute(c).0, r, "the same request, the same reply");
            i += 1;
        }
    }
    assert_eq!(
        store.digest(),
        alone.digest(),
        "batched or not, the same store"
    );
    assert_eq!(store.revision(), alone.revision());
}

/// The node the gateway serves at.
const NODE: u32 = 4;

/// The gateway's tonic service for node 4 of a key-value cluster whose replicas serve
/// etcd (built once; nothing here reaches the network).
fn svc() -> &'static partita_etcd::server::Svc {
    static SVC: std::sync::OnceLock<partita_etcd::server::Svc> = std::sync::OnceLock::new();
    SVC.get_or_init(|| {
        let mut c = partita_config::ClusterConfig::default_local(7100, 1);
        c.cluster.service = "kv".into();
        for n in &mut c.nodes {
            if n.id >= 4 {
                n.etcd_addr = Some(format!("127.0.0.1:{}", 2379 + n.id));
            }
        }
        let c = partita_config::ClusterConfig::parse(&c.to_toml(), "etcd.toml")
            .expect("a valid kv cluster with etcd gateways");
        partita_etcd::server::Svc(partita_etcd::Gateway::new(c, NODE))
    })
}

/// A handler that answers without waiting (no I/O), run to its end.
fn ready<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("a handler that needs no cluster waited"),
    }
}
