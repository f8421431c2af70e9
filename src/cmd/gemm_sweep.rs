//! `kernbench gemm-sweep`: GEMMs on one SIP against their roofline.

use super::args::{BudgetArg, SystemArg};
use super::paths::check_distinct_files;
use anyhow::Result;
use clap::Args;
use kernbench::gemm::sweep;
use std::path::PathBuf;

#[derive(Args)]
pub struct GemmSweepArgs {
    #[command(flatten)]
    system: SystemArg,
    /// Directory for results.csv and the figures (created if missing; an
    /// existing one must be empty or an earlier gemm-sweep's).
    #[arg(long, value_name = "DIR", default_value = "gemm")]
    out: PathBuf,
    #[command(flatten)]
    budget: BudgetArg,
}

/// Knobs that shrink a gemm-sweep: its one SIP.
const GEMM_KNOBS: &str = "fewer cubes (sip.cube_mesh) or PEs per cube in the spec";

pub fn run(a: GemmSweepArgs) -> Result<()> {
    let outputs = sweep::FILES.map(|f| a.out.join(f));
    check_distinct_files("--out", &outputs, &a.system)?;
    let sys = a.system.load()?;
    let shapes = sweep::default_grid();
    let one_sip = sweep::one_sip(&sys).map_err(anyhow::Error::msg)?;
    let cost =
        kernbench::command_costs::gemm_sweep(&one_sip, &shapes, rayon::current_num_threads());
    cost.check("gemm-sweep", &a.budget.budget(), GEMM_KNOBS)
        .map_err(|e| anyhow::anyhow!("{}: {e}", sys.origin))?;
    // Claimed only now: a refused grid leaves no directory behind.
    kernbench::output::claim_dir("--out", &a.out, "gemm-sweep").map_err(anyhow::Error::msg)?;
    eprintln!(
        "gemm-sweep: {} shapes on one SIP of {} ({} cubes x {} PEs) -> {}",
        shapes.len(),
        sys.origin,
        sys.cubes_per_sip(),
        sys.pes_per_cube(),
        a.out.display()
    );
    let started = std::time::Instant::now();
    let weights = cost.weights();
    let progress = kernbench::progress::Progress::new("gemm-sweep", "shapes", &weights);
    let rows = sweep::run_grid_with(&sys, &shapes, &|i| {
        progress.tick(weights[i], &cost.parts[i].0)
    })?;
    progress.finish();
    print!("{}", sweep::table(&rows));
    let files = sweep::write(&a.out, &rows).map_err(|e| anyhow::anyhow!("--out: {e}"))?;
    eprintln!(
        "{} shapes in {:.1} s; wrote {} in {}",
        rows.len(),
        started.elapsed().as_secs_f64(),
        files.join(", "),
        a.out.display()
    );
    Ok(())
}
