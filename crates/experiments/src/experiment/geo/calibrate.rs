//! The CPU service times of the model ([`Costs`]), and how they are obtained.
//!
//! **Measured here, in this process, on the real cores** ([`measure`]), each with
//! `Instant` around the one call, the top 1% of the samples dropped (preemptions) and
//! the rest averaged:
//!
//! - `exec_ns`: `GeoBTree::execute` of a READ and of an INSERT of a 100-byte value at
//!   a random key of a preloaded tree (the point's size), the mean of the two.
//! - `geo_submit_ns`: `GeoReplica::submit` (psite and the serialization requests).
//! - `geo_entry_ns`: `GeoReplica::on_decided` per entry, less `exec_ns` per operation
//!   it executed: three replicas over one tree with random serializers (DBT_b, so that
//!   multi-serializer requests, clock entries and resubmissions happen), 90% READs,
//!   every serializer's log fed to every replica round robin.
//! - `dop_node_ns`: a brute-force DOP on that tree after the run, per node.
//! - EPaxos: three real cores exchanging messages in a random order with up to 64
//!   commands in flight, skewed keys (Zipf 0.99) and 5% writes, so that conflicts,
//!   slow paths and dependency graphs happen: `propose`, `on_message` per message kind,
//!   `on_persisted` and `on_tick`, each including the execution ordering (SCCs) it
//!   triggers.
//!
//! **Taken from this machine's `partita calibrate` table**
//! (`crates/sim/calibration/this-machine.toml`, socket and Multi-Paxos costs measured
//! on the real runtime): `recv_ns` (taking a message off a connection), `send_ns`,
//! `reply_ns`, and the Phase 2a / Phase 2b handlers of the Paxos cores, which stand
//! for the serializers' Paxos groups that the model does not run.
//!
//! [`recorded`] holds the numbers of one [`measure`] on this machine, for the tests
//! and for runs that should not depend on the moment's load.

use super::model::{value_of, Costs};
use super::workload::{Access, KeyGen, WorkloadSpec};
use partita_consensus::epaxos::{
    Epaxos, EpaxosAction, EpaxosCommand, EpaxosConfig, EpaxosMsg, KeyAccess,
};
use partita_consensus::geopaxos::{Entry, SerializerId};
use partita_geo::replica::{GeoAction, GeoReplica, GeoValue, OpId};
use partita_geo::{GbTreeOptions, GeoBTree, Op, Topology};
use partita_types::{Command, NodeId, Payload};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::time::Instant;

const THIS_MACHINE: &str = include_str!("../../../../sim/calibration/this-machine.toml");

/// The socket and Paxos costs of `crates/sim/calibration/this-machine.toml`.
pub fn socket_costs() -> (u64, u64, u64, u64, u64) {
    let t = partita_sim::CostTable::from_toml(THIS_MACHINE)
        .expect("the committed calibration table parses");
    let kind = |k: &str| {
        t.message_kind_ns
            .get(k)
            .copied()
            .unwrap_or(t.peer_message_ns)
    };
    (
        t.recv_ns,
        t.send_ns,
        t.reply_ns,
        kind("phase2a"),
        kind("phase2b"),
    )
}

/// The numbers one [`measure`] gave on this machine (2 vCPUs, Intel Xeon, release
/// build; `partita experiment geo --sim` prints and records the ones it uses).
pub fn recorded() -> Costs {
    let (recv_ns, send_ns, reply_ns, phase2a_ns, phase2b_ns) = socket_costs();
    Costs {
        recv_ns,
        send_ns,
        reply_ns,
        phase2a_ns,
        phase2b_ns,
        geo_submit_ns: 400,
        geo_entry_ns: 900,
        exec_ns: 700,
        dop_node_ns: 2_000,
        ep_propose_ns: 1_500,
        ep_message_ns: [
            ("preaccept", 1_500),
            ("preacceptok", 1_000),
            ("accept", 800),
            ("acceptok", 600),
            ("commit", 1_500),
            ("other", 800),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        ep_persisted_ns: 800,
        ep_tick_ns: 200,
    }
}

/// Samples of one call class.
#[derive(Default)]
struct Samples(Vec<u64>);

impl Samples {
    fn add(&mut self, ns: u64) {
        self.0.push(ns);
    }

    /// The mean without the top 1%.
    fn trimmed_mean(&mut self) -> Option<u64> {
        if self.0.is_empty() {
            return None;
        }
        self.0.sort_unstable();
        let keep = (self.0.len() * 99).div_ceil(100).max(1);
        let s: u64 = self.0[..keep].iter().sum();
        Some(s / keep as u64)
    }
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed().as_nanos() as u64)
}

/// A tree of `keys / 2` entries (the even keys, value = key) over `topology`.
pub fn preloaded_tree(topology: &Topology, keys: u64, order: usize, seed: u64) -> GeoBTree {
    let mut opts = GbTreeOptions::new(order, seed);
    opts.value_bytes_max = super::model::VALUE_BYTES;
    let mut t = GeoBTree::new(topology.clone(), opts).expect("valid options");
    for i in 0..keys / 2 {
        let key = 2 * i;
        t.execute(
            &Op::Insert {
                key,
                value: value_of(key),
            },
            (i % topology.n() as u64) as usize,
        )
        .expect("100-byte values fit");
    }
    // Forget the preload's accesses (the DOP resets the counters).
    t.dop();
    t
}

/// Times the real cores (see the module documentation). `keys`: the key space of the
/// points (the tree holds half of it); `ops`: requests per measured core.
pub fn measure(keys: u64, ops: u64, seed: u64) -> Costs {
    let mut c = recorded();
    let topology = Topology::paper_three_regions();
    let mut rng = StdRng::seed_from_u64(seed);
    let base = preloaded_tree(&topology, keys, partita_geo::ORDER_DEFAULT, seed);

    // The tree alone.
    let mut tree = base.clone();
    let (mut reads, mut inserts) = (Samples::default(), Samples::default());
    for i in 0..ops {
        let key = rng.gen_range(0..keys);
        let (_, ns) = timed(|| tree.execute(&Op::Read { key }, (i % 3) as usize));
        reads.add(ns);
        let key = rng.gen_range(0..keys);
        let op = Op::Insert {
            key,
            value: value_of(i),
        };
        let (_, ns) = timed(|| tree.execute(&op, (i % 3) as usize));
        inserts.add(ns);
    }
    let read_ns = reads.trimmed_mean().unwrap_or(c.exec_ns);
    let insert_ns = inserts.trimmed_mean().unwrap_or(c.exec_ns);
    c.exec_ns = (read_ns + insert_ns) / 2;

    // GeoPaxos replicas.
    let (submit_ns, entry_ns) = measure_geo(&base, keys, ops, c.exec_ns, &mut rng);
    c.geo_submit_ns = submit_ns;
    c.geo_entry_ns = entry_ns;
    let mut t = base.clone();
    for i in 0..ops {
        let key = rng.gen_range(0..keys);
        t.execute(&Op::Read { key }, (i % 3) as usize)
            .expect("a read");
    }
    let nodes = t.node_count() as u64;
    let (_, ns) = timed(|| t.dop());
    c.dop_node_ns = (ns / nodes.max(1)).max(1);

    // EPaxos.
    measure_epaxos(&mut c, keys, ops, &mut rng);
    c
}

fn measure_geo(base: &GeoBTree, keys: u64, ops: u64, exec_ns: u64, rng: &mut StdRng) -> (u64, u64) {
    let mut tree = base.clone();
    tree.randomize_reps(rng.gen());
    let mut replicas: Vec<GeoReplica> = (0..3)
        .map(|r| GeoReplica::new(r, tree.clone()).expect("a merge"))
        .collect();
    let mut logs: Vec<Vec<Entry<OpId, GeoValue>>> = vec![Vec::new(); 3];
    let mut learned = [[0usize; 3]; 3];
    let mut submit = Samples::default();
    let (mut decided_ns, mut entries) = (0u64, 0u64);
    let executed_before: u64 = replicas.iter().map(|r| r.stats().executed).sum();
    let append = |logs: &mut Vec<Vec<Entry<OpId, GeoValue>>>,
                  replicas: &[GeoReplica],
                  out: Vec<GeoAction>| {
        for a in out {
            if let GeoAction::Serialize {
                serializer,
                op,
                dst,
                value,
            } = a
            {
                let g = serializer as usize;
                logs[g].push(Entry::Op {
                    op,
                    dst,
                    hint: replicas[g].hint(),
                    value,
                });
            }
        }
    };
    let mut issued = 0u64;
    while issued < ops {
        for _ in 0..64 {
            let r = rng.gen_range(0..3usize);
            let key = rng.gen_range(0..keys);
            let op = if rng.gen_range(0..100) < 90 {
                Op::Read { key }
            } else {
                Op::Insert {
                    key,
                    value: value_of(issued),
                }
            };
            let mut out = Vec::new();
            let (res, ns) = timed(|| replicas[r].submit(issued, op, &mut out));
            res.expect("100-byte values fit");
            submit.add(ns);
            append(&mut logs, &replicas, out);
            issued += 1;
        }
        // Learn everything, round robin over the logs, until nothing is pending.
        loop {
            let mut progress = false;
            for r in 0..3 {
                for g in 0..3 {
                    while learned[r][g] < logs[g].len() {
                        let p = learned[r][g];
                        learned[r][g] += 1;
                        let entry = logs[g][p].clone();
                        let mut out = Vec::new();
                        let (res, ns) = timed(|| {
                            replicas[r].on_decided(g as SerializerId, p as u64, entry, &mut out)
                        });
                        res.expect("in order");
                        decided_ns += ns;
                        entries += 1;
                        append(&mut logs, &replicas, out);
                        progress = true;
                    }
                }
            }
            if !progress {
                // Clock entries for whatever waits on a serializer.
                for g in 0..3 {
                    if let Some(c) = replicas[g].wanted_clock(g as SerializerId) {
                        logs[g].push(Entry::Clock {
                            hint: (c + 1).max(replicas[g].hint()),
                        });
                        progress = true;
                    }
                }
            }
            if !progress {
                break;
            }
        }
        assert!(replicas.iter().all(|r| r.merge().pending_len() == 0));
    }
    let executed: u64 = replicas.iter().map(|r| r.stats().executed).sum::<u64>() - executed_before;
    let entry_ns = decided_ns.saturating_sub(executed * exec_ns) / entries.max(1);
    (submit.trimmed_mean().unwrap_or(400), entry_ns.max(50))
}

fn ep_kind(m: &EpaxosMsg) -> &'static str {
    super::model::ep_kind(m)
}

fn measure_epaxos(c: &mut Costs, keys: u64, ops: u64, rng: &mut StdRng) {
    let mut cfg = EpaxosConfig::new(vec![1, 2, 3]);
    cfg.proposals_in_flight_max = 1 << 16;
    let mut cores: Vec<Epaxos> = (1..=3).map(|id| Epaxos::new(id, cfg.clone())).collect();
    let gen = KeyGen::new(
        WorkloadSpec {
            access: Access::Skewed,
            read_percent: 95,
            local_percent: 90,
            zipf_s: 0.99,
            keys,
        },
        3,
    );
    let mut pool: Vec<(NodeId, NodeId, EpaxosMsg)> = Vec::new();
    let mut by_kind: BTreeMap<&'static str, Samples> = BTreeMap::new();
    let (mut propose, mut persisted, mut tick) =
        (Samples::default(), Samples::default(), Samples::default());
    let mut in_flight = 0u64;
    let mut issued = 0u64;
    let mut executed = 0u64;
    let mut now_tick = 0u64;
    // Runs one handler's actions to completion (writes durable at once).
    let drain = |k: usize,
                 cores: &mut Vec<Epaxos>,
                 mut out: Vec<EpaxosAction>,
                 pool: &mut Vec<(NodeId, NodeId, EpaxosMsg)>,
                 persisted: &mut Samples|
     -> u64 {
        let mut done = 0;
        loop {
            let mut last = None;
            for a in out.drain(..) {
                match a {
                    EpaxosAction::Send { to, msg } => pool.push((k as NodeId + 1, to, msg)),
                    EpaxosAction::Persist { token, .. } => last = Some(token),
                    EpaxosAction::Execute { command, .. } => {
                        if command.is_some() && k == 0 {
                            done += 1;
                        }
                    }
                    // Calibration neither checkpoints nor truncates.
                    EpaxosAction::Cut { .. }
                    | EpaxosAction::TruncateLog { .. }
                    | EpaxosAction::NeedState { .. } => {}
                }
            }
            match last {
                Some(t) => {
                    let (_, ns) = timed(|| cores[k].on_persisted(t, &mut out));
                    persisted.add(ns);
                }
                None => return done,
            }
        }
    };
    while issued < ops || !pool.is_empty() {
        while issued < ops && in_flight < 64 {
            let k = rng.gen_range(0..3usize);
            let key = gen.key(rng, k);
            let write = !gen.is_read(rng);
            let op = if write {
                Op::Insert {
                    key,
                    value: value_of(issued),
                }
            } else {
                Op::Read { key }
            };
            let payload = match &op {
                Op::Insert { value, .. } => {
                    let mut b = vec![1u8];
                    b.extend_from_slice(&key.to_le_bytes());
                    b.extend_from_slice(value);
                    b
                }
                _ => {
                    let mut b = vec![0u8];
                    b.extend_from_slice(&key.to_le_bytes());
                    b
                }
            };
            let cmd = EpaxosCommand::new(
                Command::single(issued, 1, k as NodeId + 1, Payload::from(payload)),
                [KeyAccess { key, write }],
                false,
            );
            let mut out = Vec::new();
            let (res, ns) = timed(|| cores[k].propose(cmd, &mut out));
            res.expect("room");
            propose.add(ns);
            drain(k, &mut cores, out, &mut pool, &mut persisted);
            issued += 1;
            in_flight += 1;
        }
        if pool.is_empty() {
            break;
        }
        let i = rng.gen_range(0..pool.len());
        let (from, to, msg) = pool.swap_remove(i);
        let k = to as usize - 1;
        let kind = ep_kind(&msg);
        let mut out = Vec::new();
        let (_, ns) = timed(|| cores[k].on_message(from, msg, &mut out));
        by_kind.entry(kind).or_default().add(ns);
        let done = drain(k, &mut cores, out, &mut pool, &mut persisted);
        executed += done;
        in_flight = in_flight.saturating_sub(done);
        if rng.gen_range(0..64) == 0 {
            now_tick += 1;
            for k in 0..3 {
                let mut out = Vec::new();
                let (_, ns) = timed(|| cores[k].on_tick(now_tick, &mut out));
                tick.add(ns);
                drain(k, &mut cores, out, &mut pool, &mut persisted);
            }
        }
    }
    assert!(executed > 0, "the EPaxos calibration executed commands");
    c.ep_propose_ns = propose.trimmed_mean().unwrap_or(c.ep_propose_ns);
    c.ep_persisted_ns = persisted.trimmed_mean().unwrap_or(c.ep_persisted_ns);
    c.ep_tick_ns = tick.trimmed_mean().unwrap_or(c.ep_tick_ns);
    let mut other = Samples::default();
    for (kind, mut s) in by_kind {
        if ["preaccept", "preacceptok", "accept", "acceptok", "commit"].contains(&kind) {
            if let Some(m) = s.trimmed_mean() {
                c.ep_message_ns.insert(kind.to_string(), m);
            }
        } else {
            other.0.append(&mut s.0);
        }
    }
    if let Some(m) = other.trimmed_mean() {
        c.ep_message_ns.insert("other".into(), m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_measurement_gives_positive_costs_and_the_socket_table() {
        let c = measure(2_000, 300, 1);
        let (recv, send, reply, p2a, p2b) = socket_costs();
        assert_eq!(
            (c.recv_ns, c.send_ns, c.reply_ns, c.phase2a_ns, c.phase2b_ns),
            (recv, send, reply, p2a, p2b)
        );
        assert!(recv > 0 && send > 0);
        for v in [
            c.exec_ns,
            c.geo_submit_ns,
            c.geo_entry_ns,
            c.dop_node_ns,
            c.ep_propose_ns,
            c.ep_persisted_ns,
        ] {
            assert!(v > 0);
        }
        assert!(c.ep_message_ns.contains_key("preaccept"));
        assert!(c.ep_message_ns.contains_key("commit"));
    }
}
