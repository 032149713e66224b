//! Logical rollback (paper 001 §IV): undoing a suffix of commands, newest first,
//! restores exactly the contents (and digest) before the suffix.

use crate::common;

use common::*;
use partita_btree::{BPlusTree, Undo, UndoRecord};
use partita_btree::{BatchOp, Op, OpResult};
use proptest::prelude::*;

fn check_suffix_undo(node_keys: usize, prefix: &[Op], suffix: &[Op]) {
    let mut t = BPlusTree::with_node_keys(node_keys);
    let mut m = Model::new();
    for op in prefix {
        t.apply(op);
        model_exec(&mut m, op);
    }
    let before = model_contents(&m);
    let digest = t.digest();
    let mut undos: Vec<Undo> = Vec::new();
    for op in suffix {
        let (result, undo) = t.execute(op);
        assert_eq!(result, model_exec(&mut m, op));
        if !op.is_mutation() {
            assert!(undo.is_empty(), "read-only {op:?} produced an undo");
        }
        undos.push(undo);
    }
    for undo in undos.iter().rev() {
        t.apply_undo(undo);
        t.check_invariants().unwrap();
    }
    assert_eq!(contents(&t), before);
    assert_eq!(t.digest(), digest);
    assert_eq!(t.len(), before.len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn undo_restores_contents(
        node_keys in prop_oneof![Just(4usize), Just(5), Just(30)],
        prefix in prop::collection::vec(op(200), 0..300),
        suffix in prop::collection::vec(op(200), 0..80),
    ) {
        check_suffix_undo(node_keys, &prefix, &suffix);
    }

    /// Undo every prefix length of one sequence: each intermediate state is restorable.
    #[test]
    fn undo_to_every_point(ops in prop::collection::vec(mutation(60), 1..60)) {
        let mut t = BPlusTree::with_node_keys(4);
        let mut states = vec![(contents(&t), t.digest())];
        let mut undos = Vec::new();
        for op in &ops {
            undos.push(t.execute(op).1);
            states.push((contents(&t), t.digest()));
        }
        while let Some(undo) = undos.pop() {
            states.pop();
            t.apply_undo(&undo);
            let (c, d) = states.last().unwrap();
            prop_assert_eq!(&contents(&t), c);
            prop_assert_eq!(t.digest(), *d);
        }
    }
}

#[test]
fn no_ops_produce_empty_undo() {
    let mut t = BPlusTree::new();
    t.insert(1, 10);
    for op in [
        Op::Insert { key: 1, value: 11 },
        Op::Delete { key: 2 },
        Op::Update { key: 2, value: 5 },
        Op::Read { key: 1 },
        Op::Query { min: 0, max: 9 },
        Op::Next { key: 0 },
        Op::Prev { key: 9 },
        Op::Batch(vec![]),
        Op::Batch(vec![
            BatchOp::Insert { key: 1, value: 3 },
            BatchOp::Delete { key: 7 },
        ]),
    ] {
        let (_, undo) = t.execute(&op);
        assert!(undo.is_empty(), "{op:?}");
        assert_eq!(undo.len(), 0);
    }
}

#[test]
fn records_match_changes() {
    let mut t = BPlusTree::new();
    let (r, u) = t.execute(&Op::Insert { key: 4, value: 40 });
    assert_eq!(r, OpResult::Inserted(true));
    assert_eq!(
        u.records().copied().collect::<Vec<_>>(),
        [UndoRecord::RemoveInserted { key: 4 }]
    );
    let (r, u) = t.execute(&Op::Update { key: 4, value: 41 });
    assert_eq!(r, OpResult::Old(Some(40)));
    assert_eq!(
        u.records().copied().collect::<Vec<_>>(),
        [UndoRecord::RestoreValue { key: 4, old: 40 }]
    );
    let (r, u) = t.execute(&Op::Delete { key: 4 });
    assert_eq!(r, OpResult::Removed(Some(41)));
    assert_eq!(
        u.records().copied().collect::<Vec<_>>(),
        [UndoRecord::Reinsert { key: 4, value: 41 }]
    );

    // A batch that inserts, deletes and re-inserts the same key: undone in reverse.
    t.insert(9, 90);
    let batch = Op::Batch(vec![
        BatchOp::Delete { key: 9 },
        BatchOp::Insert { key: 9, value: 91 },
        BatchOp::Insert { key: 9, value: 92 },
        BatchOp::Delete { key: 9 },
        BatchOp::Insert { key: 5, value: 50 },
    ]);
    let (r, u) = t.execute(&batch);
    assert_eq!(
        r,
        OpResult::Batch(vec![
            OpResult::Removed(Some(90)),
            OpResult::Inserted(true),
            OpResult::Inserted(false),
            OpResult::Removed(Some(91)),
            OpResult::Inserted(true),
        ])
    );
    assert_eq!(u.len(), 4);
    t.apply_undo(&u);
    assert_eq!(contents(&t), vec![(9, 90)]);
}

#[test]
#[should_panic(expected = "undo")]
fn undo_out_of_order_is_caught() {
    let mut t = BPlusTree::new();
    let (_, u1) = t.execute(&Op::Insert { key: 1, value: 1 });
    let (_, _u2) = t.execute(&Op::Delete { key: 1 });
    // Applying the older undo first: key 1 is already gone.
    t.apply_undo(&u1);
}
