//! What a run reports: the drawn parameters, what happened, and the verdict.

use crate::check::{Check, Failure, ReplicaEnd};
use crate::swarm::SeedParams;
use partita_checker::{CheckSummary, Event};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

#[derive(Clone, Debug, Serialize)]
pub struct SeedReport {
    pub seed: u64,
    pub passed: bool,
    pub failure: Option<Failure>,
    /// Virtual time at the end of the run.
    pub virtual_ns: u64,
    /// When the safety phase ended and every fault was repaired.
    pub healed_at_ns: Option<u64>,
    /// When every command had completed and every replica caught up.
    pub finished_at_ns: Option<u64>,
    /// Events processed, and the hash of the trace (equal for equal runs).
    pub events: u64,
    pub trace_hash: u64,
    pub ops_invoked: u64,
    pub ops_ok: u64,
    pub ops_info: u64,
    pub resubmissions: u64,
    /// Instances the agreement oracle saw decided.
    pub instances_decided: u64,
    pub replicas: Vec<ReplicaEnd>,
    /// The linearizability check's account (when it ran and passed).
    pub check: Option<CheckSummary>,
    pub counters: BTreeMap<String, u64>,
    pub params: SeedParams,
    /// The clients' history (not serialized with the summary; `--history` writes it).
    #[serde(skip)]
    pub history: Vec<Event>,
    /// S-SMR/DS-SMR seeds: the Chirper history, with the final reads (not serialized
    /// with the summary; `--history` writes it).
    #[serde(skip)]
    pub ds_history: Vec<partita_checker::chirper::ChirperEvent>,
    /// Key-value seeds: the history's lines in the key-value format (not serialized
    /// with the summary; `--history` writes it, `partita check` reads it).
    #[serde(skip)]
    pub kv_history: Vec<String>,
}

impl SeedReport {
    pub(crate) fn with_history(mut self, history: Vec<Event>) -> SeedReport {
        self.history = history;
        self
    }

    /// The failed check, if any.
    pub fn failed_check(&self) -> Option<Check> {
        self.failure.as_ref().map(|f| f.check)
    }

    /// One line: seed, protocol, verdict.
    pub fn one_line(&self) -> String {
        let verdict = match &self.failure {
            None => "pass".to_string(),
            Some(f) => format!("FAIL {}: {}", f.check, first_line(&f.message)),
        };
        if let Some(g) = &self.params.geo {
            return format!(
                "seed {} ({}, 3 regions, {} keys, order {}{}, faults: {}): {verdict}",
                self.seed,
                g.ordering,
                g.keys,
                g.order,
                match g.dop_interval_ms {
                    0 => String::new(),
                    d => format!(", DOP every {d} ms"),
                },
                fault_list(&self.params),
            );
        }
        format!(
            "seed {} ({}{}, {}a/{}r{}, faults: {}): {verdict}",
            self.seed,
            self.params.protocol,
            match (self.params.speculative, self.params.early_replies) {
                (true, true) => " speculative, early replies",
                (true, false) => " speculative",
                _ => "",
            },
            self.params.acceptors,
            self.params.replicas,
            match self.params.batchers {
                crate::swarm::Batchers::None => String::new(),
                crate::swarm::Batchers::Standalone(n) => format!("/{n}b"),
                crate::swarm::Batchers::OnAcceptors => "/b on acceptors".into(),
            },
            fault_list(&self.params),
        )
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn fault_list(p: &SeedParams) -> String {
    if p.faults.classes.is_empty() {
        "none".into()
    } else {
        p.faults
            .classes
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

impl fmt::Display for SeedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.params;
        writeln!(f, "seed {}", self.seed)?;
        writeln!(f, "configuration")?;
        match &p.geo {
            Some(g) => writeln!(
                f,
                "  cluster         {}: 3 nodes (California, Virginia, Europe; [wan] preset \"paper\"), each an acceptor and a replica{}",
                g.ordering,
                match g.ordering {
                    crate::swarm::GeoOrdering::GeoPaxosPlus
                    | crate::swarm::GeoOrdering::GeoPaxos => {
                        ", node i leading serializer i-1 (a Multi-Paxos group)"
                    }
                    crate::swarm::GeoOrdering::Epaxos => ", each leading its own column",
                }
            )?,
            None => writeln!(
                f,
                "  cluster         {}{}, {} acceptors (node 1 coordinates), {} replicas",
                p.protocol,
                match (p.speculative, p.early_replies) {
                    (true, true) => " with speculative execution and early replies",
                    (true, false) => " with speculative execution",
                    _ => "",
                },
                p.acceptors,
                p.replicas
            )?,
        }
        if let Some(layout) = p.layout() {
            writeln!(f, "  execution       {layout}")?;
        }
        writeln!(
            f,
            "  batching        {} bytes, window {} instances, delay {} ms{}; checkpoint every {} instances",
            p.batch_bytes_max,
            p.window_instances_max,
            p.batch_delay_ms,
            match p.value_interval_ms {
                0 => String::new(),
                i => format!(", at least {i} ms between values that are not full"),
            },
            p.checkpoint_instances
        )?;
        match p.batcher_interval_ms {
            0 => writeln!(f, "  batchers        {}", p.batchers)?,
            i => writeln!(
                f,
                "  batchers        {}, at least {i} ms between batches that are not full",
                p.batchers
            )?,
        }
        writeln!(
            f,
            "  clients         {} doing {} operations on keys 0..{}, think 0..={}, timeout {}, give up {}",
            p.clients,
            p.ops,
            p.client.keys,
            ms(p.client.think_ns_max),
            ms(p.client.timeout_ns),
            ms(p.client.give_up_ns)
        )?;
        writeln!(
            f,
            "  network         peers {} (x{:.2} spread) +{} jitter, {:.0} Mbit/s; clients {} +{} jitter",
            ms(p.net.peer.latency_ns),
            p.net.peer.latency_spread,
            ms(p.net.peer.jitter_ns),
            p.net.peer.bandwidth_bytes_per_s as f64 * 8.0 / 1e6,
            ms(p.net.client.latency_ns),
            ms(p.net.client.jitter_ns)
        )?;
        writeln!(
            f,
            "  disk            write {} + {} ps/byte, fsync {}",
            ms(p.disk.write_ns),
            p.disk.write_byte_ps,
            ms(p.disk.fsync_ns)
        )?;
        let skew = p
            .clock_skew
            .iter()
            .map(|s| format!("{:+.1}%", s * 100.0))
            .collect::<Vec<_>>()
            .join(" ");
        writeln!(f, "  clock skew      {skew}")?;
        if !p.bug_names.is_empty() {
            writeln!(f, "  PLANTED BUGS    {}", p.bug_names.join(", "))?;
        }
        writeln!(f, "faults (safety phase)")?;
        writeln!(f, "  classes         {}", fault_list(p))?;
        let nf = &p.net.peer_faults;
        let cf = &p.net.client_faults;
        writeln!(
            f,
            "  peer links      loss {:.1}%, dup {:.1}%, reorder {:.1}% (up to {})",
            nf.loss * 100.0,
            nf.dup * 100.0,
            nf.reorder * 100.0,
            ms(nf.reorder_ns_max)
        )?;
        writeln!(
            f,
            "  client links    loss {:.1}%, dup {:.1}%, reorder {:.1}%",
            cf.loss * 100.0,
            cf.dup * 100.0,
            cf.reorder * 100.0
        )?;
        let fp = &p.faults;
        writeln!(
            f,
            "  rates           partitions {:.1}/s (<= {}), crashes {:.1}/s (down <= {}), pauses {:.1}/s (<= {})",
            fp.partition_per_s,
            ms(fp.partition_ns_max),
            fp.crash_per_s,
            ms(fp.down_ns_max),
            fp.pause_per_s,
            ms(fp.pause_ns_max)
        )?;
        writeln!(
            f,
            "  disk faults     fsync stalls {:.1}% (<= {}), unsynced records may survive a crash: {}",
            p.disk.stall * 100.0,
            ms(p.disk.stall_ns_max),
            p.disk.unsynced_survive > 0.0
        )?;
        writeln!(f, "run")?;
        let c = |k: &str| self.counters.get(k).copied().unwrap_or(0);
        writeln!(
            f,
            "  commands        {} invoked, {} ok, {} unknown (gave up), {} resubmissions",
            self.ops_invoked, self.ops_ok, self.ops_info, self.resubmissions
        )?;
        if p.early_replies {
            writeln!(
                f,
                "  early replies   {} operations ended on a confirmed tentative reply",
                c("ops_confirmed_early")
            )?;
        }
        if let Some(g) = &p.geo {
            match g.ordering {
                crate::swarm::GeoOrdering::GeoPaxosPlus | crate::swarm::GeoOrdering::GeoPaxos => writeln!(
                    f,
                    "  {:<15} summed over the replicas (running incarnations): {} requests submitted ({} copies absorbed while under way), {} commands executed by several serializers, {} resubmit decisions, {} resubmitted, {} writes deduplicated, {} DOPs submitted and {} executed, {} clock entries, {} stalled operations ordered again",
                    g.ordering.to_string(),
                    c("geo_submitted"),
                    c("geo_resends_absorbed"),
                    c("geo_executed_multi"),
                    c("geo_resubmit_decisions"),
                    c("geo_resubmitted"),
                    c("geo_deduplicated"),
                    c("geo_dops_submitted"),
                    c("geo_dops_executed"),
                    c("geo_clock_entries_proposed"),
                    c("geo_stalled_reordered")
                )?,
                crate::swarm::GeoOrdering::Epaxos => writeln!(
                    f,
                    "  EPaxos          summed over the replicas (running incarnations): {} proposed, {} fast and {} slow commits, {} recoveries ({} no-ops), {} commands executed, {} copies skipped, {} answered from the window, {} proposed as conflicting with everything",
                    c("epaxos_proposed"),
                    c("epaxos_fast_commits"),
                    c("epaxos_slow_commits"),
                    c("epaxos_recoveries_started"),
                    c("epaxos_recovered_noops"),
                    c("epaxos_executed"),
                    c("epaxos_duplicates_skipped"),
                    c("epaxos_answered_from_window"),
                    c("epaxos_proposed_conflicting_all")
                )?,
            }
        }
        if p.batchers != crate::swarm::Batchers::None {
            writeln!(
                f,
                "  batchers        {} batches of {} commands, {} resends, {} abandoned, {} refused (running incarnations)",
                c("batcher_batches_sent"),
                c("batcher_commands_forwarded"),
                c("batcher_resends"),
                c("batcher_batches_abandoned"),
                c("batcher_commands_refused")
            )?;
        }
        writeln!(
            f,
            "  messages        {} sent, {} lost, {} cut by partitions, {} duplicated, {} to down nodes",
            c("messages_sent"),
            c("net_dropped_loss"),
            c("net_dropped_partition") + c("net_dropped_cut_in_flight"),
            c("net_duplicated"),
            c("net_dropped_node_down")
        )?;
        writeln!(
            f,
            "  faults          {} crashes ({} unsynced records lost, {} survived, {} torn), {} restarts, {} pauses, {} partitions",
            c("crashes"),
            c("records_lost_in_crashes"),
            c("unsynced_records_survived"),
            c("torn_records"),
            c("restarts"),
            c("pauses"),
            c("partitions")
        )?;
        writeln!(
            f,
            "  disk            {} fsyncs, {} stalled; {} checkpoints saved, {} log records truncated",
            c("fsyncs"),
            c("fsync_stalls"),
            c("checkpoints_saved"),
            c("log_records_truncated")
        )?;
        match p.geo.as_ref().map(|g| g.ordering) {
            Some(crate::swarm::GeoOrdering::Epaxos) => writeln!(
                f,
                "  instances       (EPaxos's commits are not the agreement oracle's; each core counts conflicting ones)"
            )?,
            Some(crate::swarm::GeoOrdering::GeoPaxosPlus | crate::swarm::GeoOrdering::GeoPaxos) => writeln!(
                f,
                "  instances       {} decided, over the serializers' logs",
                self.instances_decided
            )?,
            None => writeln!(f, "  instances       {} decided", self.instances_decided)?,
        }
        for r in &self.replicas {
            if p.geo.is_some() {
                writeln!(
                    f,
                    "  replica {}       executed {} commands, {} entries, digest {:#018x}",
                    r.node, r.executed_up_to, r.entries, r.digest
                )?;
                continue;
            }
            writeln!(
                f,
                "  replica {}       executed up to {}, {} entries, digest {:#018x}",
                r.node, r.executed_up_to, r.entries, r.digest
            )?;
        }
        writeln!(
            f,
            "  virtual time    {:.3} s (healed at {}, finished at {})",
            self.virtual_ns as f64 / 1e9,
            self.healed_at_ns
                .map(|t| format!("{:.3} s", t as f64 / 1e9))
                .unwrap_or_else(|| "-".into()),
            self.finished_at_ns
                .map(|t| format!("{:.3} s", t as f64 / 1e9))
                .unwrap_or_else(|| "-".into())
        )?;
        writeln!(
            f,
            "  events          {} (trace hash {:#018x})",
            self.events, self.trace_hash
        )?;
        if let Some(s) = &self.check {
            writeln!(f, "  checker         {s}")?;
        }
        match &self.failure {
            None => write!(
                f,
                "verdict: PASS (invariants, agreement, liveness, convergence, linearizability, final state)"
            ),
            Some(fl) => {
                writeln!(
                    f,
                    "verdict: FAIL — check `{}` at {:.6} ms",
                    fl.check,
                    fl.time_ns as f64 / 1e6
                )?;
                writeln!(f, "  {}", fl.message.replace('\n', "\n  "))?;
                if !fl.trace_tail.is_empty() {
                    writeln!(f, "last events before the failure:")?;
                    for line in &fl.trace_tail {
                        writeln!(f, "  {line}")?;
                    }
                }
                write!(
                    f,
                    "reproduce: cargo run --release -- sim --seed {} {}",
                    self.seed, p.flags
                )
            }
        }
    }
}
