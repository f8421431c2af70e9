//! The figures of a result set. Per collective: latency, busbw and % of the
//! α-β bound vs size as small multiples, one panel per (topology, SIP
//! count) slice; and busbw vs SIP count at the largest size, one panel per
//! topology. Series are keyed by every other axis the plan varies, so no
//! two configurations share a line. Drawing is `figure.rs`.

use super::figure::{Figure, Line, Panel, XKind, render};
use super::results::{PointFile, Row};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub(crate) type Series = Vec<(String, Vec<(f64, f64)>)>;

pub(crate) use super::figure::human;

/// One line chart of named series (GEMM and TP figures): x on a log2 axis
/// labelled as sizes, y on a log10 axis with `log_y`.
pub(crate) fn chart(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    log_y: bool,
    series: &Series,
) -> Result<(), String> {
    let (dir, file) = (
        path.parent().unwrap_or(Path::new(".")),
        path.file_name()
            .map_or(String::new(), |f| f.to_string_lossy().into()),
    );
    let figure = Figure {
        file,
        title: title.into(),
        x_desc: x_desc.into(),
        y_desc: y_desc.into(),
        x_kind: XKind::Bytes,
        series: series.iter().map(|s| s.0.clone()).collect(),
        panels: vec![Panel {
            title: String::new(),
            lines: series
                .iter()
                .enumerate()
                .map(|(i, s)| Line {
                    series: i,
                    points: s.1.clone(),
                })
                .collect(),
        }],
        columns: 1,
        log_y: Some(log_y),
    };
    render(dir, &figure)
}

/// Axes that place a point in a figure rather than on a line: the
/// collective (one figure each), the size (x) and the slice (panel).
const NOT_SERIES: [&str; 4] = [
    "collective",
    "bytes",
    "system.sips.topology",
    "system.sips.count",
];

/// A point's resolved value of plan axis `axis` (so points of different
/// studies that ran the same configuration share a series).
fn axis_value(p: &PointFile, axis: &str) -> String {
    let r = &p.row;
    let opt = |v: Option<String>| v.unwrap_or_default();
    match axis {
        "algorithm" => r.algorithm.clone(),
        "op" => r.op.clone(),
        "ccl.buffer_kind" => r.buffer_kind.clone(),
        "ccl.n_slots" => opt(r.n_slots.map(|n| n.to_string())),
        "ccl.slot_size" => opt(r.slot_size.map(|n| n.to_string())),
        "ccl.chunks" => r.chunks.clone(),
        _ => p
            .axes
            .iter()
            .find(|(k, _)| k == axis)
            .map_or_else(|| "(base)".into(), |(_, v)| v.clone()),
    }
}

/// The axes, other than `excluded`, that take more than one value over
/// `points`, in the plan's order.
pub fn varied_axes(points: &[&PointFile], excluded: &[&str]) -> Vec<String> {
    let mut names: Vec<&str> = Vec::new();
    for (k, _) in points.iter().flat_map(|p| &p.axes) {
        if !names.contains(&k.as_str()) && !excluded.contains(&k.as_str()) {
            names.push(k);
        }
    }
    names
        .into_iter()
        .filter(|a| {
            let values: BTreeSet<String> = points.iter().map(|p| axis_value(p, a)).collect();
            values.len() > 1
        })
        .map(String::from)
        .collect()
}

/// A point's series label: its values of the varied axes (the algorithm
/// bare, others as `field=value`); the algorithm when nothing else varies.
fn series_label(p: &PointFile, axes: &[String]) -> String {
    if axes.is_empty() {
        return p.row.algorithm.clone();
    }
    axes.iter()
        .map(|a| match a.as_str() {
            "algorithm" => axis_value(p, a),
            _ => format!(
                "{}={}",
                a.strip_prefix("ccl.").unwrap_or(a),
                axis_value(p, a)
            ),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a figure of the slices plots.
struct Metric {
    file: &'static str,
    title: &'static str,
    y_desc: &'static str,
    y: fn(&Row) -> Option<f64>,
}

const METRICS: [Metric; 3] = [
    Metric {
        file: "latency",
        title: "Latency vs size",
        y_desc: "time (us)",
        y: |r| r.time_us,
    },
    Metric {
        file: "busbw",
        title: "Bus bandwidth vs size",
        y_desc: "busbw (GB/s)",
        y: |r| r.busbw_gbps,
    },
    Metric {
        file: "bound",
        title: "% of the alpha-beta bound vs size",
        y_desc: "% of bound",
        y: |r| r.pct_of_bound,
    },
];

/// The system the figure's points ran on: cubes per SIP and the inter-SIP
/// packet size (several when the plan varies them).
fn system_label(points: &[&PointFile]) -> String {
    let systems: BTreeSet<String> = points
        .iter()
        .map(|p| {
            let packet = p.row.packet_bytes.map_or("?".into(), |b| b.to_string());
            format!(
                "{} cubes per SIP, {packet} B inter-SIP packets",
                p.row.cubes
            )
        })
        .collect();
    systems.into_iter().collect::<Vec<_>>().join(" / ")
}

/// Lines of `points` on one panel: one per series, by x, one point per x
/// (points of the same series and x ran the same configuration).
fn lines(
    points: &[&PointFile],
    series: &BTreeMap<String, usize>,
    axes: &[String],
    x: impl Fn(&Row) -> Option<f64>,
    y: impl Fn(&Row) -> Option<f64>,
) -> Vec<Line> {
    let mut by: BTreeMap<usize, BTreeMap<u64, f64>> = BTreeMap::new();
    for p in points {
        let (Some(x), Some(y)) = (x(&p.row), y(&p.row)) else {
            continue;
        };
        let s = series[&series_label(p, axes)];
        by.entry(s).or_default().entry(x.to_bits()).or_insert(y);
    }
    by.into_iter()
        .map(|(s, pts)| {
            let mut points: Vec<(f64, f64)> = pts
                .into_iter()
                .map(|(x, y)| (f64::from_bits(x), y))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Line { series: s, points }
        })
        .collect()
}

/// The topologies (in plan order) and SIP counts (ascending) of `points`.
fn slices(points: &[&PointFile]) -> (Vec<String>, Vec<u32>) {
    let mut topologies: Vec<String> = Vec::new();
    for p in points {
        if !topologies.contains(&p.row.topology) {
            topologies.push(p.row.topology.clone());
        }
    }
    let counts: BTreeSet<u32> = points.iter().filter_map(|p| p.row.sips).collect();
    (topologies, counts.into_iter().collect())
}

/// The figures of one collective's points that ran.
fn collective_figures(c: &str, points: &[&PointFile]) -> Vec<Figure> {
    let axes = varied_axes(points, &NOT_SERIES);
    let series: BTreeMap<String, usize> = points
        .iter()
        .map(|p| series_label(p, &axes))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .enumerate()
        .map(|(i, s)| (s, i))
        .collect();
    let labels: Vec<String> = series.keys().cloned().collect();
    let (topologies, counts) = slices(points);
    let system = system_label(points);
    let mut out = Vec::new();
    for m in &METRICS {
        let panels = topologies
            .iter()
            .flat_map(|t| counts.iter().map(move |&n| (t, n)))
            .map(|(t, n)| {
                let at: Vec<&PointFile> = points
                    .iter()
                    .copied()
                    .filter(|p| &p.row.topology == t && p.row.sips == Some(n))
                    .collect();
                Panel {
                    title: format!("{t} x{n}"),
                    lines: lines(&at, &series, &axes, |r| r.bytes.map(|b| b as f64), m.y),
                }
            })
            .collect();
        out.push(Figure {
            file: format!("{}_{c}.svg", m.file),
            title: format!("{}: {c} ({system})", m.title),
            x_desc: "size per participant (bytes)".into(),
            y_desc: m.y_desc.into(),
            x_kind: XKind::Bytes,
            series: labels.clone(),
            panels,
            columns: counts.len(),
            log_y: None,
        });
    }
    if counts.len() > 1 {
        out.extend(scaling(
            c,
            points,
            &series,
            &axes,
            &topologies,
            &labels,
            &system,
        ));
    }
    out
}

/// What the scaling figures plot against the SIP count.
const SCALING_METRICS: [Metric; 2] = [
    Metric {
        file: "scaling",
        title: "busbw",
        y_desc: "busbw (GB/s)",
        y: |r| r.busbw_gbps,
    },
    Metric {
        file: "scaling_bound",
        title: "% of the alpha-beta bound",
        y_desc: "% of bound",
        y: |r| r.pct_of_bound,
    },
];

/// Each of [`SCALING_METRICS`] (busbw, % of bound) vs SIP count at the
/// largest size, one panel per topology.
fn scaling(
    c: &str,
    points: &[&PointFile],
    series: &BTreeMap<String, usize>,
    axes: &[String],
    topologies: &[String],
    labels: &[String],
    system: &str,
) -> Vec<Figure> {
    let largest = points.iter().filter_map(|p| p.row.bytes).max().unwrap_or(0);
    let on: Vec<Vec<&PointFile>> = topologies
        .iter()
        .map(|t| {
            let at = |p: &&&PointFile| p.row.bytes == Some(largest) && &p.row.topology == t;
            points.iter().filter(at).copied().collect()
        })
        .collect();
    SCALING_METRICS
        .iter()
        .map(|m| {
            let panels = topologies
                .iter()
                .zip(&on)
                .map(|(t, on)| Panel {
                    title: t.clone(),
                    lines: lines(on, series, axes, |r| r.sips.map(f64::from), m.y),
                })
                .collect();
            scaling_figure(c, m, panels, largest, labels, system, topologies.len())
        })
        .collect()
}

/// The figure of one scaling metric from its panels.
fn scaling_figure(
    c: &str,
    m: &Metric,
    panels: Vec<Panel>,
    largest: u64,
    labels: &[String],
    system: &str,
    columns: usize,
) -> Figure {
    Figure {
        file: format!("{}_{c}.svg", m.file),
        title: format!(
            "Scaling: {c} {} at {} per participant ({system})",
            m.title,
            human(largest as f64)
        ),
        x_desc: "SIPs".into(),
        y_desc: m.y_desc.into(),
        x_kind: XKind::Count,
        series: labels.to_vec(),
        panels,
        columns,
        log_y: None,
    }
}

/// Every figure of a result set, in collective order.
pub fn figures(points: &[PointFile]) -> Vec<Figure> {
    let ran: Vec<&PointFile> = points
        .iter()
        .filter(|p| p.row.measured().is_some() && p.row.sips.is_some())
        .collect();
    let collectives: BTreeSet<&str> = ran.iter().map(|p| p.row.collective.as_str()).collect();
    collectives
        .into_iter()
        .flat_map(|c| {
            let of: Vec<&PointFile> = ran
                .iter()
                .copied()
                .filter(|p| p.row.collective == c)
                .collect();
            collective_figures(c, &of)
        })
        .collect()
}

/// Writes every figure into `dir`; returns the files written.
pub fn write_all(dir: &Path, points: &[PointFile]) -> Result<Vec<String>, String> {
    let mut written = Vec::new();
    for f in figures(points) {
        render(dir, &f)?;
        written.push(f.file);
    }
    Ok(written)
}
