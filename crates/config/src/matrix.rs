//! The combination matrix: every ordering × execution model × built-in service, as a
//! cluster file states it, and what the cluster-file check says of it. ARCHITECTURE.md's
//! table is this matrix (a test compares them), and the simulator's matrix test runs
//! every accepted cell and checks that every refused one is refused naming a setting
//! of the cell.
//!
//! A cell's cluster file ([`cluster_of`]) is the default local cluster with the cell's
//! service (Chirper's with its `[chirper]` graph), then its execution model
//! (`[execution] model`, P-SMR with 2 threads; S-SMR and DS-SMR with two data
//! partitions, plus the oracle's for DS-SMR), then its ordering (`ClusterConfig::with_ordering`, as
//! `partita up --ordering` does), read back through the cluster-file parser.

use crate::ordering::OrderingProtocol;
use crate::{ChirperSection, ClusterConfig, ConfigError, ExecutionSection};

/// Every ordering protocol, in the cluster file's order.
pub const ORDERINGS: [OrderingProtocol; 6] = [
    OrderingProtocol::RingPaxos,
    OrderingProtocol::MultiPaxos,
    OrderingProtocol::MultiRing,
    OrderingProtocol::GeoPaxos,
    OrderingProtocol::GeoPaxosPlus,
    OrderingProtocol::Epaxos,
];

pub use crate::execution::ExecutionModel;

impl ExecutionModel {
    /// The cluster-file fields that choose this model (a refusal of the cell names
    /// one of these, or one of the ordering's or the service's).
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            ExecutionModel::Sequential => &[],
            ExecutionModel::Speculative => &["execution", "execution.model"],
            ExecutionModel::Psmr => &["execution", "execution.model", "execution.threads"],
            ExecutionModel::OptPsmr => &["execution", "execution.model", "execution.threads"],
            ExecutionModel::Ssmr | ExecutionModel::Dssmr => {
                &["execution", "execution.model", "partitioning.partitions"]
            }
        }
    }
}

/// Every built-in service (`crate::services::BUILTIN`).
pub const SERVICES: [&str; 4] = crate::services::BUILTIN;

/// One cell of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    pub ordering: OrderingProtocol,
    pub execution: ExecutionModel,
    pub service: &'static str,
}

impl Cell {
    /// Every cell: orderings, then execution models, then services.
    pub fn all() -> Vec<Cell> {
        let mut cells = Vec::new();
        for ordering in ORDERINGS {
            for execution in ExecutionModel::ALL {
                for service in SERVICES {
                    cells.push(Cell {
                        ordering,
                        execution,
                        service,
                    });
                }
            }
        }
        cells
    }

    /// The cluster-file fields that state this cell.
    pub fn fields(&self) -> Vec<&'static str> {
        let mut f = vec!["ordering.protocol", "cluster.service"];
        f.extend_from_slice(self.execution.fields());
        if self.service == "chirper" {
            // Chirper runs on S-SMR or DS-SMR only: the model is part of its choice.
            f.push("execution.model");
        }
        f
    }
}

impl std::fmt::Display for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} × {} × {}",
            self.ordering, self.execution, self.service
        )
    }
}

/// Why a cell is refused: the field the check names, and its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}`: {}", self.field, self.message)
    }
}

/// The cluster file of `cell` as the cluster-file check reads it, or its refusal.
pub fn cluster_of(cell: &Cell) -> Result<ClusterConfig, Refusal> {
    let mut c = ClusterConfig::default_local(7100, 0x4d41_5452);
    c.cluster.service = cell.service.to_string();
    if cell.service == "chirper" {
        c.chirper = Some(ChirperSection::default());
    }
    let refused = |field: &str, message: String| Refusal {
        field: field.to_string(),
        message,
    };
    match cell.execution {
        ExecutionModel::Sequential => {}
        ExecutionModel::Speculative => c.execution = ExecutionSection::speculative(false),
        ExecutionModel::Psmr | ExecutionModel::OptPsmr => {
            let optimistic = cell.execution == ExecutionModel::OptPsmr;
            c.execution = ExecutionSection::psmr(2, optimistic, None);
        }
        ExecutionModel::Ssmr | ExecutionModel::Dssmr => {
            let dssmr = cell.execution == ExecutionModel::Dssmr;
            // Two data partitions, and the oracle's (the last) under DS-SMR.
            let partitions = if dssmr { 3 } else { 2 };
            c = c
                .with_partitions(partitions, 1, 1 << 32)
                .map_err(|m| refused("partitioning.partitions", m))?;
            c.execution = match dssmr {
                true => ExecutionSection::Dssmr(Default::default()),
                false => ExecutionSection::Ssmr,
            };
        }
    }
    c = c.with_ordering(cell.ordering, 3).map_err(|e| Refusal {
        field: e.field,
        message: e.message,
    })?;
    ClusterConfig::parse(&c.to_toml(), "matrix cell").map_err(|e| match e {
        ConfigError::Field { field, message, .. } => Refusal { field, message },
        other => refused("", other.to_string()),
    })
}

/// The matrix as ARCHITECTURE.md shows it, between the markers
/// `<!-- matrix: begin -->` and `<!-- matrix: end -->`: a row per ordering and
/// execution model, a column per service, each cell "runs" or the field its refusal
/// names, then every refusal's message once.
pub fn markdown() -> String {
    let mut out = String::from("| ordering | execution |");
    for s in SERVICES {
        out += &format!(" {s} |");
    }
    out += "\n| --- | --- |";
    for _ in SERVICES {
        out += " --- |";
    }
    out += "\n";
    let mut reasons: Vec<Refusal> = Vec::new();
    for ordering in ORDERINGS {
        for execution in ExecutionModel::ALL {
            out += &format!("| {ordering} | {execution} |");
            for service in SERVICES {
                let cell = Cell {
                    ordering,
                    execution,
                    service,
                };
                match cluster_of(&cell) {
                    Ok(_) => out += " runs |",
                    Err(r) => {
                        let n = match reasons.iter().position(|x| *x == r) {
                            Some(n) => n,
                            None => {
                                reasons.push(r);
                                reasons.len() - 1
                            }
                        };
                        out += &format!(" refused ({}) |", n + 1);
                    }
                }
            }
            out += "\n";
        }
    }
    out += "\nRefusals, as the cluster-file check words them:\n\n";
    for (n, r) in reasons.iter().enumerate() {
        out += &format!("{}. {r}\n", n + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cell_is_accepted_or_refused_naming_one_of_its_settings() {
        let cells = Cell::all();
        assert_eq!(cells.len(), 6 * 6 * 4);
        let mut accepted = 0;
        for cell in &cells {
            match cluster_of(cell) {
                Ok(c) => {
                    accepted += 1;
                    assert_eq!(c.ordering.protocol(), cell.ordering, "{cell}");
                    assert_eq!(c.cluster.service, cell.service, "{cell}");
                }
                Err(r) => assert!(
                    cell.fields().contains(&r.field.as_str()),
                    "{cell}: refused naming {r}, not a setting of the cell"
                ),
            }
        }
        // The paper-001 path at least, and not everything.
        assert!(accepted >= 8 && accepted < cells.len(), "{accepted}");
    }
}

/// ARCHITECTURE.md's table is the matrix the check computes (regenerate it from the
/// message this test prints when they differ).
#[cfg(test)]
#[test]
fn architecture_md_shows_this_matrix() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../ARCHITECTURE.md");
    let text = std::fs::read_to_string(path).expect("ARCHITECTURE.md");
    let (begin, end) = ("<!-- matrix: begin -->\n", "<!-- matrix: end -->");
    let shown = text
        .split_once(begin)
        .and_then(|(_, rest)| rest.split_once(end))
        .map(|(table, _)| table.trim().to_string());
    let want = markdown();
    assert_eq!(
        shown.as_deref(),
        Some(want.trim()),
        "ARCHITECTURE.md's combination matrix differs from the cluster-file check's; \
         put this between {begin:?} and {end:?}:\n\n{want}"
    );
}
