//! `partita kv` for the key-value service: the verbs `put`, `get`, `range`, `del` and
//! `txn`, with keys and values as strings (or hex with `--hex`), and how replies are
//! printed.
//!
//! A transaction is written as flags: `--compare 'value(k) = v'` (targets `value`,
//! `version`, `create`, `mod`; operators `=`, `!=`, `<`, `>`; repeatable, all must
//! hold), `--then 'put k v'`, `--then 'get k [end]'`, `--then 'del k [end]'` (in order;
//! run when every compare holds) and `--else ...` (run otherwise).

use anyhow::{anyhow, bail};
use partita_kv::{
    Compare, CompareOp, CompareTarget, DeleteRangeRequest, KeyValue, KvCommand, KvReply,
    PutRequest, RangeRequest, RequestOp, ResponseOp, TxnRequest,
};

/// Turn a key or value argument into bytes: the string's UTF-8, or its hex digits.
pub fn bytes(what: &str, s: &str, hex: bool) -> anyhow::Result<Vec<u8>> {
    if !hex {
        return Ok(s.as_bytes().to_vec());
    }
    if !s.len().is_multiple_of(2) {
        bail!("{what} `{s}` is not hex: an odd number of digits");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16)
                .map_err(|_| anyhow!("{what} `{s}` is not hex (0-9, a-f)"))
        })
        .collect()
}

/// `put KEY VALUE [--lease ID]`.
pub fn put(
    key: &str,
    value: &str,
    prev_kv: bool,
    lease: i64,
    hex: bool,
) -> anyhow::Result<KvCommand> {
    Ok(KvCommand::Put(PutRequest {
        key: bytes("key", key, hex)?,
        value: bytes("value", value, hex)?,
        prev_kv,
        lease,
    }))
}

/// A lease id as etcdctl prints it: hex digits (without `0x`), positive.
pub fn lease_id(s: &str) -> Result<i64, String> {
    match i64::from_str_radix(s.trim_start_matches("0x"), 16) {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(format!(
            "`{s}` is not a lease id (a positive number in hex, as etcdctl prints it)"
        )),
    }
}

/// `lease grant TTL | revoke ID | keep-alive ID | ttl ID | list`.
pub fn lease(verb: &str, arg: Option<&str>) -> anyhow::Result<KvCommand> {
    let id = || -> anyhow::Result<i64> {
        let a = arg.ok_or_else(|| anyhow!("lease {verb} needs a lease id (hex)"))?;
        lease_id(a).map_err(|e| anyhow!(e))
    };
    Ok(match verb {
        "grant" => {
            let a = arg.ok_or_else(|| anyhow!("lease grant needs a TTL in seconds"))?;
            let ttl: i64 =
                a.parse().ok().filter(|t| *t > 0).ok_or_else(|| {
                    anyhow!("lease grant: `{a}` is not a TTL (whole seconds, > 0)")
                })?;
            KvCommand::lease_grant(0, ttl)
        }
        "revoke" => KvCommand::lease_revoke(id()?),
        "keep-alive" => KvCommand::lease_keep_alive(id()?),
        "ttl" => KvCommand::lease_time_to_live(id()?, true),
        "list" => KvCommand::LeaseLeases,
        other => bail!("unknown lease verb `{other}` (grant, revoke, keep-alive, ttl, list)"),
    })
}

/// `get KEY`.
pub fn get(key: &str, hex: bool) -> anyhow::Result<KvCommand> {
    Ok(KvCommand::Range(RangeRequest::get(bytes("key", key, hex)?)))
}

/// `range START END` (END exclusive; `--prefix` reads every key starting with START;
/// an END of `\0` every key from START).
pub fn range(
    start: &str,
    end: Option<&str>,
    prefix: bool,
    limit: u64,
    hex: bool,
) -> anyhow::Result<KvCommand> {
    let key = bytes("start", start, hex)?;
    let end = match (end, prefix) {
        (Some(_), true) => bail!("give END or --prefix, not both"),
        (None, true) => partita_kv::prefix_end(&key),
        (Some(e), false) => bytes("end", e, hex)?,
        (None, false) => bail!("range needs END (or --prefix)"),
    };
    Ok(KvCommand::Range(RangeRequest {
        limit,
        ..RangeRequest::new(key, end)
    }))
}

/// `del KEY [END]`.
pub fn del(key: &str, end: Option<&str>, prev_kv: bool, hex: bool) -> anyhow::Result<KvCommand> {
    Ok(KvCommand::DeleteRange(DeleteRangeRequest {
        key: bytes("key", key, hex)?,
        end: match end {
            Some(e) => bytes("end", e, hex)?,
            None => Vec::new(),
        },
        prev_kv,
    }))
}

/// One `--compare` condition: `TARGET(KEY) OP OPERAND`.
pub fn compare(text: &str, hex: bool) -> anyhow::Result<Compare> {
    let bad = |why: &str| {
        anyhow!("compare `{text}`: {why} (write e.g. `value(k) = v` or `version(k) > 2`)")
    };
    let open = text.find('(').ok_or_else(|| bad("no `(`"))?;
    let close = text.rfind(')').ok_or_else(|| bad("no `)`"))?;
    if close < open {
        return Err(bad("`)` before `(`"));
    }
    let target = text[..open].trim();
    let key = bytes("compare key", text[open + 1..close].trim(), hex)?;
    let rest = text[close + 1..].trim();
    let (op, operand) = ["!=", "=", "<", ">"]
        .iter()
        .find_map(|o| rest.strip_prefix(o).map(|r| (*o, r.trim())))
        .ok_or_else(|| bad("the operator must be =, !=, < or >"))?;
    let op = match op {
        "=" => CompareOp::Equal,
        "!=" => CompareOp::NotEqual,
        "<" => CompareOp::Less,
        _ => CompareOp::Greater,
    };
    let number = |what: &str| {
        operand
            .parse::<u64>()
            .map_err(|_| bad(&format!("{what} compares with a number, not `{operand}`")))
    };
    let target = match target {
        "value" => CompareTarget::Value(bytes("compare value", operand, hex)?),
        "version" => CompareTarget::Version(number("version")?),
        "create" => CompareTarget::CreateRevision(number("create")?),
        "mod" => CompareTarget::ModRevision(number("mod")?),
        t => {
            return Err(bad(&format!(
                "unknown target `{t}` (value, version, create, mod)"
            )))
        }
    };
    Ok(Compare { key, op, target })
}

/// One `--then`/`--else` operation: `put K V`, `get K [END]`, `del K [END]`.
pub fn request_op(text: &str, hex: bool) -> anyhow::Result<RequestOp> {
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        ["put", k, v] => Ok(RequestOp::Put(PutRequest {
            key: bytes("key", k, hex)?,
            value: bytes("value", v, hex)?,
            prev_kv: false,
            lease: 0,
        })),
        ["get", k] => Ok(RequestOp::Range(RangeRequest::get(bytes("key", k, hex)?))),
        ["get", k, e] => Ok(RequestOp::Range(RangeRequest::new(
            bytes("key", k, hex)?,
            bytes("end", e, hex)?,
        ))),
        ["del", k] => Ok(RequestOp::DeleteRange(DeleteRangeRequest {
            key: bytes("key", k, hex)?,
            end: Vec::new(),
            prev_kv: false,
        })),
        ["del", k, e] => Ok(RequestOp::DeleteRange(DeleteRangeRequest {
            key: bytes("key", k, hex)?,
            end: bytes("end", e, hex)?,
            prev_kv: false,
        })),
        _ => bail!("operation `{text}`: write `put K V`, `get K [END]` or `del K [END]`"),
    }
}

/// `txn --compare ... --then ... --else ...`.
pub fn txn(
    compares: &[String],
    then: &[String],
    otherwise: &[String],
    hex: bool,
) -> anyhow::Result<KvCommand> {
    Ok(KvCommand::Txn(TxnRequest {
        compare: compares
            .iter()
            .map(|c| compare(c, hex))
            .collect::<Result<_, _>>()?,
        success: then
            .iter()
            .map(|o| request_op(o, hex))
            .collect::<Result<_, _>>()?,
        failure: otherwise
            .iter()
            .map(|o| request_op(o, hex))
            .collect::<Result<_, _>>()?,
    }))
}

fn show(bytes: &[u8], hex: bool) -> String {
    if hex {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    } else {
        partita_kv::show_bytes(bytes)
    }
}

fn pair(kv: &KeyValue, hex: bool) -> String {
    format!(
        "{} = {} (create {}, mod {}, version {})",
        show(&kv.key, hex),
        show(&kv.value, hex),
        kv.create_revision,
        kv.mod_revision,
        kv.version
    )
}

/// A reply, for people.
pub fn describe(reply: &KvReply, hex: bool) -> String {
    match reply {
        KvReply::Put(p) => match &p.prev_kv {
            Some(prev) => format!("revision {}; previously {}", p.revision, pair(prev, hex)),
            None => format!("revision {}", p.revision),
        },
        KvReply::Range(r) if r.kvs.is_empty() => {
            format!("(no keys; {} in range) at revision {}", r.count, r.revision)
        }
        KvReply::Range(r) => {
            let mut s: Vec<String> = r.kvs.iter().map(|kv| pair(kv, hex)).collect();
            if r.more {
                s.push(format!("... ({} keys in range)", r.count));
            }
            s.push(format!("at revision {}", r.revision));
            s.join("\n")
        }
        KvReply::DeleteRange(d) => format!("deleted {}; revision {}", d.deleted, d.revision),
        KvReply::Txn(t) => {
            let mut s = vec![format!(
                "{}; revision {}",
                if t.succeeded { "succeeded" } else { "failed" },
                t.revision
            )];
            for r in &t.responses {
                s.push(match r {
                    ResponseOp::Put(p) => describe(&KvReply::Put(p.clone()), hex),
                    ResponseOp::Range(g) => describe(&KvReply::Range(g.clone()), hex),
                    ResponseOp::DeleteRange(d) => describe(&KvReply::DeleteRange(d.clone()), hex),
                });
            }
            s.join("\n")
        }
        KvReply::Compact(c) => match &c.error {
            Some(e) => format!("not compacted: {e}; revision {}", c.revision),
            None => format!(
                "compacted below revision {}; revision {}",
                c.compacted, c.revision
            ),
        },
        KvReply::Events(e) => match e.compacted {
            Some(c) => format!("compacted: events below revision {c} are gone"),
            None => format!("{} events; revision {}", e.events.len(), e.revision),
        },
        KvReply::Batch(rs) => rs
            .iter()
            .map(|r| describe(r, hex))
            .collect::<Vec<_>>()
            .join("\n"),
        KvReply::LeaseGrant(g) => format!("lease {:x} granted with TTL({}s)", g.id, g.ttl),
        KvReply::LeaseRevoke(r) => format!("lease revoked; revision {}", r.revision),
        KvReply::LeaseKeepAlive(k) if k.ttl > 0 => {
            format!("lease {:x} keepalived with TTL({})", k.id, k.ttl)
        }
        KvReply::LeaseKeepAlive(k) => format!("lease {:x} expired or revoked", k.id),
        KvReply::LeaseTimeToLive(t) if t.ttl < 0 => format!("lease {:x} already expired", t.id),
        KvReply::LeaseTimeToLive(t) => {
            let keys: Vec<String> = t.keys.iter().map(|k| show(k, hex)).collect();
            format!(
                "lease {:x} granted with TTL({}s), remaining({}s), attached keys([{}])",
                t.id,
                t.granted_ttl,
                t.ttl,
                keys.join(" ")
            )
        }
        KvReply::LeaseLeases(l) => {
            let mut s = vec![format!("found {} leases", l.ids.len())];
            s.extend(l.ids.iter().map(|id| format!("{id:x}")));
            s.join("\n")
        }
        KvReply::Error(e) => format!("refused: {} ({})", e.error, e.error.etcd_message()),
        KvReply::Hash(h) => format!(
            "hash {:08x} at revision {} (compacted below {}); {} bytes",
            h.hash, h.hash_revision, h.compact_revision, h.size
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transactions_parse_from_flags_and_bad_ones_say_why() {
        let t = txn(
            &["value(a) = 1".into(), "version(b) > 2".into()],
            &["put a 2".into(), "del b".into()],
            &["get a".into()],
            false,
        )
        .unwrap();
        let KvCommand::Txn(t) = t else { panic!() };
        assert_eq!(t.compare.len(), 2);
        assert_eq!(t.compare[1].target, CompareTarget::Version(2));
        assert_eq!(t.compare[1].op, CompareOp::Greater);
        assert_eq!((t.success.len(), t.failure.len()), (2, 1));
        for bad in [
            "value a = 1",
            "size(a) = 1",
            "version(a) = x",
            "value(a) ~ 1",
        ] {
            let e = compare(bad, false).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
        assert!(request_op("put a", false).is_err());
        assert!(request_op("scan a b", false).is_err());
    }

    /// Valid UTF-8 shows as text, whole, as etcdctl shows it; bytes that are not
    /// (or hold control characters) as hex; `--hex` always as hex.
    #[test]
    fn values_show_as_text_when_they_are_text() {
        let kv = KeyValue {
            key: "clé".as_bytes().to_vec(),
            value: "value é, 日本語".as_bytes().to_vec(),
            create_revision: 2,
            mod_revision: 3,
            version: 2,
            lease: 0,
        };
        assert_eq!(
            pair(&kv, false),
            "\"clé\" = \"value é, 日本語\" (create 2, mod 3, version 2)"
        );
        let long = "ü".repeat(60);
        assert_eq!(show(long.as_bytes(), false), format!("\"{long}\""));
        assert_eq!(show(&[0xff, 0x00], false), "0xff00");
        assert_eq!(show(b"a\nb", false), "0x610a62");
        assert_eq!(show("é".as_bytes(), true), "c3a9");
        // In messages keys are cut at 40 characters, never inside one.
        let cut = partita_kv::show_key(long.as_bytes());
        assert!(
            cut.starts_with("\"üü") && cut.ends_with("... (120 bytes)"),
            "{cut}"
        );
    }

    #[test]
    fn hex_and_ranges() {
        assert_eq!(bytes("key", "00ff", true).unwrap(), vec![0, 255]);
        assert!(bytes("key", "0", true).is_err());
        assert!(bytes("key", "zz", true).is_err());
        let KvCommand::Range(r) = range("a/", None, true, 0, false).unwrap() else {
            panic!()
        };
        assert_eq!((r.key, r.end), (b"a/".to_vec(), b"a0".to_vec()));
        assert!(range("a", None, false, 0, false).is_err());
        assert!(range("a", Some("b"), true, 0, false).is_err());
    }
}
