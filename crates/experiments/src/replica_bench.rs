//! `partita bench psmr`: paper 002's execution models on real OS threads, the replica
//! alone (no ordering, no network, no disk).
//!
//! A replica of a B+tree preloaded in random order is handed decided values of
//! `dependent-P` commands (P% inserts and deletes, half each, the rest reads; keys
//! uniform over twice the preloaded count, as paper 002 §V-E does) and runs them to the
//! end, as `partita node` does: SMR (sequential execution), P-SMR with its worker
//! threads one after another on one thread (the node before OS threads), P-SMR on OS
//! threads (CC-G: inserts and deletes to every thread), and opt-PSMR on OS threads
//! (clients map every command to one thread; what the safety check refuses is
//! resubmitted through CC-G in a later value, as clients do). The clock runs from the
//! first value to the last reply; every model must end in the same state (digest), or
//! the run fails. Models take turns, in rounds, so that each round compares them at
//! one time on one machine.
//!
//! What it measures is the execution model's own cost and gain: on a real node the
//! ordering layer, the network and the disk come on top, and on this 2-core machine
//! they share the cores with the worker threads.

use partita_btree::{BPlusTree, Op};
use partita_consensus::{Value, Vid};
use partita_service::{ServiceCodec, ThreadLayout};
use partita_smr::{PsmrOptions, SequentialReplica};
use partita_types::{Ballot, Command, NodeId, Refusal, Reply};
use rand::{Rng, SeedableRng};
use std::time::Instant;

const ME: NodeId = 1;

/// What `partita bench psmr` runs (its command-line arguments).
#[derive(Clone, Debug, clap::Parser)]
pub struct ReplicaBenchOptions {
    /// Entries preloaded in random order (keys drawn from twice as many).
    #[arg(long, default_value_t = 1_000_000)]
    pub preload: u64,
    /// Worker threads (P-SMR models).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Share of dependent commands (inserts and deletes), in percent.
    #[arg(long, default_value_t = 0)]
    pub percent: u32,
    /// Commands per decided value.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Commands per model and round (before resubmissions).
    #[arg(long, default_value_t = 1_000_000)]
    pub commands: usize,
    /// Rounds: every model once per round.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// B+tree keys per node.
    #[arg(long, default_value_t = 30)]
    pub node_keys: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Microseconds idle worker threads spin before they sleep (the cluster file's
    /// `[execution] spin_us`).
    #[arg(long, default_value_t = 25)]
    pub spin_us: u64,
}

impl Default for ReplicaBenchOptions {
    /// The command line's defaults.
    fn default() -> Self {
        <Self as clap::Parser>::parse_from(["bench-psmr"])
    }
}

/// An execution model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    Smr,
    /// P-SMR, the worker threads one after another on the calling thread.
    PsmrOneThread,
    /// P-SMR (CC-G) on OS threads.
    Psmr,
    /// opt-PSMR (OC-G, safety check) on OS threads.
    OptPsmr,
}

impl Model {
    pub const ALL: [Model; 4] = [
        Model::Smr,
        Model::PsmrOneThread,
        Model::Psmr,
        Model::OptPsmr,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Model::Smr => "SMR",
            Model::PsmrOneThread => "P-SMR, 1 OS thread",
            Model::Psmr => "P-SMR",
            Model::OptPsmr => "opt-PSMR",
        }
    }
}

/// One model's run in one round.
#[derive(Clone, Debug)]
pub struct Point {
    pub round: usize,
    pub model: Model,
    /// Commands executed or refused (resubmissions counted again).
    pub commands: u64,
    pub secs: f64,
    pub per_s: f64,
    pub checks_passed: u64,
    pub checks_failed: u64,
    pub run_alone: u64,
    pub digest: u64,
    /// The digest the same values give executed one thread after another (opt-PSMR,
    /// whose resubmissions change the order; the others must match SMR's).
    pub expected: Option<u64>,
}

fn value(seq: u64, commands: Vec<Command>) -> Value {
    Value {
        vid: Vid {
            ballot: Ballot::new(0, 1),
            seq,
        },
        commands,
        parts: Vec::new(),
        time_ms: 0,
        skip: 0,
    }
}

/// The preloaded tree (the same for every model).
pub fn preloaded(o: &ReplicaBenchOptions) -> BPlusTree {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(o.seed);
    let mut tree = BPlusTree::with_node_keys(o.node_keys);
    let mut keys: Vec<u64> = (0..o.preload).map(|i| i * 2).collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.gen_range(0..=i));
    }
    for k in keys {
        tree.insert(k, k);
    }
    tree
}

/// The commands of one round (the same for every model): `(client, op)`.
fn workload(o: &ReplicaBenchOptions, round: usize) -> Vec<Op> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(o.seed ^ (round as u64 + 1) << 32);
    let key_max = o.preload.max(1) * 2 - 1;
    (0..o.commands)
        .map(|_| {
            let key = rng.gen_range(0..=key_max);
            if rng.gen_range(0..100) < o.percent {
                if rng.gen_bool(0.5) {
                    Op::Insert { key, value: key }
                } else {
                    Op::Delete { key }
                }
            } else {
                Op::Read { key }
            }
        })
        .collect()
}

/// Run `ops` through a replica of `model`; the point (digest included).
pub fn run_point(
    o: &ReplicaBenchOptions,
    tree: &BPlusTree,
    ops: &[Op],
    model: Model,
    round: usize,
) -> Point {
    let key_max = o.preload.max(1) * 2 - 1;
    let layout = ThreadLayout::new(o.threads, key_max).expect("a valid thread layout");
    let mut r = SequentialReplica::new(ME, tree.clone());
    if model != Model::Smr {
        r.set_psmr(PsmrOptions {
            layout,
            unsafe_no_barrier: false,
            unsafe_check_passes: false,
        });
    }
    if matches!(model, Model::Psmr | Model::OptPsmr) {
        r.set_thread_runner(std::sync::Arc::new(partita_gang::Gang::new(
            o.threads,
            "psmr",
            std::time::Duration::from_micros(o.spin_us),
        )));
    }
    // Every command of a value comes from a client of its own (a client's commands run
    // in its order, so one client's commands on two threads would wait for each other).
    let clients = (o.batch as u64).max(1);
    let mut seqs = vec![0u64; clients as usize];
    let mut command = |i: usize, op: &Op, threads: u64| {
        let c = (i as u64) % clients;
        seqs[c as usize] += 1;
        let mut cmd = partita_btree::service::command(c + 1, seqs[c as usize], ME, op);
        cmd.route = threads;
        cmd
    };
    let mapped = |op: &Op| match model {
        Model::OptPsmr => BPlusTree::thread_group(op, &layout, true).map_or(0, |t| 1u64 << t),
        _ => 0,
    };
    let values: Vec<Vec<Command>> = ops
        .chunks(o.batch.max(1))
        .enumerate()
        .map(|(v, chunk)| {
            chunk
                .iter()
                .enumerate()
                .map(|(i, op)| command(v * o.batch + i, op, mapped(op)))
                .collect()
        })
        .collect();
    let mut delivered = Vec::new();
    let mut replies: Vec<Reply> = Vec::with_capacity(o.batch * 2);
    let mut instance = 0;
    let mut commands = 0u64;
    let mut resubmit: Vec<Command> = Vec::new();
    let start = Instant::now();
    let mut pending = values.into_iter();
    loop {
        let cmds = match pending.next() {
            Some(mut cmds) => {
                // Refused optimistic commands come back conservatively (threads 0).
                cmds.append(&mut resubmit);
                cmds
            }
            None if !resubmit.is_empty() => std::mem::take(&mut resubmit),
            None => break,
        };
        commands += cmds.len() as u64;
        instance += 1;
        let v = value(instance, cmds);
        r.execute(instance, &v, &mut replies);
        r.run_threads(&mut replies);
        for x in replies.drain(..) {
            if let Err(Refusal::Resubmit(_)) = x.result {
                let original = v
                    .commands
                    .iter()
                    .find(|c| c.client == x.client && c.seq == x.seq)
                    .expect("a reply to a command of the value");
                let mut again = original.clone();
                again.route = 0;
                resubmit.push(again);
            }
        }
        if model == Model::OptPsmr {
            delivered.push(v);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    assert!(r.quiescent(), "every command ran");
    let st = r.stats();
    // opt-PSMR runs resubmitted commands later than SMR would: its state is judged
    // against the same values run by P-SMR's threads one after another instead.
    let expected = (model == Model::OptPsmr).then(|| {
        let mut check = SequentialReplica::new(ME, tree.clone());
        check.set_psmr(PsmrOptions {
            layout,
            unsafe_no_barrier: false,
            unsafe_check_passes: false,
        });
        for (i, v) in delivered.iter().enumerate() {
            check.execute(i as u64 + 1, v, &mut replies);
            check.run_threads(&mut replies);
        }
        check.digest()
    });
    Point {
        round,
        model,
        commands,
        secs,
        per_s: commands as f64 / secs.max(1e-9),
        checks_passed: st.psmr_passed,
        checks_failed: st.psmr_failed,
        run_alone: st.psmr_alone,
        digest: r.digest(),
        expected,
    }
}

/// Every model in every round, in turns; fails if two models end in different states.
pub fn run(o: &ReplicaBenchOptions, mut each: impl FnMut(&Point)) -> anyhow::Result<Vec<Point>> {
    anyhow::ensure!(
        o.threads >= 1 && o.threads <= 64,
        "--threads must be in 1..=64"
    );
    anyhow::ensure!(o.percent <= 100, "--percent must be in 0..=100");
    anyhow::ensure!(o.batch >= 1, "--batch must be at least 1");
    anyhow::ensure!(o.spin_us <= 100_000, "--spin-us must be at most 100000");
    anyhow::ensure!(
        o.preload >= o.threads as u64,
        "--preload must be at least --threads"
    );
    anyhow::ensure!(
        (partita_btree::MIN_NODE_KEYS..=partita_btree::MAX_NODE_KEYS).contains(&o.node_keys),
        "--node-keys must be in {}..={}",
        partita_btree::MIN_NODE_KEYS,
        partita_btree::MAX_NODE_KEYS
    );
    let tree = preloaded(o);
    let mut points = Vec::new();
    for round in 0..o.rounds {
        let ops = workload(o, round);
        let mut digest = None;
        for model in Model::ALL {
            let p = run_point(o, &tree, &ops, model, round);
            if let Some(e) = p.expected.filter(|&e| e != p.digest) {
                anyhow::bail!(
                    "round {round}: {} ended in state {:#x}, the same values one thread \
                     after another in {e:#x}",
                    model.name(),
                    p.digest
                );
            }
            if p.expected.is_none() && *digest.get_or_insert(p.digest) != p.digest {
                anyhow::bail!(
                    "round {round}: {} ended in state {:#x}, SMR in {:#x}",
                    model.name(),
                    p.digest,
                    digest.unwrap_or_default()
                );
            }
            each(&p);
            points.push(p);
        }
    }
    Ok(points)
}

/// The configuration line every result is printed with.
pub fn describe(o: &ReplicaBenchOptions) -> String {
    format!(
        "replica alone (no ordering, network or disk), real OS threads; B+tree of {} entries \
         ({} keys per node), keys uniform over 0..{}; dependent-{} ({}% inserts and deletes, \
         the rest reads); {} commands per value, {} per model and round; {} worker threads; \
         idle worker threads spin {} µs; {} rounds, models in turns; {} cores on this machine",
        o.preload,
        o.node_keys,
        o.preload * 2,
        o.percent,
        o.percent,
        o.batch,
        o.commands,
        o.threads,
        o.spin_us,
        o.rounds,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    )
}

/// One line per point.
pub fn line(p: &Point) -> String {
    format!(
        "round {}  {:<20} {:>10.0} commands/s  ({} commands in {:.3} s; checks passed {}, failed {}; run alone {})",
        p.round,
        p.model.name(),
        p.per_s,
        p.commands,
        p.secs,
        p.checks_passed,
        p.checks_failed,
        p.run_alone
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_ends_in_the_sequential_state() {
        for percent in [0, 30, 100] {
            let o = ReplicaBenchOptions {
                preload: 2_000,
                threads: 3,
                percent,
                batch: 40,
                commands: 3_000,
                rounds: 2,
                node_keys: 8,
                seed: 7,
                spin_us: 25,
            };
            let mut seen = 0;
            let points = run(&o, |_| seen += 1).unwrap();
            assert_eq!(points.len(), 8);
            assert_eq!(seen, 8);
            for p in &points {
                assert_eq!(p.run_alone, 0, "{}", line(p));
                match p.model {
                    Model::OptPsmr if percent > 0 => {
                        assert!(p.checks_passed > 0, "{}", line(p));
                        // Refused commands came back: more commands than the workload.
                        assert_eq!(p.commands, 3_000 + p.checks_failed, "{}", line(p));
                    }
                    _ => assert_eq!(p.commands, 3_000, "{}", line(p)),
                }
            }
        }
    }

    #[test]
    fn bad_options_are_refused() {
        let bad = [
            ReplicaBenchOptions {
                threads: 0,
                ..ReplicaBenchOptions::default()
            },
            ReplicaBenchOptions {
                percent: 101,
                ..ReplicaBenchOptions::default()
            },
            ReplicaBenchOptions {
                batch: 0,
                ..ReplicaBenchOptions::default()
            },
            ReplicaBenchOptions {
                node_keys: 2,
                ..ReplicaBenchOptions::default()
            },
            ReplicaBenchOptions {
                spin_us: 100_001,
                ..ReplicaBenchOptions::default()
            },
        ];
        for o in bad {
            assert!(run(&o, |_| {}).is_err(), "{o:?}");
        }
    }
}
