//! `partita sim`: the deterministic simulator (crate `partita-sim`) from the command line.
//!
//! `--seed N` runs one seed and prints its summary (configuration, fault parameters
//! drawn, commands completed, virtual and wall time, events, verdict; on failure the
//! check, the message and the last events). `--seeds A..B` runs a range on every core,
//! prints progress and each failing seed, then the failing seeds and the rate in seeds
//! per minute. The exit status is 0 only when every seed passed.

use anyhow::{bail, Context};
use clap::{ArgGroup, Args};
use partita_sim::{
    BatcherChoice, DssmrChoice, EarlyRepliesChoice, GeoChoice, MembersChoice, PsmrChoice,
    RingsChoice, ServiceChoice,
};
use partita_sim::{
    CostTable, FaultClass, FaultSelection, PartitionChoice, ProtocolChoice, SeedReport, SimOptions,
    SpeculationChoice, UnsafeBugs,
};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("which").args(["seed", "seeds"])))]
pub struct SimArgs {
    /// Run one seed and print its full summary.
    #[arg(long, required_unless_present_any = ["seeds", "print_cost_table"])]
    seed: Option<u64>,
    /// Run the seeds A..B (B excluded), e.g. `0..200`.
    #[arg(long, value_parser = parse_range, value_name = "A..B")]
    seeds: Option<(u64, u64)>,
    /// Commands per seed, across all clients.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    ops: u64,
    /// Ordering protocol; `both` alternates by seed (even: Ring Paxos, odd: Multi-Paxos).
    #[arg(long, value_enum, default_value = "both")]
    protocol: SimProtocol,
    /// Where Ring Paxos seeds decide: `acceptor` or `coordinator` (see the cluster
    /// file's `ring_decision`). Default: each Ring Paxos seed draws it.
    #[arg(long, value_parser = crate::cli::choice::<partita_consensus::RingDecision>())]
    ring_decision: Option<partita_consensus::RingDecision>,
    /// Speculative execution on Ring Paxos seeds: `swarm` draws it per seed.
    #[arg(long, value_enum, default_value = "swarm")]
    speculation: SimSpeculation,
    /// State partitioning: this many key ranges (1: classic SMR). Default: each seed
    /// draws it (one partition half of the time, else 2 to 4).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=8))]
    partitions: Option<u32>,
    /// Early replies on speculative seeds (tentative reply, then a confirmation):
    /// `swarm` draws it per seed.
    #[arg(long, value_enum, default_value = "swarm")]
    early_replies: SimSpeculation,
    /// Exactly N standalone batchers in every seed (0: none), clients spread over
    /// them. Default: each seed draws its batchers (none half of the time, else 1 or 2
    /// standalone ones or the batcher role on the acceptors but node 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=8))]
    batchers: Option<u32>,
    /// Client session leases in every seed, in milliseconds (at least 100). Default:
    /// each seed draws them (short, around the clients' timeout, in a third of them).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(100..=604_800_000))]
    session_lease_ms: Option<u64>,
    /// P-SMR (paper 002): N worker threads per replica in every seed without
    /// speculation (0: none); in a partitioned seed each partition's replicas split
    /// its keys, without rings. Default: a third of those seeds draw 1 to 4, half of
    /// the unpartitioned ones optimistic.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=64))]
    threads: Option<u64>,
    /// With --threads: clients map commands optimistically (opt-PSMR; in
    /// unpartitioned seeds).
    #[arg(long, requires = "threads")]
    optimistic: bool,
    /// Replicas added and removed while a seed runs (`partita member`): in seeds
    /// that can (Ring Paxos or Multi-Paxos, one stream, unpartitioned), a node marked
    /// `join = true` is added under load and promoted once caught up, then an initial
    /// replica is removed. `swarm`: a quarter of those seeds; `on`: all; `off`: none.
    #[arg(long, value_enum, value_name = "WHEN", default_value = "swarm")]
    members: SimSpeculation,
    /// Multi-Ring Paxos (paper 002): N rings in every seed (0: one stream; a
    /// partitioned seed takes a ring per partition and one across them, a P-SMR seed
    /// a ring per thread and one for g_all), with speculation and batchers off.
    /// Default: a third of the seeds without those draw 2 or 3 rings.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=8))]
    rings: Option<u32>,
    /// S-SMR/DS-SMR (paper 003): every seed runs Chirper over 1 to 8 data partitions
    /// (`--partitions` fixes them; DS-SMR adds the oracle's), under `ssmr`, `dssmr`,
    /// or `swarm` (drawn per seed, DS-SMR three times in four), with the swarm's mix
    /// of commands (creates and deletes too) judged by the checker's Chirper model;
    /// or with `--service kv` (and in a quarter of the seeds without --service) the
    /// key-value store's mix, judged by the key-value checker.
    #[arg(long, value_enum, value_name = "SCHEME")]
    dssmr: Option<SimDssmr>,
    /// GeoPaxos+ and EPaxos (paper 004): every seed runs `geopaxos+`, `epaxos`,
    /// `geopaxos` (one serializer per object, no DOPs), or `both` (GeoPaxos+ on even
    /// seeds, EPaxos on odd ones) in the paper's three
    /// emulated regions (3 nodes, each an acceptor and a replica; clients in every
    /// region doing the geo B+tree's read, next, prev, update and insert on a tree
    /// that starts with keys 0..K). Protocol, speculation and early replies do not
    /// apply. Default: off (no seed runs them).
    #[arg(long, value_enum, value_name = "ORDERING", conflicts_with_all = ["dssmr", "partitions", "batchers", "threads", "rings", "session_lease_ms", "ring_decision"])]
    geo: Option<SimGeo>,
    /// The service every seed's clients use: `btree` (on --geo geopaxos+ seeds
    /// placed key by key by an object map), `geo-btree` (paper 004's tree, placing its
    /// own nodes; --geo seeds only) or `kv` (etcd's data model: puts, gets, ranges,
    /// deletes and transactions on a few keys, checked by the key-value checker).
    /// Default: the swarm's (the key-value store in a quarter of the seeds, the B+tree
    /// in the others; on --geo seeds the key-value store in a third, the geo B+tree in
    /// the others). With --dssmr: `kv` only (Chirper otherwise).
    #[arg(long, value_enum, value_name = "SERVICE")]
    service: Option<SimService>,
    /// Plant a known bug (the checks must catch it): lose-acked-writes,
    /// reexecute-duplicates, vote-before-durable, forget-promise, unordered-query,
    /// skip-phase1, restore-without-reply-cache, speculative-no-rollback,
    /// unconfirmed-replies, independent-partitions, expired-sessions-reopen,
    /// psmr-no-barrier, psmr-check-passes, merge-order, ds-locality-at-consult,
    /// ds-oracle-ignores-moves, ds-no-signals; with --geo: geo-execute-before-safe,
    /// geo-dop-not-ordered, geo-write-one-serializer, geo-announce-fed (GeoPaxos+ seeds),
    /// epaxos-skip-slow-path, truncate-above-majority, restore-wrong-frontier (EPaxos
    /// seeds); with --members on: member-apply-late, member-join-without-transfer,
    /// member-old-epoch-decisions, member-mixed-quorum; with --tick-check:
    /// tick-due-late.
    #[arg(long = "unsafe", value_name = "NAME", value_parser = parse_bug)]
    unsafe_bugs: Vec<String>,
    /// No faults at all (latency, jitter, bandwidth and clock skew remain).
    #[arg(long, conflicts_with = "faults")]
    no_faults: bool,
    /// Exactly these fault classes, all on (comma-separated): loss, dup, reorder,
    /// client-net, partition, one-way, crash-acceptor, crash-replica, crash-coordinator,
    /// pause, disk-stall, torn-tail. Default: each seed draws its own subset.
    #[arg(long, value_delimiter = ',', value_parser = parse_fault)]
    faults: Vec<FaultClass>,
    /// Fault classes to leave out (comma-separated), to shrink a failure.
    #[arg(long, value_delimiter = ',', value_parser = parse_fault)]
    without: Vec<FaultClass>,
    /// Never crash the initial coordinator's node (node 1); by default the swarm crashes
    /// it like any other node and failover must cope.
    #[arg(long)]
    no_coordinator_crashes: bool,
    /// Deliver every tick to every node (as the runtime does) instead of skipping the
    /// ticks before the one each node says may act, and fail when a tick acts before
    /// that: checks the nodes' word (slower; the run is another run).
    #[arg(long)]
    tick_check: bool,
    /// CPU cost table (TOML; missing fields take the defaults). `--print-cost-table`
    /// shows the defaults.
    #[arg(long, value_name = "FILE")]
    cost_table: Option<PathBuf>,
    /// Print the default cost table as TOML and exit.
    #[arg(long, exclusive = true)]
    print_cost_table: bool,
    /// Print each seed's drawn layout (protocol, partitions, P-SMR threads, rings; with
    /// --geo the ordering, tree, DOPs, workload and faults) and exit without running
    /// it: which seeds of a range exercise what.
    #[arg(long)]
    draws: bool,
    /// Run each seed twice and fail if the two event traces differ.
    #[arg(long)]
    check_determinism: bool,
    /// Write the summary as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// With --seed: write the clients' history (JSON lines, `partita check` format).
    #[arg(long, value_name = "FILE", requires = "seed")]
    history: Option<PathBuf>,
    /// Threads for --seeds (default: every core).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    jobs: Option<u64>,
    /// Events shown before a failure.
    #[arg(long, default_value_t = 40)]
    trace_tail: usize,
    /// The linearizability checker's budget of search states per seed; past it the
    /// verdict is `inconclusive`. About 10 bytes a state.
    #[arg(long, default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(1000..))]
    check_max_states: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SimDssmr {
    Swarm,
    Ssmr,
    Dssmr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SimService {
    Btree,
    GeoBtree,
    Kv,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SimGeo {
    #[value(name = "geopaxos+")]
    GeopaxosPlus,
    Geopaxos,
    Epaxos,
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SimSpeculation {
    Swarm,
    On,
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SimProtocol {
    RingPaxos,
    MultiPaxos,
    Both,
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("`{s}` is not a range A..B (e.g. 0..200)"))?;
    let a: u64 = a
        .trim()
        .parse()
        .map_err(|_| format!("`{a}` is not a seed (an unsigned integer)"))?;
    let b: u64 = b
        .trim()
        .parse()
        .map_err(|_| format!("`{b}` is not a seed (an unsigned integer)"))?;
    if b <= a {
        return Err(format!("the range {a}..{b} is empty (B is excluded)"));
    }
    Ok((a, b))
}

fn parse_bug(s: &str) -> Result<String, String> {
    UnsafeBugs::default().enable(s).map(|()| s.to_string())
}

fn parse_fault(s: &str) -> Result<FaultClass, String> {
    FaultClass::parse(s)
}

impl SimArgs {
    fn options(&self) -> anyhow::Result<SimOptions> {
        if self.dssmr.is_some()
            && matches!(self.service, Some(SimService::Btree | SimService::GeoBtree))
        {
            anyhow::bail!(
                "--dssmr runs Chirper, or with --service kv the key-value store; the B+trees \
                 are not object services"
            );
        }
        let mut bugs = UnsafeBugs::default();
        for b in &self.unsafe_bugs {
            bugs.enable(b).map_err(anyhow::Error::msg)?;
        }
        let cost = match &self.cost_table {
            None => CostTable::default(),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading the cost table {}", p.display()))?;
                CostTable::from_toml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?
            }
        };
        if self.service == Some(SimService::GeoBtree) && self.geo.is_none() {
            bail!(
                "--service geo-btree runs on GeoPaxos, GeoPaxos+ or EPaxos: add --geo \
                 geopaxos+, geopaxos, epaxos or both"
            );
        }
        let faults = if self.no_faults {
            FaultSelection::None
        } else if !self.faults.is_empty() {
            if self.faults.contains(&FaultClass::CrashCoordinator) && self.no_coordinator_crashes {
                bail!("--faults crash-coordinator contradicts --no-coordinator-crashes");
            }
            FaultSelection::Only(self.faults.clone())
        } else {
            FaultSelection::Swarm
        };
        Ok(SimOptions {
            ops: self.ops,
            protocol: match self.protocol {
                SimProtocol::RingPaxos => ProtocolChoice::RingPaxos,
                SimProtocol::MultiPaxos => ProtocolChoice::MultiPaxos,
                SimProtocol::Both => ProtocolChoice::Alternate,
            },
            ring_decision: self.ring_decision,
            speculation: match self.speculation {
                SimSpeculation::Swarm => SpeculationChoice::Swarm,
                SimSpeculation::On => SpeculationChoice::On,
                SimSpeculation::Off => SpeculationChoice::Off,
            },
            partitioning: match self.partitions {
                Some(n) => PartitionChoice::Fixed(n),
                None => PartitionChoice::Swarm,
            },
            early_replies: match self.early_replies {
                SimSpeculation::Swarm => EarlyRepliesChoice::Swarm,
                SimSpeculation::On => EarlyRepliesChoice::On,
                SimSpeculation::Off => EarlyRepliesChoice::Off,
            },
            batchers: match self.batchers {
                Some(n) => BatcherChoice::Standalone(n),
                None => BatcherChoice::Swarm,
            },
            session_lease_ms: self.session_lease_ms,
            psmr: match self.threads {
                Some(t) => PsmrChoice::Fixed {
                    threads: t as usize,
                    optimistic: self.optimistic,
                },
                None => PsmrChoice::Swarm,
            },
            rings: match self.rings {
                Some(n) => RingsChoice::Fixed(n),
                None => RingsChoice::Swarm,
            },
            members: match self.members {
                SimSpeculation::Swarm => MembersChoice::Swarm,
                SimSpeculation::On => MembersChoice::On,
                SimSpeculation::Off => MembersChoice::Off,
            },
            dssmr: match self.dssmr {
                None => DssmrChoice::Off,
                Some(SimDssmr::Swarm) => DssmrChoice::Swarm,
                Some(SimDssmr::Ssmr) => DssmrChoice::Fixed(partita_dssmr::client::Scheme::Ssmr),
                Some(SimDssmr::Dssmr) => DssmrChoice::Fixed(partita_dssmr::client::Scheme::Dssmr),
            },
            geo: match self.geo {
                None => GeoChoice::Off,
                Some(SimGeo::GeopaxosPlus) => GeoChoice::GeoPaxosPlus,
                Some(SimGeo::Geopaxos) => GeoChoice::GeoPaxos,
                Some(SimGeo::Epaxos) => GeoChoice::Epaxos,
                Some(SimGeo::Both) => GeoChoice::Alternate,
            },
            service: match self.service {
                None => ServiceChoice::Swarm,
                Some(SimService::Btree) => ServiceChoice::Btree,
                Some(SimService::GeoBtree) => ServiceChoice::GeoBtree,
                Some(SimService::Kv) => ServiceChoice::Kv,
            },
            bugs,
            faults,
            without: self.without.clone(),
            coordinator_crashes: !self.no_coordinator_crashes,
            tick_check: self.tick_check,
            cost,
            trace_tail: self.trace_tail,
            check_max_states: self.check_max_states,
            ..SimOptions::default()
        })
    }
}

/// One seed, optionally twice for the determinism check.
fn run_one(seed: u64, opts: &SimOptions, twice: bool) -> (SeedReport, Option<String>) {
    let r = partita_sim::run_seed(seed, opts);
    if !twice {
        return (r, None);
    }
    let again = partita_sim::run_seed(seed, opts);
    let problem = (again.trace_hash != r.trace_hash || again.events != r.events).then(|| {
        format!(
            "seed {seed} is not deterministic: trace hash {:#018x} ({} events), then {:#018x} ({} events)",
            r.trace_hash, r.events, again.trace_hash, again.events
        )
    });
    (r, problem)
}

pub fn run(a: SimArgs) -> anyhow::Result<i32> {
    if a.print_cost_table {
        print!("{}", CostTable::default().to_toml());
        return Ok(0);
    }
    let opts = a.options()?;
    if a.draws {
        let (lo, hi) = a
            .seeds
            .or(a.seed.map(|s| (s, s + 1)))
            .ok_or_else(|| anyhow::anyhow!("give --seed N or --seeds A..B"))?;
        for seed in lo..hi {
            let p = partita_sim::swarm::draw(seed, &opts);
            if let (Some(_), Some(layout)) = (&p.geo, p.layout()) {
                let fault_list: Vec<&str> = p.faults.classes.iter().map(|c| c.name()).collect();
                println!(
                    "{seed}: {layout}; {} clients; faults: {}",
                    p.clients,
                    if fault_list.is_empty() {
                        "none".to_string()
                    } else {
                        fault_list.join(",")
                    }
                );
                continue;
            }
            println!(
                "{seed}: {}{}, {} acceptors, {} replicas{}",
                p.protocol,
                if p.speculative { " speculative" } else { "" },
                p.acceptors,
                p.replicas,
                p.layout().map(|l| format!("; {l}")).unwrap_or_default()
            );
        }
        return Ok(0);
    }
    match (a.seed, a.seeds) {
        (Some(seed), _) => single(&a, seed, &opts),
        (None, Some((lo, hi))) => range(&a, lo, hi, &opts),
        (None, None) => bail!("give --seed N or --seeds A..B"),
    }
}

fn single(a: &SimArgs, seed: u64, opts: &SimOptions) -> anyhow::Result<i32> {
    let started = Instant::now();
    let (report, nondeterministic) = run_one(seed, opts, a.check_determinism);
    let wall = started.elapsed();
    println!("{report}");
    println!(
        "wall time       {:.3} s{}",
        wall.as_secs_f64(),
        if a.check_determinism {
            " (two runs: determinism check)"
        } else {
            ""
        }
    );
    if a.check_determinism {
        match &nondeterministic {
            None => println!(
                "determinism     both runs: trace hash {:#018x}",
                report.trace_hash
            ),
            Some(m) => println!("determinism     FAILED: {m}"),
        }
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let (Some(p), false) = (&a.history, report.ds_history.is_empty()) {
        partita_harness::chirper::write_history(p, &report.ds_history)?;
        println!(
            "history         {} Chirper operations in {}",
            report.ds_history.len(),
            p.display()
        );
    } else if let (Some(p), false) = (&a.history, report.kv_history.is_empty()) {
        let mut text = report.kv_history.join("\n");
        text.push('\n');
        std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
        println!(
            "history         {} key-value operations in {} (`partita check` reads it)",
            report.kv_history.len(),
            p.display()
        );
    } else if let Some(p) = &a.history {
        let mut w = partita_checker::HistoryWriter::create(p)
            .with_context(|| format!("creating {}", p.display()))?;
        for e in &report.history {
            w.write(e)?;
        }
        w.flush()?;
        println!(
            "history         {} operations in {}",
            report.history.len(),
            p.display()
        );
        if let Some(g) = &report.params.geo {
            println!(
                "                it starts from the geo tree's keys 0..{} (value = key), not from `partita check --preload`'s keys 0, 2, …",
                g.keys
            );
        }
    }
    Ok(if report.passed && nondeterministic.is_none() {
        0
    } else {
        1
    })
}

#[derive(Serialize)]
struct RangeSummary {
    seeds: (u64, u64),
    ops: u64,
    flags: String,
    passed: u64,
    failed: Vec<u64>,
    nondeterministic: Vec<u64>,
    wall_s: f64,
    seeds_per_minute: f64,
    virtual_s: f64,
    events: u64,
    failures: Vec<SeedReport>,
}

fn range(a: &SimArgs, lo: u64, hi: u64, opts: &SimOptions) -> anyhow::Result<i32> {
    let total = hi - lo;
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
        .min(total);
    println!(
        "simulating seeds {lo}..{hi} ({total} seeds, {} ops each, {jobs} threads; flags: {})",
        opts.ops,
        opts.flags()
    );
    let next = AtomicU64::new(lo);
    let done = AtomicU64::new(0);
    let results: Mutex<Vec<(SeedReport, Option<String>)>> = Mutex::new(Vec::new());
    let started = Instant::now();
    let last_progress = Mutex::new(Instant::now());
    // On a terminal, a bar over the seeds (failing seeds are printed above it);
    // elsewhere a line every 5 s.
    let bar = partita_harness::progress::bar(total, "seeds");
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= hi {
                    break;
                }
                let (mut r, nd) = run_one(seed, opts, a.check_determinism);
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(b) = &bar {
                    b.inc(1);
                }
                if !r.passed || nd.is_some() {
                    let report = || {
                        println!("[{n:>6}/{total}] {}", r.one_line());
                        if let Some(m) = &nd {
                            println!("         {m}");
                        }
                    };
                    match &bar {
                        Some(b) => b.suspend(report),
                        None => report(),
                    }
                } else if bar.is_none() {
                    let mut last = last_progress.lock().expect("progress lock");
                    if last.elapsed() >= Duration::from_secs(5) || n == total {
                        *last = Instant::now();
                        let el = started.elapsed().as_secs_f64();
                        eprintln!(
                            "[{n:>6}/{total}] {:.0} seeds/min, {:.0} s elapsed",
                            n as f64 * 60.0 / el.max(1e-9),
                            el
                        );
                    }
                }
                r.history = Vec::new();
                r.ds_history = Vec::new();
                r.kv_history = Vec::new();
                results.lock().expect("results lock").push((r, nd));
            });
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let wall = started.elapsed().as_secs_f64();
    let mut results = results.into_inner().expect("results lock");
    results.sort_by_key(|(r, _)| r.seed);
    let failed: Vec<u64> = results
        .iter()
        .filter(|(r, _)| !r.passed)
        .map(|(r, _)| r.seed)
        .collect();
    let nondeterministic: Vec<u64> = results
        .iter()
        .filter(|(_, nd)| nd.is_some())
        .map(|(r, _)| r.seed)
        .collect();
    let rate = total as f64 * 60.0 / wall.max(1e-9);
    let virtual_s: f64 = results.iter().map(|(r, _)| r.virtual_ns as f64 / 1e9).sum();
    let events: u64 = results.iter().map(|(r, _)| r.events).sum();
    println!(
        "{total} seeds in {wall:.1} s wall ({rate:.0} seeds/min on {jobs} threads), {virtual_s:.0} s simulated, {events} events"
    );
    if failed.is_empty() && nondeterministic.is_empty() {
        println!("all {total} seeds passed");
    } else {
        let mut by_check: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
        for (r, _) in &results {
            if let Some(c) = r.failed_check() {
                by_check.entry(c.name()).or_default().push(r.seed);
            }
        }
        println!(
            "{} of {total} seeds FAILED:",
            failed.len() + nondeterministic.len()
        );
        for (check, seeds) in &by_check {
            println!("  {check}: {seeds:?}");
        }
        if !nondeterministic.is_empty() {
            println!("  nondeterministic: {nondeterministic:?}");
        }
        if let Some(first) = failed.first().or(nondeterministic.first()) {
            println!(
                "details: cargo run --release -- sim --seed {first} {}",
                opts.flags()
            );
        }
    }
    if let Some(p) = &a.json {
        let summary = RangeSummary {
            seeds: (lo, hi),
            ops: opts.ops,
            flags: opts.flags(),
            passed: total - failed.len() as u64,
            failed: failed.clone(),
            nondeterministic: nondeterministic.clone(),
            wall_s: wall,
            seeds_per_minute: rate,
            virtual_s,
            events,
            failures: results
                .iter()
                .filter(|(r, _)| !r.passed)
                .map(|(r, _)| r.clone())
                .collect(),
        };
        std::fs::write(p, serde_json::to_string_pretty(&summary)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(if failed.is_empty() && nondeterministic.is_empty() {
        0
    } else {
        1
    })
}
