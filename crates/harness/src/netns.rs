//! A cluster as on separate machines, on one host: each node in a network namespace
//! of its own, wired into one bridge, and network faults injected with nftables inside
//! those namespaces (`partita up --netns`, `partita nemesis --netns`; needs root).
//!
//! # Topology
//!
//! A run (one process) owns a *hub* namespace holding a bridge `br0`, one namespace per
//! node and one for its clients. Each of those gets a veth pair: `eth0` on its side,
//! with an address in 10.99.0.0/16 ([`node_ip`], [`CLIENT_IP`]), and the other end in
//! the hub, enslaved to the bridge. Nothing is added to the host's own namespace, so
//! the traffic never leaves the namespaces this module creates, and runs do not see
//! each other (each has its own bridge: two runs may use the same addresses).
//!
//! Namespaces are named `ptns<pid>-hub`, `ptns<pid>-c`, `ptns<pid>-n<id>` after the
//! owning process. [`create`] first deletes those of processes that no longer exist
//! (a run killed before it could clean up); [`teardown`] deletes the run's own.
//!
//! # Who runs where
//!
//! [`Topology::enter_client`] moves the calling thread into the client namespace:
//! called on the main thread before the async runtime starts, every thread of the
//! process (bench and checker clients, status probes) opens its sockets there. Nodes
//! are spawned into their namespace by [`crate::launch`] (a `setns` between fork and
//! exec), so each keeps its pid as the harness's child, and a restarted node comes
//! back at the same address.
//!
//! # Faults
//!
//! [`Topology::block`] loads, in one node's namespace, an nftables table
//! `inet partita_nemesis` that drops what that node receives from or sends to the
//! given peers, or a random share of what it receives from anyone; [`Topology::heal`]
//! deletes the table. Dropping (rather than rejecting) is what a partition looks like
//! to TCP: no reset, just silence until the connection's own timeouts.

use anyhow::{bail, Context};
use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The clients' address.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 255, 1);
/// The prefix length of the run's network.
pub const PREFIX_LEN: u8 = 16;
/// The links' MTU (jumbo frames).
pub const MTU: &str = "9000";
/// The nftables table the faults live in.
pub const FAULT_TABLE: &str = "partita_nemesis";

/// Node `id`'s address (ids up to 65,279).
pub fn node_ip(id: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 99, (id >> 8) as u8, (id & 0xff) as u8)
}

/// The run's namespaces.
pub struct Topology {
    prefix: String,
    nodes: Mutex<BTreeSet<u32>>,
    removed: Mutex<bool>,
    /// Made by the process that started this one ([`adopt_from_env`]): that process
    /// removes it.
    adopted: bool,
}

/// The environment variable that hands a child process the run of the process that
/// started it: the run's name (`ptns<pid>`, [`Topology::name`]); see [`adopt_from_env`].
pub const RUN_ENV: &str = "PARTITA_NETNS_RUN";

static CURRENT: OnceLock<Topology> = OnceLock::new();

/// The topology of this process, if [`create`] made one (or [`adopt_from_env`] took
/// one over) and [`teardown`] has not removed it since.
pub fn current() -> Option<&'static Topology> {
    CURRENT
        .get()
        .filter(|t| !*t.removed.lock().expect("netns lock"))
}

/// Create this process's hub and client namespaces (once per process), after deleting
/// those of runs whose process is gone.
pub fn create() -> anyhow::Result<&'static Topology> {
    if let Some(t) = CURRENT.get() {
        // Torn down earlier in this process (a test after another): build it again.
        let mut removed = t.removed.lock().expect("netns lock");
        if *removed {
            t.nodes.lock().expect("netns lock").clear();
            if let Err(e) = t.build() {
                remove_prefixed(&format!("{}-", t.prefix));
                return Err(e);
            }
            *removed = false;
        }
        return Ok(t);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("network namespaces need root (ip netns, nftables)");
    }
    for tool in ["ip", "nft"] {
        if which(tool).is_none() {
            bail!(
                "`{tool}` is not installed (Debian: {}); --netns needs it",
                if tool == "ip" { "iproute2" } else { "nftables" }
            );
        }
    }
    remove_stale();
    let t = Topology {
        prefix: format!("ptns{}", std::process::id()),
        nodes: Mutex::new(BTreeSet::new()),
        removed: Mutex::new(false),
        adopted: false,
    };
    if let Err(e) = t.build() {
        t.remove();
        return Err(e);
    }
    match CURRENT.set(t) {
        Ok(()) => Ok(CURRENT.get().expect("just set")),
        Err(t) => {
            t.remove();
            Ok(CURRENT.get().expect("set by another thread"))
        }
    }
}

impl Topology {
    /// The hub with its bridge and the clients' namespace.
    fn build(&self) -> anyhow::Result<()> {
        let t = self;
        let hub = t.hub();
        let made = (|| {
            ip(&["netns", "add", &hub])?;
            ip(&["-n", &hub, "link", "set", "lo", "up"])?;
            // No multicast snooping: without an IGMP querier on the bridge, group
            // traffic simply reaches every port ([multicast] clusters).
            ip(&[
                "-n",
                &hub,
                "link",
                "add",
                "br0",
                "type",
                "bridge",
                "mcast_snooping",
                "0",
            ])?;
            ip(&["-n", &hub, "link", "set", "br0", "up"])?;
            t.attach(&t.client_ns(), "c", CLIENT_IP)
        })();
        made.map_err(|e| e.context("creating the run's network namespaces"))
    }
}

/// Take over the run named by [`RUN_ENV`], made by the process that started this one
/// with [`create`], as this process's: the nodes this process starts go into that run's
/// node namespaces (wired on first use, as the run's own), and the run's maker removes
/// it all ([`teardown`] here leaves it). This process should itself have been started
/// in the run's client namespace ([`spawn_in`] with [`Topology::client_ns`]), so that
/// every thread of it is a client there. `None` when the variable is unset.
pub fn adopt_from_env() -> anyhow::Result<Option<&'static Topology>> {
    let Ok(name) = std::env::var(RUN_ENV) else {
        return Ok(None);
    };
    let owner = name
        .strip_prefix("ptns")
        .and_then(|p| p.parse::<u32>().ok())
        .with_context(|| format!("{RUN_ENV}={name}: not the name of a run (ptns<pid>)"))?;
    if let Some(t) = CURRENT.get() {
        if t.prefix != name {
            bail!(
                "{RUN_ENV}={name}, but this process already runs on {}",
                t.prefix
            );
        }
        return Ok(Some(t));
    }
    let t = Topology {
        prefix: name.clone(),
        nodes: Mutex::new(BTreeSet::new()),
        removed: Mutex::new(false),
        adopted: true,
    };
    if !Topology::ns_path(&t.hub()).exists() {
        bail!("{RUN_ENV}={name}: process {owner}'s run has no hub namespace (gone?)");
    }
    let _ = CURRENT.set(t);
    let t = CURRENT.get().expect("just set");
    if t.prefix != name {
        bail!(
            "{RUN_ENV}={name}, but this process already runs on {}",
            t.prefix
        );
    }
    Ok(Some(t))
}

/// Delete this process's namespaces (and with them their links and nftables rules).
/// Nodes still running in them lose their network; stop them first. A run adopted from
/// the process that started this one ([`adopt_from_env`]) is left to that process.
pub fn teardown() {
    if let Some(t) = CURRENT.get().filter(|t| !t.adopted) {
        t.remove();
    }
}

/// Start `cmd` with its network namespace the one at `ns_path` (a `setns` between fork
/// and exec, so the child is the program itself, this process's child).
pub fn spawn_in(cmd: &mut Command, ns_path: &Path) -> anyhow::Result<std::process::Child> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let f =
        std::fs::File::open(ns_path).with_context(|| format!("opening {}", ns_path.display()))?;
    let fd = f.as_raw_fd();
    // SAFETY: setns is async-signal-safe; `fd` stays open until after the spawn (and is
    // close-on-exec, so the child does not inherit it).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    drop(f);
    Ok(child)
}

impl Topology {
    fn hub(&self) -> String {
        format!("{}-hub", self.prefix)
    }

    /// The run's name (`ptns<pid>` of the process that made it): what [`RUN_ENV`]
    /// hands a child process.
    pub fn name(&self) -> &str {
        &self.prefix
    }

    /// The clients' namespace.
    pub fn client_ns(&self) -> String {
        format!("{}-c", self.prefix)
    }

    /// Whether the calling thread is in the run's client namespace ([`enter_client`],
    /// or a thread started by one that was): the same namespace file as its own.
    ///
    /// [`enter_client`]: Topology::enter_client
    pub fn is_client_thread(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
        let mine = id(Path::new("/proc/thread-self/ns/net"));
        mine.is_some() && mine == id(&Self::ns_path(&self.client_ns()))
    }

    /// Node `id`'s namespace (created by [`Topology::ensure_node`]).
    pub fn node_ns(&self, id: u32) -> String {
        format!("{}-n{id}", self.prefix)
    }

    /// Node N's namespace, with N written as such (for messages).
    pub fn node_ns_pattern(&self) -> String {
        format!("{}-nN", self.prefix)
    }

    /// The file that names namespace `ns` (what `setns` opens).
    pub fn ns_path(ns: &str) -> PathBuf {
        Path::new("/run/netns").join(ns)
    }

    /// Namespace `ns`, wired to the bridge with `addr` on its `eth0`; `port` names the
    /// link's end in the hub.
    fn attach(&self, ns: &str, port: &str, addr: Ipv4Addr) -> anyhow::Result<()> {
        let hub = self.hub();
        ip(&["netns", "add", ns])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        ip(&[
            "-n", &hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns,
        ])?;
        // Jumbo frames, as on a data-centre LAN: a batched value (8 KB) is one frame,
        // not six IP fragments.
        ip(&["-n", &hub, "link", "set", port, "mtu", MTU])?;
        ip(&["-n", ns, "link", "set", "eth0", "mtu", MTU])?;
        ip(&["-n", &hub, "link", "set", port, "master", "br0", "up"])?;
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{addr}/{PREFIX_LEN}"),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        Ok(())
    }

    /// Node `id`'s namespace, created and wired on first use; its path.
    pub fn ensure_node(&self, id: u32) -> anyhow::Result<PathBuf> {
        let mut nodes = self.nodes.lock().expect("netns lock");
        let ns = self.node_ns(id);
        if !nodes.contains(&id) {
            if id == 0 || id >= 0xff00 {
                bail!("node id {id} has no address in the run's network (1..65279)");
            }
            self.attach(&ns, &format!("n{id}"), node_ip(id))
                .with_context(|| format!("wiring node {id}'s namespace"))?;
            nodes.insert(id);
        }
        Ok(Self::ns_path(&ns))
    }

    /// Move the calling thread into the client namespace: sockets it (and threads it
    /// starts afterwards) opens are there.
    pub fn enter_client(&self) -> anyhow::Result<()> {
        enter(&Self::ns_path(&self.client_ns()))
    }

    /// Drop, at node `id`, packets from the nodes `from`, packets to the nodes `to`,
    /// and `loss_percent` percent of the packets from anyone (clients included).
    /// Replaces what was blocked there before.
    pub fn block(&self, id: u32, from: &[u32], to: &[u32], loss_percent: u8) -> anyhow::Result<()> {
        let set = |ids: &[u32]| {
            ids.iter()
                .map(|&i| node_ip(i).to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut input = Vec::new();
        let mut output = Vec::new();
        if !from.is_empty() {
            input.push(format!("ip saddr {{ {} }} drop", set(from)));
        }
        if !to.is_empty() {
            output.push(format!("ip daddr {{ {} }} drop", set(to)));
        }
        if loss_percent > 0 {
            input.push(format!(
                "iifname \"eth0\" numgen random mod 100 < {} drop",
                loss_percent.min(100)
            ));
        }
        let script = format!(
            "table inet {FAULT_TABLE}\ndelete table inet {FAULT_TABLE}\n\
             table inet {FAULT_TABLE} {{\n\
             \tchain input {{ type filter hook input priority 0; policy accept;\n\t\t{}\n\t}}\n\
             \tchain output {{ type filter hook output priority 0; policy accept;\n\t\t{}\n\t}}\n}}\n",
            input.join("\n\t\t"),
            output.join("\n\t\t")
        );
        nft(&self.node_ns(id), &["-f", "-"], Some(&script))
            .with_context(|| format!("blocking traffic at node {id}"))
    }

    /// Drop `percent` percent of the UDP datagrams node `id` receives (IP multicast's
    /// Phase 2A), and nothing else. Replaces what was blocked there before.
    pub fn lose_datagrams(&self, id: u32, percent: u8) -> anyhow::Result<()> {
        let script = format!(
            "table inet {FAULT_TABLE}\ndelete table inet {FAULT_TABLE}\n\
             table inet {FAULT_TABLE} {{\n\
             \tchain input {{ type filter hook input priority 0; policy accept;\n\
             \t\tmeta l4proto udp numgen random mod 100 < {} drop\n\t}}\n}}\n",
            percent.min(100)
        );
        nft(&self.node_ns(id), &["-f", "-"], Some(&script))
            .with_context(|| format!("dropping datagrams at node {id}"))
    }

    /// Remove every fault at node `id` (nothing to remove is fine).
    pub fn heal(&self, id: u32) -> anyhow::Result<()> {
        let ns = self.node_ns(id);
        let script = format!("table inet {FAULT_TABLE}\ndelete table inet {FAULT_TABLE}\n");
        nft(&ns, &["-f", "-"], Some(&script)).with_context(|| format!("healing node {id}"))
    }

    /// The nftables rules now loaded at node `id` (for reports and tests).
    pub fn rules(&self, id: u32) -> anyhow::Result<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.node_ns(id), "nft", "list", "ruleset"])
            .output()
            .context("running nft")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The processes in the run's namespaces (its nodes, and whatever else runs
    /// there), by `ip netns pids`.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for ns in namespaces() {
            if !ns.starts_with(&format!("{}-", self.prefix)) {
                continue;
            }
            if let Ok(out) = Command::new(which("ip").unwrap_or_else(|| "ip".into()))
                .args(["netns", "pids", &ns])
                .output()
            {
                pids.extend(
                    String::from_utf8_lossy(&out.stdout)
                        .split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                );
            }
        }
        pids
    }

    fn remove(&self) {
        let mut removed = self.removed.lock().expect("netns lock");
        if *removed {
            return;
        }
        *removed = true;
        remove_prefixed(&format!("{}-", self.prefix));
    }
}

/// Install `ip` and `nft` when either is missing, with the repository's
/// `scripts/install-test-deps` (Debian's iproute2 and nftables; root). `repo`: the
/// repository's root.
pub fn ensure_tools(repo: &Path) -> anyhow::Result<()> {
    if which("ip").is_some() && which("nft").is_some() {
        return Ok(());
    }
    let script = repo.join("scripts/install-test-deps");
    let st = Command::new("bash")
        .arg(&script)
        .args(["iproute2", "nftables"])
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    if !st.success() {
        bail!("{} iproute2 nftables failed ({st})", script.display());
    }
    Ok(())
}

/// Move the calling thread into the network namespace named by `path`.
pub fn enter(path: &Path) -> anyhow::Result<()> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: a valid descriptor of a namespace file; affects only this thread.
    let r = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) };
    if r != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("entering network namespace {}", path.display()));
    }
    Ok(())
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(which("ip").unwrap_or_else(|| "ip".into()))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running ip")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn nft(ns: &str, args: &[&str], stdin: Option<&str>) -> anyhow::Result<()> {
    use std::io::Write;
    let nft = which("nft").unwrap_or_else(|| "nft".into());
    let mut child = Command::new(which("ip").unwrap_or_else(|| "ip".into()))
        .args(["netns", "exec", ns])
        .arg(nft)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running nft")?;
    if let Some(mut i) = child.stdin.take() {
        i.write_all(stdin.unwrap_or("").as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "nft in {ns}: {}\n{}",
            String::from_utf8_lossy(&out.stderr).trim(),
            stdin.unwrap_or("")
        );
    }
    Ok(())
}

fn namespaces() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Delete every namespace whose name starts with `prefix`.
fn remove_prefixed(prefix: &str) {
    for ns in namespaces() {
        if ns.starts_with(prefix) {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                eprintln!("warning: {e:#}");
            }
        }
    }
}

/// Delete the namespaces of runs whose process no longer exists.
fn remove_stale() {
    for ns in namespaces() {
        let Some(rest) = ns.strip_prefix("ptns") else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", &ns]);
        }
    }
}

/// Put `cluster` on the run's network: node N listens at [`node_ip`]`(N)` on the port
/// it had, with mutual TLS (certificates written to `cert_dir`, issued for those
/// addresses). etcd gateways and dashboards stay off (they listen on loopback only).
pub fn place(cluster: &mut partita_config::ClusterConfig, cert_dir: &Path) -> anyhow::Result<()> {
    place_with(cluster, cert_dir, Wire::Tls)
}

/// What a cluster placed on the run's network speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// Mutual TLS (certificates written for the nodes' addresses).
    Tls,
    /// Plain TCP, said on purpose (`[tls] insecure = true`).
    Insecure,
    /// Plain TCP and Ring Paxos's Phase 2A as IP multicast (`[multicast]`).
    Multicast,
}

/// The multicast group [`place_with`] gives a cluster with IP multicast (partition p:
/// this plus p), and its port.
pub const MULTICAST_GROUP: Ipv4Addr = Ipv4Addr::new(239, 77, 0, 1);
pub const MULTICAST_PORT: u16 = 7700;

/// [`place`] with the given [`Wire`]: multicast needs plain TCP said on purpose
/// (datagrams carry no authentication), so it writes no certificates either.
pub fn place_with(
    cluster: &mut partita_config::ClusterConfig,
    cert_dir: &Path,
    wire: Wire,
) -> anyhow::Result<()> {
    let mut nodes = Vec::new();
    for n in &mut cluster.nodes {
        let port = n
            .addr
            .parse::<std::net::SocketAddr>()
            .map(|a| a.port())
            .with_context(|| format!("node {}'s address {}", n.id, n.addr))?;
        let ip = node_ip(n.id);
        n.addr = format!("{ip}:{port}");
        n.etcd_addr = None;
        nodes.push((n.id, Some(ip.to_string())));
    }
    if wire != Wire::Tls {
        cluster.tls = Some(partita_config::TlsSection {
            insecure: true,
            ..Default::default()
        });
        cluster.multicast =
            (wire == Wire::Multicast).then_some(partita_config::multicast::MulticastSection {
                group: MULTICAST_GROUP,
                port: MULTICAST_PORT,
            });
        return Ok(());
    }
    let w = crate::certs::write_certs(cert_dir, &nodes, 30, true)?;
    cluster.tls = Some(w.section);
    Ok(())
}

/// `cluster` as a run on this process's namespaces needs it: placed on them with
/// mutual TLS (certificates written under `dir/certs`) when the process made them
/// ([`current`], `--netns`), the calling thread is one of the run's clients (in its
/// client namespace: a process may hold a run and other work, as tests do) and the
/// file is not placed yet; otherwise unchanged. The
/// experiments call it for every point, so that `partita experiment --netns` runs each
/// node in a namespace of its own, as on separate machines.
pub fn place_for_run(
    cluster: &partita_config::ClusterConfig,
    dir: &Path,
) -> anyhow::Result<partita_config::ClusterConfig> {
    let mut c = cluster.clone();
    if current().is_some_and(|t| t.is_client_thread()) && !is_placed(&c) {
        place_with(&mut c, &dir.join("certs"), Wire::Tls)?;
    }
    Ok(c)
}

/// Whether `cluster` was placed on a run's network by [`place`].
pub fn is_placed(cluster: &partita_config::ClusterConfig) -> bool {
    cluster.nodes.iter().all(|n| {
        n.addr
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|a| a.ip() == std::net::IpAddr::V4(node_ip(n.id)))
    })
}
