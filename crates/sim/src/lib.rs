//! The deterministic simulator: a whole Partita cluster — every node as the same
//! `NodeCore` the real `partita node` process runs, configured from the same
//! `ClusterConfig::node_setup`, and every client — in one thread, in virtual time,
//! from one seed.
//!
//! ```text
//! seed ──► swarm::draw ──► SeedParams (cluster shape, timing, fault classes + rates)
//!                              │
//!                              ▼
//!            world::World: EventQueue<(time ns, seq)> ─► handle one event ─► push more
//!              nodes: NodeCore + inbox + cpu + disk + clock      clients: closed loop
//!              network: per-link latency/bandwidth/loss/dup/reorder/partitions
//!                              │
//!                              ▼
//!            checks: invariants after every handler, agreement oracle, liveness,
//!                    convergence, linearizability + final state ──► SeedReport
//! ```
//!
//! A run is a pure function of (seed, options, code): the only source of time is the
//! event queue, ordered by (virtual time, insertion sequence); every random draw comes
//! from a ChaCha stream derived from the seed (one stream per model, so that turning a
//! fault class off does not reshuffle the others); nothing iterates a hash map where the
//! order could matter. [`check_determinism`] runs a seed twice and compares the hash of
//! the two event traces.
//!
//! # Models (one module each)
//!
//! - [`queue`]: the event queue.
//! - [`net`]: per directed link latency + jitter, bandwidth (serialization delay), loss,
//!   duplication, reordering, partitions (symmetric and one-way, also between clients
//!   and nodes). Every message is encoded with the wire codec (its size is the frame's
//!   size) and the *decoded* copy is delivered.
//! - [`disk`]: per node, write and fsync latency, group commit, fsync stalls; a crash
//!   loses what was not fsynced (or keeps a written prefix and tears the record being
//!   written, `torn-tail`). Completions are reported in order, only once durable.
//! - [`cpu`]: a node handles one input at a time; each handler costs virtual time from
//!   a [`cpu::CostTable`] (per message, per byte, per B+tree operation; TOML load/save).
//! - clocks (in [`world`]): each node ticks every `tick_ms × (1 + skew)`, skew drawn per
//!   node within ±5%; ticks that pile up while a node is busy or paused coalesce, as the
//!   runtime's interval timer skips missed ticks.
//! - crash (the core, its inbox and unsynced writes vanish), restart (a fresh `NodeCore`
//!   from the durable records only; a replica restarts empty and relearns), pause and
//!   resume (inputs queue meanwhile).
//! - [`client`]: closed-loop clients with think time doing every B+tree operation on a
//!   small key space, entering at the coordinator or spread over the batchers,
//!   resubmitting the same (client, seq) on timeouts through the next entry node,
//!   giving up (`info`) only in the safety phase, and recording the history in the
//!   checker's format.
//!
//! # GeoPaxos+ and EPaxos
//!
//! With [`SimOptions::geo`] (off by default) a seed runs paper 004's orderings in the
//! paper's three emulated regions instead of the swarm's clusters: the same
//! `NodeCore`s with a `[ordering] protocol = "geopaxos+"` cluster file, clients in every region doing the
//! geo B+tree's operations, the swarm's faults, and the same checks (convergence on
//! the orderings' executed counts and digests, linearizability from the tree's
//! initial keys). See `crates/sim/README.md`.
//!
//! # Phases
//!
//! 1. **Safety**: faults drawn by the [`swarm`] for this seed are injected, until 3/4 of
//!    the operations were invoked (or 30 virtual seconds).
//! 2. **Liveness**: every fault is repaired (crashed nodes restart, paused ones resume,
//!    partitions heal, loss/duplication/reordering and disk stalls stop) and clients
//!    stop giving up; every operation must complete and every replica catch up within
//!    60 virtual seconds.
//!
//! # Checks ([`check`])
//!
//! Invariants after every handler (a panic in a core is caught and reported), the wire
//! codec round trip, an agreement oracle on every decision sent, liveness, replica
//! convergence (same executed prefix and digest), and linearizability of the history
//! with the final contents of the replicas (which catches lost acknowledged writes).
//! A failure reports the seed, the check, a message and the last events of the trace.
//!
//! # Reproducing and shrinking
//!
//! `partita sim --seed N` with the flags printed in the report replays a failure
//! exactly. To shrink it: fewer operations (`--ops 200`), one protocol, fewer fault
//! classes (`--without loss,dup`, or `--faults crash-acceptor` for exactly one class),
//! `--no-faults`; see `crates/sim/README.md`.
//!
//! # Experiment mode ([`bench`])
//!
//! The same world without faults or checks beyond the cheap ones runs closed-loop
//! benchmarks of a given cluster file (SMR or the client-server baseline) with a
//! preloaded B+tree, `partita bench`'s workloads and one CPU per node: throughput and
//! latency in virtual time, for `partita experiment NAME --sim`.

pub mod bench;
pub mod calibrate;
pub mod check;
pub mod client;
pub mod cpu;
pub mod disk;
pub mod ds;
pub mod net;
pub mod queue;
pub mod report;
pub mod swarm;
pub mod trace;
pub mod world;

pub use bench::{BenchReport, BenchSpec};
pub use check::{Check, Failure};
pub use cpu::CostTable;
pub use partita_node::UnsafeBugs;
pub use report::SeedReport;
pub use swarm::EarlyRepliesChoice;
pub use swarm::{
    draw, FaultClass, FaultSelection, PartitionChoice, ProtocolChoice, SeedParams, SimOptions,
    SpeculationChoice,
};
pub use swarm::{BatcherChoice, Batchers};
pub use swarm::{DssmrChoice, MembersChoice, PsmrChoice, RingsChoice};
pub use swarm::{GeoChoice, GeoOrdering, GeoParams, ServiceChoice};

/// Run one seed: draw its parameters, simulate, check.
pub fn run_seed(seed: u64, opts: &SimOptions) -> SeedReport {
    let _core = CoreGate::enter();
    let params = swarm::draw(seed, opts);
    world::World::new(params, opts).run()
}

/// At most one simulation per core runs at a time in this process; the others wait.
/// A simulation computes and never waits, so more of them than cores only contend for
/// caches and memory bandwidth: the package's tests took 217 s two at a time and
/// 285 s four at a time on two cores (and the workspace runs tests four at a time for
/// its real-process tests, which mostly wait). `partita sim --jobs N` with more jobs
/// than cores is held to the cores the same way.
pub(crate) struct CoreGate;

static GATE: std::sync::Mutex<usize> = std::sync::Mutex::new(0);
static GATE_FREED: std::sync::Condvar = std::sync::Condvar::new();

impl CoreGate {
    pub(crate) fn enter() -> CoreGate {
        static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let cores =
            *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let mut running = GATE.lock().unwrap_or_else(|e| e.into_inner());
        while *running >= cores {
            running = GATE_FREED.wait(running).unwrap_or_else(|e| e.into_inner());
        }
        *running += 1;
        CoreGate
    }
}

impl Drop for CoreGate {
    fn drop(&mut self) {
        let mut running = GATE.lock().unwrap_or_else(|e| e.into_inner());
        *running -= 1;
        GATE_FREED.notify_one();
    }
}

/// For planted-bug controls: scan `seeds` with `bug` planted into `clean`, and return
/// the first seed whose run fails a check that `counts` accepts and which passes every
/// check without the bug, with that failure. `Err`: a line for each seed that failed
/// otherwise (a check that does not count, or failing without the bug too).
pub fn first_caught(
    bug: &str,
    clean: &SimOptions,
    seeds: std::ops::Range<u64>,
    counts: impl Fn(Check) -> bool,
) -> Result<(u64, Failure), Vec<String>> {
    let mut bugs = UnsafeBugs::default();
    bugs.enable(bug)
        .unwrap_or_else(|e| panic!("`{bug}` is not a planted bug: {e}"));
    let planted = SimOptions {
        bugs,
        ..clean.clone()
    };
    let mut seen = Vec::new();
    for seed in seeds {
        let r = run_seed(seed, &planted);
        let Some(f) = r.failure else {
            continue;
        };
        if !counts(f.check) {
            seen.push(format!("seed {seed}: {} (does not count)", f.check));
            continue;
        }
        let without = run_seed(seed, clean);
        if !without.passed {
            seen.push(format!(
                "seed {seed}: fails without the bug too ({})",
                without.one_line()
            ));
            continue;
        }
        return Ok((seed, f));
    }
    Err(seen)
}

/// Run `seed` twice; `Ok(trace hash)` if both runs processed the same events at the
/// same times, else a message with both hashes.
pub fn check_determinism(seed: u64, opts: &SimOptions) -> Result<u64, String> {
    let a = run_seed(seed, opts);
    let b = run_seed(seed, opts);
    if a.trace_hash == b.trace_hash && a.events == b.events && a.virtual_ns == b.virtual_ns {
        Ok(a.trace_hash)
    } else {
        Err(format!(
            "seed {seed} is not deterministic: first run {} events, hash {:#018x}, ended at {} ns; second run {} events, hash {:#018x}, ended at {} ns",
            a.events, a.trace_hash, a.virtual_ns, b.events, b.trace_hash, b.virtual_ns
        ))
    }
}
