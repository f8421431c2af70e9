//! The training step: the 1F1B and GPipe closed forms on ideal links, DP
//! gradients overlapped with backward, DP gradient sums, determinism.

use crate::common::system;
use kernbench::autotune::init_process_group;
use kernbench::ccl::CclConfig;
use kernbench::gemm::Placement;
use kernbench::spec::System;
use kernbench::train::{
    Axis, AxisOrder, DpReduce, Model, ModelShape, Parallel, Schedule, TrainReport, TrainStep,
    train_step,
};
use kernbench::transformer::TpOptions;
use kernbench_systems::memory::DataMode;

/// `sips` SIPs of 4 cubes of 2 PEs with every link, memory and launch free:
/// only the PEs' MACs cost time.
fn ideal(sips: u32) -> System {
    system(|s| {
        s.system.sips.count = sips;
        (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = (2, 2);
        s.cube.pe_layout.pe_per_corner = 1;
        s.cube.pe_layout.corners = 2;
        for l in [
            &mut s.links.noc,
            &mut s.links.ucie,
            &mut s.links.inter_sip,
            &mut s.links.pcie,
        ] {
            l.ideal = true;
        }
        for m in [&mut s.memory.tcm, &mut s.memory.sram, &mut s.memory.hbm] {
            m.ideal = true;
        }
        s.pe.launch_overhead_ns = 0.0;
    })
}

pub(crate) fn step(dp: u32, pp: u32, schedule: Schedule, m: usize) -> TrainStep {
    TrainStep {
        model: Model::Uniform,
        shape: ModelShape {
            hidden: 64,
            heads: 2,
            ffn_hidden: 256,
            seq: 32,
            micro_batch: 1,
            layers_per_stage: 1,
        },
        tp_options: TpOptions::default(),
        parallel: Parallel {
            dp,
            tp: 1,
            pp,
            order: AxisOrder::default(),
        },
        schedule,
        micro_batches: m,
        dp_reduce: DpReduce::AllReduce,
        bucket_bytes: 1,
        placement: Placement::off_leader(2),
        seed: 1,
    }
}

fn run(sys: &System, s: &TrainStep, mode: DataMode) -> TrainReport {
    let ccl = CclConfig::embedded_default();
    let mut pg = init_process_group(sys, &ccl, "ring", mode).unwrap();
    train_step(&mut pg, s, mode).unwrap()
}

/// Every record of the step: (rank, kind, start, end).
fn works(r: &TrainReport) -> Vec<(usize, &'static str, u64, u64)> {
    let mut v = Vec::new();
    for (rank, rec) in r.records.iter().enumerate() {
        v.extend(rec.iter().map(|w| (rank, w.class.name(), w.start, w.end)));
    }
    v
}

/// Pipeline of 2 uniform stages on ideal links: every message takes 0
/// ticks, so the step is the closed form (m + p − 1) · (t_f + t_b) of one
/// stage and each rank's bubble (p − 1) · (t_f + t_b), a share of
/// (p − 1) / (m + p − 1) (docs/model.md §Pipeline schedules). 1F1B keeps at
/// most p micro-batches of activations, GPipe m.
#[test]
fn pipeline_schedules_on_ideal_links() {
    let sys = ideal(2);
    let alone = run(
        &sys,
        &step(1, 1, Schedule::OneFOneB, 1),
        DataMode::TimingOnly,
    );
    let stage = alone.step; // t_f + t_b of one stage
    assert_eq!(stage, 128);
    let (p, m) = (2u64, 4u64);
    let closed = (m + p - 1) * stage;
    assert_eq!(closed, 640);
    for (schedule, peak) in [(Schedule::OneFOneB, 2), (Schedule::GPipe, 4)] {
        let r = run(
            &sys,
            &step(1, 2, schedule, m as usize),
            DataMode::TimingOnly,
        );
        let messages: Vec<_> = works(&r).into_iter().filter(|w| w.1 != "compute").collect();
        assert_eq!(messages.len(), 4 * m as usize);
        assert!(messages.iter().all(|w| w.2 == w.3), "{messages:?}");
        assert_eq!(r.peak_activations, peak, "{schedule:?}");
        assert_eq!(r.step, closed, "{schedule:?}");
        for b in &r.ranks {
            assert_eq!(b.compute, m * stage);
            assert_eq!(b.communication, 0);
            assert_eq!(b.step, b.compute + b.bubble);
            assert_eq!(b.gaps, 0, "no launch overhead on ideal links");
            assert_eq!(b.bubble, (p - 1) * stage, "{schedule:?} rank {}", b.rank);
            // share = bubble / step = (p − 1) / (m + p − 1)
            assert_eq!(b.bubble * (m + p - 1), (p - 1) * b.step);
        }
    }
}

/// DP 2 on real links: with one gradient per bucket, each all-reduce runs
/// on the communication stream while the next layers' backward GEMMs run.
#[test]
fn dp_buckets_overlap_backward() {
    let mut spec = ideal(2).spec;
    (spec.links.inter_sip.ideal, spec.links.ucie.ideal) = (false, false);
    let sys = System::from_spec(spec, "test").unwrap();
    let mut s = step(2, 1, Schedule::OneFOneB, 1);
    (s.shape.layers_per_stage, s.shape.seq) = (4, 256);
    s.placement = Placement::off_leader(sys.pes_per_cube());
    let r = run(&sys, &s, DataMode::TimingOnly);
    let b = &r.ranks[0];
    let serialized = b.compute + b.communication;
    assert!(r.step < serialized, "{b:?}");
    assert!(r.step >= b.compute && r.step >= b.communication, "{b:?}");
    assert!(b.hidden > 0, "{b:?}");
    // hidden = serialized − overlapped (the union of compute and communication).
    let mut busy: Vec<(u64, u64)> = works(&r)
        .iter()
        .filter(|w| w.0 == 0)
        .map(|w| (w.2, w.3))
        .collect();
    busy.sort_unstable();
    let (mut union, mut reach) = (0, 0);
    for (s, e) in busy {
        let s = s.max(reach);
        if e > s {
            union += e - s;
            reach = e;
        }
    }
    assert_eq!(b.hidden, serialized - union);
    assert_eq!(
        b.by_kind.keys().copied().collect::<Vec<_>>(),
        ["all_reduce"]
    );
    // Rank 0 is never idle in the step: step = compute ∪ communication
    // = 4756 + 2592 − 1945. (While a launch after a wait left at the
    // engine's next event, the step took 6148 with 1311 hidden.)
    assert_eq!(b.bubble, 0, "{b:?}");
    assert_eq!(r.step, serialized - b.hidden, "{b:?}");
    assert_eq!(
        (r.step, b.compute, b.communication, b.hidden),
        (5403, 4756, 2592, 1945),
        "{b:?}"
    );
}

/// DP 2 in functional mode: each rank's reduced gradient is, element by
/// element, the f16 sum of the two replicas' own gradients, whether
/// all-reduced or reduce-scattered and then all-gathered (ZeRO-1).
#[test]
fn dp_gradients_are_the_sum_of_the_replicas() {
    let sys = ideal(2);
    for (reduce, kinds) in [
        (DpReduce::AllReduce, vec!["all_reduce"]),
        (
            DpReduce::ReduceScatter,
            vec!["all_gather", "reduce_scatter"],
        ),
    ] {
        let mut s = step(2, 1, Schedule::OneFOneB, 2);
        s.shape.layers_per_stage = 2;
        s.dp_reduce = reduce;
        let r = run(&sys, &s, DataMode::Functional);
        assert_eq!(
            r.ranks[0].by_kind.keys().copied().collect::<Vec<_>>(),
            kinds
        );
        assert_eq!(r.grads[0].len(), 2);
        for g in 0..2 {
            let (a, b) = (&r.local_grads[0][g], &r.local_grads[1][g]);
            assert_ne!(a, b, "the replicas see different data");
            let sum: Vec<f32> = a
                .iter()
                .zip(b)
                .map(|(x, y)| half::f16::from_f32(x + y).to_f32())
                .collect();
            assert_eq!(r.grads[0][g], sum, "{reduce:?}");
            assert_eq!(r.grads[1][g], sum, "{reduce:?}");
        }
    }
}

/// The same configuration twice gives the same breakdown.
#[test]
fn a_step_is_deterministic() {
    let sys = ideal(4);
    let mut s = step(2, 2, Schedule::OneFOneB, 2);
    s.bucket_bytes = 1 << 20;
    let a = run(&sys, &s, DataMode::TimingOnly);
    let b = run(&sys, &s, DataMode::TimingOnly);
    assert_eq!(a.step, b.step);
    assert_eq!(a.ranks, b.ranks);
    assert!(a.mfu > 0.0 && a.mfu < 1.0, "{}", a.mfu);
}

/// `--trace`: every rank's compute and communication on tracks of their own.
#[test]
fn the_trace_has_compute_and_communication_tracks_per_rank() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("step.json");
    let (code, out, err) = crate::common::kernbench_cli(&[
        "train-step",
        "--dp",
        "2",
        "--pp",
        "2",
        "--micro-batches",
        "2",
        "--hidden",
        "64",
        "--seq",
        "16",
        "--algorithm",
        "ring",
        "--trace",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("pipeline bubble (us)"), "{out}");
    assert!(out.contains("other idle (launch gaps) (us)"), "{out}");
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let names: Vec<String> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect();
    for rank in 0..4 {
        for kind in ["compute", "communication"] {
            let track = format!("rank {rank} {kind} #0");
            assert!(names.contains(&track), "{track} not in {names:?}");
        }
    }
}

/// `sweep --plan` of a train plan: results.csv names each row's network
/// model, and the three figures are written.
#[test]
fn a_train_sweep_writes_rows_and_figures() {
    let dir = tempfile::tempdir().unwrap();
    // Sweeps `plan` with `flags` into `dir/name`: its directory and results.csv.
    let sweep = |plan: &str, flags: &[&str], name: &str| {
        let out = dir.path().join(name);
        let args = [
            &["sweep", "--plan", plan][..],
            flags,
            &["--out", out.to_str().unwrap()],
        ];
        let (code, stdout, err) = crate::common::kernbench_cli(&args.concat());
        assert_eq!(code, Some(0), "{stdout}{err}");
        let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
        (out, csv)
    };
    // A plan of GPT layers runs too (heads from head_dim, SP on).
    let (_, csv) = sweep("tests/data/train_transformer.yaml", &[], "t");
    assert_eq!(csv.lines().count(), 2, "{csv}");
    assert!(csv.contains("2,2,1,tp-dp-pp"), "{csv}");
    assert!(csv.contains(",flow,measured,"), "{csv}");
    let (_, csv) = sweep("tests/data/doc/tiny_train.yaml", &[], "r");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert!(
        header.contains(&"network_model") && header.contains(&"mfu"),
        "{header:?}"
    );
    let col = header.iter().position(|h| *h == "network_model").unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r[col] == "flow"), "{csv}");
    let col = header.iter().position(|h| *h == "compute_model").unwrap();
    assert!(rows.iter().all(|r| r[col] == "measured"), "{csv}");
    // --compute tiled: every tile load through the network.
    let (out, csv) = sweep(
        "tests/data/doc/tiny_train.yaml",
        &["--compute", "tiled"],
        "tiled",
    );
    assert!(csv.contains(",flow,tiled,"), "{csv}");
    for f in [
        "train_step_components.svg",
        "train_mfu.svg",
        "train_exposed_share.svg",
    ] {
        assert!(out.join(f).exists(), "{f}");
    }
}

/// GPT layers under DP 2 × TP 2 × PP 2 in functional mode, with and
/// without sequence parallelism: every rank's reduced gradients are, element
/// by element, the f16 sum of its DP pair's own gradients; the model FLOPs
/// are Megatron's 3 × 24·b·s·h²·(1 + s/(6h)) per layer and micro-batch over
/// the DP replicas; every rank's record holds its layers' kernels.
#[test]
fn transformer_steps_reduce_their_gradients_over_dp() {
    let sys = ideal(8);
    for sequence_parallel in [false, true] {
        let mut s = step(2, 2, Schedule::OneFOneB, 2);
        s.model = Model::Transformer;
        s.parallel.tp = 2;
        s.tp_options.sequence_parallel = sequence_parallel;
        let r = run(&sys, &s, DataMode::Functional);
        let (b, sq, h) = (1u64, 32u64, 64u64);
        let layer = 24 * b * sq * h * h + 4 * b * sq * sq * h;
        assert_eq!(layer * 6 * h, 24 * b * sq * h * h * (6 * h + sq));
        assert_eq!(
            r.model_flops,
            3 * layer * 2 * 2 * 2,
            "SP {sequence_parallel}"
        );
        let l = s.parallel;
        for rank in 0..8 {
            let (tp, dp, pp) = (
                l.coord(rank, Axis::Tp),
                l.coord(rank, Axis::Dp),
                l.coord(rank, Axis::Pp),
            );
            let peer = l.rank_at(1 - dp, tp, pp) as usize;
            let (mine, theirs) = (&r.local_grads[rank as usize], &r.local_grads[peer]);
            assert_eq!(
                mine.len(),
                8,
                "fc2, fc1, LN2 γ β, out-proj, the fused QKV, LN1 γ β"
            );
            for (g, (a, b)) in mine.iter().zip(theirs).enumerate() {
                let sum: Vec<f32> = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| half::f16::from_f32(x + y).to_f32())
                    .collect();
                assert_eq!(r.grads[rank as usize][g], sum, "rank {rank} gradient {g}");
            }
            let kernels = r.records[rank as usize]
                .iter()
                .filter(|w| w.class.name() == "compute")
                .count();
            assert!(kernels >= 2 * 20, "rank {rank}: {kernels} kernels recorded");
        }
    }
}
