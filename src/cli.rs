//! Command-line interface. Every subcommand prints readable output by default and JSON
//! with `--json` where scripts need it; misuse prints usage and exits with status 2.

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use partita_btree::{Op, OpResult};
use partita_config::{
    ClusterConfig, Durability, EpaxosSection, ExecutionModel, ExecutionSection, Mode,
    OrderingProtocol, OrderingSection, Role,
};
use partita_consensus::{Protocol, RingDecision};
use partita_experiments::reproduction::{self, Outcome};
use partita_harness::bench::{self, BenchConfig, Workload};
use partita_harness::launch::{self, LocalCluster};
use partita_runtime::NodeOptions;
use partita_types::Choice;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "partita",
    version,
    about = "Scalable, linearizable state-machine replication: a replicated B+tree on Ring Paxos or Multi-Paxos"
)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start the default local cluster (3 acceptors, 2 replicas, Ring Paxos, fsync) in the foreground.
    Up(UpArgs),
    /// Run one node of a cluster (started by `up`, or by hand).
    Node(NodeArgs),
    /// Show each node's role, whether it answers and its progress.
    Status(TargetArgs),
    /// Run one operation against the cluster's service (B+tree or key-value store).
    Kv(KvArgs),
    /// Chirper (paper 003) on an S-SMR/DS-SMR cluster: post, follow, unfollow, read a
    /// timeline.
    Chirper(ChirperArgs),
    /// Benchmark a cluster (or the B+tree alone: `partita bench btree`).
    Bench(BenchArgs),
    /// Check a recorded history for linearizability.
    Check(CheckArgs),
    /// Deterministic simulation: a whole cluster in virtual time under faults, checked.
    Sim(crate::sim::SimArgs),
    /// Kill, restart and pause real nodes under load, then judge the history.
    Nemesis(NemesisArgs),
    /// Run one of the papers' experiments and write its report and figures.
    Experiment(ExperimentArgs),
    /// Measure the simulator's cost table on this machine (codec, B+tree, node core
    /// handlers, sockets, WAL disk) and write it as TOML.
    Calibrate(CalibrateArgs),
    /// Serve a live page of a running cluster (nodes, leaders, progress, throughput,
    /// probe latency, partition map) over HTTP.
    Dashboard(DashboardArgs),
    /// Write a cluster CA and, signed by it, a certificate and key for every node and
    /// for clients (mutual TLS); with --cluster, add the [tls] section to the file.
    Certs(CertsArgs),
    /// Backups: save a running cluster's service state to a file, check one, or seed a
    /// new cluster from one.
    Snapshot(SnapshotArgs),
    /// The replicas and acceptors of a running cluster: list them, add a replica (it
    /// joins as a learner and serves once caught up) or an acceptor (it votes from the
    /// next ordering epoch), remove one, promote a learner.
    Member(MemberArgs),
}

#[derive(Args, Debug)]
struct MemberArgs {
    #[command(subcommand)]
    op: MemberOp,
    #[command(flatten)]
    target: TargetArgs,
}

#[derive(Subcommand, Debug)]
enum MemberOp {
    /// Every node: id, address, roles, whether it answers and how far it executed.
    List,
    /// Add replica ID: start its process first (`partita node --id ID` with its entry in
    /// the cluster file marked `join = true`), then add it.
    Add {
        id: u32,
        /// Where the cluster reaches it (default: its entry in the cluster file).
        #[arg(long)]
        addr: Option<String>,
        /// Keep it a learner once caught up, until `partita member promote`.
        #[arg(long, conflicts_with = "acceptor")]
        learner: bool,
        /// The partition it replicates, in a partitioned cluster (default: its entry
        /// in the cluster file).
        #[arg(long, conflicts_with = "acceptor")]
        partition: Option<u32>,
        /// Add ID as an acceptor instead: it votes from the instance after the change
        /// on (a new ordering epoch), with no history to copy.
        #[arg(long)]
        acceptor: bool,
    },
    /// Remove replica ID for good: it stops, and its id is never used again.
    Remove {
        id: u32,
        /// Remove ID's acceptor role instead (a new ordering epoch without it); a node
        /// that is only an acceptor then stops.
        #[arg(long)]
        acceptor: bool,
    },
    /// Promote learner ID (refused while it is behind).
    Promote { id: u32 },
}

#[derive(Args, Debug)]
struct SnapshotArgs {
    #[command(subcommand)]
    op: SnapshotOp,
}

#[derive(Subcommand, Debug)]
enum SnapshotOp {
    /// Save a consistent snapshot (one replica's service state at one position, with
    /// its checksum) of a running cluster to FILE.
    Save {
        file: PathBuf,
        #[command(flatten)]
        target: TargetArgs,
        /// Take it from this replica (default: the first replica that answers).
        #[arg(long)]
        node: Option<u32>,
    },
    /// Check a snapshot file and print what it holds.
    Status {
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Seed a new cluster in --data-dir from a snapshot; `partita up --data-dir DIR`
    /// then starts it with the snapshot's state.
    Restore {
        file: PathBuf,
        /// Directory of the new cluster (must hold none yet).
        #[arg(long)]
        data_dir: PathBuf,
        /// The new cluster's layout from this cluster file (its id is replaced);
        /// default: `partita up`'s local cluster for the snapshot's service.
        #[arg(long)]
        cluster: Option<PathBuf>,
        /// First port of the default layout (node N listens on BASE+N).
        #[arg(long, default_value_t = 7100, conflicts_with = "cluster")]
        base_port: u16,
        /// The default layout with etcd's three members (see `partita up --members`).
        #[arg(long, conflicts_with = "cluster")]
        members: bool,
        /// Key-value service: the first replica's etcd endpoint port, as `partita up`.
        #[arg(long, default_value_t = 2379, conflicts_with = "cluster")]
        etcd_port: u16,
    },
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("whom").required(true).args(["nodes", "cluster"])))]
struct CertsArgs {
    /// Directory for ca.pem/ca.key, node-<id>.pem/.key and client.pem/.key (a CA
    /// already there is kept and signs the new certificates).
    #[arg(long)]
    out: PathBuf,
    /// Certificates for nodes 1..=N (names only; no addresses known).
    #[arg(long)]
    nodes: Option<u32>,
    /// Certificates for this cluster file's nodes (name and IP of each), and its [tls]
    /// section appended when it has none.
    #[arg(long)]
    cluster: Option<PathBuf>,
    /// Validity of the certificates, in days.
    #[arg(long, default_value_t = partita_harness::certs::VALIDITY_DAYS_DEFAULT)]
    days: u64,
    /// Replace certificate and key files that exist.
    #[arg(long)]
    force: bool,
}

#[derive(Args, Debug)]
struct DashboardArgs {
    /// Cluster file (default: the one `partita up` wrote in ./partita-data).
    #[arg(long)]
    cluster: Option<PathBuf>,
    /// Where to serve the page (the API is at /api/state).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: std::net::SocketAddr,
    /// Do not run the probe client (one read-only command per second, for latency).
    #[arg(long)]
    no_probe: bool,
}

#[derive(Args, Debug)]
struct CalibrateArgs {
    /// Where to write the cost table (TOML, with a header saying when and where it
    /// was measured).
    #[arg(long, default_value = "calibration.toml")]
    out: PathBuf,
    /// Fewer rounds and a smaller tree (seconds instead of about a minute).
    #[arg(long)]
    quick: bool,
    /// Entries of the B+tree the operations are measured on (default: 1,000,000, or
    /// 100,000 with --quick).
    #[arg(long)]
    entries: Option<u64>,
}

#[derive(Args, Debug)]
struct NemesisArgs {
    /// Faults to inject, in turn.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "kill-coordinator,kill-acceptor,kill-replica,pause-coordinator"
    )]
    faults: Vec<partita_harness::nemesis::Fault>,
    /// Ordering protocol of the cluster the nemesis starts.
    #[arg(long, value_parser = choice::<Protocol>(), default_value = "ring-paxos")]
    protocol: Protocol,
    /// Ring Paxos: where an instance is decided (`acceptor`, the default, or
    /// `coordinator`, paper 001's ring).
    #[arg(long, value_parser = choice::<RingDecision>())]
    ring_decision: Option<RingDecision>,
    /// Seconds of load.
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// A soak: this many minutes of load (instead of --duration), for long runs
    /// outside CI.
    #[arg(long, value_name = "MINUTES")]
    soak: Option<u64>,
    /// Inject this many faults together, on distinct nodes, at random times.
    #[arg(long, default_value_t = 1)]
    together: usize,
    #[command(flatten)]
    exec: ExecutionArgs,
    /// Standalone batchers through which every client enters.
    #[arg(long, default_value_t = 0)]
    batchers: u32,
    /// State partitioning: this many partitions of the nemesis's key space, 2 replicas each.
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Multi-Ring Paxos: this many rings of 3 acceptors each.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=8))]
    rings: u32,
    /// Milliseconds between faults.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Milliseconds a killed node stays down (or a paused one stopped).
    #[arg(long, default_value_t = 1500)]
    down_ms: u64,
    #[arg(long, default_value_t = 8)]
    clients: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the history (JSON lines) here.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Write the report (JSON) here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The service under faults: the B+tree, the key-value store (puts, gets,
    /// ranges, deletes and transactions on a few keys, judged under the key-value
    /// model with revisions; with --geo or --epaxos too), or Chirper (paper 003) over
    /// --partitions data partitions with --execution ssmr or dssmr, its clients running
    /// the swarm's mix (moves, creates and deletes under way).
    #[arg(long, default_value = "btree", value_parser = ["btree", "kv", "chirper"])]
    service: String,
    /// Each node in a network namespace of its own, joined by a bridge, with mutual
    /// TLS, as on separate machines (root; the namespaces are removed at the end).
    /// Needed by the network faults (isolate-coordinator, split-cluster,
    /// cut-coordinator-out, lossy-network).
    #[arg(long)]
    netns: bool,
    /// With --netns: Ring Paxos's Phase 2A as IP multicast on the bridge (plain TCP
    /// otherwise, since datagrams are not authenticated).
    #[arg(long, requires = "netns")]
    multicast: bool,
    /// Plant a known bug in every node (a control: the verdict must find it), e.g.
    /// lose-acked-writes; see `partita node --help`.
    #[arg(long = "unsafe", value_name = "BUG")]
    unsafe_bugs: Vec<String>,
    /// GeoPaxos+ (paper 004): one node in each of the paper's three regions over the
    /// emulated WAN, each an acceptor of every serializer, a replica and its own
    /// serializer's first leader; clients in every region run the geo B+tree's
    /// operations; a DOP every 2 s moves tree nodes between serializers. Every node
    /// fault may hit any node (each leads a serializer).
    #[arg(long, conflicts_with_all = [
        "protocol", "ring_decision", "execution", "early_replies", "threads",
        "batchers", "partitions", "rings", "multicast"
    ])]
    geo: bool,
    /// With --geo: order by EPaxos (paper 004's leaderless baseline) instead of
    /// GeoPaxos+'s serializers: the same nodes, regions, clients and checks, no DOPs.
    #[arg(long, requires = "geo")]
    epaxos: bool,
    /// With --geo: the keys the tree starts with (0..N, each its own value); clients
    /// use twice as many, so inserts add keys.
    #[arg(long, default_value_t = 200, requires = "geo",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    geo_keys: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ExperimentName {
    /// Paper 001 §V-B, Figures 5 and 6: SMR versus client-server, 1 to 8 replicas.
    CostOfReplication,
    /// Paper 001 §V-C, Figures 7 and 8: speculative execution versus classic SMR
    /// (Ring Paxos), queries and batched updates, against clients, per replica count.
    Speculation,
    /// Paper 001 §V-D, Figure 9: classic SMR against 2 and 4 partitions (queries, batches).
    Partitioning,
    /// Paper 001 §V-D, Figures 10 and 11: 2 partitions, 0-100% cross-partition queries.
    CrossPartition,
    /// Paper 001 §V-E, Figure 12: speculative against classic execution, 2 partitions.
    SpeculationPartitioning,
    /// Paper 002 Figures 2 to 5: P-SMR and opt-PSMR against SMR, over the share of
    /// dependent commands and the number of worker threads (--sim at the paper's scale;
    /// without it on real processes here, at the thread counts this machine holds).
    Psmr,
    /// Paper 003 Table 1, Figure 4 and the rate of moves: Chirper on S-SMR against
    /// DS-SMR at 1, 2, 4 and 8 partitions under the four workloads (--sim only, for
    /// now).
    Dssmr,
    /// Paper 004 §VI-D, Figure 8: the DOP's time on a geo B+tree of 1,000,000 keys for
    /// brute force, hot replicas, the LRU cache and both, at 3, 4 and 8 replicas (pure
    /// CPU in this process; --keys, --iterations, --replicas, --rounds, --quick).
    Optimizer,
    /// Paper 004 §VI-B and §VI-C, Figures 5, 6 and 7 and DBT_a against DBT_b:
    /// GeoPaxos+, GeoPaxos, Multi-Paxos and EPaxos at the paper's scale, their real
    /// cores in the deterministic simulator with an emulated WAN (--sim only; --quick,
    /// --jobs, --clients, --replicas).
    Geo,
    /// Every experiment above, one after the other, at their defaults (or --quick):
    /// simulated at the papers' scale (--sim: only those, and the optimizer), and
    /// without --sim on real processes here too; writes each report and its figures
    /// to DIR/results/all[-sim][-quick]/ and the page that sets the papers' numbers
    /// beside ours, each target with its verdict, to DIR/reproduction.md (--out DIR,
    /// default docs).
    All,
}

#[derive(Args, Clone, Debug)]
struct ExperimentArgs {
    #[arg(value_enum)]
    name: ExperimentName,
    /// Report file (JSON); the figures go next to it as FILE-fig5.svg, FILE-fig6.svg
    /// (speculation: FILE-fig7.svg for 4 replicas, FILE-fig8.svg for 8, and
    /// FILE-spec-N-replicas.svg for other counts).
    #[arg(long, default_value = "experiment.json")]
    json: PathBuf,
    /// A small sweep (a minute) instead of the full one (several minutes).
    #[arg(long)]
    quick: bool,
    /// Run nothing: draw the figures of a report this experiment wrote earlier (FILE,
    /// its JSON), beside --json's name as a run would (dssmr: FILE-figure4.svg and
    /// .png, FILE-moves.svg and .png). Only for dssmr.
    #[arg(long, value_name = "FILE")]
    replot: Option<PathBuf>,
    /// Seconds of load per point (default: 6, or 1 with --quick; geo --sim: the LAN
    /// points' virtual seconds, default 1.6).
    #[arg(long)]
    duration: Option<f64>,
    /// Entries preloaded per point (default: 1,000,000, or 2,000 with --quick).
    #[arg(long)]
    preload: Option<u64>,
    #[arg(long, value_parser = choice::<Protocol>(), default_value = "ring-paxos")]
    protocol: Protocol,
    #[arg(long, value_parser = choice::<Durability>(), default_value = "fsync")]
    durability: Durability,
    /// Run the sweep in the deterministic simulator (one simulated CPU per node, a
    /// simulated gigabit LAN and disk) at the paper's sizes: 12,000,000 entries, think
    /// time 0-10 ms, up to 3200 clients, 4 virtual seconds per point. With --quick, the
    /// real --quick sweep's sizes. --duration is then in virtual seconds.
    #[arg(long)]
    sim: bool,
    /// Real runs: every node of every point in a network namespace of its own, on a
    /// bridge, with mutual TLS between the nodes and from the clients, as on separate
    /// machines (root; the namespaces are removed at the end).
    #[arg(long, conflicts_with = "sim")]
    netns: bool,
    /// With --sim: the CPU and disk cost table (TOML, from `partita calibrate`;
    /// default: the simulator's built-in table).
    #[arg(long, value_name = "FILE", requires = "sim")]
    cost_table: Option<PathBuf>,
    /// Workloads (default: the experiment's).
    #[arg(long, value_parser = choice::<Workload>(), value_delimiter = ',')]
    workloads: Option<Vec<Workload>>,
    /// Client counts (default: the experiment's; geo: the WAN counts, 0 for no WAN point).
    #[arg(long, value_delimiter = ',')]
    clients: Option<Vec<usize>>,
    /// Replica counts (default: the experiment's; geo: the LAN counts, 0 for no LAN point).
    #[arg(long, value_delimiter = ',')]
    replicas: Option<Vec<usize>>,
    /// Think time: each client waits a uniform whole number of ms in 0..=N before each
    /// command (default: 0 for real runs, 10 with --sim at full size).
    #[arg(long)]
    think_ms: Option<u64>,
    /// speculation, real runs: classic/speculative pairs per configuration, their
    /// order alternating (default: 2, or 1 with --quick).
    #[arg(long)]
    repeat: Option<u32>,
    /// With --sim: points simulated at once (default: the number of cores).
    #[arg(long, requires = "sim")]
    jobs: Option<usize>,
    /// With --sim, a what-if: IP multicast on the simulated LAN, as paper 001's Ring
    /// Paxos had (a message a node sends to several peers in one step leaves its network
    /// card once). The default, like the real runtime, sends one TCP copy per receiver.
    /// Partitioning experiments only.
    #[arg(long, requires = "sim")]
    multicast: bool,
    /// Partitioning experiments: add N standalone batchers to every cluster; clients
    /// spread over them and the leader receives batches of commands.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=16))]
    batchers: u32,
    /// The partitioning experiment: also 2 and 4 partitions on Multi-Ring Paxos (paper
    /// 002), a ring of 3 acceptors per partition and one across them. The psmr
    /// experiment: every point on Multi-Ring Paxos (P-SMR and opt-PSMR on a ring per
    /// thread's group and one for g_all, SMR on as many rings), without batchers; with
    /// --sim that is its default, as the paper ran it (see --one-ring).
    #[arg(long)]
    rings: bool,
    /// psmr, with --sim: one Ring Paxos ring with batchers (the real runs' setup)
    /// instead of the paper's Multi-Ring Paxos.
    #[arg(long, requires = "sim", conflicts_with = "rings")]
    one_ring: bool,
    /// psmr: each client machine keeps N commands outstanding, a session each, through
    /// its one network card (--sim) or over one connection to each node (real runs)
    /// (default: the paper's 50; 1: a machine per client). --clients counts the
    /// sessions.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    window: Option<u32>,
    /// The seed of every random draw of the run (default 1): the simulator's runs are a
    /// function of it, so another seed shows how much a result owes to one draw; real
    /// runs seed their clients' keys with it, the optimizer its counts. Not for the
    /// real cost-of-replication and speculation sweeps.
    #[arg(long)]
    seed: Option<u64>,
    /// dssmr: the Chirper workloads (timeline, post, follow, mix; default all four).
    #[arg(long, value_delimiter = ',')]
    chirper_workloads: Option<Vec<String>>,
    /// dssmr, with --sim: the key-value store instead of Chirper, S-SMR against DS-SMR
    /// under transactions that each put both keys of one of N pairs (as `partita bench
    /// --kv-pairs N`), on one Ring Paxos stream (default partition counts: 8).
    #[arg(long, value_name = "N", requires = "sim", conflicts_with = "chirper_workloads", value_parser = clap::value_parser!(u64).range(1..))]
    kv_pairs: Option<u64>,
    /// dssmr: the data partition counts (default 1,2,4,8). psmr (with --sim): one
    /// count P, P-SMR inside P partitions against the P partitions alone.
    #[arg(long, value_delimiter = ',')]
    partition_counts: Option<Vec<u32>>,
    /// dssmr: users of the social graph (default 10000).
    #[arg(long)]
    users: Option<u32>,
    /// dssmr: share of followers from the user's own community (default 0.99).
    #[arg(long)]
    p_local: Option<f64>,
    /// dssmr: gather an access's objects in the partition that holds most of them,
    /// instead of one of the partitions involved at random (the paper's default).
    #[arg(long)]
    gather_where_most: bool,
    /// dssmr: clients wait for a command's moves before sending its access, instead
    /// of sending the moves (on a session of their own) and the access at once as the
    /// paper's client proxy does.
    #[arg(long)]
    await_moves: bool,
    /// dssmr, with --sim: followers and follows from interest groups that cut across
    /// the communities, so that S-SMR's static map and DS-SMR's initial placement (by
    /// community) know nothing of who follows whom.
    #[arg(long)]
    scattered_interests: bool,
    /// dssmr: S-SMR's static map and DS-SMR's initial placement: `hashed` (users hashed
    /// to partitions, the paper's; S-SMR* beside them has the community map) or
    /// `service` (Chirper's own placement, by community).
    #[arg(long, value_name = "MAP", value_parser = ["hashed", "service"])]
    placement: Option<String>,
    /// Partitioning experiments: the coordinator's batching delay in ms (how long a value
    /// that is not full waits for more commands while instances are in flight).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100))]
    batch_delay_ms: Option<u64>,
    /// Partitioning experiments: the largest value the coordinator proposes, and the
    /// largest batch a batcher forwards, in bytes (`[batching] batch_bytes_max`; the
    /// paper's 8192 by default).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(64..=16 << 20))]
    batch_bytes_max: Option<u64>,
    /// Partitioning experiments with --batchers: a batch that is not full leaves a
    /// batcher no sooner than this long after its previous one (`[batching]
    /// batcher_interval_ms`; 0, the default: as soon as the last one is acknowledged).
    #[arg(long, value_name = "MS", requires = "batchers", value_parser = clap::value_parser!(u64).range(0..=1000))]
    batcher_interval_ms: Option<u64>,
    /// Partitioning experiments: a value that is not full leaves the coordinator no
    /// sooner than this long after its previous one (`[batching] value_interval_ms`;
    /// 0, the default: off).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=1000))]
    value_interval_ms: Option<u64>,
    /// Real `partitioning` runs: measure the whole sweep N times, round after round
    /// (series interleaved, so drift of the machine hits them alike); ratios and the
    /// target are the median over rounds, with every round's ratio printed beside it.
    /// Also the real dssmr, geo and optimizer runs' rounds, and geo --sim's (the
    /// targets' points, each round its own seed); other simulated runs are
    /// deterministic and refuse it.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: Option<u32>,
    /// Real runs: limit every node process to FRACTION of one core (a cgroup CPU quota
    /// of its own), emulating one machine per node; the bench clients are not limited.
    /// Reports say so beside every number.
    #[arg(long, value_name = "FRACTION", conflicts_with = "sim", value_parser = partita_harness::node_cpu::parse_fraction_arg)]
    node_cpu: Option<f64>,
    /// optimizer: the key space of the geo B+tree, half of it populated (default
    /// 1,000,000, or 20,000 with --quick).
    #[arg(long)]
    keys: Option<u64>,
    /// optimizer: windows of requests, each followed by a DOP (default 100, or 10 with
    /// --quick); the last one is Figure 8's "LRU-100x".
    #[arg(long)]
    iterations: Option<u32>,
    /// geo --sim: clients per replica of the LAN points (Figure 5; default 300, or
    /// 100 with --quick).
    #[arg(long, value_name = "N")]
    lan_clients: Option<u32>,
    /// all: the directory of reproduction.md, with the reports and figures in
    /// results/all[-sim][-quick]/ below it (default: docs).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// `ExperimentArgs` alone, to parse an experiment's defaults.
#[derive(clap::Parser)]
struct ExperimentDefaults {
    #[command(flatten)]
    args: ExperimentArgs,
}

impl ExperimentArgs {
    /// The arguments of `partita experiment NAME` given nothing else.
    fn defaults(name: ExperimentName) -> ExperimentArgs {
        use clap::ValueEnum;
        let value = name
            .to_possible_value()
            .expect("every experiment has a name");
        ExperimentDefaults::try_parse_from(["experiment", value.get_name()])
            .expect("an experiment's name alone parses")
            .args
    }

    /// The name on the command line.
    fn name_str(&self) -> String {
        use clap::ValueEnum;
        self.name
            .to_possible_value()
            .expect("every experiment has a name")
            .get_name()
            .to_string()
    }
}

impl ExperimentArgs {
    fn duration(&self) -> anyhow::Result<Option<Duration>> {
        match self.duration {
            Some(d) if !(d > 0.0 && d <= 3600.0) => {
                bail!("--duration must be between 0 and 3600 seconds")
            }
            Some(d) => Ok(Some(Duration::from_secs_f64(d))),
            None => Ok(None),
        }
    }

    fn sim_cost(&self) -> anyhow::Result<Option<(partita_sim::CostTable, String)>> {
        let Some(p) = &self.cost_table else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(p)
            .with_context(|| format!("reading the cost table {}", p.display()))?;
        let t = partita_sim::CostTable::from_toml(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        Ok(Some((t, p.display().to_string())))
    }

    fn check_speculation(&self) -> anyhow::Result<()> {
        if matches!(self.protocol, Protocol::MultiPaxos) {
            bail!("speculation runs Ring Paxos only (Multi-Paxos sends no proposals to learners)");
        }
        Ok(())
    }
}

#[derive(Args, Debug)]
struct UpArgs {
    /// Data directory: cluster file, WALs and logs.
    #[arg(long, default_value = "partita-data")]
    data_dir: PathBuf,
    /// The replicated service of a new cluster: `btree` (u64 keys and values), `kv`
    /// (byte strings in etcd's data model), `geo-btree` (paper 004's geo B+tree, which
    /// places its own nodes on GeoPaxos+'s serializers; with --ordering geopaxos+ or
    /// epaxos) or `chirper` (paper 003). An existing cluster file wins.
    #[arg(long, default_value = "btree", value_parser = ["btree", "kv", "geo-btree", "chirper"])]
    service: String,
    /// Ordering protocol of a new cluster (an existing cluster file wins).
    #[arg(long, value_parser = choice::<Protocol>(), default_value = "ring-paxos")]
    protocol: Protocol,
    /// Durability of a new cluster (an existing cluster file wins).
    #[arg(long, value_parser = choice::<Durability>(), default_value = "fsync")]
    durability: Durability,
    /// First port of a new cluster; node N listens on BASE+N.
    #[arg(long, default_value_t = 7100)]
    base_port: u16,
    /// Key-value service: the first replica serves etcd's v3 API at 127.0.0.1:PORT
    /// (the others at the next free ports); written into the cluster file.
    #[arg(long, default_value_t = 2379)]
    etcd_port: u16,
    #[command(flatten)]
    partitioning: PartitionArgs,
    /// Limit every node process to FRACTION of one core (a cgroup CPU quota of its own),
    /// emulating one machine per node.
    #[arg(long, value_name = "FRACTION", value_parser = partita_harness::node_cpu::parse_fraction_arg)]
    node_cpu: Option<f64>,
    /// Threads of each node's runtime (`partita node --runtime-threads`).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    node_threads: u32,
    /// A thread per role in each node: connections on a thread of their own beside the
    /// event loop (`partita node --io-thread`).
    #[arg(long, conflicts_with = "node_threads")]
    node_io_thread: bool,
    /// Each node in a network namespace of its own (10.99.0.N), joined by a bridge,
    /// with mutual TLS, as on separate machines (root). This process and its clients
    /// live in a client namespace; the namespaces go when it stops.
    #[arg(long)]
    netns: bool,
    /// Paper 004's wide-area deployment, emulated on this machine: three nodes, one
    /// per region (California, Virginia, Europe; each an acceptor and a replica), the
    /// paper's round trips between them (`[wan] preset = "paper"`). With --ordering
    /// geopaxos+, geopaxos or epaxos each region orders locally what it alone touches; with
    /// --service kv node N's etcd endpoint is the region's (Europe: the third).
    #[arg(long, conflicts_with = "netns")]
    wan: bool,
    /// etcd's layout: three nodes, each an acceptor and a replica (node 1 coordinates;
    /// with --service kv each serves etcd's API), instead of 3 acceptors and 2
    /// replicas. `scripts/etcd-bench` compares etcd's three members with these.
    #[arg(long, conflicts_with_all = ["wan", "partitions", "rings", "batchers"])]
    members: bool,
}

/// State partitioning of a new cluster (paper 001 §III-C).
#[derive(Args, Debug, Clone)]
struct PartitionArgs {
    /// Cut the B+tree into this many equal key ranges, each with its own replicas.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    partitions: u32,
    /// Replicas per partition (with --partitions; default: 2).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    replicas_per_partition: u32,
    /// Keys 0..KEY_SPACE are split among the partitions (the last also takes every key
    /// above). Default: 2^32 for `up` (for the key-value store 2^63 - 1, the largest a
    /// cluster file holds, over keys' first eight bytes); the workload's key space for
    /// `bench`.
    #[arg(long)]
    key_space: Option<u64>,
    /// Add N standalone batchers: clients send their commands to them, and they batch
    /// them to the leader (one message per batch instead of one per command).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=16))]
    batchers: u32,
    /// Every replica batches too: each client enters at the replica that answers it,
    /// so one connection carries its requests and replies (fewer packets per command),
    /// and the replicas batch commands to the leader.
    #[arg(long)]
    replicas_batch: bool,
    /// Ring Paxos: where an instance is decided, at the acceptor whose vote completes
    /// a majority (the ring starts at the coordinator) or at the coordinator at the
    /// end of the ring (paper 001's layout; one vote hop and one relay more). Unset:
    /// the cluster file's default, acceptor.
    #[arg(long, value_parser = choice::<RingDecision>())]
    ring_decision: Option<RingDecision>,
    /// Bytes of zeros each WAL segment is extended by ahead of its records (with
    /// fsync; 0: off). Unset: the cluster file's default, 1 MiB.
    #[arg(long, value_name = "BYTES")]
    wal_preallocate: Option<u64>,
    /// Multi-Ring Paxos (paper 002): order with this many rings, each with acceptors
    /// of its own (as many as the first ring's), merged at every replica.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=16))]
    rings: u32,
    /// Multi-Ring Paxos: instances of each ring per round of the merge (M).
    #[arg(long, default_value_t = 1, requires = "rings")]
    ring_m: u64,
    #[command(flatten)]
    exec: ExecutionArgs,
    /// The ordering protocol of a new cluster (the cluster file's `[ordering]
    /// protocol`): ring-paxos, multi-paxos, multi-ring (a ring per partition and one
    /// across them, or two over one partition: see --rings), geopaxos+, geopaxos or epaxos (three
    /// nodes, each an acceptor and a replica; clients at the nearest). Unset:
    /// --protocol's stream, or Multi-Ring Paxos with --rings.
    #[arg(long, value_parser = choice::<OrderingProtocol>(), conflicts_with = "rings")]
    ordering: Option<OrderingProtocol>,
}

/// How replicas execute, for a new cluster (the cluster file's `[execution]`).
#[derive(Args, Debug, Clone, Default)]
struct ExecutionArgs {
    /// The execution model: sequential, speculative (Ring Paxos proposals executed
    /// before they are decided: paper 001), psmr or opt-psmr (worker threads, see
    /// --threads: paper 002), ssmr or dssmr (Chirper's partitions, with DS-SMR's
    /// oracle taking a partition of its own after the data partitions: paper 003).
    /// Unset: psmr with --threads, dssmr for Chirper, else sequential.
    #[arg(long, value_parser = choice::<ExecutionModel>())]
    execution: Option<ExecutionModel>,
    /// P-SMR: this many worker threads per replica, on OS threads over the shared
    /// state, each owning an equal range of the keys (inside partitions, of its
    /// partition's keys); 2 with --execution psmr or opt-psmr when unset. With --rings
    /// N, N must equal it: a ring per thread's group and one for g_all.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    threads: Option<u32>,
    /// With --execution speculative: the chosen replica replies at once, tentatively,
    /// and confirms once decided (paper 001 §VII).
    #[arg(long)]
    early_replies: bool,
}

impl ExecutionArgs {
    /// The model for a new cluster of `service`, and its worker threads (0 unless
    /// P-SMR).
    fn model(&self, service: &str) -> anyhow::Result<(ExecutionModel, usize)> {
        let model = self.execution.unwrap_or(match (self.threads, service) {
            (Some(_), _) => ExecutionModel::Psmr,
            (None, "chirper") => ExecutionModel::Dssmr,
            (None, _) => ExecutionModel::Sequential,
        });
        let psmr = matches!(model, ExecutionModel::Psmr | ExecutionModel::OptPsmr);
        if self.threads.is_some() && !psmr {
            bail!("--threads sets P-SMR's worker threads: it needs --execution psmr or opt-psmr, not {model}");
        }
        if self.early_replies && model != ExecutionModel::Speculative {
            bail!("--early-replies needs --execution speculative, not {model}");
        }
        let threads = if psmr {
            self.threads.unwrap_or(2) as usize
        } else {
            0
        };
        Ok((model, threads))
    }

    /// The `[execution]` section of a new cluster of `service` whose P-SMR threads
    /// split `0..=key_max` (S-SMR and DS-SMR with their defaults).
    fn section(&self, service: &str, key_max: u64) -> anyhow::Result<ExecutionSection> {
        let (model, threads) = self.model(service)?;
        Ok(match model {
            ExecutionModel::Sequential => ExecutionSection::Sequential,
            ExecutionModel::Speculative => ExecutionSection::speculative(self.early_replies),
            ExecutionModel::Psmr | ExecutionModel::OptPsmr => {
                ExecutionSection::psmr(threads, model == ExecutionModel::OptPsmr, Some(key_max))
            }
            ExecutionModel::Ssmr => ExecutionSection::Ssmr,
            ExecutionModel::Dssmr => ExecutionSection::Dssmr(Default::default()),
        })
    }
}

impl PartitionArgs {
    /// A new cluster of `service` on S-SMR or DS-SMR (paper 003) from `c`: Chirper
    /// with the default social graph, or the key-value store; DS-SMR's oracle takes a
    /// partition after the data partitions, these arguments' partitions.
    fn apply_objects(&self, mut c: ClusterConfig, service: &str) -> anyhow::Result<ClusterConfig> {
        c.cluster.service = service.into();
        if service == "chirper" {
            c.chirper = Some(partita_config::ChirperSection::default());
        }
        let mut partitioning = self.clone();
        if self.exec.model(service)?.0 == ExecutionModel::Dssmr {
            partitioning.partitions += 1;
        }
        partitioning.apply(c, 1 << 32)
    }

    /// Apply to a new cluster; one partition and no batchers leave it alone.
    fn apply(&self, c: ClusterConfig, default_key_space: u64) -> anyhow::Result<ClusterConfig> {
        let c = if self.partitions == 1 && self.key_space.is_none() {
            c
        } else {
            c.with_partitions(
                self.partitions,
                self.replicas_per_partition,
                self.key_space.unwrap_or(default_key_space),
            )
            .map_err(|e| anyhow::anyhow!("--partitions: {e}"))?
        };
        let mut c = c
            .with_batchers(self.batchers)
            .map_err(|e| anyhow::anyhow!("--batchers: {e}"))?;
        if let Some(b) = self.wal_preallocate {
            c = c
                .with_wal_preallocate(b)
                .map_err(|e| anyhow::anyhow!("--wal-preallocate: {e}"))?;
        }
        if let Some(d) = self.ring_decision {
            c = c
                .with_ring_decision(d)
                .map_err(|e| anyhow::anyhow!("--ring-decision: {e}"))?;
        }
        if self.replicas_batch {
            c = c
                .with_replicas_batching()
                .map_err(|e| anyhow::anyhow!("--replicas-batch: {e}"))?;
        }
        let key_max = self.key_space.unwrap_or(default_key_space).max(1) - 1;
        c.execution = self.exec.section(&c.cluster.service, key_max)?;
        let c = ClusterConfig::parse(&c.to_toml(), "--execution")
            .map_err(|e| anyhow::anyhow!("--execution {}: {e}", c.execution.model()))?;
        if let Some(o) = self.ordering {
            return c
                .with_ordering(o, 3)
                .map_err(|e| anyhow::anyhow!("--ordering {o}: {e}"));
        }
        if self.rings == 0 {
            return Ok(c);
        }
        c.with_multiring(self.rings, self.ring_m)
            .map_err(|e| anyhow::anyhow!("--rings: {e}"))
    }
}

/// A bench workload: a base name, or one with parameters (`geo-R@P/N`).
fn parse_workload(s: &str) -> Result<Workload, String> {
    s.parse::<Workload>().map_err(|e| {
        format!("{e}; also geo-R, geo-R@P/N, geo-R@local or geo-R@zipf on a GeoPaxos+ cluster")
    })
}

/// A value parser for one of the named choices (protocol, durability, mode, workload):
/// the same type as the cluster file's, its names listed in `--help` and in the error.
pub(crate) fn choice<T: Choice + Clone>() -> impl clap::builder::TypedValueParser<Value = T> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(T::NAMES)
        .map(|s| s.parse::<T>().expect("a listed name parses"))
}

#[derive(Args, Debug)]
struct NodeArgs {
    #[arg(long)]
    cluster: PathBuf,
    #[arg(long)]
    id: u32,
    /// Where the node keeps its state (a `node-ID` directory is made inside).
    #[arg(long, default_value = "partita-data")]
    data_dir: PathBuf,
    /// Plant a known bug (for tests of the checks): lose-acked-writes, reexecute-duplicates.
    #[arg(long = "unsafe")]
    unsafe_bugs: Vec<String>,
    /// Crash the process (abort) the Nth time it reaches a point of its file code, for
    /// tests of recovery: NAME=N, NAME one of wal-append, wal-fsync, wal-roll,
    /// wal-segment-rename, wal-truncate, checkpoint-write, checkpoint-rename,
    /// checkpoint-remove; or make the Nth WAL fsync fail with an I/O error
    /// (wal-fsync-error).
    #[arg(long, value_name = "NAME=N", value_parser = parse_failpoint)]
    failpoint: Option<String>,
    /// Threads of the node's runtime: 1 runs everything (the event loop, every
    /// connection's reads, decoding, encoding and writes) on one thread; N > 1 lets the
    /// connections' work run beside the event loop on N threads. The WAL's fsync has
    /// its own thread either way.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    runtime_threads: u32,
    /// A thread per role: every connection (accepting, TLS, reading and decoding
    /// frames, encoding and writing) on a thread of its own, the event loop (ordering,
    /// execution, replies) on the main thread. With --runtime-threads 1 only.
    #[arg(long, conflicts_with = "runtime_threads")]
    io_thread: bool,
}

/// `partita node`'s arguments for `threads` runtime threads (none for the default, 1)
/// or, with `io_thread`, a thread per role.
fn runtime_threads_args(threads: u32, io_thread: bool) -> Vec<String> {
    if io_thread {
        vec!["--io-thread".into()]
    } else if threads == 1 {
        Vec::new()
    } else {
        vec!["--runtime-threads".into(), threads.to_string()]
    }
}

fn parse_failpoint(spec: &str) -> Result<String, String> {
    let (name, n) = spec
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=N (e.g. wal-fsync=20), got `{spec}`"))?;
    if !partita_wal::failpoint::NAMES.contains(&name) {
        return Err(format!(
            "no failpoint `{name}`; the points are {}",
            partita_wal::failpoint::NAMES.join(", ")
        ));
    }
    match n.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(spec.to_string()),
        _ => Err(format!("N must be a positive integer, got `{n}`")),
    }
}

#[derive(Args, Debug, Clone)]
struct TargetArgs {
    /// Cluster file (default: the one `partita up` wrote in ./partita-data; accepted
    /// anywhere on the command line).
    #[arg(long, global = true)]
    cluster: Option<PathBuf>,
    /// Print JSON (accepted anywhere on the command line).
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Args, Debug)]
struct ChirperArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[command(subcommand)]
    op: ChirperOp,
}

/// Users are named COMMUNITY:INDEX (e.g. 3:17) or by their numeric id.
#[derive(Subcommand, Debug)]
enum ChirperOp {
    /// USER posts TEXT (into the timeline of every follower).
    Post { user: String, text: String },
    /// USER follows WHOM (WHOM's posts are copied into USER's timeline).
    Follow { user: String, whom: String },
    /// USER stops following WHOM.
    Unfollow { user: String, whom: String },
    /// USER's timeline.
    Timeline { user: String },
}

fn chirper_user(s: &str) -> anyhow::Result<u64> {
    if let Some((c, i)) = s.split_once(':') {
        let c: u32 = c
            .parse()
            .with_context(|| format!("user `{s}`: community"))?;
        let i: u32 = i.parse().with_context(|| format!("user `{s}`: index"))?;
        return Ok(partita_dssmr::chirper::user_id(c, i));
    }
    s.parse()
        .with_context(|| format!("user `{s}`: COMMUNITY:INDEX or a number"))
}

async fn chirper(a: ChirperArgs) -> anyhow::Result<i32> {
    use partita_dssmr::chirper::{ChirperCommand as C, ChirperReply as R};
    use partita_dssmr::client::Outcome;
    let cluster = load_target(&a.target.cluster)?;
    if cluster.cluster.service != "chirper" {
        bail!(
            "this cluster runs `{}`, not chirper",
            cluster.cluster.service
        );
    }
    let cmd = match &a.op {
        ChirperOp::Post { user, text } => C::Post {
            user: chirper_user(user)?,
            id: rand::random::<u64>() >> 1,
            text: text.clone(),
        },
        ChirperOp::Follow { user, whom } => C::Follow {
            user: chirper_user(user)?,
            whom: chirper_user(whom)?,
        },
        ChirperOp::Unfollow { user, whom } => C::Unfollow {
            user: chirper_user(user)?,
            whom: chirper_user(whom)?,
        },
        ChirperOp::Timeline { user } => C::GetTimeline {
            user: chirper_user(user)?,
        },
    };
    let opts = partita_client::ClientOptions {
        give_up: Duration::from_secs(10),
        ..Default::default()
    };
    let mut c = partita_harness::chirper::chirper_client(&cluster, opts, rand::random())
        .await
        .map_err(|e| anyhow::anyhow!("connecting: {e}"))?;
    let out = c.run(cmd).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let s = c.stats();
    let line = match out {
        Outcome::Done(R::Posted(n)) => format!("posted to {n} followers"),
        Outcome::Done(R::Followed(b)) => format!("followed: {}", if b { "yes" } else { "already" }),
        Outcome::Done(R::Unfollowed(b)) => format!(
            "unfollowed: {}",
            if b { "yes" } else { "was not following" }
        ),
        Outcome::Done(R::Timeline(posts)) => {
            let mut t = format!("{} posts", posts.len());
            for p in posts {
                t.push_str(&format!("\n{}: {}", p.author, p.text));
            }
            t
        }
        Outcome::Done(R::NoUser) | Outcome::Nok => "no such user".into(),
        other => format!("{other:?}"),
    };
    println!("{line}");
    if s.objects_moved + s.retries + s.fallbacks > 0 {
        println!(
            "(moved {} users, {} retries, {} fallbacks)",
            s.objects_moved, s.retries, s.fallbacks
        );
    }
    Ok(0)
}

#[derive(Args, Debug)]
struct KvArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// The replica that must answer (default: one at random).
    #[arg(long)]
    replica: Option<u32>,
    /// The emulated WAN: this client is in REGION of the cluster file's [wan];
    /// requests to and replies from other regions wait their one-way delay.
    #[arg(long, value_name = "REGION")]
    region: Option<String>,
    /// Key-value service: keys and values are hex digits, not text.
    #[arg(long, global = true)]
    hex: bool,
    #[command(subcommand)]
    op: KvOp,
}

/// One operation: the B+tree's verbs (numbers) or the key-value store's (strings);
/// each works only against a cluster running its service.
#[derive(Subcommand, Debug)]
enum KvOp {
    /// Key-value service: store VALUE at KEY.
    Put {
        key: String,
        value: String,
        /// Print the pair as it was before.
        #[arg(long)]
        prev: bool,
        /// Attach the key to this lease (hex, as etcdctl prints ids); its expiry or
        /// revoke deletes the key.
        #[arg(long, value_parser = crate::kvcli::lease_id)]
        lease: Option<i64>,
    },
    /// Key-value service: leases (`grant TTL`, `revoke ID`, `keep-alive ID`,
    /// `ttl ID`, `list`), ids in hex as etcdctl prints them.
    Lease {
        /// grant, revoke, keep-alive, ttl or list.
        verb: String,
        /// The TTL in seconds (grant) or the lease id in hex (the others).
        arg: Option<String>,
    },
    /// Key-value service: the value of KEY, with its revisions and version.
    Get { key: String },
    /// Key-value service: every key in [START, END) (or with prefix START).
    Range {
        start: String,
        end: Option<String>,
        #[arg(long)]
        prefix: bool,
        /// At most N keys (0: all).
        #[arg(long, default_value_t = 0)]
        limit: u64,
    },
    /// Key-value service: delete KEY, or every key in [KEY, END).
    Del {
        key: String,
        end: Option<String>,
        /// Print the deleted pairs.
        #[arg(long)]
        prev: bool,
    },
    /// Key-value service: a transaction, e.g. `txn --compare 'value(a) = 1' --then 'put a 2' --else 'get a'`.
    Txn {
        /// A condition `TARGET(KEY) OP OPERAND` (targets value, version, create, mod;
        /// operators =, !=, <, >); all must hold.
        #[arg(long = "compare")]
        compares: Vec<String>,
        /// Run when every compare holds: `put K V`, `get K [END]`, `del K [END]`.
        #[arg(long = "then")]
        then: Vec<String>,
        /// Run otherwise.
        #[arg(long = "else")]
        otherwise: Vec<String>,
    },
    /// B+tree service: insert KEY VALUE if KEY is absent.
    Insert { key: String, value: String },
    /// Delete KEY, printing the removed value.
    Delete { key: String },
    /// Read KEY.
    Read { key: String },
    /// Replace the value of an existing KEY, printing the old value.
    Update { key: String, value: String },
    /// All entries with MIN <= key <= MAX.
    Query { min: String, max: String },
    /// The smallest entry with key > KEY.
    Next { key: String },
    /// The largest entry with key < KEY.
    Prev { key: String },
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
struct BenchArgs {
    #[command(subcommand)]
    target: Option<BenchTarget>,
    #[command(flatten)]
    run: BenchRunArgs,
}

#[derive(Subcommand, Debug)]
enum BenchTarget {
    /// The B+tree alone against std's BTreeMap.
    Btree {
        #[arg(long, default_value_t = 1_000_000)]
        entries: u64,
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Paper 002's execution models on real OS threads, the replica alone (no
    /// ordering, network or disk): SMR, P-SMR with its threads on one OS thread, P-SMR
    /// and opt-PSMR on OS threads, in turns, over the dependent-P workload.
    Psmr(partita_experiments::replica_bench::ReplicaBenchOptions),
    /// Adding a replica on real processes: for each state size, in interleaved
    /// rounds, a fresh fsync'd local cluster preloaded and under load gets `member
    /// add` of a sixth node; the time to it serving, and throughput before, during
    /// and after.
    Join(partita_harness::join_bench::JoinBenchOptions),
}

#[derive(Args, Debug)]
struct BenchRunArgs {
    /// Cluster file of a running cluster (default: ./partita-data/cluster.toml).
    #[arg(long)]
    cluster: Option<PathBuf>,
    /// Start a fresh cluster for this run (in a temporary directory) and stop it after.
    #[arg(long)]
    up: bool,
    /// With --up: replicated (smr) or one unreplicated server (cs, paper 001's baseline).
    #[arg(long, value_parser = choice::<Mode>(), default_value = "smr")]
    mode: Mode,
    /// With --up: ordering protocol.
    #[arg(long, value_parser = choice::<Protocol>(), default_value = "ring-paxos")]
    protocol: Protocol,
    /// With --up: durability.
    #[arg(long, value_parser = choice::<Durability>(), default_value = "fsync")]
    durability: Durability,
    /// query, update, batch, mixed; on a GeoPaxos+ cluster geo-R (R% reads of the geo
    /// B+tree's operations, keys uniform), geo-R@P/N (keys of range P of N equal ranges
    /// only), geo-R@local (paper 004's locality: 90% of each client's keys in its
    /// region's range) or geo-R@zipf (paper 004's skew: Zipf 0.99, hot keys shared).
    #[arg(long, value_parser = parse_workload, default_value = "update")]
    workload: Workload,
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Seconds of load.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Think time between commands, uniform in 0..=N ms (paper 001: 0..=10).
    #[arg(long, default_value_t = 10)]
    think_ms: u64,
    /// The clients share N connections to each node (each connection carries the
    /// sessions of clients/N clients, as etcd's benchmark shares 16 gRPC connections
    /// among its clients) instead of two connections per client. Needs --think-ms 0.
    #[arg(long, value_name = "N")]
    connections: Option<usize>,
    /// Entries loaded before the run (keys 0, 2, 4, ...; value = key).
    #[arg(long, default_value_t = 1_000_000)]
    preload: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the result as one JSON object.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Record the client history (JSON lines, DESIGN.md format).
    #[arg(long)]
    history: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// With --up: state partitioning and batchers of the cluster.
    #[command(flatten)]
    partitioning: PartitionArgs,
    /// With --up: limit every node process to FRACTION of one core (a cgroup CPU quota
    /// of its own), emulating one machine per node; the bench clients are not limited.
    #[arg(long, value_name = "FRACTION", requires = "up", value_parser = partita_harness::node_cpu::parse_fraction_arg)]
    node_cpu: Option<f64>,
    /// With --up: threads of each node's runtime (`partita node --runtime-threads`).
    #[arg(long, value_name = "N", default_value_t = 1, requires = "up", value_parser = clap::value_parser!(u32).range(1..=64))]
    node_threads: u32,
    /// With --up: a thread per role in each node, connections on a thread of their own
    /// beside the event loop (`partita node --io-thread`).
    #[arg(long, requires = "up", conflicts_with = "node_threads")]
    node_io_thread: bool,
    /// With --up: sample every node's write-ahead log on disk this often while the load
    /// runs (reported, and in the JSON as `wal_bytes`); 0: not at all.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, requires = "up")]
    wal_sample_s: u64,
    /// With --up: after the run, stop each node and start it again from its disk, and
    /// report how long each took to answer (`restart_ms` in the JSON).
    #[arg(long, requires = "up")]
    restart_after: bool,
    /// Chirper (paper 003): run this workload of the social network instead of the
    /// B+tree's, on a chirper cluster (with --up, a fresh one whose --partitions are
    /// data partitions): timeline, post, follow (follow/unfollow 50/50) or mix.
    #[arg(long, value_name = "WORKLOAD", value_parser = ["timeline", "post", "follow", "mix"])]
    chirper: Option<String>,
    /// The key-value store on S-SMR or DS-SMR (paper 003): transactions that each put
    /// both keys of one of N pairs (`pair/I/a`, `pair/I/b`, hashed to partitions, so
    /// that pairs start split), on a kv cluster with [execution] model "ssmr" or
    /// "dssmr" (with --up, a fresh one: give --execution ssmr|dssmr; --partitions
    /// counts data partitions).
    #[arg(long, value_name = "N", conflicts_with = "chirper", value_parser = clap::value_parser!(u64).range(1..))]
    kv_pairs: Option<u64>,
    /// The emulated WAN: every bench client is in REGION of the cluster file's [wan]
    /// (default: as its `[wan] clients` places them); requests to and replies from
    /// other regions wait their one-way delay.
    #[arg(long, value_name = "REGION")]
    region: Option<String>,
    /// With --up: GeoPaxos+ (paper 004) over the emulated WAN of the paper's three
    /// regions, one node each, keys 0..--key-space (default 3000) placed by range
    /// (California's first, Europe's last); run it with --workload geo-R[@P/3].
    #[arg(long, requires = "up")]
    geo: bool,
    /// With --geo: order by EPaxos instead of GeoPaxos+'s serializers (paper 004's
    /// leaderless baseline): the same nodes, keys, service and clients.
    #[arg(long, requires = "geo")]
    epaxos: bool,
    /// With --up: the same three emulated regions and nodes (each an acceptor and a
    /// replica) ordered by one stream of --protocol, led from Virginia: the baseline
    /// GeoPaxos+ is compared with.
    #[arg(long, requires = "up", conflicts_with = "geo")]
    wan: bool,
    /// With --up: mutual TLS between the nodes and from the clients (a fresh CA and
    /// certificates, `partita certs`, in the run's directory).
    #[arg(long, requires = "up")]
    tls: bool,
    /// With --up: every node in a network namespace of its own, joined by a bridge
    /// (veth pairs), and the clients in another, with mutual TLS: as on separate
    /// machines (root).
    #[arg(long, requires = "up")]
    netns: bool,
    /// With --netns: Ring Paxos's Phase 2A values as UDP multicast on the bridge
    /// (`[multicast]`; plain TCP on purpose, since datagrams are not authenticated).
    #[arg(long, requires = "netns")]
    multicast: bool,
    /// With --netns: plain TCP instead of mutual TLS (`[tls] insecure = true`), the
    /// baseline of --multicast.
    #[arg(long, requires = "netns", conflicts_with = "multicast")]
    insecure: bool,
}

#[derive(Args, Debug)]
struct CheckArgs {
    #[arg(long)]
    history: PathBuf,
    /// The history started from a preload of N entries (keys 0, 2, ...; value = key).
    #[arg(long, default_value_t = 0)]
    preload: u64,
}

pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("PARTITA_LOG").unwrap_or_else(|_| {
        let default = if matches!(cli.cmd, Cmd::Node(_)) {
            "info"
        } else {
            "warn"
        };
        tracing_subscriber::EnvFilter::new(default)
    });
    // Colour codes only on a terminal: node logs go to files.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
    // --netns: the run's namespaces first, and this thread into the clients' one, so
    // that every thread of the runtime opens its sockets there.
    let netns = match &cli.cmd {
        Cmd::Up(a) => a.netns,
        Cmd::Nemesis(a) => a.netns,
        Cmd::Bench(a) => a.run.netns,
        Cmd::Experiment(a) => a.netns,
        _ => false,
    };
    if netns {
        if let Err(e) = partita_harness::netns::create().and_then(|t| t.enter_client()) {
            eprintln!("error: --netns: {e:#}");
            partita_harness::netns::teardown();
            return 1;
        }
    }
    let code = run_command(cli);
    if netns {
        partita_harness::netns::teardown();
    }
    code
}

fn run_command(cli: Cli) -> i32 {
    let rt = if let Cmd::Node(a) = &cli.cmd {
        if a.runtime_threads > 1 {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(a.runtime_threads as usize)
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        }
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    }
    .expect("tokio runtime");
    let code = match rt.block_on(dispatch(cli.cmd)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    };
    // Every node this process started has been stopped by now (LocalCluster's drop);
    // the runtime goes before the namespaces do.
    drop(rt);
    code
}

async fn dispatch(cmd: Cmd) -> anyhow::Result<i32> {
    match cmd {
        Cmd::Up(a) => up(a).await,
        Cmd::Node(a) => {
            if let Some(spec) = &a.failpoint {
                partita_wal::failpoint::arm_spec(spec).map_err(|e| anyhow::anyhow!(e))?;
            }
            let cluster = ClusterConfig::load(&a.cluster)?;
            let service = partita_harness::services::for_cluster(&cluster, &a.unsafe_bugs)?;
            // A replica with an `etcd_addr` serves etcd's API from this process too.
            if let Some(addr) = cluster.node(a.id).and_then(|n| n.etcd_addr.clone()) {
                let listener = tokio::net::TcpListener::bind(&addr)
                    .await
                    .with_context(|| format!("node {}: binding etcd_addr {addr}", a.id))?;
                tracing::info!("serving etcd's v3 API at {addr}");
                let (cluster, id) = (cluster.clone(), a.id);
                let planted = partita_etcd::Planted {
                    ack_keepalives_unordered: a
                        .unsafe_bugs
                        .iter()
                        .any(|b| b == "etcd-ack-keepalives-unordered"),
                    expire_leases_early: a
                        .unsafe_bugs
                        .iter()
                        .any(|b| b == "etcd-expire-leases-early"),
                };
                tokio::spawn(async move {
                    if let Err(e) = partita_etcd::serve(listener, cluster, id, planted).await {
                        tracing::error!("etcd gateway at {addr} stopped: {e:#}");
                    }
                });
            }
            partita_runtime::run_node(NodeOptions {
                service,
                cluster,
                id: a.id,
                data_dir: a.data_dir,
                unsafe_bugs: a.unsafe_bugs,
                io_thread: a.io_thread,
            })
            .await?;
            Ok(0)
        }
        Cmd::Status(t) => status(t).await,
        Cmd::Snapshot(a) => snapshot(a).await,
        Cmd::Member(a) => {
            let cluster = load_target(&a.target.cluster)?;
            match a.op {
                MemberOp::List => crate::member::list(&cluster, a.target.json).await?,
                MemberOp::Add {
                    id,
                    addr,
                    learner,
                    partition,
                    acceptor,
                } => {
                    let replica = crate::member::NewReplica { learner, partition };
                    crate::member::add(&cluster, id, addr, replica, acceptor).await?
                }
                MemberOp::Remove { id, acceptor } => {
                    crate::member::remove(&cluster, id, acceptor).await?
                }
                MemberOp::Promote { id } => crate::member::promote(&cluster, id).await?,
            }
            Ok(0)
        }
        Cmd::Kv(a) => kv(a).await,
        Cmd::Chirper(a) => chirper(a).await,
        Cmd::Bench(a) => match a.target {
            Some(BenchTarget::Btree { entries, json }) => bench_btree(entries, json),
            Some(BenchTarget::Psmr(o)) => {
                use partita_experiments::replica_bench as rb;
                println!("configuration: {}", rb::describe(&o));
                tokio::task::block_in_place(|| rb::run(&o, |p| println!("{}", rb::line(p))))?;
                Ok(0)
            }
            Some(BenchTarget::Join(o)) => {
                use partita_harness::join_bench as jb;
                let exe = std::env::current_exe()?;
                jb::run(&exe, &o, |r| println!("{}", r.line())).await?;
                Ok(0)
            }
            None => bench_cluster(a.run).await,
        },
        Cmd::Check(a) => partita_harness::history::check_command(&a.history, a.preload),
        Cmd::Sim(a) => crate::sim::run(a),
        Cmd::Nemesis(a) => nemesis(a).await,
        Cmd::Experiment(a) => experiment(a).await,
        Cmd::Calibrate(a) => calibrate(a),
        Cmd::Certs(a) => certs(a),
        Cmd::Dashboard(a) => {
            let cluster = load_target(&a.cluster)?;
            let mut sigterm =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            let stop = async move {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = sigterm.recv() => {}
                }
            };
            partita_harness::dashboard::run(cluster, a.addr, !a.no_probe, stop).await?;
            Ok(0)
        }
    }
}

fn certs(a: CertsArgs) -> anyhow::Result<i32> {
    use partita_harness::certs;
    if !(1..=36_500).contains(&a.days) {
        bail!("--days must be between 1 and 36500");
    }
    let (w, changed) = match (&a.cluster, a.nodes) {
        (Some(file), _) => certs::certs_for_cluster_file(&a.out, file, a.days, a.force)?,
        (None, Some(n)) => {
            if !(1..=1000).contains(&n) {
                bail!("--nodes must be between 1 and 1000");
            }
            let nodes: Vec<(u32, Option<String>)> = (1..=n).map(|id| (id, None)).collect();
            (certs::write_certs(&a.out, &nodes, a.days, a.force)?, false)
        }
        (None, None) => bail!("give --nodes N or --cluster FILE"),
    };
    println!(
        "{} in {}: certificates for node{} {} and a client certificate, valid {} days",
        if w.ca_reused {
            "kept the CA"
        } else {
            "wrote a new CA"
        },
        w.dir.display(),
        if w.nodes.len() == 1 { "" } else { "s" },
        w.nodes
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        a.days
    );
    println!("keep ca.key off the nodes: it signs certificates the cluster trusts");
    match (&a.cluster, changed) {
        (Some(file), true) => println!("added a [tls] section to {}", file.display()),
        (Some(file), false) => println!(
            "{} already has a [tls] section; left as it is. The files written are:\n\n{}",
            file.display(),
            certs::section_toml(&w.section)
        ),
        (None, _) => println!(
            "add this to the cluster file:\n\n{}",
            certs::section_toml(&w.section)
        ),
    }
    Ok(0)
}

fn default_cluster_file() -> PathBuf {
    PathBuf::from("partita-data").join("cluster.toml")
}

fn load_target(cluster: &Option<PathBuf>) -> anyhow::Result<ClusterConfig> {
    let path = cluster.clone().unwrap_or_else(default_cluster_file);
    if cluster.is_none() && !path.exists() {
        bail!(
            "no cluster file at {}: start a cluster with `partita up`, or pass --cluster FILE",
            path.display()
        );
    }
    Ok(ClusterConfig::load(&path)?)
}

async fn up(a: UpArgs) -> anyhow::Result<i32> {
    let (file, cluster) = launch::ensure_cluster_file(&a.data_dir, || {
        let id = rand::random::<u64>() >> 1;
        let mut c = match (a.wan, a.members) {
            (true, _) => ClusterConfig::paper_wan_local(a.base_port, id),
            (false, true) => ClusterConfig::members_local(a.base_port, id),
            (false, false) => ClusterConfig::default_local(a.base_port, id),
        };
        c.set_protocol(a.protocol);
        c.cluster.service = a.service.clone();
        // Byte-string keys fall in partitions by their first eight bytes (the 64-bit
        // space, as much of it as a cluster file holds: positions above fall in the
        // last partition); the B+tree's u64 keys by value over 0..2^32.
        let key_space = if a.service == "kv" {
            partita_config::INT_MAX
        } else {
            1 << 32
        };
        let objects = a.service == "chirper"
            || (a.service == "kv"
                && matches!(
                    a.partitioning.exec.model("kv")?.0,
                    ExecutionModel::Ssmr | ExecutionModel::Dssmr
                ));
        let mut c = if objects {
            a.partitioning.apply_objects(c, &a.service)?
        } else {
            a.partitioning.apply(c, key_space)?
        };
        c.cluster.durability = a.durability;
        // etcd's API: on one store, or on the keys as objects of S-SMR/DS-SMR.
        if a.service == "kv" && (c.partitioning.partitions == 1 || objects) && !a.netns {
            assign_etcd_addrs(&mut c, a.etcd_port);
        }
        if a.netns {
            partita_harness::netns::place(&mut c, &a.data_dir.join("certs"))?;
        }
        Ok(c)
    })?;
    if a.netns && !partita_harness::netns::is_placed(&cluster) {
        bail!(
            "--netns: the cluster file in {} was written for loopback addresses; give \
             another --data-dir for a cluster on network namespaces",
            a.data_dir.display()
        );
    }
    if !a.netns && partita_harness::netns::is_placed(&cluster) {
        bail!(
            "the cluster file in {} puts the nodes on network namespaces: run `partita up \
             --netns` on it, or give another --data-dir",
            a.data_dir.display()
        );
    }
    let node_args = runtime_threads_args(a.node_threads, a.node_io_thread);
    let mut lc = LocalCluster::start(&file, &cluster, &a.data_dir, &node_args, a.node_cpu)?;
    if let Err(e) = lc.wait_ready(Duration::from_secs(20)).await {
        lc.stop(Duration::from_secs(5));
        return Err(e);
    }
    let threads = match cluster.execution.threads() {
        0 => String::new(),
        n => format!(" ({n} threads)"),
    };
    println!(
        "Partita is up: {} nodes, service {}, {}, execution {}{threads}, durability {}",
        cluster.nodes.len(),
        cluster.cluster.service,
        cluster.ordering.protocol(),
        cluster.execution.model(),
        cluster.cluster.durability
    );
    if let Some(c) = lc.cpu_label() {
        println!("  {c}");
    }
    for n in &cluster.nodes {
        let roles: Vec<String> = n
            .roles
            .iter()
            .map(|r| format!("{r:?}").to_lowercase())
            .collect();
        let coord = if cluster.cluster.coordinator == Some(n.id) {
            " (coordinator)"
        } else {
            ""
        };
        println!("  node {}  {}  {}{}", n.id, n.addr, roles.join("+"), coord);
    }
    let etcd = cluster.etcd_endpoints();
    if !etcd.is_empty() {
        let list: Vec<&str> = etcd.iter().map(|(_, a)| a.as_str()).collect();
        println!("etcd v3 API (etcdctl): {}", list.join(","));
    }
    println!(
        "cluster file: {}   logs: {}/node-N.log",
        file.display(),
        a.data_dir.display()
    );
    let prefix = if a.data_dir == Path::new("partita-data") {
        String::new()
    } else {
        format!(" --cluster {}", file.display())
    };
    let run = match partita_harness::netns::current() {
        Some(t) => {
            println!(
                "network namespaces: node N in {}, at 10.99.0.N; clients in {} (10.99.255.1); \
                 mutual TLS, certificates in {}/certs",
                t.node_ns_pattern(),
                t.client_ns(),
                a.data_dir.display()
            );
            format!("ip netns exec {} ", t.client_ns())
        }
        None => String::new(),
    };
    if let Some((_, addr)) = etcd.first() {
        println!("try:  ETCDCTL_API=3 etcdctl --endpoints {addr} put foo bar");
    }
    if cluster.cluster.service == "kv" {
        println!("try:  {run}cargo run --release -- kv{prefix} put greeting hello");
        println!("      {run}cargo run --release -- kv{prefix} range greet --prefix");
    } else if cluster.cluster.service == "chirper" {
        println!("try:  {run}cargo run --release -- chirper{prefix} follow 0:1 0:0");
        println!("      {run}cargo run --release -- chirper{prefix} post 0:0 hello");
        println!("      {run}cargo run --release -- chirper{prefix} timeline 0:1");
    } else {
        println!("try:  {run}cargo run --release -- kv{prefix} insert 1 100");
        println!("      {run}cargo run --release -- kv{prefix} query 0 1000");
    }
    println!("      {run}cargo run --release -- status{prefix}");
    // The load that fits the service and its execution model.
    let load = match (
        cluster.cluster.service.as_str(),
        cluster.execution.is_ssmr(),
    ) {
        ("chirper", _) => "--chirper mix",
        ("kv", true) => "--kv-pairs 1000",
        _ => "--workload batch",
    };
    println!("      {run}cargo run --release -- bench{prefix} {load} --clients 8 --think-ms 0");
    println!("Ctrl-C stops the cluster.");
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let code = loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break 0,
            _ = sigterm.recv() => break 0,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                for (id, c) in &mut lc.children {
                    if let Ok(Some(st)) = c.try_wait() {
                        eprintln!("node {id} exited ({st}); see {}/node-{id}.log", a.data_dir.display());
                    }
                }
                lc.children.retain_mut(|(_, c)| !matches!(c.try_wait(), Ok(Some(_))));
                if lc.children.is_empty() { break 1; }
            }
        }
    };
    println!("stopping every node...");
    lc.stop(Duration::from_secs(10));
    println!("stopped; data kept in {}", a.data_dir.display());
    Ok(code)
}

async fn snapshot(a: SnapshotArgs) -> anyhow::Result<i32> {
    match a.op {
        SnapshotOp::Save { file, target, node } => {
            let cluster = load_target(&target.cluster)?;
            crate::backup::save(&cluster, node, &file).await?;
        }
        SnapshotOp::Status { file, json } => crate::backup::status(&file, json)?,
        SnapshotOp::Restore {
            file,
            data_dir,
            cluster,
            base_port,
            members,
            etcd_port,
        } => {
            let template = cluster.as_deref().map(ClusterConfig::load).transpose()?;
            crate::backup::restore(&file, &data_dir, template, |service, id| {
                let mut c = match members {
                    true => ClusterConfig::members_local(base_port, id),
                    false => ClusterConfig::default_local(base_port, id),
                };
                c.cluster.service = service.to_string();
                if service == "kv" {
                    assign_etcd_addrs(&mut c, etcd_port);
                }
                c
            })?;
        }
    }
    Ok(0)
}

/// Give every replica of a new kv cluster an etcd endpoint: the first at
/// `127.0.0.1:first` (etcd's 2379 by default), the others at the next free ports;
/// a port in use now is skipped.
fn assign_etcd_addrs(c: &mut ClusterConfig, first: u16) {
    let taken: Vec<String> = c.nodes.iter().map(|n| n.addr.clone()).collect();
    let mut port = first;
    for n in c
        .nodes
        .iter_mut()
        .filter(|n| n.roles.contains(&Role::Replica))
    {
        while port < u16::MAX
            && (taken.contains(&format!("127.0.0.1:{port}"))
                || std::net::TcpListener::bind(("127.0.0.1", port)).is_err())
        {
            port += 1;
        }
        n.etcd_addr = Some(format!("127.0.0.1:{port}"));
        port = port.saturating_add(1);
    }
}

async fn status(t: TargetArgs) -> anyhow::Result<i32> {
    let cluster = load_target(&t.cluster)?;
    let mut rows = Vec::new();
    for n in &cluster.nodes {
        let s = partita_client::node_status_of(&cluster, n.id, Duration::from_secs(1)).await;
        rows.push((n.clone(), s));
    }
    // The replicas as the node that knows most of their changes says (`partita
    // member`): a removed node is expected not to answer.
    let members =
        crate::member::newest(rows.iter().filter_map(|(_, s)| s.as_ref())).filter(|m| m.epoch > 0);
    let removed = |id: u32| members.as_ref().is_some_and(|m| m.removed.contains(&id));
    let all_up = rows.iter().all(|(n, s)| s.is_some() || removed(n.id));
    if t.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|(n, s)| serde_json::json!({"node": n.id, "addr": n.addr, "answers": s.is_some(), "status": s}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{:<5} {:<22} {:<22} {:<8} {:>10} {:>10}  digest",
            "node", "addr", "roles", "answers", "decided", "executed"
        );
        for (n, s) in &rows {
            match s {
                Some(s) => println!(
                    "{:<5} {:<22} {:<22} {:<8} {:>10} {:>10}  {}",
                    n.id,
                    n.addr,
                    s.roles.join("+"),
                    "yes",
                    s.decided_up_to.map(|d| d.to_string()).unwrap_or("-".into()),
                    s.executed_up_to
                        .map(|d| d.to_string())
                        .unwrap_or("-".into()),
                    s.digest
                        .map(|d| format!("{d:016x} ({} entries)", s.entries.unwrap_or(0)))
                        .unwrap_or("-".into())
                ),
                None if removed(n.id) => {
                    println!("{:<5} {:<22} {:<22} {:<8}", n.id, n.addr, "removed", "no")
                }
                None => println!("{:<5} {:<22} {:<22} {:<8}", n.id, n.addr, "?", "no"),
            }
            match s.as_ref().and_then(|s| s.replica_state.as_deref()) {
                Some("learner") => {
                    println!("      a learner, catching up: it answers no client yet")
                }
                Some("joining") => println!(
                    "      joining: not added yet (`partita member add {}`)",
                    n.id
                ),
                _ => {}
            }
            if let Some(why) = s.as_ref().and_then(|s| s.wal_stall.as_ref()) {
                println!("      NOT VOTING: {why}");
            }
            if let Some(line) = s.as_ref().and_then(batcher_line) {
                println!("      {line}");
            }
        }
        if let Some(m) = &members {
            let learners: Vec<String> = m
                .replicas
                .iter()
                .filter(|(_, r)| r.learner)
                .map(|(id, _)| id.to_string())
                .collect();
            let ids = |v: Vec<&u32>| v.iter().map(|i| i.to_string()).collect::<Vec<_>>();
            println!(
                "configuration epoch {} (last change at position {}): replicas {}{}{}",
                m.epoch,
                m.at,
                ids(m.replicas.keys().collect()).join(", "),
                match learners.is_empty() {
                    true => String::new(),
                    false => format!("; learners {}", learners.join(", ")),
                },
                match m.removed.is_empty() {
                    true => String::new(),
                    false => format!("; removed {}", ids(m.removed.iter().collect()).join(", ")),
                }
            );
        }
    }
    Ok(if all_up { 0 } else { 1 })
}

/// A batcher's counters in one line ("batcher: 120 batches of 3400 commands (28.3 per
/// batch), 2 resends, 0 abandoned, 0 refused"), if the node batches.
fn batcher_line(s: &partita_wire::NodeStatus) -> Option<String> {
    let c = |k: &str| s.counter(k);
    let batches = c("batcher_batches_sent")?;
    Some(format!(
        "batcher: {batches} batches of {} commands ({:.1} per batch), {} resends, {} abandoned, {} refused, {} buffered",
        c("batcher_commands_forwarded").unwrap_or(0),
        c("batcher_mean_batch_commands_x100").unwrap_or(0) as f64 / 100.0,
        c("batcher_resends").unwrap_or(0),
        c("batcher_batches_abandoned").unwrap_or(0),
        c("batcher_commands_refused").unwrap_or(0),
        c("batcher_buffered").unwrap_or(0),
    ))
}

fn parse_key(what: &str, s: &str) -> anyhow::Result<u64> {
    s.parse::<u64>().map_err(|_| {
        anyhow::anyhow!(
            "{what} `{s}` is not an unsigned 64-bit integer (0..={})",
            u64::MAX
        )
    })
}

async fn kv(a: KvArgs) -> anyhow::Result<i32> {
    let cluster = load_target(&a.target.cluster)?;
    if let Some(r) = a.replica {
        if !cluster.executors().contains(&r) {
            bail!(
                "node {r} is not a replica of this cluster (replicas: {:?})",
                cluster.executors()
            );
        }
    }
    let opts = partita_client::ClientOptions {
        replica: a.replica,
        give_up: Duration::from_secs(5),
        region: a.region.clone(),
        ..Default::default()
    };
    let hex = a.hex;
    let kv_cmd = match &a.op {
        KvOp::Put {
            key,
            value,
            prev,
            lease,
        } => Some(crate::kvcli::put(
            key,
            value,
            *prev,
            lease.unwrap_or(0),
            hex,
        )?),
        KvOp::Lease { verb, arg } => Some(crate::kvcli::lease(verb, arg.as_deref())?),
        KvOp::Get { key } => Some(crate::kvcli::get(key, hex)?),
        KvOp::Range {
            start,
            end,
            prefix,
            limit,
        } => Some(crate::kvcli::range(
            start,
            end.as_deref(),
            *prefix,
            *limit,
            hex,
        )?),
        KvOp::Del { key, end, prev } => Some(crate::kvcli::del(key, end.as_deref(), *prev, hex)?),
        KvOp::Txn {
            compares,
            then,
            otherwise,
        } => Some(crate::kvcli::txn(compares, then, otherwise, hex)?),
        _ => None,
    };
    let service = partita_config::services::speaks(&cluster.cluster.service).to_string();
    if let Some(cmd) = kv_cmd {
        if service != "kv" {
            bail!(
                "this cluster runs the `{service}` service; put, get, range, del and txn are \
                 the key-value service's verbs (the B+tree's: insert, delete, read, update, \
                 query, next, prev)"
            );
        }
        // What this cluster's store does not serve is refused before anything is sent.
        partita_kv::check(&cmd).map_err(anyhow::Error::msg)?;
        if let Some(why) = partita_client::kv::unsupported(&cluster, &cmd) {
            bail!("{why}");
        }
        let mut client = partita_client::kv::KvClient::connect(&cluster, opts).await?;
        let reply = client.execute(cmd.clone()).await?;
        if a.target.json {
            println!(
                "{}",
                serde_json::to_string(&partita_kv::history::result_json(&cmd, &reply))?
            );
        } else {
            println!("{}", crate::kvcli::describe(&reply, hex));
        }
        // A request the store refused (a put naming a lease that is gone) fails.
        return Ok(i32::from(matches!(reply, partita_kv::KvReply::Error(_))));
    }
    if service != "btree" {
        bail!(
            "this cluster runs the `{service}` service; insert, delete, read, update, query, \
             next and prev are the B+tree's verbs{}",
            if service == "kv" {
                " (the key-value service's: put, get, range, del, txn)"
            } else {
                ""
            }
        );
    }
    let op = match &a.op {
        KvOp::Insert { key, value } => Op::Insert {
            key: parse_key("key", key)?,
            value: parse_key("value", value)?,
        },
        KvOp::Delete { key } => Op::Delete {
            key: parse_key("key", key)?,
        },
        KvOp::Read { key } => Op::Read {
            key: parse_key("key", key)?,
        },
        KvOp::Update { key, value } => Op::Update {
            key: parse_key("key", key)?,
            value: parse_key("value", value)?,
        },
        KvOp::Query { min, max } => Op::Query {
            min: parse_key("min", min)?,
            max: parse_key("max", max)?,
        },
        KvOp::Next { key } => Op::Next {
            key: parse_key("key", key)?,
        },
        KvOp::Prev { key } => Op::Prev {
            key: parse_key("key", key)?,
        },
        _ => unreachable!("the key-value verbs returned above"),
    };
    let mut client =
        partita_client::Client::<partita_btree::BPlusTree>::connect(cluster, opts).await?;
    let result = client.execute(op.clone()).await?;
    if a.target.json {
        println!(
            "{}",
            serde_json::to_string(&partita_harness::history::result_json(&op, &result))?
        );
    } else {
        println!("{}", describe(&result));
    }
    Ok(0)
}

fn describe(r: &OpResult) -> String {
    let opt = |v: &Option<u64>| {
        v.map(|x| x.to_string())
            .unwrap_or_else(|| "(absent)".into())
    };
    match r {
        OpResult::Inserted(true) => "inserted".into(),
        OpResult::Inserted(false) => "not inserted: key exists".into(),
        OpResult::Removed(v) => format!("removed: {}", opt(v)),
        OpResult::Value(v) => opt(v),
        OpResult::Old(None) => "not updated: key absent".into(),
        OpResult::Old(v) => format!("updated; old value: {}", opt(v)),
        OpResult::Entries(e) => {
            let mut s = format!("{} entries", e.len());
            for (k, v) in e.iter().take(1000) {
                s.push_str(&format!("\n{k} {v}"));
            }
            if e.len() > 1000 {
                s.push_str("\n...");
            }
            s
        }
        OpResult::Entry(Some((k, v))) => format!("{k} {v}"),
        OpResult::Entry(None) => "(none)".into(),
        OpResult::Batch(rs) => rs.iter().map(describe).collect::<Vec<_>>().join("\n"),
    }
}

fn bench_btree(entries: u64, json: Option<PathBuf>) -> anyhow::Result<i32> {
    let cfg = partita_btree::bench::BenchConfig {
        entries,
        ..Default::default()
    };
    let report = partita_btree::bench::run(&cfg);
    println!("{report}");
    if let Some(p) = json {
        std::fs::write(&p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(0)
}

async fn bench_cluster(a: BenchRunArgs) -> anyhow::Result<i32> {
    if a.clients == 0 || a.clients > 10_000 {
        bail!("--clients must be between 1 and 10000");
    }
    if !(a.duration > 0.0 && a.duration <= 86_400.0) {
        bail!("--duration must be between 0 and 86400 seconds");
    }
    if let Some(c) = a.connections {
        if c == 0 || c > a.clients {
            bail!(
                "--connections must be between 1 and --clients ({}), not {c}",
                a.clients
            );
        }
        if a.think_ms != 0 {
            bail!("--connections needs --think-ms 0 (clients sharing connections do not think)");
        }
        if a.chirper.is_some() {
            bail!("--connections does not drive Chirper; leave it out with --chirper");
        }
    }
    // (Dropped in reverse order: the cluster stops before its directory goes.)
    let mut _tmp = None;
    let mut _lc = None;
    let cluster = if a.up {
        let dir = std::env::temp_dir().join(format!("partita-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // Removed however this ends, a refused option included.
        let tmp = TempDir(dir.clone());
        let base = launch::pick_base_port();
        let (file, c) = launch::ensure_cluster_file(&dir, || match a.mode {
            Mode::Cs if a.chirper.is_some() => bail!("--chirper needs --mode smr"),
            Mode::Cs if a.kv_pairs.is_some() => bail!("--kv-pairs needs --mode smr"),
            Mode::Smr if a.kv_pairs.is_some() => {
                if !matches!(
                    a.partitioning.exec.model("kv")?.0,
                    ExecutionModel::Ssmr | ExecutionModel::Dssmr
                ) {
                    bail!("--kv-pairs runs on S-SMR or DS-SMR: give --execution ssmr or dssmr");
                }
                let mut c = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
                c.set_protocol(a.protocol);
                c.cluster.durability = a.durability;
                a.partitioning.apply_objects(c, "kv")
            }
            Mode::Smr if a.chirper.is_some() => {
                let mut c = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
                c.set_protocol(a.protocol);
                c.cluster.durability = a.durability;
                a.partitioning.apply_objects(c, "chirper")
            }
            // The same options as smr, so that what a cs server cannot have (partitions,
            // batchers, replicas that batch, rings) is refused by the cluster's own checks.
            Mode::Cs => a.partitioning.apply(
                ClusterConfig::client_server(base + 1, rand::random::<u64>() >> 1),
                bench::key_space(a.preload),
            ),
            Mode::Smr if a.wan => {
                let mut c = ClusterConfig::paper_wan_local(base, rand::random::<u64>() >> 1);
                c.set_protocol(a.protocol);
                c.cluster.durability = a.durability;
                Ok(c)
            }
            Mode::Smr if a.geo => {
                let keys = a.partitioning.key_space.unwrap_or(3000);
                let mut c = ClusterConfig::paper_geo_local(base, rand::random::<u64>() >> 1, keys);
                c.cluster.durability = a.durability;
                if a.epaxos {
                    c.ordering = OrderingSection::Epaxos(EpaxosSection::with_keys(keys));
                }
                Ok(c)
            }
            Mode::Smr => {
                let mut c = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
                c.set_protocol(a.protocol);
                c.cluster.durability = a.durability;
                a.partitioning.apply(c, bench::key_space(a.preload))
            }
        })?;
        let c = if a.netns {
            let mut c = c;
            let wire = match (a.multicast, a.insecure) {
                (true, _) => partita_harness::netns::Wire::Multicast,
                (_, true) => partita_harness::netns::Wire::Insecure,
                _ => partita_harness::netns::Wire::Tls,
            };
            partita_harness::netns::place_with(&mut c, &dir.join("certs"), wire)?;
            std::fs::write(&file, c.to_toml())
                .with_context(|| format!("writing {}", file.display()))?;
            ClusterConfig::load(&file)?
        } else if a.tls {
            partita_harness::certs::certs_for_cluster_file(&dir.join("certs"), &file, 30, false)?;
            ClusterConfig::load(&file)?
        } else {
            c
        };
        let node_args = runtime_threads_args(a.node_threads, a.node_io_thread);
        let mut lc = LocalCluster::start(&file, &c, &dir, &node_args, a.node_cpu)?;
        lc.wait_ready(Duration::from_secs(20)).await?;
        _lc = Some(lc);
        _tmp = Some(tmp);
        c
    } else {
        if a.mode == Mode::Cs {
            bail!("--mode cs starts its own server: use it with --up");
        }
        load_target(&a.cluster)?
    };
    let cluster = bench::place_clients(cluster, a.region.as_deref())?;
    let wan = bench::wan_line(&cluster);
    if let Some(w) = &wan {
        println!("{w}");
    }
    println!(
        "transport: {}",
        match cluster.transport() {
            partita_config::Transport::Tls =>
                "mutual TLS (TLS 1.3, ECDSA P-256 certificates, rustls with ring)",
            partita_config::Transport::Insecure => "plain TCP ([tls] insecure = true)",
            partita_config::Transport::Plain => "plain TCP (loopback)",
        }
    );
    if let Some(t) = partita_harness::netns::current() {
        println!(
            "network: each node in a network namespace of its own (node N at 10.99.0.N), \
             clients in {} (10.99.255.1), veth pairs into one bridge, no emulated delay{}",
            t.client_ns(),
            match &cluster.multicast {
                Some(m) => format!(
                    "; Phase 2A values as IP multicast to {}:{} (per partition: +p)",
                    m.group, m.port
                ),
                None => String::new(),
            }
        );
    }
    // The object services' loads (Chirper, the key-value store on S-SMR/DS-SMR).
    let shape = partita_harness::objects::LoadShape {
        clients: a.clients,
        duration: Duration::from_secs_f64(a.duration),
        think_ms: a.think_ms,
        seed: a.seed,
        trim: 0.1,
        give_up: Duration::from_secs(30),
    };
    match (&a.chirper, cluster.cluster.service.as_str()) {
        (Some(w), "chirper") => {
            let load = partita_harness::chirper::ChirperLoad {
                mix: partita_harness::chirper::ChirperMix::Workload(
                    partita_dssmr::chirper::Workload::parse(w).map_err(anyhow::Error::msg)?,
                ),
                shape,
            };
            if !a.quiet {
                eprintln!("chirper {w}: {} clients for {} s...", a.clients, a.duration);
            }
            let (result, events) =
                partita_harness::chirper::run_load(&cluster, &load, std::time::Instant::now())
                    .await?;
            println!("{result}");
            if let Some(p) = &a.json {
                std::fs::write(p, serde_json::to_string_pretty(&result)?)
                    .with_context(|| format!("writing {}", p.display()))?;
            }
            if let Some(p) = &a.history {
                partita_harness::chirper::write_history(p, &events)?;
            }
            return Ok(0);
        }
        (Some(_), other) => bail!("--chirper needs a chirper cluster; this one runs `{other}`"),
        (None, "chirper") => {
            bail!("this cluster runs chirper: give its workload with --chirper timeline|post|follow|mix")
        }
        (None, _) => {}
    }
    let objects_kv = cluster.cluster.service == "kv" && cluster.execution.is_ssmr();
    match (a.kv_pairs, objects_kv) {
        (Some(pairs), true) => {
            if !a.quiet {
                eprintln!(
                    "kv pairs ({pairs}): {} clients for {} s...",
                    a.clients, a.duration
                );
            }
            let (summary, ran) =
                partita_harness::objects::run_kv_pairs(&cluster, &shape, pairs).await?;
            if let Some(r) = ran.iter().find(|r| {
                !matches!(
                    r.outcome,
                    Some(partita_dssmr::client::Outcome::Done(
                        partita_kv::KvReply::Txn(_)
                    )) | None
                )
            }) {
                bail!("{:?} ended {:?}", r.cmd, r.outcome);
            }
            println!(
                "kv pairs ({pairs} pairs) on {} ({} data partition(s)), {}, durability {}; \
                 {} clients, think 0..={} ms, {:.0} s ({:.1} s measured)\n{}",
                summary.scheme,
                summary.data_partitions,
                summary.ordering,
                summary.durability,
                summary.clients,
                summary.think_ms,
                summary.duration_s,
                summary.measured_s,
                summary.lines()
            );
            if let Some(p) = &a.json {
                let v =
                    serde_json::json!({ "workload": "kv-pairs", "pairs": pairs, "load": summary });
                std::fs::write(p, serde_json::to_string_pretty(&v)?)
                    .with_context(|| format!("writing {}", p.display()))?;
            }
            return Ok(0);
        }
        (Some(_), false) => bail!(
            "--kv-pairs needs a key-value cluster on S-SMR or DS-SMR; this one runs `{}` on {}",
            cluster.cluster.service,
            cluster.execution.model()
        ),
        (None, true) => bail!(
            "this cluster runs the key-value store on {}: give its workload with --kv-pairs N",
            cluster.execution.model()
        ),
        (None, false) => {}
    }
    // GeoPaxos+: the tree starts with its keys (the cluster file's); no preload.
    // GeoPaxos+ and EPaxos with keys: the tree starts with them (no preload).
    let geo_keys = cluster
        .ordering
        .geo_keys()
        .filter(|&k| k > 0 || cluster.ordering.geo().is_some());
    match (cluster.ordering.geo().is_some(), a.workload) {
        (true, Workload::Geo { .. }) | (false, _) => {}
        (true, w) => bail!(
            "a GeoPaxos+ cluster runs the geo B+tree's operations: --workload geo-R, \
             geo-R@P/N, geo-R@local or geo-R@zipf, not {w}"
        ),
    }
    let preload = if geo_keys.is_some() { 0 } else { a.preload };
    if !a.quiet {
        eprintln!("preloading {preload} entries...");
    }
    bench::preload(&cluster, preload, !a.quiet).await?;
    let cfg = BenchConfig {
        give_up: None,
        workload: a.workload,
        clients: a.clients,
        duration: Duration::from_secs_f64(a.duration),
        think_ms: a.think_ms,
        preload,
        seed: a.seed,
        trim: 0.1,
        progress: !a.quiet,
        key_space: geo_keys.map(|k| k.max(1)),
    };
    // With --up: every node's log on disk, sampled while the load runs.
    let sampling = match (&_lc, a.wal_sample_s) {
        (Some(lc), s) if s > 0 => {
            let (data_dir, ids) = (
                lc.data_dir.clone(),
                cluster.nodes.iter().map(|n| n.id).collect::<Vec<_>>(),
            );
            let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(async move {
                let start = std::time::Instant::now();
                let mut samples = Vec::new();
                loop {
                    samples.push(bench::WalSample {
                        at_s: start.elapsed().as_secs_f64(),
                        bytes: ids
                            .iter()
                            .map(|&id| (id, partita_harness::launch::wal_bytes_in(&data_dir, id)))
                            .collect(),
                    });
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(s)) => {}
                        _ = &mut stop_rx => break,
                    }
                }
                samples
            });
            Some((stop_tx, task))
        }
        _ => None,
    };
    let (mut result, records) = bench::run_with(&cluster, &cfg, a.connections).await?;
    if let Some((stop, task)) = sampling {
        let _ = stop.send(());
        result.wal_bytes = task.await.unwrap_or_default();
    }
    if let (Some(lc), true) = (_lc.as_mut(), a.restart_after) {
        let exe = std::env::current_exe().context("locating the partita binary")?;
        let node_args = runtime_threads_args(a.node_threads, a.node_io_thread);
        for n in cluster.nodes.clone() {
            let took = lc
                .restart_node(
                    &exe,
                    n.id,
                    &node_args,
                    Duration::from_secs(10),
                    Duration::from_secs(60),
                )
                .await?;
            result.restart_ms.push((n.id, took.as_secs_f64() * 1000.0));
        }
    }
    result.node_cpu = _lc.as_ref().and_then(|lc| lc.cpu_label());
    result.node_runtime_threads = _lc.as_ref().map(|_| a.node_threads);
    result.node_io_thread = _lc.is_some() && a.node_io_thread;
    println!("{result}");
    if let Some(w) = &wan {
        println!("  {w}");
    }
    if cluster.multicast.is_some() {
        // What the datagrams did, summed over the nodes (counters since start).
        let mut sum = std::collections::BTreeMap::<String, u64>::new();
        for n in &cluster.nodes {
            if let Some(s) =
                partita_client::node_status_of(&cluster, n.id, Duration::from_secs(1)).await
            {
                for (k, v) in s.counters {
                    if k.starts_with("multicast_") {
                        *sum.entry(k).or_default() += v;
                    }
                }
            }
        }
        let get = |k: &str| sum.get(k).copied().unwrap_or(0);
        println!(
            "  multicast       {} Phase 2A datagrams sent, {} received (all nodes), {} refused, \
             {} sent over TCP instead",
            get("multicast_sent"),
            get("multicast_received"),
            get("multicast_refused"),
            get("multicast_fallback_tcp")
        );
    }
    if let Some(p) = &a.json {
        let mut json = serde_json::to_value(&result)?;
        if let (Some(w), Some(m)) = (&wan, json.as_object_mut()) {
            m.insert("wan".into(), w.clone().into());
        }
        std::fs::write(p, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &a.history {
        partita_harness::history::write_history(p, &records)?;
        println!("history: {} operations in {}", records.len(), p.display());
    }
    if let Some(mut lc) = _lc.take() {
        lc.stop(Duration::from_secs(10));
    }
    Ok(0)
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn nemesis(a: NemesisArgs) -> anyhow::Result<i32> {
    let duration = a.soak.map_or(a.duration, |m| m.saturating_mul(60));
    if a.faults.is_empty() || duration == 0 || a.clients == 0 || a.together == 0 {
        bail!(
            "--faults, --duration (or --soak), --clients and --together must not be empty or zero"
        );
    }
    a.exec.model(&a.service)?;
    if a.ring_decision.is_some() && a.protocol != Protocol::RingPaxos {
        bail!("--ring-decision needs --protocol ring-paxos");
    }
    let dir = std::env::temp_dir().join(format!("partita-nemesis-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _tmp = TempDir(dir.clone());
    if a.geo && a.service == "chirper" {
        bail!(
            "--geo runs the geo B+tree or the key-value store; --service chirper cannot run on it"
        );
    }
    let (file, c) = launch::ensure_cluster_file(&dir, || {
        if a.geo {
            let (port, id) = (launch::pick_base_port(), rand::random::<u64>() >> 1);
            let mut c = if a.service == "kv" {
                // The key-value store in the paper's three regions, each node an
                // acceptor and a replica.
                let mut c = ClusterConfig::paper_wan_local(port, id);
                c.cluster.service = "kv".into();
                let ordering = match a.epaxos {
                    true => partita_config::OrderingProtocol::Epaxos,
                    false => partita_config::OrderingProtocol::GeoPaxosPlus,
                };
                c.with_ordering(ordering, 3)
                    .map_err(|e| anyhow::anyhow!("{e}"))?
            } else {
                let mut c = ClusterConfig::paper_geo_local(port, id, a.geo_keys);
                if let Some(g) = c.ordering.geo_mut() {
                    // Small tree nodes, so that inserts split leaves (INSERT's psite
                    // predicts it).
                    g.order = 8;
                }
                if a.epaxos {
                    c.ordering = OrderingSection::Epaxos(EpaxosSection::with_keys(a.geo_keys));
                }
                c
            };
            if let Some(g) = c.ordering.geo_mut() {
                // DOPs that move objects while faults come and go.
                g.dop_interval_ms = 2000;
            }
            if let Some(w) = c.wan.as_mut() {
                w.clients = vec!["California".into(), "Virginia".into(), "Europe".into()];
            }
            if a.netns {
                partita_harness::netns::place_with(
                    &mut c,
                    &dir.join("certs"),
                    partita_harness::netns::Wire::Tls,
                )?;
            }
            ClusterConfig::parse(&c.to_toml(), "the nemesis's cluster")?;
            return Ok(c);
        }
        let mut c =
            ClusterConfig::default_local(launch::pick_base_port(), rand::random::<u64>() >> 1);
        c.set_protocol(a.protocol);
        if let Some(d) = a.ring_decision {
            c = c.with_ring_decision(d).map_err(anyhow::Error::msg)?;
        }
        let key_space = partita_harness::nemesis::default_bench(Duration::from_secs(1), 1, 0)
            .key_space
            .unwrap_or(400);
        c.execution = a.exec.section(&a.service, key_space - 1)?;
        let c = if a.service == "chirper" {
            let mut partitions = a.partitions;
            if c.execution.dssmr().is_some() {
                partitions += 1;
            }
            c.cluster.service = "chirper".into();
            c.chirper = Some(partita_config::ChirperSection {
                // A small graph, so that commands contend and the checker judges it.
                users: 48,
                communities: 8,
                mean_followers: 3,
                p_local_percent: 60,
                ..Default::default()
            });
            c.with_partitions(partitions, 2, 1 << 32)
        } else if a.service == "kv" && c.execution.is_ssmr() {
            // S-SMR/DS-SMR: keys hashed to the data partitions (DS-SMR adds the
            // oracle's).
            c.cluster.service = "kv".into();
            let oracle = u32::from(c.execution.dssmr().is_some());
            c.with_partitions(a.partitions + oracle, 2, 1 << 32)
        } else if a.service == "kv" {
            // Byte-string keys fall in partitions by their first eight bytes.
            c.cluster.service = "kv".into();
            c.with_partitions(a.partitions, 2, partita_config::INT_MAX)
        } else {
            c.with_partitions(a.partitions, 2, key_space)
        };
        let c = c
            .and_then(|c| c.with_batchers(a.batchers))
            .and_then(|c| match a.rings {
                0 => Ok(c),
                n => c.with_multiring(n, 1).map_err(|e| e.to_string()),
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut c = c;
        if a.netns {
            let wire = if a.multicast {
                partita_harness::netns::Wire::Multicast
            } else {
                partita_harness::netns::Wire::Tls
            };
            partita_harness::netns::place_with(&mut c, &dir.join("certs"), wire)?;
        }
        // The same checks the nodes run on the file (e.g. speculation needs Ring Paxos).
        ClusterConfig::parse(&c.to_toml(), "the nemesis's cluster")?;
        Ok(c)
    })?;
    if let Some(f) = a.faults.iter().find(|f| f.is_network() && !a.netns) {
        bail!("fault {f:?} needs --netns (the nodes in network namespaces of their own)");
    }
    let exe = std::env::current_exe().context("locating the partita binary")?;
    let mut bugs = partita_sim::UnsafeBugs::default();
    for b in &a.unsafe_bugs {
        bugs.enable(b)
            .map_err(|e| anyhow::anyhow!("--unsafe {b}: {e}"))?;
    }
    let node_args: Vec<String> = a
        .unsafe_bugs
        .iter()
        .flat_map(|b| ["--unsafe".to_string(), b.clone()])
        .collect();
    let mut lc = LocalCluster::start_with(&exe, &file, &c, &dir, &node_args, None)?;
    lc.wait_ready(Duration::from_secs(20)).await?;
    eprintln!(
        "nemesis: {} for {} s on a fresh {} cluster in {}",
        a.faults
            .iter()
            .map(|f| format!("{f:?}"))
            .collect::<Vec<_>>()
            .join(", "),
        duration,
        if c.ordering.epaxos().is_some() {
            "EPaxos (3 emulated regions)".to_string()
        } else if c.ordering.geo().is_some() {
            "GeoPaxos+ (3 emulated regions)".to_string()
        } else {
            c.ordering.protocol().to_string()
        },
        dir.display()
    );
    if let Some(m) = &c.multicast {
        eprintln!(
            "nemesis: Phase 2A as IP multicast to {}:{}, plain TCP otherwise",
            m.group, m.port
        );
    } else if partita_harness::netns::current().is_some() {
        eprintln!("nemesis: every node in a network namespace of its own, mutual TLS");
    }
    let cfg = partita_harness::nemesis::NemesisConfig {
        faults: a.faults.clone(),
        interval: Duration::from_millis(a.interval_ms),
        down_for: Duration::from_millis(a.down_ms),
        bench: match c.ordering.geo_keys() {
            Some(keys) => partita_harness::nemesis::geo_bench(
                Duration::from_secs(duration),
                a.clients,
                a.seed,
                keys,
            ),
            None => partita_harness::nemesis::default_bench(
                Duration::from_secs(duration),
                a.clients,
                a.seed,
            ),
        },
        history: a.history.clone(),
        together: a.together,
        seed: a.seed,
    };
    let report = if a.service == "chirper" {
        let load = partita_harness::chirper::ChirperLoad {
            mix: partita_harness::chirper::ChirperMix::Swarm,
            shape: partita_harness::objects::LoadShape {
                clients: a.clients,
                duration: Duration::from_secs(duration),
                think_ms: 2,
                seed: a.seed,
                trim: 0.1,
                give_up: Duration::from_secs(10),
            },
        };
        partita_harness::nemesis::run_chirper(&mut lc, &exe, &node_args, &cfg, &load).await?
    } else if a.service == "kv" && lc.cluster.execution.is_ssmr() {
        // Sessions that outlast every fault: the key-value checker judges these
        // histories exactly when every outcome is known.
        let shape = partita_harness::objects::LoadShape {
            clients: a.clients,
            duration: Duration::from_secs(duration),
            think_ms: 2,
            seed: a.seed,
            trim: 0.1,
            give_up: Duration::from_secs(60),
        };
        partita_harness::nemesis::run_kv_objects(&mut lc, &exe, &node_args, &cfg, &shape).await?
    } else if a.service == "kv" {
        let load = partita_harness::kvload::KvLoad::new(
            a.clients as u64,
            Duration::from_secs(duration),
            a.seed,
        );
        partita_harness::nemesis::run_kv(&mut lc, &exe, &node_args, &cfg, &load).await?
    } else {
        partita_harness::nemesis::run(&mut lc, &exe, &node_args, &cfg).await?
    };
    lc.stop(Duration::from_secs(10));
    println!("{report}");
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(if report.passed() { 0 } else { 1 })
}

fn calibrate(a: CalibrateArgs) -> anyhow::Result<i32> {
    let entries = a
        .entries
        .unwrap_or(if a.quick { 100_000 } else { 1_000_000 });
    if entries == 0 {
        bail!("--entries must be positive");
    }
    let o = partita_experiments::calibrate::Options::new(entries, a.quick);
    let c = partita_experiments::calibrate::run(&o, true)?;
    print!("{}", c.header);
    print!("{}", c.readable());
    std::fs::write(&a.out, c.to_toml()).with_context(|| format!("writing {}", a.out.display()))?;
    println!("\nwrote {}", a.out.display());
    Ok(0)
}

/// The command-line overrides shared by every simulated sweep's options (the option
/// structs differ, their fields of these names do not).
macro_rules! sim_overrides {
    ($a:expr, $o:expr) => {
        if let Some(d) = $a.duration()? {
            $o.duration = d;
        }
        if let Some(p) = $a.preload {
            $o.preload = p;
        }
        if let Some(w) = &$a.workloads {
            $o.workloads = w.clone();
        }
        if let Some(c) = &$a.clients {
            $o.clients = c.clone();
        }
        if let Some(n) = &$a.replicas {
            $o.replicas = n.clone();
        }
        if let Some(t) = $a.think_ms {
            $o.think_ms = t;
        }
        if let Some(j) = $a.jobs {
            $o.jobs = j;
        }
        if let Some(s) = $a.seed {
            $o.seed = s;
        }
    };
}

/// `--cost-table` and progress output for a simulated sweep's options.
macro_rules! sim_cost_and_progress {
    ($a:expr, $o:expr) => {
        $o.progress = true;
        if let Some((t, src)) = $a.sim_cost()? {
            $o.cost = t;
            $o.cost_source = src;
        }
    };
}

/// Options only the partitioning experiments (partitioning, cross-partition,
/// speculation-partitioning) implement: refused by the others rather than ignored.
fn refuse_partitioning_options(a: &ExperimentArgs) -> anyhow::Result<()> {
    let given = [
        ("--batchers", a.batchers > 0),
        ("--multicast", a.multicast),
        ("--batch-delay-ms", a.batch_delay_ms.is_some()),
        ("--batch-bytes-max", a.batch_bytes_max.is_some()),
        ("--batcher-interval-ms", a.batcher_interval_ms.is_some()),
        ("--value-interval-ms", a.value_interval_ms.is_some()),
        ("--rounds", a.rounds.is_some()),
    ];
    if let Some((flag, _)) = given.iter().find(|(_, on)| *on) {
        bail!(
            "{flag} is implemented for the partitioning experiments (partitioning, \
             cross-partition, speculation-partitioning)"
        );
    }
    Ok(())
}

/// `partita experiment optimizer`: paper 004's Figure 8, measured in this process.
/// The report goes to docs/results/optimizer.json unless --json names another file.
fn optimizer_experiment(a: &ExperimentArgs) -> anyhow::Result<Outcome> {
    use partita_experiments::experiment::optimizer as fig8;
    if a.sim {
        bail!("the optimizer experiment is pure CPU in this process: --sim does not apply");
    }
    let mut o = if a.quick {
        fig8::Fig8Options::quick()
    } else {
        fig8::Fig8Options::full()
    };
    if let Some(k) = a.keys {
        o.keys = k;
    }
    if let Some(n) = &a.replicas {
        o.replicas = n.clone();
    }
    if let Some(i) = a.iterations {
        o.iterations = i;
    }
    if let Some(r) = a.rounds {
        o.rounds = r;
    }
    if let Some(s) = a.seed {
        o.seed = s;
    }
    o.progress = true;
    let json = if a.json == Path::new("experiment.json") {
        PathBuf::from("docs/results/optimizer.json")
    } else {
        a.json.clone()
    };
    let r = tokio::task::block_in_place(|| fig8::run(&o))?;
    print!("{}", fig8::table(&r));
    let files = fig8::write(&r, &json)?;
    print_written(&files);
    Ok(reproduction::outcome_of_optimizer(&r, files))
}

/// `partita experiment geo --sim`: paper 004's Figures 5 to 7 and DBT_a against DBT_b,
/// simulated. The report goes to docs/results/geo-sim.json (figures in docs/figures/)
/// unless --json names another file (figures then beside it).
/// `partita experiment geo` on real processes: GeoPaxos+, EPaxos and Multi-Paxos on
/// the same three nodes in the paper's emulated regions, rounds interleaved
/// (`partita_experiments::experiment::geo_real`).
async fn geo_real_experiment(a: &ExperimentArgs) -> anyhow::Result<Outcome> {
    use partita_experiments::experiment::geo_real;
    let mut o = if a.quick {
        geo_real::GeoRealOptions::quick()
    } else {
        geo_real::GeoRealOptions::full()
    };
    if let Some(d) = a.duration()? {
        o.duration = d;
    }
    if let Some(s) = a.seed {
        o.seed = s;
    }
    if let Some(r) = a.rounds {
        o.rounds = r;
    }
    match a.clients.as_deref() {
        None => {}
        Some([c]) if *c > 0 => o.clients = *c,
        Some(_) => bail!("--clients: one client count for the real geo experiment"),
    }
    o.progress = true;
    let exe = std::env::current_exe().context("locating the partita binary")?;
    let started = std::time::Instant::now();
    let r = geo_real::geo_real(&exe, &o).await?;
    print!("{}", geo_real::geo_real_table(&r));
    println!(
        "{} points on real processes in {:.0} s wall",
        r.points.len(),
        started.elapsed().as_secs_f64()
    );
    let json = if a.json == Path::new("experiment.json") {
        PathBuf::from("docs/results/geo-real.json")
    } else {
        a.json.clone()
    };
    let files = geo_real::write(&r, &json)?;
    print_written(&files);
    Ok(reproduction::outcome_of_geo_real(&r, files))
}

fn geo_experiment(a: &ExperimentArgs) -> anyhow::Result<Outcome> {
    use partita_experiments::experiment::geo;
    let mut o = if a.quick {
        geo::GeoSimOptions::quick()
    } else {
        geo::GeoSimOptions::full()
    };
    if let Some(j) = a.jobs {
        o.jobs = j;
    }
    if let Some(s) = a.seed {
        o.seed = s;
    }
    match a.clients.as_deref() {
        None => {}
        // No WAN point: Figure 5 alone.
        Some([0]) => o.wan_clients.clear(),
        Some(c) => {
            anyhow::ensure!(
                c.iter().all(|&n| (3..=100_000).contains(&n)),
                "--clients: WAN client counts between 3 and 100000, or 0 for no WAN point"
            );
            o.wan_clients = c.iter().map(|&n| n as u32).collect();
        }
    }
    match a.replicas.as_deref() {
        None => {}
        // No LAN point: the WAN figures alone.
        Some([0]) => {
            o.lan_replicas.clear();
            o.lan_replicas_more.clear();
        }
        Some(r) => {
            anyhow::ensure!(
                r.iter().all(|n| (3..=16).contains(n)),
                "--replicas: LAN replica counts between 3 and 16, or 0 for no LAN point"
            );
            o.lan_replicas = r.to_vec();
            o.lan_replicas_more.clear();
        }
    }
    if let Some(r) = a.rounds {
        o.rounds = r;
    }
    if let Some(d) = a.duration()? {
        o.lan_ms = (d.as_secs_f64() * 1000.0).round().max(100.0) as u64;
    }
    if let Some(n) = a.lan_clients {
        anyhow::ensure!(
            (1..=10_000).contains(&n),
            "--lan-clients: clients per replica, 1 to 10000"
        );
        o.lan_clients_per_replica = n;
    }
    if let Some((t, source)) = a.sim_cost()? {
        o.cost = t;
        o.cost_source = format!("the cost table {source}");
    }
    o.progress = true;
    let (json, figures) = if a.json == Path::new("experiment.json") {
        (
            PathBuf::from("docs/results/geo-sim.json"),
            Some(PathBuf::from("docs/figures")),
        )
    } else {
        (a.json.clone(), None)
    };
    let r = tokio::task::block_in_place(|| geo::run(&o))?;
    print!("{}", geo::table(&r));
    println!(
        "{} points simulated in {:.0} s wall",
        r.points.len(),
        r.wall_s
    );
    let files = geo::write(&r, &json, figures.as_deref())?;
    print_written(&files);
    Ok(reproduction::outcome_of_geo(&r, files))
}

/// `partita experiment psmr [--sim]`: paper 002's Figures 2 to 5, in the simulator or
/// on real processes here.
async fn psmr_experiment(a: &ExperimentArgs) -> anyhow::Result<Outcome> {
    refuse_partitioning_options(&ExperimentArgs {
        batchers: 0,
        multicast: false,
        ..a.clone()
    })?;
    if !a.sim && (a.multicast || a.cost_table.is_some() || a.jobs.is_some()) {
        bail!("--multicast, --cost-table and --jobs are for simulated runs (--sim)");
    }
    if a.workloads.is_some() || a.replicas.is_some() {
        bail!("--workloads and --replicas do not apply to the psmr experiment (it sweeps the dependent-P workload on 2 replicas)");
    }
    let started = std::time::Instant::now();
    let mut o = if a.quick {
        partita_experiments::experiment::psmr::PsmrOptions::quick()
    } else {
        partita_experiments::experiment::psmr::PsmrOptions::full()
    };
    // Simulated, paper 002's sweep runs as the paper ran it (Multi-Ring Paxos, windows
    // of 50) unless told otherwise; P-SMR inside partitions is built on one ring only.
    let paper = a.sim && !a.one_ring && a.partition_counts.is_none();
    if paper {
        if a.batchers > 0 || a.multicast {
            bail!(
                "the simulated psmr experiment runs on Multi-Ring Paxos, as the paper did, \
                 which does not combine with batchers or --multicast (yet); add --one-ring \
                 for one ring with batchers"
            );
        }
        o = o.as_paper_ran(a.quick);
    }
    if let Some(w) = a.window {
        if a.partition_counts.is_some() {
            bail!("--window applies to paper 002's sweep, not to --partition-counts");
        }
        o.window = (w > 1).then_some(w as usize);
    }
    if let Some(d) = a.duration()? {
        o.duration = d;
    }
    if let Some(s) = a.seed {
        o.seed = s;
    }
    if let Some(p) = a.preload {
        o.preload = p;
    }
    if let Some(c) = &a.clients {
        // Figure 3's loads, and the largest for every other point.
        o.fig3_clients = c.clone();
        o.clients = c.iter().copied().max().unwrap_or(o.clients);
    }
    if let Some(t) = a.think_ms {
        o.think_ms = t;
    }
    if let Some(j) = a.jobs {
        o.jobs = j;
    }
    if a.rings && (a.batchers > 0 || a.multicast) {
        bail!("--rings: Multi-Ring Paxos does not combine with batchers or --multicast (yet)");
    }
    if a.batchers > 0 {
        o.batchers = a.batchers;
    }
    o.rings = paper || a.rings;
    o.multicast = a.multicast;
    o.progress = true;
    if let Some(counts) = &a.partition_counts {
        let [p] = counts[..] else {
            bail!("--partition-counts: the psmr experiment takes one partition count");
        };
        if !a.sim || a.rings || p < 2 {
            bail!(
                "--partition-counts P (P-SMR inside P partitions against the partitions alone) \
                 needs --sim, P >= 2 and no --rings"
            );
        }
        o.partitions = Some(p);
    }
    if !a.sim && o.client_window().is_some() && o.think_ms > 0 {
        bail!(
            "a window's sessions share one connection to each node, which needs --think-ms 0 \
             (or --window 1: a connection per client)"
        );
    }
    if let Some((t, src)) = a.sim_cost()? {
        o.cost = t;
        o.cost_source = src;
    }
    let r = if a.sim {
        tokio::task::block_in_place(|| partita_experiments::experiment::psmr::psmr_sim(&o))?
    } else {
        let exe = std::env::current_exe().context("locating the partita binary")?;
        partita_experiments::experiment::psmr::psmr_real(&o, &exe).await?
    };
    print!("{}", partita_experiments::experiment::psmr::psmr_table(&r));
    println!(
        "{} points {} in {:.0} s wall",
        r.points.len(),
        if r.simulated {
            "simulated"
        } else {
            "run on real processes"
        },
        started.elapsed().as_secs_f64()
    );
    let files = partita_experiments::experiment::psmr::write_psmr(&r, &a.json)?;
    print_written(&files);
    Ok(reproduction::outcome_of_psmr(&r, files))
}

/// `partita experiment dssmr --sim`: paper 003's Table 1, Figure 4 and moves.
async fn dssmr_experiment(a: &ExperimentArgs) -> anyhow::Result<Outcome> {
    use partita_experiments::experiment::dssmr;
    if a.workloads.is_some() || a.replicas.is_some() || a.batchers > 0 || a.rings {
        bail!(
            "--workloads, --replicas, --batchers and --rings do not apply to the dssmr \
             experiment (use --chirper-workloads and --partition-counts)"
        );
    }
    if let Some(report) = &a.replot {
        let stem = a.json.with_extension("");
        let files = dssmr::replot_dssmr(report, &stem)?;
        print_written(&files);
        return Ok(Outcome {
            files,
            ..Outcome::default()
        });
    }
    let started = std::time::Instant::now();
    let mut o = dssmr::DssmrOptions::full();
    if a.quick {
        o.partitions = vec![1, 2, 8];
        o.duration = Duration::from_secs(2);
        o.users = 4000;
    }
    if let Some(s) = a.seed {
        o.seed = s;
    }
    if let Some(d) = a.duration()? {
        o.duration = d;
    }
    if let Some(c) = a.clients.as_ref().and_then(|c| c.first()) {
        o.clients_per_partition = *c as u32;
    }
    if let Some(ws) = &a.chirper_workloads {
        o.workloads = ws
            .iter()
            .map(|w| partita_dssmr::chirper::Workload::parse(w).map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<_>>()?;
    }
    if let Some(p) = &a.partition_counts {
        if p.iter().any(|&n| !(1..=62).contains(&n)) {
            bail!("--partition-counts: each between 1 and 62");
        }
        o.partitions = p.clone();
    }
    if let Some(u) = a.users {
        if u < 64 {
            bail!("--users: at least 64 (one per community)");
        }
        o.users = u;
    }
    if let Some(p) = a.p_local {
        if !(0.0..=1.0).contains(&p) {
            bail!("--p-local: a probability, 0 to 1");
        }
        o.p_local = p;
    }
    o.gather_where_most = a.gather_where_most;
    o.await_moves = a.await_moves;
    o.scattered_interests = a.scattered_interests;
    if let Some(m) = &a.placement {
        o.placement = partita_dssmr::StaticMap::parse(m).map_err(anyhow::Error::msg)?;
    }
    if let Some(j) = a.jobs {
        o.jobs = j;
    }
    if !a.sim {
        // Real processes: the partition counts this machine holds, fewer users (the
        // nodes load the graph at start), a few clients per partition, interleaved
        // rounds.
        if a.scattered_interests {
            bail!("--scattered-interests is for --sim (real nodes load the community graph)");
        }
        if a.partition_counts.is_none() {
            o.partitions = vec![1, 2];
        }
        if a.users.is_none() {
            o.users = 2000;
        }
        if a.clients.is_none() {
            o.clients_per_partition = 8;
        }
        if a.duration()?.is_none() {
            o.duration = Duration::from_secs(if a.quick { 4 } else { 8 });
        }
        let exe = std::env::current_exe().context("locating the partita binary")?;
        let rounds = a.rounds.unwrap_or(if a.quick { 1 } else { 3 });
        let r = dssmr::dssmr_real(&exe, &o, rounds).await?;
        print!("{}", dssmr::dssmr_real_table(&r));
        println!(
            "{} points on real processes in {:.0} s wall",
            r.points.len(),
            started.elapsed().as_secs_f64()
        );
        if let Some(dir) = a.json.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let path = a.json.with_file_name(format!(
            "{}-real.json",
            a.json
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("dssmr")
        ));
        let files = dssmr::write_dssmr_real(&r, &path)?;
        print_written(&files);
        return Ok(reproduction::outcome_of_dssmr_real(&r, files));
    }
    if a.rounds.is_some() {
        bail!("--rounds: the simulated dssmr sweep is deterministic (rounds are for real runs)");
    }
    if let Some((t, src)) = a.sim_cost()? {
        o.cost = t;
        o.cost_source = src;
    }
    if let Some(pairs) = a.kv_pairs {
        if a.partition_counts.is_none() {
            o.partitions = vec![8];
        }
        let r = tokio::task::block_in_place(|| dssmr::kv_pairs_sim(&o, pairs))?;
        print!("{}", dssmr::kv_pairs_table(&r));
        println!(
            "{} points simulated in {:.0} s wall",
            r.points.len(),
            started.elapsed().as_secs_f64()
        );
        let path = a.json.with_file_name(format!(
            "{}-kv-pairs.json",
            a.json
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("dssmr")
        ));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, serde_json::to_string_pretty(&r)?)
            .with_context(|| format!("writing {}", path.display()))?;
        print_written(std::slice::from_ref(&path));
        return Ok(Outcome {
            files: vec![path],
            ..Outcome::default()
        });
    }
    let r = tokio::task::block_in_place(|| dssmr::dssmr_sim(&o))?;
    print!("{}", dssmr::dssmr_table(&r));
    println!(
        "{} points simulated in {:.0} s wall",
        r.points.len(),
        started.elapsed().as_secs_f64()
    );
    let files = dssmr::write_dssmr(&r, &a.json)?;
    print_written(&files);
    Ok(reproduction::outcome_of_dssmr(&r, files))
}

fn sim_experiment(a: &ExperimentArgs) -> anyhow::Result<Outcome> {
    let started = std::time::Instant::now();
    let r = match a.name {
        ExperimentName::Partitioning
        | ExperimentName::CrossPartition
        | ExperimentName::SpeculationPartitioning
        | ExperimentName::Psmr
        | ExperimentName::Dssmr
        | ExperimentName::Optimizer
        | ExperimentName::All
        | ExperimentName::Geo => unreachable!("dispatched earlier"),
        ExperimentName::CostOfReplication => {
            let mut o = if a.quick {
                partita_experiments::experiment::SimCostOptions::quick()
            } else {
                partita_experiments::experiment::SimCostOptions::full()
            };
            sim_overrides!(a, o);
            o.protocol = a.protocol;
            o.durability = a.durability;
            sim_cost_and_progress!(a, o);
            partita_experiments::experiment::cost_of_replication_sim(&o)?
        }
        ExperimentName::Speculation => {
            a.check_speculation()?;
            let mut o = if a.quick {
                partita_experiments::experiment::SimSpecOptions::quick()
            } else {
                partita_experiments::experiment::SimSpecOptions::full()
            };
            sim_overrides!(a, o);
            o.durability = a.durability;
            sim_cost_and_progress!(a, o);
            partita_experiments::experiment::speculation_sim(&o)?
        }
    };
    print!("{}", partita_experiments::experiment::table(&r));
    println!(
        "{} points simulated in {:.0} s wall",
        r.points.len(),
        started.elapsed().as_secs_f64()
    );
    let files = partita_experiments::experiment::write(&r, &a.json)?;
    print_written(&files);
    Ok(reproduction::outcome_of_experiment(&r, files))
}

async fn experiment(a: ExperimentArgs) -> anyhow::Result<i32> {
    if let ExperimentName::All = a.name {
        return all_experiments(&a).await;
    }
    if a.out.is_some() {
        bail!("--out is for `partita experiment all` (other experiments write --json)");
    }
    one_experiment(&a).await.map(|_| 0)
}

/// `partita experiment all`: every experiment at its defaults (or `--quick`), one
/// after the other; a failed one is reported on the page and the run goes on. Exit
/// code 1 when any failed.
async fn all_experiments(a: &ExperimentArgs) -> anyhow::Result<i32> {
    // Only the options that mean the same to every experiment.
    let mut plain = ExperimentArgs::defaults(ExperimentName::All);
    plain.sim = a.sim;
    plain.quick = a.quick;
    plain.out = a.out.clone();
    plain.jobs = a.jobs;
    plain.cost_table = a.cost_table.clone();
    plain.netns = a.netns;
    if format!("{plain:?}") != format!("{a:?}") {
        bail!(
            "`partita experiment all` takes --sim, --quick, --out, --jobs, --cost-table and \
             --netns only (run an experiment alone to set its own options)"
        );
    }
    let out = a.out.clone().unwrap_or_else(|| PathBuf::from("docs"));
    let tag = format!(
        "all{}{}",
        if a.sim { "-sim" } else { "" },
        if a.quick { "-quick" } else { "" }
    );
    let dir = out.join("results").join(&tag);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    use ExperimentName as E;
    let on_both = [
        E::CostOfReplication,
        E::Speculation,
        E::Partitioning,
        E::CrossPartition,
        E::SpeculationPartitioning,
        E::Psmr,
        E::Dssmr,
    ];
    // (experiment, simulated), in the papers' order; the optimizer is this process's
    // CPU either way, geo's real run is its own experiment (a Europe client's latency).
    let mut plan: Vec<(E, bool)> = Vec::new();
    for e in on_both {
        plan.push((e, true));
        if !a.sim {
            plan.push((e, false));
        }
    }
    plan.push((E::Optimizer, false));
    plan.push((E::Geo, true));
    if !a.sim {
        plan.push((E::Geo, false));
    }
    let invocation = std::env::args()
        .enumerate()
        .map(|(i, s)| if i == 0 { "partita".to_string() } else { s })
        .collect::<Vec<_>>()
        .join(" ");
    let host = format!(
        "a machine of {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    // The page is rewritten after every experiment, so a long run that stops early
    // leaves what it finished.
    let write_page = |sections: &[reproduction::Section]| -> anyhow::Result<PathBuf> {
        let mut page = reproduction::markdown(sections, &out, &invocation, &host);
        if sections.len() < plan.len() {
            page.insert_str(
                0,
                &format!(
                    "> In progress: {} of {} experiments done.\n\n",
                    sections.len(),
                    plan.len()
                ),
            );
        }
        let path = out.join("reproduction.md");
        std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    };
    let started_all = std::time::Instant::now();
    let mut sections = Vec::new();
    for (i, (name, sim)) in plan.iter().copied().enumerate() {
        let key = ExperimentArgs::defaults(name).name_str();
        let mode = match (name, sim) {
            (E::Optimizer, _) => "this process's CPU",
            (_, true) => "simulated",
            (_, false) => "real processes",
        };
        let stem = match (name, sim) {
            (E::Optimizer, _) => key.clone(),
            // The real dssmr run names its report FILE-real.json.
            (E::Dssmr, false) => key.clone(),
            (_, true) => format!("{key}-sim"),
            (_, false) => format!("{key}-real"),
        };
        // The experiment's own command line: what runs is what the page shows.
        let mut argv: Vec<String> = vec![key.clone()];
        let sim = sim && name != E::Optimizer;
        if sim {
            argv.push("--sim".into());
        }
        if a.quick {
            argv.push("--quick".into());
            argv.extend(smoke_options(name, sim).iter().map(|s| s.to_string()));
        }
        if sim {
            if let Some(j) = a.jobs {
                argv.extend(["--jobs".to_string(), j.to_string()]);
            }
            if let Some(t) = &a.cost_table {
                argv.extend(["--cost-table".to_string(), t.display().to_string()]);
            }
        } else if a.netns && name != E::Optimizer {
            argv.push("--netns".into());
        }
        argv.extend([
            "--json".to_string(),
            dir.join(format!("{stem}.json")).display().to_string(),
        ]);
        let command = format!("partita experiment {}", argv.join(" "));
        let sub = ExperimentDefaults::try_parse_from(
            std::iter::once("experiment".to_string()).chain(argv.iter().cloned()),
        )
        .with_context(|| format!("building `{command}`"))?
        .args;
        println!("\n== [{}/{}] {command}", i + 1, plan.len());
        let started = std::time::Instant::now();
        let outcome = one_experiment(&sub).await.map_err(|e| format!("{e:#}"));
        if let Err(e) = &outcome {
            println!("FAILED: {e}");
        }
        sections.push(reproduction::Section {
            entry: reproduction::entry(&key).expect("every experiment has an entry"),
            command,
            mode: mode.to_string(),
            wall_s: started.elapsed().as_secs_f64(),
            outcome,
        });
        write_page(&sections)?;
    }
    let path = write_page(&sections)?;
    let failed = sections.iter().filter(|s| s.outcome.is_err()).count();
    println!(
        "\n{} experiments in {:.0} s wall{}; wrote {}",
        sections.len(),
        started_all.elapsed().as_secs_f64(),
        if failed > 0 {
            format!(", {failed} FAILED")
        } else {
            String::new()
        },
        path.display()
    );
    Ok(if failed > 0 { 1 } else { 0 })
}

/// What `all --quick` adds to an experiment's own `--quick` where that alone takes
/// more than a few seconds: the smallest sweep that still draws every figure and
/// computes every target (at 8 partitions for dssmr, every system for geo).
fn smoke_options(name: ExperimentName, sim: bool) -> &'static [&'static str] {
    match (name, sim) {
        (
            ExperimentName::Partitioning
            | ExperimentName::CrossPartition
            | ExperimentName::SpeculationPartitioning,
            true,
        ) => &["--duration", "0.5"],
        (ExperimentName::Dssmr, true) => &[
            "--partition-counts",
            "1,8",
            "--users",
            "1000",
            "--duration",
            "0.2",
        ],
        (ExperimentName::Geo, true) => &[
            "--clients",
            "54",
            "--replicas",
            "3",
            "--rounds",
            "1",
            "--lan-clients",
            "10",
            "--duration",
            "0.4",
        ],
        _ => &[],
    }
}

/// Print the files an experiment wrote.
fn print_written(files: &[PathBuf]) {
    for f in files {
        println!("wrote {}", f.display());
    }
}

/// Run one experiment; what it produced.
async fn one_experiment(a: &ExperimentArgs) -> anyhow::Result<Outcome> {
    use partita_experiments::experiment_partition::PartExperiment as P;
    if a.replot.is_some() && !matches!(a.name, ExperimentName::Dssmr) {
        bail!("--replot draws the figures of the dssmr experiment's reports only");
    }
    if (a.one_ring || a.window.is_some()) && !matches!(a.name, ExperimentName::Psmr) {
        bail!("--one-ring and --window apply to the psmr experiment only");
    }
    match a.name {
        ExperimentName::Partitioning => return partition_experiment(a, P::Partitioning).await,
        ExperimentName::CrossPartition => return partition_experiment(a, P::CrossPartition).await,
        ExperimentName::SpeculationPartitioning => {
            return partition_experiment(a, P::SpeculationPartitioning).await
        }
        ExperimentName::Psmr => return psmr_experiment(a).await,
        ExperimentName::Dssmr => return dssmr_experiment(a).await,
        ExperimentName::Optimizer => return optimizer_experiment(a),
        ExperimentName::Geo if !a.sim => return geo_real_experiment(a).await,
        ExperimentName::Geo => return geo_experiment(a),
        ExperimentName::All => bail!("`all` runs the others; it is not one of them"),
        ExperimentName::CostOfReplication | ExperimentName::Speculation => {}
    }
    refuse_partitioning_options(a)?;
    if a.sim {
        // Compute-bound and multi-threaded on its own: off the async runtime.
        return tokio::task::block_in_place(|| sim_experiment(a));
    }
    let exe = std::env::current_exe().context("locating the partita binary")?;
    let r = match a.name {
        ExperimentName::Partitioning
        | ExperimentName::CrossPartition
        | ExperimentName::SpeculationPartitioning
        | ExperimentName::Psmr
        | ExperimentName::Dssmr
        | ExperimentName::Optimizer
        | ExperimentName::All
        | ExperimentName::Geo => unreachable!("dispatched above"),
        ExperimentName::CostOfReplication | ExperimentName::Speculation if a.seed.is_some() => {
            bail!(
                "--seed: the real cost-of-replication and speculation sweeps take none (each \
                 point's clients use seed 1); the simulated ones (--sim) do"
            )
        }
        ExperimentName::CostOfReplication => {
            let mut o = if a.quick {
                partita_experiments::experiment::CostOptions::quick()
            } else {
                partita_experiments::experiment::CostOptions::full()
            };
            if let Some(d) = a.duration()? {
                o.duration = d;
            }
            if let Some(p) = a.preload {
                o.preload = p;
            }
            if let Some(w) = &a.workloads {
                o.workloads = w.clone();
            }
            if let Some(c) = &a.clients {
                o.clients = c.clone();
            }
            if let Some(n) = &a.replicas {
                o.replicas = n.clone();
            }
            if let Some(t) = a.think_ms {
                o.think_ms = t;
            }
            o.protocol = a.protocol;
            o.durability = a.durability;
            o.node_cpu = a.node_cpu;
            o.progress = true;
            partita_experiments::experiment::cost_of_replication(&exe, &o).await?
        }
        ExperimentName::Speculation => {
            a.check_speculation()?;
            let mut o = if a.quick {
                partita_experiments::experiment::SpecOptions::quick()
            } else {
                partita_experiments::experiment::SpecOptions::full()
            };
            if let Some(d) = a.duration()? {
                o.duration = d;
            }
            if let Some(p) = a.preload {
                o.preload = p;
            }
            if let Some(w) = &a.workloads {
                o.workloads = w.clone();
            }
            if let Some(c) = &a.clients {
                o.clients = c.clone();
            }
            if let Some(n) = &a.replicas {
                o.replicas = n.clone();
            }
            if let Some(t) = a.think_ms {
                o.think_ms = t;
            }
            if let Some(n) = a.repeat {
                o.repeat = n.max(1);
            }
            o.durability = a.durability;
            o.node_cpu = a.node_cpu;
            o.progress = true;
            partita_experiments::experiment::speculation(&exe, &o).await?
        }
    };
    print!("{}", partita_experiments::experiment::table(&r));
    let files = partita_experiments::experiment::write(&r, &a.json)?;
    print_written(&files);
    Ok(reproduction::outcome_of_experiment(&r, files))
}

/// `partita experiment partitioning|cross-partition|speculation-partitioning`
/// (`src/experiment_partition.rs`): the paper's sizes with `--sim`, this machine's
/// otherwise (and with `--sim --quick`).
async fn partition_experiment(
    a: &ExperimentArgs,
    e: partita_experiments::experiment_partition::PartExperiment,
) -> anyhow::Result<Outcome> {
    use partita_experiments::experiment_partition as ep;
    let mut o = if a.sim && !a.quick {
        ep::PartOptions::sim_full()
    } else {
        ep::PartOptions::real()
    };
    if let Some(d) = a.duration()? {
        o.duration = d;
    }
    if let Some(s) = a.seed {
        o.seed = s;
    }
    if let Some(p) = a.preload {
        o.preload = p;
    }
    if let Some(c) = &a.clients {
        if c.is_empty() || c.contains(&0) {
            bail!("--clients takes positive client counts");
        }
        o.clients = c.clone();
        o.batch_clients = None;
    }
    if !matches!(a.protocol, Protocol::RingPaxos) {
        bail!("the partitioning experiments run Ring Paxos (speculation needs it)");
    }
    o.durability = a.durability;
    o.multicast = a.multicast;
    o.batchers = a.batchers;
    if a.rings {
        if e != ep::PartExperiment::Partitioning {
            bail!("--rings applies to the partitioning experiment only");
        }
        if a.batchers > 0 {
            bail!("--rings: Multi-Ring Paxos does not combine with batchers (yet)");
        }
        o.rings = true;
    }
    if let Some(d) = a.batch_delay_ms {
        o.batch_delay_ms = d;
    }
    if let Some(b) = a.batch_bytes_max {
        o.batch_bytes_max = b as usize;
    }
    if let Some(n) = a.rounds {
        if e != ep::PartExperiment::Partitioning {
            bail!("--rounds applies to the partitioning experiment only");
        }
        if a.sim {
            bail!("--rounds: a simulated sweep is deterministic (rounds are for real runs)");
        }
        o.rounds = n;
    }
    if let Some(i) = a.value_interval_ms {
        o.value_interval_ms = i;
    }
    if let Some(i) = a.batcher_interval_ms {
        if a.batchers == 0 {
            bail!("--batcher-interval-ms needs --batchers N (N > 0)");
        }
        o.batcher_interval_ms = i;
    }
    if let Some(w) = &a.workloads {
        o.workloads = w
            .iter()
            .map(|&w| match w {
                Workload::Query | Workload::Batch => Ok(w),
                other => {
                    bail!("--workloads {other}: the partitioning experiments run query and batch")
                }
            })
            .collect::<anyhow::Result<_>>()?;
    }
    o.node_cpu = a.node_cpu;
    if let Some((t, src)) = a.sim_cost()? {
        o.cost = t;
        o.cost_source = src;
    }
    let started = std::time::Instant::now();
    let r = if a.sim {
        tokio::task::block_in_place(|| ep::run_sim(e, &o))?
    } else {
        let exe = std::env::current_exe().context("locating the partita binary")?;
        ep::run_real(&exe, e, &o).await?
    };
    print!("{}", ep::table(&r));
    println!(
        "{} points in {:.0} s wall",
        r.points.len(),
        started.elapsed().as_secs_f64()
    );
    let files = ep::write(&r, &a.json)?;
    print_written(&files);
    Ok(reproduction::outcome_of_partitioning(&r, files))
}
