//! Starting and stopping local clusters as real processes (`partita up`, `bench --up`,
//! the integration tests): one `partita node` process per node, logs in the data
//! directory, stopped by pid with SIGTERM (then SIGKILL if it does not go).

use anyhow::{bail, Context};
use partita_runtime::ClusterConfig;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct LocalCluster {
    pub cluster: ClusterConfig,
    pub cluster_file: PathBuf,
    pub data_dir: PathBuf,
    pub children: Vec<(u32, Child)>,
}

/// Read the cluster file in `data_dir`, or write `default` there if there is none.
pub fn ensure_cluster_file(
    data_dir: &Path,
    default: impl FnOnce() -> anyhow::Result<ClusterConfig>,
) -> anyhow::Result<(PathBuf, ClusterConfig)> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let file = data_dir.join("cluster.toml");
    if file.exists() {
        let c = ClusterConfig::load(&file)?;
        return Ok((file, c));
    }
    let c = default()?;
    std::fs::write(&file, c.to_toml()).with_context(|| format!("writing {}", file.display()))?;
    Ok((file, c))
}

/// A block of 20 ports on 127.0.0.1 that is free now, below the kernel's ephemeral
/// range (see [`partita_runtime::net::free_port_block`]: a node that restarts must be
/// able to bind its port again).
pub fn pick_base_port() -> u16 {
    partita_runtime::net::free_port_block(20).unwrap_or(27_100)
}

impl LocalCluster {
    /// Start every node of `cluster_file` as a child process of this one.
    pub fn start(
        cluster_file: &Path,
        cluster: &ClusterConfig,
        data_dir: &Path,
        node_args: &[String],
    ) -> anyhow::Result<LocalCluster> {
        let exe = std::env::current_exe().context("locating the partita binary")?;
        Self::start_with(&exe, cluster_file, cluster, data_dir, node_args)
    }

    pub fn start_with(
        exe: &Path,
        cluster_file: &Path,
        cluster: &ClusterConfig,
        data_dir: &Path,
        node_args: &[String],
    ) -> anyhow::Result<LocalCluster> {
        let mut lc = LocalCluster {
            cluster: cluster.clone(),
            cluster_file: cluster_file.to_path_buf(),
            data_dir: data_dir.to_path_buf(),
            children: Vec::new(),
        };
        for n in &cluster.nodes {
            let child = spawn_node(exe, cluster_file, n.id, data_dir, node_args)?;
            lc.children.push((n.id, child));
        }
        Ok(lc)
    }

    /// Wait until every node answers a status probe.
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        for n in self.cluster.nodes.clone() {
            loop {
                if partita_client::node_status(self.cluster.addr(n.id), Duration::from_millis(500))
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
                        self.cluster.addr(n.id)
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
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
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
    let child = Command::new(exe)
        .arg("node")
        .arg("--cluster")
        .arg(cluster_file)
        .arg("--id")
        .arg(id.to_string())
        .arg("--data-dir")
        .arg(data_dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting node {id} ({})", exe.display()))?;
    Ok(child)
}

pub fn terminate(c: &mut Child) {
    // SIGTERM lets the node stop cleanly; the pid is our own child.
    unsafe {
        libc::kill(c.id() as i32, libc::SIGTERM);
    }
}
