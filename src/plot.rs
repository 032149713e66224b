//! Small SVG line charts for `partita experiment`: a grid of panels, each with axes,
//! ticks, labelled series and a legend. Self-contained text output (no fonts to load),
//! so figures render the same everywhere.

use std::fmt::Write;

#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

#[derive(Clone, Debug)]
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    pub series: Vec<Series>,
}

const W: f64 = 460.0;
const H: f64 = 320.0;
const ML: f64 = 70.0;
const MR: f64 = 20.0;
const MT: f64 = 34.0;
const MB: f64 = 48.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Tick values for an axis from `lo` to `hi`.
fn ticks(lo: f64, hi: f64, log: bool) -> Vec<f64> {
    if log {
        let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        return (a..=b).map(|e| 10f64.powi(e)).collect();
    }
    let span = (hi - lo).max(1e-12);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 6.0)
        .unwrap_or(10.0 * mag);
    let mut v = Vec::new();
    let mut t = (lo / step).floor() * step;
    loop {
        v.push(t);
        if t >= hi - step * 1e-9 {
            break v;
        }
        t += step;
    }
}

fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn panel_svg(out: &mut String, p: &Panel, ox: f64, oy: f64) {
    let pts = p.series.iter().flat_map(|s| s.points.iter());
    let (mut xlo, mut xhi, mut ylo, mut yhi) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        xlo = xlo.min(x);
        xhi = xhi.max(x);
        ylo = ylo.min(y);
        yhi = yhi.max(y);
    }
    if xlo > xhi {
        (xlo, xhi, ylo, yhi) = (0.0, 1.0, 0.0, 1.0);
    }
    if !p.log_y {
        // Linear axes start at zero, or below it for negative values (improvements).
        ylo = ylo.min(0.0);
    }
    let clamp_log = |v: f64| v.max(1e-9);
    if p.log_y {
        ylo = 10f64.powf(clamp_log(ylo).log10().floor());
        yhi = 10f64.powf(clamp_log(yhi).log10().ceil());
    }
    if p.log_x {
        xlo = 10f64.powf(clamp_log(xlo).log10().floor());
        xhi = 10f64.powf(clamp_log(xhi).log10().ceil());
    }
    let xt = ticks(xlo, xhi, p.log_x);
    let yt = ticks(ylo, yhi.max(ylo + 1e-9), p.log_y);
    let (xlo, xhi) = (
        xt.first().copied().unwrap_or(xlo).min(xlo),
        xt.last().copied().unwrap_or(xhi).max(xhi),
    );
    let (ylo, yhi) = (
        yt.first().copied().unwrap_or(ylo).min(ylo),
        yt.last().copied().unwrap_or(yhi).max(yhi),
    );
    let tx = |x: f64| {
        let f = if p.log_x {
            (clamp_log(x).log10() - xlo.log10()) / (xhi.log10() - xlo.log10()).max(1e-12)
        } else {
            (x - xlo) / (xhi - xlo).max(1e-12)
        };
        ox + ML + f * (W - ML - MR)
    };
    let ty = |y: f64| {
        let f = if p.log_y {
            (clamp_log(y).log10() - ylo.log10()) / (yhi.log10() - ylo.log10()).max(1e-12)
        } else {
            (y - ylo) / (yhi - ylo).max(1e-12)
        };
        oy + H - MB - f * (H - MT - MB)
    };
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="14" text-anchor="middle" font-weight="bold">{}</text>"#,
        ox + W / 2.0,
        oy + 20.0,
        esc(&p.title)
    );
    // Axes and grid.
    for &t in &yt {
        let y = ty(t);
        let _ = write!(
            out,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            ox + ML,
            ox + W - MR,
            ox + ML - 5.0,
            y + 4.0,
            fmt_num(t)
        );
    }
    for &t in &xt {
        let x = tx(t);
        let _ = write!(
            out,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            oy + MT,
            oy + H - MB,
            oy + H - MB + 15.0,
            fmt_num(t)
        );
    }
    let _ = write!(
        out,
        r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#333"/>"##,
        ox + ML,
        oy + MT,
        W - ML - MR,
        H - MT - MB
    );
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
        ox + ML + (W - ML - MR) / 2.0,
        oy + H - 10.0,
        esc(&p.x_label)
    );
    let _ = write!(
        out,
        r#"<text transform="translate({:.1},{:.1}) rotate(-90)" font-size="12" text-anchor="middle">{}</text>"#,
        ox + 16.0,
        oy + MT + (H - MT - MB) / 2.0,
        esc(&p.y_label)
    );
    // A zero line when the axis spans negative values.
    if !p.log_y && ylo < 0.0 && yhi > 0.0 {
        let y = ty(0.0);
        let _ = write!(
            out,
            r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#333" stroke-dasharray="4 3"/>"##,
            ox + ML,
            ox + W - MR
        );
    }
    // Series and legend.
    for (i, s) in p.series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let path: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", tx(x), ty(y)))
            .collect();
        let _ = write!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for &(x, y) in &s.points {
            let _ = write!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                tx(x),
                ty(y)
            );
        }
        let ly = oy + MT + 14.0 + 15.0 * i as f64;
        let _ = write!(
            out,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{c}" stroke-width="2"/><text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
            ox + ML + 8.0,
            ox + ML + 28.0,
            ox + ML + 32.0,
            ly + 4.0,
            esc(&s.label)
        );
    }
}

/// A figure: `panels` laid out in rows of `cols`, with a title and a footnote line
/// (the configuration the numbers were measured with).
pub fn figure(title: &str, footnote: &str, panels: &[Panel], cols: usize) -> String {
    let cols = cols.max(1);
    let rows = panels.len().div_ceil(cols);
    let (fw, fh) = (W * cols as f64, H * rows as f64 + 60.0);
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{fw:.0}" height="{fh:.0}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/><text x="{:.1}" y="22" font-size="16" text-anchor="middle" font-weight="bold">{}</text>"#,
        fw / 2.0,
        esc(title)
    );
    for (i, p) in panels.iter().enumerate() {
        let (r, c) = (i / cols, i % cols);
        panel_svg(&mut out, p, c as f64 * W, 30.0 + r as f64 * H);
    }
    let _ = write!(
        out,
        r##"<text x="10" y="{:.1}" font-size="11" fill="#555">{}</text></svg>"##,
        fh - 10.0,
        esc(footnote)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figure_has_every_series_and_title() {
        let p = Panel {
            title: "t<1>".into(),
            x_label: "clients".into(),
            y_label: "cmd/s".into(),
            log_x: false,
            log_y: true,
            series: vec![
                Series {
                    label: "CS".into(),
                    points: vec![(1.0, 10.0), (4.0, 1000.0)],
                },
                Series {
                    label: "SMR".into(),
                    points: vec![(1.0, 5.0), (4.0, 400.0)],
                },
            ],
        };
        let s = figure("Fig", "note", &[p.clone(), p], 2);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 4);
        assert!(s.contains("t&lt;1&gt;"), "titles are escaped");
        assert!(s.contains(">SMR<"));
    }

    #[test]
    fn negative_values_get_an_axis_below_zero() {
        let p = Panel {
            title: "improvement".into(),
            x_label: "clients".into(),
            y_label: "%".into(),
            log_x: false,
            log_y: false,
            series: vec![Series {
                label: "batch".into(),
                points: vec![(1.0, -5.0), (8.0, 12.0)],
            }],
        };
        let s = figure("Fig", "note", &[p], 1);
        assert!(s.contains(">-5.0<"), "{s}");
        assert!(s.contains("stroke-dasharray"), "a zero line");
    }

    #[test]
    fn linear_ticks_cover_the_range() {
        let t = ticks(0.0, 937.0, false);
        assert!(t[0] <= 0.0 && *t.last().unwrap() >= 937.0, "{t:?}");
        assert!(t.len() <= 8);
        assert_eq!(
            ticks(3.0, 4000.0, true),
            vec![1.0, 10.0, 100.0, 1000.0, 10000.0]
        );
    }
}
