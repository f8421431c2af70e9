//! Programs are compact and shared: a ring collective's program has the same
//! length on 16 participants as on 1,024, every participant of a role runs
//! the same program, and a loop runs exactly what its unrolled trace runs.

use crate::common;
use kernbench::ccl::{CclConfig, Collective, Job, ReduceOp};
use kernbench::kernel::wiring::{self, QueueConfig};
use kernbench::kernel::{Addr, DType, Tl};
use kernbench::machine::Machine;
use kernbench::spec::System;
use kernbench::topology::address::{Location, Space};
use kernbench_systems::PeIdx;
use kernbench_systems::memory::DataMode;
use kernbench_systems::program::{Launch, Op, QDir};
use std::collections::HashSet;
use std::sync::Arc;

/// ring_4096_lean with `sips` SIPs.
fn lean_ring(sips: u32) -> System {
    let text = include_str!("../../configs/topologies/ring_4096_lean.yaml")
        .replace("count: 4096", &format!("count: {sips}"));
    System::from_yaml(&text, "ring_lean").expect("a valid spec")
}

fn programs(
    sys: &System,
    algorithm: &str,
    collective: Collective,
    elems: usize,
) -> Vec<(PeIdx, Launch)> {
    // One piece per block, so program lengths compare across sizes (`auto`
    // would cut a 16-participant block into more pieces than a 1024 one).
    let mut config = CclConfig::embedded_default()
        .entry(algorithm)
        .unwrap()
        .clone();
    config.chunks = kernbench::ccl::Chunks::Fixed(1);
    let (m, comm) = common::communicator(sys, &config, DataMode::TimingOnly).unwrap();
    let job = Job {
        collective,
        op: ReduceOp::Sum,
        elems,
    };
    comm.programs(&m, job).unwrap()
}

/// Distinct programs (by identity) and the op count of each.
fn distinct(launches: &[(PeIdx, Launch)]) -> Vec<usize> {
    let mut seen = HashSet::new();
    launches
        .iter()
        .filter(|(_, l)| seen.insert(Arc::as_ptr(&l.program)))
        .map(|(_, l)| l.program.len())
        .collect()
}

#[test]
fn a_ring_program_has_the_same_length_on_16_and_1024_participants_and_is_shared() {
    for collective in [
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
    ] {
        let small = programs(&lean_ring(16), "ring", collective, 1 << 20);
        let large = programs(&lean_ring(1024), "ring", collective, 1 << 20);
        assert_eq!(small.len(), 16);
        assert_eq!(large.len(), 1024);
        let (ds, dl) = (distinct(&small), distinct(&large));
        assert_eq!(
            ds.len(),
            1,
            "{collective}: every participant shares one program"
        );
        assert_eq!(
            dl.len(),
            1,
            "{collective}: every participant shares one program"
        );
        assert_eq!(
            ds[0], dl[0],
            "{collective}: op count independent of participants"
        );
        // Each participant has its own ring position.
        let positions: HashSet<i64> = large.iter().map(|(_, l)| l.params[0]).collect();
        assert_eq!(positions.len(), 1024);
        let loops = large[0]
            .1
            .program
            .ops
            .iter()
            .filter(|op| matches!(op, Op::Loop { .. }));
        assert!(loops.count() >= 1, "{collective}: the steps are a loop");
    }
    // All-reduce: load and send own block, load the first; the reduce-scatter loop
    // (load, recv, add, send) and its last step (recv, add); send and store the
    // reduced block; the all-gather loop (recv, send, store) and its last step.
    let all_reduce = programs(&lean_ring(1024), "ring", Collective::AllReduce, 1 << 20);
    assert_eq!(
        all_reduce[0].1.program.len(),
        3 + (1 + 4) + 2 + 2 + (1 + 3) + 2
    );
}

#[test]
fn adr0032_and_hier_lanes_share_programs_by_role() {
    // hier_root (entry adr0032) on a ring of 1x1-cube SIPs: every SIP is a root cube, one role.
    let small = distinct(&programs(
        &lean_ring(16),
        "adr0032",
        Collective::AllReduce,
        4096,
    ));
    let large = distinct(&programs(
        &lean_ring(1024),
        "adr0032",
        Collective::AllReduce,
        4096,
    ));
    assert_eq!((small.len(), large.len()), (1, 1));
    assert_eq!(small, large, "the exchange rounds are a loop");
    // hier_lanes on the default system (4 SIPs x 16 cubes): ring positions
    // are parameters, so the 16 cubes of a SIP share a program; on rings of
    // one-cube SIPs every participant shares one, of the same length on 16
    // SIPs as on 256.
    let sys = System::embedded_default();
    let launches = programs(&sys, "hier_lanes", Collective::AllReduce, 1 << 16);
    assert_eq!(launches.len(), 64);
    assert_eq!(distinct(&launches).len(), 4);
    let small = distinct(&programs(
        &lean_ring(16),
        "hier_lanes",
        Collective::AllReduce,
        1 << 16,
    ));
    let large = distinct(&programs(
        &lean_ring(256),
        "hier_lanes",
        Collective::AllReduce,
        1 << 16,
    ));
    assert_eq!((small.len(), large.len()), (1, 1));
    assert_eq!(small, large, "the ring steps are loops");
}

/// `rounds` of send east / recv west / add, as a loop or unrolled by hand.
fn ring_rounds(tl: &mut Tl, &(elems, rounds, looped): &(usize, usize, bool)) {
    let acc = tl.load(Addr::tcm(0), elems);
    let step = |tl: &mut Tl, acc: kernbench::kernel::Tile| {
        tl.send(QDir::E, acc);
        let x = tl.recv(QDir::W, &[elems], DType::F16);
        tl.add(acc, x)
    };
    let acc = if looped {
        tl.repeat(rounds, &[acc], |tl, _, a| vec![step(tl, a[0])])[0]
    } else {
        (0..rounds).fold(acc, |a, _| step(tl, a))
    };
    tl.store(Addr::tcm(1 << 16), acc);
}

fn tcm(sip: u32, offset: u64) -> Location {
    Location {
        space: Space::Tcm,
        sip,
        cube: 0,
        pe: 0,
        offset,
    }
}

#[test]
fn a_loop_runs_exactly_what_its_unrolled_trace_runs() {
    let sys = lean_ring(8);
    let (elems, rounds) = (1000, 7);
    let mut results = Vec::new();
    for looped in [true, false] {
        let mut m = Machine::build_with(&sys, DataMode::Functional).unwrap();
        let pes: Vec<PeIdx> = (0..8).map(|s| m.pe_index(s, 0, 0)).collect();
        let q = QueueConfig {
            buffer: Space::Sram,
            n_slots: 2,
            slot_size: 512,
        };
        m.install(wiring::ring(&pes, QDir::E, q).unwrap()).unwrap();
        for s in 0..8u32 {
            let v: Vec<half::f16> = (0..elems)
                .map(|i| half::f16::from_f32(((s as usize * 7 + i) % 5) as f32))
                .collect();
            m.write(tcm(s, 0), &v).unwrap();
        }
        let traced = m
            .trace(ring_rounds, &(elems, rounds, looped), &pes)
            .unwrap();
        let ops = traced[0].1.program.len();
        let run = m
            .launch(ring_rounds, &(elems, rounds, looped), &pes)
            .unwrap();
        let out = m.read(tcm(3, 1 << 16), elems).unwrap();
        results.push((ops, run.kernel_end - run.kernel_start, out));
    }
    let (looped, unrolled) = (&results[0], &results[1]);
    assert_eq!(
        looped.0,
        1 + 1 + 3 + 1,
        "load, loop marker, body of three, store"
    );
    assert_eq!(unrolled.0, 1 + 3 * rounds + 1);
    assert_eq!(looped.1, unrolled.1, "same ticks");
    assert_eq!(looped.2, unrolled.2, "same values");
}

#[test]
fn a_table_or_launch_naming_a_missing_pe_is_an_error_not_a_panic() {
    let sys = lean_ring(8);
    let mut m = Machine::build(&sys).unwrap();
    let q = QueueConfig {
        buffer: Space::Sram,
        n_slots: 2,
        slot_size: 512,
    };
    let e = m
        .install(wiring::ring(&[PeIdx(0), PeIdx(17)], QDir::E, q).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("names PE 17") && e.contains("has 8 PEs") && e.contains("pe_index"),
        "{e}"
    );
    let e = m
        .launch(ring_rounds, &(8, 2, true), &[PeIdx(0), PeIdx(9)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("PE 9 does not exist") && e.contains("8 PEs"),
        "{e}"
    );
}
