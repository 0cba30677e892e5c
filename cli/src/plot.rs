//! The SVG charts of `tally sim --plots` (docs/img): line charts, a log
//! time axis for wait CDFs, grouped bar charts.
//!
//! Written as plain SVG strings: `<text>` elements that the viewer renders,
//! so no font file is read or embedded. (`plotters` could do the same: its
//! SVG backend without the `ttf`/`ab_glyph` features draws captions, axis
//! descriptions and tick labels, estimating text widths without a font;
//! only `ab_glyph` needs a font registered from bytes. These charts stay
//! hand-written because their bytes are pinned: docs/img and the replays'
//! plots are compared byte for byte, and plotters lays out differently.)
//! Every function here is pure and deterministic: the same input gives a
//! byte-identical string. Coordinates are printed with one decimal to keep
//! the files small, and each series stays a single `<polyline>`.

use std::fmt::Write as _;

/// Width of every chart, in px (the `viewBox` too).
pub const WIDTH: f64 = 900.0;
/// Height of every chart, in px (the `viewBox` too).
pub const HEIGHT: f64 = 500.0;

/// Fixed colour palette (Tableau 10, reordered so that neighbours differ);
/// series `i` gets `PALETTE[i % 8]`.
pub const PALETTE: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1", "#76b7b2", "#9c755f", "#edc948",
];

const FONT: f64 = 12.0;
const TITLE_FONT: f64 = 18.0;
const LABEL_FONT: f64 = 13.0;
const GRID: &str = "#e3e3e3";
const INK: &str = "#333333";
const REFERENCE: &str = "#c0392b";
/// Longest legend name, in characters, before it is cut with an ellipsis.
const MAX_LEGEND_CHARS: usize = 40;
/// Longest category label, in characters, before it is cut with an ellipsis.
const MAX_CATEGORY_CHARS: usize = 28;

/// One line of a line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series<'a> {
    /// Name shown in the legend.
    pub name: &'a str,
    /// `(x, y)` points, drawn in the given order; points with a NaN or
    /// infinite coordinate are skipped.
    pub points: Vec<(f64, f64)>,
}

/// A numeric axis: its ticks, the range they span and how to print them.
#[derive(Debug, Clone)]
struct Scale {
    ticks: Vec<f64>,
    decimals: usize,
    /// Labels of the ticks when they are not the numbers (log time axes).
    labels: Option<Vec<String>>,
}

impl Scale {
    /// "Nice" axis ticks (multiples of 1, 2 or 5 x 10^k) covering `[lo, hi]`:
    /// the first tick is <= `lo`, the last >= `hi`, and there are 5 to 8
    /// ticks whenever such a step exists (4 or 9 otherwise). A degenerate or
    /// non-finite range is widened first, so there are always >= 2 ticks.
    fn new(lo: f64, hi: f64) -> Scale {
        let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() {
            (lo.min(hi), lo.max(hi))
        } else {
            (0.0, 1.0)
        };
        if hi - lo <= 1e-12 * lo.abs().max(hi.abs()) {
            if lo == 0.0 {
                hi = 1.0;
            } else {
                let pad = lo.abs() * 0.1;
                lo -= pad;
                hi += pad;
            }
        }
        let range = hi - lo;
        let e0 = range.log10().floor() as i32;
        // (score, waste, exponent, mantissa, first index, last index)
        let mut best: Option<(f64, f64, i32, i64, f64, f64)> = None;
        for e in (e0 - 2..=e0 + 1).rev() {
            for m in [5i64, 2, 1] {
                let step = m as f64 * 10f64.powi(e);
                let i0 = (lo / step + 1e-9).floor();
                let i1 = (hi / step - 1e-9).ceil();
                let count = i1 - i0 + 1.0;
                let score = if count < 5.0 {
                    5.0 - count
                } else if count > 8.0 {
                    count - 8.0
                } else {
                    0.0
                };
                let waste = ((i1 - i0) * step - range) / ((i1 - i0) * step);
                let better = match best {
                    None => true,
                    Some((s, w, ..)) => score < s || (score == s && waste < w - 1e-9),
                };
                if better {
                    best = Some((score, waste, e, m, i0, i1));
                }
            }
        }
        match best {
            Some((_, _, e, m, i0, i1))
                if i1 - i0 < 1000.0 && i0.abs() < 1e15 && i1.abs() < 1e15 =>
            {
                let (i0, i1) = (i0 as i64, i1 as i64);
                let ticks = (i0..=i1)
                    .map(|i| {
                        // Multiply/divide by an exact power of ten so that,
                        // e.g., 3 x 0.1 comes out as 0.3.
                        let v = (i * m) as f64;
                        if e >= 0 {
                            v * 10f64.powi(e)
                        } else {
                            v / 10f64.powi(-e)
                        }
                    })
                    .collect();
                Scale {
                    ticks,
                    decimals: if e < 0 { (-e) as usize } else { 0 },
                    labels: None,
                }
            }
            // Absurd ranges (e.g. 1e300 wide at 1e-300 precision): just the ends.
            _ => Scale {
                ticks: vec![lo, hi],
                decimals: 3,
                labels: None,
            },
        }
    }

    /// A log₁₀ axis over seconds `[lo, hi]` (values below 1 s drawn at 1 s),
    /// ticked at 1 s, 10 s, 1 min, 10 min, 1 h, 10 h, 1 d, 10 d, 100 d.
    fn log_seconds(lo: f64, hi: f64) -> Scale {
        const TICKS: [(f64, &str); 9] = [
            (1.0, "1s"),
            (10.0, "10s"),
            (60.0, "1m"),
            (600.0, "10m"),
            (3600.0, "1h"),
            (36_000.0, "10h"),
            (86_400.0, "1d"),
            (864_000.0, "10d"),
            (8_640_000.0, "100d"),
        ];
        let (lo, hi) = (lo.max(1.0), hi.max(1.0));
        let first = TICKS.iter().rposition(|&(t, _)| t <= lo).unwrap_or(0);
        let last = TICKS.iter().position(|&(t, _)| t >= hi).unwrap_or(TICKS.len() - 1).max(first + 1);
        let ticks = TICKS[first..=last].iter().map(|&(t, _)| t.log10()).collect();
        let labels = TICKS[first..=last].iter().map(|&(_, l)| l.to_string()).collect();
        Scale { ticks, decimals: 0, labels: Some(labels) }
    }

    fn lo(&self) -> f64 {
        self.ticks[0]
    }

    fn hi(&self) -> f64 {
        self.ticks[self.ticks.len() - 1]
    }

    /// Where `v` falls between `a` (at `lo`) and `b` (at `hi`).
    fn map(&self, v: f64, a: f64, b: f64) -> f64 {
        a + (v - self.lo()) / (self.hi() - self.lo()) * (b - a)
    }

    fn label(&self, v: f64) -> String {
        if let Some(i) = self.labels.as_ref().and_then(|_| self.ticks.iter().position(|&t| t == v)) {
            return self.labels.as_ref().map(|l| l[i].clone()).unwrap_or_default();
        }
        let s = format!("{:.*}", self.decimals, v);
        if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
            s[1..].to_string()
        } else {
            s
        }
    }

    fn widest_label(&self) -> f64 {
        self.ticks
            .iter()
            .map(|&t| text_width(&self.label(t), FONT))
            .fold(0.0, f64::max)
    }
}

/// Line chart (several series, legend, axes with ~5-8 "nice" ticks on each
/// axis, grid lines, title, axis labels). `step: bool` draws step lines (for
/// CDFs: each y value holds until the next point's x). Empty or all-empty
/// input still gives a valid SVG with a "no data" note.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    step: bool,
) -> String {
    chart(title, x_label, y_label, series, step, false)
}

/// [`line_chart`] with x in seconds on a log axis (ticks 1 s, 10 s, 1 min,
/// … 100 d): waits that span seconds and days both show. Values below 1 s
/// are drawn at 1 s.
pub fn line_chart_log_seconds(title: &str, x_label: &str, y_label: &str, series: &[Series], step: bool) -> String {
    chart(title, x_label, y_label, series, step, true)
}

fn chart(title: &str, x_label: &str, y_label: &str, series: &[Series], step: bool, log_seconds: bool) -> String {
    let clean: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|(x, y)| if log_seconds { (x.max(1.0).log10(), y) } else { (x, y) })
                .collect()
        })
        .collect();
    let mut doc = Doc::new(title);
    let (xmin, xmax, ymin, ymax) = clean.iter().flatten().fold(
        (
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ),
        |(a, b, c, d), &(x, y)| (a.min(x), b.max(x), c.min(y), d.max(y)),
    );
    if !xmin.is_finite() {
        doc.no_data(x_label, y_label);
        return doc.finish();
    }
    let xs = if log_seconds { Scale::log_seconds(10f64.powf(xmin), 10f64.powf(xmax)) } else { Scale::new(xmin, xmax) };
    let ys = Scale::new(if ymin >= 0.0 { 0.0 } else { ymin }, ymax);

    let left = left_margin(&ys);
    let right = WIDTH - 30.0;
    let legend: Vec<(&str, Mark)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name, Mark::Line(PALETTE[i % PALETTE.len()])))
        .collect();
    let top = doc.legend(&legend, left, right);
    let bottom = HEIGHT - 55.0;

    doc.y_axis(&ys, left, right, top, bottom, y_label);
    for &t in &xs.ticks {
        let x = xs.map(t, left, right);
        doc.line(x, top, x, bottom, GRID, 1.0);
        doc.line(x, bottom, x, bottom + 5.0, INK, 1.0);
        doc.text(x, bottom + 19.0, FONT, "middle", &xs.label(t));
    }
    doc.frame(left, top, right, bottom);
    doc.x_label(left, right, x_label);

    for (i, pts) in clean.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let px = |x: f64| xs.map(x, left, right);
        let py = |y: f64| ys.map(y, bottom, top);
        let mut coords = Coords::default();
        for (k, &(x, y)) in pts.iter().enumerate() {
            if step && k > 0 {
                coords.push(px(x), py(pts[k - 1].1));
            }
            coords.push(px(x), py(y));
        }
        let name = escape(series[i].name);
        match coords.len {
            0 => {}
            1 => {
                let _ = writeln!(
                    doc.out,
                    "<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{colour}\"><title>{name}</title></circle>",
                    num(px(pts[0].0)),
                    num(py(pts[0].1)),
                );
            }
            _ => {
                let _ = writeln!(
                    doc.out,
                    "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" stroke-linejoin=\"round\" \
                     points=\"{}\"><title>{name}</title></polyline>",
                    coords.text
                );
            }
        }
    }
    doc.finish()
}

/// Grouped bar chart: one group per category, one bar per series in each
/// group (legend), optional horizontal reference line (e.g. y = 0.95
/// "95% target") with its label. A series shorter than `categories` has no
/// bar for the missing ones; NaN/infinite values get no bar either. Category
/// labels are rotated when there are many categories or they are long.
pub fn bar_chart(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(&str, Vec<f64>)],
    reference: Option<(f64, &str)>,
) -> String {
    let n = categories.len();
    let values = || {
        series
            .iter()
            .flat_map(|(_, v)| v.iter().take(n).copied())
            .filter(|v| v.is_finite())
    };
    let mut doc = Doc::new(title);
    if values().next().is_none() {
        doc.no_data("", y_label);
        return doc.finish();
    }
    let reference = reference.filter(|(r, _)| r.is_finite());
    let (mut lo, mut hi) = values().fold((0.0f64, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    if let Some((r, _)) = reference {
        lo = lo.min(r);
        hi = hi.max(r);
    }
    let ys = Scale::new(lo, hi);

    let mut left = left_margin(&ys);
    let right = WIDTH - 20.0;
    let labels: Vec<String> = categories
        .iter()
        .map(|c| truncate(c, MAX_CATEGORY_CHARS))
        .collect();
    let widest = labels
        .iter()
        .map(|l| text_width(l, FONT))
        .fold(0.0, f64::max);
    let rotate = n > 8 || widest > (right - left) / n as f64 * 0.95;
    // Labels at -45 degrees reach width x sin(45) down and as far left of
    // their end, which is near the middle of the group: the first one must
    // not leave the picture.
    let slant = widest * std::f64::consts::FRAC_1_SQRT_2;
    if rotate {
        for _ in 0..3 {
            left = left.max(slant - (right - left) / n as f64 / 2.0 + 14.0);
        }
    }
    let bottom = if rotate {
        HEIGHT - (slant + 40.0).clamp(40.0, 180.0)
    } else {
        HEIGHT - 40.0
    };
    let group = (right - left) / n as f64;

    let mut legend: Vec<(&str, Mark)> = series
        .iter()
        .enumerate()
        .map(|(j, (name, _))| (*name, Mark::Box(PALETTE[j % PALETTE.len()])))
        .collect();
    if let Some((_, label)) = reference.filter(|(_, label)| !label.is_empty()) {
        legend.push((label, Mark::Reference));
    }
    let top = doc.legend(&legend, left, right);

    doc.y_axis(&ys, left, right, top, bottom, y_label);
    let zero = ys.map(0.0, bottom, top);
    for (i, label) in labels.iter().enumerate() {
        let cx = left + group * (i as f64 + 0.5);
        doc.line(cx, bottom, cx, bottom + 5.0, INK, 1.0);
        if rotate {
            let y = bottom + 14.0;
            let _ = writeln!(
                doc.out,
                "<text x=\"{x}\" y=\"{y}\" font-size=\"{FONT}\" text-anchor=\"end\" \
                 transform=\"rotate(-45 {x} {y})\">{}</text>",
                escape(label),
                x = num(cx + 4.0),
                y = num(y),
            );
        } else {
            doc.text(cx, bottom + 19.0, FONT, "middle", label);
        }
    }

    let m = series.len().max(1) as f64;
    let bar = group * 0.8 / m;
    let gap = (bar * 0.1).min(1.0);
    for (j, (name, vals)) in series.iter().enumerate() {
        let colour = PALETTE[j % PALETTE.len()];
        for (i, &v) in vals.iter().take(n).enumerate() {
            if !v.is_finite() {
                continue;
            }
            let x = left + group * (i as f64 + 0.1) + bar * j as f64;
            let y = ys.map(v, bottom, top);
            let _ = writeln!(
                doc.out,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{colour}\"><title>{} / {}: {}</title></rect>",
                num(x),
                num(y.min(zero)),
                num(bar - gap),
                num((y - zero).abs()),
                escape(name),
                escape(&categories[i]),
                escape(&format!("{v}")),
            );
        }
    }
    if lo < 0.0 {
        doc.line(left, zero, right, zero, INK, 1.0);
    }
    if let Some((r, _)) = reference {
        let y = ys.map(r, bottom, top);
        let _ = writeln!(
            doc.out,
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{REFERENCE}\" stroke-width=\"1.5\" \
             stroke-dasharray=\"6 4\"/>",
            num(left),
            num(right),
            y = num(y),
        );
    }
    doc.frame(left, top, right, bottom);
    doc.finish()
}

/// How a legend entry is drawn.
#[derive(Debug, Clone, Copy)]
enum Mark {
    /// A line chart's series: a short line of its colour.
    Line(&'static str),
    /// A bar chart's series: a square of its colour.
    Box(&'static str),
    /// The bar chart's reference line: a short dashed line.
    Reference,
}

/// The SVG being written.
#[derive(Debug)]
struct Doc {
    out: String,
}

impl Doc {
    fn new(title: &str) -> Doc {
        let mut out = String::with_capacity(4096);
        let _ = writeln!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
             viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" fill=\"{INK}\">"
        );
        let _ = writeln!(
            out,
            "<rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#ffffff\"/>"
        );
        let mut doc = Doc { out };
        if !title.is_empty() {
            let _ = writeln!(
                doc.out,
                "<text x=\"{}\" y=\"28\" font-size=\"{TITLE_FONT}\" font-weight=\"bold\" text-anchor=\"middle\">{}</text>",
                num(WIDTH / 2.0),
                escape(title)
            );
        }
        doc
    }

    fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }

    fn text(&mut self, x: f64, y: f64, size: f64, anchor: &str, s: &str) {
        let _ = writeln!(
            self.out,
            "<text x=\"{}\" y=\"{}\" font-size=\"{size}\" text-anchor=\"{anchor}\">{}</text>",
            num(x),
            num(y),
            escape(s)
        );
    }

    fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, colour: &str, width: f64) {
        let _ = writeln!(
            self.out,
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{colour}\" stroke-width=\"{width}\"/>",
            num(x1),
            num(y1),
            num(x2),
            num(y2)
        );
    }

    fn frame(&mut self, left: f64, top: f64, right: f64, bottom: f64) {
        let _ = writeln!(
            self.out,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"{INK}\" stroke-width=\"1\"/>",
            num(left),
            num(top),
            num(right - left),
            num(bottom - top)
        );
    }

    /// Vertical label rotated along the left edge.
    fn y_label(&mut self, top: f64, bottom: f64, label: &str) {
        if label.is_empty() {
            return;
        }
        let (x, y) = (18.0, (top + bottom) / 2.0);
        let _ = writeln!(
            self.out,
            "<text x=\"{x}\" y=\"{y}\" font-size=\"{LABEL_FONT}\" text-anchor=\"middle\" \
             transform=\"rotate(-90 {x} {y})\">{}</text>",
            escape(label),
            x = num(x),
            y = num(y),
        );
    }

    /// Horizontal grid lines, tick marks and labels of the y axis, and its label.
    fn y_axis(&mut self, ys: &Scale, left: f64, right: f64, top: f64, bottom: f64, label: &str) {
        for &t in &ys.ticks {
            let y = ys.map(t, bottom, top);
            self.line(left, y, right, y, GRID, 1.0);
            self.line(left - 5.0, y, left, y, INK, 1.0);
            self.text(left - 8.0, y + FONT * 0.35, FONT, "end", &ys.label(t));
        }
        self.y_label(top, bottom, label);
    }

    /// Legend rows centred between `left` and `right` below the title;
    /// returns the top of the plot area below it.
    fn legend(&mut self, entries: &[(&str, Mark)], left: f64, right: f64) -> f64 {
        const ROW: f64 = 18.0;
        const MARK: f64 = 18.0;
        const GAP: f64 = 16.0;
        let items: Vec<(String, f64)> = entries
            .iter()
            .map(|(n, _)| {
                let s = truncate(n, MAX_LEGEND_CHARS);
                let w = MARK + 5.0 + text_width(&s, FONT);
                (s, w)
            })
            .collect();
        let mut rows: Vec<Vec<usize>> = Vec::new();
        let mut width = 0.0;
        for (i, (_, w)) in items.iter().enumerate() {
            match rows.last_mut() {
                Some(row) if width + GAP + w <= right - left => {
                    row.push(i);
                    width += GAP + w;
                }
                _ => {
                    rows.push(vec![i]);
                    width = *w;
                }
            }
        }
        let first = 50.0;
        for (r, row) in rows.iter().enumerate() {
            let total: f64 =
                row.iter().map(|&i| items[i].1).sum::<f64>() + GAP * (row.len() - 1) as f64;
            let mut x = (left + right - total) / 2.0;
            let y = first + ROW * r as f64;
            for &i in row {
                match entries[i].1 {
                    Mark::Line(colour) => {
                        let _ = writeln!(
                            self.out,
                            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{colour}\" stroke-width=\"3\"/>",
                            num(x),
                            num(y - 4.0),
                            num(x + MARK),
                            num(y - 4.0)
                        );
                    }
                    Mark::Box(colour) => {
                        let _ = writeln!(
                            self.out,
                            "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{colour}\"/>",
                            num(x + 3.0),
                            num(y - 10.0)
                        );
                    }
                    Mark::Reference => {
                        let _ = writeln!(
                            self.out,
                            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{REFERENCE}\" stroke-width=\"1.5\" \
                             stroke-dasharray=\"5 3\"/>",
                            num(x),
                            num(y - 4.0),
                            num(x + MARK),
                            num(y - 4.0)
                        );
                    }
                }
                self.text(x + MARK + 5.0, y, FONT, "start", &items[i].0);
                x += items[i].1 + GAP;
            }
        }
        if rows.is_empty() {
            45.0
        } else {
            first + ROW * (rows.len() - 1) as f64 + 16.0
        }
    }

    /// Frame, axis labels and a "no data" note, for input with no finite value.
    fn no_data(&mut self, x_label: &str, y_label: &str) {
        let (left, right, top, bottom) = (70.0, WIDTH - 30.0, 45.0, HEIGHT - 55.0);
        self.frame(left, top, right, bottom);
        self.text(
            (left + right) / 2.0,
            (top + bottom) / 2.0,
            16.0,
            "middle",
            "no data",
        );
        self.x_label(left, right, x_label);
        self.y_label(top, bottom, y_label);
    }

    /// The x axis's label, centred under the plot (none when empty).
    fn x_label(&mut self, left: f64, right: f64, label: &str) {
        if !label.is_empty() {
            self.text((left + right) / 2.0, HEIGHT - 12.0, LABEL_FONT, "middle", label);
        }
    }
}

/// Polyline points, rounded, with repeated points dropped.
#[derive(Debug, Default)]
struct Coords {
    text: String,
    last: String,
    len: usize,
}

impl Coords {
    fn push(&mut self, x: f64, y: f64) {
        let p = format!("{},{}", num(x), num(y));
        if p != self.last {
            if self.len > 0 {
                self.text.push(' ');
            }
            self.text.push_str(&p);
            self.len += 1;
            self.last = p;
        }
    }
}

/// Left margin: room for the rotated y label and the widest tick label.
fn left_margin(ys: &Scale) -> f64 {
    (ys.widest_label() + 44.0).max(60.0)
}

/// A coordinate with one decimal, without a useless ".0" or "-0".
fn num(v: f64) -> String {
    let s = format!("{v:.1}");
    let s = s.strip_suffix(".0").map(str::to_string).unwrap_or(s);
    if s == "-0" {
        "0".to_string()
    } else {
        s
    }
}

/// Rough width of `s` in px at `size` (sans-serif averages ~0.5 em a glyph;
/// a little more, to be safe).
fn text_width(s: &str, size: f64) -> f64 {
    s.chars().count() as f64 * size * 0.56
}

/// `s` cut to `max` characters, the last one an ellipsis when cut.
fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('\u{2026}');
        t
    }
}

/// `s` escaped for XML text and attribute values; control characters, which
/// XML 1.0 forbids, are dropped.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(' '),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(svg: &str) -> roxmltree::Document<'_> {
        let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("bad XML: {e}\n{svg}"));
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        assert_eq!(root.attribute("viewBox"), Some("0 0 900 500"));
        assert_eq!(root.attribute("font-family"), Some("sans-serif"));
        doc
    }

    fn texts(doc: &roxmltree::Document) -> Vec<String> {
        doc.descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or("").to_string())
            .collect()
    }

    /// Every one of `want` is the text of a `<text>` element of `doc`.
    fn assert_texts(doc: &roxmltree::Document, want: &[&str]) {
        let texts = texts(doc);
        for w in want {
            assert!(texts.iter().any(|t| t == w), "{w:?} not in {texts:?}");
        }
    }

    fn count(doc: &roxmltree::Document, tag: &str) -> usize {
        doc.descendants().filter(|n| n.has_tag_name(tag)).count()
    }

    /// An empirical CDF of `n` made-up samples.
    fn cdf(n: usize, scale: f64) -> Vec<(f64, f64)> {
        let mut xs: Vec<f64> = (0..n)
            .map(|i| ((i as f64 * 0.37).sin().abs() + (i as f64 * 1.7).cos().powi(2)) * scale)
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.into_iter()
            .enumerate()
            .map(|(i, x)| (x, (i + 1) as f64 / n as f64))
            .collect()
    }

    fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
        Scale::new(lo, hi).ticks
    }

    #[test]
    fn nice_ticks_table() {
        let table: &[(f64, f64, &[f64])] = &[
            (0.0, 1.0, &[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
            (0.0, 0.95, &[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
            (0.0, 10.0, &[0.0, 2.0, 4.0, 6.0, 8.0, 10.0]),
            (0.0, 100.0, &[0.0, 20.0, 40.0, 60.0, 80.0, 100.0]),
            (0.0, 7.0, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]),
            (-3.0, 3.0, &[-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0]),
            (0.0, 3.5, &[0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]),
            (
                1000.0,
                1500.0,
                &[1000.0, 1100.0, 1200.0, 1300.0, 1400.0, 1500.0],
            ),
            (0.0, 14.9, &[0.0, 5.0, 10.0, 15.0]),
            (0.013, 0.061, &[0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07]),
            (
                0.0,
                86_400.0,
                &[0.0, 20_000.0, 40_000.0, 60_000.0, 80_000.0, 100_000.0],
            ),
            // Degenerate and non-finite ranges are widened.
            (0.0, 0.0, &[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
            (5.0, 5.0, &[4.4, 4.6, 4.8, 5.0, 5.2, 5.4, 5.6]),
            (f64::NAN, 1.0, &[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
            // Reversed bounds.
            (10.0, 0.0, &[0.0, 2.0, 4.0, 6.0, 8.0, 10.0]),
        ];
        for &(lo, hi, want) in table {
            let got = nice_ticks(lo, hi);
            assert_eq!(got.len(), want.len(), "{lo}..{hi}: {got:?}");
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < 1e-9, "{lo}..{hi}: {got:?}");
            }
        }
    }

    #[test]
    fn nice_ticks_cover_the_range_evenly() {
        let mut lo = -1234.5;
        for k in 1..400 {
            let hi = lo + (k as f64 * 0.731).powf(1.7) * 0.013;
            let t = nice_ticks(lo, hi);
            assert!((4..=9).contains(&t.len()), "{lo}..{hi}: {t:?}");
            let step = t[1] - t[0];
            // Float noise below a millionth of a step does not cost an extra tick.
            let slack = step * 1e-6;
            assert!(
                t[0] <= lo + slack && *t.last().unwrap() >= hi - slack,
                "{lo}..{hi}: {t:?}"
            );
            let mantissa = step / 10f64.powf(step.log10().floor());
            assert!(
                [1.0, 2.0, 5.0, 10.0]
                    .iter()
                    .any(|m| (mantissa - m).abs() < 1e-6),
                "{lo}..{hi}: step {step}"
            );
            for w in t.windows(2) {
                assert!(((w[1] - w[0]) - step).abs() < step * 1e-6);
            }
            lo += 7.3;
        }
    }

    #[test]
    fn tick_labels_have_limited_decimals() {
        let s = Scale::new(0.0, 1.0);
        assert_eq!(
            s.ticks.iter().map(|&t| s.label(t)).collect::<Vec<_>>(),
            ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]
        );
        let s = Scale::new(0.0, 1e5);
        assert_eq!(s.label(s.ticks[1]), "20000");
        let s = Scale::new(-0.3, 0.3);
        assert!(s.ticks.iter().all(|&t| !s.label(t).starts_with("-0.0")));
        assert_eq!(num(-0.01), "0");
        assert_eq!(num(12.0), "12");
        assert_eq!(num(12.25), "12.2");
    }

    #[test]
    fn line_chart_is_well_formed_with_title_legend_and_escaped_text() {
        let series = [
            Series {
                name: "FIFO <baseline>",
                points: cdf(50, 3.0),
            },
            Series {
                name: "Tally & friends",
                points: cdf(80, 5.0),
            },
            Series {
                name: "team \"a\" 'b'",
                points: vec![(0.0, 0.5), (10.0, 0.7)],
            },
        ];
        let svg = line_chart(
            "Wait <time> & CDF",
            "wait (h)",
            "fraction of jobs",
            &series,
            true,
        );
        let doc = parse(&svg);
        assert_texts(
            &doc,
            &["Wait <time> & CDF", "FIFO <baseline>", "Tally & friends", "team \"a\" 'b'", "wait (h)", "fraction of jobs"],
        );
        assert!(svg.contains("Wait &lt;time&gt; &amp; CDF"));
        assert!(svg.contains("team &quot;a&quot; &apos;b&apos;"));
        assert_eq!(count(&doc, "polyline"), 3);
        // The legend: one mark per series, in palette order.
        for c in &PALETTE[..3] {
            assert!(svg.matches(c).count() >= 2, "{c}");
        }
        assert!(!svg.contains("no data"));
    }

    #[test]
    fn step_lines_add_the_corners() {
        let pts = vec![(0.0, 0.0), (1.0, 0.5), (2.0, 1.0)];
        let doc_of = |step| {
            line_chart(
                "t",
                "x",
                "y",
                &[Series {
                    name: "s",
                    points: pts.clone(),
                }],
                step,
            )
        };
        let n_points = |svg: &str| {
            let doc = roxmltree::Document::parse(svg).unwrap();
            let pl = doc
                .descendants()
                .find(|n| n.has_tag_name("polyline"))
                .unwrap();
            pl.attribute("points").unwrap().split(' ').count()
        };
        assert_eq!(n_points(&doc_of(false)), 3);
        assert_eq!(n_points(&doc_of(true)), 5);
    }

    #[test]
    fn large_series_stays_one_polyline() {
        let series = [Series {
            name: "big",
            points: cdf(1500, 40.0),
        }];
        for step in [false, true] {
            let svg = line_chart("big", "x", "y", &series, step);
            let doc = parse(&svg);
            assert_eq!(count(&doc, "polyline"), 1);
            assert!(svg.len() < 80_000, "{} bytes", svg.len());
        }
    }

    #[test]
    fn nan_and_infinite_points_are_skipped() {
        let points = vec![
            (0.0, 1.0),
            (f64::NAN, 2.0),
            (1.0, f64::INFINITY),
            (2.0, 3.0),
            (f64::NEG_INFINITY, 0.0),
            (3.0, 2.0),
        ];
        let svg = line_chart("skip", "x", "y", &[Series { name: "s", points }], false);
        let doc = parse(&svg);
        let pl = doc
            .descendants()
            .find(|n| n.has_tag_name("polyline"))
            .unwrap();
        assert_eq!(pl.attribute("points").unwrap().split(' ').count(), 3);
        let lower = svg.to_lowercase();
        assert!(!lower.contains("nan") && !lower.contains("inf"), "{svg}");

        let bars = bar_chart(
            "skip",
            "y",
            &["a".to_string(), "b".to_string(), "c".to_string()],
            &[("s", vec![1.0, f64::NAN, f64::INFINITY])],
            Some((f64::NAN, "ignored")),
        );
        let doc = parse(&bars);
        // The white background plus the frame plus one bar.
        assert_eq!(count(&doc, "rect"), 3 + 1 /* legend box */);
        assert!(!bars.contains("ignored"));
        let lower = bars.to_lowercase();
        assert!(!lower.contains("nan") && !lower.contains("inf"), "{bars}");
    }

    #[test]
    fn y_axis_starts_at_zero_for_non_negative_data() {
        let chart = |points| line_chart("t", "x", "y", &[Series { name: "s", points }], false);
        assert_texts(&parse(&chart(vec![(0.0, 50.0), (1.0, 60.0)])), &["0"]);
        assert!(texts(&parse(&chart(vec![(0.0, -50.0), (1.0, 60.0)]))).iter().any(|t| t == "-60" || t == "-50"));
    }

    #[test]
    fn empty_input_gives_a_valid_svg_with_a_note() {
        let all_nan = [
            Series {
                name: "x",
                points: vec![(f64::NAN, 1.0)],
            },
            Series {
                name: "y",
                points: vec![],
            },
        ];
        let cats = ["a".to_string()];
        for svg in [
            line_chart("Empty & <nothing>", "x", "y", &[], true),
            line_chart("Empty", "x", "y", &all_nan, false),
            bar_chart("Empty", "y", &[], &[], Some((0.95, "95% target"))),
            bar_chart("Empty", "y", &cats, &[("s", vec![])], None),
            bar_chart("Empty", "y", &[], &[("s", vec![1.0, 2.0])], None),
        ] {
            let doc = parse(&svg);
            assert!(texts(&doc).iter().any(|t| t == "no data"), "{svg}");
            assert_eq!(count(&doc, "polyline"), 0);
        }
    }

    fn teams() -> Vec<String> {
        (0..15)
            .map(|i| format!("team-{i:02} <ml & vision>"))
            .collect()
    }

    fn bar_series() -> Vec<(&'static str, Vec<f64>)> {
        vec![
            (
                "FIFO",
                (0..15)
                    .map(|i| 0.5 + (i as f64 * 0.7).sin().abs() * 0.5)
                    .collect(),
            ),
            (
                "multifactor",
                (0..15)
                    .map(|i| 0.6 + (i as f64 * 1.3).cos().abs() * 0.4)
                    .collect(),
            ),
            (
                "Tally",
                (0..15)
                    .map(|i| 0.9 + (i as f64 * 0.2).sin().abs() * 0.1)
                    .collect(),
            ),
        ]
    }

    #[test]
    fn bar_chart_is_well_formed_with_legend_reference_and_rotated_labels() {
        let svg = bar_chart(
            "Share met",
            "fraction",
            &teams(),
            &bar_series(),
            Some((0.95, "95% target")),
        );
        let doc = parse(&svg);
        assert_texts(&doc, &["Share met", "FIFO", "multifactor", "Tally", "95% target", "fraction", "team-14 <ml & vision>"]);
        assert!(svg.contains("team-03 &lt;ml &amp; vision&gt;"));
        assert!(svg.contains("rotate(-45"));
        assert!(svg.contains("stroke-dasharray"));
        // Background, frame, 3 legend boxes and 45 bars.
        assert_eq!(count(&doc, "rect"), 2 + 3 + 45);
        assert_texts(&doc, &["0.0"]); // the y axis starts at 0

        let few = ["a".to_string(), "b".to_string()];
        let svg = bar_chart("t", "y", &few, &[("s", vec![1.0, 2.0])], None);
        assert!(!svg.contains("rotate(-45"));
        parse(&svg);
    }

    #[test]
    fn bar_chart_handles_negative_values_and_short_series() {
        let cats = ["a".to_string(), "b".to_string(), "c".to_string()];
        let svg = bar_chart(
            "t",
            "y",
            &cats,
            &[("s", vec![-1.0, 2.0]), ("u", vec![0.5, 0.5, 0.5, 9.0])],
            None,
        );
        let doc = parse(&svg);
        // Background, frame, 2 legend boxes, 2 + 3 bars (the 4th value has no category).
        assert_eq!(count(&doc, "rect"), 2 + 2 + 5);
        for r in doc.descendants().filter(|n| n.has_tag_name("rect")) {
            let h: f64 = r.attribute("height").unwrap().parse().unwrap();
            assert!(h >= 0.0);
        }
        assert!(texts(&doc).iter().any(|t| t.starts_with('-')));
    }

    #[test]
    fn output_is_deterministic() {
        let series = [
            Series {
                name: "a",
                points: cdf(300, 2.0),
            },
            Series {
                name: "b",
                points: cdf(200, 9.0),
            },
        ];
        assert_eq!(
            line_chart("t", "x", "y", &series, true),
            line_chart("t", "x", "y", &series, true)
        );
        let (c, s) = (teams(), bar_series());
        assert_eq!(
            bar_chart("t", "y", &c, &s, Some((0.95, "95% target"))),
            bar_chart("t", "y", &c, &s, Some((0.95, "95% target")))
        );
    }

    #[test]
    fn escape_covers_xml_specials_and_drops_control_characters() {
        assert_eq!(escape("a&b<c>d\"e'f"), "a&amp;b&lt;c&gt;d&quot;e&apos;f");
        assert_eq!(escape("x\u{1}y\tz"), "xy z");
        assert_eq!(truncate("abcdef", 4), "abc\u{2026}");
        assert_eq!(truncate("abc", 4), "abc");
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
        write("bar.svg", bar_chart("Guaranteed share met", "fraction of hours", &teams(), &bar_series(), Some((0.95, "95% target"))));
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
    }

    #[test]
    fn log_seconds_axis_spans_seconds_to_days() {
        let series = [Series { name: "tally", points: vec![(0.0, 10.0), (30.0, 50.0), (7200.0, 90.0), (3.0 * 86_400.0, 100.0)] }];
        let svg = line_chart_log_seconds("Wait", "wait (log scale)", "% of jobs", &series, true);
        for label in [">1s<", ">1m<", ">1h<", ">1d<", ">10d<"] {
            assert!(svg.contains(label), "{label} missing");
        }
        // 30 s and 2 h are far apart on the page, not both squeezed at 0.
        assert!(svg.contains("<polyline"));
        let empty = line_chart_log_seconds("Wait", "w", "%", &[], true);
        assert!(empty.contains("no data"));
    }
}
