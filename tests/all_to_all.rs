//! All-to-all: the correctness matrix, the pairwise closed form, bounds and
//! refusals (docs/model.md §Collectives).

mod common;
use common::system;
use kernbench::ccl::{AlgoConfig, CclConfig, CclError, Collective, Job, ReduceOp};
use kernbench::spec::{SipTopology, System};
use kernbench::topology::address::Space;
use kernbench_systems::memory::DataMode;

const ALGORITHMS: [&str; 1] = ["pairwise"];

fn cfg(algorithm: &str, buffer: Space, chunks: u32) -> AlgoConfig {
    AlgoConfig {
        name: algorithm.into(),
        algorithm: algorithm.into(),
        buffer_kind: buffer,
        n_slots: 4,
        slot_size: 4096,
        chunks,
        world_size: None,
        mapper: "leader_only".into(),
        validator: None,
    }
}

fn job(elems: usize) -> Job {
    Job {
        collective: Collective::AllToAll,
        op: ReduceOp::Sum,
        elems,
    }
}

fn sips(n: u32, topology: SipTopology, grid: Option<(u32, u32)>, cubes: (u32, u32)) -> System {
    system(|s| {
        s.system.sips.count = n;
        s.system.sips.topology = topology;
        (s.system.sips.w, s.system.sips.h) = (grid.map(|g| g.0), grid.map(|g| g.1));
        (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = cubes;
    })
}

/// The SIP counts of the matrix and their grids on 2D topologies.
const COUNTS: [(u32, (u32, u32)); 5] = [
    (1, (1, 1)),
    (2, (2, 1)),
    (5, (5, 1)),
    (6, (3, 2)),
    (16, (4, 4)),
];

/// Every algorithm × SIP count × cube mesh on one topology, functional:
/// every participant's every block matches the reference and no run beats
/// its bound. Buffer kinds and chunks vary with the case so all are covered.
fn matrix(topology: SipTopology) {
    let mut runs = 0;
    for (k, (n, grid)) in COUNTS.into_iter().enumerate() {
        let grid = (topology != SipTopology::Ring1d).then_some(grid);
        for cubes in [(1, 1), (2, 3)] {
            let sys = sips(n, topology, grid, cubes);
            for algo in ALGORITHMS {
                let buffer = [Space::Tcm, Space::Sram, Space::Hbm][(k + runs) % 3];
                let chunks = 1 + (k as u32 + cubes.0) % 3;
                let config = cfg(algo, buffer, chunks);
                let (mut m, c) = common::communicator(&sys, &config, DataMode::Functional)
                    .unwrap_or_else(|e| panic!("{algo} on {n} SIPs: {e}"));
                let p = c.group.size();
                for elems in [p * 5, p * 16] {
                    let what = format!(
                        "{algo} on {n} SIPs {topology:?}, cubes {cubes:?}, {buffer:?}, {chunks} chunks, {elems} elems"
                    );
                    let r = c
                        .run(&mut m, job(elems))
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(r.verified, Some(true), "wrong values: {what}");
                    assert!(r.ticks >= r.bound_ticks, "beat the bound: {what}: {r:?}");
                    runs += 1;
                }
            }
        }
    }
    assert_eq!(runs, COUNTS.len() * 2 * ALGORITHMS.len() * 2);
}

#[test]
fn matrix_ring_1d() {
    matrix(SipTopology::Ring1d);
}

#[test]
fn matrix_torus_2d() {
    matrix(SipTopology::Torus2d);
}

#[test]
fn matrix_mesh_2d_no_wrap() {
    matrix(SipTopology::Mesh2dNoWrap);
}

const B: u64 = 64; // inter-SIP bytes per tick
const L: u64 = 100; // inter-SIP latency, ticks
const CREDIT: u64 = 16; // control.credit_bytes of the default spec

/// `algo` on a lean ring of `n` SIPs (1x1 cubes, only inter-SIP links cost
/// time, ideal memories), one chunk, slots larger than any block; verified.
fn lean_run(n: u32, algo: &str, bytes: u64) -> kernbench::ccl::CollResult {
    let sys = common::lean_links(n, B, L);
    let mut config = cfg(algo, Space::Tcm, 1);
    config.slot_size = 1 << 24;
    let (mut m, c) = common::communicator(&sys, &config, DataMode::Functional).unwrap();
    let r = c.run(&mut m, job((bytes / 2) as usize)).unwrap();
    assert_eq!(r.verified, Some(true));
    assert!(r.ticks >= r.bound_ticks, "{algo} beat its bound: {r:?}");
    r
}

/// docs/model.md §Collectives, closed forms: step d of m = ⌊n/2⌋ sends a
/// block of S/n over d hops each way, L + ⌈S/(nB)⌉ per hop; from step 2 on
/// the first hop waits behind the credit of the previous step's block.
#[test]
fn pairwise_closed_form() {
    for n in [2u64, 3, 4, 5, 8] {
        for s in [n * 128, n * 4096, n * 20_000] {
            let m = n / 2;
            let expect = m * (m + 1) / 2 * (L + (s / n).div_ceil(B)) + (m - 1) * CREDIT.div_ceil(B);
            let r = lean_run(n as u32, "pairwise", s);
            assert_eq!(r.ticks, expect, "n={n} S={s}");
        }
    }
}
