//! The collective library: closed forms, the correctness matrix, bounds.

mod common;
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
    for algo in ["ring", "bidir_ring", "tree", "adr0032", "hier_lanes"] {
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

const ALGORITHMS: [&str; 5] = ["ring", "bidir_ring", "tree", "adr0032", "hier_lanes"];
const CUBE_MESHES: [(u32, u32); 4] = [(1, 1), (2, 2), (4, 4), (3, 5)];
const BUFFERS: [Space; 3] = [Space::Tcm, Space::Sram, Space::Hbm];
const OPS: [ReduceOp; 3] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min];

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
            for algo in ALGORITHMS {
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
    // 15 supported (algorithm, collective) pairs × 4 cube meshes × 3 buffer kinds.
    assert_eq!(runs, 15 * 4 * 3);
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
fn matrix_torus_4x4() {
    matrix(16, SipTopology::Torus2d, Some((4, 4)));
}
#[test]
fn matrix_mesh_2x3() {
    matrix(6, SipTopology::Mesh2dNoWrap, Some((2, 3)));
}
#[test]
fn matrix_mesh_4x4() {
    matrix(16, SipTopology::Mesh2dNoWrap, Some((4, 4)));
}

/// ADR-0032 against the every-lane hierarchical all-reduce on a 16-SIP 4×4
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
