//! Checking a history file of either service: [`check_history_file`] reads the
//! `service` field of the first line (absent: the B+tree, as DESIGN.md §2 allows) and
//! runs the B+tree checker ([`crate::check_file`], unchanged) or the key-value one.

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::check::{
    check_kv, KvCheckError, KvCheckOptions, KvCheckSummary, KvUnknown, KvViolation,
};
use super::history::read_kv_history;
use crate::check::CheckOptions;
use crate::initial::Initial;
use crate::report::{check_file, Report};

/// The outcome of checking one key-value history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvVerdict {
    Linearizable(KvCheckSummary),
    NotLinearizable(Box<KvViolation>),
    /// The search budget ran out; nothing is known.
    Unknown(KvUnknown),
}

/// Result of [`check_kv_file`]. `Display` is the one-line verdict.
#[derive(Clone, Debug)]
pub struct KvReport {
    pub path: PathBuf,
    /// Events read from the file.
    pub events: usize,
    pub verdict: KvVerdict,
    /// Wall time of the check (parsing excluded).
    pub elapsed: Duration,
}

impl KvReport {
    pub fn is_linearizable(&self) -> bool {
        matches!(self.verdict, KvVerdict::Linearizable(_))
    }
}

impl fmt::Display for KvReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.verdict {
            KvVerdict::Linearizable(s) => write!(f, "linearizable: {s}"),
            KvVerdict::NotLinearizable(v) => write!(f, "NOT linearizable: {v}"),
            KvVerdict::Unknown(u) => write!(f, "unknown: {u}"),
        }
    }
}

/// Read the key-value history at `path` and check it. Errors are for unreadable or
/// malformed files (naming the line); the verdict, whatever it is, is in the report.
pub fn check_kv_file(path: impl AsRef<Path>, opts: &KvCheckOptions) -> anyhow::Result<KvReport> {
    let path = path.as_ref();
    let events = read_kv_history(path)?;
    let start = Instant::now();
    let verdict = match check_kv(&events, opts) {
        Ok(s) => KvVerdict::Linearizable(s),
        Err(KvCheckError::NotLinearizable(v)) => KvVerdict::NotLinearizable(v),
        Err(KvCheckError::Unknown(u)) => KvVerdict::Unknown(u),
        Err(e @ KvCheckError::Invalid(_)) => {
            return Err(anyhow::Error::new(e).context(format!("checking {}", path.display())))
        }
    };
    Ok(KvReport {
        path: path.to_path_buf(),
        events: events.len(),
        verdict,
        elapsed: start.elapsed(),
    })
}

/// The service a history file records: the `service` field of its first non-blank line
/// (`"btree"` when absent). An empty file is a B+tree history with no operations.
pub fn history_service(path: impl AsRef<Path>) -> anyhow::Result<String> {
    let path = path.as_ref();
    let file =
        File::open(path).with_context(|| format!("cannot read history {}", path.display()))?;
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read history {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line).with_context(|| {
            format!(
                "history {}, line {}: not a JSON object",
                path.display(),
                i + 1
            )
        })?;
        return match v.get("service") {
            None => Ok("btree".to_string()),
            Some(serde_json::Value::String(s)) => Ok(s.clone()),
            Some(other) => anyhow::bail!(
                "history {}, line {}: `service` must be a string, not {other}",
                path.display(),
                i + 1
            ),
        };
    }
    Ok("btree".to_string())
}

/// The report of a history of either service.
#[derive(Clone, Debug)]
pub enum ServiceReport {
    Btree(Report),
    Kv(KvReport),
}

impl ServiceReport {
    pub fn is_linearizable(&self) -> bool {
        match self {
            ServiceReport::Btree(r) => r.is_linearizable(),
            ServiceReport::Kv(r) => r.is_linearizable(),
        }
    }

    /// The service the history recorded (`"btree"` or `"kv"`).
    pub fn service(&self) -> &'static str {
        match self {
            ServiceReport::Btree(_) => "btree",
            ServiceReport::Kv(_) => "kv",
        }
    }

    /// Events read from the file.
    pub fn events(&self) -> usize {
        match self {
            ServiceReport::Btree(r) => r.events,
            ServiceReport::Kv(r) => r.events,
        }
    }

    pub fn elapsed(&self) -> Duration {
        match self {
            ServiceReport::Btree(r) => r.elapsed,
            ServiceReport::Kv(r) => r.elapsed,
        }
    }
}

impl fmt::Display for ServiceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceReport::Btree(r) => r.fmt(f),
            ServiceReport::Kv(r) => r.fmt(f),
        }
    }
}

/// `partita check` for a history of any service this checker knows: a B+tree history
/// (no `service` field, or `"btree"`) is checked exactly as [`check_file`] does with
/// `opts`; a key-value one (`"kv"`) from an empty store at revision 1, with
/// `opts.max_states` as its search budget (an initial B+tree state is refused there:
/// it has no meaning for a key-value store).
pub fn check_history_file(
    path: impl AsRef<Path>,
    opts: &CheckOptions,
) -> anyhow::Result<ServiceReport> {
    let path = path.as_ref();
    match history_service(path)?.as_str() {
        "btree" => Ok(ServiceReport::Btree(check_file(path, opts)?)),
        "kv" => {
            if opts.initial != Initial::Empty {
                anyhow::bail!(
                    "history {} is a key-value history; an initial B+tree state (a preload) \
                     does not apply to it",
                    path.display()
                );
            }
            let kv = KvCheckOptions {
                max_steps: opts.max_states,
                ..KvCheckOptions::default()
            };
            Ok(ServiceReport::Kv(check_kv_file(path, &kv)?))
        }
        other => anyhow::bail!(
            "history {} records service `{other}`, which this checker does not know (it \
             checks btree and kv)",
            path.display()
        ),
    }
}
