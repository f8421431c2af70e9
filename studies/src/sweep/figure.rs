//! Drawing figures (plotters, SVG): small multiples sharing axes, series told
//! apart by colour, line style and marker shape, the legend beside the data,
//! log axes with clean ticks (powers of two for sizes and counts, 1-2-5
//! steps for values).

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// What an x axis counts: bytes (ticks 1K … 64M) or things (4 … 4096).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XKind {
    Bytes,
    Count,
}

/// One line of a panel: the index of its series (its style and legend
/// entry) and its points, ordered by x.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub series: usize,
    pub points: Vec<(f64, f64)>,
}

/// One panel of a figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: String,
    pub lines: Vec<Line>,
}

/// A figure: panels on a grid of `columns`, one legend for all of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub file: String,
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub x_kind: XKind,
    /// Legend labels; a line's `series` indexes this.
    pub series: Vec<String>,
    pub panels: Vec<Panel>,
    pub columns: usize,
    /// A log10 y axis (true) or a linear one from 0 (false); None: log
    /// when the positive values span more than a decade.
    pub log_y: Option<bool>,
}

/// Distinct styles before one repeats: colours × line styles, with the
/// marker cycling alongside the colour.
pub const STYLES: usize = COLORS.len() * DASHES;

/// Series whose markers differ in shape or size, so that where lines
/// coincide every hollow marker still shows around the others.
pub const MARKED: usize = MARKERS * SIZES;

/// The Okabe-Ito palette: told apart with colour-blindness too.
const COLORS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(230, 159, 0),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];
const DASHES: usize = 3;
const MARKERS: usize = 4;
const SIZES: usize = 4;

/// How series `i` is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Style {
    pub color: usize,
    /// 0 solid, 1 dashed, 2 dotted.
    pub dash: usize,
    /// 0 circle, 1 triangle, 2 square, 3 cross.
    pub marker: usize,
    /// Marker radius in pixels.
    pub size: i32,
}

/// Series `i`'s style: distinct from every other below [`STYLES`], its
/// marker (shape, size) distinct below [`MARKED`].
pub fn style(i: usize) -> Style {
    Style {
        color: i % COLORS.len(),
        dash: (i / COLORS.len()) % DASHES,
        marker: i % MARKERS,
        size: 4 + 2 * ((i / MARKERS) % SIZES) as i32,
    }
}

const PANEL: (u32, u32) = (420, 300);
const LEGEND_W: u32 = 320;
const TITLE_H: u32 = 44;

/// Renders `f` to `dir/f.file` (see [`Figure::log_y`] for the y axis):
/// drawn into memory, then written atomically, so a failed write is an
/// error (plotters' own file output drops errors).
pub fn render(dir: &Path, f: &Figure) -> Result<(), String> {
    let path = dir.join(&f.file);
    let mut svg = String::new();
    if draw(f, &mut svg).map_err(|x| format!("{}: {x}", path.display()))? {
        kernbench_runtime::output::write_file(&path, svg.as_bytes())?;
    }
    Ok(())
}

/// Draws `f` as SVG into `svg`; false if it has no points to draw.
fn draw(f: &Figure, svg: &mut String) -> Result<bool, DrawingAreaErrorKind<std::io::Error>> {
    let Some((x0, x1, y0, y1)) = bounds(f) else {
        return Ok(false);
    };
    let log_y = y0 > 0.0 && f.log_y.unwrap_or(y1 / y0 > 10.0);
    let rows = f.panels.len().div_ceil(f.columns.max(1)) as u32;
    let cols = f.columns.max(1).min(f.panels.len().max(1)) as u32;
    let size = (cols * PANEL.0 + LEGEND_W, rows * PANEL.1 + TITLE_H);
    let full = SVGBackend::with_string(svg, size).into_drawing_area();
    full.fill(&WHITE)?;
    let root = full.titled(&f.title, ("sans-serif", 20))?;
    let (plots, legend) = root.split_horizontally(cols * PANEL.0);
    let areas = plots.split_evenly((rows as usize, cols as usize));
    let axes = Axes {
        log_y,
        x_keys: pow2_ticks(x0, x1),
        y_keys: if log_y {
            // Ticks over the whole drawn range, which pads a tenth of a decade.
            let pad = 10f64.powf(0.1);
            log_ticks(y0 / pad, y1 * pad)
        } else {
            linear_ticks(0.0, y1)
        },
        x: if x0 == x1 {
            ((x0 / 2.0).log2(), (x1 * 2.0).log2())
        } else {
            (x0.log2() - 0.2, x1.log2() + 0.2)
        },
        y: if log_y {
            (y0.log10() - 0.1, y1.log10() + 0.1)
        } else {
            (0.0, y1 * 1.08)
        },
        y_floor: y0,
    };
    for (panel, area) in f.panels.iter().zip(areas.iter()) {
        draw_panel(&full, area, f, panel, &axes)?;
    }
    draw_legend(&legend, &f.series)?;
    full.present()?;
    Ok(true)
}

/// The shared axes of a figure's panels, in drawing coordinates: x is
/// log2 of the value, y log10 of it or the value.
struct Axes {
    log_y: bool,
    x_keys: Vec<f64>,
    y_keys: Vec<f64>,
    x: (f64, f64),
    y: (f64, f64),
    /// The smallest positive value: a log axis draws smaller ones there.
    y_floor: f64,
}

impl Axes {
    fn ty(&self, y: f64) -> f64 {
        if self.log_y {
            y.max(self.y_floor).log10()
        } else {
            y
        }
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// One panel: its frame, light grid lines and tick labels at the shared
/// ticks (labels drawn on `full`, in backend pixels), and its lines.
fn draw_panel(full: &Area, area: &Area, f: &Figure, panel: &Panel, a: &Axes) -> DrawResult {
    let mut c = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 14))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(58)
        .build_cartesian_2d(a.x.0..a.x.1, a.y.0..a.y.1)?;
    c.configure_mesh()
        .disable_mesh()
        .x_labels(0)
        .y_labels(0)
        .x_desc(f.x_desc.as_str())
        .y_desc(f.y_desc.as_str())
        .draw()?;
    let grid = BLACK.mix(0.12);
    let font =
        |h: HPos, v: VPos| TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(h, v));
    for &k in &a.x_keys {
        let x = k.log2();
        c.draw_series(std::iter::once(PathElement::new(
            vec![(x, a.y.0), (x, a.y.1)],
            grid,
        )))?;
        let (px, py) = c.backend_coord(&(x, a.y.0));
        full.draw(&Text::new(
            tick_label(k, f.x_kind),
            (px, py + 4),
            font(HPos::Center, VPos::Top),
        ))?;
    }
    for &k in &a.y_keys {
        let y = a.ty(k);
        c.draw_series(std::iter::once(PathElement::new(
            vec![(a.x.0, y), (a.x.1, y)],
            grid,
        )))?;
        let (px, py) = c.backend_coord(&(a.x.0, y));
        full.draw(&Text::new(
            number(k),
            (px - 5, py),
            font(HPos::Right, VPos::Center),
        ))?;
    }
    for line in &panel.lines {
        let pts: Vec<(f64, f64)> = line
            .points
            .iter()
            .map(|&(x, y)| (x.log2(), a.ty(y)))
            .collect();
        draw_line(&mut c, line.series, &pts)?;
    }
    Ok(())
}

/// The x and y extent of every point (y over positive values when any).
fn bounds(f: &Figure) -> Option<(f64, f64, f64, f64)> {
    let pts = f
        .panels
        .iter()
        .flat_map(|p| &p.lines)
        .flat_map(|l| &l.points)
        .filter(|p| p.0.is_finite() && p.1.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        (x0, x1, y1) = (x0.min(x), x1.max(x), y1.max(y));
        if y > 0.0 {
            y0 = y0.min(y);
        }
    }
    if x0 > x1 {
        return None;
    }
    if y0 > y1 {
        y0 = 0.0;
    }
    Some((x0, x1, y0, y1.max(y0 * 1.01).max(1e-9)))
}

type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Draws the hollow marker of a [`Style`] at each point: `$body` runs with
/// `$e` the iterator of elements (each shape is its own type, so the body
/// is expanded once per shape).
macro_rules! markers {
    ($style:expr, $points:expr, |$e:ident| $body:expr) => {{
        let st: Style = $style;
        let (r, line) = (st.size, COLORS[st.color].stroke_width(2));
        match st.marker {
            0 => {
                let $e = $points.map(|p| EmptyElement::at(p) + Circle::new((0, 0), r, line));
                $body
            }
            1 => {
                let $e =
                    $points.map(|p| EmptyElement::at(p) + TriangleMarker::new((0, 0), r + 1, line));
                $body
            }
            2 => {
                let $e =
                    $points.map(|p| EmptyElement::at(p) + Rectangle::new([(-r, -r), (r, r)], line));
                $body
            }
            _ => {
                let $e = $points.map(|p| EmptyElement::at(p) + Cross::new((0, 0), r, line));
                $body
            }
        }
    }};
}

/// A series' line in its dash style, with its marker at every point.
fn draw_line(c: &mut Chart, series: usize, pts: &[(f64, f64)]) -> DrawResult {
    let st = style(series);
    let stroke = COLORS[st.color].stroke_width(2);
    match st.dash {
        0 => {
            c.draw_series(LineSeries::new(pts.to_vec(), stroke))?;
        }
        d => {
            let (on, off) = dash_pattern(d);
            c.draw_series(DashedLineSeries::new(pts.to_vec(), on, off, stroke))?;
        }
    }
    markers!(st, pts.iter().copied(), |e| c.draw_series(e).map(|_| ()))?;
    Ok(())
}

/// Pixels on and off of line style 1 (dashed) and 2 (dotted).
fn dash_pattern(dash: usize) -> (u32, u32) {
    if dash == 1 { (10, 6) } else { (3, 4) }
}

/// One legend entry per series, top to bottom: a line sample with its
/// marker, then its label.
fn draw_legend(area: &Area, series: &[String]) -> DrawResult {
    let step = 22;
    for (i, label) in series.iter().enumerate() {
        let y = 40 + step * i as i32;
        let st = style(i);
        let stroke = COLORS[st.color].stroke_width(2);
        let sample = [(10, y), (50, y)];
        match st.dash {
            0 => area.draw(&PathElement::new(sample.to_vec(), stroke))?,
            d => {
                let (on, off) = dash_pattern(d);
                for piece in DashedLineSeries::new(sample.to_vec(), on, off, stroke) {
                    area.draw(&piece)?;
                }
            }
        }
        markers!(st, std::iter::once((30, y)), |e| {
            for m in e {
                area.draw(&m)?;
            }
        });
        area.draw(&Text::new(label.clone(), (58, y - 7), ("sans-serif", 13)))?;
    }
    Ok(())
}

/// Powers of two from x0 to x1, thinned to at most 9 ticks.
pub fn pow2_ticks(x0: f64, x1: f64) -> Vec<f64> {
    let (lo, hi) = (
        x0.max(1.0).log2().ceil() as i32,
        x1.max(1.0).log2().floor() as i32,
    );
    let every = ((hi - lo + 1).max(1) as usize).div_ceil(9).max(1);
    (lo..=hi).step_by(every).map(|k| 2f64.powi(k)).collect()
}

/// 1-2-5 ticks on a log axis from y0 to y1 (only powers of ten past five decades).
pub fn log_ticks(y0: f64, y1: f64) -> Vec<f64> {
    let (lo, hi) = (y0.log10().floor() as i32, y1.log10().ceil() as i32);
    let mantissas: &[f64] = if hi - lo > 5 {
        &[1.0]
    } else {
        &[1.0, 2.0, 5.0]
    };
    (lo..=hi)
        .flat_map(|k| mantissas.iter().map(move |m| m * 10f64.powi(k)))
        .filter(|&v| v >= y0 / 1.0001 && v <= y1 * 1.0001)
        .collect()
}

/// Ticks from `y0` to `y1` in a 1-2-5 step giving at most 8 of them.
pub fn linear_ticks(y0: f64, y1: f64) -> Vec<f64> {
    let span = (y1 - y0).max(1e-12);
    let mut k = (span / 8.0).log10().floor() as i32;
    let step = loop {
        let unit = 10f64.powi(k);
        if let Some(s) = [1.0, 2.0, 5.0]
            .iter()
            .map(|m| m * unit)
            .find(|s| span / s <= 8.0)
        {
            break s;
        }
        k += 1;
    };
    let first = (y0 / step).ceil() as i64;
    let last = (y1 / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// A tick value as written: 1-2-5 numbers without trailing zeros.
pub fn number(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let decimals = (-(v.abs().log10().floor()) as i32).max(0) as usize;
    format!("{v:.decimals$}")
}

/// An x tick: a size in K/M/G (powers of 1024) or a plain count.
pub fn tick_label(v: f64, kind: XKind) -> String {
    match kind {
        XKind::Bytes => human(v),
        XKind::Count => format!("{}", v.round()),
    }
}

/// A byte count in K, M, G (powers of 1024).
pub fn human(v: f64) -> String {
    let v = v.round();
    match v {
        v if v >= 1073741824.0 => format!("{}G", v / 1073741824.0),
        v if v >= 1048576.0 => format!("{}M", v / 1048576.0),
        v if v >= 1024.0 => format!("{}K", v / 1024.0),
        v => format!("{v}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(ticks: &[f64], kind: XKind) -> Vec<String> {
        ticks.iter().map(|&v| tick_label(v, kind)).collect()
    }

    #[test]
    fn sizes_and_counts_tick_at_powers_of_two() {
        assert_eq!(
            labels(&pow2_ticks(1024.0, 67108864.0), XKind::Bytes),
            ["1K", "4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M"]
        );
        assert_eq!(
            labels(&pow2_ticks(4.0, 4096.0), XKind::Count),
            ["4", "16", "64", "256", "1024", "4096"]
        );
        assert_eq!(
            labels(&pow2_ticks(4.0, 64.0), XKind::Count),
            ["4", "8", "16", "32", "64"]
        );
    }

    #[test]
    fn values_tick_in_one_two_five_steps() {
        let log: Vec<String> = log_ticks(0.3, 40.0).into_iter().map(number).collect();
        assert_eq!(log, ["0.5", "1", "2", "5", "10", "20"]);
        let lin: Vec<String> = linear_ticks(0.0, 100.0).into_iter().map(number).collect();
        assert_eq!(lin, ["0", "20", "40", "60", "80", "100"]);
        let wide: Vec<String> = log_ticks(0.01, 5e5).into_iter().map(number).collect();
        assert_eq!(
            wide,
            ["0.01", "0.1", "1", "10", "100", "1000", "10000", "100000"]
        );
    }

    #[test]
    fn styles_are_distinct_up_to_the_limit() {
        let mut seen: Vec<Style> = (0..STYLES).map(style).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), STYLES);
        let mut marks: Vec<(usize, i32)> = (0..MARKED)
            .map(|i| (style(i).marker, style(i).size))
            .collect();
        marks.sort_unstable();
        marks.dedup();
        assert_eq!(marks.len(), MARKED);
    }
}
