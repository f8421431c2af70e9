//! SVG plots of a result set (plotters): latency, busbw and % of bound vs
//! size per algorithm, busbw vs SIP count (scaling), buffer-kind comparison.

use super::results::Row;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

pub(crate) type Series = Vec<(String, Vec<(f64, f64)>)>;

/// One line chart: x on a base-2 log scale (sizes and SIP counts are powers
/// of two); y linear, or log10 with `log_y`.
pub(crate) fn chart(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    log_y: bool,
    series: &Series,
) -> Result<(), String> {
    let pts = series.iter().flat_map(|s| s.1.iter());
    let ty = |y: f64| if log_y { y.max(1e-9).log10() } else { y };
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(ty(y)), y1.max(ty(y)));
    }
    if x0 > x1 {
        return Ok(());
    }
    if x0 == x1 {
        (x0, x1) = (x0 / 2.0, x1 * 2.0);
    }
    let pad = ((y1 - y0) * 0.08).max(if log_y { 0.1 } else { 1e-3 });
    let (y0, y1) = (if log_y { y0 - pad } else { (y0 - pad).min(0.0) }, y1 + pad);
    let e = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d((x0..x1).log_scale().base(2.0), y0..y1)
        .map_err(|x| e(&x))?;
    let y_fmt = move |v: &f64| {
        let y = if log_y { 10f64.powf(*v) } else { *v };
        match y.abs() {
            a if a >= 100.0 => format!("{y:.0}"),
            a if a >= 1.0 => format!("{y:.1}"),
            _ => format!("{y:.3}"),
        }
    };
    c.configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|v| human(*v))
        .y_label_formatter(&y_fmt)
        .draw()
        .map_err(|x| e(&x))?;
    for (i, (name, data)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let line: Vec<(f64, f64)> = data.iter().map(|&(x, y)| (x, ty(y))).collect();
        c.draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        c.draw_series(line.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|x| e(&x))?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}

pub(crate) fn human(v: f64) -> String {
    let v = v.round();
    match v {
        v if v >= 1073741824.0 => format!("{}G", v / 1073741824.0),
        v if v >= 1048576.0 => format!("{}M", v / 1048576.0),
        v if v >= 1024.0 => format!("{}K", v / 1024.0),
        v => format!("{v}"),
    }
}

/// Groups rows into named series of (x, y), ordered by x.
fn series(
    rows: &[&Row],
    name: impl Fn(&Row) -> String,
    x: impl Fn(&Row) -> f64,
    y: impl Fn(&Row) -> f64,
) -> Series {
    let mut m: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        m.entry(name(r)).or_default().push((x(r), y(r)));
    }
    m.into_iter()
        .map(|(k, mut v)| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            (k, v)
        })
        .collect()
}

/// Writes every plot the rows support into `dir`; returns the files written.
pub fn write_all(dir: &Path, rows: &[Row]) -> Result<Vec<String>, String> {
    let ok: Vec<&Row> = rows
        .iter()
        .filter(|r| r.error.is_empty() && r.ticks > 0)
        .collect();
    let Some(first) = ok.first() else {
        return Ok(Vec::new());
    };
    // The reference slice: the first topology at its largest SIP count, first buffer kind.
    let topo = first.topology.clone();
    let sips = ok
        .iter()
        .filter(|r| r.topology == topo)
        .map(|r| r.sips)
        .max()
        .unwrap_or(0);
    let buffer = first.buffer_kind.clone();
    let mut written = Vec::new();
    let mut collectives: Vec<String> = ok.iter().map(|r| r.collective.clone()).collect();
    collectives.sort();
    collectives.dedup();
    let mut put = |name: String,
                   title: String,
                   xd: &str,
                   yd: &str,
                   log_y: bool,
                   s: Series|
     -> Result<(), String> {
        if s.iter().all(|x| x.1.is_empty()) {
            return Ok(());
        }
        chart(&dir.join(&name), &title, xd, yd, log_y, &s)?;
        written.push(name);
        Ok(())
    };
    for c in &collectives {
        let slice: Vec<&Row> = ok
            .iter()
            .copied()
            .filter(|r| {
                &r.collective == c
                    && r.topology == topo
                    && r.sips == sips
                    && r.buffer_kind == buffer
            })
            .collect();
        let at = format!("{c} on {topo} x{sips}, {buffer} buffers");
        let by_algo =
            |y: fn(&Row) -> f64| series(&slice, |r| r.algorithm.clone(), |r| r.bytes as f64, y);
        put(
            format!("latency_{c}.svg"),
            format!("Latency vs size: {at}"),
            "size per participant (bytes)",
            "time (us)",
            true,
            by_algo(|r| r.time_us),
        )?;
        put(
            format!("busbw_{c}.svg"),
            format!("Bus bandwidth vs size: {at}"),
            "size per participant (bytes)",
            "busbw (GB/s)",
            false,
            by_algo(|r| r.busbw_gbps),
        )?;
        put(
            format!("bound_{c}.svg"),
            format!("% of the alpha-beta bound: {at}"),
            "size per participant (bytes)",
            "% of bound",
            false,
            by_algo(|r| r.pct_of_bound),
        )?;
        // Scaling: busbw at the largest size vs SIP count, per algorithm and topology.
        let largest = ok
            .iter()
            .filter(|r| &r.collective == c)
            .map(|r| r.bytes)
            .max()
            .unwrap_or(0);
        let scale: Vec<&Row> = ok
            .iter()
            .copied()
            .filter(|r| &r.collective == c && r.bytes == largest && r.buffer_kind == buffer)
            .collect();
        let counts: std::collections::BTreeSet<u32> = scale.iter().map(|r| r.sips).collect();
        if counts.len() > 1 {
            let s = series(
                &scale,
                |r| format!("{} {}", r.algorithm, r.topology),
                |r| r.sips as f64,
                |r| r.busbw_gbps,
            );
            put(
                format!("scaling_{c}.svg"),
                format!(
                    "Scaling: {c} busbw at {} per participant",
                    human(largest as f64)
                ),
                "SIPs",
                "busbw (GB/s)",
                false,
                s,
            )?;
        }
        // Buffer kinds where the plan varies them most (ties: the first
        // topology, the most SIPs).
        let mut slices: BTreeMap<(&str, u32), std::collections::BTreeSet<&str>> = BTreeMap::new();
        for r in ok.iter().filter(|r| &r.collective == c) {
            slices
                .entry((r.topology.as_str(), r.sips))
                .or_default()
                .insert(r.buffer_kind.as_str());
        }
        let best = slices
            .iter()
            .filter(|(_, k)| k.len() > 1)
            .max_by_key(|((t, n), k)| (k.len(), *t == topo.as_str(), *n))
            .map(|(s, _)| *s);
        if let Some((t, n)) = best {
            let kinds: Vec<&Row> = ok
                .iter()
                .copied()
                .filter(|r| &r.collective == c && r.topology == t && r.sips == n)
                .collect();
            let s = series(
                &kinds,
                |r| format!("{} {}", r.algorithm, r.buffer_kind),
                |r| r.bytes as f64,
                |r| r.busbw_gbps,
            );
            put(
                format!("buffers_{c}.svg"),
                format!("Buffer kinds: {c} on {t} x{n}"),
                "size per participant (bytes)",
                "busbw (GB/s)",
                false,
                s,
            )?;
        }
    }
    Ok(written)
}
