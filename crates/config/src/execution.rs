//! How replicas execute what the ordering delivers (cluster file `[execution]`): one
//! typed choice, with the settings of that model and no other.
//!
//! ```toml
//! [execution]
//! model = "psmr"     # "sequential", "speculative", "psmr", "opt-psmr", "ssmr" or "dssmr"
//! threads = 2        # psmr and opt-psmr: worker threads per replica
//! ```
//!
//! Each model has its own settings, written beside `model` in the same section:
//!
//! - `"sequential"` (classic SMR, the default; also what a file without `[execution]`
//!   runs): none.
//! - `"speculative"` (paper 001 §III-B, Ring Paxos only): `early_replies` (paper 001
//!   §VII: the chosen replica replies at once, tentatively, and confirms once decided).
//! - `"psmr"` and `"opt-psmr"` (paper 002): `threads` (worker threads per replica, 1 to
//!   64, required), `key_max` (the key space the threads split, `0..=key_max`; default
//!   the partitioning key space's last key) and `spin_us` (how long an idle OS worker
//!   thread spins before it sleeps). opt-PSMR's clients map commands optimistically
//!   (OC-G) and the replicas check them.
//! - `"ssmr"` and `"dssmr"` (paper 003): S-SMR's static map or DS-SMR's oracle and
//!   moves, for services that place objects (Chirper, whose graph is `[chirper]`).
//!   DS-SMR's client proxies take `await_moves` (wait for a command's moves before its
//!   access, instead of sending both at once as the paper's proxy does) and
//!   `gather_where_most` (gather in the partition holding most of the objects, instead
//!   of one at random as the paper's default).
//!
//! A setting of another model is refused naming the field (`unknown field
//! `threads``), and so is an unknown model. Cluster files written before models were
//! one choice (`speculative = true`, `threads = 4`, `optimistic = true` without
//! `model`) are refused with what to write instead.

use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The model names `[execution] model` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExecutionModel {
    /// One command after the other as delivered (classic SMR).
    Sequential,
    /// Paper 001: proposals executed before they are decided, undone if another value
    /// is.
    Speculative,
    /// Paper 002: worker threads, commands mapped to groups conservatively (CC-G).
    Psmr,
    /// Paper 002: opt-PSMR, the optimistic mapping checked at the replica (OC-G).
    OptPsmr,
    /// Paper 003: S-SMR, a static map of objects to partitions.
    Ssmr,
    /// Paper 003: DS-SMR, an oracle and objects that move.
    Dssmr,
}

partita_types::named_choice!(ExecutionModel, "execution model", {
    ExecutionModel::Sequential => "sequential",
    ExecutionModel::Speculative => "speculative",
    ExecutionModel::Psmr => "psmr",
    ExecutionModel::OptPsmr => "opt-psmr",
    ExecutionModel::Ssmr => "ssmr",
    ExecutionModel::Dssmr => "dssmr",
});

impl ExecutionModel {
    pub const ALL: [ExecutionModel; 6] = [
        ExecutionModel::Sequential,
        ExecutionModel::Speculative,
        ExecutionModel::Psmr,
        ExecutionModel::OptPsmr,
        ExecutionModel::Ssmr,
        ExecutionModel::Dssmr,
    ];
}

/// `[execution]` with no settings (`"sequential"`, `"ssmr"`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoSettings {}

/// `[execution]` with `model = "speculative"`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeculativeSettings {
    /// Early replies (paper 001 §VII): the chosen replica replies as soon as it
    /// executes a command speculatively (a tentative reply) and sends a short
    /// confirmation once the decision confirms the order; clients take a result only
    /// once confirmed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub early_replies: bool,
}

/// `[execution]` with `model = "psmr"` or `"opt-psmr"` (paper 002 §III-F, §IV).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PsmrSettings {
    /// Worker threads per replica, each owning a range of the key space `0..=key_max`
    /// (with state partitioning, of its partition's part of it).
    pub threads: usize,
    /// The key space the worker threads split (default: the partitioning key space's,
    /// `key_space - 1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_max: Option<u64>,
    /// Microseconds an idle OS worker thread spins after a round before it sleeps
    /// (default [`PSMR_SPIN_US_DEFAULT`]). Longer suits replicas with cores of their
    /// own (a sleeping thread costs a wake-up per round); shorter, nodes that share
    /// their cores (spinning takes them). At most [`PSMR_SPIN_US_MAX`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spin_us: Option<u64>,
}

/// `[execution]` with `model = "dssmr"`: how DS-SMR's client proxies move objects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DssmrSettings {
    /// Clients: wait for a command's moves before sending its access, on one session,
    /// instead of sending the moves (on a session of their own) and the access at
    /// once as the paper's client proxy does (default `false`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub await_moves: bool,
    /// Clients: gather an access's objects in the partition that holds most of them,
    /// instead of one of the partitions involved at random, the paper's default
    /// (default `false`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gather_where_most: bool,
}

/// [`PsmrSettings::spin_us`]'s default: right for this project's 2-core machines,
/// where a whole cluster shares the cores.
pub const PSMR_SPIN_US_DEFAULT: u64 = 25;
/// Most microseconds [`PsmrSettings::spin_us`] takes.
pub const PSMR_SPIN_US_MAX: u64 = 100_000;

/// How replicas execute: the model and its settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ExecutionSection {
    #[default]
    Sequential,
    Speculative(SpeculativeSettings),
    Psmr(PsmrSettings),
    OptPsmr(PsmrSettings),
    Ssmr,
    Dssmr(DssmrSettings),
}

impl ExecutionSection {
    /// Speculative execution, with early replies or not.
    pub fn speculative(early_replies: bool) -> ExecutionSection {
        ExecutionSection::Speculative(SpeculativeSettings { early_replies })
    }

    /// P-SMR with `threads` worker threads (opt-PSMR if `optimistic`) over
    /// `0..=key_max` (`None`: the partitioning key space); 0 threads: sequential.
    pub fn psmr(threads: usize, optimistic: bool, key_max: Option<u64>) -> ExecutionSection {
        let s = PsmrSettings {
            threads,
            key_max,
            spin_us: None,
        };
        match (threads, optimistic) {
            (0, _) => ExecutionSection::Sequential,
            (_, false) => ExecutionSection::Psmr(s),
            (_, true) => ExecutionSection::OptPsmr(s),
        }
    }

    pub fn model(&self) -> ExecutionModel {
        match self {
            ExecutionSection::Sequential => ExecutionModel::Sequential,
            ExecutionSection::Speculative(_) => ExecutionModel::Speculative,
            ExecutionSection::Psmr(_) => ExecutionModel::Psmr,
            ExecutionSection::OptPsmr(_) => ExecutionModel::OptPsmr,
            ExecutionSection::Ssmr => ExecutionModel::Ssmr,
            ExecutionSection::Dssmr(_) => ExecutionModel::Dssmr,
        }
    }

    pub(crate) fn is_default(&self) -> bool {
        *self == ExecutionSection::Sequential
    }

    /// Whether replicas execute proposals speculatively.
    pub fn is_speculative(&self) -> bool {
        matches!(self, ExecutionSection::Speculative(_))
    }

    /// Whether the chosen replica replies early (speculative execution only).
    pub fn early_replies(&self) -> bool {
        matches!(self, ExecutionSection::Speculative(s) if s.early_replies)
    }

    /// P-SMR's settings (P-SMR or opt-PSMR).
    pub fn psmr_settings(&self) -> Option<&PsmrSettings> {
        match self {
            ExecutionSection::Psmr(s) | ExecutionSection::OptPsmr(s) => Some(s),
            _ => None,
        }
    }

    /// P-SMR's worker threads per replica (0: none).
    pub fn threads(&self) -> usize {
        self.psmr_settings().map_or(0, |s| s.threads)
    }

    /// Whether clients map commands optimistically (opt-PSMR).
    pub fn optimistic(&self) -> bool {
        matches!(self, ExecutionSection::OptPsmr(_))
    }

    /// How long idle P-SMR worker threads spin.
    pub fn spin(&self) -> std::time::Duration {
        let us = self.psmr_settings().and_then(|s| s.spin_us);
        std::time::Duration::from_micros(us.unwrap_or(PSMR_SPIN_US_DEFAULT))
    }

    /// S-SMR or DS-SMR (paper 003): partitions that exchange objects.
    pub fn is_ssmr(&self) -> bool {
        matches!(self, ExecutionSection::Ssmr | ExecutionSection::Dssmr(_))
    }

    /// DS-SMR's client settings (DS-SMR only).
    pub fn dssmr(&self) -> Option<&DssmrSettings> {
        match self {
            ExecutionSection::Dssmr(s) => Some(s),
            _ => None,
        }
    }
}

impl Serialize for ExecutionSection {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let settings = match self {
            ExecutionSection::Sequential | ExecutionSection::Ssmr => {
                toml::Table::try_from(NoSettings {})
            }
            ExecutionSection::Speculative(x) => toml::Table::try_from(x),
            ExecutionSection::Psmr(x) | ExecutionSection::OptPsmr(x) => toml::Table::try_from(x),
            ExecutionSection::Dssmr(x) => toml::Table::try_from(x),
        }
        .map_err(S::Error::custom)?;
        let mut t = toml::Table::new();
        t.insert(
            "model".into(),
            toml::Value::String(self.model().to_string()),
        );
        t.extend(settings);
        t.serialize(s)
    }
}

/// The fields of `[execution]` before models were one choice.
const LEGACY: [&str; 4] = ["speculative", "early_replies", "threads", "optimistic"];

impl<'de> Deserialize<'de> for ExecutionSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(d)?;
        let model: ExecutionModel = match table.remove("model") {
            None => return Err(D::Error::custom(missing_model(&table))),
            Some(toml::Value::String(name)) => name
                .parse()
                .map_err(|e: String| D::Error::custom(format!("field `execution.model`: {e}")))?,
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "field `execution.model`: `{other}` is not a model name"
                )))
            }
        };
        let rest = toml::Value::Table(table);
        Ok(match model {
            ExecutionModel::Sequential => {
                settings::<NoSettings, _>(model, rest)?;
                ExecutionSection::Sequential
            }
            ExecutionModel::Speculative => ExecutionSection::Speculative(settings(model, rest)?),
            ExecutionModel::Psmr => ExecutionSection::Psmr(settings(model, rest)?),
            ExecutionModel::OptPsmr => ExecutionSection::OptPsmr(settings(model, rest)?),
            ExecutionModel::Ssmr => {
                settings::<NoSettings, _>(model, rest)?;
                ExecutionSection::Ssmr
            }
            ExecutionModel::Dssmr => ExecutionSection::Dssmr(settings(model, rest)?),
        })
    }
}

/// Why an `[execution]` without `model` is refused, with what to write: a file written
/// before models were one choice names the model it meant.
fn missing_model(table: &toml::Table) -> String {
    let names = <ExecutionModel as partita_types::choice::Choice>::NAMES.join(", ");
    if !LEGACY.iter().any(|k| table.contains_key(*k)) {
        return format!("field `execution.model`: [execution] needs `model` (one of: {names})");
    }
    let on = |k: &str| table.get(k).and_then(toml::Value::as_bool) == Some(true);
    let threads = table
        .get("threads")
        .and_then(toml::Value::as_integer)
        .unwrap_or(0);
    let write = if on("speculative") {
        let early = if on("early_replies") {
            ", early_replies = true"
        } else {
            ""
        };
        format!("model = \"speculative\"{early}")
    } else if threads > 0 {
        let model = if on("optimistic") { "opt-psmr" } else { "psmr" };
        format!("model = \"{model}\", threads = {threads} (and key_max, spin_us as before)")
    } else {
        "model = \"sequential\" (or leave [execution] out)".into()
    };
    format!(
        "field `execution.model`: the execution model is one choice now (`speculative`, \
         `threads`, `optimistic` are gone): write {write}"
    )
}

fn settings<T: serde::de::DeserializeOwned, E: serde::de::Error>(
    model: ExecutionModel,
    rest: toml::Value,
) -> Result<T, E> {
    serde_path_to_error::deserialize(rest).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path.is_empty() {
            "execution".to_string()
        } else {
            format!("execution.{path}")
        };
        let inner = e.into_inner();
        let hint = if inner.to_string().contains("unknown field") {
            " (a setting of another model belongs with that model)"
        } else {
            ""
        };
        E::custom(format!(
            "field `{field}`: with model = \"{model}\": {}{hint}",
            inner.to_string().trim_end()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, Serialize)]
    struct File {
        #[serde(default)]
        execution: ExecutionSection,
    }

    fn read(s: &str) -> Result<ExecutionSection, String> {
        toml::from_str::<File>(s)
            .map(|f| f.execution)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_model_round_trips_with_its_settings() {
        for e in [
            ExecutionSection::Sequential,
            ExecutionSection::speculative(false),
            ExecutionSection::speculative(true),
            ExecutionSection::psmr(2, false, None),
            ExecutionSection::psmr(8, true, Some(9_999_999)),
            ExecutionSection::Psmr(PsmrSettings {
                threads: 3,
                key_max: None,
                spin_us: Some(100),
            }),
            ExecutionSection::Ssmr,
            ExecutionSection::Dssmr(DssmrSettings {
                await_moves: true,
                gather_where_most: false,
            }),
        ] {
            let text = toml::to_string(&File {
                execution: e.clone(),
            })
            .unwrap();
            assert!(
                text.contains(&format!("model = \"{}\"", e.model())),
                "{text}"
            );
            assert_eq!(read(&text).unwrap(), e, "{text}");
        }
        assert_eq!(read("").unwrap(), ExecutionSection::Sequential);
        assert_eq!(
            read("[execution]\nmodel = \"opt-psmr\"\nthreads = 4\n").unwrap(),
            ExecutionSection::psmr(4, true, None)
        );
    }

    #[test]
    fn settings_of_another_model_and_unknown_models_are_refused_naming_the_field() {
        for (file, field) in [
            ("model = \"sequential\"\nthreads = 2", "execution.threads"),
            ("model = \"speculative\"\nthreads = 2", "execution.threads"),
            (
                "model = \"psmr\"\nearly_replies = true\nthreads = 2",
                "execution.early_replies",
            ),
            ("model = \"psmr\"", "execution"),
            (
                "model = \"ssmr\"\nawait_moves = true",
                "execution.await_moves",
            ),
            ("model = \"fast\"", "execution.model"),
            ("model = 3", "execution.model"),
            ("threads = 2", "execution.model"),
        ] {
            let e = read(&format!("[execution]\n{file}\n")).unwrap_err();
            assert!(e.contains(&format!("field `{field}`")), "{file}: {e}");
        }
        let e = read("[execution]\nmodel = \"psmr\"\n").unwrap_err();
        assert!(e.contains("threads"), "{e}");
    }

    #[test]
    fn files_written_before_models_were_one_choice_are_told_what_to_write() {
        for (old, new) in [
            (
                "speculative = true\nearly_replies = true",
                "model = \"speculative\", early_replies = true",
            ),
            ("speculative = true", "model = \"speculative\""),
            (
                "threads = 4\noptimistic = true",
                "model = \"opt-psmr\", threads = 4",
            ),
            ("threads = 2\nkey_max = 99", "model = \"psmr\", threads = 2"),
            ("speculative = false", "model = \"sequential\""),
        ] {
            let e = read(&format!("[execution]\n{old}\n")).unwrap_err();
            assert!(e.contains(&format!("write {new}")), "{old}: {e}");
            assert!(e.contains("field `execution.model`"), "{old}: {e}");
        }
    }
}
