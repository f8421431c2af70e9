//! Issue 9's 16-SIP acceptance: on 16 SIPs of 4×4 cubes (the default
//! system with 64 KiB packets, 256 participants), for every collective on
//! ring_1d, torus_2d (4×4) and mesh_2d_no_wrap (4×4), the best algorithm
//! reaches ≥ 80% of its α-β bound at 64 MiB per participant and ≥ 50% at
//! 1 KiB.
//!
//! Each cell runs the shipped ccl.yaml entry that is best there (measured
//! with `kernbench run --algorithm all` over every entry; the losers are
//! not rerun here to keep the test short, but for the 64 MiB all-reduce
//! and reduce, whose former best stays pinned) in timing-only mode, in place,
//! and pins its ticks and bound: the simulator is deterministic, so the
//! percentage is exact. Every run must also stay at or above its bound.

use crate::common;
use kernbench::ccl::{CclConfig, Collective, Job, ReduceOp};
use kernbench::spec::{SipTopology, System};
use kernbench_systems::memory::DataMode;

/// 16 SIPs of 4×4 cubes on `topology`, 64 KiB packets on every on-chip
/// and inter-SIP link (as in the default sweep).
fn system(topology: SipTopology) -> System {
    common::sweep_base(16, topology, 4, (4, 4))
}

/// One cell: a collective, its bound (ticks; the same for every
/// algorithm) and the candidate entries with their pinned ticks.
struct Cell {
    collective: Collective,
    bound: u64,
    runs: &'static [(&'static str, u64)],
}

const fn cell(collective: Collective, bound: u64, runs: &'static [(&'static str, u64)]) -> Cell {
    Cell {
        collective,
        bound,
        runs,
    }
}

/// Runs every candidate of every cell at `bytes` on `topology`: each run
/// stays at or above its bound and matches its pin, and the best of each
/// cell reaches `min_pct` of the bound.
fn check(topology: SipTopology, bytes: u64, cells: &[Cell], min_pct: f64) {
    let sys = system(topology);
    let ccl = CclConfig::embedded_default();
    let mut failures = Vec::new();
    for c in cells {
        let mut best = 0.0f64;
        for &(name, ticks) in c.runs {
            let entry = ccl.entry(name).expect("a shipped entry");
            let (mut m, comm) = common::communicator(&sys, entry, DataMode::TimingOnly).unwrap();
            let job = Job {
                collective: c.collective,
                op: ReduceOp::Sum,
                elems: (bytes / 2) as usize,
            };
            let r = comm.run(&mut m, job).unwrap();
            let what = format!("{} {name} on {topology:?} at {bytes} B", c.collective);
            println!(
                "{what}: {} ticks, bound {} ({}), {:.1}% of bound",
                r.ticks, r.bound_ticks, r.bound_term, r.pct_of_bound
            );
            assert!(r.ticks >= r.bound_ticks, "{what} beat its bound: {r:?}");
            if (r.ticks, r.bound_ticks) != (ticks, c.bound) {
                failures.push(format!(
                    "{what}: ({}, {}) ticks and bound, pinned ({ticks}, {})",
                    r.ticks, r.bound_ticks, c.bound
                ));
            }
            best = best.max(r.pct_of_bound);
        }
        let what = format!("{} on {topology:?} at {bytes} B", c.collective);
        assert!(best >= min_pct, "{what}: best {best:.1}% < {min_pct}%");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

use Collective::{AllGather, AllReduce, AllToAll, Broadcast, Reduce, ReduceScatter};

/// 1 KiB: the latency term sets every bound. `dims` (one direct transfer
/// per line of the participant grid) is best for all-reduce, all-gather,
/// broadcast and reduce, `pairwise` (every block in flight at once) for
/// all-to-all; rhd for reduce-scatter on the 2-D grids (dims
/// stores and reloads its run at each of its four levels).
mod small {
    use super::*;
    const KIB: u64 = 1024;

    #[test]
    fn ring_1d_1k() {
        let cells = [
            cell(AllReduce, 2580, &[("dims", 3229), ("adr0032", 5695)]),
            cell(ReduceScatter, 2580, &[("dims", 4300), ("rhd", 5310)]),
            cell(AllGather, 2580, &[("dims", 3137), ("rhd", 5312)]),
            cell(Broadcast, 2580, &[("dims", 3060), ("tree", 5302)]),
            cell(Reduce, 2580, &[("dims", 3123), ("tree", 5470)]),
            cell(
                AllToAll,
                2580,
                &[("dims", 4161), ("pairwise", 3210), ("bruck", 17656)],
            ),
        ];
        check(SipTopology::Ring1d, KIB, &cells, 50.0);
    }

    #[test]
    fn torus_2d_1k() {
        let cells = [
            cell(AllReduce, 1348, &[("dims", 1869), ("adr0032", 2628)]),
            cell(ReduceScatter, 1348, &[("dims", 2557), ("rhd", 2490)]),
            cell(AllGather, 1348, &[("dims", 1947), ("rhd", 2495)]),
            cell(Broadcast, 1348, &[("dims", 1731), ("tree", 2395)]),
            cell(Reduce, 1348, &[("dims", 1841), ("tree", 2563)]),
            cell(
                AllToAll,
                1348,
                &[("dims", 2357), ("pairwise", 1983), ("bruck", 13112)],
            ),
        ];
        check(SipTopology::Torus2d, KIB, &cells, 50.0);
    }

    #[test]
    fn mesh_2d_no_wrap_1k() {
        let cells = [
            cell(AllReduce, 1964, &[("dims", 2535), ("adr0032", 4682)]),
            cell(ReduceScatter, 1964, &[("dims", 3185), ("rhd", 2490)]),
            cell(AllGather, 1964, &[("dims", 2579), ("rhd", 2495)]),
            cell(Broadcast, 1964, &[("dims", 2399), ("tree", 2395)]),
            cell(Reduce, 1964, &[("dims", 2483), ("tree", 2563)]),
            cell(
                AllToAll,
                1964,
                &[("dims", 2991), ("pairwise", 2618), ("bruck", 21787)],
            ),
        ];
        check(SipTopology::Mesh2dNoWrap, KIB, &cells, 50.0);
    }
}

/// 64 MiB: the HBM port (participant 0's cube reads and writes its buffer)
/// sets every bound but all-to-all's on the ring and the mesh (bisection).
/// `hier_lanes_deep` (hier_lanes' every-lane rings with 16 slots of 32 KiB
/// per queue) is best for every other collective: 87–97% for reduce-scatter
/// and all-gather (rings over participant blocks: the cube ring, then each
/// cube's lanes, rows and columns at once, or on the mesh one ring through
/// every SIP), 90–94% for all-reduce and reduce (the reduce-scatter
/// levels, then the all-gather levels), 90–91% for broadcast
/// (pipelined trees: the root SIP's cube ring, each cube's share over its
/// lanes, the other SIPs' cube rings). The
/// shipped `hier_lanes` entry's 4 slots of 64 KiB cannot cover a chunk's
/// round trip over NoC and UCIe hops (~1.1k ticks), so each cube-ring link
/// idles a quarter of the time: 69–71% for all-reduce and reduce (pinned
/// next to the deep entry: they were these cells' best), 68–73% for
/// reduce-scatter and all-gather; its `chunks: 1`, which suits rings whose
/// blocks pipeline atom by atom, leaves the broadcast trees unpipelined
/// (14%; 63% with `chunks: auto`, whose queues then hold too few of the
/// pieces every tree passing them sends; bidir_ring's meeting chains 34%,
/// bidir_ring_deep's 56%).
///
/// All-to-all (`pairwise`, every block in flight at once, its slots in
/// sram) reaches 87–97%: on the ring the bisection sets it, on the torus
/// the HBM port (each cube reads and writes its buffer once; slots in hbm
/// doubled that and held it at 49%), on the mesh the bisection. Its HBM
/// reads stay one piece round ahead of its sends: loading whole blocks
/// first kept the links idle for S / HBM rate (65% on the torus).
mod large {
    use super::*;
    const MIB64: u64 = 64 << 20;

    #[test]
    #[ignore = "exhaustive: cargo test --workspace -- --ignored"]
    fn ring_1d_64m() {
        let cells = [
            cell(
                AllReduce,
                524288,
                &[("hier_lanes", 760479), ("hier_lanes_deep", 574712)],
            ),
            cell(ReduceScatter, 263168, &[("hier_lanes_deep", 302657)]),
            cell(AllGather, 263168, &[("hier_lanes_deep", 278406)]),
            cell(Broadcast, 262144, &[("hier_lanes_deep", 292217)]),
            cell(
                Reduce,
                524288,
                &[("hier_lanes", 759395), ("hier_lanes_deep", 579299)],
            ),
            cell(AllToAll, 1342177, &[("pairwise", 1537459)]),
        ];
        check(SipTopology::Ring1d, MIB64, &cells, 80.0);
    }

    #[test]
    #[ignore = "exhaustive: cargo test --workspace -- --ignored"]
    fn torus_2d_64m() {
        let cells = [
            cell(
                AllReduce,
                524288,
                &[("hier_lanes", 737981), ("hier_lanes_deep", 559975)],
            ),
            cell(ReduceScatter, 263168, &[("hier_lanes_deep", 294620)]),
            cell(AllGather, 263168, &[("hier_lanes_deep", 270160)]),
            cell(Broadcast, 262144, &[("hier_lanes_deep", 286992)]),
            cell(
                Reduce,
                524288,
                &[("hier_lanes", 739621), ("hier_lanes_deep", 560498)],
            ),
            cell(AllToAll, 524288, &[("pairwise", 552269)]),
        ];
        check(SipTopology::Torus2d, MIB64, &cells, 80.0);
    }

    #[test]
    #[ignore = "exhaustive: cargo test --workspace -- --ignored"]
    fn mesh_2d_no_wrap_64m() {
        let cells = [
            cell(
                AllReduce,
                524288,
                &[("hier_lanes", 760430), ("hier_lanes_deep", 575926)],
            ),
            cell(ReduceScatter, 263168, &[("hier_lanes_deep", 302565)]),
            cell(AllGather, 263168, &[("hier_lanes_deep", 278334)]),
            cell(Broadcast, 262144, &[("hier_lanes_deep", 288713)]),
            cell(
                Reduce,
                524288,
                &[("hier_lanes", 759212), ("hier_lanes_deep", 579299)],
            ),
            cell(AllToAll, 671088, &[("pairwise", 694427)]),
        ];
        check(SipTopology::Mesh2dNoWrap, MIB64, &cells, 80.0);
    }
}
