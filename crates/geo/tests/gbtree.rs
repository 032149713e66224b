//! The geo B+tree of paper 004 §IV (Algorithm 1): the tree against `BTreeMap`
//! (proptest), psite's examples, the counter walk up to the root, the DOP on Fig. 2's
//! counters, determinism of the digest, and resubmission after a DOP and after an
//! unpredicted split.

use partita_geo::{
    Config, Decision, Delivery, GbTreeError, GbTreeOptions, GeoBTree, NodeId, Op, OptimizerOptions,
    Reply, Topology, CACHE_ENTRIES_DEFAULT,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Fig. 2's replicas: A = California, B = Europe, C = Virginia (δ_AB = 150 ms,
/// δ_AC = 70 ms, δ_BC = 90 ms).
const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

fn set(replicas: &[usize]) -> Config {
    Config::from_replicas(replicas.iter().copied()).unwrap()
}

fn tree(order: usize, optimizer: OptimizerOptions) -> GeoBTree {
    let mut o = GbTreeOptions::new(order, 1);
    o.optimizer = optimizer;
    GeoBTree::new(Topology::paper_three_regions(), o).unwrap()
}

fn insert(key: u64) -> Op {
    Op::Insert {
        key,
        value: key.to_le_bytes().to_vec(),
    }
}

/// Order 2 (Fig. 4's fanout of three), keys 10, 20, …, 80 inserted in order, then
/// serializers by level: root {A}, inner nodes {B}, leaves {C}. Its shape:
///
/// ```text
///                 [30 50]                       root, full
///     [20]          [40]          [60 70]       the last inner node full
/// [10]  [20]    [30]  [40]    [50] [60] [70 80] the last leaf full
/// ```
fn fig4_tree() -> GeoBTree {
    let mut t = tree(2, OptimizerOptions::brute_force());
    for k in (10..=80).step_by(10) {
        t.execute(&insert(k), A).unwrap();
    }
    // The inserts' counters are dropped first, so the serializers stay as assigned.
    t.dop();
    t.initialize_reps(|_, n| match n.depth() {
        0 => set(&[A]),
        1 => set(&[B]),
        _ => set(&[C]),
    });
    t.invariants();
    let root = t.node(t.root());
    assert_eq!(root.keys(), &[30, 50]);
    assert_eq!(t.height(), 3);
    assert_eq!(t.node(t.find_leaf(75)).keys(), &[70, 80]);
    assert_eq!(t.node(t.find_leaf(10)).keys(), &[10]);
    t
}

// ------------------------------------------------------------------ the model

#[derive(Clone, Debug)]
enum ModelOp {
    Read(u64),
    Next(u64),
    Prev(u64),
    Update(u64, Vec<u8>),
    Insert(u64, Vec<u8>),
    Dop,
}

fn model_op() -> impl Strategy<Value = (ModelOp, usize)> {
    let key = 0u64..80;
    let value = prop::collection::vec(any::<u8>(), 0..6);
    let op = prop_oneof![
        3 => key.clone().prop_map(ModelOp::Read),
        2 => key.clone().prop_map(ModelOp::Next),
        2 => key.clone().prop_map(ModelOp::Prev),
        2 => (key.clone(), value.clone()).prop_map(|(k, v)| ModelOp::Update(k, v)),
        6 => (key, value).prop_map(|(k, v)| ModelOp::Insert(k, v)),
        1 => Just(ModelOp::Dop),
    ];
    (op, 0usize..3)
}

fn to_op(m: &ModelOp) -> Op {
    match m.clone() {
        ModelOp::Read(key) => Op::Read { key },
        ModelOp::Next(key) => Op::GetNext { key },
        ModelOp::Prev(key) => Op::GetPrev { key },
        ModelOp::Update(key, value) => Op::Update { key, value },
        ModelOp::Insert(key, value) => Op::Insert { key, value },
        ModelOp::Dop => Op::Dop,
    }
}

/// What `BTreeMap` answers (`None` for the DOP, whose report is checked apart).
fn model_reply(m: &mut BTreeMap<u64, Vec<u8>>, op: &ModelOp) -> Option<Reply> {
    let entry = |e: Option<(&u64, &Vec<u8>)>| Reply::Entry(e.map(|(k, v)| (*k, v.clone())));
    Some(match op {
        ModelOp::Read(k) => Reply::Value(m.get(k).cloned()),
        ModelOp::Next(k) => entry(m.range(k + 1..).next()),
        ModelOp::Prev(k) => entry(m.range(..k).next_back()),
        ModelOp::Update(k, v) => Reply::Old(m.get_mut(k).map(|x| std::mem::replace(x, v.clone()))),
        ModelOp::Insert(k, v) => Reply::Inserted(match m.entry(*k) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(v.clone());
                true
            }
            std::collections::btree_map::Entry::Occupied(_) => false,
        }),
        ModelOp::Dop => return None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every request answers as `BTreeMap` does, the invariants hold after each, the
    /// contents match at the end, and a request delivered with the serializers psite
    /// named for it just before always executes (nothing moved in between).
    #[test]
    fn matches_btreemap(
        order in 2usize..7,
        seed in any::<u64>(),
        hot_cached in any::<bool>(),
        ops in prop::collection::vec(model_op(), 1..250),
    ) {
        let mut o = GbTreeOptions::new(order, seed);
        if hot_cached {
            o.optimizer = OptimizerOptions::hot_cached(16);
        }
        let mut t = GeoBTree::new(Topology::paper_three_regions(), o).unwrap();
        let mut m = BTreeMap::new();
        for (mop, from) in &ops {
            let op = to_op(mop);
            let dst = t.psite(&op, *from);
            let leaf = t.node(t.find_leaf(op.key().unwrap_or(0))).reps();
            if op.is_write() {
                prop_assert!(leaf.is_subset_of(dst), "write-all");
            } else if op.is_read() {
                prop_assert!(leaf.mask() & dst.mask() != 0, "read-one");
                prop_assert!(dst.len() <= 2);
            } else {
                prop_assert_eq!(dst, Config::all(3));
            }
            let got = match t.deliver(&op, *from, dst).unwrap() {
                Delivery::Executed(r) => r,
                Delivery::Resubmit(c) => panic!("{op:?} resubmitted to {c} with psite's own dst"),
            };
            match (model_reply(&mut m, mop), got) {
                (Some(want), got) => prop_assert_eq!(got, want, "{:?}", op),
                (None, Reply::Dop(r)) => {
                    prop_assert_eq!(r.nodes_evaluated, r.nodes_skipped_empty + r.computed + r.cache_hits);
                    prop_assert!(t.nodes().all(|(id, _)| !t.changed(id) && t.stats(id).is_empty()));
                }
                (None, other) => panic!("DOP replied {other:?}"),
            }
            t.invariants();
            prop_assert_eq!(t.len(), m.len() as u64);
        }
        let got: Vec<(u64, Vec<u8>)> = t.entries().map(|(k, v)| (k, v.to_vec())).collect();
        let want: Vec<(u64, Vec<u8>)> = m.into_iter().collect();
        prop_assert_eq!(got, want);
    }

    /// Two trees built alike and fed the same requests (DOPs with a cache included)
    /// have the same digest after every request.
    #[test]
    fn same_requests_same_digest(
        order in 2usize..6,
        seed in any::<u64>(),
        ops in prop::collection::vec(model_op(), 1..150),
    ) {
        let mut o = GbTreeOptions::new(order, seed);
        o.optimizer = OptimizerOptions::hot_cached(4);
        let mut t1 = GeoBTree::new(Topology::paper_three_regions(), o).unwrap();
        let mut t2 = GeoBTree::new(Topology::paper_three_regions(), o).unwrap();
        for (mop, from) in &ops {
            let op = to_op(mop);
            prop_assert_eq!(t1.execute(&op, *from).unwrap(), t2.execute(&op, *from).unwrap());
            prop_assert_eq!(t1.digest(), t2.digest());
        }
        prop_assert_eq!(&t1, &t2);
    }
}

// ------------------------------------------------------------------ psite

#[test]
fn read_goes_to_the_closest_serializer_update_to_all() {
    let mut t = fig4_tree();
    let leaf = t.find_leaf(40);
    t.initialize_reps(|id, n| if id == leaf { set(&[B, C]) } else { n.reps() });
    let read = Op::Read { key: 40 };
    // From A, C (70 ms) is closer than B (150 ms); B and C read locally.
    assert_eq!(t.psite(&read, A), set(&[C]));
    assert_eq!(t.psite(&read, B), set(&[B]));
    assert_eq!(t.psite(&read, C), set(&[C]));
    let update = Op::Update {
        key: 40,
        value: vec![],
    };
    for from in [A, B, C] {
        assert_eq!(t.psite(&update, from), set(&[B, C]));
    }
    assert_eq!(t.psite(&Op::Dop, B), set(&[A, B, C]));
}

#[test]
fn ties_go_to_the_lowest_index() {
    let t = Topology::from_rtt_ms(
        &["x", "y", "z"],
        &[&[0.0, 5.0, 5.0], &[5.0, 0.0, 1.0], &[5.0, 1.0, 0.0]],
    )
    .unwrap();
    let mut g = GeoBTree::new(t, GbTreeOptions::new(4, 0)).unwrap();
    g.initialize_reps(|_, _| set(&[1, 2]));
    assert_eq!(g.psite(&Op::Read { key: 3 }, 0), set(&[1]));
}

#[test]
fn get_next_and_prev_union_the_closest_of_both_leaves() {
    let mut t = fig4_tree();
    // GET-NEXT(20) is 30, in the next leaf; GET-PREV(30) is 20, in the previous one.
    let (l20, l30) = (t.find_leaf(20), t.find_leaf(30));
    assert_ne!(l20, l30);
    t.initialize_reps(|id, n| match id {
        _ if id == l20 => set(&[A]),
        _ if id == l30 => set(&[B, C]),
        _ => n.reps(),
    });
    let next = Op::GetNext { key: 20 };
    assert_eq!(t.psite(&next, A), set(&[A, C]));
    assert_eq!(t.psite(&next, B), set(&[A, B]));
    let prev = Op::GetPrev { key: 30 };
    assert_eq!(t.psite(&prev, A), set(&[A, C]));
    // The answer in k's own leaf [70 80]: one serializer.
    assert_eq!(t.psite(&Op::GetNext { key: 70 }, A), set(&[C]));
    assert_eq!(t.psite(&Op::GetPrev { key: 80 }, B), set(&[C]));
    // No answer: k's leaf only.
    assert_eq!(t.psite(&Op::GetPrev { key: 10 }, B), set(&[C]));
    assert_eq!(t.psite(&Op::GetNext { key: 80 }, B), set(&[C]));
    assert_eq!(
        t.execute(&Op::GetNext { key: 20 }, A).unwrap(),
        Reply::Entry(Some((30, 30u64.to_le_bytes().to_vec())))
    );
    assert_eq!(
        t.execute(&Op::GetPrev { key: 10 }, A).unwrap(),
        Reply::Entry(None)
    );
}

#[test]
fn insert_predicts_splits_up_the_tree() {
    let mut t = fig4_tree();
    // Leaf [10] has room: the leaf's serializers only.
    assert_eq!(t.psite(&insert(15), A), set(&[C]));
    t.execute(&insert(15), A).unwrap();
    // Leaf [10 15] is full, its parent [20] is not: leaf and parent.
    assert_eq!(t.psite(&insert(12), A), set(&[B, C]));
    // Leaf [70 80] full, parent [60 70] full, root [30 50] full: the whole path.
    assert_eq!(t.psite(&insert(90), A), set(&[A, B, C]));
    // An UPDATE of the same leaf never predicts a split.
    let update = Op::Update {
        key: 80,
        value: vec![],
    };
    assert_eq!(t.psite(&update, A), set(&[C]));
}

#[test]
fn splits_inherit_serializers_and_start_changed_with_zero_counters() {
    let mut t = fig4_tree();
    let nodes_before = t.node_count();
    let old_root = t.root();
    t.execute(&insert(90), B).unwrap();
    t.invariants();
    // Leaf, inner node and root split: three new halves and a new root.
    assert_eq!(t.node_count(), nodes_before + 4);
    assert_eq!(t.height(), 4);
    let root = t.node(t.root());
    assert_eq!(
        root.reps(),
        set(&[A]),
        "a new root inherits the old root's reps"
    );
    assert_eq!(root.children()[0], old_root);
    for (id, n) in t.nodes().skip(nodes_before) {
        assert!(t.changed(id), "new node {} changed", n.uid());
        if n.is_leaf() {
            assert!(
                t.stats(id).is_empty(),
                "new leaf {} has zero counters",
                n.uid()
            );
        }
    }
    // New inner nodes count what the leaves below them count (the invariants check
    // every node): the insert's write, counted on leaf [70 …] before it split, now
    // under the new inner half [70 80] and the new root.
    let l70 = t.find_leaf(70);
    let p70 = t.node(l70).parent().unwrap();
    assert!(p70.index() >= nodes_before, "[70 80] is a new half");
    assert_eq!(t.writes(p70)[B], 1);
    assert_eq!(t.writes(t.root())[B], 1);
    assert_eq!(
        t.writes(old_root)[B],
        0,
        "the old root's half kept [20] and [40]"
    );
    // Every half keeps its level's serializers.
    for (_, n) in t.nodes() {
        let want = match t.height() - 1 - n.depth() {
            0 => set(&[C]),
            1 => set(&[B]),
            _ => set(&[A]),
        };
        assert_eq!(n.reps(), want, "node {} at depth {}", n.uid(), n.depth());
    }
}

// ------------------------------------------------------------------ execute

#[test]
fn the_counter_walk_includes_the_root() {
    let mut t = fig4_tree();
    let path = |t: &GeoBTree, key: u64| {
        let mut v = vec![t.find_leaf(key)];
        while let Some(p) = t.node(*v.last().unwrap()).parent() {
            v.push(p);
        }
        v
    };
    let on_path = path(&t, 40);
    assert_eq!(on_path.len(), 3);
    assert_eq!(*on_path.last().unwrap(), t.root());
    t.execute(&Op::Read { key: 40 }, B).unwrap();
    t.execute(
        &Op::Update {
            key: 40,
            value: vec![7],
        },
        C,
    )
    .unwrap();
    for (id, n) in t.nodes() {
        if on_path.contains(&id) {
            // Algorithm 1's `while n.parent` would leave the root at 0.
            assert_eq!(
                (t.reads(id)[B], t.writes(id)[C]),
                (1, 1),
                "node {}",
                n.uid()
            );
            assert_eq!(t.stats(id).total_ops(), 2);
            assert!(t.changed(id));
        } else {
            assert!(
                t.stats(id).is_empty() && !t.changed(id),
                "node {} off the path",
                n.uid()
            );
        }
    }
    // A GET-NEXT answered from the next leaf also counts a read there, with its
    // ancestors (an inner node counts what its leaves count).
    let l30 = t.find_leaf(30);
    t.execute(&Op::GetNext { key: 20 }, A).unwrap();
    assert_eq!(t.reads(l30)[A], 1);
    assert_eq!(t.reads(t.root())[A], 2, "the root once per leaf read");
    t.invariants();
}

#[test]
fn dop_on_fig2_counters_gives_a_b_c() {
    for options in [
        OptimizerOptions::brute_force(),
        OptimizerOptions::hot(),
        OptimizerOptions::hot_cached(CACHE_ENTRIES_DEFAULT),
    ] {
        let mut t = tree(8, options);
        for k in 0..4 {
            t.execute(&insert(k), A).unwrap();
        }
        t.dop();
        t.initialize_reps(|_, _| set(&[B]));
        // Fig. 2(b): reads 10/100/50, writes 10/1/5 at A/B/C, on the one leaf (the root).
        for (from, reads, writes) in [(A, 10, 10), (B, 100, 1), (C, 50, 5)] {
            for i in 0..reads {
                t.execute(&Op::Read { key: i % 4 }, from).unwrap();
            }
            for i in 0..writes {
                t.execute(
                    &Op::Update {
                        key: i % 4,
                        value: vec![1],
                    },
                    from,
                )
                .unwrap();
            }
        }
        assert_eq!(t.reads(t.root()), &[10, 100, 50]);
        assert_eq!(t.writes(t.root()), &[10, 1, 5]);
        let Reply::Dop(r) = t.execute(&Op::Dop, C).unwrap() else {
            panic!("a DOP replies with its report");
        };
        // Table I: {A,B,C} costs 2400, the minimum (Algorithm 1's inverted line 53
        // would keep no configuration at all).
        let root = t.node(t.root());
        assert_eq!(root.reps(), set(&[A, B, C]), "{}", options.label());
        assert_eq!((r.nodes_evaluated, r.reps_changed), (1, 1));
        assert_eq!(r.computed + r.cache_hits, 1);
        assert!(
            !t.changed(t.root()) && t.stats(t.root()).is_empty(),
            "reset after the DOP"
        );
        t.invariants();
        // Nothing changed since: the next DOP evaluates nothing.
        assert_eq!(t.dop().nodes_evaluated, 0);
    }
}

/// The DOP reads the counters and applies the plans in memory order and gives the
/// optimizer precomputed cache keys in tree order: it must come out as the optimizer
/// asked node by node in tree order with each node's statistics, for every strategy
/// (a small cache, so that entries are evicted and hits and misses mix), over DOPs
/// on a tree that splits between them.
#[test]
fn dop_equals_the_optimizer_asked_node_by_node_in_tree_order() {
    for options in [
        OptimizerOptions::brute_force(),
        OptimizerOptions::hot(),
        OptimizerOptions::cached(6),
        OptimizerOptions::hot_cached(6),
    ] {
        let mut t = tree(3, options);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut hits, mut computed, mut changed) = (0, 0, 0);
        for window in 0..12 {
            for _ in 0..150 {
                let (r, from) = (next(), (next() % 3) as usize);
                let key = r % 400;
                let op = match r % 7 {
                    0 | 1 => insert(key),
                    2 => Op::Update {
                        key,
                        value: vec![window as u8],
                    },
                    _ => Op::Read { key },
                };
                t.execute(&op, from).unwrap();
            }
            let mut optimizer = t.optimizer().clone();
            let mut expected = t.clone();
            let mut want = Vec::new();
            for id in t.tree_order() {
                if t.changed(id) {
                    let plan = optimizer.optimize(&t.stats(id));
                    want.push((id, plan.map(|p| p.config)));
                }
            }
            expected.initialize_reps(|id, n| match want.iter().find(|(w, _)| *w == id) {
                Some((_, Some(c))) => *c,
                _ => n.reps(),
            });
            let (r, plans) = t.dop_with_plans();
            assert_eq!(
                t.optimizer(),
                &optimizer,
                "{}: the cache and counters",
                options.label()
            );
            assert_eq!(r.nodes_evaluated, want.len() as u64);
            assert_eq!(
                plans
                    .iter()
                    .map(|(id, p)| (*id, Some(p.config)))
                    .collect::<Vec<_>>(),
                want.iter()
                    .filter(|(_, c)| c.is_some())
                    .copied()
                    .collect::<Vec<_>>(),
                "{}: plans in tree order",
                options.label()
            );
            for (id, n) in t.nodes() {
                assert_eq!(n.reps(), expected.node(id).reps(), "{}", options.label());
                assert!(!t.changed(id) && t.stats(id).is_empty(), "reset");
            }
            t.invariants();
            (hits, computed) = (hits + r.cache_hits, computed + r.computed);
            changed += r.reps_changed;
        }
        if options.cache_entries_max.is_some() {
            assert!(
                hits > 0 && computed > 0,
                "{}: hits and misses",
                options.label()
            );
        }
        assert!(changed > 0 && t.node_count() > 20, "{}", options.label());
    }
}

#[test]
fn dop_skips_new_nodes_without_accesses_and_keeps_their_reps() {
    let mut t = fig4_tree();
    t.execute(&insert(90), B).unwrap();
    let changed = t.nodes().filter(|(id, _)| t.changed(*id)).count() as u64;
    let r = t.dop();
    assert_eq!(r.nodes_evaluated, changed);
    // No access counted below: the new leaf [80 90], and the left halves of the
    // split inner node and root (their leaves had no access since fig4_tree's DOP;
    // the insert's write went with leaf [70] to the right halves).
    assert_eq!(r.nodes_skipped_empty, 3);
    assert_eq!(r.computed, changed - 3);
    assert!(t.nodes().all(|(id, _)| !t.changed(id)));
    t.invariants();
}

#[test]
fn values_over_the_bound_are_refused_and_change_nothing() {
    let mut o = GbTreeOptions::new(4, 3);
    o.value_bytes_max = 100;
    let mut t = GeoBTree::new(Topology::paper_three_regions(), o).unwrap();
    t.execute(
        &Op::Insert {
            key: 1,
            value: vec![0; 100],
        },
        A,
    )
    .unwrap();
    let before = t.digest();
    for op in [
        Op::Insert {
            key: 2,
            value: vec![0; 101],
        },
        Op::Update {
            key: 1,
            value: vec![0; 101],
        },
    ] {
        assert_eq!(
            t.execute(&op, A),
            Err(GbTreeError::ValueTooLarge { len: 101, max: 100 })
        );
    }
    assert_eq!(t.digest(), before);
    for order in [0, 1, partita_geo::ORDER_MAX + 1] {
        assert!(matches!(
            GeoBTree::new(
                Topology::paper_three_regions(),
                GbTreeOptions::new(order, 0)
            ),
            Err(GbTreeError::Order { .. })
        ));
    }
}

// ------------------------------------------------------------------ determinism

/// A fixed pseudo-random request stream (no generator crate needed).
fn stream(seed: u64, len: usize) -> Vec<(Op, usize)> {
    let mut x = seed;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    (0..len)
        .map(|i| {
            let key = next() % 500;
            let from = (next() % 3) as usize;
            let op = match next() % 10 {
                _ if i % 97 == 96 => Op::Dop,
                0..=3 => insert(key),
                4..=6 => Op::Read { key },
                7 => Op::GetNext { key },
                8 => Op::GetPrev { key },
                _ => Op::Update {
                    key,
                    value: vec![i as u8],
                },
            };
            (op, from)
        })
        .collect()
}

#[test]
fn same_requests_give_the_same_digest_and_different_ones_do_not() {
    let build = || {
        let mut o = GbTreeOptions::new(5, 42);
        o.optimizer = OptimizerOptions::hot_cached(64);
        GeoBTree::new(Topology::paper_three_regions(), o).unwrap()
    };
    let ops = stream(7, 3000);
    let (mut t1, mut t2, mut t3) = (build(), build(), build());
    for (i, (op, from)) in ops.iter().enumerate() {
        t1.execute(op, *from).unwrap();
        t2.execute(op, *from).unwrap();
        // The control: one request from another replica.
        let from3 = if i == ops.len() - 1 {
            (*from + 1) % 3
        } else {
            *from
        };
        t3.execute(op, from3).unwrap();
    }
    t1.invariants();
    assert!(t1.height() >= 3, "the stream grows a real tree");
    assert!(
        t1.optimizer().cache().unwrap().len() > 1,
        "the DOPs used the cache"
    );
    assert_eq!(t1.digest(), t2.digest());
    assert_ne!(
        t1.digest(),
        t3.digest(),
        "a different origin changes a counter"
    );
    // Another seed draws another root configuration.
    let mut o = GbTreeOptions::new(5, 43);
    o.optimizer = OptimizerOptions::hot_cached(64);
    let other = GeoBTree::new(Topology::paper_three_regions(), o).unwrap();
    assert_ne!(build().digest(), other.digest());
}

#[test]
fn randomize_reps_is_seeded_and_spreads_over_configurations() {
    let mut t = tree(4, OptimizerOptions::brute_force());
    for (op, from) in stream(3, 2000).iter().filter(|(op, _)| op.is_write()) {
        t.execute(op, *from).unwrap();
    }
    let mut u = t.clone();
    t.randomize_reps(11);
    u.randomize_reps(11);
    assert_eq!(t.digest(), u.digest());
    u.randomize_reps(12);
    assert_ne!(t.digest(), u.digest());
    let mut seen = [0u32; 8];
    for (_, n) in t.nodes() {
        seen[n.reps().mask() as usize] += 1;
    }
    assert_eq!(seen[0], 0);
    assert!(
        seen[1..].iter().all(|&c| c > 0),
        "all 7 configurations drawn: {seen:?}"
    );
}

// ------------------------------------------------------------------ delivery

#[test]
fn resubmit_after_a_dop_moved_the_leaf() {
    let mut t = fig4_tree();
    let leaf = t.find_leaf(40);
    t.initialize_reps(|id, n| if id == leaf { set(&[B, C]) } else { n.reps() });
    let read = Op::Read { key: 40 };
    let update = Op::Update {
        key: 40,
        value: vec![9],
    };
    let read_dst = t.psite(&read, A);
    let update_dst = t.psite(&update, A);
    assert_eq!((read_dst, update_dst), (set(&[C]), set(&[B, C])));
    // Meanwhile only A reads the leaf: the DOP moves it to {A}.
    for _ in 0..10 {
        t.execute(&Op::Read { key: 40 }, A).unwrap();
    }
    t.execute(&Op::Dop, A).unwrap();
    assert_eq!(t.node(leaf).reps(), set(&[A]));
    assert_eq!(
        t.deliver_decision(&read, A, read_dst),
        Decision::Resubmit(set(&[A]))
    );
    assert_eq!(
        t.deliver_decision(&update, A, update_dst),
        Decision::Resubmit(set(&[A]))
    );
    let before = t.digest();
    assert_eq!(
        t.deliver(&read, A, read_dst).unwrap(),
        Delivery::Resubmit(set(&[A]))
    );
    assert_eq!(t.digest(), before, "a resubmitted request executes nothing");
    // Re-serialized with the new serializers, both execute.
    assert!(matches!(
        t.deliver(&read, A, set(&[A])).unwrap(),
        Delivery::Executed(Reply::Value(Some(_)))
    ));
    assert!(matches!(
        t.deliver(&update, A, set(&[A])).unwrap(),
        Delivery::Executed(Reply::Old(Some(_)))
    ));
}

#[test]
fn a_read_still_covered_by_one_serializer_executes() {
    let mut t = fig4_tree();
    let leaf = t.find_leaf(40);
    t.initialize_reps(|id, n| if id == leaf { set(&[C]) } else { n.reps() });
    let read = Op::Read { key: 40 };
    let dst = t.psite(&read, A);
    assert_eq!(dst, set(&[C]));
    // A and C read, nobody writes: the DOP picks {A,C}. A's closest is now A itself,
    // but C, which ordered the read, is still a serializer: read-one is satisfied.
    for from in [A, C, A, C] {
        t.execute(&Op::Read { key: 40 }, from).unwrap();
    }
    t.dop();
    assert_eq!(t.node(leaf).reps(), set(&[A, C]));
    assert_eq!(t.psite(&read, A), set(&[A]));
    assert_eq!(t.deliver_decision(&read, A, dst), Decision::Execute);
    // A write ordered by C alone is not enough any more.
    let update = Op::Update {
        key: 40,
        value: vec![],
    };
    assert_eq!(
        t.deliver_decision(&update, A, dst),
        Decision::Resubmit(set(&[A, C]))
    );
}

#[test]
fn resubmit_after_a_split_misprediction() {
    let mut t = fig4_tree();
    // INSERT(12) is submitted while leaf [10] has room: the leaf's serializers only.
    let late = insert(12);
    let dst = t.psite(&late, A);
    assert_eq!(dst, set(&[C]));
    // INSERT(15) is delivered first and fills the leaf.
    let first = insert(15);
    let first_dst = t.psite(&first, B);
    assert_eq!(
        t.deliver(&first, B, first_dst).unwrap(),
        Delivery::Executed(Reply::Inserted(true))
    );
    // Now INSERT(12) splits the leaf, which modifies its parent {B}: resubmit.
    assert_eq!(
        t.deliver_decision(&late, A, dst),
        Decision::Resubmit(set(&[B, C]))
    );
    let nodes = t.node_count();
    assert_eq!(
        t.deliver(&late, A, set(&[B, C])).unwrap(),
        Delivery::Executed(Reply::Inserted(true))
    );
    assert_eq!(t.node_count(), nodes + 1, "the leaf split");
    t.invariants();
    // A predicted split that does not happen (the key is present) over-includes but
    // executes: a superset of the serializers is always safe.
    let again = insert(12);
    assert_eq!(
        t.deliver_decision(&again, A, set(&[A, B, C])),
        Decision::Execute
    );
}

#[test]
fn a_dop_needs_every_replica() {
    let t = fig4_tree();
    assert_eq!(
        t.deliver_decision(&Op::Dop, A, set(&[A, B])),
        Decision::Resubmit(set(&[A, B, C]))
    );
    assert_eq!(
        t.deliver_decision(&Op::Dop, A, set(&[A, B, C])),
        Decision::Execute
    );
}

#[test]
fn replace_optimizer_checks_the_topology() {
    let mut t = fig4_tree();
    let other = partita_geo::Optimizer::new(
        Topology::from_rtt_ms(&["x"], &[&[0.0]]).unwrap(),
        OptimizerOptions::brute_force(),
    )
    .unwrap();
    assert_eq!(
        t.replace_optimizer(other).unwrap_err(),
        GbTreeError::TopologyMismatch
    );
    let same =
        partita_geo::Optimizer::new(Topology::paper_three_regions(), OptimizerOptions::hot())
            .unwrap();
    let old = t.replace_optimizer(same).unwrap();
    assert_eq!(old.options(), OptimizerOptions::brute_force());
    assert_eq!(t.optimizer().options(), OptimizerOptions::hot());
    let _ = NodeId::index;
}

/// Two inserts that share no serializer run in either order at different replicas
/// (GeoPaxos+ orders only operations that meet at a serializer), and each splits a leaf:
/// the trees then number their new nodes differently. Found by `partita nemesis --geo`:
/// a replica that executed them as they came and the ones that relearned the logs after
/// a restart held the same keys but different digests, and the DOP, which walked nodes
/// in uid order, fed the optimizer's cache in a different order. The digest and the DOP
/// must depend on the tree's shape alone.
#[test]
fn inserts_that_share_no_serializer_commute_with_their_splits() {
    // Order 2; keys 10..=80 as in Fig. 4, plus 15 and 45 so that leaves [10 15] and
    // [40 45] are full under parents with room ([20] and [40]).
    let mut t = tree(2, OptimizerOptions::hot_cached(CACHE_ENTRIES_DEFAULT));
    for k in (10..=80).step_by(10).chain([15, 45]) {
        t.execute(&insert(k), A).unwrap();
    }
    t.dop();
    // The root at A, the first subtree at B, the others at C.
    let root = t.root();
    let first = t.node(root).children()[0];
    let under_first = |t: &GeoBTree, mut id: NodeId| loop {
        if id == first {
            return true;
        }
        match t.node(id).parent() {
            Some(p) => id = p,
            None => return false,
        }
    };
    let reps: Vec<(NodeId, Config)> = t
        .nodes()
        .map(|(id, _)| {
            let c = if id == root {
                set(&[A])
            } else if under_first(&t, id) {
                set(&[B])
            } else {
                set(&[C])
            };
            (id, c)
        })
        .collect();
    t.initialize_reps(|id, _| reps.iter().find(|(n, _)| *n == id).unwrap().1);
    t.invariants();
    let (x, y) = (insert(17), insert(47));
    let (px, py) = (t.psite(&x, A), t.psite(&y, C));
    assert_eq!((px, py), (set(&[B]), set(&[C])), "disjoint serializers");

    let mut xy = t.clone();
    let mut yx = t.clone();
    xy.execute(&x, A).unwrap();
    xy.execute(&y, C).unwrap();
    yx.execute(&y, C).unwrap();
    yx.execute(&x, A).unwrap();
    xy.invariants();
    yx.invariants();
    // Both split a leaf, in a different order: the new leaves got different uids.
    assert_ne!(
        xy.node(xy.find_leaf(17)).uid(),
        yx.node(yx.find_leaf(17)).uid(),
        "the splits numbered nodes in the order they ran"
    );
    assert_eq!(xy.digest(), yx.digest(), "same shape, same digest");
    // Reads from every region, so that the DOP has work and the cache fills in the
    // order the DOP visits nodes.
    for k in [10, 17, 20, 30, 47, 50, 70] {
        for (i, from) in [A, B, C].into_iter().enumerate() {
            for _ in 0..=i {
                xy.execute(&Op::Read { key: k }, from).unwrap();
                yx.execute(&Op::Read { key: k }, from).unwrap();
            }
        }
    }
    assert_eq!(xy.digest(), yx.digest());
    let (rx, ry) = (xy.dop(), yx.dop());
    assert!(rx.nodes_evaluated > 0, "{rx:?}");
    assert_eq!(rx, ry);
    assert_eq!(
        xy.digest(),
        yx.digest(),
        "the DOP gave both the same serializers"
    );
}

/// A read ordered by its leaf's serializer alone and an insert that splits the leaf's
/// parent and the root (their serializers disjoint) run in either order at different
/// replicas: the counters, which the DOP turns into serializers, must come out the
/// same. With Algorithm 1's walk as written they did not (the read counted on the old
/// parent or on its new half, and a new root started at zero), and `partita nemesis
/// --geo` saw replicas diverge.
#[test]
fn a_read_and_a_split_above_it_commute() {
    let mut t = fig4_tree();
    let l = t.find_leaf(50);
    t.initialize_reps(|id, _| if id == l { set(&[C]) } else { set(&[B]) });
    let (r, i) = (Op::Read { key: 50 }, insert(85));
    assert_eq!((t.psite(&r, C), t.psite(&i, B)), (set(&[C]), set(&[B])));
    let mut ri = t.clone();
    let mut ir = t.clone();
    ri.execute(&r, C).unwrap();
    ri.execute(&i, B).unwrap();
    ir.execute(&i, B).unwrap();
    ir.execute(&r, C).unwrap();
    ri.invariants();
    ir.invariants();
    assert_eq!(
        ri.height(),
        4,
        "the insert split the read's parent and the root"
    );
    assert_eq!(ri.digest(), ir.digest());
    assert_eq!(ri.dop(), ir.dop());
    assert_eq!(ri.digest(), ir.digest());
}

/// Every pair of requests whose serializers are disjoint gives the same replies,
/// delivery decisions, tree and counters in either order (GeoPaxos+ orders only
/// requests that meet at a serializer, so replicas run such pairs either way): over
/// random trees with random serializers, reads, GET-*, updates and inserts that split.
#[test]
fn requests_that_share_no_serializer_commute() {
    let mut pairs = 0;
    for seed in 0..40u64 {
        let mut o = GbTreeOptions::new(3, seed);
        o.optimizer = OptimizerOptions::hot_cached(64);
        let mut t = GeoBTree::new(Topology::paper_three_regions(), o).unwrap();
        let ops = stream(seed, 900);
        for (op, from) in &ops[..300] {
            t.execute(op, *from).unwrap();
        }
        t.dop();
        t.randomize_reps(seed);
        let rest: Vec<&(Op, usize)> = ops[300..].iter().filter(|(op, _)| *op != Op::Dop).collect();
        for pair in rest.chunks(2) {
            let [(a, fa), (b, fb)] = pair else { continue };
            let (da, db) = (t.psite(a, *fa), t.psite(b, *fb));
            if da.mask() & db.mask() == 0 {
                pairs += 1;
                let mut ab = t.clone();
                let mut ba = t.clone();
                let (ab_a, ab_b) = (ab.deliver(a, *fa, da), ab.deliver(b, *fb, db));
                let (ba_b, ba_a) = (ba.deliver(b, *fb, db), ba.deliver(a, *fa, da));
                assert_eq!((&ab_a, &ab_b), (&ba_a, &ba_b), "seed {seed}: {a:?} / {b:?}");
                assert_eq!(ab.digest(), ba.digest(), "seed {seed}: {a:?} / {b:?}");
                ab.invariants();
                t = ab;
            } else {
                t.deliver(a, *fa, da).unwrap();
                t.deliver(b, *fb, db).unwrap();
            }
        }
        t.dop();
    }
    assert!(pairs > 1000, "only {pairs} pairs with disjoint serializers");
}
