//! Hand-made key-value histories with planted bugs that must be reported as the
//! specific violation (stale reads, lost puts, wrong revisions), each beside its legal
//! twin that must pass, so that every control can actually fail.

use crate::kv_common;

use kv_common::*;
use partita_checker::kv::{KvOp, KvResult, KvViolationKind};

/// A get that misses a put completed before it started, reporting the stale revision
/// it read at: the revisions go backwards in real time.
#[test]
fn stale_read_with_its_stale_revision() {
    let mut h = vec![
        ok(1, put("k", "v1"), 0, 10, put_r(2)),
        ok(1, put("k", "v2"), 20, 30, put_r(3)),
        ok(2, get("k"), 40, 50, got(Some(("v1", 2, 1)), Some(2))),
    ];
    let v = assert_violation(&h);
    assert_eq!(v.kind, KvViolationKind::RealTimeOrder);
    assert_eq!(v.ops, vec![2, 1]);
    assert!(
        v.message
            .starts_with("stale read: client 1 put(\"k\", \"v2\")"),
        "{v}"
    );
    assert!(
        v.message
            .contains("created revision 3 and returned at 30 ns"),
        "{v}"
    );
    assert!(v.message.contains("which read at revision 2"), "{v}");
    // Concurrent with the second put, the old value is fine.
    h[2].call_ns = 25;
    assert_linearizable(&h);
}

/// A get that misses a put completed before it started, while reporting the current
/// revision: the value is wrong for that revision.
#[test]
fn stale_read_with_a_current_revision() {
    let mut h = vec![
        ok(1, put("k", "v1"), 0, 10, put_r(2)),
        ok(1, put("k", "v2"), 20, 30, put_r(3)),
        ok(2, get("k"), 40, 50, got(Some(("v1", 2, 1)), Some(3))),
    ];
    let v = assert_violation(&h);
    assert_eq!(v.kind, KvViolationKind::WrongResult);
    assert_eq!(v.revision, 3);
    // The read, the put whose value the model holds, the put whose value it saw.
    assert_eq!(v.ops, vec![2, 1, 0]);
    assert_eq!(v.expected, Some(got(Some(("v2", 3, 2)), Some(3))));
    assert!(
        v.message
            .contains("the model returns value=\"v2\" mod_revision=3 version=2 revision=3"),
        "{v}"
    );
    assert!(
        v.message
            .contains("revision 3 was created by client 1 put(\"k\", \"v2\")"),
        "{v}"
    );
    h[2].result = Some(got(Some(("v2", 3, 2)), Some(3)));
    assert_linearizable(&h);
}

/// A stale get recorded in DESIGN.md's shape, without a read revision: no revision
/// real time allows gives its result.
#[test]
fn stale_read_without_a_revision() {
    let mut h = vec![
        ok(1, put("k", "v1"), 0, 10, put_r(2)),
        ok(1, put("k", "v2"), 20, 30, put_r(3)),
        ok(2, get("k"), 40, 50, got(Some(("v1", 2, 1)), None)),
    ];
    let v = assert_violation(&h);
    assert_eq!(v.kind, KvViolationKind::Unplaceable);
    assert_eq!(v.ops, vec![2]);
    assert!(v.message.contains("reports no revision"), "{v}");
    assert!(v.message.contains("revision 3 or later"), "{v}");
    h[2].call_ns = 15;
    assert_linearizable(&h);
}

/// An acknowledged put that no later read sees, although nothing superseded it.
#[test]
fn lost_put() {
    let mut h = vec![
        ok(1, put("k", "v"), 0, 10, put_r(2)),
        ok(2, put("other", "x"), 20, 30, put_r(3)),
        ok(3, get("k"), 40, 50, got(None, Some(3))),
    ];
    let v = assert_violation(&h);
    assert_eq!(v.kind, KvViolationKind::WrongResult);
    assert_eq!(v.ops, vec![2, 0]);
    assert!(
        v.message
            .contains("revision 2 was created by client 1 put(\"k\", \"v\")"),
        "{v}"
    );
    // A delete in between supersedes it: legal.
    h[1] = ok(2, del("k"), 20, 30, del_r(1, 3));
    assert_linearizable(&h);
}

/// A lost put seen through the next put's previous value and through a range read.
#[test]
fn lost_put_seen_by_prev_and_by_a_range() {
    let put_prev = KvOp::Put {
        key: "k".into(),
        value: "v3".into(),
        prev_kv: true,
    };
    let mut h = vec![
        ok(1, put("k", "v1"), 0, 10, put_r(2)),
        ok(1, put("k", "v2"), 20, 30, put_r(3)),
        ok(
            2,
            put_prev,
            40,
            50,
            KvResult::Put {
                revision: 4,
                prev: Some(Some("v1".into())),
            },
        ),
    ];
    let v = assert_violation(&h);
    assert_eq!(v.kind, KvViolationKind::WrongResult);
    assert_eq!(v.revision, 4);
    assert_eq!(v.ops, vec![2, 1]);
    h[2].result = Some(KvResult::Put {
        revision: 4,
        prev: Some(Some("v2".into())),
    });
    assert_linearizable(&h);

    let h = vec![
        ok(1, put("a", "1"), 0, 10, put_r(2)),
        ok(1, put("b", "2"), 20, 30, put_r(3)),
        ok(2, range("a", "\0"), 40, 50, entries(&[("a", "1", 2)], 3)),
    ];
    let v = assert_violation(&h);
    assert_eq!(v.kind, KvViolationKind::WrongResult);
    assert_eq!(v.ops, vec![2, 1]);
}

/// Two writes report the same revision.
#[test]
fn revision_reported_twice() {
    let mut h = vec![
        ok(1, put("a", "1"), 0, 10, put_r(2)),
        ok(2, put("b", "1"), 5, 15, put_r(2)),
    ];
    let v = assert_violation(&h);
    assert_eq!(v.kind, KvViolationKind::DuplicateRevision);
    assert_eq!(v.revision, 2);
    assert_eq!(v.ops.len(), 2);
    assert!(v.ops.contains(&0) && v.ops.contains(&1));
    assert!(
        v.message
            .contains("revision 2 is reported as created by two writes"),
        "{v}"
    );
    h[1].result = Some(put_r(3));
    assert_linearizable(&h);
}

/// A write that completed before another began reports the newer revision.
#[test]
fn revisions_going_backwards_in_real_time() {
    let mut h = vec![
        ok(1, put("a", "1"), 0, 10, put_r(3)),
        ok(2, put("b", "1"), 20, 30, put_r(2)),
    ];
    let v = assert_violation(&h);
    assert_eq!(v.kind, KvViolationKind::RealTimeOrder);
    assert_eq!(v.ops, vec![1, 0]);
    assert!(
        v.message.starts_with("revisions go backwards in real time"),
        "{v}"
    );
    // Overlapping, either order is possible.
    h[1].call_ns = 5;
    assert_linearizable(&h);
}

/// A read at revision r that returned before the write creating r was invoked.
#[test]
fn a_read_of_a_revision_not_created_yet() {
    let h = vec![
        ok(1, get("a"), 0, 10, got(Some(("1", 2, 1)), Some(2))),
        ok(2, put("a", "1"), 20, 30, put_r(2)),
    ];
    let v = assert_violation(&h);
    assert_eq!(v.kind, KvViolationKind::RealTimeOrder);
    assert_eq!(v.ops, vec![1, 0]);
}

/// Revisions skipped with no write that could have made them.
#[test]
fn a_revision_created_by_nothing() {
    let h = vec![
        ok(1, put("a", "1"), 0, 10, put_r(2)),
        ok(1, put("a", "2"), 20, 30, put_r(4)),
    ];
    let v = assert_violation(&h);
    assert_eq!(v.kind, KvViolationKind::MissingWrite);
    // An unacknowledged write invoked in time may have made it.
    let mut twin = h.clone();
    twin.push(info(2, put("b", "x"), 5, 100));
    assert_linearizable(&twin);
    // One invoked after the put of revision 4 returned may not.
    let mut late = h.clone();
    late.push(info(2, put("b", "x"), 40, 100));
    let v = assert_violation(&late);
    assert_eq!(v.kind, KvViolationKind::MissingWrite);
    assert_eq!(v.revision, 3);
    // Nor one that failed.
    let mut failed = h.clone();
    failed.push(fail(2, put("b", "x"), 5, 100));
    assert_eq!(
        assert_violation(&failed).kind,
        KvViolationKind::MissingWrite
    );
}

/// `info` writes may take effect after their client gave up, or never.
#[test]
fn unknown_outcomes_take_effect_late_or_never() {
    let h = vec![
        info(1, put("k", "late"), 0, 10),
        ok(2, get("k"), 20, 30, got(None, Some(1))),
        ok(2, get("k"), 40, 50, got(Some(("late", 2, 1)), Some(2))),
    ];
    assert_linearizable(&h);
    let never = vec![
        info(1, put("k", "x"), 0, 10),
        ok(2, get("k"), 20, 30, got(None, Some(1))),
        ok(2, put("k", "y"), 40, 50, put_r(2)),
        ok(2, get("k"), 60, 70, got(Some(("y", 2, 1)), Some(2))),
    ];
    assert_linearizable(&never);
    // But not before it was invoked.
    let early = vec![
        ok(2, get("k"), 0, 10, got(Some(("x", 2, 1)), Some(2))),
        info(1, put("k", "x"), 20, 30),
    ];
    let v = assert_violation(&early);
    assert_eq!(v.kind, KvViolationKind::MissingWrite);
    // Which of two unknown writes made a revision is found from what reads saw.
    let two = vec![
        info(1, put("k", "a"), 0, 10),
        info(2, put("k", "b"), 0, 10),
        ok(3, get("k"), 20, 30, got(Some(("a", 3, 2)), Some(3))),
        ok(3, get("k"), 40, 50, got(Some(("a", 3, 2)), None)),
    ];
    let s = partita_checker::kv::check_kv(&two, &Default::default()).unwrap();
    assert_eq!((s.info_ops, s.info_applied), (2, 2));
}

/// Transactions: a compare outcome or an inner result that the state at the reported
/// revision does not give.
#[test]
fn transactions_are_checked_as_a_whole() {
    let cas = |expect: u64, value: &str| {
        txn(
            vec![version_is("k", expect)],
            vec![put("k", value)],
            vec![get("k")],
        )
    };
    let mut h = vec![
        ok(
            1,
            cas(0, "a"),
            0,
            10,
            KvResult::Txn {
                succeeded: true,
                results: vec![put_r(2)],
                revision: Some(2),
            },
        ),
        // A second create-if-absent cannot succeed after the first completed.
        ok(
            2,
            cas(0, "b"),
            20,
            30,
            KvResult::Txn {
                succeeded: true,
                results: vec![put_r(3)],
                revision: Some(3),
            },
        ),
    ];
    let v = assert_violation(&h);
    assert_eq!(v.kind, KvViolationKind::WrongResult);
    assert_eq!(v.ops, vec![1, 0]);
    assert!(v.message.contains("succeeded=false"), "{v}");
    h[1].result = Some(KvResult::Txn {
        succeeded: false,
        results: vec![got(Some(("a", 2, 1)), Some(2))],
        revision: Some(2),
    });
    assert_linearizable(&h);
}

/// Non-UTF-8 keys and values are bytes like any other.
#[test]
fn binary_keys() {
    let k: Vec<u8> = vec![0xff, 0x00];
    let h = vec![
        ok(
            1,
            KvOp::Put {
                key: k.clone(),
                value: vec![0xc3],
                prev_kv: false,
            },
            0,
            10,
            put_r(2),
        ),
        ok(
            2,
            KvOp::Get { key: k.clone() },
            20,
            30,
            KvResult::Get {
                value: Some(vec![0xc3]),
                mod_revision: Some(2),
                version: 1,
                revision: Some(2),
            },
        ),
    ];
    assert_linearizable(&h);
    let mut bad = h.clone();
    bad[1].result = Some(KvResult::Get {
        value: Some(vec![0xc4]),
        mod_revision: Some(2),
        version: 1,
        revision: Some(2),
    });
    let v = assert_violation(&bad);
    assert!(v.message.contains("get(0xff00)"), "{v}");
    assert!(v.message.contains("value=0xc4"), "{v}");
}
