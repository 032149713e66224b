//! Key-value histories: DESIGN.md §2's JSON lines with `service: "kv"`, read and
//! written independently of the `partita-kv` crate (a checker that shared the
//! service's code would share its bugs).
//!
//! ```text
//! {"service":"kv","client":3,"op":"put","key":"a","value":"1","call_ns":10,"ret_ns":25,"status":"ok","result":{"revision":2,"prev":null}}
//! ```
//!
//! Keys and values are JSON strings (their UTF-8 bytes) or `{"hex":"..."}`.
//!
//! | `op` | fields | `result` (status `ok` only) |
//! | --- | --- | --- |
//! | `put` | `key`, `value`, `prev_kv`? | `{"revision":R,"prev"?:V\|null}` |
//! | `get` | `key` | `{"value":V\|null,"mod_revision":R\|null,"version":N,"revision"?:R}` |
//! | `del` | `key`, `end`?, `prev_kv`? | `{"deleted":N,"revision":R,"prev"?:[[k,v],...]}` |
//! | `range` | `key`, `end`, `limit`?, `keys_only`?, `count_only`? | `{"entries":[[k,v,mod_revision],...],"revision":R,"count"?:N,"more"?:bool}` |
//! | `txn` | `compare`, `then`, `else` | `{"succeeded":bool,"results":[...],"revision"?:R}` |
//!
//! Fields marked `?` may be absent: DESIGN.md's shapes lack them (a get or a txn
//! without `revision` is checked all the same, with less to pin it down), and the
//! checker compares only what was recorded. `end` follows etcd: absent or `""` for one
//! key, `"\u0000"` for every key from `key` on, otherwise `[key, end)`. A compare is
//! `{"key","target":"value"|"version"|"mod"|"create","op":"="|"!="|"<"|">","value"}`;
//! `then` and `else` hold put, get, del and range operations; `results` has one result
//! per operation of the branch that ran. A line that breaks these rules is refused with
//! its line number; fields the format does not know are ignored (annotations).

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::history::{Error, Status};

pub type Bytes = Vec<u8>;

/// What a compare looks at, with its operand.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Value(Bytes),
    Version(u64),
    Mod(u64),
    Create(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Gt,
}

impl CmpOp {
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Gt => ">",
        }
    }
}

/// `key`'s `target` `op` operand.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Compare {
    pub key: Bytes,
    pub target: Target,
    pub op: CmpOp,
}

/// An operation of a key-value history.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KvOp {
    Put {
        key: Bytes,
        value: Bytes,
        prev_kv: bool,
    },
    Get {
        key: Bytes,
    },
    /// `end`: `None` for the single key (etcd's conventions otherwise).
    Del {
        key: Bytes,
        end: Option<Bytes>,
        prev_kv: bool,
    },
    Range {
        key: Bytes,
        end: Bytes,
        limit: u64,
        keys_only: bool,
        count_only: bool,
    },
    /// `then` and `otherwise` hold no transactions.
    Txn {
        compare: Vec<Compare>,
        then: Vec<KvOp>,
        otherwise: Vec<KvOp>,
    },
}

impl KvOp {
    pub fn name(&self) -> &'static str {
        match self {
            KvOp::Put { .. } => "put",
            KvOp::Get { .. } => "get",
            KvOp::Del { .. } => "del",
            KvOp::Range { .. } => "range",
            KvOp::Txn { .. } => "txn",
        }
    }

    /// Whether the operation may change the store (it puts or deletes, possibly).
    pub fn may_write(&self) -> bool {
        match self {
            KvOp::Put { .. } | KvOp::Del { .. } => true,
            KvOp::Get { .. } | KvOp::Range { .. } => false,
            KvOp::Txn {
                then, otherwise, ..
            } => then.iter().chain(otherwise).any(KvOp::may_write),
        }
    }

    /// Whether the operation may leave `key` holding `value` (a put of exactly that,
    /// possibly in a transaction branch).
    pub(crate) fn may_put(&self, key: &[u8], value: &[u8]) -> bool {
        match self {
            KvOp::Put {
                key: k, value: v, ..
            } => k == key && v == value,
            KvOp::Txn {
                then, otherwise, ..
            } => then.iter().chain(otherwise).any(|o| o.may_put(key, value)),
            _ => false,
        }
    }
}

/// A result as recorded. `None` in an optional field means "not recorded": the checker
/// then does not compare it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvResult {
    Put {
        revision: u64,
        /// `Some(None)`: the key was absent.
        prev: Option<Option<Bytes>>,
    },
    Get {
        value: Option<Bytes>,
        mod_revision: Option<u64>,
        version: u64,
        revision: Option<u64>,
    },
    Del {
        deleted: u64,
        revision: u64,
        prev: Option<Vec<(Bytes, Bytes)>>,
    },
    Range {
        /// `(key, value, mod_revision)` in key order.
        entries: Vec<(Bytes, Bytes, u64)>,
        revision: u64,
        count: Option<u64>,
        more: Option<bool>,
    },
    Txn {
        succeeded: bool,
        results: Vec<KvResult>,
        revision: Option<u64>,
    },
}

impl KvResult {
    /// Whether this (observed) result agrees with `model` (the model's, with every field
    /// set) on every field that was recorded.
    pub fn agrees_with(&self, model: &KvResult) -> bool {
        fn opt<T: PartialEq>(seen: &Option<T>, want: &Option<T>) -> bool {
            seen.is_none() || seen == want
        }
        match (self, model) {
            (
                KvResult::Put { revision, prev },
                KvResult::Put {
                    revision: r,
                    prev: p,
                },
            ) => revision == r && opt(prev, p),
            (
                KvResult::Get {
                    value,
                    mod_revision,
                    version,
                    revision,
                },
                KvResult::Get {
                    value: v,
                    mod_revision: m,
                    version: n,
                    revision: r,
                },
            ) => value == v && mod_revision == m && version == n && opt(revision, r),
            (
                KvResult::Del {
                    deleted,
                    revision,
                    prev,
                },
                KvResult::Del {
                    deleted: d,
                    revision: r,
                    prev: p,
                },
            ) => deleted == d && revision == r && opt(prev, p),
            (
                KvResult::Range {
                    entries,
                    revision,
                    count,
                    more,
                },
                KvResult::Range {
                    entries: e,
                    revision: r,
                    count: c,
                    more: m,
                },
            ) => entries == e && revision == r && opt(count, c) && opt(more, m),
            (
                KvResult::Txn {
                    succeeded,
                    results,
                    revision,
                },
                KvResult::Txn {
                    succeeded: s,
                    results: rs,
                    revision: r,
                },
            ) => {
                succeeded == s
                    && results.len() == rs.len()
                    && results.iter().zip(rs).all(|(a, b)| a.agrees_with(b))
                    && opt(revision, r)
            }
            _ => false,
        }
    }

    /// Every `(key, mod_revision)` the result shows.
    pub(crate) fn observed_mods(&self, op: &KvOp, out: &mut Vec<(Bytes, u64)>) {
        match (op, self) {
            (
                KvOp::Get { key },
                KvResult::Get {
                    mod_revision: Some(m),
                    ..
                },
            ) => out.push((key.clone(), *m)),
            (_, KvResult::Range { entries, .. }) => {
                out.extend(entries.iter().map(|(k, _, m)| (k.clone(), *m)))
            }
            (
                KvOp::Txn {
                    then, otherwise, ..
                },
                KvResult::Txn {
                    succeeded, results, ..
                },
            ) => {
                let branch = if *succeeded { then } else { otherwise };
                for (o, r) in branch.iter().zip(results) {
                    r.observed_mods(o, out);
                }
            }
            _ => {}
        }
    }
}

/// One operation of a key-value history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvEvent {
    pub client: u64,
    pub op: KvOp,
    pub call_ns: u64,
    pub ret_ns: u64,
    pub status: Status,
    /// Present exactly when `status` is `ok`.
    pub result: Option<KvResult>,
}

impl KvEvent {
    /// One-line account for reports.
    pub fn describe(&self) -> String {
        let outcome = match (&self.status, &self.result) {
            (Status::Ok, Some(r)) => format!("returned {}", fmt_result(r)),
            (Status::Ok, None) => "returned nothing".to_string(),
            (Status::Fail, _) => "failed".to_string(),
            (Status::Info, _) => "had an unknown outcome".to_string(),
        };
        format!(
            "client {} {} [call {} ns, ret {} ns] {}",
            self.client,
            fmt_op(&self.op),
            self.call_ns,
            self.ret_ns,
            outcome
        )
    }
}

// ---------------------------------------------------------------------------------------
// Rendering for reports.

/// A byte string for reports: quoted text when printable, else hex; long ones cut.
pub fn fmt_bytes(b: &[u8]) -> String {
    const SHOWN: usize = 24;
    let text = std::str::from_utf8(b)
        .ok()
        .filter(|s| s.chars().all(|c| !c.is_control()));
    let full = match text {
        Some(s) => format!("{s:?}"),
        None => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!("0x{hex}")
        }
    };
    if full.chars().count() <= SHOWN {
        full
    } else {
        let cut: String = full.chars().take(SHOWN).collect();
        format!("{cut}...({} bytes)", b.len())
    }
}

fn fmt_end(end: &[u8]) -> String {
    match end {
        [] => String::new(),
        [0] => "..".to_string(),
        e => format!("..{}", fmt_bytes(e)),
    }
}

/// Compact rendering of an operation, e.g. `put("a", "1")` or `range("a".."c", limit 2)`.
pub fn fmt_op(op: &KvOp) -> String {
    match op {
        KvOp::Put { key, value, .. } => format!("put({}, {})", fmt_bytes(key), fmt_bytes(value)),
        KvOp::Get { key } => format!("get({})", fmt_bytes(key)),
        KvOp::Del { key, end, .. } => format!(
            "del({}{})",
            fmt_bytes(key),
            fmt_end(end.as_deref().unwrap_or_default())
        ),
        KvOp::Range {
            key,
            end,
            limit,
            keys_only,
            count_only,
        } => {
            let mut s = format!("range({}{}", fmt_bytes(key), fmt_end(end));
            if *limit > 0 {
                s += &format!(", limit {limit}");
            }
            if *keys_only {
                s += ", keys only";
            }
            if *count_only {
                s += ", count only";
            }
            s + ")"
        }
        KvOp::Txn {
            compare,
            then,
            otherwise,
        } => {
            let cs: Vec<String> = compare
                .iter()
                .map(|c| {
                    let (what, operand) = match &c.target {
                        Target::Value(v) => ("value", fmt_bytes(v)),
                        Target::Version(n) => ("version", n.to_string()),
                        Target::Mod(n) => ("mod", n.to_string()),
                        Target::Create(n) => ("create", n.to_string()),
                    };
                    format!("{what}({}) {} {operand}", fmt_bytes(&c.key), c.op.symbol())
                })
                .collect();
            let list = |ops: &[KvOp]| ops.iter().map(fmt_op).collect::<Vec<_>>().join(", ");
            format!(
                "txn(if {} then [{}] else [{}])",
                if cs.is_empty() {
                    "true".to_string()
                } else {
                    cs.join(" and ")
                },
                list(then),
                list(otherwise)
            )
        }
    }
}

/// Compact rendering of a result, e.g. `value="1" mod_revision=2 version=1 revision=3`.
pub fn fmt_result(r: &KvResult) -> String {
    let opt = |v: Option<u64>| v.map_or("null".to_string(), |v| v.to_string());
    match r {
        KvResult::Put { revision, prev } => match prev {
            None => format!("revision={revision}"),
            Some(p) => format!(
                "revision={revision} prev={}",
                p.as_deref().map_or("null".to_string(), fmt_bytes)
            ),
        },
        KvResult::Get {
            value,
            mod_revision,
            version,
            revision,
        } => {
            let mut s = format!(
                "value={} mod_revision={} version={version}",
                value.as_deref().map_or("null".to_string(), fmt_bytes),
                opt(*mod_revision)
            );
            if let Some(r) = revision {
                s += &format!(" revision={r}");
            }
            s
        }
        KvResult::Del {
            deleted,
            revision,
            prev,
        } => {
            let mut s = format!("deleted={deleted} revision={revision}");
            if let Some(p) = prev {
                let ps: Vec<String> = p
                    .iter()
                    .map(|(k, v)| format!("({},{})", fmt_bytes(k), fmt_bytes(v)))
                    .collect();
                s += &format!(" prev=[{}]", ps.join(", "));
            }
            s
        }
        KvResult::Range {
            entries,
            revision,
            count,
            more,
        } => {
            const SHOWN: usize = 6;
            let show = |es: &[(Bytes, Bytes, u64)]| -> Vec<String> {
                es.iter()
                    .map(|(k, v, m)| format!("({},{},@{m})", fmt_bytes(k), fmt_bytes(v)))
                    .collect()
            };
            let list = if entries.len() <= SHOWN {
                show(entries).join(", ")
            } else {
                format!(
                    "{}, ... {} more ..., {}",
                    show(&entries[..SHOWN / 2]).join(", "),
                    entries.len() - SHOWN,
                    show(&entries[entries.len() - SHOWN / 2..]).join(", ")
                )
            };
            let mut s = format!("entries=[{list}] revision={revision}");
            if let Some(c) = count {
                s += &format!(" count={c}");
            }
            if let Some(m) = more {
                s += &format!(" more={m}");
            }
            s
        }
        KvResult::Txn {
            succeeded,
            results,
            revision,
        } => {
            let rs: Vec<String> = results
                .iter()
                .map(|r| format!("{{{}}}", fmt_result(r)))
                .collect();
            let mut s = format!("succeeded={succeeded} results=[{}]", rs.join(", "));
            if let Some(r) = revision {
                s += &format!(" revision={r}");
            }
            s
        }
    }
}

// ---------------------------------------------------------------------------------------
// Writing.

/// The JSON form of a byte string.
pub fn bytes_to_json(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => Value::String(s.to_string()),
        Err(_) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            json!({ "hex": hex })
        }
    }
}

fn op_fields(op: &KvOp, m: &mut Map<String, Value>) {
    m.insert("op".into(), op.name().into());
    match op {
        KvOp::Put {
            key,
            value,
            prev_kv,
        } => {
            m.insert("key".into(), bytes_to_json(key));
            m.insert("value".into(), bytes_to_json(value));
            if *prev_kv {
                m.insert("prev_kv".into(), true.into());
            }
        }
        KvOp::Get { key } => {
            m.insert("key".into(), bytes_to_json(key));
        }
        KvOp::Del { key, end, prev_kv } => {
            m.insert("key".into(), bytes_to_json(key));
            if let Some(e) = end {
                m.insert("end".into(), bytes_to_json(e));
            }
            if *prev_kv {
                m.insert("prev_kv".into(), true.into());
            }
        }
        KvOp::Range {
            key,
            end,
            limit,
            keys_only,
            count_only,
        } => {
            m.insert("key".into(), bytes_to_json(key));
            m.insert("end".into(), bytes_to_json(end));
            m.insert("limit".into(), (*limit).into());
            if *keys_only {
                m.insert("keys_only".into(), true.into());
            }
            if *count_only {
                m.insert("count_only".into(), true.into());
            }
        }
        KvOp::Txn {
            compare,
            then,
            otherwise,
        } => {
            let cs: Vec<Value> = compare
                .iter()
                .map(|c| {
                    let (target, value) = match &c.target {
                        Target::Value(v) => ("value", bytes_to_json(v)),
                        Target::Version(n) => ("version", (*n).into()),
                        Target::Mod(n) => ("mod", (*n).into()),
                        Target::Create(n) => ("create", (*n).into()),
                    };
                    json!({"key": bytes_to_json(&c.key), "target": target,
                           "op": c.op.symbol(), "value": value})
                })
                .collect();
            let list = |ops: &[KvOp]| -> Vec<Value> {
                ops.iter()
                    .map(|o| {
                        let mut m = Map::new();
                        op_fields(o, &mut m);
                        Value::Object(m)
                    })
                    .collect()
            };
            m.insert("compare".into(), cs.into());
            m.insert("then".into(), list(then).into());
            m.insert("else".into(), list(otherwise).into());
        }
    }
}

fn result_to_json(r: &KvResult) -> Value {
    let mut m = Map::new();
    match r {
        KvResult::Put { revision, prev } => {
            m.insert("revision".into(), (*revision).into());
            if let Some(p) = prev {
                m.insert(
                    "prev".into(),
                    p.as_deref().map_or(Value::Null, bytes_to_json),
                );
            }
        }
        KvResult::Get {
            value,
            mod_revision,
            version,
            revision,
        } => {
            m.insert(
                "value".into(),
                value.as_deref().map_or(Value::Null, bytes_to_json),
            );
            m.insert("mod_revision".into(), json!(mod_revision));
            m.insert("version".into(), (*version).into());
            if let Some(r) = revision {
                m.insert("revision".into(), (*r).into());
            }
        }
        KvResult::Del {
            deleted,
            revision,
            prev,
        } => {
            m.insert("deleted".into(), (*deleted).into());
            m.insert("revision".into(), (*revision).into());
            if let Some(p) = prev {
                let ps: Vec<Value> = p
                    .iter()
                    .map(|(k, v)| json!([bytes_to_json(k), bytes_to_json(v)]))
                    .collect();
                m.insert("prev".into(), ps.into());
            }
        }
        KvResult::Range {
            entries,
            revision,
            count,
            more,
        } => {
            let es: Vec<Value> = entries
                .iter()
                .map(|(k, v, r)| json!([bytes_to_json(k), bytes_to_json(v), r]))
                .collect();
            m.insert("entries".into(), es.into());
            m.insert("revision".into(), (*revision).into());
            if let Some(c) = count {
                m.insert("count".into(), (*c).into());
            }
            if let Some(x) = more {
                m.insert("more".into(), (*x).into());
            }
        }
        KvResult::Txn {
            succeeded,
            results,
            revision,
        } => {
            m.insert("succeeded".into(), (*succeeded).into());
            m.insert(
                "results".into(),
                results
                    .iter()
                    .map(result_to_json)
                    .collect::<Vec<_>>()
                    .into(),
            );
            if let Some(r) = revision {
                m.insert("revision".into(), (*r).into());
            }
        }
    }
    Value::Object(m)
}

impl KvEvent {
    /// The event as one history object.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("service".into(), "kv".into());
        m.insert("client".into(), self.client.into());
        op_fields(&self.op, &mut m);
        m.insert("call_ns".into(), self.call_ns.into());
        m.insert("ret_ns".into(), self.ret_ns.into());
        m.insert("status".into(), self.status.to_string().into());
        if let Some(r) = &self.result {
            m.insert("result".into(), result_to_json(r));
        }
        Value::Object(m)
    }
}

// ---------------------------------------------------------------------------------------
// Reading.

/// The bytes of a history byte string.
pub fn bytes_from_json(v: &Value) -> Result<Bytes, String> {
    match v {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Object(m) if m.len() == 1 && m.contains_key("hex") => {
            let hex = m["hex"]
                .as_str()
                .ok_or_else(|| format!("{v} is not a byte string"))?;
            if hex.len() % 2 != 0 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(format!("{hex:?} is not an even number of hex digits"));
            }
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|e| e.to_string()))
                .collect()
        }
        other => Err(format!(
            "{other} is not a byte string (a string or {{\"hex\":\"...\"}})"
        )),
    }
}

fn get<'v>(v: &'v Value, name: &str, what: &str) -> Result<&'v Value, String> {
    v.get(name)
        .ok_or_else(|| format!("{what} needs field `{name}`"))
}

fn bytes_at(v: &Value, name: &str, what: &str) -> Result<Bytes, String> {
    bytes_from_json(get(v, name, what)?).map_err(|e| format!("{what} `{name}`: {e}"))
}

fn u64_of(v: &Value, what: &str) -> Result<u64, String> {
    v.as_u64()
        .ok_or_else(|| format!("{what} must be a non-negative integer, not {v}"))
}

fn u64_at(v: &Value, name: &str, what: &str) -> Result<u64, String> {
    u64_of(get(v, name, what)?, &format!("{what} `{name}`"))
}

fn bool_of(v: &Value, what: &str) -> Result<bool, String> {
    v.as_bool()
        .ok_or_else(|| format!("{what} must be a boolean, not {v}"))
}

fn flag(v: &Value, name: &str, what: &str) -> Result<bool, String> {
    v.get(name)
        .map_or(Ok(false), |f| bool_of(f, &format!("{what} `{name}`")))
}

fn opt_u64(v: &Value, name: &str, what: &str) -> Result<Option<u64>, String> {
    match v.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => u64_of(x, &format!("{what} `{name}`")).map(Some),
    }
}

fn array<'v>(v: &'v Value, name: &str, what: &str) -> Result<&'v Vec<Value>, String> {
    get(v, name, what)?
        .as_array()
        .ok_or_else(|| format!("{what} `{name}` must be a list"))
}

/// The fields operations take; one an operation does not take is an error (a recorder
/// that writes `value` on a get is confused, and guessing would hide it).
const OP_FIELDS: [&str; 10] = [
    "key",
    "value",
    "end",
    "limit",
    "keys_only",
    "count_only",
    "prev_kv",
    "compare",
    "then",
    "else",
];

fn op_from_json(v: &Value, nested: bool) -> Result<KvOp, String> {
    let name = get(v, "op", "an operation")?
        .as_str()
        .ok_or_else(|| "`op` must be a string".to_string())?;
    let takes: &[&str] = match name {
        "put" => &["key", "value", "prev_kv"],
        "get" => &["key"],
        "del" => &["key", "end", "prev_kv"],
        "range" => &["key", "end", "limit", "keys_only", "count_only"],
        "txn" if nested => return Err("a txn cannot hold a txn".into()),
        "txn" => &["compare", "then", "else"],
        other => return Err(format!("unknown kv op `{other}`")),
    };
    if let Some(f) = OP_FIELDS
        .iter()
        .find(|f| !takes.contains(f) && v.get(**f).is_some())
    {
        return Err(format!("{name} takes no field `{f}`"));
    }
    Ok(match name {
        "put" => KvOp::Put {
            key: bytes_at(v, "key", name)?,
            value: bytes_at(v, "value", name)?,
            prev_kv: flag(v, "prev_kv", name)?,
        },
        "get" => KvOp::Get {
            key: bytes_at(v, "key", name)?,
        },
        "del" => KvOp::Del {
            key: bytes_at(v, "key", name)?,
            end: match v.get("end") {
                None => None,
                Some(e) => Some(bytes_from_json(e).map_err(|e| format!("del `end`: {e}"))?)
                    .filter(|e| !e.is_empty()),
            },
            prev_kv: flag(v, "prev_kv", name)?,
        },
        "range" => KvOp::Range {
            key: bytes_at(v, "key", name)?,
            end: bytes_at(v, "end", name)?,
            limit: opt_u64(v, "limit", name)?.unwrap_or(0),
            keys_only: flag(v, "keys_only", name)?,
            count_only: flag(v, "count_only", name)?,
        },
        _ => {
            let mut compare = Vec::new();
            for (i, c) in array(v, "compare", name)?.iter().enumerate() {
                let what = format!("txn compare {i}");
                let value = get(c, "value", &what)?;
                let target = match get(c, "target", &what)?.as_str() {
                    Some("value") => Target::Value(bytes_from_json(value)?),
                    Some("version") => Target::Version(u64_of(value, &what)?),
                    Some("mod") => Target::Mod(u64_of(value, &what)?),
                    Some("create") => Target::Create(u64_of(value, &what)?),
                    _ => {
                        return Err(format!(
                            "{what}: `target` must be value, version, mod or create"
                        ))
                    }
                };
                let op = match get(c, "op", &what)?.as_str() {
                    Some("=") => CmpOp::Eq,
                    Some("!=") => CmpOp::Ne,
                    Some("<") => CmpOp::Lt,
                    Some(">") => CmpOp::Gt,
                    _ => return Err(format!("{what}: `op` must be =, !=, < or >")),
                };
                compare.push(Compare {
                    key: bytes_at(c, "key", &what)?,
                    target,
                    op,
                });
            }
            let branch = |name: &str| -> Result<Vec<KvOp>, String> {
                array(v, name, "txn")?
                    .iter()
                    .enumerate()
                    .map(|(i, o)| op_from_json(o, true).map_err(|e| format!("txn {name} {i}: {e}")))
                    .collect()
            };
            KvOp::Txn {
                compare,
                then: branch("then")?,
                otherwise: branch("else")?,
            }
        }
    })
}

fn result_from_json(op: &KvOp, v: &Value) -> Result<KvResult, String> {
    let what = format!("{} result", op.name());
    if !v.is_object() {
        return Err(format!("{what} must be an object, not {v}"));
    }
    Ok(match op {
        KvOp::Put { .. } => KvResult::Put {
            revision: u64_at(v, "revision", &what)?,
            prev: match v.get("prev") {
                None => None,
                Some(Value::Null) => Some(None),
                Some(p) => Some(Some(bytes_from_json(p)?)),
            },
        },
        KvOp::Get { .. } => KvResult::Get {
            value: match get(v, "value", &what)? {
                Value::Null => None,
                x => Some(bytes_from_json(x)?),
            },
            mod_revision: {
                get(v, "mod_revision", &what)?;
                opt_u64(v, "mod_revision", &what)?
            },
            version: u64_at(v, "version", &what)?,
            revision: opt_u64(v, "revision", &what)?,
        },
        KvOp::Del { .. } => KvResult::Del {
            deleted: u64_at(v, "deleted", &what)?,
            revision: u64_at(v, "revision", &what)?,
            prev: match v.get("prev") {
                None => None,
                Some(p) => {
                    let pairs = p
                        .as_array()
                        .ok_or_else(|| format!("{what} `prev` must be a list of [k,v]"))?;
                    let mut out = Vec::with_capacity(pairs.len());
                    for pair in pairs {
                        match pair.as_array().map(Vec::as_slice) {
                            Some([k, v]) => out.push((bytes_from_json(k)?, bytes_from_json(v)?)),
                            _ => return Err(format!("{what} `prev` entry {pair} is not [k,v]")),
                        }
                    }
                    Some(out)
                }
            },
        },
        KvOp::Range { .. } => {
            let mut entries = Vec::new();
            for e in array(v, "entries", &what)? {
                match e.as_array().map(Vec::as_slice) {
                    Some([k, val, m]) => entries.push((
                        bytes_from_json(k)?,
                        bytes_from_json(val)?,
                        u64_of(m, "an entry's mod revision")?,
                    )),
                    _ => return Err(format!("{what} entry {e} is not [k,v,mod_revision]")),
                }
            }
            KvResult::Range {
                entries,
                revision: u64_at(v, "revision", &what)?,
                count: opt_u64(v, "count", &what)?,
                more: match v.get("more") {
                    None => None,
                    Some(m) => Some(bool_of(m, "range result `more`")?),
                },
            }
        }
        KvOp::Txn {
            then, otherwise, ..
        } => {
            let succeeded = bool_of(get(v, "succeeded", &what)?, "txn `succeeded`")?;
            let branch = if succeeded { then } else { otherwise };
            let raw = array(v, "results", &what)?;
            if raw.len() != branch.len() {
                return Err(format!(
                    "txn result has {} results, but its {} branch has {} operations",
                    raw.len(),
                    if succeeded { "then" } else { "else" },
                    branch.len()
                ));
            }
            let results = branch
                .iter()
                .zip(raw)
                .map(|(o, r)| result_from_json(o, r))
                .collect::<Result<Vec<_>, _>>()?;
            KvResult::Txn {
                succeeded,
                results,
                revision: opt_u64(v, "revision", &what)?,
            }
        }
    })
}

impl KvEvent {
    /// Parse one history object (see the module doc for what is refused).
    pub fn from_json(v: &Value) -> Result<KvEvent, String> {
        match v.get("service").and_then(Value::as_str) {
            Some("kv") => {}
            Some(other) => return Err(format!("service `{other}` in a kv history")),
            None => return Err("a kv history needs `service: \"kv\"` on every line".into()),
        }
        let client = u64_at(v, "client", "an event")?;
        let call_ns = u64_at(v, "call_ns", "an event")?;
        let ret_ns = u64_at(v, "ret_ns", "an event")?;
        let status: Status = serde_json::from_value(get(v, "status", "an event")?.clone())
            .map_err(|e| format!("`status`: {e}"))?;
        let op = op_from_json(v, false)?;
        let result = match (status, v.get("result")) {
            (Status::Ok, None) => return Err("status ok needs a `result`".into()),
            (Status::Ok, Some(r)) => Some(result_from_json(&op, r)?),
            (_, Some(_)) => {
                return Err(format!(
                    "status {status} must not carry a `result` (only ok does)"
                ))
            }
            (_, None) => None,
        };
        if ret_ns < call_ns {
            return Err(format!("ret_ns {ret_ns} is before call_ns {call_ns}"));
        }
        Ok(KvEvent {
            client,
            op,
            call_ns,
            ret_ns,
            status,
            result,
        })
    }
}

/// Read a key-value history file. Blank lines are skipped; a malformed line is an error
/// naming its line number.
pub fn read_kv_history(path: impl AsRef<Path>) -> Result<Vec<KvEvent>, Error> {
    let path = path.as_ref();
    let what = path.display().to_string();
    let file = File::open(path).map_err(|source| Error::Io {
        what: what.clone(),
        source,
    })?;
    parse_kv_lines(BufReader::new(file), &what)
}

/// Read a key-value history from any reader (see [`read_kv_history`]).
pub fn read_kv_history_from(reader: impl Read) -> Result<Vec<KvEvent>, Error> {
    parse_kv_lines(BufReader::new(reader), "<input>")
}

fn parse_kv_lines(reader: impl BufRead, what: &str) -> Result<Vec<KvEvent>, Error> {
    let mut events = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|source| Error::Io {
            what: what.to_string(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let parse_error = |message: String| Error::Parse {
            what: what.to_string(),
            line: i + 1,
            message,
        };
        let v: Value = serde_json::from_str(&line).map_err(|e| parse_error(e.to_string()))?;
        events.push(KvEvent::from_json(&v).map_err(parse_error)?);
    }
    Ok(events)
}

impl fmt::Display for KvEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}
