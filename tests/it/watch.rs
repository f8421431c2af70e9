//! A watch on the engine sees a long run while it goes and changes nothing
//! in it.

use crate::common;
use common::sweep_base;
use kernbench::ccl::{Collective, Job, ReduceOp};
use kernbench::spec::SipTopology;
use kernbench::topology::address::Space;
use kernbench_systems::Clock;
use kernbench_systems::memory::DataMode;
use kernbench_systems::network::NetCounters;
use kernbench_systems::watch::Watch;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What each report saw: the tick and the messages delivered.
type Seen = Arc<Mutex<Vec<(u64, u64)>>>;

#[test]
fn a_watch_sees_the_run_go_on_and_changes_no_tick() {
    let sys = sweep_base(8, SipTopology::Ring1d, 0, (1, 1));
    let config = common::algo_config("tree", Space::Tcm, 64);
    let job = Job {
        collective: Collective::AllReduce,
        op: ReduceOp::Sum,
        elems: 1 << 20,
    };
    let run = |watched: Option<Seen>| {
        let (mut m, c) = common::communicator(&sys, &config, DataMode::TimingOnly).unwrap();
        if let Some(seen) = watched {
            m.engine
                .set_watch(Some(Watch::new(Duration::ZERO, move |w| {
                    let state = (
                        w.resource::<Clock>().now,
                        w.resource::<NetCounters>().delivered,
                    );
                    seen.lock().unwrap().push(state);
                })));
        }
        let ticks = c.run(&mut m, job).unwrap().ticks;
        (ticks, m.engine.world.resource::<NetCounters>().delivered)
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let watched = run(Some(seen.clone()));
    assert_eq!(watched, run(None));
    let seen = seen.lock().unwrap();
    // Called again and again while the run goes on, never past its end.
    assert!(seen.len() >= 10, "{} reports", seen.len());
    assert!(
        seen.windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1)
    );
    let (last_tick, last_delivered) = *seen.last().unwrap();
    assert!(last_tick <= watched.0 && last_delivered < watched.1);
}
