//! `kernbench validate`: the flow-level network against the packet engine.

use super::args::{BudgetArg, sweep_jobs};
use super::paths::check_output_dir;
use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use kernbench::sweep::study::rows_that_ran;
use kernbench::validate::cases::Matrix;
use kernbench::validate::{ValidateStudy, summary};
use std::path::PathBuf;

/// The matrices `--matrix` names.
#[derive(Clone, Copy, ValueEnum)]
enum MatrixArg {
    /// 4 SIPs, 1x1 and 2x1 cubes, 4 KiB and 256 KiB (seconds; CI runs it).
    Quick,
    /// the quick matrix on 2x2 and 4x4 cubes: cube meshes in both
    /// directions (about 20 s).
    Cubes,
    /// 4, 16 and 64 SIPs, 1x1, 2x2 and 4x4 cubes, 1 KiB to 64 MiB (hours).
    Full,
}

#[derive(Args)]
pub struct ValidateArgs {
    /// Which matrix of systems and sizes the collectives run on (the
    /// adversarial cases run in each; larger in `full`).
    #[arg(long, value_enum, default_value = "quick")]
    matrix: MatrixArg,
    /// Directory for results.csv, kendall.csv, summary.txt and the figure
    /// (created if missing; an existing one must be empty or an earlier
    /// validate's).
    #[arg(long, value_name = "DIR", default_value = "validate")]
    out: PathBuf,
    /// Cases simulated in parallel (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Exit 1 when the flow model misses its bounds (every case within 5 %,
    /// the median within 1 %, identical link bytes, the same ranking of
    /// decisively different algorithms), for scripts; without it the verdict
    /// is printed and the exit is 0.
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    budget: BudgetArg,
}

/// The largest |error| of any case, and of the median, that validation accepts.
const MAX_ERROR: f64 = 0.05;
const MAX_MEDIAN_ERROR: f64 = 0.01;

pub fn run(a: ValidateArgs) -> Result<()> {
    check_output_dir("--out", &a.out)?;
    let matrix = match a.matrix {
        MatrixArg::Quick => Matrix::Quick,
        MatrixArg::Cubes => Matrix::Cubes,
        MatrixArg::Full => Matrix::Full,
    };
    let study = ValidateStudy::new(matrix);
    let jobs = sweep_jobs(a.jobs, study.cases.len())?;
    let seconds: f64 = study.cases.iter().map(|c| study.case_seconds(c)).sum();
    let budget = a.budget.budget();
    if seconds / jobs as f64 > budget.seconds {
        bail!(
            "the {} validation matrix is estimated at {:.0} s on {jobs} job(s), more than the time budget of {:.0} s; allowed: a smaller --matrix, more --jobs, or --max-time",
            matrix.name(),
            seconds / jobs as f64,
            budget.seconds
        );
    }
    kernbench::output::claim_dir("--out", &a.out, "validate").map_err(anyhow::Error::msg)?;
    let points = a.out.join("points");
    if points.is_dir() {
        std::fs::remove_dir_all(&points)
            .map_err(|e| anyhow::anyhow!("--out: cannot clear {}: {e}", points.display()))?;
    }
    eprintln!(
        "validate: the {} matrix, {} cases in both network models, {jobs} job(s) -> {}",
        matrix.name(),
        study.cases.len(),
        a.out.display()
    );
    let opts = kernbench::sweep::Options {
        claimed: true,
        budget,
        ..kernbench::sweep::Options::new(a.out.clone(), jobs)
    };
    let outcome =
        kernbench::sweep::run(&study, &opts).map_err(|e| anyhow::anyhow!("--out: {e}"))?;
    let rows = rows_that_ran(&outcome.rows);
    let s = summary::summarize(&rows);
    print!("{}", s.text());
    eprintln!("wrote {} in {}", summary::FILES.join(", "), a.out.display());
    if let Some(r) = outcome.rows.iter().find(|r| r.row.is_none()) {
        bail!("validate: case {} failed: {}", r.point, r.error);
    }
    let verdict = s.max_abs_error <= MAX_ERROR
        && s.median_abs_error <= MAX_MEDIAN_ERROR
        && s.link_bytes_identical == s.cases
        && s.decisive_disagreements == 0;
    let bounds = format!(
        "every case within {:.0}% and the median within {:.0}% of the packet model, identical bytes on every link, decisively different algorithms ranked the same",
        MAX_ERROR * 100.0,
        MAX_MEDIAN_ERROR * 100.0
    );
    if verdict {
        println!("bounds met: {bounds}");
        return Ok(());
    }
    println!(
        "bounds not met ({} of {} cases beyond {:.0}%, {} decisive rankings differ): {bounds}",
        s.cases - s.within_5pct,
        s.cases,
        MAX_ERROR * 100.0,
        s.decisive_disagreements
    );
    if a.check {
        eprintln!("validation failed (--check)");
        std::process::exit(1);
    }
    Ok(())
}
