//! The decision table of `kernbench autotune`: per size bucket, the chosen
//! config, its time, the runner-up and the margin, and on a heterogeneous
//! system which ranks run a fallback; as text and as CSV.

use std::path::Path;

use serde::Serialize;

use super::{Timing, Tuner, bucket, hetero, runner_up};
use kernbench_ccl::{CclConfig, Collective};
use kernbench_spec::spec::System;

/// One bucket's decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionRow {
    pub collective: String,
    pub bucket_bytes: u64,
    pub config: String,
    pub time_us: f64,
    pub runner_up: String,
    pub runner_up_us: Option<f64>,
    /// Runner-up time / chosen time − 1, in percent.
    pub margin_pct: Option<f64>,
    /// Ranks that run a fallback, and which ("2:ring 3:ring"); empty when
    /// every rank runs the choice.
    pub fallbacks: String,
    /// Whether the decision came from the cache.
    pub cached: bool,
}

fn us(sys: &System, ticks: u64) -> f64 {
    ticks as f64 * sys.spec.system.tick_ns / 1000.0
}

/// A row for the pick `chosen` of `timings` (its time `ticks`).
fn row(
    sys: &System,
    (collective, bucket): (Collective, u64),
    (chosen, ticks): (&str, u64),
    timings: &[Timing],
    fallbacks: String,
    cached: bool,
) -> DecisionRow {
    let up = runner_up(timings, chosen);
    DecisionRow {
        collective: collective.name().into(),
        bucket_bytes: bucket,
        config: chosen.into(),
        time_us: us(sys, ticks),
        runner_up: up.map_or(String::new(), |u| u.0.to_string()),
        runner_up_us: up.map(|u| us(sys, u.1)),
        margin_pct: up.map(|(_, t)| (t as f64 / ticks.max(1) as f64 - 1.0) * 100.0),
        fallbacks,
        cached,
    }
}

/// Decisions of a homogeneous system, one per distinct bucket of `sizes`.
pub fn homogeneous(
    tuner: &mut Tuner,
    sys: &System,
    collective: Collective,
    sizes: &[u64],
) -> Result<Vec<DecisionRow>, kernbench_ccl::CclError> {
    let mut rows = Vec::new();
    for b in buckets(sizes) {
        let before = tuner.simulations;
        let d = tuner.decide(collective, b)?;
        let cached = tuner.simulations == before;
        let pick = (d.config.as_str(), d.ticks);
        rows.push(row(
            sys,
            (collective, b),
            pick,
            &d.timings,
            String::new(),
            cached,
        ));
    }
    Ok(rows)
}

/// Decisions of a heterogeneous system: the [`super::hetero`] protocol per bucket.
pub fn heterogeneous(
    sys: &System,
    ccl: &CclConfig,
    collective: Collective,
    sizes: &[u64],
) -> Result<Vec<DecisionRow>, kernbench_dist::DistError> {
    let mut rows = Vec::new();
    for b in buckets(sizes) {
        let o = hetero::autotune(sys, ccl, collective, b)?;
        let chosen = &o.unified[o.best];
        let fallbacks: Vec<String> = o
            .ran
            .iter()
            .enumerate()
            .filter(|(_, c)| *c != chosen)
            .map(|(r, c)| format!("{r}:{c}"))
            .collect();
        let pick = (chosen.as_str(), o.timings[o.best].expect("the pick ran"));
        rows.push(row(
            sys,
            (collective, b),
            pick,
            &o.table(),
            fallbacks.join(" "),
            false,
        ));
    }
    Ok(rows)
}

/// The distinct buckets of `sizes`, ascending.
pub fn buckets(sizes: &[u64]) -> Vec<u64> {
    let mut b: Vec<u64> = sizes.iter().map(|&s| bucket(s)).collect();
    b.sort_unstable();
    b.dedup();
    b
}

/// The rows as an aligned table.
pub fn table(rows: &[DecisionRow]) -> String {
    let mut out = format!(
        "{:>12} {:>26} {:>12} {:>26} {:>12} {:>8}  fallbacks\n",
        "bucket(B)", "chosen", "time(us)", "runner-up", "time(us)", "margin"
    );
    for r in rows {
        let opt = |v: Option<f64>, unit: &str| v.map_or("-".into(), |v| format!("{v:.3}{unit}"));
        out.push_str(&format!(
            "{:>12} {:>26} {:>12.3} {:>26} {:>12} {:>8}  {}{}\n",
            r.bucket_bytes,
            r.config,
            r.time_us,
            if r.runner_up.is_empty() {
                "-"
            } else {
                &r.runner_up
            },
            opt(r.runner_up_us, ""),
            r.margin_pct.map_or("-".into(), |m| format!("{m:.1}%")),
            if r.fallbacks.is_empty() {
                "-"
            } else {
                &r.fallbacks
            },
            if r.cached { "  (cached)" } else { "" },
        ));
    }
    out
}

/// The rows as CSV, one per bucket.
pub fn write_csv(path: &Path, rows: &[DecisionRow]) -> Result<(), String> {
    let bytes = crate::sweep::study::csv_rows(rows)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    kernbench_runtime::output::write_file(path, &bytes)
}
