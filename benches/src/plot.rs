//! `--plot FILE.png` (or `FILE.svg`): latency and bandwidth against message size, one
//! line per implementation (log-log), drawn by plotters' pure-Rust backends. PNG text
//! is rendered with ab_glyph from a TrueType font found at run time ([`FONTS`], or
//! `RSMPI_PLOT_FONT=path.ttf`); SVG needs no font.

use crate::report::Row;
use plotters::coord::Shift;
use plotters::prelude::*;

/// Where a sans-serif TrueType font is looked for (Debian's fonts-dejavu-core first).
pub const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers a font for PNG text once per process.
fn register_font() -> Result<(), String> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let paths: Vec<String> = match std::env::var("RSMPI_PLOT_FONT") {
            Ok(p) => vec![p],
            Err(_) => FONTS.iter().map(|s| s.to_string()).collect(),
        };
        let bytes = paths
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .ok_or_else(|| {
                format!(
                    "a PNG plot needs a TrueType font and none was found (looked at {}); \
                 install one (apt-get install fonts-dejavu-core), set RSMPI_PLOT_FONT=path.ttf, \
                 or write an SVG with --plot FILE.svg",
                    paths.join(", ")
                )
            })?;
        // registered fonts live for the whole process
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| "the font file is not a usable TrueType font".to_string())
    })
    .clone()
}

/// One color per implementation; the second series of a panel (pre-posted, bibw)
/// is drawn thinner with point markers.
fn color(implementation: &str) -> RGBColor {
    match implementation {
        "rsmpi" => RED,
        "openmpi-vader" => BLUE,
        "openmpi-ucx" => GREEN,
        "mpich" => MAGENTA,
        _ => BLACK,
    }
}

/// Draws the `latency` and `bw` rows (and the pre-posted ping-pong, if present) to a
/// `.png` or `.svg` file.
pub fn draw(path: &std::path::Path, rows: &[Row]) -> Result<(), String> {
    const SIZE: (u32, u32) = (1200, 500);
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => panels(SVGBackend::new(path, SIZE).into_drawing_area(), rows),
        Some("png") => {
            register_font()?;
            panels(BitMapBackend::new(path, SIZE).into_drawing_area(), rows)
        }
        _ => Err("the plot file must end in .png or .svg".into()),
    }
}

fn panels<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, rows: &[Row]) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (left, right) = root.split_horizontally(600);
    panel(
        &left,
        rows,
        "latency",
        "one-way latency (us)",
        &[("latency", ""), ("pingpong-preposted", "preposted")],
    )?;
    panel(
        &right,
        rows,
        "bandwidth",
        "bandwidth (MB/s)",
        &[("bw", ""), ("bibw", "")],
    )?;
    root.present().map_err(|e| e.to_string())
}

/// One line: its legend, implementation, whether it is a panel's second series, points.
type Line<'a> = (String, &'a str, bool, Vec<(f64, f64)>);

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[Row],
    title: &str,
    ylabel: &str,
    series: &[(&str, &str)],
) -> Result<(), String> {
    // one line per (benchmark, metric, implementation); sizes 0 are left out (log axis)
    let mut lines: Vec<Line> = Vec::new();
    for (i, (bench, metric)) in series.iter().enumerate() {
        let mut impls: Vec<&str> = Vec::new();
        for r in rows
            .iter()
            .filter(|r| r.benchmark == *bench && r.metric == *metric)
        {
            if !impls.contains(&r.implementation.as_str()) {
                impls.push(&r.implementation);
            }
        }
        for imp in impls {
            let mut pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.benchmark == *bench && r.metric == *metric && r.implementation == imp)
                .filter(|r| r.size > 0 && r.value > 0.0)
                .map(|r| (r.size as f64, r.value))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !pts.is_empty() {
                let label = if metric.is_empty() {
                    format!("{imp} {bench}")
                } else {
                    format!("{imp} {metric}")
                };
                lines.push((label, imp, i > 0, pts));
            }
        }
    }
    if lines.is_empty() {
        return Ok(());
    }
    let all = lines.iter().flat_map(|(_, _, _, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, 0f64, f64::MAX, 0f64);
    for &(x, y) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (x0..x1 * 1.01).log_scale(),
            (y0 * 0.9..y1 * 1.1).log_scale(),
        )
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(ylabel)
        .draw()
        .map_err(|e| e.to_string())?;
    for (label, imp, second, pts) in lines {
        let color = color(imp);
        let width = if second { 1 } else { 2 };
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(width)))
            .map_err(|e| e.to_string())?
            .label(label)
            .legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (20, 0)], color.stroke_width(width))
                    + Circle::new((10, 0), if second { 3 } else { 0 }, color.filled())
            });
        if second {
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
                .map_err(|e| e.to_string())?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}
