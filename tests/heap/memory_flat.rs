//! Memory stays flat when one machine runs many launches: launch payloads,
//! programs and in-flight load/store records are freed once delivered or
//! replaced, so nothing grows with the number of runs.

use crate::{HEAP, common};
use kernbench::ccl::{CclConfig, Collective, Job, ReduceOp};
use kernbench::spec::System;
use kernbench_systems::memory::DataMode;

#[test]
fn twenty_runs_of_one_collective_leave_the_heap_where_the_first_left_it() {
    let _alone = crate::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let sys = System::embedded_default();
    let ccl = CclConfig::embedded_default();
    for algorithm in ["ring", "hier_lanes"] {
        let config = ccl.entry(algorithm).expect("a shipped entry");
        let (mut m, comm) = common::communicator(&sys, config, DataMode::TimingOnly).unwrap();
        let job = Job {
            collective: Collective::AllReduce,
            op: ReduceOp::Sum,
            elems: 128 << 10,
        };
        let first = comm.run(&mut m, job).unwrap();
        let mut after = vec![HEAP.current_usage()];
        for _ in 1..20 {
            // Same answer every time, on a clock that keeps going.
            assert_eq!(comm.run(&mut m, job).unwrap().ticks, first.ticks);
            after.push(HEAP.current_usage());
        }
        // The engine's event pools reach their working size over the first
        // ten runs (at most 20% above the first: hier_lanes' all-reduce holds
        // little besides them, about 1.9 MB), then nothing grows.
        let (first, tenth, twentieth) = (after[0], after[9], after[19]);
        assert!(
            twentieth as f64 <= first as f64 * 1.2 && twentieth as f64 <= tenth as f64 * 1.005,
            "{algorithm}: {first} B after the first run, {tenth} B after ten, {twentieth} B after twenty"
        );
    }
    // The same through the process group: 80 collectives in one spawn,
    // each rank waiting only until its collective ends (no run to idle).
    let mut pg =
        kernbench::dist::init_process_group(&sys, &ccl, "ring", DataMode::TimingOnly).unwrap();
    let cubes = sys.cubes_per_sip();
    let heap = std::sync::Mutex::new(Vec::new());
    pg.spawn(pg.world_size, |ctx| {
        let t = ctx.empty(
            (cubes as usize, 128 << 10),
            kernbench::dist::DPPolicy::cube_replicas(cubes),
        )?;
        for _ in 0..80 {
            ctx.all_reduce(&t, ReduceOp::Sum)?;
            if ctx.rank() == 0 {
                heap.lock().unwrap().push(HEAP.current_usage());
            }
        }
        Ok(())
    })
    .unwrap();
    let after = heap.into_inner().unwrap();
    // Collectives overlap the previous one's trailing credits, so the event
    // pools take about ten collectives to reach their working size; then
    // nothing grows.
    let (first, twentieth, last) = (after[0], after[19], after[79]);
    assert!(
        twentieth as f64 <= first as f64 * 1.08 && last as f64 <= twentieth as f64 * 1.005,
        "process group: {first} B after the first collective, {twentieth} B after twenty, {last} B after eighty"
    );
}
