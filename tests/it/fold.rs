//! The fold: a collective whose SIPs all run the same program, shifted, on
//! a ring or torus runs on the smallest torus that repeats the machine and
//! takes the whole machine's ticks (docs/model.md §Fold).

use crate::common::{communicator, kernbench_cli, system};
use kernbench::ccl::fold::folded_for;
use kernbench::ccl::{AlgoConfig, CclConfig, CollResult, Collective, Job, ReduceOp};
use kernbench::spec::{SipTopology, System};
use kernbench::systems::network::NetworkModel;
use kernbench_systems::memory::DataMode;

/// `n` SIPs of 2×2 cubes on `topology` (8×8 when a torus).
fn machine_of(n: u32, topology: SipTopology) -> System {
    system(|s| {
        s.system.sips.count = n;
        s.system.sips.topology = topology;
        let side = (topology != SipTopology::Ring1d).then_some(8);
        (s.system.sips.w, s.system.sips.h) = (side, side);
        (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = (2, 2);
    })
}

fn hier_lanes() -> AlgoConfig {
    CclConfig::embedded_default()
        .entry("hier_lanes")
        .unwrap()
        .clone()
}

fn job(collective: Collective, bytes: u64) -> Job {
    Job {
        collective,
        op: ReduceOp::Sum,
        elems: (bytes / 2) as usize,
    }
}

fn ring() -> AlgoConfig {
    CclConfig::embedded_default().entry("ring").unwrap().clone()
}

/// The run of `job` with `config` on `sys`, with its bytes per link kind.
fn run(sys: &System, config: &AlgoConfig, job: Job) -> (CollResult, [u64; 4]) {
    let (mut m, comm) = communicator(sys, config, DataMode::TimingOnly).unwrap();
    let r = comm.run(&mut m, job).unwrap();
    let links = m.engine.links();
    let mut bytes = [0; 4];
    for l in links.ids() {
        bytes[links.class_index(l) as usize] += links.stats(l).bytes;
    }
    (r, bytes)
}

/// Every collective that folds: hier_lanes' on a torus (8×8 on 4×4) and a
/// ring (8 on 4), ring's on the ring; in both network models and at two
/// sizes: the same ticks, bandwidths and bound (its latency term included)
/// as the whole machine, and each link kind carries the whole machine's
/// bytes divided by the fold.
#[test]
fn a_folded_run_takes_the_ticks_of_the_whole_machine() {
    let cases = [
        (SipTopology::Torus2d, 64, 16, hier_lanes()),
        (SipTopology::Ring1d, 8, 4, hier_lanes()),
        (SipTopology::Ring1d, 8, 4, ring()),
    ];
    for (topology, n, simulated, config) in cases {
        for model in [NetworkModel::Packet, NetworkModel::Flow] {
            let mut whole = machine_of(n, topology);
            whole.spec.network.model = model;
            let folded = whole.folded().unwrap();
            assert_eq!(folded.n_sips(), simulated);
            assert_eq!(folded.logical_sips(), n);
            let collectives = [
                Collective::AllReduce,
                Collective::ReduceScatter,
                Collective::AllGather,
            ];
            for (c, bytes) in collectives
                .into_iter()
                .flat_map(|c| [(c, 16 << 10), (c, 1 << 20)])
            {
                let what = format!("{} {topology:?} {model:?} {c} {bytes} B", config.name);
                let (want, want_bytes) = run(&whole, &config, job(c, bytes));
                let (got, got_bytes) = run(&folded, &config, job(c, bytes));
                assert_eq!(got.ticks, want.ticks, "{what}");
                assert_eq!(got.participants, want.participants, "{what}");
                assert_eq!(got.busbw_gbps, want.busbw_gbps, "{what}");
                assert_eq!(got.bound_ticks, want.bound_ticks, "{what}: bound");
                let fold = u64::from(n / simulated);
                let per_fold: Vec<u64> = want_bytes.iter().map(|b| b / fold).collect();
                assert_eq!(got_bytes.to_vec(), per_fold, "{what}: bytes per link kind");
                // Bytes split evenly over the machine's copies of the fold.
                assert!(want_bytes.iter().all(|b| b % fold == 0), "{what}");
            }
        }
    }
}

/// A torus folds each side onto its least divisor of 3 or more; a side of
/// 2 or a prime stays whole, and a grid that cannot shrink is refused.
#[test]
fn each_side_folds_onto_its_least_divisor_of_three_or_more() {
    let grid = |w: u32, h: u32| {
        system(|s| {
            s.system.sips.count = w * h;
            s.system.sips.topology = SipTopology::Torus2d;
            (s.system.sips.w, s.system.sips.h) = (Some(w), Some(h));
        })
    };
    for ((w, h), want, fold) in [
        ((64, 64), (4, 4), (16, 16)),
        ((12, 2), (3, 2), (4, 1)),
        ((9, 7), (3, 7), (3, 1)),
    ] {
        let f = grid(w, h).folded().unwrap();
        assert_eq!((f.sip_grid, f.fold), (want, fold), "{w}x{h}");
    }
    for (w, h) in [(4, 4), (7, 2)] {
        let e = grid(w, h).folded().unwrap_err();
        assert!(
            e.contains(&format!("a {w}x{h} grid has no smaller repeat")),
            "{e}"
        );
    }
}

/// Each reason a fold does not apply names itself and what would.
#[test]
fn a_fold_that_does_not_apply_says_why_and_what_would() {
    let torus = machine_of(64, SipTopology::Torus2d);
    let all_reduce = job(Collective::AllReduce, 1 << 20);
    let mut mesh = torus.spec.clone();
    mesh.system.sips.topology = SipTopology::Mesh2dNoWrap;
    let mesh = System::from_spec(mesh, "test").unwrap();
    let cases: [(&str, Result<System, String>, &[&str]); 5] = [
        (
            "mesh",
            folded_for(&mesh, &hier_lanes(), &all_reduce, false),
            &[
                "a mesh_2d_no_wrap has edges",
                "allowed: a ring_1d or torus_2d",
            ],
        ),
        (
            "algorithm",
            folded_for(&torus, &ring(), &all_reduce, false),
            &[
                "ring (ring) does not run the same program on every SIP for all_reduce on a torus_2d",
                "allowed: hier_lanes all_reduce, reduce_scatter or all_gather on a ring_1d or torus_2d, or ring's on a ring_1d",
            ],
        ),
        (
            "broadcast",
            folded_for(
                &torus,
                &hier_lanes(),
                &job(Collective::Broadcast, 1 << 20),
                false,
            ),
            &["every SIP for broadcast", "allowed: hier_lanes all_reduce"],
        ),
        (
            "verify",
            folded_for(&torus, &hier_lanes(), &all_reduce, true),
            &["(--verify) needs every participant's result; allowed: timing only"],
        ),
        (
            "uneven",
            folded_for(
                &torus,
                &hier_lanes(),
                &job(Collective::AllReduce, 3 << 10),
                false,
            ),
            &[
                "3072 B does not split into equal blocks over the 256 participants' rings",
                "allowed: a multiple of 2048 B",
            ],
        ),
    ];
    for (what, got, parts) in cases {
        let e = got.err().unwrap_or_else(|| panic!("{what}: folded"));
        for part in parts {
            assert!(e.contains(part), "{what}: {e}");
        }
    }
}

/// `run --fold` says in its header what the simulated SIPs stand for and
/// records them; where the fold does not apply, the header says why and
/// the whole machine runs.
#[test]
fn run_fold_reports_the_simulated_sips() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("torus.yaml");
    std::fs::write(&spec, machine_of(64, SipTopology::Torus2d).to_yaml()).unwrap();
    let csv = dir.path().join("fold.csv");
    let args = |algorithm: &'static str| {
        [
            "run",
            "--system",
            spec.to_str().unwrap(),
            "--algorithm",
            algorithm,
            "-b",
            "64K",
            "-e",
            "64K",
            "--fold",
            "--csv",
            csv.to_str().unwrap(),
        ]
        .map(String::from)
    };
    let cli = |a: &[String]| kernbench_cli(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let (code, out, err) = cli(&args("hier_lanes"));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("\n# fold: 16 SIPs simulated (4x4), each standing for 2x2 "),
        "{out}"
    );
    assert!(out.contains("# participants: 256 "), "{out}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut rows = csv::Reader::from_reader(text.as_bytes());
    let at = rows
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "simulated_sips");
    let at = at.expect("a simulated_sips column");
    let simulated: Vec<String> = rows.records().map(|r| r.unwrap()[at].into()).collect();
    assert_eq!(simulated, ["16", "16"]);

    let (code, out, err) = cli(&args("ring"));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("\n# fold: not applied, the whole machine runs: ring (ring) does not run the same program on every SIP"),
        "{out}"
    );
}
