//! Result rows, their files, and the summary table.

use kernbench_runtime::output::write_file;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// One point's simulation result: every column is deterministic. A point
/// that failed keeps what was resolved before it failed and leaves every
/// other field empty (None: an empty CSV cell, NaN in pandas), never 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub index: usize,
    pub id: String,
    pub study: String,
    pub point: String,
    pub topology: String,
    pub sips: Option<u32>,
    pub grid: String,
    pub cubes: String,
    /// The inter-SIP links' packet size (empty in result sets written
    /// before it existed).
    #[serde(default)]
    pub packet_bytes: Option<u64>,
    /// The spec's tick, to turn `ticks` into time (empty in result sets
    /// written before it existed).
    #[serde(default)]
    pub tick_ns: Option<f64>,
    /// `packet` or `flow`: the network model that produced the row (empty
    /// in result sets written before it existed, which were all packet).
    #[serde(default)]
    pub network_model: String,
    /// SIPs simulated: `sips`, or fewer when the run was folded onto a
    /// smaller torus that repeats the machine (docs/model.md §Fold; empty
    /// in result sets written before it existed).
    #[serde(default)]
    pub simulated_sips: Option<u32>,
    pub participants: Option<usize>,
    pub collective: String,
    pub algorithm: String,
    pub implementation: String,
    pub buffer_kind: String,
    pub n_slots: Option<u32>,
    pub slot_size: Option<u64>,
    /// A number, or `auto` (empty for a point that failed before it resolved).
    #[serde(deserialize_with = "text_or_number")]
    pub chunks: String,
    pub op: String,
    /// The element type moved (see [`crate::nccl_table::DTYPE`]).
    #[serde(default)]
    pub dtype: String,
    pub bytes: Option<u64>,
    pub ticks: Option<u64>,
    pub time_us: Option<f64>,
    pub algbw_gbps: Option<f64>,
    pub busbw_gbps: Option<f64>,
    pub bound_ticks: Option<u64>,
    pub pct_of_bound: Option<f64>,
    /// The term that sets the bound (empty in result sets written before it existed).
    #[serde(default)]
    pub bound_term: String,
    /// Under algorithm `auto`: the candidate configuration the tuner picked
    /// (empty otherwise, and in result sets written before it existed).
    #[serde(default)]
    pub autotuned: String,
    /// ok, WRONG, - (timing only), or empty for a failed point.
    pub verified: String,
    /// Empty unless the point failed.
    pub error: String,
}

impl Row {
    /// The measures of a point that ran: (busbw, % of bound, time in µs).
    pub fn measured(&self) -> Option<(f64, f64, f64)> {
        if !self.error.is_empty() {
            return None;
        }
        Some((self.busbw_gbps?, self.pct_of_bound?, self.time_us?))
    }
}

/// What a collective point's file holds.
pub type PointFile = super::study::PointFile<Row>;

impl super::study::StudyRow for Row {
    fn index(&self) -> usize {
        self.index
    }
    fn id(&self) -> &str {
        &self.id
    }
}

/// Every finished point of a result directory, in plan order.
pub fn load_points(dir: &Path) -> Result<Vec<PointFile>, String> {
    super::study::load_files(dir)
}

/// Writes results.csv, results.json and simulator.csv from the point
/// files; returns the rows (the plots, read from the same points, are
/// `plots::write_all`'s).
pub fn write_tables(dir: &Path, points: &[PointFile]) -> Result<Vec<Row>, String> {
    let rows: Vec<Row> = points.iter().map(|p| p.row.clone()).collect();
    write_file(&dir.join("results.csv"), &results_csv(points)?)?;
    let json = serde_json::to_vec_pretty(&rows).map_err(|e| e.to_string())?;
    write_file(&dir.join("results.json"), &json)?;
    let mut sim = String::from("index,id,point,wall_ms,peak_mb\n");
    for p in points {
        sim.push_str(&format!(
            "{},{},\"{}\",{:.3},{:.1}\n",
            p.row.index, p.row.id, p.row.point, p.wall_ms, p.peak_mb
        ));
    }
    write_file(&dir.join("simulator.csv"), sim.as_bytes())?;
    Ok(rows)
}

/// results.csv: the rows' columns, then one column per other axis the plan
/// varies (first-seen order: spec paths, `ccl.*`), holding each point's
/// value as the plan wrote it. Axes that are row columns (collective,
/// algorithm, op, bytes) are filled there.
fn results_csv(points: &[PointFile]) -> Result<Vec<u8>, String> {
    let err = |e: csv::Error| e.to_string();
    if points.is_empty() {
        return Ok(Vec::new());
    }
    // The rows' own columns come from serde; the axis columns are appended.
    let rows: Vec<_> = points.iter().map(|p| &p.row).collect();
    let fixed = super::study::csv_rows(&rows)?;
    let mut reader = csv::Reader::from_reader(fixed.as_slice());
    let mut header = reader.headers().map_err(err)?.clone();
    let mut axes: Vec<&str> = Vec::new();
    for (k, _) in points.iter().flat_map(|p| &p.axes) {
        if !axes.contains(&k.as_str()) && !header.iter().any(|h| h == k) {
            axes.push(k);
        }
    }
    let mut out = csv::Writer::from_writer(Vec::new());
    header.extend(axes.iter().copied());
    out.write_record(&header).map_err(err)?;
    for (record, p) in reader.records().zip(points) {
        let mut record = record.map_err(err)?;
        for axis in &axes {
            let v = p
                .axes
                .iter()
                .find(|(k, _)| k == axis)
                .map_or("", |(_, v)| v);
            record.push_field(v);
        }
        out.write_record(&record).map_err(err)?;
    }
    out.into_inner().map_err(|e| e.to_string())
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// Every point with its simulated time and the simulator's own cost.
pub fn points_table(points: &[PointFile]) -> String {
    let mut out = format!(
        "{:>6} {:>16} {:>6} {:>15} {:>12} {:>9} {:>14} {:>10} {:>9} {:>9}\n",
        "point",
        "topology",
        "SIPs",
        "collective",
        "algorithm",
        "size",
        "sim time(us)",
        "busbw",
        "wall(s)",
        "peak(MB)"
    );
    let cell = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for p in points {
        let r = &p.row;
        let time = match r.measured() {
            Some((_, _, t)) => format!("{t:.3}"),
            None => "error".into(),
        };
        out.push_str(&format!(
            "{:>6} {:>16} {:>6} {:>15} {:>12} {:>9} {:>14} {:>10} {:>9.3} {:>9.1}\n",
            r.index,
            r.topology,
            cell(r.sips.map(|n| n.to_string())),
            r.collective,
            r.algorithm,
            cell(r.bytes.map(human)),
            time,
            cell(r.busbw_gbps.map(|b| format!("{b:.2}"))),
            p.wall_ms / 1000.0,
            p.peak_mb
        ));
    }
    out
}

/// The best algorithm per collective, size and topology (the largest SIP
/// count of each topology kind), by busbw, with its % of bound.
pub fn summary(rows: &[Row]) -> String {
    // (row, sips, bytes, busbw, % of bound) of every point that ran.
    let ok: Vec<(&Row, u32, u64, f64, f64)> = rows
        .iter()
        .filter_map(|r| {
            let (busbw, pct, _) = r.measured()?;
            Some((r, r.sips?, r.bytes?, busbw, pct))
        })
        .collect();
    let mut largest: BTreeMap<&str, u32> = BTreeMap::new();
    for (r, sips, ..) in &ok {
        let e = largest.entry(r.topology.as_str()).or_insert(0);
        *e = (*e).max(*sips);
    }
    let columns: Vec<(&str, u32)> = largest.into_iter().collect();
    let mut out = String::new();
    let mut collectives: Vec<&str> = ok.iter().map(|o| o.0.collective.as_str()).collect();
    collectives.sort();
    collectives.dedup();
    for c in collectives {
        out.push_str(&format!(
            "\n{c}: best algorithm by busbw (GB/s) and % of the α-β bound\n{:>8}",
            "size"
        ));
        for (t, n) in &columns {
            out.push_str(&format!(" {:>32}", format!("{t} x{n}")));
        }
        out.push('\n');
        let mut sizes: Vec<u64> = ok
            .iter()
            .filter(|o| o.0.collective == c)
            .map(|o| o.2)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        for s in sizes {
            out.push_str(&format!("{:>8}", human(s)));
            for (t, n) in &columns {
                let best = ok
                    .iter()
                    .filter(|(r, sips, bytes, ..)| {
                        r.collective == c && *bytes == s && r.topology == *t && sips == n
                    })
                    .max_by(|a, b| a.3.total_cmp(&b.3).then(b.0.index.cmp(&a.0.index)));
                let cell = best.map_or("-".to_string(), |(r, _, _, busbw, pct)| {
                    format!("{} {busbw:.1} ({pct:.0}%)", r.algorithm)
                });
                out.push_str(&format!(" {cell:>32}"));
            }
            out.push('\n');
        }
    }
    let failed = rows.len() - ok.len();
    if failed > 0 {
        out.push_str(&format!(
            "\n{failed} point(s) failed; their errors are in results.csv (column error)\n"
        ));
    }
    out
}

/// A field written as text now and as a number by earlier result sets.
fn text_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Either {
        Number(u64),
        Text(String),
    }
    Ok(match <Either as serde::Deserialize>::deserialize(d)? {
        Either::Number(n) => n.to_string(),
        Either::Text(t) => t,
    })
}
