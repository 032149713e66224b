//! [`GeoService`], the geo B+tree as a service that places its own objects: against
//! the existing `GeoReplica` on the same operations (same psite at submission, same
//! delivery decisions, same replies, same digest, with DOPs and resubmissions), the
//! genesis, the client commands' bytes, refusals, snapshots, reconfiguration, undo,
//! `access`, the planted bug, and the unconfigured service.

use partita_btree::{BPlusTree, BatchOp, Op, OpResult};
use partita_consensus::geopaxos::{Entry, SerializerId, TimestampMerge};
use partita_geo::replica::{GeoAction, GeoReplica, GeoValue, OpId};
use partita_geo::{
    geo_value, map_value, Config, GeoBTree, GeoCommand, GeoGenesis, GeoService, Home, Op as GeoOp,
    OptimizerOptions, Placement, Reply as GeoReply, Topology, GENESIS_MAGIC, SHAPE_OBJECT,
};
use partita_service::{envelope, Access, ServiceCodec, SplitError, StateMachine};
use partita_types::PartitionMap;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};

const N: usize = 3;

fn genesis(keys: u64) -> GeoGenesis {
    GeoGenesis {
        order: 4,
        seed: 7,
        optimizer: OptimizerOptions::hot_cached(1000),
        ..GeoGenesis::new(Topology::paper_three_regions(), keys)
    }
}

fn op(o: Op) -> GeoCommand {
    GeoCommand::Op(o)
}

/// The client's command as the geo tree's operation (as `partita-node` maps it).
fn to_geo(o: &Op, value_bytes: usize) -> GeoOp {
    match *o {
        Op::Read { key } => GeoOp::Read { key },
        Op::Next { key } => GeoOp::GetNext { key },
        Op::Prev { key } => GeoOp::GetPrev { key },
        Op::Update { key, value } => GeoOp::Update {
            key,
            value: geo_value(value, value_bytes),
        },
        Op::Insert { key, value } => GeoOp::Insert {
            key,
            value: geo_value(value, value_bytes),
        },
        _ => unreachable!("not generated"),
    }
}

fn to_result(r: &GeoReply) -> OpResult {
    match r {
        GeoReply::Value(v) => OpResult::Value(v.as_deref().map(map_value)),
        GeoReply::Entry(e) => OpResult::Entry(e.as_ref().map(|(k, v)| (*k, map_value(v)))),
        GeoReply::Old(v) => OpResult::Old(v.as_deref().map(map_value)),
        GeoReply::Inserted(b) => OpResult::Inserted(*b),
        GeoReply::Dop(_) => unreachable!(),
    }
}

// ---------------------------------------------------------------------------------------
// The service against GeoReplica.

/// Three `GeoReplica`s over shared serializer logs (each serializer's Paxos group is
/// its decided log), and beside them one `GeoService` fed the same logs through a
/// timestamp merge of its own, deciding and executing as the common replica will.
struct World {
    replicas: Vec<GeoReplica>,
    logs: Vec<Vec<Entry<OpId, GeoValue>>>,
    learned: Vec<Vec<usize>>,
    /// The origins' replies, by request id.
    replies: BTreeMap<u64, GeoReply>,
    /// Every client request: its command and origin.
    requests: BTreeMap<u64, (Op, usize)>,
    service: GeoService,
    merge: TimestampMerge<OpId, GeoValue>,
    merged: Vec<usize>,
    executed: u64,
    resubmitted: u64,
    dops: u64,
}

impl World {
    /// Replicas built from `g`, the service from `service` (the same, but in the
    /// control).
    fn new(g: &GeoGenesis, service: &GeoGenesis) -> World {
        let tree = g.tree().unwrap();
        World {
            replicas: (0..N)
                .map(|r| GeoReplica::new(r, tree.clone()).unwrap())
                .collect(),
            logs: vec![Vec::new(); N],
            learned: vec![vec![0; N]; N],
            replies: BTreeMap::new(),
            requests: BTreeMap::new(),
            service: GeoService::from_genesis(service).unwrap(),
            merge: TimestampMerge::new(N).unwrap(),
            merged: vec![0; N],
            executed: 0,
            resubmitted: 0,
            dops: 0,
        }
    }

    /// The replica's actions: entries into the serializers' logs (stamped with its
    /// clock), replies kept by request id. Returns the `dst` of the entries.
    fn act(&mut self, r: usize, acts: Vec<GeoAction>) -> Option<u64> {
        let mut dst = None;
        for a in acts {
            match a {
                GeoAction::Serialize {
                    serializer,
                    op,
                    dst: d,
                    value,
                } => {
                    dst = Some(u64::from(d.0));
                    let hint = self.replicas[r].hint();
                    self.logs[serializer as usize].push(Entry::Op {
                        op,
                        dst: d,
                        hint,
                        value,
                    });
                }
                GeoAction::Reply {
                    reply: GeoReply::Dop(_),
                    ..
                } => {}
                GeoAction::Reply { request, reply } => {
                    assert!(
                        self.replies.insert(request, reply).is_none(),
                        "one reply per request"
                    );
                }
                GeoAction::Refused { reason, .. } => panic!("refused: {reason}"),
            }
        }
        dst
    }

    /// A client's request at replica `r`: the service's psite, on the state every
    /// replica holds now, must be the `dst` the replica asks for.
    fn submit(&mut self, r: usize, request: u64, o: Op) {
        let expected = self.service.psite(&op(o.clone()), r);
        let mut acts = Vec::new();
        let g = to_geo(&o, self.service.value_bytes());
        self.replicas[r].submit(request, g, &mut acts).unwrap();
        let dst = self.act(r, acts);
        assert_eq!(dst, expected, "psite of {o:?} from {r}");
        self.requests.insert(request, (o, r));
    }

    fn dop(&mut self, r: usize, request: u64) {
        let mut acts = Vec::new();
        self.replicas[r]
            .submit(request, GeoOp::Dop, &mut acts)
            .unwrap();
        assert_eq!(
            self.act(r, acts),
            Some(0b111),
            "a DOP goes to every serializer"
        );
    }

    /// Every replica learns every log to its end; clock entries where a merge waits.
    fn settle(&mut self) {
        loop {
            let mut progress = false;
            for r in 0..N {
                for g in 0..N {
                    while self.learned[r][g] < self.logs[g].len() {
                        let pos = self.learned[r][g];
                        let entry = self.logs[g][pos].clone();
                        let mut acts = Vec::new();
                        self.replicas[r]
                            .on_decided(g as SerializerId, pos as u64, entry, &mut acts)
                            .unwrap();
                        self.learned[r][g] += 1;
                        self.act(r, acts);
                        progress = true;
                    }
                }
            }
            if progress {
                continue;
            }
            for g in 0..N as SerializerId {
                let wanted = (0..N)
                    .filter_map(|r| self.replicas[r].wanted_clock(g))
                    .max();
                if let Some(c) = wanted {
                    self.logs[g as usize].push(Entry::Clock { hint: c });
                    progress = true;
                }
            }
            if !progress {
                break;
            }
        }
        for r in &self.replicas {
            assert_eq!(r.merge().pending_len(), 0, "everything executed");
            r.invariants();
        }
    }

    /// The service's side: the same logs through its own merge; each released request
    /// is decided with `misplaced` and executed with `execute_at` (DOPs with
    /// `reconfigure`), and must match what the replicas did.
    fn serve(&mut self) {
        let resubmissions: BTreeSet<(OpId, u64)> = self
            .logs
            .iter()
            .flatten()
            .filter_map(|e| match e {
                Entry::Op { op, dst, .. } => Some((*op, u64::from(dst.0))),
                Entry::Clock { .. } => None,
            })
            .collect();
        for g in 0..N {
            while self.merged[g] < self.logs[g].len() {
                let pos = self.merged[g];
                self.merge
                    .on_entry(g as SerializerId, pos as u64, self.logs[g][pos].clone())
                    .unwrap();
                self.merged[g] += 1;
            }
        }
        while let Some(ready) = self.merge.pop_ready() {
            if ready.value.op == GeoOp::Dop {
                self.service.reconfigure();
                self.dops += 1;
                continue;
            }
            let (o, origin) = self.requests[&ready.value.request].clone();
            let from = ready.op.from as usize;
            assert_eq!(from, origin);
            let cmd = op(o);
            match self.service.misplaced(&cmd, from, u64::from(ready.dst.0)) {
                Some(again) => {
                    let next = OpId {
                        attempt: ready.op.attempt + 1,
                        ..ready.op
                    };
                    assert!(
                        resubmissions.contains(&(next, again)),
                        "the replicas resubmitted {:?} to {again:#b} too",
                        ready.op
                    );
                    self.resubmitted += 1;
                }
                None => {
                    let reply = self.service.execute_at(&cmd, from);
                    let want = to_result(&self.replies[&ready.value.request]);
                    assert_eq!(reply, want, "{cmd:?} from {from}");
                    self.executed += 1;
                }
            }
        }
        assert_eq!(self.merge.pending_len(), 0);
        self.service.invariants();
        for r in &self.replicas {
            assert_eq!(self.service.digest(), r.digest());
        }
    }
}

/// A random client command; each replica's clients favour the keys the next replica
/// starts with, so that DOPs move nodes (and requests ordered before a DOP are
/// resubmitted after it).
fn random_op(rng: &mut ChaCha8Rng, r: usize, keys: u64) -> Op {
    let third = keys / N as u64;
    let key = if rng.gen_bool(0.7) {
        ((r + 1) % N) as u64 * third + rng.gen_range(0..third)
    } else {
        rng.gen_range(0..keys * 2)
    };
    let value = rng.gen_range(0..1000);
    match rng.gen_range(0..10) {
        0..=3 => Op::Read { key },
        4 => Op::Next { key },
        5 => Op::Prev { key },
        6 | 7 => Op::Update { key, value },
        _ => Op::Insert { key, value },
    }
}

#[test]
fn the_service_decides_and_answers_as_geo_replica() {
    let w = run_against_geo_replica(&genesis(30));
    assert_eq!(
        w.executed as usize,
        w.requests.len(),
        "every request ran once"
    );
    assert_eq!(w.replies.len(), w.requests.len());
    assert!(w.dops >= 30);
    // 28 with this seed.
    assert!(w.resubmitted > 10, "resubmissions were exercised");
    let moved = w
        .service
        .tree()
        .nodes()
        .filter(|(_, n)| {
            let home = Config::single((n.keys()[0] * 3 / 30).min(2) as usize);
            n.is_leaf() && n.reps() != home
        })
        .count();
    assert!(moved > 0, "DOPs moved leaves off their initial serializer");
}

/// The control: a service with the planted write bug does not pass for GeoReplica.
#[test]
#[should_panic(expected = "psite of")]
fn control_a_service_with_the_write_bug_is_caught() {
    let mut bugged = genesis(30);
    bugged.unsafe_write_ordered_by_one_serializer = true;
    run_against_geo_replica(&bugged);
}

/// 150 rounds of concurrent requests from every replica, a DOP every fifth round,
/// through `GeoReplica`s built from `genesis(30)` and the service built from `service`.
fn run_against_geo_replica(service: &GeoGenesis) -> World {
    let g = genesis(30);
    let mut w = World::new(&g, service);
    assert_eq!(w.service.digest(), w.replicas[0].digest());
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut request = 0u64;
    for round in 0..150 {
        // Now and then a DOP, ordered before the requests that follow it but not yet
        // executed when their psite is computed: those whose nodes it moves are
        // resubmitted.
        if round % 5 == 4 {
            request += 1;
            w.dop(0, request);
        }
        // Concurrent submissions: every replica's requests are on their way before any
        // is learned (inserts into one leaf split it unpredicted).
        for r in 0..N {
            for _ in 0..rng.gen_range(1..4) {
                request += 1;
                let o = random_op(&mut rng, r, 30);
                w.submit(r, request, o);
            }
        }
        w.settle();
        w.serve();
    }
    w
}

// ---------------------------------------------------------------------------------------
// The genesis.

#[test]
fn a_genesis_configures_the_tree_as_geopaxos_did() {
    let g = genesis(50);
    let payloads = GeoService::genesis(&g).unwrap();
    assert_eq!(payloads.len(), 1);
    assert_eq!(&payloads[0][..8], &GENESIS_MAGIC);
    let cmd = GeoService::decode_command(&payloads[0]).unwrap();
    assert_eq!(cmd, GeoCommand::Genesis(Box::new(g.clone())));
    assert_eq!(GeoService::encode_command(&cmd), payloads[0]);
    // What a replica factory does: the empty state, then the genesis.
    let mut s = GeoService::new();
    assert!(!s.is_configured());
    assert_eq!(s.execute(&cmd), OpResult::Inserted(true));
    assert!(s.is_configured());
    s.invariants();
    assert_eq!(s.digest(), g.tree().unwrap().digest());
    assert_eq!(s.digest(), GeoService::from_genesis(&g).unwrap().digest());
    assert_eq!(s.len(), 50);
    assert_eq!(s.n(), 3);
    assert_eq!(s.value_bytes(), 100);
    // GeoSetup::initial_tree's placement: leaves by key range, inner nodes everywhere.
    let t = s.tree();
    for (_, n) in t.nodes() {
        if n.is_leaf() {
            let r = (n.keys()[0] * 3 / 50) as usize;
            assert_eq!(n.reps(), Config::single(r), "leaf from {}", n.keys()[0]);
        } else {
            assert_eq!(n.reps(), Config::all(3));
        }
    }
    assert_eq!(t.get(17).map(map_value), Some(17));
    assert_eq!(t.get(17).unwrap().len(), 100);
    // A second genesis changes nothing.
    let d = s.digest();
    assert_eq!(s.execute(&cmd), OpResult::Inserted(false));
    assert_eq!(s.execute_at(&cmd, 1), OpResult::Inserted(false));
    assert_eq!(s.digest(), d);
    // An empty genesis: the tree's seeded root.
    let empty = GeoService::from_genesis(&genesis(0)).unwrap();
    assert_eq!(empty.len(), 0);
    assert_eq!(empty.digest(), genesis(0).tree().unwrap().digest());
}

/// The genesis's placement: GeoPaxos's (`Single`) puts every node, inner ones
/// included, on the one serializer of its first key's range, for good; DBT_b's
/// (`Random`) draws configurations from the seed, the same at every replica, and not
/// all of them single; both load the same entries as GeoPaxos+'s.
#[test]
fn the_genesis_places_nodes_as_its_placement_says() {
    let home = genesis(50).tree().unwrap();
    let single = GeoGenesis {
        placement: Placement::Single,
        ..genesis(50)
    }
    .tree()
    .unwrap();
    single.invariants();
    let mut inner = 0;
    for (_, n) in single.nodes() {
        let r = (n.keys()[0] * 3 / 50) as usize;
        assert_eq!(n.reps(), Config::single(r), "node from {}", n.keys()[0]);
        inner += usize::from(!n.is_leaf());
    }
    assert!(inner > 0, "a tree of 50 keys and order 4 has inner nodes");
    let random = |seed| {
        GeoGenesis {
            placement: Placement::Random,
            seed,
            ..genesis(50)
        }
        .tree()
        .unwrap()
    };
    let (a, b) = (random(7), random(7));
    a.invariants();
    assert_eq!(
        a.digest(),
        b.digest(),
        "the same seed, the same configurations"
    );
    assert_ne!(a.digest(), random(8).digest());
    assert!(a.nodes().any(|(_, n)| n.reps().len() > 1));
    for t in [&single, &a] {
        assert_eq!(t.len(), home.len());
        assert_eq!(t.get(17), home.get(17));
    }
    // For any other service, the placement is the objects' home.
    assert_eq!(Placement::Single.home(50, 7), Home::Range { objects: 50 });
    assert_eq!(Placement::Single.home(0, 7), Home::Hashed);
    assert_eq!(Placement::Random.home(50, 7), Home::Random { seed: 7 });
    assert_eq!(Placement::Home.home(50, 7), Home::Every);
    assert_eq!("single".parse::<Placement>(), Ok(Placement::Single));
    assert!("anywhere"
        .parse::<Placement>()
        .unwrap_err()
        .contains("random"));
}

#[test]
fn a_bad_genesis_does_not_decode() {
    let mut g = genesis(10);
    g.value_bytes = 4;
    assert!(GeoService::genesis(&g).unwrap_err().contains("value_bytes"));
    let mut bytes = GENESIS_MAGIC.to_vec();
    bytes.extend_from_slice(&partita_types::encode(&g));
    let e = GeoService::decode_command(&bytes).unwrap_err();
    assert!(e.to_string().contains("value_bytes"), "{e}");
    let mut g = genesis(10);
    g.order = 1;
    assert!(GeoService::genesis(&g).unwrap_err().contains("order"));
    g = genesis(partita_geo::GENESIS_KEYS_MAX + 1);
    assert!(GeoService::genesis(&g).unwrap_err().contains("keys"));
    // The magic and garbage.
    assert!(GeoService::decode_command(&GENESIS_MAGIC).is_err());
    assert!(GeoService::decode_command(b"GEO\0gen1\xff\xff").is_err());
}

// ---------------------------------------------------------------------------------------
// Clients' commands and refusals.

fn every_op() -> Vec<Op> {
    vec![
        Op::Insert { key: 3, value: 9 },
        Op::Delete { key: 3 },
        Op::Read { key: 3 },
        Op::Update { key: 3, value: 1 },
        Op::Query { min: 1, max: 5 },
        Op::Next { key: 3 },
        Op::Prev { key: 3 },
        Op::Batch(vec![BatchOp::Insert { key: 1, value: 2 }]),
    ]
}

#[test]
fn client_commands_are_the_btree_services_bytes() {
    for o in every_op() {
        let bytes = BPlusTree::encode_command(&o);
        let cmd = GeoService::decode_command(&bytes).unwrap();
        assert_eq!(cmd, GeoCommand::Op(o.clone()));
        assert_eq!(GeoService::encode_command(&cmd), bytes, "{o:?}");
    }
    let r = OpResult::Entry(Some((4, 5)));
    assert_eq!(GeoService::encode_reply(&r), BPlusTree::encode_reply(&r));
    // What the btree service refuses to decode, so does this one.
    for bad in [&b""[..], b"\x01", b"\x09\0\0\0", b"GEO"] {
        assert!(BPlusTree::decode_command(bad).is_err());
        assert!(GeoService::decode_command(bad).is_err());
    }
}

#[test]
fn what_the_geo_tree_lacks_and_the_genesis_are_refused() {
    for o in every_op() {
        let verdict = GeoService::check(&op(o.clone()));
        match o {
            Op::Delete { .. } | Op::Query { .. } | Op::Batch(_) => {
                let why = verdict.unwrap_err();
                assert!(why.contains(&format!("has no {}", o.name())), "{why}");
            }
            _ => assert_eq!(verdict, Ok(())),
        }
    }
    let g = GeoCommand::Genesis(Box::new(genesis(1)));
    assert!(GeoService::check(&g).unwrap_err().contains("no client"));
    // A client's envelope is refused before it is sent.
    let e = envelope::<GeoService>(1, 1, 1, &g, &PartitionMap::single()).unwrap_err();
    assert!(matches!(e, SplitError::Refused(_)));
    let e = envelope::<GeoService>(1, 2, 1, &op(Op::Delete { key: 1 }), &PartitionMap::single());
    assert!(matches!(e, Err(SplitError::Refused(_))));
    assert!(
        envelope::<GeoService>(1, 3, 1, &op(Op::Read { key: 1 }), &PartitionMap::single()).is_ok()
    );
}

// ---------------------------------------------------------------------------------------
// Execution, placement hooks, snapshots.

#[test]
fn reconfigure_moves_nodes_where_they_are_accessed() {
    let mut s = GeoService::from_genesis(&genesis(30)).unwrap();
    let read = op(Op::Read { key: 1 });
    // Key 1's leaf starts on California's serializer.
    assert_eq!(s.psite(&read, 1), Some(0b001));
    for _ in 0..20 {
        assert_eq!(s.execute_at(&read, 1), OpResult::Value(Some(1)));
    }
    let leaf = s.tree().find_leaf(1);
    assert_eq!(s.tree().reads(leaf)[1], 20, "counted by origin");
    s.reconfigure();
    assert_eq!(
        s.tree().node(s.tree().find_leaf(1)).reps(),
        Config::single(1)
    );
    assert_eq!(s.psite(&read, 1), Some(0b010));
    // Ordered before the move, by California: resubmitted to Europe.
    assert_eq!(s.misplaced(&read, 1, 0b001), Some(0b010));
    assert_eq!(s.misplaced(&read, 1, 0b010), None);
    // An update needs every serializer of the leaf.
    let upd = op(Op::Update { key: 1, value: 5 });
    assert_eq!(s.psite(&upd, 0), Some(0b010));
    assert_eq!(s.misplaced(&upd, 0, 0b001), Some(0b010));
    assert_eq!(s.execute_at(&upd, 0), OpResult::Old(Some(1)));
    assert_eq!(s.execute(&read), OpResult::Value(Some(5)));
    s.invariants();
}

#[test]
fn inserts_predict_splits_and_resubmit_unpredicted_ones() {
    let mut s = GeoService::from_genesis(&genesis(30)).unwrap();
    // Key 1000 falls in the last leaf, Virginia's. Insert into it until the next insert
    // would split it: its psite then includes the parent, on every serializer.
    let late = op(Op::Insert {
        key: 2000,
        value: 0,
    });
    // (An insert first, so that the leaf is not already full.)
    s.execute_at(&op(Op::Insert { key: 999, value: 0 }), 2);
    let mut unpredicted = 0;
    let mut k = 1000;
    while s.psite(&op(Op::Insert { key: k, value: 0 }), 2) != Some(0b111) {
        // An insert ordered now, delivered after this one filled the leaf.
        let dst = s.psite(&late, 2).unwrap();
        assert_eq!(dst, 0b100);
        let r = s.execute_at(&op(Op::Insert { key: k, value: k }), 2);
        assert_eq!(r, OpResult::Inserted(true));
        if s.psite(&late, 2) != Some(dst) {
            assert_eq!(
                s.misplaced(&late, 2, dst),
                Some(0b111),
                "an unpredicted split"
            );
            unpredicted += 1;
        }
        k += 1;
    }
    assert_eq!(unpredicted, 1);
    assert_eq!(s.misplaced(&late, 2, 0b111), None);
    let nodes = s.tree().node_count();
    assert_eq!(s.execute_at(&late, 2), OpResult::Inserted(true));
    assert!(s.tree().node_count() > nodes, "it split");
    s.invariants();
}

#[test]
fn snapshots_round_trip_and_are_functions_of_the_state() {
    let mut s = GeoService::from_genesis(&genesis(40)).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for i in 0..300 {
        let r = rng.gen_range(0..N);
        let o = random_op(&mut rng, r, 40);
        s.execute_at(&op(o), r);
        if i % 50 == 49 {
            s.reconfigure();
        }
    }
    let bytes = s.snapshot();
    let back = GeoService::restore(&bytes).unwrap();
    back.invariants();
    assert_eq!(back.digest(), s.digest());
    assert_eq!(back.snapshot(), bytes);
    assert_eq!(
        back.tree().optimizer().cache(),
        s.tree().optimizer().cache()
    );
    assert_eq!(back.tree().options(), s.tree().options());
    // Both go on alike.
    let mut back = back;
    for i in 0..200 {
        let r = rng.gen_range(0..N);
        let o = op(random_op(&mut rng, r, 40));
        assert_eq!(back.psite(&o, r), s.psite(&o, r));
        assert_eq!(back.execute_at(&o, r), s.execute_at(&o, r));
        if i % 50 == 49 {
            back.reconfigure();
            s.reconfigure();
        }
        assert_eq!(back.digest(), s.digest());
    }
    // Damage: an error, or a valid service; never a panic.
    for cut in (0..bytes.len()).step_by(97) {
        assert!(GeoService::restore(&bytes[..cut]).is_err());
    }
    for i in (0..bytes.len()).step_by(13) {
        let mut b = bytes.clone();
        b[i] ^= 0x41;
        if let Ok(x) = GeoService::restore(&b) {
            x.invariants();
        }
    }
    // An unconfigured service round-trips, and is not taken for a configured one.
    let fresh = GeoService::new();
    let back = GeoService::restore(&fresh.snapshot()).unwrap();
    assert!(!back.is_configured());
    assert_eq!(back.digest(), fresh.digest());
}

/// A tree of leaves [0, 100] and [200, 300, 400, 500] (full) under a root of one key.
fn two_leaves() -> GeoService {
    let mut base = GeoService::from_genesis(&genesis(0)).unwrap();
    for k in 0..6 {
        base.execute(&op(Op::Insert {
            key: k * 100,
            value: k,
        }));
    }
    base
}

/// `base` after inserting `keys` in this order.
fn inserted(base: &GeoService, keys: [u64; 2]) -> GeoService {
    let mut s = base.clone();
    for k in keys {
        s.execute(&op(Op::Insert { key: k, value: k }));
    }
    s
}

#[test]
fn snapshots_do_not_depend_on_the_order_splits_happened_in() {
    let mut base = two_leaves();
    // Fill the first leaf; the second is full.
    base.execute(&op(Op::Insert { key: 1, value: 1 }));
    base.execute(&op(Op::Insert { key: 2, value: 2 }));
    let t = base.tree();
    assert_ne!(t.find_leaf(0), t.find_leaf(200));
    assert_eq!(t.node(t.find_leaf(0)).size(), 4);
    assert_eq!(t.node(t.find_leaf(200)).size(), 4);
    // Each leaf split by an insert, in both orders: the same tree, nodes numbered
    // differently.
    let (a, b) = (inserted(&base, [3, 201]), inserted(&base, [201, 3]));
    assert_ne!(a.tree(), b.tree(), "the uids differ");
    assert_eq!(a.digest(), b.digest());
    assert_eq!(a.snapshot(), b.snapshot());
}

#[test]
fn inserts_of_different_keys_into_a_full_leaf_do_not_commute_so_they_conflict() {
    let base = two_leaves();
    let t = base.tree();
    assert_eq!(t.node(t.find_leaf(200)).size(), 4);
    // The same entries, but the leaf split where the first insert left it: replicas
    // that ran them in different orders would hold different trees.
    let (a, b) = (inserted(&base, [250, 450]), inserted(&base, [450, 250]));
    assert_eq!(a.len(), b.len());
    assert_ne!(a.digest(), b.digest(), "the split depends on the order");
    // So an ordering that orders only conflicting commands must order them: both
    // write the shape.
    let (x, y) = (
        base.access(&op(Op::Insert { key: 250, value: 1 })),
        base.access(&op(Op::Insert { key: 450, value: 1 })),
    );
    assert!(x.objects.contains(&(SHAPE_OBJECT, true)));
    assert!(y.objects.contains(&(SHAPE_OBJECT, true)));
    // An update changes no shape.
    let u = base.access(&op(Op::Update { key: 300, value: 1 }));
    assert!(!u.objects.iter().any(|&(o, _)| o == SHAPE_OBJECT));
}

#[test]
fn undo_restores_the_state() {
    let mut s = GeoService::from_genesis(&genesis(30)).unwrap();
    let d0 = s.digest();
    let mut undos = Vec::new();
    for o in [
        Op::Update { key: 3, value: 77 },
        Op::Insert { key: 500, value: 1 },
        Op::Insert { key: 3, value: 1 },
        Op::Read { key: 500 },
        Op::Update { key: 999, value: 1 },
    ] {
        let (_, u) = s.execute_undoable(&op(o));
        undos.push(u);
    }
    assert_ne!(s.digest(), d0);
    for u in undos.into_iter().rev() {
        s.undo(u);
    }
    assert_eq!(s.digest(), d0);
    s.invariants();
    let mut fresh = GeoService::new();
    let (r, u) = fresh.execute_undoable(&GeoCommand::Genesis(Box::new(genesis(5))));
    assert_eq!(r, OpResult::Inserted(true));
    fresh.undo(u);
    assert!(!fresh.is_configured());
}

#[test]
fn access_reads_up_to_the_neighbour_as_the_btree_does() {
    let mut s = GeoService::from_genesis(&genesis(10)).unwrap();
    s.execute(&op(Op::Insert { key: 20, value: 20 }));
    let mut b = BPlusTree::new();
    for k in (0..10).chain([20]) {
        b.execute(&Op::Insert { key: k, value: k });
    }
    for o in [
        Op::Next { key: 4 },
        Op::Next { key: 9 },
        Op::Next { key: 20 },
        Op::Prev { key: 0 },
        Op::Prev { key: 15 },
        Op::Read { key: 4 },
        Op::Update { key: 4, value: 1 },
    ] {
        assert_eq!(s.access(&op(o.clone())), b.access(&o), "{o:?}");
    }
    // An insert writes its key and the tree's shape.
    let insert = Op::Insert { key: 11, value: 1 };
    let mut expected = b.access(&insert);
    expected.add(SHAPE_OBJECT, true);
    assert_eq!(s.access(&op(insert)), expected);
    assert_eq!(
        s.access(&op(Op::Next { key: 9 })).objects.len(),
        12,
        "9 up to 20"
    );
    assert_eq!(
        s.access(&GeoCommand::Genesis(Box::new(genesis(1)))),
        Access::everything()
    );
}

#[test]
fn the_planted_write_bug_orders_writes_by_one_serializer() {
    let mut g = genesis(30);
    g.unsafe_write_ordered_by_one_serializer = true;
    let s = GeoService::from_genesis(&g).unwrap();
    let good = GeoService::from_genesis(&genesis(30)).unwrap();
    assert_eq!(
        s.digest(),
        good.digest(),
        "the bug is in psite, not in the tree"
    );
    // Key 1's leaf is California's: a write from Europe goes there alone either way.
    let upd = op(Op::Update { key: 1, value: 1 });
    assert_eq!(s.psite(&upd, 1), Some(0b001));
    // Fill key 100's leaf until an insert would split it: all serializers, or one.
    let mut good = good;
    let mut s = s;
    let mut k = 100;
    while good.psite(&op(Op::Insert { key: k, value: 0 }), 1) != Some(0b111) {
        good.execute_at(&op(Op::Insert { key: k, value: 0 }), 2);
        s.execute_at(&op(Op::Insert { key: k, value: 0 }), 2);
        k += 1;
    }
    let ins = op(Op::Insert { key: k, value: 0 });
    assert_eq!(
        s.psite(&ins, 1),
        Some(0b010),
        "the origin's serializer alone"
    );
    assert_eq!(good.misplaced(&ins, 1, 0b010), Some(0b111));
    assert_eq!(s.misplaced(&ins, 1, 0b010), None, "and it runs there");
    // Reads are not touched by the bug.
    let read = op(Op::Read { key: 1 });
    assert_eq!(
        s.misplaced(&read, 1, 0b010),
        good.misplaced(&read, 1, 0b010)
    );
}

#[test]
fn an_unconfigured_service_places_nothing() {
    let mut s = GeoService::new();
    assert!(!s.is_configured());
    assert_eq!(s.psite(&op(Op::Read { key: 1 }), 0), None);
    assert_eq!(s.misplaced(&op(Op::Read { key: 1 }), 0, 1), None);
    assert_eq!(
        s.execute_at(&op(Op::Insert { key: 1, value: 4 }), 0),
        OpResult::Inserted(true)
    );
    assert_eq!(
        s.execute(&op(Op::Read { key: 1 })),
        OpResult::Value(Some(4))
    );
    let d = s.digest();
    s.reconfigure();
    assert_eq!(s.digest(), d);
    assert_ne!(
        GeoService::new().digest(),
        GeoService::from_genesis(&GeoGenesis {
            topology: Topology::from_rtt_us(vec!["local".into()], vec![vec![0]]).unwrap(),
            optimizer: OptimizerOptions::brute_force(),
            ..GeoGenesis::new(Topology::paper_three_regions(), 0)
        })
        .unwrap()
        .digest()
    );
    s.invariants();
}

#[test]
fn executing_without_an_origin_counts_nothing() {
    let mut counted = GeoService::from_genesis(&genesis(30)).unwrap();
    let mut plain = counted.clone();
    let o = op(Op::Read { key: 2 });
    assert_eq!(counted.execute_at(&o, 2), plain.execute(&o));
    assert_ne!(counted.digest(), plain.digest(), "only the counters differ");
    let leaf = plain.tree().find_leaf(2);
    assert!(plain.tree().reads(leaf).iter().all(|&c| c == 0));
    // The tree's own counting and applying agree on everything else.
    let mut t: GeoBTree = genesis(30).tree().unwrap();
    let mut u = t.clone();
    for k in 100..140 {
        let i = GeoOp::Insert {
            key: k,
            value: vec![1; 8],
        };
        assert_eq!(t.execute(&i, 1).unwrap(), u.apply(&i).unwrap());
    }
    assert_eq!(t.len(), u.len());
    assert_eq!(
        t.entries().collect::<Vec<_>>(),
        u.entries().collect::<Vec<_>>()
    );
    t.invariants();
    u.invariants();
}
