//! `--plot FILE.svg`: latency and bandwidth against message size, one line per
//! implementation (log-log), as an SVG drawn by plotters' pure-Rust SVG backend.

use crate::report::Row;
use plotters::prelude::*;

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

/// Draws the `latency` and `bw` rows (and the pre-posted ping-pong, if present).
pub fn draw(path: &std::path::Path, rows: &[Row]) -> Result<(), String> {
    if path.extension().and_then(|e| e.to_str()) != Some("svg") {
        return Err(
            "only .svg is supported (PNG would need system font libraries); use --plot FILE.svg"
                .into(),
        );
    }
    let root = SVGBackend::new(path, (1200, 500)).into_drawing_area();
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

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn panel(
    area: &Area,
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
