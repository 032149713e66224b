//! `KvCommand::Batch`: the etcd gateway's requests in flight, ordered as one command,
//! each executed as if alone.

use partita_kv::{check, is_read_only, KvCommand, KvReply, KvStore, BATCH_MAX};

#[test]
fn each_request_of_a_batch_takes_its_own_revision() {
    let mut s = KvStore::new();
    let (_, _) = s.execute(&KvCommand::put("x", "0"));
    let start = s.revision();
    let batch = KvCommand::Batch(vec![
        KvCommand::put("a", "1"),
        KvCommand::get("a"),
        KvCommand::put("a", "2"),
        KvCommand::delete("x"),
        KvCommand::delete("nothing"),
    ]);
    check(&batch).unwrap();
    let (reply, _) = s.execute(&batch);
    let KvReply::Batch(rs) = reply else {
        panic!("{reply:?}")
    };
    let revs: Vec<u64> = rs.iter().map(KvReply::revision).collect();
    // A put, a read of it, another put, a delete, and a delete of nothing.
    assert_eq!(
        revs,
        [start + 1, start + 1, start + 2, start + 3, start + 3]
    );
    let KvReply::Range(read) = &rs[1] else {
        panic!("{:?}", rs[1])
    };
    assert_eq!(read.kvs[0].value, b"1");
    // The same requests one by one give the same replies and the same store.
    let mut one = KvStore::new();
    one.execute(&KvCommand::put("x", "0"));
    let KvCommand::Batch(cmds) = &batch else {
        unreachable!()
    };
    let singles: Vec<KvReply> = cmds.iter().map(|c| one.execute(c).0).collect();
    assert_eq!(singles, rs);
    assert_eq!(one, s);
}

#[test]
fn a_batch_is_undone_in_full() {
    let mut s = KvStore::new();
    s.execute(&KvCommand::put("k", "v"));
    let before = s.clone();
    let (_, undo) = s.execute(&KvCommand::Batch(vec![
        KvCommand::put("k", "w"),
        KvCommand::put("j", "1"),
        KvCommand::delete("k"),
    ]));
    assert_eq!(undo.changes(), 3);
    assert_ne!(s, before);
    s.undo(undo);
    assert_eq!(s, before);
}

#[test]
fn malformed_batches_are_refused_with_a_reason() {
    let empty = check(&KvCommand::Batch(vec![])).unwrap_err();
    assert!(empty.contains("1 to"), "{empty}");
    let nested = check(&KvCommand::Batch(vec![KvCommand::Batch(vec![
        KvCommand::put("a", "b"),
    ])]))
    .unwrap_err();
    assert!(nested.contains("request 0 is a batch"), "{nested}");
    let too_many = check(&KvCommand::Batch(vec![
        KvCommand::put("a", "b");
        BATCH_MAX + 1
    ]))
    .unwrap_err();
    assert!(too_many.contains("a batch holds 1 to"), "{too_many}");
    let bad = check(&KvCommand::Batch(vec![
        KvCommand::put("a", "b"),
        KvCommand::put("", "b"),
    ]))
    .unwrap_err();
    assert!(bad.starts_with("batch request 1:"), "{bad}");
    assert!(is_read_only(&KvCommand::Batch(vec![KvCommand::get("a")])));
    assert!(!is_read_only(&KvCommand::Batch(vec![
        KvCommand::get("a"),
        KvCommand::put("a", "b")
    ])));
}
