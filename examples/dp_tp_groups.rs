//! 8 SIPs as 2 data-parallel x 4 tensor-parallel groups: each rank
//! all-reduces an activation in its TP group [0..4) or [4..8), then a
//! gradient in its DP pair {r, r + 4}, on one machine and one clock; each
//! group has its own queues, so the two kinds of traffic never mix. Each
//! all-reduce runs the autotuner's pick for its size and group (`auto`).
//!
//! cargo run --release --example dp_tp_groups

use kernbench::autotune::init_process_group;
use kernbench::ccl::{CclConfig, Collective, ReduceOp};
use kernbench::dist::{DPPolicy, DistError};
use kernbench::spec::{SipTopology, System};
use kernbench_systems::memory::DataMode;
use std::sync::Mutex;

fn main() -> anyhow::Result<()> {
    let mut spec = System::embedded_default().spec;
    spec.system.sips.count = 8;
    spec.system.sips.topology = SipTopology::Ring1d;
    (spec.system.sips.w, spec.system.sips.h) = (None, None);
    let sys = System::from_spec(spec, "default system, 8 SIPs on a ring")?;
    let mut pg = init_process_group(
        &sys,
        &CclConfig::embedded_default(),
        "auto",
        DataMode::Functional,
    )?;
    let tp = [pg.new_group(&[0, 1, 2, 3])?, pg.new_group(&[4, 5, 6, 7])?];
    let dp: Vec<_> = (0..4)
        .map(|r| pg.new_group(&[r, r + 4]))
        .collect::<Result<_, _>>()?;
    let cubes = sys.cubes_per_sip();
    let elems = 16 << 10;
    println!("# 8 ranks = 2 DP x 4 TP, {cubes} cubes per SIP, {elems} f16 per cube leader");
    let lines = Mutex::new(Vec::new());
    pg.spawn(8, |ctx| {
        let r = ctx.rank();
        let act = ctx.empty((cubes as usize, elems), DPPolicy::cube_replicas(cubes))?;
        let grad = ctx.empty((cubes as usize, elems), DPPolicy::cube_replicas(cubes))?;
        ctx.write(&act, &vec![r as f32; cubes as usize * elems])?;
        ctx.write(&grad, &vec![1.0; cubes as usize * elems])?;
        let t = ctx.collective(tp[(r / 4) as usize], Collective::AllReduce, &act, ReduceOp::Sum)?;
        let d = ctx.collective(dp[(r % 4) as usize], Collective::AllReduce, &grad, ReduceOp::Sum)?;
        let block = (r / 4) * 4;
        let tp_want = (block..block + 4).sum::<u32>() as f32 * cubes as f32;
        let dp_want = 2.0 * cubes as f32;
        if ctx.read(&act)?.iter().any(|&v| v != tp_want) || ctx.read(&grad)?.iter().any(|&v| v != dp_want) {
            return Err(DistError::Run(format!("rank {r}: wrong result")));
        }
        lines.lock().unwrap().push(format!(
            "rank {r}: TP all-reduce {:.3} us ({:.1} GB/s busbw, {}), DP all-reduce {:.3} us ({:.1} GB/s busbw, {}), done at tick {}",
            t.time_ns / 1000.0,
            t.busbw_gbps,
            t.algorithm,
            d.time_ns / 1000.0,
            d.busbw_gbps,
            d.algorithm,
            ctx.now()
        ));
        Ok(())
    })?;
    let mut lines = lines.into_inner().unwrap();
    lines.sort();
    for l in lines {
        println!("{l}");
    }
    Ok(())
}
