//! The steady-state fast-forward (docs/model.md §Fast-forward) skips whole
//! periods of a run and changes nothing: every collective below ends at the
//! same tick, after the same schedule runs, with the same bytes, packets and
//! busy time on every link and the same network counters as the run that
//! simulates every period, in both network models.

use crate::common;
use common::sweep_base;
use kernbench::ccl::{AlgoConfig, Collective, Job, ReduceOp};
use kernbench::spec::{SipTopology, System};
use kernbench::topology::address::Space;
use kernbench_systems::memory::DataMode;
use kernbench_systems::network::{NetCounters, NetworkModel};
use kernbench_systems::steady::Steady;
use kernbench_systems::{Clock, LinkStats};

#[derive(Debug, PartialEq)]
struct Outcome {
    ticks: u64,
    steps: u64,
    links: Vec<LinkStats>,
    counters: NetCounters,
}

/// One collective of `bytes` per participant on `sys` in `model`, with the
/// fast-forward on or off: what it produced and the periods it skipped.
fn run(
    sys: &System,
    (algorithm, collective): (&str, Collective),
    model: NetworkModel,
    fast_forward: bool,
) -> (Outcome, u64) {
    let mut config = common::algo_config(algorithm, Space::Tcm, 4);
    config.slot_size = 16384;
    let job = (collective, 1 << 19);
    let (outcome, steady) = run_steady(sys, (&config, job), model, fast_forward);
    (outcome, steady.skipped_periods)
}

/// [`run`] with `config` on `elems` elements per participant, and the
/// fast-forward's record.
fn run_steady(
    sys: &System,
    (config, (collective, elems)): (&AlgoConfig, (Collective, usize)),
    model: NetworkModel,
    fast_forward: bool,
) -> (Outcome, Steady) {
    let mut spec = sys.spec.clone();
    spec.network.model = model;
    let sys = System::from_spec(spec, "test").unwrap();
    let (mut m, c) = common::communicator(&sys, config, DataMode::TimingOnly).unwrap();
    m.engine.set_fast_forward(fast_forward);
    let job = Job {
        collective,
        op: ReduceOp::Sum,
        elems,
    };
    let ticks = c.run(&mut m, job).unwrap().ticks;
    let links = m.engine.links();
    let outcome = Outcome {
        ticks,
        steps: m.engine.world.resource::<Clock>().steps,
        links: links.ids().map(|l| links.stats(l)).collect(),
        counters: *m.engine.world.resource::<NetCounters>(),
    };
    let steady = std::mem::take(m.engine.world.resource_mut::<Steady>().as_mut());
    (outcome, steady)
}

const CASES: [(&str, Collective); 8] = [
    ("ring", Collective::AllReduce),
    ("ring", Collective::AllGather),
    ("bidir_ring", Collective::ReduceScatter),
    ("hier_lanes", Collective::AllReduce),
    ("tree", Collective::Broadcast),
    ("pairwise", Collective::AllToAll),
    ("ring", Collective::Broadcast),
    ("ring", Collective::Reduce),
];

#[test]
fn skipping_periods_changes_no_tick_and_no_statistic() {
    let systems = [
        ("ring of 8", sweep_base(8, SipTopology::Ring1d, 0, (1, 1))),
        (
            "4x4 mesh",
            sweep_base(16, SipTopology::Mesh2dNoWrap, 4, (1, 1)),
        ),
        (
            "ring of 4 x 2x2 cubes",
            sweep_base(4, SipTopology::Ring1d, 0, (2, 2)),
        ),
    ];
    let mut skipped = Vec::new();
    for (name, sys) in &systems {
        for case in CASES {
            for model in [NetworkModel::Packet, NetworkModel::Flow] {
                let (exact, none) = run(sys, case, model, false);
                let (fast, periods) = run(sys, case, model, true);
                assert_eq!(none, 0, "off means off");
                assert_eq!(fast, exact, "{name}, {case:?}, {model:?}");
                skipped.push(((*name, case.0, model), periods));
            }
        }
    }
    // The comparison is not vacuous: ring steps are periodic, so the ring
    // all-reduce on 4 SIPs of 2x2 cubes skips periods in both models, and so
    // do a fair share of the other cases.
    for model in [NetworkModel::Packet, NetworkModel::Flow] {
        let ring = skipped
            .iter()
            .find(|(w, _)| *w == ("ring of 4 x 2x2 cubes", "ring", model));
        assert!(ring.is_some_and(|r| r.1 > 0), "{model:?}: {skipped:?}");
    }
    let skipping = skipped.iter().filter(|s| s.1 > 0).count();
    assert!(
        skipping >= 8,
        "{skipping} of {} cases skipped: {skipped:?}",
        skipped.len()
    );
}

/// `simulation: { fast_forward: false }` in the spec simulates every
/// period (and changes no result); the default skips.
#[test]
fn the_spec_turns_the_fast_forward_off() {
    let sys = sweep_base(8, SipTopology::Ring1d, 0, (1, 1));
    let mut off = sys.spec.clone();
    off.simulation.fast_forward = false;
    let off = System::from_spec(off, "test").unwrap();
    let (m_on, m_off) = [&sys, &off]
        .map(|s| {
            let config = common::algo_config("ring", Space::Tcm, 4);
            let (mut m, c) = common::communicator(s, &config, DataMode::TimingOnly).unwrap();
            let job = Job {
                collective: Collective::AllReduce,
                op: ReduceOp::Sum,
                elems: 1 << 19,
            };
            let ticks = c.run(&mut m, job).unwrap().ticks;
            (ticks, m.engine.world.resource::<Steady>().skipped_periods)
        })
        .into();
    assert_eq!(m_on.0, m_off.0);
    assert!(m_on.1 > 0, "the default skips");
    assert_eq!(m_off.1, 0, "off simulates every period");
}

/// A chain broadcast's root loads its chunks faster than the chain drains
/// them: its queue's backlog of sends grows while it loads and shrinks once
/// it is done, by the same count every period. The backlog's length does
/// not steer the run while sends are left, so the drain is skipped: most of
/// the run's ticks, with every tick and statistic unchanged.
#[test]
fn a_backlog_of_sends_that_grows_or_shrinks_is_skipped() {
    let sys = sweep_base(8, SipTopology::Ring1d, 0, (1, 1));
    let mut config = common::algo_config("ring", Space::Tcm, 256);
    config.slot_size = 16384;
    for model in [NetworkModel::Packet, NetworkModel::Flow] {
        let case = (&config, (Collective::Broadcast, 1 << 21));
        let (exact, _) = run_steady(&sys, case, model, false);
        let (fast, steady) = run_steady(&sys, case, model, true);
        assert_eq!(fast, exact, "{model:?}");
        assert!(
            steady.skipped_ticks * 2 > exact.ticks,
            "{model:?}: {} of {} ticks skipped",
            steady.skipped_ticks,
            exact.ticks
        );
    }
}

/// The largest ring `kernbench bench --collective` runs: a ring all-reduce of
/// 64 MiB on 4096 SIPs. Its snapshots are the largest the fast-forward
/// keeps a history of, and its period spans more than two looks, so a
/// history cap that keeps too few of them skips nothing (and the run takes
/// minutes instead of under a second). Every step is one 16 KiB chunk a
/// hop: 8190 steps of 480 ticks.
#[test]
fn the_4096_sip_ring_all_reduce_skips_its_steady_phase() {
    let sys = kernbench::bench::ring_system(4096).unwrap();
    let ccl = kernbench::ccl::CclConfig::embedded_default();
    let config = ccl.entry("ring").expect("the embedded config has ring");
    let (mut m, c) = common::communicator(&sys, config, DataMode::TimingOnly).unwrap();
    let job = Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems: 32 << 20,
    };
    let ticks = c.run(&mut m, job).unwrap().ticks;
    assert_eq!(ticks, 8190 * 480);
    let steady = m.engine.world.resource::<Steady>();
    assert_eq!(
        (steady.skipped_periods, steady.skipped_ticks),
        (2043, 3_922_496)
    );
}
