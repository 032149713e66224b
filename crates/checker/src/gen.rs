//! Seeded generator of linearizable histories, for tests and benchmarks of the checker
//! (and of anything that consumes histories).
//!
//! Clients issue operations one at a time with random think and service times. Every
//! operation that takes effect gets a linearization point drawn uniformly inside its
//! interval; executing the operations on a reference map in the order of those points
//! gives each its result. The history is therefore linearizable by construction.
//! `fail` operations never take effect; an `info` mutation takes effect (at a point that
//! may lie after the client gave up) or not, at random.

use std::collections::BTreeMap;

use partita_btree::{BatchOp, Op};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::history::{Event, Status};
use crate::initial::Initial;
use crate::model::apply_op;

/// Relative weights of the operation kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpMix {
    pub insert: u32,
    pub delete: u32,
    pub read: u32,
    pub update: u32,
    pub query: u32,
    pub next: u32,
    pub prev: u32,
    pub batch: u32,
}

impl OpMix {
    /// Insert, delete, read and update only (the checker splits these per key).
    pub fn point_only() -> OpMix {
        OpMix {
            insert: 3,
            delete: 2,
            read: 4,
            update: 2,
            query: 0,
            next: 0,
            prev: 0,
            batch: 0,
        }
    }

    /// Every kind, multi-key ones included.
    pub fn all() -> OpMix {
        OpMix {
            insert: 3,
            delete: 2,
            read: 4,
            update: 2,
            query: 1,
            next: 1,
            prev: 1,
            batch: 1,
        }
    }
}

#[derive(Clone, Debug)]
pub struct GenConfig {
    pub seed: u64,
    pub clients: u32,
    /// Total operations over all clients.
    pub ops: usize,
    /// Keys are drawn from `0..keys`.
    pub keys: u64,
    /// Written values are drawn from `1..=values` (few values make histories ambiguous,
    /// which is harder for the checker).
    pub values: u64,
    pub mix: OpMix,
    /// Probability that an operation ends `info` / `fail`.
    pub info_rate: f64,
    pub fail_rate: f64,
    /// Service time is uniform in `1..=max_latency_ns`, think time in `0..=max_think_ns`.
    pub max_latency_ns: u64,
    pub max_think_ns: u64,
    /// Largest key span of a range query, largest batch.
    pub max_range: u64,
    pub max_batch: usize,
    pub initial: Initial,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            seed: 0,
            clients: 8,
            ops: 1000,
            keys: 32,
            values: 8,
            mix: OpMix::all(),
            info_rate: 0.0,
            fail_rate: 0.0,
            max_latency_ns: 1_000,
            max_think_ns: 200,
            max_range: 8,
            max_batch: 4,
            initial: Initial::Empty,
        }
    }
}

/// A generated history and the map it leaves behind.
#[derive(Clone, Debug)]
pub struct Generated {
    /// Events in response order, as a recorder would write them.
    pub events: Vec<Event>,
    pub final_state: Vec<(u64, u64)>,
}

fn random_op(cfg: &GenConfig, rng: &mut ChaCha8Rng) -> Op {
    let m = &cfg.mix;
    let weights = [
        m.insert, m.delete, m.read, m.update, m.query, m.next, m.prev, m.batch,
    ];
    let total: u32 = weights.iter().sum();
    assert!(total > 0, "op mix has no weight");
    let mut pick = rng.gen_range(0..total);
    let mut kind = 0;
    while pick >= weights[kind] {
        pick -= weights[kind];
        kind += 1;
    }
    let key = rng.gen_range(0..cfg.keys.max(1));
    let value = rng.gen_range(1..=cfg.values.max(1));
    match kind {
        0 => Op::Insert { key, value },
        1 => Op::Delete { key },
        2 => Op::Read { key },
        3 => Op::Update { key, value },
        4 => Op::Query {
            min: key,
            max: key.saturating_add(rng.gen_range(0..=cfg.max_range)),
        },
        5 => Op::Next { key },
        6 => Op::Prev { key },
        _ => Op::Batch(
            (0..rng.gen_range(1..=cfg.max_batch.max(1)))
                .map(|_| {
                    let key = rng.gen_range(0..cfg.keys.max(1));
                    if rng.gen_bool(0.6) {
                        BatchOp::Insert {
                            key,
                            value: rng.gen_range(1..=cfg.values.max(1)),
                        }
                    } else {
                        BatchOp::Delete { key }
                    }
                })
                .collect(),
        ),
    }
}

/// Generate a linearizable history.
pub fn generate(cfg: &GenConfig) -> Generated {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let clients = cfg.clients.max(1) as usize;
    let mut clock = vec![0u64; clients];
    struct Pending {
        event: Event,
        /// When it takes effect; None: never.
        lin: Option<u64>,
    }
    let mut ops: Vec<Pending> = Vec::with_capacity(cfg.ops);
    for i in 0..cfg.ops {
        let client = i % clients;
        let call = clock[client] + rng.gen_range(0..=cfg.max_think_ns);
        let latency = rng.gen_range(1..=cfg.max_latency_ns.max(1));
        let ret = call + latency;
        clock[client] = ret;
        let op = random_op(cfg, &mut rng);
        let roll: f64 = rng.gen();
        let (status, lin) = if roll < cfg.fail_rate {
            (Status::Fail, None)
        } else if roll < cfg.fail_rate + cfg.info_rate {
            // Took effect (possibly long after the client gave up) or never did.
            let lin = rng
                .gen_bool(0.5)
                .then(|| call + rng.gen_range(0..=latency * 4));
            (Status::Info, lin)
        } else {
            (Status::Ok, Some(call + rng.gen_range(0..=latency)))
        };
        ops.push(Pending {
            event: Event {
                client: client as u64,
                op,
                call_ns: call,
                ret_ns: ret,
                status,
                result: None,
            },
            lin,
        });
    }
    let mut order: Vec<(u64, usize)> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.lin.map(|t| (t, i)))
        .collect();
    order.sort_unstable();
    let mut map: BTreeMap<u64, u64> = cfg.initial.iter().collect();
    for (_, i) in order {
        let r = apply_op(&mut map, &ops[i].event.op);
        if ops[i].event.status == Status::Ok {
            ops[i].event.result = Some(r);
        }
    }
    let mut events: Vec<Event> = ops.into_iter().map(|p| p.event).collect();
    events.sort_by_key(|e| (e.ret_ns, e.client));
    Generated {
        events,
        final_state: map.into_iter().collect(),
    }
}
