//! Starting and stopping local clusters as real processes (`partita up`, `bench --up`,
//! the integration tests): one `partita node` process per node, logs in the data
//! directory, stopped by pid with SIGTERM (then SIGKILL if it does not go). With a
//! per-node CPU budget (`--node-cpu`, [`crate::node_cpu`]) each node process goes into
//! a cgroup of its own right after it is spawned, and the cgroups are removed once the
//! processes have exited. In a run on network namespaces ([`crate::netns`]) each node
//! process starts in its own.

use crate::node_cpu::{CpuGroups, NodeCpu};
use anyhow::{bail, Context};
use partita_config::ClusterConfig;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct LocalCluster {
    pub cluster: ClusterConfig,
    pub cluster_file: PathBuf,
    pub data_dir: PathBuf,
    pub children: Vec<(u32, Child)>,
    /// With a per-node CPU budget: the run's cgroups (node N in member `node-N`).
    pub cpu: Option<CpuGroups>,
}

/// Read the cluster file in `data_dir`, or write `default` there if there is none.
pub fn ensure_cluster_file(
    data_dir: &Path,
    default: impl FnOnce() -> anyhow::Result<ClusterConfig>,
) -> anyhow::Result<(PathBuf, ClusterConfig)> {
    let file = data_dir.join("cluster.toml");
    if file.exists() {
        let c = ClusterConfig::load(&file)?;
        return Ok((file, c));
    }
    // The new cluster first: options it refuses leave no directory behind.
    let c = default()?;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    std::fs::write(&file, c.to_toml()).with_context(|| format!("writing {}", file.display()))?;
    Ok((file, c))
}

/// A block of 20 ports on 127.0.0.1 that is free now, below the kernel's ephemeral
/// range (see [`partita_net::free_port_block`]: a node that restarts must be
/// able to bind its port again).
pub fn pick_base_port() -> u16 {
    partita_net::free_port_block(20).unwrap_or(27_100)
}

impl LocalCluster {
    /// Start every node of `cluster_file` as a child process of this one.
    pub fn start(
        cluster_file: &Path,
        cluster: &ClusterConfig,
        data_dir: &Path,
        node_args: &[String],
        node_cpu: Option<f64>,
    ) -> anyhow::Result<LocalCluster> {
        let exe = std::env::current_exe().context("locating the partita binary")?;
        Self::start_with(&exe, cluster_file, cluster, data_dir, node_args, node_cpu)
    }

    /// Start every node with the binary `exe`; with `node_cpu`, each node limited to
    /// that fraction of one core (a cgroup of its own; an error, never an unbudgeted
    /// run, if cgroups cannot be used).
    pub fn start_with(
        exe: &Path,
        cluster_file: &Path,
        cluster: &ClusterConfig,
        data_dir: &Path,
        node_args: &[String],
        node_cpu: Option<f64>,
    ) -> anyhow::Result<LocalCluster> {
        let cpu = match node_cpu {
            Some(f) => {
                let g = CpuGroups::create(NodeCpu::new(f)?)?;
                warn_if_oversubscribed(cluster.nodes.len(), f);
                Some(g)
            }
            None => None,
        };
        // From here on, dropping `lc` stops what was started and removes the groups.
        let mut lc = LocalCluster {
            cluster: cluster.clone(),
            cluster_file: cluster_file.to_path_buf(),
            data_dir: data_dir.to_path_buf(),
            children: Vec::new(),
            cpu,
        };
        for n in &cluster.nodes {
            lc.spawn(exe, n.id, node_args)?;
        }
        Ok(lc)
    }

    /// Start node `id` (again: a restarted node replaces its old process), in its
    /// cgroup when the cluster has a CPU budget.
    pub fn spawn(&mut self, exe: &Path, id: u32, node_args: &[String]) -> anyhow::Result<()> {
        let mut child = spawn_node(exe, &self.cluster_file, id, &self.data_dir, node_args)?;
        if let Some(g) = &mut self.cpu {
            if let Err(e) = g.place(&format!("node-{id}"), child.id()) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e.context(format!("limiting node {id}'s CPU (--node-cpu)")));
            }
        }
        if let Some(slot) = self.children.iter_mut().find(|(n, _)| *n == id) {
            slot.1 = child;
        } else {
            self.children.push((id, child));
        }
        Ok(())
    }

    /// Stop node `id` (SIGTERM, SIGKILL after `grace`), start it again from its disk,
    /// and wait until it answers a status probe: how long the restart took, from the
    /// new process's start to its first answer.
    pub async fn restart_node(
        &mut self,
        exe: &Path,
        id: u32,
        node_args: &[String],
        grace: Duration,
        timeout: Duration,
    ) -> anyhow::Result<Duration> {
        if let Some((_, c)) = self.children.iter_mut().find(|(n, _)| *n == id) {
            terminate(c);
            let deadline = Instant::now() + grace;
            loop {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Ok(None) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        }
        let started = Instant::now();
        self.spawn(exe, id, node_args)?;
        loop {
            if partita_client::node_status_of(&self.cluster, id, Duration::from_millis(200))
                .await
                .is_some()
            {
                return Ok(started.elapsed());
            }
            if started.elapsed() > timeout {
                bail!("node {id} does not answer {timeout:?} after its restart");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The CPU budget's label, when the cluster runs with one.
    pub fn cpu_label(&self) -> Option<String> {
        self.cpu.as_ref().map(|g| g.describe())
    }

    /// Wait until every node answers a status probe.
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        for n in self.cluster.nodes.clone() {
            loop {
                if partita_client::node_status_of(&self.cluster, n.id, Duration::from_millis(500))
                    .await
                    .is_some()
                {
                    break;
                }
                for (id, c) in &mut self.children {
                    if let Ok(Some(status)) = c.try_wait() {
                        bail!(
                            "node {id} exited during start-up ({status}); see {}",
                            self.data_dir.join(format!("node-{id}.log")).display()
                        );
                    }
                }
                if Instant::now() > deadline {
                    bail!(
                        "node {} does not answer at {} after {timeout:?}",
                        n.id,
                        self.cluster.dial_addr(n.id)
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// Stop every node: SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        for (_, c) in &mut self.children {
            terminate(c);
        }
        let deadline = Instant::now() + grace;
        for (_, c) in &mut self.children {
            loop {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        self.children.clear();
        // Every process has exited (and been reaped): the groups can go.
        if let Some(mut g) = self.cpu.take() {
            if let Err(e) = g.remove() {
                eprintln!("warning: {e:#}");
            }
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// Budgets that add up to more than the machine cannot all be honoured at once, and the
/// bench client needs CPU too: say so (the run is still what was asked for).
fn warn_if_oversubscribed(nodes: usize, fraction: f64) {
    let cores = crate::node_cpu::cores();
    let total = nodes as f64 * fraction;
    if total > cores as f64 - 0.25 {
        eprintln!(
            "warning: {nodes} nodes x {} of a core = {total:.2} cores, on a machine of {cores}: \
             the budgets leave little or nothing for the clients and cannot all be honoured \
             at once, so the run does not emulate one machine per node faithfully",
            crate::node_cpu::fmt_fraction(fraction)
        );
    }
}

/// Bytes of node `id`'s write-ahead log on disk in `data_dir` (every file of its
/// `wal` directory; 0 when it has none).
pub fn wal_bytes_in(data_dir: &Path, id: u32) -> u64 {
    let dir = data_dir.join(format!("node-{id}")).join("wal");
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

pub fn spawn_node(
    exe: &Path,
    cluster_file: &Path,
    id: u32,
    data_dir: &Path,
    extra: &[String],
) -> anyhow::Result<Child> {
    let log_path = data_dir.join(format!("node-{id}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let mut cmd = Command::new(exe);
    cmd.arg("node")
        .arg("--cluster")
        .arg(cluster_file)
        .arg("--id")
        .arg(id.to_string())
        .arg("--data-dir")
        .arg(data_dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // In a run on network namespaces (`--netns`), a node of a cluster placed on them
    // (`netns::place`) goes into its own; any other cluster of this process stays here.
    let placed = || {
        partita_config::ClusterConfig::load(cluster_file).is_ok_and(|c| crate::netns::is_placed(&c))
    };
    let child = match crate::netns::current().filter(|_| placed()) {
        Some(t) => crate::netns::spawn_in(&mut cmd, &t.ensure_node(id)?),
        None => cmd.spawn().map_err(anyhow::Error::from),
    }
    .with_context(|| format!("starting node {id} ({})", exe.display()))?;
    Ok(child)
}

pub fn terminate(c: &mut Child) {
    // SIGTERM lets the node stop cleanly; the pid is our own child.
    unsafe {
        libc::kill(c.id() as i32, libc::SIGTERM);
    }
}
