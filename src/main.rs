//! The kernbench command line.

/// Counts heap bytes so sweeps can report each point's peak memory.
#[global_allocator]
static HEAP: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

use anyhow::{Result, bail};
use clap::{Args, Parser, Subcommand};
use kernbench::ccl::{CclConfig, Collective, Communicator, Job, ReduceOp};
use kernbench::estimate::Budget;
use kernbench::kernel::wiring::{QueueConfig, ring};
use kernbench::machine::Machine;
use kernbench::spec::{System, presets};
use kernbench::topology::address::Space;
use kernbench::topology::{EDGE_KINDS, Node};
use kernbench::workload::{RingKernelArgs, RingRounds, ring_kernel};
use kernbench_systems::hierarchy::{Cube, Pe, Sip};
use kernbench_systems::memory::DataMode;
use kernbench_systems::program::QDir;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// kernbench: a simulator of multi-chip AI accelerators (SIPs → cube mesh →
/// PEs), their inter-PE queues and the collectives that run on them.
///
/// Every command works from any directory: the default system spec
/// (configs/topology.yaml) and the presets (configs/topologies/) are built
/// into the binary. Units: time in ticks (tick_ns in the spec, default 1 ns),
/// bandwidth in GB/s = 1e9 bytes/s.
#[derive(Parser)]
#[command(name = "kernbench", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Shown after `kernbench sweep --help`'s options, one example a line
/// (clap joins the lines of a doc-comment paragraph).
const SWEEP_EXAMPLES: &str = "Examples:
  kernbench sweep                                  # the default plan
  kernbench sweep --plan scaling --jobs 1          # 4 to 4096 SIPs, simulator cost per point
  kernbench sweep --plan my.yaml --out r/ --resume # continue an interrupted sweep
  kernbench sweep --shard 2/3 --out r2/            # one third of the points, for merge";

#[derive(Subcommand)]
enum Command {
    /// The main job: run a sweep plan — collectives × algorithms × sizes ×
    /// topologies × buffer kinds — in parallel, and write results.csv,
    /// results.json, the plan and system used, and SVG plots to
    /// results/<plan>-<timestamp>/. With no arguments, runs the embedded
    /// default plan on the embedded default system.
    #[command(after_help = SWEEP_EXAMPLES)]
    Sweep(SweepArgs),
    /// List what can be named: system presets (--preset), sweep plans
    /// (--plan), and the ccl config's algorithm entries (--algorithm) with
    /// the collectives and SIP topologies each supports.
    ///
    /// Example: kernbench list algorithms
    List(ListArgs),
    /// Combine result directories (shards of one plan) into one result set
    /// with plots.
    ///
    /// Example: kernbench merge r1/ r2/ r3/ --out all/
    Merge(MergeArgs),
    /// Build a system and describe it: node and link counts, SIP/cube/PE
    /// totals, network diameter, build time; optionally Graphviz views.
    ///
    /// Example: kernbench topo --preset torus_4096 --dot out/
    Topo(TopoArgs),
    /// Run one collective over a range of sizes and print an nccl-tests-style
    /// table: size, count, type, redop, root, then time, algbw, busbw,
    /// #wrong and % of the α-β bound out of place and in place, and the
    /// "Avg bus bandwidth" footer.
    ///
    /// There are no iteration or warmup counts (nccl-tests' -n, -w): the
    /// simulator is deterministic, so every repetition of a size gives the
    /// same ticks and one run per size and placement is the exact answer.
    ///
    /// Example: kernbench run -b 1K -e 1M -f 4 -o max -c 1 --preset mesh_16
    Run(RunArgs),
    /// Choose the fastest collective configuration per size bucket: simulate
    /// every candidate of the ccl config's `autotune:` section at each
    /// bucket (the smallest power of two >= the size) and print the
    /// decision table (chosen config, its time, the runner-up and the
    /// margin). Decisions are cached per system spec, candidate set,
    /// collective and bucket, and reused by later runs and by
    /// `--algorithm auto`. On a system with `sip_kinds`, the ranks run seed
    /// 001's heterogeneous protocol on the simulated machine instead, and the
    /// table says which ranks run a fallback. One simulation per candidate
    /// is the measurement: the simulator is deterministic, so there are no
    /// repetitions to set.
    ///
    /// Example: kernbench autotune --collective all_reduce --sizes 1K,64K,1M
    Autotune(AutotuneArgs),
    /// Measure the simulator: build the 4096-SIP system, then run ring
    /// traffic (each SIP sends to its right neighbour, round after round) and
    /// report messages and link traversals per second.
    ///
    /// Example: cargo run --release -- bench --rounds 8190
    Bench(BenchArgs),
    /// Time GEMMs (f16, C = A·B) on one SIP of the system over a grid of
    /// square (128-4096), wide (m = 16-1024) and tall (n = 16-1024) shapes,
    /// against the roofline of the PEs and memories used (docs/model.md
    /// §GEMM). Writes results.csv and three SVG figures: latency vs size,
    /// achieved vs peak TFLOP/s, simulated / roofline.
    ///
    /// Example: kernbench gemm-sweep --out gemm/
    GemmSweep(GemmSweepArgs),
    /// The 2-layer tensor-parallel MLP of ADR-0027 (ColumnParallelLinear →
    /// RowParallelLinear, seeded weights, f16) for each TP size on a system
    /// of that many SIPs: the max abs error against a single-device f32
    /// reference (with its first-order f16 bound) and rank 0's time broken
    /// down into compute, communication (hidden behind compute, exposed),
    /// and launch + wait. Units: µs.
    ///
    /// Example: kernbench tp-mlp --tp 1,2,4,8 --batch 16
    TpMlp(TpMlpArgs),
}

#[derive(Args)]
struct TpMlpArgs {
    #[command(flatten)]
    system: SystemArg,
    /// TP sizes to run, comma-separated; each runs on a copy of the system
    /// with TP × --dp SIPs (same network kind, 2-D grids as square as the
    /// count allows).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8", allow_hyphen_values = true,
          value_parser = clap::value_parser!(u32).range(1..))]
    tp: Vec<u32>,
    /// Data-parallel replicas: the world is TP × DP ranks, TP groups of
    /// consecutive ranks.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true,
          value_parser = clap::value_parser!(u32).range(1..))]
    dp: u32,
    /// Tokens (rows of X).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = parse_count)]
    batch: usize,
    /// Input features of fc1.
    #[arg(long, default_value_t = 512, allow_negative_numbers = true, value_parser = parse_count)]
    d_in: usize,
    /// fc1's output = fc2's input features (split over TP ranks, then cubes).
    #[arg(long, default_value_t = 2048, allow_negative_numbers = true, value_parser = parse_count)]
    d_hidden: usize,
    /// Output features of fc2.
    #[arg(long, default_value_t = 512, allow_negative_numbers = true, value_parser = parse_count)]
    d_out: usize,
    /// Biases: rank0 (Megatron: fc2's bias on TP rank 0 only, folded in
    /// before the all-reduce), replicate (every rank adds it after), none.
    #[arg(long, default_value = "rank0", value_parser = ["rank0", "replicate", "none"])]
    bias: String,
    /// The ccl.yaml entry whose algorithm the all-reduce runs.
    #[arg(long, default_value = "ring")]
    algorithm: String,
    #[command(flatten)]
    budget: BudgetArg,
}

#[derive(Args)]
struct GemmSweepArgs {
    #[command(flatten)]
    system: SystemArg,
    /// Directory for results.csv and the figures (created if missing; an
    /// existing one must be empty or an earlier gemm-sweep's).
    #[arg(long, value_name = "DIR", default_value = "gemm")]
    out: PathBuf,
    #[command(flatten)]
    budget: BudgetArg,
}

/// Which system to use: the embedded default unless --system or --preset.
#[derive(Args)]
struct SystemArg {
    /// System spec YAML file (default: the embedded configs/topology.yaml).
    #[arg(long, value_name = "FILE", conflicts_with = "preset")]
    system: Option<PathBuf>,
    /// A built-in preset from configs/topologies/ (mesh_16, ring_4096,
    /// ring_4096_lean, torus_4096, torus_6_rect).
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
}

impl SystemArg {
    fn load(&self) -> Result<System> {
        Ok(match (&self.system, &self.preset) {
            (Some(path), _) => System::from_file(path)?,
            (None, Some(name)) => presets::preset(name)?,
            (None, None) => System::embedded_default(),
        })
    }
}

#[derive(Args)]
struct TopoArgs {
    #[command(flatten)]
    system: SystemArg,
    /// Write Graphviz views into DIR: sips.dot (SIP network) and cube.dot
    /// (the NoC of sip0.cube0). Render with `neato -Tsvg` (positions of
    /// SIPs and routers are pinned; neato places the endpoints). DIR is
    /// created if missing; an existing one must be empty or an earlier
    /// `topo --dot`'s.
    #[arg(long, value_name = "DIR")]
    dot: Option<PathBuf>,
    #[command(flatten)]
    budget: BudgetArg,
}

/// The memory and time a run may use: a run whose estimate (docs/model.md
/// §Cost estimate) is above either is refused before anything is built.
#[derive(Args)]
struct BudgetArg {
    /// Refuse runs whose estimated peak memory exceeds SIZE (e.g. 512M, 8G;
    /// default: 80% of this machine's memory).
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true,
          value_parser = kernbench::sweep::plan::parse_bytes)]
    max_memory: Option<u64>,
    /// Refuse work estimated to take more than SECONDS to simulate in all
    /// (a sweep: its points together on --jobs; default: 3600; the estimate
    /// is good to a factor of about 4).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true, value_parser = parse_seconds)]
    max_time: Option<f64>,
}

impl BudgetArg {
    fn budget(&self) -> Budget {
        let default = Budget::of_this_machine();
        Budget {
            bytes: self.max_memory.unwrap_or(default.bytes),
            seconds: self.max_time.unwrap_or(default.seconds),
        }
    }
}

/// A whole number of at least `min`; anything else (negative, a fraction,
/// text, too large) is named with the range.
fn at_least(min: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s| match s.trim().parse::<u64>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!(
            "'{s}' is not in {min}..={}; allowed: a whole number from {min} to {}",
            u64::MAX,
            u64::MAX
        )),
    }
}

/// A count of rows or features: a whole number of at least 1.
fn parse_count(s: &str) -> Result<usize, String> {
    let n = at_least(1)(s)?;
    usize::try_from(n).map_err(|_| format!("'{s}' is too large for this machine"))
}

/// A buffer size in bytes (K, M, G suffixes); a negative one is named as such.
fn parse_size(s: &str) -> Result<u64, String> {
    if s.trim_start().starts_with('-') {
        return Err(format!(
            "'{s}' is negative; allowed: an even number of bytes >= 2 (2 bytes per element), e.g. 4096, 64K, 16M, 1G"
        ));
    }
    kernbench::sweep::plan::parse_bytes(s)
}

/// Bytes of whole f16 elements (`run`'s size rule), e.g. 16K.
fn parse_elem_bytes(s: &str) -> Result<u64, String> {
    let bytes = parse_size(s)?;
    Job::elems_of(bytes).map_err(|(problem, allowed)| format!("{problem}; allowed: {allowed}"))?;
    Ok(bytes)
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("'{s}' is not a time; use seconds > 0, e.g. 600")),
    }
}

#[derive(Args)]
struct SweepArgs {
    /// A built-in plan (default, scaling, smoke, bounds, large; tp: the TP scaling
    /// study of a transformer block) or a plan YAML file.
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
    /// Memory for the whole sweep: each of the --jobs points running at once
    /// gets its share, and a point estimated above it fails at once.
    #[command(flatten)]
    budget: BudgetArg,
}

/// `-c`: 1 checks, 0 does not (nccl-tests' values; true/false also work).
fn parse_check(s: &str) -> Result<bool, String> {
    match s {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(format!(
            "'{s}' is not a check setting; use 1 (check) or 0 (timing only)"
        )),
    }
}

fn parse_shard(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("'{s}' is not a shard; use K/N with 1 <= K <= N, e.g. 2/3");
    let (k, n) = s.split_once('/').ok_or_else(bad)?;
    let (k, n): (usize, usize) = (
        k.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if k == 0 || n == 0 || k > n {
        return Err(bad());
    }
    Ok((k, n))
}

#[derive(Args)]
struct ListArgs {
    /// What to list (default: all three).
    #[arg(value_enum, allow_hyphen_values = true)]
    what: Option<ListWhat>,
    /// Collective configuration YAML whose entries to list (default: the
    /// embedded configs/ccl.yaml).
    #[arg(long, value_name = "FILE")]
    ccl: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ListWhat {
    Presets,
    Plans,
    Algorithms,
}

fn list(a: ListArgs) -> Result<()> {
    use kernbench::catalog;
    let ccl = match &a.ccl {
        Some(path) => CclConfig::from_file(path)?,
        None => CclConfig::embedded_default(),
    };
    let parts = [
        (ListWhat::Presets, catalog::presets()),
        (ListWhat::Plans, catalog::plans()),
        (ListWhat::Algorithms, catalog::algorithms(&ccl)),
    ];
    let shown: Vec<String> = parts
        .into_iter()
        .filter(|(w, _)| a.what.is_none_or(|x| x == *w))
        .map(|p| p.1)
        .collect();
    print!("{}", shown.join("\n"));
    Ok(())
}

#[derive(Args)]
struct MergeArgs {
    /// Result directories of the same plan (e.g. its shards).
    #[arg(required = true, value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// Where to write the merged result set.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

#[derive(Args)]
struct AutotuneArgs {
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

#[derive(Args)]
struct RunArgs {
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
    #[command(flatten)]
    budget: BudgetArg,
}

/// Where `autotune` and `run --algorithm auto` cache decisions by default.
const AUTOTUNE_CACHE: &str = ".kernbench/autotune";

#[derive(Args)]
struct BenchArgs {
    /// SIPs on the benchmark ring (1 cube, 1 PE each; only inter-SIP links cost time).
    #[arg(long, default_value_t = 4096, allow_negative_numbers = true,
          value_parser = clap::value_parser!(u32).range(2..))]
    sips: u32,
    /// Rounds of ring traffic; round r+1 of a SIP starts when it received round r.
    #[arg(long, default_value_t = 8190, allow_negative_numbers = true,
          value_parser = at_least(1))]
    rounds: u64,
    /// Bytes each SIP sends per round (the ring kernel: whole f16 elements).
    #[arg(long, default_value_t = 16384, allow_negative_numbers = true,
          value_parser = at_least(1))]
    bytes: u64,
    /// Skip the 4096-SIP × 4×4-cube × 8-PE build measurement.
    #[arg(long)]
    no_build: bool,
    /// Skip the ring-traffic measurement.
    #[arg(long)]
    no_traffic: bool,
    /// Skip the ring-kernel measurement (the same ring as a kernel: send
    /// east / recv west / add, through IPCQ queues with credits, timing-only).
    #[arg(long)]
    no_kernel: bool,
    /// Also run a ring all-reduce through the collective library on the same
    /// ring (--sips SIPs) and report wall time, peak memory and the program
    /// every participant shares (the scale issue's benchmark: 64M on 4096 SIPs).
    #[arg(long)]
    collective: bool,
    /// Also run the same all-reduce through the process group (one worker
    /// per rank, `kernbench::dist`), for the runtime's overhead side by side.
    #[arg(long)]
    process_group: bool,
    /// Buffer per participant for --collective, bytes (K, M, G = 2^10, 2^20, 2^30).
    #[arg(long, default_value = "64M", allow_hyphen_values = true, value_parser = parse_elem_bytes)]
    collective_bytes: u64,
    /// IPCQ slot size for the ring kernel, in bytes of whole f16 elements
    /// (one chunk per message when it is at least --bytes).
    #[arg(long, default_value = "16384", allow_hyphen_values = true, value_parser = parse_elem_bytes)]
    slot_bytes: u64,
    /// IPCQ slots per queue for the ring kernel.
    #[arg(long, default_value_t = 2, allow_negative_numbers = true,
          value_parser = clap::value_parser!(u32).range(1..))]
    slots: u32,
    #[command(flatten)]
    budget: BudgetArg,
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Topo(a) => topo(a),
        Command::Bench(a) => bench(a),
        Command::Run(a) => run(a),
        Command::Autotune(a) => autotune(a),
        Command::Sweep(a) => sweep(a),
        Command::Merge(a) => merge(a),
        Command::List(a) => list(a),
        Command::GemmSweep(a) => gemm_sweep(a),
        Command::TpMlp(a) => tp_mlp(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}

/// Knobs that shrink an autotune.
const AUTOTUNE_KNOBS: &str = "fewer or smaller --sizes, fewer candidates (autotune.configs of --ccl), a smaller system (--preset, --system)";

fn autotune(a: AutotuneArgs) -> Result<()> {
    use kernbench::autotune::{Tuner, report};
    check_output_file("--csv", &a.csv)?;
    check_output_dir("--cache", &a.cache)?;
    let inputs = inputs_of(&a.system, a.ccl.as_deref(), None);
    kernbench::output::check_distinct(&[("--csv", &a.csv)], &inputs).map_err(anyhow::Error::msg)?;
    use kernbench::estimate::commands;
    use std::sync::Arc;
    let sys = a.system.load()?;
    let ccl = match &a.ccl {
        Some(path) => CclConfig::from_file(path)?,
        None => CclConfig::embedded_default(),
    };
    let heterogeneous = sys.kinds.heterogeneous();
    let tuner = Tuner::new(&sys, &ccl);
    // Seed 001's protocol caches nothing; the tuner simulates what its cache lacks.
    let (candidates, to_tune) = if heterogeneous {
        (ccl.candidates.clone(), report::buckets(&a.sizes))
    } else {
        let cache = (a.cache.as_path(), a.retune);
        let to_tune = commands::buckets_to_tune(&sys, &tuner, cache, a.collective, &a.sizes);
        (tuner.candidates().to_vec(), to_tune)
    };
    let cost = commands::autotune(&sys, &candidates, a.collective, &to_tune);
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
    let tick = move |candidate: &str, bucket: u64| {
        let what = format!("{candidate} at {bucket} B");
        // Candidates that cannot run here fail at once: not in the estimate.
        if let Some(&s) = seconds.get(&what) {
            progress.tick(s, &what);
        }
    };
    let mut rows = Vec::new();
    if heterogeneous {
        println!("# heterogeneous: seed 001's protocol on the simulated machine (not cached)");
        for b in report::buckets(&a.sizes) {
            let bucket = report::heterogeneous(&sys, &ccl, a.collective, &[b]);
            rows.extend(bucket.map_err(|e| anyhow::anyhow!("--sizes (bucket {b} B): {e}"))?);
            candidates.iter().for_each(|c| tick(&c.name, b));
        }
    } else {
        let mut tuner = tuner
            .with_cache(&a.cache, a.retune)
            .with_progress(Arc::new(tick));
        for b in report::buckets(&a.sizes) {
            let bucket = report::homogeneous(&mut tuner, &sys, a.collective, &[b]);
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
    }
    bar.finish();
    print!("{}", report::table(&rows));
    report::write_csv(&a.csv, &rows).map_err(|e| anyhow::anyhow!("--csv: {e}"))?;
    println!("# wrote {}", a.csv.display());
    Ok(())
}

/// Knobs that shrink a gemm-sweep: its one SIP.
const GEMM_KNOBS: &str = "fewer cubes (sip.cube_mesh) or PEs per cube in the spec";

fn gemm_sweep(a: GemmSweepArgs) -> Result<()> {
    use kernbench::gemm::sweep;
    let outputs = sweep::FILES.map(|f| a.out.join(f));
    check_distinct_files("--out", &outputs, &a.system)?;
    let sys = a.system.load()?;
    let shapes = sweep::default_grid();
    let one_sip = sweep::one_sip(&sys).map_err(anyhow::Error::msg)?;
    let cost =
        kernbench::estimate::commands::gemm_sweep(&one_sip, &shapes, rayon::current_num_threads());
    cost.check("gemm-sweep", &a.budget.budget(), GEMM_KNOBS)
        .map_err(|e| anyhow::anyhow!("{}: {e}", sys.origin))?;
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
    println!(
        "{:>7} {:>6} {:>6} {:>6} {:>12} {:>12} {:>8} {:>9} {:>9} {:>7}",
        "family", "m", "k", "n", "time(us)", "bound(us)", "set by", "TFLOP/s", "peak", "sim/rf"
    );
    for r in &rows {
        println!(
            "{:>7} {:>6} {:>6} {:>6} {:>12.3} {:>12.3} {:>8} {:>9.2} {:>9.2} {:>7.3}",
            r.family,
            r.m,
            r.k,
            r.n,
            r.time_ns / 1e3,
            r.roofline_ns / 1e3,
            r.bound_by,
            r.achieved_tflops,
            r.peak_tflops,
            r.sim_over_roofline
        );
    }
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

fn tp_mlp(a: TpMlpArgs) -> Result<()> {
    use kernbench::tp::{BiasPolicy, mlp};
    let base = a.system.load()?;
    let ccl = kernbench::ccl::CclConfig::embedded_default();
    let bias = match a.bias.as_str() {
        "rank0" => Some(BiasPolicy::Rank0),
        "replicate" => Some(BiasPolicy::Replicate),
        _ => None,
    };
    let shape = mlp::MlpShape {
        batch: a.batch,
        d_in: a.d_in,
        d_hidden: a.d_hidden,
        d_out: a.d_out,
    };
    let config = ccl.entry(&a.algorithm).map_err(|(problem, allowed)| {
        anyhow::anyhow!("--algorithm: {problem}; allowed: {allowed}")
    })?;
    check_hidden_split(&a, base.cubes_per_sip())?;
    let cost = kernbench::estimate::commands::tp_mlp(&base, config, &a.tp, a.dp, shape)
        .map_err(anyhow::Error::msg)?;
    cost.check("tp-mlp", &a.budget.budget(), TP_MLP_KNOBS)
        .map_err(|e| anyhow::anyhow!("{}: {e}", base.origin))?;
    let weights = cost.weights();
    let progress = kernbench::progress::Progress::new("tp-mlp", "TP sizes", &weights);
    let tick_us = base.spec.system.tick_ns / 1e3;
    println!(
        "# tp-mlp: X ({} x {}) -> fc1 ColumnParallel -> ({} x {}) -> fc2 RowParallel -> ({} x {}); bias {}; all-reduce '{}'; {} cubes x {} PEs per SIP; times of rank 0 in us",
        a.batch,
        a.d_in,
        a.batch,
        a.d_hidden,
        a.batch,
        a.d_out,
        a.bias,
        a.algorithm,
        base.cubes_per_sip(),
        base.pes_per_cube()
    );
    println!(
        "{:>3} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "tp",
        "world",
        "max|err|",
        "max|ref|",
        "total",
        "compute",
        "comm",
        "hidden",
        "exposed",
        "launch+wait"
    );
    for (k, &tp) in a.tp.iter().enumerate() {
        // The estimate has built this system already: the product fits.
        let sys = base.with_sips(tp * a.dp)?;
        let r = mlp::run_mlp(&sys, &ccl, &a.algorithm, tp, shape, bias)?;
        progress.tick(weights[k], &cost.parts[k].0);
        let b = r.breakdown;
        let us = |t: u64| t as f64 * tick_us;
        println!(
            "{:>3} {:>5} {:>10.3e} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>12.3}",
            tp,
            r.world,
            r.max_abs_err,
            r.max_abs_ref,
            us(b.total),
            us(b.compute),
            us(b.communication),
            us(b.hidden),
            us(b.communication - b.hidden),
            us(b.launch)
        );
        if !r.within_bound {
            anyhow::bail!(
                "tp {tp}: an output element is outside its f16 error bound (max |err| {:.3e}): a simulator bug, please report it",
                r.max_abs_err
            );
        }
    }
    progress.finish();
    println!(
        "# total = compute + exposed + launch+wait; comm = hidden + exposed (each collective's own time); max|err| over every rank's output against the single-device f32 reference, each element checked against its first-order f16 bound (docs/model.md §Tensor parallelism)"
    );
    Ok(())
}

/// fc1's outputs (= fc2's inputs) split over each TP size's ranks, then
/// over the cubes of each SIP: --d-hidden must divide evenly for every one.
fn check_hidden_split(a: &TpMlpArgs, cubes: u32) -> Result<()> {
    let parts = |tp: u32| u64::from(tp) * u64::from(cubes);
    let gcd = |mut x: u64, mut y: u64| {
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    let all = a.tp.iter().fold(1u64, |l, &tp| {
        let p = parts(tp);
        (l / gcd(l, p)).saturating_mul(p)
    });
    let splits = |tp: &u32| (a.d_hidden as u64).is_multiple_of(parts(*tp));
    if let Some(&tp) = a.tp.iter().find(|tp| !splits(tp)) {
        bail!(
            "--d-hidden {} over --tp {tp} ranks and the {cubes} cubes of each SIP (sip.cube_mesh) is not a whole number per cube; allowed: a --d-hidden that is a multiple of {} for --tp {}",
            a.d_hidden,
            all,
            a.tp.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    Ok(())
}

/// Knobs that shrink a tp-mlp.
const TP_MLP_KNOBS: &str =
    "fewer or smaller --tp sizes, a smaller --dp, --batch or --d-in/--d-hidden/--d-out";

/// Knobs that shrink a build.
const BUILD_KNOBS: &str =
    "fewer SIPs (system.sips.count), fewer cubes (sip.cube_mesh), PEs or NoC routers";

fn topo(a: TopoArgs) -> Result<()> {
    if let Some(dir) = &a.dot {
        let outputs = DOT_FILES.map(|f| dir.join(f));
        check_distinct_files("--dot", &outputs, &a.system)?;
        kernbench::output::claim_dir("--dot", dir, "topo --dot").map_err(anyhow::Error::msg)?;
    }
    let sys = a.system.load()?;
    kernbench::estimate::Estimate::build(&sys)
        .check(&a.budget.budget(), BUILD_KNOBS)
        .map_err(|e| anyhow::anyhow!("{}: {e}", sys.origin))?;
    let t0 = Instant::now();
    let mut m = Machine::build(&sys)?;
    let build = t0.elapsed();
    let t = &m.topology;
    let s = &sys.spec;
    println!("system      {}", sys.origin);
    println!(
        "sips        {} ({}, grid {}x{})",
        t.sips,
        t.kind.name(),
        t.grid.0,
        t.grid.1
    );
    println!(
        "per SIP     {} cubes ({}x{} mesh), {} PEs per cube ({} per corner x {} corners), {}x{} NoC routers per cube",
        t.cubes_per_sip(),
        t.cube_mesh.0,
        t.cube_mesh.1,
        t.pes_per_cube,
        s.cube.pe_layout.pe_per_corner,
        s.cube.pe_layout.corners,
        t.noc.0,
        t.noc.1
    );
    let cubes = t.sips as u64 * t.cubes_per_sip() as u64;
    println!(
        "totals      {} SIPs x {} cubes x {} PEs = {} PEs ({} cubes)",
        t.sips,
        t.cubes_per_sip(),
        t.pes_per_cube,
        cubes * t.pes_per_cube as u64,
        cubes
    );
    println!("\nnodes by kind");
    for (kind, n) in t.node_counts() {
        println!("  {:<16}{n:>12}", kind.name());
    }
    print_links(&m, s);
    let world = &mut m.engine.world;
    let entities = [
        ("Sip", world.query::<&Sip>().iter(world).count()),
        ("Cube", world.query::<&Cube>().iter(world).count()),
        ("Pe", world.query::<&Pe>().iter(world).count()),
    ];
    println!("\nECS entities");
    for (name, n) in entities {
        println!("  {name:<16}{n:>12}");
    }
    let (hops, from, to) = m.topology.diameter();
    println!(
        "\ndiameter    {hops} hops (PE to PE, e.g. {} -> {})",
        m.topology.node(from),
        m.topology.node(to)
    );
    println!(
        "build       {:.3} s, peak memory {}",
        build.as_secs_f64(),
        kernbench::report::gib(kernbench::report::peak_rss_bytes())
    );
    if let Some(dir) = a.dot {
        write_dot(&m, &dir)?;
    }
    Ok(())
}

/// `topo`'s table of directed links per edge kind with their parameters.
fn print_links(m: &Machine, s: &kernbench::spec::types::SystemSpec) {
    let links = m.engine.links();
    let mut per_kind = [0u64; 4];
    for l in 0..links.len() as u32 {
        per_kind[kernbench::topology::edge_kind(links.class_index(l)) as usize] += 1;
    }
    println!("\ndirected links by edge kind");
    println!(
        "  {:<12}{:>12}{:>16}{:>14}{:>14}  ideal",
        "kind", "links", "bandwidth GB/s", "latency ns", "packet bytes"
    );
    for (i, name) in EDGE_KINDS.iter().enumerate() {
        let spec = [
            &s.links.noc,
            &s.links.ucie,
            &s.links.inter_sip,
            &s.links.pcie,
        ][i];
        println!(
            "  {name:<12}{:>12}{:>16}{:>14}{:>14}  {}",
            per_kind[i], spec.bandwidth_gbps, spec.latency_ns, spec.packet_bytes, spec.ideal
        );
    }
}

/// The files `topo --dot` writes.
const DOT_FILES: [&str; 2] = ["sips.dot", "cube.dot"];

fn write_dot(m: &Machine, dir: &Path) -> Result<()> {
    let texts = [m.topology.sip_dot(), m.topology.cube_dot(0, 0)];
    for (name, text) in DOT_FILES.iter().zip(texts) {
        let path = dir.join(name);
        kernbench::output::write_file(&path, text.as_bytes())
            .map_err(|e| anyhow::anyhow!("--dot: {e}"))?;
        println!("wrote       {}", path.display());
    }
    Ok(())
}

/// Knobs that shrink a bench.
const BENCH_KNOBS: &str = "fewer --rounds or --sips, smaller --bytes or --collective-bytes, a larger --slot-bytes, or fewer phases (--no-build, --no-traffic, --no-kernel)";

fn bench(a: BenchArgs) -> Result<()> {
    if !a.no_kernel && !a.bytes.is_multiple_of(2) {
        bail!(
            "--bytes {}: the ring kernel sends whole f16 elements; allowed: an even number of bytes, or --no-kernel",
            a.bytes
        );
    }
    let mut spec = presets::preset("ring_4096_lean")?.spec;
    spec.system.sips.count = a.sips;
    let sys = System::from_spec(spec, "ring_4096_lean (--sips)")?;
    let tcm = sys.spec.memory.tcm.size_bytes;
    let area = u128::from(a.slot_bytes) * u128::from(a.slots);
    if !a.no_kernel && area > u128::from(tcm) {
        bail!(
            "--slot-bytes {} x --slots {} = {area} B of IPCQ slots per queue do not fit in a PE's TCM of {tcm} B (memory.tcm.size_bytes of ring_4096_lean); allowed: --slot-bytes x --slots at most {tcm} B, or --no-kernel",
            a.slot_bytes,
            a.slots
        );
    }
    let cost = bench_cost(&a, &sys)?;
    cost.check("bench", &a.budget.budget(), BENCH_KNOBS)
        .map_err(anyhow::Error::msg)?;
    let chunks = u64::from(a.sips)
        .checked_mul(a.rounds)
        .and_then(|m| m.checked_mul(a.bytes.div_ceil(a.slot_bytes)));
    if chunks.is_none() {
        bail!(
            "--sips {} x --rounds {} x {} chunks per send is more messages than 64 bits count; allowed: fewer --rounds",
            a.sips,
            a.rounds,
            a.bytes.div_ceil(a.slot_bytes)
        );
    }
    let weights = cost.weights();
    let progress = kernbench::progress::Progress::new("bench", "phases", &weights);
    for (k, (phase, _)) in cost.parts.iter().enumerate() {
        match phase.as_str() {
            "build" => bench_build()?,
            "traffic" => bench_traffic(&a, &sys)?,
            "kernel" => bench_kernel(&a, &sys)?,
            "collective" => bench_collective(&a, &sys)?,
            _ => bench_process_group(&a, &sys)?,
        }
        progress.tick(weights[k], phase);
    }
    progress.finish();
    Ok(())
}

/// The phases `a` asks for, in order, each with its estimate.
fn bench_cost(a: &BenchArgs, sys: &System) -> Result<kernbench::estimate::Cost> {
    use kernbench::estimate::{Estimate, commands};
    let mut cost = kernbench::estimate::Cost::default();
    if !a.no_build {
        cost.add("build", Estimate::build(&presets::preset("ring_4096")?));
    }
    if !a.no_traffic {
        cost.add("traffic", commands::ring_traffic(sys, a.rounds, a.bytes));
    }
    if !a.no_kernel {
        let e = commands::ring_kernel(sys, a.rounds, a.bytes, a.slot_bytes);
        cost.add("kernel", e);
    }
    let ring = CclConfig::embedded_default()
        .entry("ring")
        .map_err(|(p, _)| anyhow::anyhow!(p))?
        .clone();
    let job = Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems: (a.collective_bytes / 2) as usize,
    };
    if a.collective || a.process_group {
        Communicator::check_before_build(sys, &ring, &job)
            .map_err(|e| anyhow::anyhow!("--collective-bytes {}: {e}", a.collective_bytes))?;
    }
    let all_reduce = Estimate::collective(sys, &ring, &job, false, false);
    if a.collective {
        cost.add("collective", all_reduce);
    }
    if a.process_group {
        let mut e = commands::process_group(sys, sys.n_sips());
        e.seconds += all_reduce.seconds;
        e.peak_bytes += all_reduce.peak_bytes;
        cost.add("process group", e);
    }
    Ok(cost)
}

/// Building the 4096-SIP system.
fn bench_build() -> Result<()> {
    let sys = presets::preset("ring_4096")?;
    let t0 = Instant::now();
    let m = Machine::build(&sys)?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "build   ring_4096: {} PEs, {} directed links in {secs:.3} s, peak memory {}",
        sys.total_pes(),
        m.engine.links().len(),
        kernbench::report::gib(kernbench::report::peak_rss_bytes())
    );
    Ok(())
}

/// The ring all-reduce of `bench_collective` written as a distributed
/// program: every rank allocates its buffer and joins the collective.
fn bench_process_group(a: &BenchArgs, sys: &System) -> Result<()> {
    use kernbench::dist::{DPPolicy, init_process_group_within};
    let elems = (a.collective_bytes / 2) as usize;
    let t0 = Instant::now();
    let ccl = CclConfig::embedded_default();
    let budget = a.budget.budget();
    let mut pg = init_process_group_within(sys, &ccl, "ring", DataMode::TimingOnly, &budget)?;
    let setup = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let ticks = std::sync::Mutex::new(0);
    let n = pg.world_size;
    pg.spawn(n, |ctx| {
        let t = ctx.empty((1, elems), DPPolicy::cube_rows(1))?;
        let r = ctx.all_reduce(&t, ReduceOp::Sum)?;
        *ticks.lock().expect("no worker panicked holding it") = r.ticks;
        Ok(())
    })?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "allreduce ring {} SIPs x {} B through the process group ({n} workers): {} ticks simulated; process group + wiring {setup:.3} s",
        a.sips,
        a.collective_bytes,
        ticks.into_inner().unwrap_or(0)
    );
    println!(
        "        {secs:.3} s wall, peak memory {}",
        kernbench::report::gib(kernbench::report::peak_rss_bytes())
    );
    Ok(())
}

fn bench_collective(a: &BenchArgs, sys: &System) -> Result<()> {
    let elems = (a.collective_bytes / 2) as usize;
    let job = Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems,
    };
    let ccl = CclConfig::embedded_default();
    let config = ccl.entry("ring").map_err(|(p, _)| anyhow::anyhow!(p))?;
    let t0 = Instant::now();
    let mut machine = Machine::build_with(sys, DataMode::TimingOnly)?;
    let comm = Communicator::new(&mut machine, config)?;
    let setup = t0.elapsed().as_secs_f64();
    let program = comm.programs(&machine, job)?[0].1.program.len();
    let t0 = Instant::now();
    let r = comm.run(&mut machine, job)?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "allreduce ring {} SIPs x {} B: {} ticks simulated ({:.1}% of bound); one {program}-op program shared by every participant; machine + wiring {setup:.3} s",
        a.sips, a.collective_bytes, r.ticks, r.pct_of_bound
    );
    println!(
        "        {secs:.3} s wall, peak memory {}",
        kernbench::report::gib(kernbench::report::peak_rss_bytes())
    );
    Ok(())
}

fn bench_traffic(a: &BenchArgs, sys: &System) -> Result<()> {
    let mut m = Machine::build_with(sys, DataMode::TimingOnly)?;
    let nodes = (0..a.sips)
        .map(|s| {
            m.topology.id(Node::Pe {
                sip: s,
                cube: 0,
                pe: 0,
            })
        })
        .collect();
    let work = RingRounds::new(nodes, a.bytes, a.rounds);
    let messages = work.messages();
    m.engine.set_traffic(work);
    let t0 = Instant::now();
    let r = m.engine.run().map_err(anyhow::Error::msg)?;
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(r.messages, messages, "every message is delivered");
    println!(
        "ring    {} SIPs x {} rounds x {} B: {} messages, {} link traversals (packet-hops), simulated {} ticks",
        a.sips, a.rounds, a.bytes, r.messages, r.hops, r.end_tick
    );
    println!(
        "        {secs:.3} s wall: {:.2} M messages/s, {:.2} M link traversals/s, {} schedule runs",
        r.messages as f64 / secs / 1e6,
        r.hops as f64 / secs / 1e6,
        r.steps
    );
    Ok(())
}

fn bench_kernel(a: &BenchArgs, sys: &System) -> Result<()> {
    let mut m = Machine::build_with(sys, DataMode::TimingOnly)?;
    let pes: Vec<u32> = (0..a.sips).collect();
    let q = QueueConfig {
        buffer: Space::Tcm,
        n_slots: a.slots,
        slot_size: a.slot_bytes,
    };
    let t0 = Instant::now();
    let installed_at = m.install(ring(&pes, QDir::E, q).map_err(anyhow::Error::msg)?)?;
    let install_secs = t0.elapsed().as_secs_f64();
    let args = RingKernelArgs {
        rounds: a.rounds as usize,
        elems: (a.bytes / 2) as usize,
    };
    let messages_before = m
        .engine
        .world
        .resource::<kernbench_systems::network::NetCounters>()
        .delivered;
    let t0 = Instant::now();
    let r = m.launch(ring_kernel, &args, &pes)?;
    let secs = t0.elapsed().as_secs_f64();
    // `bench` checked that the count fits.
    let chunks = u64::from(a.sips) * a.rounds * a.bytes.div_ceil(a.slot_bytes);
    println!(
        "kernel  {} PEs x {} rounds x (send {} B / recv / add), {} slots x {} B: installed at tick {installed_at} ({install_secs:.3} s), kernels done at tick {}",
        a.sips, a.rounds, a.bytes, a.slots, a.slot_bytes, r.kernel_end
    );
    println!(
        "        {secs:.3} s wall: {chunks} chunk transfers ({:.2} M/s), {} messages with credits and launches ({:.2} M/s)",
        chunks as f64 / secs / 1e6,
        r.messages - messages_before,
        (r.messages - messages_before) as f64 / secs / 1e6
    );
    Ok(())
}

fn run(a: RunArgs) -> Result<()> {
    let sys = a.system.load()?;
    let ccl = match &a.ccl {
        Some(path) => CclConfig::from_file(path)?,
        None => CclConfig::embedded_default(),
    };
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
    let outputs: Vec<(&str, &Path)> = [
        ("--csv", &a.csv),
        ("--json", &a.json),
        ("--trace", &a.trace),
    ]
    .into_iter()
    .filter_map(|(flag, p)| Some((flag, p.as_deref()?)))
    .collect();
    for &(flag, path) in &outputs[..] {
        if flag != "--trace" {
            check_output_file(flag, path)?;
        }
    }
    check_output_dir("--autotune-cache", &a.autotune_cache)?;
    let inputs = inputs_of(&a.system, a.ccl.as_deref(), None);
    kernbench::output::check_distinct(&outputs, &inputs).map_err(anyhow::Error::msg)?;
    let size_run = kernbench::collective_run::SizeRun {
        collective: a.collective,
        op: a.op,
        algorithm: a.algorithm.clone(),
        min_bytes: a.min_bytes,
        max_bytes: a.max_bytes,
        step_factor: a.step_factor,
        verify: a.verify,
        trace: a.trace.clone(),
        max_ticks: a.max_ticks,
        budget: a.budget.budget(),
        autotune_cache: a.autotune_cache.clone(),
        retune: a.retune,
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

/// Refuses an output file that cannot be written before anything runs:
/// a directory, or a path whose directory does not exist.
fn check_output_file(flag: &str, path: &Path) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if path.is_dir() {
        bail!(
            "{flag} {}: is a directory; allowed: a file path, e.g. {}",
            path.display(),
            path.join("results.csv").display()
        );
    }
    if let Some(dir) = dir.filter(|d| !d.is_dir()) {
        bail!(
            "{flag} {}: the directory {} does not exist; allowed: a file path in an existing directory",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

/// The input files of a command: --system, --ccl, --plan (if a file).
fn inputs_of<'a>(
    system: &'a SystemArg,
    ccl: Option<&'a Path>,
    plan: Option<&'a Path>,
) -> Vec<(&'static str, &'a Path)> {
    [
        ("--system", system.system.as_deref()),
        ("--ccl", ccl),
        ("--plan", plan.filter(|p| p.is_file())),
    ]
    .into_iter()
    .filter_map(|(flag, p)| Some((flag, p?)))
    .collect()
}

/// Refuses a command whose output files (in the directory of `flag`) include
/// its --system file.
fn check_distinct_files(flag: &str, outputs: &[PathBuf], system: &SystemArg) -> Result<()> {
    let outs: Vec<(&str, &Path)> = outputs.iter().map(|p| (flag, p.as_path())).collect();
    kernbench::output::check_distinct(&outs, &inputs_of(system, None, None))
        .map_err(anyhow::Error::msg)
}

/// Refuses a directory flag naming something that is not a directory
/// (it is created if missing).
fn check_output_dir(flag: &str, path: &Path) -> Result<()> {
    if path.exists() && !path.is_dir() {
        bail!(
            "{flag} {}: not a directory; allowed: a directory path (created if missing)",
            path.display()
        );
    }
    Ok(())
}

/// Refuses a sweep whose inputs are files it writes into `out`.
fn check_sweep_paths(a: &SweepArgs, out: &Path, tp: bool) -> Result<()> {
    let names: &[&str] = match tp {
        true => &kernbench::tp::study::FILES,
        false => &kernbench::sweep::run::OUTPUT_FILES,
    };
    let outputs: Vec<PathBuf> = names.iter().map(|f| out.join(f)).collect();
    let outs: Vec<(&str, &Path)> = outputs.iter().map(|p| ("--out", p.as_path())).collect();
    let system = SystemArg {
        system: a.system.clone(),
        preset: None,
    };
    let inputs = inputs_of(&system, a.ccl.as_deref(), Some(Path::new(&a.plan)));
    kernbench::output::check_distinct(&outs, &inputs).map_err(anyhow::Error::msg)
}

fn sweep(a: SweepArgs) -> Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    check_output_dir("--autotune-cache", &a.autotune_cache)?;
    let system = match (&a.system, &a.preset) {
        (Some(p), _) => Some(System::from_file(p)?),
        (None, Some(n)) => Some(presets::preset(n)?),
        _ => None,
    };
    let tp_plan = kernbench::tp::study::TpPlan::find(&a.plan)?;
    if let Some(out) = &a.out {
        check_sweep_paths(&a, out, tp_plan.is_some())?;
    }
    if let Some(plan) = tp_plan {
        return tp_sweep(&plan, &a, system);
    }
    let (ccl, ccl_text) = match &a.ccl {
        Some(p) => (
            Some(CclConfig::from_file(p)?),
            kernbench::spec::input::read_config(p, "ccl config")?,
        ),
        None => (None, kernbench::ccl::config::DEFAULT_CCL_YAML.to_string()),
    };
    let plan = kernbench::sweep::Plan::load_with(&a.plan, system, ccl)?;
    let jobs = sweep_jobs(a.jobs, plan.points().len())?;
    let out = match &a.out {
        Some(out) => out.clone(),
        None => default_out(&plan.file.name)?,
    };
    kernbench::sweep::run::check_out(&out, a.resume).map_err(anyhow::Error::msg)?;
    let shard = kernbench::sweep::run::resolve_shard(&out, a.resume, a.shard)
        .map_err(anyhow::Error::msg)?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            // Quitting now: the OS releases the lock with the process.
            std::process::exit(130);
        }
        eprintln!("\ninterrupted: finishing the points in progress (Ctrl-C again to quit now)");
    })?;
    let heap_peak = Some(kernbench::sweep::run::HeapPeak {
        reset: || HEAP.reset_peak_usage(),
        read_mb: || HEAP.peak_usage_as_mb() as f64,
    });
    let opts = kernbench::sweep::Options {
        out: out.clone(),
        jobs,
        resume: a.resume,
        shard,
        stop,
        ccl_text,
        ccl_origin: a
            .ccl
            .as_ref()
            .map_or("<embedded ccl.yaml>".into(), |p| p.display().to_string()),
        heap_peak,
        autotune_cache: Some(a.autotune_cache.clone()),
        budget: a.budget.budget(),
    };
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

/// A finished sweep's report: the plan's table, the counts, the resume
/// command if interrupted; exits 130 (interrupted) or 1 (failed points).
fn report_sweep(
    plan: &kernbench::sweep::Plan,
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
    if outcome.interrupted {
        println!(
            "interrupted: continue with  kernbench sweep --plan {plan_arg} --out {} --resume",
            out.display()
        );
        std::process::exit(130);
    }
    exit_if_failed(&outcome.rows);
    Ok(())
}

/// `--jobs`: at least 1; more than the points or 4x the cores is clamped
/// with a note (default: the cores).
/// `sweep` of a TP plan: every point, a table, results.csv and figures.
fn tp_sweep(
    plan: &kernbench::tp::study::TpPlan,
    a: &SweepArgs,
    system: Option<System>,
) -> Result<()> {
    use kernbench::tp::study;
    if a.resume || a.shard.is_some() || a.ccl.is_some() {
        bail!(
            "--resume, --shard and --ccl apply to collective plans; the TP plan '{}' runs whole in one go with the embedded ccl.yaml; allowed: --out, --jobs, --system, --preset",
            plan.name
        );
    }
    let base = system.unwrap_or_else(System::embedded_default);
    let cost = kernbench::estimate::commands::tp_study(plan, &base).map_err(anyhow::Error::msg)?;
    cost.check("sweep", &a.budget.budget(), TP_STUDY_KNOBS)
        .map_err(|e| anyhow::anyhow!("{}: {e}", plan.name))?;
    let total = plan.points().len();
    let jobs = sweep_jobs(a.jobs, total)?;
    let out = match &a.out {
        Some(out) => out.clone(),
        None => default_out(&plan.name)?,
    };
    kernbench::output::claim_dir("--out", &out, "sweep (TP plan)").map_err(anyhow::Error::msg)?;
    eprintln!(
        "sweep '{}' (tp_block): {total} points, {jobs} job(s), {} tokens, all-reduce '{}' -> {}",
        plan.name,
        plan.tokens,
        plan.algorithm,
        out.display()
    );
    let started = Instant::now();
    let bar = kernbench::progress::Progress::new("sweep", "points", &cost.weights());
    let progress = |i: usize| bar.tick(cost.parts[i].1.seconds, &cost.parts[i].0);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(jobs).build()?;
    let rows = pool
        .install(|| study::run(plan, &base, &progress))
        .map_err(anyhow::Error::msg)?;
    bar.finish();
    println!(
        "{:>16} {:>6} {:>3} {:>12} {:>12} {:>12} {:>12} {:>8} {:>6}",
        "topology", "hidden", "tp", "time(us)", "compute", "comm", "launch+wait", "speedup", "eff"
    );
    for r in &rows {
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        println!(
            "{:>16} {:>6} {:>3} {:>12.1} {:>12.1} {:>12.1} {:>12.1} {:>8} {:>6}",
            r.topology,
            r.hidden,
            r.tp,
            r.time_us,
            r.compute_us,
            r.comm_us,
            r.launch_wait_us,
            opt(r.speedup),
            opt(r.efficiency)
        );
    }
    let label = format!(
        "{} cubes x {} PEs per SIP, {} tokens",
        base.cubes_per_sip(),
        base.pes_per_cube(),
        plan.tokens
    );
    let files = study::write(&out, &rows, &label).map_err(|e| anyhow::anyhow!("--out: {e}"))?;
    eprintln!(
        "{total} points in {:.1} s; wrote {} in {}",
        started.elapsed().as_secs_f64(),
        files.join(", "),
        out.display()
    );
    Ok(())
}

/// Knobs that shrink a TP plan.
const TP_STUDY_KNOBS: &str = "fewer points (grid.tp, grid.hidden, grid.topology of the plan), fewer tokens, or a smaller base system";

/// A sweep's result directory when --out is not given, created now:
/// results/<plan>-<UTC timestamp>, with `-2`, `-3` … if another sweep took
/// that name in the same second.
fn default_out(plan: &str) -> Result<PathBuf> {
    let stem = format!("{plan}-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"));
    kernbench::output::new_dir(Path::new("results"), &stem).map_err(anyhow::Error::msg)
}

fn sweep_jobs(asked: Option<usize>, points: usize) -> Result<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let Some(jobs) = asked else {
        return Ok(cores);
    };
    if jobs == 0 {
        bail!(
            "--jobs 0: a sweep needs at least one job; allowed: 1 to {} here",
            4 * cores
        );
    }
    let most = (4 * cores).min(points.max(1));
    if jobs > most {
        eprintln!("note: --jobs {jobs} clamped to {most} ({cores} cores, {points} points)");
        return Ok(most);
    }
    Ok(jobs)
}

/// After everything is written: a result set with failed points exits 1,
/// naming them (the first ten).
fn exit_if_failed(rows: &[kernbench::sweep::Row]) {
    let failed: Vec<&kernbench::sweep::Row> = rows.iter().filter(|r| !r.error.is_empty()).collect();
    if failed.is_empty() {
        return;
    }
    eprintln!("\n{} point(s) failed:", failed.len());
    for r in failed.iter().take(10) {
        eprintln!("  [{}] {}: {}", r.index, r.point, r.error);
    }
    if failed.len() > 10 {
        eprintln!(
            "  and {} more (see the error column of results.csv)",
            failed.len() - 10
        );
    }
    std::process::exit(1);
}

fn merge(a: MergeArgs) -> Result<()> {
    let m = kernbench::sweep::merge::merge(&a.dirs, &a.out).map_err(anyhow::Error::msg)?;
    for w in &m.warnings {
        eprintln!("warning: {w}");
    }
    print!("{}", kernbench::sweep::results::summary(&m.rows));
    println!(
        "\nmerged {} point files from {} directories into {} ({} points)",
        m.files,
        a.dirs.len(),
        a.out.display(),
        m.rows.len()
    );
    exit_if_failed(&m.rows);
    Ok(())
}
