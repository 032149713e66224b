//! What the `partita check` command prints.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::check::{check, CheckError, CheckOptions, CheckSummary, Unknown, Violation};
use crate::history::read_history;

/// The outcome of checking one history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Linearizable(CheckSummary),
    NotLinearizable(Box<Violation>),
    /// The search budget ran out; nothing is known.
    Unknown(Unknown),
}

/// Result of [`check_file`]. `Display` is the one-line verdict.
#[derive(Clone, Debug)]
pub struct Report {
    pub path: PathBuf,
    /// Events read from the file.
    pub events: usize,
    pub verdict: Verdict,
    /// Wall time of the check (parsing excluded).
    pub elapsed: Duration,
}

impl Report {
    pub fn is_linearizable(&self) -> bool {
        matches!(self.verdict, Verdict::Linearizable(_))
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.verdict {
            Verdict::Linearizable(s) => write!(f, "linearizable: {s}"),
            Verdict::NotLinearizable(v) => write!(f, "NOT linearizable: {v}"),
            Verdict::Unknown(u) => write!(f, "unknown: {u}"),
        }
    }
}

/// Read the history at `path` and check it. Errors are for unreadable or malformed
/// files (naming the line); the verdict, whatever it is, is in the report.
pub fn check_file(path: impl AsRef<Path>, opts: &CheckOptions) -> anyhow::Result<Report> {
    let path = path.as_ref();
    let events = read_history(path)?;
    let start = Instant::now();
    let verdict = match check(&events, opts) {
        Ok(s) => Verdict::Linearizable(s),
        Err(CheckError::NotLinearizable(v)) => Verdict::NotLinearizable(v),
        Err(CheckError::Unknown(u)) => Verdict::Unknown(u),
        Err(e @ CheckError::Invalid(_)) => {
            return Err(anyhow::Error::new(e).context(format!("checking {}", path.display())))
        }
    };
    Ok(Report {
        path: path.to_path_buf(),
        events: events.len(),
        verdict,
        elapsed: start.elapsed(),
    })
}
