//! All-to-all: the correctness matrix, the pairwise closed form, bounds and
//! refusals (docs/model.md §Collectives).

use crate::common;
use common::system;
use kernbench::ccl::{CclConfig, CclError, Collective, Job, ReduceOp};
use kernbench::spec::{SipTopology, System};
use kernbench::topology::address::Space;
use kernbench_systems::memory::DataMode;

/// The registered algorithms that run all-to-all only (pairwise, bruck),
/// so a new one joins the matrix unasked.
fn algorithms() -> Vec<&'static str> {
    kernbench::ccl::algorithms::ALL
        .iter()
        .filter(|a| a.collectives() == [Collective::AllToAll])
        .map(|a| a.name())
        .collect()
}

use common::algo_config as cfg;

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
            for algo in algorithms() {
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
    assert_eq!(runs, COUNTS.len() * 2 * algorithms().len() * 2);
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

/// docs/model.md §Collectives, closed forms: every block leaves at once.
/// The e = ⌊n/2⌋ blocks a member routes east (distances 1..e, the tie
/// n/2 included) queue on its east link, T_b = ⌈S/(nB)⌉ each; the last of
/// them then crosses h = e hops of L + T_b, never waiting
/// behind a forwarded block while a link holds at most one of them at a
/// time (e ≤ 2, or L ≥ (e − 1)·T_b). Beyond that forwarded blocks queue
/// behind each other: the two n = 8 points outside it are pinned as
/// measured, above the form.
#[test]
fn pairwise_closed_form() {
    for n in [2u64, 3, 4, 5, 8] {
        for s in [n * 128, n * 4096, n * 20_000] {
            let (h, e, tb) = (n / 2, n / 2, (s / n).div_ceil(B));
            let form = h * (L + tb) + (e - 1) * tb;
            let r = lean_run(n as u32, "pairwise", s);
            let expect = match (n, s) {
                _ if e <= 2 || L >= (e - 1) * tb => form,
                (8, 32_768) => 877,
                (8, 160_000) => 3333,
                _ => unreachable!("every case is listed"),
            };
            assert!(
                expect >= form,
                "n={n} S={s}: {expect} under the form {form}"
            );
            assert_eq!(r.ticks, expect, "n={n} S={s}");
        }
    }
}

/// The bisection term on its closed forms, and only for all-to-all: a
/// lean ring cuts 2 links each way, a 4x4 torus 8, a 4x4 mesh 4, a 2x4
/// mesh (taller than wide) cuts its rows: 2 links.
#[test]
fn the_bisection_term_cuts_the_longer_dimension_in_half() {
    use kernbench::ccl::bound::lower_bound;
    let s: u64 = 16 * 4096;
    let inter = 100; // bytes per tick of the default inter-SIP links
    let cases = [
        // (SIPs, topology, grid, bytes crossing one way, crossing links)
        (8, SipTopology::Ring1d, None, 4 * 4 * s / 8, 2),
        (5, SipTopology::Ring1d, None, 2 * 3 * s / 5, 2),
        (16, SipTopology::Torus2d, Some((4, 4)), 8 * 8 * s / 16, 8),
        (
            16,
            SipTopology::Mesh2dNoWrap,
            Some((4, 4)),
            8 * 8 * s / 16,
            4,
        ),
        (8, SipTopology::Mesh2dNoWrap, Some((2, 4)), 4 * 4 * s / 8, 2),
    ];
    for (n, topology, grid, bytes, links) in cases {
        let sys = common::lean(n, topology, grid);
        let (m, c) =
            common::communicator(&sys, &cfg("pairwise", Space::Tcm, 1), DataMode::TimingOnly)
                .unwrap();
        let mut j = job((s / 2) as usize);
        let b = lower_bound(&m, &sys, &c.group, &j);
        let bisection = b.terms.iter().find(|t| t.0 == "bisection");
        assert_eq!(
            bisection,
            Some(&("bisection", bytes / (links * inter))),
            "{n} SIPs {topology:?} {grid:?}: {b:?}"
        );
        for other in Collective::ALL
            .into_iter()
            .filter(|&k| k != Collective::AllToAll)
        {
            j.collective = other;
            let b = lower_bound(&m, &sys, &c.group, &j);
            assert!(b.terms.iter().all(|t| t.0 != "bisection"), "{other}: {b:?}");
        }
    }
}

/// A large all-to-all on a lean ring is set by the bisection; both
/// algorithms stay above their bound on a non-ideal torus too.
#[test]
fn no_run_beats_its_bound() {
    let r = lean_run(8, "pairwise", 8 << 16);
    assert_eq!(r.bound_term, "bisection", "{r:?}");
    assert_eq!(r.bound_ticks, 4 * 4 * (1 << 16) / (2 * B));
    let sys = sips(6, SipTopology::Torus2d, Some((3, 2)), (2, 2));
    let ccl = CclConfig::embedded_default();
    for algo in algorithms() {
        let entry = ccl.entry(algo).unwrap();
        let (mut m, c) = common::communicator(&sys, entry, DataMode::TimingOnly).unwrap();
        for elems in [24, 24 << 6, 24 << 12] {
            let r = c.run(&mut m, job(elems)).unwrap();
            assert!(r.ticks >= r.bound_ticks, "{algo}, {elems} elems: {r:?}");
        }
    }
}

/// A size that does not split into one block per participant is refused
/// before anything runs, naming the size, the count and the sizes allowed.
#[test]
fn a_size_that_is_not_a_multiple_of_the_participants_is_refused() {
    let sys = common::lean_links(6, B, L);
    let (mut m, c) =
        common::communicator(&sys, &cfg("pairwise", Space::Tcm, 1), DataMode::Functional).unwrap();
    let e = c.run(&mut m, job(1000)).unwrap_err().to_string();
    assert_eq!(
        e,
        "pairwise: all_to_all of 2000 B per participant over 6 participants: the buffer must split into 6 equal blocks of whole f16 elements; allowed: a multiple of 12 B (6 participants x 2 B), e.g. 1992 B or 2004 B"
    );
    assert!(c.programs(&m, job(1000)).is_err());
    let e = c.run(&mut m, job(5)).unwrap_err().to_string();
    assert!(e.ends_with("e.g. 12 B"), "{e}");
    assert!(c.run(&mut m, job(1002)).is_ok());
    // Algorithms without all-to-all say so.
    let (mut m, c) =
        common::communicator(&sys, &cfg("ring", Space::Tcm, 1), DataMode::Functional).unwrap();
    match c.run(&mut m, job(1002)) {
        Err(CclError::Unsupported { what, .. }) => assert!(what.contains("all_to_all"), "{what}"),
        other => panic!("ring ran all_to_all: {other:?}"),
    }
}

/// Pairwise wires one channel per distance: more than 256 participants are
/// refused at install naming the limit; slot areas that outgrow a TCM are
/// refused naming the fix, and the shipped entry (sram) fits.
#[test]
fn pairwise_limits_name_their_fix() {
    let config = cfg("pairwise", Space::Tcm, 1);
    let sys = common::lean(257, SipTopology::Ring1d, None);
    let Err(e) = common::communicator(&sys, &config, DataMode::TimingOnly) else {
        panic!("257 participants installed");
    };
    let e = e.to_string();
    assert!(
        e.starts_with("pairwise (pairwise): a group of 257 participants")
            && e.contains("at most 256 participants")
            && e.contains("allowed: fewer SIPs or cubes"),
        "{e}"
    );
    // 31 queues of 4 x 64 KiB do not fit a 4 MiB TCM.
    let sys = common::lean(32, SipTopology::Ring1d, None);
    let mut big = config.clone();
    big.slot_size = 65536;
    let Err(e) = common::communicator(&sys, &big, DataMode::TimingOnly) else {
        panic!("7.75 MiB of slots in a 4 MiB TCM");
    };
    let e = e.to_string();
    assert!(
        e.contains("cannot hold the IPCQ slot area") && e.contains("another buffer_kind"),
        "{e}"
    );
    let shipped = CclConfig::embedded_default();
    let entry = shipped.entry("pairwise").unwrap();
    assert_eq!((entry.buffer_kind, entry.slot_size), (Space::Sram, 16384));
    let sys = common::lean(256, SipTopology::Ring1d, None);
    assert!(common::communicator(&sys, entry, DataMode::TimingOnly).is_ok());
}

/// Every participant runs the same program: the position is a parameter.
#[test]
fn participants_share_one_program() {
    let sys = common::lean(16, SipTopology::Ring1d, None);
    let ccl = CclConfig::embedded_default();
    for algo in algorithms() {
        let (m, c) =
            common::communicator(&sys, ccl.entry(algo).unwrap(), DataMode::TimingOnly).unwrap();
        let launches = c.programs(&m, job(16 * 64)).unwrap();
        assert_eq!(launches.len(), 16);
        let first = &launches[0].1.program;
        assert!(
            launches
                .iter()
                .all(|(_, l)| std::sync::Arc::ptr_eq(&l.program, first)),
            "{algo}"
        );
        // pairwise: 15 loads; 7 steps of two sends, two recvs, two stores,
        // one of one each. bruck: 15 loads; 4 steps of 8 sends and recvs;
        // 15 stores.
        let ops = if algo == "pairwise" {
            15 + 7 * 6 + 3
        } else {
            15 + 4 * 8 * 2 + 15
        };
        assert_eq!(first.len(), ops, "{algo}");
    }
}

/// With every pairwise block in flight at once, pairwise beats Bruck's
/// ⌈log2 n⌉ steps on 16 participants (4 SIPs of 2x2 cubes, the shipped
/// entries) at 1 KiB as at 1 MiB: a member's blocks all leave in one pass,
/// while Bruck forwards half of them at each of its steps.
#[test]
fn pairwise_beats_bruck_on_small_and_large_blocks() {
    let sys = sips(4, SipTopology::Ring1d, None, (2, 2));
    let ccl = CclConfig::embedded_default();
    let ticks = |algo: &str, bytes: usize| {
        let (mut m, c) =
            common::communicator(&sys, ccl.entry(algo).unwrap(), DataMode::TimingOnly).unwrap();
        c.run(&mut m, job(bytes / 2)).unwrap().ticks
    };
    assert_eq!(
        (ticks("bruck", 1 << 10), ticks("pairwise", 1 << 10)),
        (1837, 893)
    );
    assert_eq!(
        (ticks("bruck", 1 << 20), ticks("pairwise", 1 << 20)),
        (28153, 9331)
    );
}
