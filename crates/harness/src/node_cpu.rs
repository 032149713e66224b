//! Per-node CPU budgets for local clusters (`--node-cpu FRACTION`): every node process
//! runs in a cgroup of its own whose CPU quota is FRACTION of one core, so that a
//! cluster on this small machine behaves a little more like the papers' clusters, one
//! machine per node (the same spirit in which the runtime injects wide-area latency
//! because the kernel has no netem). Results obtained this way are always labelled
//! ([`NodeCpu::describe`]).
//!
//! One group per cluster run (`partita-cpu-<pid>-<seq>`, `<pid>` being the process that
//! started the cluster) and one child per node (`node-<id>`) holding the quota; the
//! group itself has none. Both cgroup versions are supported:
//!
//! - v2: `cpu.max` = "QUOTA PERIOD", in a child of this process's cgroup or of the
//!   hierarchy's root (where the cpu controller is enabled for children);
//! - v1: `cpu.cfs_period_us` then `cpu.cfs_quota_us`, under the cpu controller's mount
//!   (in this process's cpu cgroup).
//!
//! The pure parts (validation, the quota and the file contents, parsing of the kernel's
//! files) are separate from the I/O ([`CpuGroups`]) so that they are unit-tested
//! without cgroups. Groups are removed when the cluster stops (after its processes
//! exited), on drop, and groups left by processes that no longer exist (a SIGKILLed
//! run) are swept when the next group is created. Where no writable cpu controller
//! exists the error says what was tried and that the option can be left out; nothing
//! ever runs silently unbudgeted.

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// CFS bandwidth period by default: short, so that a node that used up its quota waits
/// at most ~(1 − fraction) × 10 ms, not the kernel's default 100 ms period's stalls
/// (see docs/experiments.md for the periods measured).
pub const PERIOD_US_DEFAULT: u64 = 10_000;
/// The kernel refuses a quota or a period below 1 ms (cgroup v1 and v2).
pub const QUOTA_US_MIN: u64 = 1_000;
/// The kernel refuses a period above 1 s.
pub const PERIOD_US_MAX: u64 = 1_000_000;
/// The smallest budget: 1 ms per 1 s period.
pub const FRACTION_MIN: f64 = QUOTA_US_MIN as f64 / PERIOD_US_MAX as f64;
/// Overrides the period (µs) for experiments with the period itself; the effective
/// period is always part of the label.
pub const PERIOD_ENV: &str = "PARTITA_NODE_CPU_PERIOD_US";
/// Name prefix of every group this module creates.
pub const GROUP_PREFIX: &str = "partita-cpu-";
/// How long removal waits for the kernel to release a group whose last process exited.
const REMOVE_WAIT_MAX: Duration = Duration::from_secs(2);

// ------------------------------------------------------------------ pure parts

/// Which cgroup interface a group uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

impl std::fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CgroupVersion::V1 => "cgroup v1 cpu quota",
            CgroupVersion::V2 => "cgroup v2 cpu.max",
        })
    }
}

/// Check a `--node-cpu` fraction: a finite number above the kernel's smallest budget and
/// at most the number of cores (a node cannot use more).
pub fn validate_fraction(fraction: f64, cores: usize) -> Result<f64, String> {
    if !fraction.is_finite() || fraction <= 0.0 {
        return Err(format!(
            "{fraction} is not a positive fraction of a core (e.g. 0.15)"
        ));
    }
    if fraction < FRACTION_MIN {
        return Err(format!(
            "{fraction} is below {FRACTION_MIN}, the smallest budget the kernel takes (1 ms per 1 s period)"
        ));
    }
    if fraction > cores as f64 {
        return Err(format!(
            "{fraction} is more than this machine's {cores} cores"
        ));
    }
    Ok(fraction)
}

/// clap's value parser for `--node-cpu`.
pub fn parse_fraction_arg(s: &str) -> Result<f64, String> {
    let f: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number (a fraction of one core, e.g. 0.15)"))?;
    validate_fraction(f, cores())
}

/// This machine's cores, as the scheduler sees them.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A validated budget: `quota_us` of CPU time (all threads together) per `period_us`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeCpu {
    pub fraction: f64,
    pub period_us: u64,
    pub quota_us: u64,
}

impl NodeCpu {
    /// The budget with the default period, or the one `PARTITA_NODE_CPU_PERIOD_US` sets.
    pub fn new(fraction: f64) -> anyhow::Result<NodeCpu> {
        let period_us = match std::env::var(PERIOD_ENV) {
            Ok(v) => v
                .trim()
                .parse::<u64>()
                .map_err(|_| anyhow::anyhow!("{PERIOD_ENV}={v} is not a number of µs"))?,
            Err(_) => PERIOD_US_DEFAULT,
        };
        NodeCpu::with_period(fraction, period_us).map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The budget of `fraction` with period `period_us`, lengthened where needed so the
    /// quota is at least the kernel's 1 ms (0.05 of a core gets a 20 ms period).
    pub fn with_period(fraction: f64, period_us: u64) -> Result<NodeCpu, String> {
        // Any machine's core count; the CLI checks against this machine's.
        validate_fraction(fraction, 4096)?;
        if !(QUOTA_US_MIN..=PERIOD_US_MAX).contains(&period_us) {
            return Err(format!(
                "a period of {period_us} µs is outside the kernel's {QUOTA_US_MIN}..={PERIOD_US_MAX} µs"
            ));
        }
        let needed_us = (QUOTA_US_MIN as f64 / fraction).ceil() as u64;
        let period_us = period_us.max(needed_us).min(PERIOD_US_MAX);
        let quota_us = ((fraction * period_us as f64).round() as u64).max(QUOTA_US_MIN);
        let b = NodeCpu {
            fraction,
            period_us,
            quota_us,
        };
        assert!(b.quota_us >= QUOTA_US_MIN && b.period_us >= QUOTA_US_MIN);
        assert!(b.period_us <= PERIOD_US_MAX);
        assert!((b.quota_us as f64 / b.period_us as f64 - fraction).abs() <= 0.5 / 1000.0 + 1e-9);
        Ok(b)
    }

    /// The sentence every budgeted result carries.
    pub fn describe(&self, version: CgroupVersion) -> String {
        format!(
            "each node limited to {} of a core ({version} {} ms per {} ms period): emulates one machine per node",
            fmt_fraction(self.fraction),
            fmt_ms(self.quota_us),
            fmt_ms(self.period_us),
        )
    }

    /// The files to write into a node's group, in order, and their contents.
    pub fn files(&self, version: CgroupVersion) -> Vec<(&'static str, String)> {
        match version {
            // The period first: the quota is checked against it.
            CgroupVersion::V1 => vec![
                ("cpu.cfs_period_us", self.period_us.to_string()),
                ("cpu.cfs_quota_us", self.quota_us.to_string()),
            ],
            CgroupVersion::V2 => vec![("cpu.max", format!("{} {}", self.quota_us, self.period_us))],
        }
    }
}

/// "0.15", "1", "0.125": the fraction as the user wrote it, without float noise.
pub fn fmt_fraction(f: f64) -> String {
    let s = format!("{f:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn fmt_ms(us: u64) -> String {
    fmt_fraction(us as f64 / 1000.0)
}

/// A quota as the kernel reports it: `None` is unlimited.
pub type Quota = Option<(u64, u64)>;

/// Parse cgroup v2's `cpu.max` ("max 100000" or "QUOTA PERIOD").
pub fn parse_cpu_max(text: &str) -> Result<Quota, String> {
    let mut f = text.split_whitespace();
    let (Some(q), Some(p), None) = (f.next(), f.next(), f.next()) else {
        return Err(format!("cpu.max `{}` is not `QUOTA PERIOD`", text.trim()));
    };
    let period: u64 = p
        .parse()
        .map_err(|_| format!("cpu.max period `{p}` is not a number"))?;
    if q == "max" {
        return Ok(None);
    }
    let quota: u64 = q
        .parse()
        .map_err(|_| format!("cpu.max quota `{q}` is not a number or `max`"))?;
    Ok(Some((quota, period)))
}

/// Parse cgroup v1's `cpu.cfs_quota_us` and `cpu.cfs_period_us` (a quota of -1 is
/// unlimited).
pub fn parse_v1_quota(quota: &str, period: &str) -> Result<Quota, String> {
    let period: u64 = period
        .trim()
        .parse()
        .map_err(|_| format!("cpu.cfs_period_us `{}` is not a number", period.trim()))?;
    let quota: i64 = quota
        .trim()
        .parse()
        .map_err(|_| format!("cpu.cfs_quota_us `{}` is not a number", quota.trim()))?;
    if quota < 0 {
        return Ok(None);
    }
    Ok(Some((quota as u64, period)))
}

/// What a group's `cpu.stat` says (v1: `nr_periods`, `nr_throttled`, `throttled_time`
/// in ns; v2 also `usage_usec` and `throttled_usec`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStat {
    /// Periods in which the group had work to do.
    pub nr_periods: u64,
    /// Periods in which it ran out of quota and waited.
    pub nr_throttled: u64,
    pub throttled_us: u64,
    /// CPU time used (v2 only).
    pub usage_us: Option<u64>,
}

impl CpuStat {
    /// Share of the active periods between `earlier` and `self` in which the group was
    /// throttled, in percent (`None` if it had no active period).
    pub fn throttled_pct_since(&self, earlier: &CpuStat) -> Option<f64> {
        let periods = self.nr_periods.checked_sub(earlier.nr_periods)?;
        let throttled = self.nr_throttled.checked_sub(earlier.nr_throttled)?;
        (periods > 0).then(|| 100.0 * throttled as f64 / periods as f64)
    }
}

/// Parse `cpu.stat` (either version); unknown lines are ignored.
pub fn parse_cpu_stat(text: &str) -> CpuStat {
    let mut s = CpuStat::default();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(k), Some(v)) = (f.next(), f.next()) else {
            continue;
        };
        let Ok(v) = v.parse::<u64>() else { continue };
        match k {
            "nr_periods" => s.nr_periods = v,
            "nr_throttled" => s.nr_throttled = v,
            "throttled_time" => s.throttled_us = v / 1000,
            "throttled_usec" => s.throttled_us = v,
            "usage_usec" => s.usage_us = Some(v),
            _ => {}
        }
    }
    s
}

/// A cgroup file system from `/proc/self/mounts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupMount {
    pub path: PathBuf,
    pub version: CgroupVersion,
}

/// The cgroup2 mounts and the cgroup v1 mounts that carry the cpu controller
/// (`rw,relatime,cpu` or `...,cpu,cpuacct`), in the order listed.
pub fn parse_mounts(text: &str) -> Vec<CgroupMount> {
    let mut v = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        let path = PathBuf::from(unescape_mount_path(f[1]));
        match f[2] {
            "cgroup2" => v.push(CgroupMount {
                path,
                version: CgroupVersion::V2,
            }),
            "cgroup" if f[3].split(',').any(|o| o == "cpu") => v.push(CgroupMount {
                path,
                version: CgroupVersion::V1,
            }),
            _ => {}
        }
    }
    v
}

/// `/proc/mounts` writes a space as `\040` (and tab, newline, backslash likewise).
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let n = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(n);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This process's cgroups from `/proc/self/cgroup`: (v2 path, v1 cpu controller path).
pub fn parse_proc_cgroup(text: &str) -> (Option<String>, Option<String>) {
    let (mut v2, mut v1) = (None, None);
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "cpu") {
            v1 = Some(path.to_string());
        }
    }
    (v2, v1)
}

/// Where groups may be created, best first: for each v2 mount, this process's cgroup
/// then the root; for each v1 cpu mount, this process's cpu cgroup then the root.
/// cgroup v2 comes first: where the cpu controller is in v2 it is not in v1.
pub fn candidate_bases(mounts: &[CgroupMount], proc_cgroup: &str) -> Vec<(CgroupVersion, PathBuf)> {
    let (v2_path, v1_path) = parse_proc_cgroup(proc_cgroup);
    let mut v = Vec::new();
    for version in [CgroupVersion::V2, CgroupVersion::V1] {
        let own = match version {
            CgroupVersion::V2 => &v2_path,
            CgroupVersion::V1 => &v1_path,
        };
        for m in mounts.iter().filter(|m| m.version == version) {
            if let Some(p) = own.as_deref().map(|p| p.trim_start_matches('/')) {
                if !p.is_empty() && !p.contains("..") {
                    v.push((version, m.path.join(p)));
                }
            }
            v.push((version, m.path.clone()));
        }
    }
    v
}

/// The pid in a group name `partita-cpu-<pid>-<seq>`.
pub fn group_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(GROUP_PREFIX)?;
    let (pid, seq) = rest.split_once('-')?;
    seq.parse::<u32>().ok()?;
    pid.parse().ok()
}

// ------------------------------------------------------------------ I/O

/// Where this run's groups go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    pub version: CgroupVersion,
    /// The cgroup under which the run's group is created.
    pub base: PathBuf,
}

fn read_trimmed(p: &Path) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(p)?.trim().to_string())
}

fn has_word(text: &str, word: &str) -> bool {
    text.split_whitespace().any(|w| w == word)
}

/// Find a cgroup hierarchy where this process may create CPU-limited groups, or say
/// everything that was tried and why it did not do.
pub fn find_hierarchy() -> anyhow::Result<Hierarchy> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let candidates = candidate_bases(&parse_mounts(&mounts), &own);
    let mut tried = Vec::new();
    for (version, base) in candidates {
        match usable(version, &base) {
            Ok(()) => return Ok(Hierarchy { version, base }),
            Err(why) => tried.push(format!(
                "{} at {}: {why}",
                version_name(version),
                base.display()
            )),
        }
    }
    if tried.is_empty() {
        tried.push(
            "no cgroup2 file system and no cgroup v1 cpu controller in /proc/self/mounts".into(),
        );
    }
    bail!(
        "--node-cpu needs a cgroup CPU controller this process can write to (usually: run as \
         root, with cgroup v2's cpu controller enabled or cgroup v1's cpu controller mounted); \
         tried: {}. Run without --node-cpu to run the nodes without a CPU budget (all of them \
         then share this machine's {} cores)",
        tried.join("; "),
        cores()
    )
}

fn version_name(v: CgroupVersion) -> &'static str {
    match v {
        CgroupVersion::V1 => "cgroup v1 cpu controller",
        CgroupVersion::V2 => "cgroup v2",
    }
}

/// Whether groups with a CPU quota can be created under `base` (without creating one:
/// creation itself is the final test, with its own error).
fn usable(version: CgroupVersion, base: &Path) -> Result<(), String> {
    if !base.is_dir() {
        return Err("no such directory".into());
    }
    match version {
        CgroupVersion::V2 => {
            let c = read_trimmed(&base.join("cgroup.controllers"))
                .map_err(|e| format!("reading cgroup.controllers: {e}"))?;
            if !has_word(&c, "cpu") {
                return Err(format!(
                    "the cpu controller is not available there (cgroup.controllers: `{c}`; it may be bound to cgroup v1)"
                ));
            }
            let s = read_trimmed(&base.join("cgroup.subtree_control"))
                .map_err(|e| format!("reading cgroup.subtree_control: {e}"))?;
            if !has_word(&s, "cpu") {
                return Err(format!(
                    "the cpu controller is not enabled for its children (cgroup.subtree_control: `{s}`)"
                ));
            }
        }
        CgroupVersion::V1 => {
            for f in ["cpu.cfs_quota_us", "cpu.cfs_period_us"] {
                if !base.join(f).exists() {
                    return Err(format!("no {f} (CFS bandwidth control not in this kernel)"));
                }
            }
        }
    }
    // SAFETY: access only reads its NUL-terminated argument.
    let path = std::ffi::CString::new(base.as_os_str().as_encoded_bytes())
        .map_err(|_| "path holds a NUL byte".to_string())?;
    if unsafe { libc::access(path.as_ptr(), libc::W_OK) } != 0 {
        return Err(format!("not writable: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// The cgroups of one cluster run: a group, and a child with the quota per member.
#[derive(Debug)]
pub struct CpuGroups {
    pub budget: NodeCpu,
    pub hierarchy: Hierarchy,
    /// The run's group (`BASE/partita-cpu-<pid>-<seq>`).
    pub dir: PathBuf,
    /// Members' groups, in creation order.
    members: Vec<(String, PathBuf)>,
    removed: bool,
}

impl CpuGroups {
    /// Create the run's group under the first usable hierarchy (and sweep groups left
    /// by processes that no longer exist).
    pub fn create(budget: NodeCpu) -> anyhow::Result<CpuGroups> {
        let hierarchy = find_hierarchy()?;
        sweep_stale(&hierarchy.base);
        let name = format!(
            "{GROUP_PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = hierarchy.base.join(&name);
        std::fs::create_dir(&dir).with_context(|| {
            format!(
                "creating the cgroup {} for --node-cpu (run without --node-cpu to run unbudgeted)",
                dir.display()
            )
        })?;
        let g = CpuGroups {
            budget,
            hierarchy,
            dir,
            members: Vec::new(),
            removed: false,
        };
        if g.hierarchy.version == CgroupVersion::V2 {
            // Let the members have cpu.max (the group itself holds no process).
            write(&g.dir.join("cgroup.subtree_control"), "+cpu")?;
        }
        Ok(g)
    }

    /// The label of every result obtained under this budget.
    pub fn describe(&self) -> String {
        self.budget.describe(self.hierarchy.version)
    }

    /// The group of member `name` (e.g. `node-4`), created with the quota on first use.
    fn member_dir(&mut self, name: &str) -> anyhow::Result<PathBuf> {
        assert!(!self.removed, "a removed group takes no members");
        assert!(
            !name.is_empty() && !name.contains('/') && !name.starts_with('.'),
            "member name {name:?}"
        );
        if let Some((_, d)) = self.members.iter().find(|(n, _)| n == name) {
            return Ok(d.clone());
        }
        let d = self.dir.join(name);
        std::fs::create_dir(&d).with_context(|| format!("creating the cgroup {}", d.display()))?;
        self.members.push((name.to_string(), d.clone()));
        for (file, text) in self.budget.files(self.hierarchy.version) {
            write(&d.join(file), &text)?;
        }
        let read = self.read_quota(&d)?;
        if read != Some((self.budget.quota_us, self.budget.period_us)) {
            bail!(
                "the cgroup {} reports the quota {read:?} after {:?} was written",
                d.display(),
                (self.budget.quota_us, self.budget.period_us)
            );
        }
        Ok(d)
    }

    fn read_quota(&self, d: &Path) -> anyhow::Result<Quota> {
        let q = match self.hierarchy.version {
            CgroupVersion::V1 => parse_v1_quota(
                &read_trimmed(&d.join("cpu.cfs_quota_us"))?,
                &read_trimmed(&d.join("cpu.cfs_period_us"))?,
            ),
            CgroupVersion::V2 => parse_cpu_max(&read_trimmed(&d.join("cpu.max"))?),
        };
        q.map_err(|e| anyhow::anyhow!("{}: {e}", d.display()))
    }

    /// Put process `pid` (all its threads) into member `name`'s group.
    pub fn place(&mut self, name: &str, pid: u32) -> anyhow::Result<PathBuf> {
        let d = self.member_dir(name)?;
        write(&d.join("cgroup.procs"), &pid.to_string())
            .with_context(|| format!("moving process {pid} into {}", d.display()))?;
        let procs = read_trimmed(&d.join("cgroup.procs"))?;
        if !has_word(&procs, &pid.to_string()) {
            bail!(
                "process {pid} is not in {} after moving it there (it may have exited)",
                d.display()
            );
        }
        Ok(d)
    }

    /// The member's quota as the kernel reports it.
    pub fn quota(&self, name: &str) -> Option<Quota> {
        let (_, d) = self.members.iter().find(|(n, _)| n == name)?;
        self.read_quota(d).ok()
    }

    /// The member's `cpu.stat`.
    pub fn stat(&self, name: &str) -> Option<CpuStat> {
        let (_, d) = self.members.iter().find(|(n, _)| n == name)?;
        Some(parse_cpu_stat(
            &std::fs::read_to_string(d.join("cpu.stat")).ok()?,
        ))
    }

    /// Remove every member's group, then the run's group. Their processes must have
    /// exited; the kernel may take a moment to release a group after its last process
    /// exits, so a busy group is retried for up to 2 s.
    pub fn remove(&mut self) -> anyhow::Result<()> {
        if self.removed {
            return Ok(());
        }
        let mut left = Vec::new();
        for (_, d) in self.members.iter().rev() {
            if let Err(e) = rmdir_patiently(d) {
                left.push(e);
            }
        }
        if let Err(e) = rmdir_patiently(&self.dir) {
            left.push(e);
        }
        if left.is_empty() {
            self.removed = true;
            Ok(())
        } else {
            bail!("cgroups left behind: {}", left.join("; "))
        }
    }
}

impl Drop for CpuGroups {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("warning: {e:#}");
        }
    }
}

fn write(p: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(p, text).with_context(|| format!("writing `{text}` to {}", p.display()))
}

/// rmdir `d`, retrying while the kernel still counts an exited process in it.
fn rmdir_patiently(d: &Path) -> Result<(), String> {
    let deadline = Instant::now() + REMOVE_WAIT_MAX;
    loop {
        match std::fs::remove_dir(d) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                return Err(format!(
                    "{}: {e} (processes still in it: [{}])",
                    d.display(),
                    procs.split_whitespace().collect::<Vec<_>>().join(" ")
                ));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Remove groups whose creator no longer exists (a run killed before it could clean
/// up). Groups of live processes, and groups that still hold processes, stay.
fn sweep_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(group_owner) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dir = e.path();
        if let Ok(children) = std::fs::read_dir(&dir) {
            for c in children.flatten() {
                if c.path().is_dir() {
                    let _ = std::fs::remove_dir(c.path());
                }
            }
        }
        if std::fs::remove_dir(&dir).is_ok() {
            eprintln!(
                "removed the cgroup {} left by process {pid}, which no longer exists",
                dir.display()
            );
        }
    }
}

/// Check that `fraction` can be enforced here and return its label: creates and
/// removes a group (experiments call it before their first point, so a missing cgroup
/// fails in a second, not after minutes).
pub fn preflight(fraction: f64) -> anyhow::Result<String> {
    let mut g = CpuGroups::create(NodeCpu::new(fraction)?)?;
    let label = g.describe();
    g.remove()?;
    Ok(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_are_validated() {
        assert_eq!(validate_fraction(0.15, 2), Ok(0.15));
        assert_eq!(validate_fraction(2.0, 2), Ok(2.0));
        for bad in [0.0, -0.1, f64::NAN, f64::INFINITY, 2.01, 0.0005] {
            assert!(validate_fraction(bad, 2).is_err(), "{bad}");
        }
        assert!(validate_fraction(3.0, 2).unwrap_err().contains("2 cores"));
        assert!(parse_fraction_arg("abc")
            .unwrap_err()
            .contains("not a number"));
        assert!(parse_fraction_arg("0").is_err());
        assert_eq!(parse_fraction_arg(" 0.5 "), Ok(0.5));
        assert!(parse_fraction_arg(&(cores() + 1).to_string()).is_err());
    }

    #[test]
    fn quotas_follow_the_fraction_and_the_kernel_minimum() {
        let b = NodeCpu::with_period(0.15, 10_000).unwrap();
        assert_eq!((b.quota_us, b.period_us), (1_500, 10_000));
        // 0.05 × 10 ms is below the kernel's 1 ms: the period grows to 20 ms.
        let b = NodeCpu::with_period(0.05, 10_000).unwrap();
        assert_eq!((b.quota_us, b.period_us), (1_000, 20_000));
        // 0.15 × 5 ms = 0.75 ms: the period grows to 6.667 ms.
        let b = NodeCpu::with_period(0.15, 5_000).unwrap();
        assert_eq!((b.quota_us, b.period_us), (1_000, 6_667));
        // More than a core: the quota exceeds the period.
        let b = NodeCpu::with_period(1.5, 10_000).unwrap();
        assert_eq!((b.quota_us, b.period_us), (15_000, 10_000));
        let b = NodeCpu::with_period(0.001, 10_000).unwrap();
        assert_eq!((b.quota_us, b.period_us), (1_000, 1_000_000));
        assert!(NodeCpu::with_period(0.2, 999).is_err());
        assert!(NodeCpu::with_period(0.2, 1_000_001).is_err());
        assert!(NodeCpu::with_period(0.0, 10_000).is_err());
    }

    #[test]
    fn files_and_labels() {
        let b = NodeCpu::with_period(0.15, 10_000).unwrap();
        assert_eq!(
            b.files(CgroupVersion::V1),
            vec![
                ("cpu.cfs_period_us", "10000".to_string()),
                ("cpu.cfs_quota_us", "1500".to_string())
            ]
        );
        assert_eq!(
            b.files(CgroupVersion::V2),
            vec![("cpu.max", "1500 10000".to_string())]
        );
        assert_eq!(
            b.describe(CgroupVersion::V1),
            "each node limited to 0.15 of a core (cgroup v1 cpu quota 1.5 ms per 10 ms period): emulates one machine per node"
        );
        assert!(b
            .describe(CgroupVersion::V2)
            .contains("cgroup v2 cpu.max 1.5 ms per 10 ms"));
        assert_eq!(fmt_fraction(0.125), "0.125");
        assert_eq!(fmt_fraction(1.0), "1");
        assert_eq!(fmt_fraction(0.1 + 0.2), "0.3");
        // What is written reads back as the same quota.
        let v2 = &b.files(CgroupVersion::V2)[0].1;
        assert_eq!(parse_cpu_max(v2), Ok(Some((1_500, 10_000))));
        let v1 = b.files(CgroupVersion::V1);
        assert_eq!(
            parse_v1_quota(&v1[1].1, &v1[0].1),
            Ok(Some((1_500, 10_000)))
        );
    }

    #[test]
    fn quota_files_parse() {
        assert_eq!(parse_cpu_max("max 100000\n"), Ok(None));
        assert_eq!(parse_cpu_max("2500 10000\n"), Ok(Some((2_500, 10_000))));
        for bad in ["", "max", "1 2 3", "x 100", "100 y"] {
            assert!(parse_cpu_max(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_v1_quota("-1\n", "100000\n"), Ok(None));
        assert_eq!(
            parse_v1_quota("25000", "100000"),
            Ok(Some((25_000, 100_000)))
        );
        assert!(parse_v1_quota("", "100000").is_err());
        assert!(parse_v1_quota("1000", "x").is_err());
    }

    #[test]
    fn cpu_stat_parses_both_versions() {
        let v1 =
            "nr_periods 40\nnr_throttled 30\nthrottled_time 123456789\nnr_bursts 0\nburst_time 0\n";
        let a = parse_cpu_stat(v1);
        assert_eq!(
            a,
            CpuStat {
                nr_periods: 40,
                nr_throttled: 30,
                throttled_us: 123_456,
                usage_us: None
            }
        );
        let v2 = "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 100\nnr_throttled 50\nthrottled_usec 7\n";
        let b = parse_cpu_stat(v2);
        assert_eq!(
            (b.nr_periods, b.nr_throttled, b.throttled_us, b.usage_us),
            (100, 50, 7, Some(5000))
        );
        assert_eq!(
            b.throttled_pct_since(&CpuStat {
                nr_periods: 60,
                nr_throttled: 30,
                ..a
            }),
            Some(50.0)
        );
        assert_eq!(b.throttled_pct_since(&b), None);
        assert_eq!(
            parse_cpu_stat("garbage\nnr_periods x\n"),
            CpuStat::default()
        );
    }

    #[test]
    fn mounts_and_own_cgroups() {
        // This machine: a hybrid layout, cpu in v1, v2 without controllers.
        let hybrid = "\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
";
        let m = parse_mounts(hybrid);
        assert_eq!(
            m,
            vec![
                CgroupMount {
                    path: "/sys/fs/cgroup/cpu".into(),
                    version: CgroupVersion::V1
                },
                CgroupMount {
                    path: "/sys/fs/cgroup/unified".into(),
                    version: CgroupVersion::V2
                },
            ]
        );
        let own = "9:name=systemd:/\n4:memory:/x/y\n1:cpu:/\n0::/\n";
        assert_eq!(parse_proc_cgroup(own), (Some("/".into()), Some("/".into())));
        assert_eq!(
            candidate_bases(&m, own),
            vec![
                (CgroupVersion::V2, "/sys/fs/cgroup/unified".into()),
                (CgroupVersion::V1, "/sys/fs/cgroup/cpu".into()),
            ]
        );
        // A systemd v1 layout (cpu,cpuacct) with this process in a slice.
        let m =
            parse_mounts("cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n");
        let own = "4:cpu,cpuacct:/user.slice\n";
        assert_eq!(
            candidate_bases(&m, own),
            vec![
                (
                    CgroupVersion::V1,
                    "/sys/fs/cgroup/cpu,cpuacct/user.slice".into()
                ),
                (CgroupVersion::V1, "/sys/fs/cgroup/cpu,cpuacct".into()),
            ]
        );
        // Pure cgroup v2: own cgroup first, then the root.
        let m = parse_mounts("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n");
        assert_eq!(
            candidate_bases(&m, "0::/user.slice/session-1.scope\n"),
            vec![
                (
                    CgroupVersion::V2,
                    "/sys/fs/cgroup/user.slice/session-1.scope".into()
                ),
                (CgroupVersion::V2, "/sys/fs/cgroup".into()),
            ]
        );
        // cpuacct alone is not cpu; nothing mounted, nothing to try.
        assert!(parse_mounts("cgroup /a cgroup rw,cpuacct 0 0\n").is_empty());
        assert!(candidate_bases(&[], "0::/\n").is_empty());
        assert_eq!(unescape_mount_path("/a\\040b"), "/a b");
    }

    #[test]
    fn group_names_name_their_owner() {
        assert_eq!(group_owner("partita-cpu-1234-0"), Some(1234));
        assert_eq!(group_owner("partita-cpu-1234-17"), Some(1234));
        for other in [
            "partita-cpu-1234",
            "partita-cpu-x-1",
            "node-4",
            "partita-cpu--1",
            "user.slice",
        ] {
            assert_eq!(group_owner(other), None, "{other}");
        }
    }
}
