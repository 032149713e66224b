//! Prometheus metrics of a node, served at `GET /metrics` on the node's own address
//! (the cluster file's `addr`: a connection that starts with `GET ` is HTTP, anything
//! else the node's framed protocol), in the OpenMetrics text format that Prometheus
//! scrapes.
//!
//! The node's event loop owns the registry. Counters it keeps anyway (its own, its
//! cores', the WAL's) are brought up to date at each scrape; histograms are observed as
//! things happen. Names follow Prometheus conventions: a `partita_` prefix, `_total`
//! on counters, units in the name (`_seconds`).

use partita_consensus::Observation;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::collections::HashMap;

/// Status counters exported under a name of their own (status name, metric name, help);
/// the others go to `partita_events_total{event=…}` or, for drops,
/// `partita_dropped_total{reason=…}`.
const NAMED: &[(&str, &str, &str)] = &[
    ("commands_received", "commands_received", "Client commands received by the coordinator"),
    ("values_proposed", "values_proposed", "Values (batches of commands) proposed by the coordinator"),
    ("instances_decided", "instances_decided", "Instances (values) decided by the coordinator"),
    ("commands_refused", "commands_refused", "Client commands the coordinator refused (a full queue)"),
    ("duplicates_dropped", "duplicate_commands_dropped", "Resubmitted commands the coordinator dropped because their original was still queued or in flight"),
    ("phase1_runs", "phase1_runs", "Phase 1 runs started by the coordinator"),
    ("retransmits", "retransmits", "Phase 1A/2A retransmissions by the coordinator"),
    ("state_transfers_started", "state_transfers", "State transfers the replica started (it lagged past what the acceptors keep)"),
    ("commands_executed", "commands_executed", "Commands executed by the replica"),
    ("acceptor_votes", "acceptor_votes", "Votes cast by the acceptor, each for a durable value"),
    ("speculation_rolled_back", "speculation_rollbacks", "Speculatively executed commands rolled back"),
    ("checkpoints_saved", "checkpoints_saved", "Replica checkpoints written durably"),
    ("psmr_parallel", "psmr_parallel_commands", "P-SMR: commands a worker thread ran alone"),
    ("psmr_synchronous", "psmr_synchronous_commands", "P-SMR: g_all commands run with every worker thread stopped"),
    ("psmr_checks_passed", "psmr_checks_passed", "opt-PSMR: safety checks passed (a thread ran an insert or delete alone)"),
    ("psmr_checks_failed", "psmr_checks_failed", "opt-PSMR: safety checks failed (the client resubmitted conservatively)"),
    ("wal_no_space_stalls", "wal_no_space_stalls", "Times the WAL found the disk full"),
    ("inbox_full_waits", "inbox_full_waits", "Times a connection waited for room in the node's inbox"),
];

/// Status counters that are levels, not counts.
const GAUGES: &[(&str, &str, &str)] = &[
    (
        "wal_backlog",
        "wal_backlog_records",
        "WAL records waiting in the node for room in the WAL queue",
    ),
    (
        "batcher_buffered",
        "batcher_buffered_commands",
        "Commands buffered in the batcher",
    ),
    (
        "reply_cache_clients",
        "reply_cache_clients",
        "Replica: clients with a cached reply (one per live session)",
    ),
];

pub struct NodeMetrics {
    registry: Registry,
    named: HashMap<&'static str, Counter>,
    gauges: HashMap<&'static str, Gauge>,
    events: Family<Vec<(String, String)>, Counter>,
    dropped: Family<Vec<(String, String)>, Counter>,
    decided_up_to: Gauge,
    executed_up_to: Gauge,
    entries: Gauge,
    wal_stalled: Gauge,
    pub leader_changes: Counter,
    pub wal_sync_seconds: Histogram,
    pub wal_batch_records: Histogram,
    commit_seconds: Histogram,
    value_commands: Histogram,
    value_bytes: Histogram,
    /// Coordinator: when each instance in flight was proposed (bounded: a decision
    /// that never comes, after a deposition, leaves its entry until the bound).
    proposed_at: std::collections::BTreeMap<u64, std::time::Instant>,
}

/// Proposals remembered for the commit latency, at most (far above any window).
const PROPOSED_AT_MAX: usize = 65_536;

impl Default for NodeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeMetrics {
    pub fn new() -> NodeMetrics {
        let mut registry = Registry::with_prefix("partita");
        let mut named = HashMap::new();
        for &(status, name, help) in NAMED {
            let c = Counter::default();
            registry.register(name, help, c.clone());
            named.insert(status, c);
        }
        let mut gauges = HashMap::new();
        for &(status, name, help) in GAUGES {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            gauges.insert(status, g);
        }
        let events = Family::default();
        registry.register(
            "events",
            "Other events the node counts, by name (see `partita status --json`)",
            events.clone(),
        );
        let dropped = Family::default();
        registry.register(
            "dropped",
            "Messages, replies and commands dropped, by reason",
            dropped.clone(),
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let decided_up_to = gauge(
            &mut registry,
            "decided_up_to",
            "Coordinator: highest instance decided with every one below it decided",
        );
        let executed_up_to = gauge(
            &mut registry,
            "executed_up_to",
            "Replica: last instance executed",
        );
        let entries = gauge(
            &mut registry,
            "entries",
            "Replica: entries in the service state",
        );
        let wal_stalled = gauge(
            &mut registry,
            "wal_stalled",
            "1 while the WAL holds writes back on a full disk (the acceptor does not vote)",
        );
        let leader_changes = Counter::default();
        registry.register(
            "leader_changes",
            "New ballots seen in the replica's decided stream",
            leader_changes.clone(),
        );
        let wal_sync_seconds = Histogram::new(exponential_buckets(0.000_1, 2.0, 18));
        registry.register_with_unit(
            "wal_sync_duration",
            "Time to write and fsync one group-commit batch of the WAL",
            Unit::Seconds,
            wal_sync_seconds.clone(),
        );
        let wal_batch_records = Histogram::new(exponential_buckets(1.0, 2.0, 13));
        registry.register(
            "wal_batch_records",
            "Records per group-commit batch of the WAL",
            wal_batch_records.clone(),
        );
        let commit_seconds = Histogram::new(exponential_buckets(0.000_05, 2.0, 20));
        registry.register_with_unit(
            "commit_duration",
            "Coordinator: time from proposing a value (Phase 2A) to its decision",
            Unit::Seconds,
            commit_seconds.clone(),
        );
        let value_commands = Histogram::new(exponential_buckets(1.0, 2.0, 14));
        registry.register(
            "value_commands",
            "Coordinator: client commands per proposed value (the batch)",
            value_commands.clone(),
        );
        let value_bytes = Histogram::new(exponential_buckets(64.0, 2.0, 16));
        registry.register_with_unit(
            "value_size",
            "Coordinator: encoded size of the commands in a proposed value",
            Unit::Bytes,
            value_bytes.clone(),
        );
        NodeMetrics {
            registry,
            named,
            gauges,
            events,
            dropped,
            decided_up_to,
            executed_up_to,
            entries,
            wal_stalled,
            leader_changes,
            wal_sync_seconds,
            wal_batch_records,
            commit_seconds,
            value_commands,
            value_bytes,
            proposed_at: std::collections::BTreeMap::new(),
        }
    }

    /// What the coordinator observed in one step, stamped `now`: value sizes, and the
    /// time from each proposal to its decision. A re-proposal of an instance (a new
    /// ballot) restarts its clock.
    pub fn observe(&mut self, observed: &[Observation], now: std::time::Instant) {
        for o in observed {
            match *o {
                Observation::Proposed {
                    instance,
                    commands,
                    bytes,
                } => {
                    self.value_commands.observe(commands as f64);
                    self.value_bytes.observe(bytes as f64);
                    if self.proposed_at.len() >= PROPOSED_AT_MAX {
                        self.proposed_at.pop_first();
                    }
                    self.proposed_at.insert(instance, now);
                }
                Observation::Decided { instance } => {
                    if let Some(at) = self.proposed_at.remove(&instance) {
                        self.commit_seconds
                            .observe(now.saturating_duration_since(at).as_secs_f64());
                    }
                }
            }
        }
    }

    /// Bring the counters up to `status`, then encode everything.
    pub fn render(&self, status: &partita_wire::NodeStatus) -> String {
        for (name, value) in &status.counters {
            let name = name.as_str();
            if let Some(g) = self.gauges.get(name) {
                g.set(*value as i64);
                continue;
            }
            if name == "batcher_mean_batch_commands_x100" {
                continue; // a ratio, derivable from the two batcher counters
            }
            let counter = match self.named.get(name) {
                Some(c) => c.clone(),
                // A batcher's drops (`batcher_dropped_X`) are drops too, reason
                // `batcher_X`.
                None => match name
                    .strip_prefix("dropped_")
                    .map(str::to_string)
                    .or_else(|| {
                        name.strip_prefix("batcher_dropped_")
                            .map(|r| format!("batcher_{r}"))
                    }) {
                    Some(reason) => self
                        .dropped
                        .get_or_create_owned(&vec![("reason".into(), reason)]),
                    None => self
                        .events
                        .get_or_create_owned(&vec![("event".into(), name.into())]),
                },
            };
            // Status counters only grow while the process lives; the exported ones
            // follow them.
            let have = counter.get();
            if *value > have {
                counter.inc_by(value - have);
            }
        }
        let set = |g: &Gauge, v: Option<u64>| {
            g.set(v.map_or(0, |v| v as i64));
        };
        set(&self.decided_up_to, status.decided_up_to);
        set(&self.executed_up_to, status.executed_up_to);
        set(&self.entries, status.entries);
        self.wal_stalled.set(status.wal_stall.is_some() as i64);
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("encoding into a String cannot fail");
        out
    }
}

/// Content type of [`NodeMetrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn status(counters: &[(&str, u64)]) -> partita_wire::NodeStatus {
        partita_wire::NodeStatus {
            counters: counters.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            decided_up_to: Some(41),
            ..Default::default()
        }
    }

    /// The sample line of `name` (with its labels) in `text`, as a number.
    fn sample(text: &str, name: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn status_counters_become_prometheus_counters_gauges_and_labels() {
        let m = NodeMetrics::new();
        let text = m.render(&status(&[
            ("commands_executed", 7),
            ("dropped_stale_ballot", 3),
            ("batcher_dropped_stale_ack", 1),
            ("campaigns", 2),
            ("reply_cache_clients", 5),
        ]));
        assert_eq!(sample(&text, "partita_commands_executed_total"), Some(7.0));
        assert_eq!(
            sample(&text, "partita_dropped_total{reason=\"stale_ballot\"}"),
            Some(3.0)
        );
        assert_eq!(
            sample(&text, "partita_dropped_total{reason=\"batcher_stale_ack\"}"),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, "partita_events_total{event=\"campaigns\"}"),
            Some(2.0)
        );
        assert_eq!(sample(&text, "partita_reply_cache_clients"), Some(5.0));
        assert_eq!(sample(&text, "partita_decided_up_to"), Some(41.0));
        assert!(
            text.ends_with("# EOF\n"),
            "OpenMetrics text ends with # EOF"
        );
        // Counters follow the status as it grows, never back.
        let text = m.render(&status(&[("commands_executed", 10)]));
        assert_eq!(sample(&text, "partita_commands_executed_total"), Some(10.0));
        let text = m.render(&status(&[("commands_executed", 4)]));
        assert_eq!(sample(&text, "partita_commands_executed_total"), Some(10.0));
    }

    #[test]
    fn commit_latency_runs_from_proposal_to_decision() {
        let mut m = NodeMetrics::new();
        let t0 = Instant::now();
        m.observe(
            &[
                Observation::Proposed {
                    instance: 1,
                    commands: 3,
                    bytes: 120,
                },
                Observation::Proposed {
                    instance: 2,
                    commands: 1,
                    bytes: 40,
                },
            ],
            t0,
        );
        m.observe(
            &[Observation::Decided { instance: 1 }],
            t0 + Duration::from_millis(3),
        );
        // A decision without a proposal here (another leader's) is not timed.
        m.observe(&[Observation::Decided { instance: 9 }], t0);
        let text = m.render(&status(&[]));
        assert_eq!(
            sample(&text, "partita_commit_duration_seconds_count"),
            Some(1.0)
        );
        let sum = sample(&text, "partita_commit_duration_seconds_sum").unwrap();
        assert!((sum - 0.003).abs() < 1e-9, "{sum}");
        assert_eq!(sample(&text, "partita_value_commands_count"), Some(2.0));
        assert_eq!(sample(&text, "partita_value_commands_sum"), Some(4.0));
        assert_eq!(sample(&text, "partita_value_size_bytes_sum"), Some(160.0));
        assert_eq!(m.proposed_at.len(), 1, "instance 2 still in flight");
    }
}
