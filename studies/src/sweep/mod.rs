//! Sweeps: plan expansion, parallel execution with one simulation world per
//! point, atomic per-point results, resume, sharding, merging, summaries and
//! plots.
//!
//! A result directory holds `points/<id>.json` (one per finished point,
//! written atomically: the ground truth), and, consolidated from them,
//! `results.csv` / `results.json` (simulation results only, bit-identical
//! across runs, resumes and shards), `simulator.csv` (the simulator's own wall
//! time and peak memory per point), `plan.yaml`, `system.yaml`, `ccl.yaml`
//! and the SVG plots.

pub mod collective;
pub mod figure;
pub mod fingerprint;
pub mod lock;
pub mod merge;
pub mod plan;
pub mod plots;
pub mod results;
pub mod run;
pub mod study;

pub use plan::{Plan, Point};
pub use results::Row;
pub use run::{Options, Outcome, run};

use std::path::Path;

/// Writes results.csv, results.json, simulator.csv and the plots from the
/// point files; returns the rows.
pub fn consolidate(dir: &Path) -> Result<Vec<Row>, String> {
    let points = results::load_points(dir)?;
    let rows = results::write_tables(dir, &points)?;
    plots::write_all(dir, &points)?;
    Ok(rows)
}
