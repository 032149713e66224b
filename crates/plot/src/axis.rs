//! Axis ranges, ticks and tick labels, as a plotters coordinate ([`Ranged`]) so that
//! linear and logarithmic axes are one type.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};

/// One axis: its range, labelled ticks and unlabelled (light) grid lines.
#[derive(Clone, Debug)]
pub(crate) struct Axis {
    pub(crate) lo: f64,
    pub(crate) hi: f64,
    log: bool,
    pub(crate) ticks: Vec<f64>,
    minor: Vec<f64>,
    /// Linear axes with round ticks: the tick labels' unit (1, 1e3 as `k`, 1e6 as
    /// `M`) and decimals. `None`: each label on its own ([`compact`]).
    unit: f64,
    decimals: Option<usize>,
}

/// The exponents a log axis may reach, so that 10^e stays finite and non-zero.
const MAX_EXP: i32 = 300;
/// Log axes spanning at most this many decades get ticks at 1, 2 and 5 × 10^e.
const FINE_DECADES: f64 = 2.5;
/// ... and unlabelled grid lines at 2..9 × 10^e up to this many.
const MINOR_DECADES: f64 = 6.0;

/// The largest (`up` false) or smallest (`up` true) 1, 2 or 5 × 10^e at or beyond `v`.
fn snap_125(v: f64, up: bool) -> f64 {
    let e = (v.log10().floor() as i32).clamp(-MAX_EXP, MAX_EXP);
    let base = 10f64.powi(e);
    let steps = [1.0, 2.0, 5.0, 10.0].map(|m| m * base);
    let tolerance = 1e-9 * base;
    if up {
        *steps
            .iter()
            .find(|&&s| s >= v - tolerance)
            .unwrap_or(&steps[3])
    } else {
        *steps
            .iter()
            .rev()
            .find(|&&s| s <= v + tolerance)
            .unwrap_or(&steps[0])
    }
}

impl Axis {
    /// An axis covering `values` (already filtered to finite ones, and positive ones
    /// for a log axis), widened to round numbers. `with_zero` makes a linear axis
    /// include 0.
    pub(crate) fn new(values: impl Iterator<Item = f64>, log: bool, with_zero: bool) -> Axis {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if log {
            Self::log(lo, hi)
        } else {
            Self::linear(lo, hi, with_zero)
        }
    }

    fn log(lo: f64, hi: f64) -> Axis {
        let (lo, hi) = if lo > hi {
            (1.0, 10.0) // No data.
        } else {
            let (a, b) = (snap_125(lo, false), snap_125(hi, true));
            if a < b {
                (a, b)
            } else {
                // All values equal to a round number: a decade either side.
                (a / 10.0, b * 10.0)
            }
        };
        let decades = (hi / lo).log10();
        let (ea, eb) = (
            (lo.log10().floor() as i32).clamp(-MAX_EXP, MAX_EXP),
            (hi.log10().ceil() as i32).clamp(-MAX_EXP, MAX_EXP),
        );
        let inside = |v: &f64| *v >= lo * (1.0 - 1e-9) && *v <= hi * (1.0 + 1e-9);
        let multiples = |ms: &[f64]| -> Vec<f64> {
            (ea..=eb)
                .flat_map(|e| ms.iter().map(move |m| m * 10f64.powi(e)))
                .filter(inside)
                .collect()
        };
        let ticks = if decades <= FINE_DECADES {
            multiples(&[1.0, 2.0, 5.0])
        } else {
            let all = multiples(&[1.0]);
            let stride = all.len().div_ceil(8).max(1);
            all.into_iter().step_by(stride).collect()
        };
        let minor = if decades <= MINOR_DECADES {
            multiples(&[2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
                .into_iter()
                .filter(|v| !ticks.iter().any(|t| (t - v).abs() <= 1e-9 * v))
                .collect()
        } else {
            Vec::new()
        };
        Axis {
            lo,
            hi,
            log: true,
            ticks,
            minor,
            unit: 1.0,
            decimals: None,
        }
    }

    fn linear(mut lo: f64, mut hi: f64, with_zero: bool) -> Axis {
        if lo > hi {
            (lo, hi) = (0.0, 1.0); // No data.
        }
        if with_zero {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        if hi - lo <= f64::EPSILON * hi.abs().max(lo.abs()) {
            // All values equal (a linear y axis gets here only when they are all 0).
            (lo, hi) = if lo == 0.0 {
                (if with_zero { 0.0 } else { -1.0 }, 1.0)
            } else {
                (lo - lo.abs() * 0.5, hi + hi.abs() * 0.5)
            };
        }
        let span = hi - lo;
        let plain = |lo: f64, hi: f64| Axis {
            lo,
            hi,
            log: false,
            ticks: vec![lo, hi],
            minor: Vec::new(),
            unit: 1.0,
            decimals: None,
        };
        if !span.is_finite() || span <= 0.0 {
            return plain(lo, hi);
        }
        let mag = 10f64.powf((span / 5.0).log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .iter()
            .map(|m| m * mag)
            .find(|s| span / s <= 6.0 + 1e-9)
            .unwrap_or(10.0 * mag);
        let first = (lo / step + 1e-9).floor();
        let last = (hi / step - 1e-9).ceil();
        if !(first.is_finite() && last.is_finite() && step > 0.0) || last - first > 20.0 {
            return plain(lo, hi);
        }
        // Integer multiples of the step, so the labels carry no accumulated error.
        let ticks: Vec<f64> = (first as i64..=last as i64)
            .map(|k| k as f64 * step + 0.0)
            .collect();
        let biggest = ticks.iter().fold(0f64, |m, t| m.max(t.abs()));
        let unit = if biggest >= 1e6 {
            1e6
        } else if biggest >= 1e4 {
            1e3
        } else {
            1.0
        };
        let scaled = step / unit;
        let decimals = (0..=6)
            .find(|&d| {
                let f = scaled * 10f64.powi(d);
                (f - f.round()).abs() < 1e-6 * f.max(1.0)
            })
            .map(|d| d as usize);
        Axis {
            lo: ticks[0],
            hi: *ticks.last().expect("at least one tick"),
            log: false,
            ticks,
            minor: Vec::new(),
            unit,
            decimals,
        }
    }

    /// Where `v` lies between `lo` (0) and `hi` (1).
    fn frac(&self, v: f64) -> f64 {
        if self.log {
            if v <= 0.0 {
                return -1.0; // Below the axis (such points are not drawn).
            }
            (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            // Halved so that spans up to the whole f64 range do not overflow.
            (v * 0.5 - self.lo * 0.5) / (self.hi * 0.5 - self.lo * 0.5)
        }
    }

    /// A tick label: `250`, `2.5k`, `1.2M`, `0.05`.
    pub(crate) fn label(&self, v: f64) -> String {
        let Some(decimals) = self.decimals else {
            return compact(v);
        };
        let suffix = if self.unit == 1e6 {
            "M"
        } else if self.unit == 1e3 {
            "k"
        } else {
            ""
        };
        let s = format!("{:.*}", decimals, v / self.unit + 0.0);
        if s.trim_start_matches('-')
            .trim_matches(['0', '.'])
            .is_empty()
        {
            return "0".into();
        }
        format!("{s}{suffix}")
    }
}

/// A short label for any value: `1`, `20`, `5000`, `20k`, `1.5M`, `0.02`, `1e-7`.
fn compact(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 || (a < 1e-4 && a > 0.0) {
        return format!("{v:.1e}").replace(".0e", "e");
    }
    let (x, suffix) = if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = format!("{x:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{suffix}")
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let px = f64::from(limit.0) + self.frac(*v) * f64::from(limit.1 - limit.0);
        // Far outside values stay far outside without overflowing (NaN maps to 0).
        px.round().clamp(-1e7, 1e7) as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.minor.clone()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(a: &Axis) -> Vec<String> {
        a.ticks.iter().map(|&t| a.label(t)).collect()
    }

    #[test]
    fn log_axis_spanning_3_to_4000() {
        let a = Axis::new([3.0, 40.0, 4000.0].into_iter(), true, true);
        assert_eq!((a.lo, a.hi), (2.0, 5000.0));
        assert_eq!(labels(&a), ["10", "100", "1000"]);
        assert!(a.minor.contains(&3.0) && a.minor.contains(&4000.0));
    }

    #[test]
    fn short_log_ranges_get_1_2_5_ticks() {
        let a = Axis::new([1.0, 128.0].into_iter(), true, false);
        assert_eq!((a.lo, a.hi), (1.0, 200.0));
        assert_eq!(labels(&a), ["1", "2", "5", "10", "20", "50", "100", "200"]);
        let a = Axis::new([3.0, 4.0].into_iter(), true, false);
        assert_eq!(a.ticks, [2.0, 5.0]);
        let a = Axis::new([0.3, 9.0].into_iter(), true, false);
        assert_eq!(labels(&a), ["0.2", "0.5", "1", "2", "5", "10"]);
    }

    #[test]
    fn wide_log_ranges_keep_at_most_8_ticks() {
        let a = Axis::new([1e-6, 1e12].into_iter(), true, false);
        assert!(a.ticks.len() <= 8 && a.ticks.len() >= 4, "{:?}", a.ticks);
        assert!(a.minor.is_empty());
        assert_eq!(a.label(1e12), "1e12");
        assert_eq!(a.label(1e-6), "1e-6");
    }

    #[test]
    fn degenerate_log_ranges() {
        // No data, one value on a round number, one value between round numbers.
        let a = Axis::new(std::iter::empty(), true, false);
        assert_eq!((a.lo, a.hi), (1.0, 10.0));
        let a = Axis::new([1000.0].into_iter(), true, false);
        assert_eq!((a.lo, a.hi), (100.0, 10000.0));
        let a = Axis::new([3.0, 3.0].into_iter(), true, false);
        assert_eq!((a.lo, a.hi), (2.0, 5.0));
        // The extremes of f64 stay finite and non-zero.
        let a = Axis::new([f64::MIN_POSITIVE, f64::MAX].into_iter(), true, false);
        assert!(
            a.lo > 0.0 && a.hi.is_finite() && !a.ticks.is_empty(),
            "{a:?}"
        );
    }

    #[test]
    fn linear_ticks_are_round_and_cover_the_range() {
        let a = Axis::new([0.0, 937.0].into_iter(), false, true);
        assert_eq!(a.ticks, [0.0, 200.0, 400.0, 600.0, 800.0, 1000.0]);
        let a = Axis::new([0.0, 10_000.0].into_iter(), false, true);
        assert_eq!(labels(&a), ["0", "2k", "4k", "6k", "8k", "10k"]);
        let a = Axis::new([0.0, 2_600_000.0].into_iter(), false, true);
        assert_eq!(
            labels(&a),
            ["0", "0.5M", "1.0M", "1.5M", "2.0M", "2.5M", "3.0M"]
        );
        let a = Axis::new([-5.0, 12.0].into_iter(), false, true);
        assert_eq!(labels(&a), ["-5", "0", "5", "10", "15"]);
        let a = Axis::new([0.0, 0.7].into_iter(), false, true);
        assert_eq!(labels(&a), ["0", "0.2", "0.4", "0.6", "0.8"]);
        let a = Axis::new([0.0, 12.0].into_iter(), false, true);
        assert_eq!(labels(&a), ["0", "2", "4", "6", "8", "10", "12"]);
        let a = Axis::new([0.0, 14.0].into_iter(), false, true);
        assert_eq!(
            labels(&a),
            ["0", "2.5", "5.0", "7.5", "10.0", "12.5", "15.0"]
        );
        // x axes do not start at zero.
        let a = Axis::new([10.0, 100.0].into_iter(), false, false);
        assert_eq!(labels(&a), ["0", "20", "40", "60", "80", "100"]);
        let a = Axis::new([1000.0, 1100.0].into_iter(), false, false);
        assert_eq!(a.lo, 1000.0);
    }

    #[test]
    fn y_axes_include_zero() {
        let a = Axis::new([-5.0, -3.0].into_iter(), false, true);
        assert_eq!((a.lo, a.hi), (-5.0, 0.0));
        let a = Axis::new([3.0, 7.0].into_iter(), false, true);
        assert_eq!(a.lo, 0.0);
    }

    #[test]
    fn degenerate_linear_ranges() {
        let a = Axis::new(std::iter::empty(), false, true);
        assert_eq!((a.lo, a.hi), (0.0, 1.0));
        let a = Axis::new([0.0, 0.0].into_iter(), false, true);
        assert_eq!((a.lo, a.hi), (0.0, 1.0));
        let a = Axis::new([4.0].into_iter(), false, false);
        assert!(a.lo <= 2.0 && a.hi >= 6.0, "{a:?}");
        let a = Axis::new([-f64::MAX, f64::MAX].into_iter(), false, true);
        assert_eq!(a.ticks.len(), 2);
        assert_eq!(a.map(&0.0, (0, 100)), 50);
    }
}
