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
    // Every run starts afresh: an earlier run's points are this command's own.
    let points = a.out.join("points");
    if points.is_dir() {
        std::fs::remove_dir_all(&points)
            .map_err(|e| anyhow::anyhow!("--out: cannot clear {}: {e}", points.display()))?;
    }
    eprintln!(
        "gemm-sweep: {} shapes on one SIP of {} ({} cubes x {} PEs) -> {}",
        shapes.len(),
        sys.origin,
        sys.cubes_per_sip(),
        sys.pes_per_cube(),
        a.out.display()
    );
    let started = std::time::Instant::now();
    let study = sweep::GemmStudy {
        system: &sys,
        seconds: cost.parts.iter().map(|(_, e)| e.seconds).collect(),
        shapes,
    };
    let opts = kernbench::sweep::Options {
        claimed: true,
        budget: a.budget.budget(),
        ..kernbench::sweep::Options::new(a.out.clone(), rayon::current_num_threads())
    };
    let outcome =
        kernbench::sweep::run(&study, &opts).map_err(|e| anyhow::anyhow!("--out: {e}"))?;
    let rows = kernbench::sweep::study::rows_that_ran(&outcome.rows);
    print!("{}", sweep::table(&rows));
    if let Some(r) = outcome.rows.iter().find(|r| r.row.is_none()) {
        anyhow::bail!("gemm-sweep: {}: {}", r.point, r.error);
    }
    eprintln!(
        "{} shapes in {:.1} s; wrote {} in {}",
        rows.len(),
        started.elapsed().as_secs_f64(),
        sweep::FILES.join(", "),
        a.out.display()
    );
    Ok(())
}
