//! `kernbench autotune`: the fastest collective configuration per size
//! bucket, cached.

use super::args::{AUTOTUNE_CACHE, BudgetArg, SystemArg, load_ccl, parse_elem_bytes};
use super::paths::{check_output_dir, check_output_file, inputs_of};
use anyhow::Result;
use clap::Args;
use kernbench::autotune::{OnSimulated, Tuner, report};
use kernbench::ccl::{CclConfig, Collective};
use kernbench::command_costs;
use kernbench::spec::System;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args)]
pub struct AutotuneArgs {
    #[arg(long, value_enum, default_value = "all_reduce")]
    collective: Collective,
    #[command(flatten)]
    system: SystemArg,
    /// Collective configuration YAML (default: the embedded configs/ccl.yaml);
    /// its `autotune:` section lists the candidates.
    #[arg(long, value_name = "FILE")]
    ccl: Option<PathBuf>,
    /// Sizes per participant, comma-separated (K, M, G = 2^10, 2^20, 2^30);
    /// each is tuned at its bucket.
    #[arg(long, value_delimiter = ',', default_value = "1K,16K,256K,4M", allow_hyphen_values = true,
          value_parser = parse_elem_bytes)]
    sizes: Vec<u64>,
    /// Where decisions are cached.
    #[arg(long, value_name = "DIR", default_value = AUTOTUNE_CACHE)]
    cache: PathBuf,
    /// Ignore cached decisions (and overwrite them).
    #[arg(long)]
    retune: bool,
    /// Write the decision table as CSV here.
    #[arg(long, value_name = "FILE.csv", default_value = "autotune.csv")]
    csv: PathBuf,
    #[command(flatten)]
    budget: BudgetArg,
}

/// Knobs that shrink an autotune.
const AUTOTUNE_KNOBS: &str = "fewer or smaller --sizes, fewer candidates (autotune.configs of --ccl), a smaller system (--preset, --system)";

pub fn run(a: AutotuneArgs) -> Result<()> {
    check_output_file("--csv", &a.csv)?;
    check_output_dir("--cache", &a.cache)?;
    let inputs = inputs_of(&a.system, a.ccl.as_deref(), None);
    kernbench::output::check_distinct(&[("--csv", &a.csv)], &inputs).map_err(anyhow::Error::msg)?;
    let sys = a.system.load()?;
    let ccl = load_ccl(a.ccl.as_deref())?;
    let heterogeneous = sys.kinds.heterogeneous();
    let tuner = Tuner::new(&sys, &ccl);
    // Seed 001's protocol caches nothing; the tuner simulates what its cache lacks.
    let (candidates, to_tune) = if heterogeneous {
        (ccl.candidates.clone(), report::buckets(&a.sizes))
    } else {
        let cache = (a.cache.as_path(), a.retune);
        let to_tune = command_costs::buckets_to_tune(&sys, &tuner, cache, a.collective, &a.sizes);
        (tuner.candidates().to_vec(), to_tune)
    };
    let cost = command_costs::autotune(&sys, &candidates, a.collective, &to_tune);
    cost.check("autotune", &a.budget.budget(), AUTOTUNE_KNOBS)
        .map_err(|e| anyhow::anyhow!("{}: {e}", sys.origin))?;
    println!(
        "# autotune {} on {} ({} candidates of {})",
        a.collective,
        sys.origin,
        ccl.candidates.len(),
        ccl.origin
    );
    let progress = Arc::new(kernbench::progress::Progress::new(
        "autotune",
        "simulations",
        &cost.weights(),
    ));
    let bar = progress.clone();
    let seconds: std::collections::HashMap<String, f64> = cost
        .parts
        .iter()
        .map(|(what, e)| (what.clone(), e.seconds))
        .collect();
    let tick: OnSimulated = Arc::new(move |candidate: &str, bucket: u64| {
        let what = format!("{candidate} at {bucket} B");
        // Candidates that cannot run here fail at once: not in the estimate.
        if let Some(&s) = seconds.get(&what) {
            progress.tick(s, &what);
        }
    });
    let rows = if heterogeneous {
        heterogeneous_rows(&a, &sys, &ccl, &tick)?
    } else {
        homogeneous_rows(&a, &sys, tuner, tick)?
    };
    bar.finish();
    print!("{}", report::table(&rows));
    report::write_csv(&a.csv, &rows).map_err(|e| anyhow::anyhow!("--csv: {e}"))?;
    println!("# wrote {}", a.csv.display());
    Ok(())
}

/// Seed 001's protocol on the simulated machine, bucket by bucket.
fn heterogeneous_rows(
    a: &AutotuneArgs,
    sys: &System,
    ccl: &CclConfig,
    tick: &OnSimulated,
) -> Result<Vec<report::DecisionRow>> {
    println!(
        "# heterogeneous: the ranks' protocol with fallbacks on the simulated machine (not cached)"
    );
    let mut rows = Vec::new();
    for b in report::buckets(&a.sizes) {
        let bucket = report::heterogeneous(sys, ccl, a.collective, &[b]);
        rows.extend(bucket.map_err(|e| anyhow::anyhow!("--sizes (bucket {b} B): {e}"))?);
        ccl.candidates.iter().for_each(|c| tick(&c.name, b));
    }
    Ok(rows)
}

/// The tuner over every bucket, from and into its cache.
fn homogeneous_rows(
    a: &AutotuneArgs,
    sys: &System,
    tuner: Tuner,
    tick: OnSimulated,
) -> Result<Vec<report::DecisionRow>> {
    let mut tuner = tuner.with_cache(&a.cache, a.retune).with_progress(tick);
    let mut rows = Vec::new();
    for b in report::buckets(&a.sizes) {
        let bucket = report::homogeneous(&mut tuner, sys, a.collective, &[b]);
        rows.extend(bucket.map_err(|e| anyhow::anyhow!("--sizes (bucket {b} B): {e}"))?);
    }
    for why in &tuner.rebuilt {
        eprintln!("note: rebuilt a cached decision: {why}");
    }
    println!(
        "# {} simulations; cache {}",
        tuner.simulations,
        a.cache.display()
    );
    Ok(rows)
}
