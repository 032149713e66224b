//! The small named choices every layer shares (one type each, spelled the same in the
//! cluster file, on the command line and in reports), and the error a configuration
//! check returns: which field, and what is wrong with it.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A choice among a few names: parsed from and printed as its name (kebab-case, as in
/// the cluster file), with every name listed for help texts and error messages.
pub trait Choice: FromStr<Err = String> + fmt::Display + Copy + Send + Sync + 'static {
    /// Every accepted name, in the order a help text lists them.
    const NAMES: &'static [&'static str];
    /// What the choice is called in an error ("durability").
    const WHAT: &'static str;

    /// The error for a name that is not one of [`Choice::NAMES`].
    fn unknown(name: &str) -> String {
        format!(
            "unknown {} `{name}` (expected one of: {})",
            Self::WHAT,
            Self::NAMES.join(", ")
        )
    }
}

/// Implements `Display` and `FromStr` for a fieldless enum from one table of names.
#[macro_export]
macro_rules! named_choice {
    ($ty:ty, $what:literal, { $($variant:path => $name:literal),+ $(,)? }) => {
        impl $crate::choice::Choice for $ty {
            const NAMES: &'static [&'static str] = &[$($name),+];
            const WHAT: &'static str = $what;
        }
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(match self { $($variant => $name),+ })
            }
        }
        impl ::std::str::FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($name => Ok($variant),)+
                    _ => Err(<$ty as $crate::choice::Choice>::unknown(s)),
                }
            }
        }
    };
}

/// How hard a node's log makes its writes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    /// `fdatasync` the log segment on every sync, `fsync` the directory when segments
    /// are created or deleted. Survives power loss. Use this in production.
    Fsync,
    /// Never fsync: a sync only hands the bytes to the operating system. Survives a
    /// process crash but not an OS crash or power loss. For tests and benchmarks.
    Memory,
}

named_choice!(Durability, "durability", {
    Durability::Fsync => "fsync",
    Durability::Memory => "memory",
});

/// How commands are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// State-machine replication: ordered by consensus, executed by every replica.
    Smr,
    /// Paper 001's client-server baseline (§V): one unreplicated server executes on
    /// receipt.
    Cs,
}

named_choice!(Mode, "mode", {
    Mode::Smr => "smr",
    Mode::Cs => "cs",
});

/// A configuration value that cannot be used: the field that holds it (as the cluster
/// file spells it, `section.field`, or the core's own field name before a loader puts
/// it in its section with [`FieldError::within`]) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error for a field inside `section` (`batch_bytes_max` within
    /// `batching` is `batching.batch_bytes_max`).
    pub fn within(self, section: &str) -> FieldError {
        FieldError {
            field: format!("{section}.{}", self.field),
            message: self.message,
        }
    }

    /// The same message, reported against another field (when the loader knows better
    /// which field of its file the user must change).
    pub fn as_field(self, field: &str) -> FieldError {
        FieldError {
            field: field.to_string(),
            message: self.message,
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for FieldError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_choices() {
        for &n in Durability::NAMES {
            assert_eq!(n.parse::<Durability>().unwrap().to_string(), n);
        }
        for &n in Mode::NAMES {
            assert_eq!(n.parse::<Mode>().unwrap().to_string(), n);
        }
        let e = "disk".parse::<Durability>().unwrap_err();
        assert!(e.contains("`disk`") && e.contains("fsync, memory"), "{e}");
        // The serde names are the same names.
        assert_eq!(
            serde_json::to_string(&Durability::Memory).unwrap(),
            "\"memory\""
        );
    }

    #[test]
    fn field_errors_name_their_section() {
        let e = FieldError::new("batch_bytes_max", "must be positive").within("batching");
        assert_eq!(e.to_string(), "batching.batch_bytes_max: must be positive");
    }
}
