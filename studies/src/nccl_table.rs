//! The nccl-tests-style table of `kernbench run`: one line per size with the
//! out-of-place and in-place results side by side, the "Avg bus bandwidth"
//! footer, and the same records as CSV or JSON for scripts.

use kernbench_ccl::{CollResult, Collective, Placement};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// The element type every collective moves (the simulator carries f16),
/// named as nccl-tests names it.
pub const DTYPE: &str = "half";

/// One collective run at one size and placement: a line of `--csv`/`--json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub collective: String,
    /// The ccl.yaml entry, and the algorithm it runs.
    pub entry: String,
    pub algorithm: String,
    pub placement: String,
    pub participants: usize,
    pub bytes: u64,
    pub count: usize,
    #[serde(rename = "type")]
    pub dtype: String,
    pub redop: String,
    /// -1 for collectives without a root, as nccl-tests prints.
    pub root: i64,
    pub ticks: u64,
    pub time_us: f64,
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    pub bound_ticks: u64,
    pub pct_of_bound: f64,
    pub bound_term: String,
    /// Wrong result elements over every participant; empty without a check.
    pub wrong: Option<u64>,
    /// Under entry `auto`: the candidate configuration the autotuner picked
    /// for this size (empty otherwise).
    pub autotuned: Option<String>,
    /// `packet` or `flow`: the network model that produced the record.
    pub network_model: String,
    /// SIPs simulated: all of them, or fewer when the run was folded onto
    /// a smaller torus that repeats the machine (docs/model.md §Fold).
    pub simulated_sips: u32,
}

impl Record {
    pub fn new(
        r: &CollResult,
        entry: &str,
        algorithm: &str,
        placement: Placement,
        wrong: Option<u64>,
    ) -> Record {
        Record {
            collective: r.collective.name().into(),
            entry: entry.into(),
            algorithm: algorithm.into(),
            placement: placement.name().into(),
            participants: r.participants,
            bytes: r.bytes,
            count: r.elems,
            dtype: DTYPE.into(),
            redop: redop(r),
            root: root(r.collective),
            ticks: r.ticks,
            time_us: r.time_ns / 1000.0,
            algbw_gbps: r.algbw_gbps,
            busbw_gbps: r.busbw_gbps,
            bound_ticks: r.bound_ticks,
            pct_of_bound: r.pct_of_bound,
            bound_term: r.bound_term.clone(),
            wrong,
            autotuned: None,
            network_model: String::new(),
            simulated_sips: 0,
        }
    }
}

/// nccl-tests' redop column: the reduction, or `none` for data movement.
fn redop(r: &CollResult) -> String {
    if r.collective.reduces() {
        r.op.name().into()
    } else {
        "none".into()
    }
}

/// The root participant of broadcast and reduce (the algorithms root at 0).
fn root(c: Collective) -> i64 {
    match c {
        Collective::Broadcast | Collective::Reduce => 0,
        _ => -1,
    }
}

/// The three header lines of the table (placement groups, names, units).
pub fn column_header() -> String {
    let group = format!("{:>46}{:>43}", "out-of-place", "in-place");
    let line = |first: [&str; 5], cells: [&str; 5]| {
        format!(
            "{:>10} {:>12} {:>6} {:>5} {:>4}{}{}",
            first[0],
            first[1],
            first[2],
            first[3],
            first[4],
            placement_columns(cells),
            placement_columns(cells),
        )
    };
    let names = line(
        ["size", "count", "type", "redop", "root"],
        ["time", "algbw", "busbw", "#wrong", "%bound"],
    );
    let units = line(
        ["(B)", "(elements)", "", "", ""],
        ["(us)", "(GB/s)", "(GB/s)", "", ""],
    );
    format!(
        "#{group}\n#{}  bound set by\n#{}\n",
        &names[1..],
        units[1..].trim_end()
    )
}

fn placement_columns(c: [&str; 5]) -> String {
    format!(
        " {:>10} {:>8} {:>8} {:>6} {:>6}",
        c[0], c[1], c[2], c[3], c[4]
    )
}

/// One size's line: `out` and `inp` are the out-of-place and in-place runs.
pub fn line(out: &Record, inp: &Record) -> String {
    let cells = |r: &Record| {
        let wrong = r.wrong.map_or("N/A".to_string(), |w| w.to_string());
        format!(
            " {:>10.3} {:>8.2} {:>8.2} {:>6} {:>6.1}",
            r.time_us, r.algbw_gbps, r.busbw_gbps, wrong, r.pct_of_bound
        )
    };
    let pick = inp
        .autotuned
        .as_ref()
        .map_or(String::new(), |c| format!("  [auto: {c}]"));
    format!(
        "{:>10} {:>12} {:>6} {:>5} {:>4}{}{}  {}{pick}",
        inp.bytes,
        inp.count,
        inp.dtype,
        inp.redop,
        inp.root,
        cells(out),
        cells(inp),
        inp.bound_term
    )
}

/// nccl-tests' closing lines: wrong values over every run and the mean bus
/// bandwidth over every size and both placements.
pub fn footer(records: &[Record]) -> String {
    let mut out = String::new();
    let checked: Vec<u64> = records.iter().filter_map(|r| r.wrong).collect();
    if checked.len() == records.len() && !records.is_empty() {
        let wrong: u64 = checked.iter().sum();
        let verdict = if wrong == 0 { "OK" } else { "FAILED" };
        let _ = writeln!(out, "# Out of bounds values : {wrong} {verdict}");
    } else {
        let _ = writeln!(
            out,
            "# Out of bounds values : N/A (not checked: -c 1 checks)"
        );
    }
    let avg = records.iter().map(|r| r.busbw_gbps).sum::<f64>() / records.len().max(1) as f64;
    let _ = writeln!(out, "# Avg bus bandwidth    : {avg:.3} GB/s");
    out
}

/// Writes `records` as CSV (one line per size and placement, `wrong` empty
/// when unchecked) or, with `json`, as a JSON array (`wrong` null).
pub fn write(path: &Path, records: &[Record], json: bool) -> Result<(), String> {
    let bytes = if json {
        serde_json::to_vec_pretty(records).map_err(|e| e.to_string())?
    } else {
        crate::sweep::study::csv_rows(records)?
    };
    kernbench_runtime::output::write_file(path, &bytes)
}
