//! The algorithm registry: every registered algorithm runs every collective
//! it claims, on every SIP topology it claims, with values checked.

use crate::common;
use common::system;
use kernbench::ccl::{AlgoConfig, CclConfig, CclError, Collective, Job, ReduceOp, algorithms};
use kernbench::spec::{SipTopology, System};
use kernbench_systems::memory::DataMode;
use std::collections::BTreeSet;

/// The ccl entries of the test-only algorithms, which configs/ccl.yaml
/// does not ship.
const TEST_CCL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/ccl/test_algorithms.yaml"
);

/// A small system of `topology`: 3 SIPs of 2×1 cubes on a ring, a 3×3
/// torus or a 2×2 mesh of one cube each (torus_trees' smallest groups).
fn small(topology: SipTopology) -> System {
    let (n, grid, cubes) = match topology {
        SipTopology::Ring1d => (3, None, (2, 1)),
        SipTopology::Torus2d => (9, Some((3, 3)), (1, 1)),
        SipTopology::Mesh2dNoWrap => (4, Some((2, 2)), (1, 1)),
    };
    system(|s| {
        s.system.sips.count = n;
        s.system.sips.topology = topology;
        (s.system.sips.w, s.system.sips.h) = (grid.map(|g| g.0), grid.map(|g| g.1));
        (s.sip.cube_mesh.w, s.sip.cube_mesh.h) = cubes;
    })
}

/// The first entry that runs `algorithm`: the shipped config's, else the
/// test config's.
fn entry_of<'a>(algorithm: &str, configs: &'a [CclConfig]) -> &'a AlgoConfig {
    configs
        .iter()
        .flat_map(|c| &c.entries)
        .find(|e| algorithms::canonical(&e.algorithm) == algorithm)
        .unwrap_or_else(|| {
            panic!(
                "algorithm '{algorithm}' has no entry in configs/ccl.yaml or {TEST_CCL}: add one"
            )
        })
}

/// Every registered algorithm × every collective it claims × every SIP
/// topology it claims, in functional mode: values match the reference and
/// no run beats its bound; every claimed pair runs somewhere. The list
/// comes from the registry, so a new algorithm is run here with no edit:
/// the test-only `star` (src/ccl/algorithms/star.rs, entry in
/// tests/data/ccl/test_algorithms.yaml) is picked up that way, as
/// `cargo test --test it -- registry:: --nocapture` prints ("star
/// all_reduce on Ring1d: ..."), and removing it from the registry's
/// TEST_ONLY list removes it from that output.
#[test]
fn every_registered_algorithm_runs_every_collective_it_claims() {
    let configs = [
        CclConfig::embedded_default(),
        CclConfig::from_file(std::path::Path::new(TEST_CCL)).unwrap(),
    ];
    let (mut claimed, mut ran) = (BTreeSet::new(), BTreeSet::new());
    for algorithm in algorithms::registered() {
        let name = algorithm.name();
        let config = entry_of(name, &configs);
        claimed.extend(algorithm.collectives().iter().map(|c| (name, c.name())));
        for &topology in algorithm.topologies() {
            let sys = small(topology);
            let (mut m, c) = match common::communicator(&sys, config, DataMode::Functional) {
                Ok(mc) => mc,
                // A group the algorithm refuses; the pair must run elsewhere.
                Err(CclError::Config(e)) => {
                    println!("{name} on {topology:?}: refused: {e}");
                    continue;
                }
                Err(e) => panic!("{name} on {topology:?}: {e}"),
            };
            let p = c.group.size();
            for &collective in algorithm.collectives() {
                let elems = if collective == Collective::AllToAll {
                    3 * p
                } else {
                    131
                };
                let job = Job {
                    collective,
                    op: ReduceOp::Sum,
                    elems,
                };
                let what = format!("{name} {collective} on {topology:?} ({p} participants)");
                let r = c.run(&mut m, job).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(r.verified, Some(true), "wrong values: {what}");
                assert!(r.ticks >= r.bound_ticks, "beat the bound: {what}: {r:?}");
                println!("{what}: {} ticks, verified", r.ticks);
                ran.insert((name, collective.name()));
            }
        }
    }
    assert_eq!(ran, claimed, "claimed pairs that never ran");
    let names: BTreeSet<&str> = ran.iter().map(|r| r.0).collect();
    assert!(names.contains("star"), "the test-only star did not run");
    assert_eq!(names.len(), algorithms::registered().count());
}

/// The collective algorithm first named `adr0032` is registered as
/// `hier_root`; the old name stays an alias the registry resolves, so a
/// ccl entry may use either and runs the same algorithm to the same tick.
#[test]
fn adr0032_is_an_alias_of_hier_root() {
    assert_eq!(algorithms::find("hier_root").unwrap().name(), "hier_root");
    assert_eq!(algorithms::find("adr0032").unwrap().name(), "hier_root");
    assert_eq!(algorithms::canonical("adr0032"), "hier_root");
    assert_eq!(algorithms::canonical("ring"), "ring");
    assert!(algorithms::names().contains(&"hier_root"));
    assert!(!algorithms::names().contains(&"adr0032"));
    let ccl = CclConfig::from_yaml(
        "defaults: { algorithm: ring, buffer_kind: tcm, n_slots: 4, slot_size: 65536, chunks: 1 }\n\
         algorithms:\n  new_name: { algorithm: hier_root }\n  old_name: { algorithm: adr0032 }\n",
        "alias.yaml",
    )
    .unwrap();
    let sys = small(SipTopology::Ring1d);
    let ticks = |entry: &str| {
        let config = ccl.entry(entry).unwrap();
        let (mut m, c) = common::communicator(&sys, config, DataMode::Functional).unwrap();
        let job = Job {
            collective: Collective::AllReduce,
            op: ReduceOp::Sum,
            elems: 131,
        };
        let r = c.run(&mut m, job).unwrap();
        assert_eq!(r.verified, Some(true), "{entry}");
        r.ticks
    };
    assert_eq!(ticks("new_name"), ticks("old_name"));
    // A typo of the old name is pointed at it, and the allowed list shows both.
    let err = algorithms::find("adr0023").err().unwrap().to_string();
    assert!(err.contains("did you mean 'adr0032'?"), "{err}");
    assert!(
        err.contains("registered: hier_root (alias adr0032), ring,"),
        "{err}"
    );
}
