//! The kernbench command line: the subcommands and the exit code. Each
//! subcommand's arguments and handler are in `cmd/<name>.rs`.

/// Counts heap bytes so sweeps can report each point's peak memory.
#[global_allocator]
static HEAP: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

mod cmd;

use clap::{Parser, Subcommand};

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

#[derive(Subcommand)]
enum Command {
    /// The main job: run a sweep plan — collectives × algorithms × sizes ×
    /// topologies × buffer kinds — in parallel, and write results.csv,
    /// results.json, the plan and system used, and SVG plots to
    /// results/<plan>-<timestamp>/. With no arguments, runs the embedded
    /// default plan on the embedded default system.
    #[command(after_help = cmd::sweep::EXAMPLES)]
    Sweep(cmd::sweep::SweepArgs),
    /// List what can be named: system presets (--preset), sweep plans
    /// (--plan), and the ccl config's algorithm entries (--algorithm) with
    /// the collectives and SIP topologies each supports.
    ///
    /// Example: kernbench list algorithms
    List(cmd::list::ListArgs),
    /// Combine result directories (shards of one plan) into one result set
    /// with plots.
    ///
    /// Example: kernbench merge r1/ r2/ r3/ --out all/
    Merge(cmd::merge::MergeArgs),
    /// Build a system and describe it: node and link counts, SIP/cube/PE
    /// totals, network diameter, build time; optionally Graphviz views.
    ///
    /// Example: kernbench topo --preset torus_4096 --dot out/
    Topo(cmd::topo::TopoArgs),
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
    Run(cmd::run::RunArgs),
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
    Autotune(cmd::autotune::AutotuneArgs),
    /// Measure the simulator: build the 4096-SIP system, then run ring
    /// traffic (each SIP sends to its right neighbour, round after round) and
    /// report messages and link traversals per second.
    ///
    /// Example: cargo run --release -- bench --rounds 8190
    Bench(cmd::bench::BenchArgs),
    /// Time GEMMs (f16, C = A·B) on one SIP of the system over a grid of
    /// square (128-4096), wide (m = 16-1024) and tall (n = 16-1024) shapes,
    /// against the roofline of the PEs and memories used (docs/model.md
    /// §GEMM). Writes results.csv and three SVG figures: latency vs size,
    /// achieved vs peak TFLOP/s, simulated / roofline.
    ///
    /// Example: kernbench gemm-sweep --out gemm/
    GemmSweep(cmd::gemm_sweep::GemmSweepArgs),
    /// A 2-layer Megatron-style tensor-parallel MLP (ColumnParallelLinear →
    /// RowParallelLinear, seeded weights, f16) for each TP size on a system of
    /// that many SIPs: the max abs error against a single-device f32 reference
    /// (with its first-order f16 bound) and rank 0's time broken down into
    /// compute, communication (hidden behind compute, exposed), and launch +
    /// wait, then the configuration the all-reduce ran (by default the
    /// autotuner's pick, `--algorithm auto`). Units: µs.
    ///
    /// Example: kernbench tp-mlp --tp 1,2,4,8 --batch 16
    TpMlp(cmd::tp_mlp::TpMlpArgs),
    /// Simulate one training step under DP × TP × PP, as Megatron-LM runs
    /// it: ranks laid out on the SIPs by --layout (TP innermost by
    /// default), each pipeline stage's layers run micro-batch by
    /// micro-batch under --schedule 1f1b or gpipe with activations and
    /// their gradients passed between stages by isend/irecv, and the
    /// weight gradients of the last micro-batch reduced over the DP group
    /// in --bucket-size buckets on the communication stream while backward
    /// goes on. Prints the step time and its breakdown (means over ranks):
    /// compute, exposed and hidden communication, pipeline bubble, each
    /// communication kind, the peak micro-batches of activations a rank
    /// kept, and the model FLOP utilisation (3 × forward FLOPs over step
    /// time × the peak of the SIPs used). --json prints every rank's
    /// breakdown. docs/guide.md "Simulating a training step" maps
    /// Megatron's arguments to these flags.
    ///
    /// Example: kernbench train-step --dp 2 --pp 2 --micro-batches 4
    TrainStep(cmd::train_step::TrainStepArgs),
    /// Check the flow-level network against the exact packet engine: every
    /// collective × algorithm on small ring, torus and mesh systems plus
    /// adversarial traffic (incast, cross traffic, mixed sizes, starved
    /// credits, SIP kinds), each run in both models. Prints the error
    /// statistics, per-link byte agreement and ranking agreement (Kendall
    /// τ); writes results.csv, kendall.csv, summary.txt and a figure.
    /// Prints the verdict on its bounds (`--check`: exit 1 when missed).
    ///
    /// Example: kernbench validate --out validate/
    Validate(cmd::validate::ValidateArgs),
}

fn main() {
    let cli = Cli::parse();
    kernbench::systems::heap::install_probe(|| HEAP.current_usage() as u64);
    let result = match cli.command {
        Command::Topo(a) => cmd::topo::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Autotune(a) => cmd::autotune::run(a),
        Command::Sweep(a) => cmd::sweep::run(a),
        Command::Merge(a) => cmd::merge::run(a),
        Command::List(a) => cmd::list::run(a),
        Command::GemmSweep(a) => cmd::gemm_sweep::run(a),
        Command::TpMlp(a) => cmd::tp_mlp::run(a),
        Command::TrainStep(a) => cmd::train_step::run(a),
        Command::Validate(a) => cmd::validate::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}
