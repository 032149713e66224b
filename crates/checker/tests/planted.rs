//! Hand-made histories with known answers: planted bugs that must be reported, and
//! their legal twins that must pass (so that each control can actually fail).

use crate::common;

use common::*;
use partita_btree::{BatchOp, OpResult};
use partita_checker::{check, check_with_final_state, CheckError, CheckOptions, Initial};

fn opts() -> CheckOptions {
    CheckOptions::default()
}

#[test]
fn stale_read_after_completed_write() {
    let mut h = vec![
        ok(1, insert(1, 10), 0, 10, OpResult::Inserted(true)),
        ok(1, update(1, 20), 20, 30, OpResult::Old(Some(10))),
        ok(2, read(1), 40, 50, OpResult::Value(Some(10))),
    ];
    let v = assert_violation(&h, &opts());
    assert_eq!(v.index, Some(2));
    assert_eq!(v.keys, Some((1, 1)));
    assert_eq!(v.allowed, vec![OpResult::Value(Some(20))]);
    assert_eq!(v.linearized_before, 2);
    assert!(
        v.message
            .contains("client 2 read(1) [call 40 ns, ret 50 ns] returned value=10"),
        "{v}"
    );
    assert!(v.message.contains("the model would return value=20 at that point (after linearizing 2 earlier operations on key 1)"), "{v}");
    // Concurrent with the update, the old value is fine.
    h[2].call_ns = 25;
    assert_linearizable(&h, &opts());
}

#[test]
fn lost_insert_seen_by_a_read() {
    let mut h = vec![
        ok(1, insert(5, 1), 0, 10, OpResult::Inserted(true)),
        ok(2, read(5), 20, 30, OpResult::Value(None)),
    ];
    let v = assert_violation(&h, &opts());
    assert_eq!(v.allowed, vec![OpResult::Value(Some(1))]);
    // With a delete in between it is legal.
    h.insert(1, ok(3, delete(5), 12, 15, OpResult::Removed(Some(1))));
    assert_linearizable(&h, &opts());
}

#[test]
fn lost_insert_seen_only_in_the_final_state() {
    let h = vec![
        ok(1, insert(5, 1), 0, 10, OpResult::Inserted(true)),
        ok(2, insert(6, 1), 0, 10, OpResult::Inserted(true)),
    ];
    assert_linearizable(&h, &opts());
    assert!(check_with_final_state(&h, &opts(), &[(5, 1), (6, 1)]).is_ok());
    let err = check_with_final_state(&h, &opts(), &[(6, 1)]).unwrap_err();
    let v = err.violation().expect("a violation");
    assert_eq!(v.index, None);
    assert!(
        v.message
            .contains("key 5 is absent in the final state but 1 in the model"),
        "{v}"
    );
    // A key nobody wrote must not appear, and preloaded keys nobody touched must stay.
    let err = check_with_final_state(&h, &opts(), &[(5, 1), (6, 1), (7, 7)]).unwrap_err();
    assert!(
        err.to_string().contains("key 7 is 7 in the final state"),
        "{err}"
    );
    let pre = CheckOptions::with_initial(Initial::Preload {
        count: 10,
        stride: 10,
    });
    let mut finals: Vec<(u64, u64)> = (0..10).map(|i| (i * 10, i * 10)).collect();
    finals.extend([(5, 1), (6, 1)]);
    assert!(check_with_final_state(&h, &pre, &finals).is_ok());
    finals.retain(|e| e.0 != 30);
    let err = check_with_final_state(&h, &pre, &finals).unwrap_err();
    assert!(err.to_string().contains("key 30 is absent"), "{err}");
}

#[test]
fn insert_applied_twice() {
    let mut h = vec![
        ok(1, insert(5, 1), 0, 10, OpResult::Inserted(true)),
        ok(2, insert(5, 2), 20, 30, OpResult::Inserted(true)),
    ];
    let v = assert_violation(&h, &opts());
    assert_eq!(v.index, Some(1));
    assert_eq!(v.allowed, vec![OpResult::Inserted(false)]);
    // Even when the two are concurrent, only one can win.
    h[1].call_ns = 5;
    assert_violation(&h, &opts());
    // A delete between them makes it legal.
    h[1].call_ns = 20;
    h.push(ok(3, delete(5), 12, 14, OpResult::Removed(Some(1))));
    assert_linearizable(&h, &opts());
}

#[test]
fn batch_applied_twice() {
    // The batch is executed again (e.g. a retransmission not deduplicated) after another
    // client deleted one of its keys: a later read sees the key come back.
    let b = batch(&[
        BatchOp::Insert { key: 1, value: 10 },
        BatchOp::Insert { key: 2, value: 20 },
    ]);
    let both = OpResult::Batch(vec![OpResult::Inserted(true), OpResult::Inserted(true)]);
    let h = vec![
        ok(1, b.clone(), 0, 10, both.clone()),
        ok(2, delete(1), 20, 30, OpResult::Removed(Some(10))),
        ok(2, read(1), 40, 50, OpResult::Value(Some(10))),
    ];
    let v = assert_violation(&h, &opts());
    assert_eq!(v.allowed, vec![OpResult::Value(None)]);
    // The batch's results themselves must fit: a batch whose second insert was already
    // applied by an earlier duplicate reports inserted=false for both.
    let h = vec![
        ok(1, b.clone(), 0, 10, both.clone()),
        ok(1, b.clone(), 20, 30, both),
    ];
    assert_violation(&h, &opts());
    // A batch is atomic: no read may see half of it.
    let h = vec![
        ok(
            1,
            b,
            0,
            100,
            OpResult::Batch(vec![OpResult::Inserted(true), OpResult::Inserted(true)]),
        ),
        ok(2, query(1, 2), 10, 20, OpResult::Entries(vec![(1, 10)])),
    ];
    let v = assert_violation(&h, &opts());
    assert_eq!(v.keys, Some((1, 2)));
}

#[test]
fn range_query_missing_a_committed_key() {
    let mut h = vec![
        ok(1, insert(3, 3), 0, 10, OpResult::Inserted(true)),
        ok(2, insert(5, 5), 0, 10, OpResult::Inserted(true)),
        ok(3, insert(7, 7), 0, 10, OpResult::Inserted(true)),
        ok(
            1,
            query(0, 10),
            20,
            30,
            OpResult::Entries(vec![(3, 3), (7, 7)]),
        ),
    ];
    let v = assert_violation(&h, &opts());
    assert_eq!(v.index, Some(3));
    // Found by looking at key 5 alone: the query implies it is absent.
    assert_eq!(v.projected_key, Some(5));
    assert_eq!(v.keys, Some((5, 5)));
    assert_eq!(v.allowed, vec![OpResult::Value(Some(5))]);
    assert!(
        v.message
            .contains("query(0..=10) [call 20 ns, ret 30 ns] returned entries=[(3,3), (7,7)]"),
        "{v}"
    );
    assert!(
        v.message
            .contains("for key 5 it implies value=null, where the model would return value=5"),
        "{v}"
    );
    // Concurrent with the insert of 5, missing it is fine.
    h[1].ret_ns = 25;
    assert_linearizable(&h, &opts());
    // Out of order or out of range results are never fine.
    h[3].result = Some(OpResult::Entries(vec![(7, 7), (3, 3)]));
    assert_violation(&h, &opts());
    h[3].result = Some(OpResult::Entries(vec![(3, 3), (7, 7), (11, 0)]));
    assert_violation(&h, &opts());
}

#[test]
fn next_and_prev_skipping_or_inventing_entries() {
    let base = vec![
        ok(1, insert(3, 3), 0, 10, OpResult::Inserted(true)),
        ok(2, insert(5, 5), 0, 10, OpResult::Inserted(true)),
        ok(3, insert(7, 7), 0, 10, OpResult::Inserted(true)),
        ok(3, delete(7), 20, 30, OpResult::Removed(Some(7))),
    ];
    let with = |e| {
        let mut h = base.clone();
        h.push(e);
        h
    };
    assert_linearizable(
        &with(ok(1, next(3), 40, 50, OpResult::Entry(Some((5, 5))))),
        &opts(),
    );
    assert_linearizable(
        &with(ok(1, next(5), 40, 50, OpResult::Entry(None))),
        &opts(),
    );
    assert_linearizable(
        &with(ok(1, prev(5), 40, 50, OpResult::Entry(Some((3, 3))))),
        &opts(),
    );
    assert_linearizable(
        &with(ok(1, prev(3), 40, 50, OpResult::Entry(None))),
        &opts(),
    );
    // Skips 5.
    let v = assert_violation(
        &with(ok(1, next(3), 40, 50, OpResult::Entry(None))),
        &opts(),
    );
    assert_eq!(v.projected_key, Some(5));
    assert_eq!(v.allowed, vec![OpResult::Value(Some(5))]);
    // Returns the deleted 7.
    assert_violation(
        &with(ok(1, next(5), 40, 50, OpResult::Entry(Some((7, 7))))),
        &opts(),
    );
    // Returns an entry on the wrong side.
    assert_violation(
        &with(ok(1, prev(5), 40, 50, OpResult::Entry(Some((7, 7))))),
        &opts(),
    );
    assert_violation(
        &with(ok(1, next(5), 40, 50, OpResult::Entry(Some((3, 3))))),
        &opts(),
    );
    // Wrong value.
    assert_violation(
        &with(ok(1, prev(5), 40, 50, OpResult::Entry(Some((3, 4))))),
        &opts(),
    );
}

#[test]
fn next_prev_and_queries_at_the_edges_of_a_preload() {
    let pre = CheckOptions::with_initial(Initial::Preload {
        count: 5,
        stride: 2,
    });
    let h = vec![
        ok(1, next(8), 0, 1, OpResult::Entry(None)),
        ok(1, next(u64::MAX), 2, 3, OpResult::Entry(None)),
        ok(1, prev(0), 4, 5, OpResult::Entry(None)),
        ok(1, prev(1), 6, 7, OpResult::Entry(Some((0, 0)))),
        ok(1, next(7), 8, 9, OpResult::Entry(Some((8, 8)))),
        ok(1, prev(u64::MAX), 10, 11, OpResult::Entry(Some((8, 8)))),
        ok(1, query(3, 5), 12, 13, OpResult::Entries(vec![(4, 4)])),
        ok(1, query(5, 3), 14, 15, OpResult::Entries(vec![])),
        ok(
            1,
            query(0, u64::MAX),
            16,
            17,
            OpResult::Entries((0..5).map(|i| (i * 2, i * 2)).collect()),
        ),
        ok(2, insert(u64::MAX, 1), 20, 21, OpResult::Inserted(true)),
        ok(2, next(8), 22, 23, OpResult::Entry(Some((u64::MAX, 1)))),
        ok(2, prev(u64::MAX), 24, 25, OpResult::Entry(Some((8, 8)))),
        ok(2, delete(0), 26, 27, OpResult::Removed(Some(0))),
        ok(2, prev(2), 28, 29, OpResult::Entry(None)),
        ok(2, insert(4, 9), 30, 31, OpResult::Inserted(false)),
        ok(2, read(6), 32, 33, OpResult::Value(Some(6))),
    ];
    assert_linearizable(&h, &pre);
    // Against an empty map the same history is wrong from the fourth operation on.
    let v = assert_violation(&h, &opts());
    assert_eq!(v.index, Some(3));
    // next(u64::MAX) and prev(0) can only ever be null.
    let h = vec![ok(1, next(u64::MAX), 0, 1, OpResult::Entry(Some((0, 0))))];
    assert_violation(&h, &pre);
    let h = vec![ok(1, prev(0), 0, 1, OpResult::Entry(Some((0, 0))))];
    assert_violation(&h, &pre);
    let h = vec![ok(1, query(5, 3), 0, 1, OpResult::Entries(vec![(4, 4)]))];
    assert_violation(&h, &pre);
    // A preloaded key read with a wrong value.
    let h = vec![ok(1, read(4), 0, 1, OpResult::Value(Some(5)))];
    assert_eq!(
        assert_violation(&h, &pre).allowed,
        vec![OpResult::Value(Some(4))]
    );
}

#[test]
fn info_operations_may_apply_late_or_never() {
    // An info insert seen by a read long after the client gave up.
    let h = vec![
        info(1, insert(1, 7), 0, 10),
        ok(2, read(1), 20, 30, OpResult::Value(None)),
        ok(2, read(1), 100, 110, OpResult::Value(Some(7))),
        ok(2, read(1), 200, 210, OpResult::Value(Some(7))),
    ];
    assert_linearizable(&h, &opts());
    // ... or never seen at all.
    let h = vec![
        info(1, insert(1, 7), 0, 10),
        ok(2, read(1), 100, 110, OpResult::Value(None)),
    ];
    assert_linearizable(&h, &opts());
    // But it takes effect at most once, and not before it is invoked.
    let h = vec![
        info(1, insert(1, 7), 0, 10),
        ok(2, read(1), 20, 30, OpResult::Value(Some(7))),
        ok(2, delete(1), 40, 50, OpResult::Removed(Some(7))),
        ok(2, read(1), 60, 70, OpResult::Value(Some(7))),
    ];
    assert_violation(&h, &opts());
    let h = vec![
        ok(2, read(1), 0, 5, OpResult::Value(Some(7))),
        info(1, insert(1, 7), 10, 20),
    ];
    assert_violation(&h, &opts());
    // Info reads are dropped whatever they would have seen; fail ops never took effect.
    let h = vec![
        info(2, read(1), 0, 5),
        fail(1, insert(1, 7), 10, 20),
        ok(2, read(1), 30, 40, OpResult::Value(None)),
    ];
    let s = check(&h, &opts()).unwrap();
    assert_eq!(
        (s.ops_checked, s.failed_ops, s.info_reads_dropped),
        (1, 1, 1)
    );
    let h = vec![
        fail(1, insert(1, 7), 10, 20),
        ok(2, read(1), 30, 40, OpResult::Value(Some(7))),
    ];
    assert_violation(&h, &opts());
    // An info batch applies atomically or not at all.
    let b = batch(&[
        BatchOp::Insert { key: 1, value: 1 },
        BatchOp::Insert { key: 2, value: 2 },
    ]);
    let h = vec![
        info(1, b.clone(), 0, 10),
        ok(2, read(1), 20, 30, OpResult::Value(Some(1))),
        ok(2, read(2), 40, 50, OpResult::Value(None)),
    ];
    assert_violation(&h, &opts());
    assert!(check_with_final_state(&h[..1], &opts(), &[(1, 1)]).is_err());
    assert!(check_with_final_state(&h[..1], &opts(), &[(1, 1), (2, 2)]).is_ok());
    assert!(check_with_final_state(&h[..1], &opts(), &[]).is_ok());
}

#[test]
fn clock_ties_are_concurrent() {
    // The write responds at the same instant the read is invoked: either order is fine.
    let h = vec![
        ok(1, insert(1, 1), 0, 10, OpResult::Inserted(true)),
        ok(2, read(1), 10, 20, OpResult::Value(None)),
    ];
    assert_linearizable(&h, &opts());
}

#[test]
fn violations_report_the_earliest_culprit_across_keys() {
    let h = vec![
        ok(1, insert(9, 1), 0, 10, OpResult::Inserted(true)),
        ok(1, read(9), 100, 110, OpResult::Value(None)),
        ok(2, insert(4, 1), 0, 10, OpResult::Inserted(true)),
        ok(2, read(4), 50, 60, OpResult::Value(Some(2))),
    ];
    let v = assert_violation(&h, &opts());
    assert_eq!(v.index, Some(3));
    assert_eq!(v.other_failures, 1);
    assert!(
        v.to_string()
            .contains("1 other independent sub-histories also fail"),
        "{v}"
    );
}

#[test]
fn search_budget_gives_unknown_not_a_hang() {
    // Twenty concurrent blind writes that may or may not have taken effect, then reads
    // seeing 105, 103 and 105 again: impossible, since each write applies at most once,
    // but every value is reachable on its own, so proving it means going through the
    // subsets of the writes, far more than the budget.
    let mut h: Vec<_> = (0..20)
        .map(|c| info(c, update(1, c + 100), 0, 10))
        .collect();
    h.insert(0, ok(99, insert(1, 1), 0, 1, OpResult::Inserted(true)));
    for (i, v) in [105, 103, 105].into_iter().enumerate() {
        let t = 20 + 10 * i as u64;
        h.push(ok(99, read(1), t, t + 5, OpResult::Value(Some(v))));
    }
    let tight = CheckOptions {
        max_states: 2_000,
        ..opts()
    };
    match check(&h, &tight) {
        Err(CheckError::Unknown(u)) => {
            assert!(u.states >= 2_000);
            assert_eq!(u.group_ops, 24);
            assert!(u.to_string().contains("gave up"), "{u}");
        }
        other => panic!("expected unknown, got {other:?}"),
    }
    // The same shape with a possible sequence is found at once.
    let last = h.len() - 1;
    h[last].result = Some(OpResult::Value(Some(117)));
    let s = check(&h, &tight).unwrap();
    assert!(s.states < 100, "{s:?}");
}

#[test]
fn invalid_histories_are_refused() {
    let mut e = ok(1, read(1), 10, 5, OpResult::Value(None));
    assert!(matches!(
        check(&[e.clone()], &opts()),
        Err(CheckError::Invalid(_))
    ));
    e.ret_ns = 20;
    e.result = None;
    assert!(matches!(check(&[e], &opts()), Err(CheckError::Invalid(_))));
    let h = vec![ok(1, insert(1, 1), 0, 1, OpResult::Inserted(true))];
    assert!(matches!(
        check_with_final_state(&h, &opts(), &[(1, 1), (1, 1)]),
        Err(CheckError::Invalid(_))
    ));
}

#[test]
fn result_of_the_wrong_kind_is_a_violation() {
    let h = vec![ok(1, read(1), 0, 1, OpResult::Inserted(true))];
    assert_violation(&h, &opts());
    let h = vec![ok(1, next(1), 0, 1, OpResult::Value(None))];
    assert_violation(&h, &opts());
}
