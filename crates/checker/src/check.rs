//! Preparing a history, splitting it into independent sub-histories and running the
//! search on each.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

use partita_btree::{BatchOp, Op, OpResult};
use serde::{Deserialize, Serialize};

use crate::history::{fmt_op, fmt_result, Event, Status};
use crate::initial::{Initial, InitialIndex};
use crate::model::Subject;
use crate::search::{search, Expected, Failure, Outcome, SubOp};

/// Default bound on explored search states (all sub-histories together): about 20 MB of
/// memo and, at 1 to 40 µs per state, seconds to a few tens of seconds of search. Valid
/// histories usually need one or two states per operation; the budget is there for
/// violations hidden in large groups and for histories dense with `info` operations.
pub const DEFAULT_MAX_STATES: u64 = 1_000_000;

/// How to check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckOptions {
    /// Map contents before the first operation.
    pub initial: Initial,
    /// Give up with [`CheckError::Unknown`] after exploring this many search states in
    /// total. Valid histories need about one state per operation plus a little
    /// backtracking; only violations and truly ambiguous histories need many.
    pub max_states: u64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            initial: Initial::Empty,
            max_states: DEFAULT_MAX_STATES,
        }
    }
}

impl CheckOptions {
    pub fn with_initial(initial: Initial) -> CheckOptions {
        CheckOptions {
            initial,
            ..CheckOptions::default()
        }
    }
}

/// What a successful check covered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckSummary {
    /// Events in the history as given.
    pub events: usize,
    /// Operations the search linearized or placed: `ok` ones plus `info` mutations.
    pub ops_checked: usize,
    /// Of those, `info` mutations (may or may not have taken effect).
    pub info_ops: usize,
    /// `fail` operations, left out (they did not take effect).
    pub failed_ops: usize,
    /// `info` reads, left out (they cannot have changed anything).
    pub info_reads_dropped: usize,
    /// Distinct keys the checked operations name or observe.
    pub keys: usize,
    /// Independent sub-histories the checker split the history into.
    pub groups: usize,
    /// Operations in the largest sub-history.
    pub largest_group: usize,
    /// Search states explored, all sub-histories together.
    pub states: u64,
}

impl fmt::Display for CheckSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} operations on {} keys (states explored {})",
            self.ops_checked, self.keys, self.states
        )
    }
}

/// The first operation that no linearization can account for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Index, in the checked slice, of the offending event; `None` when the culprit is
    /// the final state given to [`check_with_final_state`].
    pub index: Option<usize>,
    /// The offending event as recorded.
    pub event: Option<Event>,
    /// Keys involved: the smallest and largest key its result depends on (or the one key
    /// of `projected_key`).
    pub keys: Option<(u64, u64)>,
    /// Set when the violation was found by looking at one key alone (a multi-key operation
    /// whose result is impossible for that key); `allowed` then holds results of the
    /// operation's projection onto that key (e.g. `value=...` for a query).
    pub projected_key: Option<u64>,
    /// What the model would have returned to it at the furthest point any partial
    /// linearization reached (a few alternatives at most). Empty for final-state
    /// mismatches, which the message spells out.
    pub allowed: Vec<OpResult>,
    /// Operations of its sub-history linearized before it in that partial linearization.
    pub linearized_before: usize,
    /// Other independent sub-histories (usually: other keys) that failed too.
    pub other_failures: usize,
    /// Human-readable account.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if self.other_failures > 0 {
            write!(
                f,
                " [{} other independent sub-histories also fail]",
                self.other_failures
            )?;
        }
        Ok(())
    }
}

/// The search gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unknown {
    pub states: u64,
    pub limit: u64,
    /// Size and key span of the sub-history being searched when the budget ran out.
    pub group_ops: usize,
    pub keys: Option<(u64, u64)>,
    /// Sub-histories fully checked (all linearizable) before giving up.
    pub groups_checked: usize,
    pub groups: usize,
}

impl fmt::Display for Unknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "search gave up after {} states (limit {}) on a sub-history of {} operations",
            self.states, self.limit, self.group_ops
        )?;
        if let Some(k) = self.keys {
            write!(f, " over {}", fmt_keys(k))?;
        }
        write!(
            f,
            "; {} of {} sub-histories checked linearizable before that",
            self.groups_checked, self.groups
        )
    }
}

/// A check that did not conclude "linearizable".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    #[error("NOT linearizable: {0}")]
    NotLinearizable(Box<Violation>),
    #[error("unknown: {0}")]
    Unknown(Unknown),
    /// The history breaks its own rules (e.g. `ok` without a result, response before
    /// invocation). Parsed histories never do; hand-built ones might.
    #[error("invalid history: {0}")]
    Invalid(String),
}

impl CheckError {
    pub fn violation(&self) -> Option<&Violation> {
        match self {
            CheckError::NotLinearizable(v) => Some(v),
            _ => None,
        }
    }
}

fn fmt_keys((lo, hi): (u64, u64)) -> String {
    if lo == hi {
        format!("key {lo}")
    } else {
        format!("keys {lo}..={hi}")
    }
}

// ---------------------------------------------------------------------------------------

/// An operation the search will place.
struct Prepared<'a> {
    /// Index in the caller's events; `None` for the synthetic final-state observation.
    index: Option<usize>,
    subject: Subject<'a>,
    result: Option<&'a OpResult>,
    call: u64,
    ret: Option<u64>,
    footprint: Vec<(u64, u64)>,
}

/// Sorted, merged point intervals.
fn points(keys: impl IntoIterator<Item = u64>) -> Vec<(u64, u64)> {
    let set: BTreeSet<u64> = keys.into_iter().collect();
    set.into_iter().map(|k| (k, k)).collect()
}

/// Keys whose state the result of `op` depends on, or that `op` may change. For
/// next/prev that is the gap up to the returned entry, so it depends on the observed
/// result (`None`: unknown). A result no state could produce (e.g. `next(5)` returning
/// key 3) gets an empty footprint: the operation then forms a sub-history of its own,
/// where the search reports it.
fn footprint(op: &Op, result: Option<&OpResult>) -> Vec<(u64, u64)> {
    match op {
        Op::Insert { key, .. } | Op::Delete { key } | Op::Read { key } | Op::Update { key, .. } => {
            vec![(*key, *key)]
        }
        Op::Query { min, max } if min <= max => vec![(*min, *max)],
        Op::Query { .. } => Vec::new(),
        Op::Next { key } => match result {
            Some(OpResult::Entry(Some((k, _)))) if k > key => vec![(key + 1, *k)],
            Some(OpResult::Entry(Some(_))) => Vec::new(),
            _ if *key == u64::MAX => Vec::new(),
            Some(OpResult::Entry(None)) | None => vec![(key + 1, u64::MAX)],
            Some(_) => Vec::new(),
        },
        Op::Prev { key } => match result {
            Some(OpResult::Entry(Some((k, _)))) if k < key => vec![(*k, key - 1)],
            Some(OpResult::Entry(Some(_))) => Vec::new(),
            _ if *key == 0 => Vec::new(),
            Some(OpResult::Entry(None)) | None => vec![(0, key - 1)],
            Some(_) => Vec::new(),
        },
        Op::Batch(ops) => points(ops.iter().map(|b| match b {
            BatchOp::Insert { key, .. } | BatchOp::Delete { key } => *key,
        })),
    }
}

/// Keys an operation may change.
fn mutated_keys(op: &Op, out: &mut impl Extend<u64>) {
    match op {
        Op::Insert { key, .. } | Op::Delete { key } | Op::Update { key, .. } => out.extend([*key]),
        Op::Batch(ops) => out.extend(ops.iter().map(|b| match b {
            BatchOp::Insert { key, .. } | BatchOp::Delete { key } => *key,
        })),
        _ => {}
    }
}

struct Prep<'a> {
    ops: Vec<Prepared<'a>>,
    summary: CheckSummary,
}

fn prepare(events: &[Event]) -> Result<Prep<'_>, CheckError> {
    let mut summary = CheckSummary {
        events: events.len(),
        ..CheckSummary::default()
    };
    let mut keys: HashSet<u64> = HashSet::new();
    let mut ops = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        if e.ret_ns < e.call_ns {
            return Err(CheckError::Invalid(format!(
                "event {i} ({}) responds before it is invoked",
                e.describe()
            )));
        }
        let (result, ret) = match e.status {
            Status::Fail => {
                summary.failed_ops += 1;
                continue;
            }
            Status::Info if !e.op.is_mutation() => {
                summary.info_reads_dropped += 1;
                continue;
            }
            // The client gave up at ret_ns, but the operation may still take effect at
            // any later time: it has no response.
            Status::Info => {
                summary.info_ops += 1;
                (None, None)
            }
            Status::Ok => match &e.result {
                Some(r) => (Some(r), Some(e.ret_ns)),
                None => {
                    return Err(CheckError::Invalid(format!(
                        "event {i} ({}) is ok but has no result",
                        e.describe()
                    )))
                }
            },
        };
        match &e.op {
            Op::Insert { key, .. }
            | Op::Delete { key }
            | Op::Read { key }
            | Op::Update { key, .. }
            | Op::Next { key }
            | Op::Prev { key } => {
                keys.insert(*key);
            }
            Op::Query { .. } => {}
            Op::Batch(_) => mutated_keys(&e.op, &mut keys),
        }
        match result {
            Some(OpResult::Entries(es)) => keys.extend(es.iter().map(|e| e.0)),
            Some(OpResult::Entry(Some((k, _)))) => {
                keys.insert(*k);
            }
            _ => {}
        }
        ops.push(Prepared {
            index: Some(i),
            subject: Subject::Op(&e.op),
            result,
            call: e.call_ns,
            ret,
            footprint: footprint(&e.op, result),
        });
    }
    summary.ops_checked = ops.len();
    summary.keys = keys.len();
    Ok(Prep { ops, summary })
}

/// A set of operations whose footprints are connected, and the key ranges they span.
struct Group {
    ops: Vec<usize>,
    ranges: Vec<(u64, u64)>,
}

fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

/// Split operations into groups with disjoint key ranges. The map restricted to one
/// group's keys is an object of its own that no other group's operation touches, so by
/// locality of linearizability (Herlihy & Wing) the history is linearizable iff every
/// group's sub-history is. Histories of point operations split into one group per key.
fn partition(ops: &[Prepared<'_>]) -> Vec<Group> {
    let mut intervals: Vec<(u64, u64, usize)> = ops
        .iter()
        .enumerate()
        .flat_map(|(i, p)| p.footprint.iter().map(move |&(lo, hi)| (lo, hi, i)))
        .collect();
    intervals.sort_unstable();
    let mut parent: Vec<usize> = (0..ops.len()).collect();
    // Maximal runs of overlapping intervals: (lo, hi, an op of the run).
    let mut segments: Vec<(u64, u64, usize)> = Vec::new();
    for (lo, hi, op) in intervals {
        match segments.last_mut() {
            Some(seg) if lo <= seg.1 => {
                seg.1 = seg.1.max(hi);
                let (a, b) = (find(&mut parent, seg.2), find(&mut parent, op));
                parent[a] = b;
            }
            _ => segments.push((lo, hi, op)),
        }
    }
    let mut group_of_root: HashMap<usize, usize> = HashMap::new();
    let mut groups: Vec<Group> = Vec::new();
    for i in 0..ops.len() {
        let root = find(&mut parent, i);
        let g = *group_of_root.entry(root).or_insert_with(|| {
            groups.push(Group {
                ops: Vec::new(),
                ranges: Vec::new(),
            });
            groups.len() - 1
        });
        groups[g].ops.push(i);
    }
    // Segments come out sorted and disjoint, so each group's ranges are too.
    for (lo, hi, op) in segments {
        let g = group_of_root[&find(&mut parent, op)];
        groups[g].ranges.push((lo, hi));
    }
    groups
}

fn span(intervals: &[(u64, u64)]) -> Option<(u64, u64)> {
    let lo = intervals.iter().map(|r| r.0).min()?;
    let hi = intervals.iter().map(|r| r.1).max()?;
    Some((lo, hi))
}

/// A multi-key operation seen from one key: what its observed result implies there.
struct Projection {
    /// Index of the projected operation in the prepared list.
    src: usize,
    key: u64,
    op: Op,
    result: Option<OpResult>,
}

/// Keys of an interval set.
fn keys_in<'k>(keys: &'k BTreeSet<u64>, lo: u64, hi: u64) -> impl Iterator<Item = u64> + 'k {
    // BTreeSet::range panics on an inclusive range with start > end.
    (lo <= hi)
        .then(|| keys.range(lo..=hi))
        .into_iter()
        .flatten()
        .copied()
}

/// Project `p` onto each key of `keys` it depends on or changes, as point operations (or
/// a batch of that key's sub-operations) with the results its own result implies: a query
/// reads every key of its range, `next(x) = (k, v)` reads "absent" strictly between and
/// `v` at k, and so on. Results no state could produce are not projected (the global
/// search reports them).
fn project(p: &Prepared<'_>, src: usize, keys: &BTreeSet<u64>, out: &mut Vec<Projection>) {
    let mut push = |key: u64, op: Op, result: Option<OpResult>| {
        out.push(Projection {
            src,
            key,
            op,
            result,
        })
    };
    let read = |key: u64, v: Option<u64>| (key, Op::Read { key }, Some(OpResult::Value(v)));
    let op = match &p.subject {
        Subject::Op(op) => *op,
        Subject::Observe(points) => {
            for &(k, v) in points {
                let (k, op, r) = read(k, v);
                push(k, op, r);
            }
            return;
        }
    };
    match (op, p.result) {
        (
            Op::Insert { key, .. } | Op::Delete { key } | Op::Read { key } | Op::Update { key, .. },
            r,
        ) => push(*key, op.clone(), r.cloned()),
        (Op::Query { min, max }, Some(OpResult::Entries(es))) => {
            let sorted = es.windows(2).all(|w| w[0].0 < w[1].0);
            for k in keys_in(keys, *min, *max) {
                let v = if sorted {
                    es.binary_search_by_key(&k, |e| e.0).ok().map(|i| es[i].1)
                } else {
                    es.iter().find(|e| e.0 == k).map(|e| e.1)
                };
                let (k, op, r) = read(k, v);
                push(k, op, r);
            }
        }
        (Op::Next { key: x }, Some(OpResult::Entry(e)))
        | (Op::Prev { key: x }, Some(OpResult::Entry(e))) => {
            let next = matches!(op, Op::Next { .. });
            // The gap that must be empty, and the entry found at its end.
            let (lo, hi, found) = match (next, e) {
                (true, Some((k, v))) if k > x => (x + 1, k - 1, Some((*k, *v))),
                (false, Some((k, v))) if k < x => (k + 1, x - 1, Some((*k, *v))),
                (_, Some(_)) => return,
                (true, None) if *x == u64::MAX => return,
                (true, None) => (x + 1, u64::MAX, None),
                (false, None) if *x == 0 => return,
                (false, None) => (0, x - 1, None),
            };
            for k in keys_in(keys, lo, hi) {
                let (k, op, r) = read(k, None);
                push(k, op, r);
            }
            if let Some((k, v)) = found {
                let (k, op, r) = read(k, Some(v));
                push(k, op, r);
            }
        }
        (Op::Batch(bs), r) => {
            let rs = match r {
                Some(OpResult::Batch(rs)) if rs.len() == bs.len() => Some(rs),
                Some(_) => return,
                None => None,
            };
            let batch_keys: BTreeSet<u64> = bs
                .iter()
                .map(|b| match b {
                    BatchOp::Insert { key, .. } | BatchOp::Delete { key } => *key,
                })
                .collect();
            for k in batch_keys {
                let idx: Vec<usize> = (0..bs.len())
                    .filter(|&i| matches!(bs[i], BatchOp::Insert { key, .. } | BatchOp::Delete { key } if key == k))
                    .collect();
                let sub_results =
                    rs.map(|rs| idx.iter().map(|&i| rs[i].clone()).collect::<Vec<_>>());
                if let [i] = idx[..] {
                    push(k, Op::from(bs[i]), sub_results.map(|mut v| v.remove(0)));
                } else {
                    push(
                        k,
                        Op::Batch(idx.iter().map(|&i| bs[i]).collect()),
                        sub_results.map(OpResult::Batch),
                    );
                }
            }
        }
        // Info reads never get here; results of the wrong kind are left to the global search.
        _ => {}
    }
}

/// How a failure found by some search maps back to the history.
struct Culprit<'x> {
    /// The prepared operation at fault.
    src: &'x Prepared<'x>,
    /// Set when the failure was found on the projection of a multi-key operation onto
    /// one key: that key and the projected operation's implied result.
    projected: Option<(u64, &'x Op, Option<&'x OpResult>)>,
    failure: &'x Failure,
    /// Keys of the sub-history the search ran on.
    span: Option<(u64, u64)>,
}

fn describe_failure(events: &[Event], c: &Culprit<'_>, other_failures: usize) -> Violation {
    let f = c.failure;
    let p = c.src;
    let context = match c.span {
        Some(k) => format!(
            "after linearizing {} earlier operation{} on {}",
            f.linearized,
            if f.linearized == 1 { "" } else { "s" },
            fmt_keys(k)
        ),
        None => "no state could produce it".to_string(),
    };
    let opt = |v: Option<u64>| v.map_or_else(|| "absent".to_string(), |v| v.to_string());
    let results: Vec<OpResult> = f
        .allowed
        .iter()
        .filter_map(|a| match a {
            Expected::Result(r) => Some(r.clone()),
            Expected::Values(_) => None,
        })
        .collect();
    let said = results
        .iter()
        .map(fmt_result)
        .collect::<Vec<_>>()
        .join(" or ");
    let final_mismatch = |k: u64, fin: Option<u64>, models: Vec<Option<u64>>| {
        let models: Vec<String> = models.into_iter().map(opt).collect();
        format!(
            "the final state does not match the history: key {k} is {} in the final state but {} in the model ({context})",
            opt(fin),
            models.join(" or ")
        )
    };
    let (message, allowed) = match (&p.subject, c.projected) {
        (Subject::Op(op), projected) => {
            let what = match p.index {
                Some(i) => events[i].describe(),
                None => fmt_op(op),
            };
            let identity = projected.is_none_or(|(_, pop, _)| pop == *op);
            let message = match projected {
                Some((k, _, Some(r))) if !identity => format!(
                    "{what}, which no linearization allows: for key {k} it implies {}, where the model would return {said} at that point ({context})",
                    fmt_result(r)
                ),
                _ => format!(
                    "{what}, which no linearization allows: the model would return {said} at that point ({context})"
                ),
            };
            (message, results)
        }
        (Subject::Observe(points), Some((k, _, _))) => {
            let fin = points.iter().find(|e| e.0 == k).and_then(|e| e.1);
            let models = results
                .iter()
                .filter_map(|r| match r {
                    OpResult::Value(v) => Some(*v),
                    _ => None,
                })
                .collect();
            (final_mismatch(k, fin, models), Vec::new())
        }
        (Subject::Observe(points), None) => {
            let alternatives: Vec<String> = f
                .allowed
                .iter()
                .filter_map(|a| match a {
                    Expected::Values(vs) => Some(
                        vs.iter()
                            .map(|&(k, model)| {
                                let fin = points.iter().find(|p| p.0 == k).and_then(|p| p.1);
                                format!(
                                    "key {k} is {} in the final state but {} in the model",
                                    opt(fin),
                                    opt(model)
                                )
                            })
                            .collect::<Vec<_>>()
                            .join(", "),
                    ),
                    Expected::Result(_) => None,
                })
                .collect();
            (
                format!(
                    "the final state does not match the history: {} ({context})",
                    alternatives.join("; or ")
                ),
                Vec::new(),
            )
        }
    };
    Violation {
        index: p.index,
        event: p.index.map(|i| events[i].clone()),
        keys: match c.projected {
            Some((k, _, _)) => Some((k, k)),
            None => span(&p.footprint),
        },
        projected_key: c.projected.map(|(k, ..)| k),
        allowed,
        linearized_before: f.linearized,
        other_failures,
        message,
    }
}

/// Outcome of searching a list of groups.
struct GroupRun {
    failures: Vec<(usize, Failure)>,
    gave_up: Option<Unknown>,
}

fn search_groups(
    ops: &[Prepared<'_>],
    groups: &[Group],
    initial: &InitialIndex<'_>,
    states: &mut u64,
    limit: u64,
) -> GroupRun {
    let mut run = GroupRun {
        failures: Vec::new(),
        gave_up: None,
    };
    for (gi, group) in groups.iter().enumerate() {
        let subops: Vec<SubOp<'_>> = group
            .ops
            .iter()
            .map(|&i| {
                let p = &ops[i];
                SubOp {
                    subject: &p.subject,
                    result: p.result,
                    call: p.call,
                    ret: p.ret,
                    footprint: &p.footprint,
                }
            })
            .collect();
        let init = initial.entries_in_ranges(&group.ranges);
        match search(&subops, init, states, limit) {
            Outcome::Linearizable => {}
            Outcome::Violation(f) => run.failures.push((gi, f)),
            Outcome::GaveUp => {
                run.gave_up = Some(Unknown {
                    states: *states,
                    limit,
                    group_ops: group.ops.len(),
                    keys: span(&group.ranges),
                    groups_checked: gi - run.failures.len(),
                    groups: groups.len(),
                });
                break;
            }
        }
    }
    run
}

/// Upper bound on projected operations, relative to the history, beyond which the
/// per-key pre-check is skipped (wide queries over many keys would make it quadratic).
const PROJECTION_FACTOR: usize = 16;

/// Per-key pre-check of the groups that contain multi-key operations: project every
/// operation onto the keys it involves and check each key alone. Any linearization of
/// the whole history projects onto a linearization of each key, so a failure here is a
/// violation of the whole. It is cheap (per-key searches are small) and finds the
/// common bugs (stale or lost values, missing or extra entries) with a per-key account,
/// even where the global search over a large group would run out of budget.
fn projection_precheck(
    events: &[Event],
    ops: &[Prepared<'_>],
    groups: &[Group],
    initial: &InitialIndex<'_>,
    states: &mut u64,
    limit: u64,
) -> Option<Violation> {
    let mut projections: Vec<Projection> = Vec::new();
    let cap = ops.len().saturating_mul(PROJECTION_FACTOR).max(100_000);
    for g in groups {
        let single_key = g.ranges.len() == 1 && g.ranges[0].0 == g.ranges[0].1;
        if single_key || g.ranges.is_empty() {
            continue;
        }
        // The keys worth looking at: those something may change or some result names.
        let mut keys: BTreeSet<u64> = BTreeSet::new();
        for &i in &g.ops {
            match (&ops[i].subject, ops[i].result) {
                (Subject::Op(op), r) => {
                    mutated_keys(op, &mut keys);
                    match r {
                        Some(OpResult::Entries(es)) => keys.extend(es.iter().map(|e| e.0)),
                        Some(OpResult::Entry(Some((k, _)))) => {
                            keys.insert(*k);
                        }
                        _ => {}
                    }
                }
                (Subject::Observe(points), _) => keys.extend(points.iter().map(|p| p.0)),
            }
        }
        for &i in &g.ops {
            project(&ops[i], i, &keys, &mut projections);
            if projections.len() > cap {
                return None;
            }
        }
    }
    if projections.is_empty() {
        return None;
    }
    let projected: Vec<Prepared<'_>> = projections
        .iter()
        .map(|pr| {
            let src = &ops[pr.src];
            Prepared {
                index: src.index,
                subject: Subject::Op(&pr.op),
                result: pr.result.as_ref(),
                call: src.call,
                ret: src.ret,
                footprint: vec![(pr.key, pr.key)],
            }
        })
        .collect();
    let key_groups = partition(&projected);
    let run = search_groups(&projected, &key_groups, initial, states, limit);
    let culprits: Vec<Culprit<'_>> = run
        .failures
        .iter()
        .map(|(gi, f)| {
            let local = key_groups[*gi].ops[f.op];
            let pr = &projections[local];
            Culprit {
                src: &ops[pr.src],
                projected: Some((pr.key, &pr.op, pr.result.as_ref())),
                failure: f,
                span: Some((pr.key, pr.key)),
            }
        })
        .collect();
    earliest(events, &culprits)
}

/// Of several failures, the one whose culprit responded first: that is the earliest point
/// at which the history went wrong.
fn earliest(events: &[Event], culprits: &[Culprit<'_>]) -> Option<Violation> {
    let first = culprits
        .iter()
        .min_by_key(|c| (c.src.ret, c.src.call, c.src.index))?;
    Some(describe_failure(events, first, culprits.len() - 1))
}

fn run(
    events: &[Event],
    ops: &[Prepared<'_>],
    groups: &[Group],
    initial: &InitialIndex<'_>,
    opts: &CheckOptions,
    mut summary: CheckSummary,
) -> Result<CheckSummary, CheckError> {
    summary.groups = groups.len();
    summary.largest_group = groups.iter().map(|g| g.ops.len()).max().unwrap_or(0);
    let mut states = 0u64;
    let pre = projection_precheck(events, ops, groups, initial, &mut states, opts.max_states);
    if let Some(v) = pre {
        return Err(CheckError::NotLinearizable(Box::new(v)));
    }
    let run = search_groups(ops, groups, initial, &mut states, opts.max_states);
    summary.states = states;
    let culprits: Vec<Culprit<'_>> = run
        .failures
        .iter()
        .map(|(gi, f)| Culprit {
            src: &ops[groups[*gi].ops[f.op]],
            projected: None,
            failure: f,
            span: span(&groups[*gi].ranges),
        })
        .collect();
    if let Some(v) = earliest(events, &culprits) {
        return Err(CheckError::NotLinearizable(Box::new(v)));
    }
    if let Some(u) = run.gave_up {
        return Err(CheckError::Unknown(u));
    }
    Ok(summary)
}

/// Check that `events` is linearizable with respect to the ordered map starting from
/// `opts.initial`. See the [crate documentation](crate) for the method and its bounds.
pub fn check(events: &[Event], opts: &CheckOptions) -> Result<CheckSummary, CheckError> {
    let prep = prepare(events)?;
    let groups = partition(&prep.ops);
    let initial = InitialIndex::new(&opts.initial);
    run(events, &prep.ops, &groups, &initial, opts, prep.summary)
}

/// [`check`], plus: the map ended up holding exactly `final_entries` (e.g. a dump of a
/// replica after the run). This is what catches an acknowledged insert that was later
/// lost when no read in the history happened to look at it.
///
/// Keys no operation could have changed must hold their initial value, which is checked
/// directly. For the others, a synthetic observation "these keys hold these values" is
/// appended to each sub-history after every response; `info` operations stay concurrent
/// with it, so they may or may not be reflected in the final state.
pub fn check_with_final_state(
    events: &[Event],
    opts: &CheckOptions,
    final_entries: &[(u64, u64)],
) -> Result<CheckSummary, CheckError> {
    let mut finals = final_entries.to_vec();
    finals.sort_unstable();
    if let Some(w) = finals.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(CheckError::Invalid(format!(
            "final state lists key {} twice",
            w[0].0
        )));
    }
    let final_of = |k: u64| -> Option<u64> {
        finals
            .binary_search_by_key(&k, |e| e.0)
            .ok()
            .map(|i| finals[i].1)
    };

    let mut prep = prepare(events)?;
    let initial = InitialIndex::new(&opts.initial);
    let mut mutated: HashSet<u64> = HashSet::new();
    for p in &prep.ops {
        if let Subject::Op(op) = p.subject {
            mutated_keys(op, &mut mutated);
        }
    }

    // Keys nothing could have changed: a direct comparison explains itself best.
    let untouched = |key: u64, fin: Option<u64>, init: Option<u64>| -> CheckError {
        let opt = |v: Option<u64>| v.map_or_else(|| "absent".to_string(), |v| v.to_string());
        CheckError::NotLinearizable(Box::new(Violation {
            index: None,
            event: None,
            keys: Some((key, key)),
            projected_key: None,
            allowed: Vec::new(),
            linearized_before: 0,
            other_failures: 0,
            message: format!(
                "the final state does not match the history: key {key} is {} in the final state, \
                 but no operation could have changed it from its initial {}",
                opt(fin),
                opt(init)
            ),
        }))
    };
    for &(k, v) in &finals {
        let init = initial.get(k);
        if !mutated.contains(&k) && init != Some(v) {
            return Err(untouched(k, Some(v), init));
        }
    }
    for (k, v) in initial.iter() {
        if !mutated.contains(&k) && final_of(k) != Some(v) {
            return Err(untouched(k, final_of(k), Some(v)));
        }
    }

    let groups = partition(&prep.ops);
    let end = events
        .iter()
        .map(|e| e.call_ns.max(e.ret_ns))
        .max()
        .unwrap_or(0)
        .saturating_add(1);
    let mut groups = groups;
    for g in &mut groups {
        let mut keys: BTreeSet<u64> = BTreeSet::new();
        for &i in &g.ops {
            if let Subject::Op(op) = prep.ops[i].subject {
                mutated_keys(op, &mut keys);
            }
        }
        if keys.is_empty() {
            continue;
        }
        let observed: Vec<(u64, Option<u64>)> = keys.iter().map(|&k| (k, final_of(k))).collect();
        g.ops.push(prep.ops.len());
        prep.ops.push(Prepared {
            index: None,
            subject: Subject::Observe(observed),
            result: None,
            call: end,
            ret: Some(end),
            footprint: points(keys),
        });
    }
    run(events, &prep.ops, &groups, &initial, opts, prep.summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(client: u64, op: Op, call: u64, ret: u64, result: OpResult) -> Event {
        Event::new(client, &op, call, ret, Status::Ok, Some(&result))
    }

    /// Paper 001, Figure 4 (right): the B-tree split into two sub-trees (keys 0..=50
    /// and 51..=100) ordered independently. C1 inserts 20 and C2 inserts 70,
    /// concurrently; C3's Query(0, 100) sees C1's insert but not C2's, C4's sees C2's
    /// but not C1's. No total order of the four commands allows both answers, whatever
    /// their timing, so the checker must reject the history; with either query seeing
    /// both inserts (or neither) it is linearizable.
    #[test]
    fn figure_4_of_paper_001_is_not_linearizable() {
        let q = Op::Query { min: 0, max: 100 };
        let history = |c3: Vec<(u64, u64)>, c4: Vec<(u64, u64)>| {
            vec![
                ev(
                    1,
                    Op::Insert { key: 20, value: 1 },
                    0,
                    10,
                    OpResult::Inserted(true),
                ),
                ev(
                    2,
                    Op::Insert { key: 70, value: 2 },
                    0,
                    10,
                    OpResult::Inserted(true),
                ),
                ev(3, q.clone(), 1, 9, OpResult::Entries(c3)),
                ev(4, q.clone(), 1, 9, OpResult::Entries(c4)),
            ]
        };
        let bad = history(vec![(20, 1)], vec![(70, 2)]);
        assert!(matches!(
            check(&bad, &CheckOptions::default()),
            Err(CheckError::NotLinearizable(_))
        ));
        let good = history(vec![(20, 1)], vec![(20, 1), (70, 2)]);
        assert!(check(&good, &CheckOptions::default()).is_ok());
        let good = history(vec![], vec![(70, 2)]);
        assert!(check(&good, &CheckOptions::default()).is_ok());
    }

    #[test]
    fn partition_splits_point_keys_and_joins_ranges() {
        let events = vec![
            ev(
                1,
                Op::Insert { key: 1, value: 1 },
                0,
                1,
                OpResult::Inserted(true),
            ),
            ev(
                1,
                Op::Insert { key: 5, value: 5 },
                2,
                3,
                OpResult::Inserted(true),
            ),
            ev(
                1,
                Op::Insert { key: 9, value: 9 },
                4,
                5,
                OpResult::Inserted(true),
            ),
            ev(
                2,
                Op::Query { min: 4, max: 6 },
                6,
                7,
                OpResult::Entries(vec![(5, 5)]),
            ),
            ev(2, Op::Next { key: 5 }, 8, 9, OpResult::Entry(Some((9, 9)))),
            ev(3, Op::Read { key: 20 }, 8, 9, OpResult::Value(None)),
        ];
        let prep = prepare(&events).unwrap();
        let groups = partition(&prep.ops);
        // {1}, {5, 9 joined by next(5) -> 9 and query 4..=6}, {20}
        assert_eq!(groups.len(), 3);
        assert_eq!(groups[0].ranges, vec![(1, 1)]);
        assert_eq!(groups[1].ops, vec![1, 2, 3, 4]);
        assert_eq!(groups[1].ranges, vec![(4, 9)]);
        assert_eq!(groups[2].ranges, vec![(20, 20)]);
        assert!(check(&events, &CheckOptions::default()).is_ok());
    }

    #[test]
    fn batches_join_distant_keys() {
        let b = Op::Batch(vec![
            BatchOp::Insert { key: 1, value: 1 },
            BatchOp::Delete { key: 100 },
        ]);
        let events = vec![
            ev(1, Op::Read { key: 100 }, 0, 1, OpResult::Value(None)),
            ev(
                1,
                b,
                2,
                3,
                OpResult::Batch(vec![OpResult::Inserted(true), OpResult::Removed(None)]),
            ),
            ev(1, Op::Read { key: 1 }, 4, 5, OpResult::Value(Some(1))),
            ev(1, Op::Read { key: 50 }, 4, 5, OpResult::Value(None)),
        ];
        let prep = prepare(&events).unwrap();
        let groups = partition(&prep.ops);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].ranges, vec![(1, 1), (100, 100)]);
        assert_eq!(groups[0].ops, vec![0, 1, 2]);
    }

    #[test]
    fn footprints_of_neighbour_queries() {
        let fp = |op: Op, r: OpResult| footprint(&op, Some(&r));
        assert_eq!(
            fp(Op::Next { key: 3 }, OpResult::Entry(Some((7, 0)))),
            vec![(4, 7)]
        );
        assert_eq!(
            fp(Op::Next { key: 3 }, OpResult::Entry(None)),
            vec![(4, u64::MAX)]
        );
        assert_eq!(
            fp(Op::Next { key: u64::MAX }, OpResult::Entry(None)),
            vec![]
        );
        assert_eq!(
            fp(Op::Next { key: 3 }, OpResult::Entry(Some((2, 0)))),
            vec![]
        );
        assert_eq!(
            fp(Op::Prev { key: 3 }, OpResult::Entry(Some((1, 0)))),
            vec![(1, 2)]
        );
        assert_eq!(fp(Op::Prev { key: 3 }, OpResult::Entry(None)), vec![(0, 2)]);
        assert_eq!(fp(Op::Prev { key: 0 }, OpResult::Entry(None)), vec![]);
        assert_eq!(
            fp(Op::Query { min: 5, max: 2 }, OpResult::Entries(vec![])),
            vec![]
        );
    }
}
