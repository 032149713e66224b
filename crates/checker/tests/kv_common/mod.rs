//! Terse constructors for hand-written key-value histories.
#![allow(dead_code)]

use partita_checker::history::Status;
use partita_checker::kv::{
    check_kv, CmpOp, Compare, KvCheckError, KvCheckOptions, KvEvent, KvOp, KvResult, KvViolation,
    Target,
};

pub fn ok(client: u64, op: KvOp, call: u64, ret: u64, result: KvResult) -> KvEvent {
    KvEvent {
        client,
        op,
        call_ns: call,
        ret_ns: ret,
        status: Status::Ok,
        result: Some(result),
    }
}

pub fn info(client: u64, op: KvOp, call: u64, ret: u64) -> KvEvent {
    KvEvent {
        client,
        op,
        call_ns: call,
        ret_ns: ret,
        status: Status::Info,
        result: None,
    }
}

pub fn fail(client: u64, op: KvOp, call: u64, ret: u64) -> KvEvent {
    KvEvent {
        status: Status::Fail,
        ..info(client, op, call, ret)
    }
}

pub fn put(k: &str, v: &str) -> KvOp {
    KvOp::Put {
        key: k.into(),
        value: v.into(),
        prev_kv: false,
    }
}

pub fn get(k: &str) -> KvOp {
    KvOp::Get { key: k.into() }
}

pub fn del(k: &str) -> KvOp {
    KvOp::Del {
        key: k.into(),
        end: None,
        prev_kv: false,
    }
}

pub fn range(k: &str, end: &str) -> KvOp {
    KvOp::Range {
        key: k.into(),
        end: end.into(),
        limit: 0,
        keys_only: false,
        count_only: false,
    }
}

pub fn txn(compare: Vec<Compare>, then: Vec<KvOp>, otherwise: Vec<KvOp>) -> KvOp {
    KvOp::Txn {
        compare,
        then,
        otherwise,
    }
}

pub fn version_is(k: &str, n: u64) -> Compare {
    Compare {
        key: k.into(),
        target: Target::Version(n),
        op: CmpOp::Eq,
    }
}

pub fn put_r(revision: u64) -> KvResult {
    KvResult::Put {
        revision,
        prev: None,
    }
}

/// A get's result: `value` with its mod revision and version, read at `revision`.
pub fn got(value: Option<(&str, u64, u64)>, revision: Option<u64>) -> KvResult {
    KvResult::Get {
        value: value.map(|v| v.0.into()),
        mod_revision: value.map(|v| v.1),
        version: value.map_or(0, |v| v.2),
        revision,
    }
}

pub fn del_r(deleted: u64, revision: u64) -> KvResult {
    KvResult::Del {
        deleted,
        revision,
        prev: None,
    }
}

pub fn entries(es: &[(&str, &str, u64)], revision: u64) -> KvResult {
    KvResult::Range {
        entries: es
            .iter()
            .map(|(k, v, m)| (k.as_bytes().to_vec(), v.as_bytes().to_vec(), *m))
            .collect(),
        revision,
        count: None,
        more: None,
    }
}

pub fn assert_linearizable(events: &[KvEvent]) {
    if let Err(e) = check_kv(events, &KvCheckOptions::default()) {
        panic!("expected linearizable, got {e}");
    }
}

pub fn assert_violation(events: &[KvEvent]) -> KvViolation {
    match check_kv(events, &KvCheckOptions::default()) {
        Err(KvCheckError::NotLinearizable(v)) => *v,
        other => panic!("expected a violation, got {other:?}"),
    }
}
