//! The collective library: closed forms, the correctness matrix, bounds.

mod common;
use common::{lean, system};
use kernbench::ccl::{AlgoConfig, CclConfig, CclError, Collective, Communicator, Job, ReduceOp};
use kernbench::spec::{SipTopology, System};
use kernbench::topology::address::Space;
use kernbench_systems::memory::DataMode;

fn cfg(algorithm: &str, buffer: Space, chunks: u32) -> AlgoConfig {
    AlgoConfig {
        name: algorithm.into(),
        algorithm: algorithm.into(),
        buffer_kind: buffer,
        n_slots: 4,
        slot_size: 4096,
        chunks,
    }
}

#[test]
fn smoke_every_algorithm_all_reduce() {
    let sys = system(|s| {
        s.system.sips.count = 4;
        s.sip.cube_mesh.w = 2;
        s.sip.cube_mesh.h = 2;
    });
    for algo in ["ring", "tree", "adr0032", "hier_lanes"] {
        let mut c =
            Communicator::new(&sys, &cfg(algo, Space::Tcm, 2), DataMode::Functional).unwrap();
        let r = c
            .run(Job {
                collective: Collective::AllReduce,
                op: ReduceOp::Sum,
                elems: 1000,
            })
            .unwrap();
        println!(
            "{algo}: {} ticks, bound {} ({:.1}%), verified {:?}",
            r.ticks, r.bound_ticks, r.pct_of_bound, r.verified
        );
        assert_eq!(r.verified, Some(true), "{algo}");
    }
}
