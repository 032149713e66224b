//! etcd's messages to Partita's key-value commands and back: pure functions, so that
//! every mapping and every refusal is tested without a cluster.
//!
//! What a request may not carry (each refused with a gRPC status naming the field, never
//! ignored): `ignore_value` and `ignore_lease`, compare ranges (`Compare.range_end`)
//! and nested transactions. A read at a past revision goes to the store, which reads
//! it from its event history. The revision filters are applied here (see [`Filter`]).
//! Sorting is done here, on the whole range (etcd also reads the whole range when asked
//! to sort, then applies the limit). docs/etcd-compatibility.md lists every RPC and
//! field.

use crate::pb::etcdserverpb as pb;
use crate::pb::mvccpb;
use partita_kv as kv;
use tonic::Status;

/// The status of a method or field Partita does not serve.
pub fn unsupported(what: &str) -> Status {
    Status::unimplemented(format!(
        "Partita does not support {what} (its etcd gateway serves KV Range, Put, \
         DeleteRange, Txn and Compact, Watch, Lease, Maintenance and Cluster's \
         MemberList, MemberAdd, MemberRemove and MemberPromote)"
    ))
}

/// etcd's `ErrGRPCEmptyKey`.
fn empty_key() -> Status {
    Status::invalid_argument("etcdserver: key is not provided")
}

fn non_negative(what: &str, n: i64) -> Result<u64, Status> {
    u64::try_from(n)
        .map_err(|_| Status::invalid_argument(format!("{what} must not be negative ({n})")))
}

/// A store revision, count or version as etcd's `int64`.
pub fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// How a range's entries are to be sorted (etcd's `SortOrder` and `SortTarget`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sort {
    pub descend: bool,
    pub target: pb::range_request::SortTarget,
}

/// A range request: the store's request (with no limit when sorting or filtering,
/// which need every entry), the filters, the sort and the limit to apply afterwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    pub req: kv::RangeRequest,
    pub filter: Filter,
    pub sort: Option<Sort>,
    pub limit: u64,
}

/// `RangeRequest`'s revision filters (0: none), applied as etcd applies them: to the
/// entries of the whole range, after it is read and before the sort and the limit;
/// `count` stays the range's (etcd's `Count` is not filtered).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub min_mod_revision: u64,
    pub max_mod_revision: u64,
    pub min_create_revision: u64,
    pub max_create_revision: u64,
}

impl Filter {
    /// Whether no filter is set.
    pub fn is_none(&self) -> bool {
        *self == Filter::default()
    }
    /// Whether `kv` passes every filter set.
    pub fn keeps(&self, kv: &kv::KeyValue) -> bool {
        let at_most = |v: u64, max: u64| max == 0 || v <= max;
        let at_least = |v: u64, min: u64| min == 0 || v >= min;
        at_most(kv.mod_revision, self.max_mod_revision)
            && at_least(kv.mod_revision, self.min_mod_revision)
            && at_most(kv.create_revision, self.max_create_revision)
            && at_least(kv.create_revision, self.min_create_revision)
    }
}

pub fn range_request(r: &pb::RangeRequest) -> Result<Range, Status> {
    use pb::range_request::{SortOrder, SortTarget};
    if r.key.is_empty() {
        return Err(empty_key());
    }
    // As etcd's mvcc: a revision of 0 or below reads the current one.
    let revision = u64::try_from(r.revision).unwrap_or(0);
    let filter = Filter {
        min_mod_revision: non_negative("min_mod_revision", r.min_mod_revision)?,
        max_mod_revision: non_negative("max_mod_revision", r.max_mod_revision)?,
        min_create_revision: non_negative("min_create_revision", r.min_create_revision)?,
        max_create_revision: non_negative("max_create_revision", r.max_create_revision)?,
    };
    let limit = non_negative("limit", r.limit)?;
    let order = SortOrder::try_from(r.sort_order)
        .map_err(|_| Status::invalid_argument(format!("unknown sort order {}", r.sort_order)))?;
    let target = SortTarget::try_from(r.sort_target)
        .map_err(|_| Status::invalid_argument(format!("unknown sort target {}", r.sort_target)))?;
    // etcd: entries come sorted by key ascending; a target other than the key with no
    // order sorts ascending.
    let sort = match (order, target) {
        (SortOrder::None, SortTarget::Key) | (SortOrder::Ascend, SortTarget::Key) => None,
        (SortOrder::Descend, t) => Some(Sort {
            descend: true,
            target: t,
        }),
        (_, t) => Some(Sort {
            descend: false,
            target: t,
        }),
    };
    Ok(Range {
        req: kv::RangeRequest {
            key: r.key.clone(),
            end: r.range_end.clone(),
            limit: if sort.is_some() || !filter.is_none() {
                0
            } else {
                limit
            },
            keys_only: r.keys_only,
            count_only: r.count_only,
            revision,
        },
        filter,
        sort,
        limit,
    })
}

pub fn key_value(kv: &kv::KeyValue) -> mvccpb::KeyValue {
    mvccpb::KeyValue {
        key: kv.key.clone(),
        create_revision: i64_of(kv.create_revision),
        mod_revision: i64_of(kv.mod_revision),
        version: i64_of(kv.version),
        value: kv.value.clone(),
        lease: kv.lease,
    }
}

/// The file `etcdctl snapshot save` writes from a snapshot (a replica checkpoint): it, zeros,
/// the snapshot's length (u64, little endian) ending at a multiple of 512 bytes (etcdctl
/// checks that what precedes the checksum is whole 512-byte sectors, as etcd's bolt
/// database is), then the SHA-256 of all that, as etcd appends it.
pub fn snapshot_file(snapshot: &[u8]) -> Vec<u8> {
    let mut pad = 512 - (snapshot.len() + 8) % 512;
    if pad == 512 {
        pad = 0;
    }
    let mut out = Vec::with_capacity(snapshot.len() + pad + 8 + 32);
    out.extend_from_slice(snapshot);
    out.resize(snapshot.len() + pad, 0);
    out.extend_from_slice(&(snapshot.len() as u64).to_le_bytes());
    let sum = sha256(&out);
    out.extend_from_slice(&sum);
    out
}

/// The snapshot inside a [`snapshot_file`], its checksum and layout verified.
pub fn snapshot_in_file(file: &[u8]) -> Result<&[u8], String> {
    if file.len() < 40 || !(file.len() - 32).is_multiple_of(512) {
        return Err(format!(
            "a snapshot file of {} bytes is not whole 512-byte sectors and a checksum",
            file.len()
        ));
    }
    let (body, sum) = file.split_at(file.len() - 32);
    if sum != sha256(body).as_slice() {
        return Err("the snapshot file's SHA-256 does not match its contents".into());
    }
    let len = u64::from_le_bytes(body[body.len() - 8..].try_into().expect("8 bytes"));
    match usize::try_from(len) {
        Ok(n) if n <= body.len() - 8 => Ok(&body[..n]),
        _ => Err(format!(
            "the snapshot file names a length of {len} bytes beyond it"
        )),
    }
}

/// SHA-256 of `bytes`: what etcd appends to the snapshot it streams.
pub fn sha256(bytes: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .to_vec()
}

/// The status etcd answers for a request its apply path refused (`v3rpc/util.go`).
pub fn kv_error(e: &kv::KvError) -> Status {
    let m = e.etcd_message();
    match e {
        kv::KvError::LeaseNotFound(_) => Status::not_found(m),
        kv::KvError::LeaseExists(_) => Status::failed_precondition(m),
        kv::KvError::LeaseTtlTooLarge(_)
        | kv::KvError::Compacted(_)
        | kv::KvError::FutureRevision(_) => Status::out_of_range(m),
        kv::KvError::Unsupported(why) => Status::unimplemented(format!("{m}: {why}")),
    }
}

/// A header with only the revision (the sub-responses of a transaction, as etcd's).
fn rev_header(revision: u64) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader {
        revision: i64_of(revision),
        ..Default::default()
    })
}

pub fn range_response(range: &Range, r: kv::RangeResponse) -> pb::RangeResponse {
    use pb::range_request::SortTarget;
    let mut kvs = r.kvs;
    let mut more = r.more;
    if !range.filter.is_none() {
        kvs.retain(|kv| range.filter.keeps(kv));
    }
    if let Some(sort) = range.sort {
        match sort.target {
            SortTarget::Key => {}
            SortTarget::Version => kvs.sort_by_key(|kv| kv.version),
            SortTarget::Create => kvs.sort_by_key(|kv| kv.create_revision),
            SortTarget::Mod => kvs.sort_by_key(|kv| kv.mod_revision),
            SortTarget::Value => kvs.sort_by(|a, b| a.value.cmp(&b.value)),
        }
        if sort.descend {
            kvs.reverse();
        }
    }
    // The store applied the limit unless the range was read whole to sort or filter.
    if range.req.limit == 0 && range.limit > 0 && kvs.len() as u64 > range.limit {
        kvs.truncate(usize::try_from(range.limit).unwrap_or(usize::MAX));
        more = true;
    }
    pb::RangeResponse {
        header: rev_header(r.revision),
        kvs: kvs.iter().map(key_value).collect(),
        more,
        count: i64_of(r.count),
    }
}

pub fn put_request(p: &pb::PutRequest) -> Result<kv::PutRequest, Status> {
    if p.key.is_empty() {
        return Err(empty_key());
    }
    if p.ignore_value {
        return Err(unsupported("PutRequest.ignore_value"));
    }
    if p.ignore_lease {
        return Err(unsupported("PutRequest.ignore_lease (leases)"));
    }
    Ok(kv::PutRequest {
        key: p.key.clone(),
        value: p.value.clone(),
        prev_kv: p.prev_kv,
        lease: p.lease,
    })
}

pub fn put_response(r: kv::PutResponse) -> pb::PutResponse {
    pb::PutResponse {
        header: rev_header(r.revision),
        prev_kv: r.prev_kv.as_ref().map(key_value),
    }
}

pub fn delete_request(d: &pb::DeleteRangeRequest) -> Result<kv::DeleteRangeRequest, Status> {
    if d.key.is_empty() {
        return Err(empty_key());
    }
    Ok(kv::DeleteRangeRequest {
        key: d.key.clone(),
        end: d.range_end.clone(),
        prev_kv: d.prev_kv,
    })
}

pub fn delete_response(r: kv::DeleteRangeResponse) -> pb::DeleteRangeResponse {
    pb::DeleteRangeResponse {
        header: rev_header(r.revision),
        deleted: i64_of(r.deleted),
        prev_kvs: r.prev_kvs.iter().map(key_value).collect(),
    }
}

pub fn compare(c: &pb::Compare) -> Result<kv::Compare, Status> {
    use pb::compare::{CompareResult, CompareTarget, TargetUnion};
    if c.key.is_empty() {
        return Err(empty_key());
    }
    if !c.range_end.is_empty() {
        return Err(unsupported("compares over a key range (Compare.range_end)"));
    }
    let op = match CompareResult::try_from(c.result) {
        Ok(CompareResult::Equal) => kv::CompareOp::Equal,
        Ok(CompareResult::NotEqual) => kv::CompareOp::NotEqual,
        Ok(CompareResult::Less) => kv::CompareOp::Less,
        Ok(CompareResult::Greater) => kv::CompareOp::Greater,
        Err(_) => {
            return Err(Status::invalid_argument(format!(
                "unknown compare result {}",
                c.result
            )))
        }
    };
    // As etcd: the target names the field; an operand of another kind reads as zero
    // (or the empty value).
    let int = |v: Option<i64>, what: &str| non_negative(what, v.unwrap_or(0));
    let u = &c.target_union;
    let target = match CompareTarget::try_from(c.target) {
        Ok(CompareTarget::Version) => kv::CompareTarget::Version(int(
            match u {
                Some(TargetUnion::Version(v)) => Some(*v),
                _ => None,
            },
            "compare version",
        )?),
        Ok(CompareTarget::Create) => kv::CompareTarget::CreateRevision(int(
            match u {
                Some(TargetUnion::CreateRevision(v)) => Some(*v),
                _ => None,
            },
            "compare create_revision",
        )?),
        Ok(CompareTarget::Mod) => kv::CompareTarget::ModRevision(int(
            match u {
                Some(TargetUnion::ModRevision(v)) => Some(*v),
                _ => None,
            },
            "compare mod_revision",
        )?),
        Ok(CompareTarget::Value) => kv::CompareTarget::Value(match u {
            Some(TargetUnion::Value(v)) => v.clone(),
            _ => Vec::new(),
        }),
        Ok(CompareTarget::Lease) => kv::CompareTarget::Lease(int(
            match u {
                Some(TargetUnion::Lease(v)) => Some(*v),
                _ => None,
            },
            "compare lease",
        )? as i64),
        Err(_) => {
            return Err(Status::invalid_argument(format!(
                "unknown compare target {}",
                c.target
            )))
        }
    };
    Ok(kv::Compare {
        key: c.key.clone(),
        op,
        target,
    })
}

/// A transaction operation; `ranges` collects the sort of each range, in order.
fn request_op(op: &pb::RequestOp, ranges: &mut Vec<Range>) -> Result<kv::RequestOp, Status> {
    use pb::request_op::Request;
    match &op.request {
        Some(Request::RequestRange(r)) => {
            let range = range_request(r)?;
            let req = range.req.clone();
            ranges.push(range);
            Ok(kv::RequestOp::Range(req))
        }
        Some(Request::RequestPut(p)) => Ok(kv::RequestOp::Put(put_request(p)?)),
        Some(Request::RequestDeleteRange(d)) => Ok(kv::RequestOp::DeleteRange(delete_request(d)?)),
        Some(Request::RequestTxn(_)) => {
            Err(unsupported("nested transactions (RequestOp.request_txn)"))
        }
        None => Err(Status::invalid_argument(
            "a transaction operation without a request",
        )),
    }
}

/// A transaction, with the range requests of each branch (for their sorts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Txn {
    pub req: kv::TxnRequest,
    pub success_ranges: Vec<Range>,
    pub failure_ranges: Vec<Range>,
}

pub fn txn_request(t: &pb::TxnRequest) -> Result<Txn, Status> {
    let compare = t
        .compare
        .iter()
        .map(compare)
        .collect::<Result<Vec<_>, _>>()?;
    let mut success_ranges = Vec::new();
    let mut failure_ranges = Vec::new();
    let success = t
        .success
        .iter()
        .map(|op| request_op(op, &mut success_ranges))
        .collect::<Result<Vec<_>, _>>()?;
    let failure = t
        .failure
        .iter()
        .map(|op| request_op(op, &mut failure_ranges))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Txn {
        req: kv::TxnRequest {
            compare,
            success,
            failure,
        },
        success_ranges,
        failure_ranges,
    })
}

pub fn txn_response(t: &Txn, r: kv::TxnResponse) -> pb::TxnResponse {
    use pb::response_op::Response;
    let ranges = if r.succeeded {
        &t.success_ranges
    } else {
        &t.failure_ranges
    };
    let mut ranges = ranges.iter();
    let responses = r
        .responses
        .into_iter()
        .map(|op| pb::ResponseOp {
            response: Some(match op {
                kv::ResponseOp::Put(p) => Response::ResponsePut(put_response(p)),
                kv::ResponseOp::DeleteRange(d) => Response::ResponseDeleteRange(delete_response(d)),
                kv::ResponseOp::Range(q) => {
                    let range = ranges.next().cloned().unwrap_or_else(|| Range {
                        req: kv::RangeRequest::get(Vec::new()),
                        filter: Filter::default(),
                        sort: None,
                        limit: 0,
                    });
                    Response::ResponseRange(range_response(&range, q))
                }
            }),
        })
        .collect();
    pb::TxnResponse {
        header: rev_header(r.revision),
        succeeded: r.succeeded,
        responses,
    }
}

pub fn compact_request(c: &pb::CompactionRequest) -> Result<kv::CompactRequest, Status> {
    // `physical` only says when to answer; the history is dropped when the command
    // executes, so every compaction is physical.
    Ok(kv::CompactRequest {
        revision: non_negative("compaction revision", c.revision)?,
    })
}

/// etcd answers a refused compaction with OUT_OF_RANGE and its mvcc error.
pub fn compact_error(error: &str) -> Status {
    Status::out_of_range(format!("etcdserver: {error}"))
}

pub fn event(e: &kv::Event, with_prev: bool) -> mvccpb::Event {
    mvccpb::Event {
        r#type: match e.kind {
            kv::EventKind::Put => mvccpb::event::EventType::Put as i32,
            kv::EventKind::Delete => mvccpb::event::EventType::Delete as i32,
        },
        kv: Some(key_value(&e.kv)),
        prev_kv: if with_prev {
            e.prev_kv.as_ref().map(key_value)
        } else {
            None
        },
    }
}

/// A watch's key range and options, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpec {
    pub key: Vec<u8>,
    pub end: Vec<u8>,
    /// 0: from the next revision.
    pub start_revision: u64,
    pub prev_kv: bool,
    pub no_put: bool,
    pub no_delete: bool,
    pub progress_notify: bool,
}

impl WatchSpec {
    pub fn wants(&self, e: &kv::Event) -> bool {
        match e.kind {
            kv::EventKind::Put => !self.no_put,
            kv::EventKind::Delete => !self.no_delete,
        }
    }
}

/// A watch creation, checked; the error is the cancel reason.
pub fn watch_spec(c: &pb::WatchCreateRequest) -> Result<WatchSpec, String> {
    use pb::watch_create_request::FilterType;
    if c.key.is_empty() {
        return Err("etcdserver: key is not provided".into());
    }
    kv::check(&kv::KvCommand::Events(kv::EventsRequest {
        key: c.key.clone(),
        end: c.range_end.clone(),
        start_revision: 0,
        limit: 0,
    }))?;
    let start_revision = u64::try_from(c.start_revision)
        .map_err(|_| format!("start_revision must not be negative ({})", c.start_revision))?;
    let (mut no_put, mut no_delete) = (false, false);
    for f in &c.filters {
        match FilterType::try_from(*f) {
            Ok(FilterType::Noput) => no_put = true,
            Ok(FilterType::Nodelete) => no_delete = true,
            Err(_) => return Err(format!("unknown watch filter {f}")),
        }
    }
    // `fragment` asks the server to split responses above its size limit; this one
    // never splits, which a client that asks must accept (etcd splits only above its
    // limit too).
    Ok(WatchSpec {
        key: c.key.clone(),
        end: c.range_end.clone(),
        start_revision,
        prev_kv: c.prev_kv,
        no_put,
        no_delete,
        progress_notify: c.progress_notify,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::compare::{CompareResult, CompareTarget, TargetUnion};
    use tonic::Code;

    fn kvp(key: &str, value: &str, c: u64, m: u64, v: u64) -> kv::KeyValue {
        kv::KeyValue {
            key: key.into(),
            value: value.into(),
            create_revision: c,
            mod_revision: m,
            version: v,
            lease: 0,
        }
    }

    #[test]
    fn ranges_map_key_end_limit_and_flags() {
        let r = range_request(&pb::RangeRequest {
            key: b"a".to_vec(),
            range_end: b"b".to_vec(),
            limit: 3,
            keys_only: true,
            count_only: false,
            serializable: true,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            r.req,
            kv::RangeRequest {
                key: b"a".to_vec(),
                end: b"b".to_vec(),
                limit: 3,
                keys_only: true,
                count_only: false,
                revision: 0,
            }
        );
        assert_eq!(r.sort, None);
        let resp = range_response(
            &r,
            kv::RangeResponse {
                kvs: vec![kvp("a", "", 2, 5, 3)],
                count: 7,
                more: true,
                revision: 9,
            },
        );
        assert_eq!(resp.count, 7);
        assert!(resp.more);
        assert_eq!(resp.header.unwrap().revision, 9);
        assert_eq!(
            resp.kvs[0],
            mvccpb::KeyValue {
                key: b"a".to_vec(),
                create_revision: 2,
                mod_revision: 5,
                version: 3,
                value: vec![],
                lease: 0
            }
        );
    }

    /// etcd's Mutex waits for the last key created before its own
    /// (`WithLastCreate()` and `WithMaxCreateRev`): the filters prune the whole range,
    /// then the sort and the limit apply, and `count` stays the range's.
    #[test]
    fn revision_filters_prune_the_whole_range_then_sort_and_cut() {
        use pb::range_request::{SortOrder, SortTarget};
        let kvs = || {
            vec![
                kvp("l/a", "", 2, 8, 2),
                kvp("l/b", "", 3, 3, 1),
                kvp("l/c", "", 5, 6, 2),
                kvp("l/d", "", 7, 7, 1),
            ]
        };
        let read = |req: pb::RangeRequest| {
            let r = range_request(&req).unwrap();
            let resp = range_response(
                &r,
                kv::RangeResponse {
                    kvs: kvs(),
                    count: 4,
                    more: false,
                    revision: 9,
                },
            );
            let keys: Vec<String> = resp
                .kvs
                .iter()
                .map(|k| String::from_utf8(k.key.clone()).unwrap())
                .collect();
            (r.req.limit, keys, resp.more, resp.count)
        };
        let base = || pb::RangeRequest {
            key: b"l/".to_vec(),
            range_end: b"l0".to_vec(),
            ..Default::default()
        };
        let (store_limit, keys, more, count) = read(pb::RangeRequest {
            max_create_revision: 6,
            sort_order: SortOrder::Descend as i32,
            sort_target: SortTarget::Create as i32,
            limit: 1,
            ..base()
        });
        assert_eq!(store_limit, 0, "filtering needs the whole range");
        assert_eq!((keys, more, count), (vec!["l/c".to_string()], true, 4));
        let (_, keys, more, _) = read(pb::RangeRequest {
            min_create_revision: 3,
            max_create_revision: 5,
            ..base()
        });
        assert_eq!((keys, more), (vec!["l/b".into(), "l/c".into()], false));
        let (_, keys, _, _) = read(pb::RangeRequest {
            min_mod_revision: 6,
            max_mod_revision: 7,
            ..base()
        });
        assert_eq!(keys, ["l/c", "l/d"]);
        let (_, keys, more, _) = read(pb::RangeRequest {
            min_mod_revision: 3,
            limit: 2,
            ..base()
        });
        assert_eq!((keys, more), (vec!["l/a".into(), "l/b".into()], true));
        let (_, keys, _, count) = read(pb::RangeRequest {
            max_create_revision: 1,
            ..base()
        });
        assert!(keys.is_empty());
        assert_eq!(count, 4, "etcd's count is the range's, not the filter's");
    }

    #[test]
    fn sorted_ranges_read_everything_then_sort_and_cut() {
        use pb::range_request::{SortOrder, SortTarget};
        let r = range_request(&pb::RangeRequest {
            key: b"a".to_vec(),
            range_end: vec![0],
            limit: 2,
            sort_order: SortOrder::Descend as i32,
            sort_target: SortTarget::Mod as i32,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(r.req.limit, 0, "sorting needs the whole range");
        let resp = range_response(
            &r,
            kv::RangeResponse {
                kvs: vec![
                    kvp("a", "1", 2, 4, 1),
                    kvp("b", "1", 3, 3, 1),
                    kvp("c", "1", 5, 5, 1),
                ],
                count: 3,
                more: false,
                revision: 5,
            },
        );
        let keys: Vec<&[u8]> = resp.kvs.iter().map(|k| k.key.as_slice()).collect();
        assert_eq!(keys, [b"c".as_slice(), b"a"]);
        assert!(resp.more);
        assert_eq!(resp.count, 3);
        // A target without an order sorts ascending (etcd); key ascending is the
        // store's own order.
        let r = range_request(&pb::RangeRequest {
            key: b"a".to_vec(),
            sort_target: SortTarget::Version as i32,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            r.sort,
            Some(Sort {
                descend: false,
                target: SortTarget::Version
            })
        );
        let r = range_request(&pb::RangeRequest {
            key: b"a".to_vec(),
            sort_order: SortOrder::Ascend as i32,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(r.sort, None);
    }

    #[test]
    fn fields_that_change_the_answer_are_refused() {
        let refused = |r: pb::RangeRequest, code: Code, word: &str| {
            let e = range_request(&r).unwrap_err();
            assert_eq!(e.code(), code, "{e:?}");
            assert!(e.message().contains(word), "{e:?}");
        };
        let base = || pb::RangeRequest {
            key: b"a".to_vec(),
            ..Default::default()
        };
        // A past revision is read from the history (the store refuses one below the
        // compaction).
        let past = range_request(&pb::RangeRequest {
            revision: 3,
            ..base()
        })
        .unwrap();
        assert_eq!(past.req.revision, 3);
        for (r, name) in [
            (
                pb::RangeRequest {
                    min_mod_revision: -1,
                    ..base()
                },
                "min_mod_revision",
            ),
            (
                pb::RangeRequest {
                    max_mod_revision: -1,
                    ..base()
                },
                "max_mod_revision",
            ),
            (
                pb::RangeRequest {
                    min_create_revision: -1,
                    ..base()
                },
                "min_create_revision",
            ),
            (
                pb::RangeRequest {
                    max_create_revision: -1,
                    ..base()
                },
                "max_create_revision",
            ),
        ] {
            refused(r, Code::InvalidArgument, name);
        }
        refused(
            pb::RangeRequest {
                limit: -1,
                ..base()
            },
            Code::InvalidArgument,
            "negative",
        );
        refused(
            pb::RangeRequest {
                sort_order: 9,
                ..base()
            },
            Code::InvalidArgument,
            "sort order",
        );
        refused(
            pb::RangeRequest::default(),
            Code::InvalidArgument,
            "key is not provided",
        );
        // A newest-revision read (revision <= 0) is fine.
        let snap = b"a store snapshot".repeat(40);
        let file = snapshot_file(&snap);
        assert_eq!((file.len() - 32) % 512, 0);
        assert_eq!(snapshot_in_file(&file), Ok(&snap[..]));
        let mut bad = file.clone();
        bad[3] ^= 1;
        assert!(snapshot_in_file(&bad).unwrap_err().contains("SHA-256"));
        assert!(snapshot_in_file(&file[1..]).is_err());
        assert!(range_request(&pb::RangeRequest {
            revision: -1,
            ..base()
        })
        .is_ok());

        let put = |f: fn(&mut pb::PutRequest)| {
            let mut p = pb::PutRequest {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
                ..Default::default()
            };
            f(&mut p);
            put_request(&p)
        };
        assert!(put(|_| {}).is_ok());
        assert_eq!(put(|p| p.lease = 7).unwrap().lease, 7);
        for (f, word) in [
            (
                (|p: &mut pb::PutRequest| p.ignore_value = true) as fn(&mut pb::PutRequest),
                "ignore_value",
            ),
            (|p| p.ignore_lease = true, "ignore_lease"),
        ] {
            let e = put(f).unwrap_err();
            assert_eq!(e.code(), Code::Unimplemented);
            assert!(e.message().contains(word) && e.message().contains("Partita does not support"));
        }
        assert_eq!(
            put(|p| p.key.clear()).unwrap_err().code(),
            Code::InvalidArgument
        );
        assert_eq!(
            delete_request(&pb::DeleteRangeRequest::default())
                .unwrap_err()
                .code(),
            Code::InvalidArgument
        );
    }

    fn cmp(target: CompareTarget, result: CompareResult, u: Option<TargetUnion>) -> pb::Compare {
        pb::Compare {
            result: result as i32,
            target: target as i32,
            key: b"k".to_vec(),
            target_union: u,
            range_end: vec![],
        }
    }

    #[test]
    fn compares_map_every_target_and_operator() {
        let c = compare(&cmp(
            CompareTarget::Value,
            CompareResult::NotEqual,
            Some(TargetUnion::Value(b"x".to_vec())),
        ))
        .unwrap();
        assert_eq!(c.op, kv::CompareOp::NotEqual);
        assert_eq!(c.target, kv::CompareTarget::Value(b"x".to_vec()));
        let c = compare(&cmp(
            CompareTarget::Version,
            CompareResult::Greater,
            Some(TargetUnion::Version(2)),
        ))
        .unwrap();
        assert_eq!(
            (c.op, c.target),
            (kv::CompareOp::Greater, kv::CompareTarget::Version(2))
        );
        let c = compare(&cmp(
            CompareTarget::Create,
            CompareResult::Less,
            Some(TargetUnion::CreateRevision(5)),
        ))
        .unwrap();
        assert_eq!(
            (c.op, c.target),
            (kv::CompareOp::Less, kv::CompareTarget::CreateRevision(5))
        );
        let c = compare(&cmp(
            CompareTarget::Mod,
            CompareResult::Equal,
            Some(TargetUnion::ModRevision(6)),
        ))
        .unwrap();
        assert_eq!(
            (c.op, c.target),
            (kv::CompareOp::Equal, kv::CompareTarget::ModRevision(6))
        );
        // No operand: zero (etcd's `version("k") = 0`, as etcdctl sends it).
        let c = compare(&cmp(CompareTarget::Version, CompareResult::Equal, None)).unwrap();
        assert_eq!(c.target, kv::CompareTarget::Version(0));
        // A lease compare, as etcd's (0: no lease).
        let c = compare(&cmp(
            CompareTarget::Lease,
            CompareResult::Equal,
            Some(TargetUnion::Lease(0x2a)),
        ))
        .unwrap();
        assert_eq!(c.target, kv::CompareTarget::Lease(0x2a));
        // Refused: ranges, negative operands, unknown enums.
        let mut ranged = cmp(CompareTarget::Version, CompareResult::Equal, None);
        ranged.range_end = b"z".to_vec();
        assert_eq!(compare(&ranged).unwrap_err().code(), Code::Unimplemented);
        let neg = cmp(
            CompareTarget::Mod,
            CompareResult::Equal,
            Some(TargetUnion::ModRevision(-1)),
        );
        assert_eq!(compare(&neg).unwrap_err().code(), Code::InvalidArgument);
        let mut bad = cmp(CompareTarget::Mod, CompareResult::Equal, None);
        bad.result = 17;
        assert_eq!(compare(&bad).unwrap_err().code(), Code::InvalidArgument);
        bad.result = 0;
        bad.target = 17;
        assert_eq!(compare(&bad).unwrap_err().code(), Code::InvalidArgument);
    }

    #[test]
    fn transactions_map_both_branches_and_refuse_nesting() {
        use pb::request_op::Request;
        let t = pb::TxnRequest {
            compare: vec![cmp(CompareTarget::Version, CompareResult::Equal, None)],
            success: vec![pb::RequestOp {
                request: Some(Request::RequestPut(pb::PutRequest {
                    key: b"k".to_vec(),
                    value: b"v".to_vec(),
                    ..Default::default()
                })),
            }],
            failure: vec![pb::RequestOp {
                request: Some(Request::RequestRange(pb::RangeRequest {
                    key: b"k".to_vec(),
                    ..Default::default()
                })),
            }],
        };
        let txn = txn_request(&t).unwrap();
        assert_eq!(txn.req.success.len(), 1);
        assert_eq!(txn.failure_ranges.len(), 1);
        let resp = txn_response(
            &txn,
            kv::TxnResponse {
                succeeded: false,
                responses: vec![kv::ResponseOp::Range(kv::RangeResponse {
                    kvs: vec![kvp("k", "v", 2, 2, 1)],
                    count: 1,
                    more: false,
                    revision: 2,
                })],
                revision: 2,
            },
        );
        assert!(!resp.succeeded);
        let Some(pb::response_op::Response::ResponseRange(r)) = &resp.responses[0].response else {
            panic!("{resp:?}")
        };
        assert_eq!(r.kvs[0].value, b"v");
        let nested = pb::TxnRequest {
            success: vec![pb::RequestOp {
                request: Some(Request::RequestTxn(pb::TxnRequest::default())),
            }],
            ..Default::default()
        };
        assert_eq!(
            txn_request(&nested).unwrap_err().code(),
            Code::Unimplemented
        );
        let empty = pb::TxnRequest {
            failure: vec![pb::RequestOp { request: None }],
            ..Default::default()
        };
        assert_eq!(
            txn_request(&empty).unwrap_err().code(),
            Code::InvalidArgument
        );
    }

    #[test]
    fn events_and_watch_specs() {
        let e = kv::Event {
            kind: kv::EventKind::Delete,
            kv: kvp("k", "", 0, 7, 0),
            prev_kv: Some(kvp("k", "v", 2, 3, 2)),
        };
        let with = event(&e, true);
        assert_eq!(with.r#type, mvccpb::event::EventType::Delete as i32);
        assert_eq!(with.kv.unwrap().mod_revision, 7);
        assert_eq!(with.prev_kv.unwrap().value, b"v");
        assert!(event(&e, false).prev_kv.is_none());
        let spec = watch_spec(&pb::WatchCreateRequest {
            key: b"a".to_vec(),
            range_end: b"b".to_vec(),
            start_revision: 4,
            filters: vec![pb::watch_create_request::FilterType::Nodelete as i32],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(spec.start_revision, 4);
        assert!(!spec.wants(&e));
        assert!(watch_spec(&pb::WatchCreateRequest::default()).is_err());
        assert!(watch_spec(&pb::WatchCreateRequest {
            key: b"a".to_vec(),
            start_revision: -2,
            ..Default::default()
        })
        .is_err());
        assert!(watch_spec(&pb::WatchCreateRequest {
            key: b"a".to_vec(),
            filters: vec![5],
            ..Default::default()
        })
        .is_err());
        assert_eq!(
            compact_request(&pb::CompactionRequest {
                revision: -1,
                physical: false
            })
            .unwrap_err()
            .code(),
            Code::InvalidArgument
        );
        assert_eq!(
            compact_error("mvcc: required revision has been compacted").code(),
            Code::OutOfRange
        );
    }
}
