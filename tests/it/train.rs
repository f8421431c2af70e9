//! The training step: the 1F1B and GPipe closed forms on ideal links, DP
//! gradients overlapped with backward, DP gradient sums, determinism.

use crate::common::system;
use kernbench::autotune::init_process_group;
use kernbench::ccl::CclConfig;
use kernbench::gemm::Placement;
use kernbench::spec::System;
use kernbench::train::{
    AxisOrder, DpReduce, Model, ModelShape, Parallel, Schedule, TrainReport, TrainStep, train_step,
};
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

fn step(dp: u32, pp: u32, schedule: Schedule, m: usize) -> TrainStep {
    TrainStep {
        model: Model::Uniform,
        shape: ModelShape {
            hidden: 64,
            seq: 32,
            micro_batch: 1,
            layers_per_stage: 1,
        },
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

#[test]
fn explore() {
    let sys = ideal(2);
    for (p, m) in [(1, 1), (2, 4)] {
        let mut st = step(1, p, Schedule::OneFOneB, m);
        st.placement = Placement::Owners;
        let r = run(&sys, &st, DataMode::TimingOnly);
        eprintln!("p {p} m {m} step {} {:?}", r.step, r.ranks);
        for rec in &r.records {
            for w in rec {
                eprintln!("  {} {} {}", w.class.name(), w.start, w.end);
            }
        }
    }
}
