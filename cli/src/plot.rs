//! The SVG charts of `tally sim --plots` (docs/img): line charts, a log
//! time axis for wait CDFs, grouped bar charts.
//!
//! Drawn by `plotters` through its SVG backend into a `String`. The crate is
//! built without its `ttf`/`ab_glyph` features, so no font file is read and
//! no system font is looked up: text goes out as `<text>` elements that the
//! viewer renders, laid out with plotters' built-in estimate of text widths.
//! The legend sits right of the plot, where it hides no data. The same
//! input gives a byte-identical string. `tally plan --svg` draws its grid
//! with the same helpers ([`render`], [`Categories`]).

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;
use tally_allocator::format_duration;

/// Width of every chart, in px.
pub const WIDTH: u32 = 900;
/// Height of every chart, in px.
pub const HEIGHT: u32 = 500;

/// Tableau 10, the colours of every chart and of the plan's jobs.
pub(crate) const TABLEAU10: [RGBColor; 10] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xba, 0xb0, 0xac),
];

/// The series' colours: eight of [`TABLEAU10`], reordered so that
/// neighbours differ; series `i` gets `PALETTE[i % 8]`.
pub const PALETTE: [RGBColor; 8] = [TABLEAU10[0], TABLEAU10[1], TABLEAU10[2], TABLEAU10[4], TABLEAU10[6], TABLEAU10[3], TABLEAU10[8], TABLEAU10[5]];

pub(crate) const FONT: &str = "sans-serif";
/// Font sizes as plotters takes them: it writes `size / 1.24` px, here
/// 18, 12 and 14.
pub(crate) const TITLE_SIZE: f64 = 22.32;
pub(crate) const LABEL_SIZE: f64 = 14.88;
pub(crate) const DESC_SIZE: f64 = 17.36;
pub(crate) const GRID: RGBColor = RGBColor(0xe3, 0xe3, 0xe3);
pub(crate) const INK: RGBColor = RGBColor(0x33, 0x33, 0x33);
const REFERENCE: RGBColor = RGBColor(0xc0, 0x39, 0x2b);
/// Longest legend name, in characters, before it is cut with an ellipsis.
const MAX_LEGEND_CHARS: usize = 30;
/// Longest category label, in characters, before it is cut with an ellipsis.
const MAX_CATEGORY_CHARS: usize = 28;
/// Margin around the plot and above the title, in px.
const MARGIN: u32 = 12;
/// Room left of the plot for the y tick labels and description, in px.
const Y_AREA: u32 = 70;
/// The legend's inner margin and the width of its marks, in px.
const LEGEND_MARGIN: u32 = 8;
const LEGEND_MARK: u32 = 26;

pub(crate) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
pub(crate) type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;
type Chart<'a, 'b, X> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, RangedCoordf64>>;

/// One line of a line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series<'a> {
    /// Name shown in the legend.
    pub name: &'a str,
    /// `(x, y)` points, drawn in the given order; points with a NaN or
    /// infinite coordinate are skipped.
    pub points: Vec<(f64, f64)>,
}

/// Line chart (several series with a legend right of the plot, axes with
/// plotters' ticks, grid lines, title, axis labels). `step: bool` draws
/// step lines (for CDFs: each y value holds until the next point's x).
/// Empty or all-empty input still gives a valid SVG with a "no data" note.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series], step: bool) -> String {
    chart(title, x_label, y_label, series, step, false)
}

/// [`line_chart`] with x in seconds on a log axis ticked at 1s, 10s, 1m,
/// 10m, 1h, 10h, 1d, 10d, 100d: waits that span seconds and days both
/// show. Values below 1 s are drawn at 1 s.
pub fn line_chart_log_seconds(title: &str, x_label: &str, y_label: &str, series: &[Series], step: bool) -> String {
    chart(title, x_label, y_label, series, step, true)
}

fn chart(title: &str, x_label: &str, y_label: &str, series: &[Series], step: bool, log_seconds: bool) -> String {
    let lines: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|(x, y)| if log_seconds { (x.max(1.0), y) } else { (x, y) })
                .collect();
            if step {
                step_corners(&pts)
            } else {
                pts
            }
        })
        .collect();
    let (xs, ys): (Vec<f64>, Vec<f64>) = lines.iter().flatten().copied().unzip();
    let (Some(x), Some(y)) = (bounds(xs), bounds(ys)) else {
        return no_data(title, x_label, y_label);
    };
    let y = y_range(y);
    let entries: Vec<(String, Mark)> =
        series.iter().enumerate().map(|(i, s)| (text(s.name, MAX_LEGEND_CHARS), Mark::Line(PALETTE[i % PALETTE.len()]))).collect();
    render((WIDTH, HEIGHT), |root| {
        let (plot, side) = layout(root, title, &entries)?;
        let mut builder = builder(&plot, 45);
        if log_seconds {
            let ticks = log_ticks(x);
            let range = (ticks[0]..ticks[ticks.len() - 1]).log_scale().with_key_points(ticks);
            let mut chart = builder.build_cartesian_2d(range, y)?;
            let label = |v: &f64| format_duration(v.round() as u64);
            mesh(&mut chart, x_label, y_label, Some(&label))?;
            draw_lines(&mut chart, &lines)?;
        } else {
            let mut chart = builder.build_cartesian_2d(widen(x), y)?;
            mesh(&mut chart, x_label, y_label, None)?;
            draw_lines(&mut chart, &lines)?;
        }
        legend(&side, &entries)
    })
}

/// Grouped bar chart: one group per category, one bar per series in each
/// group (legend), optional horizontal dashed reference line (e.g. y = 95
/// "95%") with its label in the legend. A series shorter than `categories`
/// has no bar for the missing ones; NaN/infinite values get no bar either.
/// Category labels are turned upright when there are many or they are long.
pub fn bar_chart(title: &str, y_label: &str, categories: &[String], series: &[(&str, Vec<f64>)], reference: Option<(f64, &str)>) -> String {
    let n = categories.len();
    let values: Vec<f64> = series.iter().flat_map(|(_, v)| v.iter().take(n).copied()).filter(|v| v.is_finite()).collect();
    let reference = reference.filter(|(r, _)| r.is_finite());
    let Some(y) = bounds(values.into_iter().chain(reference.map(|(r, _)| r)))
        .filter(|_| n > 0 && series.iter().any(|(_, v)| v.iter().take(n).any(|v| v.is_finite())))
    else {
        return no_data(title, "", y_label);
    };
    let y = y_range(y);
    let labels: Vec<String> = categories.iter().map(|c| text(c, MAX_CATEGORY_CHARS)).collect();
    let mut entries: Vec<(String, Mark)> =
        series.iter().enumerate().map(|(j, (name, _))| (text(name, MAX_LEGEND_CHARS), Mark::Box(PALETTE[j % PALETTE.len()]))).collect();
    if let Some((_, label)) = reference.filter(|(_, label)| !label.is_empty()) {
        entries.push((text(label, MAX_LEGEND_CHARS), Mark::Reference));
    }
    render((WIDTH, HEIGHT), |root| {
        let (plot, side) = layout(root, title, &entries)?;
        let font = TextStyle::from((FONT, LABEL_SIZE).into_font());
        let widest = labels.iter().map(|l| root.estimate_text_size(l, &font).map(|(w, _)| w)).try_fold(0, |a, w| w.map(|w| a.max(w)))?;
        let plot_width = plot.dim_in_pixel().0.saturating_sub(Y_AREA + 2 * MARGIN);
        let rotate = n > 8 || f64::from(widest) > 0.95 * f64::from(plot_width) / n as f64;
        let x_area = if rotate { (widest + 20).clamp(45, 200) } else { 45 };
        let mut builder = builder(&plot, x_area);
        let mut chart = builder.build_cartesian_2d(Categories { n, every: usize::from(!rotate) }, y.clone())?;
        category_mesh(&mut chart, &labels, LABEL_SIZE, y_label, None)?;
        if rotate {
            // plotters turns a text about its anchor: anchored at its end,
            // an upright label hangs below its group.
            let style = font.color(&INK).transform(FontTransform::Rotate270).pos(Pos::new(HPos::Right, VPos::Center));
            for (i, label) in labels.iter().enumerate() {
                let (px, py) = chart.backend_coord(&(i as f64 + 0.5, y.start));
                root.draw(&Text::new(label.clone(), (px, py + 8), style.clone()))?;
            }
        }
        let m = series.len().max(1) as f64;
        let bar = 0.8 / m;
        for (j, (_, vals)) in series.iter().enumerate() {
            let colour = PALETTE[j % PALETTE.len()];
            let bars = vals.iter().take(n).enumerate().filter(|(_, v)| v.is_finite()).map(|(i, &v)| {
                // Groups fill 80% of their category, bars 90% of their slot.
                let x = i as f64 + 0.1 + bar * (j as f64 + 0.05);
                Rectangle::new([(x, 0.0), (x + bar * 0.9, v)], colour.filled())
            });
            chart.draw_series(bars)?;
        }
        if y.start < 0.0 {
            chart.draw_series(LineSeries::new([(0.0, 0.0), (n as f64, 0.0)], INK))?;
        }
        if let Some((r, _)) = reference {
            chart.draw_series(DashedLineSeries::new([(0.0, r), (n as f64, r)], 6, 4, REFERENCE.stroke_width(2)))?;
        }
        legend(&side, &entries)
    })
}

/// Delivered against owed per team per day (Ai2's chart): one small panel
/// per team, in a grid three wide, each with a day's owed GPU-hours as a
/// bar and what was delivered of it beside it; the days run from the first
/// any team has to the last, labelled relative to the last ("0d" = the
/// last day, "-1d" the day before). One legend over the grid.
pub fn owed_days(title: &str, teams: &[(String, std::collections::BTreeMap<u64, tally_allocator::Owed>)]) -> String {
    let first = teams.iter().filter_map(|(_, d)| d.keys().next()).min().copied();
    let last = teams.iter().filter_map(|(_, d)| d.keys().next_back()).max().copied();
    let (Some(first), Some(last)) = (first, last) else {
        return no_data(title, "day", "GPU-hours");
    };
    let days: Vec<u64> = (first..=last).collect();
    let labels: Vec<String> = days.iter().map(|d| format!("{}d", -((last - d) as i64))).collect();
    let cols = teams.len().clamp(1, 3);
    let rows = teams.len().div_ceil(cols);
    const PANEL_H: u32 = 230;
    let height = 90 + PANEL_H * rows as u32;
    let (owed_c, delivered_c) = (PALETTE[0], PALETTE[1]);
    render((WIDTH, height), |root| {
        let style = (FONT, TITLE_SIZE).into_font().style(FontStyle::Bold).color(&INK);
        let body = root.margin(MARGIN, 0, 0, 0).titled(&text(title, usize::MAX), style)?;
        let (key, grid) = body.split_vertically(40);
        let font = (FONT, LABEL_SIZE).into_font().color(&INK);
        for (k, (name, colour)) in
            [("owed GPU-hours (per hour, min of rate and what was asked)", owed_c), ("delivered GPU-hours (allocated work that ran)", delivered_c)]
                .iter()
                .enumerate()
        {
            let x = MARGIN as i32 + 20 + 440 * k as i32;
            key.draw(&Rectangle::new([(x, 8), (x + 12, 20)], colour.filled()))?;
            key.draw(&Text::new(name.to_string(), (x + 18, 7), font.clone()))?;
        }
        for (panel, (team, per_day)) in grid.split_evenly((rows, cols)).iter().zip(teams) {
            let owed: Vec<f64> = days.iter().map(|d| per_day.get(d).map_or(0.0, |o| o.delivery.owed_gpu_hours)).collect();
            let delivered: Vec<f64> = days.iter().map(|d| per_day.get(d).map_or(0.0, |o| o.delivery.delivered_gpu_hours)).collect();
            let top = owed.iter().chain(&delivered).fold(0.0f64, |a, &b| a.max(b)).max(0.01) * 1.1;
            let ratio = {
                let (o, c) = per_day.values().fold((0.0, 0.0), |(o, c), x| (o + x.delivery.owed_gpu_hours, c + x.delivery.credited_gpu_hours));
                if o > 0.0 {
                    format!(" ({:.0}%)", 100.0 * c / o)
                } else {
                    String::new()
                }
            };
            let mut chart = ChartBuilder::on(panel)
                .margin(8)
                .caption(text(&format!("{team}{ratio}"), 36), (FONT, LABEL_SIZE).into_font().color(&INK))
                .x_label_area_size(22)
                .y_label_area_size(44)
                .build_cartesian_2d(Categories { n: days.len(), every: days.len().div_ceil(7).max(1) }, 0.0..top)?;
            category_mesh(&mut chart, &labels, LABEL_SIZE * 0.85, "", Some(4))?;
            for (j, (vals, colour)) in [(&owed, owed_c), (&delivered, delivered_c)].into_iter().enumerate() {
                let bars = vals.iter().enumerate().filter(|(_, v)| **v > 0.0).map(|(i, &v)| {
                    let x = i as f64 + 0.1 + 0.4 * j as f64;
                    Rectangle::new([(x, 0.0), (x + 0.36, v)], colour.filled())
                });
                chart.draw_series(bars)?;
            }
        }
        Ok(())
    })
}

/// The mesh of a chart over [`Categories`]: horizontal grid lines only,
/// category `i` labelled `labels[i]`, `y_labels` ticks (plotters' choice
/// when `None`), the y axis described by `y_desc` (none when empty).
fn category_mesh(chart: &mut Chart<Categories>, labels: &[String], label_size: f64, y_desc: &str, y_labels: Option<usize>) -> Res {
    let category = |v: &f64| labels.get(v.floor() as usize).cloned().unwrap_or_default();
    let mut mesh = chart.configure_mesh();
    mesh.disable_x_mesh()
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .axis_style(INK)
        .label_style((FONT, label_size).into_font().color(&INK))
        .axis_desc_style((FONT, DESC_SIZE).into_font().color(&INK))
        .x_label_formatter(&category)
        .y_label_formatter(&number);
    if !y_desc.is_empty() {
        mesh.y_desc(text(y_desc, usize::MAX));
    }
    if let Some(n) = y_labels {
        mesh.y_labels(n);
    }
    mesh.draw()?;
    Ok(())
}

/// An axis of `n` categories (bars, GPUs, steps): category `i` spans
/// `[i, i + 1]`, with a tick (and its label) at the centre of every
/// `every`-th one (none when 0).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Categories {
    pub n: usize,
    pub every: usize,
}

impl Ranged for Categories {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, (a, b): (i32, i32)) -> i32 {
        a + (v / self.n as f64 * f64::from(b - a)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if self.every > 0 && !hint.weight().allow_light_points() {
            (0..self.n).step_by(self.every).map(|i| i as f64 + 0.5).collect()
        } else {
            Vec::new()
        }
    }

    fn range(&self) -> Range<f64> {
        0.0..self.n as f64
    }
}

/// `draw` run on a white SVG of `size` px written into a string.
pub(crate) fn render(size: (u32, u32), draw: impl FnOnce(&Area) -> Res) -> String {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        let drawn = root.fill(&WHITE).map_err(Into::into).and_then(|()| draw(&root)).and_then(|()| Ok(root.present()?));
        // Only the backend's writes could fail, and it writes into a String.
        if let Err(e) = drawn {
            unreachable!("drawing an SVG into a string: {e}");
        }
    }
    out
}

/// How a legend entry is marked.
#[derive(Debug, Clone, Copy)]
enum Mark {
    /// A line chart's series: a short line of its colour.
    Line(RGBColor),
    /// A bar chart's series: a square of its colour.
    Box(RGBColor),
    /// The bar chart's reference line: a short dashed line.
    Reference,
}

/// The title over everything, then the plot's area and, right of it, the
/// legend's (as wide as the longest name needs).
fn layout<'b>(root: &Area<'b>, title: &str, entries: &[(String, Mark)]) -> Res<(Area<'b>, Area<'b>)> {
    let style = (FONT, TITLE_SIZE).into_font().style(FontStyle::Bold).color(&INK);
    let body = root.margin(MARGIN, 0, 0, 0).titled(&text(title, usize::MAX), style)?;
    let font = TextStyle::from((FONT, LABEL_SIZE).into_font());
    let mut widest = None;
    for (name, _) in entries {
        let (w, _) = root.estimate_text_size(name, &font)?;
        widest = Some(widest.unwrap_or(0).max(w));
    }
    let legend = widest.map_or(0, |w| w + LEGEND_MARK + 2 * LEGEND_MARGIN + MARGIN);
    Ok(body.split_horizontally(WIDTH.saturating_sub(legend)))
}

/// Room around the plot for the axes.
fn builder<'a, 'b>(area: &'a Area<'b>, x_area: u32) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(area);
    b.margin(MARGIN).x_label_area_size(x_area).y_label_area_size(Y_AREA);
    b
}

/// The legend, in `side` (right of the plot: it never hides data), drawn by
/// plotters from series that have a label and a mark but no data.
fn legend(side: &Area, entries: &[(String, Mark)]) -> Res {
    if entries.is_empty() {
        return Ok(());
    }
    let mut chart = ChartBuilder::on(side).margin_top(MARGIN).margin_right(MARGIN).build_cartesian_2d(0.0..1.0, 0.0..1.0)?;
    for (name, mark) in entries {
        let anno = chart.draw_series(std::iter::empty::<PathElement<(f64, f64)>>())?;
        anno.label(name.clone());
        match *mark {
            Mark::Line(c) => anno.legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], c.stroke_width(3))),
            Mark::Box(c) => anno.legend(move |(x, y)| Rectangle::new([(x + 3, y - 6), (x + 15, y + 6)], c.filled())),
            Mark::Reference => anno.legend(|(x, y)| DashedPathElement::new([(x, y), (x + 18, y)], 5, 3, REFERENCE.stroke_width(2))),
        };
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .margin(LEGEND_MARGIN)
        .legend_area_size(LEGEND_MARK)
        .label_font((FONT, LABEL_SIZE).into_font().color(&INK))
        .background_style(WHITE)
        .border_style(GRID.stroke_width(1))
        .draw()?;
    Ok(())
}

/// Grid lines, axes, tick labels (`x_fmt` formats the x ones, [`number`]
/// otherwise) and axis descriptions.
fn mesh<X>(chart: &mut Chart<X>, x_label: &str, y_label: &str, x_fmt: Option<&dyn Fn(&f64) -> String>) -> Res
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut mesh = chart.configure_mesh();
    mesh.bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .axis_style(INK)
        .label_style((FONT, LABEL_SIZE).into_font().color(&INK))
        .axis_desc_style((FONT, DESC_SIZE).into_font().color(&INK))
        .x_desc(text(x_label, usize::MAX))
        .y_desc(text(y_label, usize::MAX))
        .x_label_formatter(x_fmt.unwrap_or(&number))
        .y_label_formatter(&number);
    mesh.draw()?;
    Ok(())
}

/// Each series as one polyline (a dot when it has one point).
fn draw_lines<X: Ranged<ValueType = f64>>(chart: &mut Chart<X>, lines: &[Vec<(f64, f64)>]) -> Res {
    for (i, pts) in lines.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        if pts.len() == 1 {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
        } else {
            chart.draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))?;
        }
    }
    Ok(())
}

/// A frame with the title, the axis descriptions and a "no data" note.
fn no_data(title: &str, x_label: &str, y_label: &str) -> String {
    render((WIDTH, HEIGHT), |root| {
        let (plot, _) = layout(root, title, &[])?;
        let mut chart = builder(&plot, 45).build_cartesian_2d(0.0..1.0, 0.0..1.0)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(0)
            .y_labels(0)
            .axis_style(INK)
            .axis_desc_style((FONT, DESC_SIZE).into_font().color(&INK))
            .x_desc(text(x_label, usize::MAX))
            .y_desc(text(y_label, usize::MAX))
            .draw()?;
        let style = (FONT, TITLE_SIZE).into_font().color(&INK).pos(Pos::new(HPos::Center, VPos::Center));
        chart.plotting_area().draw(&Text::new("no data", (0.5, 0.5), style))?;
        Ok(())
    })
}

/// Step-line corners: each y holds until the next point's x.
fn step_corners(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(pts.len() * 2);
    for (k, &(x, y)) in pts.iter().enumerate() {
        if k > 0 {
            out.push((x, pts[k - 1].1));
        }
        out.push((x, y));
    }
    out
}

/// The smallest and largest of `values` (`None` when empty).
fn bounds(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values.into_iter().fold(None, |b, v| Some(b.map_or((v, v), |(lo, hi): (f64, f64)| (lo.min(v), hi.max(v)))))
}

/// `[lo, hi]` as a range, widened when empty so that it can be drawn.
fn widen((lo, hi): (f64, f64)) -> Range<f64> {
    if hi - lo > 1e-12 * lo.abs().max(hi.abs()) {
        lo..hi
    } else if lo == 0.0 {
        0.0..1.0
    } else {
        let pad = lo.abs() * 0.1;
        lo - pad..hi + pad
    }
}

/// The y axis: from 0 for non-negative data, with a little room above the
/// highest value (and below a negative lowest) so no line hides in the frame.
fn y_range((lo, hi): (f64, f64)) -> Range<f64> {
    let r = widen((lo.min(0.0), hi));
    let pad = (r.end - r.start) * 0.03;
    (if r.start < 0.0 { r.start - pad } else { r.start })..r.end + pad
}

/// The log time axis's ticks (seconds), from the last at or below `lo` to the
/// first at or above `hi`; at least two.
fn log_ticks((lo, hi): (f64, f64)) -> Vec<f64> {
    const TICKS: [f64; 9] = [1.0, 10.0, 60.0, 600.0, 3600.0, 36_000.0, 86_400.0, 864_000.0, 8_640_000.0];
    let first = TICKS.iter().rposition(|&t| t <= lo).unwrap_or(0);
    let last = TICKS.iter().position(|&t| t >= hi).unwrap_or(TICKS.len() - 1).max(first + 1);
    TICKS[first..=last].to_vec()
}

/// A tick label: at most 6 decimals, no trailing zeros, no "-0".
fn number(v: &f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// `s` as a label: control characters (which XML forbids) dropped, line
/// breaks and tabs made spaces, cut to `max` characters with an ellipsis.
/// (plotters escapes `<`, `&` and quotes itself.)
fn text(s: &str, max: usize) -> String {
    let s: String = s
        .chars()
        .filter_map(|c| match c {
            '\t' | '\n' | '\r' => Some(' '),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => None,
            c => Some(c),
        })
        .collect();
    if s.chars().count() <= max {
        s
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('\u{2026}');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(svg: &str) -> roxmltree::Document<'_> {
        let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("bad XML: {e}\n{svg}"));
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        assert_eq!(root.attribute("viewBox"), Some("0 0 900 500"));
        doc
    }

    fn nodes<'a, 'i>(doc: &'a roxmltree::Document<'i>, tag: &'a str) -> impl Iterator<Item = roxmltree::Node<'a, 'i>> + 'a {
        doc.descendants().filter(move |n| n.has_tag_name(tag))
    }

    /// The `<text>` elements' texts, trimmed (plotters ends each with a newline).
    fn texts(doc: &roxmltree::Document) -> Vec<String> {
        nodes(doc, "text").map(|n| n.text().unwrap_or("").trim().to_string()).collect()
    }

    /// The `<text>` element showing `s`.
    fn text_node<'a, 'i>(doc: &'a roxmltree::Document<'i>, s: &str) -> roxmltree::Node<'a, 'i> {
        nodes(doc, "text").find(|n| n.text().unwrap_or("").trim() == s).unwrap_or_else(|| panic!("{s:?} not in {:?}", texts(doc)))
    }

    fn num(n: roxmltree::Node, attr: &str) -> f64 {
        n.attribute(attr).unwrap_or_else(|| panic!("no {attr}")).parse().unwrap()
    }

    fn hex(c: RGBColor) -> String {
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    /// The points of the polylines stroked in `colour`, one `Vec` per polyline.
    fn polylines(doc: &roxmltree::Document, colour: RGBColor) -> Vec<Vec<(f64, f64)>> {
        nodes(doc, "polyline")
            .filter(|n| n.attribute("stroke") == Some(hex(colour).as_str()))
            .map(|n| {
                n.attribute("points")
                    .unwrap()
                    .split_whitespace()
                    .map(|p| {
                        let (x, y) = p.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect()
            })
            .collect()
    }

    /// The `<rect>`s filled with `colour`.
    fn rects<'a, 'i>(doc: &'a roxmltree::Document<'i>, colour: RGBColor) -> Vec<roxmltree::Node<'a, 'i>> {
        nodes(doc, "rect").filter(|n| n.attribute("fill") == Some(hex(colour).as_str())).collect()
    }

    /// An empirical CDF of `n` made-up samples.
    fn cdf(n: usize, scale: f64) -> Vec<(f64, f64)> {
        let mut xs: Vec<f64> = (0..n).map(|i| ((i as f64 * 0.37).sin().abs() + (i as f64 * 1.7).cos().powi(2)) * scale).collect();
        xs.sort_by(f64::total_cmp);
        xs.into_iter().enumerate().map(|(i, x)| (x, (i + 1) as f64 / n as f64)).collect()
    }

    #[test]
    fn line_chart_has_title_labels_one_line_per_series_and_a_legend() {
        let series = [
            Series { name: "FIFO <baseline>", points: cdf(50, 3.0) },
            Series { name: "Tally & friends", points: cdf(80, 5.0) },
            Series { name: "team \"a\" 'b'", points: vec![(0.0, 0.5), (10.0, 0.7)] },
        ];
        let svg = line_chart("Wait <time> & CDF", "wait (h)", "fraction of jobs", &series, false);
        let doc = parse(&svg);
        for t in ["Wait <time> & CDF", "wait (h)", "fraction of jobs", "FIFO <baseline>", "Tally & friends", "team \"a\" 'b'"] {
            text_node(&doc, t);
        }
        assert!(svg.contains("Wait &lt;time&gt; &amp; CDF"));
        // Per series, in palette order: its line with every point, and its legend mark.
        for (i, s) in series.iter().enumerate() {
            let lines = polylines(&doc, PALETTE[i]);
            assert_eq!(lines.len(), 2, "series {i}: {lines:?}");
            assert_eq!(lines[0].len(), s.points.len(), "series {i}");
        }
        let axes = polylines(&doc, INK).len();
        assert_eq!(nodes(&doc, "polyline").count() - axes, 6, "no other line");
        // The legend is right of the plot, clear of every line.
        let right = polylines(&doc, PALETTE[1])[0].iter().map(|p| p.0).fold(0.0, f64::max);
        for t in ["FIFO <baseline>", "Tally & friends"] {
            assert!(num(text_node(&doc, t), "x") > right + 20.0, "{t} at {} over a line ending at {right}", num(text_node(&doc, t), "x"));
        }
        assert!(!texts(&doc).iter().any(|t| t == "no data"));
    }

    #[test]
    fn points_map_onto_the_axes() {
        // y from 0 for non-negative data; x from the first to the last point.
        let svg = line_chart("t", "x", "y", &[Series { name: "s", points: vec![(0.0, 50.0), (10.0, 100.0)] }], false);
        let doc = parse(&svg);
        let line = &polylines(&doc, PALETTE[0])[0];
        let tick = |label: &str| num(text_node(&doc, label), "y");
        // The point at y = 50 sits halfway between the "0" and "100" tick labels.
        let (y0, y100) = (tick("0"), tick("100"));
        assert!((line[0].1 - (y0 + y100) / 2.0).abs() <= 2.0, "{line:?} {y0} {y100}");
        assert!((line[1].1 - y100).abs() <= 2.0, "{line:?} {y100}");
        assert!(line[1].0 - line[0].0 > 500.0, "{line:?}");
        // Negative data: the axis goes below zero.
        let svg = line_chart("t", "x", "y", &[Series { name: "s", points: vec![(0.0, -50.0), (1.0, 60.0)] }], false);
        assert!(texts(&parse(&svg)).iter().any(|t| t.starts_with('-')));
    }

    #[test]
    fn step_lines_add_the_corners() {
        let pts = vec![(0.0, 0.0), (1.0, 0.5), (2.0, 1.0)];
        let line = |step| {
            let svg = line_chart("t", "x", "y", &[Series { name: "s", points: pts.clone() }], step);
            polylines(&parse(&svg), PALETTE[0]).remove(0)
        };
        assert_eq!(line(false).len(), 3);
        let stepped = line(true);
        assert_eq!(stepped.len(), 5);
        // Only horizontal and vertical moves.
        for w in stepped.windows(2) {
            assert!(w[0].0 == w[1].0 || w[0].1 == w[1].1, "{stepped:?}");
        }
    }

    #[test]
    fn log_seconds_axis_has_human_ticks_in_order() {
        let series = [Series { name: "tally", points: vec![(0.0, 10.0), (30.0, 50.0), (7200.0, 90.0), (3.0 * 86_400.0, 100.0)] }];
        let svg = line_chart_log_seconds("Wait", "wait (log scale)", "% of jobs", &series, true);
        let doc = parse(&svg);
        let xs: Vec<f64> = ["1s", "10s", "1m", "10m", "1h", "10h", "1d", "10d"].iter().map(|l| num(text_node(&doc, l), "x")).collect();
        assert!(xs.windows(2).all(|w| w[0] < w[1]), "{xs:?}");
        assert!(!texts(&doc).iter().any(|t| t == "100d"), "the axis stops at the first tick past the data");
        // Log spacing: 1s..10s as wide as 1h..10h; 1m sits log10(6) of a decade after 10s.
        assert!(((xs[1] - xs[0]) - (xs[5] - xs[4])).abs() <= 2.0, "{xs:?}");
        let decade = xs[1] - xs[0];
        assert!((xs[2] - xs[1] - decade * 6f64.log10()).abs() <= 2.0, "{xs:?}");
        // The points land on their ticks: 0 s at 1 s, 2 h between 1h and 10h.
        let line = &polylines(&doc, PALETTE[0])[0];
        assert!((line[0].0 - xs[0]).abs() <= 2.0, "{line:?} {xs:?}");
        let two_hours = xs[4] + decade * 2f64.log10();
        assert!(line.iter().any(|p| (p.0 - two_hours).abs() <= 2.0), "{line:?} {two_hours}");
    }

    #[test]
    fn nan_and_infinite_points_are_skipped() {
        let points = vec![(0.0, 1.0), (f64::NAN, 2.0), (1.0, f64::INFINITY), (2.0, 3.0), (f64::NEG_INFINITY, 0.0), (3.0, 2.0)];
        let svg = line_chart("skip", "x", "y", &[Series { name: "s", points }], false);
        assert_eq!(polylines(&parse(&svg), PALETTE[0])[0].len(), 3);
        let lower = svg.to_lowercase();
        assert!(!lower.contains("nan") && !lower.contains("inf"), "{svg}");

        let cats = ["a".to_string(), "b".to_string(), "c".to_string()];
        let bars = bar_chart("skip", "y", &cats, &[("s", vec![1.0, f64::NAN, f64::INFINITY])], Some((f64::NAN, "ignored")));
        let doc = parse(&bars);
        assert_eq!(rects(&doc, PALETTE[0]).len(), 1 + 1, "one bar and the legend's box");
        assert!(!bars.contains("ignored"));
        let lower = bars.to_lowercase();
        assert!(!lower.contains("nan") && !lower.contains("inf"), "{bars}");
    }

    #[test]
    fn empty_input_gives_a_valid_svg_with_a_note() {
        let all_nan = [Series { name: "x", points: vec![(f64::NAN, 1.0)] }, Series { name: "y", points: vec![] }];
        let cats = ["a".to_string()];
        for svg in [
            line_chart("Empty & <nothing>", "x", "y", &[], true),
            line_chart("Empty", "x", "y", &all_nan, false),
            line_chart_log_seconds("Empty", "w", "%", &[], true),
            bar_chart("Empty", "y", &[], &[], Some((0.95, "95% target"))),
            bar_chart("Empty", "y", &cats, &[("s", vec![])], None),
            bar_chart("Empty", "y", &[], &[("s", vec![1.0, 2.0])], None),
        ] {
            let doc = parse(&svg);
            assert!(texts(&doc).iter().any(|t| t == "no data"), "{svg}");
            assert!(texts(&doc).iter().any(|t| t.starts_with("Empty")), "{svg}");
            assert!(PALETTE.iter().all(|&c| polylines(&doc, c).is_empty() && rects(&doc, c).is_empty()), "{svg}");
        }
    }

    fn teams() -> Vec<String> {
        (0..15).map(|i| format!("team-{i:02} <ml & vision>")).collect()
    }

    fn bar_series() -> Vec<(&'static str, Vec<f64>)> {
        vec![
            ("FIFO", (0..15).map(|i| 50.0 + (i as f64 * 0.7).sin().abs() * 50.0).collect()),
            ("multifactor", (0..15).map(|i| 60.0 + (i as f64 * 1.3).cos().abs() * 40.0).collect()),
            ("Tally", (0..15).map(|i| 90.0 + (i as f64 * 0.2).sin().abs() * 10.0).collect()),
        ]
    }

    #[test]
    fn bar_chart_has_a_bar_per_value_a_legend_reference_and_upright_labels() {
        let svg = bar_chart("Share met", "% of owed", &teams(), &bar_series(), Some((95.0, "95% target")));
        let doc = parse(&svg);
        for t in ["Share met", "% of owed", "FIFO", "multifactor", "Tally", "95% target"] {
            text_node(&doc, t);
        }
        // 15 bars per series and its legend box.
        for (j, &colour) in PALETTE[..3].iter().enumerate() {
            assert_eq!(rects(&doc, colour).len(), 15 + 1, "series {j}");
        }
        // Many categories: every label is drawn, turned upright.
        for team in teams() {
            let label = text_node(&doc, &team);
            assert!(label.attribute("transform").is_some_and(|t| t.starts_with("rotate(270")), "{team}");
        }
        assert!(svg.contains("team-03 &lt;ml &amp; vision&gt;"));
        // The reference line: dashes across the plot at y = 95, in its colour.
        let dashes = polylines(&doc, REFERENCE);
        let y95 = dashes[0][0].1;
        let across: Vec<&(f64, f64)> = dashes.iter().flatten().filter(|p| p.1 == y95).collect();
        assert!(across.len() > 40, "{dashes:?}");
        // They span the x axis (the widest horizontal line in ink).
        let axis = polylines(&doc, INK)
            .into_iter()
            .filter(|l| l.len() == 2 && l[0].1 == l[1].1)
            .max_by(|a, b| (a[1].0 - a[0].0).total_cmp(&(b[1].0 - b[0].0)))
            .unwrap();
        let (left, right) = across.iter().fold((f64::INFINITY, 0.0f64), |(l, r), p| (l.min(p.0), r.max(p.0)));
        assert!((left - axis[0].0).abs() <= 2.0 && (right - axis[1].0).abs() <= 8.0, "{left}..{right}, axis {axis:?}");
        // y = 95 of an axis from 0: 95% of the way from the "0" label to the "100" label.
        let (y0, y100) = (num(text_node(&doc, "0"), "y"), num(text_node(&doc, "100"), "y"));
        assert!((y95 - (y0 + 0.95 * (y100 - y0))).abs() <= 2.0, "{y95} {y0} {y100}");
        // Bars stand on the axis and the tallest (FIFO's 100) rises above the line.
        let bars = rects(&doc, PALETTE[0]);
        let bottom = num(bars[0], "y") + num(bars[0], "height");
        assert!(bars[..15].iter().all(|b| (num(*b, "y") + num(*b, "height") - bottom).abs() <= 1.0));
        assert!(bars[..15].iter().any(|b| num(*b, "y") < y95));
        text_node(&doc, "0");

        // Few short categories: labels lie flat, centred under their group.
        let few = ["a".to_string(), "b".to_string()];
        let svg = bar_chart("t", "y", &few, &[("s", vec![1.0, 2.0])], None);
        let doc = parse(&svg);
        let (a, b) = (text_node(&doc, "a"), text_node(&doc, "b"));
        assert!(a.attribute("transform").is_none());
        let bars = rects(&doc, PALETTE[0]);
        let centre = |r: roxmltree::Node| num(r, "x") + num(r, "width") / 2.0;
        assert!((num(a, "x") - centre(bars[0])).abs() <= 3.0 && (num(b, "x") - centre(bars[1])).abs() <= 3.0);
    }

    #[test]
    fn bar_chart_handles_negative_values_and_short_series() {
        let cats = ["a".to_string(), "b".to_string(), "c".to_string()];
        let svg = bar_chart("t", "y", &cats, &[("s", vec![-1.0, 2.0]), ("u", vec![0.5, 0.5, 0.5, 9.0])], None);
        let doc = parse(&svg);
        // 2 + 3 bars (the 4th value has no category), each with its legend box.
        assert_eq!(rects(&doc, PALETTE[0]).len(), 2 + 1);
        assert_eq!(rects(&doc, PALETTE[1]).len(), 3 + 1);
        assert!(texts(&doc).iter().any(|t| t.starts_with('-')));
        // The negative bar hangs below the positive one's foot.
        let s = rects(&doc, PALETTE[0]);
        assert!(num(s[0], "y") >= num(s[1], "y") + num(s[1], "height") - 1.0);
        // 9.0 has no bar: the axis does not reach it.
        assert!(!texts(&doc).iter().any(|t| t == "9" || t == "8"));
    }

    #[test]
    fn output_is_deterministic() {
        let series = [Series { name: "a", points: cdf(300, 2.0) }, Series { name: "b", points: cdf(200, 9.0) }];
        assert_eq!(line_chart("t", "x", "y", &series, true), line_chart("t", "x", "y", &series, true));
        let waits = [Series { name: "a", points: cdf(300, 5000.0) }];
        assert_eq!(line_chart_log_seconds("t", "x", "y", &waits, true), line_chart_log_seconds("t", "x", "y", &waits, true));
        let (c, s) = (teams(), bar_series());
        assert_eq!(bar_chart("t", "y", &c, &s, Some((95.0, "95%"))), bar_chart("t", "y", &c, &s, Some((95.0, "95%"))));
    }

    #[test]
    fn labels_drop_control_characters_and_long_names_are_cut() {
        assert_eq!(text("x\u{1}y\tz", 10), "xy z");
        assert_eq!(text("abcdef", 4), "abc\u{2026}");
        assert_eq!(text("abc", 4), "abc");
        let long = "a-very-long-policy-name-that-goes-on-and-on";
        let svg = line_chart("bad\u{7}title", "x", "y", &[Series { name: long, points: vec![(0.0, 1.0), (1.0, 2.0)] }], false);
        let doc = parse(&svg);
        text_node(&doc, "badtitle");
        text_node(&doc, &text(long, MAX_LEGEND_CHARS));
    }

    /// Writes sample charts to `$TALLY_PLOT_DIR` to look at (skipped when unset).
    #[test]
    fn write_samples_when_asked() {
        let Some(dir) = std::env::var_os("TALLY_PLOT_DIR") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        let write = |name: &str, svg: String| std::fs::write(dir.join(name), svg).unwrap();
        // (name, samples, scale, x divided by)
        let cdfs = [("FIFO", 1500, 40.0, 60.0), ("multifactor", 700, 10.0, 30.0), ("Tally", 300, 3.0, 20.0)];
        let series: Vec<Series> = cdfs
            .iter()
            .map(|&(name, n, scale, per)| Series { name, points: cdf(n, scale).into_iter().map(|(x, y)| (x / per, y)).collect() })
            .collect();
        write("line.svg", line_chart("Wait time CDF", "wait (h)", "fraction of jobs", &series, true));
        write("bar.svg", bar_chart("Guaranteed share met", "% of owed", &teams(), &bar_series(), Some((95.0, "95% target"))));
        write("empty.svg", line_chart("Nothing", "x", "y", &[], false));
        let many: Vec<Series> = (0..11)
            .map(|i| Series {
                name: ["alpha-team", "b", "vision & speech", "robotics"][i % 4],
                points: (0..200).map(|k| (k as f64 * 0.5 - 20.0, ((k + i * 7) as f64 * 0.05).sin() * 3.0)).collect(),
            })
            .collect();
        write("many.svg", line_chart("Many series, plain lines", "t (min)", "delta", &many, false));
        let cats: Vec<String> = ["ml", "vision", "speech", "robotics"].iter().map(|s| s.to_string()).collect();
        write("few.svg", bar_chart("Few categories", "gain", &cats, &[("Tally vs FIFO", vec![0.3, -0.2, 0.05, 1.2])], Some((1.0, "goal"))));
        let waits: Vec<Series> = cdfs.iter().map(|&(name, n, scale, _)| Series { name, points: cdf(n, scale * 3000.0) }).collect();
        write("waits.svg", line_chart_log_seconds("Wait before start", "wait (log scale)", "% of jobs", &waits, true));
    }

    #[test]
    fn owed_days_draws_a_panel_per_team() {
        use tally_allocator::{Delivery, Owed};
        let day = |o: f64, d: f64| Owed {
            delivery: Delivery { owed_gpu_hours: o, delivered_gpu_hours: d, credited_gpu_hours: o.min(d) },
            unallocated_gpu_hours: 0.0,
        };
        let teams = vec![
            ("nlp".to_string(), std::collections::BTreeMap::from([(20_000, day(10.0, 8.0)), (20_002, day(5.0, 5.0))])),
            ("vision".to_string(), std::collections::BTreeMap::from([(20_001, day(3.0, 4.0))])),
        ];
        let svg = owed_days("t", &teams);
        assert_eq!(svg, owed_days("t", &teams), "deterministic");
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let texts: Vec<String> =
            doc.descendants().filter(|n| n.has_tag_name("text")).filter_map(|n| n.text()).map(|t| t.trim().to_string()).collect();
        assert!(texts.iter().any(|t| t == "nlp (87%)"), "{texts:?}");
        assert!(texts.iter().any(|t| t == "vision (100%)"), "{texts:?}");
        assert!(texts.iter().any(|t| t == "-2d") && texts.iter().any(|t| t == "0d"), "{texts:?}");
        // Five non-zero bars (nlp: 2 days x 2, vision: 1 day x 2 minus none) + 2 legend squares.
        let bars =
            doc.descendants().filter(|n| n.has_tag_name("rect") && n.attribute("fill").is_some_and(|f| f == "#4E79A7" || f == "#F28E2B")).count();
        assert_eq!(bars, 2 + 4 + 2, "{svg}");
        assert!(owed_days("t", &[]).contains("no data"));
    }
}
