//! Regions and the emulated wide-area network (cluster file `[wan]`, optional).
//!
//! The cluster file places every node in a region (`region = "Virginia"` on its
//! `[[node]]`) and gives the round-trip times between regions, either as the paper's
//! deployment (paper 004 §VI-B: California–Virginia 70 ms, Virginia–Europe 90 ms,
//! California–Europe 150 ms) or as a symmetric matrix of its own:
//!
//! ```toml
//! [wan]
//! preset = "paper"            # California, Virginia, Europe; RTT 70 / 90 / 150 ms
//! clients = ["Europe"]        # optional: the regions of clients, round robin by index
//!
//! # or, instead of the preset:
//! # regions = ["A", "B", "C"]
//! # rtt_ms = [[0, 70, 150],
//! #           [70, 0, 90],
//! #           [150, 90, 0]]
//! ```
//!
//! Nothing here delays anything: this module only describes the network. The drivers
//! do the delaying (the kernel of the machine Partita is developed on has no netem):
//! the node process holds every frame to a peer in another region for the one-way
//! delay, RTT / 2, before it writes it; a client holds its requests to, and the replies
//! from, a node in another region for the same one-way delay; the simulator gives the
//! links between regions that one-way delay as their latency. Protocol cores never see
//! a region. Within a region (and without a `[wan]` section) there is no added delay.
//!
//! A client with no region (none given, and `clients` empty) adds no delay at all.

use partita_types::FieldError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Regions at most (a matrix of 16 × 16 round trips).
pub const REGIONS_MAX: usize = 16;
/// The largest round-trip time a matrix may give, in milliseconds.
pub const RTT_MS_MAX: i64 = 10_000;

/// The paper's three regions (paper 004 §VI-B) and their round-trip times in
/// milliseconds, in the order of [`PAPER_REGIONS`].
pub const PAPER_REGIONS: [&str; 3] = ["California", "Virginia", "Europe"];
const PAPER_RTT_MS: [[u32; 3]; 3] = [[0, 70, 150], [70, 0, 90], [150, 90, 0]];

/// The `[wan]` section as written in the file. [`WanSection::resolve`] checks it and
/// gives the [`Wan`] the drivers use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WanSection {
    /// `"paper"`: the paper's three regions and round trips. Excludes `regions` and
    /// `rtt_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// Region names (1 to [`REGIONS_MAX`], distinct ignoring case).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<String>,
    /// Round-trip times in whole milliseconds, one row per region in `regions`' order:
    /// symmetric, zero on the diagonal, 0 to [`RTT_MS_MAX`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rtt_ms: Vec<Vec<i64>>,
    /// Where clients are: client `i` (the benchmark's clients by index) is in
    /// `clients[i % len]`. Empty: clients are in no region and add no delay, unless
    /// one is placed explicitly (`partita bench --region`, `ClientOptions::region`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clients: Vec<String>,
}

/// A checked region matrix: names and round-trip times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wan {
    regions: Vec<String>,
    /// Row-major, `regions.len()²` entries, in milliseconds.
    rtt_ms: Vec<u32>,
}

/// Index of a region in its [`Wan`].
pub type Region = usize;

impl WanSection {
    /// The paper's deployment (`preset = "paper"`), clients in no region.
    pub fn paper() -> WanSection {
        WanSection {
            preset: Some("paper".into()),
            ..WanSection::default()
        }
    }

    /// Check the section and build its matrix. Errors name the field (`wan.preset`,
    /// `wan.regions`, `wan.rtt_ms`, `wan.clients`).
    pub fn resolve(&self) -> Result<Wan, FieldError> {
        let f = |field: &str, m: String| Err(FieldError::new(field, m));
        let wan = match &self.preset {
            Some(p) if !self.regions.is_empty() || !self.rtt_ms.is_empty() => {
                return f(
                    "wan.preset",
                    format!(
                        "preset = \"{p}\" gives the regions and their round trips: leave out \
                         `regions` and `rtt_ms`, or the preset"
                    ),
                )
            }
            Some(p) if p == "paper" => Wan::paper(),
            Some(p) => {
                return f(
                    "wan.preset",
                    format!("unknown preset `{p}` (known: \"paper\")"),
                )
            }
            None => Wan::from_matrix(&self.regions, &self.rtt_ms)?,
        };
        for c in &self.clients {
            if wan.region(c).is_none() {
                return f(
                    "wan.clients",
                    format!("`{c}` is not a region (regions: {})", wan.names()),
                );
            }
        }
        Ok(wan)
    }
}

impl Wan {
    /// The paper's three regions (paper 004 §VI-B, the weights of Fig. 2).
    pub fn paper() -> Wan {
        Wan {
            regions: PAPER_REGIONS.iter().map(|s| s.to_string()).collect(),
            rtt_ms: PAPER_RTT_MS.iter().flatten().copied().collect(),
        }
    }

    /// Regions `names` with round trips `rtt_ms` (one row per region), checked.
    pub fn from_matrix(names: &[String], rtt_ms: &[Vec<i64>]) -> Result<Wan, FieldError> {
        let f = |field: &str, m: String| Err(FieldError::new(field, m));
        if names.is_empty() {
            return f(
                "wan.regions",
                "give the regions (regions = [\"A\", \"B\"] with an rtt_ms matrix) or \
                 preset = \"paper\""
                    .into(),
            );
        }
        if names.len() > REGIONS_MAX {
            return f(
                "wan.regions",
                format!("{} regions: at most {REGIONS_MAX}", names.len()),
            );
        }
        for (i, a) in names.iter().enumerate() {
            let ok = !a.is_empty()
                && a.len() <= 32
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !ok {
                return f(
                    "wan.regions",
                    format!("`{a}` is not a region name (1 to 32 of A-Z, a-z, 0-9, - and _)"),
                );
            }
            if let Some(b) = names[..i].iter().find(|b| b.eq_ignore_ascii_case(a)) {
                return f(
                    "wan.regions",
                    format!("`{a}` and `{b}` name the same region (names ignore case)"),
                );
            }
        }
        let n = names.len();
        if rtt_ms.len() != n {
            return f(
                "wan.rtt_ms",
                format!(
                    "{} rows for {n} regions: one row of {n} round trips per region",
                    rtt_ms.len()
                ),
            );
        }
        let mut flat = Vec::with_capacity(n * n);
        for (i, row) in rtt_ms.iter().enumerate() {
            if row.len() != n {
                return f(
                    "wan.rtt_ms",
                    format!(
                        "row {i} ({}) has {} entries: {n} regions need {n}",
                        names[i],
                        row.len()
                    ),
                );
            }
            for (j, &v) in row.iter().enumerate() {
                if !(0..=RTT_MS_MAX).contains(&v) {
                    return f(
                        "wan.rtt_ms",
                        format!(
                            "rtt_ms[{i}][{j}] = {v} ({} to {}): a round trip is 0 to \
                             {RTT_MS_MAX} ms",
                            names[i], names[j]
                        ),
                    );
                }
                if i == j && v != 0 {
                    return f(
                        "wan.rtt_ms",
                        format!(
                            "rtt_ms[{i}][{i}] = {v}: within a region ({}) the round trip is 0",
                            names[i]
                        ),
                    );
                }
                if rtt_ms[j].get(i).is_some_and(|&w| w != v) {
                    return f(
                        "wan.rtt_ms",
                        format!(
                            "rtt_ms[{i}][{j}] = {v} but rtt_ms[{j}][{i}] = {}: the matrix must \
                             be symmetric ({} and {})",
                            rtt_ms[j][i], names[i], names[j]
                        ),
                    );
                }
                flat.push(v as u32);
            }
        }
        let wan = Wan {
            regions: names.to_vec(),
            rtt_ms: flat,
        };
        wan.invariants();
        Ok(wan)
    }

    /// Symmetric, zero diagonal, one entry per pair.
    fn invariants(&self) {
        let n = self.regions.len();
        assert!((1..=REGIONS_MAX).contains(&n));
        assert_eq!(self.rtt_ms.len(), n * n);
        for a in 0..n {
            assert_eq!(self.rtt_ms[a * n + a], 0, "zero diagonal");
            for b in 0..n {
                assert_eq!(self.rtt_ms[a * n + b], self.rtt_ms[b * n + a], "symmetric");
            }
        }
    }

    /// Number of regions.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// Never true: a matrix has at least one region.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// The region called `name` (ignoring case).
    pub fn region(&self, name: &str) -> Option<Region> {
        self.regions
            .iter()
            .position(|r| r.eq_ignore_ascii_case(name))
    }

    /// The name of region `r`, as the file spells it.
    pub fn name(&self, r: Region) -> &str {
        &self.regions[r]
    }

    /// Every region's name, comma-separated (for messages).
    pub fn names(&self) -> String {
        self.regions.join(", ")
    }

    /// The round-trip time between regions `a` and `b`, in milliseconds.
    pub fn rtt_ms(&self, a: Region, b: Region) -> u32 {
        let n = self.len();
        assert!(a < n && b < n, "region out of range: {a}, {b} (n = {n})");
        self.rtt_ms[a * n + b]
    }

    /// The one-way delay between regions `a` and `b`: half the round trip. Zero within
    /// a region.
    pub fn one_way(&self, a: Region, b: Region) -> Duration {
        let d = Duration::from_micros(u64::from(self.rtt_ms(a, b)) * 500);
        debug_assert_eq!(d * 2, Duration::from_millis(self.rtt_ms(a, b).into()));
        d
    }

    /// The matrix in words, every pair once:
    /// `California–Virginia 70 ms, California–Europe 150 ms, Virginia–Europe 90 ms
    /// (round trips; one-way = half)`.
    pub fn describe(&self) -> String {
        let n = self.len();
        let mut pairs = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                pairs.push(format!(
                    "{}–{} {} ms",
                    self.regions[a],
                    self.regions[b],
                    self.rtt_ms(a, b)
                ));
            }
        }
        if pairs.is_empty() {
            return format!("one region ({}), no delay", self.regions[0]);
        }
        format!("{} (round trips; one-way = half)", pairs.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_paper_preset_is_the_papers_matrix() {
        let w = WanSection::paper().resolve().unwrap();
        let (ca, va, eu) = (
            w.region("California").unwrap(),
            w.region("virginia").unwrap(),
            w.region("EUROPE").unwrap(),
        );
        assert_eq!(w.rtt_ms(ca, va), 70);
        assert_eq!(w.rtt_ms(va, eu), 90);
        assert_eq!(w.rtt_ms(ca, eu), 150);
        assert_eq!(w.one_way(eu, ca), Duration::from_millis(75));
        assert_eq!(w.one_way(va, va), Duration::ZERO);
        assert_eq!(
            w.describe(),
            "California–Virginia 70 ms, California–Europe 150 ms, Virginia–Europe 90 ms \
             (round trips; one-way = half)"
        );
        assert_eq!(w.region("Mars"), None);
    }

    #[test]
    fn an_odd_round_trip_halves_to_microseconds() {
        let w = Wan::from_matrix(&names(&["a", "b"]), &[vec![0, 75], vec![75, 0]]).unwrap();
        assert_eq!(w.one_way(0, 1), Duration::from_micros(37_500));
    }

    #[test]
    fn bad_matrices_are_refused_naming_the_field() {
        let field = |s: &WanSection| s.resolve().unwrap_err();
        let m = |regions: &[&str], rtt: Vec<Vec<i64>>| WanSection {
            regions: names(regions),
            rtt_ms: rtt,
            ..WanSection::default()
        };
        let cases: Vec<(WanSection, &str, &str)> = vec![
            (WanSection::default(), "wan.regions", "preset"),
            (
                WanSection {
                    preset: Some("moon".into()),
                    ..WanSection::default()
                },
                "wan.preset",
                "unknown preset",
            ),
            (
                WanSection {
                    regions: names(&["a"]),
                    ..WanSection::paper()
                },
                "wan.preset",
                "leave out",
            ),
            (m(&["a", "b"], vec![vec![0, 1]]), "wan.rtt_ms", "1 rows"),
            (
                m(&["a", "b"], vec![vec![0, 1], vec![1]]),
                "wan.rtt_ms",
                "row 1",
            ),
            (
                m(&["a", "b"], vec![vec![0, 70], vec![80, 0]]),
                "wan.rtt_ms",
                "symmetric",
            ),
            (
                m(&["a", "b"], vec![vec![0, -70], vec![-70, 0]]),
                "wan.rtt_ms",
                "0 to 10000",
            ),
            (
                m(&["a", "b"], vec![vec![0, 70_000], vec![70_000, 0]]),
                "wan.rtt_ms",
                "0 to 10000",
            ),
            (
                m(&["a", "b"], vec![vec![5, 70], vec![70, 0]]),
                "wan.rtt_ms",
                "within a region",
            ),
            (
                m(&["a", "A"], vec![vec![0, 1], vec![1, 0]]),
                "wan.regions",
                "same region",
            ),
            (
                m(&["a b", "c"], vec![vec![0, 1], vec![1, 0]]),
                "wan.regions",
                "not a region name",
            ),
            (
                WanSection {
                    clients: names(&["Mars"]),
                    ..WanSection::paper()
                },
                "wan.clients",
                "Mars",
            ),
        ];
        for (section, want_field, want_text) in cases {
            let e = field(&section);
            assert_eq!(e.field, want_field, "{section:?}: {e}");
            assert!(e.message.contains(want_text), "{section:?}: {e}");
        }
        let many: Vec<String> = (0..17).map(|i| format!("r{i}")).collect();
        let e = Wan::from_matrix(&many, &[]).unwrap_err();
        assert_eq!(e.field, "wan.regions");
    }
}
