//! Partita's figures: line charts laid out in a grid of panels, drawn with
//! [`plotters`] to SVG and PNG.
//!
//! A [`Figure`] has a title on top, a footnote at the bottom (the configuration the
//! numbers were measured with; long footnotes wrap) and its [`Panel`]s in rows of
//! `cols`. Each panel has axes with ticks and labels (linear or logarithmic), a title,
//! one line with point markers per [`Series`] and a legend under the plot. Series `i`
//! has the same colour in every panel.
//!
//! Text is laid out and, in PNGs, rasterised with DejaVu Sans, which the crate embeds
//! (`fonts/DejaVuSans.ttf`, licence in `fonts/LICENSE-DejaVu.txt`): nothing is loaded
//! from the system, so a PNG looks the same on every machine. SVGs name the generic
//! `sans-serif` family and leave the glyphs to the viewer.
//!
//! ```
//! use partita_plot::{Figure, Panel, Series};
//!
//! let panel = Panel {
//!     title: "throughput".into(),
//!     x_label: "clients".into(),
//!     y_label: "commands/s".into(),
//!     log_x: true,
//!     log_y: false,
//!     series: vec![Series {
//!         label: "SMR".into(),
//!         points: vec![(1.0, 900.0), (4.0, 3100.0), (16.0, 5200.0)],
//!     }],
//! };
//! let fig = Figure {
//!     title: "Figure 1".into(),
//!     footnote: "3 replicas, 1 KiB commands".into(),
//!     panels: vec![panel],
//!     cols: 1,
//! };
//! let svg = fig.svg()?;
//! assert!(svg.contains("SMR"));
//! let png = fig.png()?;
//! assert!(png.starts_with(b"\x89PNG"));
//! # Ok::<(), partita_plot::PlotError>(())
//! ```

mod axis;
mod raster;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;

use axis::Axis;
use raster::{text_width, Raster};

/// One line of a panel: `points` are `(x, y)` pairs, drawn in the order given.
/// Non-finite values, and non-positive ones on a logarithmic axis, are skipped.
#[derive(Clone, Debug)]
pub struct Series {
    /// The series' name in the legend.
    pub label: String,
    /// The data, `(x, y)`.
    pub points: Vec<(f64, f64)>,
}

/// One chart of a figure.
#[derive(Clone, Debug)]
pub struct Panel {
    /// Drawn above the chart (wrapped if it is wider than the panel).
    pub title: String,
    /// The horizontal axis' description.
    pub x_label: String,
    /// The vertical axis' description.
    pub y_label: String,
    /// A logarithmic x axis (in decades).
    pub log_x: bool,
    /// A logarithmic y axis (in decades). A linear y axis always includes zero, and a
    /// dashed line marks zero when the axis spans negative and positive values.
    pub log_y: bool,
    /// The lines; the legend lists them in this order.
    pub series: Vec<Series>,
}

/// A titled grid of panels with a footnote: what [`Figure::svg`], [`Figure::png`] and
/// [`Figure::write`] draw.
#[derive(Clone, Debug)]
pub struct Figure {
    /// Drawn centred on top.
    pub title: String,
    /// Drawn at the bottom, wrapped to the figure's width (`\n` starts a new line).
    pub footnote: String,
    /// Laid out left to right, top to bottom.
    pub panels: Vec<Panel>,
    /// Panels per row (0 counts as 1).
    pub cols: usize,
}

/// What went wrong drawing or saving a figure.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The embedded font could not be parsed (a corrupt build).
    #[error("the embedded font (DejaVu Sans) could not be loaded")]
    Font,
    /// plotters failed to draw an element.
    #[error("drawing the figure failed: {0}")]
    Draw(String),
    /// The drawn bitmap could not be encoded as PNG.
    #[error("encoding the PNG failed: {0}")]
    Encode(#[from] png::EncodingError),
    /// A file could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl Figure {
    /// The figure as an SVG document.
    pub fn svg(&self) -> Result<String, PlotError> {
        let layout = Layout::new(self)?;
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, (layout.width, layout.height))
                .into_drawing_area();
            self.draw(&root, &layout)?;
            root.present().map_err(draw_err)?;
        }
        Ok(out)
    }

    /// The figure as a PNG image (8-bit RGB), as many pixels wide and high as the SVG.
    pub fn png(&self) -> Result<Vec<u8>, PlotError> {
        let layout = Layout::new(self)?;
        let (w, h) = (layout.width, layout.height);
        let mut rgb = vec![255u8; w as usize * h as usize * 3];
        {
            let root = Raster::new(&mut rgb, (w, h))?.into_drawing_area();
            self.draw(&root, &layout)?;
            root.present().map_err(draw_err)?;
        }
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header()?;
        writer.write_image_data(&rgb)?;
        writer.finish()?;
        Ok(out)
    }

    /// Writes `STEM.svg` and `STEM.png` (`stem` has no extension; anything after a dot
    /// in its file name is kept: `fig.v2` gives `fig.v2.svg`) and returns both paths.
    pub fn write(&self, stem: &Path) -> Result<Vec<PathBuf>, PlotError> {
        let with_ext = |ext: &str| {
            let mut name = stem.as_os_str().to_owned();
            name.push(".");
            name.push(ext);
            PathBuf::from(name)
        };
        let (svg_path, png_path) = (with_ext("svg"), with_ext("png"));
        let svg = self.svg()?;
        let png = self.png()?;
        for (path, bytes) in [(&svg_path, svg.as_bytes()), (&png_path, &png[..])] {
            std::fs::write(path, bytes).map_err(|source| PlotError::Write {
                path: path.clone(),
                source,
            })?;
        }
        Ok(vec![svg_path, png_path])
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        l: &Layout,
    ) -> Result<(), PlotError> {
        root.fill(&WHITE).map_err(draw_err)?;
        let mut y = PAD as i32;
        for line in &l.title_lines {
            let style = sans(TITLE_PX)
                .style(FontStyle::Bold)
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Top));
            root.draw_text(line, &style, (l.width as i32 / 2, y))
                .map_err(draw_err)?;
            y += line_height(TITLE_PX) as i32;
        }
        for (i, panel) in self.panels.iter().enumerate() {
            let row = &l.rows[i / l.cols];
            let x = PANEL_W * (i % l.cols) as u32;
            let cell = root.clone().shrink((x, row.top), (PANEL_W, row.height));
            draw_panel(&cell, panel, l, row, i)?;
        }
        let mut y = (l.foot_top + PAD) as i32;
        for line in &l.foot_lines {
            let style = sans(FOOT_PX)
                .color(&FOOT_GREY)
                .pos(Pos::new(HPos::Left, VPos::Top));
            root.draw_text(line, &style, (PAD as i32, y))
                .map_err(draw_err)?;
            y += line_height(FOOT_PX) as i32;
        }
        Ok(())
    }
}

// Sizes in pixels (plotters' font sizes: the SVG's font-size is this / 1.24).
const PANEL_W: u32 = 500;
/// The axes with their tick labels and descriptions, without title or legend.
const CHART_H: u32 = 300;
const PAD: u32 = 10;
const TITLE_PX: f64 = 22.0;
const PANEL_TITLE_PX: f64 = 18.0;
const LABEL_PX: f64 = 14.0;
const DESC_PX: f64 = 15.0;
const LEGEND_PX: f64 = 15.0;
const FOOT_PX: f64 = 14.0;
/// Left of the plotting area: tick labels and the rotated y description.
const Y_AXIS_W: u32 = 72;
/// Below the plotting area: tick labels and the x description.
const X_AXIS_H: u32 = 48;
/// Keeps the rotated y description off the panel's (and figure's) left edge.
const CHART_MARGIN_LEFT: u32 = 6;
const CHART_MARGIN_RIGHT: u32 = 24;
const CHART_MARGIN_TOP: u32 = 8;
const LEGEND_SWATCH: u32 = 26;
const LEGEND_GAP: u32 = 18;

const FOOT_GREY: RGBColor = RGBColor(85, 85, 85);
const FRAME: RGBColor = RGBColor(60, 60, 60);
const ZERO_LINE: RGBColor = RGBColor(51, 51, 51);
/// Series colours (Tableau 10, in today's order), by series index; the 11th series
/// takes the first colour again.
const COLORS: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// Registers the embedded font as plotters' `sans-serif` (once per process): plotters
/// measures text with it when it lays out axes (the SVG backend names the family and
/// leaves the glyphs to the viewer; [`Raster`] draws them itself).
fn ensure_font() -> Result<(), PlotError> {
    static OK: OnceLock<bool> = OnceLock::new();
    let ok = *OK.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, raster::FONT_BYTES).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(PlotError::Font)
    }
}

fn sans(px: f64) -> FontDesc<'static> {
    FontDesc::new(FontFamily::SansSerif, px, FontStyle::Normal)
}

fn line_height(px: f64) -> u32 {
    (px * 1.15).ceil() as u32
}

fn draw_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// SVG viewers draw bold titles with a real bold face, up to this much wider than the
/// regular one that is embedded (DejaVu Sans Bold vs. Book: 1.12 to 1.16).
const BOLD_WIDTH: f64 = 1.16;

/// The width of `text` as drawn, in pixels.
fn measure(px: f64, bold: bool, text: &str) -> Result<u32, PlotError> {
    let w = text_width(px, text)?;
    Ok(if bold {
        (f64::from(w) * BOLD_WIDTH).ceil() as u32
    } else {
        w
    })
}

/// `text` if it fits in `max_w` pixels, else as much of it as fits followed by `…`.
fn shorten(text: &str, px: f64, max_w: u32) -> Result<String, PlotError> {
    if text_width(px, text)? <= max_w {
        return Ok(text.to_string());
    }
    let mut out = String::new();
    for c in text.chars() {
        out.push(c);
        out.push('…');
        let fits = text_width(px, &out)? <= max_w;
        out.pop();
        if !fits {
            out.pop();
            break;
        }
    }
    out.push('…');
    Ok(out)
}

/// Greedy word wrap to `max_w` pixels; a word wider than a line is broken between
/// characters. `\n` breaks a line. An empty text gives no lines.
fn wrap(text: &str, px: f64, bold: bool, max_w: u32) -> Result<Vec<String>, PlotError> {
    let mut lines = Vec::new();
    for para in text.lines() {
        let mut cur = String::new();
        for word in para.split_whitespace() {
            let candidate = if cur.is_empty() {
                word.to_string()
            } else {
                format!("{cur} {word}")
            };
            if measure(px, bold, &candidate)? <= max_w {
                cur = candidate;
                continue;
            }
            if !cur.is_empty() {
                lines.push(std::mem::take(&mut cur));
            }
            // The word alone, broken if it does not fit either.
            for c in word.chars() {
                cur.push(c);
                if cur.chars().count() > 1 && measure(px, bold, &cur)? > max_w {
                    cur.pop();
                    lines.push(std::mem::take(&mut cur));
                    cur.push(c);
                }
            }
        }
        if !cur.is_empty() {
            lines.push(cur);
        }
    }
    Ok(lines)
}

/// Everything sized before drawing: the canvas, wrapped texts, the legend's rows.
struct Layout {
    width: u32,
    height: u32,
    cols: usize,
    title_lines: Vec<String>,
    rows: Vec<Row>,
    foot_top: u32,
    foot_lines: Vec<String>,
    /// Per panel: its title's lines.
    panel_titles: Vec<Vec<String>>,
    /// Per panel: legend rows, each a list of series indices and their labels
    /// (shortened with `…` when one would not fit on a row).
    legends: Vec<Vec<Vec<(usize, String)>>>,
}

/// One row of panels. Titles and legends take the room of the row's longest, so that
/// the plots of a row line up.
struct Row {
    top: u32,
    title_block: u32,
    height: u32,
}

impl Layout {
    fn new(fig: &Figure) -> Result<Layout, PlotError> {
        ensure_font()?;
        let cols = fig.cols.max(1);
        let width = PANEL_W * cols as u32;
        let title_lines = wrap(&fig.title, TITLE_PX, true, width - 2 * PAD)?;
        let title_block = PAD + title_lines.len() as u32 * line_height(TITLE_PX) + PAD / 2;
        let foot_lines = wrap(&fig.footnote, FOOT_PX, false, width - 2 * PAD)?;
        let foot_block = if foot_lines.is_empty() {
            PAD
        } else {
            PAD + foot_lines.len() as u32 * line_height(FOOT_PX) + PAD
        };
        let mut panel_titles = Vec::new();
        let mut legends = Vec::new();
        let legend_w = PANEL_W - CHART_MARGIN_LEFT - Y_AXIS_W - CHART_MARGIN_RIGHT;
        for p in &fig.panels {
            panel_titles.push(wrap(&p.title, PANEL_TITLE_PX, true, PANEL_W - 2 * PAD)?);
            let mut rows: Vec<Vec<(usize, String)>> = Vec::new();
            let mut used = 0;
            for (i, s) in p.series.iter().enumerate() {
                let label = shorten(&s.label, LEGEND_PX, legend_w - LEGEND_SWATCH - 6)?;
                let w = LEGEND_SWATCH + 6 + text_width(LEGEND_PX, &label)? + LEGEND_GAP;
                if rows.is_empty() || (used + w > legend_w && used > 0) {
                    rows.push(Vec::new());
                    used = 0;
                }
                rows.last_mut().expect("a row was pushed").push((i, label));
                used += w;
            }
            legends.push(rows);
        }
        let mut rows = Vec::new();
        let mut top = title_block;
        for first in (0..fig.panels.len()).step_by(cols) {
            let of_row = first..(first + cols).min(fig.panels.len());
            let title_lines = panel_titles[of_row.clone()].iter().map(Vec::len).max();
            let legend_rows = legends[of_row].iter().map(Vec::len).max();
            let title_block = PAD + title_lines.unwrap_or(0) as u32 * line_height(PANEL_TITLE_PX);
            let legend_block = PAD + legend_rows.unwrap_or(0) as u32 * line_height(LEGEND_PX);
            let height = title_block + CHART_H + legend_block;
            rows.push(Row {
                top,
                title_block,
                height,
            });
            top += height;
        }
        Ok(Layout {
            width,
            height: top + foot_block,
            cols,
            title_lines,
            rows,
            foot_top: top,
            foot_lines,
            panel_titles,
            legends,
        })
    }
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &Panel,
    l: &Layout,
    row: &Row,
    index: usize,
) -> Result<(), PlotError> {
    let (title_area, rest) = area.split_vertically(row.title_block);
    let (chart_area, legend_area) = rest.split_vertically(CHART_H);

    // Titles sit just above the plot when another in the row has more lines.
    let lines = &l.panel_titles[index];
    let mut y = (row.title_block - lines.len() as u32 * line_height(PANEL_TITLE_PX)) as i32;
    for line in lines {
        let style = sans(PANEL_TITLE_PX)
            .style(FontStyle::Bold)
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Top));
        title_area
            .draw_text(line, &style, (PANEL_W as i32 / 2, y))
            .map_err(draw_err)?;
        y += line_height(PANEL_TITLE_PX) as i32;
    }

    // Only the points that can be drawn on these axes.
    let drawable = |&(x, y): &(f64, f64)| {
        x.is_finite() && y.is_finite() && (!p.log_x || x > 0.0) && (!p.log_y || y > 0.0)
    };
    let series: Vec<Vec<(f64, f64)>> = p
        .series
        .iter()
        .map(|s| s.points.iter().copied().filter(drawable).collect())
        .collect();
    let all = || series.iter().flatten();
    let x_axis = Axis::new(all().map(|p| p.0), p.log_x, false);
    let y_axis = Axis::new(all().map(|p| p.1), p.log_y, true);
    let (xlo, xhi, ylo, yhi) = (x_axis.lo, x_axis.hi, y_axis.lo, y_axis.hi);
    let x_fmt = |v: &f64| x_axis.label(*v);
    let y_fmt = |v: &f64| y_axis.label(*v);

    let mut chart = ChartBuilder::on(&chart_area)
        .margin_top(CHART_MARGIN_TOP)
        .margin_left(CHART_MARGIN_LEFT)
        .margin_right(CHART_MARGIN_RIGHT)
        .x_label_area_size(X_AXIS_H)
        .y_label_area_size(Y_AXIS_W)
        .build_cartesian_2d(x_axis.clone(), y_axis.clone())
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(p.x_label.as_str())
        .y_desc(p.y_label.as_str())
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style(sans(LABEL_PX))
        .axis_desc_style(sans(DESC_PX))
        .bold_line_style(RGBColor(221, 221, 221))
        .light_line_style(RGBColor(240, 240, 240))
        .axis_style(FRAME)
        .draw()
        .map_err(draw_err)?;
    // Close the frame (the mesh draws the left and bottom axes).
    chart
        .plotting_area()
        .draw(&PathElement::new(
            vec![(xlo, yhi), (xhi, yhi), (xhi, ylo)],
            FRAME,
        ))
        .map_err(draw_err)?;

    if !p.log_y && ylo < 0.0 && yhi > 0.0 {
        chart
            .plotting_area()
            .draw(&DashedPathElement::new(
                vec![(xlo, 0.0), (xhi, 0.0)],
                6,
                4,
                ZERO_LINE.stroke_width(1),
            ))
            .map_err(draw_err)?;
    }

    for (i, points) in series.iter().enumerate() {
        let c = color(i);
        if points.len() > 1 {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    points.clone(),
                    c.stroke_width(2),
                )))
                .map_err(draw_err)?;
        }
        chart
            .draw_series(points.iter().map(|&pt| Circle::new(pt, 3, c.filled())))
            .map_err(draw_err)?;
    }

    // The legend, under the axes, aligned with the plotting area.
    let row_h = line_height(LEGEND_PX) as i32;
    for (r, row) in l.legends[index].iter().enumerate() {
        let cy = (PAD / 2) as i32 + r as i32 * row_h + row_h / 2;
        let mut x = (CHART_MARGIN_LEFT + Y_AXIS_W) as i32;
        for (i, label) in row {
            let c = color(*i);
            legend_area
                .draw(&PathElement::new(
                    vec![(x, cy), (x + LEGEND_SWATCH as i32, cy)],
                    c.stroke_width(2),
                ))
                .map_err(draw_err)?;
            legend_area
                .draw(&Circle::new(
                    (x + LEGEND_SWATCH as i32 / 2, cy),
                    3,
                    c.filled(),
                ))
                .map_err(draw_err)?;
            x += LEGEND_SWATCH as i32 + 6;
            let style = sans(LEGEND_PX)
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center));
            legend_area
                .draw_text(label, &style, (x, cy))
                .map_err(draw_err)?;
            x += (text_width(LEGEND_PX, label)? + LEGEND_GAP) as i32;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
