//! chart.svg: S2 (one hot lock) acquisitions/s and p99 wait against client
//! count, one line per protocol, with the ping floor; S16's chart (the same
//! two panels, one line per system: the module, etcd, ZooKeeper). SVG text is
//! left to the viewer's fonts (plotters without a font backend), so no system
//! font is read.

use std::error::Error;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::throughput::S2Chart;

/// S16's chart data (lock-bench-peers): acquisitions/s and p99 wait per
/// hot-lock client count, per system.
pub struct PeersChart {
    pub counts: Vec<usize>,
    /// (system, acquisitions/s per count, p99 ms per count)
    pub series: Vec<(String, Vec<f64>, Vec<f64>)>,
}

const COLORS: [RGBColor; 4] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
];

fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let v: Vec<f64> = values.filter(|x| x.is_finite() && *x > 0.0).collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    if !lo.is_finite() || hi <= 0.0 {
        return (0.1, 10.0);
    }
    // Whole decades around the data.
    (
        10f64.powf((lo * 0.7).log10().floor()),
        10f64.powf((hi.log10() + 0.05).ceil()),
    )
}

pub fn draw(data: &S2Chart, path: &Path, date: &str) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(62);
    title.draw(&Text::new(
        format!(
            "S2: one hot lock, empty critical section ({date}; medians; redisson = processes of {} threads)",
            data.threads_per_process
        ),
        (20, 14),
        ("sans-serif", 18).into_font(),
    ))?;
    title.draw(&Text::new(
        "p99 over acquisitions; waits still open when a run ends count with their length so far; \
         a spinner that re-takes the lock at once starves the others (see Jain's index in latest.txt)",
        (20, 40),
        ("sans-serif", 12).into_font(),
    ))?;
    let floor = (format!("ping floor ({:.0}/s)", data.ping), data.ping);
    rates_and_p99s(&body, &data.counts, 256, &data.series, Some(floor))?;
    root.present()?;
    Ok(())
}

/// S16: one hot lock, acquisitions/s and p99 wait against client count, one
/// line per system.
pub fn draw_peers(data: &PeersChart, path: &Path, date: &str) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(62);
    title.draw(&Text::new(
        format!("S16: one hot lock, the module vs etcd and ZooKeeper ({date}; medians)"),
        (20, 14),
        ("sans-serif", 18).into_font(),
    ))?;
    title.draw(&Text::new(
        "single node each, same machine, same run; module = no fsync (Redis default), module-always = appendfsync always, \
         etcd and ZooKeeper fsync each commit",
        (20, 40),
        ("sans-serif", 12).into_font(),
    ))?;
    rates_and_p99s(&body, &data.counts, 64, &data.series, None)?;
    root.present()?;
    Ok(())
}

/// The two panels of S2's and S16's charts: acquisitions/s (with an
/// optional floor) and p99 wait against the client count, one line per
/// series of (name, rates, p99s).
fn rates_and_p99s(
    body: &DrawingArea<SVGBackend<'_>, Shift>,
    counts: &[usize],
    default_max: usize,
    series: &[(String, Vec<f64>, Vec<f64>)],
    floor: Option<(String, f64)>,
) -> Result<(), Box<dyn Error>> {
    let (left, right) = body.split_horizontally(600);
    let x_max = counts.iter().copied().max().unwrap_or(default_max) as f64 * 1.3;
    let xs: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
    let rates: Vec<(&str, &[f64])> = series.iter().map(|s| (&*s.0, &*s.1)).collect();
    let p99s: Vec<(&str, &[f64])> = series.iter().map(|s| (&*s.0, &*s.2)).collect();
    panel(
        &left,
        "acquisitions/s (log)",
        (&xs, x_max),
        &rates,
        floor,
        &|y| {
            if *y >= 1000.0 {
                format!("{:.0}k", y / 1000.0)
            } else {
                format!("{y:.0}")
            }
        },
        SeriesLabelPosition::LowerLeft,
    )?;
    panel(
        &right,
        "p99 wait, ms (log)",
        (&xs, x_max),
        &p99s,
        None,
        &|y| {
            if *y >= 1.0 {
                format!("{y:.0}")
            } else {
                format!("{y}")
            }
        },
        SeriesLabelPosition::UpperLeft,
    )?;
    Ok(())
}

/// One panel on log axes: a line with point marks per protocol, an
/// optional horizontal floor, and the legend.
fn panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    caption: &str,
    (xs, x_max): (&[f64], f64),
    series: &[(&str, &[f64])],
    floor: Option<(String, f64)>,
    y_label: &dyn Fn(&f64) -> String,
    legend: SeriesLabelPosition,
) -> Result<(), Box<dyn Error>> {
    let (lo, hi) = range(
        series
            .iter()
            .flat_map(|s| s.1.iter().copied())
            .chain(floor.as_ref().map(|f| f.1)),
    );
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (0.8f64..x_max).log_scale().with_key_points(xs.to_vec()),
            (lo..hi).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("clients")
        .x_labels(10)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(y_label)
        .draw()?;
    if let Some((label, y)) = floor {
        chart
            .draw_series(LineSeries::new(
                [(0.8, y), (x_max, y)],
                ShapeStyle::from(&BLACK).stroke_width(1),
            ))?
            .label(label)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK));
    }
    for (i, &(name, values)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts = points(xs, values);
        chart
            .draw_series(LineSeries::new(
                pts.clone(),
                ShapeStyle::from(&color).stroke_width(2),
            ))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// The (clients, value) points worth drawing on log axes.
fn points(xs: &[f64], values: &[f64]) -> Vec<(f64, f64)> {
    xs.iter()
        .zip(values)
        .filter(|(_, v)| v.is_finite() && **v > 0.0)
        .map(|(x, v)| (*x, *v))
        .collect()
}
