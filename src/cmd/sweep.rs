//! `kernbench sweep`: a sweep plan's points in parallel, or a TP plan.

use super::args::{
    AUTOTUNE_CACHE, BudgetArg, NetworkArg, SystemArg, compute_model, parse_shard, sweep_jobs,
};
use super::paths::{check_output_dir, default_out, inputs_of};
use anyhow::{Result, bail};
use clap::Args;
use kernbench::ccl::CclConfig;
use kernbench::spec::{System, presets};
use kernbench::sweep::plan::{sets_compute_model, sets_network_model};
use kernbench::sweep::{Options, Plan};
use kernbench::tp::study::{self, TpPlan, TpStudy};
use kernbench::train::study::{self as train_study, TrainPlan, TrainStudy};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Shown after `kernbench sweep --help`'s options, one example a line
/// (clap joins the lines of a doc-comment paragraph).
pub const EXAMPLES: &str = "Examples:
  kernbench sweep                                  # the default plan
  kernbench sweep --plan scaling --jobs 1          # 4 to 4096 SIPs, simulator cost per point
  kernbench sweep --plan my.yaml --out r/ --resume # continue an interrupted sweep
  kernbench sweep --shard 2/3 --out r2/            # one third of the points, for merge";

#[derive(Args)]
pub struct SweepArgs {
    /// A built-in plan (default, scaling, smoke, bounds, large; tp: the TP scaling
    /// study of a transformer block; train: training steps under DP × TP × PP)
    /// or a plan YAML file.
    #[arg(long, default_value = "default")]
    plan: String,
    /// Base system spec for every point (default: the plan's, else the embedded one).
    #[arg(long, value_name = "FILE", conflicts_with = "preset")]
    system: Option<PathBuf>,
    /// A built-in preset as the base system.
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
    /// Collective configuration YAML (default: the embedded configs/ccl.yaml).
    #[arg(long, value_name = "FILE")]
    ccl: Option<PathBuf>,
    /// Result directory (default: results/<plan>-<UTC timestamp>).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Points simulated in parallel, one world each (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Continue the sweep in --out (which must exist): points already
    /// written are skipped; the set's own shard is kept.
    #[arg(long, requires = "out")]
    resume: bool,
    /// Run only shard K of N (points with index mod N = K-1), e.g. 2/3.
    #[arg(long, value_name = "K/N", value_parser = parse_shard)]
    shard: Option<(usize, usize)>,
    /// Where points of `algorithm: auto` read and store the autotuner's
    /// decisions (the directory `kernbench autotune --cache` uses).
    #[arg(long, value_name = "DIR", default_value = AUTOTUNE_CACHE)]
    autotune_cache: PathBuf,
    /// Every point's network model (auto: per point); a plan that sets
    /// network.model itself is refused.
    #[command(flatten)]
    network: NetworkArg,
    /// How a TP or train plan's points time compute kernels: tiled (every
    /// tile load crosses the network, exact) or measured (each distinct
    /// kernel runs once alone; docs/model.md §Measured compute). Default:
    /// the plan's base, else measured for a train plan and tiled for a TP
    /// plan; a plan whose base sets simulation.compute is refused.
    #[arg(long, value_name = "MODEL", value_parser = ["tiled", "measured"])]
    compute: Option<String>,
    /// Memory for the whole sweep: each of the --jobs points running at once
    /// gets its share, and a point estimated above it fails at once.
    #[command(flatten)]
    budget: BudgetArg,
}

pub fn run(a: SweepArgs) -> Result<()> {
    check_output_dir("--autotune-cache", &a.autotune_cache)?;
    let system = match (&a.system, &a.preset) {
        (Some(p), _) => Some(System::from_file(p)?),
        (None, Some(n)) => Some(presets::preset(n)?),
        _ => None,
    };
    if let Some(plan) = TrainPlan::find(&a.plan)? {
        if let Some(out) = &a.out {
            check_sweep_paths(&a, out, &train_study::FILES)?;
        }
        return train_sweep(&plan, &a, system);
    }
    let tp_plan = TpPlan::find(&a.plan)?;
    if let Some(out) = &a.out {
        let names: &[&str] = match tp_plan.is_some() {
            true => &study::FILES,
            false => &kernbench::sweep::run::OUTPUT_FILES,
        };
        check_sweep_paths(&a, out, names)?;
    }
    match tp_plan {
        Some(plan) => tp_sweep(&plan, &a, system),
        None => collective_sweep(&a, system),
    }
}

/// Refuses a sweep whose inputs are files it writes into `out`.
fn check_sweep_paths(a: &SweepArgs, out: &Path, names: &[&str]) -> Result<()> {
    let outputs: Vec<PathBuf> = names.iter().map(|f| out.join(f)).collect();
    let outs: Vec<(&str, &Path)> = outputs.iter().map(|p| ("--out", p.as_path())).collect();
    let system = SystemArg {
        system: a.system.clone(),
        preset: None,
    };
    let inputs = inputs_of(&system, a.ccl.as_deref(), Some(Path::new(&a.plan)));
    kernbench::output::check_distinct(&outs, &inputs).map_err(anyhow::Error::msg)
}

/// `sweep` of a collective plan: its points (or a shard of them) in
/// parallel into --out, resumable, then the report.
fn collective_sweep(a: &SweepArgs, system: Option<System>) -> Result<()> {
    let (ccl, ccl_text) = match &a.ccl {
        Some(p) => (
            Some(CclConfig::from_file(p)?),
            kernbench::spec::input::read_config(p, "ccl config")?,
        ),
        None => (None, kernbench::ccl::config::DEFAULT_CCL_YAML.to_string()),
    };
    if a.compute.is_some() {
        bail!(
            "--compute applies to TP and train plans; plan '{}' runs collectives, which measured compute never replaces; allowed: no --compute",
            a.plan
        );
    }
    let mut plan = Plan::load_with(&a.plan, system, ccl)?;
    plan.set_network(a.network.choice(a.budget.budget())?)
        .map_err(anyhow::Error::msg)?;
    let (out, mut opts) = sweep_options(a, &plan.file.name, plan.points().len())?;
    opts.ccl_text = ccl_text;
    if let Some(p) = &a.ccl {
        opts.ccl_origin = p.display().to_string();
    }
    let (jobs, shard) = (opts.jobs, opts.shard);
    if let Err(e) = kernbench::sweep::run::check_budget(&plan, &opts) {
        if a.out.is_none() {
            // The empty directory default_out made for this sweep.
            let _ = std::fs::remove_dir(&out);
        }
        return Err(anyhow::Error::msg(e));
    }
    let total = plan.points().len();
    let shard_note = shard.map_or(String::new(), |(k, n)| format!(", shard {k}/{n}"));
    eprintln!(
        "sweep '{}': {total} points{shard_note}, {jobs} job(s), {} -> {}",
        plan.file.name,
        if plan.file.description.is_empty() {
            "no description"
        } else {
            &plan.file.description
        },
        out.display()
    );
    let t0 = Instant::now();
    let outcome = kernbench::sweep::run(&plan, &opts).map_err(anyhow::Error::msg)?;
    report_sweep(&plan, &a.plan, &out, &outcome, t0.elapsed().as_secs_f64())
}

/// The options of a sweep of `points` points named `name` (no --ccl):
/// --jobs, --out (default: a new results/<name>-<time>), checked for this
/// run, --resume, the shard, Ctrl-C, the heap counter and the budget.
fn sweep_options(a: &SweepArgs, name: &str, points: usize) -> Result<(PathBuf, Options)> {
    let jobs = sweep_jobs(a.jobs, points)?;
    let out = match &a.out {
        Some(out) => out.clone(),
        None => default_out(name)?,
    };
    kernbench::sweep::run::check_out(&out, a.resume).map_err(anyhow::Error::msg)?;
    let shard = kernbench::sweep::run::resolve_shard(&out, a.resume, a.shard)
        .map_err(anyhow::Error::msg)?;
    let opts = Options {
        resume: a.resume,
        shard,
        stop: stop_on_ctrl_c()?,
        heap_peak: Some(kernbench::sweep::run::HeapPeak {
            reset: || crate::HEAP.reset_peak_usage(),
            read_mb: || crate::HEAP.peak_usage_as_mb() as f64,
        }),
        autotune_cache: Some(a.autotune_cache.clone()),
        budget: a.budget.budget(),
        ..Options::new(out.clone(), jobs)
    };
    Ok((out, opts))
}

/// The flag a sweep's workers read: set by the first Ctrl-C (the points in
/// progress finish); a second one quits at once.
fn stop_on_ctrl_c() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            // Quitting now: the OS releases the lock with the process.
            std::process::exit(130);
        }
        eprintln!("\ninterrupted: finishing the points in progress (Ctrl-C again to quit now)");
    })?;
    Ok(stop)
}

/// A finished sweep's report: the plan's table, the counts, the resume
/// command if interrupted; exits 130 (interrupted) or 1 (failed points).
fn report_sweep(
    plan: &Plan,
    plan_arg: &str,
    out: &Path,
    outcome: &kernbench::sweep::Outcome,
    secs: f64,
) -> Result<()> {
    match plan.file.print {
        kernbench::sweep::plan::Print::Summary => {
            print!("{}", kernbench::sweep::results::summary(&outcome.rows))
        }
        kernbench::sweep::plan::Print::Points => {
            let points = kernbench::sweep::results::load_points(out).map_err(anyhow::Error::msg)?;
            print!("{}", kernbench::sweep::results::points_table(&points))
        }
    }
    let failed = outcome.rows.iter().filter(|r| !r.error.is_empty()).count();
    println!(
        "\n{} of {} points done ({} run now in {secs:.1} s, {} from before, {failed} failed); results in {}",
        outcome.rows.len(),
        outcome.planned,
        outcome.ran,
        outcome.skipped,
        out.display()
    );
    exit_if_interrupted(outcome.interrupted, plan_arg, out);
    super::exit_if_failed(&outcome.rows);
    Ok(())
}

/// After an interrupted sweep: the command that continues it; exits 130.
fn exit_if_interrupted(interrupted: bool, plan_arg: &str, out: &Path) {
    if interrupted {
        println!(
            "interrupted: continue with  kernbench sweep --plan {plan_arg} --out {} --resume",
            out.display()
        );
        std::process::exit(130);
    }
}

/// Knobs that shrink a TP plan.
const TP_STUDY_KNOBS: &str = "fewer points (grid.tp, grid.hidden, grid.topology of the plan), fewer tokens, or a smaller base system";

/// The base system of a plan of whole programs (TP, train): refuses
/// `--ccl` (the plan names entries of the embedded ccl.yaml, `entries`
/// says where) and fixes the network model of every point; a plan whose
/// `base:` sets the model too is refused (the plan's would win unseen).
fn program_plan_base(
    a: &SweepArgs,
    system: Option<System>,
    (kind, name, entries): (&str, &str, &str),
    (sets_network, sets_compute): (bool, bool),
) -> Result<System> {
    if a.ccl.is_some() {
        bail!(
            "--ccl applies to collective plans; the {kind} plan '{name}' runs with the embedded ccl.yaml ({entries}); allowed: no --ccl"
        );
    }
    if a.network.network.is_some() && sets_network {
        bail!(
            "--network: the {kind} plan '{name}' sets network.model in its base; allowed: --network or the plan's base, not both"
        );
    }
    if a.compute.is_some() && sets_compute {
        bail!(
            "--compute: the {kind} plan '{name}' sets simulation.compute in its base; allowed: --compute or the plan's base, not both"
        );
    }
    let mut base = system.unwrap_or_else(System::embedded_default);
    let why = format!(
        "the {kind} plan '{name}' runs whole programs, not one collective an estimate can place"
    );
    a.network.set_fixed(&mut base, &why)?;
    if let Some(name) = &a.compute {
        base.spec.simulation.compute = Some(compute_model(name));
    }
    Ok(base)
}

/// `sweep` of a TP plan: its points (or a shard of them) in parallel into
/// --out, resumable, then the table.
fn tp_sweep(plan: &TpPlan, a: &SweepArgs, system: Option<System>) -> Result<()> {
    let base = program_plan_base(
        a,
        system,
        ("TP", &plan.name, "its `algorithm:` names the entry"),
        (
            sets_network_model(&plan.base),
            sets_compute_model(&plan.base),
        ),
    )?;
    let cost = kernbench::command_costs::tp_study(plan, &base).map_err(anyhow::Error::msg)?;
    cost.check("sweep", &a.budget.budget(), TP_STUDY_KNOBS)
        .map_err(|e| anyhow::anyhow!("{}: {e}", plan.name))?;
    let seconds = cost.parts.iter().map(|(_, e)| e.seconds).collect();
    let tp_study = TpStudy::new(plan, &base, seconds).map_err(anyhow::Error::msg)?;
    let total = plan.points().len();
    let (out, opts) = sweep_options(a, &plan.name, total)?;
    let shard_note = opts
        .shard
        .map_or(String::new(), |(k, n)| format!(", shard {k}/{n}"));
    eprintln!(
        "sweep '{}' (tp_block): {total} points{shard_note}, {} job(s), {} tokens, all-reduce '{}' -> {}",
        plan.name,
        opts.jobs,
        plan.tokens,
        plan.algorithm,
        out.display()
    );
    run_and_report(
        &tp_study,
        (&opts, &out, total, &a.plan),
        (study::table, &study::FILES[1..]),
    )
}

/// Knobs that shrink a train plan.
const TRAIN_STUDY_KNOBS: &str =
    "fewer points (the grid axes of the plan), smaller hidden, seq or micro_batches, or fewer sips";

/// `sweep` of a train plan: its points in parallel into --out, resumable,
/// then the table.
fn train_sweep(plan: &TrainPlan, a: &SweepArgs, system: Option<System>) -> Result<()> {
    let base = program_plan_base(
        a,
        system,
        ("train", &plan.name, "its grid.algorithm names the entries"),
        (
            sets_network_model(&plan.base),
            sets_compute_model(&plan.base),
        ),
    )?;
    let cost = kernbench::command_costs::train_study(plan, &base).map_err(anyhow::Error::msg)?;
    cost.check("sweep", &a.budget.budget(), TRAIN_STUDY_KNOBS)
        .map_err(|e| anyhow::anyhow!("{}: {e}", plan.name))?;
    let seconds = cost.parts.iter().map(|(_, e)| e.seconds).collect();
    let train = TrainStudy::new(plan, &base, seconds).map_err(anyhow::Error::msg)?;
    let total = plan.points().len();
    let (out, opts) = sweep_options(a, &plan.name, total)?;
    eprintln!(
        "sweep '{}' (train_step): {total} points, {} job(s), {} SIPs -> {}",
        plan.name,
        opts.jobs,
        plan.sips,
        out.display()
    );
    run_and_report(
        &train,
        (&opts, &out, total, &a.plan),
        (train_study::table, &train_study::FILES[1..]),
    )
}

/// How a study prints the rows that ran.
type Table<R> = fn(&[R]) -> String;

/// Runs the points of a study of whole programs (TP, train) into `out`,
/// prints its table, what ran and the files written; exits 1 naming every
/// point that failed.
fn run_and_report<S, R>(
    study: &S,
    (opts, out, total, plan_arg): (&Options, &Path, usize, &str),
    (table, files): (Table<R>, &[&str]),
) -> Result<()>
where
    S: kernbench::sweep::study::Study<Row = kernbench::sweep::study::Record<R>>,
    R: Clone,
{
    let started = Instant::now();
    let outcome = kernbench::sweep::run(study, opts).map_err(anyhow::Error::msg)?;
    let rows = kernbench::sweep::study::rows_that_ran(&outcome.rows);
    print!("{}", table(&rows));
    eprintln!(
        "{} of {total} points done ({} run now in {:.1} s, {} from before); wrote {} in {}",
        outcome.rows.len(),
        outcome.ran,
        started.elapsed().as_secs_f64(),
        outcome.skipped,
        files.join(", "),
        out.display()
    );
    exit_if_interrupted(outcome.interrupted, plan_arg, out);
    let failed: Vec<_> = outcome.rows.iter().filter(|r| r.row.is_none()).collect();
    if !failed.is_empty() {
        eprintln!("\n{} point(s) failed:", failed.len());
        for r in &failed {
            eprintln!("  [{}] {}: {}", r.index, r.point, r.error);
        }
        std::process::exit(1);
    }
    Ok(())
}
