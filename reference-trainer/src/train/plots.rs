//! Line charts of training curves (loss, reward, learning rate … against step) drawn to PNG
//! files with `plotters`, using the DejaVu Sans font embedded in the binary so no system font
//! is needed. A PNG is written to a temporary file next to its destination and renamed into
//! place, so a reader never sees a half-written image.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use plotters::coord::ranged1d::Ranged;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

/// One line of a chart.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// The name shown in the legend; an empty name leaves the line out of the legend.
    pub name: String,
    /// `(x, y)` points, joined in the order given; points with a NaN or infinite coordinate are
    /// skipped.
    pub points: Vec<(f64, f64)>,
    /// Draw each point as a marker and do not join them (sparse measurements, such as held-out
    /// evaluations every K iterations, which a line would wrongly interpolate).
    pub markers: bool,
}

impl Series {
    /// A series named `name` through `points`.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            markers: false,
        }
    }

    /// A series of unjoined markers.
    pub fn markers(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            markers: true,
            ..Self::new(name, points)
        }
    }
}

/// A chart: title, axis labels, lines.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chart {
    /// Caption drawn above the plot.
    pub title: String,
    /// Label of the horizontal axis.
    pub x_label: String,
    /// Label of the vertical axis.
    pub y_label: String,
    /// The lines, coloured in order from a fixed palette.
    pub series: Vec<Series>,
}

impl Chart {
    /// A chart with no series yet.
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
    ) -> Self {
        Self {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            series: Vec::new(),
        }
    }
}

/// Why a chart could not be drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Creating, syncing or renaming a file failed.
    #[error("plot {}: {source}", path.display())]
    Io {
        /// The PNG that was asked for.
        path: PathBuf,
        /// The underlying failure.
        source: io::Error,
    },
    /// `plotters` failed to draw or encode the PNG.
    #[error("plot {}: drawing failed: {message}", path.display())]
    Draw {
        /// The PNG that was asked for.
        path: PathBuf,
        /// `plotters`' description of the failure.
        message: String,
    },
    /// `plotters` failed to draw into an in-memory buffer ([`draw_rgb`]).
    #[error("plot: drawing into a buffer failed: {message}")]
    Render {
        /// `plotters`' description of the failure.
        message: String,
    },
    /// The chart has no point with finite coordinates, so there is nothing to scale axes to.
    #[error("chart {title:?} has no finite point to draw")]
    Empty {
        /// The chart's title.
        title: String,
    },
    /// The data spans a range too wide to represent in `f64` (values near ±1.8e308).
    #[error("chart {title:?}: the {axis} values span a range too wide to draw")]
    Range {
        /// The chart's title.
        title: String,
        /// `"x"` or `"y"`.
        axis: &'static str,
    },
    /// The image size is outside [`MIN_SIDE`]`..=`[`MAX_SIDE`] pixels per side.
    #[error("plot size {width}x{height} is outside {MIN_SIDE}..={MAX_SIDE} pixels per side")]
    Size {
        /// Requested width.
        width: u32,
        /// Requested height.
        height: u32,
    },
    /// The embedded font could not be registered with `plotters`.
    #[error("plot: cannot register the embedded font: {message}")]
    Font {
        /// What went wrong.
        message: String,
    },
}

/// Smallest accepted width or height: below this the caption, tick labels and legend leave no
/// room for the plot itself.
pub const MIN_SIDE: u32 = 64;
/// Largest accepted width or height: bounds the buffer (`MAX_SIDE² × 3` bytes, 192 MiB) so a
/// typo cannot exhaust memory.
pub const MAX_SIDE: u32 = 8192;

/// Matplotlib's "tab10": distinct hues, none of them grey-on-white like the mesh, text and
/// antialiasing, so a series' pixels can be recognised by colour.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The colour of the `index`-th series (the palette repeats after ten).
pub fn series_color(index: usize) -> (u8, u8, u8) {
    let RGBColor(r, g, b) = PALETTE[index % PALETTE.len()];
    (r, g, b)
}

/// Font family every text element asks for; [`ensure_font`] registers DejaVu Sans under it.
const FONT: &str = "sans-serif";

/// Maximum number of tick labels per axis.
const TICKS: usize = 8;

/// Draws `chart` to a PNG of `width`×`height` pixels at `path`, written to a temp file in the same
/// folder and renamed into place (a crash never leaves a half-written PNG).
pub fn write_png(path: &Path, chart: &Chart, width: u32, height: u32) -> Result<(), PlotError> {
    let layout = Layout::new(chart, width, height)?;
    let (tmp, file) = create_temp(path)?;
    // plotters writes the file itself (by path); ours was only opened to claim a unique name.
    drop(file);
    let result = render_file(&tmp, chart, &layout, path).and_then(|()| {
        // Without the fsync a power cut after the rename could leave an empty file in place.
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .and_then(|()| fs::rename(&tmp, path))
            .map_err(|source| PlotError::Io {
                path: path.to_path_buf(),
                source,
            })
    });
    if result.is_err() {
        // Best effort: the original error is the one worth reporting.
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// The same drawing into an RGB buffer (width*height*3 bytes) — for tests and for callers that encode themselves.
pub fn draw_rgb(chart: &Chart, width: u32, height: u32) -> Result<Vec<u8>, PlotError> {
    let layout = Layout::new(chart, width, height)?;
    // Layout::new bounded both sides by MAX_SIDE, so this cannot overflow.
    let mut buf = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (width, height)).into_drawing_area();
        draw(&root, chart, &layout).map_err(|message| PlotError::Render { message })?;
    }
    Ok(buf)
}

/// Everything worked out from the chart before any drawing starts, so that bad input fails
/// without touching the file system.
struct Layout {
    width: u32,
    height: u32,
    x: Range<f64>,
    y: Range<f64>,
    /// Each series' finite points, index-aligned with `chart.series`.
    points: Vec<Vec<(f64, f64)>>,
    /// Text sizes scale with the image so small and large PNGs look alike.
    scale: f64,
}

impl Layout {
    fn new(chart: &Chart, width: u32, height: u32) -> Result<Self, PlotError> {
        let side = MIN_SIDE..=MAX_SIDE;
        if !side.contains(&width) || !side.contains(&height) {
            return Err(PlotError::Size { width, height });
        }
        ensure_font()?;
        let points: Vec<Vec<(f64, f64)>> = chart
            .series
            .iter()
            .map(|s| {
                s.points
                    .iter()
                    .copied()
                    .filter(|(x, y)| x.is_finite() && y.is_finite())
                    .collect()
            })
            .collect();
        let all = || points.iter().flatten();
        let x = axis_range(all().map(|p| p.0)).ok_or_else(|| PlotError::Empty {
            title: chart.title.clone(),
        })?;
        let y = axis_range(all().map(|p| p.1)).ok_or_else(|| PlotError::Empty {
            title: chart.title.clone(),
        })?;
        let x = pad(x).ok_or_else(|| PlotError::Range {
            title: chart.title.clone(),
            axis: "x",
        })?;
        let y = pad(y).ok_or_else(|| PlotError::Range {
            title: chart.title.clone(),
            axis: "y",
        })?;
        let scale = (f64::from(width.min(height)) / 480.0).clamp(0.4, 4.0);
        Ok(Self {
            width,
            height,
            x,
            y,
            points,
            scale,
        })
    }

    fn font_px(&self, base: f64) -> f64 {
        (base * self.scale).max(6.0)
    }

    fn px(&self, base: f64) -> u32 {
        (base * self.scale).round().max(1.0) as u32
    }
}

/// Smallest and largest of `values`, or `None` when there are none.
fn axis_range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// Widens `(lo, hi)` by 5 % on each side, and gives a flat range ±5 % of its value (±0.5 around
/// zero), because plotters maps every point of a zero-width range to the middle and computes no
/// ticks for it. `None` when the width does not fit in an `f64`: plotters' tick search loops
/// forever on an infinite width.
fn pad((lo, hi): (f64, f64)) -> Option<Range<f64>> {
    let magnitude = lo.abs().max(hi.abs());
    // A spread below 1e-9 of the values is under f64's resolution for tick arithmetic: treat it
    // as flat. Values below 1e-100 count as zero for the flat case, where 5 % of them would be a
    // width of subnormals.
    let floor = if magnitude > 1e-100 {
        magnitude * 1e-9
    } else {
        0.0
    };
    let (lo, hi) = if hi - lo > floor {
        let margin = (hi - lo) * 0.05;
        (lo - margin, hi + margin)
    } else {
        let mid = lo / 2.0 + hi / 2.0;
        let half = if magnitude > 1e-100 {
            mid.abs() * 0.05
        } else {
            0.5
        };
        (mid - half, mid + half)
    };
    (lo.is_finite() && hi.is_finite() && (hi - lo).is_finite()).then_some(lo..hi)
}

/// A tick-label formatter for an axis spanning `range`: fixed notation with just enough decimals
/// to tell neighbouring ticks apart, scientific for very large or small magnitudes. plotters'
/// own formatter never uses scientific notation, so 1e300 would print as 301 digits.
fn tick_formatter(range: &Range<f64>) -> impl Fn(&f64) -> String {
    // Ticks are 1, 2 or 5 × 10^k apart and at most TICKS of them, so no closer than this.
    let step = (range.end - range.start) / (2.5 * TICKS as f64);
    let magnitude = range.start.abs().max(range.end.abs());
    let step_exp = step.log10().floor();
    let scientific = !(1e-3..1e6).contains(&magnitude);
    let digits = if scientific {
        (magnitude.log10().floor() - step_exp).clamp(0.0, 15.0) as usize
    } else {
        (-step_exp).clamp(0.0, 15.0) as usize
    };
    move |&v: &f64| {
        // Tick arithmetic leaves residues like 1e-17 where zero is meant.
        if v.abs() <= step * 1e-6 {
            return "0".to_string();
        }
        if scientific {
            let s = format!("{v:.digits$e}");
            match s.split_once('e') {
                Some((mantissa, exp)) => format!("{}e{exp}", trim_zeros(mantissa)),
                None => s,
            }
        } else {
            trim_zeros(&format!("{v:.digits$}")).to_string()
        }
    }
}

/// `"1.500"` → `"1.5"`, `"2.000"` → `"2"`; strings without a decimal point are left alone.
fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// Registers DejaVu Sans once per process: with the `ab_glyph` feature plotters has no fonts of
/// its own, and every text element fails with "FontUnavailable" until one is registered.
fn ensure_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
                .map_err(|_| "DejaVu Sans was rejected by ab_glyph".to_string())
        })
        .clone()
        .map_err(|message| PlotError::Font { message })
}

/// Claims a fresh `.{name}.{pid}.{n}.tmp.png` next to `path`. The name must end in `.png`
/// because plotters picks the encoder from the extension; `create_new` guarantees that two
/// writers never share a temp file.
fn create_temp(path: &Path) -> Result<(PathBuf, File), PlotError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let io_err = |source| PlotError::Io {
        path: path.to_path_buf(),
        source,
    };
    let name = path.file_name().ok_or_else(|| {
        io_err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path names no file",
        ))
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // Each try takes a new number, so only a folder full of stale temp files exhausts these.
    for _ in 0..1000 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{}.{n}.tmp.png", std::process::id()));
        let tmp = dir.join(tmp_name);
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            // Left by a crashed run with a recycled pid: take the next number.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(e)),
        }
    }
    Err(io_err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free temporary file name next to it",
    )))
}

/// Draws to the PNG file `tmp` and encodes it. All plotters objects are dropped on return —
/// before the caller removes `tmp` on error — because the backend re-saves the image when dropped
/// unsaved.
fn render_file(tmp: &Path, chart: &Chart, layout: &Layout, path: &Path) -> Result<(), PlotError> {
    let draw_err = |message| PlotError::Draw {
        path: path.to_path_buf(),
        message,
    };
    let root = BitMapBackend::new(tmp, (layout.width, layout.height)).into_drawing_area();
    draw(&root, chart, layout).map_err(draw_err)?;
    root.present().map_err(|e| draw_err(e.to_string()))
}

/// The drawing itself, shared by the file and buffer back ends. Errors are plotters' messages.
fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart,
    layout: &Layout,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;

    let label_font = (FONT, layout.font_px(13.0)).into_font();
    let desc_font = (FONT, layout.font_px(15.0)).into_font();
    let fmt_x = tick_formatter(&layout.x);
    let fmt_y = tick_formatter(&layout.y);

    // plotters sizes label areas by a fixed number of pixels, not by their text: measure the
    // widest y tick label so that long ones ("-1.25e-5") are not clipped.
    let y_ticks = RangedCoordf64::from(layout.y.clone()).key_points(TICKS);
    let mut y_label_width = 0;
    for tick in &y_ticks {
        let (w, _) = root
            .estimate_text_size(&fmt_y(tick), &label_font.clone().into())
            .map_err(err)?;
        y_label_width = y_label_width.max(w);
    }
    let (_, desc_h) = root
        .estimate_text_size("Xg", &desc_font.clone().into())
        .map_err(err)?;
    let (_, label_h) = root
        .estimate_text_size("0", &label_font.clone().into())
        .map_err(err)?;

    let mut ctx = ChartBuilder::on(root)
        .caption(&chart.title, (FONT, layout.font_px(20.0)))
        .margin(layout.px(12.0))
        // Tick marks and label offsets are fixed pixel sizes in plotters, hence the unscaled 16.
        .x_label_area_size(label_h + desc_h + 16 + layout.px(8.0))
        .y_label_area_size(y_label_width + desc_h + 16 + layout.px(8.0))
        .build_cartesian_2d(layout.x.clone(), layout.y.clone())
        .map_err(err)?;

    ctx.configure_mesh()
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .x_labels(TICKS)
        .y_labels(TICKS)
        .x_label_formatter(&fmt_x)
        .y_label_formatter(&fmt_y)
        .label_style(label_font.clone())
        .axis_desc_style(desc_font.clone())
        .light_line_style(BLACK.mix(0.05))
        .bold_line_style(BLACK.mix(0.15))
        .draw()
        .map_err(err)?;

    let stroke = layout.px(2.0).max(2);
    let mut any_named = false;
    for (i, (series, points)) in chart.series.iter().zip(&layout.points).enumerate() {
        if points.is_empty() {
            continue;
        }
        let color = PALETTE[i % PALETTE.len()];
        // Width ≥ 2 makes plotters fill the line as a polygon in the exact colour; 1-px lines
        // are antialiased and their colour only approximated.
        let style = color.stroke_width(stroke);
        let radius = layout.px(4.0).max(2);
        let drawn = if series.markers {
            ctx.draw_series(
                points
                    .iter()
                    .map(|&p| Circle::new(p, radius, color.filled())),
            )
            .map_err(err)?
        } else if points.len() == 1 {
            // A one-point path draws nothing, so mark the point.
            ctx.draw_series(std::iter::once(Circle::new(
                points[0],
                layout.px(4.0).max(2),
                color.filled(),
            )))
            .map_err(err)?
        } else {
            ctx.draw_series(LineSeries::new(points.iter().copied(), style))
                .map_err(err)?
        };
        if !series.name.is_empty() {
            any_named = true;
            let len = layout.px(20.0) as i32;
            if series.markers {
                drawn
                    .label(series.name.as_str())
                    .legend(move |(x, y)| Circle::new((x + len / 2, y), radius, color.filled()));
            } else {
                drawn
                    .label(series.name.as_str())
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + len, y)], style));
            }
        }
    }

    if any_named {
        let named = chart.series.iter().zip(&layout.points);
        let named = named
            .filter(|(s, p)| !s.name.is_empty() && !p.is_empty())
            .count();
        ctx.configure_series_labels()
            .position(legend_corner(layout, named))
            .label_font(label_font)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

/// The plot corner where the legend hides the least data: plotters has no "best" position, so
/// count the points (and samples along the segments between them) that would fall under a
/// legend-sized box in each corner. Ties go to the upper right.
fn legend_corner(layout: &Layout, entries: usize) -> SeriesLabelPosition {
    // Fractions of the plot area a legend of `entries` lines roughly covers.
    let box_w = 0.4;
    let box_h = (0.06 + 0.07 * entries as f64).min(0.9);
    let (x0, xw) = (layout.x.start, layout.x.end - layout.x.start);
    let (y0, yw) = (layout.y.start, layout.y.end - layout.y.start);
    let corners = [
        (SeriesLabelPosition::UpperRight, true, true),
        (SeriesLabelPosition::UpperLeft, false, true),
        (SeriesLabelPosition::LowerRight, true, false),
        (SeriesLabelPosition::LowerLeft, false, false),
    ];
    let mut hits = [0usize; 4];
    let mut count = |(x, y): (f64, f64)| {
        let (u, v) = ((x - x0) / xw, (y - y0) / yw);
        for (hit, &(_, right, upper)) in hits.iter_mut().zip(&corners) {
            let in_x = if right { u >= 1.0 - box_w } else { u <= box_w };
            let in_y = if upper { v >= 1.0 - box_h } else { v <= box_h };
            if in_x && in_y {
                *hit += 1;
            }
        }
    };
    const SAMPLES: usize = 8;
    for points in &layout.points {
        for (i, &p) in points.iter().enumerate() {
            count(p);
            if let Some(&q) = points.get(i + 1) {
                for k in 1..SAMPLES {
                    let t = k as f64 / SAMPLES as f64;
                    count((p.0 + (q.0 - p.0) * t, p.1 + (q.1 - p.1) * t));
                }
            }
        }
    }
    let best = (0..corners.len()).min_by_key(|&i| hits[i]).unwrap_or(0);
    corners[best].0.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u32 = 640;
    const H: u32 = 480;

    fn ramp(name: &str, slope: f64) -> Series {
        Series::new(
            name,
            (0..50).map(|i| (i as f64, slope * i as f64)).collect(),
        )
    }

    fn two_series() -> Chart {
        let mut chart = Chart::new("loss", "step", "value");
        chart.series.push(ramp("up", 1.0));
        chart.series.push(ramp("down", -0.5));
        chart
    }

    fn count_color(buf: &[u8], (r, g, b): (u8, u8, u8)) -> usize {
        buf.chunks_exact(3).filter(|p| p == &[r, g, b]).count()
    }

    #[test]
    fn two_series_draw_on_white_in_their_palette_colours() {
        let buf = draw_rgb(&two_series(), W, H).unwrap();
        assert_eq!(buf.len(), (W * H * 3) as usize);
        let white = count_color(&buf, (255, 255, 255));
        assert!(white > buf.len() / 3 / 2, "only {white} white pixels");
        // A legend sample alone is ~40 pixels; a line across the plot is far more.
        for i in 0..2 {
            let n = count_color(&buf, series_color(i));
            assert!(n > 400, "series {i}: {n} pixels of its colour");
        }
        assert_eq!(count_color(&buf, series_color(2)), 0, "no third series");
    }

    #[test]
    fn flat_and_single_point_series_still_draw() {
        let mut flat = Chart::new("flat", "step", "lr");
        flat.series
            .push(Series::new("lr", vec![(0.0, 3e-4), (10.0, 3e-4)]));
        let buf = draw_rgb(&flat, W, H).unwrap();
        assert!(count_color(&buf, series_color(0)) > 400);

        let mut zero = Chart::new("zero", "step", "y");
        zero.series
            .push(Series::new("z", vec![(5.0, 0.0), (5.0, 0.0)]));
        draw_rgb(&zero, W, H).unwrap();

        let mut single = Chart::new("one", "step", "y");
        // Unnamed, so no legend sample shares the colour: what is counted is the marker.
        single.series.push(Series::new("", vec![(7.0, -2.0)]));
        let buf = draw_rgb(&single, W, H).unwrap();
        assert!(count_color(&buf, series_color(0)) > 30);
    }

    #[test]
    fn non_finite_points_are_skipped() {
        let clean = two_series();
        let mut dirty = clean.clone();
        let bad = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
        for (i, v) in bad.into_iter().enumerate() {
            dirty.series[0].points.insert(3 * i, (v, 1.0));
            dirty.series[1].points.push((2.0, v));
        }
        // An empty series takes a palette slot but draws nothing.
        dirty.series.push(Series::new("nothing yet", vec![]));
        let mut clean_too = clean.clone();
        clean_too.series.push(Series::new("nothing yet", vec![]));
        assert_eq!(
            draw_rgb(&dirty, W, H).unwrap(),
            draw_rgb(&clean_too, W, H).unwrap()
        );
    }

    #[test]
    fn no_finite_point_is_empty() {
        let mut chart = Chart::new("nan", "step", "loss");
        chart.series.push(Series::new(
            "loss",
            vec![(0.0, f64::NAN), (f64::INFINITY, 1.0)],
        ));
        chart.series.push(Series::new("none", vec![]));
        match draw_rgb(&chart, W, H) {
            Err(PlotError::Empty { title }) => assert_eq!(title, "nan"),
            other => panic!("expected Empty, got {other:?}"),
        }
        let no_series = Chart::new("blank", "x", "y");
        assert!(matches!(
            draw_rgb(&no_series, W, H),
            Err(PlotError::Empty { .. })
        ));
    }

    #[test]
    fn sizes_outside_the_limits_are_refused() {
        for (w, h) in [
            (0, 0),
            (MIN_SIDE - 1, H),
            (W, MAX_SIDE + 1),
            (u32::MAX, u32::MAX),
        ] {
            match draw_rgb(&two_series(), w, h) {
                Err(PlotError::Size { width, height }) => assert_eq!((width, height), (w, h)),
                other => panic!("{w}x{h}: expected Size, got {other:?}"),
            }
        }
        assert_eq!(
            draw_rgb(&two_series(), MIN_SIDE, MIN_SIDE).unwrap().len(),
            (MIN_SIDE * MIN_SIDE * 3) as usize
        );
    }

    #[test]
    fn extreme_values_draw_or_fail_cleanly() {
        let mut chart = Chart::new("extreme", "x", "y");
        chart.series.push(Series::new(
            "big",
            vec![(0.0, 1e300), (1.0, -1e300), (2.0, 1e-310), (3.0, 5e-324)],
        ));
        draw_rgb(&chart, W, H).unwrap();
        chart
            .series
            .push(Series::new("huge", vec![(f64::MAX, f64::MIN)]));
        assert!(matches!(
            draw_rgb(&chart, W, H),
            Err(PlotError::Range { axis: "x", .. })
        ));
    }

    #[test]
    fn write_png_writes_a_png_of_the_requested_size_and_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loss.png");
        for (w, h) in [(333, 222), (400, 300)] {
            // The second round replaces the first file in place.
            write_png(&path, &two_series(), w, h).unwrap();
            let bytes = fs::read(&path).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
            assert_eq!(&bytes[12..16], b"IHDR");
            let be = |r: Range<usize>| u32::from_be_bytes(bytes[r].try_into().unwrap());
            assert_eq!((be(16..20), be(20..24)), (w, h));
            let names: Vec<_> = fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, vec![OsString::from("loss.png")]);
        }
    }

    #[test]
    fn write_png_into_a_missing_folder_is_an_io_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("loss.png");
        let err = write_png(&path, &two_series(), W, H).unwrap_err();
        match &err {
            PlotError::Io { path: p, source } => {
                assert_eq!(p, &path);
                assert_eq!(source.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("expected Io, got {other:?}"),
        }
        assert!(err.to_string().contains(&path.display().to_string()));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn write_png_of_bad_input_touches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.png");
        let nan = Chart {
            series: vec![Series::new("nan", vec![(f64::NAN, f64::NAN)])],
            ..Chart::default()
        };
        assert!(matches!(
            write_png(&path, &nan, W, H),
            Err(PlotError::Empty { .. })
        ));
        assert!(matches!(
            write_png(&path, &two_series(), 1, 1),
            Err(PlotError::Size { .. })
        ));
        // The target is a folder: the rename fails and the temp file is cleaned up.
        fs::create_dir(&path).unwrap();
        assert!(matches!(
            write_png(&path, &two_series(), W, H),
            Err(PlotError::Io { .. })
        ));
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![OsString::from("x.png")]);
    }

    #[test]
    fn flat_ranges_get_a_width_and_overflowing_ones_are_refused() {
        assert_eq!(pad((0.0, 0.0)), Some(-0.5..0.5));
        let r = pad((200.0, 200.0)).unwrap();
        assert!(r.start < 200.0 && r.end > 200.0, "{r:?}");
        let r = pad((0.0, 10.0)).unwrap();
        assert!(
            (r.start + 0.5).abs() < 1e-12 && (r.end - 10.5).abs() < 1e-12,
            "{r:?}"
        );
        assert_eq!(pad((f64::MIN, f64::MAX)), None);
    }

    #[test]
    fn tick_labels_are_short() {
        let f = tick_formatter(&(0.0..1.0));
        assert_eq!(
            [0.0, 0.1 + 0.2, 0.5, 1e-17].map(|v| f(&v)),
            ["0", "0.3", "0.5", "0"]
        );
        let f = tick_formatter(&(-1e-5..1e-5));
        assert_eq!(
            [-1e-5, 2.5e-6, 0.0].map(|v| f(&v)),
            ["-1e-5", "2.5e-6", "0"]
        );
        let f = tick_formatter(&(0.0..3e7));
        assert_eq!(f(&2.5e7), "2.5e7");
        let f = tick_formatter(&(0.0..1000.0));
        assert_eq!(f(&250.0), "250");
    }

    #[test]
    fn the_legend_avoids_the_data() {
        let mut chart = Chart::new("rising", "step", "y");
        // Dense in the upper right, empty in the upper left.
        chart.series.push(Series::new(
            "y",
            (0..100)
                .map(|i| (i as f64, (i as f64 / 10.0).powi(4)))
                .collect(),
        ));
        let layout = Layout::new(&chart, W, H).unwrap();
        assert!(matches!(
            legend_corner(&layout, 1),
            SeriesLabelPosition::UpperLeft
        ));
    }
}
