//! The experiment mode: a closed-loop benchmark of a fault-free cluster in virtual time,
//! measured like `partita bench` measures a real one.
//!
//! ```text
//! BenchSpec (cluster file, workload, clients, think time, preload, duration, cost table,
//!            network) ──► World::new_bench ──► run to `duration` ──► BenchReport
//! ```
//!
//! - **Cluster**: any cluster file the real loader accepts: Ring Paxos or Multi-Paxos
//!   with its acceptors and replicas, or the client-server baseline (one `NodeCore` in
//!   `Mode::Cs`). Every node is a real `NodeCore` with its own CPU (one process per
//!   machine, as in paper 001 §V-A), charged from the [`CostTable`]; every acceptor has
//!   its own WAL disk (the table's `[disk]`, group commit; no fsync with
//!   `fsync = false`, like `durability = "memory"`). Checkpoints follow the cluster
//!   file (the experiments turn them off, as the paper had none).
//! - **Preload**: every replica starts with a B+tree of `preload` entries (keys 0, 2,
//!   4, …, value = key, as `partita bench` preloads), without consensus: an SMR
//!   replica boots from a checkpoint of instance 0 built by the caller (see
//!   [`ReplicaImage`]; `partita experiment` bulk-loads one tree and stamps a copy per
//!   replica); the client-server server, which cannot boot from a checkpoint, executes
//!   the inserts as batches of 1000 before time starts. Neither costs virtual time.
//! - **Batchers**: `batchers` standalone batcher nodes added to the cluster
//!   (`ClusterConfig::with_batchers`), each with its own CPU and network card; clients
//!   then spread over them (client i enters at batcher i mod `batchers`), and the
//!   leader receives batches instead of single commands.
//! - **Clients**: `clients` closed-loop clients drawing `partita bench`'s workloads
//!   ([`Workload`], [`random_op`]: the same operations over the same key space), each
//!   thinking a uniform whole number of milliseconds in `0..=think_ms` before each
//!   command, sending it to the entry node (the coordinator, a batcher, or the server) with one
//!   replica chosen to reply (clients are spread evenly over the replicas), resending it
//!   after `client_timeout_ns` without a reply. Clients cost nothing (they run on
//!   other machines).
//! - **Network**: every link has the same one-way latency (default 50 µs: the paper's
//!   0.1 ms round trip) plus a uniform jitter (default up to 10 µs), and every endpoint
//!   one network card (default 1 Gbit/s, [`NicParams::gigabit`]) shared by all its
//!   links. No loss, no faults. With the cluster file's `[wan]`, links between regions
//!   take the matrix's one-way delay instead (clients placed by `[wan] clients`; see
//!   [`crate::net`]), and the report says so ([`BenchReport::wan`]).
//! - **Measurement**: operations invoked after `trim × duration` and completed before
//!   `(1 − trim) × duration` (`trim_end` instead of `trim` if set) count, as in `partita bench`; throughput in commands and
//!   B+tree operations per virtual second, latency percentiles exact (nearest rank).
//!   The report also gives each node's CPU and network-card utilization over the
//!   measured window, and the instances decided in it, to show what the bottleneck is.
//! - **Checks**: only the cheap ones: every core's `invariants()` after every handler
//!   (after one in `clients / 64` with more clients: they walk state that grows with
//!   the commands in flight, [`crate::world::INVARIANT_CLIENTS`]) and the codec (every
//!   message is encoded, for its size; the decoded copy is delivered). No agreement
//!   oracle, no history, no linearizability check.
//! - **Scale**: the network stores no link between two clients (clients talk to nodes
//!   only), so paper 004's 16,200 clients cost 2 × nodes × 16,200 links, not 16,200².
//!   On a GeoPaxos, GeoPaxos+ or EPaxos cluster a client enters at its region's replica
//!   and draws keys from the ordering's `keys` (the tree or map it starts with).
//!
//! A run is a pure function of the spec: the same spec gives the same numbers and the
//! same trace hash.

use crate::cpu::CostTable;
use crate::net::NicParams;
use crate::queue::{Time, MICROS, MILLIS, SECONDS};
use partita_btree::{BatchOp, Op};
use partita_config::ClusterConfig;
use partita_types::NodeId;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The workloads of `partita bench` (paper 001 §V-A).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Range queries of 1000 keys.
    Query,
    /// One insert or delete per command.
    Update,
    /// Seven inserts/deletes per command.
    Batch,
    /// Reads, updates, inserts, deletes, next/prev and 100-key ranges by ratio.
    Mixed,
    /// State partitioning (paper 001 §V-D): range queries of 1000 keys over a key space
    /// cut into `partitions` equal ranges (as `partita_types::PartitionMap` cuts it, with
    /// the cluster's `key_space` equal to the bench's); `cross_percent`% of them straddle
    /// a partition border and so access exactly two partitions, the others lie inside one
    /// partition. See [`partitioned_query`].
    #[serde(rename = "partitioned-query")]
    PartitionedQuery { partitions: u32, cross_percent: u32 },
    /// State partitioning (paper 001 §V-D): seven inserts/deletes per command, all keys
    /// in one partition (drawn uniformly), so no batch is cross-partition.
    #[serde(rename = "partitioned-batch")]
    PartitionedBatch { partitions: u32 },
    /// P-SMR (paper 002 §V-E): `percent`% dependent commands (inserts and deletes, half
    /// each, which CC-G sends to every thread), the others reads; keys uniform. Parsed
    /// from `dependent-P`; `partita experiment psmr` sweeps it (`--workload` of `partita
    /// bench` offers the four base workloads only).
    Dependent { percent: u32 },
    /// GeoPaxos+ (paper 004 §VI): the geo B+tree's operations, `read_percent`% reads
    /// (READ, with one in ten GET-NEXT and one in ten GET-PREV), the others writes
    /// (UPDATE, one in ten INSERT), on the keys [`GeoKeys`] draws. Parsed from `geo-R`,
    /// `geo-R@P/N`, `geo-R@local` or `geo-R@zipf`.
    Geo { read_percent: u32, keys: GeoKeys },
}

/// Which keys a geo workload's clients use (paper 004 §VI-A's access patterns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GeoKeys {
    /// Uniform over range `part` of `parts` equal ranges of the key space (`0` of `1`:
    /// all of it, the paper's uniform workload; a region's own range: every client of
    /// the run local).
    Range { part: u32, parts: u32 },
    /// The paper's locality: `percent`% of a client's keys uniform in its own region's
    /// range (client `c` in region `c mod regions`, the key space cut into `regions`
    /// equal ranges, as the clients are placed over `[wan] clients` and the tree's
    /// leaves start), the others uniform over every key. `@local`: 90% over 3 regions.
    Local { percent: u32, regions: u32 },
    /// The paper's skew: Zipf with exponent `s_percent / 100` over ranks, the same hot
    /// keys for every client, rank `r` at key `r · P mod keys` (P a prime above every
    /// key space) so the hot keys spread over the leaves. `@zipf`: exponent 0.99.
    Zipf { s_percent: u32 },
}

impl GeoKeys {
    /// Every key, uniformly.
    pub const UNIFORM: GeoKeys = GeoKeys::Range { part: 0, parts: 1 };

    /// A key of `0..keys` for client `client`.
    pub fn draw(self, rng: &mut impl Rng, keys: u64, client: u64) -> u64 {
        let range = |part: u64, parts: u64| {
            let width = (keys / parts).max(1);
            (width * part, width)
        };
        match self {
            GeoKeys::Range { part, parts } => {
                let (lo, width) = range(u64::from(part), u64::from(parts));
                lo + rng.gen_range(0..width)
            }
            GeoKeys::Local { percent, regions } => {
                if rng.gen_range(0..100) < percent {
                    let regions = u64::from(regions.max(1));
                    let (lo, width) = range(client % regions, regions);
                    lo + rng.gen_range(0..width)
                } else {
                    rng.gen_range(0..keys)
                }
            }
            GeoKeys::Zipf { s_percent } => {
                let rank = zipf_rank(rng, keys, f64::from(s_percent) / 100.0);
                ((u128::from(rank) * u128::from(ZIPF_SCATTER_PRIME)) % u128::from(keys)) as u64
            }
        }
    }
}

/// A prime above every key space used here: `r ↦ r · P mod keys` is then a
/// permutation of `0..keys`.
const ZIPF_SCATTER_PRIME: u64 = 1_000_000_007;

/// A rank in `0..n` with probability proportional to `1 / (rank + 1)^s`, by rejection
/// inversion (Hörmann and Derflinger, 1996): constant time and memory for any `n`, so
/// every client draws without a table.
pub fn zipf_rank(rng: &mut impl Rng, n: u64, s: f64) -> u64 {
    let n = n.max(1) as f64;
    let h = |x: f64| (-s * x.ln()).exp();
    let helper1 = |x: f64| {
        if x.abs() > 1e-8 {
            x.ln_1p() / x
        } else {
            1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
        }
    };
    let helper2 = |x: f64| {
        if x.abs() > 1e-8 {
            x.exp_m1() / x
        } else {
            1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
        }
    };
    let h_integral = |x: f64| {
        let log_x = x.ln();
        helper2((1.0 - s) * log_x) * log_x
    };
    let h_integral_inverse = |x: f64| {
        let t = (x * (1.0 - s)).max(-1.0);
        (helper1(t) * x).exp()
    };
    let h_integral_x1 = h_integral(1.5) - 1.0;
    let h_integral_n = h_integral(n + 0.5);
    let shortcut = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
    loop {
        let u = h_integral_n + rng.gen::<f64>() * (h_integral_x1 - h_integral_n);
        let x = h_integral_inverse(u);
        let k = (x + 0.5).floor().clamp(1.0, n);
        if k - x <= shortcut || u >= h_integral(k + 0.5) - h(k) {
            return k as u64 - 1;
        }
    }
}

impl Workload {
    /// Its name, as `partita bench --workload` takes it and reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Query => "query",
            Workload::Update => "update",
            Workload::Batch => "batch",
            Workload::Mixed => "mixed",
            Workload::PartitionedQuery { .. } => "partitioned-query",
            Workload::PartitionedBatch { .. } => "partitioned-batch",
            Workload::Dependent { .. } => "dependent",
            Workload::Geo { .. } => "geo",
        }
    }

    /// What it is, in words, for figure legends and reports.
    pub fn label(self) -> &'static str {
        match self {
            Workload::Query => "queries (1000 keys)",
            Workload::Update => "updates (1 per command)",
            Workload::Batch => "batched updates (7 per command)",
            Workload::Mixed => "mixed reads and writes",
            Workload::PartitionedQuery { .. } => "queries (1000 keys)",
            Workload::PartitionedBatch { .. } => "batched updates (7 per command, one partition)",
            Workload::Dependent { .. } => "reads, and inserts/deletes (dependent)",
            Workload::Geo { .. } => "geo B+tree reads and writes",
        }
    }

    /// The state-partitioning refinement of a base workload (paper 001 §V-D): queries
    /// of which `cross_percent`% straddle a border of `partitions` equal ranges, or
    /// batches inside one partition. The other workloads stay as they are.
    pub fn partitioned(self, partitions: u32, cross_percent: u32) -> Workload {
        match self {
            Workload::Query | Workload::PartitionedQuery { .. } => Workload::PartitionedQuery {
                partitions,
                cross_percent,
            },
            Workload::Batch | Workload::PartitionedBatch { .. } => {
                Workload::PartitionedBatch { partitions }
            }
            w => w,
        }
    }

    /// The unpartitioned workload a partitioned one refines.
    pub fn base(self) -> Workload {
        match self {
            Workload::PartitionedQuery { .. } => Workload::Query,
            Workload::PartitionedBatch { .. } => Workload::Batch,
            w => w,
        }
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Workload::Dependent { percent } => write!(f, "dependent-{percent}"),
            Workload::Geo { read_percent, keys } => match keys {
                GeoKeys::Range { part, parts } if *parts > 1 => {
                    write!(f, "geo-{read_percent}@{part}/{parts}")
                }
                GeoKeys::Range { .. } => write!(f, "geo-{read_percent}"),
                GeoKeys::Local {
                    percent: 90,
                    regions: 3,
                } => write!(f, "geo-{read_percent}@local"),
                GeoKeys::Local { percent, regions } => {
                    write!(f, "geo-{read_percent}@local{percent}/{regions}")
                }
                GeoKeys::Zipf { s_percent: 99 } => write!(f, "geo-{read_percent}@zipf"),
                GeoKeys::Zipf { s_percent } => write!(f, "geo-{read_percent}@zipf{s_percent}"),
            },
            w => f.write_str(w.name()),
        }
    }
}

/// By name, the four base workloads (the partitioned ones take parameters: see
/// [`Workload::partitioned`]).
impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Workload, String> {
        match s {
            "query" => Ok(Workload::Query),
            "update" => Ok(Workload::Update),
            "batch" => Ok(Workload::Batch),
            "mixed" => Ok(Workload::Mixed),
            _ if s.starts_with("geo-") => parse_geo(s),
            _ => match s.strip_prefix("dependent-").map(str::parse::<u32>) {
                Some(Ok(percent)) if percent <= 100 => Ok(Workload::Dependent { percent }),
                Some(_) => Err(format!(
                    "workload `{s}`: dependent-P takes a share P of 0 to 100 (percent)"
                )),
                None => Err(<Workload as partita_types::Choice>::unknown(s)),
            },
        }
    }
}

/// `geo-R`, `geo-R@P/N`, `geo-R@local[PCT/N]` or `geo-R@zipf[S]` (see
/// [`Workload::Geo`] and [`GeoKeys`]).
fn parse_geo(s: &str) -> Result<Workload, String> {
    let bad = || {
        format!(
            "workload `{s}`: geo-R takes a read share R of 0 to 100 (percent) and, \
             optionally, the keys: @P/N (key range P of N equal ranges, 0 <= P < N <= 32), \
             @local (90% of each client's keys in its region's range of 3; @localPCT/N for \
             PCT% over N regions) or @zipf (Zipf 0.99 over every key; @zipfS for S/100)"
        )
    };
    let rest = s.strip_prefix("geo-").ok_or_else(bad)?;
    let (r, spec) = match rest.split_once('@') {
        Some((r, spec)) => (r, Some(spec)),
        None => (rest, None),
    };
    let read_percent: u32 = r.parse().map_err(|_| bad())?;
    let num = |t: &str| t.parse::<u32>().map_err(|_| bad());
    let keys = match spec {
        None => GeoKeys::UNIFORM,
        Some("local") => GeoKeys::Local {
            percent: 90,
            regions: 3,
        },
        Some("zipf") => GeoKeys::Zipf { s_percent: 99 },
        Some(z) if z.starts_with("zipf") => GeoKeys::Zipf {
            s_percent: num(&z[4..])?,
        },
        Some(l) if l.starts_with("local") => {
            let (p, n) = l[5..].split_once('/').ok_or_else(bad)?;
            GeoKeys::Local {
                percent: num(p)?,
                regions: num(n)?,
            }
        }
        Some(range) => {
            let (p, n) = range.split_once('/').ok_or_else(bad)?;
            GeoKeys::Range {
                part: num(p)?,
                parts: num(n)?,
            }
        }
    };
    let ok = match keys {
        GeoKeys::Range { part, parts } => parts > 0 && parts <= 32 && part < parts,
        GeoKeys::Local { percent, regions } => percent <= 100 && (1..=32).contains(&regions),
        GeoKeys::Zipf { s_percent } => (1..=500).contains(&s_percent),
    };
    if read_percent > 100 || !ok {
        return Err(bad());
    }
    Ok(Workload::Geo { read_percent, keys })
}

impl partita_types::Choice for Workload {
    const NAMES: &'static [&'static str] = &["query", "update", "batch", "mixed"];
    const WHAT: &'static str = "workload";
}

/// Keys of the preload are 0, 2, 4, …, 2(N-1) with value = key.
pub const PRELOAD_STRIDE: u64 = 2;

/// Keys are drawn from 0..2N for a preload of N, or 0..2,000,000 without one (as
/// `partita bench`).
pub fn key_space(preload: u64) -> u64 {
    if preload > 0 {
        preload * PRELOAD_STRIDE
    } else {
        1_000_000 * PRELOAD_STRIDE
    }
}

/// Keys in a range query of the workloads (paper 001 §V-A: a range of 1000 keys).
pub const QUERY_KEYS: u64 = 1000;

/// The inclusive key range of partition `p` of `partitions` equal ranges over `0..keys`,
/// clipped to the key space (the last partition of a `PartitionMap` also takes every key
/// above it, but the workloads draw keys below `keys` only).
pub fn partition_keys(partitions: u32, keys: u64, p: u32) -> (u64, u64) {
    match partita_types::PartitionMap::new(partitions.max(1), keys.max(partitions as u64)) {
        Ok(m) => {
            let (lo, hi) = m.range(p.min(m.count() - 1));
            (lo, hi.min(keys.saturating_sub(1)).max(lo))
        }
        Err(_) => (0, keys.saturating_sub(1)),
    }
}

/// A range query of [`QUERY_KEYS`] preloaded keys (stride [`PRELOAD_STRIDE`]) over keys
/// `0..keys` cut into `partitions` equal ranges.
///
/// - With probability `cross_percent`/100 (and at least two partitions) it is a
///   *cross-partition* query: a border between partitions i and i+1 (i uniform) and a
///   range of 1000 keys that straddles it with `j` keys below (j uniform in 1..=999), so
///   it accesses exactly two partitions and each does part of the work (paper 001 §V-D:
///   "a cross-partition query accesses two partitions, regardless the number of existing
///   partitions").
/// - Otherwise it lies inside one partition (uniform), its start uniform over the starts
///   that keep it inside.
///
/// When a partition is narrower than a query (tiny test key spaces), the query is
/// clipped to the partition (or, cross-partition, to the two partitions).
pub fn partitioned_query(rng: &mut impl Rng, keys: u64, partitions: u32, cross_percent: u32) -> Op {
    let partitions = partitions.max(1);
    let span = (QUERY_KEYS - 1) * PRELOAD_STRIDE;
    let even = |k: u64| k & !1;
    if partitions > 1 && rng.gen_range(0..100) < cross_percent.min(100) {
        let i = rng.gen_range(0..partitions - 1);
        let (lo, _) = partition_keys(partitions, keys, i);
        let (border, hi_next) = partition_keys(partitions, keys, i + 1);
        // The preloaded keys below the border that fit in partition i.
        let below_max = ((border - lo) / PRELOAD_STRIDE).clamp(1, QUERY_KEYS - 1);
        let j = rng.gen_range(1..=below_max);
        let min = even(border.saturating_sub(j * PRELOAD_STRIDE)).max(lo);
        let max = (min + span).min(hi_next).max(border);
        return Op::Query { min, max };
    }
    let p = rng.gen_range(0..partitions);
    let (lo, hi) = partition_keys(partitions, keys, p);
    let lo = lo.div_ceil(PRELOAD_STRIDE) * PRELOAD_STRIDE;
    if hi < lo + span {
        return Op::Query {
            min: lo.min(hi),
            max: hi,
        };
    }
    let starts = (hi - span - lo) / PRELOAD_STRIDE;
    let min = lo + rng.gen_range(0..=starts) * PRELOAD_STRIDE;
    Op::Query {
        min,
        max: min + span,
    }
}

/// A batch of seven inserts/deletes (half each) whose keys all lie in one partition
/// (uniform) of `partitions` equal ranges over `0..keys`.
pub fn partitioned_batch(rng: &mut impl Rng, keys: u64, partitions: u32) -> Op {
    let p = rng.gen_range(0..partitions.max(1));
    let (lo, hi) = partition_keys(partitions, keys, p);
    Op::Batch(
        (0..7)
            .map(|_| {
                let key = rng.gen_range(lo..=hi);
                if rng.gen_bool(0.5) {
                    BatchOp::Insert {
                        key,
                        value: rng.gen(),
                    }
                } else {
                    BatchOp::Delete { key }
                }
            })
            .collect(),
    )
}

/// One command of workload `w` over keys `0..keys` for client `client` (its index in
/// the run: a geo workload's locality depends on it): the same distribution as
/// `partita bench` (`partita_harness::bench`).
pub fn random_op(w: Workload, rng: &mut impl Rng, keys: u64, client: u64) -> Op {
    let keys = keys.max(2);
    let key = |rng: &mut dyn rand::RngCore| rng.gen_range(0..keys);
    // Half inserts, half deletes (the draws in the order they always were).
    let insert_or_delete = |rng: &mut dyn rand::RngCore| {
        if rng.gen_bool(0.5) {
            Op::Insert {
                key: key(rng),
                value: rng.gen(),
            }
        } else {
            Op::Delete { key: key(rng) }
        }
    };
    match w {
        Workload::PartitionedQuery {
            partitions,
            cross_percent,
        } => partitioned_query(rng, keys, partitions, cross_percent),
        Workload::PartitionedBatch { partitions } => partitioned_batch(rng, keys, partitions),
        Workload::Query => {
            let min = rng.gen_range(0..keys) & !1;
            Op::Query {
                min,
                max: min + 999 * PRELOAD_STRIDE,
            }
        }
        Workload::Update => insert_or_delete(rng),
        Workload::Batch => Op::Batch(
            (0..7)
                .map(|_| {
                    if rng.gen_bool(0.5) {
                        BatchOp::Insert {
                            key: key(rng),
                            value: rng.gen(),
                        }
                    } else {
                        BatchOp::Delete { key: key(rng) }
                    }
                })
                .collect(),
        ),
        Workload::Geo {
            read_percent,
            keys: which,
        } => {
            let k = which.draw(rng, keys, client);
            if rng.gen_range(0..100) < read_percent {
                match rng.gen_range(0..10) {
                    0 => Op::Next { key: k },
                    1 => Op::Prev { key: k },
                    _ => Op::Read { key: k },
                }
            } else if rng.gen_range(0..10) == 0 {
                Op::Insert {
                    key: k,
                    value: rng.gen(),
                }
            } else {
                Op::Update {
                    key: k,
                    value: rng.gen(),
                }
            }
        }
        Workload::Dependent { percent } => {
            if rng.gen_range(0..100) < percent {
                insert_or_delete(rng)
            } else {
                Op::Read { key: key(rng) }
            }
        }
        Workload::Mixed => match rng.gen_range(0..100) {
            0..40 => Op::Read { key: key(rng) },
            40..60 => Op::Update {
                key: key(rng),
                value: rng.gen(),
            },
            60..75 => Op::Insert {
                key: key(rng),
                value: rng.gen(),
            },
            75..90 => Op::Delete { key: key(rng) },
            90..95 => {
                let min = key(rng);
                Op::Query {
                    min,
                    max: min.saturating_add(99 * PRELOAD_STRIDE),
                }
            }
            95..98 => Op::Next { key: key(rng) },
            _ => Op::Prev { key: key(rng) },
        },
    }
}

/// The preloaded state of an SMR replica: given a replica's node id, the bytes of a
/// replica checkpoint of instance 0 of this cluster written by that node
/// (`SequentialReplica::checkpoint`, then `partita_smr::restamp_checkpoint`). A
/// function, so that each replica's copy exists only while it boots.
#[derive(Clone)]
pub struct ReplicaImage(pub Arc<dyn Fn(NodeId) -> Vec<u8> + Send + Sync>);

impl std::fmt::Debug for ReplicaImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplicaImage(..)")
    }
}

/// The simulated network of an experiment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchNet {
    /// One-way latency of every link.
    pub latency_ns: u64,
    /// Uniform extra delay per message, `0..=jitter_ns`.
    pub jitter_ns: u64,
    /// Every endpoint's network card; `None`: per-link bandwidth only.
    pub nic: Option<NicParams>,
    /// Per-link bandwidth when there are no cards.
    pub link_bytes_per_s: u64,
}

impl Default for BenchNet {
    /// Paper 001's LAN: 0.1 ms round trip, gigabit cards.
    fn default() -> Self {
        BenchNet {
            latency_ns: 50 * MICROS,
            jitter_ns: 10 * MICROS,
            nic: Some(NicParams::gigabit()),
            link_bytes_per_s: 125_000_000,
        }
    }
}

/// One experiment point.
#[derive(Clone, Debug)]
pub struct BenchSpec {
    /// Any cluster file the real loader accepts (smr or cs mode).
    pub cluster: ClusterConfig,
    /// Standalone batchers added to `cluster` (smr mode only; 0: none).
    pub batchers: u32,
    pub workload: Workload,
    pub clients: u32,
    /// Think time before each command, uniform whole milliseconds in `0..=think_ms`.
    pub think_ms: u64,
    /// Entries preloaded on every replica (keys 0, 2, …; value = key).
    pub preload: u64,
    /// Required for an SMR cluster with `preload > 0`.
    pub replica_image: Option<ReplicaImage>,
    /// Virtual length of the run, and the fraction trimmed at each end.
    pub duration_ns: Time,
    pub trim: f64,
    /// The fraction trimmed at the end instead of `trim` (a window placed between two
    /// events of the run, such as GeoPaxos+'s DOPs).
    pub trim_end: Option<f64>,
    pub seed: u64,
    pub cost: CostTable,
    pub net: BenchNet,
    /// Whether acceptors fsync (the cost table's `[disk]`); `false`: writes only.
    pub fsync: bool,
    pub client_timeout_ns: Time,
    /// S-SMR/DS-SMR Chirper instead of the B+tree (`workload` is then ignored).
    pub dssmr: Option<crate::swarm::DsParams>,
}

impl BenchSpec {
    /// A spec with the defaults of the experiments: 3 s virtual, 10% trimmed, seed 1,
    /// the paper's network, fsync on, clients resend after 1 s (`partita-client`'s
    /// timeout).
    pub fn new(cluster: ClusterConfig, workload: Workload, clients: u32) -> BenchSpec {
        BenchSpec {
            cluster,
            batchers: 0,
            workload,
            clients,
            think_ms: 0,
            preload: 0,
            replica_image: None,
            duration_ns: 3 * SECONDS,
            trim: 0.1,
            trim_end: None,
            seed: 1,
            cost: CostTable::default(),
            net: BenchNet::default(),
            fsync: true,
            dssmr: None,
            client_timeout_ns: 1000 * MILLIS,
        }
    }
}

/// Load of one node over the measured window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeLoad {
    pub node: NodeId,
    /// "acceptor", "coordinator", "replica", "batcher" (standalone), "server".
    pub role: String,
    /// Fraction of the window its CPU was busy.
    pub cpu: f64,
    /// Fraction of the window its network card was sending.
    pub nic_out: f64,
    /// Fsyncs in the window (acceptors).
    pub fsyncs: u64,
}

/// What an experiment point measured (virtual time throughout).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchReport {
    /// "smr" or "cs", and the ordering protocol (smr).
    pub mode: String,
    pub protocol: String,
    pub workload: Workload,
    pub clients: u32,
    pub think_ms: u64,
    pub preload: u64,
    pub acceptors: usize,
    pub replicas: usize,
    pub batch_bytes_max: usize,
    pub window_instances_max: usize,
    pub fsync: bool,
    pub duration_s: f64,
    pub measured_s: f64,
    pub commands: u64,
    pub ops: u64,
    pub throughput_cmds_per_s: f64,
    pub throughput_ops_per_s: f64,
    pub latency_ms_p50: f64,
    pub latency_ms_p90: f64,
    pub latency_ms_p99: f64,
    pub latency_ms_max: f64,
    /// Mean response time of the commands in the window.
    pub latency_ms_mean: f64,
    /// With `[wan] clients`: the latency of each region's clients (in region order of
    /// name), as paper 004's Figure 6 gives the Europe clients'.
    #[serde(default)]
    pub regions: Vec<RegionLatency>,
    pub resubmissions: u64,
    /// Instances the coordinator decided in the window (smr), and commands per
    /// instance.
    pub instances: u64,
    pub commands_per_instance: f64,
    pub nodes: Vec<NodeLoad>,
    /// P-SMR: the worker threads' work in the window (`None` without worker threads).
    pub psmr: Option<PsmrLoad>,
    /// The cluster file's regions, simulated: the round-trip matrix in words (links
    /// between regions take half of it as latency); `None` without `[wan]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wan: Option<String>,
    pub events: u64,
    pub trace_hash: u64,
    pub virtual_ns: u64,
    /// A core's invariant or the codec failed (the numbers are then meaningless).
    pub failure: Option<String>,
}

/// The clients of one region, measured like the whole run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RegionLatency {
    pub region: String,
    pub clients: u32,
    pub commands: u64,
    pub throughput_cmds_per_s: f64,
    pub latency_ms_mean: f64,
    pub latency_ms_p50: f64,
    pub latency_ms_p95: f64,
}

/// P-SMR in the measured window (paper 002 §V): at one replica, commands run by one
/// thread alone and in synchronous mode, and opt-PSMR's safety checks passed and
/// failed; the worker threads' CPU; and, at the clients, the mean latency of commands
/// resubmitted after a failed check and of the others.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PsmrLoad {
    pub threads: usize,
    pub parallel: u64,
    pub synchronous: u64,
    pub passed: u64,
    pub failed: u64,
    /// Busy share of one replica's worker threads, summed over its threads (0..K).
    pub worker_cpu: f64,
    pub latency_ms_failed: f64,
    pub latency_ms_passed: f64,
    /// Commands completed in the window that had been resubmitted.
    pub commands_failed: u64,
}

impl PsmrLoad {
    /// Failed checks over checks (the optimistic commands).
    pub fn fail_rate(&self) -> f64 {
        self.failed as f64 / (self.passed + self.failed).max(1) as f64
    }
}

impl BenchReport {
    /// The node whose CPU was busiest, and how busy.
    pub fn busiest(&self) -> Option<&NodeLoad> {
        self.nodes.iter().max_by(|a, b| a.cpu.total_cmp(&b.cpu))
    }
}

/// Exact percentile (nearest rank) of sorted values.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Run one experiment point.
pub fn run(spec: BenchSpec) -> BenchReport {
    let _core = crate::CoreGate::enter();
    crate::world::World::new_bench(spec).run_bench()
}

/// What the client proxies of an S-SMR/DS-SMR run did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DsBenchStats {
    /// Move commands per second in each tenth of the run.
    pub moves_per_s: Vec<f64>,
    /// Move commands in each whole second of the run (a last part second is left
    /// out): how the paper plots them.
    pub moves_each_second: Vec<u64>,
    pub move_commands: u64,
    pub objects_moved: u64,
    pub retries: u64,
    pub fallbacks: u64,
    pub consults: u64,
    pub cache_hits: u64,
    /// Multicasts the clients sent while their moves were still queued or in flight
    /// (the paper's proxy does not wait for moves; 0 with `await_moves`).
    pub ahead_of_moves: u64,
}

/// [`run`] for a spec with `dssmr`.
pub fn run_with_dssmr(spec: BenchSpec) -> (BenchReport, DsBenchStats) {
    assert!(spec.dssmr.is_some(), "an S-SMR/DS-SMR spec");
    let _core = crate::CoreGate::enter();
    crate::world::World::new_bench(spec).run_bench_dssmr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn workloads_draw_the_bench_operations() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let keys = key_space(1000);
        for _ in 0..200 {
            match random_op(Workload::Query, &mut rng, keys, 0) {
                Op::Query { min, max } => {
                    assert_eq!(min % 2, 0);
                    assert_eq!(max - min, 1998);
                    assert!(min < keys);
                }
                o => panic!("{o:?}"),
            }
            assert!(matches!(
                random_op(Workload::Update, &mut rng, keys, 0),
                Op::Insert { .. } | Op::Delete { .. }
            ));
            match random_op(Workload::Batch, &mut rng, keys, 0) {
                Op::Batch(ops) => assert_eq!(ops.len(), 7),
                o => panic!("{o:?}"),
            }
        }
        assert_eq!(key_space(0), 2_000_000);
    }

    #[test]
    fn partitioned_workloads_respect_the_partition_map() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for (preload, parts) in [
            (1_000_000u64, 2u32),
            (1_000_000, 4),
            (1_000_000, 1),
            (2_000, 4),
        ] {
            let keys = key_space(preload);
            let map = partita_types::PartitionMap::new(parts, keys).unwrap();
            for cross in [0u32, 25, 50, 100] {
                let w = Workload::PartitionedQuery {
                    partitions: parts,
                    cross_percent: cross,
                };
                let mut crossing = 0;
                for _ in 0..400 {
                    let op = random_op(w, &mut rng, keys, 0);
                    let Op::Query { min, max } = op else {
                        panic!("{op:?}")
                    };
                    assert!(min <= max && max < keys, "{min}..{max} of {keys}");
                    assert_eq!(min % 2, 0);
                    let n = partita_btree::service::partitions_of(&op, &map).len();
                    assert!(n == 1 || n == 2, "{op:?} touches {n} partitions");
                    if n == 2 {
                        crossing += 1;
                    }
                    if preload >= 1_000_000 {
                        assert_eq!(max - min, 1998, "1000 keys");
                    }
                }
                match (cross, parts) {
                    (_, 1) | (0, _) => assert_eq!(crossing, 0),
                    (100, _) => assert_eq!(crossing, 400),
                    (c, _) => {
                        let expect = 4 * c as i64;
                        assert!((crossing - expect).abs() < 70, "{crossing} of 400 at {c}%");
                    }
                }
            }
            for _ in 0..200 {
                let op = random_op(
                    Workload::PartitionedBatch { partitions: parts },
                    &mut rng,
                    keys,
                    0,
                );
                let Op::Batch(ref ops) = op else {
                    panic!("{op:?}")
                };
                assert_eq!(ops.len(), 7);
                assert_eq!(
                    partita_btree::service::partitions_of(&op, &map).len(),
                    1,
                    "{op:?}"
                );
            }
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&[], 0.5), 0);
        assert_eq!(percentile(&[7], 0.9), 7);
    }

    /// Paper 004's access patterns by name, round-tripping, and bad ones refused
    /// with what the syntax is.
    #[test]
    fn geo_workloads_parse_and_print() {
        for (name, keys) in [
            ("geo-95", GeoKeys::UNIFORM),
            ("geo-95@1/3", GeoKeys::Range { part: 1, parts: 3 }),
            (
                "geo-100@local",
                GeoKeys::Local {
                    percent: 90,
                    regions: 3,
                },
            ),
            (
                "geo-50@local75/5",
                GeoKeys::Local {
                    percent: 75,
                    regions: 5,
                },
            ),
            ("geo-95@zipf", GeoKeys::Zipf { s_percent: 99 }),
            ("geo-0@zipf120", GeoKeys::Zipf { s_percent: 120 }),
        ] {
            let w: Workload = name.parse().unwrap();
            let read_percent = name[4..].split('@').next().unwrap().parse().unwrap();
            assert_eq!(w, Workload::Geo { read_percent, keys }, "{name}");
            assert_eq!(w.to_string(), name);
        }
        for bad in [
            "geo-101",
            "geo-95@3/3",
            "geo-95@local101/3",
            "geo-95@local90/0",
            "geo-95@zipf0",
            "geo-95@hot",
        ] {
            let e = bad.parse::<Workload>().unwrap_err();
            assert!(e.contains(bad) && e.contains("@local"), "{e}");
        }
    }

    /// Locality puts `percent`% of a client's keys (plus its share of the rest) in
    /// its region's range; Zipf gives rank 0 its share 1/H(n, s) and spreads the hot
    /// keys over the key space; both stay inside it.
    #[test]
    fn geo_keys_follow_the_papers_access_patterns() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let keys = 30_000;
        let local = GeoKeys::Local {
            percent: 90,
            regions: 3,
        };
        for client in 0..3u64 {
            let (lo, hi) = (client * 10_000, (client + 1) * 10_000);
            let home = (0..10_000)
                .map(|_| local.draw(&mut rng, keys, client))
                .filter(|k| {
                    assert!(*k < keys);
                    (lo..hi).contains(k)
                })
                .count();
            // 90% local plus a third of the other 10%.
            assert!((9_150..9_500).contains(&home), "client {client}: {home}");
        }
        let zipf = GeoKeys::Zipf { s_percent: 99 };
        let mut counts = std::collections::BTreeMap::<u64, u32>::new();
        let draws = 100_000;
        for i in 0..draws {
            let k = zipf.draw(&mut rng, keys, i % 3);
            assert!(k < keys);
            *counts.entry(k).or_default() += 1;
        }
        let h: f64 = (1..=keys).map(|r| 1.0 / (r as f64).powf(0.99)).sum();
        let share = |rank: u64| draws as f64 / ((rank + 1) as f64).powf(0.99) / h;
        // Rank 0 is key 0, rank 1 key P mod keys: far apart, with their shares.
        let second = ZIPF_SCATTER_PRIME % keys;
        assert!(second > keys / 100, "{second}");
        for (rank, key) in [(0, 0), (1, second)] {
            let got = f64::from(counts.get(&key).copied().unwrap_or(0));
            assert!(
                (got - share(rank)).abs() < 0.1 * share(rank),
                "rank {rank}: {got} draws, {} expected",
                share(rank)
            );
        }
        // Most keys are cold: far fewer distinct keys than a uniform draw would hit.
        assert!(counts.len() < 25_000, "{}", counts.len());
    }
}
