//! GeoPaxos's timestamp merge against many replicas that learn the same serializer
//! logs in different interleavings: conflicting operations (sharing a serializer) run
//! in one order everywhere, the order of their final timestamps computed here
//! independently from the logs; every operation runs once; and the planted bug that
//! executes before a timestamp is safe is caught by exactly that check.

use partita_consensus::geopaxos::{
    Entry, MergeBugs, SerializerId, SerializerSet, Timestamp, TimestampMerge,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

type Logs = Vec<Vec<Entry<u32, u32>>>;

/// Random logs: `ops` operations over `s` serializers, each decided once in every
/// serializer of its dst, at random times, with Lamport-like hints from leaders that
/// know only part of what was decided, occasional clock entries and resubmitted
/// duplicates; every log ends with a clock entry past everything.
fn logs(rng: &mut ChaCha8Rng, s: usize, ops: u32) -> Logs {
    let mut todo: Vec<(u32, SerializerSet, Vec<SerializerId>)> = (0..ops)
        .map(|op| {
            let mut dst = SerializerSet::EMPTY;
            while dst.is_empty() {
                for g in 0..s as SerializerId {
                    if rng.gen_bool(if s == 1 { 1.0 } else { 0.4 }) {
                        dst.insert(g);
                    }
                }
            }
            (op, dst, dst.iter().collect())
        })
        .collect();
    let mut logs: Logs = vec![Vec::new(); s];
    // Each leader's clock: what it has seen, lagging behind the others.
    let mut clocks = vec![0u64; s];
    let mut started: Vec<u32> = Vec::new();
    while !todo.is_empty() {
        let g = rng.gen_range(0..s) as SerializerId;
        // Learn a bit of the others' clocks.
        let other = rng.gen_range(0..s);
        if rng.gen_bool(0.5) {
            clocks[g as usize] = clocks[g as usize].max(clocks[other]);
        }
        clocks[g as usize] += 1;
        let hint = if rng.gen_bool(0.1) {
            rng.gen_range(0..5) // a leader change that forgot its clock
        } else {
            clocks[g as usize]
        };
        // Prefer operations already started elsewhere (they span serializers).
        let pick = todo.iter().position(|(op, _, left)| {
            left.contains(&g) && (started.contains(op) || rng.gen_bool(0.3))
        });
        match pick {
            Some(i) if rng.gen_bool(0.85) => {
                let (op, dst, left) = &mut todo[i];
                left.retain(|x| *x != g);
                logs[g as usize].push(Entry::Op {
                    op: *op,
                    dst: *dst,
                    hint,
                    value: *op,
                });
                started.push(*op);
                if rng.gen_bool(0.05) {
                    // A resubmission that arrives twice.
                    logs[g as usize].push(Entry::Op {
                        op: *op,
                        dst: *dst,
                        hint: hint + 1,
                        value: *op,
                    });
                }
                if left.is_empty() {
                    todo.remove(i);
                }
            }
            _ => logs[g as usize].push(Entry::Clock { hint }),
        }
    }
    let last = clocks.iter().max().unwrap() + logs.iter().map(|l| l.len() as u64).sum::<u64>();
    for l in &mut logs {
        l.push(Entry::Clock { hint: last + 1 });
    }
    logs
}

/// The final timestamp of every operation, straight from the definition.
fn finals(logs: &Logs) -> BTreeMap<u32, (Timestamp, SerializerSet)> {
    let mut stamps: BTreeMap<u32, (Timestamp, SerializerSet, SerializerSet)> = BTreeMap::new();
    for (g, log) in logs.iter().enumerate() {
        let mut c = 0u64;
        for e in log {
            let hint = match e {
                Entry::Op { hint, .. } | Entry::Clock { hint } => *hint,
            };
            c = hint.max(c + 1);
            if let Entry::Op { op, dst, .. } = e {
                let ts = Timestamp {
                    counter: c,
                    serializer: g as SerializerId,
                };
                let s = stamps
                    .entry(*op)
                    .or_insert((Timestamp::ZERO, *dst, SerializerSet::EMPTY));
                if !s.2.contains(g as SerializerId) {
                    s.2.insert(g as SerializerId);
                    s.0 = s.0.max(ts);
                }
            }
        }
    }
    stamps
        .into_iter()
        .map(|(op, (t, d, _))| (op, (t, d)))
        .collect()
}

/// One replica: learns the logs in a random interleaving, executing whatever is ready.
fn replay(rng: &mut ChaCha8Rng, logs: &Logs, bugs: MergeBugs) -> Vec<(u32, Timestamp)> {
    let mut m = TimestampMerge::<u32, u32>::new(logs.len())
        .unwrap()
        .with_bugs(bugs);
    let mut at = vec![0usize; logs.len()];
    let mut order = Vec::new();
    loop {
        let open: Vec<usize> = (0..logs.len())
            .filter(|g| at[*g] < logs[*g].len())
            .collect();
        if open.is_empty() {
            break;
        }
        let g = open[rng.gen_range(0..open.len())];
        // Sometimes a burst from one log (a fast serializer).
        for _ in 0..rng.gen_range(1..4) {
            if at[g] == logs[g].len() {
                break;
            }
            m.on_entry(g as SerializerId, at[g] as u64, logs[g][at[g]].clone())
                .unwrap();
            at[g] += 1;
            while let Some(r) = m.pop_ready() {
                assert_eq!(r.value, r.op);
                order.push((r.op, r.timestamp));
            }
            m.invariants();
        }
    }
    assert_eq!(
        m.pending_len(),
        0,
        "everything executes once the logs are past it"
    );
    order
}

#[derive(Debug, PartialEq)]
enum Violation {
    /// Two operations sharing a serializer ran in different orders at two replicas.
    ConflictOrder { a: u32, b: u32 },
    /// An operation ran twice or never.
    ExactlyOnce { op: u32 },
    /// The merge reported a final timestamp other than the definition's.
    WrongTimestamp { op: u32 },
}

fn check(logs: &Logs, runs: &[Vec<(u32, Timestamp)>]) -> Result<(), Violation> {
    let f = finals(logs);
    let mut positions: Vec<BTreeMap<u32, usize>> = Vec::new();
    for run in runs {
        let mut pos = BTreeMap::new();
        for (i, (op, ts)) in run.iter().enumerate() {
            if pos.insert(*op, i).is_some() {
                return Err(Violation::ExactlyOnce { op: *op });
            }
            if f[op].0 != *ts {
                return Err(Violation::WrongTimestamp { op: *op });
            }
        }
        if let Some(op) = f.keys().find(|op| !pos.contains_key(op)) {
            return Err(Violation::ExactlyOnce { op: *op });
        }
        positions.push(pos);
    }
    let ops: Vec<u32> = f.keys().copied().collect();
    for (i, a) in ops.iter().enumerate() {
        for b in &ops[i + 1..] {
            if !f[a].1.intersects(f[b].1) {
                continue;
            }
            // Conflicting: every replica in the order of the final timestamps.
            let want = f[a].0 < f[b].0;
            for pos in &positions {
                if (pos[a] < pos[b]) != want {
                    return Err(Violation::ConflictOrder { a: *a, b: *b });
                }
            }
        }
    }
    Ok(())
}

fn run_seed(seed: u64, bugs: MergeBugs) -> (Result<(), Violation>, u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let s = rng.gen_range(1..=4);
    let n = rng.gen_range(1..=40);
    let logs = logs(&mut rng, s, n);
    let runs: Vec<_> = (0..4).map(|_| replay(&mut rng, &logs, bugs)).collect();
    let multi = finals(&logs).values().filter(|(_, d)| d.len() > 1).count() as u64;
    (check(&logs, &runs), multi)
}

#[test]
fn conflicting_operations_run_in_timestamp_order_at_every_replica() {
    let mut multi = 0;
    for seed in 0..600 {
        let (verdict, m) = run_seed(seed, MergeBugs::default());
        assert_eq!(verdict, Ok(()), "seed {seed}");
        multi += m;
    }
    assert!(
        multi > 1000,
        "multi-serializer operations exercised: {multi}"
    );
}

/// Each planted bug (both halves of the rule, and each half alone) makes some seeds
/// run two conflicting operations in different orders at two replicas.
#[test]
fn the_controls_executing_before_a_timestamp_is_safe_are_caught() {
    let controls = [
        MergeBugs {
            execute_before_safe: true,
            ..MergeBugs::default()
        },
        MergeBugs {
            skip_frontier: true,
            ..MergeBugs::default()
        },
        MergeBugs {
            skip_earlier_entries: true,
            ..MergeBugs::default()
        },
    ];
    for bugs in controls {
        let caught = (0..600)
            .map(|seed| run_seed(seed, bugs).0)
            .filter(|v| matches!(v, Err(Violation::ConflictOrder { .. })))
            .count();
        eprintln!("{bugs:?}: caught in {caught} of 600 seeds");
        assert!(
            caught >= 10,
            "{bugs:?} reordered conflicting operations in only {caught} seeds"
        );
    }
}

/// Leaders that follow the merge's advice (clock entries when an operation waits on
/// them) keep every operation moving without the final clock entries.
#[test]
fn wanted_clock_entries_are_enough_for_liveness() {
    for seed in 0..200 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let s = rng.gen_range(2..=4);
        let mut logs = logs(&mut rng, s, 30);
        for l in &mut logs {
            l.pop(); // no final clock entry
        }
        let mut m = TimestampMerge::<u32, u32>::new(s).unwrap();
        let mut executed = 0;
        for (g, log) in logs.iter().enumerate() {
            for (i, e) in log.iter().enumerate() {
                m.on_entry(g as SerializerId, i as u64, e.clone()).unwrap();
            }
        }
        let mut next: Vec<u64> = logs.iter().map(|l| l.len() as u64).collect();
        for _round in 0..10 {
            while m.pop_ready().is_some() {
                executed += 1;
            }
            for g in 0..s as SerializerId {
                if let Some(c) = m.wanted_clock(g) {
                    let hint = c.max(m.clock()) + 1;
                    m.on_entry(g, next[g as usize], Entry::Clock { hint })
                        .unwrap();
                    next[g as usize] += 1;
                }
            }
        }
        assert_eq!(m.pending_len(), 0, "seed {seed}: {executed} executed");
        assert_eq!(executed, 30, "seed {seed}");
    }
}

/// A merge saved half-way (as a checkpoint stores it) and restored continues exactly as
/// the one that never stopped.
#[test]
fn a_restored_merge_continues_the_same_way() {
    for seed in 0..100 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let s = rng.gen_range(1..=4);
        let logs = logs(&mut rng, s, 30);
        let mut feed: Vec<(usize, usize)> = Vec::new();
        let mut at = vec![0usize; s];
        while let Some(g) = {
            let open: Vec<usize> = (0..s).filter(|g| at[*g] < logs[*g].len()).collect();
            (!open.is_empty()).then(|| open[rng.gen_range(0..open.len())])
        } {
            feed.push((g, at[g]));
            at[g] += 1;
        }
        let cut = rng.gen_range(0..=feed.len());
        let run =
            |m: &mut TimestampMerge<u32, u32>, part: &[(usize, usize)], out: &mut Vec<u32>| {
                for (g, i) in part {
                    m.on_entry(*g as SerializerId, *i as u64, logs[*g][*i].clone())
                        .unwrap();
                    while let Some(r) = m.pop_ready() {
                        out.push(r.op);
                    }
                }
            };
        let mut whole = TimestampMerge::<u32, u32>::new(s).unwrap();
        let mut a = Vec::new();
        run(&mut whole, &feed, &mut a);
        let mut first = TimestampMerge::<u32, u32>::new(s).unwrap();
        let mut b = Vec::new();
        run(&mut first, &feed[..cut], &mut b);
        let bytes = bincode::serialize(&first).unwrap();
        let mut restored: TimestampMerge<u32, u32> = bincode::deserialize(&bytes).unwrap();
        restored.invariants();
        run(&mut restored, &feed[cut..], &mut b);
        assert_eq!(a, b, "seed {seed}, cut at {cut}");
        assert_eq!(whole.stats(), restored.stats());
    }
}
