//! Text with the embedded font: measuring it (for wrapping and layout), and a bitmap
//! backend that rasterises it itself.
//!
//! plotters' own `ab_glyph` text drawing drops each glyph's side bearing and places
//! rotated text off its anchor, so PNGs got uneven letter spacing and a clipped y-axis
//! description. [`Raster`] wraps plotters' [`BitMapBackend`] and draws text the way the
//! SVG backend positions it: the same anchors, the same em size (plotters' font size /
//! 1.24), glyphs placed at their advance with kerning and anti-aliased.

use std::sync::OnceLock;

use ab_glyph::{point, Font, FontRef, GlyphId, PxScale, ScaleFont};
use plotters::backend::BitMapBackend;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
    FontStyle,
};

use crate::PlotError;

/// DejaVu Sans 2.37 (Bitstream Vera licence with the Arev extension: see
/// `fonts/LICENSE-DejaVu.txt`).
pub(crate) const FONT_BYTES: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// plotters' font sizes are 1.24 times the em size (its SVG backend writes
/// `font-size = size / 1.24`); the PNG uses the same em so both look alike.
const SIZE_PER_EM: f64 = 1.24;

pub(crate) fn font() -> Result<&'static FontRef<'static>, PlotError> {
    static FONT: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    FONT.get_or_init(|| FontRef::try_from_slice(FONT_BYTES).ok())
        .as_ref()
        .ok_or(PlotError::Font)
}

fn scale(font: &FontRef<'_>, size: f64) -> PxScale {
    let em = (size / SIZE_PER_EM) as f32;
    let units = font.units_per_em().unwrap_or(2048.0);
    PxScale::from(em * font.height_unscaled() / units)
}

/// Glyphs of `text` on a baseline at y = 0 starting at x = 0, and the advance width.
fn layout(font: &FontRef<'static>, size: f64, text: &str) -> (Vec<ab_glyph::Glyph>, f32) {
    let scale = scale(font, size);
    let scaled = font.as_scaled(scale);
    let mut x = 0f32;
    let mut prev: Option<GlyphId> = None;
    let mut glyphs = Vec::with_capacity(text.len());
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(p) = prev {
            x += scaled.kern(p, id);
        }
        glyphs.push(id.with_scale_and_position(scale, point(x, 0.0)));
        x += scaled.h_advance(id);
        prev = Some(id);
    }
    (glyphs, x)
}

/// The width of `text` in pixels at plotters font size `size`.
pub(crate) fn text_width(size: f64, text: &str) -> Result<u32, PlotError> {
    Ok(layout(font()?, size, text).1.ceil() as u32)
}

/// Ascent and descent (negative) in pixels.
fn vertical(font: &FontRef<'static>, size: f64) -> (f32, f32) {
    let scaled = font.as_scaled(scale(font, size));
    (scaled.ascent(), scaled.descent())
}

/// plotters' bitmap backend (RGB into a caller's buffer) with its own text drawing.
pub(crate) struct Raster<'a> {
    inner: BitMapBackend<'a>,
    font: &'static FontRef<'static>,
}

impl<'a> Raster<'a> {
    pub(crate) fn new(buf: &'a mut [u8], size: (u32, u32)) -> Result<Self, PlotError> {
        Ok(Raster {
            inner: BitMapBackend::with_buffer(buf, size),
            font: font()?,
        })
    }
}

type Res<E> = Result<(), DrawingErrorKind<E>>;

impl DrawingBackend for Raster<'_> {
    type ErrorType = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }

    fn ensure_prepared(&mut self) -> Res<Self::ErrorType> {
        self.inner.ensure_prepared()
    }

    fn present(&mut self) -> Res<Self::ErrorType> {
        self.inner.present()
    }

    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Res<Self::ErrorType> {
        self.inner.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Res<Self::ErrorType> {
        self.inner.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Res<Self::ErrorType> {
        self.inner.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Res<Self::ErrorType> {
        self.inner.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Res<Self::ErrorType> {
        self.inner.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Res<Self::ErrorType> {
        self.inner.fill_polygon(vert, style)
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Res<Self::ErrorType> {
        self.inner.blit_bitmap(pos, size, src)
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        let (_, width) = layout(self.font, style.size(), text);
        let (ascent, descent) = vertical(self.font, style.size());
        Ok((width.ceil() as u32, (ascent - descent).ceil() as u32))
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Res<Self::ErrorType> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let (glyphs, width) = layout(self.font, style.size(), text);
        let (ascent, descent) = vertical(self.font, style.size());
        // Offsets from the anchor to the baseline's start, in the text's own frame.
        let anchor = style.anchor();
        let dx = match anchor.h_pos {
            HPos::Left => 0.0,
            HPos::Center => -width / 2.0,
            HPos::Right => -width,
        };
        let dy = match anchor.v_pos {
            VPos::Top => ascent,
            VPos::Center => (ascent + descent) / 2.0,
            VPos::Bottom => descent,
        };
        // No bold face is embedded: bold is the regular face struck twice, 0.5 px apart.
        let strikes: &[f32] = match style.style() {
            FontStyle::Bold => &[0.0, 0.5],
            _ => &[0.0],
        };
        let trans = style.transform();
        for glyph in glyphs {
            for &shift in strikes {
                let mut g = glyph.clone();
                g.position.x += dx + shift;
                g.position.y += dy;
                let Some(outline) = self.font.outline_glyph(g) else {
                    continue; // A space.
                };
                let bounds = outline.px_bounds();
                let mut result = Ok(());
                outline.draw(|gx, gy, coverage| {
                    if result.is_err() || coverage <= 0.0 {
                        return;
                    }
                    let x = bounds.min.x as i32 + gx as i32;
                    let y = bounds.min.y as i32 + gy as i32;
                    let (x, y) = trans.transform(x, y);
                    result = self.inner.draw_pixel(
                        (pos.0 + x, pos.1 + y),
                        BackendColor {
                            alpha: color.alpha * f64::from(coverage.min(1.0)),
                            rgb: color.rgb,
                        },
                    );
                });
                result?;
            }
        }
        Ok(())
    }
}
