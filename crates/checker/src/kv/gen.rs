//! Seeded generator of linearizable key-value histories, for tests and benchmarks.
//!
//! Clients issue operations one at a time with random think and service times. Every
//! operation that takes effect gets a linearization point drawn inside its interval
//! (for an `info` one, anywhere after its invocation, possibly after the client gave
//! up, or never); executing the operations on a sequential reference in the order of
//! those points gives each its result, so the history is linearizable by construction.
//! The reference is any [`KvReference`]: the checker's own model, or (in tests) the
//! `partita-kv` store itself, whose recorded lines the checker then has to accept.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::history::{Bytes, CmpOp, Compare, KvEvent, KvOp, KvResult, Target};
use super::model::ModelStore;
use crate::history::Status;

/// A sequential key-value store to generate results from.
pub trait KvReference {
    /// Execute `op` and return its full result (every optional field recorded).
    fn execute(&mut self, op: &KvOp) -> KvResult;
}

impl KvReference for ModelStore {
    fn execute(&mut self, op: &KvOp) -> KvResult {
        ModelStore::execute(self, op)
    }
}

/// Relative weights of the operation kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvOpMix {
    pub put: u32,
    pub get: u32,
    pub del: u32,
    pub range: u32,
    pub txn: u32,
}

impl Default for KvOpMix {
    fn default() -> Self {
        KvOpMix {
            put: 6,
            get: 5,
            del: 2,
            range: 3,
            txn: 4,
        }
    }
}

#[derive(Clone, Debug)]
pub struct KvGenConfig {
    pub seed: u64,
    pub clients: u32,
    /// Total operations over all clients.
    pub ops: usize,
    /// Keys are `k0`, `k1`, ... (and, one time in ten, the non-UTF-8 `0xff, i`).
    pub keys: u32,
    /// Values written are drawn from `v0..v{values}` (few values make histories
    /// ambiguous to anything but revisions).
    pub values: u32,
    pub mix: KvOpMix,
    /// Probability that an operation ends `info` / `fail`.
    pub info_rate: f64,
    pub fail_rate: f64,
    /// Service time is uniform in `1..=max_latency_ns`, think time in `0..=max_think_ns`.
    pub max_latency_ns: u64,
    pub max_think_ns: u64,
    /// Record the read revision of gets and transactions (as `partita-kv` does); without
    /// it, results have DESIGN.md's shapes and such reads are placed by their results.
    pub read_revisions: bool,
}

impl Default for KvGenConfig {
    fn default() -> Self {
        KvGenConfig {
            seed: 0,
            clients: 8,
            ops: 1000,
            keys: 16,
            values: 4,
            mix: KvOpMix::default(),
            info_rate: 0.0,
            fail_rate: 0.0,
            max_latency_ns: 1_000,
            max_think_ns: 200,
            read_revisions: true,
        }
    }
}

fn key(cfg: &KvGenConfig, rng: &mut ChaCha8Rng) -> Bytes {
    let i = rng.gen_range(0..cfg.keys.max(1));
    if rng.gen_bool(0.1) {
        vec![0xff, i as u8]
    } else {
        format!("k{i}").into_bytes()
    }
}

fn value(cfg: &KvGenConfig, rng: &mut ChaCha8Rng) -> Bytes {
    format!("v{}", rng.gen_range(0..cfg.values.max(1))).into_bytes()
}

/// A range end: one key, every key from `key` on, or a later key.
fn end(cfg: &KvGenConfig, rng: &mut ChaCha8Rng, from: &[u8]) -> Bytes {
    match rng.gen_range(0..4) {
        0 => vec![0],
        1 => b"l".to_vec(),
        _ => {
            let mut e = key(cfg, rng);
            if e.as_slice() <= from {
                e = from.to_vec();
                e.push(b'~');
            }
            e
        }
    }
}

/// A point operation for a transaction branch on a key not used yet in it (etcd
/// refuses a key written twice in one branch).
fn branch(cfg: &KvGenConfig, rng: &mut ChaCha8Rng, n: usize) -> Vec<KvOp> {
    let mut used: Vec<Bytes> = Vec::new();
    let mut ops = Vec::new();
    for _ in 0..n {
        let k = key(cfg, rng);
        if used.contains(&k) {
            continue;
        }
        used.push(k.clone());
        ops.push(match rng.gen_range(0..3) {
            0 => KvOp::Put {
                key: k,
                value: value(cfg, rng),
                prev_kv: rng.gen_bool(0.5),
            },
            1 => KvOp::Get { key: k },
            _ => KvOp::Del {
                key: k,
                end: None,
                prev_kv: rng.gen_bool(0.3),
            },
        });
    }
    ops
}

fn random_op(cfg: &KvGenConfig, rng: &mut ChaCha8Rng) -> KvOp {
    let m = &cfg.mix;
    let weights = [m.put, m.get, m.del, m.range, m.txn];
    let total: u32 = weights.iter().sum();
    assert!(total > 0, "op mix has no weight");
    let mut pick = rng.gen_range(0..total);
    let mut kind = 0;
    while pick >= weights[kind] {
        pick -= weights[kind];
        kind += 1;
    }
    let k = key(cfg, rng);
    match kind {
        0 => KvOp::Put {
            key: k,
            value: value(cfg, rng),
            prev_kv: rng.gen_bool(0.5),
        },
        1 => KvOp::Get { key: k },
        2 => {
            let end = rng.gen_bool(0.25).then(|| end(cfg, rng, &k));
            KvOp::Del {
                key: k,
                end,
                prev_kv: rng.gen_bool(0.3),
            }
        }
        3 => {
            let end = end(cfg, rng, &k);
            KvOp::Range {
                key: k,
                end,
                limit: if rng.gen_bool(0.3) {
                    rng.gen_range(1..4)
                } else {
                    0
                },
                keys_only: rng.gen_bool(0.1),
                count_only: rng.gen_bool(0.05),
            }
        }
        _ => {
            let compare = (0..rng.gen_range(0..=2))
                .map(|_| {
                    let target = match rng.gen_range(0..4) {
                        0 => Target::Value(value(cfg, rng)),
                        1 => Target::Version(rng.gen_range(0..3)),
                        2 => Target::Mod(rng.gen_range(0..cfg.ops as u64 / 2 + 2)),
                        _ => Target::Create(rng.gen_range(0..cfg.ops as u64 / 2 + 2)),
                    };
                    let op = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Gt][rng.gen_range(0..4)];
                    Compare {
                        key: key(cfg, rng),
                        target,
                        op,
                    }
                })
                .collect();
            let then = rng.gen_range(1..=3);
            let otherwise = rng.gen_range(0..=2);
            KvOp::Txn {
                compare,
                then: branch(cfg, rng, then),
                otherwise: branch(cfg, rng, otherwise),
            }
        }
    }
}

/// Drop from a full result what a recorder following `cfg` leaves out: `prev` values
/// not asked for, and (without `read_revisions`) the read revision of gets and
/// transactions.
fn recorded(cfg: &KvGenConfig, op: &KvOp, r: KvResult) -> KvResult {
    match (op, r) {
        (KvOp::Put { prev_kv, .. }, KvResult::Put { revision, prev }) => KvResult::Put {
            revision,
            prev: prev.filter(|_| *prev_kv),
        },
        (
            KvOp::Del { prev_kv, .. },
            KvResult::Del {
                deleted,
                revision,
                prev,
            },
        ) => KvResult::Del {
            deleted,
            revision,
            prev: prev.filter(|_| *prev_kv),
        },
        (
            KvOp::Get { .. },
            KvResult::Get {
                value,
                mod_revision,
                version,
                revision,
            },
        ) => KvResult::Get {
            value,
            mod_revision,
            version,
            revision: revision.filter(|_| cfg.read_revisions),
        },
        (
            KvOp::Txn {
                then, otherwise, ..
            },
            KvResult::Txn {
                succeeded,
                results,
                revision,
            },
        ) => {
            let branch = if succeeded { then } else { otherwise };
            KvResult::Txn {
                succeeded,
                results: branch
                    .iter()
                    .zip(results)
                    .map(|(o, r)| recorded(cfg, o, r))
                    .collect(),
                revision: revision.filter(|_| cfg.read_revisions),
            }
        }
        (_, r) => r,
    }
}

/// Generate a linearizable history against `reference` (a fresh store), in response
/// order as a recorder would write it.
pub fn generate_kv(cfg: &KvGenConfig, reference: &mut dyn KvReference) -> Vec<KvEvent> {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let clients = cfg.clients.max(1) as usize;
    let mut clock = vec![0u64; clients];
    // (event, linearization point: None when it never takes effect)
    let mut ops: Vec<(KvEvent, Option<u64>)> = Vec::with_capacity(cfg.ops);
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
            let lin = rng
                .gen_bool(0.5)
                .then(|| call + rng.gen_range(0..=latency * 4));
            (Status::Info, lin)
        } else {
            (Status::Ok, Some(call + rng.gen_range(0..=latency)))
        };
        let event = KvEvent {
            client: client as u64,
            op,
            call_ns: call,
            ret_ns: ret,
            status,
            result: None,
        };
        ops.push((event, lin));
    }
    let mut order: Vec<(u64, usize)> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, (_, lin))| lin.map(|t| (t, i)))
        .collect();
    order.sort_unstable();
    for (_, i) in order {
        let r = reference.execute(&ops[i].0.op);
        if ops[i].0.status == Status::Ok {
            ops[i].0.result = Some(recorded(cfg, &ops[i].0.op, r));
        }
    }
    let mut events: Vec<KvEvent> = ops.into_iter().map(|(e, _)| e).collect();
    events.sort_by_key(|e| (e.ret_ns, e.client));
    events
}
