//! Measured compute: a kernel replaced by the ticks it took alone gives the
//! tiled run's ticks when nothing contends, and differs from it only by
//! contention; a busy op holds its PE exactly its ticks; functional runs
//! refuse it.

use crate::common::system;
use crate::train::step;
use kernbench::autotune::init_process_group;
use kernbench::ccl::CclConfig;
use kernbench::gemm::Placement;
use kernbench::spec::{ComputeModel, System};
use kernbench::train::{Model, ModelShape, Schedule, TrainReport, TrainStep, train_step};
use kernbench_runtime::machine::Machine;
use kernbench_systems::memory::DataMode;
use kernbench_systems::program::{Launch, Op, Program};
use std::sync::Arc;

/// `sys` with compute timed by `model`.
fn with_compute(sys: &System, model: ComputeModel) -> System {
    let mut spec = sys.spec.clone();
    spec.simulation.compute = Some(model);
    System::from_spec(spec, "test").unwrap()
}

/// The step's report, and how many kernels were measured and reused.
fn run(sys: &System, s: &TrainStep) -> (TrainReport, Option<(u64, u64)>) {
    let ccl = CclConfig::embedded_default();
    let mut pg = init_process_group(sys, &ccl, "ring", DataMode::TimingOnly).unwrap();
    let r = train_step(&mut pg, s, DataMode::TimingOnly).unwrap();
    let counts = pg.machine.costs.as_ref().map(|c| (c.measured, c.reused));
    (r, counts)
}

/// Every work of the step: (rank, start, end).
fn spans(r: &TrainReport) -> Vec<(usize, u64, u64)> {
    let mut v = Vec::new();
    for (rank, rec) in r.records.iter().enumerate() {
        v.extend(rec.iter().map(|w| (rank, w.start, w.end)));
    }
    v
}

/// A step of 2 micro-batches on one SIP with real links and memories: no
/// communication, so each kernel runs as it ran alone, and the measured
/// step equals the tiled one work by work. Every kernel of the second
/// micro-batch reuses a measurement of the first.
#[test]
fn measured_compute_takes_the_tiled_ticks_when_nothing_contends() {
    let tiled = system(|s| s.system.sips.count = 1);
    let mut s = step(1, 1, Schedule::OneFOneB, 2);
    s.placement = Placement::off_leader(tiled.pes_per_cube());
    let (exact, none) = run(&tiled, &s);
    assert_eq!(none, None);
    let (fast, counts) = run(&with_compute(&tiled, ComputeModel::Measured), &s);
    assert_eq!(spans(&fast), spans(&exact));
    assert_eq!(fast.step, exact.step);
    let (measured, reused) = counts.unwrap();
    assert!(measured > 0 && reused >= measured, "{measured} {reused}");
}

/// DP 2 with gradient all-reduces overlapping the backward of two GPT
/// layers: the measured kernels leave out their loads' contention with the
/// all-reduces inside each SIP, so the step comes out 0.18 % shorter
/// (what `train-step --dp 2 --hidden 512 --seq 256 --layers-per-stage 2
/// --bucket-size 262144 --algorithm ring` prints: 557.240 µs tiled,
/// 556.232 µs measured).
#[test]
fn measured_compute_leaves_out_contention_with_communication() {
    let tiled = System::embedded_default();
    let mut s = step(2, 1, Schedule::OneFOneB, 1);
    s.model = Model::Transformer;
    s.shape = ModelShape {
        hidden: 512,
        heads: 4,
        ffn_hidden: 2048,
        seq: 256,
        micro_batch: 1,
        layers_per_stage: 2,
    };
    s.bucket_bytes = 262_144;
    s.placement = Placement::off_leader(tiled.pes_per_cube());
    let (exact, _) = run(&tiled, &s);
    let (fast, counts) = run(&with_compute(&tiled, ComputeModel::Measured), &s);
    assert!(counts.unwrap().1 > 0);
    assert_eq!((exact.step, fast.step), (557_240, 556_232));
}

/// A busy op holds its PE for exactly its ticks from its start.
#[test]
fn a_busy_op_holds_its_pe_for_its_ticks() {
    let sys = system(|s| s.pe.launch_overhead_ns = 0.0);
    let mut m = Machine::build_with(&sys, DataMode::TimingOnly).unwrap();
    let pe = m.pe_index(0, 1, 0);
    let busy = |ticks| Launch {
        program: Arc::new(Program {
            ops: vec![Op::Busy { ticks }],
            ..Program::default()
        }),
        params: Box::new([]),
    };
    let spans = m.run_alone(vec![(pe, busy(1234))]).unwrap();
    assert_eq!(spans, [1234]);
}

/// Measured compute times kernels without computing values: a functional
/// run is refused, naming the field and what to use instead.
#[test]
fn measured_compute_refuses_a_functional_run() {
    let sys = with_compute(&system(|_| {}), ComputeModel::Measured);
    let e = Machine::build_with(&sys, DataMode::Functional)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("simulation.compute"), "{e}");
    assert!(e.contains("allowed: simulation.compute: tiled"), "{e}");
}

/// The estimate knows the compute model: the GPT step of the guide costs
/// its MACs on every rank and micro-batch tiled, but under measured compute
/// only one micro-batch's MACs and 20 µs per PE of each replayed launch.
#[test]
fn the_train_step_estimate_knows_the_compute_model() {
    let tiled = kernbench::spec::presets::preset("mesh_16").unwrap();
    let gpt = TrainStep {
        model: Model::Transformer,
        shape: ModelShape {
            hidden: 4096,
            heads: 32,
            ffn_hidden: 16384,
            seq: 2048,
            micro_batch: 1,
            layers_per_stage: 1,
        },
        micro_batches: 8,
        placement: Placement::off_leader(tiled.pes_per_cube()),
        ..step(2, 2, Schedule::OneFOneB, 8)
    };
    let gpt = TrainStep {
        parallel: kernbench::train::Parallel {
            tp: 4,
            ..gpt.parallel
        },
        ..gpt
    };
    let cost = |sys: &System| {
        kernbench::command_costs::train_step(sys, &gpt)
            .seconds
            .round()
    };
    let measured = with_compute(&tiled, ComputeModel::Measured);
    assert_eq!((cost(&tiled), cost(&measured)), (429.0, 37.0));
}

/// A tiled step refused for time says what measured compute would take.
#[test]
fn a_refused_tiled_step_names_measured_compute() {
    let (code, _, err) = crate::common::kernbench_cli(&[
        "train-step",
        "--preset",
        "mesh_16",
        "--dp",
        "2",
        "--tp",
        "4",
        "--pp",
        "2",
        "--micro-batches",
        "8",
        "--hidden",
        "4096",
        "--seq",
        "2048",
        "--compute",
        "tiled",
        "--max-time",
        "100",
    ]);
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("more than the time budget of 100 s"), "{err}");
    assert!(
        err.contains("--compute measured (each distinct kernel simulated once) is estimated at 37 s instead of 429 s"),
        "{err}"
    );
}

/// `train-step` times compute as measured unless told otherwise, and says
/// which model it ran: the table's header with its counts, the JSON report
/// with its models.
#[test]
fn train_step_reports_its_compute_model() {
    let args = [
        "train-step",
        "--dp",
        "2",
        "--pp",
        "2",
        "--micro-batches",
        "2",
        "--hidden",
        "64",
        "--heads",
        "4",
        "--seq",
        "64",
    ];
    let (code, table, err) = crate::common::kernbench_cli(&args);
    assert_eq!(code, Some(0), "{err}");
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("network packet, compute measured ("),
        "{header}"
    );
    assert!(header.contains(" kernels measured, "), "{header}");
    let tiled = [&args[..], &["--compute", "tiled", "--json"]].concat();
    let (code, json, err) = crate::common::kernbench_cli(&tiled);
    assert_eq!(code, Some(0), "{err}");
    assert!(json.contains("\"network_model\": \"packet\""), "{json}");
    assert!(json.contains("\"compute_model\": \"tiled\""), "{json}");
}
