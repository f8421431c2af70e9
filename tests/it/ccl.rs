//! The collective library: closed forms, the correctness matrix, bounds.

use crate::common;
use common::system;
use kernbench::ccl::{CclConfig, CclError, Collective, Job, ReduceOp};
use kernbench::spec::{SipTopology, System};
use kernbench::topology::address::Space;
use kernbench_systems::memory::DataMode;

use common::algo_config as cfg;

#[test]
fn smoke_every_algorithm_all_reduce() {
    let sys = system(|s| {
        s.system.sips.count = 4;
        s.sip.cube_mesh.w = 2;
        s.sip.cube_mesh.h = 2;
    });
    for algo in matrix_algorithms() {
        let (mut m, c) =
            common::communicator(&sys, &cfg(algo, Space::Tcm, 2), DataMode::Functional).unwrap();
        let r = c
            .run(
                &mut m,
                Job {
                    collective: Collective::AllReduce,
                    op: ReduceOp::Sum,
                    elems: 1000,
                },
            )
            .unwrap();
        println!(
            "{algo}: {} ticks, bound {} ({:.1}%), verified {:?}",
            r.ticks, r.bound_ticks, r.pct_of_bound, r.verified
        );
        assert_eq!(r.verified, Some(true), "{algo}");
    }
}

const B: u64 = 64; // inter-SIP bytes per tick
const L: u64 = 100; // inter-SIP latency, ticks
const LANES: u64 = 256; // pe.vector_lanes of the default spec
const CREDIT: u64 = 16; // control.credit_bytes of the default spec

/// n SIPs of one cube on a ring; only inter-SIP links and the PE's vector unit cost time.
fn lean_ring(n: u32) -> System {
    common::lean_links(n, B, L)
}

fn ticks(sys: &System, algo: &str, elems: usize) -> u64 {
    let mut config = cfg(algo, Space::Tcm, 1);
    config.slot_size = 1 << 24;
    let (mut m, c) = common::communicator(sys, &config, DataMode::Functional).unwrap();
    let r = c
        .run(
            &mut m,
            Job {
                collective: Collective::AllReduce,
                op: ReduceOp::Sum,
                elems,
            },
        )
        .unwrap();
    assert_eq!(r.verified, Some(true));
    assert!(r.ticks >= r.bound_ticks, "{algo} beat its bound: {r:?}");
    r.ticks
}

#[test]
fn ring_all_reduce_closed_form() {
    // 2(n−1) steps of L + ⌈S/(nB)⌉, plus one vector add of S/n per reduce-scatter step.
    for n in [2u64, 3, 4, 8] {
        for s in [n * 128, n * 4096, n * 20_000] {
            let expect =
                2 * (n - 1) * (L + (s / n).div_ceil(B)) + (n - 1) * (s / n / 2).div_ceil(LANES);
            assert_eq!(
                ticks(&lean_ring(n as u32), "ring", (s / 2) as usize),
                expect,
                "n={n} S={s}"
            );
        }
    }
}

#[test]
fn bidir_ring_all_reduce_closed_form() {
    // Two rings, one per direction, each with half of every block: 2(n−1)
    // steps of L + ⌈S/(2nB)⌉ plus one add of S/(4n) elements per
    // reduce-scatter step; the second ring's add waits for the first's on
    // the one vector unit, so it ends one add later. (Half-blocks of a
    // couple of link ticks come out one tick later: there the first ring's
    // credits, which travel on the second ring's links, meet its data.)
    for n in [3u64, 4, 8] {
        for s in [n * 4096, n * 20_000, n * 65_536] {
            let v = (s / n / 4).div_ceil(LANES);
            let expect = 2 * (n - 1) * (L + (s / n / 2).div_ceil(B)) + n * v;
            assert_eq!(
                ticks(&lean_ring(n as u32), "bidir_ring", (s / 2) as usize),
                expect,
                "n={n} S={s}"
            );
        }
    }
}

/// rhd all-reduce on 2 and 4 SIPs of a lean ring (`C` = ⌈credit_bytes/B⌉).
///
/// n = 2: one exchange of halves, an add of S/4 elements, one exchange back.
///
/// n = 4 (all-reduce splits on bit 0 first: partners 1 hop, then 2 hops,
/// both ways east by the tie rule): step 0 sends the partner's two quarters
/// in the order it needs them, arriving at L + T and L + 2T (T = ⌈S/4B⌉);
/// the first is added and forwarded 2 hops at once, so step 1's quarter
/// arrives at 3(L + T) + V and the reduce-scatter ends one add later. The
/// all-gather sends the quarter 2 hops and, at once, 1 hop; the quarter from
/// 2 hops away arrives 2(L + T) later and goes on 1 hop, behind the credit
/// its receiver just sent on the same east link: 3(L + T) + C. Exact while
/// T ≤ L (the forwarded quarter finds the first link free).
#[test]
fn rhd_all_reduce_closed_form() {
    let c = CREDIT.div_ceil(B);
    for s in [256u64, 2048, 8192, 40_000, 131_072] {
        let expect = 2 * (L + (s / 2).div_ceil(B)) + (s / 4).div_ceil(LANES);
        assert_eq!(
            ticks(&lean_ring(2), "rhd", (s / 2) as usize),
            expect,
            "n=2 S={s}"
        );
    }
    for s in [512u64, 4096, 16_000, 25_600] {
        let (t, v) = ((s / 4).div_ceil(B), (s / 8).div_ceil(LANES));
        assert!(t <= L);
        let expect = 6 * (L + t) + 2 * v + c;
        assert_eq!(
            ticks(&lean_ring(4), "rhd", (s / 2) as usize),
            expect,
            "n=4 S={s}"
        );
    }
}

/// At 1 KiB on 16 SIPs of one cube (the shipped ccl.yaml entries, default
/// links): rhd's 2·log2 16 = 8 steps against ring's 30. On a ring the
/// partners 2^b apart add up to as many hops as ring's steps, so rhd saves
/// only their per-step costs; on a 4×4 torus its partners are at most 2
/// hops away.
#[test]
fn rhd_beats_ring_at_1k_on_16_sips() {
    let ccl = CclConfig::embedded_default();
    let run = |sys: &System, name: &str| {
        let entry = ccl.entry(name).expect("a shipped entry");
        let (mut m, c) = common::communicator(sys, entry, DataMode::TimingOnly).unwrap();
        let job = Job {
            collective: Collective::AllReduce,
            op: ReduceOp::Sum,
            elems: 512,
        };
        c.run(&mut m, job).unwrap().ticks
    };
    let ring_1d = sips(16, SipTopology::Ring1d, None, (1, 1));
    let torus = sips(16, SipTopology::Torus2d, Some((4, 4)), (1, 1));
    assert_eq!((run(&ring_1d, "rhd"), run(&ring_1d, "ring")), (9671, 10072));
    assert_eq!((run(&torus, "rhd"), run(&torus, "ring")), (4035, 10072));
}

/// dbtree on a lean ring, each tree with half the buffer (T = ⌈S/2B⌉,
/// V = V(S/4), C = ⌈credit_bytes/B⌉).
///
/// n = 2: both trees are the one link pair 0–1. Broadcast: the halves back
/// to back, L + 2T; reduce: one add after the second, L + 2T + V;
/// all-reduce: 0 adds the first half and returns it at once, adds the
/// second (arrived T later) and returns it behind the first and behind the
/// credit it sent for the second on the same link: 2L + 3T + V + C.
///
/// n = 3: tree 0 is the chain 0 – 2 – 1, tree 1 the chain 0 – 1 – 2, one
/// hop each over the ring's links, the two trees in opposite directions.
/// Broadcast 2(L + T); reduce adds once in the middle and twice at the
/// root, one half after the other: 2(L + T) + 3V; all-reduce goes back
/// down: 4(L + T) + 3V.
#[test]
fn dbtree_closed_forms() {
    let c = CREDIT.div_ceil(B);
    for s in [256u64, 2048, 8192, 40_000, 131_072] {
        let (t, v) = ((s / 2).div_ceil(B), (s / 4).div_ceil(LANES));
        let run = |n, collective| timing_run(&lean_ring(n), "dbtree", collective, s).unwrap();
        assert_eq!(run(2, Collective::Broadcast), L + 2 * t, "n=2 S={s}");
        assert_eq!(run(2, Collective::Reduce), L + 2 * t + v, "n=2 S={s}");
        assert_eq!(
            run(2, Collective::AllReduce),
            2 * L + 3 * t + v + c,
            "n=2 S={s}"
        );
        assert_eq!(run(3, Collective::Broadcast), 2 * (L + t), "n=3 S={s}");
        assert_eq!(run(3, Collective::Reduce), 2 * (L + t) + 3 * v, "n=3 S={s}");
        assert_eq!(
            run(3, Collective::AllReduce),
            4 * (L + t) + 3 * v,
            "n=3 S={s}"
        );
        // The values too.
        assert_eq!(
            ticks(&lean_ring(3), "dbtree", (s / 2) as usize),
            4 * (L + t) + 3 * v
        );
    }
}

/// At 256 KiB on a 16-SIP 4×4 torus of one cube (the shipped entries,
/// default links), both trees' halves pipeline where the binomial tree
/// sends the whole buffer at every level.
#[test]
fn dbtree_beats_tree_at_256k_on_16_sips() {
    let ccl = CclConfig::embedded_default();
    let torus = sips(16, SipTopology::Torus2d, Some((4, 4)), (1, 1));
    let run = |name: &str, collective| {
        let entry = ccl.entry(name).expect("a shipped entry");
        let (mut m, c) = common::communicator(&torus, entry, DataMode::TimingOnly).unwrap();
        let job = Job {
            collective,
            op: ReduceOp::Sum,
            elems: 128 << 10,
        };
        c.run(&mut m, job).unwrap().ticks
    };
    let both = |collective| (run("dbtree", collective), run("tree", collective));
    assert_eq!(
        [
            both(Collective::AllReduce),
            both(Collective::Broadcast),
            both(Collective::Reduce)
        ],
        [(13639, 37827), (9168, 15925), (7359, 23225)]
    );
}

#[test]
fn adr0032_single_cube_ring_closed_form() {
    // n−1 rounds of the whole vector, L + ⌈S/B⌉ each; the received vector is
    // forwarded before it is added, so only the last add is exposed.
    for n in [2u64, 3, 4, 8] {
        for s in [256u64, 8192, 40_000] {
            let expect = (n - 1) * (L + s.div_ceil(B)) + (s / 2).div_ceil(LANES);
            assert_eq!(
                ticks(&lean_ring(n as u32), "adr0032", (s / 2) as usize),
                expect,
                "n={n} S={s}"
            );
        }
    }
}

/// Algorithms with matrices of their own: all-to-all only
/// (tests/it/all_to_all.rs), dims (`grid_matrix`), torus_trees (one
/// participant per SIP: its own tests).
const OWN_MATRIX: [&str; 4] = ["pairwise", "bruck", "dims", "torus_trees"];

/// The shipped algorithms the matrices below run: every registered one
/// without a matrix of its own, so a new algorithm joins them unasked.
fn matrix_algorithms() -> Vec<&'static str> {
    kernbench::ccl::algorithms::names()
        .into_iter()
        .filter(|a| !OWN_MATRIX.contains(a))
        .collect()
}

const CUBE_MESHES: [(u32, u32); 4] = [(1, 1), (2, 2), (4, 4), (3, 5)];
const BUFFERS: [Space; 3] = [Space::Tcm, Space::Sram, Space::Hbm];
const OPS: [ReduceOp; 3] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min];

/// Runs `collective` with `op` on `elems` elements, which must succeed,
/// give the reference values and stay at or above its bound; `what` names
/// it in a failure.
fn run_checked(
    m: &mut kernbench::machine::Machine,
    c: &kernbench::ccl::Communicator,
    (collective, op, elems): (Collective, ReduceOp, usize),
    what: &str,
) {
    let job = Job {
        collective,
        op,
        elems,
    };
    let r = c.run(m, job).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(r.verified, Some(true), "wrong values: {what}");
    assert!(r.ticks >= r.bound_ticks, "beat the bound: {what}: {r:?}");
}

fn sips(n: u32, topology: SipTopology, grid: Option<(u32, u32)>, cubes: (u32, u32)) -> System {
    system(|s| {
        s.system.sips.count = n;
        s.system.sips.topology = topology;
        (s.system.sips.w, s.system.sips.h) = (grid.map(|g| g.0), grid.map(|g| g.1));
        (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = cubes;
    })
}

/// Every algorithm × collective × cube mesh × buffer kind on one SIP
/// topology, in functional mode: values match the reference on every
/// participant, unsupported collectives fail naming algorithm and collective,
/// and no run beats its bound.
fn matrix(n: u32, topology: SipTopology, grid: Option<(u32, u32)>) {
    let mut runs = 0;
    for cubes in CUBE_MESHES {
        let sys = sips(n, topology, grid, cubes);
        for (b, buffer) in BUFFERS.into_iter().enumerate() {
            for algo in matrix_algorithms() {
                let (mut m, c) =
                    common::communicator(&sys, &cfg(algo, buffer, 2), DataMode::Functional)
                        .unwrap();
                for (k, collective) in Collective::ALL.into_iter().enumerate() {
                    let op = OPS[(b + k) % 3];
                    let job = Job {
                        collective,
                        op,
                        elems: 131,
                    };
                    let what = format!(
                        "{algo} {collective} {op:?} on {n} SIPs {topology:?} {grid:?}, cubes {cubes:?}, {buffer:?}"
                    );
                    match c.run(&mut m, job) {
                        Ok(r) => {
                            assert_eq!(r.verified, Some(true), "wrong values: {what}");
                            assert!(r.ticks >= r.bound_ticks, "beat the bound: {what}: {r:?}");
                            runs += 1;
                        }
                        Err(CclError::Unsupported {
                            algorithm, what: w, ..
                        }) => {
                            assert_eq!(algorithm, algo);
                            assert!(w.contains(collective.name()), "{w}");
                            assert!(
                                !c.algorithm.collectives().contains(&collective),
                                "{what} claimed support"
                            );
                        }
                        Err(e) => panic!("{what}: {e}"),
                    }
                }
            }
        }
    }
    // Every supported (algorithm, collective) pair (25 today) × 4 cube
    // meshes × 3 buffer kinds.
    let pairs: usize = matrix_algorithms()
        .into_iter()
        .map(|a| {
            kernbench::ccl::algorithms::find(a)
                .unwrap()
                .collectives()
                .len()
        })
        .sum();
    assert_eq!(runs, pairs * 4 * 3);
}

#[test]
fn matrix_ring_1d_2() {
    matrix(2, SipTopology::Ring1d, None);
}
#[test]
fn matrix_ring_1d_3() {
    matrix(3, SipTopology::Ring1d, None);
}
#[test]
fn matrix_ring_1d_4() {
    matrix(4, SipTopology::Ring1d, None);
}
#[test]
fn matrix_ring_1d_8() {
    matrix(8, SipTopology::Ring1d, None);
}
#[test]
fn matrix_torus_2x2() {
    matrix(4, SipTopology::Torus2d, Some((2, 2)));
}
#[test]
fn matrix_torus_3x2() {
    matrix(6, SipTopology::Torus2d, Some((3, 2)));
}
#[test]
#[ignore = "exhaustive: cargo test --workspace -- --ignored"]
fn matrix_torus_4x4() {
    matrix(16, SipTopology::Torus2d, Some((4, 4)));
}
#[test]
fn matrix_mesh_2x3() {
    matrix(6, SipTopology::Mesh2dNoWrap, Some((2, 3)));
}
#[test]
#[ignore = "exhaustive: cargo test --workspace -- --ignored"]
fn matrix_mesh_4x4() {
    matrix(16, SipTopology::Mesh2dNoWrap, Some((4, 4)));
}

/// The latency-optimal algorithms (rhd, dbtree, dims) and the
/// bandwidth-optimal ones of every collective (bidir_ring, hier_lanes, with
/// their chains and trees): every collective each supports × op ×
/// SIP topology, on 1, 2, 5, 6 and 16 SIPs (2D grids 1×1, 2×1, 5×1, 3×2,
/// 4×4) of 1×1, 2×3 and 4×4 cubes (bidir_ring and hier_lanes: 4×4 cubes in
/// the matrices above), at 3 elements (fewer than most groups'
/// participants: empty blocks) and 131 (odd) — all-to-all 2 and 3 per
/// participant —, every buffer kind in turn;
/// values checked against the reference, no run under its bound,
/// unsupported collectives refused by name.
const GRID_MATRIX_ALGORITHMS: [&str; 5] = ["rhd", "dbtree", "dims", "bidir_ring", "hier_lanes"];

fn grid_matrix(topology: SipTopology) {
    let grids = [
        (1, (1, 1)),
        (2, (2, 1)),
        (5, (5, 1)),
        (6, (3, 2)),
        (16, (4, 4)),
    ];
    let mut runs = 0;
    for (k, (cubes, (n, grid))) in [(1, 1), (2, 3), (4, 4)]
        .into_iter()
        .flat_map(|c| grids.map(|g| (c, g)))
        .enumerate()
    {
        let grid = (topology != SipTopology::Ring1d).then_some(grid);
        let sys = sips(n, topology, grid, cubes);
        let buffer = BUFFERS[k % 3];
        for algo in GRID_MATRIX_ALGORITHMS {
            // The matrices above run these two on 4x4 cubes already; here
            // their 256 participants would take minutes of CI.
            if matches!(algo, "bidir_ring" | "hier_lanes") && cubes == (4, 4) {
                continue;
            }
            let (mut m, c) =
                common::communicator(&sys, &cfg(algo, buffer, 2), DataMode::Functional).unwrap();
            for (collective, op, elems) in Collective::ALL
                .into_iter()
                .flat_map(|c| OPS.map(|op| (c, op)))
                .flat_map(|(c, op)| [3, 131].map(|e| (c, op, e)))
            {
                // All-to-all needs equal blocks: 2 and 3 elements per participant.
                let elems = if collective == Collective::AllToAll {
                    c.group.size() * if elems == 3 { 2 } else { 3 }
                } else {
                    elems
                };
                let what = format!(
                    "{algo} {collective} {op:?} {elems} elements on {n} SIPs {topology:?} {grid:?}, cubes {cubes:?}, {buffer:?}"
                );
                match c.run(
                    &mut m,
                    Job {
                        collective,
                        op,
                        elems,
                    },
                ) {
                    Ok(r) => {
                        assert_eq!(r.verified, Some(true), "wrong values: {what}");
                        assert!(r.ticks >= r.bound_ticks, "beat the bound: {what}: {r:?}");
                        runs += 1;
                    }
                    Err(CclError::Unsupported { algorithm, .. }) => {
                        assert_eq!(algorithm, algo);
                        assert!(!c.algorithm.collectives().contains(&collective), "{what}");
                    }
                    Err(e) => panic!("{what}: {e}"),
                }
            }
        }
    }
    // rhd and dbtree: 3 collectives each, dims 6 (on 15 systems),
    // bidir_ring and hier_lanes 5 each (on the 10 of 1x1 and 2x3 cubes),
    // × 3 ops × 2 sizes.
    assert_eq!(runs, (12 * 15 + 10 * 10) * 3 * 2);
}

#[test]
fn grid_matrix_ring_1d() {
    grid_matrix(SipTopology::Ring1d);
}
#[test]
fn grid_matrix_torus_2d() {
    grid_matrix(SipTopology::Torus2d);
}
#[test]
fn grid_matrix_mesh_2d_no_wrap() {
    grid_matrix(SipTopology::Mesh2dNoWrap);
}

/// dims cuts a side longer than 16 into two digits (runs of neighbours,
/// then every a-th SIP): rings of 36 (6 × 6) and 40 (5 × 8) SIPs and a
/// 20 × 2 torus (5 × 4, then 2) give every collective × op the reference
/// values at 3 and 131 elements; a ring of 17 (prime: one line) too.
#[test]
fn dims_on_sides_cut_in_two_digits() {
    let systems = [
        sips(36, SipTopology::Ring1d, None, (1, 1)),
        sips(40, SipTopology::Ring1d, None, (1, 1)),
        sips(40, SipTopology::Torus2d, Some((20, 2)), (1, 1)),
        sips(17, SipTopology::Ring1d, None, (1, 1)),
    ];
    let mut runs = 0;
    for (k, sys) in systems.iter().enumerate() {
        let config = cfg("dims", BUFFERS[k % 3], 2);
        let (mut m, c) = common::communicator(sys, &config, DataMode::Functional).unwrap();
        for (collective, op, elems) in Collective::ALL
            .into_iter()
            .flat_map(|c| OPS.map(|op| (c, op)))
            .flat_map(|(c, op)| [3, 131].map(|e| (c, op, e)))
        {
            let elems = if collective == Collective::AllToAll {
                c.group.size() * if elems == 3 { 2 } else { 3 }
            } else {
                elems
            };
            let what = format!("dims {collective} {op:?} {elems} elements on system {k}");
            run_checked(&mut m, &c, (collective, op, elems), &what);
            runs += 1;
        }
    }
    assert_eq!(runs, 4 * 6 * 3 * 2);
}

/// Runs `check` on a hier_lanes communicator (functional) for each SIP
/// topology, cube mesh (1×1, 2×3, 4×4) and group of `grids` ((SIPs, grid)):
/// with the case's index and its description.
fn each_hier_lanes_group(
    grids: &[(u32, (u32, u32))],
    mut check: impl FnMut(&mut kernbench::machine::Machine, &kernbench::ccl::Communicator, usize, &str),
) {
    for topology in [
        SipTopology::Ring1d,
        SipTopology::Torus2d,
        SipTopology::Mesh2dNoWrap,
    ] {
        for (k, (cubes, &(n, grid))) in [(1, 1), (2, 3), (4, 4)]
            .into_iter()
            .flat_map(|c| grids.iter().map(move |g| (c, g)))
            .enumerate()
        {
            let grid = (topology != SipTopology::Ring1d).then_some(grid);
            let sys = sips(n, topology, grid, cubes);
            let config = cfg("hier_lanes", BUFFERS[k % 3], 2);
            let (mut m, c) = common::communicator(&sys, &config, DataMode::Functional).unwrap();
            let what = format!("{n} SIPs {topology:?} {grid:?}, cubes {cubes:?}");
            check(&mut m, &c, k, &what);
        }
    }
}

/// hier_lanes' reduce-scatter and all-gather, whose rings hand each
/// participant a set of participant blocks, and its broadcast trees, on the
/// latency matrix's groups (1, 2, 5, 6 and 16 SIPs of 1×1, 2×3 and 4×4
/// cubes, every SIP topology) at 3 and 131 elements: every participant ends
/// with exactly its block of the uneven split (reduce-scatter) or every
/// block (all-gather, broadcast), never under the bound.
#[test]
fn hier_lanes_on_uneven_groups() {
    let grids = [
        (1, (1, 1)),
        (2, (2, 1)),
        (5, (5, 1)),
        (6, (3, 2)),
        (16, (4, 4)),
    ];
    let mut runs = 0;
    each_hier_lanes_group(&grids, |m, c, k, on| {
        for collective in [
            Collective::ReduceScatter,
            Collective::AllGather,
            Collective::Broadcast,
        ] {
            for (elems, op) in [(3, OPS[k % 3]), (131, OPS[(k + 1) % 3])] {
                let what = format!("{collective} {op:?} {elems} elements on {on}");
                run_checked(m, c, (collective, op, elems), &what);
                runs += 1;
            }
        }
    });
    assert_eq!(runs, 3 * 15 * 3 * 2);
}

/// hier_lanes' reduce-scatter and all-gather over nested blocks (a buffer
/// that splits evenly, blocks small against the SIP count): the lane rings
/// along columns, then rows (or the snake), then the cube ring, each over
/// contiguous blocks. On the same groups at 1 and 8 elements per
/// participant, every participant ends with exactly its block
/// (reduce-scatter) or every block (all-gather), never under the bound.
#[test]
fn hier_lanes_nests_the_blocks_of_an_even_buffer() {
    let grids = [(2, (2, 1)), (5, (5, 1)), (6, (3, 2)), (16, (4, 4))];
    let mut runs = 0;
    each_hier_lanes_group(&grids, |m, c, k, on| {
        let p = c.group.size();
        for collective in [Collective::ReduceScatter, Collective::AllGather] {
            for (elems, op) in [(p, OPS[k % 3]), (8 * p, OPS[(k + 1) % 3])] {
                let what = format!("{collective} {op:?} {elems} elements on {on}");
                run_checked(m, c, (collective, op, elems), &what);
                runs += 1;
            }
        }
    });
    assert_eq!(runs, 3 * 12 * 2 * 2);
}

/// hier_root (entry adr0032) against the every-lane hierarchical all-reduce on a 16-SIP 4×4
/// torus of 4×4-cube SIPs at 64 MiB per participant (timing only).
#[test]
fn every_lane_beats_adr0032_by_8x_and_reaches_70_percent_of_bound() {
    let sys = sips(16, SipTopology::Torus2d, Some((4, 4)), (4, 4));
    let job = Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems: 32 << 20,
    };
    let ccl = CclConfig::embedded_default();
    let run = |name: &str| {
        let (mut m, c) = common::communicator(
            &sys,
            ccl.entry(name).expect("an entry"),
            DataMode::TimingOnly,
        )
        .unwrap();
        c.run(&mut m, job).unwrap()
    };
    let (adr, lanes) = (run("adr0032"), run("hier_lanes"));
    let speedup = adr.ticks as f64 / lanes.ticks as f64;
    println!(
        "adr0032 {} ticks ({:.1}% of bound), hier_lanes {} ticks ({:.1}% of bound), {speedup:.1}x",
        adr.ticks, adr.pct_of_bound, lanes.ticks, lanes.pct_of_bound
    );
    assert!(speedup >= 8.0, "hier_lanes only {speedup:.2}x faster");
    assert!(
        lanes.pct_of_bound >= 70.0,
        "hier_lanes at {:.1}% of its bound",
        lanes.pct_of_bound
    );
    assert!(adr.ticks >= adr.bound_ticks && lanes.ticks >= lanes.bound_ticks);
}

/// Runs `algo` once in timing-only mode on `sys` with 16 MiB slots.
fn timing_run(
    sys: &System,
    algo: &str,
    collective: Collective,
    bytes: u64,
) -> Result<u64, CclError> {
    let mut config = cfg(algo, Space::Tcm, 1);
    config.slot_size = 1 << 24;
    let (mut m, c) = common::communicator(sys, &config, DataMode::TimingOnly)?;
    let r = c.run(
        &mut m,
        Job {
            collective,
            op: ReduceOp::Sum,
            elems: (bytes / 2) as usize,
        },
    )?;
    Ok(r.ticks)
}

#[test]
fn sizes_past_4g_elements_keep_their_closed_form() {
    // 8 and 12 GiB per participant are 4 and 6 Gi f16 elements: past u32,
    // where element counts used to wrap. A two-participant ring broadcast
    // sends the whole buffer as one tile down one link in 16 MiB chunks, with
    // the reverse link free for credits: T = L + S/B.
    let mut spec = lean_ring(2).spec;
    spec.memory.hbm.size_bytes = 16 << 30;
    let sys = System::from_spec(spec, "test").unwrap();
    for s in [8u64 << 30, 12 << 30] {
        assert_eq!(
            timing_run(&sys, "ring", Collective::Broadcast, s).unwrap(),
            L + s / B,
            "S={s}"
        );
    }
}

#[test]
fn a_buffer_larger_than_hbm_is_refused_naming_the_memory() {
    let sys = lean_ring(2); // 4 GiB of HBM per cube
    let e = timing_run(&sys, "ring", Collective::AllReduce, 16 << 30)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "all_reduce of 17179869184 B per participant does not fit in a cube's HBM of 4294967296 B (memory.hbm.size_bytes)"
        ),
        "{e}"
    );
    assert!(e.contains("a larger memory.hbm.size_bytes"), "{e}");
}

#[test]
fn slot_areas_that_do_not_fit_their_memory_are_refused_at_install() {
    let mut spec = lean_ring(2).spec;
    spec.memory.tcm.size_bytes = 1024;
    let sys = System::from_spec(spec, "test").unwrap();
    let Err(e) = common::communicator(&sys, &cfg("ring", Space::Tcm, 1), DataMode::TimingOnly)
    else {
        panic!("a 1 KiB TCM cannot hold 4 x 4 KiB slots");
    };
    let e = e.to_string();
    assert!(
        e.starts_with("tcm of sip0.cube0.pe0 cannot hold the IPCQ slot area of queue E of communicator 'ring' (4 slots x 4096 B): 16384 B requested, 1024 B free of memory.tcm.size_bytes = 1024 B"),
        "{e}"
    );
    assert!(e.contains("another buffer_kind"), "{e}");
    // HBM slot areas sit at the top: a buffer may use everything below them.
    let sys = lean_ring(2);
    let mut config = cfg("ring", Space::Hbm, 1);
    config.n_slots = 2;
    let (mut m, c) = common::communicator(&sys, &config, DataMode::TimingOnly).unwrap();
    let free = (4u64 << 30) - 2 * 2 * 4096; // two queues of 2 x 4 KiB
    assert_eq!(m.memory.free_below(Space::Hbm, 0), free);
    let job = |bytes: u64| Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems: (bytes / 2) as usize,
    };
    let e = c.run(&mut m, job(free + 2)).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "all_reduce of {} B per participant does not fit in hbm of sip0.cube0",
            free + 2
        )),
        "{e}"
    );
    assert!(e.contains(&format!("{free} B are free there")), "{e}");
    assert!(c.run(&mut m, job(1 << 20)).is_ok());
}

/// Each result names the term that sets its bound: latency for a tiny
/// message, the inter-SIP lanes into a cube for a large one on a lean ring.
#[test]
fn results_name_the_term_that_sets_their_bound() {
    let sys = lean_ring(8);
    let mut config = cfg("ring", Space::Tcm, 1);
    config.slot_size = 1 << 24;
    let (mut m, c) = common::communicator(&sys, &config, DataMode::TimingOnly).unwrap();
    let job = |elems| Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems,
    };
    let small = c.run(&mut m, job(1)).unwrap();
    let large = c.run(&mut m, job(8 << 20)).unwrap();
    assert_eq!(small.bound_term, "latency", "{small:?}");
    assert_eq!(large.bound_term, "cube links", "{large:?}");
}

/// Broadcast's and reduce's latency + links term on a lean ring: the far
/// SIP's two links open at the summed latency from the root round each side
/// and then carry `B` each (docs/model.md §The α-β lower bound).
#[test]
fn the_latency_and_links_term_opens_each_link_at_its_distance() {
    use kernbench::ccl::bound::lower_bound;
    let term = |n: u32, collective, s: u64| {
        let sys = lean_ring(n);
        let (m, c) = common::communicator(
            &sys,
            &cfg("bidir_ring", Space::Tcm, 1),
            DataMode::TimingOnly,
        )
        .unwrap();
        let job = Job {
            collective,
            op: ReduceOp::Sum,
            elems: (s / 2) as usize,
        };
        let b = lower_bound(&m, &sys, &c.group, &job);
        b.terms
            .iter()
            .find(|t| t.0 == "latency + links")
            .map(|t| t.1)
    };
    let s = 1 << 20;
    for collective in [Collective::Broadcast, Collective::Reduce] {
        // 16 SIPs: SIP 8's links both open after 8 hops.
        assert_eq!(term(16, collective, s), Some(8 * L + s / (2 * B)));
        // 5 SIPs: SIP 2's links open after 2 and 3 hops, so both carry from
        // 3L on: 2B·T − 5LB = S.
        assert_eq!(term(5, collective, s), Some((s + 5 * L * B) / (2 * B)));
        // So small that the nearer link alone carries it before the other opens.
        assert_eq!(term(5, collective, L * B / 2), Some(2 * L + L / 2));
    }
    for collective in [Collective::AllReduce, Collective::AllGather] {
        assert_eq!(term(16, collective, s), None, "{collective}");
    }
}

/// bidir_ring's broadcast by chains that meet, on a lean ring: the whole
/// buffer, cut into P pieces (`chunks` two per chunk) of τ link ticks,
/// leaves the root both ways at once, east from piece 0 and west from
/// piece P − 1. With the hop estimated at d = 1 + (L + 2)/τ piece times
/// (the link's latency and the NoC's, 3 for τ = 51), member k takes
/// m_k = clamp(⌊(P + d(n − 2k)) / 2⌋, 0, P) pieces from the east-going
/// chain, the first reaching it at k(L + τ), and the rest from the
/// west-going one, the first at (n − k)(L + τ); in a fluid model the
/// broadcast ends with the last member's later stream. The simulator
/// comes within one piece time of that (each member takes its two streams' pieces in
/// the order the rounded offsets predict, so a piece that comes early may
/// wait a few ticks behind the other stream's); its ticks are pinned. On
/// 8 SIPs of 204 KiB, 2212 ticks: fixed halves one way each took
/// 7(L + τ) + 31τ = 2638. (On 2 SIPs both ways are one link.)
#[test]
fn bidir_ring_broadcast_chains_meet_in_the_middle() {
    let tau = 51;
    let cases = [
        (8u64, 32u64, 2212),
        (7, 16, 1330),
        (16, 64, 4480),
        (3, 8, 612),
    ];
    for (n, chunks, pinned) in cases {
        let p = 2 * chunks;
        let piece = tau * B;
        let d = ((L + 2 + tau) / tau) as i64;
        let m = |k: u64| ((p as i64 + d * (n as i64 - 2 * k as i64)) / 2).clamp(0, p as i64) as u64;
        // When the last of `count` pieces reaches a member `hops` away.
        let last = |hops: u64, count: u64| match count {
            0 => 0,
            c => hops * (L + tau) + (c - 1) * tau,
        };
        let fluid = (1..n)
            .map(|k| last(k, m(k)).max(last(n - k, p - m(k))))
            .max()
            .unwrap();
        let mut config = cfg("bidir_ring", Space::Tcm, chunks as u32);
        (config.n_slots, config.slot_size) = (8, piece);
        let (mut mach, c) =
            common::communicator(&lean_ring(n as u32), &config, DataMode::Functional).unwrap();
        let job = Job {
            collective: Collective::Broadcast,
            op: ReduceOp::Sum,
            elems: (p * piece / 2) as usize,
        };
        let r = c.run(&mut mach, job).unwrap();
        assert_eq!(r.verified, Some(true), "n={n}");
        assert_eq!(r.ticks, pinned, "n={n} P={p}");
        assert!(
            fluid <= r.ticks && r.ticks - fluid < tau,
            "n={n}: {} ticks against the fluid {fluid}",
            r.ticks
        );
        let halves = (n - 1) * (L + tau) + (chunks - 1) * tau;
        assert!(r.ticks < halves && r.ticks >= r.bound_ticks, "{r:?}");
    }
}

/// A buffer smaller than bidir_ring's parts (one element over the two
/// cycles of a 3x3 torus, or over one ring's two ways), with `chunks:
/// auto`, still broadcasts and reduces to the reference: some parts are
/// empty.
#[test]
fn bidir_ring_chains_with_fewer_elements_than_parts() {
    let systems = [
        sips(9, SipTopology::Torus2d, Some((3, 3)), (1, 1)),
        sips(5, SipTopology::Ring1d, None, (1, 1)),
    ];
    for sys in &systems {
        let mut config = cfg("bidir_ring", Space::Tcm, 1);
        config.chunks = kernbench::ccl::Chunks::Auto;
        let (mut m, c) = common::communicator(sys, &config, DataMode::Functional).unwrap();
        for (collective, elems) in [(Collective::Broadcast, 1), (Collective::Reduce, 1)] {
            let what = format!(
                "bidir_ring {collective} of {elems} on {} SIPs",
                c.group.size()
            );
            run_checked(&mut m, &c, (collective, ReduceOp::Sum, elems), &what);
        }
    }
}

/// bidir_ring's reduce runs each chain all the way round: the root heads
/// it with its own pieces and stores the result it gets back from its
/// other neighbour, so its HBM port, which sets the bound, reads its input
/// while the chains fill. 16 SIPs of one cube (the default sweep's base),
/// 16 MiB: 96.6% of the HBM port term (93.0%, 140999 ticks, with chains
/// that started at the far end and reached the root only after the fill).
#[test]
fn bidir_ring_reduce_reads_the_roots_input_while_its_chains_fill() {
    let sys = common::sweep_base(16, SipTopology::Ring1d, 4, (1, 1));
    let ccl = CclConfig::embedded_default();
    let entry = ccl.entry("bidir_ring_deep").unwrap();
    let (mut m, c) = common::communicator(&sys, entry, DataMode::TimingOnly).unwrap();
    let job = Job {
        collective: Collective::Reduce,
        op: ReduceOp::Sum,
        elems: 8 << 20,
    };
    let r = c.run(&mut m, job).unwrap();
    assert_eq!(
        (r.ticks, r.bound_ticks, r.bound_term.as_str()),
        (135660, 131072, "HBM port")
    );
}

/// torus_trees: broadcast verified value for value on tori and meshes of
/// one participant per SIP (square, wider than tall, taller than wide; the
/// matrices' 3x2 and 4x4 among them), odd sizes included, every buffer
/// kind; a group it cannot serve (several participants per SIP, a torus
/// under 3x3, a ring) is refused at install naming the limit and the fix; and on 16 SIPs at 4 MiB its
/// trees (depth ≤ 7) beat bidir_ring's chains that meet round Hamiltonian
/// cycles (about 8 hops of fill): four trees against two pairs of chains
/// on a 4x4 torus, two against one pair on a 4x4 mesh.
#[test]
fn torus_trees_broadcast_over_arc_disjoint_trees() {
    let grids = [
        (SipTopology::Torus2d, (3, 3)),
        (SipTopology::Torus2d, (4, 3)),
        (SipTopology::Torus2d, (3, 5)),
        (SipTopology::Torus2d, (4, 4)),
        (SipTopology::Mesh2dNoWrap, (2, 2)),
        (SipTopology::Mesh2dNoWrap, (3, 2)),
        (SipTopology::Mesh2dNoWrap, (4, 3)),
        (SipTopology::Mesh2dNoWrap, (3, 5)),
        (SipTopology::Mesh2dNoWrap, (4, 4)),
    ];
    for (topology, (w, h)) in grids {
        let sys = sips(w * h, topology, Some((w, h)), (1, 1));
        for (buffer, elems) in [
            (Space::Tcm, 131),
            (Space::Sram, 4096),
            (Space::Hbm, 100_003),
        ] {
            let (mut m, c) =
                common::communicator(&sys, &cfg("torus_trees", buffer, 2), DataMode::Functional)
                    .unwrap();
            let what =
                format!("torus_trees on a {w}x{h} {topology:?}, {buffer:?}, {elems} elements");
            run_checked(
                &mut m,
                &c,
                (Collective::Broadcast, ReduceOp::Sum, elems),
                &what,
            );
        }
    }
    // Refused at install: several participants per SIP, a torus too small
    // for distinct arcs; on a ring the algorithm does not run at all.
    let limit = ["one participant per SIP", "allowed: such a system"];
    let topology_named = [
        "SIP topology ring_1d",
        "it supports torus_2d, mesh_2d_no_wrap",
    ];
    for (n, topology, grid, cubes, says) in [
        (9, SipTopology::Torus2d, Some((3, 3)), (2, 2), limit),
        (6, SipTopology::Torus2d, Some((3, 2)), (1, 1), limit),
        (4, SipTopology::Ring1d, None, (1, 1), topology_named),
    ] {
        let sys = sips(n, topology, grid, cubes);
        let Err(e) = common::communicator(
            &sys,
            &cfg("torus_trees", Space::Tcm, 2),
            DataMode::Functional,
        ) else {
            panic!("torus_trees installed on {n} SIPs {topology:?} of {cubes:?} cubes");
        };
        let e = e.to_string();
        assert!(says.iter().all(|w| e.contains(w)), "{e}");
    }
    let ccl = CclConfig::embedded_default();
    let ticks = |topology, name: &str| {
        let sys = sips(16, topology, Some((4, 4)), (1, 1));
        let (mut m, c) =
            common::communicator(&sys, ccl.entry(name).unwrap(), DataMode::TimingOnly).unwrap();
        let job = Job {
            collective: Collective::Broadcast,
            op: ReduceOp::Sum,
            elems: 2 << 20,
        };
        let r = c.run(&mut m, job).unwrap();
        (r.ticks, r.bound_ticks)
    };
    let torus = SipTopology::Torus2d;
    assert_eq!(
        (ticks(torus, "torus_trees"), ticks(torus, "bidir_ring_deep")),
        ((20825, 16384), (22343, 16384))
    );
    let mesh = SipTopology::Mesh2dNoWrap;
    assert_eq!(
        (ticks(mesh, "torus_trees"), ticks(mesh, "bidir_ring_deep")),
        ((24588, 22771), (26324, 22771))
    );
}

/// Runs `f` on its own thread; panics if it has not finished within `secs`.
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs))
        .unwrap_or_else(|e| panic!("{what} did not finish within {secs} s: {e}"))
}

/// A 2x2 mesh of SIPs with `cubes` cubes each and a 1 ms inter-SIP latency:
/// a one-element piece's hop lasts millions of piece transfers, so a chain
/// member two hops down starts millions of steps after its head.
fn slow_link_mesh(cubes: (u32, u32)) -> System {
    system(|s| {
        s.system.sips.count = 4;
        s.system.sips.topology = SipTopology::Mesh2dNoWrap;
        (s.system.sips.w, s.system.sips.h) = (Some(2), Some(2));
        (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = cubes;
        s.links.inter_sip.latency_ns = 1e6;
    })
}

#[test]
fn bidir_ring_broadcast_of_one_element_on_a_slow_mesh_finishes() {
    let r = within(60, "bidir_ring broadcast of 2 B", || {
        let sys = slow_link_mesh((2, 1));
        let mut config = cfg("bidir_ring", Space::Tcm, 1);
        config.chunks = kernbench::ccl::Chunks::Auto;
        let (mut m, c) = common::communicator(&sys, &config, DataMode::Functional).unwrap();
        let job = Job {
            collective: Collective::Broadcast,
            op: ReduceOp::Sum,
            elems: 1,
        };
        c.run(&mut m, job).unwrap()
    });
    assert_eq!(r.verified, Some(true));
    // At least two 1 ms hops from the root to the far corner.
    assert!(r.ticks >= 2_000_000, "{r:?}");
}

#[test]
fn tiny_broadcasts_and_reduces_are_right_on_every_algorithm() {
    // 2, 4 and 6 B on 8 participants (2 cubes per SIP) and on 4 (one per
    // SIP, for torus_trees): fewer elements than participants.
    let ran = within(120, "2, 4 and 6 B broadcasts and reduces", || {
        let mut ran = std::collections::BTreeSet::new();
        for cubes in [(2, 1), (1, 1)] {
            let sys = slow_link_mesh(cubes);
            for algo in kernbench::ccl::algorithms::names() {
                let mut config = cfg(algo, Space::Tcm, 1);
                config.chunks = kernbench::ccl::Chunks::Auto;
                let Ok((mut m, c)) = common::communicator(&sys, &config, DataMode::Functional)
                else {
                    continue; // a group this algorithm refuses (torus_trees on 2 cubes)
                };
                for collective in [Collective::Broadcast, Collective::Reduce] {
                    if !c.algorithm.collectives().contains(&collective) {
                        continue;
                    }
                    for elems in 1..=3 {
                        let what =
                            format!("{algo} {collective} of {elems} elements, cubes {cubes:?}");
                        run_checked(&mut m, &c, (collective, ReduceOp::Sum, elems), &what);
                    }
                    ran.insert(format!("{algo} {collective}"));
                }
            }
        }
        ran
    });
    let want: std::collections::BTreeSet<String> = kernbench::ccl::algorithms::ALL
        .iter()
        .flat_map(|a| {
            a.collectives()
                .iter()
                .filter(|c| matches!(c, Collective::Broadcast | Collective::Reduce))
                .map(move |c| format!("{} {c}", a.name()))
        })
        .collect();
    assert_eq!(ran, want);
    assert!(
        ran.contains("torus_trees broadcast") && ran.contains("bidir_ring reduce"),
        "{ran:?}"
    );
}

/// A group turned to start at one of its SIPs (the root of a broadcast or
/// reduce): a ring turns, a torus shifts so every SIP keeps its neighbours,
/// a mesh becomes a logical ring along its cycle (as any grid does under
/// `ring_from`); a subgroup keeps its own order from the root on.
#[test]
fn a_group_turns_to_start_at_its_root() {
    use kernbench::ccl::Group;
    let on = |topology: SipTopology, w: u32, h: u32| {
        system(|s| {
            s.system.sips.count = w * h;
            s.system.sips.topology = topology;
            if topology != SipTopology::Ring1d {
                (s.system.sips.w, s.system.sips.h) = (Some(w), Some(h));
            }
        })
    };
    let shape = |g: &Group| (g.sips.to_vec(), g.topology, g.grid);
    let ring = Group::new(&on(SipTopology::Ring1d, 4, 1));
    assert_eq!(
        shape(&ring.rooted_at(2)),
        (vec![2, 3, 0, 1], SipTopology::Ring1d, (4, 1))
    );
    let torus = Group::new(&on(SipTopology::Torus2d, 3, 3));
    assert_eq!(
        shape(&torus.rooted_at(4)),
        (
            vec![4, 5, 3, 7, 8, 6, 1, 2, 0],
            SipTopology::Torus2d,
            (3, 3)
        )
    );
    assert_eq!(torus.rooted_at(0), torus);
    // Along the snake 0 1 2 5 4 3 6 7 8 of a 3x3 grid, from SIP 4.
    assert_eq!(
        shape(&torus.ring_from(4)),
        (vec![4, 3, 6, 7, 8, 0, 1, 2, 5], SipTopology::Ring1d, (9, 1))
    );
    let mesh = Group::new(&on(SipTopology::Mesh2dNoWrap, 2, 2));
    assert_eq!(
        shape(&mesh.rooted_at(3)),
        (vec![3, 2, 0, 1], SipTopology::Ring1d, (4, 1))
    );
    let sys = on(SipTopology::Ring1d, 4, 1);
    let back = Group::of_sips(&sys, &[3, 1, 2]).unwrap();
    assert_eq!(shape(&back.rooted_at(1)).0, [1, 2, 3]);
    assert_eq!(Group::of_sips(&sys, &[0, 1, 2, 3]).unwrap(), ring);
}
