//! `kernbench run`: one collective over a range of sizes, nccl-tests style.

use super::args::{
    AUTOTUNE_CACHE, BudgetArg, NetworkArg, SystemArg, at_least, load_ccl, parse_check, parse_size,
};
use super::paths::{check_output_dir, check_output_file, inputs_of};
use anyhow::{Result, bail};
use clap::Args;
use kernbench::ccl::{Collective, Job, ReduceOp};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    system: SystemArg,
    /// Collective configuration YAML (default: the embedded configs/ccl.yaml).
    #[arg(long, value_name = "FILE")]
    ccl: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "all_reduce")]
    collective: Collective,
    /// An entry of the ccl config (e.g. ring, hier_lanes, adr0032, tree);
    /// default: the config's `defaults`. `all`: every entry whose algorithm
    /// supports the collective on this system, one table each, then the best
    /// entry per size. `auto`: per size, the autotuner's pick among the
    /// config's `autotune:` candidates (named at the end of each line;
    /// decisions cached in --autotune-cache).
    #[arg(long, default_value = "defaults")]
    algorithm: String,
    /// Reduction of reducing collectives (nccl-tests -o).
    #[arg(short = 'o', long, value_enum, default_value = "sum")]
    op: ReduceOp,
    /// Smallest buffer per participant, bytes (K, M, G = 2^10, 2^20, 2^30);
    /// a whole number of f16 elements (nccl-tests -b).
    #[arg(short = 'b', long, default_value = "1K", allow_hyphen_values = true,
          value_parser = parse_size)]
    min_bytes: u64,
    /// Largest buffer per participant, bytes (nccl-tests -e).
    #[arg(short = 'e', long, default_value = "1M", allow_hyphen_values = true,
          value_parser = parse_size)]
    max_bytes: u64,
    /// Size multiplier from one row to the next, 2 or more (nccl-tests -f).
    #[arg(short = 'f', long, default_value_t = 2, allow_negative_numbers = true,
          value_parser = at_least(2))]
    step_factor: u64,
    /// Carry f16 values and count the wrong result elements of every
    /// participant against a reference (#wrong; slower, same timing).
    /// `-c 1` as in nccl-tests, `--verify` alone, or `-c 0` for timing only.
    #[arg(short = 'c', long = "verify", alias = "check", num_args = 0..=1, default_value = "0",
          default_missing_value = "1", value_name = "0|1", value_parser = parse_check)]
    verify: bool,
    /// Also write every size and placement as CSV (one line each).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Also write every size and placement as a JSON array.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a Chrome trace-event JSON of the runs (open in Perfetto or
    /// chrome://tracing): per-PE op spans, link occupancy, message flows.
    /// Large for big sizes: use with one size (--min-bytes = --max-bytes).
    #[arg(long, value_name = "FILE.json")]
    trace: Option<PathBuf>,
    /// Write every message the runs deliver as CSV, a row each: id,
    /// purpose (Chunk, Credit, LoadData, ...), source and destination node,
    /// bytes, the tick it was sent and the tick its last byte arrived, the
    /// ticks between, and both in µs. Run it under --network packet and
    /// flow and join the rows to see where the models part. Turns the
    /// fast-forward off (every message is written); one algorithm, not with
    /// --trace.
    #[arg(long, value_name = "FILE.csv")]
    messages: Option<PathBuf>,
    /// Stop a run whose clock passes N ticks (a report names what each
    /// unfinished PE waits for).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = at_least(1))]
    max_ticks: Option<u64>,
    /// With --algorithm auto: where the autotuner's decisions are cached
    /// (the directory `kernbench autotune --cache` uses).
    #[arg(long, value_name = "DIR", default_value = AUTOTUNE_CACHE)]
    autotune_cache: PathBuf,
    /// With --algorithm auto: ignore cached decisions (and overwrite them).
    #[arg(long)]
    retune: bool,
    /// Simulate a ring or torus of SIPs of one kind on its smallest repeat
    /// (each side cut to its least divisor of 3 or more: 64x64 runs on
    /// 4x4) when every SIP runs the same program, shifted (hier_lanes
    /// all-reduce, reduce-scatter and all-gather; ring's on a ring_1d;
    /// sizes that split evenly):
    /// the same ticks as the whole machine. Where it does not apply, the
    /// header says why and the whole machine runs. Same as `simulation: {
    /// fold: true }` in the spec (docs/model.md §Fold).
    #[arg(long)]
    fold: bool,
    #[command(flatten)]
    network: NetworkArg,
    #[command(flatten)]
    budget: BudgetArg,
}

pub fn run(a: RunArgs) -> Result<()> {
    let mut sys = a.system.load()?;
    sys.spec.simulation.fold |= a.fold;
    let ccl = load_ccl(a.ccl.as_deref())?;
    check_sizes(&a)?;
    check_outputs(&a)?;
    let size_run = kernbench::collective_run::SizeRun {
        collective: a.collective,
        op: a.op,
        algorithm: a.algorithm.clone(),
        min_bytes: a.min_bytes,
        max_bytes: a.max_bytes,
        step_factor: a.step_factor,
        verify: a.verify,
        trace: a.trace.clone(),
        messages: a.messages.clone(),
        max_ticks: a.max_ticks,
        budget: a.budget.budget(),
        autotune_cache: a.autotune_cache.clone(),
        retune: a.retune,
        network: a.network.choice(a.budget.budget())?,
    };
    let records = size_run.run(&sys, &ccl, &mut std::io::stdout().lock())?;
    for (flag, path, json) in [("--csv", &a.csv, false), ("--json", &a.json, true)] {
        if let Some(path) = path {
            kernbench::nccl_table::write(path, &records, json)
                .map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// -b and -e: whole f16 elements, the smallest first.
fn check_sizes(a: &RunArgs) -> Result<()> {
    for (flag, bytes) in [
        ("-b/--min-bytes", a.min_bytes),
        ("-e/--max-bytes", a.max_bytes),
    ] {
        if let Err((problem, allowed)) = Job::elems_of(bytes) {
            bail!("{flag}: {problem}; allowed: {allowed}");
        }
    }
    if a.max_bytes < a.min_bytes {
        bail!(
            "-b/--min-bytes {} is more than -e/--max-bytes {}; allowed: --min-bytes <= --max-bytes",
            a.min_bytes,
            a.max_bytes
        );
    }
    Ok(())
}

/// --csv, --json, --trace and --messages writable and none of them an
/// input or another.
fn check_outputs(a: &RunArgs) -> Result<()> {
    let outputs: Vec<(&str, &Path)> = [
        ("--csv", &a.csv),
        ("--json", &a.json),
        ("--trace", &a.trace),
        ("--messages", &a.messages),
    ]
    .into_iter()
    .filter_map(|(flag, p)| Some((flag, p.as_deref()?)))
    .collect();
    for &(flag, path) in &outputs[..] {
        if flag != "--trace" && flag != "--messages" {
            check_output_file(flag, path)?;
        }
    }
    check_output_dir("--autotune-cache", &a.autotune_cache)?;
    let inputs = inputs_of(&a.system, a.ccl.as_deref(), None);
    kernbench::output::check_distinct(&outputs, &inputs).map_err(anyhow::Error::msg)
}
