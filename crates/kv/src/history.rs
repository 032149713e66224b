//! Recording key-value histories in DESIGN.md §2's JSON-lines format, so that the
//! benchmark and the simulator can hand them to a linearizability checker.
//!
//! One JSON object per operation, with `service: "kv"` on every line:
//!
//! ```text
//! {"service":"kv","client":3,"op":"put","key":"a","value":"1","call_ns":10,"ret_ns":25,"status":"ok","result":{"revision":2}}
//! ```
//!
//! Keys and values are JSON strings when they are valid UTF-8, `{"hex":"..."}`
//! otherwise. Operations and their results (fields marked * are this module's
//! additions to DESIGN.md's shapes; readers that do not know them ignore them):
//!
//! | `op` | fields | `result` |
//! | --- | --- | --- |
//! | `put` | `key`, `value`, `prev_kv`* (when asked) | `{"revision":R,"prev":V\|null}`, `prev` only when asked |
//! | `get` | `key` | `{"value":V\|null,"mod_revision":R\|null,"version":N,"revision"*:R}` |
//! | `del` | `key`, `end` (absent for one key), `prev_kv`* | `{"deleted":N,"revision":R,"prev"*:[[k,v],...]}`, `prev` only when asked |
//! | `range` | `key`, `end`, `limit`, `keys_only`*, `count_only`* (when set) | `{"entries":[[k,v,mod_revision],...],"revision":R,"count"*:N,"more"*:bool}` |
//! | `txn` | `compare`, `then`, `else` | `{"succeeded":bool,"results":[...],"revision"*:R}` |
//!
//! `compact` (`revision`) and `events` (`key`, `end`, `start_revision`) are recorded
//! with their results (`{"revision","compacted","error"}`, `{"events":N,"compacted",
//! "revision"}`) for tools, but they are not operations of the checker's model: the
//! history tests do not issue them.
//!
//! A range over one key with no limit and no flags is recorded as a `get`; any other
//! range (an `end`, a limit, keys or count only) as a `range`, with `""` as the `end`
//! of a single key. A compare is `{"key","target":"value"|"version"|"mod"|"create",
//! "op":"="|"!="|"<"|">","value"}`, with a byte string for `value` targets and an
//! integer otherwise; `then` and `else` hold operations as above (without times and
//! statuses), and `results` one result per operation of the branch that ran.
//!
//! Revisions (etcd's, see the `store` module): `revision` is the one a write created,
//! or for a read, a delete of nothing and a transaction that changed nothing, the
//! store's revision when it ran. Inside a transaction every write reports the
//! transaction's revision, and a read reports the revision it saw: the old one before
//! the branch's first write, the new one after it.
//!
//! `status` is `ok`, `fail` (definitely not applied) or `info` (unknown); `result` is
//! present only with `ok`. [`command_from_json`] reads an operation back (for tools and
//! round-trip tests); the checker (`partita-checker`) has its own reader.

use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::types::*;

/// How an operation ended, as far as the client knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// Completed with this reply.
    Ok(&'a KvReply),
    /// Definitely not applied (refused before it was ordered).
    Fail,
    /// Unknown (timed out, connection lost): it may take effect later, or never.
    Info,
}

/// A byte string in the history: a JSON string when valid UTF-8, else `{"hex":"..."}`.
#[derive(Clone, Copy)]
struct Bytes<'a>(&'a [u8]);

impl Serialize for Bytes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(self.0) {
            Ok(text) => s.serialize_str(text),
            Err(_) => {
                use serde::ser::SerializeMap;
                let hex: String = self.0.iter().map(|b| format!("{b:02x}")).collect();
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("hex", &hex)?;
                m.end()
            }
        }
    }
}

/// The JSON form of a byte string (see the module doc).
pub fn bytes_json(bytes: &[u8]) -> Value {
    serde_json::to_value(Bytes(bytes)).expect("byte strings serialize")
}

/// The bytes of a history byte string: a JSON string, or `{"hex":"..."}`.
pub fn bytes_from_json(v: &Value) -> Result<Vec<u8>, String> {
    match v {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Object(m) if m.len() == 1 => {
            let hex = m
                .get("hex")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{v} is not a byte string"))?;
            if hex.len() % 2 != 0 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(format!("{hex:?} is not an even number of hex digits"));
            }
            Ok((0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex digits"))
                .collect())
        }
        other => Err(format!(
            "{other} is not a byte string (a string, or {{\"hex\":...}})"
        )),
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Whether a range is recorded as a `get`.
fn is_plain_get(r: &RangeRequest) -> bool {
    r.end.is_empty() && r.limit == 0 && !r.keys_only && !r.count_only
}

#[derive(Serialize)]
#[serde(untagged)]
enum OpJson<'a> {
    Put {
        op: &'static str,
        key: Bytes<'a>,
        value: Bytes<'a>,
        #[serde(skip_serializing_if = "is_false")]
        prev_kv: bool,
        #[serde(skip_serializing_if = "is_zero")]
        lease: i64,
    },
    /// A lease command (`lease_grant`, `lease_revoke`, `lease_keep_alive`,
    /// `lease_time_to_live`, `lease_leases`): recorded, not modelled by the checker.
    Lease {
        op: &'static str,
        id: i64,
        #[serde(skip_serializing_if = "is_zero")]
        ttl: i64,
    },
    Get {
        op: &'static str,
        key: Bytes<'a>,
    },
    Del {
        op: &'static str,
        key: Bytes<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        end: Option<Bytes<'a>>,
        #[serde(skip_serializing_if = "is_false")]
        prev_kv: bool,
    },
    Range {
        op: &'static str,
        key: Bytes<'a>,
        end: Bytes<'a>,
        limit: u64,
        #[serde(skip_serializing_if = "is_false")]
        keys_only: bool,
        #[serde(skip_serializing_if = "is_false")]
        count_only: bool,
    },
    Txn {
        op: &'static str,
        compare: Vec<CompareJson<'a>>,
        then: Vec<OpJson<'a>>,
        #[serde(rename = "else")]
        otherwise: Vec<OpJson<'a>>,
    },
    Compact {
        op: &'static str,
        revision: u64,
    },
    Events {
        op: &'static str,
        key: Bytes<'a>,
        end: Bytes<'a>,
        start_revision: u64,
    },
    /// A batch (the etcd gateway's; clients record their own requests one by one).
    Batch {
        op: &'static str,
        ops: Vec<OpJson<'a>>,
    },
}

#[derive(Serialize)]
struct CompareJson<'a> {
    key: Bytes<'a>,
    target: &'static str,
    op: &'static str,
    value: Operand<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Operand<'a> {
    Bytes(Bytes<'a>),
    Number(u64),
}

fn compare_json(c: &Compare) -> CompareJson<'_> {
    let (target, value) = match &c.target {
        CompareTarget::Value(v) => ("value", Operand::Bytes(Bytes(v))),
        CompareTarget::Version(n) => ("version", Operand::Number(*n)),
        CompareTarget::ModRevision(n) => ("mod", Operand::Number(*n)),
        CompareTarget::CreateRevision(n) => ("create", Operand::Number(*n)),
        CompareTarget::Lease(n) => ("lease", Operand::Number(*n as u64)),
    };
    CompareJson {
        key: Bytes(&c.key),
        target,
        op: c.op.symbol(),
        value,
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

fn put_json(p: &PutRequest) -> OpJson<'_> {
    OpJson::Put {
        op: "put",
        key: Bytes(&p.key),
        value: Bytes(&p.value),
        prev_kv: p.prev_kv,
        lease: p.lease,
    }
}

fn range_json(r: &RangeRequest) -> OpJson<'_> {
    if is_plain_get(r) {
        OpJson::Get {
            op: "get",
            key: Bytes(&r.key),
        }
    } else {
        OpJson::Range {
            op: "range",
            key: Bytes(&r.key),
            end: Bytes(&r.end),
            limit: r.limit,
            keys_only: r.keys_only,
            count_only: r.count_only,
        }
    }
}

fn del_json(d: &DeleteRangeRequest) -> OpJson<'_> {
    OpJson::Del {
        op: "del",
        key: Bytes(&d.key),
        end: (!d.end.is_empty()).then_some(Bytes(&d.end)),
        prev_kv: d.prev_kv,
    }
}

fn request_json(op: &RequestOp) -> OpJson<'_> {
    match op {
        RequestOp::Put(p) => put_json(p),
        RequestOp::Range(r) => range_json(r),
        RequestOp::DeleteRange(d) => del_json(d),
    }
}

fn op_json(cmd: &KvCommand) -> OpJson<'_> {
    match cmd {
        KvCommand::Put(p) => put_json(p),
        KvCommand::Range(r) => range_json(r),
        KvCommand::DeleteRange(d) => del_json(d),
        KvCommand::Txn(t) => OpJson::Txn {
            op: "txn",
            compare: t.compare.iter().map(compare_json).collect(),
            then: t.success.iter().map(request_json).collect(),
            otherwise: t.failure.iter().map(request_json).collect(),
        },
        KvCommand::Compact(c) => OpJson::Compact {
            op: "compact",
            revision: c.revision,
        },
        KvCommand::Events(e) => OpJson::Events {
            op: "events",
            key: Bytes(&e.key),
            end: Bytes(&e.end),
            start_revision: e.start_revision,
        },
        KvCommand::Batch(cmds) => OpJson::Batch {
            op: "batch",
            ops: cmds.iter().map(op_json).collect(),
        },
        KvCommand::LeaseGrant(g) => OpJson::Lease {
            op: cmd.name(),
            id: g.id,
            ttl: g.ttl,
        },
        KvCommand::LeaseRevoke(l)
        | KvCommand::LeaseExpire(l)
        | KvCommand::LeaseKeepAlive(l)
        | KvCommand::LeaseTimeToLive(l) => OpJson::Lease {
            op: cmd.name(),
            id: l.id,
            ttl: 0,
        },
        KvCommand::LeaseLeases => OpJson::Lease {
            op: cmd.name(),
            id: 0,
            ttl: 0,
        },
        KvCommand::Hash(h) => OpJson::Compact {
            op: "hash",
            revision: h.revision,
        },
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum ResultJson<'a> {
    Put {
        revision: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        prev: Option<Option<Bytes<'a>>>,
    },
    Get {
        value: Option<Bytes<'a>>,
        mod_revision: Option<u64>,
        version: u64,
        revision: u64,
    },
    Del {
        deleted: u64,
        revision: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        prev: Option<Vec<(Bytes<'a>, Bytes<'a>)>>,
    },
    Range {
        entries: Vec<(Bytes<'a>, Bytes<'a>, u64)>,
        revision: u64,
        count: u64,
        more: bool,
    },
    Txn {
        succeeded: bool,
        results: Vec<ResultJson<'a>>,
        revision: u64,
    },
    Batch {
        batch: Vec<ResultJson<'a>>,
    },
    Compact {
        revision: u64,
        compacted: u64,
        error: Option<&'a str>,
    },
    Events {
        events: u64,
        compacted: Option<u64>,
        revision: u64,
    },
    Lease {
        id: i64,
        ttl: i64,
        revision: u64,
    },
    Leases {
        ids: Vec<i64>,
        revision: u64,
    },
    Error {
        error: &'static str,
        revision: u64,
    },
    /// A reply of another kind than its command: never produced by the store, recorded
    /// as such so that a checker refuses the line rather than a recorder panicking.
    Mismatch {
        mismatched_reply: &'static str,
    },
}

fn put_result<'a>(p: &PutRequest, r: &'a PutResponse) -> ResultJson<'a> {
    ResultJson::Put {
        revision: r.revision,
        prev: p
            .prev_kv
            .then(|| r.prev_kv.as_ref().map(|kv| Bytes(&kv.value))),
    }
}

fn range_result<'a>(q: &RangeRequest, r: &'a RangeResponse) -> ResultJson<'a> {
    if is_plain_get(q) {
        let kv = r.kvs.first();
        ResultJson::Get {
            value: kv.map(|kv| Bytes(&kv.value)),
            mod_revision: kv.map(|kv| kv.mod_revision),
            version: kv.map_or(0, |kv| kv.version),
            revision: r.revision,
        }
    } else {
        ResultJson::Range {
            entries: r
                .kvs
                .iter()
                .map(|kv| (Bytes(&kv.key), Bytes(&kv.value), kv.mod_revision))
                .collect(),
            revision: r.revision,
            count: r.count,
            more: r.more,
        }
    }
}

fn del_result<'a>(d: &DeleteRangeRequest, r: &'a DeleteRangeResponse) -> ResultJson<'a> {
    ResultJson::Del {
        deleted: r.deleted,
        revision: r.revision,
        prev: d.prev_kv.then(|| {
            r.prev_kvs
                .iter()
                .map(|kv| (Bytes(&kv.key), Bytes(&kv.value)))
                .collect()
        }),
    }
}

fn response_result<'a>(op: &RequestOp, r: &'a ResponseOp) -> ResultJson<'a> {
    match (op, r) {
        (RequestOp::Put(p), ResponseOp::Put(r)) => put_result(p, r),
        (RequestOp::Range(q), ResponseOp::Range(r)) => range_result(q, r),
        (RequestOp::DeleteRange(d), ResponseOp::DeleteRange(r)) => del_result(d, r),
        _ => ResultJson::Mismatch {
            mismatched_reply: "response",
        },
    }
}

fn result_of<'a>(cmd: &KvCommand, reply: &'a KvReply) -> ResultJson<'a> {
    match (cmd, reply) {
        (KvCommand::Put(p), KvReply::Put(r)) => put_result(p, r),
        (KvCommand::Range(q), KvReply::Range(r)) => range_result(q, r),
        (KvCommand::DeleteRange(d), KvReply::DeleteRange(r)) => del_result(d, r),
        (KvCommand::Compact(_), KvReply::Compact(r)) => ResultJson::Compact {
            revision: r.revision,
            compacted: r.compacted,
            error: r.error.as_deref(),
        },
        (KvCommand::Events(_), KvReply::Events(r)) => ResultJson::Events {
            events: r.events.len() as u64,
            compacted: r.compacted,
            revision: r.revision,
        },
        (KvCommand::Txn(t), KvReply::Txn(r)) => {
            let branch = if r.succeeded { &t.success } else { &t.failure };
            ResultJson::Txn {
                succeeded: r.succeeded,
                results: branch
                    .iter()
                    .zip(&r.responses)
                    .map(|(op, resp)| response_result(op, resp))
                    .collect(),
                revision: r.revision,
            }
        }
        (_, KvReply::Error(e)) => ResultJson::Error {
            error: e.error.etcd_message(),
            revision: e.revision,
        },
        (KvCommand::LeaseGrant(_), KvReply::LeaseGrant(r)) => ResultJson::Lease {
            id: r.id,
            ttl: r.ttl,
            revision: r.revision,
        },
        (KvCommand::LeaseRevoke(l) | KvCommand::LeaseExpire(l), KvReply::LeaseRevoke(r)) => {
            ResultJson::Lease {
                id: l.id,
                ttl: 0,
                revision: r.revision,
            }
        }
        (KvCommand::LeaseKeepAlive(_), KvReply::LeaseKeepAlive(r)) => ResultJson::Lease {
            id: r.id,
            ttl: r.ttl,
            revision: r.revision,
        },
        (KvCommand::LeaseTimeToLive(_), KvReply::LeaseTimeToLive(r)) => ResultJson::Lease {
            id: r.id,
            ttl: r.ttl,
            revision: r.revision,
        },
        (KvCommand::Hash(_), KvReply::Hash(r)) => ResultJson::Compact {
            revision: r.revision,
            compacted: r.compact_revision,
            error: None,
        },
        (KvCommand::LeaseLeases, KvReply::LeaseLeases(r)) => ResultJson::Leases {
            ids: r.ids.clone(),
            revision: r.revision,
        },
        (KvCommand::Batch(cmds), KvReply::Batch(rs)) if cmds.len() == rs.len() => {
            ResultJson::Batch {
                batch: cmds.iter().zip(rs).map(|(c, r)| result_of(c, r)).collect(),
            }
        }
        _ => ResultJson::Mismatch {
            mismatched_reply: "reply",
        },
    }
}

#[derive(Serialize)]
struct Line<'a> {
    service: &'static str,
    client: u64,
    #[serde(flatten)]
    op: OpJson<'a>,
    call_ns: u64,
    ret_ns: u64,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<ResultJson<'a>>,
}

fn line<'a>(
    client: u64,
    cmd: &'a KvCommand,
    call_ns: u64,
    ret_ns: u64,
    outcome: Outcome<'a>,
) -> Line<'a> {
    let (status, result) = match outcome {
        Outcome::Ok(reply) => ("ok", Some(result_of(cmd, reply))),
        Outcome::Fail => ("fail", None),
        Outcome::Info => ("info", None),
    };
    Line {
        service: "kv",
        client,
        op: op_json(cmd),
        call_ns,
        ret_ns,
        status,
        result,
    }
}

/// The history object of one operation: `client` issued `cmd` at `call_ns`, and it
/// ended at `ret_ns` with `outcome` (see the module doc for the format).
pub fn event_json(
    client: u64,
    cmd: &KvCommand,
    call_ns: u64,
    ret_ns: u64,
    outcome: Outcome<'_>,
) -> Value {
    serde_json::to_value(line(client, cmd, call_ns, ret_ns, outcome))
        .expect("history lines serialize")
}

/// [`event_json`] as one line of text (no newline), fields in the documented order.
pub fn event_line(
    client: u64,
    cmd: &KvCommand,
    call_ns: u64,
    ret_ns: u64,
    outcome: Outcome<'_>,
) -> String {
    serde_json::to_string(&line(client, cmd, call_ns, ret_ns, outcome))
        .expect("history lines serialize")
}

/// The `op` fields of `cmd` with its `result` (for tools that print one reply).
pub fn result_json(cmd: &KvCommand, reply: &KvReply) -> Value {
    let mut v = serde_json::to_value(op_json(cmd)).expect("operations serialize");
    let r = serde_json::to_value(result_of(cmd, reply)).expect("results serialize");
    if let Value::Object(m) = &mut v {
        m.insert("result".into(), r);
    }
    v
}

// ---------------------------------------------------------------------------------------
// Reading operations back.

fn field<'v>(v: &'v Value, name: &str, op: &str) -> Result<&'v Value, String> {
    v.get(name)
        .ok_or_else(|| format!("{op} needs field `{name}`"))
}

fn bytes_field(v: &Value, name: &str, op: &str) -> Result<Vec<u8>, String> {
    bytes_from_json(field(v, name, op)?).map_err(|e| format!("{op} `{name}`: {e}"))
}

fn flag(v: &Value, name: &str) -> Result<bool, String> {
    match v.get(name) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(format!("`{name}` must be a boolean, not {other}")),
    }
}

fn request_from_json(v: &Value) -> Result<RequestOp, String> {
    let op = v
        .get("op")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{v} has no `op`"))?;
    Ok(match op {
        "put" => RequestOp::Put(PutRequest {
            key: bytes_field(v, "key", op)?,
            value: bytes_field(v, "value", op)?,
            prev_kv: flag(v, "prev_kv")?,
            lease: 0,
        }),
        "get" => RequestOp::Range(RangeRequest::get(bytes_field(v, "key", op)?)),
        "range" => RequestOp::Range(RangeRequest {
            key: bytes_field(v, "key", op)?,
            end: bytes_field(v, "end", op)?,
            limit: match v.get("limit") {
                None => 0,
                Some(l) => l
                    .as_u64()
                    .ok_or_else(|| format!("range `limit` {l} is not a count"))?,
            },
            keys_only: flag(v, "keys_only")?,
            count_only: flag(v, "count_only")?,
            revision: 0,
        }),
        "del" => RequestOp::DeleteRange(DeleteRangeRequest {
            key: bytes_field(v, "key", op)?,
            end: match v.get("end") {
                None => Vec::new(),
                Some(e) => bytes_from_json(e).map_err(|e| format!("del `end`: {e}"))?,
            },
            prev_kv: flag(v, "prev_kv")?,
        }),
        other => return Err(format!("unknown kv op `{other}`")),
    })
}

fn compare_from_json(v: &Value) -> Result<Compare, String> {
    let key = bytes_field(v, "key", "compare")?;
    let op = match field(v, "op", "compare")?.as_str() {
        Some("=") => CompareOp::Equal,
        Some("!=") => CompareOp::NotEqual,
        Some("<") => CompareOp::Less,
        Some(">") => CompareOp::Greater,
        _ => return Err(format!("compare `op` of {v} is not =, !=, < or >")),
    };
    let value = field(v, "value", "compare")?;
    let number = || {
        value
            .as_u64()
            .ok_or_else(|| format!("compare value {value} is not a number"))
    };
    let target = match field(v, "target", "compare")?.as_str() {
        Some("value") => CompareTarget::Value(bytes_from_json(value)?),
        Some("version") => CompareTarget::Version(number()?),
        Some("mod") => CompareTarget::ModRevision(number()?),
        Some("create") => CompareTarget::CreateRevision(number()?),
        _ => {
            return Err(format!(
                "compare `target` of {v} is not value, version, mod or create"
            ))
        }
    };
    Ok(Compare { key, op, target })
}

fn list<'v>(v: &'v Value, name: &str) -> Result<&'v Vec<Value>, String> {
    field(v, name, "txn")?
        .as_array()
        .ok_or_else(|| format!("txn `{name}` must be a list"))
}

/// The command of a history object (the inverse of the `op` part of [`event_json`]).
pub fn command_from_json(v: &Value) -> Result<KvCommand, String> {
    if v.get("op").and_then(Value::as_str) == Some("batch") {
        return Ok(KvCommand::Batch(
            field(v, "ops", "batch")?
                .as_array()
                .ok_or_else(|| "batch `ops` must be a list".to_string())?
                .iter()
                .map(command_from_json)
                .collect::<Result<_, _>>()?,
        ));
    }
    if v.get("op").and_then(Value::as_str) == Some("txn") {
        return Ok(KvCommand::Txn(TxnRequest {
            compare: list(v, "compare")?
                .iter()
                .map(compare_from_json)
                .collect::<Result<_, _>>()?,
            success: list(v, "then")?
                .iter()
                .map(request_from_json)
                .collect::<Result<_, _>>()?,
            failure: list(v, "else")?
                .iter()
                .map(request_from_json)
                .collect::<Result<_, _>>()?,
        }));
    }
    Ok(match request_from_json(v)? {
        RequestOp::Put(p) => KvCommand::Put(p),
        RequestOp::Range(r) => KvCommand::Range(r),
        RequestOp::DeleteRange(d) => KvCommand::DeleteRange(d),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KvStore;

    #[test]
    fn exact_lines() {
        let mut s = KvStore::new();
        let put = KvCommand::put("a", "1");
        let (r, _) = s.execute(&put);
        assert_eq!(
            event_line(3, &put, 10, 25, Outcome::Ok(&r)),
            r#"{"service":"kv","client":3,"op":"put","key":"a","value":"1","call_ns":10,"ret_ns":25,"status":"ok","result":{"revision":2}}"#
        );
        let get = KvCommand::get(vec![0xff, b'a']);
        let (r, _) = s.execute(&get);
        assert_eq!(
            event_line(3, &get, 30, 40, Outcome::Ok(&r)),
            r#"{"service":"kv","client":3,"op":"get","key":{"hex":"ff61"},"call_ns":30,"ret_ns":40,"status":"ok","result":{"value":null,"mod_revision":null,"version":0,"revision":2}}"#
        );
        let get = KvCommand::get("a");
        let (r, _) = s.execute(&get);
        assert_eq!(
            event_json(1, &get, 0, 1, Outcome::Ok(&r))["result"],
            serde_json::json!({"value":"1","mod_revision":2,"version":1,"revision":2})
        );
        let del = KvCommand::delete_range("a", "\0");
        assert_eq!(
            event_line(4, &del, 50, 60, Outcome::Info),
            r#"{"service":"kv","client":4,"op":"del","key":"a","end":"\u0000","call_ns":50,"ret_ns":60,"status":"info"}"#
        );
        let (r, _) = s.execute(&del);
        assert_eq!(
            result_json(&del, &r)["result"],
            serde_json::json!({"deleted":1,"revision":3})
        );
        let range = KvCommand::prefix("a");
        let (r, _) = s.execute(&range);
        assert_eq!(
            result_json(&range, &r),
            serde_json::json!({"op":"range","key":"a","end":"b","limit":0,
                "result":{"entries":[],"revision":3,"count":0,"more":false}})
        );
    }

    #[test]
    fn transactions_record_the_branch_that_ran() {
        let mut s = KvStore::new();
        let txn = KvCommand::Txn(TxnRequest {
            compare: vec![Compare {
                key: b"k".to_vec(),
                op: CompareOp::Equal,
                target: CompareTarget::CreateRevision(0),
            }],
            success: vec![
                RequestOp::Put(PutRequest {
                    key: b"k".to_vec(),
                    value: vec![0xc3],
                    prev_kv: true,
                    lease: 0,
                }),
                RequestOp::Range(RangeRequest::get("k")),
            ],
            failure: vec![RequestOp::DeleteRange(DeleteRangeRequest {
                key: b"k".to_vec(),
                end: vec![],
                prev_kv: true,
            })],
        });
        let (r, _) = s.execute(&txn);
        let v = event_json(7, &txn, 1, 2, Outcome::Ok(&r));
        assert_eq!(
            v["compare"],
            serde_json::json!([{"key":"k","target":"create","op":"=","value":0}])
        );
        assert_eq!(
            v["result"],
            serde_json::json!({"succeeded":true,"results":[
                {"revision":2,"prev":null},
                {"value":{"hex":"c3"},"mod_revision":2,"version":1,"revision":2}
            ],"revision":2})
        );
        let (r, _) = s.execute(&txn);
        let v = event_json(7, &txn, 1, 2, Outcome::Ok(&r));
        assert_eq!(
            v["result"],
            serde_json::json!({"succeeded":false,"results":[
                {"deleted":1,"revision":3,"prev":[["k",{"hex":"c3"}]]}
            ],"revision":3})
        );
        assert_eq!(command_from_json(&v).unwrap(), txn);
    }

    #[test]
    fn byte_strings_round_trip() {
        for b in [&b""[..], b"plain", b"\xff\x00\xfe", "é".as_bytes(), b"\0"] {
            assert_eq!(bytes_from_json(&bytes_json(b)).unwrap(), b);
        }
        assert!(bytes_from_json(&serde_json::json!({"hex":"abc"})).is_err());
        assert!(bytes_from_json(&serde_json::json!({"hex":"zz"})).is_err());
        assert!(bytes_from_json(&serde_json::json!(7)).is_err());
    }
}
