//! `kernbench train-step`: one training step of a DP × TP × PP
//! configuration; prints the step time, its breakdown and the MFU.

use super::args::{BudgetArg, NetworkArg, SystemArg, compute_model, parse_count};
use anyhow::{Result, anyhow};
use clap::Args;
use kernbench::gemm::Placement;
use kernbench::train::{
    AxisOrder, DpReduce, Model, ModelShape, Parallel, Schedule, TrainReport, TrainStep, train_step,
    write_trace,
};
use kernbench::transformer::TpOptions;
use kernbench_spec::spec::ComputeModel;
use kernbench_systems::memory::DataMode;

#[derive(Args)]
pub struct TrainStepArgs {
    #[command(flatten)]
    system: SystemArg,
    /// What each stage's layers are: transformer (GPT layers: attention
    /// and MLP, forward and backward, Megatron's tensor-parallel split) or
    /// uniform (per layer one forward GEMM rows × hidden × hidden/tp and two
    /// backward GEMMs of that size: a cost model for schedule studies).
    #[arg(long, default_value = "transformer")]
    model: String,
    /// Hidden size (Megatron --hidden-size).
    #[arg(long, default_value_t = 1024, allow_negative_numbers = true, value_parser = parse_count)]
    hidden: usize,
    /// Attention heads (--num-attention-heads); default hidden / 128.
    #[arg(long, allow_negative_numbers = true, value_parser = parse_count)]
    heads: Option<usize>,
    /// MLP width (--ffn-hidden-size); default 4 × hidden.
    #[arg(long, allow_negative_numbers = true, value_parser = parse_count)]
    ffn_hidden: Option<usize>,
    /// Sequence parallelism (--sequence-parallel): layer norms and residuals
    /// sharded on the sequence, all-gather and reduce-scatter in place of
    /// the TP all-reduces.
    #[arg(long)]
    sequence_parallel: bool,
    /// Recompute each layer's activations in backward instead of keeping
    /// them (--recompute-activations, whole layers).
    #[arg(long)]
    recompute: bool,
    /// Sequence length (--seq-length).
    #[arg(long, default_value_t = 512, allow_negative_numbers = true, value_parser = parse_count)]
    seq: usize,
    /// Sequences per micro-batch (--micro-batch-size).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = parse_count)]
    micro_batch: usize,
    /// Layers of each pipeline stage (--num-layers / --pipeline-model-parallel-size).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = parse_count)]
    layers_per_stage: usize,
    /// Micro-batches per step (--global-batch-size / (--micro-batch-size × DP)).
    #[arg(long, default_value_t = 8, allow_negative_numbers = true, value_parser = parse_count)]
    micro_batches: usize,
    /// Data-parallel replicas.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    dp: u32,
    /// Tensor-parallel ranks (--tensor-model-parallel-size).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    tp: u32,
    /// Pipeline stages (--pipeline-model-parallel-size).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    pp: u32,
    /// How ranks map to axes, innermost first: tp-dp-pp (the default: a TP
    /// group on consecutive SIPs, stages outermost, as Megatron) or any
    /// other order of tp, dp, pp.
    #[arg(long, default_value = "tp-dp-pp")]
    layout: String,
    /// Pipeline schedule: 1f1b (at most pp − stage micro-batches in flight)
    /// or gpipe (every forward, then every backward).
    #[arg(long, default_value = "1f1b")]
    schedule: String,
    /// DP gradient reduction: all-reduce, or reduce-scatter (ZeRO-1,
    /// --use-distributed-optimizer: then the parameters are all-gathered).
    #[arg(long, default_value = "all-reduce")]
    dp_reduce: String,
    /// Gradient bytes per DP bucket (K, M, G suffixes): a bucket is reduced
    /// as soon as backward has filled it.
    #[arg(long, default_value = "4M", value_parser = kernbench::sweep::plan::parse_bytes)]
    bucket_size: u64,
    /// Which PEs of a cube compute: off-leader (the default: every PE but
    /// pe0, where collectives and messages run, so they overlap) or owners.
    #[arg(long, default_value = "off-leader", value_parser = ["owners", "off-leader"])]
    placement: String,
    /// The ccl.yaml entry the DP collectives run; auto (the default): the
    /// autotuner's pick per size and group.
    #[arg(long, default_value = "auto")]
    algorithm: String,
    #[command(flatten)]
    network: NetworkArg,
    /// How compute kernels are timed. measured (the default unless the
    /// system spec's simulation.compute names one): each distinct kernel
    /// runs once alone and every launch of it then takes that time, so
    /// contention between compute loads and communication inside a SIP is
    /// left out (docs/model.md §Measured compute); tiled: every tile load
    /// crosses the network (exact, and about 10x the wall time on GPT
    /// layers).
    #[arg(long, value_name = "MODEL", value_parser = ["tiled", "measured"])]
    compute: Option<String>,
    /// Seed of the stages' data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write a Chrome trace of the step to FILE (open in Perfetto): every
    /// rank's kernels and its collectives and messages on separate tracks.
    #[arg(long, value_name = "FILE")]
    trace: Option<std::path::PathBuf>,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    budget: BudgetArg,
}

/// An estimated step past this many seconds of wall time is told of
/// measured compute when that would be much faster.
const LONG_STEP_SECONDS: f64 = 60.0;

/// Knobs that shrink a training step.
const TRAIN_STEP_KNOBS: &str = "a smaller --hidden, --seq, --micro-batch, --layers-per-stage or --micro-batches, or fewer SIPs";

/// The configuration the flags name, each bad name refused by its flag.
fn config(a: &TrainStepArgs, pes_per_cube: u32) -> Result<TrainStep> {
    let placement = match a.placement.as_str() {
        "owners" => Placement::Owners,
        _ => Placement::off_leader(pes_per_cube),
    };
    Ok(TrainStep {
        model: Model::parse("--model", &a.model).map_err(anyhow::Error::msg)?,
        shape: ModelShape {
            hidden: a.hidden,
            heads: a.heads.unwrap_or((a.hidden / 128).max(1)),
            ffn_hidden: a.ffn_hidden.unwrap_or(4 * a.hidden),
            seq: a.seq,
            micro_batch: a.micro_batch,
            layers_per_stage: a.layers_per_stage,
        },
        tp_options: TpOptions {
            sequence_parallel: a.sequence_parallel,
            recompute: a.recompute,
        },
        parallel: Parallel {
            dp: a.dp,
            tp: a.tp,
            pp: a.pp,
            order: AxisOrder::parse("--layout", &a.layout).map_err(anyhow::Error::msg)?,
        },
        schedule: Schedule::parse("--schedule", &a.schedule).map_err(anyhow::Error::msg)?,
        micro_batches: a.micro_batches,
        dp_reduce: DpReduce::parse("--dp-reduce", &a.dp_reduce).map_err(anyhow::Error::msg)?,
        bucket_bytes: a.bucket_size,
        placement,
        seed: a.seed,
    })
}

pub fn run(a: TrainStepArgs) -> Result<()> {
    let mut sys = a.system.load()?;
    a.network
        .set_fixed(&mut sys, "a training step runs on one machine")?;
    let compute = a.compute.as_deref().map(compute_model);
    let compute = compute.or(sys.spec.simulation.compute);
    sys.spec.simulation.compute = Some(compute.unwrap_or(ComputeModel::Measured));
    let step = config(&a, sys.pes_per_cube())?;
    step.check(sys.n_sips(), sys.cubes_per_sip())
        .map_err(|e| anyhow!("{}: {e}", sys.origin))?;
    let estimate = kernbench::command_costs::train_step(&sys, &step);
    let measured = kernbench::command_costs::train_step_measured_seconds(&sys, &step);
    let faster = measured.filter(|&m| m < estimate.seconds / 2.0).map(|m| {
        format!(
            "--compute measured (each distinct kernel simulated once) is estimated at {m:.0} s instead of {:.0} s",
            estimate.seconds
        )
    });
    estimate
        .check(&a.budget.budget(), TRAIN_STEP_KNOBS)
        .map_err(|e| match &faster {
            Some(f) => anyhow!("train-step on {}: {e}; {f}", sys.origin),
            None => anyhow!("train-step on {}: {e}", sys.origin),
        })?;
    if let Some(f) = faster.filter(|_| estimate.seconds > LONG_STEP_SECONDS) {
        eprintln!("note: tiled compute: every tile load crosses the network; {f}");
    }
    let ccl = kernbench::ccl::CclConfig::embedded_default();
    let mut pg =
        kernbench::autotune::init_process_group(&sys, &ccl, &a.algorithm, DataMode::TimingOnly)
            .map_err(|e| anyhow!("--algorithm {}: {e}", a.algorithm))?;
    let report = train_step(&mut pg, &step, DataMode::TimingOnly)?;
    if let Some(path) = &a.trace {
        let events = write_trace(&report, &pg, path).map_err(anyhow::Error::msg)?;
        eprintln!("wrote {events} trace events to {}", path.display());
    }
    if a.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", table(&step, &report, &measured_counts(&pg)));
    }
    Ok(())
}

/// Under measured compute, how many kernels were measured and how many
/// launches reused a measurement: ` (K kernels measured, L launches
/// reused)`; empty otherwise.
fn measured_counts(pg: &kernbench::dist::ProcessGroup) -> String {
    pg.machine.costs.as_ref().map_or_else(String::new, |c| {
        format!(
            " ({} kernels measured, {} launches reused)",
            c.measured, c.reused
        )
    })
}

/// The step and its breakdown, mean over ranks, µs.
fn table(step: &TrainStep, r: &TrainReport, counts: &str) -> String {
    let p = step.parallel;
    let sum = r.summary();
    let mut out = format!(
        "# train-step: {} model, hidden {}{}, seq {}, micro-batch {}, {} layer(s)/stage; DP {} x TP {} x PP {} ({}), {} x {} micro-batches, DP {} in {} B buckets; network {}, compute {}{counts}\n",
        step.model.name(),
        step.shape.hidden,
        model_detail(step),
        step.shape.seq,
        step.shape.micro_batch,
        step.shape.layers_per_stage,
        p.dp,
        p.tp,
        p.pp,
        p.order.name(),
        step.schedule.name(),
        step.micro_batches,
        step.dp_reduce.name(),
        step.bucket_bytes,
        r.network_model,
        r.compute_model,
    );
    let line = |name: &str, v: f64| format!("{:<32} {v:>12.3}\n", format!("{name} (us)"));
    out += &line("step time", sum.step_us);
    out += &line("compute", sum.compute_us);
    out += &line("exposed communication", sum.exposed_us);
    out += &line("hidden communication", sum.hidden_us);
    out += &line("pipeline bubble", sum.bubble_us);
    out += &line("other idle (launch gaps)", sum.gaps_us);
    out += &line("communication (serialized)", sum.communication_us);
    for (kind, us) in &sum.by_kind {
        out += &line(&format!("  {kind}"), *us);
    }
    out += &format!(
        "{:<32} {:>12}\n",
        "peak activations kept", r.peak_activations
    );
    out += &format!("{:<32} {:>12.4}\n", "MFU", r.mfu);
    out += "# components are means over ranks; step = compute + exposed + bubble + other idle on every rank (bubble: idle before the first work, after the last and until a stage's message arrives); MFU = 3 x forward FLOPs / (step x peak of the SIPs used)\n";
    out
}

/// The transformer model's heads, MLP width and TP options, for the title.
fn model_detail(step: &TrainStep) -> String {
    if step.model != Model::Transformer {
        return String::new();
    }
    let o = step.tp_options;
    let flags: Vec<&str> = [
        (o.sequence_parallel, "sequence parallel"),
        (o.recompute, "recompute"),
    ]
    .iter()
    .filter_map(|&(on, name)| on.then_some(name))
    .collect();
    let mut s = format!(
        ", {} heads, ffn {}",
        step.shape.heads, step.shape.ffn_hidden
    );
    for f in flags {
        s += &format!(", {f}");
    }
    s
}
